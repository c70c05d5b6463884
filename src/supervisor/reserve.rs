//! The run's reserve, what `Run::settle` and `Run::replace` (in `supervisor`) use to perform
//! what `decide` decides: a node the run blames is quarantined (in the plan's roster and in
//! the config's quarantine file, so later runs skip it too), a spare takes its node rank, or
//! with none left the run goes on with fewer nodes down to `restart.min_nodes`. A node new
//! to the run is connected and checked before an attempt uses it (its `import torch` too,
//! which the fast checks leave out); one that fails is blamed in turn. Without room (no
//! spare, no `min_nodes`), nothing changes: the run waits for its nodes as before. A node
//! blamed for a fault that turns out to follow its rank is released: a spare again, and out
//! of the quarantine file. Here: the quarantine file's entries, and which nodes are blamed
//! for failing to connect, failing the preflight, or being refused by Slurm.

use super::preflight::Preflighted;
use super::types::RunError;
use crate::fleet::Fleet;
use crate::plan::LaunchPlan;
use crate::quarantine::{self, Quarantine};
use crate::roster::Blamed;
use crate::transport::{OnBusy, Started, TransportError};
use crate::{blame, doctor};

/// Every node of the plan connected and checked.
pub(super) struct Settled {
    pub fleet: Fleet,
    pub checked: Preflighted,
    /// The plan is not the one the run started with.
    pub replanned: bool,
    /// Per node, the job agent whose probe phase the preflight was (see `preflight`), waiting
    /// for the first attempt's env.
    pub agents: Vec<Option<Started>>,
}

/// Why the nodes could not be settled.
pub(super) enum Unsettled {
    Failed(RunError),
    /// A node the run kept did not come back within `restart.node_wait`.
    Gone {
        node_rank: usize,
        fleet: Fleet,
    },
}

impl From<RunError> for Unsettled {
    fn from(e: RunError) -> Unsettled {
        Unsettled::Failed(e)
    }
}

/// Take the node out of the config's quarantine file, if this run put it there; whether
/// the file no longer lists it. A file that cannot be read or written is a warning: later
/// runs then still skip the node, and the event says so.
pub(super) fn let_in(run: Of, host: &str) -> bool {
    let path = quarantine::path(&run.plan.logs_dir, &run.plan.config_key);
    let released = Quarantine::load(&path).and_then(|mut q| {
        let ours = q.nodes.iter().any(|e| e.host == host && e.run_id == run.run_id);
        if ours && q.release(host) {
            q.save(&path)
        } else {
            Ok(())
        }
    });
    if let Err(e) = &released {
        tracing::warn!("{e}: later runs still skip {host}; `herd nodes --release {host}` clears it");
    }
    released.is_ok()
}

/// Record the node in the config's quarantine file, which later runs read; whether it is
/// recorded there. A file that cannot be read or written is a warning: this run keeps the
/// node out either way, and the event says it was for this run only.
pub(super) fn keep_out(
    run: Of,
    file: &mut Option<Quarantine>,
    host: &str,
    reason: &str,
    attempt: u32,
) -> bool {
    let path = quarantine::path(&run.plan.logs_dir, &run.plan.config_key);
    let loaded = match file.take() {
        Some(q) => Ok(q),
        None => Quarantine::load(&path),
    };
    let mut q = match loaded {
        Ok(q) => q,
        Err(e) => {
            tracing::warn!("{e}: {host} is kept out of this run only");
            return false;
        }
    };
    q.add(quarantine::Entry {
        host: host.to_string(),
        reason: reason.to_string(),
        run_id: run.run_id.to_string(),
        attempt,
        at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
    });
    if let Err(e) = q.save(&path) {
        tracing::warn!("{e}: {host} is kept out of this run only");
        return false;
    }
    *file = Some(q);
    true
}

/// Of `hosts` (see `decide::rejoinable`), those that answer now over SSH: connected, and the
/// connection checked, all at once, each within its connect timeout (and `ANSWER_WAIT` in all).
/// Through Slurm a node's state is what `sinfo` says, which shows a dead node as fine for
/// minutes, and a local host always answers: neither is tried.
pub(super) async fn answering(plan: &LaunchPlan, hosts: Vec<String>) -> Vec<String> {
    let options = plan.timing.connect;
    let mut set = tokio::task::JoinSet::new();
    for host in hosts {
        let Some(transport @ crate::plan::Transport::Ssh(_)) = plan.transport_of(&host) else { continue };
        set.spawn(async move {
            let conn = crate::transport::connect(&transport, options, OnBusy::GiveUp).await.ok()?;
            let answered = conn.check().await.is_ok();
            conn.close().await;
            answered.then_some(host)
        });
    }
    let mut answered = Vec::new();
    let _ = tokio::time::timeout(ANSWER_WAIT, async {
        while let Some(joined) = set.join_next().await {
            answered.extend(joined.ok().flatten());
        }
    })
    .await;
    answered.sort();
    answered
}

