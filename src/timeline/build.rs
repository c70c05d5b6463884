//! A run's recorded events → its `Timeline`: the job's state moves with the attempts (and the
//! backoff between them, which no event ends), every node in the job shares it, and a node's
//! own state (spare, lost, quarantined, out) is laid over it. Pure.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use super::{AttemptTimes, Mark, Marked, Outcome, Recorded, Row, Segment, Stamped, State, Timeline};
use crate::outcome::NodeExit;

/// Why a record draws no timeline.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Undrawable {
    #[error("it has no run_started event")]
    NotStarted,
    #[error("the run made no attempt (it stopped before its first: summary.json says why)")]
    NoAttempts,
}

/// The timeline of a run's `events`, in the order they were recorded.
pub fn build(events: &[Stamped]) -> Result<Timeline, Undrawable> {
    let start = events.iter().position(|e| matches!(e.event, Recorded::RunStarted { .. }));
    let Some(start) = start else {
        return Err(Undrawable::NotStarted);
    };
    let mut b = Builder::new(&events[start]);
    for e in &events[start + 1..] {
        let at = e.at.duration_since(b.origin).unwrap_or_default().max(b.moved);
        b.last = at;
        b.catch_up(at);
        b.apply(at, &e.event);
        if b.status.is_some() {
            break;
        }
    }
    if b.attempts.is_empty() {
        return Err(Undrawable::NoAttempts);
    }
    Ok(b.finish())
}

/// The job's state, and the attempt it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Phase {
    state: State,
    attempt: u32,
}

/// A row being built: its segment open at the end.
#[derive(Default)]
struct Track {
    segments: Vec<Segment>,
}

impl Track {
    /// From `at` on, `state` (of `attempt`, with `note`): the open segment closed, unless it
    /// is the same. A segment that would last no time is none.
    fn set(&mut self, at: Duration, state: State, attempt: Option<u32>, note: Option<&str>) {
        if let Some(open) = self.segments.last_mut() {
            if open.state == state && open.attempt == attempt && open.note.as_deref() == note {
                return;
            }
            open.to = at;
            if open.from >= at {
                self.segments.pop();
                // Its neighbours may now be the same: one segment again.
                if let Some(before) = self.segments.last() {
                    if before.state == state && before.attempt == attempt && before.note.as_deref() == note {
                        return;
                    }
                }
            }
        }
        let note = note.map(String::from);
        self.segments.push(Segment { state, from: at, to: at, attempt, note });
    }

    fn finish(mut self, end: Duration) -> Vec<Segment> {
        if let Some(open) = self.segments.last_mut() {
            open.to = end;
        }
        self.segments.retain(|s| s.to > s.from);
        self.segments
    }
}

/// What a node is to the run, beside the job's state.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Role {
    Active,
    Spare,
    Quarantined(String),
    Out,
}

struct NodeTrack {
    host: String,
    node_ranks: BTreeSet<usize>,
    role: Role,
    /// Lost while in the job, and how, until the next attempt starts with it.
    lost: Option<String>,
    track: Track,
    marks: Vec<Mark>,
}

impl NodeTrack {
    fn new(host: &str, role: Role) -> NodeTrack {
        NodeTrack {
            host: host.to_string(),
            node_ranks: BTreeSet::new(),
            role,
            lost: None,
            track: Track::default(),
            marks: Vec::new(),
        }
    }

    fn refresh(&mut self, at: Duration, phase: Phase) {
        let (state, attempt, note) = match (&self.role, &self.lost) {
            (Role::Active, Some(why)) => (State::Lost, None, Some(why.as_str())),
            (Role::Active, None) => (phase.state, Some(phase.attempt), None),
            (Role::Spare, _) => (State::Spare, None, None),
            (Role::Quarantined(why), _) => (State::Quarantined, None, Some(why.as_str())),
            (Role::Out, _) => (State::Out, None, None),
        };
        self.track.set(at, state, attempt, note);
    }
}

