//! From parsed arguments to an exit code: one file per subcommand, and here what they share:
//! the dispatch, loading the config into a plan (`load_plan`), and what a command needs
//! before it contacts a node (the SSH key and Slurm's commands checked, herd's state
//! directory, the per-config lock), its async runtime and its signals.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::cli::{Cli, Command, NodeSelection};
use crate::error::Error;
use crate::events::Preemption;
use crate::plan::{LaunchPlan, PlanInputs};
use crate::quarantine::{self, Quarantine};
use crate::supervisor::Signal;
use crate::transport::slurm::Arrival;
use crate::{config, state, transport};

mod completions;
mod doctor;
mod exec;
mod init;
mod kill;
mod logs;
mod man;
mod nodes;
mod plan;
mod run;
mod stacks;
mod submit;

pub fn run(cli: Cli) -> Result<u8, Error> {
    match cli.command {
        Command::Plan(args) => plan::plan_command(args),
        Command::Run(args) => run::run_command(args),
        Command::Exec(args) => exec::exec_command(args),
        Command::Logs(args) => logs::logs_command(args),
        Command::Kill(args) => kill::kill_command(&args.config.config, args.slurm),
        Command::Init(args) => init::init_command(args),
        Command::Completions { shell } => completions::completions_command(shell),
        Command::Man { out_dir } => man::man_command(out_dir.as_deref()),
        Command::Doctor(args) => doctor::doctor_command(args),
        Command::Nodes(args) => nodes::nodes_command(args),
        Command::Stacks(args) => stacks::stacks_command(&args.config),
        Command::Submit(args) => submit::submit_command(args),
    }
}

/// Which of the config's nodes a command's plan makes active.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Active {
    /// As a run does: the first `job.nnodes` not quarantined (see `roster`); the rest are
    /// spares.
    Run,
    /// Every node: `doctor`, `exec` and `kill` reach the spares and quarantined nodes too.
    All,
}

/// Loads the config at `path` (its nodes from the Slurm allocation with `--slurm`), keeps the
/// nodes `selection` selects, appends `extra_args` to job.args and builds the plan.
pub fn load_plan(
    path: &Path,
    selection: &NodeSelection,
    extra_args: &[String],
    active: Active,
) -> Result<LaunchPlan, Error> {
    let options = config::LoadOptions { slurm: selection.slurm, ..config::LoadOptions::process() };
    load_plan_with(path, &options, selection, extra_args, active)
}

/// `load_plan`, with what loading the config reads given (`herd submit`: an allocation that
/// does not exist yet).
fn load_plan_with(
    path: &Path,
    options: &config::LoadOptions<'_>,
    selection: &NodeSelection,
    extra_args: &[String],
    active: Active,
) -> Result<LaunchPlan, Error> {
    let mut config = config::load_with(path, options)?;
    // Before the selection: a run must keep `job.nnodes` nodes after it, a doctor need not.
    if active == Active::All {
        config.job.nnodes = None;
        config.restart.min_nodes = None;
    }
    config::select_nodes(&mut config, selection.nodes.as_deref(), selection.exclude.as_deref())?;
    config.job.args.extend(extra_args.iter().cloned());
    let inputs = PlanInputs {
        cwd: std::env::current_dir()
            .map_err(Error::io("cannot read the current directory"))?
            .display()
            .to_string(),
        env: std::env::vars().collect(),
        // It was just read, so it exists: the same file has one key however it is named.
        config_file: Some(
            std::fs::canonicalize(path).map_err(Error::io(format!("cannot resolve {}", path.display())))?,
        ),
        resume: None,
    };
    let mut plan = crate::plan::build(&config, &inputs);
    if active == Active::Run {
        let kept_out = Quarantine::load(&quarantine::path(&plan.logs_dir, &plan.config_key))?;
        if !kept_out.nodes.is_empty() {
            plan = plan.with_roster(crate::plan::initial_roster(&config, &kept_out.reasons())?);
        }
    }
    for name in &plan.missing_forwarded {
        tracing::warn!("forward_env names {name}, which is not set here: it will not be exported");
    }
    Ok(plan)
}

