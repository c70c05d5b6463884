//! The Slurm transport: inside an allocation, each node's agent (and each probe) is a job step
//! of one task on that node, started with `srun`. Slurm starts it, carries its stdio and ends
//! it; herd's agent, env block and protocol are the same as over SSH. What herd asks of
//! Slurm, and what it reads back (`squeue`, `scontrol`), is built and parsed here.

use std::process::Stdio;

use tokio::process::Command;

use super::TransportError;
use crate::plan::SlurmTarget;

/// The Slurm client commands herd runs, none of which may be missing from `path`.
pub const COMMANDS: [&str; 4] = ["srun", "squeue", "scancel", "scontrol"];

/// Those of [`COMMANDS`] that no directory of `path` (a `PATH` value) holds as an executable.
pub fn missing_commands(path: Option<&std::ffi::OsStr>) -> Vec<&'static str> {
    use std::os::unix::fs::PermissionsExt;
    let dirs: Vec<std::path::PathBuf> = path.map(|p| std::env::split_paths(p).collect()).unwrap_or_default();
    let found = |name: &str| {
        dirs.iter().any(|d| {
            std::fs::metadata(d.join(name)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    };
    COMMANDS.into_iter().filter(|c| !found(c)).collect()
}

/// What to do when a step cannot be started on a node, or Slurm has given up on it.
pub const FIX: &str =
    "see `scontrol show node NODE` and the node's slurmd log: a node that is down or drained \
     cannot run herd's steps; leave it out (--exclude), or run in an allocation without it";

/// srun's arguments for one step on `target`'s node running `sh -c shell`: one task, its stdio
/// piped to herd unbuffered, named `<step name>-<pid>` (this herd's steps, see
/// [`own_step_name`]), overlapping the other steps on the node (the agent's, the probes').
/// The site's `srun_args` come after herd's defaults (`--export`, `--mpi`) so they can
/// change them; the config refuses those that would change what herd sets about the task.
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
        "--quiet",
        "--export=ALL",
        "--mpi=none",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    argv.extend(target.srun_args.iter().cloned());
    argv.extend(["--".into(), "sh".into(), "-c".into(), shell.into()]);
    argv
}

/// The name of this herd process's steps: a `herd stacks` beside a run never cancels the
/// run's steps as it closes, nor the run its.
pub fn own_step_name(target: &SlurmTarget) -> String {
    format!("{}-{}", target.step_name, std::process::id())
}

/// `srun` for `sh -c shell` on the target's node, stdin, stdout and stderr as given. In a
/// process group of its own: a Ctrl-C at the terminal is herd's to handle (srun would
/// otherwise take it as its own and kill the step without herd's teardown).
pub fn srun(target: &SlurmTarget, shell: &str) -> Command {
    let mut command = Command::new("srun");
    command.args(srun_argv(target, &own_step_name(target), shell)).process_group(0);
    command
}

/// Run `sh -c shell` as a step on the node and collect its output.
pub async fn output(target: &SlurmTarget, shell: &str) -> Result<std::process::Output, TransportError> {
    srun(target, shell)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| TransportError::Spawn(format!("srun: {e}")))
}

/// Whether Slurm still counts the node as usable: `Err` with its state when it is down,
/// drained, failing or not responding (the state `scontrol show node` gives).
pub async fn check(target: &SlurmTarget) -> Result<(), TransportError> {
    let out = Command::new("scontrol")
        .args(["show", "node", "--oneliner", &target.node])
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| TransportError::Connect(format!("scontrol: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    match node_state(&text) {
        Some(state) if unusable(state) => {
            Err(TransportError::Connect(format!("Slurm reports node {} as {state}", target.node)))
        }
        Some(_) => Ok(()),
        None => Err(TransportError::Connect(format!(
            "scontrol show node {} said nothing of its state: {}",
            target.node,
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
    }
}

/// The `State=` of one `scontrol show node --oneliner` line, e.g. `IDLE+DRAIN`.
pub fn node_state(scontrol: &str) -> Option<&str> {
    scontrol.split_whitespace().find_map(|w| w.strip_prefix("State="))
}

/// A node state (`MIXED`, `DOWN*`, `IDLE+DRAIN`, ...) in which Slurm will not run herd's steps
/// on the node, or has lost it.
pub fn unusable(state: &str) -> bool {
    let state = state.to_ascii_uppercase();
    // A trailing `*`: not responding.
    state.ends_with('*')
        || state.trim_end_matches('*').split('+').any(|flag| {
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
    let out = Command::new("squeue")
        .args(["--steps", "--noheader", "--format", "%i %j", "--jobs", job_id])
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| TransportError::Spawn(format!("squeue: {e}")))?;
    if !out.status.success() {
        return Err(TransportError::Spawn(format!(
            "squeue --steps --jobs {job_id}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let steps = steps_named(&String::from_utf8_lossy(&out.stdout), name, prefix);
    if !steps.is_empty() {
        let status = Command::new("scancel")
            .arg("--quiet")
            .args(&steps)
            .stdin(Stdio::null())
            .status()
            .await
            .map_err(|e| TransportError::Spawn(format!("scancel: {e}")))?;
        if !status.success() {
            return Err(TransportError::Spawn(format!("scancel {} failed ({status})", steps.join(" "))));
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
        }
    }

    #[test]
    fn one_task_on_the_named_node_of_this_job_then_the_sites_args_then_the_command() {
        let argv = srun_argv(&target(), "herd-00ff-77", "echo 'a b'");
        assert_eq!(
            argv.join(" "),
            "--jobid 4242 --nodes=1 --ntasks=1 --nodelist gpu-07 --overlap --job-name herd-00ff-77 \
             --unbuffered --quiet --export=ALL --mpi=none --gpus-per-node=8 -- sh -c echo 'a b'"
        );
        assert_eq!(argv.last().unwrap(), "echo 'a b'", "the command is one argument");
        assert_eq!(own_step_name(&target()), format!("herd-00ff-{}", std::process::id()));
    }

    #[test]
    fn node_states() {
        let line = "NodeName=n2 Arch=x86_64 CoresPerSocket=2 State=IDLE+DRAIN ThreadsPerCore=1";
        assert_eq!(node_state(line), Some("IDLE+DRAIN"));
        assert_eq!(node_state("Node n9 not found"), None);
        for bad in ["DOWN", "DOWN*", "IDLE+DRAIN", "MIXED+DRAIN", "ALLOCATED+FAIL", "IDLE*", "down"] {
            assert!(unusable(bad), "{bad}");
        }
        for good in ["IDLE", "ALLOCATED", "MIXED", "ALLOCATED+COMPLETING"] {
            assert!(!unusable(good), "{good}");
        }
    }

    #[test]
    fn steps_by_name_or_prefix() {
        let squeue = "42.0 herd-00ff-77\n42.1 herd-00ff-78\n42.2 herd-00ffx-1\n42.3 train\n42.4 herd-00ff\n";
        assert_eq!(steps_named(squeue, "herd-00ff-77", false), ["42.0"]);
        assert_eq!(steps_named(squeue, "herd-00ff", true), ["42.0", "42.1", "42.4"]);
        assert!(steps_named("", "herd-00ff", true).is_empty());
    }
}
