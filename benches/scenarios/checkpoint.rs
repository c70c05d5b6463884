//! Issue 29: from SIGUSR1 to herd (a time limit's warning) to every rank having exited, and to
//! herd's exit. torchrun 3 nodes x 2, `allreduce.py --checkpoint-on SIGUSR1 --sleep 0.2`: each
//! rank ends after the step it is in, once all agree (one more all-reduce), rank 0 having saved
//! it. No baseline runs side by side: without herd, nothing tells the ranks.

use std::process::Stdio;
use std::time::{Duration, Instant};

use super::herd_support::{self, HERD};
use super::job::{kill_marked, signal, torch_config, workers};
use super::measure::{column, fmt_stat, poll_until, runs, table, Tracked};
use super::testbed::Testbed;

pub fn run() {
    let reps = runs(5);
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(3);
    let dir = tempfile::tempdir().unwrap();
    let mut rows: Vec<[f64; 2]> = Vec::new();
    for rep in 0..reps {
        let mark = format!("BENCH_MARK=checkpoint-{rep}-{}", std::process::id());
        let ckpt = dir.path().join(format!("ckpt-{rep}"));
        let args = format!(
            "\"--steps\", \"100000\", \"--sleep\", \"0.2\", \"--save-dir\", \"{}\", \"--checkpoint-on\", \"SIGUSR1\"",
            ckpt.display()
        );
        let config =
            torch_config(&tb, dir.path(), &venv, &args, &mark, "[restart]\ncheckpoint_grace = \"60s\"\n");
        let config = config.display().to_string();
        let mut herd = Tracked::spawn(HERD, &["run", "--no-preflight", "-c", &config], Stdio::null());
        let started =
            poll_until(Duration::from_secs(120), Duration::from_millis(50), || ckpt.join("step_2").exists());
        if started.is_none() {
            println!("run {rep}: training did not start");
            signal(herd.pid(), "-INT");
            herd.finish();
            kill_marked(&mark);
            continue;
        }
        let signalled = Instant::now();
        signal(herd.pid(), "-USR1");
        let gone = poll_until(Duration::from_secs(120), Duration::from_millis(10), || {
            workers(&mark, None).is_empty()
        });
        let exited = poll_until(Duration::from_secs(120), Duration::from_millis(10), || herd.try_done());
        let m = herd.finish();
        kill_marked(&mark);
        match (gone, exited) {
            (Some(g), Some(e)) if !m.success => {
                rows.push([(g - signalled).as_secs_f64(), (e - signalled).as_secs_f64()])
            }
            _ => println!("run {rep}: the ranks or herd did not end (herd ok: {})", m.success),
        }
    }
    println!("\n### A time limit's warning: torchrun 3 nodes x 2, SIGUSR1 to herd ({} runs)\n", rows.len());
    println!("Rerun: `BENCH_RUNS={reps} cargo bench --bench herd_bench -- checkpoint`\n");
    table("| from SIGUSR1 to herd | median s | spread s |");
    for (i, what) in
        ["every rank exited (checkpoint written)", "herd exited (75), every node stopped"].iter().enumerate()
    {
        let (m, s, _) = fmt_stat(&column(&rows, i), 2);
        println!("| {what} | {m} | {s} |");
    }
}
