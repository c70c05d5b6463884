//! herd: launch multi-node PyTorch training over SSH from one cluster TOML.
//!
//! The data path: `cli` → `config` (validated TOML) → `plan` (a pure launch plan) →
//! `supervisor` (connects through `transport`, runs the `remote` agent on every node, emits
//! `events`) → `output` (prefixed lines, log files, events.jsonl, summary).

pub mod blame;
pub mod classify;
pub mod cli;
pub mod commands;
pub mod config;
pub mod container;
pub mod doctor;
pub mod error;
pub mod events;
pub mod fleet;
pub mod launcher;
pub mod limits;
pub mod lines;
pub mod logs;
pub mod marker;
pub mod metrics;
pub mod nccl;
pub mod notify;
pub mod outcome;
pub mod output;
pub mod plan;
pub mod policy;
pub mod port;
pub mod preempt;
pub mod quarantine;
pub mod remote;
pub mod roster;
pub mod stacks;
pub mod state;
pub mod submit;
pub mod supervisor;
pub mod timeline;
pub mod transport;

/// Diagnostics on stderr: warnings by default, more with -v, fewer with -q; RUST_LOG wins.
pub fn init_tracing(verbose: u8, quiet: bool) {
    use tracing_subscriber::EnvFilter;
    let level = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "debug",
        (false, _) => "trace",
    };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(format!("herd={level},warn")));
    // Colour only for a person at a terminal: `-v 2> file` must hold no escape codes.
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none()
        && std::env::var("TERM").map_or(true, |t| t != "dumb");
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
