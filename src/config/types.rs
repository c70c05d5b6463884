//! The validated cluster configuration: what the rest of herd sees after `config::load`.
//! Every value here has passed validation; nodes are already hostlist-expanded, in rank order.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::outcome::FailureClass;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The file this came from (as given on the command line).
    pub path: PathBuf,
    pub ssh: SshSettings,
    /// One entry per host after hostlist expansion, in rank order (file order, then expansion order).
    pub nodes: Vec<Node>,
    pub job: Job,
    /// `[env]`: exported on every node.
    pub env: BTreeMap<String, String>,
    pub rendezvous: Rendezvous,
    pub logs: Logs,
    pub restart: Restart,
    /// `[container]`: run each node's launcher in a container.
    pub container: Option<Container>,
    /// `[notify]`: a command run on the launching machine at a run's notable events.
    pub notify: Option<Notify>,
    /// `[transport]` (or `--slurm`): how herd reaches the nodes.
    pub transport: TransportSettings,
}

/// How herd reaches the nodes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TransportSettings {
    /// An SSH connection per node (`[ssh]`), or this machine for `localhost`.
    #[default]
    Ssh,
    /// Inside a Slurm allocation: each node's agent is a job step, started with `srun`.
    Slurm(SlurmSettings),
}

/// `[transport] kind = "slurm"`: the allocation, from the environment, and extra `srun`
/// arguments for every step (e.g. `--gpus-per-node=8`, where the site's steps get no GPUs
/// unless asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmSettings {
    /// `SLURM_JOB_ID` of the allocation herd runs in.
    pub job_id: String,
    pub srun_args: Vec<String>,
    /// `steps = "per-node"`: each node's agent (and each probe) a step of its own, for a site
    /// where the nodes cannot open a connection back to the launch host (see
    /// docs/design/slurm-step.md). By default, one step for the fleet.
    pub per_node_steps: bool,
}

/// `[notify]`: `command` runs (`sh -c`) on the launching machine at `attempt_failed`,
/// `restart_scheduled` and `run_finished`, with the event's JSON on stdin (see `notify`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notify {
    pub command: String,
    /// Killed after this long; a warning, never the run's failure. Also the longest herd
    /// waits for the hooks left once the run is over.
    pub timeout: Duration,
}

