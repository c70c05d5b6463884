//! `herd doctor` output: a table of nodes by checks with the details of what is not fine, or
//! JSON for tools.

use std::fmt::Write as _;

use serde::Serialize;

use crate::doctor::net::{NetReport, NodeNet};
use crate::doctor::{checks::tally, Check, NodeChecks, Status};

#[derive(Serialize)]
struct DoctorJson<'a> {
    nodes: &'a [NodeChecks],
    /// `--deep`: the network check.
    #[serde(skip_serializing_if = "Option::is_none")]
    network: Option<&'a NetReport>,
    ok: bool,
}

/// The checks, and with `--deep` (`deep`) the network's verdict: `ok` only if it was
/// measured, and found no slow node.
pub fn json(nodes: &[NodeChecks], network: Option<&NetReport>, deep: bool) -> String {
    let ok = tally(nodes).2 == 0 && (!deep || network.is_some_and(NetReport::ok));
    let mut s = serde_json::to_string_pretty(&DoctorJson { nodes, network, ok }).expect("serialises");
    s.push('\n');
    s
}

/// `--deep`'s verdict: one row per node (up to MAX_TABLE_ROWS; past that, only the nodes that
/// are slow or were not measured), then each slow node named, then a summary line.
pub fn net_text(r: &NetReport, hosts: &[String]) -> String {
    let host = |n: &NodeNet| hosts.get(n.node_rank).map_or("?", String::as_str);
    let width = hosts.iter().map(|h| h.len()).max().unwrap_or(4).max(4);
    let mut s = net_header(r, width);
    let shown = |n: &&NodeNet| r.nodes.len() <= MAX_TABLE_ROWS || n.slow || n.mbps.is_none();
    for n in r.nodes.iter().filter(shown) {
        let _ = writeln!(
            s,
            "{:>5}  {:<width$}  {:>9}  {:>9}  {:>9}  {:>9}  {:>10}{}",
            n.node_rank,
            host(n),
            number(n.send_mbps, 1),
            number(n.recv_mbps, 1),
            number(n.mbps, 1),
            number(n.ratio, 2),
            number(n.latency_us, 0),
            net_mark(n),
        );
    }
    let slow: Vec<&NodeNet> = r.slow().collect();
    for n in &slow {
        let _ = writeln!(
            s,
            "SLOW: node {} ({}): {} (below {:.2}): check its link speed (ethtool), its cable and its NIC's errors",
            n.node_rank,
            host(n),
            slow_sides(n, r.reference_mbps.unwrap_or(f64::NAN)),
            r.slow_below
        );
    }
    if r.ambiguous && !slow.is_empty() {
        s += if r.nodes.len() == 2 {
            "with two nodes, one slow pair cannot say which end is slow: both are named\n"
        } else {
            "some slow pairs are slow at both ends, and no other pair tells which end it is: every end that could be is named\n"
        };
    }
    let unmeasured = r.nodes.iter().filter(|n| n.mbps.is_none()).count();
    let _ = writeln!(
        s,
        "network: {} node(s) measured, {} slow, {unmeasured} not measured",
        r.nodes.len() - unmeasured,
        slow.len()
    );
    s
}

/// What the nodes were measured against, then the table's header (`width`: the hosts').
fn net_header(r: &NetReport, width: usize) -> String {
    let reference = match (r.median_mbps, r.reference_mbps) {
        (Some(m), Some(f)) if f > m && r.nodes.len() > 2 => {
            format!("the median {m:.1} MB/s is itself slow: measured against the fastest nodes' {f:.1} MB/s")
        }
        (m, _) => format!("median {} MB/s", number(m, 1)),
    };
    format!(
        "\nnetwork: each node's best MB/s sending and receiving, in a ring of shifts 1, 2 and -1 ({reference})\n\
         {:>5}  {:<width$}  {:>9}  {:>9}  {:>9}  {:>9}  {:>10}\n",
        "node", "host", "send", "receive", "MB/s", "of ref", "latency µs"
    )
}

/// `v` with `decimals` places, or `-` where it was not measured.
fn number(v: Option<f64>, decimals: usize) -> String {
    v.map_or("-".to_string(), |v| format!("{v:.decimals$}"))
}

