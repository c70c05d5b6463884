//! Scenario 10: every rank's stack when a job hangs. N nodes x R ranks, each rank a Python
//! process asleep (a `command` job whose ranks carry RANK and LOCAL_RANK, as torchrun's
//! workers do), no line ever matching `progress_pattern`: the hang is found after
//! `hang_timeout`, and herd collects every rank's py-spy dump before the teardown. Measured:
//! from the end of the hang timeout to the teardown (the probe, processes and stacks), and
//! how many ranks got a stack. All N nodes share this machine's 2 cores: on a cluster each
//! node's 8 dumps run on its own cores. `BENCH_STACKS_SPY=real,stub` also runs each size with
//! a stub `py-spy` first on the ranks' PATH, which prints a canned dump at once: herd's own
//! part (the probe's fan-out, the agents' messages, the files and the summary) without
//! py-spy's CPU, which a cluster spreads over its nodes.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::herd_support::{self, HERD};
use super::job::{clear_logs, event_time, hosts, run_events, since, write_config};
use super::measure::{env_dims, env_words, fmt_stat, runs, table, Tracked};
use super::testbed::Testbed;

const HANG: u64 = 30;

pub fn run() {
    let reps = runs(3);
    let sizes = env_dims::<2>("BENCH_STACKS", "8x8,64x8");
    let spies = env_words("BENCH_STACKS_SPY", "real");
    let venv = herd_support::torch_venv();
    let most = sizes.iter().map(|s| s[0]).max().unwrap_or(1);
    let tb = Testbed::new(most);
    let dir = tempfile::tempdir().unwrap();
    let stub = stub_py_spy(dir.path());
    println!("\n### Every rank's stack on a hang: N nodes x R sleeping Python ranks, hang_timeout {HANG} s ({reps} runs each)\n");
    let size_list = sizes.iter().map(|[n, r]| format!("{n}x{r}")).collect::<Vec<_>>().join(",");
    println!("Rerun: `BENCH_RUNS={reps} BENCH_STACKS={size_list} BENCH_STACKS_SPY={} cargo bench --bench herd_bench -- stacks`\n", spies.join(","));
    table("| N x R | py-spy | probe and stacks, from the hang timeout to the teardown: median s | spread s | ranks with a stack (all runs) | groups |");
    for ([n, per], spy) in sizes.iter().flat_map(|size| spies.iter().map(move |spy| (*size, spy))) {
        let ranks = format!(
            "i=0; while [ $i -lt {per} ]; do RANK=$((NODE_RANK * {per} + i)) LOCAL_RANK=$i python3 -c 'import time\nwhile True: time.sleep(60)' & i=$((i + 1)); done; wait"
        );
        let job = format!(
            // nproc_per_node: the plan's ranks are the ones the command starts.
            "launcher = \"command\"\nscript = \"sh\"\nargs = [\"-c\", {}]\nnproc_per_node = {per}\nsetup = \"export PATH={}{}/bin:$PATH\"",
            toml_str(&ranks),
            if spy == "stub" { format!("{}:", stub.display()) } else { String::new() },
            venv.display()
        );
        let hang = Hang { tb: &tb, dir: dir.path(), hosts: hosts(&tb, n), job };
        let (took, got, groups) = hang.measure(reps);
        let (m, sp, _) = fmt_stat(&took, 2);
        println!("| {n} x {per} | {spy} | {m} | {sp} | {got} of {} | {groups} |", n * per * reps);
    }
}

/// A `py-spy` in `dir/stub-bin` that prints a canned dump at once; the directory.
fn stub_py_spy(dir: &Path) -> PathBuf {
    let stub = dir.join("stub-bin");
    std::fs::create_dir_all(&stub).unwrap();
    let spy = stub.join("py-spy");
    // Called as `py-spy dump --full-filenames --pid PID`.
    let canned = "printf 'Process %s: python3\\nPython v3.11.2\\n\\nThread %s (idle): \"MainThread\"\\n    <module> (/bench/rank.py:2)\\n' \"$4\" \"$4\"";
    std::fs::write(&spy, format!("#!/bin/sh\n{canned}\n")).unwrap();
    std::fs::set_permissions(&spy, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    stub
}

/// A job that hangs on `hosts`.
struct Hang<'a> {
    tb: &'a Testbed,
    dir: &'a Path,
    hosts: Vec<String>,
    job: String,
}

impl Hang<'_> {
    /// `reps` runs: from the hang timeout to the teardown of each, the ranks with a stack in
    /// all, and the last summary's number of groups.
    fn measure(&self, reps: usize) -> (Vec<f64>, usize, String) {
        let extra = format!("[restart]\nmax_restarts = 0\nhang_timeout = \"{HANG}s\"\nprogress_pattern = \"^never$\"\ngrace_period = \"2s\"\n");
        let (mut took, mut got, mut groups) = (Vec::new(), 0usize, String::new());
        for _ in 0..reps {
            clear_logs(self.dir);
            let config =
                write_config(self.tb, self.dir, &self.hosts, &self.job, &extra).display().to_string();
            let herd = Tracked::spawn(HERD, &["run", "--no-preflight", "-c", &config], Stdio::null());
            let _ = herd.finish();
            let ev = run_events(&self.dir.join("logs"));
            let (Some(started), Some(teardown)) =
                (event_time(&ev, "attempt_started", 0), event_time(&ev, "teardown_started", 0))
            else {
                println!("a run did not hang as planned");
                continue;
            };
            took.push(since(teardown, started) - HANG as f64);
            if let Some(s) = ev.iter().find(|e| e["event"] == "stacks_summarized") {
                got += s["groups"]
                    .as_array()
                    .map_or(0, |g| g.iter().map(|g| g["ranks"].as_array().map_or(0, Vec::len)).sum());
                groups = s["groups"].as_array().map_or(0, Vec::len).to_string();
            }
        }
        (took, got, groups)
    }
}

fn toml_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string")
}