struct Builder {
    run_id: String,
    origin: SystemTime,
    /// The latest time anything changed: later events are never placed before it.
    moved: Duration,
    /// The latest event's time.
    last: Duration,
    phase: Phase,
    job: Track,
    nodes: Vec<NodeTrack>,
    /// The node of each node rank, as an index into `nodes`.
    active: Vec<usize>,
    attempts: Vec<AttemptTimes>,
    /// The node ranks whose ranks run in the attempt at hand.
    running: BTreeSet<usize>,
    /// The first failure seen of each node rank in the attempt at hand.
    failed_at: HashMap<usize, Duration>,
    /// When the backoff ends, and the attempt it leads to.
    backoff_until: Option<(Duration, u32)>,
    status: Option<String>,
    end: Option<Duration>,
    abandoned: Option<String>,
}

impl Builder {
    fn new(first: &Stamped) -> Builder {
        let Recorded::RunStarted { run_id, hosts, spares, quarantined } = &first.event else {
            unreachable!("a timeline starts at run_started")
        };
        let mut nodes: Vec<NodeTrack> = Vec::new();
        let mut active = Vec::new();
        for (rank, host) in hosts.iter().enumerate() {
            let mut node = NodeTrack::new(host, Role::Active);
            node.node_ranks.insert(rank);
            active.push(nodes.len());
            nodes.push(node);
        }
        nodes.extend(spares.iter().map(|h| NodeTrack::new(h, Role::Spare)));
        nodes
            .extend(quarantined.iter().map(|q| NodeTrack::new(&q.host, Role::Quarantined(q.reason.clone()))));
        let mut b = Builder {
            run_id: run_id.clone(),
            origin: first.at,
            moved: Duration::ZERO,
            last: Duration::ZERO,
            phase: Phase { state: State::Launching, attempt: 0 },
            job: Track::default(),
            nodes,
            active,
            attempts: Vec::new(),
            running: BTreeSet::new(),
            failed_at: HashMap::new(),
            backoff_until: None,
            status: None,
            end: None,
            abandoned: None,
        };
        b.set_phase(Duration::ZERO, b.phase);
        b
    }

    fn set_phase(&mut self, at: Duration, phase: Phase) {
        self.phase = phase;
        self.moved = self.moved.max(at);
        self.job.set(at, phase.state, Some(phase.attempt), None);
        for node in &mut self.nodes {
            node.refresh(at, phase);
        }
    }

    fn refresh(&mut self, at: Duration, node: usize) {
        self.moved = self.moved.max(at);
        self.nodes[node].refresh(at, self.phase);
    }

    /// The node of `host`, a new row if the run has not named it yet.
    fn node(&mut self, host: &str) -> usize {
        match self.nodes.iter().position(|n| n.host == host) {
            Some(i) => i,
            None => {
                self.nodes.push(NodeTrack::new(host, Role::Out));
                self.nodes.len() - 1
            }
        }
    }

    /// The attempt at hand, if it is `attempt`.
    fn current(&mut self, attempt: u32) -> Option<&mut AttemptTimes> {
        self.attempts.last_mut().filter(|a| a.attempt == attempt)
    }

    /// The backoff over by `at`: herd readies the next attempt.
    fn catch_up(&mut self, at: Duration) {
        if let Some((until, next)) = self.backoff_until.filter(|(until, _)| *until <= at) {
            self.backoff_until = None;
            self.set_phase(until.max(self.moved), Phase { state: State::Launching, attempt: next });
        }
    }

    /// The failure of attempt `attempt` seen, or its stop asked, at `at`: the job stops.
    fn stop(&mut self, at: Duration, attempt: u32, why: String) {
        let running = matches!(self.phase.state, State::Launching | State::Starting | State::Training);
        if self.phase.attempt != attempt || !running {
            return;
        }
        if let Some(a) = self.current(attempt) {
            a.stopping = Some((at, why));
        }
        self.set_phase(at, Phase { state: State::Stopping, attempt });
    }