/// What a node's row says after its numbers: slow, not measured, or low only with slow peers.
fn net_mark(n: &NodeNet) -> String {
    if n.slow {
        "  SLOW".to_string()
    } else if n.mbps.is_none() {
        "  not measured".to_string()
    } else if !n.low_because_of.is_empty() {
        format!("  low only with slow node {}", nodes_list(&n.low_because_of))
    } else {
        String::new()
    }
}

/// The sides a slow node is named for, each with its best and its share of `reference`.
fn slow_sides(n: &NodeNet, reference: f64) -> String {
    let side = |dir: &str, v: Option<f64>| {
        let v = v.unwrap_or(0.0);
        format!("{v:.1} MB/s at best {dir}, {:.2} of the reference", v / reference)
    };
    match (n.slow_send, n.slow_recv) {
        (true, true) => format!("{} and {}", side("sending", n.send_mbps), side("receiving", n.recv_mbps)),
        (true, false) => side("sending", n.send_mbps),
        _ => side("receiving", n.recv_mbps),
    }
}

/// How one node's measurement ended, for [`net_failures`].
#[derive(Debug, Clone, PartialEq)]
pub enum NetEnd<'a> {
    Ok,
    /// It exited non-zero (or by a signal, 128+N): its last lines, blank ones left out.
    Failed {
        status: i32,
        last: Vec<&'a str>,
    },
    /// Its connection was lost while it measured (why, as the transport says).
    Lost(&'a str),
    /// It could not be reached, so it never started.
    Unreachable(&'a str),
}

/// Lines a node's measurement printed last, at most this many.
const LAST_LINES: usize = 5;

/// What went wrong on each node that did not finish its measurement: the node that stopped
/// answering named as such, and, when one did, that the other nodes' failures (a rendezvous
/// or a collective that timed out) follow from it.
pub fn net_failures(ends: &[NetEnd], hosts: &[String]) -> String {
    let mut s = String::new();
    let host = |r: usize| hosts.get(r).map_or("?", String::as_str);
    let mut gone = Vec::new();
    for (rank, end) in ends.iter().enumerate() {
        match end {
            NetEnd::Ok => {}
            NetEnd::Lost(why) => {
                gone.push(rank);
                let _ = writeln!(
                    s,
                    "herd: node {rank} ({}) stopped answering during the measurement: {why}; check that it is up and its link",
                    host(rank)
                );
            }
            NetEnd::Unreachable(why) => {
                gone.push(rank);
                let _ = writeln!(
                    s,
                    "herd: node {rank} ({}) could not be reached for the measurement: {why}",
                    host(rank)
                );
            }
            NetEnd::Failed { status, last } if last.is_empty() => {
                let _ = writeln!(
                    s,
                    "herd: node {rank} ({}): the network check failed (exit {status}), and printed nothing",
                    host(rank)
                );
            }
            NetEnd::Failed { status, last } => {
                let _ = writeln!(
                    s,
                    "herd: node {rank} ({}): the network check failed (exit {status}); its last lines:",
                    host(rank)
                );
                for line in &last[last.len().saturating_sub(LAST_LINES)..] {
                    let _ = writeln!(s, "  {line}");
                }
            }
        }
    }
    let failed = ends.iter().any(|e| matches!(e, NetEnd::Failed { .. }));
    if !gone.is_empty() && failed {
        let _ = writeln!(
            s,
            "herd: the measurement needs every node at once: the other nodes' failures follow from node {} ({})",
            nodes_list(&gone),
            gone.iter().map(|&r| host(r)).collect::<Vec<_>>().join(", ")
        );
    }
    s
}

/// `2, 3` or `2`.
fn nodes_list(nodes: &[usize]) -> String {
    nodes.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
}

fn mark(status: Status) -> &'static str {
    match status {
        Status::Pass => "ok",
        Status::Warn => "WARN",
        Status::Fail => "FAIL",
    }
}

