//! The run's reserve: a node the run blames is quarantined (in the plan's roster and in the
//! config's quarantine file, so later runs skip it too), a spare takes its node rank, or
//! with none left the run goes on with fewer nodes down to `restart.min_nodes`. A node new
//! to the run is connected and checked before an attempt uses it (its `import torch` too,
//! which the fast checks leave out); one that fails is blamed in turn. Without room (no
//! spare, no `min_nodes`), nothing changes: the run waits for its nodes as before. A node
//! blamed for a fault that turns out to follow its rank is released: a spare again, and out
//! of the quarantine file.

use super::decide::{self, Replace};
use super::preflight::{self, Preflighted};
use super::types::RunError;
use super::Run;
use crate::events::Event;
use crate::fleet::{ConnectError, Fleet};
use crate::plan::LaunchPlan;
use crate::quarantine::{self, Quarantine};
use crate::roster::{Blamed, Change, Roster};
use crate::transport::{Started, TransportError};
use crate::{blame, doctor};

/// Every node of the plan connected and checked.
pub(super) struct Settled {
    pub fleet: Fleet,
    pub checked: Preflighted,
    /// The plan is not the one the run started with.
    pub replanned: bool,
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

impl Run<'_> {
    /// Until every node of the plan is connected and passes the preflight (when the run has
    /// one): a node that fails either is blamed, and replaced while the run has room.
    /// `errors`: the fleet's connect errors; `probes`: preflight probes already started;
    /// `restart`: the nodes the run kept from an attempt before are checked again, and
    /// waited for up to `restart.node_wait`. `known`: the hosts the run started or last ran
    /// on; the others (promoted spares) also `import torch` in the preflight.
    pub(super) async fn settle(
        &mut self,
        mut fleet: Fleet,
        mut errors: Vec<Option<TransportError>>,
        mut probes: Vec<Option<Started>>,
        attempt: u32,
        restart: bool,
        known: &[String],
    ) -> Result<Settled, Unsettled> {
        let mut replanned = false;
        loop {
            let unreachable: Vec<Blamed> = (errors.iter().enumerate())
                .filter_map(|(node_rank, e)| {
                    let e = e.as_ref()?;
                    Some(Blamed { node_rank, reason: format!("{}: {e}", e.via()) })
                })
                .collect();
            if !unreachable.is_empty() {
                drop(std::mem::take(&mut probes));
                // An SSH key not loaded fails every node: that is no node's fault.
                let blamed = blame::unless_most(unreachable, self.plan.nnodes());
                (fleet, errors) = match self.replace_in(fleet, &blamed, attempt).await {
                    Ok(rearranged) => rearranged,
                    Err(fleet) => {
                        let error = ConnectError::first(&self.plan, errors).expect("a node failed");
                        fleet.close().await;
                        return Err(RunError::Connect(error).into());
                    }
                };
                replanned = true;
                continue;
            }
            if restart {
                fleet = match fleet.reconnect(&self.plan, self.events).await {
                    Ok(fleet) => fleet,
                    Err((node_rank, fleet)) => return Err(Unsettled::Gone { node_rank, fleet }),
                };
            }
            let checked = self.check(&fleet, known, std::mem::take(&mut probes)).await;
            let nodes = match checked {
                Ok(mut checked) => {
                    if !checked.interfaces.is_empty() {
                        self.interfaces = checked.interfaces.clone();
                    }
                    // The port the checks tested may be an earlier attempt's.
                    checked.port = checked.port.filter(|p| !self.used_ports.contains(p));
                    return Ok(Settled { fleet, checked, replanned });
                }
                Err(RunError::Preflight(nodes)) => nodes,
                Err(e) => {
                    fleet.close().await;
                    return Err(e.into());
                }
            };
            (fleet, errors) = match self.replace_in(fleet, &failing(&nodes), attempt).await {
                Ok(rearranged) => rearranged,
                Err(fleet) => {
                    fleet.close().await;
                    return Err(RunError::Preflight(nodes).into());
                }
            };
            replanned = true;
        }
    }

    /// The preflight, when the run has one, of every node of the plan over `fleet`, with the
    /// probes already started; `import torch` too on the nodes new to the run (not `known`).
    async fn check(
        &self,
        fleet: &Fleet,
        known: &[String],
        probes: Vec<Option<Started>>,
    ) -> Result<Preflighted, RunError> {
        let (plan, events) = (&self.plan, self.events);
        if self.options.preflight {
            let _ = events.send(Event::PreflightStarted { nnodes: plan.nnodes() }).await;
        }
        let fresh = fresh(plan, known);
        preflight::preflight(plan, self.run_id, fleet, self.options, &fresh, events, probes).await
    }