    fn apply(&mut self, at: Duration, event: &Recorded) {
        match event {
            Recorded::AttemptStarting { attempt } => {
                self.attempts.push(AttemptTimes {
                    attempt: *attempt,
                    started: at,
                    running: None,
                    progress: None,
                    stopping: None,
                    fault: None,
                    ended: None,
                    outcome: Outcome::Unknown,
                    backoff: None,
                });
                self.running.clear();
                self.failed_at.clear();
                self.backoff_until = None;
                // Its nodes are connected again.
                for &node in &self.active {
                    self.nodes[node].lost = None;
                }
                self.set_phase(at, Phase { state: State::Launching, attempt: *attempt });
            }
            Recorded::NodeStarted { attempt, node_rank } => {
                self.running.insert(*node_rank);
                let all = self.running.len() >= self.active.len();
                if let Some(a) = self.current(*attempt).filter(|a| all && a.running.is_none()) {
                    a.running = Some(at);
                    if self.phase == (Phase { state: State::Launching, attempt: *attempt }) {
                        self.set_phase(at, Phase { state: State::Starting, attempt: *attempt });
                    }
                }
            }
            Recorded::ProgressSeen { attempt, millis } => {
                let moved = self.moved;
                let Some(a) = self.current(*attempt) else { return };
                // Told at the supervisor's next check: placed when it was seen, never before
                // what came since.
                let seen = (a.started + Duration::from_millis(*millis)).clamp(moved, at);
                a.progress = Some(seen);
                if matches!(self.phase.state, State::Launching | State::Starting)
                    && self.phase.attempt == *attempt
                {
                    self.set_phase(seen, Phase { state: State::Training, attempt: *attempt });
                }
            }
            Recorded::NodeExited { attempt, node_rank, host, exit } => {
                if let NodeExit::Lost(why) = exit {
                    let node = self.node(host);
                    self.nodes[node].lost = Some(format!("lost in attempt {attempt}: {why}"));
                    self.refresh(at, node);
                }
                if !exit.success() {
                    self.failed_at.entry(*node_rank).or_insert(at);
                    self.stop(at, *attempt, format!("node {node_rank} ({host}): {exit}"));
                }
            }
            Recorded::StacksRequested { attempt, reason } | Recorded::TeardownStarted { attempt, reason } => {
                self.stop(at, *attempt, reason.clone());
            }
            Recorded::CheckpointRequested { attempt, signal } => {
                self.stop(at, *attempt, format!("the ranks told to checkpoint ({signal})"));
            }
            Recorded::AttemptFailed { attempt, class, root_cause } => {
                // A failure no exit or stop showed first (none is expected) is seen now.
                self.stop(at, *attempt, format!("failed: {class}"));
                let seen = root_cause.as_ref().and_then(|r| self.failed_at.get(&r.node_rank).copied());
                let Some(a) = self.current(*attempt) else { return };
                let fault = seen.or(a.stopping.as_ref().map(|(t, _)| *t)).unwrap_or(at);
                a.ended = Some(at);
                a.fault = Some(fault);
                a.outcome = Outcome::Failed { class: class.clone(), root_cause: root_cause.clone() };
                if let Some(cause) = root_cause {
                    let node = self.node(&cause.host);
                    let what =
                        Marked::Fault { attempt: *attempt, class: class.clone(), cause: cause.clone() };
                    self.nodes[node].marks.push(Mark { at: fault, what });
                }
            }
            Recorded::AttemptSucceeded { attempt } => {
                if let Some(a) = self.current(*attempt) {
                    a.ended = Some(at);
                    a.outcome = Outcome::Succeeded;
                }
            }
            Recorded::RestartScheduled { attempt, delay_ms } => {
                let delay = Duration::from_millis(*delay_ms);
                if let Some(a) = self.attempts.last_mut() {
                    a.backoff = Some(delay);
                }
                self.backoff_until = Some((at + delay, *attempt));
                self.set_phase(at, Phase { state: State::Backoff, attempt: *attempt });
            }
            Recorded::Straggler { attempt, rank, host, score, alone } => {
                let node = self.node(host);
                let what = Marked::Straggler { attempt: *attempt, rank: *rank, score: *score, alone: *alone };
                self.nodes[node].marks.push(Mark { at, what });
            }
            Recorded::NodeWaiting { host, error } => {
                let node = self.node(host);
                self.nodes[node].lost = Some(format!("unreachable before the restart: {error}"));
                self.refresh(at, node);
            }
            Recorded::NodeQuarantined { host, reason } => {
                let node = self.node(host);
                self.nodes[node].role = Role::Quarantined(reason.clone());
                self.refresh(at, node);
            }
            Recorded::NodeReleased { host } => {
                let node = self.node(host);
                self.nodes[node].role = Role::Spare;
                self.refresh(at, node);
            }
            Recorded::SparePromoted { node_rank, host, replaced } => {
                let (node, gone) = (self.node(host), self.node(replaced));
                if self.nodes[gone].role == Role::Active {
                    self.nodes[gone].role = Role::Out;
                }
                if let Some(slot) = self.active.get_mut(*node_rank) {
                    *slot = node;
                }
                self.join(at, node, *node_rank);
                self.refresh(at, gone);
            }
            Recorded::WorldChanged { hosts } => {
                let before = std::mem::take(&mut self.active);
                self.active = hosts.iter().map(|h| self.node(h)).collect();
                let left: Vec<usize> = before.into_iter().filter(|n| !self.active.contains(n)).collect();
                for node in left {
                    if self.nodes[node].role == Role::Active {
                        self.nodes[node].role = Role::Out;
                    }
                    self.refresh(at, node);
                }
                for (rank, node) in self.active.clone().into_iter().enumerate() {
                    self.join(at, node, rank);
                }
            }
            Recorded::RestartAbandoned { reason } => self.abandoned = Some(reason.clone()),
            Recorded::RunFinished { status } => {
                if let Some(a) = self.attempts.last_mut().filter(|a| a.ended.is_none()) {
                    a.ended = Some(at);
                    a.outcome = Outcome::Stopped(status.clone());
                }
                self.status = Some(status.clone());
                self.end = Some(at);
            }
            Recorded::RunStarted { .. } | Recorded::Other => {}
        }
    }

