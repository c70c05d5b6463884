//! The launch plan: everything `herd run` will do, resolved from the config and the launching
//! environment into one plain value. Pure, deterministic, printable and diffable
//! (`herd plan`); everything after it only executes it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use regex::Regex;
use serde::Serialize;

use crate::classify::RuleTable;
use crate::config::{
    self, Config, Device, KnownHostsPolicy, LauncherKind, PortSpec, Restart, TransportSettings,
};
use crate::container::{self, ContainerPlan};
use crate::launcher::{self, NodeLaunch};
use crate::marker::{self, Marker};
use crate::policy;
use crate::remote;
use crate::roster::{self, Roster};

/// What the plan takes from outside the config file.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PlanInputs {
    /// The launching shell's cwd: the workdir when the config gives none.
    pub cwd: String,
    /// The launching environment, for `forward_env`.
    pub env: BTreeMap<String, String>,
    /// The config file's canonical path (symlinks, `.` and `..` resolved), which identifies
    /// it across runs. `None` (tests): `cwd` joined with the path as given.
    pub config_file: Option<PathBuf>,
    /// A restart's resume (see `LaunchPlan::resumed`).
    pub resume: Option<Resume>,
}

/// The launching environment's values stay out of `{:?}`: its names only.
impl std::fmt::Debug for PlanInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanInputs")
            .field("cwd", &self.cwd)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("config_file", &self.config_file)
            .field("resume", &self.resume)
            .finish()
    }
}

/// What a restart resumes from: the `restart.resume_args` it appends to the script's
/// arguments, resolved, and the checkpoint found, exported as `HERD_RESUME_FROM`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resume {
    pub args: Vec<String>,
    pub from: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchPlan {
    pub config_path: PathBuf,
    pub launcher: LauncherKind,
    pub world_size: u32,
    pub master: Master,
    pub workdir: String,
    pub setup: Option<String>,
    pub nodes: Vec<NodePlan>,
    pub logs_dir: PathBuf,
    /// The ranks whose lines reach the terminal (`None`: all; see `[logs] console`).
    pub console: Option<crate::config::RankList>,
    pub restart: Restart,
    /// `ssh.login_timeout`: how long a node's login shell may take to start the agent.
    pub login_timeout: Duration,
    /// `forward_env` names (not globs) that are not set in the launching environment.
    pub missing_forwarded: Vec<String>,
    /// Identifies the config file across runs; the first part of every HERD_MARKER.
    pub config_key: String,
    pub device: Device,
    /// `rendezvous.interface`: a name, or "auto" (each node's route to the master).
    pub interface: Option<String>,
    pub python: String,
    /// Whether the nodes need torch (see `Job::uses_torch`): what the torch checks look at.
    pub uses_torch: bool,
    /// What the launcher line starts with (see `launcher::program`): the preflight checks
    /// that it is on `PATH`.
    pub launcher_program: String,
    /// `[container]`: the launcher runs in it on every node.
    pub container: Option<ContainerPlan>,
    /// The timings derived from `[restart]` and `[ssh]`, once.
    pub timing: Timing,
    /// `[restart]`'s patterns, compiled once.
    pub patterns: Patterns,
    /// Which of the config's nodes are active (these `nodes`), spares and quarantined.
    pub roster: Roster,
    /// The resume this plan's attempt makes, if any.
    pub resume: Option<Resume>,
    /// `[notify]`.
    pub notify: Option<config::Notify>,
    /// What the plan was placed from, to place the next attempt's on another roster.
    basis: Arc<Basis>,
}

/// `[restart]`'s patterns, compiled (the config checked that they compile). Derived from
/// `LaunchPlan::restart`: two plans with equal `restart` have equal patterns.
#[derive(Clone)]
pub struct Patterns {
    /// The failure rules, the user's before the built-in ones.
    pub rules: Arc<RuleTable>,
    /// `restart.progress_pattern`: only lines matching it count as progress.
    pub progress: Option<Arc<Regex>>,
    /// The `crash` rules as one pattern over raw bytes (see `RuleTable::crash_pattern`).
    pub crash: Option<Arc<regex::bytes::Regex>>,
}

impl Patterns {
    fn new(restart: &Restart) -> Patterns {
        let rules = RuleTable::new(&restart.rules);
        Patterns {
            progress: restart.progress_pattern.as_deref().and_then(|p| Regex::new(p).ok()).map(Arc::new),
            crash: rules.crash_pattern().map(Arc::new),
            rules: Arc::new(rules),
        }
    }
}

/// Equal when they match the same: the same rules, and the same progress and crash patterns.
impl PartialEq for Patterns {
    fn eq(&self, other: &Patterns) -> bool {
        let source = |re: &Option<Arc<Regex>>| re.as_ref().map(|re| re.as_str().to_string());
        let crash = |re: &Option<Arc<regex::bytes::Regex>>| re.as_ref().map(|re| re.as_str().to_string());
        self.rules == other.rules
            && source(&self.progress) == source(&other.progress)
            && crash(&self.crash) == crash(&other.crash)
    }
}

impl Eq for Patterns {}

