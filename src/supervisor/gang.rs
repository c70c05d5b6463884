//! One attempt over every node at once: start each node's task, feed what they report to the
//! attempt's state machine (`attempt`), and perform what it decides. Every node's agent logs
//! in at once and sweeps; the master's also reports its ports in use, unless the port is
//! known (fixed, or tested by the preflight). Only once the port is chosen does any node get
//! its env, and start.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::attempt::{self, Action, Attempt, Clock, Ended, Input, Stopping};
use super::node::{self, sleep_until, Liveness, NodeCommand, NodeReport, NodeResult, NodeRun, Stop};
use super::preflight::Preflighted;
use super::straggler::{self, StragglerWatch};
use super::sweep::Sweep;
use super::types::{Interrupts, RunError, Signal};
use crate::classify;
use crate::events::{Event, EventSender, Preemption};
use crate::fleet::{Fleet, OnNodes};
use crate::outcome::{NodeExit, NodeOutcome, ProcessState, Trigger, Verdict};
use crate::plan::{AttemptValues, LaunchPlan, NodePlan};
use crate::remote::agent::AgentInvocation;
use crate::remote::protocol::AgentMessage;
use crate::stacks::{self, RankStack};
use crate::transport::{Connection, Started};

/// How often the supervisor checks for hangs and silent nodes.
const TICK: Duration = Duration::from_millis(250);

/// What every attempt of a run shares.
pub(super) struct AttemptContext<'a> {
    pub plan: &'a LaunchPlan,
    pub run_id: &'a str,
    pub interfaces: &'a [String],
    pub events: &'a EventSender,
}

#[derive(Debug)]
pub(super) enum AttemptOutcome {
    Succeeded,
    /// The verdict, and what each node left, which may blame some (see `blame`).
    Failed(Verdict, Vec<NodeOutcome>),
    Interrupted,
    /// Stopped for a time limit or a preemption, the ranks told to checkpoint.
    Preempted(Preemption),
    /// No master port could be chosen: nothing started.
    NoPort(RunError),
}

/// Run one attempt to its end. Returns how it went, the port it used, and when it first
/// made progress.
pub(super) async fn run_attempt(
    ctx: &AttemptContext<'_>,
    attempt: u32,
    preflighted: &Preflighted,
    early: Vec<Option<Started>>,
    used_ports: &BTreeSet<u16>,
    fleet: &Fleet,
    interrupts: &mut Interrupts,
) -> AttemptEnd {
    let _ = ctx.events.send(Event::AttemptStarting { attempt }).await;
    let known_port = attempt::known_port(ctx.plan, preflighted.port);
    let mut machine = Attempt::new(ctx.plan, known_port, used_ports);
    let mut gang = Gang::start(ctx, attempt, preflighted, known_port.is_some(), early, fleet);
    for action in machine.begin() {
        gang.perform(action).await;
    }
    // Silence counts from here: a slow start (the event queue full) is no stall of herd's.
    gang.timers.restart_tick();
    while let Some(input) = gang.next_input(&machine, interrupts).await {
        for action in machine.decide(gang.liveness.elapsed(), input) {
            gang.kill_wait = machine.kill_wait();
            gang.perform(action).await;
        }
    }
    // Progress the last check missed (a short attempt) is told before the attempt's end.
    gang.tell_progress().await;
    let first_progress = gang.liveness.first_progress();
    let stragglers = gang.watch.named().to_vec();
    let still_slow = gang.watch.still_slow();
    let (outcome, port) = gang.outcome(machine.ended()).await;
    AttemptEnd { outcome, port, first_progress, stragglers, still_slow }
}

/// How an attempt ended, and what it showed on the way.
pub(super) struct AttemptEnd {
    pub outcome: AttemptOutcome,
    /// The master port it used.
    pub port: Option<u16>,
    pub first_progress: Option<Duration>,
    /// The ranks named stragglers, in the order they were.
    pub stragglers: Vec<straggler::Straggler>,
    /// Those of them still slow in the last round before the attempt ended: a rank slow for
    /// a while long before (a checkpoint written) is not.
    pub still_slow: Vec<straggler::Straggler>,
}

/// This host's 1-minute load and its cores, from /proc/loadavg (Linux); `None` elsewhere.
fn host_load() -> Option<attempt::HostLoad> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let load1 = text.split_whitespace().next()?.parse().ok()?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Some(attempt::HostLoad { load1, cores })
}

/// What a node's job agent sweeps before it starts: nothing when the preflight swept it
/// already; on a node new to the run (the first attempt, a promoted spare) every leftover of
/// the config's other runs; else what this run's earlier attempts left.
pub(super) fn presweep<'a>(run_id: &'a str, attempt: u32, swept: bool, fresh: bool) -> Option<Sweep<'a>> {
    match attempt {
        _ if swept => None,
        _ if attempt == 0 || fresh => Some(Sweep::Config { spare_run: Some(run_id) }),
        _ => Some(Sweep::Restart { run_id, attempt }),
    }
}

/// The agent of `node`'s job in attempt `attempt`, as the attempt starts it after
/// `preflighted`. `port_known`: the master need not report its ports.
fn attempt_invocation(
    plan: &LaunchPlan,
    run_id: &str,
    node: &NodePlan,
    attempt: u32,
    preflighted: &Preflighted,
    port_known: bool,
) -> AgentInvocation {
    let fresh = preflighted.fresh.contains(&node.node_rank);
    let sweep = presweep(run_id, attempt, preflighted.swept, fresh);
    job_invocation(plan, run_id, node, attempt, port_known, sweep)
}

/// How long before a restart's backoff ends its agents are started (`start_ahead`): the
/// whole backoff when it is shorter. Time enough for a slow login shell (a conda init on a
/// shared home); not so long that the master's report of its ports goes stale, nor that an
/// agent waits for its env into a shell's `TMOUT` or, should herd stall, its fence.
pub(super) const AHEAD_LEAD: Duration = Duration::from_secs(30);

/// The oldest agent started ahead that an attempt uses (see `kept`): one that waited longer
/// (a node waited for after the backoff) is dropped, and its node starts a new one.
const AHEAD_MAX_AGE: Duration = Duration::from_secs(60);

/// How long the attempt waits for starts ahead still under way (see `kept`): after a short
/// backoff (a restart after training waits a jitter under a second), 250 nodes' sessions are
/// still opening, and each opens in moments. A start still under way after it hangs (its
/// node's link is down, not yet found so): it is given up, and the node starts its own.
const AHEAD_SETTLE: Duration = Duration::from_secs(5);

/// The agents of restart `attempt`'s job, started now on the nodes of `fleet` as it is,
/// before its backoff ends: each node's login, its sweep and the master's report of its
/// ports overlap the wait, and the attempt finds them done. An agent starts nothing before
/// its env. Each node's is as `run_attempt` starts it after a restart that changed nothing
/// (no preflight, the port reported unless fixed); one started otherwise is not used (see
/// `Started::take_or_start`). Through Slurm none is (see `Connection::starts_ahead`). The
/// starts run at the call; see `kept` for what the attempt may use.
pub(super) fn start_ahead(plan: &LaunchPlan, run_id: &str, attempt: u32, fleet: &Fleet) -> Ahead {
    let port_known = attempt::known_port(plan, None).is_some();
    let restarted = Preflighted::default();
    fleet.spawn_each(|rank, conn| {
        if !conn.starts_ahead() {
            return None;
        }
        let inv = attempt_invocation(plan, run_id, &plan.nodes[rank], attempt, &restarted, port_known);
        let conn = conn.clone();
        let host = plan.nodes[rank].host.clone();
        Some(async move {
            // Read first: a master connected again during the start makes the agent one to
            // drop, never one to use.
            let on = StartedOn { conn: Arc::downgrade(&conn), generation: conn.generation(), host };
            let started = Started::start_as_is(&conn, inv).await.ok()?;
            Some((on, started))
        })
    })
}

/// The master connection an agent ahead was started on: the node's connection, and which of
/// its masters (`Connection::generation`).
pub(super) struct StartedOn {
    conn: Weak<Connection>,
    generation: u32,
    /// The node's host then: a restart that does not use the agent may have replaced it.
    host: String,
}

/// Agents started ahead (`start_ahead`), each with the connection it was started on.
pub(super) type Ahead = OnNodes<Option<(StartedOn, Started)>>;

