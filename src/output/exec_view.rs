//! `herd exec` output: prefixed lines as they come, or with `--gather` one block per distinct
//! output under the hostlist of the nodes that printed it (as `dshbak -c` and `clush -b` do).

use std::fmt::Write as _;
use std::io::{self, Write};

use tokio::sync::mpsc;

use crate::events::{Dated, Event};
use crate::supervisor::exec::ExecExit;

/// Consume an exec's events. Streams prefixed lines to `out`, or with `gather` keeps each
/// node's output and returns it (raw bytes, lines ended by `\n`).
pub fn collect(
    mut events: mpsc::Receiver<Dated>,
    out: &mut dyn Write,
    prefixes: &[Vec<u8>],
    gather: bool,
) -> Vec<Vec<u8>> {
    let mut kept = vec![Vec::new(); prefixes.len()];
    let mut out = io::BufWriter::new(out);
    let mut out_ok = true;
    while let Some(Dated { event, .. }) = events.blocking_recv() {
        if let Event::NodeOutput { node_rank, lines, .. } = event {
            for line in lines.iter() {
                if gather {
                    kept[node_rank].extend_from_slice(line.text);
                    kept[node_rank].push(b'\n');
                } else if out_ok {
                    out_ok = out
                        .write_all(&prefixes[node_rank])
                        .and_then(|_| out.write_all(line.text))
                        .and_then(|_| out.write_all(b"\n"))
                        .is_ok();
                }
            }
        }
        if out_ok && events.is_empty() {
            out_ok = out.flush().is_ok();
        }
    }
    let _ = out.flush();
    kept
}

/// The gathered view: nodes with the same output and the same end share one block, in the
/// order their first node has in the config.
pub fn gathered(hosts: &[String], outputs: &[Vec<u8>], ends: &[ExecExit]) -> Vec<u8> {
    let mut groups: Vec<(&[u8], i32, Vec<&str>, &ExecExit)> = Vec::new();
    for ((host, output), end) in hosts.iter().zip(outputs).zip(ends) {
        let status = end.status();
        match groups
            .iter_mut()
            .find(|(o, s, _, e)| *o == output.as_slice() && *s == status && same_kind(e, end))
        {
            Some((_, _, members, _)) => members.push(host),
            None => groups.push((output, status, vec![host], end)),
        }
    }
    let mut s = Vec::new();
    for (output, status, members, end) in groups {
        let mut header = compress_hosts(&members);
        match end {
            ExecExit::Unreachable(why) => {
                let _ = write!(header, " (unreachable: {why})");
            }
            ExecExit::Exited(e) if status != 0 => {
                let _ = write!(header, " ({e})");
            }
            ExecExit::Exited(_) => {}
        }
        let rule = "-".repeat(header.chars().count().clamp(15, 79));
        s.extend_from_slice(format!("{rule}\n{header}\n{rule}\n").as_bytes());
        s.extend_from_slice(output);
    }
    s
}

/// One stderr line per way nodes did not exit 0: the nodes that ended alike share it, named
/// as a hostlist.
pub fn failures(hosts: &[String], ends: &[ExecExit]) -> String {
    let failed = hosts.iter().zip(ends).enumerate().filter_map(|(rank, (host, end))| {
        let why = match end {
            ExecExit::Exited(e) if !e.success() => e.to_string(),
            ExecExit::Unreachable(why) => format!("unreachable: {why}"),
            ExecExit::Exited(_) => return None,
        };
        Some((why, (rank, host.as_str())))
    });
    let mut s = String::new();
    for (why, nodes) in super::summary::alike(failed) {
        let _ = writeln!(s, "herd: {}: {why}", super::summary::nodes_named(&nodes));
    }
    s
}

fn same_kind(a: &ExecExit, b: &ExecExit) -> bool {
    matches!((a, b), (ExecExit::Unreachable(x), ExecExit::Unreachable(y)) if x == y)
        || matches!((a, b), (ExecExit::Exited(x), ExecExit::Exited(y)) if x == y)
}

/// Hosts as a hostlist expression: `node1,node2,node3,gpu-07` → `node[1-3],gpu-07` (see
/// `hostlist::compress`).
pub fn compress_hosts(hosts: &[&str]) -> String {
    crate::config::hostlist::compress(hosts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::NodeExit;

    #[test]
    fn hostlists_compress_runs_of_numbers() {
        assert_eq!(compress_hosts(&["node1", "node2", "node3"]), "node[1-3]");
        assert_eq!(compress_hosts(&["gpu-01", "gpu-02", "gpu-04", "cpu9"]), "gpu-[01-02,04],cpu9");
        assert_eq!(
            compress_hosts(&["localhost", "node3", "127.0.0.1", "node1"]),
            "localhost,node[1,3],127.0.0.1"
        );
        assert_eq!(compress_hosts(&["n9", "n10", "n08"]), "n[9-10],n08");
        assert_eq!(compress_hosts(&["only"]), "only");
        assert_eq!(compress_hosts(&[]), "");
    }

    #[test]
    fn identical_outputs_share_a_block() {
        let hosts: Vec<String> = ["n1", "n2", "n3", "n4", "n5"].map(String::from).to_vec();
        let outputs = [&b"same\n"[..], b"same\n", b"other\n", b"same\n", b""].map(|o| o.to_vec());
        let ends = [
            ExecExit::Exited(NodeExit::ExitCode(0)),
            ExecExit::Exited(NodeExit::ExitCode(0)),
            ExecExit::Exited(NodeExit::ExitCode(0)),
            ExecExit::Exited(NodeExit::ExitCode(1)),
            ExecExit::Unreachable("connection refused".into()),
        ];
        let text = String::from_utf8(gathered(&hosts, &outputs, &ends)).unwrap();
        assert_eq!(
            text,
            "---------------\nn[1-2]\n---------------\nsame\n\
             ---------------\nn3\n---------------\nother\n\
             ----------------\nn4 (exit code 1)\n----------------\nsame\n\
             ------------------------------------\nn5 (unreachable: connection refused)\n------------------------------------\n"
        );
    }

    #[test]
    fn failures_alike_share_a_line() {
        let hosts: Vec<String> = (1..=5).map(|i| format!("n{i}")).collect();
        let ends = [
            ExecExit::Exited(NodeExit::ExitCode(1)),
            ExecExit::Exited(NodeExit::ExitCode(0)),
            ExecExit::Exited(NodeExit::ExitCode(1)),
            ExecExit::Unreachable("connection refused".into()),
            ExecExit::Exited(NodeExit::ExitCode(1)),
        ];
        assert_eq!(
            failures(&hosts, &ends),
            "herd: 3 nodes (n[1,3,5]): exit code 1\nherd: node 3 (n4): unreachable: connection refused\n"
        );
    }
}