impl std::fmt::Debug for Patterns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Patterns(from restart)")
    }
}

/// What herd's timeouts mean for its connections and agents (see `policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How herd's SSH masters behave: keepalives, idle expiry.
    pub connect: policy::ConnectOptions,
    /// The agents' grace between SIGTERM and SIGKILL, in whole seconds.
    pub grace_secs: u64,
    /// Seconds between the agents' heartbeats (and herd's beats to them).
    pub heartbeat_secs: u64,
    /// Seconds of herd's silence after which an agent ends its job (`policy::fence`).
    pub fence_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Master {
    pub node_rank: usize,
    pub host: String,
    pub addr: String,
    pub port: PortSpec,
    pub port_range: (u16, u16),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePlan {
    pub node_rank: usize,
    pub host: String,
    /// How other nodes reach it.
    pub addr: String,
    pub nproc: u32,
    /// Global rank of its local rank 0.
    pub first_global_rank: u32,
    pub transport: Transport,
    pub env: BTreeMap<String, EnvValue>,
    /// The launcher's command line, as the node's shell runs it.
    pub command: String,
    /// With `[container]`: the runtime's command line that runs `setup` and `command` in the
    /// container; the node's shell runs it instead of `command`.
    pub container_command: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// This machine: no SSH.
    Local,
    Ssh(SshTarget),
    /// A job step of the Slurm allocation herd runs in, on one of its nodes.
    Slurm(SlurmTarget),
}

/// One node of the allocation, as `srun` reaches it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlurmTarget {
    /// Slurm's name for the node (`--nodelist`).
    pub node: String,
    pub job_id: String,
    /// `[transport] srun_args`, before herd's own.
    pub srun_args: Vec<String>,
    /// What herd's steps of this config are called (`srun --job-name`, then this herd's pid):
    /// how `herd kill` and teardown find them in `squeue --steps`.
    pub step_name: String,
    /// A step of its own for each node's agent and probe (`transport.steps = "per-node"`),
    /// not one for the fleet.
    pub per_node_steps: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SshTarget {
    pub host: String,
    pub user: Option<String>,
    pub port: Option<u16>,
    pub identity_file: Option<String>,
    #[serde(serialize_with = "ser_known_hosts")]
    pub known_hosts: KnownHostsPolicy,
    pub known_hosts_file: Option<String>,
    #[serde(serialize_with = "ser_duration")]
    pub connect_timeout: Duration,
}

/// An exported value, or a placeholder for one known only at launch time.
#[derive(Clone, PartialEq, Eq)]
pub enum EnvValue {
    Value(String),
    /// Copied from the launching environment; never printed.
    Secret(String),
    MasterPort,
    RunId,
    Attempt,
    /// The interface that routes to the master on this node, found when the run starts
    /// (`rendezvous.interface = "auto"`).
    AutoInterface,
    /// `HERD_MARKER`: `<config key>:<run id>:<attempt>:<node rank>`, which every job process
    /// inherits and by which the agent finds processes that left the job's process group. The
    /// attempt is in it so that an agent of an earlier attempt, left on a node that was cut
    /// off, can never stop the processes of a later one.
    Marker {
        config_key: String,
    },
    /// `HERD_CONTAINER`: the node's container name in this attempt (see `container::name`).
    ContainerName {
        config_key: String,
    },
    /// The NCCL flight recorder's dump prefix of this attempt (see `NCCL_DUMP_VAR`).
    NcclDump,
}

/// As derived, but a secret's value never shows (the plan's `{:?}` holds every node's env).
impl std::fmt::Debug for EnvValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EnvValue::Value(v) => f.debug_tuple("Value").field(v).finish(),
            EnvValue::Secret(_) => f.write_str("Secret(..)"),
            EnvValue::MasterPort => f.write_str("MasterPort"),
            EnvValue::RunId => f.write_str("RunId"),
            EnvValue::Attempt => f.write_str("Attempt"),
            EnvValue::AutoInterface => f.write_str("AutoInterface"),
            EnvValue::Marker { config_key } => {
                f.debug_struct("Marker").field("config_key", config_key).finish()
            }
            EnvValue::ContainerName { config_key } => {
                f.debug_struct("ContainerName").field("config_key", config_key).finish()
            }
            EnvValue::NcclDump => f.write_str("NcclDump"),
        }
    }
}

/// The values only known when an attempt starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptValues<'a> {
    pub run_id: &'a str,
    pub attempt: u32,
    pub master_port: u16,
    /// Per node rank, for `rendezvous.interface = "auto"`; empty otherwise.
    pub interfaces: &'a [String],
}

