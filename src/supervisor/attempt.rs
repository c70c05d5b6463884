//! The decisions of one attempt, as a pure state machine: `Attempt::decide(now, input)`
//! takes what happened (a node ended, a fatal line came, a tick with the nodes' silences, a
//! signal, a timer) and returns what to do (start the job on a port, SIGTERM or SIGKILL every
//! node, ask the agents for their processes, arm a timer, say why the attempt is being torn
//! down). No I/O, no clock: `now` is the attempt's age, given by the caller. The async shell
//! in `supervisor::gang::run_attempt` only performs the actions.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::config::PortSpec;
use crate::events::Preemption;
use crate::outcome::NodeExit;
use crate::plan::LaunchPlan;
use crate::policy::LATE_CAP_TIMEOUTS;
use crate::port::{self, PortError};

/// How long herd waits for the agents' answers to `probe` (every job process, and every
/// worker's stack) before it tears an attempt down: the evidence of who is stuck dies with
/// the processes. Each agent bounds its stacks to 3 s. A hang is probed, and so is a failure
/// that leaves other nodes running (their ranks wait on the one that failed, in a collective
/// or at a barrier): the teardown is late by this at most.
pub const PROBE_WAIT: Duration = Duration::from_secs(5);
/// A gap between two ticks this long means herd itself was not running (SIGSTOP, Ctrl-Z, a
/// laptop lid, a paused CI runner, a starved machine): no node is judged on that silence.
pub const STALLED: Duration = Duration::from_secs(2);
/// How long a node may take to end once SIGKILL was requested, before herd stops waiting, on a
/// fleet whose heartbeats are on time (see `Attempt::kill_wait`). The agent reports what
/// SIGKILL could not stop a second after sending it, after looking through /proc a few times:
/// on a loaded machine with many processes, that took over 5 s.
pub const KILL_DEADLINE: Duration = Duration::from_secs(15);
/// A launch host whose 1-minute load is this many times its cores is overloaded: its SSH
/// masters, which carry every heartbeat, may hold them unread for seconds.
pub const OVERLOADED_PER_CORE: f64 = 4.0;

/// Why herd is stopping the attempt's nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopping {
    NodeFailed,
    Hang,
    Interrupted,
    /// A time limit or a preemption: the ranks were told to checkpoint first.
    Checkpoint,
}

/// What the attempt's shell saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The master's agent reported the local ports in use (`None`: no table was readable).
    Ports(Option<BTreeSet<u16>>),
    /// A node's agent ended, or herd stopped waiting for it.
    NodeEnded { node_rank: usize, exit: NodeExit },
    /// A node printed a line that means one of its processes was killed.
    FatalLine { node_rank: usize, line: String },
    /// Ctrl-C or SIGTERM.
    Interrupt,
    /// A time limit's warning or a preemption (see `Signal::Checkpoint`).
    Checkpoint(Preemption),
    /// The ranks' time to checkpoint and exit is over.
    TermTimer,
    /// A node's agent answered `probe`.
    ProbeAnswered { node_rank: usize },
    /// The wait for the probe's answers is over.
    ProbeTimedOut,
    /// The grace period after SIGTERM is over.
    KillTimer,
    /// The periodic check.
    Tick(Clock),
}

/// What a tick knows of time, from the shell's clocks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Clock {
    /// Since the tick before: a long gap means herd itself was not running.
    pub gap: Duration,
    /// Since the job last made progress (a line matching `restart.progress_pattern`).
    pub since_progress: Duration,
    /// Per node, how long since its agent last spoke; `None` before it first did (its login
    /// shell is still starting).
    pub heard: Vec<Option<Duration>>,
    /// The launch host's load, if it could be read.
    pub load: Option<HostLoad>,
    /// How long every rank has sat still, as the last round of samples showed (see
    /// `straggler::StragglerWatch::still_for`).
    pub still: Duration,
}

/// The launch host's 1-minute load average and its cores.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HostLoad {
    pub load1: f64,
    pub cores: usize,
}

impl Eq for HostLoad {}

impl HostLoad {
    fn overloaded(&self) -> bool {
        self.load1 >= OVERLOADED_PER_CORE * self.cores.max(1) as f64
    }
}

/// What the shell does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Every node gets its env, with this master port: the job starts.
    Start(u16),
    /// SIGTERM every node's job. `failing`: the node whose own failure stops the attempt,
    /// which keeps its launcher's grace (see `node::NodeCommand::Stop`).
    Term { failing: Option<usize> },
    /// SIGKILL every node's job.
    Kill,
    /// Say that the attempt is being torn down, and why.
    Teardown(String),
    /// Send `Input::KillTimer` after this long.
    KillAfter(Duration),
    /// Every node's ranks get `restart.checkpoint_signal` (the job's process group, where it
    /// has no rank).
    SignalRanks,
    /// Send `Input::TermTimer` after this long.
    TermAfter(Duration),
    /// Ask every agent for its job's processes and stacks, because of `reason`; send
    /// `Input::ProbeTimedOut` after `PROBE_WAIT`.
    Probe(String),
    /// herd was not running for this long: every node gets a fresh window to be heard.
    Forgive(Duration),
    /// Warn, before any node is judged silent: heartbeats are late on many nodes at once, or
    /// this host is overloaded, and herd waits longer than `restart.heartbeat_timeout`.
    LateHeartbeats(String),
}

/// How the attempt ended, for classification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// Why herd stopped the nodes, and when (the attempt's age); `None` if they all ended.
    pub stopping: Option<(Stopping, Duration)>,
    /// Each node's exit, a silent node's made `Lost` with why.
    pub exits: Vec<Option<NodeExit>>,
    /// When herd saw each lost node lost (its silence judged, or its transport gone): the
    /// moment of the loss, which a lost node's end may follow by a while. `None` for a node
    /// that ended lost only after herd sent its stop (an agent ending with 143 when Slurm
    /// cancels its step): that end is herd's own teardown, no loss herd saw.
    pub lost_at: Vec<Option<Duration>>,
    /// No master port could be chosen: nothing started.
    pub no_port: Option<PortError>,
    /// The nodes judged silent after herd warned that heartbeats were late on many nodes
    /// at once (see `NodeOutcome::late_fleet`).
    pub late_fleet: BTreeSet<usize>,
    pub port: Option<u16>,
    /// A time limit or a preemption came: what the attempt ends as, unless interrupted.
    pub preempted: Option<Preemption>,
}

/// A stop that waits for the probe's answers (see `PROBE_WAIT`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pending {
    why: Stopping,
    /// When the failure was seen: what a node did after it (end, get lost) follows the stop,
    /// for classification and blame, as if herd had stopped every node then.
    at: Duration,
    failing: Option<usize>,
    reason: String,
    /// SIGKILL, not SIGTERM, once the answers are in: a silent node cannot act on `term`.
    kill: bool,
}