    /// `node` holds node rank `rank` from now on.
    fn join(&mut self, at: Duration, node: usize, rank: usize) {
        let n = &mut self.nodes[node];
        n.node_ranks.insert(rank);
        n.role = Role::Active;
        self.refresh(at, node);
    }

    fn finish(self) -> Timeline {
        let wall = self.end.unwrap_or(self.last).max(self.moved);
        let rows = self
            .nodes
            .into_iter()
            .map(|n| Row {
                hosts: vec![n.host],
                node_ranks: n.node_ranks,
                segments: n.track.finish(wall),
                marks: n.marks,
            })
            .collect();
        Timeline {
            run_id: self.run_id,
            started: self.origin,
            wall,
            status: self.status,
            abandoned: self.abandoned,
            job: self.job.finish(wall),
            rows,
            attempts: self.attempts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::testing::*;
    use crate::timeline::Kept;

    /// Segments as (state, from, to) in seconds, to read at a glance.
    fn spans(segments: &[Segment]) -> Vec<(State, f64, f64)> {
        segments.iter().map(|s| (s.state, s.from.as_secs_f64(), s.to.as_secs_f64())).collect()
    }

    fn row<'a>(t: &'a Timeline, host: &str) -> &'a Row {
        t.rows.iter().find(|r| r.hosts.iter().any(|h| h == host)).unwrap()
    }

    use State::*;

