//! `herd exec`: one shell command on every node at once, each under the node agent, so that
//! it ends everywhere when herd does (Ctrl-C, a lost connection, even `kill -9`).

use std::sync::Arc;

use tokio::sync::mpsc;

use super::node::{self, Liveness, NodeCommand, NodeReport, NodeRun, Stop};
use super::types::Interrupts;
use crate::events::EventSender;
use crate::fleet::Fleet;
use crate::marker::Marker;
use crate::outcome::NodeExit;
use crate::plan::LaunchPlan;
use crate::remote;
use crate::remote::agent::AgentInvocation;

/// Seconds between SIGTERM and SIGKILL when an exec is interrupted.
const GRACE_SECS: u64 = 3;

/// How one node's command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecExit {
    Exited(NodeExit),
    /// No connection, so the command never started.
    Unreachable(String),
}

impl ExecExit {
    /// As a shell would report it: the exit code, 128+N for signal N, 255 when the node could
    /// not be reached or was lost (as ssh does).
    pub fn status(&self) -> i32 {
        match self {
            ExecExit::Exited(NodeExit::ExitCode(c)) => *c,
            ExecExit::Exited(NodeExit::Signal(s)) => 128 + s,
            ExecExit::Exited(NodeExit::Lost(_)) | ExecExit::Unreachable(_) => 255,
        }
    }
}

/// How an exec ended.
#[derive(Debug)]
pub struct ExecOutcome {
    /// Every node's end, in node order.
    pub ends: Vec<ExecExit>,
    /// Ctrl-C or SIGTERM stopped it.
    pub interrupted: bool,
}

/// Run `commands[node rank]` (a shell command line, run by the login shell in the login
/// directory) on every node of `plan`. Output arrives as `NodeOutput` events; each node's
/// end as a `NodeExited` event too.
pub async fn exec(
    plan: &LaunchPlan,
    exec_id: &str,
    commands: &[String],
    events: EventSender,
    interrupts: Interrupts,
) -> ExecOutcome {
    exec_with_env(plan, exec_id, commands, &[], events, interrupts).await
}

/// `exec`, with `envs[node rank]` exported to the command too (through the agent's stdin, as
/// a job's: never in an argv).
pub async fn exec_with_env(
    plan: &LaunchPlan,
    exec_id: &str,
    commands: &[String],
    envs: &[Vec<(String, String)>],
    events: EventSender,
    mut interrupts: Interrupts,
) -> ExecOutcome {
    let (fleet, _, _) = Fleet::connect(plan, None, |_| Vec::new()).await;
    let mut ends: Vec<Option<ExecExit>> = fleet
        .links()
        .iter()
        .map(|l| l.conn.as_ref().err().map(|e| ExecExit::Unreachable(e.clone())))
        .collect();
    let liveness = Arc::new(Liveness::new(plan.nnodes()));
    let (reports_tx, mut reports) = mpsc::unbounded_channel();
    let mut told = Vec::new();
    let mut tasks = fleet.spawn_each(|rank, conn| {
        let env = envs.get(rank).map_or(&[][..], Vec::as_slice);
        let (tell, run) = node_run(plan, exec_id, &commands[rank], env, rank, &liveness, &reports_tx);
        told.push(tell);
        Some(node::run(conn.clone(), run, events.clone()))
    });
    drop(reports_tx);
    let mut interrupted = 0;
    loop {
        tokio::select! {
            report = reports.recv() => match report {
                Some((rank, NodeReport::Ended(result))) => ends[rank] = Some(ExecExit::Exited(result.exit)),
                Some(_) => {}
                None => {
                    // Every node has ended: a task that panicked instead panics here.
                    while tasks.next().await.is_some() {}
                    break;
                }
            },
            Some(_) = interrupts.recv() => {
                interrupted += 1;
                let stop = if interrupted == 1 { Stop::Term } else { Stop::Kill };
                for tell in &told {
                    let _ = tell.send(NodeCommand::Stop {
                        stop,
                        fast: false,
                        kill_wait: super::attempt::KILL_DEADLINE,
                    });
                }
            }
        }
    }
    fleet.close().await;
    let ends =
        ends.into_iter().map(|e| e.unwrap_or_else(|| ExecExit::Unreachable("no result".into()))).collect();
    ExecOutcome { ends, interrupted: interrupted > 0 }
}

/// One node's part of an exec, and its command channel, its env already sent.
fn node_run(
    plan: &LaunchPlan,
    exec_id: &str,
    command: &str,
    env: &[(String, String)],
    rank: usize,
    liveness: &Arc<Liveness>,
    reports: &node::Reports,
) -> (mpsc::UnboundedSender<NodeCommand>, NodeRun) {
    let marker = Marker::exec(&plan.config_key, exec_id).node(rank);
    let (tell, commands) = mpsc::unbounded_channel();
    let value = marker.value();
    let vars = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).chain([(marker.var, value.as_str())]);
    let _ = tell.send(NodeCommand::Env(remote::shell::env_block(vars)));
    let run = NodeRun {
        node_rank: rank,
        host: plan.nodes[rank].host.clone(),
        attempt: 0,
        // Nobody watches an exec's heartbeat (a lost connection still ends it), but its
        // interval bounds how long anything of it may outlive the agent. The command runs as
        // a login shell would run it, in bash where the node has it.
        invocation: AgentInvocation {
            grace_secs: GRACE_SECS,
            ..plan.agent(marker.entry(), remote::shell::in_bash(command))
        },
        early: None,
        commands,
        reports: reports.clone(),
        liveness: liveness.clone(),
        progress: super::node::Progress::AnyLine,
        fatal_pattern: None,
    };
    (tell, run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_like_a_shell() {
        assert_eq!(ExecExit::Exited(NodeExit::ExitCode(3)).status(), 3);
        assert_eq!(ExecExit::Exited(NodeExit::Signal(9)).status(), 137);
        assert_eq!(ExecExit::Exited(NodeExit::Lost("x".into())).status(), 255);
        assert_eq!(ExecExit::Unreachable("x".into()).status(), 255);
    }
}
