//! Scenario 1b: the fan-out of scenario 1 at 64 nodes whose login shell takes
//! BENCH_LOGIN_SECS (1 s) to start, as with `conda init` in a shared home: every login costs
//! that much. Then, counted by each node's `~/.bashrc`, the logins and shell inits per node of
//! each herd command.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::herd_support::HERD;
use super::job::{clear_logs, herd_run, hosts, pdsh, write_config};
use super::measure::{baseline_herd, env_usize, row, runs, stats, table, tail, timed};
use super::testbed::Testbed;

pub fn run() {
    let reps = runs(5);
    let n = env_usize("BENCH_NODES", 64);
    let login: f64 = std::env::var("BENCH_LOGIN_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(1.0);
    let tb = Testbed::new(n);
    for i in 0..n {
        tb.slow_login(i, login);
    }
    tb.count_logins();
    let dir = tempfile::tempdir().unwrap();
    let hosts = hosts(&tb, n);
    // BENCH_JOB=python: both start `python3 -c pass` on every node, as every training launch
    // starts an interpreter; otherwise `true`.
    let python = std::env::var("BENCH_JOB").is_ok_and(|j| j == "python");
    let (job, remote): (&str, &[&str]) = match python {
        true => (
            "launcher = \"command\"\nscript = \"python3\"\nargs = [\"-c\", \"pass\"]\ndevice = \"cpu\"",
            &["python3", "-c", "pass"],
        ),
        // device = "cpu": the testbed has no GPUs, which `herd doctor` would fail on every node.
        false => ("launcher = \"command\"\nscript = \"true\"\ndevice = \"cpu\"", &["true"]),
    };
    let config = write_config(&tb, dir.path(), &hosts, job, "");
    let shown = remote.join(" ");
    println!(
        "\n### Launch fan-out, {n} nodes, {login} s login shell: `{shown}` on every node, start to all exited ({reps} runs each, alternating)\n"
    );
    table("| N | command | median s | spread s | ratio to pdsh |");
    fan_out(reps, &tb, &hosts, dir.path(), &config, remote);
    println!("\n### Logins and shell inits per node ({n} nodes; min-max over the nodes)\n");
    table("| command | logins per node | shell inits per node |");
    logins(&tb, &hosts, dir.path(), &config);
}

/// The fan-out's rows: pdsh and herd without and with its preflight, and another herd binary
/// (BENCH_BASELINE_HERD) beside this one in every round.
fn fan_out(reps: usize, tb: &Testbed, hosts: &[String], dir: &Path, config: &Path, remote: &[&str]) {
    let n = hosts.len();
    let mut names = vec!["pdsh -R ssh -f 64", "herd run --no-preflight", "herd run"];
    let baseline = baseline_herd();
    if baseline.is_some() {
        names.extend(["baseline herd run --no-preflight", "baseline herd run"]);
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    // In every round: the baseline herd's two, pdsh, then this herd's two.
    let order = if baseline.is_some() { &[3, 4, 0, 1, 2][..] } else { &[0, 1, 2] };
    for _ in 0..reps {
        for &v in order {
            let mut c = match v {
                0 => pdsh(tb, hosts, remote),
                1 | 2 => herd_run(HERD, config, v == 2),
                _ => herd_run(baseline.as_deref().unwrap(), config, v == 4),
            };
            if v > 0 {
                clear_logs(dir);
            }
            times[v].push(timed(&mut c));
        }
    }
    let pdsh = stats(times[0].clone());
    for (name, xs) in names.iter().zip(&times) {
        println!("{}", row(&format!("{n} | {name}"), &stats(xs.clone()), Some(&pdsh)));
    }
}

/// The logins and shell inits on every node of each herd command, and of pdsh.
fn logins(tb: &Testbed, hosts: &[String], dir: &Path, config: &Path) {
    let n = hosts.len();
    let counts = || -> Vec<(usize, usize)> { (0..n).map(|i| (tb.logins(i), tb.shell_inits(i))).collect() };
    let mut commands: Vec<(String, Command)> = Vec::new();
    for args in [&["run", "--no-preflight"][..], &["run"], &["doctor"], &["exec", "--", "true"], &["kill"]] {
        let mut c = Command::new(HERD);
        c.arg(args[0]).arg("-c").arg(config).args(&args[1..]);
        commands.push((format!("herd {}", args.join(" ")), c));
    }
    commands.push(("pdsh true".into(), pdsh(tb, hosts, &["true"])));
    for (name, mut cmd) in commands {
        let before = counts();
        clear_logs(dir);
        let out = cmd.stdin(Stdio::null()).output().expect("spawn");
        let status = out.status;
        if !status.success() {
            let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
            eprintln!("{name}: {status}\n{}", tail(&said, 30));
        }
        let delta: Vec<(usize, usize)> =
            before.iter().zip(&counts()).map(|(b, a)| (a.0 - b.0, a.1 - b.1)).collect();
        let range = |f: fn(&(usize, usize)) -> usize| {
            let (lo, hi) = (delta.iter().map(f).min().unwrap(), delta.iter().map(f).max().unwrap());
            if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            }
        };
        let note = if status.success() { String::new() } else { format!(" ({status})") };
        println!("| {name}{note} | {} | {} |", range(|d| d.0), range(|d| d.1));
    }
}
