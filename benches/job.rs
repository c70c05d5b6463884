//! The job under test on the testbed: its cluster TOML, the ssh and pdsh the baselines use,
//! the shell loop of ssh + torchrun, its processes found by a mark in their environment, and
//! herd's events.jsonl of a run read back.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use super::herd_support;
use super::measure::poll_until;
use super::testbed::Testbed;

// ---------------------------------------------------------------------------------------------
// The testbed's nodes, and the baselines' ssh and pdsh.

/// The addresses of the testbed's first `n` nodes.
pub fn hosts(tb: &Testbed, n: usize) -> Vec<String> {
    tb.nodes()[..n].iter().map(|h| h.addr.clone()).collect()
}

/// ssh as the baselines use it: the same defaults herd's own ssh gets, plus the testbed key.
pub fn ssh_args(tb: &Testbed) -> Vec<String> {
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

/// pdsh's arguments before `-w HOSTS`: over ssh, 64 at once, as root.
pub const PDSH: [&str; 6] = ["-R", "ssh", "-f", "64", "-l", "root"];

/// PDSH_SSH_ARGS_APPEND for pdsh: `ssh_args` but the user, which pdsh passes itself.
pub fn pdsh_ssh_append(tb: &Testbed) -> String {
    let args = ssh_args(tb);
    args[..args.len() - 2].join(" ")
}

/// pdsh's arguments for `REMOTE` on `hosts` (PDSH_SSH_ARGS_APPEND to be set by the caller).
pub fn pdsh_args(hosts: &[String], remote: &str) -> Vec<String> {
    let mut args: Vec<String> = PDSH.iter().map(|a| a.to_string()).collect();
    args.extend(["-w".into(), hosts.join(","), remote.into()]);
    args
}

/// `pdsh ... -w HOSTS REMOTE...`, PDSH_SSH_ARGS_APPEND set for the testbed.
pub fn pdsh(tb: &Testbed, hosts: &[String], remote: &[&str]) -> Command {
    let mut c = Command::new("pdsh");
    c.args(PDSH).args(["-w", &hosts.join(",")]).args(remote).env("PDSH_SSH_ARGS_APPEND", pdsh_ssh_append(tb));
    c
}

/// The loop everyone writes: `ssh NODE REMOTE &` for every node, then `wait`, where REMOTE is
/// what `remote` gives for the node.
pub fn ssh_loop(tb: &Testbed, hosts: &[String], remote: impl Fn(&str) -> String) -> String {
    let ssh = ssh_args(tb).join(" ");
    hosts.iter().map(|h| format!("ssh {ssh} {h} {} &", remote(h))).collect::<Vec<_>>().join("\n") + "\nwait"
}

// ---------------------------------------------------------------------------------------------
// The cluster TOML, and herd run on it.

/// `dir/cluster.toml` for `hosts` (one `[[nodes]]` entry), the `[job]` table's body `job`,
/// logs in `dir/logs`, and `extra` tables.
pub fn write_config(tb: &Testbed, dir: &Path, hosts: &[String], job: &str, extra: &str) -> PathBuf {
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

/// `BIN run [--no-preflight] -c CONFIG`.
pub fn herd_run(bin: &str, config: &Path, preflight: bool) -> Command {
    let mut c = Command::new(bin);
    c.arg("run");
    if !preflight {
        c.arg("--no-preflight");
    }
    c.arg("-c").arg(config);
    c
}

/// No logs in `dir` from an earlier run, so that the next run's are the only ones.
pub fn clear_logs(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir.join("logs"));
}

/// `examples/allreduce.py`'s args (a TOML array's items) for training that runs until stopped.
pub const TRAIN_ON: &str = "\"--steps\", \"100000\", \"--sleep\", \"0.05\"";

/// `TRAIN_ON` as the shell loop passes it.
pub const TRAIN_ON_SHELL: &str = "--steps 100000 --sleep 0.05";

/// `TRAIN_ON`, and 3 steps on a later attempt: a restart is measured to its workers, and the
/// run then ends by itself.
pub fn train_then_retry() -> String {
    format!("{TRAIN_ON}, \"--retry-steps\", \"3\"")
}

/// One restart after a backoff of 1 s (+-20 %), the teardown's grace 3 s.
pub const ONE_RESTART: &str =
    "[restart]\nmax_restarts = 1\nbackoff = \"1s\"\nbackoff_max = \"2s\"\ngrace_period = \"3s\"\n";

/// The torch job on 3 nodes x 2 ranks, from the repo root, with `mark` in every process; and
/// no logs in `dir` from an earlier run, so that the next run's are the only ones.
pub fn torch_config(tb: &Testbed, dir: &Path, venv: &Path, args: &str, mark: &str, extra: &str) -> PathBuf {
    clear_logs(dir);
    let hosts = hosts(tb, tb.nodes().len());
    let job = format!(
        "launcher = \"torchrun\"\nscript = \"examples/allreduce.py\"\nargs = [{args}]\n\
         nproc_per_node = 2\nworkdir = \"{}\"\nsetup = \"source {}/bin/activate\"",
        env!("CARGO_MANIFEST_DIR"),
        venv.display()
    );
    let (key, value) = mark.split_once('=').unwrap();
    write_config(
        tb,
        dir,
        &hosts,
        &job,
        &format!("[rendezvous]\ninterface = \"eth0\"\n\n[env]\n{key} = \"{value}\"\n\n{extra}"),
    )
}

/// `line` added to `torch_config`'s `[job]` table (as `device = "cpu"`).
pub fn add_job_line(config: &Path, line: &str) {
    let text = std::fs::read_to_string(config).unwrap();
    let text = text.replacen("nproc_per_node = 2\n", &format!("nproc_per_node = 2\n{line}\n"), 1);
    std::fs::write(config, text).unwrap();
}

// ---------------------------------------------------------------------------------------------
// The baseline without herd: a shell loop of ssh + torchrun.

/// The shell loop: `ssh nodeN torchrun --node-rank N ...` for every node, in parallel.
pub fn torch_shell_loop(
    tb: &Testbed,
    venv: &Path,
    args: &str,
    mark: &str,
    port: u16,
) -> Vec<std::process::Child> {
    let hosts = hosts(tb, tb.nodes().len());
    hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let remote = format!(
                "cd {root} && source {venv}/bin/activate && export {mark} GLOO_SOCKET_IFNAME=eth0 && \
                 torchrun --nnodes {n} --nproc-per-node 2 --node-rank {i} --master-addr {master} --master-port {port} \
                 examples/allreduce.py {args}",
                root = env!("CARGO_MANIFEST_DIR"),
                venv = venv.display(),
                n = hosts.len(),
                master = hosts[0]
            );
            Command::new("ssh")
                .args(ssh_args(tb))
                .arg(h)
                .arg(format!("bash -c '{remote}'"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The job's processes, found by a mark in their environment.

pub fn environ_has(pid: u32, entry: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|env| env.split(|&b| b == 0).any(|e| e == entry.as_bytes()))
        .unwrap_or(false)
}

/// Live processes whose environment holds exactly `entry` and, if given, also `and`.
pub fn marked(entry: &str, and: Option<&str>) -> Vec<u32> {
    herd_support::processes_with_env_prefix(entry)
        .into_iter()
        .filter(|p| environ_has(*p, entry) && and.is_none_or(|a| environ_has(*p, a)))
        .collect()
}

/// A torch worker (torchrun sets LOCAL_RANK for its workers only) with `mark`.
pub fn workers(mark: &str, extra: Option<&str>) -> Vec<u32> {
    herd_support::processes_with_env_prefix("LOCAL_RANK=")
        .into_iter()
        .filter(|p| environ_has(*p, mark) && extra.is_none_or(|e| environ_has(*p, e)))
        .collect()
}

/// The torch job's training under way: its six workers (3 nodes x 2) with `mark`, and
/// `extra` if given, all exist; None after 120 s.
pub fn training(mark: &str, extra: Option<&str>) -> Option<Instant> {
    poll_until(Duration::from_secs(120), Duration::from_millis(100), || workers(mark, extra).len() >= 6)
}

/// The torch job's global rank 3 (node 1's second worker) with `mark`.
pub fn rank_3(mark: &str) -> Option<u32> {
    workers(mark, Some("RANK=3")).into_iter().find(|p| environ_has(*p, "LOCAL_RANK=1"))
}

/// A restart: when rank 3 was SIGKILLed (and by the wall clock, as events.jsonl counts), and
/// when attempt 1's six workers all existed (None after 120 s).
pub struct Restart {
    pub killed: Instant,
    pub killed_wall: SystemTime,
    pub up: Option<Instant>,
}

/// SIGKILL the torch job's rank 3 and wait for attempt 1's six workers.
pub fn kill_rank_3(mark: &str) -> Restart {
    let victim = rank_3(mark).expect("rank 3 is running");
    let killed_wall = SystemTime::now();
    let killed = Instant::now();
    signal(victim, "-9");
    let up = poll_until(Duration::from_secs(120), Duration::from_millis(10), || {
        workers(mark, Some("HERD_ATTEMPT=1")).len() >= 6
    });
    Restart { killed, killed_wall, up }
}

/// `kill SIG PID`, as `-9` or `-INT`.
pub fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

pub fn kill_marked(mark: &str) {
    for pid in marked(mark, None) {
        signal(pid, "-9");
    }
}

/// Poll every 10 ms from `start`: when the first process with `mark` that is torchrun itself
/// (an argv word whose file name is `torchrun`), and the first worker, exist on any node.
pub fn first_launcher_and_worker(mark: &str, start: Instant, limit: Duration) -> Option<(f64, f64)> {
    let is_torchrun = |pid: u32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| c.split(|&b| b == 0).any(|w| w.rsplit(|&b| b == b'/').next() == Some(&b"torchrun"[..])))
            .unwrap_or(false)
    };
    let mut launcher = None;
    let worker = poll_until(limit, Duration::from_millis(10), || {
        if launcher.is_none() && marked(mark, None).into_iter().any(is_torchrun) {
            launcher = Some(Instant::now());
        }
        !workers(mark, None).is_empty()
    })?;
    // A worker implies its torchrun: if the poll never saw the torchrun alone, it appeared
    // within the same 10 ms.
    let launcher = launcher.unwrap_or(worker);
    Some(((launcher - start).as_secs_f64(), (worker - start).as_secs_f64()))
}

// ---------------------------------------------------------------------------------------------
// herd's events.jsonl.

/// Every event of every run under `logs`.
pub fn run_events(logs: &Path) -> Vec<serde_json::Value> {
    std::fs::read_dir(logs)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|run| std::fs::read_to_string(run.path().join("events.jsonl")).ok())
        .flat_map(|t| {
            t.lines().filter_map(|l| serde_json::from_str(l).ok()).collect::<Vec<serde_json::Value>>()
        })
        .collect()
}

