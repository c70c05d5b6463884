//! The serde schema of the cluster TOML, as written. Nothing here is validated beyond TOML types
//! and unknown keys; `config::parse` validates it into `Config`.
//!
//! Every value validation may complain about is a `Spanned<T>` so errors point at the value.
//! Tables themselves are not spanned: toml cannot span an implicit table (e.g. `[restart]` created
//! by `[[restart.rules]]`), and `Spanned<Table>` fails to deserialize there.

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a cluster config table")]
pub(crate) struct RawConfig {
    /// `"hostfile:PATH"` or `"slurm"`, instead of `[[nodes]]`.
    pub nodes_from: Option<Spanned<String>>,
    pub ssh: Option<RawSsh>,
    pub nodes: Option<Spanned<Vec<RawNode>>>,
    pub job: Option<RawJob>,
    pub env: Option<EnvTable>,
    pub rendezvous: Option<RawRendezvous>,
    pub logs: Option<RawLogs>,
    pub restart: Option<RawRestart>,
    pub container: Option<RawContainer>,
    pub notify: Option<RawNotify>,
    pub transport: Option<RawTransport>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [transport] table")]
pub(crate) struct RawTransport {
    pub kind: Option<Spanned<String>>,
    pub srun_args: Option<Spanned<Vec<String>>>,
    pub steps: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [notify] table")]
pub(crate) struct RawNotify {
    pub command: Spanned<String>,
    pub timeout: Option<Spanned<DurationText>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "an [ssh] table")]
pub(crate) struct RawSsh {
    pub user: Option<Spanned<String>>,
    pub port: Option<Spanned<i64>>,
    pub identity_file: Option<Spanned<String>>,
    pub known_hosts: Option<Spanned<String>>,
    pub known_hosts_file: Option<Spanned<String>>,
    pub connect_timeout: Option<Spanned<DurationText>>,
    pub login_timeout: Option<Spanned<DurationText>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[nodes]] table")]
pub(crate) struct RawNode {
    pub host: Spanned<String>,
    pub addr: Option<Spanned<String>>,
    pub nproc: Option<Spanned<i64>>,
    pub user: Option<Spanned<String>>,
    pub port: Option<Spanned<i64>>,
    pub env: Option<EnvTable>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [job] table")]
pub(crate) struct RawJob {
    pub launcher: Option<Spanned<String>>,
    pub script: Spanned<String>,
    pub args: Option<Vec<String>>,
    pub module: Option<bool>,
    pub workdir: Option<Spanned<String>>,
    pub nproc_per_node: Option<Spanned<i64>>,
    pub setup: Option<String>,
    pub launcher_args: Option<Vec<String>>,
    pub forward_env: Option<Vec<Spanned<String>>>,
    pub python: Option<Spanned<String>>,
    pub device: Option<Spanned<String>>,
    pub nnodes: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [rendezvous] table")]
pub(crate) struct RawRendezvous {
    pub master: Option<Spanned<String>>,
    /// `"auto"` or an integer; checked by validation for a pointed message.
    pub port: Option<Spanned<toml::Value>>,
    pub port_range: Option<Spanned<Vec<Spanned<i64>>>>,
    pub interface: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [logs] table")]
pub(crate) struct RawLogs {
    pub dir: Option<Spanned<String>>,
    pub console: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [restart] table")]
pub(crate) struct RawRestart {
    pub max_restarts: Option<Spanned<i64>>,
    pub on: Option<Vec<Spanned<String>>>,
    pub backoff: Option<Spanned<DurationText>>,
    pub backoff_max: Option<Spanned<DurationText>>,
    pub grace_period: Option<Spanned<DurationText>>,
    pub hang_timeout: Option<Spanned<DurationText>>,
    pub stall_timeout: Option<Spanned<DurationText>>,
    pub progress_pattern: Option<Spanned<String>>,
    pub node_wait: Option<Spanned<DurationText>>,
    pub heartbeat_timeout: Option<Spanned<DurationText>>,
    pub rules: Option<Vec<RawRule>>,
    pub min_nodes: Option<Spanned<i64>>,
    pub resume_args: Option<Spanned<Vec<String>>>,
    pub on_straggler: Option<Spanned<String>>,
    pub checkpoint_signal: Option<Spanned<String>>,
    pub checkpoint_grace: Option<Spanned<DurationText>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[restart.rules]] table")]
pub(crate) struct RawRule {
    pub pattern: Spanned<String>,
    pub class: Spanned<String>,
    pub blame: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [container] table")]
pub(crate) struct RawContainer {
    pub image: Spanned<String>,
    pub runtime: Option<Spanned<String>>,
    pub args: Option<Vec<String>>,
    pub mounts: Option<Vec<Spanned<String>>>,
    pub shm_size: Option<Spanned<String>>,
}

/// An environment table in file order, with spans on names and values. Values are kept as any
/// TOML value so that validation can reject non-strings with a clear message.
#[derive(Debug, Default)]
pub(crate) struct EnvTable(pub Vec<(Spanned<String>, Spanned<toml::Value>)>);

impl<'de> Deserialize<'de> for EnvTable {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EnvVisitor;

        impl<'de> Visitor<'de> for EnvVisitor {
            type Value = EnvTable;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a table of environment variables (NAME = \"value\")")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EnvTable, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(EnvTable(entries))
            }
        }

        deserializer.deserialize_map(EnvVisitor)
    }
}

/// A humantime duration as written (`"10s"`, `"5m"`); parsed by validation. Its own type only so
/// that a non-string says what is expected.
#[derive(Debug)]
pub(crate) struct DurationText(pub String);

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;

        impl Visitor<'_> for DurationVisitor {
            type Value = DurationText;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a duration string such as \"10s\" or \"5m\"")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<DurationText, E> {
                Ok(DurationText(v.to_string()))
            }
        }

        deserializer.deserialize_str(DurationVisitor)
    }
}
