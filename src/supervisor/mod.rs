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
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::classify::{self, NodeOutcome, RuleTable, Trigger, Verdict};
use crate::config::PortSpec;
use crate::doctor;
use crate::events::{Event, NodeExit, RunStatus};
use crate::plan::{AttemptValues, LaunchPlan};
use crate::port;
use crate::remote::{self, AgentInvocation, SweepScope};
use crate::transport::{self, Connection, TransportError};

use node::Liveness;
pub use node::{Stop, READ_SIZE};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("preflight failed: {}", first_failure(.0))]
    Preflight(Vec<doctor::NodeChecks>),
    #[error("node {node_rank} ({host}): ssh: {error}\n  fix: {}", transport::connect_fix(&error.to_string()))]
    Connect { node_rank: usize, host: String, error: TransportError },
    #[error("master node {host}: cannot read its socket tables to choose a port: {detail}")]
    PortProbe { host: String, detail: String },
    #[error("master node {host}: no free port in {lo}-{hi}")]
    NoFreePort { host: String, lo: u16, hi: u16 },
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

    // Nothing has started yet: an interrupt here just ends the run. As soon as the master is
    // connected, and while the other handshakes go on, its leftovers are swept (one could hold
    // the fixed port) and the first attempt's port is chosen. Every other node sweeps its own
    // in the agent that starts the job: herd runs one remote command per node, as pdsh does.
    let at_master = |master: Arc<Connection>| {
        let events = events.clone();
        async move {
            // At once: a port a leftover still holds is only avoided, and a fixed port is free
            // once the sweep is done, which is before anything starts.
            let sweep = sweep_nodes(plan, [(plan.master.node_rank, master.clone())], Sweep::CONFIG, &events);
            let none = BTreeSet::new();
            let ((), port) = tokio::join!(sweep, choose_port(plan, &master, &none));
            port
        }
    };
    let connected = tokio::select! {
        conns = connect_all(plan, &events, Some(at_master)) => Some(conns?),
        _ = interrupts.recv() => None,
    };
    let Some((mut conns, mut first_port)) = connected else {
        return finish(RunStatus::Interrupted, vec![]).await;
    };

    let rules = RuleTable::new(&plan.restart.rules);
    let progress = plan.restart.progress_pattern.as_deref().and_then(|p| Regex::new(p).ok()).map(Arc::new);
    let crash = rules.crash_pattern().map(Arc::new);
    let mut used_ports = BTreeSet::new();
    let mut attempts = Vec::new();
    let mut attempt = 0;
    let mut interfaces = Vec::new();
    loop {
        let port = match first_port.take() {
            Some(chosen) => chosen,
            None => choose_port(plan, &conns[plan.master.node_rank], &used_ports).await,
        };
        let port = match port {
            Ok(p) => p,
            Err(e) => {
                close_all(conns).await;
                return Err(e);
            }
        };
        if attempt == 0 {
            if options.preflight {
                emit(Event::PreflightStarted { nnodes: plan.nnodes() }).await;
            }
            let checked = tokio::select! {
                checked = preflight(plan, &conns, options, port) => Some(checked),
                _ = interrupts.recv() => None,
            };
            match checked {
                Some(Ok(found)) => interfaces = found,
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
        used_ports.insert(port);
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
        let outcome = run_attempt(&ctx, attempt, port, &conns, &mut interrupts).await;
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
                prepare_restart(plan, run_id, conns, &events).await
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

/// Before the first attempt: the fast preflight checks (unless turned off), which also find
/// each node's interface to the master for `rendezvous.interface = "auto"`. Returns those
/// interfaces (empty when not needed).
async fn preflight(
    plan: &LaunchPlan,
    conns: &[Arc<Connection>],
    options: RunOptions,
    port: u16,
) -> Result<Vec<String>, RunError> {
    let auto_interface = plan.interface.as_deref() == Some(crate::plan::AUTO_INTERFACE);
    if !options.preflight && !auto_interface {
        return Ok(Vec::new());
    }
    let open: Vec<Option<Arc<Connection>>> = conns.iter().cloned().map(Some).collect();
    let (no_errors, no_times) = (vec![None; conns.len()], vec![0; conns.len()]);
    let report =
        doctor::diagnose(plan, &open, &no_times, &no_errors, options.preflight.then_some(port), true).await;
    if options.preflight && !report.ok() {
        return Err(RunError::Preflight(report.nodes));
    }
    Ok(report.route_devs.into_iter().map(Option::unwrap_or_default).collect())
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

/// One SSH master connection per node, all at once. Any failure closes the others: nothing
/// is half-started. `at_master` runs on the master as soon as it is connected, while the
/// other handshakes go on; its result is returned with the connections.
async fn connect_all<F, Fut>(
    plan: &LaunchPlan,
    events: &mpsc::Sender<Event>,
    at_master: Option<F>,
) -> Result<(Vec<Arc<Connection>>, Option<Fut::Output>), RunError>
where
    F: FnOnce(Arc<Connection>) -> Fut,
    Fut: std::future::Future,
{
    let options = policy::connect_options(&plan.restart, plan.login_timeout);
    let mut set = JoinSet::new();
    for node in &plan.nodes {
        let transport = node.transport.clone();
        let (rank, host) = (node.rank, node.host.clone());
        set.spawn(async move {
            let started = Instant::now();
            let conn = transport::connect(&transport, options).await;
            (rank, host, started.elapsed(), conn)
        });
    }
    let mut at_master = at_master;
    let mut early = std::pin::pin!(None);
    let mut early_result = None;
    let mut conns: Vec<Option<Arc<Connection>>> = plan.nodes.iter().map(|_| None).collect();
    let mut failure: Option<RunError> = None;
    loop {
        let joined = tokio::select! {
            joined = set.join_next() => match joined {
                Some(joined) => joined,
                None => break,
            },
            out = async { early.as_mut().as_pin_mut().expect("polled only while set").await }, if early.is_some() => {
                early_result = Some(out);
                early.set(None);
                continue;
            }
        };
        let (rank, host, took, conn) = joined.expect("connect task panicked");
        match conn {
            Ok(c) => {
                tracing::debug!(node = rank, %host, "connected in {took:?}");
                let _ = events
                    .send(Event::NodeConnected { node_rank: rank, host, millis: took.as_millis() as u64 })
                    .await;
                let c = Arc::new(c);
                if rank == plan.master.node_rank {
                    if let Some(f) = at_master.take() {
                        early.set(Some(f(c.clone())));
                    }
                }
                conns[rank] = Some(c);
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
    if let Some(f) = early.as_mut().as_pin_mut() {
        early_result = Some(f.await);
    }
    // Dropping the early work lets go of its hold on the master, which can then be closed.
    early.set(None);
    if let Some(err) = failure {
        close_all(conns.into_iter().flatten().collect()).await;
        return Err(err);
    }
    Ok((conns.into_iter().map(|c| c.expect("every node connected")).collect(), early_result))
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
/// restart.node_wait), and nothing of this run left on any of them. On failure, returns the
/// node that could not be reached.
async fn prepare_restart(
    plan: &LaunchPlan,
    run_id: &str,
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
    if let Some(rank) = missing {
        return Err((rank, conns));
    }
    sweep_nodes(plan, all_nodes(&conns), Sweep::run(run_id), events).await;
    Ok(conns)
}

/// What a sweep stops: this config's leftovers (processes whose agent is gone, of any run),
/// or everything of one of this herd's own runs; and which containers it removes.
#[derive(Debug, Clone, Copy)]
struct Sweep<'a> {
    run_id: Option<&'a str>,
    /// Containers of this run are kept (they are the run's own, starting on other nodes).
    spare_containers_of: Option<&'a str>,
}

impl<'a> Sweep<'a> {
    /// Before a run, and `herd kill`: every leftover of the config. A process whose agent is
    /// alive belongs to a live run, of this machine or another, and is never touched.
    const CONFIG: Sweep<'static> = Sweep { run_id: None, spare_containers_of: None };

    /// Before a restart: everything of this run's earlier attempts, live agent or not (an
    /// agent cut off from herd may not know it yet).
    fn run(run_id: &'a str) -> Sweep<'a> {
        Sweep { run_id: Some(run_id), spare_containers_of: None }
    }

    /// In a node's agent, as the run starts: the config's leftovers, and its containers but
    /// this run's.
    fn in_agent(run_id: &'a str) -> Sweep<'a> {
        Sweep { run_id: None, spare_containers_of: Some(run_id) }
    }

    /// The shell for a shell where `procs.sh` is defined: stop the processes, then, with
    /// `[container]`, remove the containers they leave.
    fn body(self, plan: &LaunchPlan) -> String {
        let scope = if self.run_id.is_some() { SweepScope::All } else { SweepScope::Leftovers };
        let mut body = remote::sweep_call(
            &plan.marker_prefix(self.run_id),
            scope,
            policy::grace_secs(plan.restart.grace_period),
        );
        if let Some(c) = &plan.container {
            // The processes first (their runtime clients among them), then what they leave.
            let prefix = crate::container::name_prefix(&plan.config_key, self.run_id);
            let spare = self
                .spare_containers_of
                .map(|run| crate::container::name_prefix(&plan.config_key, Some(run)));
            body = format!("{body}; ({})", c.sweep_command(&prefix, spare.as_deref()));
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

fn all_nodes(conns: &[Arc<Connection>]) -> impl Iterator<Item = (usize, Arc<Connection>)> + '_ {
    conns.iter().cloned().enumerate()
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
    let conns = connect_all(plan, &tx, None::<fn(Arc<Connection>) -> std::future::Ready<()>>).await;
    if let Ok((conns, _)) = &conns {
        sweep_nodes(plan, all_nodes(conns), Sweep::CONFIG, &tx).await;
    }
    drop(tx);
    let seen = collect.await.expect("event collector");
    close_all(conns?.0).await;
    Ok(seen)
}

/// The master port for an attempt: the fixed one, or a free one on the master node itself
/// that no earlier attempt of this run used.
pub(crate) async fn choose_port(
    plan: &LaunchPlan,
    master: &Connection,
    avoid: &BTreeSet<u16>,
) -> Result<u16, RunError> {
    let host = plan.master.host.clone();
    let range = plan.master.port_range;
    match plan.master.port {
        PortSpec::Fixed(p) => Ok(p),
        PortSpec::Auto => {
            let picked = match master {
                Connection::Local => port::pick(range, avoid, portpicker::is_free),
                Connection::Ssh(_) => {
                    let out = master
                        .output(port::SOCKET_TABLES_COMMAND)
                        .await
                        .map_err(|e| RunError::PortProbe { host: host.clone(), detail: e.to_string() })?;
                    let tables = String::from_utf8_lossy(&out.stdout);
                    if !out.status.success() || tables.trim().is_empty() {
                        return Err(RunError::PortProbe {
                            host,
                            detail: format!(
                                "`{}` failed: {}",
                                port::SOCKET_TABLES_COMMAND,
                                String::from_utf8_lossy(&out.stderr).trim()
                            ),
                        });
                    }
                    let used = port::ports_in_use(&tables);
                    port::pick(range, avoid, |p| !used.contains(&p))
                }
            };
            picked.ok_or(RunError::NoFreePort { host, lo: range.0, hi: range.1 })
        }
    }
}

enum AttemptOutcome {
    Succeeded,
    Failed(Verdict),
    Interrupted,
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
/// goes silent, or the job stops making progress.
async fn run_attempt(
    ctx: &AttemptContext<'_>,
    attempt: u32,
    master_port: u16,
    conns: &[Arc<Connection>],
    interrupts: &mut Interrupts,
) -> AttemptOutcome {
    let plan = ctx.plan;
    let events = ctx.events;
    let _ = events
        .send(Event::AttemptStarted { attempt, master_addr: plan.master.addr.clone(), master_port })
        .await;
    let values = AttemptValues { run_id: ctx.run_id, attempt, master_port, interfaces: ctx.interfaces };
    let liveness = Arc::new(Liveness::new(plan.nnodes()));
    let (stop_tx, stop_rx) = watch::channel(Stop::Run);
    let (fatal_tx, mut fatal_rx) = mpsc::unbounded_channel();
    let fatal = ctx.crash.clone().map(|pattern| node::FatalWatch { pattern, report: fatal_tx });
    let (probe_tx, probe_rx) = watch::channel(0u32);
    let (answers_tx, mut answers_rx) = mpsc::unbounded_channel();
    let probe = node::ProbeLink { asks: probe_rx, answers: answers_tx };
    let failing = Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
    let quick_launcher_exit = plan.quick_launcher_exit().then(|| failing.clone());
    let mut set = JoinSet::new();
    for node in &plan.nodes {
        let run = node::NodeRun {
            node_rank: node.rank,
            host: node.host.clone(),
            attempt,
            invocation: AgentInvocation {
                grace_secs: policy::grace_secs(plan.restart.grace_period),
                heartbeat_secs: policy::heartbeat_interval(plan.restart.heartbeat_timeout).as_secs(),
                marker: node.marker(&values),
                job: plan.job_snippet(node),
                cleanup: plan.container_cleanup(node, &values),
                // The master was swept before its port was chosen; the others sweep here.
                presweep: (attempt == 0 && node.rank != plan.master.node_rank)
                    .then(|| Sweep::in_agent(ctx.run_id).body(plan)),
            },
            env_block: node.env_block(&values),
            liveness: liveness.clone(),
            progress_pattern: ctx.progress.clone(),
            fatal: fatal.clone(),
            probe: Some(probe.clone()),
            quick_launcher_exit: quick_launcher_exit.clone(),
        };
        set.spawn(node::run(conns[node.rank].clone(), run, stop_rx.clone(), events.clone()));
    }

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
        return AttemptOutcome::Interrupted;
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
    match classify::classify(&outcomes, trigger, ctx.rules) {
        Some(verdict) => AttemptOutcome::Failed(verdict),
        None => {
            let _ = events
                .send(Event::AttemptSucceeded { attempt, millis: liveness.elapsed().as_millis() as u64 })
                .await;
            AttemptOutcome::Succeeded
        }
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
