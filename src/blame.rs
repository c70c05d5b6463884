//! Which nodes a failed attempt blames, and why: the nodes a run should go on without. Pure.
//!
//! A node is blamed when
//! - it was lost (its SSH connection, or its heartbeat) before herd stopped anything, while
//!   most nodes were not: when most are lost at once, the fault is more likely herd's own
//!   network than every node's;
//! - the attempt's failing rank on it died of SIGSEGV or SIGBUS;
//! - it printed a line of a blaming rule (the built-in hardware rules, or the user's with
//!   `blame = "node"`). A blaming rule of class `comm` (an InfiniBand error) blames only the
//!   attempt's root cause: when a node dies, its peers' InfiniBand reports errors too;
//! - it is the root cause of this attempt and of the one before, with the same class (not
//!   `port`: a port clash is the port's, not the node's).
//!
//! Only the blame is decided here; whether the run can go on without the node is the
//! roster's question.

use crate::classify::RuleTable;
use crate::outcome::{FailureClass, NodeExit, NodeOutcome, Verdict};
use crate::roster::Blamed;

/// The nodes `verdict` and `nodes` blame, by node rank, one reason each. `previous_root`:
/// the host that was the root cause of the attempt before, if it failed.
pub fn blame(
    verdict: &Verdict,
    nodes: &[NodeOutcome],
    rules: &RuleTable,
    previous: Option<(&str, FailureClass)>,
) -> Vec<Blamed> {
    let root = verdict.root_cause.as_ref();
    let mut blamed: Vec<Blamed> = Vec::new();
    let mut add = |node_rank: usize, reason: String| {
        if !blamed.iter().any(|b| b.node_rank == node_rank) {
            blamed.push(Blamed { node_rank, reason });
        }
    };
    // Lost before herd stopped anything; or the node whose silence made herd stop (the root
    // cause, lost): it ends only after the stop, at the kill deadline, when no transport of
    // its own noticed the loss first (a Slurm step has none).
    let silenced = |n: &NodeOutcome| {
        verdict.class == FailureClass::NodeLost
            && root.is_some_and(|r| r.node_rank == n.node_rank && matches!(r.exit, NodeExit::Lost(_)))
    };
    let lost: Vec<&NodeOutcome> = nodes
        .iter()
        .filter(|n| matches!(n.exit, NodeExit::Lost(_)) && (n.stop_requested_at.is_none() || silenced(n)))
        .collect();
    if minority(lost.len(), nodes.len()) {
        for node in lost {
            if let NodeExit::Lost(why) = &node.exit {
                add(node.node_rank, format!("node-lost: {why}"));
            }
        }
    }
    if let Some(root) = root {
        if let NodeExit::Signal(sig @ (7 | 11)) = root.exit {
            let who = root.rank.map_or("a process".to_string(), |r| format!("rank {r}"));
            add(root.node_rank, format!("{who} died of {}", crate::outcome::signal_name(sig)));
        }
    }
    for node in nodes {
        let is_root = root.is_some_and(|r| r.node_rank == node.node_rank);
        let line = node.lines.iter().find(|l| match rules.blames(&l.text) {
            Some(FailureClass::Comm) => is_root,
            Some(_) => true,
            None => false,
        });
        if let Some(line) = line {
            add(node.node_rank, format!("hardware: {}", line.text.trim()));
        }
    }
    if let (Some(root), Some((host, class))) = (root, previous) {
        if root.host == host && class == verdict.class && class != FailureClass::Port {
            add(root.node_rank, "the root cause of two attempts in a row".to_string());
        }
    }
    blamed
}

/// Whether `failing` of `of` nodes are few enough to be the nodes' own fault: at most half
/// (one of one, one of two). More, and the cause is shared (herd's network, the config).
pub fn minority(failing: usize, of: usize) -> bool {
    failing <= (of / 2).max(1)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::RuleSpec;
    use crate::outcome::{RootCause, TimedLine};

    fn node(node_rank: usize, exit: NodeExit, lines: &[&str]) -> NodeOutcome {
        NodeOutcome {
            node_rank,
            host: format!("n{node_rank}"),
            first_rank: node_rank as u32 * 2,
            exit,
            ended_at: Duration::from_secs(1),
            stop_requested_at: None,
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
    fn a_segfault_blames_its_node_and_a_plain_crash_or_user_error_does_not() {
        let rules = RuleTable::new(&[]);
        let nodes = [node(0, NodeExit::ExitCode(1), &[]), node(1, NodeExit::ExitCode(1), &[])];
        let segv = verdict(FailureClass::Crash, Some((1, Some(3), NodeExit::Signal(11))));
        assert_eq!(reasons(&blame(&segv, &nodes, &rules, None)), [(1, "rank 3 died of SIGSEGV")]);
        let bus = verdict(FailureClass::Crash, Some((0, None, NodeExit::Signal(7))));
        assert_eq!(reasons(&blame(&bus, &nodes, &rules, None)), [(0, "a process died of SIGBUS")]);
        for exit in [NodeExit::Signal(9), NodeExit::Signal(6), NodeExit::ExitCode(1)] {
            let v = verdict(FailureClass::Crash, Some((1, Some(3), exit)));
            assert_eq!(blame(&v, &nodes, &rules, None), [], "{v:?}");
        }
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
    }
}