/// PyTorch's NCCL flight recorder, on for GPU jobs unless the user set these.
pub const NCCL_FLIGHT_RECORDER: [(&str, &str); 2] =
    [("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"), ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")];
/// Where the flight recorder writes: `<workdir>/herd-nccl/<run-id>/attempt-<k>/rank_<R>` on the
/// node (the workdir is usually on the shared filesystem).
pub const NCCL_DUMP_VAR: &str = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE";

/// `rendezvous.interface` value that asks herd to find each node's interface.
pub const AUTO_INTERFACE: &str = "auto";

/// Identifies a config file across runs (FNV-1a of its canonical path), so that leftovers of
/// runs of the same config can be told from other jobs', and `herd logs` finds its runs
/// whichever way the file is named (`c.toml`, `./c.toml`, `../dir/c.toml`, a symlink). The
/// path, not the content: editing the file keeps its runs and leftovers its own.
fn config_key(canonical: &std::path::Path) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canonical.as_os_str().as_encoded_bytes() {
        hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// The Slurm step name of herd's steps for the config with key `config_key`.
pub fn step_name(config_key: &str) -> String {
    format!("herd-{config_key}")
}

/// Hosts that run through the local transport.
pub fn is_local_host(host: &str) -> bool {
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}

/// The plan of a run on every node of the config (or the first `job.nnodes`, the rest
/// spares), none quarantined.
pub fn build(config: &Config, inputs: &PlanInputs) -> LaunchPlan {
    let roster = initial_roster(config, &BTreeMap::new()).expect("nobody is quarantined");
    build_with(config, inputs, roster)
}

/// The roster a run of `config` starts with, given the quarantined hosts (host -> reason).
pub fn initial_roster(
    config: &Config,
    quarantined: &BTreeMap<String, String>,
) -> Result<Roster, roster::TooFewNodes> {
    Roster::new(
        config.nodes.iter().map(|n| n.host.clone()).collect(),
        config.job.nnodes,
        config.restart.min_nodes,
        config.rendezvous.master.as_deref(),
        quarantined,
    )
}

/// The plan of a run on the nodes `roster` makes active, in its node rank order. The
/// launching environment is read here, for `forward_env`, and not kept.
pub fn build_with(config: &Config, inputs: &PlanInputs, roster: Roster) -> LaunchPlan {
    let (forwarded, missing_forwarded) = forwarded_env(&config.job.forward_env, &inputs.env);
    let identity =
        inputs.config_file.clone().unwrap_or_else(|| std::path::Path::new(&inputs.cwd).join(&config.path));
    let config_key = config_key(&identity);
    let basis = Basis {
        nodes: config.nodes.iter().map(|node| Candidate::new(config, node, &config_key)).collect(),
        job: config.job.clone(),
        env: config.env.clone(),
        forwarded,
        port: config.rendezvous.port,
        port_range: config.rendezvous.port_range,
    };
    let job = &config.job;
    let site = Site {
        config_key,
        workdir: job.workdir.clone().unwrap_or_else(|| inputs.cwd.clone()),
        container: config.container.as_ref().map(|c| ContainerPlan::new(c, job.device)),
        interface: config.rendezvous.interface.clone(),
    };
    let (master, nodes) = basis.place(&site, &roster, inputs.resume.as_ref());
    LaunchPlan {
        config_path: config.path.clone(),
        launcher: job.launcher,
        world_size: nodes.iter().map(|n| n.nproc).sum(),
        master,
        workdir: site.workdir,
        setup: job.setup.clone(),
        nodes,
        logs_dir: config.logs.dir.clone(),
        console: config.logs.console.clone(),
        restart: config.restart.clone(),
        login_timeout: config.ssh.login_timeout,
        patterns: Patterns::new(&config.restart),
        timing: Timing {
            connect: policy::connect_options(&config.restart, config.ssh.login_timeout),
            grace_secs: policy::grace_secs(config.restart.grace_period),
            heartbeat_secs: policy::heartbeat_interval(config.restart.heartbeat_timeout).as_secs(),
            fence_secs: policy::fence(config.restart.heartbeat_timeout).as_secs(),
        },
        missing_forwarded,
        config_key: site.config_key,
        device: job.device,
        interface: site.interface,
        python: job.python().to_string(),
        uses_torch: job.uses_torch(),
        launcher_program: launcher::program(job).to_string(),
        container: site.container,
        roster,
        resume: inputs.resume.clone(),
        notify: config.notify.clone(),
        basis: Arc::new(basis),
    }
}

/// What every plan of a run is placed from, resolved once from the config and the launching
/// environment: each of the config's nodes, the job, and the env that reaches the nodes, the
/// forwarded values included (nothing else of the launching environment is kept). A later
/// attempt's plan, on another roster or resuming, is placed from it again.
#[derive(Clone, PartialEq, Eq)]
struct Basis {
    /// Every node of the config, in its order (a roster's indices point into it).
    nodes: Vec<Candidate>,
    /// `[job]`, without a resume's arguments.
    job: config::Job,
    /// `[env]`: exported on every node.
    env: BTreeMap<String, String>,
    /// `forward_env`'s values, sorted by name: secrets.
    forwarded: Vec<(String, String)>,
    port: PortSpec,
    port_range: (u16, u16),
}

/// Secrets stay out of `{:?}`: the forwarded values are shown by name.
impl std::fmt::Debug for Basis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let forwarded: Vec<&str> = self.forwarded.iter().map(|(k, _)| k.as_str()).collect();
        write!(f, "Basis({} nodes, forwarded {forwarded:?})", self.nodes.len())
    }
}