/// `notify.timeout` when not given.
pub const DEFAULT_NOTIFY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshSettings {
    pub user: Option<String>,
    pub port: Option<u16>,
    /// As written (a leading `~/` is expanded by the transport, not here).
    pub identity_file: Option<String>,
    pub known_hosts: KnownHostsPolicy,
    /// Optional known_hosts file used instead of the user's (`UserKnownHostsFile`).
    pub known_hosts_file: Option<String>,
    pub connect_timeout: Duration,
    /// How long a node's login shell may take to start the agent (shell init: conda, pyenv,
    /// modules, a cold NFS home) before the node counts as lost.
    pub login_timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnownHostsPolicy {
    Strict,
    AcceptNew,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub host: String,
    /// Address other nodes use to reach this one (MASTER_ADDR when it is master).
    pub addr: Option<String>,
    /// Per-node override of `job.nproc_per_node`.
    pub nproc: Option<u32>,
    pub user: Option<String>,
    pub port: Option<u16>,
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LauncherKind {
    Torchrun,
    Deepspeed,
    Command,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub launcher: LauncherKind,
    pub script: String,
    pub args: Vec<String>,
    pub module: bool,
    /// `None`: the launching shell's cwd (resolved by the plan, not here).
    pub workdir: Option<String>,
    pub nproc_per_node: u32,
    pub setup: Option<String>,
    pub launcher_args: Vec<String>,
    /// Names or globs (`HF_*`) copied from the launching environment.
    pub forward_env: Vec<String>,
    /// Interpreter used for `module = true` and the deepspeed launcher, as given; see
    /// [`Job::python`] for the one in effect.
    pub python: Option<String>,
    /// What the ranks compute on: GPUs (the default) or the CPU (gloo); `herd doctor` checks
    /// for GPUs only in the first case.
    pub device: Device,
    /// `job.nnodes`: how many of the nodes the job runs on (`None`: all). The first ones in
    /// file order that are not quarantined are active; the rest are spares.
    pub nnodes: Option<usize>,
}

impl Job {
    /// The interpreter in effect: `job.python`, or `python3`.
    pub fn python(&self) -> &str {
        self.python.as_deref().unwrap_or(super::DEFAULT_PYTHON)
    }

    /// Whether the nodes need torch: for the torch launchers, and for a `command` job only
    /// when it names its interpreter (`job.python`). One rule for `herd doctor` and the
    /// preflight of `herd run`.
    pub fn uses_torch(&self) -> bool {
        self.launcher != LauncherKind::Command || self.python.is_some()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cuda,
    Cpu,
}

/// `[container]`: the image each node's launcher runs in, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub image: String,
    pub runtime: ContainerRuntime,
    /// Extra `run` arguments, placed after herd's own flags and before the image.
    pub args: Vec<String>,
    /// `src:dst[:options]` bind mounts or volumes, each passed as `-v`.
    pub mounts: Vec<String>,
    /// `--shm-size`, e.g. "8g".
    pub shm_size: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerRuntime {
    Docker,
    Podman,
}

impl ContainerRuntime {
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerRuntime::Docker => "docker",
            ContainerRuntime::Podman => "podman",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortSpec {
    Auto,
    Fixed(u16),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendezvous {
    /// Host name of the master node; `None`: rank 0.
    pub master: Option<String>,
    pub port: PortSpec,
    /// Inclusive range used by `port = "auto"`.
    pub port_range: (u16, u16),
    pub interface: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logs {
    pub dir: PathBuf,
    /// The ranks whose lines reach the terminal (`None`: every rank); the files keep all.
    pub console: Option<super::RankList>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restart {
    pub max_restarts: u32,
    pub on: Vec<FailureClass>,
    pub backoff: Duration,
    pub backoff_max: Duration,
    pub grace_period: Duration,
    pub hang_timeout: Option<Duration>,
    /// Every rank still this long (no CPU, no byte read or written: see
    /// `supervisor::straggler`) is a hang; `None`: off (`"off"`).
    pub stall_timeout: Option<Duration>,
    pub progress_pattern: Option<String>,
    pub node_wait: Duration,
    pub heartbeat_timeout: Duration,
    pub rules: Vec<RuleSpec>,
    /// `restart.resume_args`: appended to the script's arguments on every attempt after the
    /// first; `{latest:GLOB}` in one becomes the newest match on the master (see
    /// `LATEST`).
    pub resume_args: Vec<String>,
    /// `restart.min_nodes`: with no spare left, a restart may go on without a blamed node,
    /// down to this many (`None`: never with fewer nodes than it started).
    pub min_nodes: Option<usize>,
    /// `restart.on_straggler`: what becomes of a straggler's node.
    pub on_straggler: OnStraggler,
    /// `restart.checkpoint_signal`: what every rank gets when the run must stop for a time
    /// limit or a preemption (SIGUSR1 or SIGTERM to herd), so that it writes a checkpoint.
    pub checkpoint_signal: CheckpointSignal,
    /// `restart.checkpoint_grace`: how long the ranks have, after it, to exit on their own.
    pub checkpoint_grace: Duration,
}

/// A signal a rank may be sent to checkpoint: its name without `SIG` and its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointSignal {
    pub name: &'static str,
    pub number: i32,
}

impl CheckpointSignal {
    /// The signals a training script may handle to checkpoint (Linux's numbers).
    pub const ALL: [CheckpointSignal; 6] = [
        CheckpointSignal { name: "USR1", number: 10 },
        CheckpointSignal { name: "USR2", number: 12 },
        CheckpointSignal { name: "TERM", number: 15 },
        CheckpointSignal { name: "INT", number: 2 },
        CheckpointSignal { name: "HUP", number: 1 },
        CheckpointSignal { name: "CONT", number: 18 },
    ];

    /// `USR1`, `SIGUSR1` or `usr1`.
    pub fn parse(s: &str) -> Option<CheckpointSignal> {
        let upper = s.to_ascii_uppercase();
        let name = upper.strip_prefix("SIG").unwrap_or(&upper);
        Self::ALL.into_iter().find(|c| c.name == name)
    }
}

impl Default for CheckpointSignal {
    fn default() -> Self {
        Self::ALL[0]
    }
}

/// `restart.on_straggler`: what a straggler named in an attempt (see
/// `supervisor::straggler`) does to its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnStraggler {
    /// Named (stderr, the board, events, `summary.json`), nothing more.
    #[default]
    Report,
    /// Also blamed when the attempt fails and is restarted: quarantined, and replaced by a
    /// spare (or dropped down to `restart.min_nodes`). No attempt is restarted for it alone.
    Replace,
}

impl OnStraggler {
    pub const ALL: [OnStraggler; 2] = [OnStraggler::Report, OnStraggler::Replace];

    pub fn as_str(self) -> &'static str {
        match self {
            OnStraggler::Report => "report",
            OnStraggler::Replace => "replace",
        }
    }

    pub fn parse(s: &str) -> Option<OnStraggler> {
        OnStraggler::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

/// A user rule from `[[restart.rules]]`: a regex over log lines and the class it implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSpec {
    pub pattern: String,
    pub class: FailureClass,
    /// `blame = "node"`: a line matching it blames its node (hardware), which is quarantined
    /// when a spare or `restart.min_nodes` lets the run go on without it.
    pub blame: bool,
}

/// `job.python` when not given.
pub const DEFAULT_PYTHON: &str = "python3";
/// `logs.dir` when not given.
pub const DEFAULT_LOGS_DIR: &str = "herd-logs";
/// `rendezvous.port_range` when not given.
pub const DEFAULT_PORT_RANGE: (u16, u16) = (20000, 40000);
/// `container.shm_size` when not given.
pub const DEFAULT_SHM_SIZE: &str = "8g";
/// `ssh.login_timeout` when not given: generous, since a shared home's shell init can take a
/// minute on a cold cluster; a login that is stuck is still found.
pub const DEFAULT_LOGIN_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// `ssh.connect_timeout` when not given.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// `restart.on` when not given.
pub const DEFAULT_RESTART_ON: [FailureClass; 5] =
    [FailureClass::Comm, FailureClass::NodeLost, FailureClass::Hang, FailureClass::Port, FailureClass::Crash];

impl Default for SshSettings {
    fn default() -> Self {
        SshSettings {
            user: None,
            port: None,
            identity_file: None,
            known_hosts: KnownHostsPolicy::Strict,
            known_hosts_file: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            login_timeout: DEFAULT_LOGIN_TIMEOUT,
        }
    }
}

impl Default for Rendezvous {
    fn default() -> Self {
        Rendezvous { master: None, port: PortSpec::Auto, port_range: DEFAULT_PORT_RANGE, interface: None }
    }
}

impl Default for Logs {
    fn default() -> Self {
        Logs { dir: PathBuf::from(DEFAULT_LOGS_DIR), console: None }
    }
}

/// `restart.stall_timeout`'s default: a stuck job is found within 2 minutes, and a job whose
/// every rank waits on nothing at all for 90 s is rare (one that writes a checkpoint, reads
/// data or computes is not still).
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(90);

impl Default for Restart {
    fn default() -> Self {
        Restart {
            max_restarts: 3,
            on: DEFAULT_RESTART_ON.to_vec(),
            backoff: Duration::from_secs(10),
            backoff_max: Duration::from_secs(5 * 60),
            grace_period: Duration::from_secs(10),
            hang_timeout: None,
            stall_timeout: Some(DEFAULT_STALL_TIMEOUT),
            progress_pattern: None,
            node_wait: Duration::from_secs(5 * 60),
            heartbeat_timeout: Duration::from_secs(15),
            rules: Vec::new(),
            resume_args: Vec::new(),
            min_nodes: None,
            on_straggler: OnStraggler::Report,
            checkpoint_signal: CheckpointSignal::default(),
            checkpoint_grace: Duration::from_secs(60),
        }
    }
}

impl KnownHostsPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            KnownHostsPolicy::Strict => "strict",
            KnownHostsPolicy::AcceptNew => "accept-new",
        }
    }

    pub const ALL: [KnownHostsPolicy; 2] = [KnownHostsPolicy::Strict, KnownHostsPolicy::AcceptNew];

    pub fn parse(s: &str) -> Option<KnownHostsPolicy> {
        KnownHostsPolicy::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

impl LauncherKind {
    pub const ALL: [LauncherKind; 3] =
        [LauncherKind::Torchrun, LauncherKind::Deepspeed, LauncherKind::Command];

    pub fn as_str(self) -> &'static str {
        match self {
            LauncherKind::Torchrun => "torchrun",
            LauncherKind::Deepspeed => "deepspeed",
            LauncherKind::Command => "command",
        }
    }

    pub fn parse(s: &str) -> Option<LauncherKind> {
        LauncherKind::ALL.into_iter().find(|l| l.as_str() == s)
    }
}
