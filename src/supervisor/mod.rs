//! Executes a launch plan: connect to every node, then run attempts until one succeeds, the
//! failure is not one to restart, or restarts run out. An attempt is all nodes together:
//! when one fails, is lost, or the job stops making progress, every node is stopped, the
//! failure is classified, and, if the policy says so, everything is checked and started
//! again on a fresh port. Everything is reported as events; nothing here prints.
//!
//! `attempt` decides (pure), `gang` performs one attempt over every node, `node` is one
//! node's agent, `preflight` and `sweep` are the checks and the sweeps around them.

mod attempt;
pub mod exec;
mod gang;
mod node;
mod preflight;
mod sweep;
mod types;

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Instant;

use tokio::sync::mpsc;

use crate::config::PortSpec;
use crate::doctor;
use crate::events::{Event, RunStatus};
use crate::fleet::{EarlyAgents, Fleet};
use crate::plan::LaunchPlan;
use crate::policy;
use crate::transport::Started;

use gang::{AttemptContext, AttemptOutcome};
pub use node::{Stop, READ_SIZE};
use preflight::Preflighted;
pub use sweep::kill_leftovers;
pub use types::{AttemptSummary, Interrupts, RunError, RunOptions, RunOutcome};

pub async fn run(
    plan: &LaunchPlan,
    run_id: &str,
    options: RunOptions,
    events: mpsc::Sender<Event>,
    interrupts: Interrupts,
) -> Result<RunOutcome, RunError> {
    let _ = events.send(run_started(plan, run_id)).await;
    let mut run = Run {
        plan,
        run_id,
        options,
        events: &events,
        interrupts,
        attempts: Vec::new(),
        used_ports: BTreeSet::new(),
    };
    let status = run.run().await?;
    let attempts = run.attempts;
    let _ = events.send(Event::RunFinished { status, attempts: attempts.len() as u32 }).await;
    Ok(RunOutcome { status, attempts })
}

fn run_started(plan: &LaunchPlan, run_id: &str) -> Event {
    Event::RunStarted {
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
    }
}

/// One run's state across its attempts.
struct Run<'a> {
    plan: &'a LaunchPlan,
    run_id: &'a str,
    options: RunOptions,
    events: &'a mpsc::Sender<Event>,
    interrupts: Interrupts,
    attempts: Vec<AttemptSummary>,
    /// The master ports of earlier attempts, which a restart does not reuse.
    used_ports: BTreeSet<u16>,
}

/// What comes after an attempt.
enum Next {
    Done(RunStatus),
    Restart(std::time::Duration),
}