/// When the `nth` event named `name` happened.
pub fn event_time(ev: &[serde_json::Value], name: &str, nth: usize) -> Option<SystemTime> {
    let e = ev.iter().filter(|e| e["event"] == name).nth(nth)?;
    humantime::parse_rfc3339(e["ts"].as_str()?).ok()
}

/// Seconds from `from` to `t` (0 if before).
pub fn since(t: SystemTime, from: SystemTime) -> f64 {
    t.duration_since(from).map_or(0.0, |d| d.as_secs_f64())
}

/// events.jsonl after `from`, as table rows `| +t s | event detail |`.
pub fn timeline_rows(ev: &[serde_json::Value], from: SystemTime) -> Vec<String> {
    ev.iter()
        .filter_map(|e| {
            let t = humantime::parse_rfc3339(e["ts"].as_str()?).ok()?;
            let dt = t.duration_since(from).ok()?.as_secs_f64();
            let mut detail = e["event"].as_str()?.to_string();
            for key in [
                "node_rank",
                "host",
                "millis",
                "attempt",
                "exit_code",
                "signal",
                "lost",
                "reason",
                "class",
                "delay_ms",
            ] {
                if let Some(v) = e.get(key) {
                    detail.push_str(&format!(" {key}={v}"));
                }
            }
            Some(format!("| +{dt:.2} s | {} |", detail.replace('|', "\\|")))
        })
        .collect()
}

/// `intro`, then the timeline's table.
pub fn print_timeline(intro: &str, rows: &[String]) {
    println!("\n{intro}:\n\n| time | event |\n|---|---|\n{}", rows.join("\n"));
}

/// The backoff herd drew for the first restart, in seconds (0 without one).
pub fn backoff_drawn(ev: &[serde_json::Value]) -> f64 {
    let scheduled = ev.iter().find(|e| e["event"] == "restart_scheduled");
    scheduled.and_then(|e| e["delay_ms"].as_u64()).unwrap_or(0) as f64 / 1000.0
}
