//! What comes after an attempt, as a pure function: `Between::after_attempt(ctx, attempt,
//! ended)` takes how the attempt ended (with what the run's shell asked Slurm, and whether
//! Ctrl-C came while the NCCL dumps were copied) and returns the decision: done, and how, or
//! a restart after a delay, with the nodes blamed, quarantined and replaced, and those let
//! back in; with `restart.on_straggler = "replace"`, the nodes of the stragglers still slow
//! when the attempt ended are blamed too, where there is room for them. `replacement` is the
//! same decision for nodes blamed later (Slurm refusing them after the backoff), `resume`
//! the resume args of a restart from the checkpoint found. No
//! I/O, no clock, no randomness: the jitter's random number is given. The async shell in
//! `supervisor` (`Run::attempt`, `Run::restart`, `reserve`) only performs the decision:
//! events, the quarantine file, the sleep, the new nodes' connections and checks.

use std::time::Duration;

use super::straggler::Straggler;
use crate::classify::{hint, RuleTable};
use crate::config::{OnStraggler, Restart};
use crate::events::{Preemption, RunStatus};
use crate::outcome::{FailureClass, NodeOutcome, Verdict};
use crate::plan::Resume;
use crate::roster::{Blamed, Change, Roster};
use crate::{blame, policy};

/// The run's state between attempts: what the failed attempts so far tell the blame of the
/// next (see `blame::History`).
#[derive(Debug, Default)]
pub struct Between {
    history: blame::History,
    slow: SlowRanks,
    /// The failed attempts in a row that did not train (`policy::trained`): the backoff's
    /// doubling counts them, and an attempt that trained starts it over.
    untrained: u32,
}

/// The stragglers that blamed their node so far (`on_straggler = "replace"`).
#[derive(Debug, Default)]
struct SlowRanks {
    /// Each rank whose node was blamed (and quarantined) for its slowness: the node rank and
    /// host it held.
    blamed: Vec<(u32, usize, String)>,
    /// Ranks slow on a node and again on the one that replaced it: the slowness is the rank's
    /// (its share of the work), no node's, and blames none from then on.
    follow_rank: Vec<u32>,
}

/// A straggler's node, which a restart may go on without.
struct SlowNode {
    blamed: Blamed,
    rank: u32,
    host: String,
}

/// What the decision depends on besides the attempt: the config's policy, the run's roster as
/// it stands, and a random number in [0, 1) for the backoff's jitter.
pub struct Context<'a> {
    pub restart: &'a Restart,
    pub rules: &'a RuleTable,
    pub roster: &'a Roster,
    pub unit: f64,
    /// The stragglers named in the attempt that were still slow when it ended.
    pub slow: &'a [Straggler],
    /// Every straggler named in the attempt, slow to its end or not: a rank slow again on the
    /// host that took its node's place shows that its slowness follows it, even where it
    /// passed before the attempt ended (a checkpoint's write on rank 0).
    pub named: &'a [Straggler],
    /// A time limit's warning or a preemption came during the run (`Signal::Checkpoint`):
    /// the allocation is ending, and the run goes on in the next one, if anywhere.
    pub preempted: Option<Preemption>,
}

/// How an attempt ended, as the shell saw it. Made once an attempt and moved once: its size
/// is no matter.
#[allow(clippy::large_enum_variant)]
pub enum Ended<'a> {
    Succeeded,
    /// Ctrl-C or SIGTERM before it failed.
    Interrupted,
    /// Stopped for a time limit or a preemption: no failure, and no restart in this
    /// allocation (see `Signal::Checkpoint`).
    Preempted(Preemption),
    Failed(Failure<'a>),
}

/// A failed attempt.
pub struct Failure<'a> {
    pub verdict: Verdict,
    pub outcomes: &'a [NodeOutcome],
    pub allocation: Allocation,
    /// How long it went on after its first progress until it failed (see `trained_for`), if
    /// it made any: whether it trained before it failed (`policy::trained`), which makes its
    /// restart a new fault's.
    pub trained_for: Option<Duration>,
}

/// What Slurm said of the run's allocation once the attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allocation {
    /// It still runs, the run is not in one (SSH), or Slurm could not say.
    Runs,
    /// It has ended: every node's end follows from it.
    Ended(AllocationEnd),
    /// Ctrl-C or SIGTERM came while Slurm was asked.
    Interrupted,
}

/// Why Slurm ended the run's allocation, and whether for its time limit or a preemption:
/// the run then ends as `time-limit` or `preempted` (to go on in another allocation), not as
/// failed; or by a cancel (`scancel` of the job under `salloc`), which is the user's stop:
/// interrupted, as a batch job's cancel is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationEnd {
    pub why: String,
    pub preemption: Option<Preemption>,
    pub cancelled: bool,
}

impl AllocationEnd {
    /// What the run ends as.
    pub fn status(&self) -> RunStatus {
        match self.preemption {
            Some(why) => why.status(),
            None if self.cancelled => RunStatus::Interrupted,
            None => RunStatus::Failed,
        }
    }
}

/// What comes after an attempt.
#[derive(Debug, PartialEq, Eq)]
pub struct Decision {
    /// What the attempt is recorded with (`AttemptFailed`, its summary): `None` when it
    /// succeeded or was interrupted.
    pub verdict: Option<Verdict>,
    /// The hosts this run quarantined for a fault the attempt shows to follow its rank, each
    /// with why: spares again, in `roster`.
    pub released: Vec<(String, String)>,
    /// The roster with them released, if any was.
    pub roster: Option<Roster>,
    pub next: Next,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// The run ends; `abandoned`: why no restart, when the event says so.
    Done { status: RunStatus, abandoned: Option<String> },
    /// After `delay`, without the blamed nodes if the run can do without them.
    Restart { delay: Duration, class: FailureClass, replace: Replace },
}

/// What becomes of the nodes an attempt blames.
#[derive(Debug, PartialEq, Eq)]
pub enum Replace {
    /// None is blamed: the same nodes again.
    Nothing,
    /// No spare and no room above `restart.min_nodes`: the run waits for them as ever.
    /// `reserve`: the config has spares or `min_nodes` (they are used up).
    NoRoom { blamed: Vec<Blamed>, reserve: bool },
    /// Each quarantined, and replaced by a spare or dropped (`changes`).
    With { blamed: Vec<Blamed>, roster: Roster, changes: Vec<Change> },
}

impl Between {
    /// The decision after attempt `attempt` (0 for the first), which ended as `ended`.
    pub fn after_attempt(&mut self, ctx: &Context, attempt: u32, ended: Ended) -> Decision {
        let decision = self.judge_attempt(ctx, attempt, ended);
        match ctx.preempted {
            Some(why) => stopping(why, decision),
            None => decision,
        }
    }