/// One node of the config, as any plan may place it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Candidate {
    host: String,
    /// How other nodes reach it.
    addr: String,
    nproc: Option<u32>,
    /// Its own `env`, over `[env]`.
    env: BTreeMap<String, String>,
    transport: Transport,
}

impl Candidate {
    fn new(config: &Config, node: &config::Node, config_key: &str) -> Candidate {
        let transport = if let TransportSettings::Slurm(slurm) = &config.transport {
            Transport::Slurm(SlurmTarget {
                node: node.host.clone(),
                job_id: slurm.job_id.clone(),
                srun_args: slurm.srun_args.clone(),
                step_name: step_name(config_key),
                per_node_steps: slurm.per_node_steps,
            })
        } else if is_local_host(&node.host) {
            Transport::Local
        } else {
            Transport::Ssh(SshTarget {
                host: node.host.clone(),
                user: node.user.clone().or_else(|| config.ssh.user.clone()),
                port: node.port.or(config.ssh.port),
                identity_file: config.ssh.identity_file.clone(),
                known_hosts: config.ssh.known_hosts,
                known_hosts_file: config.ssh.known_hosts_file.clone(),
                connect_timeout: config.ssh.connect_timeout,
            })
        };
        Candidate {
            host: node.host.clone(),
            addr: node.addr.clone().unwrap_or_else(|| node.host.clone()),
            nproc: node.nproc,
            env: node.env.clone(),
            transport,
        }
    }
}

/// The plan's fields that every node's env and commands read.
struct Site {
    config_key: String,
    workdir: String,
    container: Option<ContainerPlan>,
    /// `rendezvous.interface`.
    interface: Option<String>,
}

/// The world of one placement: every active node's host and process count, in node rank
/// order, and the master's address.
struct World {
    hosts: Vec<(String, u32)>,
    size: u32,
    master_addr: String,
    master_port: PortSpec,
}

impl Basis {
    /// The master and every node's plan on the nodes `roster` makes active, resuming or not.
    fn place(&self, site: &Site, roster: &Roster, resume: Option<&Resume>) -> (Master, Vec<NodePlan>) {
        let mut resumed;
        let job = match resume {
            Some(r) => {
                resumed = self.job.clone();
                resumed.args.extend(r.args.iter().cloned());
                &resumed
            }
            None => &self.job,
        };
        let active: Vec<&Candidate> = roster.active.iter().map(|&i| &self.nodes[i]).collect();
        let hosts: Vec<(String, u32)> =
            active.iter().map(|n| (n.host.clone(), n.nproc.unwrap_or(job.nproc_per_node))).collect();
        let node = active[roster.master_rank];
        let master = Master {
            node_rank: roster.master_rank,
            host: node.host.clone(),
            addr: node.addr.clone(),
            port: self.port,
            port_range: self.port_range,
        };
        let world = World {
            size: hosts.iter().map(|h| h.1).sum(),
            hosts,
            master_addr: master.addr.clone(),
            master_port: master.port,
        };
        let mut first_global_rank = 0;
        let nodes = active
            .iter()
            .enumerate()
            .map(|(rank, node)| {
                let plan = self.node_plan(site, job, &world, (rank, node), resume, first_global_rank);
                first_global_rank += plan.nproc;
                plan
            })
            .collect();
        (master, nodes)
    }

    fn node_plan(
        &self,
        site: &Site,
        job: &config::Job,
        world: &World,
        (rank, node): (usize, &Candidate),
        resume: Option<&Resume>,
        first_global_rank: u32,
    ) -> NodePlan {
        let nproc = world.hosts[rank].1;
        let mut env = self.own_env(site, node);
        world_env(&mut env, site, world, rank, resume);
        let launch =
            NodeLaunch { node_rank: rank, nproc, master_addr: &world.master_addr, world: &world.hosts };
        let command = launcher::command_line(job, &launch);
        let container_command = site.container.as_ref().map(|c| {
            let run = remote::shell::under_mux(job.python(), &command, job.launcher != LauncherKind::Command);
            let inner = remote::shell::setup_and_exec(job.setup.as_deref(), &run);
            c.run_command(&site.workdir, env.keys().map(String::as_str), &inner)
        });
        NodePlan {
            node_rank: rank,
            host: node.host.clone(),
            addr: node.addr.clone(),
            nproc,
            first_global_rank,
            transport: node.transport.clone(),
            env,
            command,
            container_command,
        }
    }

