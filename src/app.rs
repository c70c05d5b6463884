//! From parsed arguments to an exit code: load the config, build the plan, and either print
//! it or hand it to the supervisor with a reporter attached.

use std::io::IsTerminal;
use std::path::Path;

use tokio::sync::mpsc;

use crate::cli::{Cli, Command, DoctorArgs, PlanArgs, RunArgs};
use crate::error::{exit, Error};
use crate::events::{Event, RunStatus};
use crate::output::{self, RunFiles, Sinks};
use crate::plan::{self, LaunchPlan, PlanInputs};
use crate::{config, doctor, supervisor};

pub fn run(cli: Cli) -> Result<u8, Error> {
    match cli.command {
        Command::Plan(args) => plan_command(args),
        Command::Run(args) => run_command(args),
        Command::Kill(args) => kill_command(&args.config),
        Command::Doctor(args) => doctor_command(args),
    }
}

fn load_plan(path: &Path, extra_args: &[String]) -> Result<LaunchPlan, Error> {
    let mut config = config::load(path)?;
    config.job.args.extend(extra_args.iter().cloned());
    let inputs = PlanInputs {
        cwd: std::env::current_dir()
            .map_err(Error::io("cannot read the current directory"))?
            .display()
            .to_string(),
        env: std::env::vars().collect(),
    };
    let plan = plan::build(&config, &inputs);
    for name in &plan.missing_forwarded {
        tracing::warn!("forward_env names {name}, which is not set here: it will not be exported");
    }
    Ok(plan)
}

fn plan_command(args: PlanArgs) -> Result<u8, Error> {
    let plan = load_plan(&args.config.config, &args.extra_args)?;
    let text = if args.json { output::plan_view::json(&plan) } else { output::plan_view::text(&plan) };
    print!("{text}");
    Ok(exit::OK)
}

fn run_command(args: RunArgs) -> Result<u8, Error> {
    let plan = load_plan(&args.config.config, &args.extra_args)?;
    let run_id = new_run_id();
    let color = output::prefix::use_color(
        std::io::stdout().is_terminal(),
        std::env::var("NO_COLOR").ok().as_deref(),
        std::env::var("TERM").ok().as_deref(),
    );

    let runtime = runtime()?;

    // One run of a config at a time: a new run sweeps the nodes for leftovers of earlier runs
    // of this config, which must never hit a live one.
    let _lock = lock_config(&plan)?;

    // The run's files exist before any node is contacted: a run that cannot keep its logs
    // does not start.
    let hosts: Vec<String> = plan.nodes.iter().map(|n| n.host.clone()).collect();
    let files = RunFiles::create(&plan.logs_dir, &run_id, hosts).map_err(Error::io(format!(
        "cannot create the run's log directory under {}",
        plan.logs_dir.display()
    )))?;
    let run_dir = files.run_dir().to_path_buf();

    let (events_tx, events_rx) = mpsc::channel(1024);
    let reporter = std::thread::spawn(move || {
        let sinks = Sinks { stdout: Box::new(std::io::stdout()), stderr: Box::new(std::io::stderr()), color };
        output::report(files, events_rx, sinks)
    });

    let outcome = runtime.block_on(async {
        let interrupts = forward_signals();
        let options = supervisor::RunOptions { preflight: !args.no_preflight };
        supervisor::run(&plan, &run_id, options, events_tx, interrupts).await
    });
    // The reporter has already warned about any file it could not write.
    let _report = reporter.join().expect("reporter thread panicked");
    if let Err(supervisor::RunError::Preflight(nodes)) = &outcome {
        eprint!("{}", output::doctor_view::text(nodes, true));
    }
    let outcome = outcome?;

    let closing = output::summary::closing(outcome.status, &outcome.attempts, &run_dir);
    if !closing.is_empty() {
        eprint!("herd: {closing}");
    }
    Ok(match outcome.status {
        RunStatus::Succeeded => exit::OK,
        RunStatus::Interrupted => exit::INTERRUPTED,
        RunStatus::Failed => exit::JOB_FAILED,
    })
}

