//! Which nodes a failed attempt blames, and why: the nodes a run should go on without. Pure.
//!
//! A node is blamed when
//! - it was lost (its SSH connection, or its heartbeat) before herd stopped anything, while
//!   most nodes were not, and not judged silent while herd had warned that heartbeats were
//!   late on many nodes at once (its own host overloaded: see `NodeOutcome::late_fleet`): when most are lost at once, the fault is more likely herd's own
//!   network than every node's. Nodes seen lost within `lost_together` of the first are lost
//!   at once, even those seen after the stop was requested (during the probe that delays it):
//!   one cut reaches each connection's keepalives and heartbeat at a slightly different time.
//!   A node that ended lost only after herd sent SIGTERM was not seen lost (its silence aside):
//!   herd's teardown ends it so (a cancelled Slurm step), and it does not count;
//! - the attempt's failing rank on it died of SIGBUS (a memory or a mapped file's fault: the
//!   node's). A SIGSEGV alone does not blame: it is far more often the program's (a bug, a
//!   killed worker's peer, a fault injected), and a node with bad memory segfaults again,
//!   which the next rule catches;
//! - it printed a line of a blaming rule (the built-in hardware rules, or the user's with
//!   `blame = "node"`). A blaming rule of class `comm` (an InfiniBand error) blames only the
//!   attempt's root cause: when a node dies, its peers' InfiniBand reports errors too;
//! - it is the root cause of this attempt and of the one before, with the same class and the
//!   same exit (any exit of a hang, which herd's teardown gives it), and this attempt failed
//!   before it trained: a crash loop on that node. After training, only a third time in a row
//!   blames it: unrelated faults land on the same node one pair in N. Not `port`: a port
//!   clash is the port's, not the node's. Two different faults that happen to land on one
//!   host in a row (a rank killed, then one segfaulting) are two faults, not a node's.
//!
//! But a rank that fails the same way (class, exit, rank, and its root-cause line but for
//! numbers, addresses and host names) on another host, after its node was replaced or the
//! ranks moved, carries its fault with it: a bug of the program's, no node's. From then on,
//! the run blames no node for that fault's signal or repetition (a loss and a hardware line
//! of a class other than `comm` still blame, the root cause's node too), and the nodes blamed earlier for that alone are
//! released (`History`); a node blamed for a loss or a hardware line stays blamed.
//!
//! Only the blame is decided here; whether the run can go on without the node is the
//! roster's question.

use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;

use crate::classify::RuleTable;
use crate::outcome::{FailureClass, NodeExit, NodeOutcome, RootCause, Verdict};
use crate::roster::Blamed;

/// How far apart herd may see nodes lost and still judge them lost at once (one cut of a
/// switch, a partition, herd's own link) rather than each by its own fault. A cut is seen on
/// each node's ssh connection after 3 to 4 unanswered keepalives, or by its heartbeat a
/// timeout after its last beat, which came up to a heartbeat interval before the cut: all
/// within a keepalive interval or so of one another (at most 4 s apart for a timeout of a few
/// seconds, whose keepalives cannot be under 1 s). The first loss starts the stacks probe,
/// which holds the stop for up to `probe_wait`: a loss seen meanwhile cannot be a consequence
/// of the stop, which was not sent yet. One heartbeat timeout, a keepalive interval and the
/// probe's wait leave room for a loaded machine that sees the losses late.
pub fn lost_together(heartbeat_timeout: Duration, probe_wait: Duration) -> Duration {
    heartbeat_timeout + crate::policy::keepalive_interval(heartbeat_timeout) + probe_wait
}

/// The nodes `verdict` and `nodes` blame, by node rank, one reason each, and whether the root
/// cause's node was blamed for its rank's fault alone (`root_fault`), which a fault that
/// follows its rank later explains. `repetition`: how many attempts in a row the root cause
/// was the same (see `History::judge`), when that many blame it. `together`: see `lost_together`.
/// `rank_fault`: the root cause's failure follows its rank, and blames its node for nothing
/// but a loss or a hardware line.
fn blame(
    verdict: &Verdict,
    nodes: &[NodeOutcome],
    rules: &RuleTable,
    repetition: Option<u32>,
    together: Duration,
    rank_fault: bool,
) -> (Vec<Blamed>, bool) {
    let mut blamed: Vec<Blamed> = lost(verdict, nodes, together);
    let mut add = |node_rank: usize, reason: String| {
        let new = !blamed.iter().any(|b| b.node_rank == node_rank);
        if new {
            blamed.push(Blamed { node_rank, reason });
        }
        new
    };
    // Every node's hardware lines, the root cause's too (an InfiniBand error only its, and
    // not when its fault follows its rank: then the error came with the rank).
    let root = verdict.root_cause.as_ref();
    for node in nodes {
        let is_root = !rank_fault && root.is_some_and(|r| r.node_rank == node.node_rank);
        let line = node.lines.iter().find(|l| match rules.blames(&l.text) {
            Some(FailureClass::Comm) => is_root,
            Some(_) => true,
            None => false,
        });
        if let Some(line) = line {
            add(node.node_rank, format!("hardware: {}", line.text.trim()));
        }
    }
    // A root cause lost while herd's own host was strained (see `NodeOutcome::late_fleet`)
    // is no node's fault, however often it comes.
    let strained = |r: &RootCause| nodes.iter().any(|n| n.node_rank == r.node_rank && n.late_fleet);
    let root_late = root.is_some_and(strained);
    let for_fault = match root_fault(verdict, repetition).filter(|_| !rank_fault && !root_late) {
        Some((node_rank, reason)) => add(node_rank, reason),
        None => false,
    };
    (blamed, for_fault)
}