    fn judge_attempt(&mut self, ctx: &Context, attempt: u32, ended: Ended) -> Decision {
        let (slow, slow_released) = match ctx.restart.on_straggler {
            OnStraggler::Replace => self.slow.judge(ctx.slow, ctx.named, ctx.roster),
            OnStraggler::Report => (Vec::new(), Vec::new()),
        };
        let failure = match ended {
            Ended::Succeeded => return done(ctx, slow_released, None, RunStatus::Succeeded, None),
            Ended::Interrupted => return done(ctx, slow_released, None, RunStatus::Interrupted, None),
            Ended::Preempted(why) => return done(ctx, slow_released, None, why.status(), None),
            Ended::Failed(failure) => failure,
        };
        match failure.allocation {
            Allocation::Runs => {}
            Allocation::Interrupted => {
                return done(ctx, slow_released, Some(failure.verdict), RunStatus::Interrupted, None)
            }
            // No node is judged: none is to blame.
            Allocation::Ended(ended) => {
                let class = FailureClass::Allocation;
                let verdict =
                    Verdict { class, root_cause: None, consequences: Vec::new(), hint: hint(class) };
                let abandoned = Some(nothing_left(&ended.why));
                return done(ctx, slow_released, Some(verdict), ended.status(), abandoned);
            }
        }
        let together = blame::lost_together(ctx.restart.heartbeat_timeout, super::attempt::PROBE_WAIT);
        let trained = policy::trained(ctx.restart, failure.trained_for);
        let mut judged = self.history.judge(&failure.verdict, failure.outcomes, ctx.rules, together, trained);
        judged.released.extend(slow_released);
        let (roster, released) = release(ctx.roster, judged.released);
        let class = failure.verdict.class;
        let verdict = Some(failure.verdict);
        self.untrained = if trained { 0 } else { self.untrained + 1 };
        let next = match policy::restart_delay(ctx.restart, attempt, self.untrained, class, ctx.unit) {
            None => Next::Done { status: RunStatus::Failed, abandoned: None },
            Some(delay) => {
                let roster = roster.as_ref().unwrap_or(ctx.roster);
                let blamed = self.slow.fit(roster, judged.blamed, slow);
                Next::Restart { delay, class, replace: replacement(roster, blamed) }
            }
        };
        Decision { verdict, released, roster, next }
    }
}

/// `decision` in a run told to stop for its time limit or a preemption (`why`). A restart
/// could only start to be stopped: it happens in the next allocation instead, so the run ends
/// as `why` says, to be requeued. An allocation Slurm ended under such a run ended for that.
/// A failure that would not be restarted still ends the run as failed, and is not requeued.
fn stopping(why: Preemption, mut decision: Decision) -> Decision {
    let allocation = decision.verdict.as_ref().is_some_and(|v| v.class == FailureClass::Allocation);
    match &mut decision.next {
        Next::Restart { .. } => decision.next = Next::Done { status: why.status(), abandoned: None },
        Next::Done { status, .. } if allocation && *status == RunStatus::Failed => *status = why.status(),
        Next::Done { .. } => {}
    }
    decision
}

/// What a run that ended as `status` is recorded as, when a time limit's warning or a
/// preemption (`preempted`) came during it: a wait it cut short (the connections, a
/// restart's backoff) ends the run as that, not as interrupted.
pub fn run_end(status: RunStatus, preempted: Option<Preemption>) -> RunStatus {
    match (status, preempted) {
        (RunStatus::Interrupted, Some(why)) => why.status(),
        (status, _) => status,
    }
}

impl SlowRanks {
    /// The nodes of the stragglers still slow at an attempt's end (`slow`, of `roster`'s
    /// active nodes), one per node, and the hosts released: a rank slow again on the node
    /// that took the place of the one its slowness blamed (same node rank, another host)
    /// carries its slowness with it, as a rank with more of the work does.
    /// `named`: every straggler of the attempt, which may show a rank slow again though it
    /// was no longer slow at the end.
    fn judge(
        &mut self,
        slow: &[Straggler],
        named: &[Straggler],
        roster: &Roster,
    ) -> (Vec<SlowNode>, Vec<(String, String)>) {
        let mut nodes: Vec<SlowNode> = Vec::new();
        let mut released = Vec::new();
        for s in named.iter().chain(slow) {
            let host = roster.active_host(s.node_rank);
            // A rank that computed while every other sat idle did the job's own work (a
            // checkpoint, an evaluation): another node would do it no faster.
            if self.follow_rank.contains(&s.rank) || s.alone {
                continue;
            }
            let before = self
                .blamed
                .iter()
                .position(|(rank, node_rank, h)| *rank == s.rank && *node_rank == s.node_rank && h != host);
            if let Some(i) = before {
                let (rank, _, before) = self.blamed.remove(i);
                self.follow_rank.push(rank);
                let why = format!(
                    "rank {rank} was a straggler on {before}, then on {host} in its place: the slowness follows the rank, not the node"
                );
                released.push((before, why));
                continue;
            }
            // Only a rank still slow at the end costs its node.
            if !slow.contains(s) || nodes.iter().any(|n| n.blamed.node_rank == s.node_rank) {
                continue;
            }
            let reason =
                format!("a straggler: rank {}, {:.1} times as busy as the median rank", s.rank, s.score);
            let blamed = Blamed { node_rank: s.node_rank, reason };
            nodes.push(SlowNode { blamed, rank: s.rank, host: host.to_string() });
        }
        (nodes, released)
    }

    /// `blamed` (the attempt's faults) and as many of the `slow` nodes as `roster` has room
    /// for besides, in order: a straggler never keeps a faulty node from being replaced.
    /// Those added are remembered, to be released if their slowness follows the rank.
    fn fit(&mut self, roster: &Roster, mut blamed: Vec<Blamed>, slow: Vec<SlowNode>) -> Vec<Blamed> {
        for node in slow {
            if blamed.iter().any(|b| b.node_rank == node.blamed.node_rank) {
                continue;
            }
            let node_rank = node.blamed.node_rank;
            blamed.push(node.blamed);
            if roster.without(&blamed).is_none() {
                blamed.pop();
                continue;
            }
            self.blamed.push((node.rank, node_rank, node.host));
        }
        blamed
    }
}

/// The run ends: `released` let back in first (see `release`).
fn done(
    ctx: &Context,
    released: Vec<(String, String)>,
    verdict: Option<Verdict>,
    status: RunStatus,
    abandoned: Option<String>,
) -> Decision {
    let (roster, released) = release(ctx.roster, released);
    Decision { verdict, released, roster, next: Next::Done { status, abandoned } }
}

/// `roster` with `released` let back in, and those that were in its quarantine (a node
/// blamed without room for a replacement never was); `None` when none was.
pub fn release(roster: &Roster, released: Vec<(String, String)>) -> (Option<Roster>, Vec<(String, String)>) {
    let mut next: Option<Roster> = None;
    let mut done = Vec::new();
    for (host, why) in released {
        if let Some(r) = next.as_ref().unwrap_or(roster).released(&host) {
            next = Some(r);
            done.push((host, why));
        }
    }
    (next, done)
}

