//! Scenario 5: a worker SIGKILLed during training, max_restarts = 1, backoff 1 s; from the
//! kill to all six workers of attempt 1 existing, minus the backoff herd drew.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::herd_support::{self, HERD};
use super::job::{
    backoff_drawn, environ_has, event_time, kill_marked, run_events, since, timeline_rows, torch_config,
    workers, TRAIN_ON,
};
use super::measure::{fmt_stat, poll_until, runs, Tracked};
use super::testbed::Testbed;

pub fn run() {
    let reps = runs(5);
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(3);
    let dir = tempfile::tempdir().unwrap();
    let baseline = std::env::var("BENCH_BASELINE_HERD").ok();
    let mut binaries: Vec<(&str, String)> = vec![("herd", HERD.to_string())];
    binaries.extend(baseline.map(|b| ("baseline herd", b)));
    let mut rows: Vec<Vec<[f64; 5]>> = vec![Vec::new(); binaries.len()];
    let mut timeline = Vec::new();
    // The baseline binary, when given, alternates with this one, first on odd runs.
    let order = |rep: usize| -> Vec<usize> {
        let mut v: Vec<usize> = (0..binaries.len()).collect();
        if rep % 2 == 1 {
            v.reverse();
        }
        v
    };
    for (rep, b) in (0..reps).flat_map(|rep| order(rep).into_iter().map(move |b| (rep, b))) {
        let (name, binary) = (&binaries[b].0, binaries[b].1.as_str());
        let mark = format!("BENCH_MARK=restart-{b}-{rep}-{}", std::process::id());
        let config = torch_config(
            &tb,
            dir.path(),
            &venv,
            &format!("{TRAIN_ON}, \"--retry-steps\", \"3\""),
            &mark,
            "[restart]\nmax_restarts = 1\nbackoff = \"1s\"\nbackoff_max = \"2s\"\ngrace_period = \"3s\"\n",
        );
        let config = config.display().to_string();
        let herd = Tracked::spawn(binary, &["run", "--no-preflight", "-c", &config], Stdio::null());
        poll_until(Duration::from_secs(120), Duration::from_millis(100), || {
            workers(&mark, Some("HERD_ATTEMPT=0")).len() >= 6
        })
        .expect("training did not start");
        std::thread::sleep(Duration::from_secs(2));
        let victim =
            workers(&mark, Some("RANK=3")).into_iter().find(|p| environ_has(*p, "LOCAL_RANK=1")).unwrap();
        let killed_wall = std::time::SystemTime::now();
        let killed = Instant::now();
        let _ = Command::new("kill").args(["-9", &victim.to_string()]).status();
        let up = poll_until(Duration::from_secs(120), Duration::from_millis(10), || {
            workers(&mark, Some("HERD_ATTEMPT=1")).len() >= 6
        });
        let m = herd.finish();
        kill_marked(&mark);
        let ev = run_events(&dir.path().join("logs"));
        let (Some(up), Some(started)) = (up, event_time(&ev, "attempt_started", 1)) else {
            println!("run {rep}, {name}: attempt 1 did not come up (herd ok: {})", m.success);
            continue;
        };
        let delay = backoff_drawn(&ev);
        let total = (up - killed).as_secs_f64();
        let teardown = event_time(&ev, "attempt_failed", 0).map_or(f64::NAN, |t| since(t, killed_wall));
        let to_start = since(started, killed_wall);
        rows[b].push([total, delay, total - delay, teardown, total - to_start]);
        if rep + 1 == reps && b == 0 {
            timeline = timeline_rows(&ev, killed_wall);
            timeline.push(format!("| +{total:.2} s | attempt 1's six workers exist |"));
        }
    }
    println!("\n### Restart latency: torchrun 3 nodes x 2, rank 3 SIGKILLed, backoff 1 s (+-20 %), to attempt 1's six workers running ({} runs)\n", rows[0].len());
    println!("Rerun: `BENCH_RUNS={reps} cargo bench --bench herd_bench -- restart`\n");
    let names: Vec<&str> = binaries.iter().map(|b| b.0).collect();
    println!(
        "| from the kill | {} |",
        names.iter().map(|n| format!("{n}: median s | spread s")).collect::<Vec<_>>().join(" | ")
    );
    println!("|---|{}", "---|---|".repeat(names.len()));
    for (i, what) in [
        "to attempt 1's workers all running",
        "backoff drawn",
        "to workers running, minus the backoff",
        "to attempt 0 declared failed",
        "attempt 1 started to its workers running (torchrun start-up)",
    ]
    .iter()
    .enumerate()
    {
        let cells: Vec<String> = rows
            .iter()
            .map(|rs| {
                let (m, s, _) = fmt_stat(&rs.iter().map(|r| r[i]).collect::<Vec<_>>(), 2);
                format!("{m} | {s}")
            })
            .collect();
        println!("| {what} | {} |", cells.join(" | "));
    }
    println!(
        "\nThe last run's events, from the kill:\n\n| time | event |\n|---|---|\n{}",
        timeline.join("\n")
    );
}