/// The longest a restart asks the nodes it quarantined for being out of reach whether they
/// answer again: past SSH's own connect timeout, a host that slow is not one to promote.
const ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Which run's quarantine entries: the plan's config, and the run's id.
#[derive(Clone, Copy)]
pub(super) struct Of<'a> {
    pub plan: &'a LaunchPlan,
    pub run_id: &'a str,
}

/// The nodes that could not be connected, by the fleet's connect `errors`, each with why.
pub(super) fn unreachable(errors: &[Option<TransportError>]) -> Vec<Blamed> {
    (errors.iter().enumerate())
        .filter_map(|(node_rank, e)| {
            let e = e.as_ref()?;
            Some(Blamed { node_rank, reason: format!("{}: {e}", e.via()) })
        })
        .collect()
}

/// The node ranks of `plan` whose hosts are not among `known`: the nodes new to the run.
pub(super) fn fresh(plan: &LaunchPlan, known: &[String]) -> Vec<usize> {
    plan.nodes.iter().filter(|n| !known.contains(&n.host)).map(|n| n.node_rank).collect()
}

/// The nodes Slurm will not run a step on (`refusals`: why, by node rank; see
/// `fleet::slurm_refusals`: none when `sinfo` failed), blamed as nodes that cannot be
/// connected are at the start: none when most are refused (Slurm's trouble, not theirs). The
/// plan's nodes number `nnodes`.
pub(super) fn refused(refusals: std::collections::HashMap<usize, String>, nnodes: usize) -> Vec<Blamed> {
    let mut blamed: Vec<Blamed> = (refusals.into_iter())
        .map(|(node_rank, why)| Blamed { node_rank, reason: format!("srun: {why}") })
        .collect();
    blamed.sort_by_key(|b| b.node_rank);
    blame::unless_most(blamed, nnodes)
}

/// The nodes the preflight blames, each with its first failing check: none when most nodes
/// failed (a config-wide mistake: the workdir, `setup`, `python`), and never for the master
/// port's checks, which fail on every node for the master's or the network's fault.
pub(super) fn failing(nodes: &[doctor::NodeChecks]) -> Vec<Blamed> {
    let own = |c: &&doctor::Check| c.status == doctor::Status::Fail && !c.name.starts_with("port");
    let failed: Vec<Blamed> = nodes
        .iter()
        .filter_map(|n| {
            let c = n.checks.iter().find(own)?;
            Some(Blamed { node_rank: n.node_rank, reason: format!("preflight: {}: {}", c.name, c.detail) })
        })
        .collect();
    blame::unless_most(failed, nodes.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::{Check, NodeChecks, Status};

    fn check(name: &'static str, status: Status, detail: &str) -> Check {
        Check { name, status, detail: detail.into(), fix: None }
    }

    fn node(node_rank: usize, checks: Vec<Check>) -> NodeChecks {
        NodeChecks { node_rank, host: format!("n{node_rank}"), checks }
    }

    #[test]
    fn a_node_slurm_refuses_is_blamed_unless_most_are() {
        let refusals = |ranks: &[usize]| -> std::collections::HashMap<usize, String> {
            ranks.iter().map(|&r| (r, format!("Slurm reports node n{r} as IDLE+DRAIN"))).collect()
        };
        let blamed = refused(refusals(&[2]), 3);
        let got: Vec<(usize, &str)> = blamed.iter().map(|b| (b.node_rank, b.reason.as_str())).collect();
        assert_eq!(got, [(2, "srun: Slurm reports node n2 as IDLE+DRAIN")]);
        assert!(refused(refusals(&[]), 3).is_empty());
        // Most nodes refused (or sinfo failing for all): Slurm's trouble, no node's.
        assert!(refused(refusals(&[0, 1]), 3).is_empty());
    }

    #[test]
    fn the_preflight_blames_a_few_nodes_own_failures_only() {
        let ok = || check("ssh", Status::Pass, "ok");
        let setup = || check("setup", Status::Fail, "exit 1");
        let reach = || check("port-reach", Status::Fail, "the master could not listen");
        let reasons = |nodes: &[NodeChecks]| -> Vec<(usize, String)> {
            failing(nodes).into_iter().map(|b| (b.node_rank, b.reason)).collect()
        };
        let one = [node(0, vec![ok()]), node(1, vec![ok(), setup()]), node(2, vec![ok()])];
        assert_eq!(reasons(&one), [(1, "preflight: setup: exit 1".to_string())]);
        // A config-wide mistake fails most nodes: no node's fault.
        let most = [node(0, vec![setup()]), node(1, vec![setup()]), node(2, vec![ok()])];
        assert_eq!(reasons(&most), []);
        // The master port's checks fail for the master's or the network's fault.
        let port = [node(0, vec![ok()]), node(1, vec![reach()]), node(2, vec![ok()])];
        assert_eq!(reasons(&port), []);
        // A node's own failure after a port check still blames it.
        let both = [node(0, vec![ok()]), node(1, vec![reach(), setup()]), node(2, vec![ok()])];
        assert_eq!(reasons(&both), [(1, "preflight: setup: exit 1".to_string())]);
    }
}