    #[test]
    fn one_restart_each_part_of_an_attempt_and_the_time_between() {
        let s = Stream::default()
            .at(0.0, started(&["a", "b"], &[]))
            .attempt(1.0, 0, 2)
            .fault(100.0, 0, root(1, "b", NodeExit::Signal(9)), "crash", 5.0)
            .attempt(107.5, 1, 2)
            .at(
                200.0,
                Recorded::NodeExited {
                    attempt: 1,
                    node_rank: 0,
                    host: "a".into(),
                    exit: NodeExit::ExitCode(0),
                },
            )
            .at(200.0, Recorded::AttemptSucceeded { attempt: 1 })
            .at(200.0, finished("succeeded"));
        let t = build(&s.0).unwrap();
        let job = [
            (Launching, 0.0, 3.0),
            (Starting, 3.0, 6.0),
            (Training, 6.0, 100.0),
            (Stopping, 100.0, 101.0),
            (Backoff, 101.0, 106.0),
            (Launching, 106.0, 109.5),
            (Starting, 109.5, 112.5),
            (Training, 112.5, 200.0),
        ];
        assert_eq!(spans(&t.job), job);
        assert_eq!(t.job[4].attempt, Some(1), "a backoff is the next attempt's");
        // Every node in the job shares its states.
        assert_eq!(t.rows.len(), 2);
        assert!(t.rows.iter().all(|r| r.segments == t.job));
        assert_eq!((t.wall, t.status.as_deref()), (Duration::from_secs(200), Some("succeeded")));
        assert_eq!(t.training(), Duration::from_secs_f64(94.0 + 87.5));
        assert!((t.training_share() - 181.5 / 200.0).abs() < 1e-9);
        let a = &t.attempts[0];
        let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
        assert_eq!(
            (secs(Some(a.started)), secs(a.running), secs(a.progress)),
            (Some(1.0), Some(3.0), Some(6.0))
        );
        assert_eq!(a.stopping, Some((Duration::from_secs(100), "node 1 (b): signal 9 (SIGKILL)".into())));
        assert_eq!(
            (secs(a.fault), secs(a.ended), a.backoff),
            (Some(100.0), Some(101.0), Some(Duration::from_secs(5)))
        );
        assert_eq!(
            a.outcome,
            Outcome::Failed { class: "crash".into(), root_cause: Some(root(1, "b", NodeExit::Signal(9))) }
        );
        assert_eq!(t.attempts[1].outcome, Outcome::Succeeded);
        // The fault is marked on its node, when it was seen.
        let marks = &row(&t, "b").marks;
        assert_eq!(marks.len(), 1);
        let fault =
            Marked::Fault { attempt: 0, class: "crash".into(), cause: root(1, "b", NodeExit::Signal(9)) };
        assert_eq!(marks[0], Mark { at: Duration::from_secs(100), what: fault });
        assert!(row(&t, "a").marks.is_empty());
    }

    #[test]
    fn a_lost_node_replaced_by_a_spare() {
        let lost = NodeExit::Lost("connection closed".into());
        let s = Stream::default()
            .at(0.0, started(&["a", "b"], &["c"]))
            .attempt(1.0, 0, 2)
            .fault(50.0, 0, root(1, "b", lost), "node-lost", 2.0)
            .at(51.0, Recorded::NodeQuarantined { host: "b".into(), reason: "lost".into() })
            .at(51.0, Recorded::SparePromoted { node_rank: 1, host: "c".into(), replaced: "b".into() })
            .attempt(60.0, 1, 2)
            .at(90.0, finished("interrupted"));
        let t = build(&s.0).unwrap();
        let b = row(&t, "b");
        assert_eq!(
            spans(&b.segments),
            [
                (Launching, 0.0, 3.0),
                (Starting, 3.0, 6.0),
                (Training, 6.0, 50.0),
                (Lost, 50.0, 51.0),
                (Quarantined, 51.0, 90.0)
            ]
        );
        assert_eq!(b.segments[3].note.as_deref(), Some("lost in attempt 0: connection closed"));
        assert_eq!(b.segments[4].note.as_deref(), Some("lost"));
        let c = row(&t, "c");
        // Idle until it takes node rank 1, then the job's.
        assert_eq!(
            spans(&c.segments),
            [
                (Spare, 0.0, 51.0),
                (Backoff, 51.0, 53.0),
                (Launching, 53.0, 62.0),
                (Starting, 62.0, 65.0),
                (Training, 65.0, 90.0)
            ]
        );
        assert_eq!(c.node_ranks, BTreeSet::from([1]));
        assert_eq!(row(&t, "a").segments, t.job);
        // The job went on without b: its own row never shows b's loss.
        assert!(!t.job.iter().any(|s| s.state == Lost));
        assert_eq!(t.attempts[1].outcome, Outcome::Stopped("interrupted".into()));
    }

