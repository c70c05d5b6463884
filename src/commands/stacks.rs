//! `herd stacks`: every running rank's Python stack (py-spy through each node's agent),
//! printed by node and rank, with the ranks that stand out.

use std::path::Path;

use tokio::sync::mpsc;

use super::{load_plan, new_run_id, ready_to_connect, runtime, Active, EVENT_QUEUE};
use crate::cli::NodeSelection;
use crate::error::{exit, Error};
use crate::{output, supervisor};

pub(super) fn stacks_command(config: &Path) -> Result<u8, Error> {
    // Every node of the config: a live run may have promoted any spare.
    let plan = load_plan(config, &NodeSelection::default(), &[], Active::All)?;
    ready_to_connect(&plan)?;
    let runtime = runtime()?;
    let hosts: Vec<String> = plan.nodes.iter().map(|n| n.host.clone()).collect();
    let prefixes = output::prefix::prefixes(&hosts, false);
    let (events_tx, events_rx) = crate::events::channel(EVENT_QUEUE);
    let collector = std::thread::spawn(move || {
        output::exec_view::collect(events_rx, &mut std::io::sink(), &prefixes, true)
    });
    let commands: Vec<String> =
        plan.nodes.iter().map(|n| crate::remote::procs::stacks_command(&plan.config_key, &n.host)).collect();
    let outcome = runtime.block_on(async {
        let (interrupt_tx, interrupts) = mpsc::unbounded_channel();
        crate::preempt::forward_signals(interrupt_tx, None, None);
        let interrupts = supervisor::Interrupts::new(interrupts);
        supervisor::exec::exec(&plan, &new_run_id(), &commands, events_tx, interrupts).await
    });
    let outputs = collector.join().expect("stacks collector panicked");
    eprint!("{}", output::exec_view::failures(&hosts, &outcome.ends));
    let mut stacks = Vec::new();
    for (node_rank, out) in outputs.iter().enumerate() {
        for message in crate::transport::session::messages_in(out) {
            if let crate::remote::protocol::AgentMessage::Stack(stack) = message {
                stacks.push((node_rank, stack));
            }
        }
    }
    if stacks.is_empty() {
        eprintln!("herd: no rank of a run of {} is running on any node", plan.config_path.display());
        return Ok(exit::JOB_FAILED);
    }
    stacks.sort_by_key(|(_, s)| s.rank);
    let text = output::summary::stacks_text(&stacks, &hosts);
    let all: Vec<crate::stacks::RankStack> = stacks.into_iter().map(|(_, s)| s).collect();
    let summary = crate::stacks::summarize(&all, &plan.workdir, crate::stacks::Taken::Live).words();
    super::out(&format!("{text}{summary}\n"))?;
    Ok(exit::OK)
}
