//! Scenario `restart-scale` (issue 41, item 5): herd's own part of a restart by node count.
//! A `command` job on N nodes of one sshd (BENCH_RESTART_SCALE, 16,64,252): in attempt 0,
//! node 3 prints a communication error and exits 1; every other node sleeps. From the moment
//! herd sees the failure (node 3's `node_exited`) to the last `node_started` of attempt 1
//! (every node's job running again), minus the backoff it drew; torch is not in it. Split:
//! the others' stacks (to `teardown_started`: herd asks every node still running where its
//! job is, and waits for the answers, `PROBE_WAIT` at most), the teardown (to
//! `attempt_failed`), herd's start of the next attempt (to `attempt_started`, less the
//! backoff: the sweep, the checks, the port, the env), and the nodes' start (to the last
//! `node_started`). Goals: at most 1 s at 16 nodes, 3 s at 254. Node 3 fails before
//! training, so that a backoff follows; with BENCH_RESTART_TRAINED=1, after training, so
//! that the restart starts at once (the next attempt's logins then have no backoff to
//! overlap).
//! The nodes of `Testbed::many` share this machine's two cores, where a cluster's nodes each
//! have their own: the CPU time herd itself spent from the failure seen to the attempt failed
//! and over the start (the backoff between them left out, and with it herd's look at its
//! connections after it), and the machine's less herd's and this bench's, over the nodes (a
//! node's own share), are measured beside the wall times (sampled as the run is polled, every
//! 50 ms). With BENCH_BASELINE_HERD=PATH, that herd binary runs each repetition too, in turn
//! with this one, on the same testbed: a row for each.

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use super::herd_support::{self, HERD};
use super::job::{backoff_drawn, clear_logs, event_time, hosts, run_events, since, write_config};
use super::measure::{self, env_sizes, fmt_stat, poll_until, runs, table};
use super::testbed::Testbed;

/// Node 3 fails once, as a rank that lost its peer would; the others wait to be stopped.
/// Before training, 2 s in: its attempt is a failure at the start, followed by the backoff.
/// After training (`trained`, BENCH_RESTART_TRAINED=1): every node prints a line (progress)
/// and node 3 fails 11 s later, past the default `restart.backoff` (10 s); the restart then
/// starts at once, after a jitter under a second, as after a fault in a long run.
fn job(trained: bool) -> String {
    let (progress, fails_after) = if trained { ("echo step 1; ", 11) } else { ("", 2) };
    format!(
        "launcher = \"command\"\nscript = \"sh\"\nargs = [\"-c\", \"{progress}if [ $HERD_ATTEMPT = 0 ] && [ $NODE_RANK = 3 ]; then sleep {fails_after}; echo 'RuntimeError: Connection closed by peer' >&2; exit 1; fi; exec sleep 600\"]"
    )
}

/// One restart, herd's defaults but for it.
const RESTART: &str = "[restart]\nmax_restarts = 1\n";

pub fn run() {
    let reps = runs(3);
    let trained = std::env::var("BENCH_RESTART_TRAINED").is_ok_and(|v| v == "1");
    let sizes = env_sizes("BENCH_RESTART_SCALE", "16,64,252");
    let most = *sizes.iter().max().expect("a size");
    let tb = Testbed::many(most);
    let dir = tempfile::tempdir().unwrap();
    let when =
        if trained { "after training (the restart at once)" } else { "before training (then the backoff)" };
    println!("\n### A restart's own cost by node count: a `command` job, node 3 fails {when}, to every node running again, minus the backoff ({reps} runs each)\n");
    let env = if trained { "BENCH_RESTART_TRAINED=1 " } else { "" };
    println!("Rerun: `{env}BENCH_RUNS={reps} BENCH_RESTART_SCALE=16,64,252 cargo bench --bench herd_bench -- restart-scale`\n");
    let mut herds = vec![("this", HERD.to_string())];
    herds.extend(measure::baseline_herd().map(|path| ("baseline", path)));
    table("| nodes | herd | failure seen to all running, s | spread | the others' stacks | teardown | herd's start | nodes' start | backoff drawn | herd's CPU, s | a node's CPU, ms |");
    for &n in &sizes {
        let config = write_config(&tb, dir.path(), &hosts(&tb, n), &job(trained), RESTART);
        let mut got: Vec<Vec<[f64; 8]>> = vec![Vec::new(); herds.len()];
        for rep in 0..reps {
            for ((which, bin), got) in herds.iter().zip(&mut got) {
                clear_logs(dir.path());
                match restart(bin, &config, dir.path(), n) {
                    Some(row) => got.push(row),
                    None => {
                        // The tempdir goes with the bench: herd's stderr is kept apart.
                        let kept =
                            std::env::temp_dir().join(format!("herd-restart-scale-{n}-{which}-{rep}.stderr"));
                        let _ = std::fs::copy(dir.path().join("herd.stderr"), &kept);
                        println!(
                            "| {n} | {which} | run {rep}: another node than 3 ended first, or attempt 1 did not come up on every node; herd's stderr: {} | | | | | | | | |",
                            kept.display()
                        )
                    }
                }
            }
        }
        for ((which, _), got) in herds.iter().zip(&got) {
            if got.is_empty() {
                continue;
            }
            let col = |i: usize| got.iter().map(|r| r[i]).collect::<Vec<f64>>();
            let (m, spread, _) = fmt_stat(&col(0), 2);
            let med = |i: usize| fmt_stat(&col(i), 2).0;
            let (herd_cpu, node_cpu) = (med(6), fmt_stat(&col(7), 1).0);
            println!(
                "| {n} | {which} | {m} | {spread} | {} | {} | {} | {} | {} | {herd_cpu} | {node_cpu} |",
                med(1),
                med(2),
                med(3),
                med(4),
                med(5)
            );
        }
    }
}

