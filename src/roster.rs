//! Which of the config's nodes a run uses: the active ones by node rank, the spares, and the
//! quarantined ones. Pure: the plan is built from a roster, and after a failed attempt the
//! supervisor asks it what the run looks like without the nodes it blames.
//!
//! The rules, which `herd plan` shows and docs/guide/spares.md documents:
//! - the first `job.nnodes` nodes in file order that are not quarantined are active, with node
//!   ranks in that order; the others are spares, in file order;
//! - a blamed node's place goes to the first spare, which takes its node rank; every other
//!   node keeps its own;
//! - with no spare left, `restart.min_nodes` lets the run go on without it: the nodes after it
//!   move up one node rank each;
//! - the master is the node holding the master's node rank (`rendezvous.master`'s, or 0); when
//!   it is dropped, node rank 0 is.

use std::collections::BTreeMap;

/// One node the run can no longer use, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blamed {
    pub node_rank: usize,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roster {
    /// The config's hosts, in file order.
    hosts: Vec<String>,
    /// Per node rank, the index of its node among the config's.
    pub active: Vec<usize>,
    /// The spares' indices, in file order.
    pub spares: Vec<usize>,
    /// Quarantined nodes' indices with the reason, in the order they were quarantined.
    pub quarantined: Vec<(usize, String)>,
    /// The node rank of the master.
    pub master_rank: usize,
    /// The fewest active nodes a restart may run on.
    pub min_nodes: usize,
    /// The config leaves room for a node to go (spares, or `min_nodes` below `nnodes`).
    pub reserve: bool,
}

/// A change from one attempt's roster to the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A spare took `node_rank` from `replaced`.
    Promoted { node_rank: usize, spare: String, replaced: String },
    /// `host` left and nobody took its place (`restart.min_nodes`).
    Dropped { host: String },
}

/// The run cannot start on the nodes it may use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{wanted} node(s) needed but only {usable} are not quarantined (quarantined: {}); \
     `herd nodes --release HOST` clears one",
    quarantined.join(", ")
)]
pub struct TooFewNodes {
    pub wanted: usize,
    pub usable: usize,
    pub quarantined: Vec<String>,
}

impl Roster {
    /// The roster a run starts with. `quarantined`: host -> reason, from the run's records;
    /// hosts that are not the config's are ignored. `master`: `rendezvous.master`.
    pub fn new(
        hosts: Vec<String>,
        nnodes: Option<usize>,
        min_nodes: Option<usize>,
        master: Option<&str>,
        quarantined: &BTreeMap<String, String>,
    ) -> Result<Roster, TooFewNodes> {
        let wanted = nnodes.unwrap_or(hosts.len()).min(hosts.len());
        let floor = min_nodes.unwrap_or(wanted).min(wanted);
        let out: Vec<(usize, String)> =
            (0..hosts.len()).filter_map(|i| Some((i, quarantined.get(&hosts[i])?.clone()))).collect();
        let usable: Vec<usize> = (0..hosts.len()).filter(|i| !out.iter().any(|(q, _)| q == i)).collect();
        if usable.len() < floor {
            let quarantined = out.iter().map(|(i, _)| hosts[*i].clone()).collect();
            return Err(TooFewNodes { wanted, usable: usable.len(), quarantined });
        }
        let take = wanted.min(usable.len());
        let active = usable[..take].to_vec();
        let spares = usable[take..].to_vec();
        let master_rank = master.and_then(|m| active.iter().position(|&i| hosts[i] == m)).unwrap_or(0);
        let reserve = wanted < hosts.len() || floor < wanted;
        Ok(Roster { hosts, active, spares, quarantined: out, master_rank, min_nodes: floor, reserve })
    }

    pub fn host(&self, index: usize) -> &str {
        &self.hosts[index]
    }

    /// The host at a node rank.
    pub fn active_host(&self, node_rank: usize) -> &str {
        &self.hosts[self.active[node_rank]]
    }

    pub fn spare_hosts(&self) -> impl Iterator<Item = &str> {
        self.spares.iter().map(|&i| self.hosts[i].as_str())
    }

    pub fn quarantined_hosts(&self) -> impl Iterator<Item = (&str, &str)> {
        self.quarantined.iter().map(|(i, why)| (self.hosts[*i].as_str(), why.as_str()))
    }

    /// Whether a spare is left to take a node's place.
    pub fn has_spare(&self) -> bool {
        !self.spares.is_empty()
    }