/// By node rank, the agents of `ahead` the attempt may use: started (within `AHEAD_SETTLE`
/// from now, for a start still under way), on the master `fleet` holds now, at most
/// `AHEAD_MAX_AGE` ago. A node connected again since (its master died, so that the agent
/// went with it), one whose start hangs, and one whose agent waited too long start their
/// own; the others end, having started nothing (`end_unused`).
pub(super) async fn kept(ahead: Ahead, fleet: &Fleet, events: &EventSender) -> Vec<Option<Started>> {
    let mut kept: Vec<Option<Started>> = fleet.links().iter().map(|_| None).collect();
    let mut unused = Vec::new();
    for (rank, agent) in ahead.finished_within(AHEAD_SETTLE).await {
        let Some((on, started)) = agent else { continue };
        let same = fleet.conn(rank).is_some_and(|c| {
            std::ptr::eq(Arc::as_ptr(c), on.conn.as_ptr()) && c.generation() == on.generation
        });
        if same && started.at.elapsed() <= AHEAD_MAX_AGE {
            kept[rank] = Some(started);
        } else {
            // On a master replaced since, the end may never reach the agent (the old master
            // hangs): only what it said already is read.
            unused.push((rank, on.host, started, if same { UNUSED_HEARD } else { Duration::ZERO }));
        }
    }
    let used = kept.iter().flatten().count();
    tracing::debug!("{used} of {} nodes' agents started ahead are the attempt's", kept.len());
    end_unused(unused, events).await;
    kept
}

/// Agents started ahead that the attempt will not use, ended (`end_unused`); a start still
/// under way is given up.
pub(super) async fn drop_ahead(ahead: Option<Ahead>, events: &EventSender) {
    let Some(ahead) = ahead else { return };
    let unused = ahead.finished_within(Duration::ZERO).await.into_iter();
    let unused = unused.filter_map(|(rank, a)| a.map(|(on, started)| (rank, on.host, started, UNUSED_HEARD)));
    end_unused(unused.collect(), events).await;
}

/// How long the agents not used are listened to as they end, all of them together: what
/// they swept was said long before (they logged in during the backoff), and each ends a round
/// trip after its stdin closes. One whose node cannot be reached (the reason it is not used)
/// is not waited for longer.
const UNUSED_HEARD: Duration = Duration::from_secs(1);

/// Agents started ahead that will not be used, ended: each ends as its stdin closes, having
/// started nothing, before the restart drops a link it uses. Its sweep ran all the same: what
/// it said it stopped within its time to be heard (from now, `UNUSED_HEARD` at most) is told,
/// as any sweep's (`swept_events`), so that the node's record has it.
async fn end_unused(unused: Vec<(usize, String, Started, Duration)>, events: &EventSender) {
    let now = Instant::now();
    // Every stdin closed first: the agents end at once, and are heard one after another.
    let ending: Vec<_> = unused
        .into_iter()
        .map(|(rank, host, started, heard)| (rank, host, started.end_unused(), now + heard))
        .collect();
    for (rank, host, ending, until) in ending {
        for message in ending.said(until).await {
            if let AgentMessage::Swept(text) = message {
                for event in super::sweep::swept_events(rank, &host, &text) {
                    let _ = events.send(event).await;
                }
            }
        }
    }
}

/// The agent of one node's job in one attempt. `port_known`: the master need not report its
/// ports; `presweep`: see `presweep`.
pub(super) fn job_invocation(
    plan: &LaunchPlan,
    run_id: &str,
    node: &NodePlan,
    attempt: u32,
    port_known: bool,
    presweep: Option<Sweep<'_>>,
) -> AgentInvocation {
    // What the agent needs before the port is known: the marker and the container's name.
    let unported = AttemptValues { run_id, attempt, master_port: 0, interfaces: &[] };
    AgentInvocation {
        cleanup: plan.container_cleanup(node, &unported),
        presweep: presweep.map(|sweep| plan.with_engine_env(node, sweep.body(plan))),
        report_ports: !port_known && node.node_rank == plan.master.node_rank,
        ..plan.agent(plan.marker(node, &unported), plan.job_snippet(node))
    }
}

/// The attempt's nodes, their channels and timers: everything `run_attempt` performs on.
struct Gang<'a> {
    ctx: &'a AttemptContext<'a>,
    attempt: u32,
    liveness: Arc<Liveness>,
    /// The nodes' tasks: aborted if the gang is dropped.
    tasks: OnNodes<()>,
    results: Vec<Option<NodeResult>>,
    /// Each node's command channel (by node rank).
    commands: Vec<mpsc::UnboundedSender<NodeCommand>>,
    /// Every node's reports; closed once every node's task has ended.
    reports: mpsc::UnboundedReceiver<(usize, NodeReport)>,
    /// The strongest stop asked of the nodes.
    stopped: Stop,
    processes: Vec<Vec<ProcessState>>,
    stacks: Vec<Vec<RankStack>>,
    timers: Timers,
    /// When the agents were asked for their stacks (the attempt's age), if they were.
    probed_at: Option<Duration>,
    interrupts_open: bool,
    /// How long a node may take to end after SIGKILL (`Attempt::kill_wait`).
    kill_wait: Duration,
    /// The ranks' CPU samples, and the stragglers named.
    watch: StragglerWatch,
    /// Whether the attempt's first progress has been told (`Event::ProgressSeen`).
    progress_told: bool,
}

/// When the gang acts with no report or signal to act on: the attempt machine's timers, the
/// tick, and the next round of samples.
struct Timers {
    kill_at: Option<Instant>,
    /// When the ranks' time to checkpoint is over (`Action::TermAfter`).
    term_at: Option<Instant>,
    probe_at: Option<Instant>,
    /// When the next round of samples is asked for; `None` until the job has its env.
    sample_at: Option<Instant>,
    tick: tokio::time::Interval,
    last_tick: Instant,
}

impl Timers {
    fn new() -> Timers {
        let mut tick = tokio::time::interval(TICK);
        // After a stall, one late tick, not a burst of them.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Timers {
            kill_at: None,
            term_at: None,
            probe_at: None,
            sample_at: None,
            tick,
            last_tick: Instant::now(),
        }
    }

    /// The next tick a whole TICK from now, and the gap since the last one counted from now.
    fn restart_tick(&mut self) {
        self.tick.reset();
        self.last_tick = Instant::now();
    }

    /// How long since the last tick, which is now.
    fn gap(&mut self) -> Duration {
        let gap = self.last_tick.elapsed();
        self.last_tick = Instant::now();
        gap
    }
}

