//! The cluster config: `cluster.toml` -> validated [`Config`].
//!
//! [`load`] reads a file, [`parse`] validates text. Every problem is a [`ConfigError`]
//! that names the file and, when the problem is at one place in it, the line, column and source
//! line of the offending value.
//!
//! The nodes come from `[[nodes]]` or from `nodes_from` (a hostfile or the Slurm allocation);
//! what that reads outside the config file (the environment, the hostfile) goes through
//! [`LoadOptions`], so [`load_with`] and [`parse_with`] are testable without either.

mod error;
pub mod hostfile;
pub mod hostlist;
pub mod ranks;
mod raw;
pub mod select;
pub mod suggest;
mod types;

pub use error::{help_line, line_col, ConfigError, Location};
pub use hostlist::HostlistError;
pub use ranks::RankList;
pub use select::{select_nodes, SelectionError};
pub use types::*;

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

use raw::RawContainer;
use raw::{DurationText, EnvTable, RawConfig, RawJob, RawLogs, RawNode, RawRendezvous, RawRestart, RawSsh};

/// Environment variables herd sets on every node; they may not be set in `[env]` or `nodes.env`.
pub const RESERVED_ENV: [&str; 13] = [
    "MASTER_ADDR",
    "MASTER_PORT",
    "NNODES",
    "NODE_RANK",
    "NPROC_PER_NODE",
    "WORLD_SIZE",
    "HERD_RUN_ID",
    "HERD_ATTEMPT",
    "HERD_NODE",
    "RANK",
    "LOCAL_RANK",
    "TORCHELASTIC_RESTART_COUNT",
    "HERD_CONTAINER",
];

/// The most nodes a config may list, after hostlist expansion, whatever their source.
pub const MAX_NODES: usize = 10_000;
/// The most processes one node may run (`nproc`, `nproc_per_node`).
pub const MAX_NPROC: u32 = 1024;
/// The longest a duration may be; the timers and SSH options fed by the first group would
/// mean nothing past an hour.
const MAX_SHORT_DURATION: Duration = Duration::from_secs(3600);
const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);
const SHORT_DURATIONS: [&str; 3] =
    ["restart.heartbeat_timeout", "restart.grace_period", "ssh.connect_timeout"];

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

impl Default for Restart {
    fn default() -> Self {
        Restart {
            max_restarts: 3,
            on: DEFAULT_RESTART_ON.to_vec(),
            backoff: Duration::from_secs(10),
            backoff_max: Duration::from_secs(5 * 60),
            grace_period: Duration::from_secs(10),
            hang_timeout: None,
            progress_pattern: None,
            node_wait: Duration::from_secs(5 * 60),
            heartbeat_timeout: Duration::from_secs(15),
            rules: Vec::new(),
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

/// The Slurm variables that list an allocation's hosts, the first one set wins.
pub const SLURM_NODELIST_VARS: [&str; 2] = ["SLURM_JOB_NODELIST", "SLURM_NODELIST"];

/// What loading a config may read besides the config text: the environment and the files the
/// config names. [`LoadOptions::process`] is the real ones; tests pass closures.
#[derive(Clone, Copy)]
pub struct LoadOptions<'a> {
    /// Looks up an environment variable (`SLURM_JOB_NODELIST` for `nodes_from = "slurm"`).
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// Reads a file the config names (the hostfile of `nodes_from = "hostfile:PATH"`).
    pub read_file: &'a dyn Fn(&Path) -> std::io::Result<String>,
    /// Take the nodes from the Slurm allocation whatever the file says (`--slurm`): as
    /// `nodes_from = "slurm"`, with `[[nodes]]` and `nodes_from` in the file ignored.
    pub slurm: bool,
}

impl LoadOptions<'static> {
    /// The process environment and the file system.
    pub fn process() -> Self {
        LoadOptions { env: &process_env, read_file: &read_file, slurm: false }
    }
}

impl std::fmt::Debug for LoadOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadOptions").field("slurm", &self.slurm).finish_non_exhaustive()
    }
}

fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn read_file(path: &Path) -> std::io::Result<String> {
    std::fs::read_to_string(path)
}

/// Reads and validates a config file, with the process environment. A missing or unreadable
/// file is a [`ConfigError::Read`] naming the path.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    load_with(path, &LoadOptions::process())
}

/// [`load`], with the environment and file reads of `options`.
pub fn load_with(path: &Path, options: &LoadOptions<'_>) -> Result<Config, ConfigError> {
    let text =
        (options.read_file)(path).map_err(|error| ConfigError::Read { path: path.to_path_buf(), error })?;
    parse_with(path, &text, options)
}

/// Validates config text; `path` is used for `Config::path`, error messages and to resolve a
/// relative hostfile path. Reads the process environment and the hostfile only when
/// `nodes_from` asks for them.
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    parse_with(path, text, &LoadOptions::process())
}

/// [`parse`], with the environment and file reads of `options` (pure when they are).
pub fn parse_with(path: &Path, text: &str, options: &LoadOptions<'_>) -> Result<Config, ConfigError> {
    let cx = Cx { path, text, options };
    let raw: RawConfig = toml::from_str(text).map_err(|e| cx.toml_error(&e))?;
    cx.validate(raw)
}

/// Whether `host` may be used as a host or address: non-empty, no leading `-`, only
/// `[A-Za-z0-9._:%-]`. `Err` says why not.
pub fn check_host(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("a host may not be empty".to_string());
    }
    if host.starts_with('-') {
        return Err("a host may not start with '-'".to_string());
    }
    match host.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '%' | '-'))) {
        Some(c) => Err(format!("{c:?} is not allowed (only letters, digits and . _ : % - are)")),
        None => Ok(()),
    }
}

/// Whether `name` matches `^[A-Za-z_][A-Za-z0-9_]*$`.
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether `pattern` is an env name optionally followed by one `*` (`^[A-Za-z_][A-Za-z0-9_]*\*?$`).
pub fn is_env_pattern(pattern: &str) -> bool {
    is_env_name(pattern.strip_suffix('*').unwrap_or(pattern))
}

/// Validation context: the file name and text, for locating errors.
struct Cx<'a> {
    path: &'a Path,
    text: &'a str,
    options: &'a LoadOptions<'a>,
}

type Result<T, E = ConfigError> = std::result::Result<T, E>;

