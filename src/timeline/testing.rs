//! What the timeline's tests share: records written by hand, event by event, and long runs
//! made up of them.

use std::time::{Duration, SystemTime};

use super::{Recorded, Stamped};
use crate::outcome::{NodeExit, RootCause};

pub fn t(secs: f64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000) + Duration::from_secs_f64(secs)
}

/// A hand-written record: events at seconds from the run's start.
#[derive(Default)]
pub struct Stream(pub Vec<Stamped>);

impl Stream {
    pub fn at(mut self, secs: f64, event: Recorded) -> Stream {
        self.0.push(Stamped { at: t(secs), event });
        self
    }

    /// Attempt `k` on `nodes` nodes: starting at `from`, every node running 2 s later,
    /// progress 5 s later; nothing after.
    pub fn attempt(self, from: f64, k: u32, nodes: usize) -> Stream {
        let mut s = self.at(from, Recorded::AttemptStarting { attempt: k });
        for node_rank in 0..nodes {
            s = s.at(from + 2.0, Recorded::NodeStarted { attempt: k, node_rank });
        }
        s.at(from + 5.5, Recorded::ProgressSeen { attempt: k, millis: 5000 })
    }

    /// `cause`'s node fails at `at` (class `class`), the attempt ends a second later, and a
    /// restart is scheduled `delay` s later.
    pub fn fault(self, at: f64, k: u32, cause: RootCause, class: &str, delay: f64) -> Stream {
        let (rank, host) = (cause.node_rank, cause.host.clone());
        let exited = Recorded::NodeExited {
            attempt: k,
            node_rank: rank,
            host: host.clone(),
            exit: cause.exit.clone(),
        };
        self.at(at, exited)
            .at(at, Recorded::TeardownStarted { attempt: k, reason: format!("node {rank} ({host}) failed") })
            .at(at + 1.0, failed(k, class, Some(cause)))
            .at(at + 1.0, Recorded::RestartScheduled { attempt: k + 1, delay_ms: (delay * 1000.0) as u64 })
    }
}

pub fn started(hosts: &[&str], spares: &[&str]) -> Recorded {
    Recorded::RunStarted {
        run_id: "r1".into(),
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        spares: spares.iter().map(|h| h.to_string()).collect(),
        quarantined: vec![],
    }
}

pub fn root(node_rank: usize, host: &str, exit: NodeExit) -> RootCause {
    RootCause { rank: None, local_rank: None, node_rank, host: host.into(), exit, line: None }
}

pub fn finished(status: &str) -> Recorded {
    Recorded::RunFinished { status: status.into() }
}

pub fn failed(attempt: u32, class: &str, root_cause: Option<RootCause>) -> Recorded {
    Recorded::AttemptFailed { attempt, class: class.into(), root_cause }
}

/// A run of `attempts` attempts on `nodes` nodes, `every` seconds each: each but the last
/// fails, on node `blame(k)`, after training; 10 s of backoff.
pub fn long_run(nodes: usize, attempts: u32, every: f64, blame: impl Fn(u32) -> usize) -> Stream {
    let hosts: Vec<String> = (0..nodes).map(|i| format!("n{i:03}")).collect();
    let refs: Vec<&str> = hosts.iter().map(String::as_str).collect();
    let mut s = Stream::default().at(0.0, started(&refs, &[]));
    for k in 0..attempts {
        let from = f64::from(k) * every;
        s = s.attempt(from, k, nodes);
        let end = from + every - 12.0;
        if k + 1 < attempts {
            let r = blame(k);
            s = s.fault(end, k, root(r, &hosts[r], NodeExit::ExitCode(1)), "comm", 10.0);
        } else {
            s = s.at(end, Recorded::AttemptSucceeded { attempt: k }).at(end, finished("succeeded"));
        }
    }
    s
}
