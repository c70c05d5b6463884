//! Scenario `restart-scale` (issue 41, item 5): herd's own part of a restart by node count.
//! A `command` job on N nodes of one sshd (BENCH_RESTART_SCALE, 16,64,252): in attempt 0,
//! node 3 prints a communication error and exits 1; every other node sleeps. From the moment
//! herd sees the failure (its `teardown_started`) to the last `node_started` of attempt 1
//! (every node's job running again), minus the backoff it drew; torch is not in it. Split:
//! the teardown (to `attempt_failed`), herd's start of the next attempt (to
//! `attempt_started`, less the backoff: the sweep, the checks, the port, the env), and the
//! nodes' start (to the last `node_started`). Goals: at most 1 s at 16 nodes, 3 s at 254.

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use super::herd_support::HERD;
use super::job::{backoff_drawn, clear_logs, event_time, hosts, run_events, since, write_config};
use super::measure::{env_sizes, fmt_stat, poll_until, runs, table};
use super::testbed::Testbed;

/// Node 3 fails once, as a rank that lost its peer would; the others wait to be stopped.
const JOB: &str = "launcher = \"command\"\nscript = \"sh\"\nargs = [\"-c\", \"if [ $HERD_ATTEMPT = 0 ] && [ $NODE_RANK = 3 ]; then sleep 2; echo 'RuntimeError: Connection closed by peer' >&2; exit 1; fi; exec sleep 600\"]";

/// One restart, herd's defaults but for it.
const RESTART: &str = "[restart]\nmax_restarts = 1\n";

pub fn run() {
    let reps = runs(3);
    let sizes = env_sizes("BENCH_RESTART_SCALE", "16,64,252");
    let most = *sizes.iter().max().expect("a size");
    let tb = Testbed::many(most);
    let dir = tempfile::tempdir().unwrap();
    println!("\n### A restart's own cost by node count: a `command` job, node 3 fails, to every node running again, minus the backoff ({reps} runs each)\n");
    println!("Rerun: `BENCH_RUNS={reps} BENCH_RESTART_SCALE=16,64,252 cargo bench --bench herd_bench -- restart-scale`\n");
    table("| nodes | failure seen to all running, s | spread | teardown | herd's start | nodes' start | backoff drawn |");
    for &n in &sizes {
        let config = write_config(&tb, dir.path(), &hosts(&tb, n), JOB, RESTART);
        let mut got: Vec<[f64; 5]> = Vec::new();
        for rep in 0..reps {
            clear_logs(dir.path());
            match restart(&config, dir.path(), n) {
                Some(row) => got.push(row),
                None => {
                    // The tempdir goes with the bench: herd's stderr is kept apart.
                    let kept = std::env::temp_dir().join(format!("herd-restart-scale-{n}-{rep}.stderr"));
                    let _ = std::fs::copy(dir.path().join("herd.stderr"), &kept);
                    println!(
                        "| {n} | run {rep}: attempt 1 did not come up on every node; herd's stderr: {} | | | | | |",
                        kept.display()
                    )
                }
            }
        }
        if got.is_empty() {
            continue;
        }
        let col = |i: usize| got.iter().map(|r| r[i]).collect::<Vec<f64>>();
        let (m, spread, _) = fmt_stat(&col(0), 2);
        let med = |i: usize| fmt_stat(&col(i), 2).0;
        println!("| {n} | {m} | {spread} | {} | {} | {} | {} |", med(1), med(2), med(3), med(4));
    }
}

/// One run: herd started, attempt 1 running on every node, then Ctrl-C. The row: the whole
/// (less the backoff), the teardown, herd's start, the nodes' start, the backoff.
fn restart(config: &std::path::Path, dir: &std::path::Path, n: usize) -> Option<[f64; 5]> {
    let mut herd = Command::new("prlimit")
        .args(["--nofile=1024:", "--", HERD, "run", "-c"])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("herd.stderr")).expect("herd.stderr"))
        .spawn()
        .expect("spawn herd");
    let logs = dir.join("logs");
    let running = |ev: &[serde_json::Value]| {
        ev.iter().filter(|e| e["event"] == "node_started" && e["attempt"] == 1).count() >= n
    };
    let mut gone = false;
    let up = poll_until(Duration::from_secs(300), Duration::from_millis(200), || {
        gone = matches!(herd.try_wait(), Ok(Some(_)));
        gone || running(&run_events(&logs))
    })
    .filter(|_| !gone);
    let _ = Command::new("kill").args(["-INT", &herd.id().to_string()]).status();
    let _ = herd.wait();
    up?;
    let ev = run_events(&logs);
    let seen = event_time(&ev, "teardown_started", 0)?;
    let failed = event_time(&ev, "attempt_failed", 0)?;
    let started = event_time(&ev, "attempt_started", 1)?;
    let last: SystemTime = ev
        .iter()
        .filter(|e| e["event"] == "node_started" && e["attempt"] == 1)
        .filter_map(|e| humantime::parse_rfc3339(e["ts"].as_str()?).ok())
        .max()?;
    let backoff = backoff_drawn(&ev);
    Some([
        since(last, seen) - backoff,
        since(failed, seen),
        since(started, failed) - backoff,
        since(last, started),
        backoff,
    ])
}