/// The plan of the config at `path` as `herd run --slurm` would make it in an allocation of
/// `n` nodes that does not exist (yet): what `herd submit` checks, and how `herd logs` reads a
/// config for Slurm only.
fn plan_in_allocation(path: &Path, n: usize, extra_args: &[String]) -> Result<LaunchPlan, Error> {
    let nodelist = format!("allocated-[1-{n}]");
    let env = move |name: &str| match name {
        "SLURM_JOB_ID" => Some("0".to_string()),
        "SLURM_JOB_NODELIST" => Some(nodelist.clone()),
        _ => std::env::var(name).ok(),
    };
    let options = config::LoadOptions { env: &env, slurm: true, ..config::LoadOptions::process() };
    load_plan_with(path, &options, &NodeSelection::default(), extra_args, Active::Run)
}

/// Events waiting for the reporter. Output events hold at most one read of a node's output
/// (`supervisor::READ_SIZE`), so this also bounds the output in flight (2 MiB): when the
/// reporter falls behind, the nodes' pipes fill and their jobs wait, rather than herd's memory
/// growing.
const EVENT_QUEUE: usize = 128;

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(Error::io("cannot start the async runtime"))
}

/// What must hold on this machine before herd contacts any node: enough open files for its
/// nodes (the soft limit raised to the hard one, see `limits`); the SSH key the config names
/// exists (herd logs in with that key only, IdentitiesOnly=yes: another key must never log in
/// in its place); through Slurm, its commands are on PATH. Then herd's state directory.
fn ready_to_connect(plan: &LaunchPlan) -> Result<std::path::PathBuf, Error> {
    crate::limits::raise_for(plan.nodes.len())
        .map_err(|e| Error::Usage(format!("{}: {e}", plan.config_path.display())))?;
    if plan.nodes.iter().any(|n| matches!(n.transport, crate::plan::Transport::Slurm(_))) {
        let missing = transport::slurm::missing_commands(std::env::var_os("PATH").as_deref());
        if !missing.is_empty() {
            return Err(Error::Usage(format!(
                "{}: the slurm transport needs {} on PATH, which {} not: run herd where Slurm's \
                 client commands are (inside the allocation, e.g. `module load slurm`)",
                plan.config_path.display(),
                missing.join(", "),
                if missing.len() == 1 { "is" } else { "are" }
            )));
        }
    }
    let keys = plan.nodes.iter().filter_map(|n| match &n.transport {
        crate::plan::Transport::Ssh(t) => t.identity_file.as_deref(),
        crate::plan::Transport::Local | crate::plan::Transport::Slurm(_) => None,
    });
    if let Some(key) = keys.into_iter().next() {
        let path = transport::expand_tilde(key);
        if let Err(e) = std::fs::File::open(&path) {
            return Err(Error::Usage(format!(
                "{}: ssh.identity_file {key}: {e} (herd logs in with this key only)",
                plan.config_path.display()
            )));
        }
    }
    state_dir()
}

/// herd's per-user state directory, created. Its SSH control folder is cleaned of what a
/// killed herd left, and used for this process's connections.
fn state_dir() -> Result<std::path::PathBuf, Error> {
    let dir = state::process_dir().ok_or_else(|| {
        Error::Usage("neither XDG_STATE_HOME nor HOME is set: herd keeps its locks there".into())
    })?;
    let ssh = state::ssh_dir(&dir);
    std::fs::create_dir_all(&ssh).map_err(Error::io(format!("cannot create {}", ssh.display())))?;
    match state::clean_stale_control_dirs(&ssh) {
        Ok(0) => {}
        Ok(n) => tracing::debug!("removed {n} stale ssh control folder(s) in {}", ssh.display()),
        Err(e) => tracing::warn!("cannot clean {}: {e}", ssh.display()),
    }
    transport::use_control_dir(ssh);
    Ok(dir)
}

