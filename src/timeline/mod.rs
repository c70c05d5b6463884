//! Where a run's time went: its recorded events → the job's own row and a row per node, each
//! a list of segments (launching, starting, training, stopping, backoff; spare, lost,
//! quarantined) with the faults and stragglers marked, and each attempt's times. Pure:
//! `commands::logs` reads events.jsonl (`read`) and writes the page that
//! `output::timeline_view` draws.
//!
//! Every node in the job shares the job's state (the gang starts, trains and stops
//! together); a node's own states are those outside it: a spare, a node lost, a quarantined
//! one, one that left the world.

mod build;
mod read;
#[cfg(test)]
pub(crate) mod testing;

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use crate::outcome::RootCause;
pub use build::{build, Undrawable};
pub use read::{read, Kept, Record, Recorded, Stamped};

/// Past this many node rows, nodes with the same story share one row (see
/// `Timeline::grouped`).
pub const MAX_ROWS: usize = 64;

/// What the job, or a node, is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// herd's part of a start: connecting, the checks, the agents' login and sweep, the port,
    /// until every node's ranks run.
    Launching,
    /// Every node's ranks run; no progress yet (imports, rendezvous, a checkpoint loaded).
    Starting,
    /// The attempt has made progress, and no failure is seen yet.
    Training,
    /// From the failure seen (or the stop asked) to the attempt's end: stacks, teardown.
    Stopping,
    /// The restart's delay (`restart_scheduled`'s `delay_ms`).
    Backoff,
    /// A spare, idle until it takes a node rank.
    Spare,
    /// A node herd lost (its connection gone, its silence judged, or unreachable before a
    /// restart), until it is back or quarantined.
    Lost,
    /// Quarantined: kept out of the run.
    Quarantined,
    /// Out of the job with no spare in its place (`restart.min_nodes`), not quarantined.
    Out,
}

impl State {
    pub const ALL: [State; 9] = [
        State::Launching,
        State::Starting,
        State::Training,
        State::Stopping,
        State::Backoff,
        State::Spare,
        State::Lost,
        State::Quarantined,
        State::Out,
    ];

    pub fn name(self) -> &'static str {
        match self {
            State::Launching => "launching",
            State::Starting => "starting",
            State::Training => "training",
            State::Stopping => "stopping",
            State::Backoff => "backoff",
            State::Spare => "spare",
            State::Lost => "lost",
            State::Quarantined => "quarantined",
            State::Out => "out",
        }
    }

    /// The job's own states, which every node in the job shares.
    pub fn of_job(self) -> bool {
        matches!(
            self,
            State::Launching | State::Starting | State::Training | State::Stopping | State::Backoff
        )
    }
}

/// A stretch of one state, `from` and `to` counted from the run's start.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Segment {
    pub state: State,
    pub from: Duration,
    pub to: Duration,
    /// The attempt it belongs to (the job's states; a backoff's is the attempt it leads to).
    pub attempt: Option<u32>,
    /// Why, for a node's own state: the loss, the quarantine's reason.
    pub note: Option<String>,
}

impl Segment {
    pub fn len(&self) -> Duration {
        self.to.saturating_sub(self.from)
    }
}

/// Something that happened on a node, at a moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub at: Duration,
    pub what: Marked,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Marked {
    /// The root cause of a failed attempt, when the failure was first seen.
    Fault { attempt: u32, class: String, cause: RootCause },
    /// A rank named a straggler, `score` times as busy as the median rank; `alone`: while
    /// every other rank sat idle (the job's own work, which blames no node).
    Straggler { attempt: u32, rank: u32, score: f64, alone: bool },
}

/// A node's row, or several nodes' with the same story (`Timeline::grouped`).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Its hosts, in the run's order: one, unless grouped.
    pub hosts: Vec<String>,
    /// The node ranks they held.
    pub node_ranks: BTreeSet<usize>,
    /// From the run's start to its end, in order.
    pub segments: Vec<Segment>,
    pub marks: Vec<Mark>,
}

impl Row {
    /// The time each of its nodes spent in `state`.
    pub fn time_in(&self, state: State) -> Duration {
        time_in(&self.segments, state)
    }
}