fn kill_command(config: &Path) -> Result<u8, Error> {
    let plan = load_plan(config, &[])?;
    let _lock = lock_config(&plan)?;
    let events = runtime()?.block_on(supervisor::kill_leftovers(&plan))?;
    let mut stopped = 0;
    for event in &events {
        if let Event::LeftoversStopped { node_rank, host, pids } = event {
            stopped += pids.len();
            println!("node {node_rank} ({host}): stopped {} process(es): {pids:?}", pids.len());
        }
        if let Event::ContainersRemoved { node_rank, host, names } = event {
            stopped += names.len();
            println!("node {node_rank} ({host}): removed {} container(s): {}", names.len(), names.join(" "));
        }
    }
    if stopped == 0 {
        println!(
            "nothing left of earlier runs of {} on its {} nodes",
            plan.config_path.display(),
            plan.nnodes()
        );
    }
    Ok(exit::OK)
}

fn doctor_command(args: DoctorArgs) -> Result<u8, Error> {
    let plan = load_plan(&args.config.config, &[])?;
    let report = runtime()?.block_on(async {
        let (conns, ms, errors) = supervisor::connect_each(&plan).await;
        let port = match &conns[plan.master.node_rank] {
            Some(master) => supervisor::choose_port(&plan, master, &Default::default()).await.ok(),
            None => None,
        };
        let report = doctor::diagnose(&plan, &conns, &ms, &errors, port, false).await;
        supervisor::close_each(conns).await;
        report
    });
    if args.json {
        print!("{}", output::doctor_view::json(&report.nodes));
    } else {
        print!("{}", output::doctor_view::text(&report.nodes, false));
    }
    Ok(if report.ok() { exit::OK } else { exit::PREFLIGHT })
}

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(Error::io("cannot start the async runtime"))
}

fn lock_config(plan: &LaunchPlan) -> Result<std::fs::File, Error> {
    let dir = &plan.logs_dir;
    std::fs::create_dir_all(dir)
        .map_err(Error::io(format!("cannot create the log directory {}", dir.display())))?;
    let path = dir.join(format!(".herd-{}.lock", plan.config_key));
    let file =
        std::fs::File::create(&path).map_err(Error::io(format!("cannot create {}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Busy(format!(
            "another herd run of {} is in progress (it holds {})",
            plan.config_path.display(),
            path.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io(format!("cannot lock {}", path.display()))(e)),
    }
}

/// Every SIGINT and SIGTERM becomes one interrupt; the supervisor decides what each means.
fn forward_signals() -> supervisor::Interrupts {
    use tokio::signal::unix::{signal, SignalKind};
    let (tx, rx) = mpsc::unbounded_channel();
    for kind in [SignalKind::interrupt(), SignalKind::terminate()] {
        let tx = tx.clone();
        match signal(kind) {
            Ok(mut stream) => {
                tokio::spawn(async move {
                    while stream.recv().await.is_some() {
                        if tx.send(()).is_err() {
                            break;
                        }
                    }
                });
            }
            Err(e) => tracing::warn!("cannot watch signal {kind:?}: {e}"),
        }
    }
    rx
}

/// Sortable by start time, unique enough for two runs started in the same second.
fn new_run_id() -> String {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let stamp: String = now.chars().filter(|c| c.is_ascii_digit()).collect();
    format!("{}-{}-{:04x}", &stamp[..8], &stamp[8..14], rand::random::<u16>())
}

#[cfg(test)]
mod tests {
    #[test]
    fn run_ids_start_with_the_utc_time() {
        let id = super::new_run_id();
        assert_eq!(id.len(), "20261130-105803-abcd".len(), "{id}");
        assert!(id.starts_with("20"), "{id}");
        assert_eq!(&id[8..9], "-");
    }
}