/// One attempt's state. See the module's header.
pub struct Attempt<'a> {
    plan: &'a LaunchPlan,
    used_ports: &'a BTreeSet<u16>,
    port: Option<u16>,
    no_port: Option<PortError>,
    stopping: Option<(Stopping, Duration)>,
    /// The agents asked for their processes and stacks: the stop that waits for them.
    probing: Option<Pending>,
    answered: BTreeSet<usize>,
    /// Per node, whether its agent has spoken yet (a node still logging in answers nothing).
    heard: Vec<bool>,
    exits: Vec<Option<NodeExit>>,
    lost_at: Vec<Option<Duration>>,
    /// Nodes given up on for their silence, and how each one is lost.
    silent: BTreeMap<usize, String>,
    kill_armed: bool,
    /// SIGTERM (or SIGKILL) was sent: a node that ends lost from now on may end so because of it.
    term_sent: bool,
    /// Late heartbeats were warned of (once an attempt).
    warned_late: bool,
    /// How much longer than usual herd waits for its nodes now (see `extra_wait`).
    extra: Duration,
    /// The longest wait was granted for this host's overload, and holds while it lasts.
    overload_held: bool,
    /// Nodes judged silent after the late heartbeats were warned of, or whose connection
    /// was lost while this host was strained.
    late_fleet: BTreeSet<usize>,
    /// When a tick last found this host overloaded.
    strained_at: Option<Duration>,
    /// The first time limit or preemption.
    preempted: Option<Preemption>,
}

