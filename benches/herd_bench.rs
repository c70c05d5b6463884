//! herd against its baselines on the namespace testbed (every node a real sshd in its own
//! namespace). Not part of the test run. Needs root and the torch virtualenv.
//!
//!     cargo bench --bench herd_bench -- fanout      # launch fan-out, 8/32/64 nodes, vs pdsh and ssh &
//!     cargo bench --bench herd_bench -- teardown    # one rank SIGKILLed -> every process gone
//!
//! Runs of herd and its baselines alternate within one session; each table gives the median
//! and the spread (min-max) and the ratio of medians against the baseline.

#[path = "../tests/support/herd.rs"]
mod herd_support;
#[path = "../tests/support/testbed.rs"]
mod testbed;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testbed::Testbed;

use herd_support::HERD;

fn main() {
    let which: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let want = |name: &str| which.is_empty() || which.iter().any(|w| w == name);
    if want("fanout") {
        fanout();
    }
    if want("teardown") {
        teardown();
    }
}

struct Stats {
    median: Duration,
    min: Duration,
    max: Duration,
}

fn stats(mut xs: Vec<Duration>) -> Stats {
    xs.sort();
    Stats { median: xs[xs.len() / 2], min: xs[0], max: xs[xs.len() - 1] }
}

fn secs(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64())
}

fn row(name: &str, s: &Stats, baseline: Option<&Stats>) -> String {
    let ratio = baseline
        .map_or("1.00".to_string(), |b| format!("{:.2}", s.median.as_secs_f64() / b.median.as_secs_f64()));
    format!("| {name} | {} | {}-{} | {ratio} |", secs(s.median), secs(s.min), secs(s.max))
}

/// ssh as the baselines use it: the same defaults herd's own ssh gets, plus the testbed key.
fn ssh_args(tb: &Testbed) -> Vec<String> {
    vec![
        "-F".into(),
        "/dev/null".into(),
        "-i".into(),
        tb.identity_file().display().to_string(),
        "-o".into(),
        format!("UserKnownHostsFile={}", tb.known_hosts_file().display()),
        "-o".into(),
        "StrictHostKeyChecking=yes".into(),
        "-o".into(),
        "BatchMode=yes".into(),
        "-o".into(),
        "IdentitiesOnly=yes".into(),
        "-l".into(),
        "root".into(),
    ]
}

fn timed(cmd: &mut Command) -> Duration {
    let start = Instant::now();
    let status = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status().expect("spawn");
    assert!(status.success(), "{cmd:?} failed");
    start.elapsed()
}

