//! Every node's connection for the life of one command (run, doctor, exec, kill): connect all
//! at once, start each node's first agents as soon as its own connection is up, check and
//! reconnect before a restart, close. Each node's result is one `Link`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::events::{Event, EventSender};
use crate::plan::{LaunchPlan, NodePlan};
use crate::remote::agent::AgentInvocation;
use crate::transport::{self, Connection, OnBusy, Started, TransportError};

/// Work running on many nodes at once (`Fleet::spawn_each`). Dropping it aborts what is left.
pub struct OnNodes<T> {
    set: JoinSet<(usize, T)>,
}

impl<T: Send + 'static> OnNodes<T> {
    /// The next node's result, with its node rank, as it ends; `None` once every node's has
    /// come. Cancel safe.
    pub async fn next(&mut self) -> Option<(usize, T)> {
        Some(self.set.join_next().await?.expect("a node's task panicked"))
    }

    /// The results of the nodes whose work ends within `limit`, by node rank. The rest is
    /// aborted, and gone once this returns.
    pub async fn finished_within(mut self, limit: Duration) -> Vec<(usize, T)> {
        let mut done = Vec::new();
        let _ = tokio::time::timeout(limit, async {
            while let Some(one) = self.next().await {
                done.push(one);
            }
        })
        .await;
        self.set.shutdown().await;
        done.sort_by_key(|(rank, _)| *rank);
        done
    }

    /// Every node's result, by node rank.
    pub async fn all(mut self) -> Vec<(usize, T)> {
        let mut all = Vec::new();
        while let Some(one) = self.next().await {
            all.push(one);
        }
        all.sort_by_key(|(rank, _)| *rank);
        all
    }
}

/// What a command run by `Fleet::on_each` gave on one node: its output, or why there is none.
pub type Ran = Result<std::process::Output, String>;

/// A node script's stdout, if it succeeded; otherwise why not (what it said on stderr).
pub fn stdout_if_ok(ran: Ran) -> Result<Vec<u8>, String> {
    match ran {
        Ok(out) if out.status.success() => Ok(out.stdout),
        Ok(out) => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        Err(why) => Err(why),
    }
}

/// Through Slurm, the nodes (by node rank) among those `which` picks that Slurm will not run a
/// step on (down, drained, not responding), and why: one `sinfo` for them all. Connecting to
/// them fails, as an unreachable host fails over SSH: they are lost, and replaced by a spare
/// (at the start, and before a restart), or waited for when none can take their place.
pub async fn slurm_refusals(
    plan: &LaunchPlan,
    which: &impl Fn(&NodePlan) -> bool,
) -> std::collections::HashMap<usize, String> {
    let nodes: Vec<(usize, &str)> = plan
        .nodes
        .iter()
        .filter(|n| which(n))
        .filter_map(|n| match &n.transport {
            crate::plan::Transport::Slurm(t) => Some((n.node_rank, t.node.as_str())),
            _ => None,
        })
        .collect();
    if nodes.is_empty() {
        return Default::default();
    }
    let names: Vec<&str> = nodes.iter().map(|(_, n)| *n).collect();
    refusals(&nodes, transport::slurm::states(&names).await)
}

/// Why Slurm will not run a step on each of `nodes` (node rank, Slurm name), from their
/// `states`. When `sinfo` could not be asked no node is refused (a warning): each is then
/// connected, or waited for, as any other; a slurmctld that is slow to answer blames no node.
fn refusals(
    nodes: &[(usize, &str)],
    states: Result<std::collections::HashMap<String, String>, TransportError>,
) -> std::collections::HashMap<usize, String> {
    let states = match states {
        Ok(states) => states,
        Err(e) => {
            tracing::warn!("cannot ask Slurm for the nodes' states ({e}): no node is judged by it");
            return Default::default();
        }
    };
    (nodes.iter())
        .filter_map(|(rank, node)| Some((*rank, transport::slurm::refusal(node, &states)?)))
        .collect()
}

/// How often an unreachable node is tried again before a restart.
const RECONNECT_EVERY: Duration = Duration::from_secs(2);

/// A node that could not be connected, in a command that needs them all.
#[derive(Debug, thiserror::Error)]
#[error("node {node_rank} ({host}): {}: {error}\n  fix: {}", error.via(), error.fix())]
pub struct ConnectError {
    pub node_rank: usize,
    pub host: String,
    pub error: TransportError,
}