impl<'a> Gang<'a> {
    fn start(
        ctx: &'a AttemptContext<'a>,
        attempt: u32,
        preflighted: &Preflighted,
        port_known: bool,
        mut early: Vec<Option<Started>>,
        fleet: &Fleet,
    ) -> Gang<'a> {
        let plan = ctx.plan;
        let liveness = Arc::new(Liveness::new(plan.nnodes()));
        let (reports_tx, reports) = mpsc::unbounded_channel();
        assert!(fleet.connected().count() == plan.nnodes(), "every node of a run is connected");
        let mut commands = Vec::new();
        let tasks = fleet.spawn_each(|rank, conn| {
            let node = &plan.nodes[rank];
            let (commands_tx, commands_rx) = mpsc::unbounded_channel();
            commands.push(commands_tx);
            let mut invocation = attempt_invocation(plan, ctx.run_id, node, attempt, preflighted, port_known);
            let agent = early.get_mut(rank).and_then(Option::take);
            // The same as the agent started ahead: its copy, so that the node holds one.
            if let Some(a) = agent.as_ref().filter(|a| a.invocation == invocation) {
                invocation = a.invocation.clone();
            }
            let run = NodeRun {
                node_rank: rank,
                host: node.host.clone(),
                attempt,
                invocation,
                early: agent,
                commands: commands_rx,
                reports: reports_tx.clone(),
                liveness: liveness.clone(),
                progress: node::Progress::of(plan),
                fatal_pattern: plan.patterns.crash.clone(),
            };
            Some(node::run(conn.clone(), run, ctx.events.clone()))
        });
        Gang {
            ctx,
            attempt,
            liveness,
            tasks,
            results: plan.nodes.iter().map(|_| None).collect(),
            commands,
            reports,
            stopped: Stop::Run,
            processes: plan.nodes.iter().map(|_| Vec::new()).collect(),
            stacks: plan.nodes.iter().map(|_| Vec::new()).collect(),
            timers: Timers::new(),
            probed_at: None,
            interrupts_open: true,
            kill_wait: attempt::KILL_DEADLINE,
            watch: StragglerWatch::new(),
            progress_told: false,
        }
    }

    /// What happens next; `None` once every node's task has ended.
    async fn next_input(&mut self, machine: &Attempt<'_>, interrupts: &mut Interrupts) -> Option<Input> {
        loop {
            let Timers { kill_at, probe_at, term_at, .. } = self.timers;
            tokio::select! {
                report = self.reports.recv() => {
                    let Some((node_rank, report)) = report else {
                        // Every node has ended: a task that panicked instead panics here.
                        while self.tasks.next().await.is_some() {}
                        return None;
                    };
                    if let Some(input) = self.reported(machine, node_rank, report) {
                        return Some(input);
                    }
                }
                got = interrupts.recv(), if self.interrupts_open => match got {
                    Some(Signal::Interrupt) => return Some(Input::Interrupt),
                    Some(Signal::Checkpoint(why)) => return Some(Input::Checkpoint(why)),
                    None => self.interrupts_open = false,
                },
                () = sleep_until(probe_at) => {
                    self.timers.probe_at = None;
                    return Some(Input::ProbeTimedOut);
                }
                () = sleep_until(term_at) => {
                    self.timers.term_at = None;
                    return Some(Input::TermTimer);
                }
                () = sleep_until(kill_at) => {
                    self.timers.kill_at = None;
                    return Some(Input::KillTimer);
                }
                _ = self.timers.tick.tick() => {
                    self.sample_if_due().await;
                    self.tell_progress().await;
                    return Some(Input::Tick(self.clock()));
                }
            }
        }
    }

    /// What a node's report means to the attempt, if anything yet.
    fn reported(&mut self, machine: &Attempt<'_>, node_rank: usize, report: NodeReport) -> Option<Input> {
        match report {
            // Of no use once the port is chosen, or the attempt is stopping.
            NodeReport::Ports(in_use) => machine.wants_ports().then_some(Input::Ports(in_use)),
            NodeReport::Fatal(line) => Some(Input::FatalLine { node_rank, line }),
            NodeReport::Processes(seen) => {
                self.processes[node_rank] = seen;
                None
            }
            NodeReport::Stacks(stacks) => {
                self.stacks[node_rank] = stacks;
                Some(Input::ProbeAnswered { node_rank })
            }
            NodeReport::Sample(sample) => {
                self.watch.sample(node_rank, &sample);
                None
            }
            NodeReport::Ended(result) => {
                let exit = result.exit.clone();
                self.results[node_rank] = Some(result);
                Some(Input::NodeEnded { node_rank, exit })
            }
        }
    }

    /// Every SAMPLE_EVERY while the job runs: the stragglers of the round that ends, then a
    /// new round asked of every node (a node whose job has not started ignores it).
    async fn sample_if_due(&mut self) {
        match self.timers.sample_at {
            Some(at) if self.stopped == Stop::Run && Instant::now() >= at => {}
            _ => return,
        }
        let at = self.liveness.elapsed().as_secs_f64();
        for s in self.watch.round(at) {
            let event = Event::Straggler {
                attempt: self.attempt,
                rank: s.rank,
                node_rank: s.node_rank,
                host: self.ctx.plan.nodes[s.node_rank].host.clone(),
                score: s.score,
                since_secs: s.since_secs,
                alone: s.alone,
            };
            let _ = self.ctx.events.send(event).await;
        }
        self.tell_all(|_| NodeCommand::Sample);
        self.timers.sample_at = Some(Instant::now() + straggler::SAMPLE_EVERY);
    }

    /// The attempt's first progress, once: at the first check that sees it, and before any
    /// teardown, so that the record has it before the failure that ends the attempt.
    async fn tell_progress(&mut self) {
        if self.progress_told {
            return;
        }
        let Some(after) = self.liveness.first_progress() else { return };
        self.progress_told = true;
        let millis = after.as_millis() as u64;
        let _ = self.ctx.events.send(Event::ProgressSeen { attempt: self.attempt, millis }).await;
    }

    /// `command` to every node.
    fn tell_all(&self, command: impl Fn(usize) -> NodeCommand) {
        for (rank, tx) in self.commands.iter().enumerate() {
            let _ = tx.send(command(rank));
        }
    }

    fn clock(&mut self) -> Clock {
        let l = &self.liveness;
        Clock {
            gap: self.timers.gap(),
            since_progress: l.since_progress(),
            heard: (0..self.results.len()).map(|r| l.has_heard(r).then(|| l.since_heard(r))).collect(),
            load: host_load(),
            still: self.watch.still_for(),
        }
    }

    async fn perform(&mut self, action: Action) {
        let (plan, events) = (self.ctx.plan, self.ctx.events);
        match action {
            Action::Start(port) => self.start_job(port).await,
            Action::Term { failing } => self.term_all(failing),
            Action::Kill => {
                self.stopped = Stop::Kill;
                let kill_wait = self.kill_wait;
                self.tell_all(|_| NodeCommand::Stop { stop: Stop::Kill, fast: false, kill_wait });
            }
            Action::Teardown(reason) => {
                self.tell_progress().await;
                let _ = events.send(Event::TeardownStarted { attempt: self.attempt, reason }).await;
            }
            Action::KillAfter(grace) => self.timers.kill_at = Some(Instant::now() + grace),
            Action::TermAfter(grace) => self.timers.term_at = Some(Instant::now() + grace),
            Action::SignalRanks => {
                self.tell_progress().await;
                let signal = plan.restart.checkpoint_signal;
                let group = plan.launcher == crate::config::LauncherKind::Command;
                self.tell_all(|_| NodeCommand::Checkpoint(signal, group));
                let signal = format!("SIG{}", signal.name);
                let _ = events.send(Event::CheckpointRequested { attempt: self.attempt, signal }).await;
            }
            Action::Probe(reason) => {
                self.tell_progress().await;
                self.probed_at = Some(self.liveness.elapsed());
                self.tell_all(|_| NodeCommand::Probe);
                self.timers.probe_at = Some(Instant::now() + attempt::PROBE_WAIT);
                let wait_secs = attempt::PROBE_WAIT.as_secs();
                let _ =
                    events.send(Event::StacksRequested { attempt: self.attempt, reason, wait_secs }).await;
            }
            Action::Forgive(gap) => {
                tracing::warn!(
                    "herd was not running for {} (suspended or starved): every node gets a fresh {} to be heard",
                    humantime::format_duration(Duration::from_secs(gap.as_secs())),
                    humantime::format_duration(plan.restart.heartbeat_timeout)
                );
                self.liveness.forgive();
            }
            Action::LateHeartbeats(message) => tracing::warn!("{message}"),
        }
    }

    /// Every node's env, with the master port chosen: the job starts, and with it the rounds
    /// of samples.
    async fn start_job(&mut self, port: u16) {
        let plan = self.ctx.plan;
        let values = AttemptValues {
            run_id: self.ctx.run_id,
            attempt: self.attempt,
            master_port: port,
            interfaces: self.ctx.interfaces,
        };
        self.tell_all(|rank| NodeCommand::Env(plan.nodes[rank].env_block(&values)));
        self.timers.sample_at = Some(Instant::now() + straggler::SAMPLE_EVERY);
        let master_addr = plan.master.addr.clone();
        let started = Event::AttemptStarted { attempt: self.attempt, master_addr, master_port: port };
        let _ = self.ctx.events.send(started).await;
    }

    /// SIGTERM to every node, fast but on the `failing` one (see `NodeCommand::Stop`).
    fn term_all(&mut self, failing: Option<usize>) {
        // A stop request never goes down: a node that has not read a `kill` yet must not find
        // a `term` in its place.
        if self.stopped >= Stop::Term {
            return;
        }
        self.stopped = Stop::Term;
        let quick = self.ctx.plan.quick_launcher_exit();
        let kill_wait = self.kill_wait;
        self.tell_all(|rank| NodeCommand::Stop {
            stop: Stop::Term,
            fast: quick && failing != Some(rank),
            kill_wait,
        });
    }

    /// Every node has ended: classify what they left.
    async fn outcome(mut self, ended: Ended) -> (AttemptOutcome, Option<u16>) {
        let plan = self.ctx.plan;
        let stop = ended.stopping;
        if matches!(stop, Some((Stopping::Interrupted, _))) {
            return (AttemptOutcome::Interrupted, ended.port);
        }
        // The preemption stopped the attempt: whatever the nodes' exits, they were told to
        // stop. A failure that was being stopped already is judged as ever (the run then ends
        // as preempted only if that failure would have been restarted: see `Run::attempt`).
        if let (Some(why), Some((Stopping::Checkpoint, _))) = (ended.preempted, stop) {
            return (AttemptOutcome::Preempted(why), ended.port);
        }
        if let Some(error) = ended.no_port {
            return (AttemptOutcome::NoPort(RunError::Port { host: plan.master.host.clone(), error }), None);
        }
        let outcomes: Vec<NodeOutcome> = (self.results.iter_mut().zip(ended.exits).zip(ended.lost_at))
            .filter_map(|((r, exit), lost_at)| {
                Some((r.take()?, exit.unwrap_or(NodeExit::Lost("no result".into())), lost_at))
            })
            .map(|(r, exit, lost_at)| NodeOutcome {
                node_rank: r.node_rank,
                host: plan.nodes[r.node_rank].host.clone(),
                first_rank: plan.nodes[r.node_rank].global_ranks().start,
                stop_requested_at: stop.map(|(_, at)| at).filter(|at| *at < r.ended_at),
                lost_at,
                late_fleet: ended.late_fleet.contains(&r.node_rank),
                exit,
                ended_at: r.ended_at,
                lines: r.tail,
                processes: std::mem::take(&mut self.processes[r.node_rank]),
                stacks: std::mem::take(&mut self.stacks[r.node_rank]),
            })
            .collect();
        let trigger =
            if matches!(stop, Some((Stopping::Hang, _))) { Trigger::Hang } else { Trigger::NodeFailed };
        // A failure's stacks are those of the ranks that outlived it: the root cause is the
        // failure, not an odd one among them.
        let stacks = match self.probed_at {
            Some(at) => self.report_stacks(&outcomes, at, trigger == Trigger::Hang).await,
            None => None,
        };
        let outcome = match classify::classify_with(&outcomes, trigger, &plan.patterns.rules, stacks.as_ref())
        {
            Some(verdict) => AttemptOutcome::Failed(verdict, outcomes),
            None => {
                let millis = self.liveness.elapsed().as_millis() as u64;
                let _ = self.ctx.events.send(Event::AttemptSucceeded { attempt: self.attempt, millis }).await;
                AttemptOutcome::Succeeded
            }
        };
        (outcome, ended.port)
    }
}

