//! The command line, as clap derive definitions. Nothing here acts.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Launch multi-node PyTorch training (torchrun, deepspeed or any command) over SSH from one
/// cluster TOML: consistent ranks, a free master port, env on every node, named logs, and no
/// process left behind.
#[derive(Debug, Parser)]
#[command(name = "herd", version, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// More diagnostics on stderr (-v debug, -vv trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Only errors on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start the job on every node and stream its output, prefixed with rank and host.
    ///
    /// Connects to all nodes in parallel, picks a free master port on the master node,
    /// exports the env and starts the launcher on every node. When one node fails, every
    /// other node is stopped. Ctrl-C stops all nodes gracefully; a second Ctrl-C kills them.
    Run(RunArgs),
    /// Show the resolved launch without contacting any node: ranks, env and exact commands.
    ///
    /// The output is the same, byte for byte, for the same config and environment, so it
    /// can be committed and diffed.
    Plan(PlanArgs),
    /// Check every node before a run: SSH, workdir, setup, launcher, torch and its versions,
    /// GPUs, hostname resolution, interface, master port reachability, /dev/shm, limits,
    /// disk, clock skew and leftovers.
    ///
    /// Exits 0 when nothing fails, 3 when something does.
    Doctor(DoctorArgs),
    /// Run a shell command on every node at once; each line comes prefixed with its node.
    ///
    /// The command runs in bash (sh where a node has none) in each node's login directory,
    /// without the job's env, under the same agent as a job: Ctrl-C (or herd going away)
    /// stops it everywhere.
    /// Exits with the highest exit status of any node; 255 when a node cannot be reached.
    Exec(ExecArgs),
    /// Print a past run's node logs, each line prefixed with its node as it was live; or draw
    /// where its time went (--timeline).
    ///
    /// The latest run of the config by default. Logs are printed attempt by attempt and node
    /// by node, exactly as each node wrote them. --timeline writes one HTML page to open in a
    /// browser, and prints its path.
    Logs(LogsArgs),
    /// Write a commented starter cluster file (every key, with its default) to edit.
    ///
    /// Refuses to overwrite an existing file unless --force is given.
    Init(InitArgs),
    /// Print a shell completion script, e.g. `herd completions bash > /etc/bash_completion.d/herd`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print herd's man page (roff), e.g. `herd man | man -l -`.
    Man {
        /// Instead, write herd.1 and a page per subcommand (herd-run.1, ...) into this directory.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
    /// Stop every process left on any node by earlier runs of this config.
    ///
    /// Processes are found by the HERD_MARKER in their environment, never by name, so other
    /// jobs are never touched. Refused while a run of this config is live. Inside a Slurm
    /// allocation (with --slurm, or [transport] kind = "slurm"), the config's job steps that
    /// are still there are cancelled first.
    Kill(KillArgs),
    /// List the config's nodes: active (with node rank), spares and quarantined, with why.
    ///
    /// A run quarantines a node it blames (lost, a bus error, a hardware error, the root cause
    /// of attempts in a row, a failed preflight) when a spare or restart.min_nodes lets it
    /// go on without it; later runs of the config skip it until it is released here. The
    /// config file is never rewritten.
    Nodes(NodesArgs),
    /// Print every rank's Python stack (py-spy dump) of a live run of this config, grouped by
    /// where the ranks are, from another terminal. Only reads: the run goes on.
    ///
    /// Needs py-spy on the nodes (the job's PATH or the nodes'); `herd doctor` checks it.
    Stacks(ConfigArg),
    /// Submit a run of this config to Slurm: an sbatch script that runs `herd run --slurm`
    /// inside the allocation it asks for, and prints the job id.
    ///
    /// The config is checked first, as for `herd plan` on an allocation of N nodes. herd, the
    /// config and the logs directory must be on a file system every node shares; `herd logs`
    /// then reads the run, and Slurm's own output is `<logs.dir>/slurm-<job id>.out`.
    Submit(SubmitArgs),
}

#[derive(Debug, Args)]
pub struct NodesArgs {
    #[command(flatten)]
    pub config: ConfigArg,

