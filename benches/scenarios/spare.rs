//! Scenario 9: a node's link cut for good during training, torchrun 3 nodes x 2 plus one
//! spare (`nnodes = 3`), heartbeat_timeout 6 s, backoff 1 s, with the preflight (which checks
//! the spare). From the cut to the first and to all six workers of attempt 1 running, the
//! spare's among them; side by side, what happens without a spare (the same three nodes,
//! `--exclude` the spare): herd waits `restart.node_wait` (here 30 s) and gives up.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use super::herd_support::{self, HERD};
use super::job::{
    add_job_line, backoff_drawn, event_time, kill_marked, print_timeline, run_events, since, timeline_rows,
    torch_config, training, workers, ONE_RESTART, TRAIN_ON,
};
use super::measure::{column, fmt_stat, poll_until, runs, table, Tracked};
use super::testbed::Testbed;

/// The rows with a spare, a run's numbers in this order.
const ROWS: [&str; 5] = [
    "with a spare: to attempt 1's first worker running",
    "with a spare: to all six workers running, on the spare and the two others",
    "with a spare: backoff drawn",
    "with a spare: attempt 1 started to its six workers (torchrun start-up)",
    "with a spare: to attempt 0 declared failed",
];

/// The testbed of 3 nodes and a spare, node 2 the one cut.
struct Bed<'a> {
    tb: &'a Testbed,
    dir: &'a Path,
    venv: &'a Path,
    spare_host: String,
    /// One restart: the one measured. Stopping the job afterwards ends the run.
    restart: String,
}

pub fn run() {
    let reps = runs(3);
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(4);
    let dir = tempfile::tempdir().unwrap();
    let restart = format!("{ONE_RESTART}heartbeat_timeout = \"6s\"\nnode_wait = \"30s\"\n");
    let bed = Bed { tb: &tb, dir: dir.path(), venv: &venv, spare_host: tb.nodes()[3].addr.clone(), restart };
    let mut with_spare: Vec<[f64; 5]> = Vec::new();
    let mut without: Vec<f64> = Vec::new();
    let mut timeline = Vec::new();
    for rep in 0..reps {
        let mark = format!("BENCH_MARK=spare-{rep}-{}", std::process::id());
        match bed.with_spare(&mark) {
            Ok((row, ev)) => {
                let all_s = row[1];
                with_spare.push(row);
                println!("run {rep}: cut to all six on the spare {all_s:.2} s");
                if rep + 1 == reps {
                    timeline = ev;
                    timeline.push(format!("| +{all_s:.2} s | attempt 1's six workers exist |"));
                }
            }
            Err(what) => {
                println!("run {rep}: {what}");
                continue;
            }
        }
        let mark = format!("BENCH_MARK=nospare-{rep}-{}", std::process::id());
        match bed.without_spare(&mark) {
            Some(ended) => without.extend(ended),
            None => println!("run {rep}, without a spare: training did not start"),
        }
    }
    print(reps, &with_spare, &without, &timeline);
}

/// herd started, and training under way; `None` (herd stopped) when it did not start.
fn train(args: &[&str], mark: &str) -> Option<Tracked> {
    let mut herd = Tracked::spawn(HERD, args, Stdio::null());
    let up = training(mark, None);
    std::thread::sleep(Duration::from_secs(2));
    if up.is_none() {
        herd.kill();
        herd.finish();
        kill_marked(mark);
        return None;
    }
    Some(herd)
}

impl Bed<'_> {
    /// The link brought back up: wait until the node answers again before the next run.
    fn heal(&self) {
        self.tb.link_up(2);
        poll_until(Duration::from_secs(60), Duration::from_millis(200), || {
            self.tb.ssh(2, "true").status.success()
        });
    }

    /// One run with the spare: its row of `ROWS` and its events from the cut, or what went wrong.
    fn with_spare(&self, mark: &str) -> Result<([f64; 5], Vec<String>), String> {
        let config = torch_config(self.tb, self.dir, self.venv, TRAIN_ON, mark, &self.restart);
        add_job_line(&config, "nnodes = 3");
        let config = config.display().to_string();
        let herd = train(&["run", "-c", &config], mark).ok_or("training did not start")?;
        let cut_wall = SystemTime::now();
        let cut = Instant::now();
        self.tb.link_down(2);
        let attempt_1 = |enough: usize| {
            poll_until(Duration::from_secs(120), Duration::from_millis(10), || {
                workers(mark, Some("HERD_ATTEMPT=1")).len() >= enough
            })
        };
        let (first, all) = (attempt_1(1), attempt_1(6));
        kill_marked(mark);
        let m = herd.finish();
        self.heal();
        let ev = run_events(&self.dir.join("logs"));
        let promoted =
            ev.iter().any(|e| e["event"] == "spare_promoted" && e["host"] == self.spare_host.as_str());
        let (Some(first), Some(all), Some(started), true) =
            (first, all, event_time(&ev, "attempt_started", 1), promoted)
        else {
            return Err(format!("attempt 1 did not come up on the spare (herd ok: {})", m.success));
        };
        let all_s = (all - cut).as_secs_f64();
        let failed = event_time(&ev, "attempt_failed", 0).map_or(f64::NAN, |t| since(t, cut_wall));
        let row = [
            (first - cut).as_secs_f64(),
            all_s,
            backoff_drawn(&ev),
            all_s - since(started, cut_wall),
            failed,
        ];
        Ok((row, timeline_rows(&ev, cut_wall)))
    }

    /// One run without the spare: from the cut to herd's exit, if within 180 s; None when
    /// training did not start.
    fn without_spare(&self, mark: &str) -> Option<Option<f64>> {
        let config = torch_config(self.tb, self.dir, self.venv, TRAIN_ON, mark, &self.restart);
        let config = config.display().to_string();
        let mut herd = train(&["run", "-c", &config, "--exclude", &self.spare_host], mark)?;
        let cut = Instant::now();
        self.tb.link_down(2);
        let ended = poll_until(Duration::from_secs(180), Duration::from_millis(50), || herd.try_done());
        herd.finish();
        self.heal();
        kill_marked(mark);
        Some(ended.map(|t| (t - cut).as_secs_f64()))
    }
}

fn print(reps: usize, with_spare: &[[f64; 5]], without: &[f64], timeline: &[String]) {
    println!("\n### A node lost for good: torchrun 3 nodes x 2, heartbeat_timeout 6 s, backoff 1 s (+-20 %), with the preflight ({} runs)\n", with_spare.len());
    println!("Rerun: `BENCH_RUNS={reps} cargo bench --bench herd_bench -- spare`\n");
    table("| from the cut | median s | spread s |");
    for (i, what) in ROWS.iter().enumerate() {
        let (m, s, _) = fmt_stat(&column(with_spare, i), 2);
        println!("| {what} | {m} | {s} |");
    }
    let (m, s, _) = fmt_stat(without, 2);
    println!("| without a spare (today): to herd giving up, restart.node_wait = 30 s | {m} | {s} |");
    let goal: Vec<f64> = with_spare.iter().map(|r| (6.0 + r[2] + 3.0 + r[3]) - r[1]).collect();
    let (m, s, _) = fmt_stat(&goal, 2);
    println!("| goal margin: heartbeat 6 s + backoff + 3 s + torchrun start-up, minus the time to all six (> 0 meets it) | {m} | {s} |");
    print_timeline("The last run with a spare, from the cut", timeline);
}
