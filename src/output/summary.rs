//! herd's own words about a run: one status line per notable event, and the closing summary.

use crate::events::{Event, FirstFailure, RunStatus};

/// The stderr line for an event, if it deserves one.
pub fn status_line(event: &Event) -> Option<String> {
    Some(match event {
        Event::RunStarted { run_id, launcher, nnodes, world_size, log_dir, .. } => {
            format!("run {run_id}: {launcher} on {nnodes} nodes, world size {world_size}; logs in {log_dir}")
        }
        Event::AttemptStarted { attempt, master_addr, master_port } => {
            format!("attempt {attempt}: master {master_addr}:{master_port}")
        }
        Event::NodeExited { node_rank, host, exit, .. } if !exit.success() => {
            format!("node {node_rank} ({host}) ended: {exit}")
        }
        Event::TeardownStarted { reason, .. } => format!("stopping every node: {reason}"),
        Event::RunFinished { status, attempts } => match status {
            RunStatus::Succeeded => {
                format!("run succeeded ({attempts} attempt{})", plural(*attempts))
            }
            RunStatus::Failed => format!("run failed ({attempts} attempt{})", plural(*attempts)),
            RunStatus::Interrupted => "run interrupted; every node stopped".to_string(),
        },
        _ => return None,
    })
}

fn plural(n: u32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The closing words on a failed run: which node failed first, how, and its last error line.
pub fn failure(first: &FirstFailure, log_path: &str) -> String {
    let mut s = format!("first failure: node {} ({}): {}", first.node_rank, first.host, first.exit);
    if let Some(line) = &first.line {
        s.push_str(&format!("\n  last error line: {line}"));
    }
    s.push_str(&format!("\n  full log: {log_path}"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::NodeExit;

    #[test]
    fn failure_names_node_exit_and_line() {
        let f = FirstFailure {
            node_rank: 2,
            host: "gpu-03".into(),
            exit: NodeExit::Signal(9),
            line: Some("Killed".into()),
        };
        assert_eq!(
            failure(&f, "herd-logs/r/attempt-0/node2-gpu-03.log"),
            "first failure: node 2 (gpu-03): signal 9 (SIGKILL)\n  last error line: Killed\n  full log: herd-logs/r/attempt-0/node2-gpu-03.log"
        );
    }

    #[test]
    fn quiet_events_have_no_status_line() {
        assert!(status_line(&Event::AttemptSucceeded { attempt: 0 }).is_none());
        let ok =
            Event::NodeExited { attempt: 0, node_rank: 0, host: "a".into(), exit: NodeExit::ExitCode(0) };
        assert!(status_line(&ok).is_none());
    }
}