impl ConnectError {
    /// The failure of the lowest node rank among `errors` (by node rank), if any.
    pub fn first(plan: &LaunchPlan, errors: Vec<Option<TransportError>>) -> Option<ConnectError> {
        let (node_rank, error) = errors.into_iter().enumerate().find_map(|(rank, e)| Some((rank, e?)))?;
        Some(ConnectError { node_rank, host: plan.nodes[node_rank].host.clone(), error })
    }
}

/// One node's connection, or why there is none, and how long connecting took.
#[derive(Clone)]
pub struct Link {
    pub conn: Result<Arc<Connection>, String>,
    pub connect_ms: u64,
}

/// Every node's link, by node rank.
pub struct Fleet {
    links: Vec<Link>,
}

/// Per node, the agents started as soon as it was connected, in the order asked.
pub type EarlyAgents = Vec<Vec<Option<Started>>>;

impl Fleet {
    /// Why node `node_rank` is not connected, if it is not.
    pub fn error(&self, node_rank: usize) -> Option<&str> {
        self.links.get(node_rank)?.conn.as_ref().err().map(String::as_str)
    }

    /// Connect to every node at once; on each, as soon as it is up, start the agents `early`
    /// names for it, whose logins then overlap the other handshakes. `NodeConnected` goes to
    /// `events` for each. Nodes that fail are in the fleet with their error: see `require_all`.
    pub async fn connect(
        plan: &LaunchPlan,
        events: Option<&EventSender>,
        early: impl Fn(&NodePlan) -> Vec<AgentInvocation>,
    ) -> (Fleet, EarlyAgents, Vec<Option<TransportError>>) {
        Fleet::connect_some(plan, events, |_| true, early).await
    }

    /// `connect`, to the nodes `which` picks; the others' links say "not connected".
    async fn connect_some(
        plan: &LaunchPlan,
        events: Option<&EventSender>,
        which: impl Fn(&NodePlan) -> bool,
        early: impl Fn(&NodePlan) -> Vec<AgentInvocation>,
    ) -> (Fleet, EarlyAgents, Vec<Option<TransportError>>) {
        let options = plan.timing.connect;
        let refusals = slurm_refusals(plan, &which).await;
        let mut set = JoinSet::new();
        for node in plan.nodes.iter().filter(|n| which(n)) {
            let (transport, rank, want) = (node.transport.clone(), node.node_rank, early(node));
            let refused = refusals.get(&rank).cloned();
            set.spawn(async move {
                let started = Instant::now();
                let conn = match refused {
                    Some(why) => Err(TransportError::Slurm(why)),
                    None => transport::connect(&transport, options, OnBusy::TryAgain).await,
                };
                let took = started.elapsed();
                // A start that fails here is tried again, and reported, where the agent is used.
                let mut agents = Vec::new();
                if let Ok(c) = &conn {
                    for inv in want {
                        agents.push(Started::start(c, inv).await.ok());
                    }
                }
                (rank, took, conn, agents)
            });
        }
        let n = plan.nnodes();
        let mut links: Vec<Link> =
            (0..n).map(|_| Link { conn: Err("not connected".into()), connect_ms: 0 }).collect();
        let mut errors: Vec<Option<TransportError>> = (0..n).map(|_| None).collect();
        let mut started: EarlyAgents = (0..n).map(|_| Vec::new()).collect();
        while let Some(joined) = set.join_next().await {
            let (rank, took, conn, agents) = joined.expect("connect task panicked");
            let host = plan.nodes[rank].host.clone();
            links[rank].connect_ms = took.as_millis() as u64;
            match conn {
                Ok(c) => {
                    tracing::debug!(node = rank, %host, "connected in {took:?}");
                    if let Some(events) = events {
                        let millis = took.as_millis() as u64;
                        let _ = events.send(Event::NodeConnected { node_rank: rank, host, millis }).await;
                    }
                    links[rank].conn = Ok(Arc::new(c));
                    started[rank] = agents;
                }
                Err(e) => {
                    links[rank].conn = Err(e.to_string());
                    errors[rank] = Some(e);
                }
            }
        }
        (Fleet { links }, started, errors)
    }

