//! What happens during a run, as plain data. The supervisor emits these; the output side
//! turns them into prefixed lines, log files and events.jsonl. Neither looks at the other.

use std::time::SystemTime;

pub use crate::remote::frames::Source;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::lines::Lines;
use crate::outcome::{FailureClass, NodeExit, Verdict};

/// Why the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Succeeded,
    Failed,
    Interrupted,
    /// Stopped for a preemption (SIGTERM to herd in a Slurm job): the ranks were told to
    /// checkpoint.
    Preempted,
    /// Stopped for the time limit's warning (SIGUSR1 to herd), or the time limit itself: the
    /// ranks were told to checkpoint.
    #[serde(rename = "time-limit")]
    TimeLimit,
}

impl RunStatus {
    /// Stopped for a preemption or a time limit: a run to go on in another allocation.
    pub fn preempted(self) -> bool {
        matches!(self, RunStatus::Preempted | RunStatus::TimeLimit)
    }
}

/// Why herd stops a run that has not failed, so that it goes on elsewhere: what it tells the
/// ranks (`restart.checkpoint_signal`) and what it says it ended as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preemption {
    /// SIGUSR1: Slurm's warning before the time limit (`sbatch --signal=B:USR1@SECONDS`).
    TimeLimit,
    /// SIGTERM in a Slurm job: a preemption (or `scancel --signal=TERM --batch`).
    Preempted,
    /// SIGTERM in a Slurm job at the time limit itself, no warning having come early enough:
    /// Slurm kills what is left after its KillWait.
    OutOfTime,
}

impl Preemption {
    pub fn status(self) -> RunStatus {
        match self {
            Preemption::TimeLimit | Preemption::OutOfTime => RunStatus::TimeLimit,
            Preemption::Preempted => RunStatus::Preempted,
        }
    }

