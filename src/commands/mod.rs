//! From parsed arguments to an exit code: one file per subcommand, and here what they share:
//! the dispatch, loading the config into a plan (`load_plan`), and what a command needs
//! before it contacts a node (the SSH key and Slurm's commands checked, herd's state
//! directory, the per-config lock), its async runtime. Its signals are `preempt`'s.

use std::path::Path;

use crate::cli::{Cli, Command, NodeSelection};
use crate::error::Error;
use crate::plan::{LaunchPlan, PlanInputs};
use crate::quarantine::{self, Quarantine};
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