impl<'a> Attempt<'a> {
    /// `known_port`: fixed in the config, or tested by the preflight; otherwise the master's
    /// agent reports its ports and one is chosen that `used_ports` (earlier attempts') lacks.
    pub fn new(plan: &'a LaunchPlan, known_port: Option<u16>, used_ports: &'a BTreeSet<u16>) -> Attempt<'a> {
        Attempt {
            plan,
            used_ports,
            port: known_port,
            no_port: None,
            stopping: None,
            probing: None,
            answered: BTreeSet::new(),
            heard: vec![false; plan.nnodes()],
            exits: vec![None; plan.nnodes()],
            lost_at: vec![None; plan.nnodes()],
            silent: BTreeMap::new(),
            kill_armed: false,
            term_sent: false,
            warned_late: false,
            extra: Duration::ZERO,
            overload_held: false,
            late_fleet: BTreeSet::new(),
            strained_at: None,
            preempted: None,
        }
    }

    /// The port the attempt starts on, if known now; the actions that start it.
    pub fn begin(&self) -> Vec<Action> {
        self.port.map(Action::Start).into_iter().collect()
    }

    /// How long a node may take to end once SIGKILL is requested: `KILL_DEADLINE`, longer by
    /// what the fleet's heartbeats are late by (or this host's overload): the agents that
    /// answer late are as late to say they ended, and giving up on them all would make every
    /// node lost at once.
    pub fn kill_wait(&self) -> Duration {
        KILL_DEADLINE + self.extra
    }

    /// Whether the master's report of its ports is still of use.
    pub fn wants_ports(&self) -> bool {
        self.port.is_none() && self.stopping.is_none()
    }

    pub fn decide(&mut self, now: Duration, input: Input) -> Vec<Action> {
        let mut actions = Vec::new();
        match input {
            Input::Ports(in_use) => self.ports(now, in_use.as_ref(), &mut actions),
            Input::NodeEnded { node_rank, exit } => self.node_ended(now, node_rank, exit, &mut actions),
            Input::FatalLine { node_rank, line } => {
                let reason = format!("{} failed: {}", self.who(node_rank), line.trim());
                self.fail(now, Some(node_rank), reason, false, &mut actions);
            }
            Input::Interrupt => self.interrupt(now, &mut actions),
            Input::Checkpoint(why) => self.checkpoint(now, why, &mut actions),
            // The ranks had their time: what is left is stopped as in any teardown (unless a
            // stop came meanwhile and took the attempt over).
            Input::TermTimer if self.term_sent => {}
            Input::TermTimer => {
                self.term_sent = true;
                actions.push(Action::Term { failing: None });
                if !self.kill_armed {
                    self.kill_armed = true;
                    actions.push(Action::KillAfter(self.plan.restart.grace_period));
                }
            }
            Input::ProbeAnswered { node_rank } => {
                self.answered.insert(node_rank);
                self.end_probe_if_answered(now, &mut actions);
            }
            Input::ProbeTimedOut => self.end_probe(now, &mut actions),
            Input::KillTimer => {
                // A teardown that takes this one over later gets its own grace, then SIGKILL.
                self.kill_armed = false;
                actions.push(Action::Kill);
            }
            Input::Tick(clock) => self.tick(now, clock, &mut actions),
        }
        actions
    }

    /// Every node has ended: what the attempt leaves for classification.
    pub fn ended(self) -> Ended {
        let (stopping, exits, lost_at) = (self.stopping, self.exits, self.lost_at);
        Ended {
            stopping,
            exits,
            lost_at,
            no_port: self.no_port,
            late_fleet: self.late_fleet,
            port: self.port,
            preempted: self.preempted,
        }
    }

    fn who(&self, node_rank: usize) -> String {
        who(self.plan, node_rank)
    }

    fn ports(&mut self, now: Duration, in_use: Option<&BTreeSet<u16>>, actions: &mut Vec<Action>) {
        if !self.wants_ports() {
            return;
        }
        let master = &self.plan.master;
        match port::choose(master.port, master.port_range, in_use, self.used_ports) {
            Ok(p) => {
                self.port = Some(p);
                actions.push(Action::Start(p));
            }
            Err(error) => {
                let reason = format!("master node {}: {error}", master.host);
                self.no_port = Some(error);
                self.fail(now, None, reason, false, actions);
            }
        }
    }

    fn node_ended(&mut self, now: Duration, node_rank: usize, exit: NodeExit, actions: &mut Vec<Action>) {
        let exit = match self.silent.get(&node_rank) {
            Some(why) => NodeExit::Lost(why.clone()),
            None => exit,
        };
        // A silent node was lost as of its silence; another, only if it ended lost before herd
        // stopped anything (a teardown may end a healthy node's step "lost").
        if matches!(exit, NodeExit::Lost(_)) && !self.term_sent {
            self.lost_at[node_rank].get_or_insert(now);
        }
        // A connection lost while this host was too loaded to answer its keepalives (load 896
        // on 2 cores: 37 of 252 nodes' SSH masters gave up within seconds) is no evidence
        // against the node: like a silence judged then, it blames none. The cost: a node
        // truly gone then is not replaced by a spare; the restart waits for it.
        let strained = self.strained_at.is_some_and(|at| now <= at + self.plan.restart.heartbeat_timeout);
        if matches!(exit, NodeExit::Lost(_)) && !self.silent.contains_key(&node_rank) && strained {
            self.late_fleet.insert(node_rank);
        }
        let failed = !exit.success();
        let reason = format!("{} failed: {exit}", self.who(node_rank));
        self.exits[node_rank] = Some(exit);
        if failed {
            self.fail(now, None, reason, false, actions);
        } else {
            // One fewer node to answer.
            self.end_probe_if_answered(now, actions);
        }
    }

    /// The first interrupt stops the attempt gracefully, whatever else was stopping it; the
    /// next one kills.
    fn interrupt(&mut self, now: Duration, actions: &mut Vec<Action>) {
        if self.stopping.is_some_and(|(why, _)| why == Stopping::Interrupted) {
            actions.push(Action::Kill);
            return;
        }
        self.stopping = None;
        // A silent node waiting for the probe's end to be killed is killed now.
        if self.probing.take().is_some_and(|p| p.kill) {
            actions.push(Action::Kill);
        }
        self.stop_all(now, Stopping::Interrupted, None, "interrupted".into(), actions);
    }

    /// A time limit's warning or a preemption: the run cannot go on in this allocation. If the
    /// job runs, every rank is told to checkpoint and has `restart.checkpoint_grace` to exit
    /// (a node that ends meanwhile, whatever its exit, is no failure); then the teardown. A
    /// stop under way (a failure, a hang) goes on: the attempt still ends as preempted, since
    /// no restart could follow here. A second one changes nothing; Ctrl-C still kills.
    fn checkpoint(&mut self, now: Duration, why: Preemption, actions: &mut Vec<Action>) {
        if self.preempted.is_some() {
            return;
        }
        self.preempted = Some(why);
        if self.stopping.is_some() || self.probing.is_some() {
            return;
        }
        let restart = &self.plan.restart;
        if self.port.is_none() {
            // Nothing started: nothing to checkpoint.
            self.stop_all(now, Stopping::Checkpoint, None, why.describe().to_string(), actions);
            return;
        }
        self.stopping = Some((Stopping::Checkpoint, now));
        actions.push(Action::SignalRanks);
        actions.push(Action::Teardown(format!(
            "{}: SIG{} to every rank, then up to {} for them to checkpoint and exit",
            why.describe(),
            restart.checkpoint_signal.name,
            humantime::format_duration(restart.checkpoint_grace)
        )));
        actions.push(Action::TermAfter(restart.checkpoint_grace));
    }

    fn tick(&mut self, now: Duration, mut clock: Clock, actions: &mut Vec<Action>) {
        if clock.load.is_some_and(|l| l.overloaded()) {
            self.strained_at = Some(now);
        }
        if clock.gap >= STALLED {
            // What the nodes said meanwhile is still unread: nobody's silence counts.
            actions.push(Action::Forgive(clock.gap));
            clock.since_progress = Duration::ZERO;
            clock.heard.iter_mut().flatten().for_each(|d| *d = Duration::ZERO);
        }
        for (heard, now_heard) in self.heard.iter_mut().zip(&clock.heard) {
            *heard |= now_heard.is_some();
        }
        let restart = &self.plan.restart;
        let silent = restart.hang_timeout.filter(|l| clock.since_progress >= *l).map(|_| {
            let idle = Duration::from_secs(clock.since_progress.as_secs());
            format!("no progress for {}", humantime::format_duration(idle))
        });
        let still = restart.stall_timeout.filter(|l| clock.still >= *l).map(|_| {
            let still = Duration::from_secs(clock.still.as_secs());
            format!(
                "every rank still for {} (no CPU, no byte read or written: restart.stall_timeout)",
                humantime::format_duration(still)
            )
        });
        if let Some(reason) = silent.or(still) {
            if self.stopping.is_none() && self.probing.is_none() {
                // First the evidence: which process each node's job is in, and its state.
                actions.push(Action::Probe(reason.clone()));
                self.probing =
                    Some(Pending { why: Stopping::Hang, at: now, failing: None, reason, kill: false });
            }
        }
        self.judge_silences(now, &clock, actions);
    }

    /// Every running node's silence judged, against the heartbeat timeout and what the fleet
    /// shares of it (see `extra_wait`); a warning first when herd waits longer than the timeout
    /// for a node that the timeout alone would have judged.
    fn judge_silences(&mut self, now: Duration, clock: &Clock, actions: &mut Vec<Action>) {
        let running: Vec<usize> = (0..clock.heard.len())
            .filter(|r| self.exits[*r].is_none() && !self.silent.contains_key(r))
            .collect();
        let silences: Vec<Duration> = running.iter().filter_map(|r| clock.heard[*r]).collect();
        let timeout = self.plan.restart.heartbeat_timeout;
        let mut extra = extra_wait(self.plan, &silences, clock.load);
        // An overloaded host holds every node's heartbeats unread, whichever of them came in
        // last: once herd has waited the longest for that, it keeps that wait (and its word
        // in the warning) while the host stays overloaded. Under a load of 353 on 2 cores, the
        // others' heartbeats read, one node's alone looked late 14 s after the warning, and a
        // healthy node was quarantined.
        let overloaded = clock.load.is_some_and(|l| l.overloaded());
        if overloaded && extra == timeout * LATE_CAP_TIMEOUTS {
            self.overload_held = true;
        }
        if overloaded && self.overload_held {
            extra = timeout * LATE_CAP_TIMEOUTS;
        }
        self.extra = extra;
        let past_timeout = silences.iter().filter(|s| **s >= timeout).count();
        if extra > Duration::ZERO && past_timeout > 0 && !self.warned_late {
            self.warned_late = true;
            let message = late_warning(self.plan, &silences, clock.load, extra);
            actions.push(Action::LateHeartbeats(message));
        }
        for node_rank in running {
            let heard = clock.heard[node_rank];
            if let Some((reason, why)) = judge_silence(self.plan, node_rank, heard, now, extra) {
                if self.warned_late {
                    self.late_fleet.insert(node_rank);
                }
                self.silent.insert(node_rank, why);
                self.lost_at[node_rank] = Some(now);
                self.fail(now, None, reason, true, actions);
            }
        }
    }

    /// A node failed: stop every node, once the others' stacks are in if some of them still
    /// run (see `PROBE_WAIT`). `kill`: SIGKILL, for a silent node cannot act on `term` (and
    /// herd stops waiting for it soon; a stop request never goes down: the `term` after it
    /// changes nothing).
    fn fail(
        &mut self,
        now: Duration,
        failing: Option<usize>,
        reason: String,
        kill: bool,
        actions: &mut Vec<Action>,
    ) {
        if self.stopping.is_some() {
            // In a checkpoint's grace no stop was sent yet: a node silent meanwhile (its agent
            // late under the checkpoint's writes, or lost) must not cut every other rank's save
            // short. The grace's end stops them all, it included.
            let checkpointing =
                self.stopping.is_some_and(|(why, _)| why == Stopping::Checkpoint) && !self.term_sent;
            if kill && !checkpointing {
                actions.push(Action::Kill);
            }
            return;
        }
        // Some ranks may still run, waiting on the failed one: where they are is evidence.
        let others = self.port.is_some() && self.to_answer().next().is_some();
        match &mut self.probing {
            // A failure takes a hang's probe over: the attempt failed, whatever else it did.
            Some(pending) => {
                if pending.why == Stopping::Hang {
                    *pending = Pending { why: Stopping::NodeFailed, at: now, failing, reason, kill: false };
                }
                pending.kill |= kill;
                self.end_probe_if_answered(now, actions);
            }
            None if others => {
                actions.push(Action::Probe(reason.clone()));
                self.probing = Some(Pending { why: Stopping::NodeFailed, at: now, failing, reason, kill });
            }
            None => {
                if kill {
                    actions.push(Action::Kill);
                }
                self.stop_all(now, Stopping::NodeFailed, failing, reason, actions);
            }
        }
    }

    /// The nodes whose answer to the probe is awaited: running, heard from, not given up on.
    fn to_answer(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.exits.len())
            .filter(|r| self.exits[*r].is_none() && self.heard[*r] && !self.silent.contains_key(r))
            .filter(|r| !self.answered.contains(r))
    }

    fn end_probe_if_answered(&mut self, now: Duration, actions: &mut Vec<Action>) {
        if self.probing.is_some() && self.to_answer().next().is_none() {
            self.end_probe(now, actions);
        }
    }

    /// The probe is over: the stop that waited for it.
    fn end_probe(&mut self, now: Duration, actions: &mut Vec<Action>) {
        if let Some(Pending { why, at, failing, reason, kill }) = self.probing.take() {
            if kill {
                actions.push(Action::Kill);
            }
            // A hang is stopped when its evidence is in; a failure as it was seen.
            let at = if why == Stopping::Hang { now } else { at };
            self.stop_all(at, why, failing, reason, actions);
        }
    }

    /// Stop every node, unless that is under way; SIGKILL follows after the grace period.
    fn stop_all(
        &mut self,
        now: Duration,
        why: Stopping,
        failing: Option<usize>,
        reason: String,
        actions: &mut Vec<Action>,
    ) {
        if self.stopping.is_some() {
            return;
        }
        self.stopping = Some((why, now));
        self.term_sent = true;
        actions.push(Action::Term { failing });
        actions.push(Action::Teardown(reason));
        if !self.kill_armed {
            self.kill_armed = true;
            actions.push(Action::KillAfter(self.plan.restart.grace_period));
        }
    }
}