    /// A node's env as the user has it: `[env]`, the node's own, the forwarded values, the
    /// interface, and the defaults herd adds unless they are set.
    fn own_env(&self, site: &Site, node: &Candidate) -> BTreeMap<String, EnvValue> {
        let mut env: BTreeMap<String, EnvValue> =
            self.env.iter().chain(&node.env).map(|(k, v)| (k.clone(), EnvValue::Value(v.clone()))).collect();
        for (k, v) in &self.forwarded {
            env.insert(k.clone(), EnvValue::Secret(v.clone()));
        }
        let interface = match site.interface.as_deref() {
            Some(AUTO_INTERFACE) => Some(EnvValue::AutoInterface),
            Some(ifname) => Some(EnvValue::Value(ifname.to_string())),
            None => None,
        };
        for name in ["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"] {
            if let Some(value) = &interface {
                env.insert(name.to_string(), value.clone());
            }
        }
        env.entry("TORCH_NCCL_ASYNC_ERROR_HANDLING".into()).or_insert(EnvValue::Value("1".into()));
        if self.job.device == Device::Cuda {
            // PyTorch's NCCL flight recorder: on a collective's timeout, each rank dumps its
            // last collectives, the evidence of who did not take part. Unless set.
            for (k, v) in NCCL_FLIGHT_RECORDER {
                env.entry(k.to_string()).or_insert(EnvValue::Value(v.to_string()));
            }
            env.entry(NCCL_DUMP_VAR.into()).or_insert(EnvValue::NcclDump);
        }
        env
    }
}

/// What herd sets on every node, over the user's env: the world, the node's place in it,
/// the run's and attempt's ids, the resume and the marker.
fn world_env(
    env: &mut BTreeMap<String, EnvValue>,
    site: &Site,
    world: &World,
    rank: usize,
    resume: Option<&Resume>,
) {
    let mut set = |k: &str, v: EnvValue| {
        env.insert(k.to_string(), v);
    };
    let value = |v: String| EnvValue::Value(v);
    set("PYTHONUNBUFFERED", value("1".into()));
    set("MASTER_ADDR", value(world.master_addr.clone()));
    set(
        "MASTER_PORT",
        match world.master_port {
            PortSpec::Fixed(p) => value(p.to_string()),
            PortSpec::Auto => EnvValue::MasterPort,
        },
    );
    set("NNODES", value(world.hosts.len().to_string()));
    set("NODE_RANK", value(rank.to_string()));
    set("NPROC_PER_NODE", value(world.hosts[rank].1.to_string()));
    set("WORLD_SIZE", value(world.size.to_string()));
    set("HERD_NODE", value(world.hosts[rank].0.clone()));
    set("HERD_RUN_ID", EnvValue::RunId);
    set("HERD_ATTEMPT", EnvValue::Attempt);
    if let Some(from) = resume.and_then(|r| r.from.as_ref()) {
        set("HERD_RESUME_FROM", value(from.clone()));
    }
    set("TORCHELASTIC_RESTART_COUNT", EnvValue::Attempt);
    set(marker::RUN_VAR, EnvValue::Marker { config_key: site.config_key.clone() });
    if site.container.is_some() {
        set(container::NAME_VAR, EnvValue::ContainerName { config_key: site.config_key.clone() });
    }
}

/// Pick the launching environment's variables named by `forward_env` (exact names or a
/// trailing-`*` prefix). Returns them sorted, and the exact names that were not set.
fn forwarded_env(
    patterns: &[String],
    env: &BTreeMap<String, String>,
) -> (Vec<(String, String)>, Vec<String>) {
    let mut picked = BTreeMap::new();
    let mut missing = Vec::new();
    for pattern in patterns {
        match pattern.strip_suffix('*') {
            Some(prefix) => {
                for (k, v) in env.range(prefix.to_string()..).take_while(|(k, _)| k.starts_with(prefix)) {
                    if config::is_env_name(k) {
                        picked.insert(k.clone(), v.clone());
                    }
                }
            }
            None => match env.get(pattern) {
                Some(v) => {
                    picked.insert(pattern.clone(), v.clone());
                }
                None => missing.push(pattern.clone()),
            },
        }
    }
    (picked.into_iter().collect(), missing)
}

impl LaunchPlan {
    pub fn nnodes(&self) -> usize {
        self.nodes.len()
    }

    /// How to reach `host`, any node of the config's (a spare, a quarantined one too).
    pub fn transport_of(&self, host: &str) -> Option<Transport> {
        self.basis.nodes.iter().find(|n| n.host == host).map(|n| n.transport.clone())
    }

    /// The same run's plan on another roster (after a node was quarantined): node ranks,
    /// world size, master and every command line follow it. What the command line changed
    /// after the build (the console ranks) and the resume are kept.
    pub fn with_roster(&self, roster: Roster) -> LaunchPlan {
        self.rebuilt(roster, self.resume.clone())
    }

    /// The same run's plan resuming from a checkpoint (`restart.resume_args`, resolved), or
    /// (`None`) from scratch.
    pub fn resumed(&self, resume: Option<Resume>) -> LaunchPlan {
        self.rebuilt(self.roster.clone(), resume)
    }

    fn rebuilt(&self, roster: Roster, resume: Option<Resume>) -> LaunchPlan {
        let site = Site {
            config_key: self.config_key.clone(),
            workdir: self.workdir.clone(),
            container: self.container.clone(),
            interface: self.interface.clone(),
        };
        let (master, nodes) = self.basis.place(&site, &roster, resume.as_ref());
        let world_size = nodes.iter().map(|n| n.nproc).sum();
        LaunchPlan { master, nodes, world_size, roster, resume, ..self.clone() }
    }

