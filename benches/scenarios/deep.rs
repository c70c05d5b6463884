//! Issue 27: the time of `herd doctor --deep` against `herd doctor` alone (start to exit,
//! alternating), on N nodes (BENCH_DEEP, 3,64) of one namespace each with the torch venv and
//! `device = "cpu"` (gloo). What `--deep` adds is a second login, a torch import on every
//! node, the rendezvous, and the measuring budget (`doctor::net::BUDGET_SECS`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::herd_support::{self, HERD};
use super::job::{hosts, write_config};
use super::measure::{env_sizes, rounds, row, runs, stats, table};
use super::testbed::Testbed;

pub fn run() {
    let reps = runs(3);
    let sizes = env_sizes("BENCH_DEEP", "3,64");
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(*sizes.iter().max().expect("a size"));
    let dir = tempfile::tempdir().unwrap();
    println!("\n### `herd doctor --deep`: start to exit ({reps} runs each, alternating)\n");
    table("| nodes | command | median s | spread s | ratio to doctor |");
    for &n in &sizes {
        let job = format!(
            "workdir = \"/\"\ndevice = \"cpu\"\nsetup = \"source {}/bin/activate\"\nlauncher = \"torchrun\"\nscript = \"x.py\"",
            venv.display()
        );
        let config =
            write_config(&tb, dir.path(), &hosts(&tb, n), &job, "[rendezvous]\ninterface = \"eth0\"\n");
        let mut times: [Vec<Duration>; 2] = Default::default();
        for (_, v) in rounds(reps, 2) {
            times[v].push(doctor(&config, v == 1));
        }
        let base = stats(times[0].clone());
        println!("{}", row(&format!("{n} | herd doctor"), &base, Some(&base)));
        println!("{}", row(&format!("{n} | herd doctor --deep"), &stats(times[1].clone()), Some(&base)));
    }
}

/// `herd doctor [--deep]`, start to exit; when it fails, the end of what it said.
fn doctor(config: &Path, deep: bool) -> Duration {
    let mut c = Command::new(HERD);
    c.args(["doctor", "-c"]).arg(config);
    if deep {
        c.arg("--deep");
    }
    let start = Instant::now();
    let out = c.output().expect("spawn herd");
    let took = start.elapsed();
    if !out.status.success() {
        // Timed all the same; what it said is the finding.
        let text = String::from_utf8_lossy(&out.stdout);
        let tail: Vec<&str> = text.lines().rev().take(12).collect();
        let secs = start.elapsed().as_secs_f64();
        println!("\n{c:?} exited {:?} after {secs:.1} s:", out.status.code());
        for line in tail.iter().rev() {
            println!("    {line}");
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        println!("    stderr: {}", stderr.lines().take(8).collect::<Vec<_>>().join("\n    "));
    }
    took
}
