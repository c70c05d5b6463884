//! Executes a launch plan: connect to every node, choose the master port, start every node
//! as one gang, stop the whole gang when one node fails or the user interrupts, and report
//! everything as events. It never prints.

mod node;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::config::PortSpec;
use crate::events::{Event, FirstFailure, RunStatus};
use crate::plan::{AttemptValues, LaunchPlan};
use crate::remote::{self, AgentInvocation};
use crate::transport::{self, Connection, TransportError};
use crate::{classify, port};

pub use node::Stop;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("node {node_rank} ({host}): {error}")]
    Connect { node_rank: usize, host: String, error: TransportError },
    #[error("master node {host}: cannot read its socket tables to choose a port: {detail}")]
    PortProbe { host: String, detail: String },
    #[error("master node {host}: no free port in {lo}-{hi}")]
    NoFreePort { host: String, lo: u16, hi: u16 },
}

/// How the run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    pub status: RunStatus,
    pub attempts: u32,
    pub first_failure: Option<FirstFailure>,
}

/// Requests from outside the run: each one is a Ctrl-C / SIGTERM. The first stops the job
/// gracefully, the second kills it.
pub type Interrupts = mpsc::UnboundedReceiver<()>;

pub async fn run(
    plan: &LaunchPlan,
    run_id: &str,
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
        launcher: plan.launcher.as_str(),
        nnodes: plan.nnodes(),
        world_size: plan.world_size,
        hosts: plan.nodes.iter().map(|n| n.host.clone()).collect(),
        log_dir: plan.logs_dir.join(run_id).display().to_string(),
    })
    .await;

    // Nothing has started yet: an interrupt here just ends the run.
    let prepared = tokio::select! {
        prepared = prepare(plan, &events) => Some(prepared?),
        _ = interrupts.recv() => None,
    };
    let Some((conns, master_port)) = prepared else {
        emit(Event::RunFinished { status: RunStatus::Interrupted, attempts: 0 }).await;
        return Ok(RunOutcome { status: RunStatus::Interrupted, attempts: 0, first_failure: None });
    };

    let attempt = 0;
    let outcome = run_attempt(plan, run_id, attempt, master_port, &conns, &events, &mut interrupts).await;
    close_all(conns).await;

    let status = match &outcome {
        AttemptOutcome::Succeeded => RunStatus::Succeeded,
        AttemptOutcome::Failed(_) => RunStatus::Failed,
        AttemptOutcome::Interrupted => RunStatus::Interrupted,
    };
    emit(Event::RunFinished { status, attempts: attempt + 1 }).await;
    Ok(RunOutcome {
        status,
        attempts: attempt + 1,
        first_failure: match outcome {
            AttemptOutcome::Failed(f) => Some(f),
            _ => None,
        },
    })
}

/// Connections to every node and the first attempt's master port.
async fn prepare(
    plan: &LaunchPlan,
    events: &mpsc::Sender<Event>,
) -> Result<(Vec<Arc<Connection>>, u16), RunError> {
    let conns = connect_all(plan, events).await?;
    match choose_port(plan, &conns[plan.master.node_rank], &BTreeSet::new()).await {
        Ok(port) => Ok((conns, port)),
        Err(e) => {
            close_all(conns).await;
            Err(e)
        }
    }
}