/// The table, then every warning and failure with its fix, then a summary line.
/// `problems_only`: just the failures and warnings (for `herd run`'s preflight).
pub fn text(nodes: &[NodeChecks], problems_only: bool) -> String {
    let mut s = String::new();
    if !problems_only {
        let table = if nodes.len() > MAX_TABLE_ROWS { table_by_marks(nodes) } else { table(nodes) };
        if table.lines().all(|l| l.chars().count() <= MAX_TABLE_WIDTH) {
            s += &table;
        } else {
            s += &grouped(nodes);
        }
    }
    let problems = problems(nodes);
    if !problems.is_empty() {
        s.push('\n');
    }
    for p in problems {
        let (n, c) = p.first;
        let _ = match p.hosts.len() {
            1 => writeln!(s, "{} node {} ({}) {}: {}", mark(c.status), n.node_rank, n.host, c.name, c.detail),
            k => {
                let hosts = crate::config::hostlist::compress(&p.hosts);
                let whose = match p.alike {
                    true => String::new(),
                    false => format!(" (node {}'s; the times differ by node)", n.node_rank),
                };
                writeln!(s, "{} on {k} nodes ({hosts}) {}: {}{whose}", mark(c.status), c.name, c.detail)
            }
        };
        if let Some(fix) = &c.fix {
            let _ = writeln!(s, "     fix: {fix}");
        }
    }
    let (pass, warn, fail) = tally(nodes);
    let _ = writeln!(s, "\n{} nodes: {pass} checks passed, {warn} warnings, {fail} failures", nodes.len());
    s
}

/// Warnings and failures that read the same on several nodes: one check, one status, one
/// fix, and one detail but for the times it measured.
struct Problem<'a> {
    /// The first node's, which is printed.
    first: (&'a NodeChecks, &'a Check),
    hosts: Vec<&'a str>,
    /// Whether every node's detail is the first's, times included.
    alike: bool,
}

/// Every warning and failure, those alike on several nodes once, in the order of their first
/// node.
fn problems(nodes: &[NodeChecks]) -> Vec<Problem<'_>> {
    let mut out: Vec<(String, Problem<'_>)> = Vec::new();
    for n in nodes {
        for c in n.checks.iter().filter(|c| c.status != Status::Pass) {
            let key = format!("{}\0{}\0{}\0{:?}", mark(c.status), c.name, without_times(&c.detail), c.fix);
            match out.iter_mut().find(|(k, _)| *k == key) {
                Some((_, p)) => {
                    p.hosts.push(&n.host);
                    p.alike &= p.first.1.detail == c.detail;
                }
                None => out.push((key, Problem { first: (n, c), hosts: vec![&n.host], alike: true })),
            }
        }
    }
    out.into_iter().map(|(_, p)| p).collect()
}

/// `detail` with every duration (`11.7 s`, `532 ms`) as `#`: the times a check measures
/// differ on every node, and would keep one cause apart on each. Other numbers (versions,
/// ports) tell causes apart, and stay.
fn without_times(detail: &str) -> String {
    static DURATION: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"\d+(?:\.\d+)?( ?m?s)\b").expect("valid"));
    DURATION.replace_all(detail, "#$1").into_owned()
}

/// More nodes than this, and the table has one row per distinct set of marks, naming its
/// nodes as a hostlist, rather than one row per node.
const MAX_TABLE_ROWS: usize = 32;

/// Wider than this, the table turns into a list grouped by check.
const MAX_TABLE_WIDTH: usize = 160;

/// Check names in the order they first appear.
fn columns(nodes: &[NodeChecks]) -> Vec<&'static str> {
    let mut columns: Vec<&'static str> = Vec::new();
    for c in nodes.iter().flat_map(|n| &n.checks) {
        if !columns.contains(&c.name) {
            columns.push(c.name);
        }
    }
    columns
}

/// One row per node, one column per check.
fn table(nodes: &[NodeChecks]) -> String {
    let mut s = String::new();
    let columns = columns(nodes);
    let host_w = nodes.iter().map(|n| n.host.len()).max().unwrap_or(4).max(4);
    let _ = write!(s, "{:>4}  {:<host_w$}", "rank", "host");
    for col in &columns {
        let _ = write!(s, "  {col:<w$}", w = col.len().max(4));
    }
    s = s.trim_end().to_string();
    s.push('\n');
    for n in nodes {
        let mut row = format!("{:>4}  {:<host_w$}", n.node_rank, n.host);
        for col in &columns {
            let cell = n.checks.iter().find(|c| c.name == *col).map_or("-", |c| mark(c.status));
            let _ = write!(row, "  {cell:<w$}", w = col.len().max(4));
        }
        s += row.trim_end();
        s.push('\n');
    }
    s
}