impl Gang<'_> {
    /// Every rank's stack from the probe at `probed_at`, to the run's files
    /// (`StacksCollected`), and what they say together (`StacksSummarized`), naming the odd
    /// group as the likely culprit if `culprit`. A rank of a node that did not answer in time,
    /// or had ended already, gets a line saying so.
    async fn report_stacks(
        &self,
        outcomes: &[NodeOutcome],
        probed_at: Duration,
        culprit: bool,
    ) -> Option<stacks::Summary> {
        let (plan, events) = (self.ctx.plan, self.ctx.events);
        // A `command` job's processes are the user's own, Python or not: a stack is news
        // only where py-spy found one, and the ranks without one are no ranks of Python (at
        // 200 nodes, "200 without a stack" was all the line said).
        let python_ranks = plan.launcher != crate::config::LauncherKind::Command;
        let mut all = Vec::new();
        for n in outcomes {
            let mut got = n.stacks.clone();
            if !python_ranks {
                got.retain(|s| s.dump.is_ok());
                if got.is_empty() {
                    continue;
                }
            }
            let answered = !n.processes.is_empty() || !n.stacks.is_empty();
            for rank in plan.nodes[n.node_rank].global_ranks().filter(|_| python_ranks) {
                if got.iter().any(|s| s.rank == rank) {
                    continue;
                }
                let why = if answered {
                    format!("no process of the job has RANK={rank} in its environment")
                } else if let NodeExit::Lost(why) = &n.exit {
                    format!("node {} ({}) was lost: {why}", n.node_rank, n.host)
                } else if n.ended_at <= probed_at {
                    format!("node {} ({}) had ended before the stacks were taken", n.node_rank, n.host)
                } else if n.ended_at < probed_at + attempt::PROBE_WAIT {
                    format!("node {} ({}) ended before it answered", n.node_rank, n.host)
                } else {
                    let wait = attempt::PROBE_WAIT.as_secs();
                    format!("node {} ({}) did not answer within {wait} s", n.node_rank, n.host)
                };
                got.push(RankStack { rank, pid: 0, dump: Err(why) });
            }
            let collected =
                Event::StacksCollected { attempt: self.attempt, node_rank: n.node_rank, stacks: got.clone() };
            let _ = events.send(collected).await;
            all.extend(got);
        }
        if all.is_empty() && !python_ranks {
            return None;
        }
        let mut summary = stacks::summarize(&all, &plan.workdir, stacks::Taken::Stalled);
        if !culprit {
            summary.culprit = None;
        }
        let _ =
            events.send(Event::StacksSummarized { attempt: self.attempt, summary: summary.clone() }).await;
        Some(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::FailureClass;
    use crate::transport::sim::{self, say, Expect, Heard, SimNode, Step};
    use crate::transport::Connection;

    const S: fn(u64) -> Duration = Duration::from_secs;
    /// How long a job takes to end once signalled. Never no time, as a paused clock would have
    /// it: an end at the stop's own instant is read as the node's own, before the stop.
    const MOMENT: Duration = Duration::from_millis(100);

    /// Three nodes, n1 (the master) to n3, one torchrun rank each, the master port `port`,
    /// with `restart` added to `[restart]`.
    fn plan_with(port: &str, restart: &str) -> LaunchPlan {
        let text = format!(
            "[ssh]\nlogin_timeout = \"1m\"\n[[nodes]]\nhost = \"n[1-3]\"\n[job]\nscript = \"t.py\"\n\
             [rendezvous]\nport = {port}\nport_range = [29500, 29501]\n\
             [restart]\nheartbeat_timeout = \"15s\"\ngrace_period = \"5s\"\n{restart}"
        );
        let config = crate::config::parse(std::path::Path::new("c.toml"), &text).unwrap();
        crate::plan::build(&config, &Default::default())
    }

    fn plan(port: &str) -> LaunchPlan {
        plan_with(port, "")
    }

    /// A node whose `[env]` names its docker engine (a rootless docker's socket) has that
    /// engine swept before its job; another node, the engine of its login's environment. The
    /// container's removal after the job needs none: the agent runs it with the job's env.
    #[test]
    fn a_nodes_own_docker_host_reaches_its_sweeps() {
        let text = "[[nodes]]\nhost = \"n1\"\nenv.DOCKER_HOST = \"unix:///run/user/1000/docker.sock\"\n\
                    [[nodes]]\nhost = \"n2\"\n[job]\nscript = \"t.py\"\n[container]\nimage = \"i\"\n";
        let config = crate::config::parse(std::path::Path::new("c.toml"), text).unwrap();
        let plan = crate::plan::build(&config, &Default::default());
        let export = "export DOCKER_HOST=unix:///run/user/1000/docker.sock; ";
        for (node, own) in [(0, true), (1, false)] {
            for attempt in [0, 3] {
                let sweep = presweep("r", attempt, false, false);
                let inv = job_invocation(&plan, "r", &plan.nodes[node], attempt, true, sweep);
                let (swept, cleanup) = (inv.presweep.unwrap(), inv.cleanup.unwrap());
                assert_eq!(swept.starts_with(export), own, "{swept}");
                assert!(swept.contains("docker ps -a --filter"), "{swept}");
                assert!(cleanup.starts_with("docker rm -f herd-"), "{cleanup}");
            }
        }
    }

    /// A node that logs in, and starts its job on its env.
    fn started(pgid: u32) -> Vec<Step> {
        vec![Step::Up, Step::Await(Expect::Env), say(format!("herd-agent pgid {pgid}"))]
    }

    /// The job ends as agent.sh ends it on a stop, SIGTERM, a moment later.
    fn until_stopped() -> Vec<Step> {
        vec![Step::Await(Expect::Stop), Step::Sleep(MOMENT), Step::Exit(143)]
    }

    /// The answer to `probe` of a node whose one rank is `rank`: its process, its stack, done.
    fn answer(rank: u32) -> Vec<Step> {
        let pid = 100 + rank;
        let ask = vec![Step::Await(Expect::Line("probe")), say(format!("herd-agent probe {pid}:S:{rank}:0"))];
        let dump = format!("Thread {pid}\n  all_reduce (t.py:{rank})\n");
        [ask, sim::stack(rank, pid, &dump), vec![say("herd-agent stacks-done")]].concat()
    }

    /// A node whose job runs until stopped, and answers a probe.
    fn running(rank: u32) -> SimNode {
        SimNode::agent([started(10 + rank), answer(rank), until_stopped()].concat())
    }

    /// An attempt, run to its end: how it ended, every event it sent, how long it took.
    struct Ran {
        end: AttemptEnd,
        events: Vec<Event>,
        took: Duration,
    }

    impl Ran {
        fn verdict(&self) -> (&Verdict, &[NodeOutcome]) {
            match &self.end.outcome {
                AttemptOutcome::Failed(verdict, nodes) => (verdict, nodes),
                other => panic!("not a failure: {other:?}"),
            }
        }

        /// Asserts that the attempt failed for `node_rank`'s loss, for a reason that says
        /// `why`. When herd saw it lost.
        #[track_caller]
        fn lost(&self, node_rank: usize, why: &str) -> Option<Duration> {
            let (verdict, outcomes) = self.verdict();
            let root = verdict.root_cause.as_ref().expect("a root cause");
            assert_eq!((verdict.class, root.node_rank), (FailureClass::NodeLost, node_rank), "{verdict:?}");
            assert!(matches!(&root.exit, NodeExit::Lost(w) if w.contains(why)), "{root:?}");
            outcomes[node_rank].lost_at
        }

        fn count(&self, is: impl Fn(&Event) -> bool) -> usize {
            self.events.iter().filter(|e| is(e)).count()
        }
    }

    /// Attempt 0 of `plan` on `nodes`. `react` may answer an event with a signal to herd
    /// (Ctrl-C, a preemption), which comes as the event is seen.
    async fn attempt(
        plan: &LaunchPlan,
        nodes: &[SimNode],
        react: impl FnMut(&Event) -> Option<Signal> + Send + 'static,
    ) -> Ran {
        attempt_after(plan, nodes, Vec::new(), react).await
    }

    /// `attempt`, with the agents started `early`.
    async fn attempt_after(
        plan: &LaunchPlan,
        nodes: &[SimNode],
        early: Vec<Option<Started>>,
        mut react: impl FnMut(&Event) -> Option<Signal> + Send + 'static,
    ) -> Ran {
        let fleet = Fleet::of(nodes.iter().cloned().map(Connection::Sim).collect());
        let (events, mut seen) = crate::events::channel(16);
        let (signals, signalled) = mpsc::unbounded_channel();
        let collect = tokio::spawn(async move {
            let mut all = Vec::new();
            while let Some(crate::events::Dated { event, .. }) = seen.recv().await {
                if let Some(signal) = react(&event) {
                    let _ = signals.send(signal);
                }
                all.push(event);
            }
            all
        });
        let ctx = AttemptContext { plan, run_id: "r1", interfaces: &[], events: &events };
        let mut interrupts = Interrupts::new(signalled);
        let start = Instant::now();
        let used = BTreeSet::new();
        let end = run_attempt(&ctx, 0, &Preflighted::default(), early, &used, &fleet, &mut interrupts).await;
        let took = start.elapsed();
        drop(events);
        Ran { end, events: collect.await.unwrap(), took }
    }

    fn no_signal(_: &Event) -> Option<Signal> {
        None
    }

    /// The control lines a node was sent, but the samples that go every `SAMPLE_EVERY` while
    /// its job runs.
    fn asked(node: &SimNode) -> Vec<String> {
        node.lines().into_iter().filter(|l| l != "sample").collect()
    }

    /// Asserts that each of `nodes` was sent `lines`, samples aside.
    #[track_caller]
    fn all_asked<'a>(nodes: impl IntoIterator<Item = &'a SimNode>, lines: &[&str]) {
        for (i, n) in nodes.into_iter().enumerate() {
            assert_eq!(asked(n), lines, "the {i}th node");
        }
    }

    /// Asserts that each of `nodes` was sent one env, and nothing else, with `port` in it.
    #[track_caller]
    fn all_started_on(nodes: &[SimNode], port: u16) {
        for n in nodes {
            let [Heard::Env(env)] = &n.heard()[..] else { panic!("{:?}", n.heard()) };
            assert!(env.contains(&format!("export MASTER_PORT={port}")), "{env:?}");
        }
    }

    fn envs(node: &SimNode) -> usize {
        node.heard().iter().filter(|h| matches!(h, Heard::Env(_))).count()
    }

    /// torchrun's own lines as it starts (its OMP_NUM_THREADS warning) are no training: an
    /// attempt whose ranks then crash within seconds, again and again, is a crash loop whose
    /// backoff doubles (`policy::trained`), not one restarted at once each time.
    #[tokio::test(start_paused = true)]
    async fn a_torch_launchers_own_lines_are_no_progress() {
        let p = plan("29500");
        let node = |rank: u32| {
            let job = vec![Step::Print("WARNING: Setting OMP_NUM_THREADS\n".into()), Step::Exit(1)];
            SimNode::agent([started(10 + rank), job].concat())
        };
        let nodes = [node(0), node(1), node(2)];
        let ran = attempt(&p, &nodes, no_signal).await;
        assert_eq!(ran.end.first_progress, None);
    }

    #[tokio::test(start_paused = true)]
    async fn nodes_that_all_exit_zero_succeed_each_started_once_on_the_known_port() {
        let p = plan("29500");
        let node = |rank: u32| {
            let job = vec![sim::rank_prints(rank, &format!("step 1 of rank {rank}")), Step::Exit(0)];
            SimNode::agent([started(10 + rank), job].concat())
        };
        let nodes = [node(0), node(1), node(2)];
        let ran = attempt(&p, &nodes, no_signal).await;
        assert!(matches!(ran.end.outcome, AttemptOutcome::Succeeded), "{:?}", ran.end.outcome);
        assert_eq!(ran.end.port, Some(29500));
        assert!(ran.end.first_progress.is_some(), "a rank's line is progress");
        all_started_on(&nodes, 29500);
        assert!(nodes.iter().all(|n| n.started() == 1));
        assert_eq!(ran.count(|e| matches!(e, Event::NodeStarted { .. })), 3);
    }

    /// A worker's link drops while the master is still choosing the port: every node is
    /// stopped in place of its env, and the master's report, late, starts nothing.
    #[tokio::test(start_paused = true)]
    async fn a_node_lost_mid_start_stops_the_others_before_any_starts() {
        let p = plan("\"auto\"");
        let master = vec![
            Step::Up,
            Step::Sleep(S(3)),
            say("herd-agent ports 16 7404"),
            Step::Await(Expect::Env),
            Step::Hang,
        ];
        let lost = vec![Step::Up, Step::Sleep(S(1)), Step::Drop];
        let waiting = [started(12), vec![Step::Hang]].concat();
        let nodes = [SimNode::agent(master), SimNode::agent(lost), SimNode::agent(waiting)];
        let ran = attempt(&p, &nodes, no_signal).await;
        let lost_at = ran.lost(1, "the ssh connection to the node was lost");
        assert_eq!(lost_at, Some(S(1)));
        assert_eq!(ran.end.port, None, "no port was chosen");
        assert_eq!(ran.count(|e| matches!(e, Event::AttemptStarted { .. })), 0);
        // In place of their env.
        all_asked([&nodes[0], &nodes[2]], &["term-fast"]);
        assert_eq!(envs(&nodes[0]) + envs(&nodes[2]), 0);
        // Each ended as agent.sh ends on a stop in place of its env, at once.
        assert!(ran.took < S(4), "{:?}", ran.took);
    }

    /// A node's link drops after its job started: the others, running, are asked for their
    /// stacks first, then stopped.
    #[tokio::test(start_paused = true)]
    async fn a_node_lost_after_the_start_is_the_root_cause_and_the_others_stacks_are_taken() {
        let p = plan("29500");
        let lost = [started(11), vec![Step::Sleep(S(2)), Step::Drop]].concat();
        let nodes = [running(0), SimNode::agent(lost), running(2)];
        let ran = attempt(&p, &nodes, no_signal).await;
        assert_eq!(ran.lost(1, "the ssh connection to the node was lost"), Some(S(2)));
        let outcomes = ran.verdict().1;
        all_asked([&nodes[0], &nodes[2]], &["probe", "term-fast"]);
        assert_eq!(outcomes[0].stacks.len(), 1);
        assert_eq!(outcomes[0].processes.len(), 1);
        let collected = ran.count(|e| matches!(e, Event::StacksCollected { .. }));
        assert_eq!(collected, 3, "{:?}", ran.events);
        assert!(ran.took < S(2) + attempt::PROBE_WAIT, "the answers ended the wait: {:?}", ran.took);
    }

    /// What agents say comes in any order that their writers (the agent, its watcher, the
    /// heartbeat, a background py-spy) allow: a heartbeat and a sample between a stack's
    /// pieces, a stack after the agent said its job exited. Each is still its node's answer.
    #[tokio::test(start_paused = true)]
    async fn answers_interleaved_and_after_the_exit_are_still_the_nodes_answers() {
        let p = plan("29500");
        // Node 0's job ends as it answers: its stack, from py-spy in the background, comes
        // after the agent's exit.
        let late = [
            started(10),
            vec![Step::Await(Expect::Line("probe")), say("herd-agent probe 100:S:0:0")],
            vec![Step::Sleep(MOMENT), say("herd-agent exit 1")],
            sim::stack(0, 100, "Thread 100\n  all_reduce (t.py:0)\n"),
            vec![say("herd-agent stacks-done")],
        ];
        // Node 1's pieces come with a heartbeat and a sample between them.
        let mut pieces = sim::stack(1, 101, "Thread 101\n  all_reduce (t.py:1)\n");
        pieces.insert(1, say("herd-agent alive"));
        pieces.insert(3, say("herd-agent sample 100.0 100 1:5:0"));
        let interleaved = [
            started(11),
            vec![Step::Await(Expect::Line("probe")), say("herd-agent probe 101:S:1:0")],
            pieces,
            vec![say("herd-agent stacks-done")],
            until_stopped(),
        ];
        let crashed =
            [started(12), vec![Step::Sleep(S(1)), Step::Print("Segmentation fault (core dumped)\n".into())]];
        let crashed = [crashed.concat(), answer(2), until_stopped()].concat();
        let nodes =
            [SimNode::agent(late.concat()), SimNode::agent(interleaved.concat()), SimNode::agent(crashed)];
        let ran = attempt(&p, &nodes, no_signal).await;
        let (verdict, outcomes) = ran.verdict();
        assert_eq!(verdict.class, FailureClass::Crash, "{verdict:?}");
        assert_eq!(verdict.root_cause.as_ref().unwrap().node_rank, 2);
        for (rank, n) in outcomes[..2].iter().enumerate() {
            let [stack] = &n.stacks[..] else { panic!("node {rank}: {:?}", n.stacks) };
            assert_eq!(stack.dump, Ok(format!("Thread 10{rank}\n  all_reduce (t.py:{rank})\n")));
        }
        assert_eq!(outcomes[0].exit, NodeExit::ExitCode(1));
        // The failing node keeps its launcher's grace; the others end fast.
        assert_eq!(asked(&nodes[2]), ["probe", "term"]);
        assert_eq!(asked(&nodes[1]), ["probe", "term-fast"]);
        assert!(ran.took < S(1) + attempt::PROBE_WAIT, "{:?}", ran.took);
    }

    /// A node whose job raised: it prints why and exits 1.
    fn raised() -> Vec<Step> {
        let job = vec![Step::Sleep(S(1)), Step::Print("ValueError: bad lr\n".into()), Step::Exit(1)];
        [started(10), job].concat()
    }

    fn exit_of(outcomes: &[NodeOutcome], node_rank: usize) -> &NodeExit {
        &outcomes.iter().find(|n| n.node_rank == node_rank).expect("its outcome").exit
    }

    /// Ctrl-C while herd waits for the stacks of a hang: the nodes are stopped at once, not
    /// once the wait is over.
    #[tokio::test(start_paused = true)]
    async fn an_interrupt_during_a_hangs_probe_stops_every_node_at_once() {
        let p = plan_with("29500", "hang_timeout = \"30s\"\n");
        // Their py-spy never answers.
        let stuck = |rank: u32| SimNode::agent([started(10 + rank), until_stopped()].concat());
        let nodes = [stuck(0), stuck(1), stuck(2)];
        let ran =
            attempt(&p, &nodes, |e| matches!(e, Event::StacksRequested { .. }).then_some(Signal::Interrupt))
                .await;
        assert!(matches!(ran.end.outcome, AttemptOutcome::Interrupted), "{:?}", ran.end.outcome);
        all_asked(&nodes, &["probe", "term-fast"]);
        assert!(ran.took >= S(30) && ran.took < S(31), "{:?}", ran.took);
    }

    /// A time limit's warning while a failure's stacks are awaited: the failure's teardown goes
    /// on as it was (no checkpoint asked of ranks being stopped), and the attempt is judged
    /// as the failure it was.
    #[tokio::test(start_paused = true)]
    async fn a_preemption_during_a_failures_probe_neither_cuts_it_short_nor_asks_a_checkpoint() {
        let p = plan("29500");
        // Node 2 answers late, a second after the warning came.
        let late = [started(12), vec![Step::Sleep(S(3))], answer(2), until_stopped()].concat();
        let nodes = [SimNode::agent(raised()), running(1), SimNode::agent(late)];
        let preempt = Signal::Checkpoint(Preemption::TimeLimit);
        let ran =
            attempt(&p, &nodes, move |e| matches!(e, Event::StacksRequested { .. }).then_some(preempt)).await;
        let (verdict, outcomes) = ran.verdict();
        assert_eq!(verdict.class, FailureClass::User, "{verdict:?}");
        assert_eq!(verdict.root_cause.as_ref().unwrap().node_rank, 0);
        all_asked(&nodes[1..], &["probe", "term-fast"]);
        assert_eq!(outcomes[2].stacks.len(), 1, "the late answer was waited for");
        assert_eq!(ran.count(|e| matches!(e, Event::CheckpointRequested { .. })), 0);
    }

    /// A node whose link drops while herd stops it ends lost, but herd's own teardown lost
    /// it: the failure that started the teardown stays the root cause.
    #[tokio::test(start_paused = true)]
    async fn a_node_lost_during_the_teardown_is_no_root_cause() {
        let p = plan("29500");
        let dropped = [started(11), answer(1), vec![Step::Await(Expect::Stop), Step::Drop]].concat();
        let stopped = [started(12), answer(2), until_stopped()].concat();
        let nodes = [SimNode::agent(raised()), SimNode::agent(dropped), SimNode::agent(stopped)];
        let ran = attempt(&p, &nodes, no_signal).await;
        let (verdict, outcomes) = ran.verdict();
        assert_eq!(verdict.class, FailureClass::User, "{verdict:?}");
        let root = verdict.root_cause.as_ref().unwrap();
        assert_eq!((root.node_rank, root.line.as_deref()), (0, Some("ValueError: bad lr")));
        assert!(matches!(exit_of(outcomes, 1), NodeExit::Lost(_)), "{:?}", outcomes[1].exit);
        assert_eq!(outcomes[1].lost_at, None, "not seen lost: herd was stopping it");
    }

    /// A node that ignores SIGTERM and SIGKILL alike (a process stuck in the kernel, an agent
    /// wedged) does not hold the attempt: herd gives up on it after the kill wait.
    #[tokio::test(start_paused = true)]
    async fn a_node_that_ignores_every_stop_is_given_up_on_after_the_kill_wait() {
        let p = plan("29500");
        let deaf = [started(11), answer(1), vec![Step::Hang]].concat();
        let stopped = [started(12), answer(2), until_stopped()].concat();
        let nodes = [SimNode::agent(raised()), SimNode::agent(deaf), SimNode::agent(stopped)];
        let ran = attempt(&p, &nodes, no_signal).await;
        let (verdict, outcomes) = ran.verdict();
        assert_eq!(verdict.root_cause.as_ref().unwrap().node_rank, 0, "{verdict:?}");
        assert_eq!(asked(&nodes[1]), ["probe", "term-fast", "kill"]);
        let NodeExit::Lost(why) = exit_of(outcomes, 1) else { panic!("{:?}", outcomes[1].exit) };
        assert!(why.contains("no exit status 15 s after SIGKILL"), "{why}");
        // The failure at 1 s, the grace, the kill wait, then the wait for its output to end.
        let given_up = S(1) + p.restart.grace_period + attempt::KILL_DEADLINE + node::DRAIN_DEADLINE;
        assert!(ran.took >= given_up && ran.took < given_up + S(1), "{:?}", ran.took);
    }

    /// What SIGKILL could not stop is reported, and the node still ends.
    #[tokio::test(start_paused = true)]
    async fn processes_that_outlive_sigkill_are_reported() {
        let p = plan("29500");
        let unkillable = [
            started(11),
            answer(1),
            vec![Step::Await(Expect::Stop), say("herd-agent unstopped 4242 4243"), Step::Exit(143)],
        ];
        let stopped = [started(12), answer(2), until_stopped()].concat();
        let nodes = [SimNode::agent(raised()), SimNode::agent(unkillable.concat()), SimNode::agent(stopped)];
        let ran = attempt(&p, &nodes, no_signal).await;
        let unstopped: Vec<_> = (ran.events.iter())
            .filter_map(|e| match e {
                Event::ProcessesUnstopped { node_rank, pids, .. } => Some((*node_rank, pids.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(unstopped, [(1, vec![4242, 4243])]);
        assert_eq!(ran.verdict().0.root_cause.as_ref().unwrap().node_rank, 0);
    }

    /// A node that stops beating is lost after the heartbeat timeout, killed once the others'
    /// stacks are in, and given up on after the kill wait.
    #[tokio::test(start_paused = true)]
    async fn a_node_that_goes_silent_is_lost_after_the_heartbeat_timeout() {
        let p = plan("29500");
        let silent = [started(11), vec![Step::Silence, Step::Hang]].concat();
        let nodes = [running(0), SimNode::agent(silent), running(2)];
        let ran = attempt(&p, &nodes, no_signal).await;
        let lost_at = ran.lost(1, "no heartbeat for 15s").expect("seen lost");
        assert!(lost_at >= S(15) && lost_at < S(16), "{lost_at:?}");
        // A silent node cannot act on `term`: it is killed.
        assert_eq!(asked(&nodes[1]), ["probe", "kill"]);
        assert_eq!(asked(&nodes[0]), ["probe", "kill"]);
    }

    /// A login shell that never starts the agent (a stuck conda init) is lost at
    /// `ssh.login_timeout`, not at the heartbeat timeout: nothing was heard to time out.
    #[tokio::test(start_paused = true)]
    async fn a_login_that_never_reaches_the_agent_is_lost_at_the_login_timeout() {
        let p = plan("29500");
        let nodes = [running(0), running(1), SimNode::agent(vec![Step::Hang])];
        let ran = attempt(&p, &nodes, no_signal).await;
        let lost_at = ran.lost(2, "ssh.login_timeout").expect("seen lost");
        assert!(lost_at >= p.login_timeout && lost_at < p.login_timeout + S(1), "{lost_at:?}");
    }

    /// An attempt whose every node does `then` once told to checkpoint, `why` coming as
    /// the job starts: it ends as preempted.
    async fn preempted(p: &LaunchPlan, why: Preemption, then: Vec<Step>) -> (Ran, [SimNode; 3]) {
        let node = |rank: u32| {
            let told = vec![Step::Await(Expect::Line("checkpoint USR1"))];
            SimNode::agent([started(10 + rank), told, then.clone()].concat())
        };
        let nodes = [node(0), node(1), node(2)];
        let warned = Signal::Checkpoint(why);
        let ran =
            attempt(p, &nodes, move |e| matches!(e, Event::AttemptStarted { .. }).then_some(warned)).await;
        assert!(
            matches!(&ran.end.outcome, AttemptOutcome::Preempted(w) if *w == why),
            "{:?}",
            ran.end.outcome
        );
        (ran, nodes)
    }

    /// A time limit's warning: every rank is told to checkpoint, the nodes that then end are
    /// no failure, and the attempt ends as preempted.
    #[tokio::test(start_paused = true)]
    async fn a_time_limit_asks_every_rank_to_checkpoint_and_ends_preempted() {
        let (_, nodes) =
            preempted(&plan("29500"), Preemption::TimeLimit, vec![Step::Sleep(S(2)), Step::Exit(0)]).await;
        all_asked(&nodes, &["checkpoint USR1"]);
    }

    /// With `port = "auto"`, no node gets its env before the master reported its ports, and
    /// the env carries the port chosen from them.
    #[tokio::test(start_paused = true)]
    async fn the_port_is_chosen_from_the_masters_late_report_before_any_env() {
        let p = plan("\"auto\"");
        // 29500 (733C) is in use on the master.
        let master =
            [vec![Step::Up, Step::Sleep(S(2)), say("herd-agent ports 16 733C")], started(10)[1..].to_vec()];
        let done = vec![Step::Exit(0)];
        let nodes = [
            SimNode::agent([master.concat(), done.clone()].concat()),
            SimNode::agent([started(11), done.clone()].concat()),
            SimNode::agent([started(12), done].concat()),
        ];
        let ran = attempt(&p, &nodes, no_signal).await;
        assert!(matches!(ran.end.outcome, AttemptOutcome::Succeeded), "{:?}", ran.end.outcome);
        assert_eq!(ran.end.port, Some(29501));
        all_started_on(&nodes, 29501);
        assert!(ran.took >= S(2), "{:?}", ran.took);
    }

    /// The agent started ahead (its login overlapping the connections) is the attempt's own
    /// when it was started as the attempt's; otherwise another is, and the early one ends
    /// having started nothing.
    #[tokio::test(start_paused = true)]
    async fn an_agent_started_ahead_is_used_only_if_started_as_the_attempts() {
        let p = plan("29500");
        let job = || [started(10), vec![Step::Exit(0)]].concat();
        let unused = vec![Step::Up, Step::Await(Expect::Env)];
        let nodes = [SimNode::agent(job()), SimNode::agents([unused, job()]), SimNode::agent(job())];
        let mut early = Vec::new();
        for (rank, node) in nodes.iter().enumerate().take(2) {
            let sweep = presweep("r1", 0, false, false);
            let mut inv = job_invocation(&p, "r1", &p.nodes[rank], 0, true, sweep);
            if rank == 1 {
                inv.grace_secs += 1;
            }
            early.push(Some(Started::start(&Connection::Sim(node.clone()), inv).await.unwrap()));
        }
        let ran = attempt_after(&p, &nodes, early, no_signal).await;
        assert!(matches!(ran.end.outcome, AttemptOutcome::Succeeded), "{:?}", ran.end.outcome);
        assert_eq!(nodes.iter().map(SimNode::started).collect::<Vec<_>>(), [1, 2, 1]);
        assert_eq!(envs(&nodes[1]), 1, "{:?}", nodes[1].heard());
    }

    /// The agents started during a restart's backoff are the attempt's where the fleet kept
    /// their connections: the master's login (2 s) and its report of its ports are over
    /// when the backoff (5 s here) is, and the attempt starts at once. Node 1's master died
    /// meanwhile and was connected again: it starts an agent of its own, and the one ahead
    /// gets no env.
    #[tokio::test(start_paused = true)]
    async fn agents_started_ahead_are_used_where_the_fleet_kept_their_connections() {
        let p = plan("\"auto\"");
        let done = vec![Step::Exit(0)];
        // 29500 (733C) is in use on the master.
        let master =
            [vec![Step::Up, Step::Sleep(S(2)), say("herd-agent ports 16 733C")], started(10)[1..].to_vec()];
        // Node 1's agent ahead stops a leftover of the attempt before as it sweeps, then is
        // heard no more (its old master hangs).
        let unused = vec![Step::Up, say("herd-agent swept 4242"), Step::Hang];
        let nodes = [
            SimNode::agent([master.concat(), done.clone()].concat()),
            SimNode::agents([unused, [started(11), done.clone()].concat()]),
            SimNode::agent([started(12), done].concat()),
        ];
        let fleet = Fleet::of(nodes.iter().cloned().map(Connection::Sim).collect());
        let ahead = start_ahead(&p, "r1", 0, &fleet);
        tokio::time::sleep(S(5)).await;
        let fleet = fleet.reconnected(1, Connection::Sim(nodes[1].clone()));
        let (events, mut seen) = crate::events::channel(16);
        let start = Instant::now();
        let early = kept(ahead, &fleet, &events).await;
        assert_eq!(start.elapsed(), Duration::ZERO, "what the agent on the old master said is read, no more");
        assert_eq!(early.iter().map(Option::is_some).collect::<Vec<_>>(), [true, false, true]);
        drop(events);
        let told = vec![(1, p.nodes[1].host.clone(), vec![4242])];
        assert_eq!(swept(&mut seen).await, told, "the unused agent's sweep is told");
        let ran = attempt_after(&p, &nodes, early, no_signal).await;
        assert!(matches!(ran.end.outcome, AttemptOutcome::Succeeded), "{:?}", ran.end.outcome);
        assert!(ran.took < S(1), "the master's report came during the backoff: {:?}", ran.took);
        all_started_on(&nodes, 29501);
        assert_eq!(nodes.iter().map(SimNode::started).collect::<Vec<_>>(), [1, 2, 1]);
        assert_eq!(envs(&nodes[1]), 1, "{:?}", nodes[1].heard());
    }

    /// An agent started ahead that waited for its env longer than `AHEAD_MAX_AGE` (its
    /// restart waited for a node after the backoff) is not used: the attempt starts its own,
    /// with a fresh report of the master's ports.
    #[tokio::test(start_paused = true)]
    async fn an_agent_started_ahead_too_long_ago_is_not_used() {
        let p = plan("29500");
        let unused = vec![Step::Up, Step::Await(Expect::Env)];
        let node = SimNode::agents([unused, [started(10), vec![Step::Exit(0)]].concat()]);
        let fleet = Fleet::of(vec![Connection::Sim(node.clone())]);
        let ahead = start_ahead(&p, "r1", 0, &fleet);
        tokio::time::sleep(AHEAD_MAX_AGE + S(1)).await;
        let (events, _seen) = crate::events::channel(16);
        assert!(kept(ahead, &fleet, &events).await[0].is_none());
        assert_eq!(node.started(), 1);
    }

    /// The nodes, hosts and pids of the `LeftoversStopped` events `seen` holds, once its
    /// senders are gone.
    async fn swept(seen: &mut mpsc::Receiver<crate::events::Dated>) -> Vec<(usize, String, Vec<u32>)> {
        let mut swept = Vec::new();
        while let Some(crate::events::Dated { event, .. }) = seen.recv().await {
            if let Event::LeftoversStopped { node_rank, host, pids } = event {
                swept.push((node_rank, host, pids));
            }
        }
        swept
    }

    /// `drop_ahead` of agents started on `nodes` 2 s before: how long it took, and the
    /// leftovers told.
    async fn dropped_ahead(p: &LaunchPlan, nodes: &[SimNode]) -> (Duration, Vec<(usize, String, Vec<u32>)>) {
        let fleet = Fleet::of(nodes.iter().cloned().map(Connection::Sim).collect());
        let ahead = start_ahead(p, "r1", 0, &fleet);
        tokio::time::sleep(S(2)).await;
        let (events, mut seen) = crate::events::channel(16);
        let start = Instant::now();
        drop_ahead(Some(ahead), &events).await;
        let took = start.elapsed();
        drop(events);
        (took, swept(&mut seen).await)
    }

    /// Agents started ahead that a restart does not use (its plan changed after the backoff)
    /// end at once, having started nothing, and what their sweeps stopped is told all the
    /// same, under the host each swept: the node's record has it.
    #[tokio::test(start_paused = true)]
    async fn agents_ahead_not_used_end_at_once_and_their_sweeps_are_told() {
        let p = plan("29500");
        let nodes = [
            SimNode::agent(vec![Step::Up, say("herd-agent swept 71 72"), Step::Await(Expect::Env)]),
            SimNode::agent(vec![Step::Up, Step::Await(Expect::Env)]),
            SimNode::agent(vec![Step::Up, say("herd-agent swept 91"), Step::Await(Expect::Env)]),
        ];
        let (took, swept) = dropped_ahead(&p, &nodes).await;
        assert_eq!(took, Duration::ZERO, "each ends as its stdin closes");
        let host = |rank: usize| p.nodes[rank].host.clone();
        assert_eq!(swept, [(0, host(0), vec![71, 72]), (2, host(2), vec![91])]);
        for node in &nodes {
            assert_eq!((node.started(), envs(node)), (1, 0), "{:?}", node.heard());
        }
    }

    /// Agents ahead that do not end (their nodes cannot be reached) hold the restart
    /// `UNUSED_HEARD` at most, all of them together, and what the others said is told.
    #[tokio::test(start_paused = true)]
    async fn agents_ahead_that_do_not_end_hold_the_restart_a_second_in_all() {
        let p = plan("29500");
        let nodes = [
            SimNode::agent(vec![Step::Up, say("herd-agent swept 81"), Step::Hang]),
            SimNode::agent(vec![Step::Up, Step::Hang]),
            SimNode::agent(vec![Step::Up, say("herd-agent swept 91"), Step::Await(Expect::Env)]),
        ];
        let (took, swept) = dropped_ahead(&p, &nodes).await;
        assert_eq!(took, UNUSED_HEARD);
        let pids: Vec<(usize, Vec<u32>)> = swept.into_iter().map(|(rank, _, pids)| (rank, pids)).collect();
        assert_eq!(pids, [(0, vec![81]), (2, vec![91])]);
    }

    /// A node on which no agent can start is lost at once: nothing waits for it.
    #[tokio::test(start_paused = true)]
    async fn a_node_whose_agent_cannot_start_is_lost_at_once() {
        let p = plan("29500");
        let waiting = |rank: u32| SimNode::agent([started(10 + rank), until_stopped()].concat());
        let nodes = [waiting(0), SimNode::agents([]), waiting(2)];
        let ran = attempt(&p, &nodes, no_signal).await;
        assert_eq!(ran.lost(1, "no agent to start"), Some(Duration::ZERO));
        assert!(ran.took < S(1), "{:?}", ran.took);
    }

    /// Ranks that do not exit within `restart.checkpoint_grace` are stopped as in any
    /// teardown, and the attempt still ends as preempted.
    #[tokio::test(start_paused = true)]
    async fn ranks_still_running_after_the_checkpoint_grace_are_stopped() {
        let p = plan_with("29500", "checkpoint_grace = \"20s\"\n");
        let (ran, nodes) = preempted(&p, Preemption::Preempted, until_stopped()).await;
        all_asked(&nodes, &["checkpoint USR1", "term-fast"]);
        assert!(ran.took >= S(20) && ran.took < S(21), "{:?}", ran.took);
    }

    /// A master whose socket tables cannot be read leaves no port to choose: nothing starts.
    #[tokio::test(start_paused = true)]
    async fn a_master_without_socket_tables_ends_the_attempt_with_no_port() {
        let p = plan("\"auto\"");
        let master = vec![Step::Up, say("herd-agent ports ?"), Step::Await(Expect::Env), Step::Hang];
        let waiting = |rank: u32| SimNode::agent([started(10 + rank), vec![Step::Hang]].concat());
        let nodes = [SimNode::agent(master), waiting(1), waiting(2)];
        let ran = attempt(&p, &nodes, no_signal).await;
        let AttemptOutcome::NoPort(RunError::Port { host, .. }) = &ran.end.outcome else {
            panic!("{:?}", ran.end.outcome)
        };
        assert_eq!(host, "n1");
        assert!(nodes.iter().all(|n| envs(n) == 0 && asked(n) == ["term-fast"]));
    }

    /// A hang's probe that a node does not answer in time ends with the wait; the ranks of
    /// that node have a stack that says so, and the others' are theirs.
    #[tokio::test(start_paused = true)]
    async fn a_hangs_probe_ends_with_its_wait_and_says_who_did_not_answer() {
        let p = plan_with("29500", "hang_timeout = \"30s\"\n");
        let stuck = [started(11), until_stopped()].concat();
        let nodes = [running(0), SimNode::agent(stuck), running(2)];
        let ran = attempt(&p, &nodes, no_signal).await;
        let (verdict, _) = ran.verdict();
        assert_eq!(verdict.class, FailureClass::Hang, "{verdict:?}");
        let collected: Vec<(usize, Vec<Result<String, String>>)> = (ran.events.iter())
            .filter_map(|e| match e {
                Event::StacksCollected { node_rank, stacks, .. } => {
                    Some((*node_rank, stacks.iter().map(|s| s.dump.clone()).collect()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(collected.len(), 3, "{collected:?}");
        assert!(collected[0].1[0].is_ok() && collected[2].1[0].is_ok(), "{collected:?}");
        assert_eq!(collected[1].1, [Err("node 1 (n2) did not answer within 5 s".to_string())]);
        assert_eq!(ran.count(|e| matches!(e, Event::StacksSummarized { .. })), 1);
        assert!(ran.took >= S(30) + attempt::PROBE_WAIT, "{:?}", ran.took);
    }
}
