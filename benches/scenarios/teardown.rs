//! Scenario 3: one worker SIGKILLed, to every job process on every node gone.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::herd_support::{self, HERD};
use super::job::{environ_has, ssh_args, torch_config, TRAIN_ON};
use super::measure::{row, stats};
use super::testbed::Testbed;

pub fn run() {
    const REPS: usize = 5;
    const CAP: Duration = Duration::from_secs(30);
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(3);
    let dir = tempfile::tempdir().unwrap();
    let hosts: Vec<String> = tb.nodes().iter().map(|h| h.addr.clone()).collect();
    let root = env!("CARGO_MANIFEST_DIR");
    let mut herd_t = Vec::new();
    let mut baseline_t = Vec::new();
    let baseline = std::env::var_os("BENCH_BASELINE_HERD").map(PathBuf::from);
    let mut shell_t = Vec::new();
    let mut shell_hung = 0;
    for rep in 0..REPS {
        // herd, max_restarts = 0, so the gang stays down. Its processes are found by a mark of
        // this bench's own, not by HERD_MARKER: other herd runs (tests) may share the machine.
        // The baseline binary, when given, runs first on odd runs and second on even ones.
        let mut binaries: Vec<(&Path, &mut Vec<Duration>, &str)> =
            vec![(Path::new(HERD), &mut herd_t, "herd")];
        if let Some(b) = &baseline {
            binaries.insert(rep % 2, (b.as_path(), &mut baseline_t, "base"));
        }
        for (binary, times, name) in binaries {
            let mark = format!("BENCH_MARK=teardown-{name}-{rep}-{}", std::process::id());
            let config =
                torch_config(&tb, dir.path(), &venv, TRAIN_ON, &mark, "[restart]\nmax_restarts = 0\n");
            let mut herd = Command::new(binary)
                .args(["run", "--no-preflight", "-c"])
                .arg(&config)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            if let Some(t) = kill_rank_and_time(&mark, CAP) {
                times.push(t);
            }
            let _ = herd.wait();
        }

        // The shell loop everyone writes: ssh nodeN torchrun ... &, with a marker to find it.
        let mark = format!("BENCH_MARK=teardown-loop-{rep}-{}", std::process::id());
        let port = 29400 + rep as u16;
        let mut children = Vec::new();
        for (i, h) in hosts.iter().enumerate() {
            let remote = format!(
                "cd {root} && source {}/bin/activate && export {mark} GLOO_SOCKET_IFNAME=eth0 && \
                 torchrun --nnodes 3 --nproc-per-node 2 --node-rank {i} --master-addr {} --master-port {port} \
                 examples/allreduce.py --steps 100000 --sleep 0.05",
                venv.display(),
                hosts[0]
            );
            children.push(
                Command::new("ssh")
                    .args(ssh_args(&tb))
                    .arg(h)
                    .arg(format!("bash -c '{remote}'"))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            );
        }
        match kill_rank_and_time(&mark, CAP) {
            Some(t) => shell_t.push(t),
            None => shell_hung += 1,
        }
        for mut c in children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for pid in herd_support::processes_with_env_prefix(&mark) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
    println!("\n### Teardown: torchrun 3 nodes x 2, rank 3 SIGKILLed, to every job process gone ({REPS} runs each)\n");
    println!("Rerun: `cargo bench --bench herd_bench -- teardown`\n");
    println!("| launcher | median s | spread s | ratio to shell loop |");
    println!("|---|---|---|---|");
    let shell = (!shell_t.is_empty()).then(|| stats(shell_t.clone()));
    if let Some(s) = &shell {
        println!("{}", row("ssh + torchrun shell loop", s, None));
    }
    if shell_hung > 0 {
        println!(
            "| ssh + torchrun shell loop | still running after {} s in {shell_hung} of {REPS} runs | | |",
            CAP.as_secs()
        );
    }
    if !herd_t.is_empty() {
        let herd_row = row("herd run --no-preflight", &stats(herd_t.clone()), shell.as_ref());
        // Without a finished baseline run there is no ratio.
        let herd_row = if shell.is_some() { herd_row } else { herd_row.replace("| 1.00 |", "| - |") };
        println!("{herd_row}");
    }
    if let (Some(b), false) = (&baseline, baseline_t.is_empty()) {
        let base = stats(baseline_t.clone());
        let base_row = row(&format!("baseline {}", b.display()), &base, shell.as_ref());
        println!("{}", if shell.is_some() { base_row } else { base_row.replace("| 1.00 |", "| - |") });
        let this = stats(herd_t.clone()).median.as_secs_f64();
        println!(
            "\nthis herd against the baseline: {:.2}x (median {this:.3} s against {:.3} s)",
            this / base.median.as_secs_f64(),
            base.median.as_secs_f64()
        );
    }
    if herd_t.len() < REPS {
        println!(
            "| herd run | still running after {} s in {} of {REPS} runs | | |",
            CAP.as_secs(),
            REPS - herd_t.len()
        );
    }
}

/// Wait until training runs (every rank has a live process with `mark`), SIGKILL global rank
/// 3, and time until no process with `mark` is left anywhere (capped).
fn kill_rank_and_time(mark: &str, cap: Duration) -> Option<Duration> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let victim = loop {
        let pids = herd_support::processes_with_env_prefix(mark);
        if let Some(p) = pids.iter().find(|p| environ_has(**p, "RANK=3") && environ_has(**p, "LOCAL_RANK=1"))
        {
            if pids
                .iter()
                .filter(|p| environ_has(**p, "LOCAL_RANK=0") || environ_has(**p, "LOCAL_RANK=1"))
                .count()
                >= 6
            {
                break *p;
            }
        }
        assert!(Instant::now() < deadline, "training did not start");
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_secs(2));
    let killed = Instant::now();
    let _ = Command::new("kill").args(["-9", &victim.to_string()]).status();
    // BENCH_TRACE=1: when each job process was last seen, to show what the time is spent on.
    let trace = std::env::var_os("BENCH_TRACE").is_some();
    let mut seen: std::collections::BTreeMap<u32, (String, Duration)> = Default::default();
    while killed.elapsed() < cap {
        let pids = herd_support::processes_with_env_prefix(mark);
        for p in pids.iter().filter(|_| trace) {
            let cmd =
                std::fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap_or_default().replace('\0', " ");
            seen.insert(*p, (cmd.chars().take(90).collect(), killed.elapsed()));
        }
        if pids.is_empty() {
            let mut v: Vec<_> = seen.into_iter().collect();
            v.sort_by_key(|(_, (_, t))| *t);
            for (p, (c, t)) in v {
                eprintln!("last seen {:>6.3} s after the kill: pid {p} {c}", t.as_secs_f64());
            }
            return Some(killed.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}
