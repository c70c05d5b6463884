//! `herd exec`: one command on every node of the config, its output prefixed (or gathered per
//! node), and the worst node's exit status as herd's.

use tokio::sync::mpsc;

use super::{load_plan, new_run_id, ready_to_connect, runtime, Active, EVENT_QUEUE};
use crate::cli::ExecArgs;
use crate::error::{exit, Error};
use crate::{output, supervisor};

pub(super) fn exec_command(args: ExecArgs) -> Result<u8, Error> {
    let plan = load_plan(&args.config.config, &args.selection, &[], Active::All)?;
    let command = args.command.join(" ");
    let exec_id = new_run_id();
    ready_to_connect(&plan)?;
    let runtime = runtime()?;
    let hosts: Vec<String> = plan.nodes.iter().map(|n| n.host.clone()).collect();
    let color = output::mode::Surroundings::detect(false, true).color();
    let prefixes = output::prefix::prefixes(&hosts, color);

    let (events_tx, events_rx) = crate::events::channel(EVENT_QUEUE);
    let gather = args.gather;
    let printer = std::thread::spawn(move || {
        output::exec_view::collect(events_rx, &mut std::io::stdout(), &prefixes, gather)
    });
    let outcome = runtime.block_on(async {
        let (interrupt_tx, interrupts) = mpsc::unbounded_channel();
        crate::preempt::forward_signals(interrupt_tx, None, None);
        let interrupts = supervisor::Interrupts::new(interrupts);
        let commands = vec![command; plan.nodes.len()];
        supervisor::exec::exec(&plan, &exec_id, &commands, events_tx, interrupts).await
    });
    let outputs = printer.join().expect("exec printer panicked");
    let ends = outcome.ends;
    if gather {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&output::exec_view::gathered(&hosts, &outputs, &ends));
        let _ = out.flush();
    }
    eprint!("{}", output::exec_view::failures(&hosts, &ends));
    if outcome.interrupted {
        eprintln!("herd: interrupted; the command was stopped on every node");
        return Ok(exit::INTERRUPTED);
    }
    let worst = ends.iter().map(|e| e.status()).max().unwrap_or(0);
    Ok(u8::try_from(worst).unwrap_or(u8::MAX))
}