/// One run (or `herd kill`) of a config at a time, for this user, from whichever directory
/// it is started: the lock lives in herd's state directory, not in the logs directory.
fn lock_config(plan: &LaunchPlan) -> Result<std::fs::File, Error> {
    let path = state::lock_path(&ready_to_connect(plan)?, &plan.config_key);
    let dir = path.parent().expect("a lock file is in a folder");
    std::fs::create_dir_all(dir).map_err(Error::io(format!("cannot create {}", dir.display())))?;
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

/// Every SIGINT and SIGTERM becomes one request on `tx`; the supervisor decides what each
/// means. With `checkpoints` (`herd run`): SIGUSR1 is a time limit's warning, and SIGTERM in
/// a Slurm job (`SLURM_JOB_ID` set) a preemption, each a `Signal::Checkpoint`, unless Slurm
/// says the job is done already when it comes (`scancel` sends SIGTERM too: see
/// `slurm::arrival`). A SIGTERM that is the time limit itself (no warning came) is one too,
/// and the job is requeued at once (if `checkpoints` says so): Slurm kills what is left after
/// its KillWait. Without `checkpoints`, every signal is an interrupt (and SIGUSR1 is not
/// watched). `hooks`: the notify hooks running or waiting are killed at each signal, also once
/// the run is over and herd only waits for them.
fn forward_signals(
    tx: mpsc::UnboundedSender<Signal>,
    hooks: Option<crate::notify::Stopper>,
    checkpoints: Option<Requeue>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let in_slurm = std::env::var_os("SLURM_JOB_ID").is_some_and(|v| !v.is_empty());
    let mut kinds = vec![(SignalKind::interrupt(), Signal::Interrupt)];
    kinds.push(match checkpoints.is_some() && in_slurm {
        true => (SignalKind::terminate(), Signal::Checkpoint(Preemption::Preempted)),
        false => (SignalKind::terminate(), Signal::Interrupt),
    });
    if checkpoints.is_some() {
        kinds.push((SignalKind::user_defined1(), Signal::Checkpoint(Preemption::TimeLimit)));
    }
    for (kind, meaning) in kinds {
        let (tx, hooks, requeue) = (tx.clone(), hooks.clone(), checkpoints.clone());
        match signal(kind) {
            Ok(mut stream) => {
                tokio::spawn(async move {
                    while stream.recv().await.is_some() {
                        if let Some(hooks) = &hooks {
                            hooks.stop("herd got a signal");
                        }
                        let meaning = match meaning {
                            // Once herd has requeued its job, Slurm ends this allocation with
                            // a SIGTERM of its own: no one stopped the run.
                            Signal::Checkpoint(_) if requeue.as_ref().is_some_and(Requeue::done) => {
                                tracing::debug!("a signal after herd requeued its Slurm job: ignored");
                                continue;
                            }
                            Signal::Checkpoint(why) => match arrival(why).await {
                                Arrival::Cancelled => Signal::Interrupt,
                                Arrival::Checkpoint(why) => Signal::Checkpoint(why),
                                Arrival::Ending(why) => {
                                    eprintln!("herd: {}", ending(why));
                                    // The ranks are told first; the requeue must not wait for
                                    // them, and only a run still going is requeued.
                                    let _ = tx.send(Signal::Checkpoint(why));
                                    if let Some(requeue) = &requeue {
                                        requeue.early().await;
                                    }
                                    continue;
                                }
                            },
                            other => other,
                        };
                        // The run may be over already (herd waits for hooks): nothing to stop.
                        let _ = tx.send(meaning);
                    }
                });
            }
            Err(e) => tracing::warn!("cannot watch signal {kind:?}: {e}"),
        }
    }
}

/// What herd says of a Slurm job that is ending as a signal comes (`Arrival::Ending`).
fn ending(why: Preemption) -> &'static str {
    match why {
        Preemption::Preempted => {
            "the Slurm job's preemption grace is over: Slurm has sent SIGTERM to every process of \
             the job and kills what is left after its KillWait (ranks that save on SIGTERM save now)"
        }
        _ => {
            "the Slurm job is at its time limit, with no warning early enough before it \
             (herd submit --warn-before): Slurm has sent SIGTERM to every process of the job and \
             kills what is left after its KillWait (ranks that save on SIGTERM save now)"
        }
    }
}

/// What the Slurm job herd runs in is as `why` arrives (see `slurm::arrival`). Slurm's answer
/// is awaited for a few seconds at most; without one, it is what `why` says.
async fn arrival(why: Preemption) -> Arrival {
    let Some(job_id) = transport::slurm::own_job_id() else { return Arrival::Checkpoint(why) };
    let taken = match why {
        Preemption::TimeLimit => "a time limit's warning",
        Preemption::Preempted => "a preemption",
        Preemption::OutOfTime => "the time limit",
    };
    match job_now(&job_id).await {
        Ok(Some(now)) => {
            let arrival = transport::slurm::arrival(why, &now);
            if arrival == Arrival::Cancelled {
                tracing::info!(
                    "Slurm job {job_id} is {}: cancelled, not preempted: the run stops as interrupted",
                    now.state
                );
            }
            arrival
        }
        Ok(None) => Arrival::Checkpoint(why),
        Err(e) => {
            tracing::warn!("{e}: taken as {taken}");
            Arrival::Checkpoint(why)
        }
    }
}