/// Whether the root cause's own failure blames its node, and why: its rank died of SIGBUS, or
/// it is the root cause of `repetition` attempts in a row (see `History::judge`). A fault that
/// follows its rank explains both.
fn root_fault(verdict: &Verdict, repetition: Option<u32>) -> Option<(usize, String)> {
    let root = verdict.root_cause.as_ref()?;
    if let NodeExit::Signal(sig @ 7) = root.exit {
        let who = root.rank.map_or("a process".to_string(), |r| format!("rank {r}"));
        return Some((root.node_rank, format!("{who} died of {}", crate::outcome::signal_name(sig))));
    }
    let times = match repetition? {
        2 => "two".to_string(),
        3 => "three".to_string(),
        n => n.to_string(),
    };
    Some((root.node_rank, format!("the root cause of {times} attempts in a row")))
}

/// The nodes lost before herd stopped anything, or the node whose silence made herd stop (the
/// root cause, lost: it ends only after the stop, at the kill deadline, when no transport of
/// its own noticed the loss first; a Slurm step has none); none when most nodes were lost at
/// once with them (see `lost_at_once`).
fn lost(verdict: &Verdict, nodes: &[NodeOutcome], together: Duration) -> Vec<Blamed> {
    let root = verdict.root_cause.as_ref();
    let silenced = |n: &NodeOutcome| {
        verdict.class == FailureClass::NodeLost
            && root.is_some_and(|r| r.node_rank == n.node_rank && matches!(r.exit, NodeExit::Lost(_)))
    };
    let own: Vec<&NodeOutcome> = nodes
        .iter()
        .filter(|n| matches!(n.exit, NodeExit::Lost(_)) && (n.stop_requested_at.is_none() || silenced(n)))
        .collect();
    if !minority(lost_at_once(&own, nodes, together), nodes.len()) {
        return Vec::new();
    }
    // A silence judged while herd itself said the whole fleet was late is the fleet's.
    (own.iter())
        .filter(|n| !n.late_fleet)
        .filter_map(|n| match &n.exit {
            NodeExit::Lost(why) => {
                Some(Blamed { node_rank: n.node_rank, reason: format!("node-lost: {why}") })
            }
            _ => None,
        })
        .collect()
}

/// How many `nodes` were lost at once with the first of `own` (the nodes lost before herd
/// stopped anything): `own`, and every node seen lost within `together` of the first, even
/// one seen after the stop was requested (during the probe). A node that ended lost only
/// after herd sent the stop has no `lost_at` and does not count: herd's own teardown may end
/// a healthy node so (a Slurm step cancelled: "exit code 143").
fn lost_at_once(own: &[&NodeOutcome], nodes: &[NodeOutcome], together: Duration) -> usize {
    let Some(first) = own.iter().map(|n| n.lost_at.unwrap_or(n.ended_at)).min() else { return 0 };
    let with_first = |n: &&NodeOutcome| {
        own.iter().any(|o| o.node_rank == n.node_rank) || n.lost_at.is_some_and(|at| at <= first + together)
    };
    nodes.iter().filter(|n| matches!(n.exit, NodeExit::Lost(_))).filter(with_first).count()
}

/// Whether `failing` of `of` nodes are few enough to be the nodes' own fault: at most half
/// (one of one, one of two). More, and the cause is shared (herd's network, the config).
pub fn minority(failing: usize, of: usize) -> bool {
    failing <= (of / 2).max(1)
}

/// `blamed`, when they are a [`minority`] of `of` nodes; none when most are (a shared cause).
pub fn unless_most(blamed: Vec<Blamed>, of: usize) -> Vec<Blamed> {
    if minority(blamed.len(), of) {
        blamed
    } else {
        Vec::new()
    }
}

/// How a rank failed: what a later attempt may show again, on its host or on another.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fault {
    class: FailureClass,
    /// The global rank, when the launcher said; else the node rank and local rank.
    rank: Option<u32>,
    node_rank: usize,
    local_rank: Option<u32>,
    exit: NodeExit,
    /// The root cause's line as any host would print it (see `gist`).
    line: Option<String>,
}

/// A root-cause line without what differs from host to host or run to run: the `[rankN]:`
/// prefix, the host's name, and every word holding a digit (numbers, pids, addresses, other
/// hosts' names) made `#`.
fn gist(line: &str, host: &str) -> String {
    static PREFIX: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\[rank\d+\]:\s?").expect("compiles"));
    static DIGITS: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"[\w.:/\-]*\d[\w.:/\-]*").expect("compiles"));
    let line = PREFIX.replace(line.trim(), "");
    let line = if host.is_empty() { line } else { line.replace(host, "#").into() };
    DIGITS.replace_all(&line, "#").into_owned()
}

impl Fault {
    /// The root cause's, with its host; none for a hang pinned on no rank, or a lost node (a
    /// host's failure, not a rank's).
    fn of(verdict: &Verdict) -> Option<(String, Fault)> {
        let root = verdict.root_cause.as_ref().filter(|r| !matches!(r.exit, NodeExit::Lost(_)))?;
        let fault = Fault {
            class: verdict.class,
            rank: root.rank,
            node_rank: root.node_rank,
            local_rank: root.local_rank,
            exit: root.exit.clone(),
            line: root.line.as_deref().map(|l| gist(l, &root.host)),
        };
        Some((root.host.clone(), fault))
    }

    /// The same rank, failed the same way: class, exit and root-cause line alike.
    fn same(&self, other: &Fault) -> bool {
        let same_rank = match (self.rank, other.rank) {
            (Some(a), Some(b)) => a == b,
            (None, None) => (self.node_rank, self.local_rank) == (other.node_rank, other.local_rank),
            _ => false,
        };
        same_rank && self.class == other.class && self.exit == other.exit && self.line == other.line
    }

