//! Executes a launch plan: connect to every node, then run attempts until one succeeds, the
//! failure is not one to restart, or restarts run out. An attempt is all nodes together:
//! when one fails, is lost, or the job stops making progress, every node is stopped, the
//! failure is classified, and, if the policy says so, everything is checked and started
//! again on a fresh port. Everything is reported as events; nothing here prints.

pub mod exec;
mod node;
pub mod policy;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use regex::Regex;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::classify::{self, NodeOutcome, RuleTable, Trigger, Verdict};
use crate::config::PortSpec;
use crate::doctor;
use crate::events::{Event, NodeExit, RunStatus};
use crate::plan::{AttemptValues, LaunchPlan};
use crate::port::{self, PortError};
use crate::remote::{self, AgentInvocation, SweepScope};
use crate::transport::{self, Connection, Started, TransportError};

use node::Liveness;
pub use node::{Stop, READ_SIZE};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("preflight failed: {}", first_failure(.0))]
    Preflight(Vec<doctor::NodeChecks>),
    #[error("node {node_rank} ({host}): ssh: {error}\n  fix: {}", transport::connect_fix(&error.to_string()))]
    Connect { node_rank: usize, host: String, error: TransportError },
    #[error("master node {host}: {error}")]
    Port { host: String, error: PortError },
}