impl Run<'_> {
    async fn run(&mut self) -> Result<RunStatus, RunError> {
        let connected = connect(self.plan, self.run_id, self.options, self.events);
        let Some((mut fleet, early)) = interruptible(&mut self.interrupts, connected).await.transpose()?
        else {
            return Ok(RunStatus::Interrupted);
        };
        let (probes, mut jobs): (Vec<_>, Vec<_>) = early
            .into_iter()
            .map(|mut agents| {
                let job = agents.pop().flatten();
                (agents.pop().flatten(), job)
            })
            .unzip();
        if self.options.preflight {
            let _ = self.events.send(Event::PreflightStarted { nnodes: self.plan.nnodes() }).await;
        }
        let preflight =
            preflight::preflight(self.plan, self.run_id, &fleet, self.options, self.events, probes);
        let mut checked = match interruptible(&mut self.interrupts, preflight).await {
            Some(Ok(checked)) => checked,
            Some(Err(e)) => return Err(close_with(fleet, e).await),
            None => {
                fleet.close().await;
                return Ok(RunStatus::Interrupted);
            }
        };
        let interfaces = std::mem::take(&mut checked.interfaces);
        let mut attempt = 0;
        loop {
            let early = std::mem::take(&mut jobs);
            let next = self.attempt(&fleet, attempt, &interfaces, std::mem::take(&mut checked), early).await;
            let delay = match next {
                Ok(Next::Restart(delay)) => delay,
                Ok(Next::Done(status)) => {
                    fleet.close().await;
                    return Ok(status);
                }
                Err(e) => return Err(close_with(fleet, e).await),
            };
            fleet = match self.restart(fleet, delay).await {
                Ok(fleet) => fleet,
                Err(status) => return Ok(status),
            };
            attempt += 1;
        }
    }

    /// Attempt `attempt`, and what follows it.
    async fn attempt(
        &mut self,
        fleet: &Fleet,
        attempt: u32,
        interfaces: &[String],
        checked: Preflighted,
        early: Vec<Option<Started>>,
    ) -> Result<Next, RunError> {
        let started = Instant::now();
        let ctx = AttemptContext { plan: self.plan, run_id: self.run_id, interfaces, events: self.events };
        let (outcome, port) =
            gang::run_attempt(&ctx, attempt, &checked, early, &self.used_ports, fleet, &mut self.interrupts)
                .await;
        self.used_ports.extend(port);
        let duration = started.elapsed();
        let verdict = match outcome {
            AttemptOutcome::Succeeded | AttemptOutcome::Interrupted => {
                let succeeded = matches!(outcome, AttemptOutcome::Succeeded);
                self.attempts.push(AttemptSummary { attempt, duration, verdict: None });
                return Ok(Next::Done(if succeeded { RunStatus::Succeeded } else { RunStatus::Interrupted }));
            }
            AttemptOutcome::NoPort(e) => return Err(e),
            AttemptOutcome::Failed(v) => v,
        };
        let millis = duration.as_millis() as u64;
        let _ = self.events.send(Event::AttemptFailed { attempt, millis, verdict: verdict.clone() }).await;
        let class = verdict.class;
        self.attempts.push(AttemptSummary { attempt, duration, verdict: Some(verdict) });
        let Some(delay) = policy::restart_delay(&self.plan.restart, attempt, class, rand::random::<f64>())
        else {
            return Ok(Next::Done(RunStatus::Failed));
        };
        let delay_ms = delay.as_millis() as u64;
        let _ = self.events.send(Event::RestartScheduled { attempt: attempt + 1, delay_ms, class }).await;
        Ok(Next::Restart(delay))
    }

    /// After the backoff, every node reachable again (a lost one waited for, up to
    /// `restart.node_wait`). What the earlier attempts left, each node's agent sweeps as the
    /// restart starts. Else how the run ends.
    async fn restart(&mut self, fleet: Fleet, delay: std::time::Duration) -> Result<Fleet, RunStatus> {
        let (plan, events) = (self.plan, self.events);
        let ready = async {
            tokio::time::sleep(delay).await;
            fleet.reconnect(plan, events).await
        };
        match interruptible(&mut self.interrupts, ready).await {
            Some(Ok(fleet)) => Ok(fleet),
            Some(Err((rank, fleet))) => {
                fleet.close().await;
                let reason = format!(
                    "node {rank} ({}) did not come back within restart.node_wait ({})",
                    plan.nodes[rank].host,
                    humantime::format_duration(plan.restart.node_wait)
                );
                let _ = events.send(Event::RestartAbandoned { reason }).await;
                Err(RunStatus::Failed)
            }
            // The connections were moved into the cancelled future; its drop closes them.
            None => Err(RunStatus::Interrupted),
        }
    }
}

async fn close_with(fleet: Fleet, error: RunError) -> RunError {
    fleet.close().await;
    error
}

/// Every node connected; on each, as soon as it is, the first agents: the preflight's
/// probe, if it probes, and beside it the first attempt's job agent, which starts nothing
/// before it gets its env. One login per node for each, overlapping the other handshakes,
/// as pdsh's logins do. Each agent sweeps its node's leftovers as it starts.
async fn connect(
    plan: &LaunchPlan,
    run_id: &str,
    options: RunOptions,
    events: &mpsc::Sender<Event>,
) -> Result<(Fleet, EarlyAgents), RunError> {
    let probing = preflight::probe_options(plan, run_id, options);
    let port_known = options.preflight || matches!(plan.master.port, PortSpec::Fixed(_));
    let early = |node: &crate::plan::NodePlan| {
        let probe = probing.as_ref().map(|o| doctor::probe_invocation(plan, node, o));
        let job = gang::job_invocation(plan, run_id, node, 0, port_known, probing.is_some());
        probe.into_iter().chain([job]).collect()
    };
    Ok(Fleet::connect_all(plan, events, early).await?)
}

/// `work`, unless an interrupt comes first (`None`): nothing of the job has started.
async fn interruptible<T>(interrupts: &mut Interrupts, work: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        done = work => Some(done),
        _ = interrupts.recv() => None,
    }
}
