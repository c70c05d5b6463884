//! `herd doctor`: the preflight's checks on every node of the config at once (spares and
//! quarantined nodes too), printed as a table or JSON; exit 3 when one fails. `--deep` then
//! measures the network between the nodes and names the slow ones.

use std::time::Duration;

use tokio::sync::mpsc;

use super::{load_plan, new_run_id, ready_to_connect, runtime, Active, EVENT_QUEUE};
use crate::cli::DoctorArgs;
use crate::doctor::net::{self, NetReport};
use crate::error::{exit, Error};
use crate::outcome::NodeExit;
use crate::output::doctor_view::NetEnd;
use crate::plan::LaunchPlan;
use crate::supervisor::exec::ExecExit;
use crate::supervisor::Signal;
use crate::{doctor, output, supervisor};

/// How long `--deep` may take on the nodes at least: torch's import and the rendezvous,
/// then the measuring budget. It gets longer with the checks before it (see `deep_limit`).
/// Past it, the measurement is stopped on every node (TERM, then KILL) and what came in is
/// scored.
const DEEP_LIMIT: Duration = Duration::from_secs(net::BUDGET_SECS + 100);

/// The limit for a measurement after checks that took `checks`: their logins and torch
/// imports are the measurement's too, and take as long on the same nodes (162 s for the
/// checks of 64 nodes sharing two cores, where the measurement ran out of DEEP_LIMIT alone).
fn deep_limit(checks: Duration) -> Duration {
    DEEP_LIMIT.max(Duration::from_secs(net::BUDGET_SECS + 60) + checks.mul_f64(1.5))
}

pub(super) fn doctor_command(args: DoctorArgs) -> Result<u8, Error> {
    let plan = load_plan(&args.config.config, &args.selection, &[], Active::All)?;
    crate::supervisor::lines::check_doctor(&plan)?;
    ready_to_connect(&plan)?;
    // The measurement loads the network and would measure a live run's traffic: it takes the
    // config's run lock, as a run does: exit 4 while one is live, and a run is refused meanwhile.
    let _lock = if args.deep { Some(super::lock_config(&plan)?) } else { None };
    let runtime = runtime()?;
    let checks_started = std::time::Instant::now();
    let report = runtime.block_on(async {
        let (fleet, _, _) = crate::fleet::Fleet::connect(&plan, None, |_| Vec::new()).await;
        let probe =
            doctor::ProbeOptions { fast: false, test_port: true, presweep: None, import_torch: Vec::new() };
        let report = doctor::diagnose(&plan, &fleet, &probe, Vec::new()).await;
        fleet.close().await;
        report
    });
    let hosts: Vec<String> = plan.nodes.iter().map(|n| n.host.clone()).collect();
    let mut interrupted = false;
    let network = match deep_port(&plan, &report) {
        _ if !args.deep => None,
        Ok(port) => {
            let envs = net::envs(&plan, port, &report.route_devs);
            let limit = deep_limit(checks_started.elapsed());
            let network = runtime.block_on(measure(&plan, port, &envs, &hosts, args.slow_below, limit));
            interrupted = network.is_none();
            network
        }
        Err(why) => {
            eprintln!("herd: the network was not measured (--deep): {why}");
            None
        }
    };
    if args.json {
        super::out(&output::doctor_view::json(&report.nodes, network.as_ref(), args.deep))?;
    } else {
        super::out(&output::doctor_view::text(&report.nodes, false))?;
        if let Some(network) = &network {
            super::out(&output::doctor_view::net_text(network, &hosts))?;
        }
    }
    if interrupted {
        // The checks' table is printed all the same: they ran to their end.
        eprintln!("herd: interrupted; the measurement was stopped on every node");
        return Ok(exit::INTERRUPTED);
    }
    let deep_ok = !args.deep || network.as_ref().is_some_and(NetReport::ok);
    Ok(if report.ok() && deep_ok { exit::OK } else { exit::PREFLIGHT })
}

/// The master port `--deep` measures on (the one the checks found free and reachable), or
/// why it cannot measure.
fn deep_port(plan: &LaunchPlan, report: &doctor::Report) -> Result<u16, &'static str> {
    if !report.ok() {
        return Err("every node's checks must pass first");
    }
    if plan.nnodes() < 2 {
        return Err("it takes two nodes or more");
    }
    if plan.container.is_some() {
        return Err(
            "with [container], torch is in the image, and the measurement does not run in containers yet",
        );
    }
    match report.port {
        Some(Ok(port)) => Ok(port),
        _ => Err("no master port was found free"),
    }
}