    /// The start of the HERD_MARKER entry of every process of this config's runs, or of one
    /// run: what a sweep for leftovers matches.
    /// The agent of a job (a shell snippet) whose processes carry `marker` (`NAME=VALUE`),
    /// with the plan's timings; the rest as the caller sets it.
    pub fn agent(&self, marker: String, job: String) -> remote::agent::AgentInvocation {
        remote::agent::AgentInvocation {
            grace_secs: self.timing.grace_secs,
            heartbeat_secs: self.timing.heartbeat_secs,
            fence_secs: Some(self.timing.fence_secs),
            marker,
            job: job.into(),
            cleanup: None,
            presweep: None,
            report_ports: false,
            probe: None,
        }
    }

    /// The agent's `NAME=VALUE` marker line for one node in one attempt.
    pub fn marker(&self, node: &NodePlan, values: &AttemptValues<'_>) -> String {
        node_marker(&self.config_key, node.node_rank, values).entry()
    }

    /// The job snippet each node's agent runs. With `[container]`, `setup` runs in the
    /// container (see `container`), only `cd WORKDIR` outside.
    pub fn job_snippet(&self, node: &NodePlan) -> String {
        match &node.container_command {
            Some(command) => remote::shell::job_snippet(&self.workdir, None, command),
            None => remote::shell::job_snippet(
                &self.workdir,
                self.setup.as_deref(),
                &self.run_line(&node.command),
            ),
        }
    }

    /// A node's launcher line as it runs: under the output multiplexer (see
    /// `remote::shell::under_mux`), which a torch launcher's ranks need.
    fn run_line(&self, command: &str) -> String {
        remote::shell::under_mux(&self.python, command, self.launcher != LauncherKind::Command)
    }

    /// Whether a healthy node's launcher may be ended once its workers are gone (see
    /// `supervisor::node::NodeCommand::Stop`): torchrun and DeepSpeed's launcher have nothing to save
    /// then. A `command` job is the user's own and keeps its grace, and a container's runtime
    /// client leads a job whose workers herd does not see.
    pub fn quick_launcher_exit(&self) -> bool {
        self.launcher != LauncherKind::Command && self.container.is_none()
    }

    /// With `[container]`: what the node's agent runs after the job is gone, to remove the
    /// attempt's container.
    pub fn container_cleanup(&self, node: &NodePlan, values: &AttemptValues<'_>) -> Option<String> {
        let name = container::name(&self.config_key, values.run_id, values.attempt, node.node_rank);
        // The agent runs it with the job's env, the engine's settings among them.
        Some(self.container.as_ref()?.remove_command(&name))
    }

    /// `command` (a sweep: what herd runs on the node before the job's env is there), with
    /// `[container]`, after the node's own settings of the engine's client (see
    /// `ContainerPlan::with_client_env`).
    pub fn with_engine_env(&self, node: &NodePlan, command: String) -> String {
        let Some(c) = &self.container else { return command };
        let plain = node.env.iter().filter_map(|(k, v)| match v {
            EnvValue::Value(v) => Some((k.as_str(), v.as_str())),
            _ => None,
        });
        c.with_client_env(plain, command)
    }

    /// With `[container]`: the doctor's trial on one node, a container started as the node's
    /// job would start it (herd's options, the mounts, the env's names, `setup`) that checks
    /// that the launcher and its `#!` interpreter are in it, and, for a torch launcher, the
    /// Python of herd's output multiplexer, and that the launcher's Python imports torch
    /// (`remote/container_trial.sh`, whose exit codes and last line the doctor reads).
    pub fn container_trial(&self, node: &NodePlan) -> Option<String> {
        // Never a pull, whatever `args` ask (the last --pull wins): the doctor looks at the
        // image the node has.
        let mut container = self.container.clone()?;
        container.args.push("--pull=never".into());
        let python = Some(self.python.as_str()).filter(|_| self.launcher != LauncherKind::Command);
        let script = remote::scripts::CONTAINER_TRIAL_SCRIPT;
        let check = ["sh", "-c", script, "herd-check", &self.launcher_program].into_iter().chain(python);
        let inner = remote::shell::setup_and_exec(self.setup.as_deref(), &remote::shell::command_line(check));
        Some(container.run_command(&self.workdir, node.env.keys().map(String::as_str), &inner))
    }
}

impl NodePlan {
    /// The env to export for one attempt, placeholders filled in.
    pub fn resolved_env(&self, values: &AttemptValues<'_>) -> Vec<(String, String)> {
        self.env
            .iter()
            .filter_map(|(k, v)| {
                let value = match v {
                    // Not found (the probe did not run or saw no route): left to torch.
                    EnvValue::AutoInterface => {
                        values.interfaces.get(self.node_rank).filter(|i| !i.is_empty())?.clone()
                    }
                    EnvValue::Value(s) | EnvValue::Secret(s) => s.clone(),
                    EnvValue::MasterPort => values.master_port.to_string(),
                    EnvValue::RunId => values.run_id.to_string(),
                    EnvValue::Attempt => values.attempt.to_string(),
                    EnvValue::Marker { config_key } => {
                        node_marker(config_key, self.node_rank, values).value()
                    }
                    EnvValue::ContainerName { config_key } => {
                        container::name(config_key, values.run_id, values.attempt, self.node_rank)
                    }
                    // Relative to the workdir, made absolute there (see `remote::shell::job_snippet`).
                    EnvValue::NcclDump => {
                        format!("{}/rank_", crate::nccl::dump_dir(values.run_id, values.attempt))
                    }
                };
                Some((k.clone(), value))
            })
            .collect()
    }

