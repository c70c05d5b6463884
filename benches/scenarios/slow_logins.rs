//! Scenario 1b: the fan-out of scenario 1 at 64 nodes whose login shell takes
//! BENCH_LOGIN_SECS (1 s) to start, as with `conda init` in a shared home: every login costs
//! that much. Then, counted by each node's `~/.bashrc`, the logins and shell inits per node of
//! each herd command.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::herd_support::HERD;
use super::job::{ssh_args, write_config};
use super::measure::{env_usize, row, runs, stats, tail, timed};
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
    let hosts: Vec<String> = tb.nodes().iter().map(|h| h.addr.clone()).collect();
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
    println!("| N | command | median s | spread s | ratio to pdsh |");
    println!("|---|---|---|---|---|");
    let ssh_append = ssh_args(&tb)[..ssh_args(&tb).len() - 2].join(" ");
    let mut results: Vec<(&str, Vec<Duration>)> =
        vec![("pdsh -R ssh -f 64", vec![]), ("herd run --no-preflight", vec![]), ("herd run", vec![])];
    // Another herd binary (BENCH_BASELINE_HERD), run beside this one in every round.
    let baseline = std::env::var("BENCH_BASELINE_HERD").ok();
    if baseline.is_some() {
        results.push(("baseline herd run --no-preflight", vec![]));
        results.push(("baseline herd run", vec![]));
    }
    for _ in 0..reps {
        if let Some(base) = &baseline {
            let _ = std::fs::remove_dir_all(dir.path().join("logs"));
            results[3].1.push(timed(Command::new(base).args(["run", "--no-preflight", "-c"]).arg(&config)));
            let _ = std::fs::remove_dir_all(dir.path().join("logs"));
            results[4].1.push(timed(Command::new(base).args(["run", "-c"]).arg(&config)));
        }
        results[0].1.push(timed(
            Command::new("pdsh")
                .args(["-R", "ssh", "-f", "64", "-l", "root", "-w", &hosts.join(",")])
                .args(remote)
                .env("PDSH_SSH_ARGS_APPEND", &ssh_append),
        ));
        let _ = std::fs::remove_dir_all(dir.path().join("logs"));
        results[1].1.push(timed(Command::new(HERD).args(["run", "--no-preflight", "-c"]).arg(&config)));
        let _ = std::fs::remove_dir_all(dir.path().join("logs"));
        results[2].1.push(timed(Command::new(HERD).args(["run", "-c"]).arg(&config)));
    }
    let pdsh = stats(results[0].1.clone());
    for (name, xs) in &results {
        println!("{}", row(&format!("{n} | {name}"), &stats(xs.clone()), Some(&pdsh)));
    }

    println!("\n### Logins and shell inits per node ({n} nodes; min-max over the nodes)\n");
    println!("| command | logins per node | shell inits per node |");
    println!("|---|---|---|");
    let counts =
        |tb: &Testbed| -> Vec<(usize, usize)> { (0..n).map(|i| (tb.logins(i), tb.shell_inits(i))).collect() };
    let mut commands: Vec<(String, Command)> = Vec::new();
    for args in [&["run", "--no-preflight"][..], &["run"], &["doctor"], &["exec", "--", "true"], &["kill"]] {
        let mut c = Command::new(HERD);
        c.arg(args[0]).arg("-c").arg(&config).args(&args[1..]);
        commands.push((format!("herd {}", args.join(" ")), c));
    }
    let mut pdsh = Command::new("pdsh");
    pdsh.args(["-R", "ssh", "-f", "64", "-l", "root", "-w", &hosts.join(","), "true"])
        .env("PDSH_SSH_ARGS_APPEND", &ssh_append);
    commands.push(("pdsh true".into(), pdsh));
    for (name, mut cmd) in commands {
        let before = counts(&tb);
        let _ = std::fs::remove_dir_all(dir.path().join("logs"));
        let out = cmd.stdin(Stdio::null()).output().expect("spawn");
        let status = out.status;
        if !status.success() {
            let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
            eprintln!("{name}: {status}\n{}", tail(&said, 30));
        }
        let after = counts(&tb);
        let delta: Vec<(usize, usize)> =
            before.iter().zip(&after).map(|(b, a)| (a.0 - b.0, a.1 - b.1)).collect();
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
