//! `herd run`: the plan handed to the supervisor, with the reporter on a thread of its own
//! reading the run's events; then the run's summary, its closing line and the exit code that
//! says how it ended.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::mpsc;

use super::{load_plan, lock_config, new_run_id, runtime, Active, EVENT_QUEUE};
use crate::cli::RunArgs;
use crate::error::{exit, Error};
use crate::events::RunStatus;
use crate::output::{self, RunFiles, Sinks};
use crate::plan::LaunchPlan;
use crate::supervisor::{self, RunError, RunOutcome};
use crate::{config, metrics, notify};

pub(super) fn run_command(args: RunArgs) -> Result<u8, Error> {
    let mut plan = load_plan(&args.config.config, &args.selection, &args.extra_args, Active::Run)?;
    if let Some(list) = &args.ranks {
        plan.console = config::RankList::parse(list).map_err(|e| Error::Usage(format!("--ranks: {e}")))?;
    }
    crate::supervisor::lines::check_run(&plan)?;
    let metrics_addr = args.metrics.as_deref().map(metrics::serve::parse_addr).transpose();
    let metrics_addr = metrics_addr.map_err(|e| Error::Usage(format!("--metrics: {e}")))?;
    let run_id = new_run_id();
    let mode = output::mode::Surroundings::detect(args.json, args.no_progress);

    let runtime = runtime()?;

    // One run of a config at a time: a new run sweeps the nodes for leftovers of earlier runs
    // of this config, which must never hit a live one.
    let _lock = lock_config(&plan)?;

    let (files, cwd) = create_run_files(&plan, &args.config.config, &run_id)?;
    let run_dir = files.run_dir().to_path_buf();
    let started = SystemTime::now();
    let mut notifier = notifier(&plan, &args.config.config, &run_id, &cwd, &run_dir);
    let hooks = notifier.as_ref().map(notify::Notifier::stopper);
    let gate = notifier.as_mut().and_then(notify::Notifier::gate);

    let (events_tx, events_rx) = crate::events::channel(EVENT_QUEUE);
    // Ctrl-C, SIGTERM and a closed stdout all stop the run the same way.
    let (interrupt_tx, interrupts) = mpsc::unbounded_channel();
    let sinks = Sinks {
        stdout: Box::new(std::io::stdout()),
        stderr: Box::new(std::io::stderr()),
        mode,
        on_stdout_closed: Some(interrupt_tx.clone()),
        console: plan.console.clone(),
        collapse: args.collapse,
        notify: notifier,
        metrics: metrics_addr.and_then(|addr| serve_metrics(addr, &plan)),
    };
    let reporter = std::thread::spawn(move || output::report(files, events_rx, sinks));

    let end = supervisor::RunEnd::default();
    let requeue = crate::preempt::Requeue::new(args.requeue, end.clone());
    let outcome = runtime.block_on(async {
        crate::preempt::forward_signals(interrupt_tx, hooks, Some(requeue.clone()));
        let interrupts = supervisor::Interrupts::new(interrupts);
        let options = supervisor::RunOptions { preflight: !args.no_preflight };
        supervisor::run(&plan, &run_id, options, events_tx, interrupts, end).await
    });
    // The record is complete before the run_finished hook starts (it may read summary.json).
    write_summary(&run_dir, &run_id, &outcome, started);
    drop(gate);
    // The reporter has already warned about any file it could not write.
    let report = reporter.join().expect("reporter thread panicked");
    // Last: Slurm stops this batch step once the job is requeued.
    let ended = outcome.as_ref().ok().map(|o| (o.status, o.kept.as_ref()));
    runtime.block_on(requeue.after_run(ended));
    finish(outcome, &run_dir, report.stdout_closed)
}