fn first_failure(nodes: &[doctor::NodeChecks]) -> String {
    nodes
        .iter()
        .find_map(|n| {
            let c = n.checks.iter().find(|c| c.status == doctor::Status::Fail)?;
            Some(format!("node {} ({}): {}: {}", n.rank, n.host, c.name, c.detail))
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptSummary {
    pub attempt: u32,
    pub duration: Duration,
    /// `None`: it succeeded or was interrupted.
    pub verdict: Option<Verdict>,
}

/// How the run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    pub status: RunStatus,
    pub attempts: Vec<AttemptSummary>,
}

/// Requests from outside the run: each one is a Ctrl-C / SIGTERM. The first stops the job
/// gracefully, the second kills it.
pub type Interrupts = mpsc::UnboundedReceiver<()>;

/// How often the supervisor checks for hangs and silent nodes.
const TICK: Duration = Duration::from_millis(250);
/// How long herd waits for the agents' answers to `probe` before it tears a hung attempt
/// down: the evidence of who is stuck dies with the processes.
const PROBE_WAIT: Duration = Duration::from_secs(3);
/// A gap between two ticks this long means herd itself was not running (SIGSTOP, Ctrl-Z, a
/// laptop lid, a paused CI runner, a starved machine): no node is judged on that silence.
const STALLED: Duration = Duration::from_secs(2);
/// How often an unreachable node is tried again before a restart.
const RECONNECT_EVERY: Duration = Duration::from_secs(2);

pub async fn run(
    plan: &LaunchPlan,
    run_id: &str,
    options: RunOptions,
    events: mpsc::Sender<Event>,
    mut interrupts: Interrupts,
) -> Result<RunOutcome, RunError> {
    let emit = |e: Event| {
        let events = events.clone();
        async move {
            let _ = events.send(e).await;
        }
    };
    emit(Event::RunStarted {
        run_id: run_id.to_string(),
        config: plan.config_path.display().to_string(),
        config_key: plan.config_key.clone(),
        launcher: plan.launcher.as_str(),
        nnodes: plan.nnodes(),
        world_size: plan.world_size,
        max_restarts: plan.restart.max_restarts,
        hosts: plan.nodes.iter().map(|n| n.host.clone()).collect(),
        nprocs: plan.nodes.iter().map(|n| n.nproc).collect(),
        log_dir: plan.logs_dir.join(run_id).display().to_string(),
    })
    .await;
    let finish = |status: RunStatus, attempts: Vec<AttemptSummary>| async move {
        emit(Event::RunFinished { status, attempts: attempts.len() as u32 }).await;
        Ok(RunOutcome { status, attempts })
    };

    // Nothing has started yet: an interrupt here just ends the run. Every node's leftovers
    // are swept, and the master's port chosen, by the agents that start the probes or the job:
    // one login per node, as pdsh has.
    // Each node's first agents start as soon as it is connected, while other handshakes go on,
    // as pdsh's logins do: the preflight's probe and, logging in beside it, the first
    // attempt's job agent, which starts nothing before it gets its env.
    let probing = will_preflight(plan, options).then(|| preflight_options(plan, run_id, options));
    let first = Preflighted { port: None, swept: probing.is_some(), interfaces: Vec::new() };
    let port_known = options.preflight || matches!(plan.master.port, PortSpec::Fixed(_));
    let early_agents = |node: &crate::plan::NodePlan| EarlyAgents {
        probe: probing.as_ref().map(|o| doctor::probe_invocation(plan, node, o)),
        job: Some(job_invocation(plan, run_id, node, 0, port_known, first.swept)),
    };
    let connected = tokio::select! {
        conns = connect_all(plan, &events, early_agents) => Some(conns?),
        _ = interrupts.recv() => None,
    };
    let Some((mut conns, early)) = connected else {
        return finish(RunStatus::Interrupted, vec![]).await;
    };
    let (mut early_probes, mut early_jobs): (Vec<_>, Vec<_>) =
        early.into_iter().map(|e| (e.probe, e.job)).unzip();

    let rules = RuleTable::new(&plan.restart.rules);
    let progress = plan.restart.progress_pattern.as_deref().and_then(|p| Regex::new(p).ok()).map(Arc::new);
    let crash = rules.crash_pattern().map(Arc::new);
    let mut used_ports = BTreeSet::new();
    let mut attempts = Vec::new();
    let mut attempt = 0;
    let mut interfaces = Vec::new();
    // What the preflight did for the first attempt: tested its port, swept the nodes.
    let mut checked = Preflighted::default();
    loop {
        if attempt == 0 {
            if options.preflight {
                emit(Event::PreflightStarted { nnodes: plan.nnodes() }).await;
            }
            let preflighted = tokio::select! {
                checked = preflight(plan, run_id, &conns, options, &events, std::mem::take(&mut early_probes)) => Some(checked),
                _ = interrupts.recv() => None,
            };
            match preflighted {
                Some(Ok(found)) => (checked, interfaces) = (found.clone(), found.interfaces),
                Some(Err(e)) => {
                    close_all(conns).await;
                    return Err(e);
                }
                None => {
                    close_all(conns).await;
                    return finish(RunStatus::Interrupted, vec![]).await;
                }
            }
        }
        let started = Instant::now();
        let ctx = AttemptContext {
            plan,
            run_id,
            rules: &rules,
            progress: progress.clone(),
            crash: crash.clone(),
            interfaces: &interfaces,
            events: &events,
        };
        let first = std::mem::take(&mut checked);
        let early = std::mem::take(&mut early_jobs);
        let (outcome, port) =
            run_attempt(&ctx, attempt, &first, early, &used_ports, &conns, &mut interrupts).await;
        used_ports.extend(port);
        let duration = started.elapsed();
        let verdict = match outcome {
            AttemptOutcome::Succeeded => {
                attempts.push(AttemptSummary { attempt, duration, verdict: None });
                close_all(conns).await;
                return finish(RunStatus::Succeeded, attempts).await;
            }
            AttemptOutcome::Interrupted => {
                attempts.push(AttemptSummary { attempt, duration, verdict: None });
                close_all(conns).await;
                return finish(RunStatus::Interrupted, attempts).await;
            }
            AttemptOutcome::NoPort(e) => {
                close_all(conns).await;
                return Err(e);
            }
            AttemptOutcome::Failed(v) => v,
        };
        emit(Event::AttemptFailed { attempt, millis: duration.as_millis() as u64, verdict: verdict.clone() })
            .await;
        let class = verdict.class;
        attempts.push(AttemptSummary { attempt, duration, verdict: Some(verdict) });
        if attempt >= plan.restart.max_restarts || !plan.restart.on.contains(&class) {
            close_all(conns).await;
            return finish(RunStatus::Failed, attempts).await;
        }

        let delay = policy::backoff(&plan.restart, attempt, rand::random::<f64>());
        emit(Event::RestartScheduled { attempt: attempt + 1, delay_ms: delay.as_millis() as u64, class })
            .await;
        let ready = tokio::select! {
            ready = async {
                tokio::time::sleep(delay).await;
                reconnect_all(plan, conns, &events).await
            } => Some(ready),
            _ = interrupts.recv() => None,
        };
        match ready {
            Some(Ok(c)) => conns = c,
            Some(Err((rank, c))) => {
                close_all(c).await;
                let reason = format!(
                    "node {rank} ({}) did not come back within restart.node_wait ({})",
                    plan.nodes[rank].host,
                    humantime::format_duration(plan.restart.node_wait)
                );
                emit(Event::RestartAbandoned { reason }).await;
                return finish(RunStatus::Failed, attempts).await;
            }
            // The connections were moved into the cancelled future; its drop closes them.
            None => return finish(RunStatus::Interrupted, attempts).await,
        }
        attempt += 1;
    }
}

/// Whether the run probes its nodes before the first attempt: for the checks, or to find
/// each node's interface to the master for `rendezvous.interface = "auto"`.
fn will_preflight(plan: &LaunchPlan, options: RunOptions) -> bool {
    options.preflight || plan.interface.as_deref() == Some(crate::plan::AUTO_INTERFACE)
}

/// How the run's preflight probes: the fast checks, the port test with the checks, and a
/// sweep of the config's leftovers first on every node.
fn preflight_options(plan: &LaunchPlan, run_id: &str, options: RunOptions) -> doctor::ProbeOptions {
    doctor::ProbeOptions {
        fast: true,
        test_port: options.preflight,
        presweep: Some(Sweep::Config { spare_run: Some(run_id) }.body(plan)),
    }
}

/// What the preflight leaves the first attempt.
#[derive(Debug, Clone, Default)]
struct Preflighted {
    /// Per node, its interface to the master (for `rendezvous.interface = "auto"`); empty when
    /// not needed.
    interfaces: Vec<String>,
    /// The master port the checks tested, which the first attempt uses.
    port: Option<u16>,
    /// Every node's leftovers were swept as its probe started.
    swept: bool,
}

/// Before the first attempt: the fast preflight checks (unless turned off), which also find
/// each node's interface to the master for `rendezvous.interface = "auto"`, and sweep every
/// node's leftovers as they log in.
async fn preflight(
    plan: &LaunchPlan,
    run_id: &str,
    conns: &[Arc<Connection>],
    options: RunOptions,
    events: &mpsc::Sender<Event>,
    early: Vec<Option<Started>>,
) -> Result<Preflighted, RunError> {
    if !will_preflight(plan, options) {
        return Ok(Preflighted::default());
    }
    let open: Vec<Option<Arc<Connection>>> = conns.iter().cloned().map(Some).collect();
    let (no_errors, no_times) = (vec![None; conns.len()], vec![0; conns.len()]);
    let probe = preflight_options(plan, run_id, options);
    let report = doctor::diagnose(plan, &open, &no_times, &no_errors, &probe, early).await;
    for (rank, lines) in report.swept.iter().enumerate() {
        for event in lines.iter().flat_map(|l| swept_events(rank, &plan.nodes[rank].host, l)) {
            let _ = events.send(event).await;
        }
    }
    let port = match report.port {
        Some(Ok(p)) => Some(p),
        Some(Err(error)) => return Err(RunError::Port { host: plan.master.host.clone(), error }),
        None => None,
    };
    if options.preflight && !report.ok() {
        return Err(RunError::Preflight(report.nodes));
    }
    Ok(Preflighted {
        interfaces: report.route_devs.into_iter().map(Option::unwrap_or_default).collect(),
        port,
        swept: true,
    })
}

/// One SSH master connection per node, all at once, keeping going past failures: for
/// `herd doctor`, which reports every node. Per node: the connection, or the error, and the
/// time it took.
pub async fn connect_each(
    plan: &LaunchPlan,
) -> (Vec<Option<Arc<Connection>>>, Vec<u64>, Vec<Option<String>>) {
    let options = policy::connect_options(&plan.restart, plan.login_timeout);
    let mut set = JoinSet::new();
    for node in &plan.nodes {
        let (transport, rank) = (node.transport.clone(), node.rank);
        set.spawn(async move {
            let started = Instant::now();
            let conn = transport::connect(&transport, options).await;
            (rank, started.elapsed().as_millis() as u64, conn)
        });
    }
    let n = plan.nnodes();
    let (mut conns, mut ms, mut errors) = (vec![None; n], vec![0; n], vec![None; n]);
    while let Some(joined) = set.join_next().await {
        let (rank, took, conn) = joined.expect("connect task panicked");
        ms[rank] = took;
        match conn {
            Ok(c) => conns[rank] = Some(Arc::new(c)),
            Err(e) => errors[rank] = Some(e.to_string()),
        }
    }
    (conns, ms, errors)
}

pub async fn close_each(conns: Vec<Option<Arc<Connection>>>) {
    close_all(conns.into_iter().flatten().collect()).await;
}

/// The agents a node starts as soon as it is connected (see `run`), and, once started, them.
struct EarlyAgents<T> {
    probe: Option<T>,
    job: Option<T>,
}

/// One SSH master connection per node, all at once; on each, as soon as it is up, the agents
/// `early` names for its node, whose logins then overlap the other handshakes. Any failure
/// closes the others: nothing is half-started (an early agent starts nothing before its env,
/// and ends when its stdin closes).
async fn connect_all(
    plan: &LaunchPlan,
    events: &mpsc::Sender<Event>,
    early: impl Fn(&crate::plan::NodePlan) -> EarlyAgents<AgentInvocation>,
) -> Result<(Vec<Arc<Connection>>, Vec<EarlyAgents<Started>>), RunError> {
    let options = policy::connect_options(&plan.restart, plan.login_timeout);
    let mut set = JoinSet::new();
    for node in &plan.nodes {
        let transport = node.transport.clone();
        let (rank, host) = (node.rank, node.host.clone());
        let want = early(node);
        set.spawn(async move {
            let started = Instant::now();
            let conn = transport::connect(&transport, options).await;
            let took = started.elapsed();
            // A start that fails here is tried again, and reported, where the agent is used.
            let mut agents = EarlyAgents { probe: None, job: None };
            if let Ok(c) = &conn {
                if let Some(inv) = want.probe {
                    agents.probe = Started::start(c, inv).await.ok();
                }
                if let Some(inv) = want.job {
                    agents.job = Started::start(c, inv).await.ok();
                }
            }
            (rank, host, took, conn.map(|c| (c, agents)))
        });
    }
    let mut agents: Vec<EarlyAgents<Started>> =
        plan.nodes.iter().map(|_| EarlyAgents { probe: None, job: None }).collect();
    let mut conns: Vec<Option<Arc<Connection>>> = plan.nodes.iter().map(|_| None).collect();
    let mut failure: Option<RunError> = None;
    while let Some(joined) = set.join_next().await {
        let (rank, host, took, conn) = joined.expect("connect task panicked");
        match conn {
            Ok((c, early)) => {
                tracing::debug!(node = rank, %host, "connected in {took:?}");
                let _ = events
                    .send(Event::NodeConnected { node_rank: rank, host, millis: took.as_millis() as u64 })
                    .await;
                conns[rank] = Some(Arc::new(c));
                agents[rank] = early;
            }
            Err(error) => {
                // Report the lowest rank that failed, whatever order they failed in.
                let lower = match &failure {
                    Some(RunError::Connect { node_rank, .. }) => rank < *node_rank,
                    _ => true,
                };
                if lower {
                    failure = Some(RunError::Connect { node_rank: rank, host, error });
                }
            }
        }
    }
    if let Some(err) = failure {
        drop(agents);
        close_all(conns.into_iter().flatten().collect()).await;
        return Err(err);
    }
    Ok((conns.into_iter().map(|c| c.expect("every node connected")).collect(), agents))
}

async fn close_all(conns: Vec<Arc<Connection>>) {
    let mut set = JoinSet::new();
    for conn in conns {
        if let Ok(conn) = Arc::try_unwrap(conn) {
            set.spawn(conn.close());
        }
    }
    while set.join_next().await.is_some() {}
}

/// Before a restart: every node reachable again (a lost one is waited for, up to
/// restart.node_wait). What the earlier attempts left, each node's agent sweeps as the
/// restart starts. On failure, returns the node that could not be reached.
async fn reconnect_all(
    plan: &LaunchPlan,
    conns: Vec<Arc<Connection>>,
    events: &mpsc::Sender<Event>,
) -> Result<Vec<Arc<Connection>>, (usize, Vec<Arc<Connection>>)> {
    let options = policy::connect_options(&plan.restart, plan.login_timeout);
    let deadline = Instant::now() + plan.restart.node_wait;
    let mut set = JoinSet::new();
    for (node, conn) in plan.nodes.iter().zip(conns) {
        let (transport, rank, host, events) =
            (node.transport.clone(), node.rank, node.host.clone(), events.clone());
        set.spawn(async move {
            if conn.check().await.is_ok() {
                return (rank, Some(conn));
            }
            drop(conn);
            loop {
                match transport::connect(&transport, options).await {
                    Ok(c) => return (rank, Some(Arc::new(c))),
                    Err(e) => {
                        let _ = events
                            .send(Event::NodeWaiting {
                                node_rank: rank,
                                host: host.clone(),
                                error: e.to_string(),
                            })
                            .await;
                        if Instant::now() + RECONNECT_EVERY > deadline {
                            return (rank, None);
                        }
                        tokio::time::sleep(RECONNECT_EVERY).await;
                    }
                }
            }
        });
    }
    let mut slots: Vec<Option<Arc<Connection>>> = plan.nodes.iter().map(|_| None).collect();
    let mut missing = None;
    while let Some(joined) = set.join_next().await {
        let (rank, conn) = joined.expect("reconnect task panicked");
        match conn {
            Some(c) => slots[rank] = Some(c),
            None => missing = Some(missing.map_or(rank, |m: usize| m.min(rank))),
        }
    }
    let conns: Vec<Arc<Connection>> = slots.iter().flatten().cloned().collect();
    match missing {
        Some(rank) => Err((rank, conns)),
        None => Ok(conns),
    }
}

/// What a sweep stops, and which containers it removes.
#[derive(Debug, Clone, Copy)]
enum Sweep<'a> {
    /// Before a run (in the agents of its preflight and first attempt) and `herd kill`: every
    /// leftover of the config. A process whose agent is alive belongs to a live run, of this
    /// machine or another, and is never touched. The containers of `spare_run` are kept (they
    /// are the run's own, starting on other nodes).
    Config { spare_run: Option<&'a str> },
    /// In the agents of a restart: everything of the run's earlier attempts, live agent or not
    /// (an agent cut off from herd may not know it yet), and nothing of this attempt's, which
    /// other nodes on the same host may already have started.
    Restart { run_id: &'a str, attempt: u32 },
}

impl Sweep<'_> {
    /// The shell for a shell where `procs.sh` is defined: stop the processes, then, with
    /// `[container]`, remove the containers they leave.
    fn body(self, plan: &LaunchPlan) -> String {
        let grace = policy::grace_secs(plan.restart.grace_period);
        let key = &plan.config_key;
        let (mut body, containers, spare) = match self {
            Sweep::Config { spare_run } => (
                remote::sweep_call(&plan.marker_prefix(None), SweepScope::Leftovers, grace),
                crate::container::name_prefix(key, None),
                spare_run.map(|run| crate::container::name_prefix(key, Some(run))),
            ),
            Sweep::Restart { run_id, attempt } => {
                let prefix = plan.marker_prefix(Some(run_id));
                let current = format!("{prefix}{attempt}:");
                (
                    remote::sweep_call(&prefix, SweepScope::AllBut(&current), grace),
                    crate::container::name_prefix(key, Some(run_id)),
                    Some(crate::container::attempt_prefix(key, run_id, attempt)),
                )
            }
        };
        if let Some(c) = &plan.container {
            // The processes first (their runtime clients among them), then what they leave.
            body = format!("{body}; ({})", c.sweep_command(&containers, spare.as_deref()));
        }
        body
    }
}

/// The events for what a sweep on one node printed: stopped pids, removed containers.
fn swept_events(node_rank: usize, host: &str, out: &str) -> Vec<Event> {
    let mut events = Vec::new();
    let pids = remote::parse_pids(out);
    if !pids.is_empty() {
        events.push(Event::LeftoversStopped { node_rank, host: host.to_string(), pids });
    }
    let names = crate::container::parse_removed(out);
    if !names.is_empty() {
        events.push(Event::ContainersRemoved { node_rank, host: host.to_string(), names });
    }
    events
}

/// Sweep the given nodes (rank, connection), all at once.
async fn sweep_nodes(
    plan: &LaunchPlan,
    nodes: impl IntoIterator<Item = (usize, Arc<Connection>)>,
    sweep: Sweep<'_>,
    events: &mpsc::Sender<Event>,
) {
    let command = remote::with_procs(&sweep.body(plan));
    let mut set = JoinSet::new();
    for (rank, conn) in nodes {
        let command = command.clone();
        set.spawn(async move { (rank, conn.output(&command).await) });
    }
    while let Some(joined) = set.join_next().await {
        let (node_rank, out) = joined.expect("sweep task panicked");
        let host = &plan.nodes[node_rank].host;
        match out {
            Ok(out) => {
                for event in swept_events(node_rank, host, &String::from_utf8_lossy(&out.stdout)) {
                    let _ = events.send(event).await;
                }
            }
            Err(e) => tracing::warn!(node = node_rank, %host, "cannot look for leftover processes: {e}"),
        }
    }
}

/// `herd kill`: connect to every node and stop whatever is left of earlier runs of this
/// config. The caller holds the config's run lock, so no run of it is live. Returns the
/// events it produced (connections and stopped leftovers).
pub async fn kill_leftovers(plan: &LaunchPlan) -> Result<Vec<Event>, RunError> {
    let (tx, mut rx) = mpsc::channel(plan.nnodes() * 2 + 16);
    let collect = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(e) = rx.recv().await {
            seen.push(e);
        }
        seen
    });
    let nothing = |_: &crate::plan::NodePlan| EarlyAgents { probe: None, job: None };
    let conns = connect_all(plan, &tx, nothing).await.map(|(conns, _)| conns);
    if let Ok(conns) = &conns {
        sweep_nodes(plan, conns.iter().cloned().enumerate(), Sweep::Config { spare_run: None }, &tx).await;
    }
    drop(tx);
    let seen = collect.await.expect("event collector");
    close_all(conns?).await;
    Ok(seen)
}

