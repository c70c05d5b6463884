//! `herd submit`: the config checked as `herd run --slurm` will check it in the allocation
//! asked for, then a batch script that runs it handed to sbatch (or printed).

use std::path::{Path, PathBuf};

use super::plan_in_allocation;
use crate::cli::SubmitArgs;
use crate::error::{exit, Error};
use crate::plan::LaunchPlan;
use crate::{config, transport};

pub(super) fn submit_command(args: SubmitArgs) -> Result<u8, Error> {
    let path = &args.config.config;
    check_sbatch_values(&args)?;
    // The config, checked as `herd run --slurm` will check it in an allocation of N nodes;
    // without -N, N is the file's [job] nnodes (read from a check on the most nodes there
    // can be).
    let plan_on = |n: usize| plan_in_allocation(path, n, &args.extra_args);
    let nodes = node_count(&args, plan_on)?;
    let plan = plan_on(nodes)?;
    let herd = herd_executable(args.herd.as_deref())?;
    let config_file =
        std::fs::canonicalize(path).map_err(Error::io(format!("cannot resolve {}", path.display())))?;
    let cwd = std::env::current_dir().map_err(Error::io("cannot read the current directory"))?;
    let logs_dir = cwd.join(&plan.logs_dir);
    for (what, p) in [("the directory herd submit runs in", &cwd), ("logs.dir", &logs_dir)] {
        if let Some(why) = crate::submit::bad_path(p) {
            return Err(Error::Usage(format!("{what} {}: not a path for sbatch: {why}", p.display())));
        }
    }
    let warning = warning_secs(&args)?;
    if let Some(short) = warning.and_then(|secs| short_warning(secs, &plan)) {
        tracing::warn!("{short}");
    }
    for var in OVERRIDING_VARS.iter().filter(|v| std::env::var_os(v).is_some()) {
        tracing::warn!(
            "{var} is set: sbatch lets it override the script's own line, and what herd submit checked \
             (the time limit, its warning, the requeue) may not hold; unset it"
        );
    }
    let script = crate::submit::script(&crate::submit::Submission {
        name: crate::submit::job_name(&config_file),
        nodes,
        partition: args.partition.as_deref(),
        time: args.time.as_deref(),
        account: args.account.as_deref(),
        herd: &herd,
        config: &config_file,
        workdir: &cwd,
        logs_dir: &logs_dir,
        sbatch_args: &args.sbatch_arg,
        extra_args: &args.extra_args,
        warning,
        requeue: !args.no_requeue,
    });
    if !args.print && !transport::slurm::on_path("sbatch", std::env::var_os("PATH").as_deref()) {
        return Err(Error::Usage(
            "herd submit needs Slurm's sbatch on PATH: run it where Slurm's client commands are".into(),
        ));
    }
    // Slurm writes its output there from the first node: it must exist first, also for a
    // printed script handed to sbatch by hand.
    std::fs::create_dir_all(&logs_dir).map_err(Error::io(format!("cannot create {}", logs_dir.display())))?;
    if args.print {
        super::out(&script)?;
        return Ok(exit::OK);
    }
    let id = crate::submit::sbatch(&script).map_err(Error::Slurm)?;
    super::out(&submitted(&id, nodes, &config_file, &logs_dir, path))?;
    Ok(exit::OK)
}

/// The values given for sbatch's own options, refused before anything else is read: each must
/// be a value sbatch reads as one, and `--sbatch-arg` must not be one herd sets itself.
fn check_sbatch_values(args: &SubmitArgs) -> Result<(), Error> {
    let values = [("--partition", &args.partition), ("--time", &args.time), ("--account", &args.account)];
    let values = values.into_iter().filter_map(|(f, v)| Some((f, v.as_deref()?)));
    let more = args.sbatch_arg.iter().map(|a| ("--sbatch-arg", a.as_str()));
    for (flag, value) in values.chain(more) {
        if let Some(why) = crate::submit::bad_value(value) {
            return Err(Error::Usage(format!("{flag} {value:?}: not a value for sbatch: {why}")));
        }
    }
    for arg in &args.sbatch_arg {
        if let Some(why) = crate::submit::refused_sbatch_arg(arg) {
            return Err(Error::Usage(format!("--sbatch-arg {arg:?}: {why}")));
        }
    }
    Ok(())
}