    /// `connect`, for a command that needs every node: any failure closes the others, and the
    /// lowest node rank that failed is the error. Nothing is half-started (an early agent
    /// starts nothing before its env, and ends when its connection closes).
    pub async fn connect_all(
        plan: &LaunchPlan,
        events: &EventSender,
        early: impl Fn(&NodePlan) -> Vec<AgentInvocation>,
    ) -> Result<(Fleet, EarlyAgents), ConnectError> {
        let (fleet, agents, errors) = Fleet::connect(plan, Some(events), early).await;
        if let Some(error) = ConnectError::first(plan, errors) {
            drop(agents);
            fleet.close().await;
            return Err(error);
        }
        Ok((fleet, agents))
    }

    /// The fleet of the same run on another plan (a spare promoted, a node dropped): each
    /// node keeps its link if `old` had one for its host, the others are connected. The
    /// links of nodes `new` no longer has are dropped. The errors are the new connections'.
    pub async fn rearranged(
        self,
        old: &LaunchPlan,
        new: &LaunchPlan,
        events: &EventSender,
    ) -> (Fleet, Vec<Option<TransportError>>) {
        let mut kept: std::collections::HashMap<&str, Link> =
            old.nodes.iter().map(|n| n.host.as_str()).zip(self.links).collect();
        let (fresh, _, errors) =
            Fleet::connect_some(new, Some(events), |n| !kept.contains_key(n.host.as_str()), |_| Vec::new())
                .await;
        let links = (new.nodes.iter().zip(fresh.links))
            .map(|(node, fresh)| kept.remove(node.host.as_str()).unwrap_or(fresh))
            .collect();
        (Fleet { links }, errors)
    }

    /// A fleet of connections made elsewhere (a unit test's simulated nodes), by node rank.
    #[cfg(test)]
    pub fn of(connections: Vec<Connection>) -> Fleet {
        let link = |c| Link { conn: Ok(Arc::new(c)), connect_ms: 0 };
        Fleet { links: connections.into_iter().map(link).collect() }
    }

    /// The same fleet with node `node_rank` on a connection of its own, as `reconnect` leaves
    /// a node whose master it found dead.
    #[cfg(test)]
    pub fn reconnected(mut self, node_rank: usize, conn: Connection) -> Fleet {
        self.links[node_rank] = Link { conn: Ok(Arc::new(conn)), connect_ms: 0 };
        self
    }

    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// The node's connection, if it has one.
    pub fn conn(&self, node_rank: usize) -> Option<&Arc<Connection>> {
        self.links[node_rank].conn.as_ref().ok()
    }

    /// Every connected node, with its rank.
    pub fn connected(&self) -> impl Iterator<Item = (usize, &Arc<Connection>)> {
        self.links.iter().enumerate().filter_map(|(rank, l)| Some((rank, l.conn.as_ref().ok()?)))
    }