/// Whether a node blamed so (`Blamed::reason`) was out of reach: silent, its SSH connection
/// lost or never made; not one whose link worked (its agent ended early), nor one blamed for
/// what it did. A run without room waits for such a node (`restart.node_wait`) where it goes
/// on with one blamed for a crash: only for it is a node let back in (see `rejoinable`).
pub fn out_of_reach(reason: &str) -> bool {
    const OUT_OF_REACH: [&str; 5] = [
        "node-lost: no heartbeat",
        "node-lost: the ssh connection to the node was lost",
        "node-lost: its login shell",
        UNREACHABLE_BEFORE_RESTART,
        "ssh: ",
    ];
    OUT_OF_REACH.iter().any(|p| reason.starts_with(p))
}

/// How long a restart tries to reach a node of the attempt before, one it lost or cannot
/// connect to, before anything else is done. With a stand-in (a spare left, room above
/// `restart.min_nodes`, or a node this run quarantined for being out of reach that may
/// answer again, `rejoinable`): `SPARE_AFTER` (at most `node_wait`), after which the stand-in
/// takes its place (`unreachable_before_restart`), or, should none after all, the node is
/// waited for until `node_wait` has passed. Without: `node_wait`, as the run cannot go on
/// without it. A node lost in the attempt was silent for a heartbeat already, and one that
/// comes back later is let back in as a spare when the run needs one: waiting minutes for
/// it, the whole job idle, costs more than a spare's start.
pub fn reconnect_wait(node_wait: Duration, stand_in: bool) -> Duration {
    match stand_in {
        true => node_wait.min(SPARE_AFTER),
        false => node_wait,
    }
}

/// How `unreachable_before_restart` begins its reason, which `out_of_reach` and `remembered`
/// read.
const UNREACHABLE_BEFORE_RESTART: &str = "node-lost: unreachable before the restart";

/// See `reconnect_wait`: two tries of a reconnect, or more.
pub const SPARE_AFTER: Duration = Duration::from_secs(10);

/// A node a restart could not reach within `reconnect_wait`, blamed so that a spare takes its
/// place: out of reach (`out_of_reach`), which lets it back in should the run run out of room.
pub fn unreachable_before_restart(node_rank: usize, error: &str, waited: Duration) -> Blamed {
    let waited = humantime::format_duration(Duration::from_secs(waited.as_secs()));
    Blamed { node_rank, reason: format!("{UNREACHABLE_BEFORE_RESTART} (tried for {waited}): {error}") }
}

/// Whether a node quarantined for `reason` is also kept out of later runs (the config's
/// quarantine file): not one a restart could not reach within `SPARE_AFTER`. Those few
/// seconds are a judgement of this run's, for time; on a launch host so loaded that two SSH
/// connects time out in them, the node may be healthy, and a later run would skip it until
/// `herd nodes --release`. A node that is dead for good fails that later run's own checks.
pub fn remembered(reason: &str) -> bool {
    !reason.starts_with(UNREACHABLE_BEFORE_RESTART)
}

/// The hosts a restart with no room left for a blamed node out of reach may try again, to let back in
/// as spares those that answer: the ones this run quarantined (not in `before`, the
/// quarantine it started with, and the hosts already let back in so) for being out of
/// reach, silent or its SSH connection lost or never made, which a link cut for a while is
/// too; never one whose link worked (its agent ended early) nor one blamed for what it did
/// (a crash, a failing check, a straggler). `tried`: hosts already tried for this restart.
pub fn rejoinable(roster: &Roster, before: &[String], tried: &[String]) -> Vec<String> {
    (roster.quarantined_hosts())
        .filter(|(host, why)| out_of_reach(why) && !before.iter().chain(tried).any(|h| h == host))
        .map(|(host, _)| host.to_string())
        .collect()
}

/// What becomes of `blamed` nodes of `roster` (see `Roster::without`).
pub fn replacement(roster: &Roster, blamed: Vec<Blamed>) -> Replace {
    if blamed.is_empty() {
        return Replace::Nothing;
    }
    match roster.without(&blamed) {
        Some((roster, changes)) => Replace::With { blamed, roster, changes },
        None => Replace::NoRoom { blamed, reserve: roster.reserve },
    }
}

/// How long a failed attempt trained: from its first progress (`first_progress`, since the
/// attempt started) to its failure, the first node that ended by itself or herd's first
/// request to stop (what `outcomes` say), not to the attempt's end (`ended`): the teardown's
/// grace and kill are no training, and counting them makes a crash loop look trained.
pub fn trained_for(
    first_progress: Option<Duration>,
    outcomes: &[NodeOutcome],
    ended: Duration,
) -> Option<Duration> {
    let failed_at = outcomes
        .iter()
        .filter_map(|o| match o.stop_requested_at {
            Some(stop) => Some(stop),
            None => (!o.exit.success()).then_some(o.lost_at.unwrap_or(o.ended_at)),
        })
        .min()
        .unwrap_or(ended);
    first_progress.map(|p| failed_at.saturating_sub(p))
}

/// The reason a run ends in an allocation Slurm has ended.
pub fn nothing_left(ended: &str) -> String {
    format!("{ended}; no node is to blame, and no step can start in it any more")
}

/// Why a restart that could not get its nodes ready ends the run: `unready`, unless Slurm
/// says the allocation has `ended`, which is then the reason.
pub fn abandoned(unready: String, ended: Option<&str>) -> String {
    ended.map_or(unready, nothing_left)
}

/// What a restart resumes from, with `restart.resume_args` (`args`): `found`, the newest match
/// of their `{latest:GLOB}` on the master, or none (the args are then dropped: the job starts
/// afresh rather than fails). `None` without resume args.
pub fn resume(args: &[String], found: Option<String>) -> Option<Resume> {
    if args.is_empty() {
        return None;
    }
    Some(Resume { args: policy::resume_args(args, found.as_deref()), from: found })
}

/// What a generation of a Slurm job kept for the next, as found on the master as its run
/// stopped for a time limit or a preemption: the newest match of `glob`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub glob: String,
    /// What this generation resumed from (none: it started afresh).
    pub resumed_from: Option<String>,
    /// The newest match as it stopped (none: nothing matches).
    pub newest: Option<String>,
}

/// Whether `herd run --requeue` requeues its Slurm job, at generation `restart_count`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequeueVerdict {
    Go,
    /// Requeued, with this warning.
    Warned(String),
    /// Not requeued, for this reason: the next generation would start where this one did.
    Refused(String),
}

