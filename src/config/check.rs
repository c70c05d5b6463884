//! What every section's validation shares: the context that locates errors in the file, the
//! checks of leaf values (ports, counts, durations, users, patterns), the limits and defaults,
//! and the rules for host and variable names.

use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use toml::Spanned;

use super::error::ConfigError;
use super::raw::DurationText;
use super::suggest;
use super::types::*;
use crate::outcome::FailureClass;

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

/// The Slurm variables that list an allocation's hosts, the first one set wins.
pub const SLURM_NODELIST_VARS: [&str; 2] = ["SLURM_JOB_NODELIST", "SLURM_NODELIST"];

/// The Slurm variables that name the allocation herd runs in, the first one set wins.
pub const SLURM_JOB_ID_VARS: [&str; 2] = ["SLURM_JOB_ID", "SLURM_JOBID"];

/// What every error of a Slurm config used outside an allocation says; `herd nodes` tells
/// such an error from the others by it, to work on the quarantine file all the same.
pub const OUTSIDE_ALLOCATION: &str = "not inside a Slurm allocation";

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
pub(super) struct Cx<'a> {
    pub(super) path: &'a Path,
    pub(super) text: &'a str,
    pub(super) options: &'a LoadOptions<'a>,
}

pub(super) type Result<T, E = ConfigError> = std::result::Result<T, E>;

impl Cx<'_> {
    pub(super) fn err(&self, span: Range<usize>, message: impl Into<String>) -> ConfigError {
        ConfigError::at(self.path, self.text, span, message)
    }

    pub(super) fn toml_error(&self, e: &toml::de::Error) -> ConfigError {
        let message = polish_toml_message(e.message());
        let help = unknown_key_help(&message);
        match e.span() {
            Some(span) => self.err(span, message),
            None => ConfigError::whole_file(self.path, message),
        }
        .with_help(help)
    }

    pub(super) fn regex(&self, pattern: &Spanned<String>, what: &str) -> Result<(), ConfigError> {
        regex::Regex::new(pattern.get_ref()).map(|_| ()).map_err(|e| {
            let detail = e.to_string();
            let last = detail.lines().last().unwrap_or("").trim().to_string();
            self.err(pattern.span(), format!("{what} is not a valid regular expression: {last}"))
        })
    }

    pub(super) fn failure_class(&self, v: &Spanned<String>, what: &str) -> Result<FailureClass> {
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

    pub(super) fn non_empty(&self, v: Spanned<String>, what: &str) -> Result<String> {
        if v.get_ref().is_empty() {
            return Err(self.err(v.span(), format!("{what} must not be empty")));
        }
        Ok(v.into_inner())
    }

    /// An SSH user name: non-empty, no leading `-`, no whitespace, control characters or `@`.
    pub(super) fn user(&self, v: Spanned<String>, what: &str) -> Result<String> {
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

    pub(super) fn port(&self, v: &Spanned<i64>, what: &str) -> Result<u16> {
        self.port_number(*v.get_ref(), v.span(), what)
    }

    pub(super) fn port_number(&self, n: i64, span: Range<usize>, what: &str) -> Result<u16> {
        match u16::try_from(n) {
            Ok(p) if p >= 1 => Ok(p),
            _ => Err(self.err(span, format!("{what}: port {n} is out of range (expected 1-65535)"))),
        }
    }

    /// A count that must be at least 1 (`nproc`, `nproc_per_node`).
    pub(super) fn count(&self, v: &Spanned<i64>, what: &str) -> Result<u32> {
        match u32::try_from(*v.get_ref()) {
            Ok(n) if (1..=MAX_NPROC).contains(&n) => Ok(n),
            Ok(n) if n >= 1 => {
                Err(self.err(v.span(), format!("{what} must be at most {MAX_NPROC}, found {n}")))
            }
            _ => Err(self.err(v.span(), format!("{what} must be at least 1, found {}", v.get_ref()))),
        }
    }

    /// A count between 1 and `most` (`most_is`: what `most` is, for the message).
    pub(super) fn count_up_to(
        &self,
        v: &Spanned<i64>,
        what: &str,
        most: usize,
        most_is: &str,
    ) -> Result<usize> {
        match usize::try_from(*v.get_ref()) {
            Ok(k) if (1..=most).contains(&k) => Ok(k),
            _ => Err(self.err(
                v.span(),
                format!("{what} must be between 1 and {most_is} ({most}), found {}", v.get_ref()),
            )),
        }
    }

    pub(super) fn duration(&self, v: &Spanned<DurationText>, what: &str) -> Result<Duration> {
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

    /// A duration no shorter than `floor`, `why` saying what the floor is for: a timeout
    /// below it is no setting but a failure of every attempt.
    pub(super) fn duration_at_least(
        &self,
        v: &Spanned<DurationText>,
        what: &str,
        floor: Duration,
        why: &str,
    ) -> Result<Duration> {
        let d = self.duration(v, what)?;
        if d < floor {
            let (text, floor) = (&v.get_ref().0, humantime::format_duration(floor));
            return Err(
                self.err(v.span(), format!("{what} must be at least {floor} ({why}), found {text:?}"))
            );
        }
        Ok(d)
    }

    pub(super) fn positive_duration(&self, v: &Spanned<DurationText>, what: &str) -> Result<Duration> {
        let d = self.duration(v, what)?;
        if d.is_zero() {
            return Err(self.err(v.span(), format!("{what} must be greater than zero")));
        }
        Ok(d)
    }
}

pub(super) fn with_article(type_name: &str) -> String {
    match type_name.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => format!("an {type_name}"),
        _ => format!("a {type_name}"),
    }
}

/// Makes toml/serde messages read like the rest: one line, TOML words instead of Rust types.
pub(super) fn polish_toml_message(message: &str) -> String {
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
pub(super) fn unknown_key_help(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (key, expected) = rest.split_once('`')?;
    let expected = expected.strip_prefix(", expected ")?;
    let names: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    suggest::help_for(key, names)
}

/// The first hosts of `nodes`, comma-separated, `...` when there are more.
pub(super) fn node_list(nodes: &[Node]) -> String {
    const SHOWN: usize = 8;
    let mut hosts: Vec<&str> = nodes.iter().take(SHOWN).map(|n| n.host.as_str()).collect();
    if nodes.len() > SHOWN {
        hosts.push("...");
    }
    hosts.join(", ")
}
