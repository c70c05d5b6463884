//! Running the real `herd` binary from tests: write a cluster file, run a subcommand with a
//! hard timeout, and read back its output, exit code, logs and events.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::testbed::pids_whose_cmdline;

pub const HERD: &str = env!("CARGO_BIN_EXE_herd");

/// The cached torch + deepspeed virtualenv (scripts/torch-venv.sh). Tests that need torch
/// fail, not skip, when it is missing: the test command creates it first.
pub fn torch_venv() -> PathBuf {
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/torch-venv.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/torch-venv.sh");
    assert!(out.status.success(), "scripts/torch-venv.sh failed");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// The repository root: the workdir of test jobs, so scripts are `examples/...` and
/// `tests/fixtures/...`.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[derive(Debug)]
pub struct Finished {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Finished {
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(self.code, Some(code), "herd exited {:?}, wanted {code}\n{self}", self.code);
        self
    }

    /// Lines of stdout that a node printed, without the prefix, for the prefix given.
    pub fn node_lines(&self, prefix: &str) -> Vec<&str> {
        self.stdout.lines().filter_map(|l| l.strip_prefix(prefix)).collect()
    }
}

impl std::fmt::Display for Finished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--- stdout ---\n{}\n--- stderr ---\n{}", self.stdout, self.stderr)
    }
}

/// A started herd process. Its stdout and stderr are read from the start, by a thread each:
/// a herd whose output nobody reads would block on a full pipe (its supervision with it) as
/// soon as its nodes had printed 64 KiB.
pub struct Running {
    child: Child,
    stdout: Option<std::thread::JoinHandle<Vec<u8>>>,
    stderr: Option<std::thread::JoinHandle<Vec<u8>>>,
    started: Instant,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: &str) {
        let ok =
            Command::new("kill").args([&format!("-{sig}"), &self.child.id().to_string()]).status().unwrap();
        assert!(ok.success(), "kill -{sig} herd");
    }

    /// Poll `cond` every 50 ms while herd runs, for up to `limit`: true once it holds, false if
    /// herd exits first or `limit` passes. A bound for a loaded machine, not a measure of speed:
    /// the early return on exit keeps a broken run from costing the whole bound.
    pub fn until(&mut self, limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if cond() {
                return true;
            }
            if self.child.try_wait().unwrap().is_some() {
                return cond();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        cond()
    }

    /// Wait for herd to exit, killing it (and failing) once `limit` has passed since it started.
    pub fn wait(mut self, limit: Duration) -> Finished {
        let out_reader = self.stdout.take().unwrap();
        let err_reader = self.stderr.take().unwrap();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if self.started.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let stderr = String::from_utf8_lossy(&err_reader.join().unwrap()).into_owned();
                panic!("herd did not finish within {limit:?}\n--- stderr ---\n{stderr}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Finished {
            code: status.code(),
            stdout: String::from_utf8_lossy(&out_reader.join().unwrap()).into_owned(),
            stderr: String::from_utf8_lossy(&err_reader.join().unwrap()).into_owned(),
            took: self.started.elapsed(),
        }
    }
}

/// A test that panics while herd runs does not leave it running (nor what it started: its
/// agents see their stdin close): herd is killed with the test.
impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `herd <args>` started in `dir`, with stdout and stderr captured.
pub fn start(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Running {
    start_under(&[], dir, args, env)
}

/// `start`, with herd's command line after `wrapper` (e.g. `salloc -N 3`): `Running` is then
/// the wrapper's process.
pub fn start_under(wrapper: &[&str], dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Running {
    let mut cmd = match wrapper.split_first() {
        Some((program, rest)) => {
            let mut c = Command::new(program);
            c.args(rest).arg(HERD);
            c
        }
        None => Command::new(HERD),
    };
    cmd.args(args).current_dir(dir).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.env_remove("RUST_LOG").env("NO_COLOR", "1");
    // For a look at what herd did in a failing test: HERD_TEST_RUST_LOG=herd=debug.
    if let Ok(filter) = std::env::var("HERD_TEST_RUST_LOG") {
        cmd.env("RUST_LOG", filter);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start herd");
    let drain = |mut from: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = from.read_to_end(&mut s);
            s
        })
    };
    let stdout = Some(drain(Box::new(child.stdout.take().unwrap())));
    let stderr = Some(drain(Box::new(child.stderr.take().unwrap())));
    Running { child, stdout, stderr, started: Instant::now() }
}