/// `--warn-before` in whole seconds (`None` for 0: no warning), refused when sbatch cannot
/// take it (under a second, which it would drop without a word, or past its bound) or it is
/// not shorter than `--time`: the warning would come before the job starts.
fn warning_secs(args: &SubmitArgs) -> Result<Option<u64>, Error> {
    let secs = args.warn_before.as_secs();
    if args.warn_before.is_zero() {
        return Ok(None);
    }
    if secs == 0 {
        return Err(Error::Usage(format!(
            "--warn-before {}: sbatch --signal counts whole seconds; give 1s or more, or 0 for no warning",
            humantime::format_duration(args.warn_before)
        )));
    }
    let shown = humantime::format_duration(std::time::Duration::from_secs(secs));
    if secs > crate::submit::MAX_WARNING_SECS {
        return Err(Error::Usage(format!(
            "--warn-before {shown}: sbatch --signal takes at most {} s",
            crate::submit::MAX_WARNING_SECS
        )));
    }
    if let Some(time) = &args.time {
        match crate::submit::time_limit_secs(time) {
            Some(limit) if secs >= limit => {
                return Err(Error::Usage(format!(
                    "--warn-before {shown} is not shorter than --time {time} ({}): the warning would \
                     come before the job starts; give a shorter --warn-before, or 0 for none",
                    humantime::format_duration(std::time::Duration::from_secs(limit))
                )))
            }
            _ => {}
        }
    }
    Ok(Some(secs))
}

/// sbatch's input variables that override a line herd submit writes and relies on.
const OVERRIDING_VARS: [&str; 6] = [
    "SBATCH_TIMELIMIT",
    "SBATCH_SIGNAL",
    "SBATCH_REQUEUE",
    "SBATCH_NO_REQUEUE",
    "SBATCH_OPEN_MODE",
    "SBATCH_NO_KILL",
];

/// What is wrong with a warning `secs` before the time limit, if it is shorter than what
/// herd may take after it: the ranks' `restart.checkpoint_grace`, then the teardown's
/// `restart.grace_period`. Slurm ends the job at the limit, whatever is still saving.
fn short_warning(secs: u64, plan: &LaunchPlan) -> Option<String> {
    let needs = plan.restart.checkpoint_grace.as_secs() + plan.timing.grace_secs;
    (secs < needs).then(|| {
        format!(
            "--warn-before {secs} s is shorter than restart.checkpoint_grace ({} s) and restart.grace_period \
             ({} s) together: ranks still saving at the time limit are killed; give --warn-before {} s or more \
             (Slurm may send the warning up to 30 s early, never late)",
            plan.restart.checkpoint_grace.as_secs(),
            plan.timing.grace_secs,
            needs
        )
    })
}

/// How many nodes to allocate: `-N`, or else what the config's plan in the largest allocation
/// makes active.
fn node_count(
    args: &SubmitArgs,
    plan_on: impl Fn(usize) -> Result<LaunchPlan, Error>,
) -> Result<usize, Error> {
    Ok(match args.nnodes {
        Some(0) => return Err(Error::Usage("-N 0: allocate at least one node".into())),
        Some(n) => n,
        None => match plan_on(config::MAX_NODES)?.roster.active.len() {
            n if n < config::MAX_NODES => n,
            _ => {
                return Err(Error::Usage(format!(
                    "{}: how many nodes? Give -N, or set [job] nnodes",
                    args.config.config.display()
                )))
            }
        },
    })
}

/// The herd the batch script runs: `--herd`, or this one (refused when it was replaced on disk
/// since it started: its path no longer names it).
fn herd_executable(given: Option<&Path>) -> Result<PathBuf, Error> {
    let herd = match given {
        Some(p) => std::fs::canonicalize(p).map_err(Error::io(format!("--herd {}", p.display())))?,
        None => std::env::current_exe().map_err(Error::io("cannot find herd's own executable"))?,
    };
    if herd.to_string_lossy().ends_with(" (deleted)") {
        return Err(Error::Usage(format!(
            "{}: this herd was replaced on disk since it started: give --herd PATH",
            herd.display()
        )));
    }
    Ok(herd)
}

/// What was submitted, and where to follow it.
fn submitted(id: &str, nodes: usize, config_file: &Path, logs_dir: &Path, path: &Path) -> String {
    let (logs, config) = (logs_dir.display(), path.display());
    format!(
        "submitted job {id}: herd run --slurm -c {} on {nodes} node(s)\n\
         \x20 Slurm's output: {logs}/slurm-{id}.out\n\
         \x20 follow it:      tail -f {logs}/slurm-{id}.out   (once it runs: squeue -j {id})\n\
         \x20 read it back:   herd logs -c {config}\n",
        config_file.display()
    )
}