/// Job `job_id`'s state as Slurm says it within `STATE_QUERY`, or why it did not.
async fn job_now(job_id: &str) -> Result<Option<transport::slurm::JobNow>, String> {
    match tokio::time::timeout(STATE_QUERY, transport::slurm::scontrol_job_state(job_id)).await {
        Ok(Ok(now)) => Ok(now),
        Ok(Err(e)) => Err(format!("cannot ask Slurm for job {job_id}'s state: {e}")),
        Err(_) => Err(format!("Slurm did not say job {job_id}'s state within {} s", STATE_QUERY.as_secs())),
    }
}

/// `herd run`'s requeue of the Slurm job it runs in (`--requeue`), at most once: after the
/// run stopped for a time limit or a preemption ([`Requeue::now`]), or, when the job is
/// ending already (the time limit itself, a preemption's grace over), at once while the run
/// has not decided its end ([`Requeue::early`]): Slurm kills what is left, herd included,
/// after its KillWait. Never a job Slurm says was cancelled. Off, it does nothing.
#[derive(Clone)]
pub struct Requeue {
    on: bool,
    end: crate::supervisor::RunEnd,
    /// Held through a requeue, so that the run's end waits for one under way.
    busy: Arc<tokio::sync::Mutex<()>>,
    /// Set as a requeue starts (cleared if it fails): the signals it brings are Slurm's.
    requeued: Arc<AtomicBool>,
}

impl Requeue {
    pub fn new(on: bool, end: crate::supervisor::RunEnd) -> Requeue {
        let busy = Arc::new(tokio::sync::Mutex::new(()));
        Requeue { on, end, busy, requeued: Arc::new(AtomicBool::new(false)) }
    }

    /// Whether herd has requeued its job, or is requeuing it.
    pub fn done(&self) -> bool {
        self.requeued.load(Ordering::SeqCst)
    }

    /// The requeue of a job that is ending, if the run has not decided its end.
    pub async fn early(&self) {
        let _busy = self.busy.lock().await;
        if !self.end.decided() {
            self.requeue().await;
        }
    }

    /// The requeue of a run that stopped for a time limit or a preemption.
    pub async fn now(&self) {
        let _busy = self.busy.lock().await;
        self.requeue().await;
    }

    /// Waits for a requeue under way, if any: herd's exit would cut it short.
    pub async fn settle(&self) {
        let _busy = self.busy.lock().await;
    }

    /// `scontrol requeue` of the job, unless it was requeued already or Slurm says it was
    /// cancelled; what came of it on stderr. A requeue that failed may be tried again.
    async fn requeue(&self) {
        if !self.on || self.done() {
            return;
        }
        let Some(job_id) = transport::slurm::own_job_id() else {
            tracing::warn!("--requeue: not in a Slurm job (no SLURM_JOB_ID): nothing to requeue");
            return;
        };
        // A SIGTERM taken as a preemption because Slurm did not answer in time may have been
        // a cancel: asked again, a cancelled job stays cancelled.
        if let Ok(Some(now)) = job_now(&job_id).await {
            if transport::slurm::arrival(Preemption::Preempted, &now) == Arrival::Cancelled {
                return eprintln!("herd: Slurm job {job_id} was cancelled ({}): not requeued", now.state);
            }
        }
        self.requeued.store(true, Ordering::SeqCst);
        match transport::slurm::requeue(&job_id).await {
            Ok(transport::slurm::Requeued::Now) => {
                eprintln!("herd: requeued Slurm job {job_id}: it goes on in a new allocation")
            }
            Ok(transport::slurm::Requeued::Already) => {
                eprintln!(
                    "herd: Slurm job {job_id} is requeued already (by Slurm): it goes on in a new allocation"
                )
            }
            Err(e) => {
                self.requeued.store(false, Ordering::SeqCst);
                eprintln!("herd: could not requeue Slurm job {job_id}: {e}")
            }
        }
    }
}

/// How long Slurm may take to say a job's state as a signal comes, or before a requeue.
const STATE_QUERY: std::time::Duration = std::time::Duration::from_secs(5);

/// `text` on stdout, whole. A reader that went away (`herd plan | head -1`) is no error: what
/// it wanted it read, and the command's own exit code stands, as for `herd logs`.
fn out(text: &str) -> Result<(), Error> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::io("cannot write to stdout")(e)),
        _ => Ok(()),
    }
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
