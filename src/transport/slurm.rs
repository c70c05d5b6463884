//! The Slurm transport: inside an allocation, each node's agent (and each probe) is a job step
//! of one task on that node, started with `srun`. Slurm starts it, carries its stdio and ends
//! it; herd's agent, env block and protocol are the same as over SSH. What herd asks of
//! Slurm, and what it reads back (`sinfo`, `squeue`), is built and parsed here.

use std::process::Stdio;

use tokio::process::Command;

use super::TransportError;
use crate::plan::SlurmTarget;

/// The Slurm client commands herd runs, none of which may be missing from `path`.
pub const COMMANDS: [&str; 4] = ["srun", "squeue", "scancel", "sinfo"];

/// Those of [`COMMANDS`] that no directory of `path` (a `PATH` value) holds as an executable.
pub fn missing_commands(path: Option<&std::ffi::OsStr>) -> Vec<&'static str> {
    COMMANDS.into_iter().filter(|c| !on_path(c, path)).collect()
}

/// Whether a directory of `path` (a `PATH` value) holds `program` as an executable.
pub fn on_path(program: &str, path: Option<&std::ffi::OsStr>) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.is_some_and(|p| {
        std::env::split_paths(p).any(|d| {
            std::fs::metadata(d.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// What to do when a step cannot be started on a node, or Slurm has given up on it.
pub const FIX: &str =
    "see `scontrol show node NODE` and the node's slurmd log: a node that is down or drained \
     cannot run herd's steps; leave it out (--exclude), or run in an allocation without it";

/// The allocation's settings for its tasks, which srun reads from its environment and would
/// apply to herd's one-task steps: the whole of a node's launcher would run on one task's
/// CPUs (`--exact` follows from a CPU count per task), bound, or with one task's GPUs.
pub const ALLOCATION_TASK_VARS: [&str; 12] = [
    "SLURM_CPUS_PER_TASK",
    "SRUN_CPUS_PER_TASK",
    "SLURM_GPUS_PER_TASK",
    "SLURM_TRES_PER_TASK",
    "SLURM_CPU_BIND",
    "SLURM_EXACT",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_DISTRIBUTION",
    "SLURM_MEM_BIND",
    "SLURM_GPU_BIND",
];

/// What slurmstepd tells the one task of a step about its place in the step: never true of
/// the ranks herd starts under it (they would see rank 0 of a world of 1; Lightning and MPI
/// read these), so unset before the agent runs. The allocation's `SLURM_JOB_*` stay.
pub const STEP_TASK_VARS: &str = "SLURM_PROCID SLURM_LOCALID SLURM_NODEID SLURM_NTASKS SLURM_NPROCS \
     SLURM_NNODES SLURM_STEPID SLURM_STEP_ID SLURM_STEP_NODELIST SLURM_STEP_NUM_NODES SLURM_STEP_NUM_TASKS \
     SLURM_STEP_TASKS_PER_NODE SLURM_STEP_LAUNCHER_PORT SLURM_STEP_RESV_PORTS SLURM_TASK_PID \
     SLURM_TASKS_PER_NODE SLURM_CPU_BIND SLURM_CPU_BIND_LIST SLURM_CPU_BIND_TYPE SLURM_CPU_BIND_VERBOSE \
     SLURM_SRUN_COMM_HOST SLURM_SRUN_COMM_PORT SLURM_LAUNCH_NODE_IPADDR SLURM_DISTRIBUTION SLURM_GTIDS \
     SLURM_JOB_NAME SLURM_PRIO_PROCESS SLURM_UMASK SLURM_CPUS_PER_TASK SLURM_NTASKS_PER_NODE";

/// The shell line a step runs: the step's id kept as `HERD_SLURM_STEP` (JOB.STEP), the
/// step's task variables unset, then `shell`.
pub fn step_shell(shell: &str) -> String {
    format!("export HERD_SLURM_STEP=\"${{SLURM_JOB_ID:-}}.${{SLURM_STEP_ID:-}}\"; unset {STEP_TASK_VARS}; {shell}")
}

/// srun's arguments for one step on `target`'s node running `sh -c shell`: one task, its stdio
/// piped to herd unbuffered, named `<step name>-<host>-<pid>` (this herd's steps, see
/// [`own_step_name`]), overlapping the other steps on the node (the agent's, the probes').
/// The site's `srun_args` come after herd's defaults (`--export`, `--mpi`) so they can
/// change them; the config refuses those that would change what herd sets about the task.
/// Not `--quiet`: srun's own words (a step it cannot create yet, a node it lost) reach the
/// node's log.
pub fn srun_argv(target: &SlurmTarget, step_name: &str, shell: &str) -> Vec<String> {
    let mut argv: Vec<String> = [
        "--jobid",
        &target.job_id,
        "--nodes=1",
        "--ntasks=1",
        "--nodelist",
        &target.node,
        "--overlap",
        "--job-name",
        step_name,
        "--unbuffered",
        "--export=ALL",
        "--mpi=none",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    argv.extend(target.srun_args.iter().cloned());
    argv.extend(["--".into(), "sh".into(), "-c".into(), step_shell(shell)]);
    argv
}

/// The name of this herd process's steps (its host and pid after the config's step name):
/// a `herd stacks` beside a run never cancels the run's steps as it closes, nor the run its,
/// nor a herd on another node of the job one of the same pid.
pub fn own_step_name(target: &SlurmTarget) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim().split('.').next().unwrap_or_default();
    format!("{}-{host}-{}", target.step_name, std::process::id())
}

/// `srun` for `sh -c shell` on the target's node, stdin, stdout and stderr as given. In a
/// process group of its own: a Ctrl-C at the terminal is herd's to handle (srun would
/// otherwise take it as its own and kill the step without herd's teardown). Without the
/// allocation's per-task settings (see [`ALLOCATION_TASK_VARS`]).
pub fn srun(target: &SlurmTarget, shell: &str) -> Command {
    let mut command = Command::new("srun");
    command.args(srun_argv(target, &own_step_name(target), shell)).process_group(0);
    crate::limits::as_started(&mut command);
    for var in ALLOCATION_TASK_VARS {
        command.env_remove(var);
    }
    command
}

/// Run `sh -c shell` as a step on the node and collect its output. Dropped before it ends
/// (a caller's deadline), the srun is killed, and the step with it.
pub async fn output(target: &SlurmTarget, shell: &str) -> Result<std::process::Output, TransportError> {
    srun(target, shell)
        .kill_on_drop(true)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| TransportError::Slurm(format!("cannot start srun: {e}")))
}

/// The stdout of one of Slurm's query commands (`what`: how an error names the call), or
/// its error: it cannot be started, or slurmctld refused.
async fn query(program: &str, args: &[&str], what: &str) -> Result<String, TransportError> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| TransportError::Slurm(format!("cannot run {program}: {e}")))?;
    if !out.status.success() {
        return Err(TransportError::Slurm(format!(
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The Slurm state of each of `nodes`, from one `sinfo` call for them all: a fleet of a
/// thousand nodes asks slurmctld once, not a thousand times.
pub async fn states(nodes: &[&str]) -> Result<std::collections::HashMap<String, String>, TransportError> {
    let nodes = nodes.join(",");
    let out = query(
        "sinfo",
        &["--Node", "--noheader", "--format", "%N %T", "--nodes", &nodes],
        "sinfo --nodes ...",
    )
    .await?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, s)| (n.trim().to_string(), s.trim().to_string()))
        .collect())
}

/// Why Slurm will not run a step on `node`, from [`states`]: `None` when it will.
pub fn refusal(node: &str, states: &std::collections::HashMap<String, String>) -> Option<String> {
    match states.get(node) {
        Some(state) if unusable(state) => Some(format!("Slurm reports node {node} as {state}")),
        Some(_) => None,
        None => Some(format!("Slurm does not know node {node} (sinfo lists no such node)")),
    }
}

/// Whether Slurm still counts the node as usable: `Err` with its state when it is down,
/// drained, failing or not responding.
pub async fn check(target: &SlurmTarget) -> Result<(), TransportError> {
    match refusal(&target.node, &states(&[&target.node]).await?) {
        Some(why) => Err(TransportError::Slurm(why)),
        None => Ok(()),
    }
}

/// A node state (`MIXED`, `DOWN*`, `IDLE+DRAIN`, ...) in which Slurm will not run herd's steps
/// on the node, has lost it, or is to have it back: down, drained or draining, failing or not
/// responding. A draining node (the drain flag on a node still running jobs, ours) could still
/// run our steps, but an administrator asked for it: a run that can go on without it (a spare,
/// `min_nodes`) does, as it would at its start.
pub fn unusable(state: &str) -> bool {
    let state = state.to_ascii_uppercase();
    // A trailing `*`: not responding.
    state.ends_with('*')
        || flags(&state).any(|flag| {
            matches!(
                flag,
                "DOWN"
                    | "DRAIN"
                    | "DRAINED"
                    | "DRAINING"
                    | "FAIL"
                    | "FAILING"
                    | "NOT_RESPONDING"
                    | "POWERED_DOWN"
            )
        })
}

fn flags(state: &str) -> impl Iterator<Item = &str> {
    state.trim_end_matches('*').split('+')
}

/// The state of job `job_id` (`squeue --states all`: `RUNNING`, `CANCELLED`, `TIMEOUT`, ...),
/// `None` when slurmctld no longer knows the job; `Err` when it cannot be asked.
pub async fn job_state(job_id: &str) -> Result<Option<String>, TransportError> {
    let out = Command::new("squeue")
        .args(["--jobs", job_id, "--states", "all", "--noheader", "--format", "%T"])
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| TransportError::Slurm(format!("cannot run squeue: {e}")))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if stderr.contains("Invalid job id") {
            return Ok(None);
        }
        return Err(TransportError::Slurm(format!("squeue --jobs {job_id}: {}", stderr.trim())));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    Ok(stdout.lines().map(str::trim).find(|l| !l.is_empty()).map(str::to_string))
}

/// The Slurm job this herd runs in (`SLURM_JOB_ID`), if any.
pub fn own_job_id() -> Option<String> {
    std::env::var("SLURM_JOB_ID").ok().filter(|j| !j.is_empty())
}

/// How many times Slurm has requeued the job herd runs in (`SLURM_RESTART_COUNT`; 0 when it
/// has not, or outside Slurm).
pub fn restart_count() -> u32 {
    std::env::var("SLURM_RESTART_COUNT").ok().and_then(|c| c.trim().parse().ok()).unwrap_or(0)
}

/// Why the allocation `job_id` can run nothing any more, from its state (see [`job_state`]):
/// `None` while it holds its nodes (running, suspended, ...) or in a state herd does not know.
pub fn allocation_ended(job_id: &str, state: Option<&str>) -> Option<String> {
    let Some(state) = state else {
        return Some(format!("the Slurm allocation {job_id} ended: slurmctld no longer knows the job"));
    };
    let state = state.trim().to_ascii_uppercase();
    let why = match state.as_str() {
        "CANCELLED" => "cancelled (scancel, or an administrator)",
        "TIMEOUT" => "it reached its time limit",
        "DEADLINE" => "it reached its deadline",
        "PREEMPTED" => "another job preempted it",
        "NODE_FAIL" => "one of its nodes failed (an allocation made without --no-kill ends then)",
        "BOOT_FAIL" => "its nodes failed to boot",
        "OUT_OF_MEMORY" => "it ran out of memory",
        "COMPLETED" | "FAILED" => "the salloc or batch script that held it ended",
        "COMPLETING" => "it is ending (cancelled, out of time, or its salloc ended)",
        "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" => "it was requeued",
        "REVOKED" | "SPECIAL_EXIT" => "Slurm ended it",
        _ => return None,
    };
    Some(format!("the Slurm allocation {job_id} ended ({state}): {why}"))
}

/// Whether an allocation that ended as `state` ended for its time limit or a preemption: a
/// run that goes on in another allocation, not a failed one.
pub fn ended_by(state: Option<&str>) -> Option<crate::events::Preemption> {
    match state?.trim().to_ascii_uppercase().as_str() {
        "TIMEOUT" => Some(crate::events::Preemption::OutOfTime),
        "PREEMPTED" => Some(crate::events::Preemption::Preempted),
        _ => None,
    }
}

/// The step ids (`JOB.STEP`) in `squeue --steps --noheader --format "%i %j"` output whose name
/// is `name` or, with `prefix`, starts with `name-`.
pub fn steps_named(squeue: &str, name: &str, prefix: bool) -> Vec<String> {
    squeue
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, n)| {
            let n = n.trim();
            n == name || (prefix && n.strip_prefix(name).is_some_and(|rest| rest.starts_with('-')))
        })
        .map(|(id, _)| id.trim().to_string())
        .collect()
}

/// Cancel the steps of job `job_id` called `name` (or, with `prefix`, `name-*`): what is left
/// of herd's steps once their agents are gone (an `srun` that hangs on a lost node), or, for
/// `herd kill`, every step of the config. The step ids cancelled.
pub async fn cancel_steps(job_id: &str, name: &str, prefix: bool) -> Result<Vec<String>, TransportError> {
    let what = format!("squeue --steps --jobs {job_id}");
    let out =
        query("squeue", &["--steps", "--noheader", "--format", "%i %j", "--jobs", job_id], &what).await?;
    let steps = steps_named(&out, name, prefix);
    if !steps.is_empty() {
        let status = Command::new("scancel")
            .arg("--quiet")
            .args(&steps)
            .stdin(Stdio::null())
            .status()
            .await
            .map_err(|e| TransportError::Slurm(format!("cannot run scancel: {e}")))?;
        if !status.success() {
            return Err(TransportError::Slurm(format!("scancel {} failed ({status})", steps.join(" "))));
        }
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> SlurmTarget {
        SlurmTarget {
            node: "gpu-07".into(),
            job_id: "4242".into(),
            srun_args: vec!["--gpus-per-node=8".into()],
            step_name: "herd-00ff".into(),
            per_node_steps: true,
        }
    }

    #[test]
    fn one_task_on_the_named_node_of_this_job_then_the_sites_args_then_the_command() {
        let argv = srun_argv(&target(), "herd-00ff-77", "echo 'a b'");
        assert_eq!(
            argv[..argv.len() - 1].join(" "),
            "--jobid 4242 --nodes=1 --ntasks=1 --nodelist gpu-07 --overlap --job-name herd-00ff-77 \
             --unbuffered --export=ALL --mpi=none --gpus-per-node=8 -- sh -c"
        );
        assert_eq!(argv.last().unwrap(), &step_shell("echo 'a b'"), "the command is one argument");
        let name = own_step_name(&target());
        assert!(
            name.starts_with("herd-00ff-") && name.ends_with(&format!("-{}", std::process::id())),
            "{name}"
        );
    }

    #[test]
    fn a_step_keeps_its_id_and_drops_what_slurm_says_of_its_one_task() {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(step_shell(
                "echo \"$HERD_SLURM_STEP ${SLURM_PROCID-unset} ${SLURM_NTASKS-unset} $SLURM_JOB_NODELIST\"",
            ))
            .env("SLURM_JOB_ID", "42")
            .env("SLURM_STEP_ID", "7")
            .env("SLURM_PROCID", "0")
            .env("SLURM_NTASKS", "1")
            .env("SLURM_JOB_NODELIST", "n[1-3]")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "42.7 unset unset n[1-3]\n");
    }

    #[test]
    fn node_states() {
        let bad = ["DOWN", "DOWN*", "IDLE+DRAIN", "drained", "DRAIN", "ALLOCATED+FAIL", "IDLE*", "down"];
        // The drain flag on a node still running jobs (our allocation's) too: an administrator
        // wants it back, and a spare takes its place when there is one.
        let draining = ["draining", "MIXED+DRAIN", "ALLOCATED+DRAIN"];
        for bad in bad.into_iter().chain(draining).chain(["NOT_RESPONDING", "draining*", "FAIL"]) {
            assert!(unusable(bad), "{bad}");
        }
        for good in ["IDLE", "ALLOCATED", "MIXED", "ALLOCATED+COMPLETING"] {
            assert!(!unusable(good), "{good}");
        }
    }

    #[test]
    fn an_allocation_ends_in_the_states_that_hold_no_nodes() {
        let holding = ["RUNNING", "running", "SUSPENDED", "CONFIGURING", "RESIZING", "STOPPED", "SIGNALING"];
        for running in holding {
            assert_eq!(allocation_ended("42", Some(running)), None, "{running}");
        }
        assert_eq!(
            allocation_ended("42", Some("CANCELLED\n")).as_deref(),
            Some("the Slurm allocation 42 ended (CANCELLED): cancelled (scancel, or an administrator)")
        );
        assert!(allocation_ended("42", Some("TIMEOUT")).unwrap().ends_with("it reached its time limit"));
        use crate::events::Preemption::{OutOfTime, Preempted};
        assert_eq!(ended_by(Some("TIMEOUT\n")), Some(OutOfTime));
        assert_eq!(ended_by(Some("PREEMPTED")), Some(Preempted));
        for other in [None, Some("CANCELLED"), Some("COMPLETED"), Some("NODE_FAIL"), Some("RUNNING")] {
            assert_eq!(ended_by(other), None, "{other:?}");
        }
        for ended in ["COMPLETED", "COMPLETING", "FAILED", "NODE_FAIL", "PREEMPTED", "DEADLINE"] {
            let why = allocation_ended("7", Some(ended)).unwrap_or_else(|| panic!("{ended}"));
            assert!(why.starts_with(&format!("the Slurm allocation 7 ended ({ended}): ")), "{why}");
        }
        assert!(allocation_ended("7", None).unwrap().contains("no longer knows the job"));
    }

    #[test]
    fn steps_by_name_or_prefix() {
        let squeue = "42.0 herd-00ff-77\n42.1 herd-00ff-78\n42.2 herd-00ffx-1\n42.3 train\n42.4 herd-00ff\n";
        assert_eq!(steps_named(squeue, "herd-00ff-77", false), ["42.0"]);
        assert_eq!(steps_named(squeue, "herd-00ff", true), ["42.0", "42.1", "42.4"]);
        assert!(steps_named("", "herd-00ff", true).is_empty());
    }
}