/// The table at scale: one row per distinct row of marks, with how many nodes have it and
/// which (a hostlist), in the order of their first node.
fn table_by_marks(nodes: &[NodeChecks]) -> String {
    let columns = columns(nodes);
    let mut rows: Vec<(Vec<&str>, Vec<&str>)> = Vec::new();
    for n in nodes {
        let marks: Vec<&str> = columns
            .iter()
            .map(|col| n.checks.iter().find(|c| c.name == *col).map_or("-", |c| mark(c.status)))
            .collect();
        match rows.iter_mut().find(|(m, _)| *m == marks) {
            Some((_, hosts)) => hosts.push(&n.host),
            None => rows.push((marks, vec![&n.host])),
        }
    }
    let mut s = format!("{:>5}", "nodes");
    for col in &columns {
        let _ = write!(s, "  {col:<w$}", w = col.len().max(4));
    }
    s += "  hosts\n";
    for (marks, hosts) in rows {
        let mut row = format!("{:>5}", hosts.len());
        for (col, cell) in columns.iter().zip(marks) {
            let _ = write!(row, "  {cell:<w$}", w = col.len().max(4));
        }
        let _ = writeln!(s, "{row}  {}", crate::config::hostlist::compress(&hosts));
    }
    s
}

/// Node ranks as runs, as hostlists are written: `0-29,32-191`, not 190 numbers.
fn spans(ranks: &[usize]) -> String {
    let mut sorted = ranks.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        while i + 1 < sorted.len() && sorted[i + 1] == sorted[i] + 1 {
            i += 1;
        }
        out.push(if sorted[i] == start { start.to_string() } else { format!("{start}-{}", sorted[i]) });
        i += 1;
    }
    out.join(",")
}

