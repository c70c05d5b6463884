//! Issue 27: the time of `herd doctor --deep` against `herd doctor` alone (start to exit,
//! alternating), on N nodes (BENCH_DEEP, 3,64) of one namespace each with the torch venv and
//! `device = "cpu"` (gloo). What `--deep` adds is a second login, a torch import on every
//! node, the rendezvous, and the measuring budget (`doctor::net::BUDGET_SECS`).

use std::process::Command;
use std::time::{Duration, Instant};

use super::herd_support::{self, HERD};
use super::job::write_config;
use super::measure::{env_sizes, row, runs, stats};
use super::testbed::Testbed;

pub fn run() {
    let reps = runs(3);
    let sizes = env_sizes("BENCH_DEEP", "3,64");
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(*sizes.iter().max().expect("a size"));
    let dir = tempfile::tempdir().unwrap();
    println!("\n### `herd doctor --deep`: start to exit ({reps} runs each, alternating)\n");
    println!("| nodes | command | median s | spread s | ratio to doctor |");
    println!("|---|---|---|---|---|");
    for &n in &sizes {
        let hosts: Vec<String> = tb.nodes()[..n].iter().map(|h| h.addr.clone()).collect();
        let job = format!(
            "workdir = \"/\"\ndevice = \"cpu\"\nsetup = \"source {}/bin/activate\"\nlauncher = \"torchrun\"\nscript = \"x.py\"",
            venv.display()
        );
        let config = write_config(&tb, dir.path(), &hosts, &job, "[rendezvous]\ninterface = \"eth0\"\n");
        let mut times: [Vec<Duration>; 2] = Default::default();
        for rep in 0..reps {
            for v in (0..2).map(|v| (v + rep) % 2) {
                let mut c = Command::new(HERD);
                c.args(["doctor", "-c"]).arg(&config);
                if v == 1 {
                    c.arg("--deep");
                }
                let start = Instant::now();
                let out = c.output().expect("spawn herd");
                times[v].push(start.elapsed());
                if !out.status.success() {
                    // Timed all the same; what it said is the finding.
                    let text = String::from_utf8_lossy(&out.stdout);
                    let tail: Vec<&str> = text.lines().rev().take(12).collect();
                    let took = start.elapsed().as_secs_f64();
                    println!("\n{c:?} exited {:?} after {took:.1} s:", out.status.code());
                    for line in tail.iter().rev() {
                        println!("    {line}");
                    }
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    println!("    stderr: {}", stderr.lines().take(8).collect::<Vec<_>>().join("\n    "));
                }
            }
        }
        let base = stats(times[0].clone());
        println!("{}", row(&format!("{n} | herd doctor"), &base, Some(&base)));
        println!("{}", row(&format!("{n} | herd doctor --deep"), &stats(times[1].clone()), Some(&base)));
    }
}