    /// Another rank, failed the same way: class, exit and a root-cause line alike.
    fn alike_on_another_rank(&self, other: &Fault) -> bool {
        let another = match (self.rank, other.rank) {
            (Some(a), Some(b)) => a != b,
            _ => self.local_rank != other.local_rank,
        };
        another
            && self.line.is_some()
            && self.class == other.class
            && self.exit == other.exit
            && self.line == other.line
    }

    fn words(&self) -> String {
        let who = match (self.rank, self.local_rank) {
            (Some(rank), _) => format!("rank {rank}"),
            (None, Some(local)) => format!("local rank {local} of node rank {}", self.node_rank),
            (None, None) => format!("node rank {}", self.node_rank),
        };
        format!("{who} failed the same way ({}, {})", self.class, self.exit)
    }
}

/// A failed attempt's root cause, as the next attempt's blame needs it.
#[derive(Debug, Clone)]
struct Last {
    host: String,
    class: FailureClass,
    exit: NodeExit,
    /// Its fault, if a rank's.
    fault: Option<Fault>,
    /// How many attempts in a row, this one included, had this root cause (`repeated_by`).
    repeats: u32,
}

impl Last {
    /// Whether `verdict`'s root cause is this one again: the same host, class and exit (lost
    /// for one reason or another is the same: the node went away both times), not `port` (a
    /// port clash is the port's, not the node's).
    fn repeated_by(&self, verdict: &Verdict) -> bool {
        let Some(root) = verdict.root_cause.as_ref() else { return false };
        let same_exit = match (&self.exit, &root.exit) {
            (NodeExit::Lost(_), NodeExit::Lost(_)) => true,
            // A hang's exit is whatever herd's teardown made of it (SIGTERM, SIGKILL, lost).
            _ if verdict.class == FailureClass::Hang => true,
            (a, b) => a == b,
        };
        root.host == self.host && self.class == verdict.class && same_exit && self.class != FailureClass::Port
    }
}

/// What a run's failed attempts tell the blame of the next ones: the last root cause, the
/// faults seen to follow their rank to another host, and the hosts blamed for a fault.
#[derive(Debug, Default)]
pub struct History {
    /// The last failed attempt's root cause.
    last: Option<Last>,
    /// Faults that hit the same rank the same way on two hosts: the program's, no node's.
    follow_rank: Vec<Fault>,
    /// The hosts blamed for their root cause's fault alone (`root_fault`), with it: not those
    /// blamed for a loss or a hardware line, which no rank carries.
    blamed_for: Vec<(String, Fault)>,
}

/// A failed attempt's blame.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Judged {
    pub blamed: Vec<Blamed>,
    /// Hosts blamed earlier in the run for a fault now seen to follow its rank, each with why
    /// it is no longer to blame.
    pub released: Vec<(String, String)>,
}

impl History {
    /// The nodes a failed attempt blames (see `blame`), and those it clears: when its root
    /// cause's rank failed the same way on another host than the last attempt's root cause,
    /// the fault follows the rank. From then on it blames no node, and the hosts blamed for
    /// it are released.
    ///
    /// The same root cause again (`Last::repeated_by`) blames its node when the attempt did
    /// not train (`trained`: see `policy::trained`): it failed again before the job got going,
    /// a crash loop on that node. After training, the second failure is a new fault that
    /// happened to land on the same node (at 16 nodes, one pair of faults in 16 does): only a
    /// third in a row blames it.
    pub fn judge(
        &mut self,
        verdict: &Verdict,
        nodes: &[NodeOutcome],
        rules: &RuleTable,
        together: Duration,
        trained: bool,
    ) -> Judged {
        let fault = Fault::of(verdict);
        if let (Some((host, f)), Some(Last { host: last_host, fault: Some(last), .. })) = (&fault, &self.last)
        {
            if f.same(last) && host != last_host && !self.follows(f) {
                self.follow_rank.push(f.clone());
            }
        }
        let rank_fault = fault.as_ref().is_some_and(|(_, f)| self.follows(f));
        // Two ranks of one host that fail alike (gloo's abort at exit from a script without
        // destroy_process_group, on rank 5 and then rank 4) show the program's fault twice,
        // not the host's: no repetition that blames it.
        // Not a memory fault, though: bad memory faults whichever rank runs on it.
        let alike_on_two_ranks = match (&fault, &self.last) {
            (Some((host, f)), Some(Last { host: last_host, fault: Some(last), .. })) => {
                host == last_host
                    && f.alike_on_another_rank(last)
                    && !matches!(f.exit, NodeExit::Signal(7 | 11))
            }
            _ => false,
        };
        let repeats = match self.last.as_ref().filter(|_| !alike_on_two_ranks) {
            Some(last) if last.repeated_by(verdict) => last.repeats + 1,
            _ => 1,
        };
        let repetition = (repeats >= 3 || (repeats == 2 && !trained)).then_some(repeats);
        let (blamed, for_fault) = blame(verdict, nodes, rules, repetition, together, rank_fault);
        let mut released = Vec::new();
        if let Some((host, f)) = &fault {
            if rank_fault {
                let why = format!("{} on {host}: the fault follows the rank, not the node", f.words());
                self.blamed_for.retain(|(h, g)| {
                    let release = g.same(f) && h != host;
                    if release {
                        released.push((h.clone(), why.clone()));
                    }
                    !release
                });
            } else if for_fault {
                self.blamed_for.push((host.clone(), f.clone()));
            }
        }
        let root = verdict.root_cause.as_ref();
        self.last = root.map(|r| Last {
            host: r.host.clone(),
            class: verdict.class,
            exit: r.exit.clone(),
            fault: fault.map(|(_, f)| f),
            // A fault that follows its rank is the program's: no count against the host.
            repeats: if rank_fault { 0 } else { repeats },
        });
        Judged { blamed, released }
    }

