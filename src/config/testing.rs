//! What the config's tests share: configs that must parse, errors that must be located.

pub(super) use std::collections::BTreeMap;
pub(super) use std::path::{Path, PathBuf};
pub(super) use std::time::Duration;

pub(super) use super::check::*;
pub(super) use super::load::*;
pub(super) use super::types::*;
pub(super) use super::{suggest, ConfigError};
pub(super) use crate::outcome::FailureClass;

pub(super) const JOB: &str = "[job]\nscript = \"train.py\"\n";

pub(super) fn parse_ok(text: &str) -> Config {
    parse(Path::new("cluster.toml"), text).unwrap_or_else(|e| panic!("{e}"))
}

/// Asserts the error's message and 1-based line:col.
#[track_caller]
pub(super) fn assert_err(text: &str, line: usize, col: usize, message: &str) {
    let err = match parse(Path::new("cluster.toml"), text) {
        Ok(c) => panic!("expected an error, got {c:#?}"),
        Err(e) => e,
    };
    assert_eq!(err.message(), message, "full error:\n{err}");
    assert_eq!(err.line_col(), Some((line, col)), "full error:\n{err}");
    let display = err.to_string();
    let prefix = format!("cluster.toml:{line}:{col}: {message}\n");
    assert!(display.starts_with(&prefix), "{display}");
}

/// Asserts an error about the whole file (no location).
#[track_caller]
pub(super) fn assert_file_err(text: &str, message: &str) {
    let err = parse(Path::new("cluster.toml"), text).expect_err("expected an error");
    assert_eq!(err.line_col(), None, "full error:\n{err}");
    assert_eq!(err.to_string(), format!("cluster.toml: {message}"));
}

pub(super) fn node(host: &str) -> Node {
    Node { host: host.to_string(), addr: None, nproc: None, user: None, port: None, env: BTreeMap::new() }
}

pub(super) const FULL: &str = r#"[ssh]
user = "ubuntu"
port = 22
identity_file = "~/.ssh/id_ed25519"
known_hosts = "accept-new"
known_hosts_file = "/path/known_hosts"
connect_timeout = "20s"

[[nodes]]
host = "gpu-[01-02]"
nproc = 8
user = "x"
port = 2222
env = { NCCL_IB_HCA = "mlx5_0" }

[[nodes]]
host = "head"
addr = "10.0.0.11"

[job]
launcher = "deepspeed"
script = "train.py"
args = ["--config", "cfg.yaml"]
module = true
workdir = "/shared/project"
nproc_per_node = 4
setup = "source /opt/venv/bin/activate"
launcher_args = ["--no_local_rank"]
forward_env = ["WANDB_API_KEY", "HF_*"]
python = "/opt/venv/bin/python"

[env]
NCCL_DEBUG = "WARN"
OMP_NUM_THREADS = "4"

[rendezvous]
master = "head"
port = 29500
port_range = [30000, 31000]
interface = "eth0"

[logs]
dir = "/var/log/herd"

[restart]
max_restarts = 5
on = ["comm", "oom"]
backoff = "5s"
backoff_max = "1m"
grace_period = "20s"
hang_timeout = "30m"
stall_timeout = "off"
progress_pattern = "step \\d+"
node_wait = "2m"
heartbeat_timeout = "30s"
on_straggler = "replace"
checkpoint_signal = "SIGTERM"
checkpoint_grace = "90s"
[[restart.rules]]
pattern = "my custom error"
class = "comm"
[[restart.rules]]
pattern = "disk full"
class = "user"
"#;

/// The help line of the error `text` gives, if any.
pub(super) fn help_of(text: &str) -> Option<String> {
    let err = parse(Path::new("cluster.toml"), text).expect_err("expected an error");
    if let Some(help) = err.help() {
        assert!(err.to_string().ends_with(&format!("\n   = help: {help}")), "{err}");
    }
    err.help().map(str::to_string)
}

/// Parses `text` as `/etc/herd/cluster.toml` with `env` as the environment and `files` as the
/// only readable files; `slurm` as `--slurm`.
pub(super) fn parse_from(
    text: &str,
    env: &[(&str, &str)],
    files: &[(&str, &str)],
    slurm: bool,
) -> Result<Config, ConfigError> {
    let env = |name: &str| env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
    let read = |path: &Path| {
        files
            .iter()
            .find(|(p, _)| Path::new(p) == path)
            .map(|(_, t)| t.to_string())
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
    };
    let options = LoadOptions { env: &env, read_file: &read, slurm };
    parse_with(Path::new("/etc/herd/cluster.toml"), text, &options)
}

pub(super) fn hosts_and_nprocs(config: &Config) -> Vec<(&str, Option<u32>)> {
    config.nodes.iter().map(|n| (n.host.as_str(), n.nproc)).collect()
}