    /// `replace`, and the fleet of the new plan: the new nodes connected, with their errors.
    /// Without a change, the fleet as it was.
    pub(super) async fn replace_in(
        &mut self,
        fleet: Fleet,
        blamed: &[Blamed],
        attempt: u32,
    ) -> Result<(Fleet, Vec<Option<TransportError>>), Fleet> {
        let replace = decide::replacement(&self.plan.roster, blamed.to_vec());
        match self.replace(replace, attempt).await {
            Some(previous) => Ok(fleet.rearranged(&previous, &self.plan, self.events).await),
            None => Err(fleet),
        }
    }

    /// Perform `replace` (see `decide`): each blamed node quarantined, the plan the one of
    /// attempt `attempt`, the first without them; the one before is returned. `None`: nothing
    /// blamed, or no room; the plan is unchanged.
    pub(super) async fn replace(&mut self, replace: Replace, attempt: u32) -> Option<LaunchPlan> {
        let (blamed, roster, changes) = match replace {
            Replace::Nothing => return None,
            Replace::NoRoom { blamed, reserve } => {
                self.no_room(&blamed, reserve);
                return None;
            }
            Replace::With { blamed, roster, changes } => (blamed, roster, changes),
        };
        let events = self.events;
        let mut quarantine_file = None;
        for b in blamed {
            let host = self.plan.nodes[b.node_rank].host.clone();
            let saved = self.keep_out(&mut quarantine_file, &host, &b.reason, attempt);
            let _ = events.send(Event::NodeQuarantined { attempt, host, reason: b.reason, saved }).await;
        }
        let next = self.plan.with_roster(roster);
        let previous = std::mem::replace(&mut self.plan, next);
        let mut dropped = Vec::new();
        for change in changes {
            match change {
                Change::Promoted { node_rank, spare, replaced } => {
                    let event = Event::SparePromoted { attempt, node_rank, host: spare, replaced };
                    let _ = events.send(event).await;
                }
                Change::Dropped { host } => dropped.push(host),
            }
        }
        let plan = &self.plan;
        let nprocs: Vec<u32> = plan.nodes.iter().map(|n| n.nproc).collect();
        if nprocs != previous.nodes.iter().map(|n| n.nproc).collect::<Vec<_>>() {
            let _ = events
                .send(Event::WorldChanged {
                    attempt,
                    nnodes: plan.nnodes(),
                    world_size: plan.world_size,
                    hosts: plan.nodes.iter().map(|n| n.host.clone()).collect(),
                    nprocs,
                    dropped,
                })
                .await;
        }
        Some(previous)
    }

    /// Blamed nodes the run cannot do without: a config without spares or `min_nodes`
    /// (no `reserve`) runs as it always has; one whose spares are used up is told why it now
    /// waits.
    fn no_room(&self, blamed: &[Blamed], reserve: bool) {
        for b in blamed {
            let (rank, host) = (b.node_rank, &self.plan.nodes[b.node_rank].host);
            if reserve {
                tracing::warn!("node {rank} ({host}) is to blame ({}), but no spare is left and restart.min_nodes does not let the run go on without it", b.reason);
            } else {
                tracing::debug!("node {rank} ({host}) is to blame ({}); no spare", b.reason);
            }
        }
    }

    /// Let back in the nodes this run quarantined for a fault that turned out to be no
    /// node's, as decided after failed attempt `attempt` (see `decide`): `roster`, the plan's
    /// without them quarantined, and each with why. A spare again for this run, and out of
    /// the config's quarantine file for later runs.
    pub(super) async fn release(
        &mut self,
        roster: Option<Roster>,
        released: Vec<(String, String)>,
        attempt: u32,
    ) {
        if let Some(roster) = roster {
            self.plan = self.plan.with_roster(roster);
        }
        for (host, reason) in released {
            let saved = self.let_in(&host);
            let _ = self.events.send(Event::NodeReleased { attempt, host, reason, saved }).await;
        }
    }

    /// Take the node out of the config's quarantine file, if this run put it there; whether
    /// the file no longer lists it. A file that cannot be read or written is a warning: later
    /// runs then still skip the node, and the event says so.
    fn let_in(&self, host: &str) -> bool {
        let path = quarantine::path(&self.plan.logs_dir, &self.plan.config_key);
        let released = Quarantine::load(&path).and_then(|mut q| {
            let ours = q.nodes.iter().any(|e| e.host == host && e.run_id == self.run_id);
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
    fn keep_out(&self, file: &mut Option<Quarantine>, host: &str, reason: &str, attempt: u32) -> bool {
        let path = quarantine::path(&self.plan.logs_dir, &self.plan.config_key);
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
            run_id: self.run_id.to_string(),
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
fn failing(nodes: &[doctor::NodeChecks]) -> Vec<Blamed> {
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