fn time_in(segments: &[Segment], state: State) -> Duration {
    segments.iter().filter(|s| s.state == state).map(Segment::len).sum()
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    /// Its class, and its root cause when one node is to blame.
    Failed {
        class: String,
        root_cause: Option<RootCause>,
    },
    /// Stopped with the run: `preempted`, `time-limit`, `interrupted`, or `failed` (a restart
    /// that could not start).
    Stopped(String),
    /// The record ends before the attempt does (a live run, or herd killed).
    Unknown,
}

/// One attempt's times, from the run's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptTimes {
    pub attempt: u32,
    pub started: Duration,
    /// When every node's ranks were running.
    pub running: Option<Duration>,
    /// When it first made progress.
    pub progress: Option<Duration>,
    /// When its failure was first seen (the root cause's exit, or the stop that a hang or a
    /// node's failure called for), and why.
    pub stopping: Option<(Duration, String)>,
    /// When its root cause's failure was seen, for a failed attempt.
    pub fault: Option<Duration>,
    pub ended: Option<Duration>,
    pub outcome: Outcome,
    /// The delay before the next attempt.
    pub backoff: Option<Duration>,
}

/// A run's timeline, every time counted from its start.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    pub run_id: String,
    pub started: SystemTime,
    /// From the first event to `run_finished`, or to the last event of a record cut short.
    pub wall: Duration,
    /// How it ended (`run_finished`'s status); `None` when the record has no end.
    pub status: Option<String>,
    /// Why no restart could happen, if one could not.
    pub abandoned: Option<String>,
    pub job: Vec<Segment>,
    pub rows: Vec<Row>,
    pub attempts: Vec<AttemptTimes>,
}

impl Timeline {
    /// The time the job trained: every node of its attempt training.
    pub fn training(&self) -> Duration {
        time_in(&self.job, State::Training)
    }

    /// `training` over the wall time.
    pub fn training_share(&self) -> f64 {
        share(self.training(), self.wall)
    }

    /// With more than `max_rows` node rows, nodes whose rows are the same (segments and
    /// marks) share one; if that is still too many, the nodes with the same segments, their
    /// marks together. The nodes that never left the job, in a run no fault pinned on them,
    /// are then one row.
    pub fn grouped(mut self, max_rows: usize) -> Timeline {
        if self.rows.len() <= max_rows {
            return self;
        }
        let same = group(&self.rows, |a, b| a.segments == b.segments && a.marks == b.marks);
        let groups =
            if same.len() <= max_rows { same } else { group(&self.rows, |a, b| a.segments == b.segments) };
        let rows = std::mem::take(&mut self.rows);
        self.rows = groups.into_iter().map(|members| merge(members.into_iter().map(|i| &rows[i]))).collect();
        self
    }
}

/// `part` over `whole`, 0 for nothing.
pub fn share(part: Duration, whole: Duration) -> f64 {
    if whole.is_zero() {
        0.0
    } else {
        part.as_secs_f64() / whole.as_secs_f64()
    }
}

/// The rows' indexes in groups that `same` holds together, each group in the rows' order, the
/// groups in their first member's.
fn group(rows: &[Row], same: impl Fn(&Row, &Row) -> bool) -> Vec<Vec<usize>> {
    // Bucketed by segment count and last change first, so that `same` compares few rows.
    let mut buckets: HashMap<(usize, Option<&Segment>), Vec<usize>> = HashMap::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let bucket = buckets.entry((row.segments.len(), row.segments.last())).or_default();
        match bucket.iter().find(|&&g| same(&rows[groups[g][0]], row)) {
            Some(&g) => groups[g].push(i),
            None => {
                bucket.push(groups.len());
                groups.push(vec![i]);
            }
        }
    }
    groups
}

fn merge<'a>(mut members: impl Iterator<Item = &'a Row>) -> Row {
    let mut row = members.next().expect("a group has a member").clone();
    for other in members {
        row.hosts.extend(other.hosts.iter().cloned());
        row.node_ranks.extend(&other.node_ranks);
        for mark in &other.marks {
            if !row.marks.contains(mark) {
                row.marks.push(mark.clone());
            }
        }
    }
    row.marks.sort_by_key(|m| m.at);
    row
}