    #[test]
    fn a_node_lost_and_back_before_the_restart_rejoins() {
        let s = Stream::default()
            .at(0.0, started(&["a", "b"], &[]))
            .attempt(0.0, 0, 2)
            .fault(20.0, 0, root(1, "b", NodeExit::Lost("timeout".into())), "node-lost", 1.0)
            .at(22.0, Recorded::NodeWaiting { host: "b".into(), error: "no route to host".into() })
            .attempt(40.0, 1, 2)
            .at(50.0, finished("interrupted"));
        let t = build(&s.0).unwrap();
        let b = spans(&row(&t, "b").segments);
        assert_eq!(b[3..5], [(Lost, 20.0, 22.0), (Lost, 22.0, 40.0)]);
        assert_eq!(
            row(&t, "b").segments[4].note.as_deref(),
            Some("unreachable before the restart: no route to host")
        );
        assert_eq!(b[5], (Launching, 40.0, 42.0));
    }

    #[test]
    fn a_quarantine_a_world_without_the_node_and_its_release() {
        let s = Stream::default()
            .at(
                0.0,
                Recorded::RunStarted {
                    run_id: "r".into(),
                    hosts: vec!["a".into(), "b".into(), "c".into()],
                    spares: vec![],
                    quarantined: vec![Kept { host: "z".into(), reason: "SIGSEGV in an earlier run".into() }],
                },
            )
            .attempt(0.0, 0, 3)
            .fault(30.0, 0, root(2, "c", NodeExit::Signal(11)), "crash", 0.0)
            .at(31.0, Recorded::NodeQuarantined { host: "c".into(), reason: "SIGSEGV".into() })
            .at(31.0, Recorded::WorldChanged { hosts: vec!["a".into(), "b".into()] })
            .attempt(33.0, 1, 2)
            .fault(60.0, 1, root(0, "a", NodeExit::Signal(11)), "crash", 0.0)
            .at(61.0, Recorded::NodeReleased { host: "c".into() })
            .at(61.0, Recorded::NodeQuarantined { host: "a".into(), reason: "SIGSEGV".into() })
            .at(61.0, Recorded::SparePromoted { node_rank: 0, host: "c".into(), replaced: "a".into() })
            .attempt(65.0, 2, 2)
            .at(80.0, finished("interrupted"));
        let t = build(&s.0).unwrap();
        let c = spans(&row(&t, "c").segments);
        assert_eq!(
            c[3..],
            [
                (Stopping, 30.0, 31.0),
                (Quarantined, 31.0, 61.0),
                (Launching, 61.0, 67.0),
                (Starting, 67.0, 70.0),
                (Training, 70.0, 80.0)
            ]
        );
        assert_eq!(row(&t, "c").node_ranks, BTreeSet::from([0, 2]));
        assert_eq!(spans(&row(&t, "a").segments).last(), Some(&(Quarantined, 61.0, 80.0)));
        assert_eq!(spans(&row(&t, "z").segments), [(Quarantined, 0.0, 80.0)]);
        // With no backoff, the restart readies at once.
        assert!(!t.job.iter().any(|s| s.state == Backoff));
    }

