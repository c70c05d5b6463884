//! `herd kill`: what earlier runs of the config left on its nodes stopped: through Slurm its
//! job steps cancelled first, then every node swept for processes and containers.

use std::path::Path;

use super::{load_plan, lock_config, runtime, Active};
use crate::cli::NodeSelection;
use crate::error::{exit, Error};
use crate::events::Event;
use crate::{plan, supervisor, transport};

pub(super) fn kill_command(config: &Path, slurm: bool) -> Result<u8, Error> {
    // Every node of the config: leftovers may be on any of them, whatever a run selected.
    let plan = load_plan(config, &NodeSelection { slurm, ..NodeSelection::default() }, &[], Active::All)?;
    let _lock = lock_config(&plan)?;
    let runtime = runtime()?;
    let mut stopped = 0;
    // Through Slurm, first the config's steps that are still there (any herd's): then the
    // nodes are swept for what outlived them.
    if let Some(plan::Transport::Slurm(t)) = plan.nodes.first().map(|n| &n.transport) {
        let steps = runtime
            .block_on(transport::slurm::cancel_steps(&t.job_id, &t.step_name, true))
            .map_err(|e| Error::Slurm(format!("herd kill: {e}")))?;
        if !steps.is_empty() {
            stopped += steps.len();
            super::out(&format!(
                "job {}: cancelled {} step(s): {}\n",
                t.job_id,
                steps.len(),
                steps.join(" ")
            ))?;
        }
    }
    let events = runtime.block_on(supervisor::kill_leftovers(&plan))?;
    for event in &events {
        if let Event::LeftoversStopped { node_rank, host, pids } = event {
            stopped += pids.len();
            super::out(&format!(
                "node {node_rank} ({host}): stopped {} process(es): {pids:?}\n",
                pids.len()
            ))?;
        }
        if let Event::ContainersRemoved { node_rank, host, names } = event {
            stopped += names.len();
            super::out(&format!(
                "node {node_rank} ({host}): removed {} container(s): {}\n",
                names.len(),
                names.join(" ")
            ))?;
        }
    }
    if stopped == 0 {
        super::out(&format!(
            "nothing left of earlier runs of {} on its {} nodes\n",
            plan.config_path.display(),
            plan.nnodes()
        ))?;
    }
    Ok(exit::OK)
}
