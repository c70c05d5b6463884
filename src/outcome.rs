//! How nodes and attempts end, as plain data: a node's exit, what the supervisor saw of it,
//! the failure classes, and the classifier's verdict. `classify` computes verdicts from these;
//! `events` carries them; neither needs the other.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why an attempt failed. Ordered by how the classifier reports them, not by severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureClass {
    Comm,
    NodeLost,
    Hang,
    Port,
    Crash,
    Oom,
    User,
    Launch,
    /// Slurm ended the allocation the run was in (scancel, its time limit, its salloc): no
    /// node's failure, and nothing to restart in. Never configurable (not in [`Self::ALL`]).
    Allocation,
}

impl FailureClass {
    pub const ALL: [FailureClass; 8] = [
        FailureClass::Comm,
        FailureClass::NodeLost,
        FailureClass::Hang,
        FailureClass::Port,
        FailureClass::Crash,
        FailureClass::Oom,
        FailureClass::User,
        FailureClass::Launch,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Comm => "comm",
            FailureClass::NodeLost => "node-lost",
            FailureClass::Hang => "hang",
            FailureClass::Port => "port",
            FailureClass::Crash => "crash",
            FailureClass::Oom => "oom",
            FailureClass::User => "user",
            FailureClass::Launch => "launch",
            FailureClass::Allocation => "allocation",
        }
    }

    pub fn parse(s: &str) -> Option<FailureClass> {
        FailureClass::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl serde::Serialize for FailureClass {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl std::fmt::Display for FailureClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a node's launcher ended. Read back too, from a run's record (`timeline::read`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeExit {
    /// It exited with this code.
    ExitCode(i32),
    /// It was killed by this signal.
    Signal(i32),
    /// herd lost the node (SSH connection gone) before it reported an exit.
    Lost(String),
}

impl NodeExit {
    pub fn success(&self) -> bool {
        matches!(self, NodeExit::ExitCode(0))
    }

    /// From the wait status a POSIX shell reports: 128+N means signal N.
    pub fn from_shell_status(status: i32) -> NodeExit {
        if (129..=128 + 64).contains(&status) {
            NodeExit::Signal(status - 128)
        } else {
            NodeExit::ExitCode(status)
        }
    }
}

impl std::fmt::Display for NodeExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeExit::ExitCode(c) => write!(f, "exit code {c}"),
            NodeExit::Signal(s) => write!(f, "signal {s} ({})", signal_name(*s)),
            NodeExit::Lost(why) => write!(f, "connection lost ({why})"),
        }
    }
}

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => "signal",
    }
}

/// One process of a node's job as the agent saw it when asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ProcessState {
    pub pid: u32,
    /// The state letter of /proc/PID/stat: R, S, D, T, t, Z, ...
    pub state: char,
    /// `RANK` and `LOCAL_RANK` of its environment: a worker's; a launcher has none.
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
}

/// A line as the supervisor received it, with its arrival time since the attempt started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedLine {
    pub at: Duration,
    pub text: String,
}

/// What the supervisor saw of one node in one attempt.
#[derive(Debug, Clone)]
pub struct NodeOutcome {
    pub node_rank: usize,
    pub host: String,
    /// The global rank of its local rank 0.
    pub first_rank: u32,
    pub exit: NodeExit,
    pub ended_at: Duration,
    /// When herd asked it to stop, if it was still running then.
    pub stop_requested_at: Option<Duration>,
    /// When herd saw it lost (its silence judged, its connection gone), if it was: a silent
    /// node ends only once herd stops waiting for it.
    pub lost_at: Option<Duration>,
    /// Its silence was judged while heartbeats were late on many nodes at once, which herd
    /// had warned of, or its connection was lost while herd found its own host overloaded:
    /// the fleet's lateness, no evidence against this node. A node truly gone so is waited
    /// for at the restart (`restart.node_wait`), not replaced.
    pub late_fleet: bool,
    /// Its last lines.
    pub lines: Vec<TimedLine>,
    /// Its job's processes as its agent saw them when herd probed the nodes, on a hang or
    /// before stopping them after a failure (empty otherwise, or when the agent did not
    /// answer in time).
    pub processes: Vec<ProcessState>,
    /// Its workers' stacks, collected with `processes`.
    pub stacks: Vec<crate::stacks::RankStack>,
}

/// Why herd itself ended an attempt, when no node's exit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    NodeFailed,
    /// No progress for `restart.hang_timeout`.
    Hang,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootCause {
    /// Global rank of the failing process, when the launcher said which.
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub node_rank: usize,
    pub host: String,
    #[serde(flatten)]
    pub exit: NodeExit,
    pub line: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Consequence {
    pub node_rank: usize,
    pub host: String,
    pub class: FailureClass,
    #[serde(flatten)]
    pub exit: NodeExit,
    pub line: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub class: FailureClass,
    /// `None` when nothing points at one node: a hang in which every rank stopped making
    /// progress at once and none was found stopped or stuck. herd blames no node on a guess.
    pub root_cause: Option<RootCause>,
    pub consequences: Vec<Consequence>,
    pub hint: &'static str,
}