    #[test]
    fn a_node_left_out_with_no_spare_and_not_quarantined_is_out() {
        let s = Stream::default()
            .at(0.0, started(&["a", "b"], &[]))
            .attempt(0.0, 0, 2)
            .fault(10.0, 0, root(1, "b", NodeExit::ExitCode(1)), "comm", 0.0)
            .at(11.0, Recorded::WorldChanged { hosts: vec!["a".into()] })
            .attempt(12.0, 1, 1)
            .at(20.0, finished("interrupted"));
        let t = build(&s.0).unwrap();
        assert_eq!(spans(&row(&t, "b").segments).last(), Some(&(Out, 11.0, 20.0)));
        // The job's one node runs: every node of the attempt.
        assert_eq!(t.attempts[1].running, Some(Duration::from_secs(14)));
    }

    #[test]
    fn a_preemption_stops_the_job_and_ends_the_run() {
        let s = Stream::default()
            .at(0.0, started(&["a"], &[]))
            .attempt(0.0, 0, 1)
            .at(500.0, Recorded::CheckpointRequested { attempt: 0, signal: "SIGUSR1".into() })
            .at(520.0, Recorded::TeardownStarted { attempt: 0, reason: "preempted".into() })
            .at(530.0, finished("preempted"));
        let t = build(&s.0).unwrap();
        assert_eq!(spans(&t.job).last(), Some(&(Stopping, 500.0, 530.0)));
        let a = &t.attempts[0];
        assert_eq!(
            a.stopping,
            Some((Duration::from_secs(500), "the ranks told to checkpoint (SIGUSR1)".into()))
        );
        assert_eq!((a.outcome.clone(), a.fault), (Outcome::Stopped("preempted".into()), None));
        assert_eq!(t.status.as_deref(), Some("preempted"));
        // The requeued run's record is a run of its own, drawn the same way.
        let requeued =
            Stream::default().at(0.0, started(&["a"], &[])).attempt(3.0, 0, 1).at(9.0, finished("succeeded"));
        assert_eq!(
            spans(&build(&requeued.0).unwrap().job),
            [(Launching, 0.0, 5.0), (Starting, 5.0, 8.0), (Training, 8.0, 9.0)]
        );
    }

    #[test]
    fn a_hang_pinned_on_no_node_is_a_fault_of_the_job_only() {
        let s = Stream::default()
            .at(0.0, started(&["a", "b"], &[]))
            .attempt(0.0, 0, 2)
            .at(100.0, Recorded::StacksRequested { attempt: 0, reason: "no progress for 1m 30s".into() })
            .at(105.0, Recorded::TeardownStarted { attempt: 0, reason: "no progress for 1m 30s".into() })
            .at(110.0, failed(0, "hang", None))
            .at(110.0, finished("failed"));
        let t = build(&s.0).unwrap();
        let a = &t.attempts[0];
        assert_eq!(
            (a.fault, a.stopping.as_ref().map(|s| s.1.as_str())),
            (Some(Duration::from_secs(100)), Some("no progress for 1m 30s"))
        );
        assert_eq!(a.outcome, Outcome::Failed { class: "hang".into(), root_cause: None });
        assert!(t.rows.iter().all(|r| r.marks.is_empty()));
    }

    #[test]
    fn progress_told_after_the_stop_trains_no_time() {
        let s = Stream::default()
            .at(0.0, started(&["a"], &[]))
            .at(0.0, Recorded::AttemptStarting { attempt: 0 })
            .at(1.0, Recorded::NodeStarted { attempt: 0, node_rank: 0 })
            .at(
                2.0,
                Recorded::NodeExited {
                    attempt: 0,
                    node_rank: 0,
                    host: "a".into(),
                    exit: NodeExit::ExitCode(1),
                },
            )
            .at(2.1, Recorded::ProgressSeen { attempt: 0, millis: 1900 })
            .at(2.2, failed(0, "user", Some(root(0, "a", NodeExit::ExitCode(1)))))
            .at(2.2, finished("failed"));
        let t = build(&s.0).unwrap();
        assert_eq!(t.training(), Duration::ZERO);
        assert_eq!(t.attempts[0].progress, Some(Duration::from_secs(2)));
        assert_eq!(spans(&t.job), [(Launching, 0.0, 1.0), (Starting, 1.0, 2.0), (Stopping, 2.0, 2.2)]);
    }