    /// The one fan-out to the nodes: `work(node_rank, conn)` started on every connected node
    /// it gives work for, all at once (a node's agent, its probe, a script). Each node's
    /// result comes out of the `OnNodes` as it ends.
    pub fn spawn_each<T, W>(&self, mut work: impl FnMut(usize, &Arc<Connection>) -> Option<W>) -> OnNodes<T>
    where
        W: std::future::Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let mut set = JoinSet::new();
        for (rank, conn) in self.connected() {
            if let Some(work) = work(rank, conn) {
                set.spawn(async move { (rank, work.await) });
            }
        }
        OnNodes { set }
    }

    /// `command(node_rank)` (a node script's call, see `remote::shell::script_call`) run on every
    /// connected node it gives one for, all at once, each within `limit`. By node rank: what
    /// each gave, or why it gave nothing (the transport's error, or no answer in time: the
    /// command is then abandoned). Every command starts at the call; `OnNodes::all` gathers
    /// what they give, and holds no borrow of the fleet.
    pub fn on_each(&self, limit: Duration, command: impl Fn(usize) -> Option<String>) -> OnNodes<Ran> {
        let on_nodes = self.spawn_each(|rank, conn| {
            let (command, conn) = (command(rank)?, conn.clone());
            Some(async move {
                match tokio::time::timeout(limit, conn.output(&command)).await {
                    Ok(Ok(out)) => Ok(out),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!("no answer within {} s", limit.as_secs())),
                }
            })
        });
        on_nodes
    }

    /// Before a restart: every node reachable again, a lost one waited for up to `wait`
    /// (`NodeWaiting` for each try that fails). On failure, the lowest node rank that could
    /// not be reached, and the fleet of the others.
    pub async fn reconnect(
        self,
        plan: &LaunchPlan,
        events: &EventSender,
        wait: Duration,
    ) -> Result<Fleet, (usize, Fleet)> {
        let options = plan.timing.connect;
        let deadline = Instant::now() + wait;
        let mut set = JoinSet::new();
        for (node, link) in plan.nodes.iter().zip(self.links) {
            let (transport, rank, host, events) =
                (node.transport.clone(), node.node_rank, node.host.clone(), events.clone());
            set.spawn(async move {
                if let Ok(conn) = &link.conn {
                    if conn.check().await.is_ok() {
                        return (rank, link);
                    }
                }
                drop(link);
                loop {
                    let started = Instant::now();
                    // Checked once connected: through Slurm, connecting holds nothing open, and
                    // the check is what asks whether the node can run steps again.
                    // Tried once a round: a busy sshd is this loop's to try again, within `wait`.
                    let error = match transport::connect(&transport, options, OnBusy::GiveUp).await {
                        Ok(c) => match c.check().await {
                            Ok(()) => {
                                let connect_ms = started.elapsed().as_millis() as u64;
                                return (rank, Link { conn: Ok(Arc::new(c)), connect_ms });
                            }
                            Err(e) => e.to_string(),
                        },
                        Err(e) => e.to_string(),
                    };
                    let waiting =
                        Event::NodeWaiting { node_rank: rank, host: host.clone(), error: error.clone() };
                    let _ = events.send(waiting).await;
                    if Instant::now() + RECONNECT_EVERY > deadline {
                        return (rank, Link { conn: Err(error), connect_ms: 0 });
                    }
                    tokio::time::sleep(RECONNECT_EVERY).await;
                }
            });
        }
        let mut links: Vec<Option<Link>> = plan.nodes.iter().map(|_| None).collect();
        while let Some(joined) = set.join_next().await {
            let (rank, link) = joined.expect("reconnect task panicked");
            links[rank] = Some(link);
        }
        let fleet = Fleet { links: links.into_iter().map(|l| l.expect("every node answered")).collect() };
        match fleet.links.iter().position(|l| l.conn.is_err()) {
            Some(rank) => Err((rank, fleet)),
            None => Ok(fleet),
        }
    }

    /// Close every connection (each SSH master exits), all at once.
    pub async fn close(self) {
        // Through Slurm, the steps this herd started that are still there once their agents
        // are done with (an srun stuck on a lost node): cancelled, once for the whole job.
        let slurm = self.links.iter().find_map(|l| match l.conn.as_deref() {
            Ok(Connection::Slurm(t)) => Some(t.clone()),
            _ => None,
        });
        if let Some(target) = slurm {
            // A fleet step whose nodes are all done ends on its own within moments.
            transport::step::settle().await;
            match transport::slurm::cancel_steps(
                &target.job_id,
                &transport::slurm::own_step_name(&target),
                false,
            )
            .await
            {
                Ok(steps) if !steps.is_empty() => tracing::debug!("cancelled steps left running: {steps:?}"),
                Ok(_) => {}
                Err(e) => tracing::warn!("cannot cancel herd's steps in job {}: {e}", target.job_id),
            }
        }
        let mut set = JoinSet::new();
        for link in self.links {
            if let Ok(conn) = link.conn {
                if let Ok(conn) = Arc::try_unwrap(conn) {
                    set.spawn(conn.close());
                }
            }
        }
        while set.join_next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn states(pairs: &[(&str, &str)]) -> std::collections::HashMap<String, String> {
        pairs.iter().map(|(n, s)| (n.to_string(), s.to_string())).collect()
    }

    #[test]
    fn a_failed_sinfo_refuses_no_node() {
        let nodes = [(0, "n1"), (1, "n2")];
        let error = TransportError::Slurm("sinfo --nodes ...: slurmctld timed out".into());
        assert!(refusals(&nodes, Err(error)).is_empty());
    }

    #[test]
    fn a_down_drained_draining_failing_or_silent_node_is_refused() {
        let nodes = [(0, "n1"), (1, "n2"), (2, "n3"), (3, "n4"), (4, "n5")];
        let got = refusals(
            &nodes,
            Ok(states(&[("n1", "mixed"), ("n2", "draining"), ("n3", "drained"), ("n4", "down*")])),
        );
        let mut refused: Vec<usize> = got.keys().copied().collect();
        refused.sort();
        assert_eq!(refused, [1, 2, 3, 4], "{got:?}");
        assert_eq!(got[&2], "Slurm reports node n3 as drained");
        assert!(got[&4].contains("no such node"), "{got:?}");
    }
}