/// The run's files and the record of its start, and the directory herd runs in. They exist
/// before any node is contacted: a run that cannot keep its logs does not start.
fn create_run_files(plan: &LaunchPlan, config: &Path, run_id: &str) -> Result<(RunFiles, PathBuf), Error> {
    let hosts: Vec<String> = plan.nodes.iter().map(|n| n.host.clone()).collect();
    let files = RunFiles::create(&plan.logs_dir, run_id, hosts).map_err(Error::io(format!(
        "cannot create the run's log directory under {}",
        plan.logs_dir.display()
    )))?;
    let run_dir = files.run_dir();
    let cwd = std::env::current_dir().map_err(Error::io("cannot read the current directory"))?;
    output::record::write_start(run_dir, plan, config, &cwd)
        .map_err(Error::io(format!("cannot write the run's record in {}", run_dir.display())))?;
    Ok((files, cwd))
}

/// `--metrics`: the run's metrics, served from now on to the end of herd; `None`, with a
/// warning, when `addr` cannot be listened on (the run goes on without them).
fn serve_metrics(
    addr: std::net::SocketAddr,
    plan: &LaunchPlan,
) -> Option<(Arc<Mutex<metrics::Metrics>>, supervisor::Progress)> {
    let served = Arc::new(Mutex::new(metrics::Metrics::new()));
    match metrics::serve::start(addr, served.clone()) {
        Ok(local) => {
            eprintln!("herd: metrics at http://{local}/metrics");
            Some((served, supervisor::Progress::of(plan)))
        }
        Err(e) => {
            eprintln!(
                "herd: warning: --metrics {addr}: cannot listen ({e}); the run goes on without metrics"
            );
            None
        }
    }
}

/// `[notify]`'s hooks for this run, if the config has any.
fn notifier(
    plan: &LaunchPlan,
    config: &Path,
    run_id: &str,
    cwd: &Path,
    run_dir: &Path,
) -> Option<notify::Notifier> {
    plan.notify.clone().map(|n| {
        let run = notify::RunInfo {
            run_id: run_id.to_string(),
            config: std::fs::canonicalize(config).unwrap_or_else(|_| cwd.join(config)),
            run_dir: cwd.join(run_dir),
        };
        notify::Notifier::new(n, run)
    })
}

/// After the run and its record: the closing line, and the exit code.
fn finish(outcome: Result<RunOutcome, RunError>, run_dir: &Path, stdout_closed: bool) -> Result<u8, Error> {
    if let Err(RunError::Preflight(nodes)) = &outcome {
        eprint!("{}", output::doctor_view::text(nodes, true));
    }
    let outcome = outcome?;

    let closing = output::summary::closing(outcome.status, &outcome.attempts, run_dir);
    if !closing.is_empty() {
        eprint!("herd: {closing}");
    }
    Ok(match outcome.status {
        RunStatus::Succeeded => exit::OK,
        RunStatus::Interrupted if stdout_closed => exit::STDOUT_CLOSED,
        RunStatus::Interrupted => exit::INTERRUPTED,
        RunStatus::Failed => exit::JOB_FAILED,
        RunStatus::Preempted | RunStatus::TimeLimit => exit::PREEMPTED,
    })
}

/// The run's summary.json: its outcome, or why it stopped before any attempt (a failed
/// preflight, no port). One that cannot be written is warned about, not an error.
fn write_summary(run_dir: &Path, run_id: &str, outcome: &Result<RunOutcome, RunError>, started: SystemTime) {
    let now = SystemTime::now();
    let summary = match outcome {
        Ok(o) => output::record::with_lineage(
            output::record::summary(run_id, o.status, &o.attempts, started, now),
            run_dir,
        ),
        Err(e) => {
            let mut summary = output::record::summary(run_id, RunStatus::Failed, &[], started, now);
            summary["not_started"] = serde_json::Value::String(e.to_string());
            summary
        }
    };
    if let Err(e) = output::record::write_summary(run_dir, &summary) {
        tracing::warn!("cannot write {}: {e}", run_dir.join("summary.json").display());
    }
}