    /// The env block the agent reads from stdin for one attempt.
    pub fn env_block(&self, values: &AttemptValues<'_>) -> Vec<u8> {
        let env = self.resolved_env(values);
        remote::shell::env_block(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    /// Whether its ranks dump the NCCL flight recorder where herd collects it (a GPU job, the
    /// dump path not the user's own).
    pub fn dumps_nccl(&self) -> bool {
        matches!(self.env.get(NCCL_DUMP_VAR), Some(EnvValue::NcclDump))
    }

    pub fn global_ranks(&self) -> std::ops::Range<u32> {
        self.first_global_rank..self.first_global_rank + self.nproc
    }
}

/// The marker of one node's processes in one attempt.
fn node_marker<'a>(config_key: &'a str, node_rank: usize, values: &AttemptValues<'a>) -> Marker<'a> {
    Marker::config(config_key).run(values.run_id).attempt(values.attempt).node(node_rank)
}

impl EnvValue {
    /// How the plan shows it: secrets masked, launch-time values as placeholders.
    pub fn display(&self) -> &str {
        match self {
            EnvValue::Value(s) => s,
            EnvValue::Secret(_) => "<forwarded, hidden>",
            EnvValue::MasterPort => "<auto>",
            EnvValue::RunId => "<run-id>",
            EnvValue::Attempt => "<attempt>",
            EnvValue::AutoInterface => "<auto: the interface that routes to the master>",
            // The key hashes the config's absolute path: left out, so plans diff cleanly
            // across checkouts.
            EnvValue::Marker { .. } => "<config-key>:<run-id>:<attempt>:<node-rank>",
            EnvValue::ContainerName { .. } => "herd-<config-key>-<run-id>-<attempt>-<node-rank>",
            EnvValue::NcclDump => "<workdir>/herd-nccl/<run-id>/attempt-<attempt>/rank_",
        }
    }
}

fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_duration(*d).to_string())
}