/// CPU time so far, in seconds, as `[herd, machine, bench]`: herd's on the launch host (its
/// threads, its children reaped, and its ssh masters, which `ssh -M -f` detaches from it but
/// which carry every session), every CPU's busy time (/proc/stat: user, nice, system, irq,
/// softirq, steal; guest time is within user and nice), and this bench's own (its polling).
fn cpu(herd: u32) -> [f64; 3] {
    let tick = 100.0; // USER_HZ, as Linux gives it to /proc on every architecture
    let secs = |pid: &str, with_children: bool| {
        measure::cpu_ticks(pid)
            .map_or(0.0, |t| t[..if with_children { 4 } else { 2 }].iter().sum::<u64>() as f64 / tick)
    };
    let masters: f64 = herd_support::ssh_master_pids().iter().map(|pid| secs(&pid.to_string(), false)).sum();
    let machine = std::fs::read_to_string("/proc/stat").ok().map_or(0.0, |s| {
        let t: Vec<f64> = s
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .map(|w| w.parse().unwrap_or(0.0))
            .collect();
        [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| t.get(i)).sum::<f64>() / tick
    });
    [secs(&herd.to_string(), true) + masters, machine, secs("self", false)]
}

/// One run: herd (`bin`) started, attempt 1 running on every node, then Ctrl-C. The row: the whole
/// (less the backoff), the others' stacks, the teardown, herd's start, the nodes' start, the
/// backoff, herd's CPU and a node's (ms) over the same span, the backoff left out.
fn restart(bin: &str, config: &std::path::Path, dir: &std::path::Path, n: usize) -> Option<[f64; 8]> {
    let mut herd = Command::new("prlimit")
        .args(["--nofile=1024:", "--", bin, "run", "-c"])
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
    // CPU from the failure seen to the attempt failed, and over the start (attempt 1 starting
    // to every node running), each sampled at the first poll that finds its events: the
    // backoff between them, which the wall times leave out, is left out. The first
    // `node_exited` is node 3's: the others run until the teardown.
    const MARKS: [(&str, usize); 3] = [("node_exited", 0), ("attempt_failed", 0), ("attempt_starting", 1)];
    let mut marks: [Option<[f64; 3]>; 3] = [None; 3];
    let mut end_cpu = [0.0; 3];
    let mut gone = false;
    let up = poll_until(Duration::from_secs(300), Duration::from_millis(50), || {
        gone = matches!(herd.try_wait(), Ok(Some(_)));
        let now = cpu(herd.id());
        let ev = run_events(&logs);
        for (mark, (name, nth)) in marks.iter_mut().zip(MARKS) {
            if mark.is_none() && event_time(&ev, name, nth).is_some() {
                *mark = Some(now);
            }
        }
        end_cpu = now;
        gone || running(&ev)
    })
    .filter(|_| !gone);
    let _ = Command::new("kill").args(["-INT", &herd.id().to_string()]).status();
    let _ = herd.wait();
    up?;
    let ev = run_events(&logs);
    // The scenario's failure is node 3's, the run's first exit (its CPU mark above is that
    // exit): a run where another node ended first is not this scenario.
    let first_exit = ev.iter().find(|e| e["event"] == "node_exited")?;
    if first_exit["node_rank"] != 3 || first_exit["attempt"] != 0 {
        return None;
    }
    let seen = event_time(&ev, "node_exited", 0)?;
    let probed = event_time(&ev, "teardown_started", 0)?;
    let failed = event_time(&ev, "attempt_failed", 0)?;
    let started = event_time(&ev, "attempt_started", 1)?;
    let last: SystemTime = ev
        .iter()
        .filter(|e| e["event"] == "node_started" && e["attempt"] == 1)
        .filter_map(|e| humantime::parse_rfc3339(e["ts"].as_str()?).ok())
        .max()?;
    let backoff = backoff_drawn(&ev);
    let [Some(seen_cpu), Some(failed_cpu), Some(starting_cpu)] = marks else { return None };
    let spent = |i: usize| (failed_cpu[i] - seen_cpu[i]) + (end_cpu[i] - starting_cpu[i]);
    let herd_cpu = spent(0);
    let node_cpu = (spent(1) - herd_cpu - spent(2)).max(0.0) / n as f64 * 1000.0;
    Some([
        since(last, seen) - backoff,
        since(probed, seen),
        since(failed, probed),
        since(started, failed) - backoff,
        since(last, started),
        backoff,
        herd_cpu,
        node_cpu,
    ])
}