/// The measurement on every node at once, under their agents (stopped everywhere at
/// `limit`, or on Ctrl-C: `None`), and its verdict. On stderr, each node that did not
/// finish it: lost or unreachable, named as such, or failed, with its last lines.
async fn measure(
    plan: &LaunchPlan,
    port: u16,
    envs: &[Vec<(String, String)>],
    hosts: &[String],
    slow_below: f64,
    limit: Duration,
) -> Option<NetReport> {
    let prefixes = output::prefix::prefixes(hosts, false);
    let (events_tx, events_rx) = crate::events::channel(EVENT_QUEUE);
    let collector = std::thread::spawn(move || {
        output::exec_view::collect(events_rx, &mut std::io::sink(), &prefixes, true)
    });
    let (interrupt_tx, interrupts) = mpsc::unbounded_channel();
    crate::preempt::forward_signals(interrupt_tx.clone(), None, None);
    let interrupts = supervisor::Interrupts::new(interrupts);
    let started = std::time::Instant::now();
    let timer = tokio::spawn(async move {
        tokio::time::sleep(limit).await;
        tracing::warn!("the network check took more than {} s: stopping it", limit.as_secs());
        let _ = interrupt_tx.send(Signal::Interrupt);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let _ = interrupt_tx.send(Signal::Interrupt);
    });
    let commands = net::commands(plan, port);
    let outcome =
        supervisor::exec::exec_with_env(plan, &new_run_id(), &commands, envs, events_tx, interrupts).await;
    timer.abort();
    let outputs = collector.join().expect("network check collector panicked");
    // Stopped by Ctrl-C or SIGTERM, not by the time limit: nothing to judge.
    if outcome.interrupted && started.elapsed() < limit {
        return None;
    }
    let texts: Vec<String> = outputs.iter().map(|out| String::from_utf8_lossy(out).into_owned()).collect();
    let samples: Vec<net::PairSample> =
        texts.iter().enumerate().flat_map(|(rank, text)| net::parse(text, rank)).collect();
    let ends: Vec<NetEnd> = outcome
        .ends
        .iter()
        .zip(&texts)
        .map(|(end, text)| match end {
            ExecExit::Exited(NodeExit::Lost(why)) => NetEnd::Lost(why),
            ExecExit::Unreachable(why) => NetEnd::Unreachable(why),
            e if e.status() == 0 => NetEnd::Ok,
            e => NetEnd::Failed {
                status: e.status(),
                last: text.lines().filter(|l| !l.trim().is_empty()).collect(),
            },
        })
        .collect();
    eprint!("{}", output::doctor_view::net_failures(&ends, hosts));
    Some(net::score(plan.nnodes(), &samples, slow_below))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_measures_on_the_checked_port_only_when_every_check_passed_on_two_bare_nodes_or_more() {
        let plan = |extra: &str| {
            let text = format!("[[nodes]]\nhost = \"n[1-2]\"\n[job]\nscript = \"t.py\"\n{extra}");
            let config = crate::config::parse(std::path::Path::new("c.toml"), &text).unwrap();
            crate::plan::build(&config, &Default::default())
        };
        let report = |port: Option<u16>, status: doctor::Status| doctor::Report {
            nodes: vec![doctor::NodeChecks {
                node_rank: 0,
                host: "n1".into(),
                checks: vec![doctor::Check { name: "ssh", status, detail: String::new(), fix: None }],
            }],
            route_devs: Vec::new(),
            port: port.map(Ok),
            swept: Vec::new(),
            agents: Vec::new(),
        };
        let (pass, fail) = (doctor::Status::Pass, doctor::Status::Fail);
        assert_eq!(deep_port(&plan(""), &report(Some(29500), pass)), Ok(29500));
        assert_eq!(deep_port(&plan(""), &report(None, pass)), Err("no master port was found free"));
        assert_eq!(
            deep_port(&plan(""), &report(Some(29500), fail)),
            Err("every node's checks must pass first")
        );
        let one = plan("nnodes = 1\n");
        assert_eq!(deep_port(&one, &report(Some(29500), pass)), Err("it takes two nodes or more"));
        let container = plan("[container]\nimage = \"img:1\"\n");
        assert!(deep_port(&container, &report(Some(29500), pass))
            .unwrap_err()
            .starts_with("with [container]"));
    }

    #[test]
    fn the_measurement_gets_longer_with_the_checks_before_it() {
        assert_eq!(deep_limit(Duration::from_secs(8)), DEEP_LIMIT);
        assert_eq!(deep_limit(Duration::from_secs(162)), Duration::from_secs(20 + 60 + 243));
    }
}