fn ser_known_hosts<S: serde::Serializer>(k: &KnownHostsPolicy, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(k.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn plan() -> LaunchPlan {
        let text = "[[nodes]]\nhost = \"n[1-2]\"\n[job]\nscript = \"t.py\"\n";
        let config = crate::config::parse(Path::new("c.toml"), text).unwrap();
        build(&config, &PlanInputs { cwd: "/w".into(), ..Default::default() })
    }

    #[test]
    fn gpu_jobs_get_the_nccl_flight_recorder_unless_they_set_it() {
        let values = AttemptValues { run_id: "r1", attempt: 2, master_port: 1, interfaces: &[] };
        let env = |text: &str| {
            let config = crate::config::parse(Path::new("c.toml"), text).unwrap();
            let p = build(&config, &PlanInputs { cwd: "/w".into(), ..Default::default() });
            p.nodes[0].resolved_env(&values).into_iter().collect::<BTreeMap<_, _>>()
        };
        let gpu = env("[[nodes]]\nhost = \"n1\"\n[job]\nscript = \"t.py\"\n");
        assert_eq!(gpu["TORCH_NCCL_TRACE_BUFFER_SIZE"], "2000");
        assert_eq!(gpu["TORCH_NCCL_DUMP_ON_TIMEOUT"], "1");
        assert_eq!(gpu[NCCL_DUMP_VAR], "herd-nccl/r1/attempt-2/rank_", "made absolute in the workdir");
        let own = env("[[nodes]]\nhost = \"n1\"\n[job]\nscript = \"t.py\"\n[env]\nTORCH_NCCL_TRACE_BUFFER_SIZE = \"0\"\n");
        assert_eq!(own["TORCH_NCCL_TRACE_BUFFER_SIZE"], "0", "the user's value is kept");
        let cpu = env("[[nodes]]\nhost = \"n1\"\n[job]\nscript = \"t.py\"\ndevice = \"cpu\"\n");
        assert!(!cpu.contains_key("TORCH_NCCL_DUMP_ON_TIMEOUT") && !cpu.contains_key(NCCL_DUMP_VAR));
        // herd collects the dumps only from where it put them.
        let collects = |text: &str| {
            let config = crate::config::parse(Path::new("c.toml"), text).unwrap();
            build(&config, &PlanInputs::default()).nodes[0].dumps_nccl()
        };
        assert!(collects("[[nodes]]\nhost = \"n1\"\n[job]\nscript = \"t.py\"\n"));
        assert!(!collects("[[nodes]]\nhost = \"n1\"\n[job]\nscript = \"t.py\"\ndevice = \"cpu\"\n"));
        let own = format!(
            "[[nodes]]\nhost = \"n1\"\n[job]\nscript = \"t.py\"\n[env]\n{NCCL_DUMP_VAR} = \"/tmp/d_\"\n"
        );
        assert!(!collects(&own));
    }

    #[test]
    fn plans_from_different_sources_or_patterns_are_not_equal() {
        let text = "[[nodes]]\nhost = \"n[1-2]\"\n[job]\nscript = \"t.py\"\n";
        let config = crate::config::parse(Path::new("c.toml"), text).unwrap();
        let inputs = PlanInputs { cwd: "/w".into(), ..Default::default() };
        assert_eq!(build(&config, &inputs), build(&config, &inputs), "the plan is deterministic");
        assert_eq!(plan().with_roster(plan().roster.clone()), plan());
        // The launching environment is read for `forward_env` and not kept: a variable
        // nothing forwards changes nothing, a forwarded one changes the plan and every plan
        // placed from it.
        let env = |k: &str| PlanInputs {
            env: BTreeMap::from([(k.to_string(), "1".to_string())]),
            ..inputs.clone()
        };
        assert_eq!(build(&config, &env("UNUSED")), build(&config, &inputs));
        let forwards =
            crate::config::parse(Path::new("c.toml"), &format!("{text}forward_env = [\"TOKEN\"]\n")).unwrap();
        let (with, without) = (build(&forwards, &env("TOKEN")), build(&forwards, &inputs));
        assert_ne!(with, without);
        assert_ne!(with.with_roster(with.roster.clone()), without.with_roster(without.roster.clone()));

        let restart = |extra: &str| {
            let config = crate::config::parse(Path::new("c.toml"), &format!("{text}[restart]\n{extra}"));
            config.unwrap().restart
        };
        let none = Patterns::new(&restart(""));
        assert_eq!(none, Patterns::new(&restart("")));
        assert_ne!(none, Patterns::new(&restart("progress_pattern = \"step \\\\d+\"\n")));
        let rule = |class: &str| {
            let rules = format!("[[restart.rules]]\npattern = \"disk full\"\nclass = \"{class}\"\n");
            Patterns::new(&restart(&rules))
        };
        assert_ne!(none, rule("user"));
        assert_ne!(rule("user"), rule("crash"), "a crash rule also changes the crash pattern");
    }

    #[test]
    fn secrets_stay_out_of_the_plans_debug_but_reach_the_nodes_of_every_attempt() {
        let text =
            "[[nodes]]\nhost = \"n[1-3]\"\n[job]\nscript = \"t.py\"\nnnodes = 2\nforward_env = [\"TOKEN\"]\n";
        let config = crate::config::parse(Path::new("c.toml"), text).unwrap();
        let env = BTreeMap::from([("TOKEN".to_string(), "s3cr3t-value".to_string())]);
        let plan = build(&config, &PlanInputs { cwd: "/w".into(), env, ..Default::default() });
        let debug = format!("{plan:?}");
        assert!(!debug.contains("s3cr3t-value") && debug.contains("TOKEN"), "{debug}");
        let inputs = PlanInputs {
            env: BTreeMap::from([("TOKEN".into(), "s3cr3t-value".into())]),
            ..Default::default()
        };
        assert!(!format!("{inputs:?}").contains("s3cr3t-value"));
        let values = AttemptValues { run_id: "r1", attempt: 1, master_port: 1, interfaces: &[] };
        let blamed = [roster::Blamed { node_rank: 0, reason: "lost".into() }];
        let later = plan.with_roster(plan.roster.without(&blamed).unwrap().0).resumed(None);
        assert!(!format!("{later:?}").contains("s3cr3t-value"));
        for node in &later.nodes {
            assert!(node.resolved_env(&values).contains(&("TOKEN".into(), "s3cr3t-value".into())));
        }
        assert_eq!(later.nodes.iter().map(|n| n.host.as_str()).collect::<Vec<_>>(), ["n3", "n2"]);
    }

    #[test]
    fn markers_name_config_run_attempt_and_node() {
        let p = plan();
        let values = |attempt| AttemptValues { run_id: "r1", attempt, master_port: 1, interfaces: &[] };
        let m0 = p.marker(&p.nodes[1], &values(0));
        let m1 = p.marker(&p.nodes[1], &values(1));
        // An agent left over from attempt 0 sweeps only its own attempt's processes.
        assert_ne!(m0, m1);
        assert_eq!(m0, format!("HERD_MARKER={}:r1:0:1", p.config_key));
        // Sweeps by run and by config still match every attempt and node.
        let config = Marker::config(&p.config_key);
        for m in [&m0, &m1, &p.marker(&p.nodes[0], &values(0))] {
            assert!(m.starts_with(&config.run("r1").entry()), "{m}");
            assert!(m.starts_with(&config.entry()), "{m}");
        }
        // The env every job process gets holds the same marker.
        let env = p.nodes[1].resolved_env(&values(0));
        assert!(env.iter().any(|(k, v)| format!("{k}={v}") == m0), "{env:?}");
    }
}