pub fn run(dir: &Path, args: &[&str], limit: Duration) -> Finished {
    start(dir, args, &[]).wait(limit)
}

/// `run`, with `env` added to herd's environment.
pub fn run_with(dir: &Path, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Finished {
    start(dir, args, env).wait(limit)
}

/// The single run directory under a logs dir.
pub fn only_run_dir(logs: &Path) -> PathBuf {
    let runs: Vec<PathBuf> = std::fs::read_dir(logs)
        .unwrap_or_else(|e| panic!("read {}: {e}", logs.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    assert_eq!(runs.len(), 1, "expected one run under {}: {runs:?}", logs.display());
    runs.into_iter().next().unwrap()
}

/// events.jsonl of a run, parsed.
pub fn events(run_dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run_dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad event line {l:?}: {e}")))
        .collect()
}

/// The events written so far by every run under `logs`, as herd writes them: a file not
/// there yet, or a last line not yet whole, is passed over.
pub fn events_so_far(logs: &Path) -> Vec<serde_json::Value> {
    let runs = std::fs::read_dir(logs).into_iter().flatten().flatten();
    runs.filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|run| std::fs::read_to_string(run.path().join("events.jsonl")).ok())
        .flat_map(|text| text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect::<Vec<_>>())
        .collect()
}

/// Poll the events of the runs under `logs` until an event named `name` appears.
pub fn wait_for_event(logs: &Path, name: &str, limit: Duration) -> Option<serde_json::Value> {
    let mut found = None;
    wait_until(limit, || {
        found = events_so_far(logs).into_iter().find(|e| e["event"] == name);
        found.is_some()
    });
    found
}

pub fn event_names(events: &[serde_json::Value]) -> Vec<String> {
    events.iter().map(|e| e["event"].as_str().unwrap().to_string()).collect()
}

/// Poll `cond` every 50 ms for up to `limit`.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

/// Live (not zombie) processes anywhere on this machine with an environment entry that
/// starts with `prefix`, e.g. `HERD_MARKER=<config key>:`.
pub fn processes_with_env_prefix(prefix: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
                .unwrap_or(true);
            !zombie
                && std::fs::read(format!("/proc/{pid}/environ"))
                    .map(|env| env.split(|&b| b == 0).any(|e| e.starts_with(prefix.as_bytes())))
                    .unwrap_or(false)
        })
        .collect()
}

/// Live processes anywhere on this machine whose argv is exactly `argv`.
pub fn processes_with_argv(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv.iter().flat_map(|w| [w.as_bytes(), b"\0"].concat()).collect();
    pids_whose_cmdline(|c| c == want)
}

/// A `/proc/PID/status` field in kB (`VmRSS:`, `VmHWM:`).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The pids of the SSH master connections running (`ssh -M` with an openssh control folder
/// in its argv, any herd's).
pub fn ssh_master_pids() -> Vec<u32> {
    pids_whose_cmdline(|cmdline| {
        let argv = String::from_utf8_lossy(cmdline);
        argv.starts_with("ssh\0") && argv.contains(".ssh-connection") && argv.contains("\0-M\0")
    })
}

/// The SSH master connections to `addr` running (see `ssh_master_pids`).
pub fn ssh_master_pids_to(addr: &str) -> Vec<u32> {
    let to = format!("\0{addr}\0");
    ssh_master_pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&to))
        })
        .collect()
}

/// The SSH master connections running (see `ssh_master_pids`), and their total RSS in KiB.
pub fn ssh_masters() -> (usize, u64) {
    let pids = ssh_master_pids();
    (pids.len(), pids.iter().map(|&pid| status_kib(pid, "VmRSS:").unwrap_or(0)).sum())
}
