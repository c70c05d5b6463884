//! The one error type the command line renders, and the exit code of each.

use crate::config::{ConfigError, SelectionError};
use crate::supervisor::RunError;

/// Exit codes, documented in the README.
pub mod exit {
    pub const OK: u8 = 0;
    /// The job failed: a node exited non-zero, was killed, or was lost.
    pub const JOB_FAILED: u8 = 1;
    /// `herd logs --timeline`: the page was written, but lines of the run's record that are
    /// no whole event were left out (a run killed while it wrote).
    pub const RECORD_CUT: u8 = 1;
    /// Bad config or usage; nothing was contacted.
    pub const CONFIG: u8 = 2;
    /// A preflight check failed, a node unreachable over SSH included (`herd doctor`, or
    /// `herd run` before it starts anything); or Slurm's own commands failed.
    pub const PREFLIGHT: u8 = 3;
    /// herd could not start the job (no free master port, another run of the same config in
    /// progress); nothing was left running.
    pub const START_FAILED: u8 = 4;
    /// herd itself failed (cannot write its log files, no async runtime).
    pub const INTERNAL: u8 = 5;
    /// Stopped for a time limit's warning (SIGUSR1) or a preemption (SIGTERM in a Slurm job):
    /// the ranks were told to checkpoint, then every node was stopped. No failure: with
    /// `--requeue`, the Slurm job was requeued to go on. 75 is EX_TEMPFAIL.
    pub const PREEMPTED: u8 = 75;
    /// Interrupted by Ctrl-C or SIGTERM; every node was stopped.
    pub const INTERRUPTED: u8 = 130;
    /// stdout was closed by its reader (`herd run | head`): every node was stopped, as for
    /// Ctrl-C, and the log files kept everything. 128 + SIGPIPE, as a shell reports a program
    /// that a closed pipe ended.
    pub const STDOUT_CLOSED: u8 = 141;
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// `--nodes` / `--exclude` do not fit the config.
    #[error("{0}")]
    Selection(#[from] SelectionError),
    #[error("cannot start the job: {0}")]
    Start(#[from] RunError),
    /// The config's quarantine file cannot be read.
    #[error("{0}")]
    Quarantine(#[from] crate::quarantine::QuarantineError),
    /// Too many of the config's nodes are quarantined.
    #[error("{0}")]
    TooFewNodes(#[from] crate::roster::TooFewNodes),
    /// A line for a node's login shell that it cannot take (a long setup or args).
    #[error("{0}")]
    LineTooLong(#[from] crate::supervisor::lines::LineTooLong),
    #[error("{0}")]
    Busy(String),
    /// Slurm's commands (squeue, scancel) failed: slurmctld cannot be reached, or refused.
    #[error("{0}")]
    Slurm(String),
    /// A command line that asks for something that is not there (a run, a node).
    #[error("{0}")]
    Usage(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config(_)
            | Error::Selection(_)
            | Error::Usage(_)
            | Error::Quarantine(_)
            | Error::TooFewNodes(_)
            | Error::LineTooLong(_) => exit::CONFIG,
            // Reaching every node over SSH is the first preflight check.
            Error::Start(RunError::Preflight(_) | RunError::Connect { .. }) | Error::Slurm(_) => {
                exit::PREFLIGHT
            }
            Error::Start(_) | Error::Busy(_) => exit::START_FAILED,
            Error::Io { .. } => exit::INTERNAL,
        }
    }

    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}