/// The port an attempt knows before any node reports: the preflight's, or a fixed one.
pub fn known_port(plan: &LaunchPlan, preflight_port: Option<u16>) -> Option<u16> {
    preflight_port.or(match plan.master.port {
        PortSpec::Fixed(p) => Some(p),
        PortSpec::Auto => None,
    })
}

/// How a reason names a node: `node 2 (gpu-03)`.
fn who(plan: &LaunchPlan, node_rank: usize) -> String {
    format!("node {node_rank} ({})", plan.nodes[node_rank].host)
}

/// How much longer than `restart.heartbeat_timeout` herd waits for any node now, given the
/// `silences` of the running nodes heard from: a silence that most nodes share is not one
/// node's fault (herd's own SSH masters starved, or every node loaded), and a launch host
/// that is overloaded (`OVERLOADED_PER_CORE`) may hold any node's heartbeats unread.
/// - What most nodes (more than half, as `blame::minority` counts) are late by, past a
///   heartbeat interval: the wait grows by that much, so that a node is judged on its own
///   silence, not on the fleet's;
/// - an overloaded host: the longest wait.
///
/// Never more than `LATE_CAP_TIMEOUTS` timeouts: a fleet silent for that long is lost (and
/// blamed as one cut, not node by node: see `blame`).
pub fn extra_wait(plan: &LaunchPlan, silences: &[Duration], load: Option<HostLoad>) -> Duration {
    let timeout = plan.restart.heartbeat_timeout;
    let cap = timeout * LATE_CAP_TIMEOUTS;
    // A loaded host makes every node late alike: it counts once a node is past the timeout
    // while another is past half of it (lateness building up: at 252 nodes on a load of 542,
    // the first node reached the timeout alone, its peers a few seconds behind), never for
    // one silent node alone (a cut link, a dead host), whose loss it would delay.
    let late = silences.iter().filter(|s| **s >= timeout).count();
    let building = silences.iter().filter(|s| **s >= timeout / 2).count();
    if late >= 1 && building >= 2 && load.is_some_and(|l| l.overloaded()) {
        return cap;
    }
    let interval = crate::policy::heartbeat_interval(timeout);
    shared_silence(silences).saturating_sub(interval).min(cap)
}

/// The silence most of `silences` reach: the longest that more than half of them (more than
/// a `blame::minority`) are at or past; zero when there are too few to be more than one.
fn shared_silence(silences: &[Duration]) -> Duration {
    let most = (silences.len() / 2).max(1) + 1;
    let mut sorted = silences.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    sorted.get(most - 1).copied().unwrap_or(Duration::ZERO)
}

/// The warning herd gives before it waits longer than the heartbeat timeout: how late the
/// heartbeats are (on how many nodes, what most share, the latest), this host's load, how
/// long herd now waits, and what to raise if this is how the cluster runs.
fn late_warning(plan: &LaunchPlan, silences: &[Duration], load: Option<HostLoad>, extra: Duration) -> String {
    let timeout = plan.restart.heartbeat_timeout;
    let secs = |d: Duration| humantime::format_duration(Duration::from_secs(d.as_secs()));
    let late = silences.iter().filter(|s| **s >= timeout).count();
    let half = silences.iter().filter(|s| **s >= timeout / 2).count();
    let latest = silences.iter().max().copied().unwrap_or_default();
    let shared = shared_silence(silences);
    let host = match load {
        Some(l) => format!("; this host's load is {:.0} on {} cores", l.load1, l.cores),
        None => String::new(),
    };
    // Twice the latest silence seen, in whole 5 s.
    let suggest = Duration::from_secs((latest.as_secs() * 2).div_ceil(5).max(1) * 5).max(timeout * 2);
    format!(
        "heartbeats are late on many nodes at once ({late} of {} past restart.heartbeat_timeout, {half} past half of it, most silent for {}, the latest for {}{host}): \
         that is no one node's fault, so none is judged silent before {} without a heartbeat; \
         if this cluster (or this launch host) is always this loaded, raise restart.heartbeat_timeout ({}) to {} or more",
        silences.len(),
        secs(shared),
        secs(latest),
        secs(timeout + extra),
        secs(timeout),
        secs(suggest),
    )
}

