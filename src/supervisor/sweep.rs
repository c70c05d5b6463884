//! Sweeps: what each kind of sweep stops on a node, the events for what it reports, and
//! `herd kill`. The scan of `/proc` itself is `procs.sh`'s, shipped with every agent.

use std::time::Duration;

use super::types::RunError;
use crate::container;
use crate::events::{Event, EventSender};
use crate::fleet::Fleet;
use crate::marker::Marker;
use crate::plan::LaunchPlan;
use crate::remote;
use crate::remote::procs::SweepScope;

/// What a sweep stops, and which containers it removes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Sweep<'a> {
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
    pub(super) fn body(self, plan: &LaunchPlan) -> String {
        let grace = plan.timing.grace_secs;
        let key = &plan.config_key;
        let config = Marker::config(key);
        let (mut body, containers, spare) = match self {
            Sweep::Config { spare_run } => (
                remote::procs::sweep_call(&config.entry(), SweepScope::Leftovers, grace),
                container::name_prefix(key, None),
                spare_run.map(|run| container::name_prefix(key, Some(run))),
            ),
            Sweep::Restart { run_id, attempt } => (
                remote::procs::sweep_call(
                    &config.run(run_id).entry(),
                    SweepScope::AllBut(&config.run(run_id).attempt(attempt).entry()),
                    grace,
                ),
                container::name_prefix(key, Some(run_id)),
                Some(container::attempt_prefix(key, run_id, attempt)),
            ),
        };
        if let Some(c) = &plan.container {
            // The processes first (their runtime clients among them), then what they leave.
            body = format!("{body}; ({})", c.sweep_command(&containers, spare.as_deref()));
        }
        body
    }
}

/// The events for what a sweep on one node printed: stopped pids, removed containers.
pub(crate) fn swept_events(node_rank: usize, host: &str, out: &str) -> Vec<Event> {
    let mut events = Vec::new();
    let pids = remote::protocol::parse_pids(out);
    if !pids.is_empty() {
        events.push(Event::LeftoversStopped { node_rank, host: host.to_string(), pids });
    }
    if let Some(error) = container::parse_unlisted(out) {
        tracing::warn!(node = node_rank, %host, "cannot look for leftover containers: {error}");
    }
    let names = container::parse_removed(out);
    if !names.is_empty() {
        events.push(Event::ContainersRemoved { node_rank, host: host.to_string(), names });
    }
    events
}

/// Sweep every connected node of `fleet`, all at once, each within `SWEEP_LIMIT` and the
/// grace its sweep gives the processes it stops.
async fn sweep_nodes(plan: &LaunchPlan, fleet: &Fleet, sweep: Sweep<'_>, events: &EventSender) {
    let body = sweep.body(plan);
    let command =
        |rank: usize| remote::procs::with_procs(&plan.with_engine_env(&plan.nodes[rank], body.clone()));
    let limit = SWEEP_LIMIT + Duration::from_secs(plan.timing.grace_secs);
    for (node_rank, ran) in fleet.on_each(limit, |rank| Some(command(rank))).all().await {
        let host = &plan.nodes[node_rank].host;
        match ran {
            Ok(out) => {
                for event in swept_events(node_rank, host, &String::from_utf8_lossy(&out.stdout)) {
                    let _ = events.send(event).await;
                }
            }
            Err(e) => tracing::warn!(node = node_rank, %host, "cannot look for leftover processes: {e}"),
        }
    }
}

/// How long a sweep may take, beyond the grace of the processes it stops (a hung `/proc`
/// read, a runtime that does not answer).
const SWEEP_LIMIT: Duration = Duration::from_secs(60);

/// `herd kill`: connect to every node and stop whatever is left of earlier runs of this
/// config. The caller holds the config's run lock, so no run of it is live. Returns the
/// events it produced (connections and stopped leftovers).
pub async fn kill_leftovers(plan: &LaunchPlan) -> Result<Vec<Event>, RunError> {
    let (tx, mut rx) = crate::events::channel(plan.nnodes() * 2 + 16);
    let collect = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(e) = rx.recv().await {
            seen.push(e.event);
        }
        seen
    });
    let connected = Fleet::connect_all(plan, &tx, |_| Vec::new()).await;
    if let Ok((fleet, _)) = &connected {
        sweep_nodes(plan, fleet, Sweep::Config { spare_run: None }, &tx).await;
    }
    drop(tx);
    let seen = collect.await.expect("event collector");
    connected?.0.close().await;
    Ok(seen)
}