impl Cx<'_> {
    fn err(&self, span: Range<usize>, message: impl Into<String>) -> ConfigError {
        ConfigError::at(self.path, self.text, span, message)
    }

    fn toml_error(&self, e: &toml::de::Error) -> ConfigError {
        let message = polish_toml_message(e.message());
        let help = unknown_key_help(&message);
        match e.span() {
            Some(span) => self.err(span, message),
            None => ConfigError::whole_file(self.path, message),
        }
        .with_help(help)
    }

    fn validate(&self, raw: RawConfig) -> Result<Config> {
        let ssh = self.ssh(raw.ssh)?;
        let nodes = self.node_source(raw.nodes, raw.nodes_from)?;
        if nodes.len() > MAX_NODES {
            return Err(ConfigError::whole_file(
                self.path,
                format!("too many nodes: {} listed, herd runs at most {MAX_NODES}", nodes.len()),
            ));
        }
        let Some(job) = raw.job else {
            return Err(ConfigError::whole_file(
                self.path,
                "missing [job] table: add [job] with at least `script = \"train.py\"`",
            ));
        };
        let job = self.job(job)?;
        let env = self.env_table(raw.env, "[env]")?;
        let rendezvous = self.rendezvous(raw.rendezvous, &nodes)?;
        let logs = self.logs(raw.logs)?;
        let restart = self.restart(raw.restart)?;
        let container = raw.container.map(|c| self.container(c)).transpose()?;
        Ok(Config {
            path: self.path.to_path_buf(),
            ssh,
            nodes,
            job,
            env,
            rendezvous,
            logs,
            restart,
            container,
        })
    }

    fn ssh(&self, raw: Option<RawSsh>) -> Result<SshSettings> {
        let Some(raw) = raw else {
            return Ok(SshSettings::default());
        };
        let known_hosts = match &raw.known_hosts {
            None => KnownHostsPolicy::Strict,
            Some(v) => KnownHostsPolicy::parse(v.get_ref()).ok_or_else(|| {
                self.err(
                    v.span(),
                    format!(
                        "unknown known_hosts policy {:?}: expected one of strict, accept-new",
                        v.get_ref()
                    ),
                )
                .with_help(suggest::help_for(
                    v.get_ref(),
                    KnownHostsPolicy::ALL.map(KnownHostsPolicy::as_str),
                ))
            })?,
        };
        Ok(SshSettings {
            user: raw.user.map(|u| self.user(u, "ssh.user")).transpose()?,
            port: raw.port.map(|p| self.port(&p, "ssh.port")).transpose()?,
            identity_file: raw.identity_file.map(|f| self.non_empty(f, "ssh.identity_file")).transpose()?,
            known_hosts,
            known_hosts_file: raw
                .known_hosts_file
                .map(|f| self.non_empty(f, "ssh.known_hosts_file"))
                .transpose()?,
            connect_timeout: match &raw.connect_timeout {
                Some(d) => self.positive_duration(d, "ssh.connect_timeout")?,
                None => DEFAULT_CONNECT_TIMEOUT,
            },
            login_timeout: match &raw.login_timeout {
                Some(d) => self.positive_duration(d, "ssh.login_timeout")?,
                None => DEFAULT_LOGIN_TIMEOUT,
            },
        })
    }

    /// The nodes, from `[[nodes]]`, `nodes_from` or (`--slurm`) the Slurm allocation.
    fn node_source(
        &self,
        nodes: Option<Spanned<Vec<RawNode>>>,
        nodes_from: Option<Spanned<String>>,
    ) -> Result<Vec<Node>> {
        if self.options.slurm {
            return self.slurm_nodes(None);
        }
        match (nodes, nodes_from) {
            (Some(_), Some(from)) => {
                Err(self.err(from.span(), "both `nodes_from` and [[nodes]] list the nodes: keep one of them"))
            }
            (None, None) => Err(ConfigError::whole_file(
                self.path,
                "no nodes: add at least one [[nodes]] table with a `host`, or \
                 nodes_from = \"hostfile:PATH\" or \"slurm\" before the first table",
            )),
            (Some(nodes), None) => self.nodes(nodes),
            (None, Some(from)) => self.nodes_from(&from),
        }
    }

    fn nodes_from(&self, from: &Spanned<String>) -> Result<Vec<Node>> {
        let value = from.get_ref();
        if value == "slurm" {
            return self.slurm_nodes(Some(from.span()));
        }
        if let Some(file) = value.strip_prefix("hostfile:").or((value == "hostfile").then_some("")) {
            if file.is_empty() {
                return Err(
                    self.err(from.span(), format!("nodes_from = {value:?} needs a path: \"hostfile:PATH\""))
                );
            }
            return self.hostfile_nodes(file, from.span());
        }
        let help = match value.split_once(':') {
            Some((kind, rest)) => {
                suggest::did_you_mean(kind, ["hostfile"]).map(|k| suggest::help(&format!("{k}:{rest}")))
            }
            None => suggest::help_for(value, ["slurm", "hostfile"]).map(|h| {
                if h.contains("hostfile") {
                    suggest::help(&format!("hostfile:{value}"))
                } else {
                    h
                }
            }),
        };
        Err(self
            .err(
                from.span(),
                format!("unknown nodes_from {value:?}: expected \"hostfile:PATH\" or \"slurm\""),
            )
            .with_help(help))
    }

    /// The hosts of a hostfile, `file` relative to the config file's directory.
    fn hostfile_nodes(&self, file: &str, span: Range<usize>) -> Result<Vec<Node>> {
        let path = self.path.parent().unwrap_or(Path::new("")).join(file);
        let text = (self.options.read_file)(&path)
            .map_err(|e| self.err(span, format!("cannot read hostfile {}: {e}", path.display())))?;
        // A hostfile may be any file: its lines are never shown, only the offending token.
        let entries = hostfile::parse(&text).map_err(|e| match e.span {
            Some(span) => ConfigError::at(&path, &text, span, e.message).without_excerpt(),
            None => ConfigError::whole_file(&path, e.message),
        })?;
        Ok(entries
            .into_iter()
            .map(|e| Node {
                host: e.host,
                addr: None,
                nproc: e.slots,
                user: None,
                port: None,
                env: BTreeMap::new(),
            })
            .collect())
    }

    /// The hosts of the Slurm allocation, in Slurm's order. `span`: where `nodes_from = "slurm"`
    /// is written; `None` for `--slurm`.
    fn slurm_nodes(&self, span: Option<Range<usize>>) -> Result<Vec<Node>> {
        let what = if span.is_some() { "nodes_from = \"slurm\"" } else { "--slurm" };
        let here = |message: String| match &span {
            Some(span) => self.err(span.clone(), message),
            None => ConfigError::whole_file(self.path, message),
        };
        let found = SLURM_NODELIST_VARS
            .iter()
            .find_map(|&var| (self.options.env)(var).filter(|v| !v.is_empty()).map(|v| (var, v)));
        let Some((var, list)) = found else {
            return Err(here(format!(
                "{what}: not inside a Slurm allocation ({} are unset); run under salloc or sbatch, \
                 or list the nodes in [[nodes]]",
                SLURM_NODELIST_VARS.join(" and ")
            )));
        };
        let hosts =
            hostlist::expand(&list).map_err(|e| here(format!("{what}: malformed {var} {list:?}: {e}")))?;
        let mut seen = std::collections::HashSet::new();
        let mut nodes = Vec::with_capacity(hosts.len());
        for host in hosts {
            if let Err(why) = check_host(&host) {
                return Err(here(format!("{what}: invalid host {host:?} in {var}: {why}")));
            }
            if !seen.insert(host.clone()) {
                return Err(here(format!("{what}: {var} lists {host:?} twice")));
            }
            nodes.push(Node { host, addr: None, nproc: None, user: None, port: None, env: BTreeMap::new() });
        }
        Ok(nodes)
    }

    fn nodes(&self, raw: Spanned<Vec<RawNode>>) -> Result<Vec<Node>> {
        const HINT: &str = "add at least one [[nodes]] table with a `host`";
        if raw.get_ref().is_empty() {
            return Err(self.err(raw.span(), format!("`nodes` is empty: {HINT}")));
        }
        let mut nodes = Vec::new();
        // host -> index of the [[nodes]] entry that listed it first
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, node) in raw.into_inner().into_iter().enumerate() {
            let expr = node.host.get_ref();
            let span = node.host.span();
            let hosts = hostlist::expand(expr)
                .map_err(|e| self.err(span.clone(), format!("malformed hostlist {expr:?}: {e}")))?;
            if nodes.len() + hosts.len() > MAX_NODES {
                return Err(self.err(
                    span,
                    format!("too many nodes: with {expr:?} the config lists more than {MAX_NODES}"),
                ));
            }
            for host in &hosts {
                if let Err(why) = check_host(host) {
                    let msg = if host == expr {
                        format!("invalid host {host:?}: {why}")
                    } else {
                        format!("invalid host {host:?} (from hostlist {expr:?}): {why}")
                    };
                    return Err(self.err(span, msg));
                }
            }
            let addr = match node.addr {
                None => None,
                Some(addr) => {
                    if hosts.len() != 1 {
                        return Err(self.err(
                            addr.span(),
                            format!(
                                "`addr` is only allowed on a node whose `host` is a single host, \
                                 but {expr:?} expands to {} hosts",
                                hosts.len()
                            ),
                        ));
                    }
                    if let Err(why) = check_host(addr.get_ref()) {
                        return Err(
                            self.err(addr.span(), format!("invalid addr {:?}: {why}", addr.get_ref()))
                        );
                    }
                    Some(addr.into_inner())
                }
            };
            let nproc = node.nproc.map(|n| self.count(&n, &format!("nodes[{i}].nproc"))).transpose()?;
            let user = node.user.map(|u| self.user(u, &format!("nodes[{i}].user"))).transpose()?;
            let port = node.port.map(|p| self.port(&p, &format!("nodes[{i}].port"))).transpose()?;
            let env = self.env_table(node.env, &format!("nodes[{i}].env"))?;
            for host in hosts {
                if let Some(&first) = seen.get(&host) {
                    let msg = if first == i {
                        format!("duplicate host {host:?}: nodes[{i}] lists it twice")
                    } else {
                        format!("duplicate host {host:?}: listed in nodes[{first}] and nodes[{i}]")
                    };
                    return Err(self.err(span, msg));
                }
                seen.insert(host.clone(), i);
                nodes.push(Node {
                    host,
                    addr: addr.clone(),
                    nproc,
                    user: user.clone(),
                    port,
                    env: env.clone(),
                });
            }
        }
        Ok(nodes)
    }

    fn job(&self, raw: RawJob) -> Result<Job> {
        let launcher = match &raw.launcher {
            None => LauncherKind::Torchrun,
            Some(l) => LauncherKind::parse(l.get_ref()).ok_or_else(|| {
                self.err(
                    l.span(),
                    format!(
                        "unknown launcher {:?}: expected one of {}",
                        l.get_ref(),
                        LauncherKind::ALL.map(LauncherKind::as_str).join(", ")
                    ),
                )
                .with_help(suggest::help_for(l.get_ref(), LauncherKind::ALL.map(LauncherKind::as_str)))
            })?,
        };
        if raw.script.get_ref().trim().is_empty() {
            return Err(self.err(raw.script.span(), "job.script must not be empty"));
        }
        let mut forward_env = Vec::new();
        for pattern in raw.forward_env.unwrap_or_default() {
            if !is_env_pattern(pattern.get_ref()) {
                return Err(self.err(
                    pattern.span(),
                    format!(
                        "invalid job.forward_env entry {:?}: expected a variable name or a \
                         NAME_* prefix glob (letters, digits and _, not starting with a digit, \
                         optionally ending in *)",
                        pattern.get_ref()
                    ),
                ));
            }
            forward_env.push(pattern.into_inner());
        }
        Ok(Job {
            launcher,
            script: raw.script.into_inner(),
            args: raw.args.unwrap_or_default(),
            module: raw.module.unwrap_or(false),
            workdir: raw.workdir.map(|w| self.non_empty(w, "job.workdir")).transpose()?,
            nproc_per_node: match &raw.nproc_per_node {
                Some(n) => self.count(n, "job.nproc_per_node")?,
                None => 1,
            },
            setup: raw.setup,
            launcher_args: raw.launcher_args.unwrap_or_default(),
            forward_env,
            python: raw.python.map(|p| self.non_empty(p, "job.python")).transpose()?,
            device: match &raw.device {
                None => Device::Cuda,
                Some(d) => match d.get_ref().as_str() {
                    "cuda" => Device::Cuda,
                    "cpu" => Device::Cpu,
                    other => {
                        return Err(self
                            .err(
                                d.span(),
                                format!("unknown job.device {other:?}: expected \"cuda\" or \"cpu\""),
                            )
                            .with_help(suggest::help_for(other, ["cuda", "cpu"])))
                    }
                },
            },
        })
    }

    /// `[env]` or `nodes[i].env`; `section` names it in messages.
    fn env_table(&self, raw: Option<EnvTable>, section: &str) -> Result<BTreeMap<String, String>> {
        let mut env = BTreeMap::new();
        for (name, value) in raw.unwrap_or_default().0 {
            let key = name.get_ref();
            if !is_env_name(key) {
                return Err(self.err(
                    name.span(),
                    format!(
                        "invalid environment variable name {key:?} in {section}: names must be \
                         letters, digits and _, not starting with a digit"
                    ),
                ));
            }
            if RESERVED_ENV.contains(&key.as_str()) {
                return Err(self.err(
                    name.span(),
                    format!("{key} is set by herd for every node; remove it from {section}"),
                ));
            }
            let text = match value.get_ref() {
                toml::Value::String(s) => s.clone(),
                other => {
                    let found = with_article(other.type_str());
                    let hint = match other {
                        toml::Value::Array(_) | toml::Value::Table(_) => String::new(),
                        scalar => format!("; quote it: {key} = \"{scalar}\""),
                    };
                    return Err(self.err(
                        value.span(),
                        format!("{key} in {section} must be a string, found {found}{hint}"),
                    ));
                }
            };
            if text.contains('\0') {
                return Err(self.err(value.span(), format!("{key} in {section} contains a NUL character")));
            }
            env.insert(name.into_inner(), text);
        }
        Ok(env)
    }

    fn rendezvous(&self, raw: Option<RawRendezvous>, nodes: &[Node]) -> Result<Rendezvous> {
        let Some(raw) = raw else {
            return Ok(Rendezvous::default());
        };
        let master = match raw.master {
            None => None,
            Some(m) => {
                if !nodes.iter().any(|n| n.host == *m.get_ref()) {
                    return Err(self
                        .err(
                            m.span(),
                            format!(
                                "rendezvous.master {:?} is not one of the nodes ({})",
                                m.get_ref(),
                                node_list(nodes)
                            ),
                        )
                        .with_help(suggest::help_for(m.get_ref(), nodes.iter().map(|n| n.host.as_str()))));
                }
                Some(m.into_inner())
            }
        };
        let port = match &raw.port {
            None => PortSpec::Auto,
            Some(p) => match p.get_ref() {
                toml::Value::String(s) if s == "auto" => PortSpec::Auto,
                toml::Value::Integer(n) => {
                    PortSpec::Fixed(self.port_number(*n, p.span(), "rendezvous.port")?)
                }
                toml::Value::String(s) => {
                    return Err(self.err(
                        p.span(),
                        format!("rendezvous.port must be \"auto\" or a port number 1-65535, found {s:?}"),
                    ))
                }
                other => {
                    return Err(self.err(
                        p.span(),
                        format!(
                            "rendezvous.port must be \"auto\" or a port number 1-65535, found {}",
                            with_article(other.type_str())
                        ),
                    ))
                }
            },
        };
        let port_range = match &raw.port_range {
            None => DEFAULT_PORT_RANGE,
            Some(range) => {
                let [lo, hi] = range.get_ref().as_slice() else {
                    return Err(self.err(
                        range.span(),
                        format!(
                            "rendezvous.port_range must be two ports [lo, hi], found {} values",
                            range.get_ref().len()
                        ),
                    ));
                };
                let lo_port = self.port_number(*lo.get_ref(), lo.span(), "rendezvous.port_range")?;
                let hi_port = self.port_number(*hi.get_ref(), hi.span(), "rendezvous.port_range")?;
                if lo_port > hi_port {
                    return Err(self.err(
                        range.span(),
                        format!(
                            "rendezvous.port_range [{lo_port}, {hi_port}] is empty: \
                             the first port must not be greater than the second"
                        ),
                    ));
                }
                (lo_port, hi_port)
            }
        };
        let interface = match raw.interface {
            None => None,
            Some(i) => {
                let name = i.get_ref();
                if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == '/') {
                    return Err(self.err(
                        i.span(),
                        format!(
                            "invalid rendezvous.interface {name:?}: expected a network interface \
                             name such as \"eth0\" (non-empty, no whitespace or '/')"
                        ),
                    ));
                }
                Some(i.into_inner())
            }
        };
        Ok(Rendezvous { master, port, port_range, interface })
    }

    fn logs(&self, raw: Option<RawLogs>) -> Result<Logs> {
        let Some(raw) = raw else { return Ok(Logs::default()) };
        let dir = match raw.dir {
            None => Logs::default().dir,
            Some(dir) => PathBuf::from(self.non_empty(dir, "logs.dir")?),
        };
        let console = match raw.console {
            None => None,
            Some(c) => {
                RankList::parse(c.get_ref()).map_err(|e| self.err(c.span(), format!("logs.console: {e}")))?
            }
        };
        Ok(Logs { dir, console })
    }

    fn restart(&self, raw: Option<RawRestart>) -> Result<Restart> {
        let defaults = Restart::default();
        let Some(raw) = raw else {
            return Ok(defaults);
        };
        let max_restarts = match &raw.max_restarts {
            None => defaults.max_restarts,
            Some(n) => u32::try_from(*n.get_ref()).map_err(|_| {
                self.err(
                    n.span(),
                    format!("restart.max_restarts must be between 0 and {}, found {}", u32::MAX, n.get_ref()),
                )
            })?,
        };
        let on = match raw.on {
            None => defaults.on,
            Some(classes) => {
                classes.iter().map(|c| self.failure_class(c, "restart.on")).collect::<Result<_>>()?
            }
        };
        let duration = |v: &Option<Spanned<DurationText>>, what: &str, default: Duration| match v {
            Some(d) => self.duration(d, what),
            None => Ok(default),
        };
        let backoff = duration(&raw.backoff, "restart.backoff", defaults.backoff)?;
        let backoff_max = duration(&raw.backoff_max, "restart.backoff_max", defaults.backoff_max)?;
        if backoff > backoff_max {
            let message = format!(
                "restart.backoff ({}) is longer than restart.backoff_max ({})",
                humantime::format_duration(backoff),
                humantime::format_duration(backoff_max)
            );
            // Point at whichever was written (backoff_max first); the defaults are consistent.
            return Err(match raw.backoff_max.as_ref().or(raw.backoff.as_ref()) {
                Some(v) => self.err(v.span(), message),
                None => ConfigError::whole_file(self.path, message),
            });
        }
        let hang_timeout = raw
            .hang_timeout
            .as_ref()
            .map(|d| self.positive_duration(d, "restart.hang_timeout"))
            .transpose()?;
        let progress_pattern = match raw.progress_pattern {
            Some(p) if p.get_ref().is_empty() => {
                return Err(self.err(p.span(), "restart.progress_pattern must not be empty"))
            }
            Some(p) => {
                self.regex(&p, "restart.progress_pattern")?;
                Some(p.into_inner())
            }
            None => None,
        };
        let mut rules = Vec::new();
        for (i, rule) in raw.rules.unwrap_or_default().into_iter().enumerate() {
            if rule.pattern.get_ref().is_empty() {
                return Err(
                    self.err(rule.pattern.span(), format!("restart.rules[{i}].pattern must not be empty"))
                );
            }
            self.regex(&rule.pattern, &format!("restart.rules[{i}].pattern"))?;
            let class = self.failure_class(&rule.class, &format!("restart.rules[{i}].class"))?;
            rules.push(RuleSpec { pattern: rule.pattern.into_inner(), class });
        }
        Ok(Restart {
            max_restarts,
            on,
            backoff,
            backoff_max,
            grace_period: duration(&raw.grace_period, "restart.grace_period", defaults.grace_period)?,
            hang_timeout,
            progress_pattern,
            node_wait: duration(&raw.node_wait, "restart.node_wait", defaults.node_wait)?,
            heartbeat_timeout: match &raw.heartbeat_timeout {
                Some(d) => self.positive_duration(d, "restart.heartbeat_timeout")?,
                None => defaults.heartbeat_timeout,
            },
            rules,
        })
    }

    fn container(&self, raw: RawContainer) -> Result<Container> {
        let image = raw.image.get_ref();
        if image.is_empty() || image.starts_with('-') || image.contains(char::is_whitespace) {
            return Err(self.err(
                raw.image.span(),
                format!(
                    "invalid container.image {image:?}: expected an image reference such as \
                     \"nvcr.io/nvidia/pytorch:24.05-py3\" (non-empty, no whitespace, not starting with '-')"
                ),
            ));
        }
        let runtime = match &raw.runtime {
            None => ContainerRuntime::Docker,
            Some(r) => match r.get_ref().as_str() {
                "docker" => ContainerRuntime::Docker,
                "podman" => ContainerRuntime::Podman,
                other => {
                    return Err(self.err(
                        r.span(),
                        format!("unknown container.runtime {other:?}: expected \"docker\" or \"podman\""),
                    ))
                }
            },
        };
        let mut mounts = Vec::new();
        for (i, mount) in raw.mounts.unwrap_or_default().into_iter().enumerate() {
            if let Err(why) = check_mount(mount.get_ref()) {
                return Err(self.err(
                    mount.span(),
                    format!(
                        "invalid container.mounts[{i}] {:?}: {why}; write \"src:dst\" or \"src:dst:options\", \
                         e.g. \"/data:/data:ro\"",
                        mount.get_ref()
                    ),
                ));
            }
            mounts.push(mount.into_inner());
        }
        let shm_size = match raw.shm_size {
            None => DEFAULT_SHM_SIZE.to_string(),
            Some(s) => {
                let text = s.get_ref();
                let digits = text.strip_suffix(['b', 'k', 'm', 'g']).unwrap_or(text);
                if digits.is_empty()
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                    || digits.bytes().all(|b| b == b'0')
                {
                    return Err(self.err(
                        s.span(),
                        format!(
                            "invalid container.shm_size {text:?}: expected a number above zero with an \
                             optional unit b, k, m or g, e.g. \"8g\""
                        ),
                    ));
                }
                s.into_inner()
            }
        };
        Ok(Container {
            image: raw.image.into_inner(),
            runtime,
            args: raw.args.unwrap_or_default(),
            mounts,
            shm_size,
        })
    }

    // ---- leaf values ----

    fn regex(&self, pattern: &Spanned<String>, what: &str) -> Result<(), ConfigError> {
        regex::Regex::new(pattern.get_ref()).map(|_| ()).map_err(|e| {
            let detail = e.to_string();
            let last = detail.lines().last().unwrap_or("").trim().to_string();
            self.err(pattern.span(), format!("{what} is not a valid regular expression: {last}"))
        })
    }

    fn failure_class(&self, v: &Spanned<String>, what: &str) -> Result<FailureClass> {
        FailureClass::parse(v.get_ref()).ok_or_else(|| {
            self.err(
                v.span(),
                format!(
                    "unknown restart class {:?} in {what}: expected one of {}",
                    v.get_ref(),
                    FailureClass::ALL.map(FailureClass::as_str).join(", ")
                ),
            )
            .with_help(suggest::help_for(v.get_ref(), FailureClass::ALL.map(FailureClass::as_str)))
        })
    }

    fn non_empty(&self, v: Spanned<String>, what: &str) -> Result<String> {
        if v.get_ref().is_empty() {
            return Err(self.err(v.span(), format!("{what} must not be empty")));
        }
        Ok(v.into_inner())
    }

    /// An SSH user name: non-empty, no leading `-`, no whitespace, control characters or `@`.
    fn user(&self, v: Spanned<String>, what: &str) -> Result<String> {
        let name = v.get_ref();
        let bad = if name.is_empty() {
            Some("it is empty".to_string())
        } else if name.starts_with('-') {
            Some("it starts with '-'".to_string())
        } else {
            name.chars()
                .find(|&c| c.is_whitespace() || c.is_control() || c == '@')
                .map(|c| format!("{c:?} is not allowed"))
        };
        match bad {
            Some(why) => Err(self.err(v.span(), format!("invalid {what} {name:?}: {why}"))),
            None => Ok(v.into_inner()),
        }
    }

    fn port(&self, v: &Spanned<i64>, what: &str) -> Result<u16> {
        self.port_number(*v.get_ref(), v.span(), what)
    }

    fn port_number(&self, n: i64, span: Range<usize>, what: &str) -> Result<u16> {
        match u16::try_from(n) {
            Ok(p) if p >= 1 => Ok(p),
            _ => Err(self.err(span, format!("{what}: port {n} is out of range (expected 1-65535)"))),
        }
    }

    /// A count that must be at least 1 (`nproc`, `nproc_per_node`).
    fn count(&self, v: &Spanned<i64>, what: &str) -> Result<u32> {
        match u32::try_from(*v.get_ref()) {
            Ok(n) if (1..=MAX_NPROC).contains(&n) => Ok(n),
            Ok(n) if n >= 1 => {
                Err(self.err(v.span(), format!("{what} must be at most {MAX_NPROC}, found {n}")))
            }
            _ => Err(self.err(v.span(), format!("{what} must be at least 1, found {}", v.get_ref()))),
        }
    }

    fn duration(&self, v: &Spanned<DurationText>, what: &str) -> Result<Duration> {
        let text = &v.get_ref().0;
        let d = humantime::parse_duration(text).map_err(|e| {
            self.err(
                v.span(),
                format!("invalid duration {text:?} for {what}: {e} (write e.g. \"10s\", \"5m\", \"1h 30m\")"),
            )
        })?;
        let max = if SHORT_DURATIONS.contains(&what) { MAX_SHORT_DURATION } else { MAX_DURATION };
        if d > max {
            return Err(self.err(
                v.span(),
                format!("{what} must be at most {}, found {text:?}", humantime::format_duration(max)),
            ));
        }
        Ok(d)
    }

    fn positive_duration(&self, v: &Spanned<DurationText>, what: &str) -> Result<Duration> {
        let d = self.duration(v, what)?;
        if d.is_zero() {
            return Err(self.err(v.span(), format!("{what} must be greater than zero")));
        }
        Ok(d)
    }
}