/// Pure: a job requeued with nothing kept starts afresh, and one that never checkpoints
/// would be requeued forever. A first generation with no checkpoint is requeued with a
/// warning (it may have been stopped before its first); a later one that started afresh and
/// again left none is not. Without `{latest:GLOB}` herd cannot see checkpoints: from the
/// second generation on, it says so each time.
pub fn requeue(restart_count: u32, kept: Option<&Kept>) -> RequeueVerdict {
    let next = restart_count + 1;
    match kept {
        None if restart_count == 0 => RequeueVerdict::Go,
        None => RequeueVerdict::Warned(format!(
            "requeuing as generation {next}: herd cannot tell whether this job keeps its progress \
             (restart.resume_args has no {{latest:GLOB}}); a job that never checkpoints is requeued until Slurm's limit"
        )),
        Some(Kept { newest: Some(_), .. }) => RequeueVerdict::Go,
        Some(Kept { glob, newest: None, .. }) if restart_count == 0 => RequeueVerdict::Warned(format!(
            "generation 0 left no checkpoint (nothing on the master matches {glob:?}): generation 1 starts afresh, \
             and is not requeued if it leaves none either"
        )),
        Some(Kept { glob, resumed_from: None, newest: None }) => RequeueVerdict::Refused(format!(
            "not requeued: generation {restart_count} started afresh and left no checkpoint either (nothing on the master \
             matches {glob:?}), so generation {next} would start afresh again; does the job write its checkpoints \
             where restart.resume_args looks, on restart.checkpoint_signal?"
        )),
        // It resumed from a checkpoint that has gone since: the next would start afresh.
        Some(Kept { glob, resumed_from: Some(from), newest: None }) => RequeueVerdict::Warned(format!(
            "{from:?}, which generation {restart_count} resumed from, no longer matches {glob:?}, and nothing else does: \
             generation {next} starts afresh"
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::outcome::{NodeExit, RootCause};

    /// Issue 39 item 15: a job that never checkpointed went through six generations, each
    /// starting afresh.
    #[test]
    fn a_job_that_keeps_nothing_is_requeued_once_with_a_warning_then_not_again() {
        let kept = |resumed_from: Option<&str>, newest: Option<&str>| Kept {
            glob: "ck/step_*".into(),
            resumed_from: resumed_from.map(String::from),
            newest: newest.map(String::from),
        };
        assert_eq!(requeue(0, Some(&kept(None, Some("ck/step_9")))), RequeueVerdict::Go);
        assert_eq!(requeue(4, Some(&kept(Some("ck/step_9"), Some("ck/step_20")))), RequeueVerdict::Go);
        assert!(
            matches!(requeue(0, Some(&kept(None, None))), RequeueVerdict::Warned(w) if w.contains("generation 1 starts afresh"))
        );
        let refused = requeue(1, Some(&kept(None, None)));
        assert!(
            matches!(&refused, RequeueVerdict::Refused(r) if r.starts_with("not requeued: generation 1 started afresh") && r.contains("\"ck/step_*\"")),
            "{refused:?}"
        );
        assert!(matches!(requeue(2, Some(&kept(Some("ck/step_3"), None))), RequeueVerdict::Warned(_)));
        // Without {latest:}, herd cannot see checkpoints: it says so from generation 1 on.
        assert_eq!(requeue(0, None), RequeueVerdict::Go);
        assert!(
            matches!(requeue(3, None), RequeueVerdict::Warned(w) if w.starts_with("requeuing as generation 4"))
        );
    }

    fn cluster(n: usize, nnodes: Option<usize>, min_nodes: Option<usize>) -> Roster {
        let hosts = (0..n).map(|i| format!("n{i}")).collect();
        Roster::new(hosts, nnodes, min_nodes, None, &BTreeMap::new()).unwrap()
    }

    fn policy(max_restarts: u32) -> Restart {
        Restart {
            max_restarts,
            backoff: Duration::from_secs(10),
            backoff_max: Duration::from_secs(60),
            ..Restart::default()
        }
    }

    fn node(node_rank: usize, exit: NodeExit) -> NodeOutcome {
        NodeOutcome {
            node_rank,
            host: format!("n{node_rank}"),
            first_rank: node_rank as u32,
            exit,
            ended_at: Duration::from_secs(1),
            stop_requested_at: None,
            lost_at: None,
            late_fleet: false,
            lines: Vec::new(),
            processes: Vec::new(),
            stacks: Vec::new(),
        }
    }

    /// Rank `rank`, on node rank `node_rank` of host `host`, ended as `exit`.
    fn verdict(class: FailureClass, node_rank: usize, host: &str, rank: u32, exit: NodeExit) -> Verdict {
        let root =
            RootCause { rank: Some(rank), local_rank: None, node_rank, host: host.into(), exit, line: None };
        Verdict { class, root_cause: Some(root), consequences: Vec::new(), hint: "" }
    }

    /// Rank 1 of two nodes, on node rank 1 (`host`), died of SIGBUS (which blames its node at once).
    fn bus(host: &str) -> Verdict {
        verdict(FailureClass::Crash, 1, host, 1, NodeExit::Signal(7))
    }

    fn outcomes() -> [NodeOutcome; 2] {
        [node(0, NodeExit::Signal(15)), node(1, NodeExit::Signal(7))]
    }

    fn failed(verdict: Verdict, outcomes: &[NodeOutcome]) -> Ended<'_> {
        Ended::Failed(Failure { verdict, outcomes, allocation: Allocation::Runs, trained_for: None })
    }

    struct Case {
        restart: Restart,
        rules: RuleTable,
        roster: Roster,
        slow: Vec<Straggler>,
        named: Vec<Straggler>,
        preempted: Option<Preemption>,
    }

    impl Case {
        fn new(restart: Restart, roster: Roster) -> Case {
            let (slow, named) = (Vec::new(), Vec::new());
            Case { restart, rules: RuleTable::new(&[]), roster, slow, named, preempted: None }
        }

        fn ctx(&self) -> Context<'_> {
            let (restart, rules, roster, slow) = (&self.restart, &self.rules, &self.roster, &self.slow);
            Context { restart, rules, roster, unit: 0.5, slow, named: &self.named, preempted: self.preempted }
        }
    }

    #[test]
    fn a_success_or_an_interrupt_ends_the_run_unjudged() {
        let case = Case::new(policy(3), cluster(2, None, None));
        let mut b = Between::default();
        let d = b.after_attempt(&case.ctx(), 0, Ended::Succeeded);
        assert_eq!(d, ended_as(None, RunStatus::Succeeded, None));
        let d = b.after_attempt(&case.ctx(), 1, Ended::Interrupted);
        assert_eq!(d, ended_as(None, RunStatus::Interrupted, None));
    }

    #[test]
    fn a_restartable_failure_restarts_after_a_doubling_delay_until_restarts_run_out() {
        let case = Case::new(policy(2), cluster(2, None, None));
        let comm = || verdict(FailureClass::Comm, 0, "n0", 0, NodeExit::ExitCode(1));
        let nodes = [node(0, NodeExit::ExitCode(1)), node(1, NodeExit::Signal(15))];
        let mut b = Between::default();
        let restart = |d: Decision| match d.next {
            Next::Restart { delay, class, replace } => (delay, class, replace),
            next => panic!("{next:?}"),
        };
        let first = b.after_attempt(&case.ctx(), 0, failed(comm(), &nodes));
        assert_eq!(first.verdict, Some(comm()));
        assert_eq!(restart(first), (Duration::from_secs(10), FailureClass::Comm, Replace::Nothing));
        let second = b.after_attempt(&case.ctx(), 1, failed(comm(), &nodes));
        assert_eq!(restart(second).0, Duration::from_secs(20));
        // Two restarts used of two: the third failure ends the run, recorded as it failed.
        let third = b.after_attempt(&case.ctx(), 2, failed(comm(), &nodes));
        assert_eq!(third, ended_as(Some(comm()), RunStatus::Failed, None));
    }

    /// A fault after the job trained restarts it at once; only attempts in a row that failed
    /// before training double the backoff, and one that trained starts the doubling over.
    #[test]
    fn an_attempt_that_trained_restarts_at_once_and_starts_the_doubling_over() {
        let case = Case::new(policy(10), cluster(2, None, None));
        let comm = || verdict(FailureClass::Comm, 0, "n0", 0, NodeExit::ExitCode(1));
        let nodes = [node(0, NodeExit::ExitCode(1)), node(1, NodeExit::Signal(15))];
        let s = Duration::from_secs;
        let ended = |trained_for| {
            let allocation = Allocation::Runs;
            Ended::Failed(Failure { verdict: comm(), outcomes: &nodes, allocation, trained_for })
        };
        let delay = |d: Decision| match d.next {
            Next::Restart { delay, .. } => delay,
            next => panic!("{next:?}"),
        };
        let mut b = Between::default();
        assert_eq!(delay(b.after_attempt(&case.ctx(), 0, ended(None))), s(10));
        assert_eq!(delay(b.after_attempt(&case.ctx(), 1, ended(Some(s(4))))), s(20), "trained 4 s: a loop");
        let quick = delay(b.after_attempt(&case.ctx(), 2, ended(Some(s(560)))));
        assert!(quick < policy::QUICK_RESTART, "{quick:?}");
        assert_eq!(delay(b.after_attempt(&case.ctx(), 3, ended(None))), s(10), "the doubling starts over");
    }

    #[test]
    fn a_class_the_policy_does_not_restart_on_ends_the_run() {
        let case = Case::new(policy(3), cluster(2, None, None));
        let nodes = outcomes();
        for class in [FailureClass::User, FailureClass::Launch] {
            assert!(!case.restart.on.contains(&class), "{class:?}");
            let v = verdict(class, 0, "n0", 0, NodeExit::ExitCode(1));
            let d = Between::default().after_attempt(&case.ctx(), 0, failed(v.clone(), &nodes));
            assert_eq!(d, ended_as(Some(v), RunStatus::Failed, None));
        }
    }

    /// The decision that ends the run, with nothing released.
    fn ended_as(verdict: Option<Verdict>, status: RunStatus, abandoned: Option<String>) -> Decision {
        Decision { verdict, released: Vec::new(), roster: None, next: Next::Done { status, abandoned } }
    }

    /// Rank `rank` on node rank `node_rank`, named a straggler.
    fn slow(rank: u32, node_rank: usize) -> Straggler {
        Straggler { rank, node_rank, score: 4.0, since_secs: 20.0, alone: false }
    }

    /// `replace` on `roster` (spares after the first `nnodes`).
    fn replacing(roster: Roster) -> Case {
        Case::new(Restart { on_straggler: OnStraggler::Replace, ..policy(5) }, roster)
    }

    /// The attempt on `case.roster` (3 active nodes) failed: a communication error of no
    /// node's, or the loss of the `lost` nodes before the stop; `slow` were the stragglers
    /// still slow at its end. `case.roster` becomes the next attempt's.
    fn after_slow(
        b: &mut Between,
        case: &mut Case,
        attempt: u32,
        slow: &[Straggler],
        lost: &[usize],
    ) -> Decision {
        let nodes: Vec<NodeOutcome> = (0..3)
            .map(|i| {
                let exit =
                    if lost.contains(&i) { NodeExit::Lost("gone".into()) } else { NodeExit::Signal(15) };
                NodeOutcome { host: case.roster.active_host(i).to_string(), ..node(i, exit) }
            })
            .collect();
        let class = if lost.is_empty() { FailureClass::Comm } else { FailureClass::NodeLost };
        let failure = Failure {
            verdict: Verdict { class, root_cause: None, consequences: Vec::new(), hint: hint(class) },
            outcomes: &nodes,
            allocation: Allocation::Runs,
            trained_for: None,
        };
        case.slow = slow.to_vec();
        let d = b.after_attempt(&case.ctx(), attempt, Ended::Failed(failure));
        // The next attempt runs on the roster decided.
        if let Next::Restart { replace: Replace::With { roster, .. }, .. } = &d.next {
            case.roster = roster.clone();
        } else if let Some(roster) = &d.roster {
            case.roster = roster.clone();
        }
        d
    }

    fn blamed(d: &Decision) -> Vec<(usize, String)> {
        match &d.next {
            Next::Restart {
                replace: Replace::With { blamed, .. } | Replace::NoRoom { blamed, .. }, ..
            } => blamed.iter().map(|b| (b.node_rank, b.reason.clone())).collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn a_straggler_blames_its_node_at_the_restart_only_when_told_to_replace() {
        let named = [slow(2, 2), slow(5, 2)];
        let mut report = Case::new(policy(3), cluster(4, Some(3), None));
        let d = after_slow(&mut Between::default(), &mut report, 0, &named, &[]);
        assert_eq!(blamed(&d), []);
        let mut replace = replacing(cluster(4, Some(3), None));
        let d = after_slow(&mut Between::default(), &mut replace, 0, &named, &[]);
        // Once per node, however many of its ranks were named; the spare n3 takes its place.
        let why = "a straggler: rank 2, 4.0 times as busy as the median rank";
        assert_eq!(blamed(&d), [(2, why.to_string())]);
        assert_eq!(replace.roster.quarantined_hosts().map(|(h, _)| h).collect::<Vec<_>>(), ["n2"]);
        // No straggler, no blame.
        let d = after_slow(&mut Between::default(), &mut replacing(cluster(4, Some(3), None)), 0, &[], &[]);
        assert_eq!(blamed(&d), []);
        // No restart left: nothing is replaced.
        let mut last =
            Case::new(Restart { on_straggler: OnStraggler::Replace, ..policy(0) }, cluster(4, Some(3), None));
        let d = after_slow(&mut Between::default(), &mut last, 0, &named, &[]);
        assert!(matches!(d.next, Next::Done { status: RunStatus::Failed, .. }), "{d:?}");
        // No room: the straggler is named only, and nothing waits for it.
        let d =
            after_slow(&mut Between::default(), &mut replacing(cluster(3, Some(3), None)), 0, &named, &[]);
        assert!(matches!(d.next, Next::Restart { replace: Replace::Nothing, .. }), "{d:?}");
    }

    #[test]
    fn a_rank_that_works_while_every_other_idles_blames_no_node() {
        // Rank 0 writes a checkpoint the others wait for, and rank 3 fails meanwhile.
        let writing = Straggler { alone: true, ..slow(0, 0) };
        let mut case = replacing(cluster(4, Some(3), None));
        let d = after_slow(&mut Between::default(), &mut case, 0, std::slice::from_ref(&writing), &[]);
        assert_eq!(blamed(&d), []);
        assert!(matches!(d.next, Next::Restart { replace: Replace::Nothing, .. }), "{d:?}");
        assert_eq!(case.roster.quarantined_hosts().count(), 0);
        // A straggler beside it still costs its node.
        let d = after_slow(&mut Between::default(), &mut case, 1, &[writing, slow(2, 2)], &[]);
        assert_eq!(blamed(&d).iter().map(|(n, _)| *n).collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn a_straggler_never_keeps_a_lost_node_from_its_spare() {
        // One spare; node 1 lost and node 2 slow: the spare goes to the lost node.
        let mut case = replacing(cluster(4, Some(3), None));
        let d = after_slow(&mut Between::default(), &mut case, 0, &[slow(2, 2)], &[1]);
        let nodes: Vec<usize> = blamed(&d).iter().map(|(n, _)| *n).collect();
        assert_eq!(nodes, [1], "{d:?}");
        assert!(matches!(d.next, Next::Restart { replace: Replace::With { .. }, .. }), "{d:?}");
        // Two spares: both go.
        let mut case = replacing(cluster(5, Some(3), None));
        let d = after_slow(&mut Between::default(), &mut case, 0, &[slow(2, 2)], &[1]);
        assert_eq!(blamed(&d).iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn a_straggler_that_moves_with_its_rank_releases_the_node_it_blamed() {
        let mut case = replacing(cluster(5, Some(3), None));
        let mut b = Between::default();
        let d = after_slow(&mut b, &mut case, 0, &[slow(1, 1)], &[]);
        assert_eq!(blamed(&d).len(), 1);
        // n3 took node rank 1, and rank 1 is slow there too: the rank's, not n1's.
        assert_eq!(case.roster.active_host(1), "n3");
        let d = after_slow(&mut b, &mut case, 1, &[slow(1, 1)], &[]);
        assert_eq!(blamed(&d), []);
        let why = "rank 1 was a straggler on n1, then on n3 in its place: the slowness follows the rank, not the node";
        assert_eq!(d.released, [("n1".to_string(), why.to_string())]);
        assert_eq!(case.roster.quarantined_hosts().count(), 0);
        // From then on rank 1's slowness blames no node; another rank's still does.
        let d = after_slow(&mut b, &mut case, 2, &[slow(1, 1), slow(2, 2)], &[]);
        assert_eq!(blamed(&d).iter().map(|(n, _)| *n).collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn a_straggler_slow_again_in_an_attempt_that_succeeds_releases_the_node_too() {
        let mut case = replacing(cluster(5, Some(3), None));
        let mut b = Between::default();
        after_slow(&mut b, &mut case, 0, &[slow(1, 1)], &[]);
        case.slow = vec![slow(1, 1)];
        let d = b.after_attempt(&case.ctx(), 1, Ended::Succeeded);
        assert_eq!(d.released.len(), 1, "{d:?}");
        assert_eq!(d.roster.unwrap().quarantined_hosts().count(), 0);
        assert_eq!(d.next, Next::Done { status: RunStatus::Succeeded, abandoned: None });
    }

    /// Rank 0 computes for 40 s as a checkpoint write does, and rank 3 fails meanwhile: rank 0's
    /// node is replaced. In the next attempt rank 0 is slow the same way on the spare, and
    /// fast again by the end, which succeeds: the slowness followed the rank, and its first
    /// node is released (it stayed quarantined).
    #[test]
    fn a_straggler_slow_again_only_for_a_while_releases_the_node_it_blamed() {
        let mut case = replacing(cluster(5, Some(3), None));
        let mut b = Between::default();
        after_slow(&mut b, &mut case, 0, &[slow(0, 0)], &[]);
        assert_eq!(case.roster.quarantined_hosts().map(|(h, _)| h).collect::<Vec<_>>(), ["n0"]);
        (case.slow, case.named) = (Vec::new(), vec![slow(0, 0)]);
        let d = b.after_attempt(&case.ctx(), 1, Ended::Succeeded);
        assert_eq!(d.released.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ["n0"], "{d:?}");
        assert_eq!(d.roster.unwrap().quarantined_hosts().count(), 0);
        // A straggler named once but fast again by the end blames no node.
        let mut case = replacing(cluster(5, Some(3), None));
        case.named = vec![slow(2, 2)];
        let d = after_slow(&mut Between::default(), &mut case, 0, &[], &[]);
        assert_eq!(blamed(&d), []);
    }

    #[test]
    fn a_node_blamed_for_a_fault_is_not_released_by_a_straggler_that_moves() {
        // n1 lost (and rank 1 slow on it): blamed for the loss, not recorded for its rank.
        let mut case = replacing(cluster(5, Some(3), None));
        let mut b = Between::default();
        let d = after_slow(&mut b, &mut case, 0, &[slow(1, 1)], &[1]);
        assert_eq!(blamed(&d).len(), 1);
        assert!(blamed(&d)[0].1.contains("lost"), "{d:?}");
        let d = after_slow(&mut b, &mut case, 1, &[slow(1, 1)], &[]);
        assert_eq!(d.released, []);
        // ... and rank 1, slow on n3, blames n3 in turn: n1 stays out.
        assert_eq!(blamed(&d).iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1]);
        assert_eq!(case.roster.quarantined_hosts().map(|(h, _)| h).collect::<Vec<_>>(), ["n1", "n3"]);
    }

    #[test]
    fn an_ended_allocation_blames_no_node_and_ends_the_run() {
        let case = Case::new(policy(3), cluster(3, Some(2), None));
        let nodes = outcomes();
        let ended = Failure {
            verdict: bus("n1"),
            outcomes: &nodes,
            allocation: Allocation::Ended(AllocationEnd {
                why: "allocation 7 was cancelled".into(),
                preemption: None,
                cancelled: false,
            }),
            trained_for: None,
        };
        let d = Between::default().after_attempt(&case.ctx(), 0, Ended::Failed(ended));
        let class = FailureClass::Allocation;
        let verdict = Verdict { class, root_cause: None, consequences: Vec::new(), hint: hint(class) };
        let why = "allocation 7 was cancelled; no node is to blame, and no step can start in it any more";
        assert_eq!(d, ended_as(Some(verdict.clone()), RunStatus::Failed, Some(why.into())));
        // Cancelled (scancel under salloc): the user's stop, as a batch job's cancel is (130),
        // not a failed run (1).
        let cancelled = Failure {
            verdict: bus("n1"),
            outcomes: &nodes,
            allocation: Allocation::Ended(AllocationEnd {
                why: "allocation 7 was cancelled".into(),
                preemption: None,
                cancelled: true,
            }),
            trained_for: None,
        };
        let d = Between::default().after_attempt(&case.ctx(), 0, Ended::Failed(cancelled));
        assert_eq!(d, ended_as(Some(verdict.clone()), RunStatus::Interrupted, Some(why.into())));
        // Its time limit, or a preemption: no failure, a run to go on in another allocation.
        for (preemption, status) in
            [(Preemption::OutOfTime, RunStatus::TimeLimit), (Preemption::Preempted, RunStatus::Preempted)]
        {
            let ended = Failure {
                verdict: bus("n1"),
                outcomes: &nodes,
                allocation: Allocation::Ended(AllocationEnd {
                    why: "allocation 7 was cancelled".into(),
                    preemption: Some(preemption),
                    cancelled: false,
                }),
                trained_for: None,
            };
            let d = Between::default().after_attempt(&case.ctx(), 0, Ended::Failed(ended));
            assert_eq!(d, ended_as(Some(verdict.clone()), status, Some(why.into())));
        }
        // Ctrl-C while Slurm was asked: interrupted, the verdict as it was.
        let asked = Failure {
            verdict: bus("n1"),
            outcomes: &nodes,
            allocation: Allocation::Interrupted,
            trained_for: None,
        };
        let d = Between::default().after_attempt(&case.ctx(), 0, Ended::Failed(asked));
        assert_eq!(d, ended_as(Some(bus("n1")), RunStatus::Interrupted, None));
    }

    /// Told to stop for its time limit or a preemption, a run does not restart in this
    /// allocation: a failure that would restart ends it as time-limit or preempted (to be
    /// requeued), and so does the allocation's end. A failure that would not be restarted
    /// stays a failure, and a wait the signal cut short ends as the signal says.
    #[test]
    fn a_run_told_to_stop_for_its_time_limit_restarts_in_the_next_allocation_only() {
        let mut case = Case::new(policy(3), cluster(3, Some(2), None));
        let nodes = outcomes();
        let restarts = Between::default().after_attempt(&case.ctx(), 0, failed(bus("n1"), &nodes));
        assert!(matches!(restarts.next, Next::Restart { .. }), "{restarts:?}");
        for (why, status) in
            [(Preemption::TimeLimit, RunStatus::TimeLimit), (Preemption::Preempted, RunStatus::Preempted)]
        {
            case.preempted = Some(why);
            let d = Between::default().after_attempt(&case.ctx(), 0, failed(bus("n1"), &nodes));
            assert_eq!((d.verdict, d.next), (Some(bus("n1")), Next::Done { status, abandoned: None }));
            let allocation = Failure {
                verdict: bus("n1"),
                outcomes: &nodes,
                allocation: Allocation::Ended(AllocationEnd {
                    why: "allocation 7 ended".into(),
                    preemption: None,
                    cancelled: false,
                }),
                trained_for: None,
            };
            let d = Between::default().after_attempt(&case.ctx(), 0, Ended::Failed(allocation));
            assert!(matches!(d.next, Next::Done { status: s, .. } if s == status), "{d:?}");
            // A user error is not restarted anywhere: failed, and not requeued.
            let user = verdict(FailureClass::User, 0, "n0", 0, NodeExit::ExitCode(1));
            let d = Between::default().after_attempt(&case.ctx(), 0, failed(user.clone(), &nodes));
            assert_eq!(d, ended_as(Some(user), RunStatus::Failed, None));
            // A success is one.
            let d = Between::default().after_attempt(&case.ctx(), 0, Ended::Succeeded);
            assert_eq!(d, ended_as(None, RunStatus::Succeeded, None));
            assert_eq!(run_end(RunStatus::Interrupted, Some(why)), status);
            assert_eq!(run_end(RunStatus::Succeeded, Some(why)), RunStatus::Succeeded);
        }
        assert_eq!(run_end(RunStatus::Interrupted, None), RunStatus::Interrupted);
    }

    #[test]
    fn an_attempt_trained_until_its_failure_not_through_its_teardown() {
        let s = Duration::from_secs;
        // Node 1 crashed at 12 s; herd asked node 0 to stop at 13 s; the grace and the kill
        // ended the attempt at 30 s. Progress from 5 s: it trained for 7 s, not 25.
        let crashed = NodeOutcome { ended_at: s(12), ..node(1, NodeExit::ExitCode(1)) };
        let stopped =
            NodeOutcome { ended_at: s(30), stop_requested_at: Some(s(13)), ..node(0, NodeExit::Signal(9)) };
        assert_eq!(trained_for(Some(s(5)), &[stopped.clone(), crashed.clone()], s(30)), Some(s(7)));
        // A node lost counts from when herd saw it lost, not from the end it was given.
        let lost = NodeOutcome {
            ended_at: s(40),
            lost_at: Some(s(20)),
            ..node(1, NodeExit::Lost("no heartbeat for 15s".into()))
        };
        let late_stop = NodeOutcome { stop_requested_at: Some(s(25)), ..stopped.clone() };
        assert_eq!(trained_for(Some(s(5)), &[late_stop, lost], s(40)), Some(s(15)));
        // A node that succeeded early is no failure; nothing said: the attempt's end.
        let done = NodeOutcome { ended_at: s(2), ..node(1, NodeExit::ExitCode(0)) };
        assert_eq!(trained_for(Some(s(5)), &[done], s(30)), Some(s(25)));
        // No progress, no training; progress after the failure (a late line), none either.
        assert_eq!(trained_for(None, std::slice::from_ref(&crashed), s(30)), None);
        assert_eq!(trained_for(Some(s(20)), &[crashed], s(30)), Some(Duration::ZERO));
    }

    #[test]
    fn a_blamed_node_is_replaced_by_a_spare_and_without_one_by_fewer_nodes_down_to_min_nodes() {
        let nodes = outcomes();
        let replace = |case: &Case| match Between::default()
            .after_attempt(&case.ctx(), 0, failed(bus("n1"), &nodes))
            .next
        {
            Next::Restart { replace, .. } => replace,
            next => panic!("{next:?}"),
        };
        // A spare, n2, takes node rank 1.
        let spare = Case::new(policy(3), cluster(3, Some(2), None));
        let Replace::With { blamed, roster, changes } = replace(&spare) else { panic!() };
        assert_eq!(blamed, [Blamed { node_rank: 1, reason: "rank 1 died of SIGBUS".into() }]);
        let promoted = Change::Promoted { node_rank: 1, spare: "n2".into(), replaced: "n1".into() };
        assert_eq!(changes, [promoted]);
        assert_eq!(roster.active_host(1), "n2");
        // No spare, room above min_nodes: the run goes on without it.
        let fewer = Case::new(policy(3), cluster(2, None, Some(1)));
        let Replace::With { roster, changes, .. } = replace(&fewer) else { panic!() };
        assert_eq!(changes, [Change::Dropped { host: "n1".into() }]);
        assert_eq!(roster.active.len(), 1);
        // No spare nor room above min_nodes: the run waits for the node as ever.
        let none = Case::new(policy(3), cluster(2, None, Some(2)));
        assert!(matches!(replace(&none), Replace::NoRoom { reserve: false, .. }));
        // Its spares used up: the same, and it says why.
        let spent =
            Roster::without(&cluster(3, Some(2), None), &[Blamed { node_rank: 0, reason: "x".into() }])
                .unwrap()
                .0;
        let spent = Case::new(policy(3), spent);
        let Replace::NoRoom { blamed, reserve } = replace(&spent) else { panic!() };
        assert!(reserve && blamed.len() == 1);
    }

    #[test]
    fn a_fault_that_follows_its_rank_releases_the_node_blamed_for_it() {
        let nodes = outcomes();
        let mut case = Case::new(policy(3), cluster(3, Some(2), None));
        let mut b = Between::default();
        let first = b.after_attempt(&case.ctx(), 0, failed(bus("n1"), &nodes));
        let Next::Restart { replace: Replace::With { roster, .. }, .. } = first.next else { panic!() };
        assert!(first.released.is_empty() && first.roster.is_none());
        case.roster = roster;
        // Rank 1 segfaults on n2, the spare, too: the program's fault; n1 is let back in.
        let second = b.after_attempt(&case.ctx(), 1, failed(bus("n2"), &nodes));
        assert_eq!(second.released.len(), 1);
        assert_eq!(second.released[0].0, "n1");
        let roster = second.roster.expect("released");
        assert_eq!(roster.spare_hosts().collect::<Vec<_>>(), ["n1"]);
        assert_eq!(roster.quarantined_hosts().count(), 0);
        // Nobody is blamed for it: the restart keeps its nodes.
        assert!(matches!(second.next, Next::Restart { replace: Replace::Nothing, .. }), "{:?}", second.next);
    }

    #[test]
    fn a_node_blamed_without_room_is_not_released_for_it_was_never_quarantined() {
        let nodes = outcomes();
        let case = Case::new(policy(3), cluster(2, None, None));
        let mut b = Between::default();
        let first = b.after_attempt(&case.ctx(), 0, failed(bus("n1"), &nodes));
        assert!(matches!(first.next, Next::Restart { replace: Replace::NoRoom { .. }, .. }));
        // The same fault on another host (the ranks moved): n1 was blamed, never quarantined.
        let second = b.after_attempt(&case.ctx(), 1, failed(bus("n0"), &nodes));
        assert_eq!((second.released, second.roster), (Vec::new(), None));
    }

    #[test]
    fn a_node_unreachable_for_the_restarts_few_seconds_is_kept_out_of_this_run_only() {
        let unreachable = unreachable_before_restart(2, "ssh: connection timed out", SPARE_AFTER);
        assert!(!remembered(&unreachable.reason), "{}", unreachable.reason);
        for kept in ["node-lost: no heartbeat for 15s", "rank 1 died of SIGBUS", "straggler: 3.1x slower"] {
            assert!(remembered(kept), "{kept}");
        }
    }

    #[test]
    fn a_lost_node_is_waited_for_briefly_while_something_may_take_its_place() {
        let (secs, five_min) = (Duration::from_secs, Duration::from_secs(300));
        // A spare, min_nodes room or a node to let back in: 10 s, then the stand-in.
        assert_eq!(reconnect_wait(five_min, true), secs(10));
        // Nothing to take its place: the whole wait at once.
        assert_eq!(reconnect_wait(five_min, false), five_min);
        // A node_wait shorter than SPARE_AFTER is never waited past.
        assert_eq!(reconnect_wait(secs(4), true), secs(4));
    }

    #[test]
    fn a_node_quarantined_out_of_reach_by_this_run_may_rejoin_once_a_restart_has_no_room() {
        // n0 was quarantined by an earlier run; this one lost n1 (a link cut), could not
        // connect n2, and blamed n3 for a segfault.
        let mut file = BTreeMap::new();
        file.insert("n0".to_string(), "node-lost: no heartbeat for 15s".to_string());
        let start =
            Roster::new((0..7).map(|i| format!("n{i}")).collect(), Some(2), None, None, &file).unwrap();
        let before: Vec<String> = start.quarantined_hosts().map(|(h, _)| h.to_string()).collect();
        let blame = |node_rank, reason: &str| Blamed { node_rank, reason: reason.into() };
        let (r, _) = start.without(&[blame(0, "node-lost: no heartbeat for 15s")]).unwrap();
        let (r, _) = r.without(&[blame(1, "ssh: connection timed out")]).unwrap();
        let (r, _) = r.without(&[blame(0, "rank 1 died of SIGBUS")]).unwrap();
        // Its link worked: the agent ended early.
        let (r, _) =
            r.without(&[blame(1, "node-lost: agent ended with exit code 1 before the job did")]).unwrap();
        let quarantined: Vec<&str> = r.quarantined_hosts().map(|(h, _)| h).collect();
        assert_eq!(quarantined, ["n0", "n1", "n2", "n3", "n4"]);
        // Only a node out of reach is worth letting one back in for: the run waits for it.
        assert!(out_of_reach("node-lost: no heartbeat for 15s") && out_of_reach("ssh: connection timed out"));
        assert!(
            !out_of_reach("rank 1 died of SIGBUS") && !out_of_reach("node-lost: agent killed by signal 9")
        );
        assert_eq!(rejoinable(&r, &before, &[]), ["n1", "n2"]);
        // Each is tried once a restart: one that did not answer waits for the next.
        assert_eq!(rejoinable(&r, &before, &["n1".to_string()]), ["n2"]);
        // Let back in, it is a spare again, in file order.
        let (back, released) = release(&r, vec![("n2".into(), "answers again".into())]);
        assert_eq!(released.len(), 1);
        assert_eq!(back.unwrap().spare_hosts().collect::<Vec<_>>(), ["n2"]);
    }

    #[test]
    fn later_blame_restart_failures_and_resume() {
        // Refused by Slurm after the backoff: blamed as any node.
        let r = cluster(3, Some(2), None);
        assert_eq!(replacement(&r, Vec::new()), Replace::Nothing);
        let refused = vec![Blamed { node_rank: 0, reason: "srun: drained".into() }];
        assert!(matches!(replacement(&r, refused), Replace::With { .. }));
        // A restart that cannot start in an ended allocation says so.
        assert_eq!(abandoned("node 1 did not come back".into(), None), "node 1 did not come back");
        assert!(abandoned("node 1 did not come back".into(), Some("allocation 7 timed out"))
            .starts_with("allocation 7 timed out; no node"));
        // The checkpoint found, or none: the resume args without their {latest:}.
        let args = vec!["--resume".to_string(), "{latest:ck/*}".to_string()];
        assert_eq!(resume(&[], Some("ck/1".into())), None);
        let found = Resume { args: vec!["--resume".into(), "ck/9".into()], from: Some("ck/9".into()) };
        assert_eq!(resume(&args, Some("ck/9".into())), Some(found));
        assert_eq!(resume(&args, None), Some(Resume { args: Vec::new(), from: None }));
        let plain = vec!["--resume".to_string()];
        assert_eq!(resume(&plain, None), Some(Resume { args: plain.clone(), from: None }));
    }
}
