//! Scenario 9: a node's link cut for good during training, torchrun 3 nodes x 2 plus one
//! spare (`nnodes = 3`), heartbeat_timeout 6 s, backoff 1 s, with the preflight (which checks
//! the spare). From the cut to the first and to all six workers of attempt 1 running, the
//! spare's among them; side by side, what happens without a spare (the same three nodes,
//! `--exclude` the spare): herd waits `restart.node_wait` (here 30 s) and gives up.

use std::process::Stdio;
use std::time::{Duration, Instant};

use super::herd_support::{self, HERD};
use super::job::{
    backoff_drawn, event_time, kill_marked, run_events, since, timeline_rows, torch_config, workers, TRAIN_ON,
};
use super::measure::{fmt_stat, poll_until, runs, Tracked};
use super::testbed::Testbed;

pub fn run() {
    let reps = runs(3);
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(4);
    let dir = tempfile::tempdir().unwrap();
    let spare_host = tb.nodes()[3].addr.clone();
    // One restart: the one measured. Stopping the job afterwards ends the run.
    let restart =
        "[restart]\nmax_restarts = 1\nbackoff = \"1s\"\nbackoff_max = \"2s\"\ngrace_period = \"3s\"\n\
                   heartbeat_timeout = \"6s\"\nnode_wait = \"30s\"\n";
    // herd started, and training under way; `None` (herd stopped) when it did not start.
    let train = |args: &[&str], mark: &str| {
        let mut herd = Tracked::spawn(HERD, args, Stdio::null());
        let up = poll_until(Duration::from_secs(120), Duration::from_millis(100), || {
            workers(mark, None).len() >= 6
        });
        std::thread::sleep(Duration::from_secs(2));
        if up.is_none() {
            herd.kill();
            herd.finish();
            kill_marked(mark);
            return None;
        }
        Some(herd)
    };
    // A link brought back up: wait until the node answers again before the next run.
    let heal = || {
        tb.link_up(2);
        poll_until(Duration::from_secs(60), Duration::from_millis(200), || {
            tb.ssh(2, "true").status.success()
        });
    };
    // [to first worker, to all six, backoff, attempt_started -> six workers, cut -> failed]
    let mut with_spare: Vec<[f64; 5]> = Vec::new();
    let mut without: Vec<f64> = Vec::new();
    let mut timeline = Vec::new();
    for rep in 0..reps {
        let mark = format!("BENCH_MARK=spare-{rep}-{}", std::process::id());
        let config = torch_config(&tb, dir.path(), &venv, TRAIN_ON, &mark, restart);
        let text = std::fs::read_to_string(&config)
            .unwrap()
            .replace("nproc_per_node = 2", "nproc_per_node = 2\nnnodes = 3");
        std::fs::write(&config, text).unwrap();
        let config = config.display().to_string();
        let Some(herd) = train(&["run", "-c", &config], &mark) else {
            println!("run {rep}: training did not start");
            continue;
        };
        let cut_wall = std::time::SystemTime::now();
        let cut = Instant::now();
        tb.link_down(2);
        let first = poll_until(Duration::from_secs(120), Duration::from_millis(10), || {
            !workers(&mark, Some("HERD_ATTEMPT=1")).is_empty()
        });
        let all = poll_until(Duration::from_secs(120), Duration::from_millis(10), || {
            workers(&mark, Some("HERD_ATTEMPT=1")).len() >= 6
        });
        kill_marked(&mark);
        let m = herd.finish();
        heal();
        let ev = run_events(&dir.path().join("logs"));
        let promoted = ev.iter().any(|e| e["event"] == "spare_promoted" && e["host"] == spare_host.as_str());
        let (Some(first), Some(all), Some(started), true) =
            (first, all, event_time(&ev, "attempt_started", 1), promoted)
        else {
            println!("run {rep}: attempt 1 did not come up on the spare (herd ok: {})", m.success);
            continue;
        };
        let delay = backoff_drawn(&ev);
        let all_s = (all - cut).as_secs_f64();
        let failed = event_time(&ev, "attempt_failed", 0).map_or(f64::NAN, |t| since(t, cut_wall));
        with_spare.push([
            (first - cut).as_secs_f64(),
            all_s,
            delay,
            all_s - since(started, cut_wall),
            failed,
        ]);
        println!("run {rep}: cut to all six on the spare {all_s:.2} s");
        if rep + 1 == reps {
            timeline = timeline_rows(&ev, cut_wall);
            timeline.push(format!("| +{all_s:.2} s | attempt 1's six workers exist |"));
        }

        let mark = format!("BENCH_MARK=nospare-{rep}-{}", std::process::id());
        let config = torch_config(&tb, dir.path(), &venv, TRAIN_ON, &mark, restart).display().to_string();
        let Some(mut herd) = train(&["run", "-c", &config, "--exclude", &spare_host], &mark) else {
            println!("run {rep}, without a spare: training did not start");
            continue;
        };
        let cut = Instant::now();
        tb.link_down(2);
        let ended = poll_until(Duration::from_secs(180), Duration::from_millis(50), || herd.try_done());
        herd.finish();
        heal();
        kill_marked(&mark);
        if let Some(t) = ended {
            without.push((t - cut).as_secs_f64());
        }
    }
    println!("\n### A node lost for good: torchrun 3 nodes x 2, heartbeat_timeout 6 s, backoff 1 s (+-20 %), with the preflight ({} runs)\n", with_spare.len());
    println!("Rerun: `BENCH_RUNS={reps} cargo bench --bench herd_bench -- spare`\n");
    println!("| from the cut | median s | spread s |");
    println!("|---|---|---|");
    for (i, what) in [
        "with a spare: to attempt 1's first worker running",
        "with a spare: to all six workers running, on the spare and the two others",
        "with a spare: backoff drawn",
        "with a spare: attempt 1 started to its six workers (torchrun start-up)",
        "with a spare: to attempt 0 declared failed",
    ]
    .iter()
    .enumerate()
    {
        let (m, s, _) = fmt_stat(&with_spare.iter().map(|r| r[i]).collect::<Vec<_>>(), 2);
        println!("| {what} | {m} | {s} |");
    }
    let (m, s, _) = fmt_stat(&without, 2);
    println!("| without a spare (today): to herd giving up, restart.node_wait = 30 s | {m} | {s} |");
    let goal: Vec<f64> = with_spare.iter().map(|r| (6.0 + r[2] + 3.0 + r[3]) - r[1]).collect();
    let (m, s, _) = fmt_stat(&goal, 2);
    println!("| goal margin: heartbeat 6 s + backoff + 3 s + torchrun start-up, minus the time to all six (> 0 meets it) | {m} | {s} |");
    println!(
        "\nThe last run with a spare, from the cut:\n\n| time | event |\n|---|---|\n{}",
        timeline.join("\n")
    );
}