/// One SSH master connection per node, all at once. Any failure closes the others: nothing
/// is half-started.
async fn connect_all(
    plan: &LaunchPlan,
    events: &mpsc::Sender<Event>,
) -> Result<Vec<Arc<Connection>>, RunError> {
    let alive_interval = plan.restart.heartbeat_timeout / 3;
    let mut set = JoinSet::new();
    for node in &plan.nodes {
        let transport = node.transport.clone();
        let (rank, host) = (node.rank, node.host.clone());
        set.spawn(async move {
            let started = Instant::now();
            let conn = transport::connect(&transport, alive_interval).await;
            (rank, host, started.elapsed(), conn)
        });
    }
    let mut conns: Vec<Option<Connection>> = plan.nodes.iter().map(|_| None).collect();
    let mut failure: Option<RunError> = None;
    while let Some(joined) = set.join_next().await {
        let (rank, host, took, conn) = joined.expect("connect task panicked");
        match conn {
            Ok(c) => {
                tracing::debug!(node = rank, %host, "connected in {took:?}");
                let _ = events
                    .send(Event::NodeConnected { node_rank: rank, host, millis: took.as_millis() as u64 })
                    .await;
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
    if let Some(err) = failure {
        close_all(conns.into_iter().flatten().map(Arc::new).collect()).await;
        return Err(err);
    }
    Ok(conns.into_iter().map(|c| Arc::new(c.expect("every node connected"))).collect())
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

/// The master port for an attempt: the fixed one, or a free one on the master node itself.
async fn choose_port(plan: &LaunchPlan, master: &Connection, avoid: &BTreeSet<u16>) -> Result<u16, RunError> {
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
    Failed(FirstFailure),
    Interrupted,
}

/// Start every node, wait for all of them, and tear the gang down as soon as one fails.
async fn run_attempt(
    plan: &LaunchPlan,
    run_id: &str,
    attempt: u32,
    master_port: u16,
    conns: &[Arc<Connection>],
    events: &mpsc::Sender<Event>,
    interrupts: &mut Interrupts,
) -> AttemptOutcome {
    let _ = events
        .send(Event::AttemptStarted { attempt, master_addr: plan.master.addr.clone(), master_port })
        .await;
    let values = AttemptValues { run_id, attempt, master_port };
    let grace_secs = grace_secs(plan.restart.grace_period);
    let (stop_tx, stop_rx) = watch::channel(Stop::Run);
    let mut set = JoinSet::new();
    for node in &plan.nodes {
        let env = node.resolved_env(&values);
        let run = node::NodeRun {
            node_rank: node.rank,
            host: node.host.clone(),
            attempt,
            invocation: AgentInvocation {
                grace_secs,
                marker: node.marker(&values),
                job: plan.job_snippet(node),
            },
            env_block: remote::env_block(env.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
        };
        set.spawn(node::run(conns[node.rank].clone(), run, stop_rx.clone(), events.clone()));
    }

    let mut first_failure: Option<FirstFailure> = None;
    let mut interrupted = false;
    let mut kill_at: Option<tokio::time::Instant> = None;
    let mut interrupts_open = true;
    loop {
        let kill_timer = async {
            match kill_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            joined = set.join_next() => {
                let Some(joined) = joined else { break };
                let result = joined.expect("node task panicked");
                if !result.exit.success() && first_failure.is_none() && !interrupted {
                    let host = plan.nodes[result.node_rank].host.clone();
                    let reason = format!("node {} ({host}) failed: {}", result.node_rank, result.exit);
                    first_failure = Some(FirstFailure {
                        node_rank: result.node_rank,
                        host,
                        line: classify::last_error_line(&result.tail),
                        exit: result.exit,
                    });
                    if !set.is_empty() {
                        let _ = events.send(Event::TeardownStarted { attempt, reason }).await;
                        let _ = stop_tx.send(Stop::Term);
                        kill_at = Some(tokio::time::Instant::now() + plan.restart.grace_period);
                    }
                }
            }
            got = interrupts.recv(), if interrupts_open => {
                if got.is_none() {
                    interrupts_open = false;
                    continue;
                }
                if !interrupted {
                    interrupted = true;
                    let _ = events.send(Event::TeardownStarted { attempt, reason: "interrupted".into() }).await;
                    let _ = stop_tx.send(Stop::Term);
                    kill_at.get_or_insert(tokio::time::Instant::now() + plan.restart.grace_period);
                } else {
                    let _ = stop_tx.send(Stop::Kill);
                }
            }
            () = kill_timer => {
                kill_at = None;
                let _ = stop_tx.send(Stop::Kill);
            }
        }
    }

    if interrupted {
        return AttemptOutcome::Interrupted;
    }
    match first_failure {
        Some(f) => {
            let _ = events.send(Event::AttemptFailed { attempt, first_failure: f.clone() }).await;
            AttemptOutcome::Failed(f)
        }
        None => {
            let _ = events.send(Event::AttemptSucceeded { attempt }).await;
            AttemptOutcome::Succeeded
        }
    }
}

/// Grace before SIGKILL as the agent takes it: whole seconds, at least one.
fn grace_secs(d: Duration) -> u64 {
    d.as_secs().max(1)
}
