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
        // Columns in the order checks first appear.
        let mut columns: Vec<&str> = Vec::new();
        for c in nodes.iter().flat_map(|n| &n.checks) {
            if !columns.contains(&c.name) {
                columns.push(c.name);
            }
        }
        let host_w = nodes.iter().map(|n| n.host.len()).max().unwrap_or(4).max(4);
        let _ = write!(s, "{:>4}  {:<host_w$}", "rank", "host");
        for col in &columns {
            let _ = write!(s, "  {col:<w$}", w = col.len().max(4));
        }
        s.push('\n');
        for n in nodes {
            let _ = write!(s, "{:>4}  {:<host_w$}", n.rank, n.host);
            for col in &columns {
                let cell = n.checks.iter().find(|c| c.name == *col).map_or("-", |c| mark(c.status));
                let _ = write!(s, "  {cell:<w$}", w = col.len().max(4));
            }
            s.push('\n');
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
        let _ = writeln!(s, "{} node {} ({}) {}: {}", mark(c.status), n.rank, n.host, c.name, c.detail);
        if let Some(fix) = &c.fix {
            let _ = writeln!(s, "     fix: {fix}");
        }
    }
    let (pass, warn, fail) = tally(nodes);
    let _ = writeln!(s, "\n{} nodes: {pass} checks passed, {warn} warnings, {fail} failures", nodes.len());
    s
}
