//! What a run takes and gives: its options, its outcome, its errors, its interrupts.

use tokio::sync::mpsc;

use crate::doctor;
use crate::events::{Preemption, RunStatus};
use crate::fleet::ConnectError;
use crate::outcome::Verdict;
use crate::port::PortError;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("preflight failed: {}", first_failure(.0))]
    Preflight(Vec<doctor::NodeChecks>),
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("master node {host}: {error}")]
    Port { host: String, error: PortError },
}

fn first_failure(nodes: &[doctor::NodeChecks]) -> String {
    nodes
        .iter()
        .find_map(|n| {
            let c = n.first_failure()?;
            Some(format!("node {} ({}): {}: {}", n.node_rank, n.host, c.name, c.detail))
        })
        .unwrap_or_default()
}

/// Choices for one run that are not in the config.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// Check the nodes (launcher, versions, interface, master port reachable) before starting.
    pub preflight: bool,
}

/// One attempt, for the closing table.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptSummary {
    pub attempt: u32,
    /// When it began (its agents logging in).
    pub started_at: std::time::SystemTime,
    pub duration: std::time::Duration,
    /// How long after its start it first made progress (a line of a rank, or one matching
    /// `restart.progress_pattern`); `None`: it never did.
    pub first_progress: Option<std::time::Duration>,
    /// `None`: it succeeded or was interrupted.
    pub verdict: Option<Verdict>,
    /// The host of each node rank in this attempt.
    pub nodes: Vec<String>,
    /// The ranks named stragglers in it.
    pub stragglers: Vec<super::straggler::Straggler>,
}

/// How the run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    pub status: RunStatus,
    pub attempts: Vec<AttemptSummary>,
    /// At a run stopped for a time limit or a preemption in a Slurm job, with a
    /// `{latest:GLOB}` in `restart.resume_args`: what the next generation would resume from.
    pub kept: Option<super::Kept>,
}

/// A request from outside the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Ctrl-C, SIGTERM outside Slurm, or stdout closed: the first stops the job gracefully,
    /// the second kills it.
    Interrupt,
    /// A time limit's warning or a preemption: every rank is told to checkpoint
    /// (`restart.checkpoint_signal`), then has `restart.checkpoint_grace` to exit.
    Checkpoint(Preemption),
}

/// Whether the run has decided how it ends (before its last teardown), for what reacts to
/// signals outside the supervisor: a Slurm job that is ending is requeued at once only while
/// its run has not (see `preempt::Requeue`).
#[derive(Debug, Clone, Default)]
pub struct RunEnd(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl RunEnd {
    pub fn decided(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(super) fn decide(&self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The run's requests from outside (`Signal`): whether an interrupt came, and the first
/// preemption. A run with a preemption and no interrupt ends as preempted (and may be
/// requeued); an interrupt, before or after, means someone stopped it.
#[derive(Debug)]
pub struct Interrupts {
    rx: mpsc::UnboundedReceiver<Signal>,
    preempted: Option<Preemption>,
    interrupted: bool,
}

impl Interrupts {
    pub fn new(rx: mpsc::UnboundedReceiver<Signal>) -> Interrupts {
        Interrupts { rx, preempted: None, interrupted: false }
    }

    /// The next request; `None` once no sender is left. Cancel-safe, as the channel's.
    pub async fn recv(&mut self) -> Option<Signal> {
        let got = self.rx.recv().await;
        match got {
            Some(Signal::Checkpoint(p)) => {
                self.preempted.get_or_insert(p);
            }
            Some(Signal::Interrupt) => self.interrupted = true,
            None => {}
        }
        got
    }

    /// The first preemption received, unless an interrupt came too.
    pub fn preempted(&self) -> Option<Preemption> {
        self.preempted.filter(|_| !self.interrupted)
    }
}