/// The first hosts of `nodes`, comma-separated, `...` when there are more.
fn node_list(nodes: &[Node]) -> String {
    const SHOWN: usize = 8;
    let mut hosts: Vec<&str> = nodes.iter().take(SHOWN).map(|n| n.host.as_str()).collect();
    if nodes.len() > SHOWN {
        hosts.push("...");
    }
    hosts.join(", ")
}

/// Whether `mount` is `src:dst` or `src:dst:options` with an absolute `dst` and a `src` that
/// is an absolute path or a volume name. `Err` says why not.
fn check_mount(mount: &str) -> Result<(), String> {
    let parts: Vec<&str> = mount.split(':').collect();
    let (src, dst, opts) = match parts.as_slice() {
        [src, dst] => (*src, *dst, None),
        [src, dst, opts] => (*src, *dst, Some(*opts)),
        _ => return Err(format!("expected 2 or 3 parts separated by ':', found {}", parts.len())),
    };
    let volume_name = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    };
    if !(src.starts_with('/') || volume_name(src)) {
        return Err(format!("the source {src:?} must be an absolute path or a volume name"));
    }
    if !dst.starts_with('/') {
        return Err(format!("the destination {dst:?} must be an absolute path"));
    }
    if let Some(opts) = opts {
        if opts.is_empty()
            || !opts.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, ',' | '=' | '_' | '-'))
        {
            return Err(format!(
                "the options {opts:?} must be a comma-separated list such as \"ro\" or \"ro,z\""
            ));
        }
    }
    Ok(())
}

