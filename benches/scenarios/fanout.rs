//! Scenario 1: a trivial `true` job on N nodes, start to all exited.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::herd_support::HERD;
use super::job::{clear_logs, herd_run, hosts, pdsh, ssh_loop, write_config};
use super::measure::{row, runs, stats, table, timed};
use super::testbed::Testbed;

pub fn run() {
    let reps = runs(5);
    let tb = Testbed::new(64);
    let dir = tempfile::tempdir().unwrap();
    println!(
        "\n### Launch fan-out: `true` on N nodes, start to all exited ({reps} runs each, alternating)\n"
    );
    table("| N | command | median s | spread s | ratio to pdsh |");
    for n in [8usize, 32, 64] {
        let hosts = hosts(&tb, n);
        let config = write_config(&tb, dir.path(), &hosts, "launcher = \"command\"\nscript = \"true\"", "");
        let names = ["pdsh -R ssh -f 64", "ssh & loop", "herd run --no-preflight", "herd run"];
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
        for _ in 0..reps {
            for (v, took) in times.iter_mut().enumerate() {
                took.push(timed(&mut command(v, &tb, &hosts, dir.path(), &config)));
            }
        }
        let pdsh = stats(times[0].clone());
        for (name, xs) in names.iter().zip(&times) {
            println!("{}", row(&format!("{n} | {name}"), &stats(xs.clone()), Some(&pdsh)));
        }
    }
}

/// The command of launcher `v`, in the order of the table: pdsh, the ssh loop, herd without
/// and with its preflight.
fn command(v: usize, tb: &Testbed, hosts: &[String], dir: &Path, config: &Path) -> Command {
    match v {
        0 => pdsh(tb, hosts, &["true"]),
        1 => {
            let mut c = Command::new("bash");
            c.arg("-c").arg(ssh_loop(tb, hosts, |_| "true".into()));
            c
        }
        _ => {
            clear_logs(dir);
            herd_run(HERD, config, v == 3)
        }
    }
}