    /// Bring a quarantined node back (repeatable); later runs may use it again.
    #[arg(long, value_name = "HOST")]
    pub release: Vec<String>,

    /// The nodes of this Slurm allocation, as `herd run --slurm` uses them (as [transport]
    /// kind = "slurm" does). Outside an allocation only the quarantine is known, and
    /// --release works.
    #[arg(long)]
    pub slurm: bool,

    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// How many nodes to allocate (sbatch --nodes). Default: [job] nnodes, when it is set.
    #[arg(short = 'N', long, value_name = "N")]
    pub nnodes: Option<usize>,
    /// The partition (sbatch --partition).
    #[arg(short, long)]
    pub partition: Option<String>,
    /// The time limit, in Slurm's form: MINUTES, HH:MM:SS, D-HH (sbatch --time).
    #[arg(short, long)]
    pub time: Option<String>,
    /// The account to charge (sbatch --account).
    #[arg(short = 'A', long)]
    pub account: Option<String>,
    /// One more sbatch option, as one word (`--sbatch-arg=--exclusive`,
    /// `--sbatch-arg=--gres=gpu:8`); repeat it for more. Not one herd submit sets (the node
    /// count, the time limit, its warning, the requeue: give them with its own options).
    /// SBATCH_* variables work too, and override the script's lines.
    #[arg(long, value_name = "OPTION", allow_hyphen_values = true)]
    pub sbatch_arg: Vec<String>,
    /// How long before the time limit Slurm warns herd (SIGUSR1, `sbatch --signal`): every
    /// rank then gets `restart.checkpoint_signal` and `restart.checkpoint_grace` to exit.
    /// Longer than the grace and the teardown, shorter than --time; `0`: no warning.
    #[arg(long, value_name = "DURATION", default_value = "3m", value_parser = humantime::parse_duration)]
    pub warn_before: std::time::Duration,
    /// Do not requeue the job when it stops for the time limit or a preemption (by default
    /// `herd run --requeue`: it goes on in a new allocation, resuming through
    /// restart.resume_args).
    #[arg(long)]
    pub no_requeue: bool,
    /// The herd that runs in the allocation, on a file system every node shares. Default:
    /// this one.
    #[arg(long, value_name = "PATH")]
    pub herd: Option<std::path::PathBuf>,
    /// Print the script instead of submitting it.
    #[arg(long)]
    pub print: bool,
    /// Extra arguments for the training script, as for `herd run -- ARGS`.
    #[arg(last = true, value_name = "ARGS")]
    pub extra_args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct KillArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// The nodes and steps of this Slurm allocation, as `herd run --slurm` used them.
    #[arg(long)]
    pub slurm: bool,
}

#[derive(Debug, Args)]
pub struct ConfigArg {
    /// The cluster file.
    #[arg(short, long, value_name = "FILE", default_value = "cluster.toml")]
    pub config: PathBuf,
}

/// Which of the config's nodes a command uses. Ranks are recounted over the nodes left, in
/// the config's order.
#[derive(Debug, Clone, Default, Args)]
pub struct NodeSelection {
    /// Use only these nodes: a hostlist such as "gpu-[01-04],cpu9". Each must be one of the
    /// config's nodes; they keep the config's order, and node ranks are recounted over them.
    #[arg(long, value_name = "HOSTLIST")]
    pub nodes: Option<String>,

    /// Leave out these nodes: a hostlist such as "gpu-[03,07]". Each must be one of the
    /// config's nodes. Applied after --nodes.
    #[arg(long, value_name = "HOSTLIST")]
    pub exclude: Option<String>,

    /// Run inside this Slurm allocation (salloc, sbatch): on its nodes (SLURM_JOB_NODELIST)
    /// instead of the config's [[nodes]] or nodes_from, each node's agent a job step started
    /// with srun, no SSH. The same as [transport] kind = "slurm".
    #[arg(long)]
    pub slurm: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub config: ConfigArg,

    #[command(flatten)]
    pub selection: NodeSelection,

    /// Start without checking the nodes first (launcher, versions, interface, master port).
    #[arg(long)]
    pub no_preflight: bool,