fn write_config(tb: &Testbed, dir: &Path, hosts: &[String], job: &str, extra: &str) -> PathBuf {
    let text = format!(
        "{}\n[[nodes]]\nhost = \"{}\"\n\n[job]\n{job}\n\n[logs]\ndir = \"{}\"\n\n{extra}\n",
        tb.ssh_config_toml(),
        hosts.join(","),
        dir.join("logs").display()
    );
    let path = dir.join("cluster.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Scenario 1: a trivial `true` job on N nodes, start to all exited.
fn fanout() {
    const REPS: usize = 5;
    let tb = Testbed::new(64);
    let dir = tempfile::tempdir().unwrap();
    println!(
        "\n### Launch fan-out: `true` on N nodes, start to all exited ({REPS} runs each, alternating)\n"
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
        for _ in 0..REPS {
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

fn environ_has(pid: u32, entry: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|env| env.split(|&b| b == 0).any(|e| e == entry.as_bytes()))
        .unwrap_or(false)
}

/// Wait until training runs (every rank has a live process with `mark`), SIGKILL global rank
/// 3, and time until no process with `mark` is left anywhere (capped).
fn kill_rank_and_time(mark: &str, cap: Duration) -> Option<Duration> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let victim = loop {
        let pids = herd_support::processes_with_env_prefix(mark);
        if let Some(p) = pids.iter().find(|p| environ_has(**p, "RANK=3") && environ_has(**p, "LOCAL_RANK=1"))
        {
            if pids
                .iter()
                .filter(|p| environ_has(**p, "LOCAL_RANK=0") || environ_has(**p, "LOCAL_RANK=1"))
                .count()
                >= 6
            {
                break *p;
            }
        }
        assert!(Instant::now() < deadline, "training did not start");
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_secs(2));
    let killed = Instant::now();
    let _ = Command::new("kill").args(["-9", &victim.to_string()]).status();
    while killed.elapsed() < cap {
        if herd_support::processes_with_env_prefix(mark).is_empty() {
            return Some(killed.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// Scenario 3: one worker SIGKILLed, to every job process on every node gone.
fn teardown() {
    const REPS: usize = 5;
    const CAP: Duration = Duration::from_secs(30);
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(3);
    let dir = tempfile::tempdir().unwrap();
    let hosts: Vec<String> = tb.nodes().iter().map(|h| h.addr.clone()).collect();
    let root = env!("CARGO_MANIFEST_DIR");
    let job = format!(
        "launcher = \"torchrun\"\nscript = \"examples/allreduce.py\"\nargs = [\"--steps\", \"100000\", \"--sleep\", \"0.05\"]\n\
         nproc_per_node = 2\nworkdir = \"{root}\"\nsetup = \"source {}/bin/activate\"",
        venv.display()
    );
    let config = write_config(
        &tb,
        dir.path(),
        &hosts,
        &job,
        "[rendezvous]\ninterface = \"eth0\"\n\n[restart]\nmax_restarts = 0\n",
    );
    let mut herd_t = Vec::new();
    let mut shell_t = Vec::new();
    let mut shell_hung = 0;
    for rep in 0..REPS {
        // herd: its marker names the config; max_restarts = 0, so the gang stays down.
        let _ = std::fs::remove_dir_all(dir.path().join("logs"));
        let mut herd = Command::new(HERD)
            .args(["run", "--no-preflight", "-c"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if let Some(t) = kill_rank_and_time("HERD_MARKER=", CAP) {
            herd_t.push(t);
        }
        let _ = herd.wait();

        // The shell loop everyone writes: ssh nodeN torchrun ... &, with a marker to find it.
        let mark = format!("BENCH_MARK={rep}");
        let port = 29400 + rep as u16;
        let mut children = Vec::new();
        for (i, h) in hosts.iter().enumerate() {
            let remote = format!(
                "cd {root} && source {}/bin/activate && export {mark} GLOO_SOCKET_IFNAME=eth0 && \
                 torchrun --nnodes 3 --nproc-per-node 2 --node-rank {i} --master-addr {} --master-port {port} \
                 examples/allreduce.py --steps 100000 --sleep 0.05",
                venv.display(),
                hosts[0]
            );
            children.push(
                Command::new("ssh")
                    .args(ssh_args(&tb))
                    .arg(h)
                    .arg(format!("bash -c '{remote}'"))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            );
        }
        match kill_rank_and_time(&mark, CAP) {
            Some(t) => shell_t.push(t),
            None => shell_hung += 1,
        }
        for mut c in children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for pid in herd_support::processes_with_env_prefix(&mark) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
    println!("\n### Teardown: torchrun 3 nodes x 2, rank 3 SIGKILLed, to every job process gone ({REPS} runs each)\n");
    println!("| launcher | median s | spread s | ratio to shell loop |");
    println!("|---|---|---|---|");
    let shell = (!shell_t.is_empty()).then(|| stats(shell_t.clone()));
    if let Some(s) = &shell {
        println!("{}", row("ssh + torchrun shell loop", s, None));
    }
    if shell_hung > 0 {
        println!(
            "| ssh + torchrun shell loop | still running after {} s in {shell_hung} of {REPS} runs | | |",
            CAP.as_secs()
        );
    }
    if !herd_t.is_empty() {
        println!("{}", row("herd run", &stats(herd_t.clone()), shell.as_ref()));
    }
    if herd_t.len() < REPS {
        println!(
            "| herd run | still running after {} s in {} of {REPS} runs | | |",
            CAP.as_secs(),
            REPS - herd_t.len()
        );
    }
}
