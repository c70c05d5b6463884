//! Scenario 1: a trivial `true` job on N nodes, start to all exited.

use std::process::Command;
use std::time::Duration;

use super::herd_support::HERD;
use super::job::{ssh_args, write_config};
use super::measure::{row, runs, stats, timed};
use super::testbed::Testbed;

pub fn run() {
    let reps = runs(5);
    let tb = Testbed::new(64);
    let dir = tempfile::tempdir().unwrap();
    println!(
        "\n### Launch fan-out: `true` on N nodes, start to all exited ({reps} runs each, alternating)\n"
    );
    println!("| N | command | median s | spread s | ratio to pdsh |");
    println!("|---|---|---|---|---|");
    for n in [8usize, 32, 64] {
        let hosts: Vec<String> = tb.nodes()[..n].iter().map(|h| h.addr.clone()).collect();
        let config = write_config(&tb, dir.path(), &hosts, "launcher = \"command\"\nscript = \"true\"", "");
        let mut results: Vec<(&str, Vec<Duration>)> = vec![
            ("pdsh -R ssh -f 64", vec![]),
            ("ssh & loop", vec![]),
            ("herd run --no-preflight", vec![]),
            ("herd run", vec![]),
        ];
        for _ in 0..reps {
            let ssh_append = ssh_args(&tb)[..ssh_args(&tb).len() - 2].join(" ");
            results[0].1.push(timed(
                Command::new("pdsh")
                    .args(["-R", "ssh", "-f", "64", "-l", "root", "-w", &hosts.join(","), "true"])
                    .env("PDSH_SSH_ARGS_APPEND", &ssh_append),
            ));
            let loop_script = hosts
                .iter()
                .map(|h| format!("ssh {} {h} true &", ssh_args(&tb).join(" ")))
                .collect::<Vec<_>>()
                .join("\n")
                + "\nwait";
            results[1].1.push(timed(Command::new("bash").arg("-c").arg(&loop_script)));
            let _ = std::fs::remove_dir_all(dir.path().join("logs"));
            results[2].1.push(timed(Command::new(HERD).args(["run", "--no-preflight", "-c"]).arg(&config)));
            let _ = std::fs::remove_dir_all(dir.path().join("logs"));
            results[3].1.push(timed(Command::new(HERD).args(["run", "-c"]).arg(&config)));
        }
        let pdsh = stats(results[0].1.clone());
        for (name, xs) in &results {
            let s = stats(xs.clone());
            println!("{}", row(&format!("{n} | {name}"), &s, Some(&pdsh)));
        }
    }
}