fn with_article(type_name: &str) -> String {
    match type_name.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => format!("an {type_name}"),
        _ => format!("a {type_name}"),
    }
}

/// Makes toml/serde messages read like the rest: one line, TOML words instead of Rust types.
fn polish_toml_message(message: &str) -> String {
    let message = message.trim().replace('\n', ": ");
    if message.starts_with("invalid type: string ") && message.ends_with("expected a borrowed string") {
        // A dotted key (`port.x = 1`) made a table where a plain value belongs.
        return "expected a plain value here, found a dotted key (a table)".to_string();
    }
    let mut message = message
        .replace("missing field", "missing required key")
        .replace("invalid type: map", "invalid type: table")
        .replace("invalid type: sequence", "invalid type: array")
        .replace("expected a sequence", "expected an array");
    for int in ["i64", "u64", "i32", "u32", "u16"] {
        if let Some(stripped) = message.strip_suffix(&format!("expected {int}")) {
            message = format!("{stripped}expected an integer");
        }
    }
    message
}

/// For serde's "unknown field `x`, expected one of `a`, `b`" (also "expected `a` or `b`" and
/// "expected `a`"): a "did you mean" among the expected names.
fn unknown_key_help(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (key, expected) = rest.split_once('`')?;
    let expected = expected.strip_prefix(", expected ")?;
    let names: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    suggest::help_for(key, names)
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: &str = "[job]\nscript = \"train.py\"\n";

    #[test]
    fn logs_console_takes_all_or_a_rank_list_and_names_a_bad_one() {
        let nodes = "[[nodes]]\nhost = \"n1\"\n";
        let c = parse_ok(&format!("{nodes}{JOB}[logs]\nconsole = \"0,8-15\"\n"));
        assert!(c.logs.console.as_ref().is_some_and(|l| l.contains(9) && !l.contains(1)));
        assert_eq!(parse_ok(&format!("{nodes}{JOB}[logs]\nconsole = \"all\"\n")).logs.console, None);
        assert_err(
            &format!("{nodes}{JOB}[logs]\nconsole = \"0-x\"\n"),
            6,
            11,
            "logs.console: \"0-x\" is not a rank or a range of ranks (\"all\", \"0\", \"0,8-15\")",
        );
    }

    fn parse_ok(text: &str) -> Config {
        parse(Path::new("cluster.toml"), text).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Asserts the error's message and 1-based line:col.
    #[track_caller]
    fn assert_err(text: &str, line: usize, col: usize, message: &str) {
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
    fn assert_file_err(text: &str, message: &str) {
        let err = parse(Path::new("cluster.toml"), text).expect_err("expected an error");
        assert_eq!(err.line_col(), None, "full error:\n{err}");
        assert_eq!(err.to_string(), format!("cluster.toml: {message}"));
    }

    fn node(host: &str) -> Node {
        Node { host: host.to_string(), addr: None, nproc: None, user: None, port: None, env: BTreeMap::new() }
    }

    const FULL: &str = r#"[ssh]
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
progress_pattern = "step \\d+"
node_wait = "2m"
heartbeat_timeout = "30s"
[[restart.rules]]
pattern = "my custom error"
class = "comm"
[[restart.rules]]
pattern = "disk full"
class = "user"
"#;

    #[test]
    fn full_example_parses() {
        let config = parse_ok(FULL);
        let gpu = |host: &str| Node {
            host: host.to_string(),
            addr: None,
            nproc: Some(8),
            user: Some("x".to_string()),
            port: Some(2222),
            env: [("NCCL_IB_HCA".to_string(), "mlx5_0".to_string())].into(),
        };
        let expected = Config {
            path: PathBuf::from("cluster.toml"),
            ssh: SshSettings {
                user: Some("ubuntu".into()),
                port: Some(22),
                identity_file: Some("~/.ssh/id_ed25519".into()),
                known_hosts: KnownHostsPolicy::AcceptNew,
                known_hosts_file: Some("/path/known_hosts".into()),
                connect_timeout: Duration::from_secs(20),
                login_timeout: DEFAULT_LOGIN_TIMEOUT,
            },
            nodes: vec![
                gpu("gpu-01"),
                gpu("gpu-02"),
                Node { addr: Some("10.0.0.11".into()), ..node("head") },
            ],
            job: Job {
                launcher: LauncherKind::Deepspeed,
                script: "train.py".into(),
                args: vec!["--config".into(), "cfg.yaml".into()],
                module: true,
                workdir: Some("/shared/project".into()),
                nproc_per_node: 4,
                setup: Some("source /opt/venv/bin/activate".into()),
                launcher_args: vec!["--no_local_rank".into()],
                forward_env: vec!["WANDB_API_KEY".into(), "HF_*".into()],
                python: Some("/opt/venv/bin/python".into()),
                device: Device::Cuda,
            },
            env: [
                ("NCCL_DEBUG".to_string(), "WARN".to_string()),
                ("OMP_NUM_THREADS".to_string(), "4".to_string()),
            ]
            .into(),
            rendezvous: Rendezvous {
                master: Some("head".into()),
                port: PortSpec::Fixed(29500),
                port_range: (30000, 31000),
                interface: Some("eth0".into()),
            },
            logs: Logs { dir: PathBuf::from("/var/log/herd"), console: None },
            restart: Restart {
                max_restarts: 5,
                on: vec![FailureClass::Comm, FailureClass::Oom],
                backoff: Duration::from_secs(5),
                backoff_max: Duration::from_secs(60),
                grace_period: Duration::from_secs(20),
                hang_timeout: Some(Duration::from_secs(30 * 60)),
                progress_pattern: Some("step \\d+".into()),
                node_wait: Duration::from_secs(120),
                heartbeat_timeout: Duration::from_secs(30),
                rules: vec![
                    RuleSpec { pattern: "my custom error".into(), class: FailureClass::Comm },
                    RuleSpec { pattern: "disk full".into(), class: FailureClass::User },
                ],
            },
            container: None,
        };
        assert_eq!(config, expected);
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let config = parse_ok(&format!("[[nodes]]\nhost = \"a\"\n{JOB}"));
        assert_eq!(
            config,
            Config {
                path: PathBuf::from("cluster.toml"),
                ssh: SshSettings {
                    user: None,
                    port: None,
                    identity_file: None,
                    known_hosts: KnownHostsPolicy::Strict,
                    known_hosts_file: None,
                    connect_timeout: Duration::from_secs(10),
                    login_timeout: DEFAULT_LOGIN_TIMEOUT,
                },
                nodes: vec![node("a")],
                job: Job {
                    launcher: LauncherKind::Torchrun,
                    script: "train.py".into(),
                    args: vec![],
                    module: false,
                    workdir: None,
                    nproc_per_node: 1,
                    setup: None,
                    launcher_args: vec![],
                    forward_env: vec![],
                    python: None,
                    device: Device::Cuda,
                },
                env: BTreeMap::new(),
                rendezvous: Rendezvous {
                    master: None,
                    port: PortSpec::Auto,
                    port_range: (20000, 40000),
                    interface: None,
                },
                logs: Logs { dir: PathBuf::from("herd-logs"), console: None },
                restart: Restart {
                    max_restarts: 3,
                    on: vec![
                        FailureClass::Comm,
                        FailureClass::NodeLost,
                        FailureClass::Hang,
                        FailureClass::Port,
                        FailureClass::Crash,
                    ],
                    backoff: Duration::from_secs(10),
                    backoff_max: Duration::from_secs(300),
                    grace_period: Duration::from_secs(10),
                    hang_timeout: None,
                    progress_pattern: None,
                    node_wait: Duration::from_secs(300),
                    heartbeat_timeout: Duration::from_secs(15),
                    rules: vec![],
                },
                container: None,
            }
        );
    }

    #[test]
    fn empty_tables_get_defaults() {
        let text = format!("[ssh]\n[[nodes]]\nhost = \"a\"\n{JOB}[env]\n[rendezvous]\n[logs]\n[restart]\n");
        let config = parse_ok(&text);
        assert_eq!(config.ssh, SshSettings::default());
        assert_eq!(config.rendezvous, Rendezvous::default());
        assert_eq!(config.logs, Logs::default());
        assert_eq!(config.restart, Restart::default());
        // `[[restart.rules]]` alone creates `[restart]` implicitly.
        let text =
            format!("[[nodes]]\nhost = \"a\"\n{JOB}[[restart.rules]]\npattern = \"x\"\nclass = \"oom\"\n");
        let restart = parse_ok(&text).restart;
        assert_eq!(restart.max_restarts, 3);
        assert_eq!(restart.rules, [RuleSpec { pattern: "x".into(), class: FailureClass::Oom }]);
    }

    #[test]
    fn nodes_are_in_file_then_expansion_order() {
        let text =
            format!("[[nodes]]\nhost = \"z[2,1]\"\n[[nodes]]\nhost = \"a-[01-02],10.0.0.[7-8]\"\n{JOB}");
        let hosts: Vec<String> = parse_ok(&text).nodes.into_iter().map(|n| n.host).collect();
        assert_eq!(hosts, ["z2", "z1", "a-01", "a-02", "10.0.0.7", "10.0.0.8"]);
        // Inline array form works too.
        let text = format!("nodes = [{{ host = \"a\" }}, {{ host = \"b\", nproc = 2 }}]\n{JOB}");
        let nodes = parse_ok(&text).nodes;
        assert_eq!(nodes[1].nproc, Some(2));
    }

    #[test]
    fn node_env_as_subtable_and_dotted_keys() {
        let text = format!(
            "[[nodes]]\nhost = \"a\"\nenv.A = \"1\"\n[[nodes]]\nhost = \"b\"\n[nodes.env]\nB = \"2\"\n{JOB}"
        );
        let nodes = parse_ok(&text).nodes;
        assert_eq!(nodes[0].env, [("A".to_string(), "1".to_string())].into());
        assert_eq!(nodes[1].env, [("B".to_string(), "2".to_string())].into());
    }

    #[test]
    fn rendezvous_port_auto_and_fixed() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}[rendezvous]\n");
        assert_eq!(parse_ok(&format!("{base}port = \"auto\"\n")).rendezvous.port, PortSpec::Auto);
        assert_eq!(parse_ok(&format!("{base}port = 65535\n")).rendezvous.port, PortSpec::Fixed(65535));
        assert_eq!(parse_ok(&format!("{base}port_range = [5, 5]\n")).rendezvous.port_range, (5, 5));
    }

    #[test]
    fn spec_example_error_renders_exactly() {
        let text = "[ssh]\nuser = \"ubuntu\"\n\n[job]\nscript = \"train.py\"\n[[nodes]]\nhost = \"n[3-1]\"\n";
        let err = parse(Path::new("cluster.toml"), text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cluster.toml:7:8: malformed hostlist \"n[3-1]\": range 3-1 is descending\n   |\n 7 | host = \"n[3-1]\"\n   |        ^^^^^^^^"
        );
        assert_eq!(err.path(), Path::new("cluster.toml"));
        let loc = err.location().unwrap();
        assert_eq!(loc.source_line, "host = \"n[3-1]\"");
        assert_eq!(&text[loc.span.clone()], "\"n[3-1]\"");
    }

    #[test]
    fn load_reads_files_and_names_missing_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        std::fs::write(&path, format!("[[nodes]]\nhost = \"a\"\n{JOB}")).unwrap();
        let config = load(&path).unwrap();
        assert_eq!(config.path, path);
        assert_eq!(config.nodes, [node("a")]);

        let missing = Path::new("no-such-dir-for-herd-tests/cluster.toml");
        let err = load(missing).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }));
        assert_eq!(err.line_col(), None);
        #[cfg(unix)]
        assert_eq!(
            err.to_string(),
            "no-such-dir-for-herd-tests/cluster.toml: cannot read config file: No such file or directory (os error 2)"
        );
    }

    // ---- errors ----

    #[test]
    fn toml_syntax_error() {
        assert_err("[[nodes]]\nhost = \n", 2, 8, "invalid string: expected `\"`, `'`");
        assert_err(
            "[job]\nscript = \"a\"\n[job]\n",
            3,
            1,
            "invalid table header: duplicate key `job` in document root",
        );
    }

    #[test]
    fn unknown_keys_anywhere() {
        assert_err(
            "[jobs]\nscript = \"x\"\n",
            1,
            2,
            "unknown field `jobs`, expected one of `nodes_from`, `ssh`, `nodes`, `job`, `env`, `rendezvous`, `logs`, `restart`, `container`",
        );
        assert_err(
            "[ssh]\nusr = \"x\"\n",
            2,
            1,
            "unknown field `usr`, expected one of `user`, `port`, `identity_file`, `known_hosts`, `known_hosts_file`, `connect_timeout`, `login_timeout`",
        );
        assert_err(
            "[[nodes]]\nhost = \"a\"\nnprocs = 2\n",
            3,
            1,
            "unknown field `nprocs`, expected one of `host`, `addr`, `nproc`, `user`, `port`, `env`",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\n{JOB}scirpt = \"y\"\n"),
            5,
            1,
            "unknown field `scirpt`, expected one of `launcher`, `script`, `args`, `module`, `workdir`, `nproc_per_node`, `setup`, `launcher_args`, `forward_env`, `python`, `device`",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\n{JOB}[[restart.rules]]\npattern = \"x\"\nclass = \"comm\"\nklass = 1\n"),
            8,
            1,
            "unknown field `klass`, expected `pattern` or `class`",
        );
    }

    /// The help line of the error `text` gives, if any.
    fn help_of(text: &str) -> Option<String> {
        let err = parse(Path::new("cluster.toml"), text).expect_err("expected an error");
        if let Some(help) = err.help() {
            assert!(err.to_string().ends_with(&format!("\n   = help: {help}")), "{err}");
        }
        err.help().map(str::to_string)
    }

    #[test]
    fn did_you_mean_for_misspelt_names() {
        let base = "[[nodes]]\nhost = \"a\"\n";
        let cases = [
            (format!("{base}{JOB}nproc_per_nod = 2\n"), "nproc_per_node"),
            (format!("{base}[job]\nscirpt = \"x\"\n"), "script"),
            (format!("[jobs]\nscript = \"x\"\n{base}"), "job"),
            (format!("[ssh]\nusr = \"x\"\n{base}{JOB}"), "user"),
            (format!("{base}nprocs = 2\n{JOB}"), "nproc"),
            (format!("node_from = \"slurm\"\n{base}{JOB}"), "nodes_from"),
            (format!("{base}{JOB}[[restart.rules]]\npattern = \"x\"\nclas = \"comm\"\n"), "class"),
            (format!("{base}{JOB}launcher = \"torchrunn\"\n"), "torchrun"),
            (format!("{base}{JOB}launcher = \"deepseed\"\n"), "deepspeed"),
            (format!("[ssh]\nknown_hosts = \"accept_new\"\n{base}{JOB}"), "accept-new"),
            (format!("{base}{JOB}[restart]\non = [\"node_lost\"]\n"), "node-lost"),
            (format!("{base}{JOB}[[restart.rules]]\npattern = \"x\"\nclass = \"comms\"\n"), "comm"),
            (format!("{base}{JOB}device = \"cudа\"\n"), "cuda"),
            (format!("{base}{JOB}device = \"cpus\"\n"), "cpu"),
        ];
        for (text, want) in cases {
            assert_eq!(help_of(&text), Some(format!("did you mean {want:?}?")), "{text}");
        }
        // Nothing close: no help line.
        assert_eq!(help_of(&format!("{base}{JOB}launcher = \"mpirun\"\n")), None);
        assert_eq!(help_of(&format!("{base}{JOB}[restart]\non = [\"segfault\"]\n")), None);
        assert_eq!(help_of(&format!("{base}{JOB}zzz = 1\n")), None);
    }

    #[test]
    fn unknown_key_help_reads_every_serde_shape() {
        assert_eq!(
            unknown_key_help("unknown field `clas`, expected `pattern` or `class`").as_deref(),
            Some("did you mean \"class\"?")
        );
        assert_eq!(
            unknown_key_help("unknown field `dirr`, expected `dir`").as_deref(),
            Some("did you mean \"dir\"?")
        );
        assert_eq!(unknown_key_help("invalid type: integer `5`, expected a string"), None);
    }

    #[test]
    fn type_errors_are_located() {
        assert_err(
            "[[nodes]]\nhost = \"a\"\nnproc = \"8\"\n",
            3,
            9,
            "invalid type: string \"8\", expected an integer",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\n{JOB}args = \"--x\"\n"),
            5,
            8,
            "invalid type: string \"--x\", expected an array",
        );
        assert_err("[[nodes]]\nport = 22\n", 1, 1, "missing required key `host`");
        assert_err("[[nodes]]\nhost = \"a\"\n[job]\nargs = []\n", 3, 1, "missing required key `script`");
    }

    /// Parses `text` as `/etc/herd/cluster.toml` with `env` as the environment and `files` as the
    /// only readable files; `slurm` as `--slurm`.
    fn parse_from(
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

    fn hosts_and_nprocs(config: &Config) -> Vec<(&str, Option<u32>)> {
        config.nodes.iter().map(|n| (n.host.as_str(), n.nproc)).collect()
    }

    #[test]
    fn nodes_from_a_hostfile_relative_to_the_config() {
        let text = format!("nodes_from = \"hostfile:hosts.txt\"\n{JOB}");
        let hostfile = "# rack 1\ngpu-02 slots=8\ngpu-01\n\ngpu-03 slots=2 # small\n";
        let config = parse_from(&text, &[], &[("/etc/herd/hosts.txt", hostfile)], false).unwrap();
        assert_eq!(hosts_and_nprocs(&config), [("gpu-02", Some(8)), ("gpu-01", None), ("gpu-03", Some(2))]);
        // An absolute path is used as it is.
        let text = format!("nodes_from = \"hostfile:/srv/h\"\n{JOB}");
        let config = parse_from(&text, &[], &[("/srv/h", "a slots=1\n")], false).unwrap();
        assert_eq!(hosts_and_nprocs(&config), [("a", Some(1))]);
    }

    #[test]
    fn hostfile_errors_name_the_hostfile_and_line() {
        let text = format!("nodes_from = \"hostfile:hosts.txt\"\n{JOB}");
        let err = |hostfile: &str| {
            parse_from(&text, &[], &[("/etc/herd/hosts.txt", hostfile)], false).unwrap_err().to_string()
        };
        // A hostfile may be any file: no line of it is shown, only the offending token.
        assert_eq!(
            err("a\nb\nc slots=x\n"),
            "/etc/herd/hosts.txt:3:3: slots must be a positive integer, found \"x\""
        );
        let shadow = err("root:$6$0123456789abcdefghijklmnopqrstuvwxyzSECRETHASH:19000:0:99999:7:::\n");
        assert!(!shadow.contains("SECRETHASH") && !shadow.contains("19000"), "{shadow}");
        assert!(err("a\nb\na\n")
            .starts_with("/etc/herd/hosts.txt:3:1: duplicate host \"a\": already listed on line 1"));
        assert!(err("a;b\n").starts_with("/etc/herd/hosts.txt:1:1: invalid host \"a;b\""));
        assert_eq!(
            err("# nothing\n"),
            "/etc/herd/hosts.txt: the hostfile lists no hosts (expected lines like `gpu-01 slots=8`)"
        );
        let missing = parse_from(&text, &[], &[], false).unwrap_err();
        assert_eq!(missing.line_col(), Some((1, 14)));
        assert!(missing.message().starts_with("cannot read hostfile /etc/herd/hosts.txt: "), "{missing}");
    }

    #[test]
    fn nodes_from_slurm_keeps_slurms_order() {
        let text = format!("nodes_from = \"slurm\"\n{JOB}nproc_per_node = 4\n");
        let config = parse_from(&text, &[("SLURM_JOB_NODELIST", "gpu-[07,01-02],cpu9")], &[], false).unwrap();
        assert_eq!(
            hosts_and_nprocs(&config),
            [("gpu-07", None), ("gpu-01", None), ("gpu-02", None), ("cpu9", None)]
        );
        assert_eq!(config.job.nproc_per_node, 4);
        let config = parse_from(&text, &[("SLURM_NODELIST", "r[1-2]n[01-02]")], &[], false).unwrap();
        let hosts: Vec<&str> = config.nodes.iter().map(|n| n.host.as_str()).collect();
        assert_eq!(hosts, ["r1n01", "r1n02", "r2n01", "r2n02"]);
        // SLURM_JOB_NODELIST wins over the older SLURM_NODELIST.
        let env = [("SLURM_JOB_NODELIST", "a"), ("SLURM_NODELIST", "b")];
        assert_eq!(parse_from(&text, &env, &[], false).unwrap().nodes[0].host, "a");
    }

    #[test]
    fn slurm_errors() {
        let text = format!("nodes_from = \"slurm\"\n{JOB}");
        let err = parse_from(&text, &[], &[], false).unwrap_err();
        assert_eq!(err.line_col(), Some((1, 14)));
        assert_eq!(
            err.message(),
            "nodes_from = \"slurm\": not inside a Slurm allocation (SLURM_JOB_NODELIST and SLURM_NODELIST are unset); run under salloc or sbatch, or list the nodes in [[nodes]]"
        );
        let err = parse_from(&text, &[("SLURM_JOB_NODELIST", "n[3-1]")], &[], false).unwrap_err();
        assert_eq!(
            err.message(),
            "nodes_from = \"slurm\": malformed SLURM_JOB_NODELIST \"n[3-1]\": range 3-1 is descending"
        );
        let err = parse_from(&text, &[("SLURM_JOB_NODELIST", "a,-x")], &[], false).unwrap_err();
        assert!(err.message().contains("invalid host \"-x\" in SLURM_JOB_NODELIST"), "{err}");
        // --slurm: not in the file, so not at a line.
        let err = parse_from(&format!("[[nodes]]\nhost = \"a\"\n{JOB}"), &[], &[], true).unwrap_err();
        assert_eq!(err.line_col(), None);
        assert!(
            err.to_string().starts_with("/etc/herd/cluster.toml: --slurm: not inside a Slurm allocation"),
            "{err}"
        );
    }

    #[test]
    fn the_slurm_flag_overrides_the_files_nodes() {
        let env = [("SLURM_JOB_NODELIST", "s[1-2]")];
        for nodes in ["[[nodes]]\nhost = \"a\"\n", "nodes_from = \"hostfile:none\"\n"] {
            let config = parse_from(&format!("{nodes}{JOB}"), &env, &[], true).unwrap();
            assert_eq!(hosts_and_nprocs(&config), [("s1", None), ("s2", None)]);
        }
        // The master must still be one of the nodes.
        let text = format!("[[nodes]]\nhost = \"a\"\n{JOB}[rendezvous]\nmaster = \"a\"\n");
        let err = parse_from(&text, &env, &[], true).unwrap_err();
        assert_eq!(err.message(), "rendezvous.master \"a\" is not one of the nodes (s1, s2)");
    }

    #[test]
    fn nodes_from_must_be_alone_and_known() {
        let text = format!("nodes_from = \"slurm\"\n[[nodes]]\nhost = \"a\"\n{JOB}");
        let err = parse_from(&text, &[("SLURM_JOB_NODELIST", "a")], &[], false).unwrap_err();
        assert_eq!(err.line_col(), Some((1, 14)));
        assert_eq!(err.message(), "both `nodes_from` and [[nodes]] list the nodes: keep one of them");
        let cases =
            [("slurn", Some("slurm")), ("hostfil:h.txt", Some("hostfile:h.txt")), ("hosts.txt", None)];
        for (value, help) in cases {
            let err = parse_from(&format!("nodes_from = {value:?}\n{JOB}"), &[], &[], false).unwrap_err();
            assert_eq!(
                err.message(),
                format!("unknown nodes_from {value:?}: expected \"hostfile:PATH\" or \"slurm\""),
            );
            assert_eq!(err.help(), help.map(suggest::help).as_deref(), "{value}");
        }
        let err = parse_from(&format!("nodes_from = \"hostfile:\"\n{JOB}"), &[], &[], false).unwrap_err();
        assert_eq!(err.message(), "nodes_from = \"hostfile:\" needs a path: \"hostfile:PATH\"");
        let err = parse_from(&format!("nodes_from = \"hostfile\"\n{JOB}"), &[], &[], false).unwrap_err();
        assert_eq!(err.message(), "nodes_from = \"hostfile\" needs a path: \"hostfile:PATH\"");
    }

    #[test]
    fn nodes_missing_or_empty() {
        assert_file_err(
            JOB,
            "no nodes: add at least one [[nodes]] table with a `host`, or nodes_from = \"hostfile:PATH\" or \"slurm\" before the first table",
        );
        assert_err(
            &format!("nodes = []\n{JOB}"),
            1,
            9,
            "`nodes` is empty: add at least one [[nodes]] table with a `host`",
        );
    }

    #[test]
    fn job_missing_or_script_empty() {
        assert_file_err(
            "[[nodes]]\nhost = \"a\"\n",
            "missing [job] table: add [job] with at least `script = \"train.py\"`",
        );
        assert_err("[[nodes]]\nhost = \"a\"\n[job]\nscript = \"\"\n", 4, 10, "job.script must not be empty");
    }

    #[test]
    fn malformed_hostlists() {
        let cases = [
            ("n[3-1]", "range 3-1 is descending"),
            ("n[1-", "unclosed '[' (missing ']')"),
            ("n[x]", "expected a number, found \"x\""),
            ("n[]", "empty brackets '[]'"),
            ("n]", "unmatched ']'"),
            ("n[1[2]]", "nested '[' is not allowed"),
            ("", "empty hostlist expression"),
            ("a,,b", "empty host name (two ',' in a row or a leading ',')"),
        ];
        for (expr, why) in cases {
            assert_err(
                &format!("[[nodes]]\nhost = \"a\"\n\n[[nodes]]\nhost = \"{expr}\"\n{JOB}"),
                5,
                8,
                &format!("malformed hostlist {expr:?}: {why}"),
            );
        }
    }

    #[test]
    fn invalid_host_characters() {
        let cases = [
            ("a b", "invalid host \"a b\": ' ' is not allowed (only letters, digits and . _ : % - are)"),
            ("a;rm", "invalid host \"a;rm\": ';' is not allowed (only letters, digits and . _ : % - are)"),
            ("$(x)", "invalid host \"$(x)\": '$' is not allowed (only letters, digits and . _ : % - are)"),
            ("-oProxyCommand=x", "invalid host \"-oProxyCommand=x\": a host may not start with '-'"),
            ("user@h", "invalid host \"user@h\": '@' is not allowed (only letters, digits and . _ : % - are)"),
            ("-n[1-2]", "invalid host \"-n1\" (from hostlist \"-n[1-2]\"): a host may not start with '-'"),
            ("ok,b d", "invalid host \"b d\" (from hostlist \"ok,b d\"): ' ' is not allowed (only letters, digits and . _ : % - are)"),
        ];
        for (expr, message) in cases {
            assert_err(&format!("[[nodes]]\nhost = \"{expr}\"\n{JOB}"), 2, 8, message);
        }
        // IPv6 literals and zone ids are fine.
        let text = format!("[[nodes]]\nhost = \"fe80::1%eth0\"\n{JOB}");
        assert_eq!(parse_ok(&text).nodes[0].host, "fe80::1%eth0");
    }

    #[test]
    fn duplicate_hosts() {
        assert_err(
            &format!("[[nodes]]\nhost = \"gpu-[01-03]\"\n[[nodes]]\nhost = \"cpu\"\n[[nodes]]\nhost = \"gpu-02\"\n{JOB}"),
            6,
            8,
            "duplicate host \"gpu-02\": listed in nodes[0] and nodes[2]",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a,n[1-2],n1\"\n{JOB}"),
            2,
            8,
            "duplicate host \"n1\": nodes[0] lists it twice",
        );
    }

    #[test]
    fn addr_rules() {
        assert_err(
            &format!("[[nodes]]\nhost = \"gpu-[01-04]\"\naddr = \"10.0.0.1\"\n{JOB}"),
            3,
            8,
            "`addr` is only allowed on a node whose `host` is a single host, but \"gpu-[01-04]\" expands to 4 hosts",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\naddr = \"10.0.0.1 -oX\"\n{JOB}"),
            3,
            8,
            "invalid addr \"10.0.0.1 -oX\": ' ' is not allowed (only letters, digits and . _ : % - are)",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\naddr = \"-x\"\n{JOB}"),
            3,
            8,
            "invalid addr \"-x\": a host may not start with '-'",
        );
    }

    #[test]
    fn counts_at_least_one() {
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\nnproc = 0\n{JOB}"),
            3,
            9,
            "nodes[0].nproc must be at least 1, found 0",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\n{JOB}nproc_per_node = -2\n"),
            5,
            18,
            "job.nproc_per_node must be at least 1, found -2",
        );
    }

    #[test]
    fn unknown_names() {
        let base = "[[nodes]]\nhost = \"a\"\n";
        assert_err(
            &format!("{base}[job]\nscript = \"x\"\nlauncher = \"mpirun\"\n"),
            5,
            12,
            "unknown launcher \"mpirun\": expected one of torchrun, deepspeed, command",
        );
        assert_err(
            &format!("[ssh]\nknown_hosts = \"yes\"\n{base}{JOB}"),
            2,
            15,
            "unknown known_hosts policy \"yes\": expected one of strict, accept-new",
        );
        assert_err(
            &format!("{base}{JOB}[restart]\non = [\"comm\", \"segfault\"]\n"),
            6,
            15,
            "unknown restart class \"segfault\" in restart.on: expected one of comm, node-lost, hang, port, crash, oom, user, launch",
        );
        assert_err(
            &format!("{base}{JOB}[[restart.rules]]\npattern = \"x\"\nclass = \"nccl\"\n"),
            7,
            9,
            "unknown restart class \"nccl\" in restart.rules[0].class: expected one of comm, node-lost, hang, port, crash, oom, user, launch",
        );
    }

    #[test]
    fn master_must_be_a_node() {
        assert_err(
            &format!("[[nodes]]\nhost = \"gpu-[01-02]\"\n{JOB}[rendezvous]\nmaster = \"gpu-09\"\n"),
            6,
            10,
            "rendezvous.master \"gpu-09\" is not one of the nodes (gpu-01, gpu-02)",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"n[1-20]\"\n{JOB}[rendezvous]\nmaster = \"x\"\n"),
            6,
            10,
            "rendezvous.master \"x\" is not one of the nodes (n1, n2, n3, n4, n5, n6, n7, n8, ...)",
        );
        let text = format!("[[nodes]]\nhost = \"gpu-[01-02]\"\n{JOB}[rendezvous]\nmaster = \"gpu-02\"\n");
        assert_eq!(parse_ok(&text).rendezvous.master.as_deref(), Some("gpu-02"));
        let text = format!("[[nodes]]\nhost = \"gpu-[01-02]\"\n{JOB}[rendezvous]\nmaster = \"gpu-2\"\n");
        assert_eq!(help_of(&text).as_deref(), Some("did you mean \"gpu-02\"?"));
    }

    #[test]
    fn ports_out_of_range() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}");
        assert_err(
            &format!("[ssh]\nport = 0\n{base}"),
            2,
            8,
            "ssh.port: port 0 is out of range (expected 1-65535)",
        );
        assert_err(
            "[[nodes]]\nhost = \"a\"\nport = 65536\n",
            3,
            8,
            "nodes[0].port: port 65536 is out of range (expected 1-65535)",
        );
        assert_err(
            &format!("{base}[rendezvous]\nport = -1\n"),
            6,
            8,
            "rendezvous.port: port -1 is out of range (expected 1-65535)",
        );
        assert_err(
            &format!("{base}[rendezvous]\nport = \"29500\"\n"),
            6,
            8,
            "rendezvous.port must be \"auto\" or a port number 1-65535, found \"29500\"",
        );
        assert_err(
            &format!("{base}[rendezvous]\nport = 1.5\n"),
            6,
            8,
            "rendezvous.port must be \"auto\" or a port number 1-65535, found a float",
        );
    }

    #[test]
    fn port_range_invalid() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}[rendezvous]\n");
        assert_err(
            &format!("{base}port_range = [20000]\n"),
            6,
            14,
            "rendezvous.port_range must be two ports [lo, hi], found 1 values",
        );
        assert_err(
            &format!("{base}port_range = [40000, 20000]\n"),
            6,
            14,
            "rendezvous.port_range [40000, 20000] is empty: the first port must not be greater than the second",
        );
        assert_err(
            &format!("{base}port_range = [0, 20000]\n"),
            6,
            15,
            "rendezvous.port_range: port 0 is out of range (expected 1-65535)",
        );
        assert_err(
            &format!("{base}port_range = [1, 70000]\n"),
            6,
            18,
            "rendezvous.port_range: port 70000 is out of range (expected 1-65535)",
        );
    }

    #[test]
    fn bad_durations() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}");
        assert_err(
            &format!("{base}[restart]\nbackoff = \"10\"\n"),
            6,
            11,
            "invalid duration \"10\" for restart.backoff: time unit needed, for example 10sec or 10ms (write e.g. \"10s\", \"5m\", \"1h 30m\")",
        );
        assert_err(
            &format!("[ssh]\nconnect_timeout = \"soon\"\n{base}"),
            2,
            19,
            "invalid duration \"soon\" for ssh.connect_timeout: expected number at 0 (write e.g. \"10s\", \"5m\", \"1h 30m\")",
        );
        assert_err(
            &format!("{base}[restart]\nnode_wait = 5\n"),
            6,
            13,
            "invalid type: integer `5`, expected a duration string such as \"10s\" or \"5m\"",
        );
        assert_err(
            &format!("{base}[restart]\nhang_timeout = \"0s\"\n"),
            6,
            16,
            "restart.hang_timeout must be greater than zero",
        );
        assert_err(
            &format!("{base}[restart]\nbackoff = \"10m\"\n"),
            6,
            11,
            "restart.backoff (10m) is longer than restart.backoff_max (5m)",
        );
        assert_err(
            &format!("{base}[restart]\nmax_restarts = -1\n"),
            6,
            16,
            "restart.max_restarts must be between 0 and 4294967295, found -1",
        );
    }

    #[test]
    fn every_number_is_bounded() {
        // nproc = 2000000000 on 3 nodes once gave "world size 1705032704".
        assert_err(
            &format!("[[nodes]]\nhost = \"n[1-3]\"\nnproc = 2000000000\n{JOB}"),
            3,
            9,
            "nodes[0].nproc must be at most 1024, found 2000000000",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\n{JOB}nproc_per_node = 5000\n"),
            5,
            18,
            "job.nproc_per_node must be at most 1024, found 5000",
        );
        // heartbeat_timeout = "1000000000h" once ended in a bogus ssh error.
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}");
        assert_err(
            &format!("{base}[restart]\nheartbeat_timeout = \"1000000000h\"\n"),
            6,
            21,
            "restart.heartbeat_timeout must be at most 1h, found \"1000000000h\"",
        );
        assert_err(
            &format!("{base}[restart]\nnode_wait = \"30days\"\n"),
            6,
            13,
            "restart.node_wait must be at most 7days, found \"30days\"",
        );
        // 20 entries of x[1-99999] once made `herd plan` use 7.8 GB: the total is bounded,
        // checked as the entries expand.
        let many: String = (0..20).map(|i| format!("[[nodes]]\nhost = \"x{i}-[1-99999]\"\n")).collect();
        let err = parse(Path::new("c.toml"), &format!("{many}{JOB}")).unwrap_err().to_string();
        assert!(err.starts_with("c.toml:2:8: too many nodes: with \"x0-[1-99999]\""), "{err}");
        let fine: String = (0..2).map(|i| format!("[[nodes]]\nhost = \"x{i}-[1-5000]\"\n")).collect();
        assert_eq!(parse_ok(&format!("{fine}{JOB}")).nodes.len(), MAX_NODES);
    }

    #[test]
    fn env_names_and_values() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}");
        assert_err(
            &format!("{base}[env]\n\"1BAD\" = \"x\"\n"),
            6,
            1,
            "invalid environment variable name \"1BAD\" in [env]: names must be letters, digits and _, not starting with a digit",
        );
        assert_err(
            &format!("{base}[env]\n\"A-B\" = \"x\"\n"),
            6,
            1,
            "invalid environment variable name \"A-B\" in [env]: names must be letters, digits and _, not starting with a digit",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\nenv = {{ \"X Y\" = \"1\" }}\n{JOB}"),
            3,
            9,
            "invalid environment variable name \"X Y\" in nodes[0].env: names must be letters, digits and _, not starting with a digit",
        );
        assert_err(
            &format!("{base}[env]\nNCCL_DEBUG = 1\n"),
            6,
            14,
            "NCCL_DEBUG in [env] must be a string, found an integer; quote it: NCCL_DEBUG = \"1\"",
        );
        assert_err(
            &format!("{base}[env]\nFLAG = true\n"),
            6,
            8,
            "FLAG in [env] must be a string, found a boolean; quote it: FLAG = \"true\"",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\nenv = {{ L = [1] }}\n{JOB}"),
            3,
            13,
            "L in nodes[0].env must be a string, found an array",
        );
    }

    #[test]
    fn reserved_env_names() {
        for name in RESERVED_ENV {
            assert_err(
                &format!("[[nodes]]\nhost = \"a\"\n{JOB}[env]\n{name} = \"x\"\n"),
                6,
                1,
                &format!("{name} is set by herd for every node; remove it from [env]"),
            );
        }
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\n[[nodes]]\nhost = \"b\"\nenv = {{ RANK = \"0\" }}\n{JOB}"),
            5,
            9,
            "RANK is set by herd for every node; remove it from nodes[1].env",
        );
    }

    #[test]
    fn forward_env_patterns() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}");
        let ok = parse_ok(&format!("{base}forward_env = [\"A\", \"_x1\", \"HF_*\", \"P*\"]\n"));
        assert_eq!(ok.job.forward_env, ["A", "_x1", "HF_*", "P*"]);
        for bad in ["*", "HF-*", "*_TOKEN", "A**", "1A", ""] {
            assert_err(
                &format!("{base}forward_env = [\"OK\", \"{bad}\"]\n"),
                5,
                22,
                &format!("invalid job.forward_env entry {bad:?}: expected a variable name or a NAME_* prefix glob (letters, digits and _, not starting with a digit, optionally ending in *)"),
            );
        }
    }

    #[test]
    fn interface_and_other_strings() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}");
        for bad in ["", "eth 0", "../x"] {
            assert_err(
                &format!("{base}[rendezvous]\ninterface = \"{bad}\"\n"),
                6,
                13,
                &format!("invalid rendezvous.interface {bad:?}: expected a network interface name such as \"eth0\" (non-empty, no whitespace or '/')"),
            );
        }
        assert_err(&format!("{base}[logs]\ndir = \"\"\n"), 6, 7, "logs.dir must not be empty");
        assert_err(
            &format!("[ssh]\nuser = \"-oProxyCommand=x\"\n{base}"),
            2,
            8,
            "invalid ssh.user \"-oProxyCommand=x\": it starts with '-'",
        );
        assert_err(
            &format!("{base}[[restart.rules]]\npattern = \"\"\nclass = \"comm\"\n"),
            6,
            11,
            "restart.rules[0].pattern must not be empty",
        );
    }

    #[test]
    fn dotted_key_where_a_value_belongs() {
        assert_err(
            "[[nodes]]\nhost = \"a\"\n[rendezvous]\nport.x = 1\n",
            4,
            6,
            "expected a plain value here, found a dotted key (a table)",
        );
    }

    #[test]
    fn crlf_files_work() {
        let text = "[[nodes]]\r\nhost = \"n[3-1]\"\r\n[job]\r\nscript = \"x\"\r\n";
        let err = parse(Path::new("c.toml"), text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "c.toml:2:8: malformed hostlist \"n[3-1]\": range 3-1 is descending\n   |\n 2 | host = \"n[3-1]\"\n   |        ^^^^^^^^"
        );
    }

    #[test]
    fn invalid_regexes_are_config_errors() {
        let text = format!("[[nodes]]\nhost = \"a\"\n{JOB}[restart]\nprogress_pattern = \"step (\"\n");
        let err = parse(Path::new("c.toml"), &text).unwrap_err().to_string();
        assert!(err.contains("restart.progress_pattern is not a valid regular expression"), "{err}");
        let text =
            format!("[[nodes]]\nhost = \"a\"\n{JOB}[[restart.rules]]\npattern = \"[x\"\nclass = \"comm\"\n");
        let err = parse(Path::new("c.toml"), &text).unwrap_err().to_string();
        assert!(err.contains("restart.rules[0].pattern is not a valid regular expression"), "{err}");
    }

    #[test]
    fn container_table_parses_with_defaults() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}");
        assert_eq!(parse_ok(&base).container, None);
        let c = parse_ok(&format!("{base}[container]\nimage = \"pytorch:24\"\n")).container.unwrap();
        assert_eq!(
            c,
            Container {
                image: "pytorch:24".into(),
                runtime: ContainerRuntime::Docker,
                args: vec![],
                mounts: vec![],
                shm_size: "8g".into(),
            }
        );
        let text = format!(
            "{base}[container]\nimage = \"i\"\nruntime = \"podman\"\nargs = [\"--pull\", \"always\"]\n\
             mounts = [\"/data:/data:ro\", \"cache:/root/.cache\"]\nshm_size = \"512m\"\n"
        );
        let c = parse_ok(&text).container.unwrap();
        assert_eq!(c.runtime, ContainerRuntime::Podman);
        assert_eq!(c.args, ["--pull", "always"]);
        assert_eq!(c.mounts, ["/data:/data:ro", "cache:/root/.cache"]);
        assert_eq!(c.shm_size, "512m");
        assert_eq!(
            parse_ok(&format!("{base}[container]\nimage = \"i\"\nshm_size = \"1024\"\n"))
                .container
                .unwrap()
                .shm_size,
            "1024"
        );
    }

    #[test]
    fn container_errors_are_located() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}[container]\n");
        assert_err(&format!("{base}runtime = \"docker\"\n"), 5, 1, "missing required key `image`");
        assert_err(
            &format!("{base}image = \"\"\n"),
            6,
            9,
            "invalid container.image \"\": expected an image reference such as \"nvcr.io/nvidia/pytorch:24.05-py3\" (non-empty, no whitespace, not starting with '-')",
        );
        assert_err(
            &format!("{base}image = \"--privileged\"\n"),
            6,
            9,
            "invalid container.image \"--privileged\": expected an image reference such as \"nvcr.io/nvidia/pytorch:24.05-py3\" (non-empty, no whitespace, not starting with '-')",
        );
        assert_err(
            &format!("{base}image = \"i\"\nruntime = \"lxc\"\n"),
            7,
            11,
            "unknown container.runtime \"lxc\": expected \"docker\" or \"podman\"",
        );
        assert_err(
            &format!("{base}image = \"i\"\nshm_size = \"8G\"\n"),
            7,
            12,
            "invalid container.shm_size \"8G\": expected a number above zero with an optional unit b, k, m or g, e.g. \"8g\"",
        );
        assert_err(
            &format!("{base}image = \"i\"\nshm_size = \"0m\"\n"),
            7,
            12,
            "invalid container.shm_size \"0m\": expected a number above zero with an optional unit b, k, m or g, e.g. \"8g\"",
        );
        assert_err(
            &format!("{base}image = \"i\"\nshm_size = \"g\"\n"),
            7,
            12,
            "invalid container.shm_size \"g\": expected a number above zero with an optional unit b, k, m or g, e.g. \"8g\"",
        );
        let mount_err = |mount: &str, why: &str| {
            assert_err(
                &format!("{base}image = \"i\"\nmounts = [\"/ok:/ok\", \"{mount}\"]\n"),
                7,
                22,
                &format!(
                    "invalid container.mounts[1] \"{mount}\": {why}; write \"src:dst\" or \"src:dst:options\", e.g. \"/data:/data:ro\""
                ),
            )
        };
        mount_err("/data", "expected 2 or 3 parts separated by ':', found 1");
        mount_err("/a:/b:ro:x", "expected 2 or 3 parts separated by ':', found 4");
        mount_err("./data:/data", "the source \"./data\" must be an absolute path or a volume name");
        mount_err(":/data", "the source \"\" must be an absolute path or a volume name");
        mount_err("/data:data", "the destination \"data\" must be an absolute path");
        mount_err(
            "/data:/data:",
            "the options \"\" must be a comma-separated list such as \"ro\" or \"ro,z\"",
        );
        mount_err(
            "/data:/data:r o",
            "the options \"r o\" must be a comma-separated list such as \"ro\" or \"ro,z\"",
        );
        assert_err(
            &format!("{base}image = \"i\"\ngpus = true\n"),
            7,
            1,
            "unknown field `gpus`, expected one of `image`, `runtime`, `args`, `mounts`, `shm_size`",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\n{JOB}[env]\nHERD_CONTAINER = \"x\"\n"),
            6,
            1,
            "HERD_CONTAINER is set by herd for every node; remove it from [env]",
        );
    }
}
