//! `herd doctor` output: a table of nodes by checks with the details of what is not fine, or
//! JSON for tools.

use std::fmt::Write as _;

use serde::Serialize;

use crate::doctor::{checks::tally, NodeChecks, Status};

#[derive(Serialize)]
struct DoctorJson<'a> {
    nodes: &'a [NodeChecks],
    ok: bool,
}

pub fn json(nodes: &[NodeChecks]) -> String {
    let ok = tally(nodes).2 == 0;
    let mut s = serde_json::to_string_pretty(&DoctorJson { nodes, ok }).expect("serialises");
    s.push('\n');
    s
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
        let table = table(nodes);
        if table.lines().all(|l| l.chars().count() <= MAX_TABLE_WIDTH) {
            s += &table;
        } else {
            s += &grouped(nodes);
        }
    }
    let problems: Vec<_> = nodes
        .iter()
        .flat_map(|n| n.checks.iter().filter(|c| c.status != Status::Pass).map(move |c| (n, c)))
        .collect();
    if !problems.is_empty() {
        s.push('\n');
    }
    for (n, c) in problems {
        let _ = writeln!(s, "{} node {} ({}) {}: {}", mark(c.status), n.node_rank, n.host, c.name, c.detail);
        if let Some(fix) = &c.fix {
            let _ = writeln!(s, "     fix: {fix}");
        }
    }
    let (pass, warn, fail) = tally(nodes);
    let _ = writeln!(s, "\n{} nodes: {pass} checks passed, {warn} warnings, {fail} failures", nodes.len());
    s
}

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

/// One line per check: which nodes passed, warned or failed it.
fn grouped(nodes: &[NodeChecks]) -> String {
    let mut s = String::new();
    let name_w = columns(nodes).iter().map(|c| c.len()).max().unwrap_or(0);
    for col in columns(nodes) {
        let mut parts = Vec::new();
        for status in [Status::Pass, Status::Warn, Status::Fail] {
            let ranks: Vec<String> = nodes
                .iter()
                .filter(|n| n.checks.iter().any(|c| c.name == col && c.status == status))
                .map(|n| n.node_rank.to_string())
                .collect();
            if ranks.len() == nodes.len() {
                parts.push(format!("{} on all {} nodes", mark(status), nodes.len()));
            } else if !ranks.is_empty() {
                parts.push(format!("{} on node {}", mark(status), ranks.join(",")));
            }
        }
        let _ = writeln!(s, "{col:<name_w$}  {}", parts.join("; "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Check;

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
        let json: serde_json::Value = serde_json::from_str(&json(&nodes)).unwrap();
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
        assert!(text.contains("check7   ok on node 0,1; WARN on node 2\n"), "{text}");
    }
}