    fn follows(&self, fault: &Fault) -> bool {
        self.follow_rank.iter().any(|f| f.same(fault))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::RuleSpec;
    use crate::outcome::TimedLine;

    /// `lost_together` of a heartbeat timeout of 15 s.
    const TOGETHER: Duration = Duration::from_secs(23);
    /// The attempt judged failed before it trained.
    const UNTRAINED: bool = false;

    /// The blame of an attempt alone, its root cause's failure not known to follow its rank.
    fn blame(
        verdict: &Verdict,
        nodes: &[NodeOutcome],
        rules: &RuleTable,
        previous: Option<(&str, FailureClass)>,
    ) -> Vec<Blamed> {
        // The attempt before failed with the same exit as this one's root cause, and this one
        // did not train.
        let exit = verdict.root_cause.as_ref().map_or(NodeExit::ExitCode(1), |r| r.exit.clone());
        let repeated = previous.is_some_and(|(host, class)| {
            Last { host: host.into(), class, exit: exit.clone(), fault: None, repeats: 1 }
                .repeated_by(verdict)
        });
        super::blame(verdict, nodes, rules, repeated.then_some(2), TOGETHER, false).0
    }

    fn node(node_rank: usize, exit: NodeExit, lines: &[&str]) -> NodeOutcome {
        NodeOutcome {
            node_rank,
            host: format!("n{node_rank}"),
            first_rank: node_rank as u32 * 2,
            exit,
            ended_at: Duration::from_secs(1),
            stop_requested_at: None,
            lost_at: None,
            late_fleet: false,
            lines: lines.iter().map(|t| TimedLine { at: Duration::ZERO, text: t.to_string() }).collect(),
            processes: Vec::new(),
            stacks: Vec::new(),
        }
    }

    fn verdict(class: FailureClass, root: Option<(usize, Option<u32>, NodeExit)>) -> Verdict {
        Verdict {
            class,
            root_cause: root.map(|(node_rank, rank, exit)| RootCause {
                rank,
                local_rank: None,
                node_rank,
                host: format!("n{node_rank}"),
                exit,
                line: None,
            }),
            consequences: Vec::new(),
            hint: "",
        }
    }

    fn reasons(b: &[Blamed]) -> Vec<(usize, &str)> {
        b.iter().map(|b| (b.node_rank, b.reason.as_str())).collect()
    }

    #[test]
    fn a_lost_node_is_blamed() {
        let rules = RuleTable::new(&[]);
        let nodes = [
            node(0, NodeExit::Signal(15), &["Connection closed by peer"]),
            node(1, NodeExit::Lost("no heartbeat for 15s".into()), &[]),
        ];
        let v =
            verdict(FailureClass::NodeLost, Some((1, None, NodeExit::Lost("no heartbeat for 15s".into()))));
        assert_eq!(reasons(&blame(&v, &nodes, &rules, None)), [(1, "node-lost: no heartbeat for 15s")]);
        // Its silence made herd stop every node, itself included, and it ended only at the
        // kill deadline: still its fault.
        let mut late = nodes.clone();
        late[1].stop_requested_at = Some(Duration::ZERO);
        assert_eq!(reasons(&blame(&v, &late, &rules, None)), [(1, "node-lost: no heartbeat for 15s")]);
        // Lost after herd stopped it for another node's crash (no exit status after SIGKILL):
        // not its fault.
        let crash = verdict(FailureClass::Crash, Some((0, Some(0), NodeExit::Signal(9))));
        assert_eq!(blame(&crash, &late, &rules, None), []);
    }

    #[test]
    fn when_most_nodes_are_lost_at_once_none_is_blamed() {
        let rules = RuleTable::new(&[]);
        let lost = || NodeExit::Lost("connection to the node was lost".into());
        let nodes = [node(0, lost(), &[]), node(1, lost(), &[]), node(2, NodeExit::Signal(15), &[])];
        let v = verdict(FailureClass::NodeLost, Some((0, None, lost())));
        assert_eq!(blame(&v, &nodes, &rules, None), [], "two of three lost: herd's network, more likely");
        assert!(minority(1, 1) && minority(1, 2) && minority(2, 4) && !minority(3, 4) && !minority(2, 3));
    }

    #[test]
    fn losses_close_together_are_one_even_when_seen_after_the_stop() {
        let rules = RuleTable::new(&[]);
        assert_eq!(lost_together(Duration::from_secs(15), Duration::from_secs(5)), TOGETHER);
        let ms = Duration::from_millis;
        let lost = |node_rank, at: u64, stop: Option<u64>| NodeOutcome {
            ended_at: ms(at),
            lost_at: Some(ms(at)),
            stop_requested_at: stop.map(ms),
            ..node(node_rank, NodeExit::Lost("the ssh connection to the node was lost".into()), &[])
        };
        // A node judged silent after herd warned of late heartbeats fleet-wide (a loaded host):
        // no blame; the same silence alone blames it.
        let nodes =
            [node(0, NodeExit::Signal(15), &[]), lost(1, 30_000, None), node(2, NodeExit::Signal(15), &[])];
        let v = verdict(FailureClass::NodeLost, Some((1, None, NodeExit::Lost("no heartbeat".into()))));
        assert_eq!(
            reasons(&blame(&v, &nodes, &rules, None)),
            [(1, "node-lost: the ssh connection to the node was lost")]
        );
        let late = [nodes[0].clone(), NodeOutcome { late_fleet: true, ..nodes[1].clone() }, nodes[2].clone()];
        assert_eq!(blame(&v, &late, &rules, None), []);
        // A partition: node 2's loss was seen first and started the stacks probe, which dates
        // the stop at it; nodes 0 and 1 were seen lost 1 ms later, during the probe.
        let cut = [lost(0, 30_001, Some(30_000)), lost(1, 30_001, Some(30_000)), lost(2, 30_000, None)];
        let v = verdict(FailureClass::NodeLost, Some((2, None, cut[2].exit.clone())));
        assert_eq!(blame(&v, &cut, &rules, None), [], "three of three lost at once: no node's fault");
        // Three of four, the spare's place aside: still most of them.
        let mut four = cut.to_vec();
        four.push(node(3, NodeExit::Signal(15), &[]));
        four[3].stop_requested_at = Some(ms(30_000));
        assert_eq!(blame(&v, &four, &rules, None), []);
        // Silent nodes: each judged lost a heartbeat apart, ended only once herd gave up on
        // them; the time they were judged lost counts, not their end.
        let mut silent = cut.clone();
        silent[0].lost_at = Some(ms(33_000));
        silent[0].ended_at = ms(58_000);
        silent[1].ended_at = ms(58_000);
        assert_eq!(blame(&v, &silent, &rules, None), []);
        // A lone loss is still its node's, and so are losses too far apart to be one cut: a
        // node lost long after herd stopped it is a consequence.
        let lone =
            [node(0, NodeExit::Signal(15), &[]), node(1, NodeExit::Signal(15), &[]), lost(2, 30_000, None)];
        assert_eq!(reasons(&blame(&v, &lone, &rules, None)).len(), 1);
        let mut apart = cut.clone();
        apart[0].lost_at = Some(ms(30_000) + TOGETHER + ms(1));
        apart[1] = node(1, NodeExit::Signal(15), &[]);
        assert_eq!(
            reasons(&blame(&v, &apart, &rules, None)),
            [(2, "node-lost: the ssh connection to the node was lost")]
        );
    }

    #[test]
    fn a_node_ended_lost_by_the_teardown_is_not_lost_with_the_silent_one() {
        let rules = RuleTable::new(&[]);
        let ms = Duration::from_millis;
        // Node 2 went silent at 30 s and made herd stop every node; node 0's step, cancelled
        // at the end of the teardown 15 s later, ended "lost" (no `lost_at`: herd sent the stop
        // before). One of three lost: node 2's fault.
        let silent = NodeExit::Lost("no heartbeat for 15s".into());
        let nodes = [
            NodeOutcome {
                ended_at: ms(45_000),
                stop_requested_at: Some(ms(30_000)),
                ..node(0, NodeExit::Lost("agent ended with exit code 143 before the job did".into()), &[])
            },
            NodeOutcome { stop_requested_at: Some(ms(30_000)), ..node(1, NodeExit::Signal(15), &[]) },
            NodeOutcome {
                ended_at: ms(45_000),
                stop_requested_at: Some(ms(30_000)),
                lost_at: Some(ms(30_000)),
                ..node(2, silent.clone(), &[])
            },
        ];
        let v = verdict(FailureClass::NodeLost, Some((2, None, silent)));
        assert_eq!(reasons(&blame(&v, &nodes, &rules, None)), [(2, "node-lost: no heartbeat for 15s")]);
    }

    #[test]
    fn a_fault_that_follows_its_rank_to_another_host_blames_no_node_and_releases_the_blamed() {
        let rules = RuleTable::new(&[]);
        let nodes = [node(0, NodeExit::Signal(7), &[]), node(1, NodeExit::Signal(15), &[])];
        let on = |host: &str, rank: u32, exit: NodeExit| {
            let mut v = verdict(FailureClass::Crash, Some((0, Some(rank), exit)));
            v.root_cause.as_mut().unwrap().host = host.into();
            v
        };
        let bus = NodeExit::Signal(7);
        let mut h = History::default();
        // Rank 0 dies of SIGBUS on n0: its node is blamed, and a spare, n2, takes its node rank.
        let first = h.judge(&on("n0", 0, bus.clone()), &nodes, &rules, TOGETHER, UNTRAINED);
        assert_eq!(reasons(&first.blamed), [(0, "rank 0 died of SIGBUS")]);
        assert!(first.released.is_empty());
        // Rank 0 dies of SIGBUS on n2 too: the fault is the rank's. n2 is not blamed, n0 released.
        let second = h.judge(&on("n2", 0, bus.clone()), &nodes, &rules, TOGETHER, UNTRAINED);
        assert_eq!(second.blamed, []);
        assert_eq!(
            second.released,
            [("n0".to_string(), "rank 0 failed the same way (crash, signal 7 (SIGBUS)) on n2: the fault follows the rank, not the node".to_string())]
        );
        // Nor is n2 blamed the next time: not for the signal, nor as the root cause twice.
        let third = h.judge(&on("n2", 0, bus.clone()), &nodes, &rules, TOGETHER, UNTRAINED);
        assert_eq!(third, Judged::default());
        // Another rank's fault, or another failure, is judged as ever.
        let other = h.judge(&on("n2", 1, bus.clone()), &nodes, &rules, TOGETHER, UNTRAINED);
        assert_eq!(reasons(&other.blamed), [(0, "rank 1 died of SIGBUS")]);
        // A hardware line of another node still blames it.
        let xid = [node(0, NodeExit::Signal(7), &[]), node(1, NodeExit::Signal(15), &["NVRM: Xid 79"])];
        let with_xid = h.judge(&on("n2", 0, bus), &xid, &rules, TOGETHER, UNTRAINED);
        assert_eq!(reasons(&with_xid.blamed), [(1, "hardware: NVRM: Xid 79")]);
    }

    #[test]
    fn a_fault_that_follows_its_rank_releases_no_node_blamed_for_hardware_nor_hides_the_roots() {
        let rules = RuleTable::new(&[]);
        let xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.";
        let on = |host: &str| {
            let mut v = verdict(FailureClass::Crash, Some((0, Some(0), NodeExit::Signal(11))));
            v.root_cause.as_mut().unwrap().host = host.into();
            v
        };
        let mut h = History::default();
        // Rank 0 segfaults on n0, which also printed an Xid: blamed for the hardware.
        let with_xid = [node(0, NodeExit::Signal(11), &[xid]), node(1, NodeExit::Signal(15), &[])];
        let first = h.judge(&on("n0"), &with_xid, &rules, TOGETHER, UNTRAINED);
        assert_eq!(reasons(&first.blamed), [(0, format!("hardware: {xid}").as_str())]);
        // Rank 0 segfaults on n2: the fault follows the rank, but n0's Xid is no rank's: n0
        // stays blamed.
        let plain = [node(0, NodeExit::Signal(11), &[]), node(1, NodeExit::Signal(15), &[])];
        assert_eq!(h.judge(&on("n2"), &plain, &rules, TOGETHER, UNTRAINED), Judged::default());
        // The root cause's own Xid still blames its node when the segfault follows the rank.
        let again = h.judge(&on("n3"), &with_xid, &rules, TOGETHER, UNTRAINED);
        assert_eq!(reasons(&again.blamed), [(0, format!("hardware: {xid}").as_str())]);
    }

    #[test]
    fn a_rank_failing_with_another_error_is_no_fault_that_follows_it() {
        let rules = RuleTable::new(&[]);
        let nodes = [node(0, NodeExit::ExitCode(1), &[])];
        let on = |host: &str, line: &str| {
            let mut v = verdict(FailureClass::Crash, Some((0, Some(0), NodeExit::ExitCode(1))));
            let root = v.root_cause.as_mut().unwrap();
            (root.host, root.line) = (host.into(), Some(line.into()));
            v
        };
        let illegal = |at: &str, host: &str| {
            format!("[rank0]: RuntimeError: CUDA error: an illegal memory access at {at} on {host}")
        };
        let mut h = History::default();
        h.judge(&on("n0", &illegal("0x7f3a00", "n0")), &nodes, &rules, TOGETHER, UNTRAINED);
        let twice = h.judge(&on("n0", &illegal("0x7f3a80", "n0")), &nodes, &rules, TOGETHER, UNTRAINED);
        assert_eq!(reasons(&twice.blamed), [(0, "the root cause of two attempts in a row")]);
        // On n2, rank 0 exits 1 too, but of another error: n0 keeps its blame.
        let other =
            h.judge(&on("n2", "ValueError: shapes do not match"), &nodes, &rules, TOGETHER, UNTRAINED);
        assert_eq!(other, Judged::default());
        // The same error, its address and host aside, on n3: it follows the rank.
        h.judge(&on("n0", &illegal("0x1", "n0")), &nodes, &rules, TOGETHER, UNTRAINED);
        let moved = h.judge(&on("n3", &illegal("0x2", "gpu-03")), &nodes, &rules, TOGETHER, UNTRAINED);
        assert_eq!(moved.released.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ["n0"]);
        assert_eq!(gist("[rank0]: OSError: [Errno 5] on host-a", "host-a"), "OSError: [Errno #] on #");
    }

    /// Ranks 5 and then 4 of one node abort at exit alike (gloo's `terminate called without an
    /// active exception` from a script that forgets destroy_process_group): the program's fault
    /// on two ranks, not the host's. Another error on the other rank still counts.
    #[test]
    fn the_same_fault_on_two_ranks_of_one_host_does_not_blame_it() {
        let rules = RuleTable::new(&[]);
        let nodes = [node(2, NodeExit::Signal(6), &[])];
        let on = |rank: u32, line: &str| {
            let mut v = verdict(FailureClass::Crash, Some((2, Some(rank), NodeExit::Signal(6))));
            v.root_cause.as_mut().unwrap().line = Some(line.into());
            v
        };
        let abort = |rank: u32, pid: u32| {
            format!("[rank{rank}]: terminate called without an active exception (pid {pid})")
        };
        let mut h = History::default();
        h.judge(&on(5, &abort(5, 4711)), &nodes, &rules, TOGETHER, UNTRAINED);
        assert_eq!(h.judge(&on(4, &abort(4, 4802)), &nodes, &rules, TOGETHER, UNTRAINED), Judged::default());
        let other = h.judge(
            &on(5, "RuntimeError: CUDA error: unspecified launch failure"),
            &nodes,
            &rules,
            TOGETHER,
            UNTRAINED,
        );
        assert_eq!(reasons(&other.blamed), [(2, "the root cause of two attempts in a row")]);
    }

    #[test]
    fn a_crash_blamed_as_the_root_cause_twice_is_released_when_it_follows_its_rank() {
        let rules = RuleTable::new(&[]);
        let nodes = [node(0, NodeExit::Signal(6), &[])];
        let on = |host: &str| {
            let mut v = verdict(FailureClass::Crash, Some((0, Some(0), NodeExit::Signal(6))));
            v.root_cause.as_mut().unwrap().host = host.into();
            v
        };
        let mut h = History::default();
        assert_eq!(h.judge(&on("n0"), &nodes, &rules, TOGETHER, UNTRAINED), Judged::default());
        let twice = h.judge(&on("n0"), &nodes, &rules, TOGETHER, UNTRAINED);
        assert_eq!(reasons(&twice.blamed), [(0, "the root cause of two attempts in a row")]);
        let moved = h.judge(&on("n2"), &nodes, &rules, TOGETHER, UNTRAINED);
        assert_eq!((moved.blamed.len(), moved.released.len()), (0, 1), "{moved:?}");
        assert_eq!(moved.released[0].0, "n0");
        // A host failing the same way while the ranks stay put keeps its blame (the test
        // above: n0 twice). And a rank failing differently on the new host is no repetition.
        let mut h = History::default();
        h.judge(&on("n0"), &nodes, &rules, TOGETHER, UNTRAINED);
        let bus = verdict(FailureClass::Crash, Some((0, Some(0), NodeExit::Signal(7))));
        let other = h.judge(&bus, &nodes, &rules, TOGETHER, UNTRAINED);
        assert_eq!(reasons(&other.blamed), [(0, "rank 0 died of SIGBUS")]);
    }

    #[test]
    fn a_bus_error_blames_its_node_and_a_segfault_crash_or_user_error_does_not() {
        let rules = RuleTable::new(&[]);
        let nodes = [node(0, NodeExit::ExitCode(1), &[]), node(1, NodeExit::ExitCode(1), &[])];
        let bus = verdict(FailureClass::Crash, Some((0, None, NodeExit::Signal(7))));
        assert_eq!(reasons(&blame(&bus, &nodes, &rules, None)), [(0, "a process died of SIGBUS")]);
        let rank = verdict(FailureClass::Crash, Some((1, Some(3), NodeExit::Signal(7))));
        assert_eq!(reasons(&blame(&rank, &nodes, &rules, None)), [(1, "rank 3 died of SIGBUS")]);
        for exit in [NodeExit::Signal(11), NodeExit::Signal(9), NodeExit::Signal(6), NodeExit::ExitCode(1)] {
            let v = verdict(FailureClass::Crash, Some((1, Some(3), exit)));
            assert_eq!(blame(&v, &nodes, &rules, None), [], "{v:?}");
        }
    }

    #[test]
    fn two_faults_of_different_exits_on_one_host_in_a_row_do_not_blame_it() {
        // The soak's case: a rank SIGKILLed on n1, then the next fault, a segfault, lands on
        // n1 too. Two faults, not a node's; a node with bad memory segfaults twice.
        let rules = RuleTable::new(&[]);
        let nodes = [node(1, NodeExit::Signal(11), &[])];
        let on_n1 = |exit: NodeExit| verdict(FailureClass::Crash, Some((1, Some(3), exit)));
        let mut h = History::default();
        assert_eq!(
            h.judge(&on_n1(NodeExit::Signal(9)), &nodes, &rules, TOGETHER, UNTRAINED),
            Judged::default()
        );
        assert_eq!(
            h.judge(&on_n1(NodeExit::Signal(11)), &nodes, &rules, TOGETHER, UNTRAINED),
            Judged::default()
        );
        let again = h.judge(&on_n1(NodeExit::Signal(11)), &nodes, &rules, TOGETHER, UNTRAINED);
        assert_eq!(reasons(&again.blamed), [(1, "the root cause of two attempts in a row")]);
        // Lost twice, for whatever reasons, is the same exit: the node went away both times.
        let lost = |why: &str| verdict(FailureClass::NodeLost, Some((1, None, NodeExit::Lost(why.into()))));
        let mut h = History::default();
        let quiet = [node(1, NodeExit::ExitCode(0), &[])];
        h.judge(&lost("no heartbeat for 15s"), &quiet, &rules, TOGETHER, UNTRAINED);
        let twice =
            h.judge(&lost("the ssh connection to the node was lost"), &quiet, &rules, TOGETHER, UNTRAINED);
        assert_eq!(reasons(&twice.blamed), [(1, "the root cause of two attempts in a row")]);
    }

    #[test]
    fn after_training_the_same_root_cause_blames_only_the_third_time_in_a_row() {
        // The soak's case: the master's rank killed, then, a minute of training later, the
        // master's rank killed again. Two faults that landed on one node, not a crash loop.
        let rules = RuleTable::new(&[]);
        let nodes = [node(0, NodeExit::Signal(9), &[])];
        let kill = verdict(FailureClass::Crash, Some((0, Some(0), NodeExit::Signal(9))));
        let mut h = History::default();
        assert_eq!(h.judge(&kill, &nodes, &rules, TOGETHER, true), Judged::default());
        assert_eq!(h.judge(&kill, &nodes, &rules, TOGETHER, true), Judged::default());
        let third = h.judge(&kill, &nodes, &rules, TOGETHER, true);
        assert_eq!(reasons(&third.blamed), [(0, "the root cause of three attempts in a row")]);
        // Failing again before the job trained is a crash loop on the node: blamed at once.
        let mut h = History::default();
        h.judge(&kill, &nodes, &rules, TOGETHER, true);
        let looped = h.judge(&kill, &nodes, &rules, TOGETHER, UNTRAINED);
        assert_eq!(reasons(&looped.blamed), [(0, "the root cause of two attempts in a row")]);
        // Another root cause between them starts the count over.
        let mut h = History::default();
        h.judge(&kill, &nodes, &rules, TOGETHER, true);
        h.judge(&kill, &nodes, &rules, TOGETHER, true);
        let mut elsewhere = kill.clone();
        elsewhere.root_cause.as_mut().unwrap().host = "n5".into();
        h.judge(&elsewhere, &nodes, &rules, TOGETHER, true);
        assert_eq!(h.judge(&kill, &nodes, &rules, TOGETHER, true), Judged::default());
    }

    #[test]
    fn a_repetition_is_a_hang_whatever_its_exit_and_a_segfault_on_any_rank_of_the_host() {
        let rules = RuleTable::new(&[]);
        let nodes = [node(1, NodeExit::Signal(9), &[])];
        // A hang's exit is the teardown's: SIGTERM once, SIGKILL the next time.
        let hang = |exit| verdict(FailureClass::Hang, Some((1, Some(2), exit)));
        let mut h = History::default();
        h.judge(&hang(NodeExit::Signal(15)), &nodes, &rules, TOGETHER, UNTRAINED);
        let again = h.judge(&hang(NodeExit::Signal(9)), &nodes, &rules, TOGETHER, UNTRAINED);
        assert_eq!(reasons(&again.blamed), [(1, "the root cause of two attempts in a row")]);
        // Bad memory segfaults whichever rank runs there, with the same line: still the host's.
        let segv = |rank| {
            let mut v = verdict(FailureClass::Crash, Some((1, Some(rank), NodeExit::Signal(11))));
            v.root_cause.as_mut().unwrap().line = Some("Segmentation fault (core dumped)".into());
            v
        };
        let mut h = History::default();
        h.judge(&segv(2), &nodes, &rules, TOGETHER, UNTRAINED);
        let other_rank = h.judge(&segv(3), &nodes, &rules, TOGETHER, UNTRAINED);
        assert_eq!(reasons(&other_rank.blamed), [(1, "the root cause of two attempts in a row")]);
    }

    #[test]
    fn a_fault_that_follows_its_rank_counts_for_no_repetition_of_its_host() {
        let rules = RuleTable::new(&[]);
        let nodes = [node(0, NodeExit::Signal(6), &[])];
        let on = |host: &str, rank: u32| {
            let mut v = verdict(FailureClass::Crash, Some((0, Some(rank), NodeExit::Signal(6))));
            v.root_cause.as_mut().unwrap().host = host.into();
            v
        };
        let mut h = History::default();
        // Rank 0's abort on n0, then on n2: the program's. Then on n2 again, trained each time.
        h.judge(&on("n0", 0), &nodes, &rules, TOGETHER, true);
        h.judge(&on("n2", 0), &nodes, &rules, TOGETHER, true);
        assert_eq!(h.judge(&on("n2", 0), &nodes, &rules, TOGETHER, true), Judged::default());
        // Rank 1 aborts on n2 after training: the first of its own, not a third in a row.
        assert_eq!(h.judge(&on("n2", 1), &nodes, &rules, TOGETHER, true), Judged::default());
    }

    #[test]
    fn hardware_lines_blame_their_node_and_ib_errors_only_the_root_cause() {
        let rules = RuleTable::new(&[]);
        let xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.";
        let ib = "n1:2:3 [1] transport/net_ib.cc:1695 NCCL WARN NET/IB : Got completion from peer 10.0.0.2 with error 12";
        let nodes = [
            node(0, NodeExit::ExitCode(1), &["step 3", ib]),
            node(1, NodeExit::ExitCode(1), &[ib]),
            node(2, NodeExit::ExitCode(1), &[xid]),
        ];
        let v = verdict(FailureClass::Comm, Some((1, None, NodeExit::ExitCode(1))));
        assert_eq!(
            reasons(&blame(&v, &nodes, &rules, None)),
            [(1, format!("hardware: {ib}").as_str()), (2, format!("hardware: {xid}").as_str())]
        );
        // NCCL's start-up lines are no errors.
        let info = node(
            0,
            NodeExit::ExitCode(1),
            &["NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>"],
        );
        let v = verdict(FailureClass::Comm, Some((0, None, NodeExit::ExitCode(1))));
        assert_eq!(blame(&v, &[info], &rules, None), []);
        for line in [
            "RuntimeError: CUDA error: uncorrectable ECC error encountered",
            "CUDA error: unspecified launch failure",
        ] {
            let v = verdict(FailureClass::Crash, Some((1, None, NodeExit::ExitCode(1))));
            let nodes = [node(0, NodeExit::ExitCode(1), &[line])];
            assert_eq!(blame(&v, &nodes, &rules, None).len(), 1, "{line}");
        }
    }

    #[test]
    fn a_users_rule_may_blame() {
        let spec = RuleSpec { pattern: "PCIe bus error".into(), class: FailureClass::Crash, blame: true };
        let rules = RuleTable::new(&[spec]);
        let nodes = [node(0, NodeExit::ExitCode(1), &["kernel: PCIe bus error: severity=Corrected"])];
        let v = verdict(FailureClass::Crash, Some((0, None, NodeExit::ExitCode(1))));
        assert_eq!(blame(&v, &nodes, &rules, None).len(), 1);
        let not =
            RuleTable::new(&[RuleSpec { pattern: "PCIe".into(), class: FailureClass::Crash, blame: false }]);
        assert_eq!(blame(&v, &nodes, &not, None), []);
    }

    #[test]
    fn the_root_cause_of_two_attempts_in_a_row_is_blamed() {
        let rules = RuleTable::new(&[]);
        let nodes = [node(2, NodeExit::Signal(6), &[])];
        let v = verdict(FailureClass::Crash, Some((2, Some(4), NodeExit::Signal(6))));
        assert_eq!(blame(&v, &nodes, &rules, Some(("n1", FailureClass::Crash))), []);
        assert_eq!(
            reasons(&blame(&v, &nodes, &rules, Some(("n2", FailureClass::Crash)))),
            [(2, "the root cause of two attempts in a row")]
        );
        assert_eq!(blame(&v, &nodes, &rules, Some(("n2", FailureClass::Comm))), [], "another failure");
        // A port clash is the port's: the master is its root cause every time.
        let port = verdict(FailureClass::Port, Some((2, None, NodeExit::ExitCode(1))));
        assert_eq!(blame(&port, &nodes, &rules, Some(("n2", FailureClass::Port))), []);
        // A hang with no culprit blames nobody.
        let hang = verdict(FailureClass::Hang, None);
        assert_eq!(blame(&hang, &nodes, &rules, Some(("n2", FailureClass::Hang))), []);
        // Lost twice while herd's host was too loaded to hear it: the host's strain, not n2's.
        let mut strained = [node(2, NodeExit::Lost("the ssh connection to the node was lost".into()), &[])];
        strained[0].late_fleet = true;
        let lost = verdict(FailureClass::NodeLost, Some((2, None, strained[0].exit.clone())));
        assert_eq!(blame(&lost, &strained, &rules, Some(("n2", FailureClass::NodeLost))), []);
    }
}
