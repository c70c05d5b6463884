//! Scenario 12: the nodes' share of a start. One node; a `true` job with `--no-preflight`
//! (herd's login, agent and job on the node), against a bare `ssh node true` (the login alone),
//! alternating, with another herd binary (BENCH_BASELINE_HERD) beside this one. Start to exit,
//! so herd's own start and its ssh's are in it as they are in ssh's. BENCH_HOLD_SECS keeps the
//! testbed up afterwards for a measurement from outside, and prints its commands.

use std::process::Command;
use std::time::Duration;

use super::herd_support::HERD;
use super::job::write_config;
use super::measure::{env_usize, row, runs, stats, timed};
use super::testbed::Testbed;

pub fn run() {
    let reps = runs(15);
    let tb = Testbed::new(1);
    let dir = tempfile::tempdir().unwrap();
    let host = tb.nodes()[0].addr.clone();
    let config = write_config(&tb, dir.path(), &[host], "launcher = \"command\"\nscript = \"true\"", "");
    let herd = |bin: &str| {
        let mut c = Command::new(bin);
        c.args(["run", "--no-preflight", "-c"]).arg(&config);
        c
    };
    let mut names = vec!["ssh node true".to_string(), "herd run --no-preflight".to_string()];
    let baseline = std::env::var("BENCH_BASELINE_HERD").ok();
    if baseline.is_some() {
        names.push("baseline herd run --no-preflight".into());
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    for rep in 0..reps + 1 {
        for v in (0..names.len()).map(|v| (v + rep) % names.len()) {
            let _ = std::fs::remove_dir_all(dir.path().join("logs"));
            let took = match v {
                // The same key exchange as herd's master connection: the client's default.
                0 => timed(tb.ssh_command_kex(0, None).arg("true")),
                1 => timed(&mut herd(HERD)),
                _ => timed(&mut herd(baseline.as_deref().unwrap())),
            };
            // The first round warms the caches up and is not counted.
            if rep > 0 {
                times[v].push(took);
            }
        }
    }
    println!("\n### The nodes' share: `true` on 1 node, start to exit ({reps} runs each, alternating)\n");
    println!("| command | median s | spread s | ratio to ssh |");
    println!("|---|---|---|---|");
    let ssh = stats(times[0].clone());
    for (name, xs) in names.iter().zip(&times) {
        println!("{}", row(name, &stats(xs.clone()), Some(&ssh)));
    }
    let hold = env_usize("BENCH_HOLD_SECS", 0);
    if hold > 0 {
        println!("\nssh: {:?}\nherd: {:?}\nholding for {hold} s", tb.ssh_command(0).arg("true"), herd(HERD));
        std::thread::sleep(Duration::from_secs(hold as u64));
    }
}