/// One line per check: which nodes passed, warned or failed it.
fn grouped(nodes: &[NodeChecks]) -> String {
    let mut s = String::new();
    let name_w = columns(nodes).iter().map(|c| c.len()).max().unwrap_or(0);
    for col in columns(nodes) {
        let mut parts = Vec::new();
        for status in [Status::Pass, Status::Warn, Status::Fail] {
            let ranks: Vec<usize> = nodes
                .iter()
                .filter(|n| n.checks.iter().any(|c| c.name == col && c.status == status))
                .map(|n| n.node_rank)
                .collect();
            if ranks.len() == nodes.len() {
                parts.push(format!("{} on all {} nodes", mark(status), nodes.len()));
            } else if !ranks.is_empty() {
                parts.push(format!("{} on node {}", mark(status), spans(&ranks)));
            }
        }
        let _ = writeln!(s, "{col:<name_w$}  {}", parts.join("; "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 39 item 7: a node cut during the measurement was followed by "its last lines:"
    /// and nothing; the others' torch tracebacks hid which node had gone.
    #[test]
    fn a_node_lost_during_the_measurement_is_named_and_the_others_failures_follow_from_it() {
        let hosts: Vec<String> = ["n1", "n2", "n3"].map(String::from).to_vec();
        let trace =
            vec!["Traceback (most recent call last):", "  ...", "RuntimeError: Connection closed by peer"];
        let ends = [
            NetEnd::Failed { status: 1, last: trace.clone() },
            NetEnd::Lost("no heartbeat for 15 s"),
            NetEnd::Failed { status: 1, last: trace },
        ];
        let text = net_failures(&ends, &hosts);
        assert!(
            text.contains("herd: node 1 (n2) stopped answering during the measurement: no heartbeat for 15 s; check that it is up and its link\n"),
            "{text}"
        );
        assert!(!text.contains("node 1 (n2): the network check failed"), "{text}");
        assert!(text.ends_with("the other nodes' failures follow from node 1 (n2)\n"), "{text}");
        assert_eq!(text.matches("its last lines:").count(), 2, "{text}");
        let quiet = net_failures(&[NetEnd::Ok, NetEnd::Failed { status: 137, last: vec![] }], &hosts);
        assert_eq!(quiet, "herd: node 1 (n2): the network check failed (exit 137), and printed nothing\n");
        assert_eq!(net_failures(&[NetEnd::Ok, NetEnd::Ok], &hosts), "");
    }
    use crate::doctor::Check;

    /// A node's measurement as `score` gives it, its ratio and slow sides from `reference`.
    fn net(rank: usize, send: Option<f64>, recv: Option<f64>, reference: f64, slow: (bool, bool)) -> NodeNet {
        let mbps = send.zip(recv).map(|(a, b)| a.min(b));
        NodeNet {
            node_rank: rank,
            send_mbps: send,
            recv_mbps: recv,
            mbps,
            latency_us: mbps.map(|_| 95.4),
            ratio: mbps.map(|m| m / reference),
            slow: slow.0 || slow.1,
            slow_send: slow.0,
            slow_recv: slow.1,
            low_because_of: Vec::new(),
        }
    }

    /// Rows for the slow, the unmeasured and a node low only because of its peers; each slow
    /// node named by the sides it is slow on; the reference the median was found too slow for.
    #[test]
    fn the_network_verdict_has_a_row_per_node_then_each_slow_node_named() {
        let hosts: Vec<String> = ["gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e"].map(String::from).to_vec();
        let mut nodes = vec![
            net(0, Some(900.0), Some(910.0), 900.0, (false, false)),
            net(1, Some(12.3), Some(900.0), 900.0, (true, false)),
            net(2, Some(10.0), Some(11.0), 900.0, (true, true)),
            net(3, Some(900.0), Some(12.0), 900.0, (false, false)),
            net(4, None, None, 900.0, (false, false)),
        ];
        nodes[3].low_because_of = vec![1, 2];
        let report = NetReport {
            nodes,
            median_mbps: Some(455.0),
            reference_mbps: Some(900.0),
            slow_below: 0.5,
            ambiguous: true,
        };
        insta::assert_snapshot!(net_text(&report, &hosts));
    }

    /// Two nodes cannot say which end of their pair is slow; a node past the hosts is `?`.
    #[test]
    fn two_nodes_name_both_ends() {
        let two = NetReport {
            nodes: vec![
                net(0, Some(2.0), Some(900.0), 900.0, (true, false)),
                net(1, Some(900.0), Some(2.0), 900.0, (false, true)),
            ],
            median_mbps: Some(451.0),
            reference_mbps: Some(900.0),
            slow_below: 0.5,
            ambiguous: true,
        };
        insta::assert_snapshot!(net_text(&two, &["gpu-a".to_string()]));
    }

    /// Past MAX_TABLE_ROWS nodes, only the slow and the unmeasured have a row.
    #[test]
    fn a_large_network_verdict_shows_only_the_nodes_not_fine() {
        let hosts: Vec<String> = (0..40).map(|r| format!("gpu-{r:02}")).collect();
        let nodes = (0..40)
            .map(|r| match r {
                7 => net(r, Some(900.0), Some(3.0), 900.0, (false, true)),
                9 => net(r, None, None, 900.0, (false, false)),
                _ => net(r, Some(900.0), Some(900.0), 900.0, (false, false)),
            })
            .collect();
        let report = NetReport {
            nodes,
            median_mbps: Some(900.0),
            reference_mbps: Some(900.0),
            slow_below: 0.5,
            ambiguous: false,
        };
        insta::assert_snapshot!(net_text(&report, &hosts));
    }

    fn node(rank: usize, statuses: &[(&'static str, Status)]) -> NodeChecks {
        NodeChecks {
            node_rank: rank,
            host: format!("gpu-{rank:02}"),
            checks: statuses
                .iter()
                .map(|(name, status)| Check {
                    name,
                    status: *status,
                    detail: "d".into(),
                    fix: Some("f".into()),
                })
                .collect(),
        }
    }

    #[test]
    fn a_narrow_cluster_is_a_table_with_problems_below() {
        let nodes = [
            node(0, &[("ssh", Status::Pass), ("torch", Status::Pass)]),
            node(1, &[("ssh", Status::Pass), ("torch", Status::Fail)]),
        ];
        let text = text(&nodes, false);
        assert_eq!(
            text,
            "rank  host    ssh   torch\n   0  gpu-00  ok    ok\n   1  gpu-01  ok    FAIL\n\n\
             FAIL node 1 (gpu-01) torch: d\n     fix: f\n\n2 nodes: 3 checks passed, 0 warnings, 1 failures\n"
        );
        let json: serde_json::Value = serde_json::from_str(&json(&nodes, None, false)).unwrap();
        assert_eq!(json["ok"], false);
        assert_eq!(json["nodes"][1]["checks"][1]["status"], "fail");
    }

    #[test]
    fn a_wide_table_becomes_a_list_grouped_by_check() {
        let names: Vec<&'static str> =
            (0..40).map(|i| &*Box::leak(format!("check{i}").into_boxed_str())).collect();
        let nodes: Vec<NodeChecks> = (0..3)
            .map(|r| {
                let checks: Vec<(&'static str, Status)> = names
                    .iter()
                    .map(|n| (*n, if r == 2 && *n == "check7" { Status::Warn } else { Status::Pass }))
                    .collect();
                node(r, &checks)
            })
            .collect();
        let text = text(&nodes, false);
        assert!(text.contains("check0   ok on all 3 nodes\n"), "{text}");
        assert!(text.contains("check7   ok on node 0-1; WARN on node 2\n"), "{text}");
    }

    #[test]
    fn problems_alike_on_many_nodes_are_one_line_naming_them() {
        let mut nodes: Vec<NodeChecks> =
            (0..6).map(|r| node(r, &[("ssh", Status::Warn), ("torch", Status::Pass)])).collect();
        for (r, n) in nodes.iter_mut().enumerate() {
            n.checks[0].detail = format!("connected in {} ms; took {}.5 s", 500 + r, r + 2);
        }
        nodes[5].checks[1] =
            Check { name: "torch", status: Status::Fail, detail: "no torch".into(), fix: None };
        let text = text(&nodes, true);
        assert_eq!(
            text,
            "\nWARN on 6 nodes (gpu-[00-05]) ssh: connected in 500 ms; took 2.5 s \
             (node 0's; the times differ by node)\n     fix: f\n\
             FAIL node 5 (gpu-05) torch: no torch\n\n\
             6 nodes: 5 checks passed, 6 warnings, 1 failures\n"
        );
    }

    #[test]
    fn another_fix_or_wording_is_another_line() {
        let mut nodes: Vec<NodeChecks> = (0..3).map(|r| node(r, &[("ssh", Status::Fail)])).collect();
        nodes[1].checks[0].fix = Some("g".into());
        nodes[2].checks[0].detail = "e".into();
        let text = text(&nodes, true);
        assert_eq!(text.matches("FAIL node").count(), 3, "{text}");
        let alike: Vec<NodeChecks> = (0..3).map(|r| node(r, &[("ssh", Status::Fail)])).collect();
        let text = super::text(&alike, true);
        assert!(text.starts_with("\nFAIL on 3 nodes (gpu-[00-02]) ssh: d\n     fix: f\n\n"), "{text}");
    }

    #[test]
    fn only_times_are_masked() {
        assert_eq!(
            without_times("took 11.7 s, 532 ms, 3s, v2.1.0, port 29500"),
            "took # s, # ms, #s, v2.1.0, port 29500"
        );
        assert_eq!(without_times("2 sockets, 10 steps"), "2 sockets, 10 steps");
    }

    #[test]
    fn a_large_cluster_has_one_row_per_distinct_marks() {
        let nodes: Vec<NodeChecks> = (0..40)
            .map(|r| {
                let torch = if r == 7 || r == 9 { Status::Fail } else { Status::Pass };
                node(r, &[("ssh", Status::Pass), ("torch", torch)])
            })
            .collect();
        let text = text(&nodes, false);
        let table: Vec<&str> = text.lines().take(3).collect();
        assert_eq!(
            table,
            [
                "nodes  ssh   torch  hosts",
                "   38  ok    ok     gpu-[00-06,08,10-39]",
                "    2  ok    FAIL   gpu-[07,09]",
            ],
            "{text}"
        );
        assert!(text.contains("\nFAIL on 2 nodes (gpu-[07,09]) torch: d\n"), "{text}");
    }

    /// At 254 nodes the grouped table named ranks one by one (`ok on node 0,1,2,3,...`).
    #[test]
    fn node_ranks_are_written_as_runs() {
        assert_eq!(spans(&[2]), "2");
        assert_eq!(spans(&[0, 1]), "0-1");
        let many: Vec<usize> = (0..30).chain(32..192).chain([200]).collect();
        assert_eq!(spans(&many), "0-29,32-191,200");
        assert_eq!(spans(&[5, 3, 4, 9]), "3-5,9");
    }
}