enum AttemptOutcome {
    Succeeded,
    Failed(Verdict),
    Interrupted,
    /// No master port could be chosen: nothing started.
    NoPort(RunError),
}

struct AttemptContext<'a> {
    plan: &'a LaunchPlan,
    run_id: &'a str,
    rules: &'a RuleTable,
    progress: Option<Arc<Regex>>,
    crash: Option<Arc<regex::bytes::Regex>>,
    interfaces: &'a [String],
    events: &'a mpsc::Sender<Event>,
}

/// Why herd is stopping the attempt's nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopping {
    NodeFailed,
    Hang,
    Interrupted,
}

/// Start every node, wait for all of them, and stop the whole gang as soon as one fails,
/// goes silent, or the job stops making progress. Every node's agent logs in at once and
/// sweeps; the master's also reports its ports in use, unless the port is known (fixed, or
/// tested by the preflight), and herd chooses one that `used_ports` does not hold. Only then
/// does any node get its env, and start. Returns how it went and the port it used.
#[allow(clippy::too_many_arguments)]
async fn run_attempt(
    ctx: &AttemptContext<'_>,
    attempt: u32,
    preflighted: &Preflighted,
    mut early: Vec<Option<Started>>,
    used_ports: &BTreeSet<u16>,
    conns: &[Arc<Connection>],
    interrupts: &mut Interrupts,
) -> (AttemptOutcome, Option<u16>) {
    let plan = ctx.plan;
    let events = ctx.events;
    let _ = events.send(Event::AttemptStarting { attempt }).await;
    let known_port = preflighted.port.or(match plan.master.port {
        PortSpec::Fixed(p) => Some(p),
        PortSpec::Auto => None,
    });
    let unported = AttemptValues { run_id: ctx.run_id, attempt, master_port: 0, interfaces: ctx.interfaces };
    let liveness = Arc::new(Liveness::new(plan.nnodes()));
    let (stop_tx, stop_rx) = watch::channel(Stop::Run);
    let (fatal_tx, mut fatal_rx) = mpsc::unbounded_channel();
    let fatal = ctx.crash.clone().map(|pattern| node::FatalWatch { pattern, report: fatal_tx });
    let (probe_tx, probe_rx) = watch::channel(0u32);
    let (answers_tx, mut answers_rx) = mpsc::unbounded_channel();
    let probe = node::ProbeLink { asks: probe_rx, answers: answers_tx };
    let failing = Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
    let quick_launcher_exit = plan.quick_launcher_exit().then(|| failing.clone());
    let (ports_tx, mut ports_rx) = mpsc::unbounded_channel();
    let mut envs = Vec::new();
    let mut set = JoinSet::new();
    for node in &plan.nodes {
        let (env_tx, env_rx) = oneshot::channel();
        envs.push(Some(env_tx));
        let report_ports = known_port.is_none() && node.rank == plan.master.node_rank;
        let run = node::NodeRun {
            node_rank: node.rank,
            host: node.host.clone(),
            attempt,
            invocation: job_invocation(
                plan,
                ctx.run_id,
                node,
                attempt,
                known_port.is_some(),
                preflighted.swept,
            ),
            early: early.get_mut(node.rank).and_then(Option::take),
            env: env_rx,
            ports: report_ports.then(|| ports_tx.clone()),
            liveness: liveness.clone(),
            progress_pattern: ctx.progress.clone(),
            fatal: fatal.clone(),
            probe: Some(probe.clone()),
            quick_launcher_exit: quick_launcher_exit.clone(),
        };
        set.spawn(node::run(conns[node.rank].clone(), run, stop_rx.clone(), events.clone()));
    }
    drop(ports_tx);
    // The port is known: every node gets its env, and the job starts.
    let start = |port: u16, envs: &mut Vec<Option<oneshot::Sender<Vec<u8>>>>| {
        let values = AttemptValues { master_port: port, ..unported };
        for (node, env) in plan.nodes.iter().zip(envs.iter_mut()) {
            if let Some(env) = env.take() {
                let _ = env.send(node.env_block(&values));
            }
        }
        Event::AttemptStarted { attempt, master_addr: plan.master.addr.clone(), master_port: port }
    };
    let mut port = known_port;
    if let Some(p) = port {
        let _ = events.send(start(p, &mut envs)).await;
    }
    let mut no_port = None;

    let mut results: Vec<Option<node::NodeResult>> = plan.nodes.iter().map(|_| None).collect();
    // A hang found, the agents asked for their processes: until when herd waits, and why.
    let mut probing: Option<(tokio::time::Instant, String)> = None;
    let mut processes: Vec<Vec<remote::ProcessState>> = plan.nodes.iter().map(|_| Vec::new()).collect();
    let mut answered: BTreeSet<usize> = BTreeSet::new();
    let mut stopping: Option<(Stopping, Duration)> = None;
    // Nodes given up on for their silence, and how each one is lost.
    let mut silent: std::collections::BTreeMap<usize, String> = std::collections::BTreeMap::new();
    let mut kill_at: Option<tokio::time::Instant> = None;
    let mut interrupts_open = true;
    let mut tick = tokio::time::interval(TICK);
    // After a stall, one late tick, not a burst of them.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_tick = Instant::now();
    // `node`: the node whose own failure stops the attempt, if it is still running.
    let stop_all =
        |why: Stopping, node: Option<usize>, reason: String, stopping: &mut Option<(Stopping, Duration)>| {
            if stopping.is_some() {
                return None;
            }
            *stopping = Some((why, liveness.elapsed()));
            failing.store(node.unwrap_or(usize::MAX), std::sync::atomic::Ordering::Relaxed);
            let _ = stop_tx.send(Stop::Term);
            Some(Event::TeardownStarted { attempt, reason })
        };
    loop {
        let kill_timer = async {
            match kill_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let probe_timer = async {
            match &probing {
                Some((at, _)) => tokio::time::sleep_until(*at).await,
                None => std::future::pending().await,
            }
        };
        let mut teardown = None;
        tokio::select! {
            Some(in_use) = ports_rx.recv(), if port.is_none() && stopping.is_none() => {
                match port::choose(plan.master.port, plan.master.port_range, in_use.as_ref(), used_ports) {
                    Ok(p) => {
                        port = Some(p);
                        let _ = events.send(start(p, &mut envs)).await;
                    }
                    Err(error) => {
                        let error = RunError::Port { host: plan.master.host.clone(), error };
                        teardown = stop_all(Stopping::NodeFailed, None, error.to_string(), &mut stopping);
                        no_port = Some(error);
                    }
                }
            }
            joined = set.join_next() => {
                let Some(joined) = joined else { break };
                let mut result = joined.expect("node task panicked");
                if let Some(why) = silent.get(&result.node_rank) {
                    result.exit = NodeExit::Lost(why.clone());
                }
                if !result.exit.success() {
                    let host = &plan.nodes[result.node_rank].host;
                    let reason = format!("node {} ({host}) failed: {}", result.node_rank, result.exit);
                    teardown = stop_all(Stopping::NodeFailed, None, reason, &mut stopping);
                }
                let rank = result.node_rank;
                results[rank] = Some(result);
            }
            // A node said one of its processes was killed: it has failed, and its launcher
            // will only take time to wind down. Stop every node now.
            Some((rank, line)) = fatal_rx.recv() => {
                let host = &plan.nodes[rank].host;
                let reason = format!("node {rank} ({host}) failed: {}", line.trim());
                teardown = stop_all(Stopping::NodeFailed, Some(rank), reason, &mut stopping);
            }
            got = interrupts.recv(), if interrupts_open => {
                match got {
                    None => interrupts_open = false,
                    Some(()) if stopping.is_some_and(|(why, _)| why == Stopping::Interrupted) => {
                        let _ = stop_tx.send(Stop::Kill);
                    }
                    Some(()) => {
                        // An interrupt overrides whatever else was stopping the attempt.
                        stopping = None;
                        teardown = stop_all(Stopping::Interrupted, None, "interrupted".into(), &mut stopping);
                    }
                }
            }
            Some((rank, seen)) = answers_rx.recv() => {
                processes[rank] = seen;
                answered.insert(rank);
                let running = |r: &usize| results[*r].is_none();
                if probing.is_some() && (0..plan.nnodes()).filter(running).all(|r| answered.contains(&r)) {
                    let (_, reason) = probing.take().expect("checked");
                    teardown = stop_all(Stopping::Hang, None, reason, &mut stopping);
                }
            }
            () = probe_timer => {
                let (_, reason) = probing.take().expect("armed");
                teardown = stop_all(Stopping::Hang, None, reason, &mut stopping);
            }
            _ = tick.tick() => {
                let gap = last_tick.elapsed();
                last_tick = Instant::now();
                if gap >= STALLED {
                    tracing::warn!(
                        "herd was not running for {} (suspended or starved): every node gets a fresh {} to be heard",
                        humantime::format_duration(round_secs(gap)),
                        humantime::format_duration(plan.restart.heartbeat_timeout)
                    );
                    liveness.forgive();
                }
                if stopping.is_none() && probing.is_none() {
                    if let Some(limit) = plan.restart.hang_timeout {
                        let idle = liveness.since_progress();
                        if idle >= limit {
                            // First the evidence: which process each node's job is in, and its state.
                            let reason = format!("no progress for {}", humantime::format_duration(round_secs(idle)));
                            let _ = probe_tx.send(1);
                            probing = Some((tokio::time::Instant::now() + PROBE_WAIT, reason));
                        }
                    }
                }
                for node in &plan.nodes {
                    if results[node.rank].is_some() || silent.contains_key(&node.rank) {
                        continue;
                    }
                    let heard = liveness.has_heard(node.rank).then(|| liveness.since_heard(node.rank));
                    if let Some((reason, why)) = judge_silence(plan, node, heard, liveness.elapsed()) {
                        silent.insert(node.rank, why);
                        if teardown.is_none() {
                            teardown = stop_all(Stopping::NodeFailed, None, reason, &mut stopping);
                        }
                        // It cannot act on `term`; stop waiting for it soon.
                        let _ = stop_tx.send(Stop::Kill);
                    }
                }
            }
            () = kill_timer => {
                kill_at = None;
                let _ = stop_tx.send(Stop::Kill);
            }
        }
        if let Some(event) = teardown {
            let _ = events.send(event).await;
            kill_at.get_or_insert(tokio::time::Instant::now() + plan.restart.grace_period);
        }
    }

    let stop = stopping;
    if matches!(stop, Some((Stopping::Interrupted, _))) {
        return (AttemptOutcome::Interrupted, port);
    }
    if let Some(error) = no_port {
        return (AttemptOutcome::NoPort(error), None);
    }
    let outcomes: Vec<NodeOutcome> = results
        .into_iter()
        .flatten()
        .map(|r| NodeOutcome {
            node_rank: r.node_rank,
            host: plan.nodes[r.node_rank].host.clone(),
            first_rank: plan.nodes[r.node_rank].global_ranks().start,
            stop_requested_at: stop.map(|(_, at)| at).filter(|at| *at < r.ended_at),
            exit: r.exit,
            ended_at: r.ended_at,
            lines: r.tail,
            processes: std::mem::take(&mut processes[r.node_rank]),
        })
        .collect();
    let trigger = if matches!(stop, Some((Stopping::Hang, _))) { Trigger::Hang } else { Trigger::NodeFailed };
    let outcome = match classify::classify(&outcomes, trigger, ctx.rules) {
        Some(verdict) => AttemptOutcome::Failed(verdict),
        None => {
            let _ = events
                .send(Event::AttemptSucceeded { attempt, millis: liveness.elapsed().as_millis() as u64 })
                .await;
            AttemptOutcome::Succeeded
        }
    };
    (outcome, port)
}

/// The agent of one node's job in one attempt. `port_known`: the master need not report its
/// ports; `swept`: the preflight swept the node already.
fn job_invocation(
    plan: &LaunchPlan,
    run_id: &str,
    node: &crate::plan::NodePlan,
    attempt: u32,
    port_known: bool,
    swept: bool,
) -> AgentInvocation {
    // What the agent needs before the port is known: the marker and the container's name.
    let unported = AttemptValues { run_id, attempt, master_port: 0, interfaces: &[] };
    let presweep = match attempt {
        _ if swept => None,
        0 => Some(Sweep::Config { spare_run: Some(run_id) }),
        _ => Some(Sweep::Restart { run_id, attempt }),
    };
    AgentInvocation {
        grace_secs: policy::grace_secs(plan.restart.grace_period),
        heartbeat_secs: policy::heartbeat_interval(plan.restart.heartbeat_timeout).as_secs(),
        marker: node.marker(&unported),
        job: plan.job_snippet(node),
        cleanup: plan.container_cleanup(node, &unported),
        presweep: presweep.map(|sweep| sweep.body(plan)),
        report_ports: !port_known && node.rank == plan.master.node_rank,
    }
}

/// Whether a node still running is lost for its silence: `(teardown reason, how it is lost)`.
/// `silent_for`: how long since its agent last spoke, `None` before it first did (its login
/// shell is still starting, judged by `ssh.login_timeout`, not by the heartbeat). Pure.
fn judge_silence(
    plan: &LaunchPlan,
    node: &crate::plan::NodePlan,
    silent_for: Option<Duration>,
    attempt_age: Duration,
) -> Option<(String, String)> {
    let who = format!("node {} ({})", node.rank, node.host);
    match silent_for {
        None if attempt_age >= plan.login_timeout => {
            let limit = humantime::format_duration(plan.login_timeout);
            Some((
                format!("{who} is silent: its login shell has not started the agent in {limit}"),
                format!("its login shell did not start the agent within ssh.login_timeout ({limit}): a shell init (conda, pyenv, module) may be stuck"),
            ))
        }
        Some(silent) if silent >= plan.restart.heartbeat_timeout => Some((
            format!("{who} is silent: no heartbeat"),
            format!("no heartbeat for {}", humantime::format_duration(plan.restart.heartbeat_timeout)),
        )),
        _ => None,
    }
}

fn round_secs(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> LaunchPlan {
        let text = "[ssh]\nlogin_timeout = \"2m\"\n[[nodes]]\nhost = \"n[1-2]\"\n[job]\nscript = \"t.py\"\n[restart]\nheartbeat_timeout = \"15s\"\n";
        let config = crate::config::parse(std::path::Path::new("c.toml"), text).unwrap();
        crate::plan::build(&config, &Default::default())
    }

    #[test]
    fn silence_counts_from_the_agents_first_word_and_a_login_has_its_own_limit() {
        let p = plan();
        let node = &p.nodes[1];
        let secs = Duration::from_secs;
        // Logging in for 100 s: no heartbeat is missed yet; after 2 minutes the login is stuck.
        assert_eq!(judge_silence(&p, node, None, secs(100)), None);
        let (reason, why) = judge_silence(&p, node, None, secs(120)).unwrap();
        assert!(reason.starts_with("node 1 (n2) is silent: its login shell"), "{reason}");
        assert!(why.contains("ssh.login_timeout (2m)"), "{why}");
        // Once it spoke, the heartbeat timeout applies, whatever the attempt's age.
        assert_eq!(judge_silence(&p, node, Some(secs(14)), secs(600)), None);
        let (reason, why) = judge_silence(&p, node, Some(secs(15)), secs(20)).unwrap();
        assert_eq!(
            (reason.as_str(), why.as_str()),
            ("node 1 (n2) is silent: no heartbeat", "no heartbeat for 15s")
        );
    }
}