    /// Only these ranks' lines on the terminal, e.g. `0` or `0,8-15` (`all`: every rank; the
    /// default is `[logs] console`, else all). The launchers' and herd's own lines always
    /// show, the log files keep everything, and a failing rank's last lines show anyway.
    #[arg(long, value_name = "LIST")]
    pub ranks: Option<String>,

    /// Show a line that many ranks print alike once, naming them (`[r0-511] text`), after
    /// waiting at most a second for the others: `auto` when the job has more than 8
    /// ranks. The log files, `--json` and events.jsonl keep every line of every rank.
    #[arg(long, value_name = "WHEN", value_enum, default_value_t)]
    pub collapse: crate::output::Collapse,

    /// Print events and job output as JSON lines on stdout (the objects of events.jsonl,
    /// plus one `output` event per line a node prints) instead of prefixed lines.
    #[arg(long)]
    pub json: bool,

    /// No live status board, only prefixed lines. The board is also off when stdout or
    /// stderr is not a terminal, with NO_COLOR or TERM=dumb set, and under CI.
    #[arg(long)]
    pub no_progress: bool,

    /// Serve the run's metrics to Prometheus at http://ADDR/metrics while it runs (ADDR:
    /// `HOST:PORT`, or `:PORT` on every IPv4 interface): attempts, failures and restarts by class,
    /// nodes by state, training time, stragglers, the last progress, herd's memory and
    /// descriptors. An address that cannot be listened on is a warning; the run goes on.
    #[arg(long, value_name = "ADDR", env = "HERD_METRICS")]
    pub metrics: Option<String>,

    /// In a Slurm batch job: when the run stops for the time limit's warning (SIGUSR1) or a
    /// preemption (SIGTERM), requeue the job (`scontrol requeue`) so that it goes on in a new
    /// allocation. Not when the run ended, failed, or was cancelled (`scancel`). `herd
    /// submit` passes it unless told `--no-requeue`.
    #[arg(long)]
    pub requeue: bool,

    /// Extra arguments for the training script, appended to job.args.
    #[arg(last = true, value_name = "ARGS")]
    pub extra_args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    #[command(flatten)]
    pub config: ConfigArg,

    #[command(flatten)]
    pub selection: NodeSelection,

    /// Print at the end, one block per distinct output, headed by the hostlist of the nodes
    /// that printed it and their exit status when not 0 (as `dshbak -c` does).
    #[arg(short, long)]
    pub gather: bool,

    /// The command, joined with spaces and run by the remote shell: quote pipes and
    /// redirections, e.g. `herd exec -- 'nvidia-smi -L | wc -l'`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    #[command(flatten)]
    pub config: ConfigArg,

    /// The run: its id, or the start of it (see --list). Default: the latest run.
    #[arg(value_name = "RUN")]
    pub run: Option<String>,

    /// List the runs of this config instead, oldest first.
    #[arg(long, conflicts_with_all = ["run", "node", "rank", "attempt", "grep"])]
    pub list: bool,

    /// Only this node: its node rank or its host name.
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,

    /// Only this global rank: its own log (every line it wrote, byte for byte), or, for runs
    /// without one, the log of the node that ran it.
    #[arg(long, value_name = "RANK", conflicts_with = "node")]
    pub rank: Option<u32>,

    /// Only this attempt (counted from 0). Default: every attempt.
    #[arg(long, value_name = "K")]
    pub attempt: Option<u32>,

    /// Only lines matching this regular expression.
    #[arg(long, value_name = "RE")]
    pub grep: Option<String>,

    /// The run and the runs before it in its Slurm job's lineage (a job requeued after a
    /// time limit or a preemption: each run's record names the one before), oldest first.
    #[arg(long, conflicts_with = "attempt")]
    pub lineage: bool,

    /// Draw where the run's time went, as one HTML page, in place of its logs.
    ///
    /// A row per node (launching, starting, training, stopping, backoff; spare, lost,
    /// quarantined) over the run's wall time, each fault and restart marked, and a table of
    /// the attempts. One HTML page with an inline SVG (no script, nothing fetched), written
    /// from the run's events.jsonl to timeline.html in the run's directory, or to --output;
    /// the path written is printed. Exit 1 when lines of a record cut short (a run killed
    /// while writing) were skipped: the page shows the rest.
    #[arg(long, conflicts_with_all = ["list", "node", "rank", "attempt", "grep", "lineage"])]
    pub timeline: bool,

