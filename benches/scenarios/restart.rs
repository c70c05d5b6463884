//! Scenario 5: a worker SIGKILLed during training, max_restarts = 1, backoff 1 s; from the
//! kill to all six workers of attempt 1 existing, minus the backoff herd drew.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use super::herd_support::{self, HERD};
use super::job::{
    backoff_drawn, event_time, kill_marked, kill_rank_3, print_timeline, run_events, since, timeline_rows,
    torch_config, train_then_retry, training, ONE_RESTART,
};
use super::measure::{baseline_herd, column, fmt_stat, rounds, runs, table, Tracked};
use super::testbed::Testbed;

/// The rows of the table, a run's numbers in this order.
const ROWS: [&str; 5] = [
    "to attempt 1's workers all running",
    "backoff drawn",
    "to workers running, minus the backoff",
    "to attempt 0 declared failed",
    "attempt 1 started to its workers running (torchrun start-up)",
];

pub fn run() {
    let reps = runs(5);
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(3);
    let dir = tempfile::tempdir().unwrap();
    let mut binaries: Vec<(&str, String)> = vec![("herd", HERD.to_string())];
    binaries.extend(baseline_herd().map(|b| ("baseline herd", b)));
    let mut rows: Vec<Vec<[f64; 5]>> = vec![Vec::new(); binaries.len()];
    let mut timeline = Vec::new();
    // The baseline binary, when given, alternates with this one, first on odd runs.
    for (rep, b) in rounds(reps, binaries.len()) {
        let (name, binary) = (&binaries[b].0, binaries[b].1.as_str());
        let mark = format!("BENCH_MARK=restart-{b}-{rep}-{}", std::process::id());
        let config = torch_config(&tb, dir.path(), &venv, &train_then_retry(), &mark, ONE_RESTART);
        match restart(binary, &config, dir.path(), &mark) {
            Ok((row, ev)) => {
                rows[b].push(row);
                if rep + 1 == reps && b == 0 {
                    timeline = ev;
                    timeline.push(format!("| +{:.2} s | attempt 1's six workers exist |", row[0]));
                }
            }
            Err(ok) => println!("run {rep}, {name}: attempt 1 did not come up (herd ok: {ok})"),
        }
    }
    println!("\n### Restart latency: torchrun 3 nodes x 2, rank 3 SIGKILLed, backoff 1 s (+-20 %), to attempt 1's six workers running ({} runs)\n", rows[0].len());
    println!("Rerun: `BENCH_RUNS={reps} cargo bench --bench herd_bench -- restart`\n");
    let names: Vec<String> = binaries.iter().map(|b| format!("{}: median s | spread s", b.0)).collect();
    table(&format!("| from the kill | {} |", names.join(" | ")));
    for (i, what) in ROWS.iter().enumerate() {
        let cells: Vec<String> = rows
            .iter()
            .map(|rs| {
                let (m, s, _) = fmt_stat(&column(rs, i), 2);
                format!("{m} | {s}")
            })
            .collect();
        println!("| {what} | {} |", cells.join(" | "));
    }
    print_timeline("The last run's events, from the kill", &timeline);
}

/// One run of `binary`: its row of `ROWS` and its events from the kill, or whether herd
/// succeeded when attempt 1 did not come up.
fn restart(binary: &str, config: &Path, dir: &Path, mark: &str) -> Result<([f64; 5], Vec<String>), bool> {
    let config = config.display().to_string();
    let herd = Tracked::spawn(binary, &["run", "--no-preflight", "-c", &config], Stdio::null());
    training(mark, Some("HERD_ATTEMPT=0")).expect("training did not start");
    std::thread::sleep(Duration::from_secs(2));
    let r = kill_rank_3(mark);
    let m = herd.finish();
    kill_marked(mark);
    let ev = run_events(&dir.join("logs"));
    let (Some(up), Some(started)) = (r.up, event_time(&ev, "attempt_started", 1)) else {
        return Err(m.success);
    };
    let delay = backoff_drawn(&ev);
    let total = (up - r.killed).as_secs_f64();
    let teardown = event_time(&ev, "attempt_failed", 0).map_or(f64::NAN, |t| since(t, r.killed_wall));
    let to_start = since(started, r.killed_wall);
    Ok(([total, delay, total - delay, teardown, total - to_start], timeline_rows(&ev, r.killed_wall)))
}