    /// Whether the run can go on without some node: a spare, or room above `min_nodes`.
    pub fn has_room(&self) -> bool {
        !self.spares.is_empty() || self.active.len() > self.min_nodes
    }

    /// The roster with `host` no longer quarantined: a spare again, in file order, unless it
    /// is active. `None` when it is not quarantined.
    pub fn released(&self, host: &str) -> Option<Roster> {
        let at = self.quarantined.iter().position(|(i, _)| self.hosts[*i] == host)?;
        let mut next = self.clone();
        let (index, _) = next.quarantined.remove(at);
        if !next.active.contains(&index) {
            let at = next.spares.partition_point(|&s| s < index);
            next.spares.insert(at, index);
        }
        Some(next)
    }

    /// The roster without the blamed nodes, each quarantined and replaced by a spare or,
    /// with none left, dropped down to `min_nodes`; with what changed. `None` when the run
    /// cannot do without all of them: it then waits for them as before.
    pub fn without(&self, blamed: &[Blamed]) -> Option<(Roster, Vec<Change>)> {
        let mut next = self.clone();
        let mut changes = Vec::new();
        let mut dropped = Vec::new();
        for b in blamed {
            let index = *self.active.get(b.node_rank)?;
            if next.quarantined.iter().any(|(q, _)| *q == index) {
                continue;
            }
            next.quarantined.push((index, b.reason.clone()));
            let replaced = self.hosts[index].clone();
            if next.spares.is_empty() {
                dropped.push(b.node_rank);
                changes.push(Change::Dropped { host: replaced });
            } else {
                let spare = next.spares.remove(0);
                next.active[b.node_rank] = spare;
                changes.push(Change::Promoted {
                    node_rank: b.node_rank,
                    spare: self.hosts[spare].clone(),
                    replaced,
                });
            }
        }
        if self.active.len() - dropped.len() < self.min_nodes {
            return None;
        }
        if dropped.contains(&next.master_rank) {
            next.master_rank = 0;
        } else {
            next.master_rank -= dropped.iter().filter(|&&r| r < self.master_rank).count();
        }
        next.active =
            (0..next.active.len()).filter(|r| !dropped.contains(r)).map(|r| next.active[r]).collect();
        // A promoted spare's node rank as it is once the dropped nodes are gone.
        for change in &mut changes {
            if let Change::Promoted { node_rank, .. } = change {
                *node_rank -= dropped.iter().filter(|&&d| d < *node_rank).count();
            }
        }
        Some((next, changes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("n{i}")).collect()
    }

    fn active(r: &Roster) -> Vec<&str> {
        (0..r.active.len()).map(|k| r.active_host(k)).collect()
    }

    fn blame(node_rank: usize) -> Blamed {
        Blamed { node_rank, reason: "node-lost".into() }
    }

    #[test]
    fn nnodes_makes_the_rest_spares_in_file_order() {
        let r = Roster::new(hosts(5), Some(3), None, None, &BTreeMap::new()).unwrap();
        assert_eq!(active(&r), ["n1", "n2", "n3"]);
        assert_eq!(r.spare_hosts().collect::<Vec<_>>(), ["n4", "n5"]);
        assert!(r.has_room());
        let all = Roster::new(hosts(3), None, None, None, &BTreeMap::new()).unwrap();
        assert_eq!(active(&all), ["n1", "n2", "n3"]);
        assert!(!all.has_room(), "no spare and no min_nodes: no room");
        assert!(r.reserve && !all.reserve);
    }

    #[test]
    fn a_quarantined_node_is_skipped_and_the_next_one_is_active() {
        let q = BTreeMap::from([("n2".to_string(), "node-lost".to_string())]);
        let r = Roster::new(hosts(4), Some(3), None, Some("n2"), &q).unwrap();
        assert_eq!(active(&r), ["n1", "n3", "n4"]);
        assert_eq!(r.spare_hosts().count(), 0);
        assert_eq!(r.quarantined_hosts().collect::<Vec<_>>(), [("n2", "node-lost")]);
        // The master it named is out: node rank 0 is the master.
        assert_eq!(r.master_rank, 0);
        // Unknown hosts in the records are not the config's business.
        let q = BTreeMap::from([("elsewhere".to_string(), "x".to_string())]);
        assert_eq!(active(&Roster::new(hosts(2), None, None, None, &q).unwrap()), ["n1", "n2"]);
    }

    #[test]
    fn too_few_usable_nodes_is_an_error_naming_them() {
        let q = BTreeMap::from([("n1".to_string(), "x".to_string()), ("n3".to_string(), "y".to_string())]);
        let err = Roster::new(hosts(3), None, None, None, &q).unwrap_err();
        assert_eq!(
            err.to_string(),
            "3 node(s) needed but only 1 are not quarantined (quarantined: n1, n3); \
             `herd nodes --release HOST` clears one"
        );
        // min_nodes lets it start smaller.
        let r = Roster::new(hosts(3), None, Some(1), None, &q).unwrap();
        assert_eq!(active(&r), ["n2"]);
    }

    #[test]
    fn a_spare_takes_the_blamed_nodes_rank_and_the_others_keep_theirs() {
        let r = Roster::new(hosts(5), Some(3), None, Some("n2"), &BTreeMap::new()).unwrap();
        assert_eq!(r.master_rank, 1);
        let (next, changes) = r.without(&[blame(1)]).unwrap();
        assert_eq!(active(&next), ["n1", "n4", "n3"]);
        assert_eq!(changes, [Change::Promoted { node_rank: 1, spare: "n4".into(), replaced: "n2".into() }]);
        // The master's rank is kept: the spare holding it is the master now.
        assert_eq!(next.master_rank, 1);
        assert_eq!(next.quarantined_hosts().collect::<Vec<_>>(), [("n2", "node-lost")]);
        // The next one uses the next spare, and then there are none.
        let (last, _) = next.without(&[blame(0)]).unwrap();
        assert_eq!(active(&last), ["n5", "n4", "n3"]);
        assert!(!last.has_room());
        assert_eq!(last.without(&[blame(2)]), None, "no spare, no min_nodes: wait as before");
    }

    #[test]
    fn a_released_node_is_a_spare_again_in_file_order() {
        let r = Roster::new(hosts(5), Some(2), None, None, &BTreeMap::new()).unwrap();
        let (next, _) = r.without(&[blame(0)]).unwrap();
        let (next, _) = next.without(&[blame(1)]).unwrap();
        assert_eq!((active(&next), next.spare_hosts().collect::<Vec<_>>()), (vec!["n3", "n4"], vec!["n5"]));
        let back = next.released("n2").unwrap();
        assert_eq!(back.spare_hosts().collect::<Vec<_>>(), ["n2", "n5"]);
        assert_eq!(back.quarantined_hosts().collect::<Vec<_>>(), [("n1", "node-lost")]);
        assert_eq!(active(&back), ["n3", "n4"], "the active nodes stay");
        assert_eq!(back.released("n2"), None, "not quarantined");
        assert_eq!(back.released("n3"), None);
    }

    #[test]
    fn min_nodes_drops_the_blamed_node_and_the_later_ones_move_up() {
        let r = Roster::new(hosts(3), None, Some(2), Some("n3"), &BTreeMap::new()).unwrap();
        assert_eq!(r.master_rank, 2);
        let (next, changes) = r.without(&[blame(1)]).unwrap();
        assert_eq!(active(&next), ["n1", "n3"]);
        assert_eq!(changes, [Change::Dropped { host: "n2".into() }]);
        assert_eq!(next.master_rank, 1, "the master moved up with the others");
        assert_eq!(next.without(&[blame(0)]), None, "not below min_nodes");
        // A dropped master: node rank 0 leads.
        let (next, _) = r.without(&[blame(2)]).unwrap();
        assert_eq!((active(&next), next.master_rank), (vec!["n1", "n2"], 0));
    }

    #[test]
    fn spares_first_then_drops_and_all_or_nothing() {
        let r = Roster::new(hosts(4), Some(3), Some(1), None, &BTreeMap::new()).unwrap();
        let (next, changes) = r.without(&[blame(2), blame(0)]).unwrap();
        assert_eq!(active(&next), ["n2", "n4"]);
        // The spare took node rank 2, which is 1 once node rank 0 is gone.
        assert_eq!(
            changes,
            [
                Change::Promoted { node_rank: 1, spare: "n4".into(), replaced: "n3".into() },
                Change::Dropped { host: "n1".into() }
            ]
        );
        let strict = Roster::new(hosts(4), Some(3), None, None, &BTreeMap::new()).unwrap();
        assert_eq!(strict.without(&[blame(0), blame(2)]), None, "one spare cannot replace two nodes");
        assert_eq!(strict.without(&[blame(7)]), None, "no such node rank");
    }
}