    /// With --timeline: the file to write (`-`: stdout).
    #[arg(short, long, value_name = "PATH", requires = "timeline")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The file to write.
    #[arg(short, long, value_name = "FILE", default_value = "cluster.toml")]
    pub config: PathBuf,

    /// Overwrite the file if it exists.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub config: ConfigArg,

    #[command(flatten)]
    pub selection: NodeSelection,

    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Also measure the network between the nodes, with the job's own Python and torch (gloo
    /// with device = "cpu", NCCL on GPUs), and name the slow nodes. Runs once every check
    /// has passed; exit 3 when a node is slow.
    #[arg(long)]
    pub deep: bool,

    /// With --deep: a node whose best sending or receiving is below this fraction of the
    /// nodes' median (or of the fastest quarter's, when most are slow) is slow.
    #[arg(long, value_name = "FRACTION", default_value_t = crate::doctor::net::SLOW_BELOW, requires = "deep", value_parser = fraction)]
    pub slow_below: f64,
}

/// A number above 0 and at most 1.
fn fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a fraction above 0 and at most 1 (the default is {})",
            crate::doctor::net::SLOW_BELOW
        )),
    }
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub config: ConfigArg,

    #[command(flatten)]
    pub selection: NodeSelection,

    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,

    /// Extra arguments for the training script, as `herd run -- ARGS` would append them.
    #[arg(last = true, value_name = "ARGS")]
    pub extra_args: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_extra_args_after_double_dash() {
        let cli = Cli::parse_from(["herd", "run", "-c", "x.toml", "--", "--lr", "0.1"]);
        match cli.command {
            Command::Run(a) => {
                assert_eq!(a.config.config, PathBuf::from("x.toml"));
                assert_eq!(a.extra_args, ["--lr", "0.1"]);
            }
            _ => panic!("not run"),
        }
    }

    #[test]
    fn run_plan_doctor_and_exec_take_a_node_selection_and_kill_does_not() {
        let args = ["--nodes", "gpu-[01-02]", "--exclude", "gpu-02", "--slurm"];
        for cmd in ["run", "plan", "doctor", "exec"] {
            let tail: &[&str] = if cmd == "exec" { &["--", "true"] } else { &[] };
            let cli = Cli::parse_from(["herd", cmd].into_iter().chain(args).chain(tail.iter().copied()));
            let selection = match cli.command {
                Command::Run(a) => a.selection,
                Command::Plan(a) => a.selection,
                Command::Doctor(a) => a.selection,
                Command::Exec(a) => a.selection,
                _ => unreachable!(),
            };
            assert_eq!(selection.nodes.as_deref(), Some("gpu-[01-02]"), "{cmd}");
            assert_eq!(selection.exclude.as_deref(), Some("gpu-02"), "{cmd}");
            assert!(selection.slurm, "{cmd}");
        }
        assert!(Cli::try_parse_from(["herd", "kill", "--nodes", "a"]).is_err());
        assert!(Cli::try_parse_from(["herd", "logs", "--nodes", "a"]).is_err());
    }

    #[test]
    fn logs_timeline_takes_a_run_and_an_output_and_no_selection() {
        let cli = Cli::parse_from(["herd", "logs", "--timeline", "2026", "-o", "-"]);
        let Command::Logs(a) = cli.command else { panic!("not logs") };
        assert_eq!((a.timeline, a.run.as_deref(), a.output), (true, Some("2026"), Some(PathBuf::from("-"))));
        assert!(Cli::try_parse_from(["herd", "logs", "-o", "t.html"]).is_err(), "--output needs --timeline");
        for other in [&["--node", "1"][..], &["--grep", "x"], &["--list"], &["--attempt", "0"]] {
            let args = ["herd", "logs", "--timeline"].into_iter().chain(other.iter().copied());
            assert!(Cli::try_parse_from(args).is_err(), "{other:?}");
        }
    }
}
