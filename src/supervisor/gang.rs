//! One attempt over every node at once: start each node's task, feed what they report to the
//! attempt's state machine (`attempt`), and perform what it decides. Every node's agent logs
//! in at once and sweeps; the master's also reports its ports in use, unless the port is
//! known (fixed, or tested by the preflight). Only once the port is chosen does any node get
//! its env, and start.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::time::Instant as Deadline;

use super::attempt::{self, Action, Attempt, Clock, Ended, Input, Stopping};
use super::node::{self, sleep_until, Liveness, NodeCommand, NodeReport, NodeResult, NodeRun, Stop};
use super::preflight::Preflighted;
use super::straggler::{self, StragglerWatch};
use super::sweep::Sweep;
use super::types::{Interrupts, RunError, Signal};
use crate::classify;
use crate::events::{Event, Preemption};
use crate::fleet::{Fleet, OnNodes};
use crate::outcome::{NodeExit, NodeOutcome, ProcessState, Trigger, Verdict};
use crate::plan::{AttemptValues, LaunchPlan, NodePlan};
use crate::remote::AgentInvocation;
use crate::stacks::{self, RankStack};
use crate::transport::Started;

/// How often the supervisor checks for hangs and silent nodes.
const TICK: Duration = Duration::from_millis(250);

/// What every attempt of a run shares.
pub(super) struct AttemptContext<'a> {
    pub plan: &'a LaunchPlan,
    pub run_id: &'a str,
    pub interfaces: &'a [String],
    pub events: &'a mpsc::Sender<Event>,
}

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
    gang.tick.reset();
    gang.last_tick = Instant::now();
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
        presweep: presweep.map(|sweep| sweep.body(plan)),
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
    kill_at: Option<Deadline>,
    /// When the ranks' time to checkpoint is over (`Action::TermAfter`).
    term_at: Option<Deadline>,
    probe_at: Option<Deadline>,
    /// When the agents were asked for their stacks (the attempt's age), if they were.
    probed_at: Option<Duration>,
    tick: tokio::time::Interval,
    last_tick: Instant,
    interrupts_open: bool,
    /// How long a node may take to end after SIGKILL (`Attempt::kill_wait`).
    kill_wait: Duration,
    /// The ranks' CPU samples, and the stragglers named.
    watch: StragglerWatch,
    /// When the next round of samples is asked for; `None` until the job has its env.
    sample_at: Option<Instant>,
    /// Whether the attempt's first progress has been told (`Event::ProgressSeen`).
    progress_told: bool,
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
            let fresh = preflighted.fresh.contains(&rank);
            let sweep = presweep(ctx.run_id, attempt, preflighted.swept, fresh);
            let mut invocation = job_invocation(plan, ctx.run_id, node, attempt, port_known, sweep);
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
                progress_pattern: plan.patterns.progress.clone(),
                fatal_pattern: plan.patterns.crash.clone(),
            };
            Some(node::run(conn.clone(), run, ctx.events.clone()))
        });
        let mut tick = tokio::time::interval(TICK);
        // After a stall, one late tick, not a burst of them.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
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
            kill_at: None,
            term_at: None,
            probe_at: None,
            probed_at: None,
            tick,
            last_tick: Instant::now(),
            interrupts_open: true,
            kill_wait: attempt::KILL_DEADLINE,
            watch: StragglerWatch::new(),
            sample_at: None,
            progress_told: false,
        }
    }

    /// What happens next; `None` once every node's task has ended.
    async fn next_input(&mut self, machine: &Attempt<'_>, interrupts: &mut Interrupts) -> Option<Input> {
        loop {
            let (kill_at, probe_at, term_at) = (self.kill_at, self.probe_at, self.term_at);
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
                    self.probe_at = None;
                    return Some(Input::ProbeTimedOut);
                }
                () = sleep_until(term_at) => {
                    self.term_at = None;
                    return Some(Input::TermTimer);
                }
                () = sleep_until(kill_at) => {
                    self.kill_at = None;
                    return Some(Input::KillTimer);
                }
                _ = self.tick.tick() => {
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
        match self.sample_at {
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
        self.sample_at = Some(Instant::now() + straggler::SAMPLE_EVERY);
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
        let gap = self.last_tick.elapsed();
        self.last_tick = Instant::now();
        let l = &self.liveness;
        Clock {
            gap,
            since_progress: l.since_progress(),
            heard: (0..self.results.len()).map(|r| l.has_heard(r).then(|| l.since_heard(r))).collect(),
            load: host_load(),
            still: self.watch.still_for(),
        }
    }

    async fn perform(&mut self, action: Action) {
        let (plan, events) = (self.ctx.plan, self.ctx.events);
        match action {
            Action::Start(port) => {
                let values = AttemptValues {
                    run_id: self.ctx.run_id,
                    attempt: self.attempt,
                    master_port: port,
                    interfaces: self.ctx.interfaces,
                };
                self.tell_all(|rank| NodeCommand::Env(plan.nodes[rank].env_block(&values)));
                self.sample_at = Some(Instant::now() + straggler::SAMPLE_EVERY);
                let master_addr = plan.master.addr.clone();
                let _ = events
                    .send(Event::AttemptStarted { attempt: self.attempt, master_addr, master_port: port })
                    .await;
            }
            Action::Term { failing } => {
                // A stop request never goes down: a node that has not read a `kill` yet must
                // not find a `term` in its place.
                if self.stopped < Stop::Term {
                    self.stopped = Stop::Term;
                    let quick = plan.quick_launcher_exit();
                    let kill_wait = self.kill_wait;
                    self.tell_all(|rank| NodeCommand::Stop {
                        stop: Stop::Term,
                        fast: quick && failing != Some(rank),
                        kill_wait,
                    });
                }
            }
            Action::Kill => {
                self.stopped = Stop::Kill;
                let kill_wait = self.kill_wait;
                self.tell_all(|_| NodeCommand::Stop { stop: Stop::Kill, fast: false, kill_wait });
            }
            Action::Teardown(reason) => {
                self.tell_progress().await;
                let _ = events.send(Event::TeardownStarted { attempt: self.attempt, reason }).await;
            }
            Action::KillAfter(grace) => self.kill_at = Some(Deadline::now() + grace),
            Action::TermAfter(grace) => self.term_at = Some(Deadline::now() + grace),
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
                self.probe_at = Some(Deadline::now() + attempt::PROBE_WAIT);
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