    /// What the teardown says.
    pub fn describe(self) -> &'static str {
        match self {
            Preemption::TimeLimit => "the time limit is near (SIGUSR1)",
            Preemption::Preempted => "preempted",
            Preemption::OutOfTime => "the time limit is here (SIGTERM)",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    RunStarted {
        run_id: String,
        config: String,
        /// The first part of HERD_MARKER in every job process of this config's runs.
        config_key: String,
        launcher: &'static str,
        nnodes: usize,
        world_size: u32,
        /// Attempts after the first that failures may use (restart.max_restarts).
        max_restarts: u32,
        hosts: Vec<String>,
        /// Processes (ranks) per node, in node order: node r holds the global ranks that
        /// follow those of the nodes before it.
        nprocs: Vec<u32>,
        log_dir: String,
        /// The config's spares (beyond `job.nnodes`), in file order.
        spares: Vec<String>,
        /// Nodes earlier runs of this config quarantined, left out of this one.
        quarantined: Vec<Quarantined>,
    },
    NodeConnected {
        node_rank: usize,
        host: String,
        millis: u64,
    },
    /// The checks before the first attempt began on every node.
    PreflightStarted {
        nnodes: usize,
    },
    /// An attempt's agents are logging in (and, on the master, reporting its ports in use):
    /// from here on, what its nodes print is the attempt's.
    AttemptStarting {
        attempt: u32,
    },
    /// Its master port is known, and every node is given its env: the job starts.
    AttemptStarted {
        attempt: u32,
        master_addr: String,
        master_port: u16,
    },
    NodeStarted {
        attempt: u32,
        node_rank: usize,
        host: String,
        pgid: u32,
    },
    /// The attempt's first progress (a rank's line, or one matching `restart.progress_pattern`),
    /// `millis` after it began; told at the supervisor's next check (within 250 ms), and before
    /// the teardown of the attempt, if any.
    ProgressSeen {
        attempt: u32,
        millis: u64,
    },
    /// Lines one source of a node (its launcher, or one rank: see `Source`) wrote, bytes
    /// exactly as they arrived.
    #[serde(skip)]
    NodeOutput {
        node_rank: usize,
        source: Source,
        lines: Lines,
    },
    NodeExited {
        attempt: u32,
        node_rank: usize,
        host: String,
        #[serde(flatten)]
        exit: NodeExit,
    },
    /// Every node still running is asked for its ranks' stacks, before the teardown that
    /// `reason` calls for (at most `wait_secs` later).
    StacksRequested {
        attempt: u32,
        reason: String,
        wait_secs: u64,
    },
    TeardownStarted {
        attempt: u32,
        reason: String,
    },
    /// A time limit or a preemption: every rank of the running job was sent `signal`
    /// (`restart.checkpoint_signal`) to checkpoint and exit.
    CheckpointRequested {
        attempt: u32,
        signal: String,
    },
    AttemptFailed {
        attempt: u32,
        millis: u64,
        #[serde(flatten)]
        verdict: Verdict,
    },
    /// A rank stayed busier than the others, who wait for it (see `supervisor::straggler`):
    /// `score` times the median rank's CPU share, since `since_secs` into the attempt.
    Straggler {
        attempt: u32,
        rank: u32,
        node_rank: usize,
        host: String,
        score: f64,
        since_secs: f64,
        /// It computed while every other rank sat idle: the job's own work, which blames no
        /// node (`supervisor::straggler::IDLE`).
        #[serde(default)]
        alone: bool,
    },
    /// A node could not be reached before a restart; herd keeps trying until restart.node_wait.
    NodeWaiting {
        node_rank: usize,
        host: String,
        error: String,
    },
    /// Processes of an earlier attempt or run that were still there, and were stopped.
    LeftoversStopped {
        node_rank: usize,
        host: String,
        pids: Vec<u32>,
    },
    /// Containers of an earlier attempt or run (`[container]`) that were still there, and
    /// were removed.
    ContainersRemoved {
        node_rank: usize,
        host: String,
        names: Vec<String>,
    },
    /// Processes of a node's job still alive after SIGKILL (stuck in the kernel: a hung
    /// filesystem or driver). herd says so rather than that the node stopped.
    ProcessesUnstopped {
        node_rank: usize,
        host: String,
        pids: Vec<u32>,
    },
    /// Every worker's stack on a node, as py-spy dumped it when the job hung or, after a
    /// failure, before the nodes still running were stopped (the run's files keep each in
    /// `attempt-<k>/stacks/rank<R>.txt`).
    #[serde(skip)]
    StacksCollected {
        attempt: u32,
        node_rank: usize,
        stacks: Vec<crate::stacks::RankStack>,
    },
    /// Where the ranks were when the job hung (or outlived a failure), grouped, and the odd
    /// group (a hang's only).
    StacksSummarized {
        attempt: u32,
        #[serde(flatten)]
        summary: crate::stacks::Summary,
    },
    /// A node's ranks' NCCL flight-recorder dumps after a failed attempt (the run's files
    /// keep each in `attempt-<k>/nccl/rank_<R>`).
    #[serde(skip)]
    NcclDumpsCollected {
        attempt: u32,
        node_rank: usize,
        dumps: Vec<crate::nccl::RankDump>,
    },
    /// The ranks whose NCCL dumps herd copied after a failed attempt, and the ones it could
    /// not (too large, cut short), with why.
    NcclDumpsSaved {
        attempt: u32,
        ranks: Vec<u32>,
        missing: Vec<(u32, String)>,
    },
    /// A node the run blamed is kept out of it, and, when `saved` (the config's quarantine
    /// file records it), of the config's later runs until `herd nodes --release`.
    NodeQuarantined {
        attempt: u32,
        host: String,
        reason: String,
        saved: bool,
    },
    /// A node the run quarantined is released: the fault it was blamed for turned out not to
    /// be its own, as failed attempt `attempt` showed. This run has it as a spare (from the
    /// next attempt, if one runs), and, when `saved` (the config's quarantine file no longer
    /// lists it), so may later runs of the config.
    NodeReleased {
        attempt: u32,
        host: String,
        reason: String,
        saved: bool,
    },
    /// A spare takes a quarantined node's place from `attempt` on, with its node rank.
    SparePromoted {
        attempt: u32,
        node_rank: usize,
        host: String,
        replaced: String,
    },
    /// From `attempt` on, the job's world differs: it runs without `dropped` (`restart.min_nodes`;
    /// node ranks are recounted over `hosts`), or a promoted spare runs another number of ranks.
    WorldChanged {
        attempt: u32,
        nnodes: usize,
        world_size: u32,
        hosts: Vec<String>,
        nprocs: Vec<u32>,
        /// The nodes that left with no spare in their place.
        dropped: Vec<String>,
    },
    /// Attempt `attempt` resumes (`restart.resume_args`): from the checkpoint found, with
    /// these arguments appended; `from` null and no arguments: nothing matched, it starts
    /// afresh.
    Resuming {
        attempt: u32,
        from: Option<String>,
        args: Vec<String>,
    },
    /// A restart could not happen (a node did not come back); the run ends failed.
    RestartAbandoned {
        reason: String,
    },
    RestartScheduled {
        attempt: u32,
        delay_ms: u64,
        class: FailureClass,
    },
    AttemptSucceeded {
        attempt: u32,
        millis: u64,
    },
    RunFinished {
        status: RunStatus,
        attempts: u32,
    },
}

/// An event, and when it happened: dated by the task that saw it, as it tells it. The
/// reporter may be seconds behind on a busy launch host (hundreds of nodes' logins on its
/// cores), and the record says when each thing happened, not when it was written.
#[derive(Debug, Clone)]
pub struct Dated {
    pub at: SystemTime,
    pub event: Event,
}

/// The sending side of a run's events: each is dated as it is sent (see `Dated`).
#[derive(Debug, Clone)]
pub struct EventSender(mpsc::Sender<Dated>);

/// A channel of `capacity` events, each dated as it is sent.
pub fn channel(capacity: usize) -> (EventSender, mpsc::Receiver<Dated>) {
    let (tx, rx) = mpsc::channel(capacity);
    (EventSender(tx), rx)
}

impl EventSender {
    /// `event`, dated now, once the channel has room; the event back if the reporter is gone.
    pub async fn send(&self, event: Event) -> Result<(), mpsc::error::SendError<Event>> {
        let dated = Dated { at: SystemTime::now(), event };
        self.0.send(dated).await.map_err(|e| mpsc::error::SendError(e.0.event))
    }
}

impl Event {
    /// The nodes (hosts and ranks per node, by node rank) after this event, given those
    /// before it: `Some` for the events that change them.
    pub fn renamed(&self, hosts: &[String], nprocs: &[u32]) -> Option<(Vec<String>, Vec<u32>)> {
        match self {
            Event::RunStarted { hosts, nprocs, .. } => Some((hosts.clone(), nprocs.clone())),
            Event::SparePromoted { node_rank, host, .. } => {
                let mut hosts = hosts.to_vec();
                *hosts.get_mut(*node_rank)? = host.clone();
                Some((hosts, nprocs.to_vec()))
            }
            Event::WorldChanged { hosts, nprocs, .. } => Some((hosts.clone(), nprocs.clone())),
            _ => None,
        }
    }
}

/// A quarantined node, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Quarantined {
    pub host: String,
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_status_above_128_is_a_signal() {
        assert_eq!(NodeExit::from_shell_status(0), NodeExit::ExitCode(0));
        assert_eq!(NodeExit::from_shell_status(1), NodeExit::ExitCode(1));
        assert_eq!(NodeExit::from_shell_status(137), NodeExit::Signal(9));
        assert_eq!(NodeExit::from_shell_status(143), NodeExit::Signal(15));
        assert_eq!(NodeExit::from_shell_status(255), NodeExit::ExitCode(255));
    }

    #[test]
    fn node_exited_serialises_flat() {
        let e = Event::NodeExited { attempt: 0, node_rank: 1, host: "n2".into(), exit: NodeExit::Signal(9) };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"event":"node_exited","attempt":0,"node_rank":1,"host":"n2","signal":9}"#
        );
        let e =
            Event::NodeExited { attempt: 0, node_rank: 1, host: "n2".into(), exit: NodeExit::ExitCode(3) };
        assert!(serde_json::to_string(&e).unwrap().ends_with(r#""exit_code":3}"#));
    }
}
