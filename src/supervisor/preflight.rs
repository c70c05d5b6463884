//! Before the first attempt: the fast checks of `herd doctor` on every node (unless turned
//! off), which also find each node's interface to the master for
//! `rendezvous.interface = "auto"`, and sweep every node's leftovers as they log in.

use super::sweep::{swept_events, Sweep};
use super::types::{RunError, RunOptions};
use crate::doctor;
use crate::events::EventSender;
use crate::fleet::Fleet;
use crate::plan::{LaunchPlan, NodePlan, AUTO_INTERFACE};
use crate::remote::agent::AgentInvocation;
use crate::transport::Started;

/// What the preflight leaves the first attempt.
#[derive(Debug, Clone, Default)]
pub(super) struct Preflighted {
    /// Per node, its interface to the master (for `rendezvous.interface = "auto"`); empty when
    /// not needed.
    pub interfaces: Vec<String>,
    /// The master port the checks tested, which the first attempt uses.
    pub port: Option<u16>,
    /// Every node's leftovers were swept as its probe started.
    pub swept: bool,
    /// The node ranks new to the run at this attempt (promoted spares), which a restart's
    /// agents sweep as a first attempt's do.
    pub fresh: Vec<usize>,
}

/// Whether the run probes its nodes before the first attempt: for the checks, or to find
/// each node's interface to the master for `rendezvous.interface = "auto"`.
pub(super) fn will_preflight(plan: &LaunchPlan, options: RunOptions) -> bool {
    options.preflight || plan.interface.as_deref() == Some(AUTO_INTERFACE)
}

/// How the run's preflight probes, if it does: the fast checks, the port test with the
/// checks, and a sweep of the config's leftovers first on every node. The node ranks `fresh`
/// (nodes new to the run: promoted spares) also `import torch` with the checks: the fast
/// checks leave it out for time, and an attempt that found it broken there would end the run
/// as `launch` while another spare is left.
pub(super) fn probe_options(
    plan: &LaunchPlan,
    run_id: &str,
    options: RunOptions,
    fresh: &[usize],
) -> Option<doctor::ProbeOptions> {
    will_preflight(plan, options).then(|| doctor::ProbeOptions {
        fast: true,
        test_port: options.preflight,
        presweep: Some(Sweep::Config { spare_run: Some(run_id) }.body(plan)),
        import_torch: if options.preflight { fresh.to_vec() } else { Vec::new() },
    })
}

/// The first attempt's job agent of one node with the preflight's probe as its first phase,
/// in the same login (see docs/design/agent.md, "One login per node"): it sweeps as the
/// probe's agent would, and reports the master's ports when the probe chooses the port.
pub(super) fn with_probe_phase(
    plan: &LaunchPlan,
    node: &NodePlan,
    probe: &doctor::ProbeOptions,
    job: AgentInvocation,
) -> AgentInvocation {
    let alone = doctor::probe_invocation(plan, node, probe);
    AgentInvocation {
        probe: Some(alone.job),
        presweep: alone.presweep,
        report_ports: alone.report_ports,
        ..job
    }
}

/// Probe every node, over the fleet's connections, with the probes `early` already started
/// (a job agent with a probe phase, see `with_probe_phase`, or a probe's own agent); `fresh`:
/// the node ranks new to the run (see `probe_options`). With the result, per node, the job
/// agents whose probe phase finished, waiting for their env.
pub(super) async fn preflight(
    plan: &LaunchPlan,
    run_id: &str,
    fleet: &Fleet,
    options: RunOptions,
    fresh: &[usize],
    events: &EventSender,
    early: Vec<Option<Started>>,
) -> Result<(Preflighted, Vec<Option<Started>>), RunError> {
    let Some(probe) = probe_options(plan, run_id, options, fresh) else {
        return Ok((Preflighted::default(), Vec::new()));
    };
    let report = doctor::diagnose(plan, fleet, &probe, early).await;
    for (rank, lines) in report.swept.iter().enumerate() {
        for event in lines.iter().flat_map(|l| swept_events(rank, &plan.nodes[rank].host, l)) {
            let _ = events.send(event).await;
        }
    }
    let port = match report.port {
        Some(Ok(p)) => Some(p),
        Some(Err(error)) => return Err(RunError::Port { host: plan.master.host.clone(), error }),
        None => None,
    };
    if options.preflight && !report.ok() {
        return Err(RunError::Preflight(report.nodes));
    }
    let checked = Preflighted {
        interfaces: report.route_devs.into_iter().map(Option::unwrap_or_default).collect(),
        port,
        swept: true,
        fresh: Vec::new(),
    };
    Ok((checked, report.agents))
}