    #[test]
    fn a_record_cut_short_ends_at_its_last_event() {
        let s = Stream::default().at(0.0, started(&["a"], &[])).attempt(0.0, 0, 1).at(
            40.0,
            Recorded::Straggler { attempt: 0, rank: 0, host: "a".into(), score: 3.0, alone: false },
        );
        let t = build(&s.0).unwrap();
        assert_eq!((t.wall, t.status.clone()), (Duration::from_secs(40), None));
        assert_eq!(t.attempts[0].outcome, Outcome::Unknown);
        assert_eq!(spans(&t.job).last(), Some(&(Training, 5.0, 40.0)));
        let straggler = Marked::Straggler { attempt: 0, rank: 0, score: 3.0, alone: false };
        assert_eq!(row(&t, "a").marks[0].what, straggler);
    }

    #[test]
    fn a_record_without_a_start_or_an_attempt_draws_nothing() {
        assert_eq!(build(&[]), Err(Undrawable::NotStarted));
        let s = Stream::default().at(0.0, Recorded::AttemptStarting { attempt: 0 });
        assert_eq!(build(&s.0), Err(Undrawable::NotStarted));
        let s = Stream::default().at(0.0, started(&["a"], &[])).at(3.0, finished("failed"));
        assert_eq!(build(&s.0), Err(Undrawable::NoAttempts));
    }

    #[test]
    fn three_hundred_attempts_over_three_days() {
        let s = long_run(4, 300, 864.0, |k| (k % 4) as usize);
        let t = build(&s.0).unwrap();
        assert_eq!(t.attempts.len(), 300);
        assert_eq!(t.wall, Duration::from_secs_f64(299.0 * 864.0 + 852.0));
        // Launching, starting, training, stopping and backoff each attempt; the last one
        // succeeds, with neither of the last two.
        assert_eq!(t.job.len(), 300 * 5 - 1 - 1);
        // Each attempt trains from 5 s in to 12 s before its end.
        let trained = 300.0 * (864.0 - 12.0 - 5.0);
        assert!((t.training().as_secs_f64() - trained).abs() < 1e-6, "{:?}", t.training());
        assert!(t.rows.iter().all(|r| r.segments == t.job));
        assert_eq!(t.rows.iter().map(|r| r.marks.len()).sum::<usize>(), 299);
    }

    #[test]
    fn two_hundred_fifty_four_nodes_group_past_sixty_four_rows() {
        // 30 faults on 30 nodes: each its own row (its mark), the other 224 one row.
        let t = build(&long_run(254, 31, 40.0, |k| 7 * k as usize + 1).0).unwrap();
        assert_eq!(t.rows.len(), 254);
        let g = t.grouped(crate::timeline::MAX_ROWS);
        assert_eq!(g.rows.len(), 31);
        assert_eq!(g.rows[0].hosts.len(), 224);
        assert_eq!(g.rows[0].hosts[..2], ["n000", "n002"]);
        assert!(g.rows[0].marks.is_empty());
        assert_eq!((g.rows.iter().map(|r| r.hosts.len()).sum::<usize>(), g.rows[1].hosts.len()), (254, 1));
        // 100 faults on 100 nodes: too many rows, so the nodes with the same segments share
        // one, every fault marked on it.
        let t = build(&long_run(254, 101, 40.0, |k| 2 * k as usize).0).unwrap();
        let g = t.grouped(crate::timeline::MAX_ROWS);
        assert_eq!(g.rows.len(), 1);
        assert_eq!((g.rows[0].hosts.len(), g.rows[0].marks.len()), (254, 100));
        assert!(g.rows[0].marks.windows(2).all(|m| m[0].at <= m[1].at));
        assert_eq!(g.rows[0].node_ranks.len(), 254);
    }
}