/// Whether a node still running is lost for its silence: `(teardown reason, how it is lost)`.
/// `silent_for`: how long since its agent last spoke, `None` before it first did (its login
/// shell is still starting, judged by `ssh.login_timeout`, not by the heartbeat). `extra`:
/// how much longer than the heartbeat timeout herd waits now (see `extra_wait`).
fn judge_silence(
    plan: &LaunchPlan,
    node_rank: usize,
    silent_for: Option<Duration>,
    attempt_age: Duration,
    extra: Duration,
) -> Option<(String, String)> {
    let who = who(plan, node_rank);
    match silent_for {
        None if attempt_age >= plan.login_timeout => {
            let limit = humantime::format_duration(plan.login_timeout);
            Some((
                format!("{who} is silent: its login shell has not started the agent in {limit}"),
                format!("its login shell did not start the agent within ssh.login_timeout ({limit}): a shell init (conda, pyenv, module) may be stuck"),
            ))
        }
        Some(silent) if silent >= plan.restart.heartbeat_timeout + extra => {
            let timeout = plan.restart.heartbeat_timeout;
            let waited = humantime::format_duration(Duration::from_secs((timeout + extra).as_secs()));
            let why = match extra {
                Duration::ZERO => format!("no heartbeat for {waited}"),
                _ => format!(
                    "no heartbeat for {waited} (restart.heartbeat_timeout is {}, waited longer for heartbeats late on many nodes)",
                    humantime::format_duration(timeout)
                ),
            };
            Some((format!("{who} is silent: no heartbeat"), why))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(extra: &str) -> LaunchPlan {
        let text = format!(
            "[ssh]\nlogin_timeout = \"2m\"\n[[nodes]]\nhost = \"n[1-3]\"\n[job]\nscript = \"t.py\"\n[restart]\nheartbeat_timeout = \"15s\"\ngrace_period = \"7s\"\n{extra}"
        );
        let config = crate::config::parse(std::path::Path::new("c.toml"), &text).unwrap();
        crate::plan::build(&config, &Default::default())
    }

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn tick(heard: [Option<u64>; 3], since_progress: u64, gap_ms: u64) -> Input {
        Input::Tick(Clock {
            gap: Duration::from_millis(gap_ms),
            since_progress: S(since_progress),
            heard: heard.iter().map(|h| h.map(S)).collect(),
            load: None,
            still: Duration::ZERO,
        })
    }

    fn teardown(reason: &str, failing: Option<usize>) -> Vec<Action> {
        vec![Action::Term { failing }, Action::Teardown(reason.into()), Action::KillAfter(S(7))]
    }

    #[test]
    fn a_known_port_starts_at_once_and_a_reported_one_on_the_report() {
        let p = plan("");
        let used = BTreeSet::new();
        assert_eq!(Attempt::new(&p, Some(29500), &used).begin(), vec![Action::Start(29500)]);
        let mut a = Attempt::new(&p, None, &used);
        assert!(a.begin().is_empty() && a.wants_ports());
        let in_use: BTreeSet<u16> = [29500].into();
        let actions = a.decide(S(1), Input::Ports(Some(in_use)));
        assert!(matches!(actions[..], [Action::Start(port)] if port != 29500), "{actions:?}");
        assert!(!a.wants_ports());
        // A second report changes nothing.
        assert!(a.decide(S(1), Input::Ports(Some(BTreeSet::new()))).is_empty());
    }

    #[test]
    fn a_port_range_that_is_full_tears_down_before_anything_started() {
        let p = plan("[rendezvous]\nport_range = [29500, 29501]\n");
        let used: BTreeSet<u16> = [29501].into();
        let mut a = Attempt::new(&p, None, &used);
        let actions = a.decide(S(1), Input::Ports(Some([29500].into())));
        assert!(
            matches!(&actions[..], [Action::Term { failing: None }, Action::Teardown(r), Action::KillAfter(_)] if r.starts_with("master node n1: ")),
            "{actions:?}"
        );
        let ended = a.ended();
        assert!(ended.no_port.is_some() && ended.port.is_none());
        assert_eq!(ended.stopping, Some((Stopping::NodeFailed, S(1))));
    }

    #[test]
    fn a_failed_node_starts_one_teardown_and_a_clean_exit_none() {
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        assert!(a.decide(S(5), Input::NodeEnded { node_rank: 0, exit: NodeExit::ExitCode(0) }).is_empty());
        let actions = a.decide(S(6), Input::NodeEnded { node_rank: 2, exit: NodeExit::ExitCode(3) });
        assert_eq!(actions, teardown("node 2 (n3) failed: exit code 3", None));
        // The others, stopped, end non-zero too: no second teardown.
        assert!(a.decide(S(7), Input::NodeEnded { node_rank: 1, exit: NodeExit::Signal(15) }).is_empty());
        let ended = a.ended();
        assert_eq!(ended.stopping, Some((Stopping::NodeFailed, S(6))));
        assert_eq!(ended.exits[2], Some(NodeExit::ExitCode(3)));
    }

    /// A time limit's warning: the ranks are told to checkpoint and given their grace; the
    /// nodes that end meanwhile, whatever their exit, are no failure; then the teardown. The
    /// attempt ends as the time limit, and a second signal changes nothing.
    #[test]
    fn a_time_limit_signals_the_ranks_then_tears_down_after_their_grace() {
        let p = plan("checkpoint_grace = \"30s\"\n");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        let actions = a.decide(S(10), Input::Checkpoint(Preemption::TimeLimit));
        assert_eq!(
            actions,
            vec![
                Action::SignalRanks,
                Action::Teardown(
                    "the time limit is near (SIGUSR1): SIGUSR1 to every rank, then up to 30s for them to checkpoint and exit"
                        .into()
                ),
                Action::TermAfter(S(30)),
            ]
        );
        assert!(a.decide(S(11), Input::Checkpoint(Preemption::Preempted)).is_empty());
        assert!(a.decide(S(12), Input::NodeEnded { node_rank: 0, exit: NodeExit::ExitCode(0) }).is_empty());
        assert!(a.decide(S(13), Input::NodeEnded { node_rank: 1, exit: NodeExit::Signal(10) }).is_empty());
        // A node silent in the grace kills nobody's checkpoint.
        let silent = Clock { heard: vec![Some(S(1)), Some(S(1)), Some(S(30))], ..Clock::default() };
        assert!(!a.decide(S(38), Input::Tick(silent)).contains(&Action::Kill));
        assert_eq!(
            a.decide(S(40), Input::TermTimer),
            vec![Action::Term { failing: None }, Action::KillAfter(S(7))]
        );
        assert_eq!(a.decide(S(47), Input::KillTimer), vec![Action::Kill]);
        let ended = a.ended();
        assert_eq!(ended.preempted, Some(Preemption::TimeLimit));
        assert_eq!(ended.stopping, Some((Stopping::Checkpoint, S(10))));
    }

    /// A preemption during a failure's teardown: the teardown goes on, and the attempt ends
    /// as preempted (no restart could follow in this allocation). Before the job started,
    /// there is nothing to checkpoint: the plain teardown.
    #[test]
    fn a_preemption_never_interrupts_a_teardown_and_before_the_start_stops_at_once() {
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        a.decide(S(1), Input::NodeEnded { node_rank: 0, exit: NodeExit::ExitCode(1) });
        assert!(a.decide(S(2), Input::Checkpoint(Preemption::Preempted)).is_empty());
        assert_eq!(a.ended().preempted, Some(Preemption::Preempted));
        let mut b = Attempt::new(&p, None, &used);
        let actions = b.decide(S(1), Input::Checkpoint(Preemption::Preempted));
        assert_eq!(actions, teardown("preempted", None));
        // Ctrl-C in the checkpoint's grace stops at once; the grace's end then adds nothing.
        let mut c = Attempt::new(&p, Some(1), &used);
        c.decide(S(1), Input::Checkpoint(Preemption::TimeLimit));
        assert_eq!(c.decide(S(2), Input::Interrupt), teardown("interrupted", None));
        assert!(c.decide(S(61), Input::TermTimer).is_empty());
    }

    #[test]
    fn a_fatal_line_names_its_node_as_the_one_keeping_its_grace() {
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        let line = "  failed (exitcode: -9) local_rank: 1 \n".to_string();
        let actions = a.decide(S(2), Input::FatalLine { node_rank: 1, line });
        assert_eq!(actions, teardown("node 1 (n2) failed: failed (exitcode: -9) local_rank: 1", Some(1)));
    }

    #[test]
    fn sigkill_follows_the_grace_period_once() {
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        let first = a.decide(S(1), Input::NodeEnded { node_rank: 0, exit: NodeExit::ExitCode(1) });
        assert_eq!(first.last(), Some(&Action::KillAfter(S(7))));
        // An interrupt during that teardown takes it over, without a second timer.
        let actions = a.decide(S(2), Input::Interrupt);
        assert_eq!(actions, vec![Action::Term { failing: None }, Action::Teardown("interrupted".into())]);
        assert_eq!(a.decide(S(8), Input::KillTimer), vec![Action::Kill]);
    }

    #[test]
    fn an_interrupt_after_the_grace_ran_out_gets_a_grace_of_its_own() {
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        a.decide(S(1), Input::NodeEnded { node_rank: 0, exit: NodeExit::ExitCode(1) });
        assert_eq!(a.decide(S(8), Input::KillTimer), vec![Action::Kill]);
        assert_eq!(a.decide(S(9), Input::Interrupt), teardown("interrupted", None));
    }

    #[test]
    fn a_second_interrupt_kills() {
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        assert_eq!(a.decide(S(1), Input::Interrupt), teardown("interrupted", None));
        assert_eq!(a.decide(S(2), Input::Interrupt), vec![Action::Kill]);
        assert_eq!(a.ended().stopping, Some((Stopping::Interrupted, S(1))));
    }

    #[test]
    fn a_silent_node_is_killed_and_lost_with_why() {
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        assert!(a.decide(S(20), tick([Some(1), Some(14), Some(0)], 0, 250)).is_empty());
        // First the others' stacks (they wait on it); the silent node is not waited for.
        let actions = a.decide(S(21), tick([Some(1), Some(15), Some(0)], 0, 250));
        assert_eq!(actions, vec![Action::Probe("node 1 (n2) is silent: no heartbeat".into())]);
        // Judged once.
        assert!(a.decide(S(22), tick([Some(1), Some(16), Some(0)], 0, 250)).is_empty());
        assert!(a.decide(S(22), Input::ProbeAnswered { node_rank: 0 }).is_empty());
        let mut want = vec![Action::Kill];
        want.extend(teardown("node 1 (n2) is silent: no heartbeat", None));
        assert_eq!(a.decide(S(22), Input::ProbeAnswered { node_rank: 2 }), want);
        // When its task ends, its exit is the silence, lost as of when it was judged silent.
        a.decide(S(23), Input::NodeEnded { node_rank: 1, exit: NodeExit::Signal(9) });
        let ended = a.ended();
        assert_eq!(ended.exits[1], Some(NodeExit::Lost("no heartbeat for 15s".into())));
        assert_eq!(ended.lost_at, [None, Some(S(21)), None]);

        // Ctrl-C while the others' stacks are taken: the silent node is killed at once too.
        let mut a = Attempt::new(&p, Some(1), &used);
        a.decide(S(21), tick([Some(1), Some(15), Some(0)], 0, 250));
        let mut want = vec![Action::Kill];
        want.extend(teardown("interrupted", None));
        assert_eq!(a.decide(S(22), Input::Interrupt), want);
    }

    #[test]
    fn nodes_lost_during_the_probe_are_lost_as_of_when_they_were_seen() {
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        a.decide(S(10), tick([Some(0); 3], 0, 250));
        let lost = || NodeExit::Lost("the ssh connection to the node was lost".into());
        let actions = a.decide(S(30), Input::NodeEnded { node_rank: 2, exit: lost() });
        assert!(matches!(&actions[..], [Action::Probe(_)]), "{actions:?}");
        a.decide(S(31), Input::NodeEnded { node_rank: 0, exit: lost() });
        a.decide(S(32), Input::NodeEnded { node_rank: 1, exit: NodeExit::Signal(15) });
        let ended = a.ended();
        // The stop is dated at the first loss; the second loss keeps its own time.
        assert_eq!(ended.stopping, Some((Stopping::NodeFailed, S(30))));
        assert_eq!(ended.lost_at, [Some(S(31)), None, Some(S(30))]);
    }

    #[test]
    fn a_node_that_ends_lost_after_the_stop_was_sent_was_not_seen_lost() {
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        a.decide(S(10), tick([Some(0); 3], 0, 250));
        // Node 1 goes silent; the probe waits, then herd kills and stops every node.
        a.decide(S(25), tick([Some(0), Some(15), Some(0)], 0, 250));
        let actions = a.decide(S(30), Input::ProbeTimedOut);
        assert!(actions.contains(&Action::Term { failing: None }), "{actions:?}");
        // Node 0's step, cancelled at the end of the teardown, ends "lost" (Slurm: 143): no
        // loss herd saw. Node 1 stays lost as of its silence.
        let lost = NodeExit::Lost("agent ended with exit code 143 before the job did".into());
        a.decide(S(40), Input::NodeEnded { node_rank: 0, exit: lost });
        a.decide(S(40), Input::NodeEnded { node_rank: 1, exit: NodeExit::Signal(9) });
        a.decide(S(40), Input::NodeEnded { node_rank: 2, exit: NodeExit::Signal(15) });
        assert_eq!(a.ended().lost_at, [None, Some(S(25)), None]);
    }

    #[test]
    fn a_login_that_never_reaches_the_agent_has_its_own_limit() {
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        // Logging in for 100 s: no heartbeat is missed yet; after 2 minutes the login is stuck.
        assert!(a.decide(S(100), tick([Some(0), None, Some(0)], 0, 250)).is_empty());
        let actions = a.decide(S(120), tick([Some(0), None, Some(0)], 0, 250));
        assert!(matches!(&actions[..], [Action::Probe(_)]), "{actions:?}");
        let actions = a.decide(S(125), Input::ProbeTimedOut);
        let Action::Teardown(reason) = &actions[2] else { panic!("{actions:?}") };
        assert!(reason.starts_with("node 1 (n2) is silent: its login shell"), "{reason}");
        a.decide(S(121), Input::NodeEnded { node_rank: 1, exit: NodeExit::Signal(9) });
        let Some(NodeExit::Lost(why)) = &a.ended().exits[1] else { panic!() };
        assert!(why.contains("ssh.login_timeout (2m)"), "{why}");
    }

    #[test]
    fn a_failure_waits_for_the_stacks_of_the_nodes_still_running_and_no_longer() {
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        a.decide(S(10), tick([Some(0); 3], 0, 250));
        // Node 2 failed: nodes 0 and 1 still run, their ranks likely in a collective.
        let actions = a.decide(S(11), Input::NodeEnded { node_rank: 2, exit: NodeExit::ExitCode(1) });
        assert_eq!(actions, vec![Action::Probe("node 2 (n3) failed: exit code 1".into())]);
        // Another failure meanwhile starts nothing more; node 1 ended, node 0's answer ends it.
        assert!(a.decide(S(12), Input::NodeEnded { node_rank: 1, exit: NodeExit::ExitCode(1) }).is_empty());
        let actions = a.decide(S(12), Input::ProbeAnswered { node_rank: 0 });
        assert_eq!(actions, teardown("node 2 (n3) failed: exit code 1", None));
        // Stopped as of the failure: node 1's end follows it, for classification and blame.
        assert_eq!(a.ended().stopping, Some((Stopping::NodeFailed, S(11))));

        // No answer: the wait's end stops them, a fatal line's node keeping its grace.
        let mut a = Attempt::new(&p, Some(1), &used);
        a.decide(S(10), tick([Some(0); 3], 0, 250));
        let line = "failed (exitcode: -9)".to_string();
        let actions = a.decide(S(11), Input::FatalLine { node_rank: 1, line });
        assert!(matches!(&actions[..], [Action::Probe(_)]), "{actions:?}");
        assert_eq!(
            a.decide(S(16), Input::ProbeTimedOut),
            teardown("node 1 (n2) failed: failed (exitcode: -9)", Some(1))
        );
    }

    #[test]
    fn a_failure_with_nothing_else_running_or_an_interrupt_stops_at_once() {
        let p = plan("");
        let used = BTreeSet::new();
        // The others ended (or never spoke): nobody to ask.
        let mut a = Attempt::new(&p, Some(1), &used);
        a.decide(S(10), tick([Some(0), None, Some(0)], 0, 250));
        a.decide(S(11), Input::NodeEnded { node_rank: 0, exit: NodeExit::ExitCode(0) });
        let actions = a.decide(S(12), Input::NodeEnded { node_rank: 2, exit: NodeExit::ExitCode(1) });
        assert_eq!(actions, teardown("node 2 (n3) failed: exit code 1", None));
        // Ctrl-C while the stacks are taken: the interrupt, at once.
        let mut a = Attempt::new(&p, Some(1), &used);
        a.decide(S(10), tick([Some(0); 3], 0, 250));
        a.decide(S(11), Input::NodeEnded { node_rank: 2, exit: NodeExit::ExitCode(1) });
        assert_eq!(a.decide(S(12), Input::Interrupt), teardown("interrupted", None));
        assert!(a.decide(S(13), Input::ProbeTimedOut).is_empty());
        assert_eq!(a.ended().stopping, Some((Stopping::Interrupted, S(12))));
    }

    #[test]
    fn a_failure_during_a_hangs_probe_takes_it_over() {
        let p = plan("hang_timeout = \"1m\"\n");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        assert_eq!(
            a.decide(S(61), tick([Some(0); 3], 61, 250)),
            vec![Action::Probe("no progress for 1m 1s".into())]
        );
        a.decide(S(62), Input::ProbeAnswered { node_rank: 0 });
        assert!(a.decide(S(62), Input::NodeEnded { node_rank: 1, exit: NodeExit::Signal(6) }).is_empty());
        let actions = a.decide(S(63), Input::ProbeAnswered { node_rank: 2 });
        assert_eq!(actions, teardown("node 1 (n2) failed: signal 6 (SIGABRT)", None));
        assert_eq!(a.ended().stopping, Some((Stopping::NodeFailed, S(62))), "as of the failure");
    }

    #[test]
    fn a_stall_of_herds_own_forgives_every_silence() {
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        assert_eq!(
            a.decide(S(60), tick([Some(40), Some(40), Some(40)], 0, 30_000)),
            vec![Action::Forgive(S(30))]
        );
    }

    fn loaded(heard: [Option<u64>; 3], load1: f64) -> Input {
        match tick(heard, 0, 250) {
            Input::Tick(clock) => Input::Tick(Clock { load: Some(HostLoad { load1, cores: 2 }), ..clock }),
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_silence_most_nodes_share_is_what_they_are_all_late_by() {
        let s = |v: &[u64]| shared_silence(&v.iter().map(|x| S(*x)).collect::<Vec<_>>());
        // One or two nodes cannot share a lateness with a majority of others.
        assert_eq!(s(&[]), S(0));
        assert_eq!(s(&[40]), S(0));
        assert_eq!(s(&[40, 1]), S(1));
        // Of three, two; of four, three; of five, three.
        assert_eq!(s(&[1, 20, 14]), S(14));
        assert_eq!(s(&[30, 1, 12, 9]), S(9));
        assert_eq!(s(&[1, 2, 30, 20, 10]), S(10));
        let p = plan("");
        // A healthy fleet (heartbeats every 3 s) waits no longer; a late one by its lateness,
        // never past three more timeouts; an overloaded host the longest.
        assert_eq!(extra_wait(&p, &[S(1), S(2), S(15)], None), S(0));
        assert_eq!(extra_wait(&p, &[S(10), S(12), S(15)], None), S(9));
        assert_eq!(extra_wait(&p, &[S(100), S(100), S(100)], None), S(45));
        let busy = HostLoad { load1: 7.9, cores: 2 };
        assert_eq!(extra_wait(&p, &[S(1), S(2), S(15)], Some(busy)), S(0));
        let overloaded = HostLoad { load1: 8.0, cores: 2 };
        // One silent node is judged as on a quiet host; two late ones wait the longest, and
        // so does one late node while another is past half the timeout (lateness building);
        // a missed heartbeat elsewhere (6 s, every 3 s) is not that: only what most nodes share
        // counts then, as on a host that is not overloaded.
        assert_eq!(extra_wait(&p, &[S(1), S(2), S(15)], Some(overloaded)), S(0));
        assert_eq!(extra_wait(&p, &[S(1), S(16), S(15)], Some(overloaded)), S(45));
        assert_eq!(extra_wait(&p, &[S(1), S(8), S(15)], Some(overloaded)), S(45));
        assert_eq!(extra_wait(&p, &[S(1), S(6), S(15)], Some(overloaded)), S(3));
        assert_eq!(extra_wait(&p, &[S(1), S(8), S(15)], Some(busy)), S(5));
    }

    #[test]
    fn nodes_late_at_once_are_warned_of_then_waited_for_not_judged_one_by_one() {
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        // Every node late, node 1 past the timeout: most are 14 s late, so the wait is 26 s,
        // and herd says so before it judges anyone.
        let actions = a.decide(S(30), tick([Some(14), Some(16), Some(14)], 0, 250));
        let [Action::LateHeartbeats(warning)] = &actions[..] else { panic!("{actions:?}") };
        for part in [
            "1 of 3 past restart.heartbeat_timeout",
            "most silent for 14s",
            "the latest for 16s",
            "no one node's fault",
            "before 26s",
            "raise restart.heartbeat_timeout (15s) to 35s",
        ] {
            assert!(warning.contains(part), "{part:?} not in {warning}");
        }
        // Said once; node 1 heard again, the others too.
        assert!(a.decide(S(35), tick([Some(20), Some(21), Some(19)], 0, 250)).is_empty());
        assert!(a.decide(S(36), tick([Some(1), Some(2), Some(1)], 0, 250)).is_empty());
        // The fleet fine again, one node silent on its own: judged at the timeout.
        let actions = a.decide(S(50), tick([Some(1), Some(15), Some(2)], 0, 250));
        assert_eq!(actions, vec![Action::Probe("node 1 (n2) is silent: no heartbeat".into())]);
    }

    /// The host overloaded (load 353 on 2 cores): herd warns that it waits the longest, and
    /// keeps to it while the load lasts, though the other nodes' heartbeats are read and one
    /// node's alone looks late (it was judged silent 14 s after the warning, and quarantined).
    /// Once the load is gone, a node silent on its own is judged at the timeout again.
    #[test]
    fn an_overloaded_hosts_longest_wait_holds_while_the_load_lasts() {
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        let actions = a.decide(S(30), loaded([Some(16), Some(9), Some(2)], 353.0));
        let [Action::LateHeartbeats(warning)] = &actions[..] else { panic!("{actions:?}") };
        assert!(warning.contains("before 1m"), "{warning}");
        assert!(a.decide(S(44), loaded([Some(30), Some(1), Some(1)], 353.0)).is_empty());
        assert!(a.decide(S(70), loaded([Some(56), Some(1), Some(2)], 300.0)).is_empty());
        let actions = a.decide(S(75), loaded([Some(60), Some(1), Some(2)], 300.0));
        assert!(
            actions.iter().any(|x| matches!(x, Action::Probe(r) if r.contains("node 0 (n1) is silent"))),
            "{actions:?}"
        );
        // Judged after the warning: the fleet's lateness, which blames no node.
        assert_eq!(a.ended().late_fleet, [0].into());
        let mut b = Attempt::new(&p, Some(1), &used);
        b.decide(S(30), loaded([Some(16), Some(9), Some(2)], 353.0));
        let actions = b.decide(S(44), loaded([Some(16), Some(1), Some(1)], 1.0));
        assert!(
            actions.iter().any(|x| matches!(x, Action::Probe(r) if r.contains("node 0 (n1) is silent"))),
            "{actions:?}"
        );
        let mut c = Attempt::new(&p, Some(1), &used);
        c.decide(S(30), tick([Some(16), Some(1), Some(2)], 0, 250));
        assert!(c.ended().late_fleet.is_empty(), "a silence judged with no warning is the node's");
    }

    #[test]
    fn a_connection_lost_while_this_host_is_strained_blames_no_node() {
        let p = plan("");
        let used = BTreeSet::new();
        let lost = || NodeExit::Lost("the ssh connection to the node was lost".into());
        let mut a = Attempt::new(&p, Some(1), &used);
        a.decide(S(30), loaded([Some(3), Some(2), Some(2)], 896.0));
        a.decide(S(36), Input::NodeEnded { node_rank: 1, exit: lost() });
        assert_eq!(a.ended().late_fleet, [1].into());
        // herd alone not scheduled for a while is no strain of the SSH masters': the loss is
        // the node's, and so it is on a host at ease, or long after the strain.
        let mut b = Attempt::new(&p, Some(1), &used);
        b.decide(S(30), tick([Some(1), Some(1), Some(1)], 0, 3_000));
        b.decide(S(31), Input::NodeEnded { node_rank: 2, exit: lost() });
        assert!(b.ended().late_fleet.is_empty());
        let mut c = Attempt::new(&p, Some(1), &used);
        c.decide(S(30), loaded([Some(1), Some(1), Some(1)], 1.0));
        c.decide(S(31), Input::NodeEnded { node_rank: 1, exit: lost() });
        assert!(c.ended().late_fleet.is_empty());
        let mut d = Attempt::new(&p, Some(1), &used);
        d.decide(S(30), loaded([Some(1), Some(1), Some(1)], 896.0));
        d.decide(S(60), loaded([Some(1), Some(1), Some(1)], 1.0));
        d.decide(S(61), Input::NodeEnded { node_rank: 1, exit: lost() });
        assert!(d.ended().late_fleet.is_empty());
    }

    #[test]
    fn a_fleet_silent_past_the_longest_wait_is_judged_saying_it_waited_longer() {
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        let actions = a.decide(S(40), tick([Some(20), Some(20), Some(20)], 0, 250));
        assert!(matches!(&actions[..], [Action::LateHeartbeats(_)]), "{actions:?}");
        assert!(a.decide(S(79), tick([Some(59), Some(59), Some(59)], 0, 250)).is_empty());
        let actions = a.decide(S(80), tick([Some(60), Some(60), Some(60)], 0, 250));
        assert!(actions.contains(&Action::Kill), "{actions:?}");
        a.decide(S(81), Input::NodeEnded { node_rank: 0, exit: NodeExit::Signal(9) });
        let Some(NodeExit::Lost(why)) = &a.ended().exits[0] else { panic!() };
        assert!(
            why.starts_with("no heartbeat for 1m (restart.heartbeat_timeout is 15s, waited longer"),
            "{why}"
        );
    }

    #[test]
    fn on_an_overloaded_host_two_late_nodes_are_waited_for_and_one_silent_node_is_not() {
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        let actions = a.decide(S(20), loaded([Some(1), Some(15), Some(16)], 500.0));
        let [Action::LateHeartbeats(warning)] = &actions[..] else { panic!("{actions:?}") };
        assert!(warning.contains("this host's load is 500 on 2 cores"), "{warning}");
        assert!(warning.contains("2 of 3 past restart.heartbeat_timeout, 2 past half of it"), "{warning}");
        assert!(warning.contains("before 1m without a heartbeat"), "{warning}");
        assert!(a.decide(S(60), loaded([Some(1), Some(55), Some(56)], 500.0)).is_empty());
        assert_eq!(a.kill_wait(), KILL_DEADLINE + S(45), "the kill waited for as long");
        // Never past three more timeouts: then they are judged.
        let actions = a.decide(S(66), loaded([Some(1), Some(61), Some(62)], 500.0));
        assert!(matches!(&actions[..], [Action::Probe(_)]), "{actions:?}");
        // One silent node on a loaded host (a cut link, a dead host) is not waited for.
        let mut a = Attempt::new(&p, Some(1), &used);
        let actions = a.decide(S(20), loaded([Some(1), Some(15), Some(0)], 500.0));
        assert!(matches!(&actions[..], [Action::Probe(_)]), "{actions:?}");
        // One node at the timeout first, another past half of it: lateness building up, so
        // the first is not judged alone (a healthy node was, at 252 nodes on a load of 542).
        let mut a = Attempt::new(&p, Some(1), &used);
        let actions = a.decide(S(20), loaded([Some(1), Some(15), Some(8)], 500.0));
        let [Action::LateHeartbeats(warning)] = &actions[..] else { panic!("{actions:?}") };
        assert!(warning.contains("1 of 3 past restart.heartbeat_timeout, 2 past half of it"), "{warning}");
        assert!(warning.contains("before 1m without a heartbeat"), "{warning}");
    }

    #[test]
    fn a_hang_asks_for_evidence_then_tears_down_once_all_running_nodes_answered() {
        let p = plan("hang_timeout = \"1m\"\n");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        assert!(a.decide(S(59), tick([Some(0); 3], 59, 250)).is_empty());
        assert_eq!(
            a.decide(S(61), tick([Some(0); 3], 61, 250)),
            vec![Action::Probe("no progress for 1m 1s".into())]
        );
        // Asked once.
        assert!(a.decide(S(62), tick([Some(0); 3], 62, 250)).is_empty());
        a.decide(S(62), Input::NodeEnded { node_rank: 2, exit: NodeExit::ExitCode(0) });
        assert!(a.decide(S(62), Input::ProbeAnswered { node_rank: 0 }).is_empty());
        let actions = a.decide(S(63), Input::ProbeAnswered { node_rank: 1 });
        assert_eq!(actions, teardown("no progress for 1m 1s", None));
        // The wait's end comes after: nothing more.
        assert!(a.decide(S(64), Input::ProbeTimedOut).is_empty());
        assert_eq!(a.ended().stopping, Some((Stopping::Hang, S(63))));
    }

    #[test]
    fn a_hang_whose_nodes_do_not_all_answer_tears_down_when_the_wait_ends() {
        let p = plan("hang_timeout = \"1m\"\n");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        a.decide(S(61), tick([Some(0); 3], 61, 250));
        a.decide(S(62), Input::ProbeAnswered { node_rank: 0 });
        assert_eq!(a.decide(S(64), Input::ProbeTimedOut), teardown("no progress for 1m 1s", None));
    }

    /// With the defaults, every rank still for `restart.stall_timeout` (90 s) is a hang,
    /// however recent the job's last line; "off" turns it off.
    #[test]
    fn every_rank_still_for_the_stall_timeout_is_a_hang_by_default() {
        let still = |secs| match tick([Some(0); 3], 1, 250) {
            Input::Tick(clock) => Input::Tick(Clock { still: S(secs), ..clock }),
            _ => unreachable!(),
        };
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        assert!(a.decide(S(300), still(89)).is_empty());
        let reason = "every rank still for 1m 30s (no CPU, no byte read or written: restart.stall_timeout)";
        assert_eq!(a.decide(S(301), still(90)), vec![Action::Probe(reason.into())]);
        a.decide(S(302), Input::ProbeTimedOut);
        assert_eq!(a.ended().stopping, Some((Stopping::Hang, S(302))));
        let off = plan("stall_timeout = \"off\"\n");
        let mut a = Attempt::new(&off, Some(1), &used);
        assert!(a.decide(S(3600), still(3600)).is_empty());
    }

    #[test]
    fn without_a_hang_timeout_silence_of_output_is_no_hang() {
        let p = plan("");
        let used = BTreeSet::new();
        let mut a = Attempt::new(&p, Some(1), &used);
        assert!(a.decide(S(3600), tick([Some(0); 3], 3600, 250)).is_empty());
    }
}
