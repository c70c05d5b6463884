//! Scenario 12: the nodes' share of a start. One node; a `true` job with `--no-preflight`
//! (herd's login, agent and job on the node), against a bare `ssh node true` (the login alone),
//! alternating, with another herd binary (BENCH_BASELINE_HERD) beside this one. Start to exit,
//! so herd's own start and its ssh's are in it as they are in ssh's. BENCH_HOLD_SECS keeps the
//! testbed up afterwards for a measurement from outside, and prints its commands.

use std::time::Duration;

use super::herd_support::HERD;
use super::job::{clear_logs, herd_run, hosts, write_config};
use super::measure::{baseline_herd, hold, hold_secs, rounds, row, runs, stats, table, timed};
use super::testbed::Testbed;

pub fn run() {
    let reps = runs(15);
    let tb = Testbed::new(1);
    let dir = tempfile::tempdir().unwrap();
    let config =
        write_config(&tb, dir.path(), &hosts(&tb, 1), "launcher = \"command\"\nscript = \"true\"", "");
    let mut names = vec!["ssh node true", "herd run --no-preflight"];
    let baseline = baseline_herd();
    if baseline.is_some() {
        names.push("baseline herd run --no-preflight");
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    for (rep, v) in rounds(reps + 1, names.len()) {
        clear_logs(dir.path());
        let took = match v {
            // The same key exchange as herd's master connection: the client's default.
            0 => timed(tb.ssh_command_kex(0, None).arg("true")),
            1 => timed(&mut herd_run(HERD, &config, false)),
            _ => timed(&mut herd_run(baseline.as_deref().unwrap(), &config, false)),
        };
        // The first round warms the caches up and is not counted.
        if rep > 0 {
            times[v].push(took);
        }
    }
    println!("\n### The nodes' share: `true` on 1 node, start to exit ({reps} runs each, alternating)\n");
    table("| command | median s | spread s | ratio to ssh |");
    let ssh = stats(times[0].clone());
    for (name, xs) in names.iter().zip(&times) {
        println!("{}", row(name, &stats(xs.clone()), Some(&ssh)));
    }
    if hold_secs() > 0 {
        println!("\nssh: {:?}\nherd: {:?}", tb.ssh_command(0).arg("true"), herd_run(HERD, &config, false));
        hold(hold_secs());
    }
}
