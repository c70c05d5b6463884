//! Scenario 3: one worker SIGKILLed, to every job process on every node gone.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::herd_support::{self, HERD};
use super::job::{
    environ_has, herd_run, kill_marked, signal, torch_config, torch_shell_loop, TRAIN_ON, TRAIN_ON_SHELL,
};
use super::measure::{baseline_herd, row, stats, table, Stats};
use super::testbed::Testbed;

const REPS: usize = 5;
const CAP: Duration = Duration::from_secs(30);

/// Each launcher's times from the kill to no job process left, and the shell loop's runs that
/// were still going at `CAP`.
#[derive(Default)]
struct Times {
    herd: Vec<Duration>,
    baseline: Vec<Duration>,
    shell: Vec<Duration>,
    shell_hung: usize,
}

pub fn run() {
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(3);
    let dir = tempfile::tempdir().unwrap();
    let baseline = baseline_herd();
    let mut times = Times::default();
    for rep in 0..REPS {
        // herd, max_restarts = 0, so the gang stays down. Its processes are found by a mark of
        // this bench's own, not by HERD_MARKER: other herd runs (tests) may share the machine.
        // The baseline binary, when given, runs first on odd runs and second on even ones.
        let mut binaries = vec![(HERD, "herd")];
        if let Some(b) = &baseline {
            binaries.insert(rep % 2, (b.as_str(), "base"));
        }
        for (binary, name) in binaries {
            let mark = format!("BENCH_MARK=teardown-{name}-{rep}-{}", std::process::id());
            let config =
                torch_config(&tb, dir.path(), &venv, TRAIN_ON, &mark, "[restart]\nmax_restarts = 0\n");
            let mut herd =
                herd_run(binary, &config, false).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
            let took = if name == "herd" { &mut times.herd } else { &mut times.baseline };
            took.extend(kill_rank_and_time(&mark, CAP));
            let _ = herd.wait();
        }
        // The shell loop everyone writes: ssh nodeN torchrun ... &, with a marker to find it.
        let mark = format!("BENCH_MARK=teardown-loop-{rep}-{}", std::process::id());
        let children = torch_shell_loop(&tb, &venv, TRAIN_ON_SHELL, &mark, 29400 + rep as u16);
        match kill_rank_and_time(&mark, CAP) {
            Some(t) => times.shell.push(t),
            None => times.shell_hung += 1,
        }
        for mut c in children {
            let _ = c.kill();
            let _ = c.wait();
        }
        kill_marked(&mark);
    }
    print(&times, baseline.as_deref().map(Path::new));
}

fn print(times: &Times, baseline: Option<&Path>) {
    println!("\n### Teardown: torchrun 3 nodes x 2, rank 3 SIGKILLed, to every job process gone ({REPS} runs each)\n");
    println!("Rerun: `cargo bench --bench herd_bench -- teardown`\n");
    table("| launcher | median s | spread s | ratio to shell loop |");
    let shell = (!times.shell.is_empty()).then(|| stats(times.shell.clone()));
    if let Some(s) = &shell {
        println!("{}", row("ssh + torchrun shell loop", s, None));
    }
    if times.shell_hung > 0 {
        println!(
            "| ssh + torchrun shell loop | still running after {} s in {} of {REPS} runs | | |",
            CAP.as_secs(),
            times.shell_hung
        );
    }
    // Without a finished shell loop there is no ratio.
    let against_shell = |name: &str, s: &Stats| {
        let r = row(name, s, shell.as_ref());
        if shell.is_some() {
            r
        } else {
            r.replace("| 1.00 |", "| - |")
        }
    };
    if !times.herd.is_empty() {
        println!("{}", against_shell("herd run --no-preflight", &stats(times.herd.clone())));
    }
    if let (Some(b), false) = (baseline, times.baseline.is_empty()) {
        let base = stats(times.baseline.clone());
        println!("{}", against_shell(&format!("baseline {}", b.display()), &base));
        let this = stats(times.herd.clone()).median.as_secs_f64();
        println!(
            "\nthis herd against the baseline: {:.2}x (median {this:.3} s against {:.3} s)",
            this / base.median.as_secs_f64(),
            base.median.as_secs_f64()
        );
    }
    if times.herd.len() < REPS {
        println!(
            "| herd run | still running after {} s in {} of {REPS} runs | | |",
            CAP.as_secs(),
            REPS - times.herd.len()
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
    signal(victim, "-9");
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
