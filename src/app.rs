//! From parsed arguments to an exit code: load the config, build the plan, and either print
//! it or hand it to the supervisor with a reporter attached.

use std::path::Path;

use tokio::sync::mpsc;

use crate::cli::{
    Cli, Command, DoctorArgs, ExecArgs, InitArgs, LogsArgs, NodeSelection, NodesArgs, PlanArgs, RunArgs,
    SubmitArgs,
};
use crate::error::{exit, Error};
use crate::events::{Event, RunStatus};
use crate::output::{self, RunFiles, Sinks};
use crate::plan::{self, LaunchPlan, PlanInputs};
use crate::quarantine::{self, Quarantine};
use crate::{config, doctor, logs, state, supervisor, transport};

pub fn run(cli: Cli) -> Result<u8, Error> {
    match cli.command {
        Command::Plan(args) => plan_command(args),
        Command::Run(args) => run_command(args),
        Command::Exec(args) => exec_command(args),
        Command::Logs(args) => logs_command(args),
        Command::Kill(args) => kill_command(&args.config.config, args.slurm),
        Command::Init(args) => init_command(args),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "herd", &mut std::io::stdout());
            Ok(exit::OK)
        }
        Command::Man { out_dir } => man_command(out_dir.as_deref()),
        Command::Doctor(args) => doctor_command(args),
        Command::Nodes(args) => nodes_command(args),
        Command::Stacks(args) => stacks_command(&args.config),
        Command::Submit(args) => submit_command(args),
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
    let mut plan = plan::build(&config, &inputs);
    if active == Active::Run {
        let kept_out = Quarantine::load(&quarantine::path(&plan.logs_dir, &plan.config_key))?;
        if !kept_out.nodes.is_empty() {
            plan = plan.with_roster(plan::initial_roster(&config, &kept_out.reasons())?);
        }
    }
    for name in &plan.missing_forwarded {
        tracing::warn!("forward_env names {name}, which is not set here: it will not be exported");
    }
    Ok(plan)
}

fn plan_command(args: PlanArgs) -> Result<u8, Error> {
    let plan = load_plan(&args.config.config, &args.selection, &args.extra_args, Active::Run)?;
    let text = if args.json { output::plan_view::json(&plan) } else { output::plan_view::text(&plan) };
    print!("{text}");
    Ok(exit::OK)
}

fn run_command(args: RunArgs) -> Result<u8, Error> {
    let mut plan = load_plan(&args.config.config, &args.selection, &args.extra_args, Active::Run)?;
    if let Some(list) = &args.ranks {
        plan.console = config::RankList::parse(list).map_err(|e| Error::Usage(format!("--ranks: {e}")))?;
    }
    let run_id = new_run_id();
    let mode = output::mode::Surroundings::detect(args.json, args.no_progress);

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
    let cwd = std::env::current_dir().map_err(Error::io("cannot read the current directory"))?;
    output::record::write_start(&run_dir, &plan, &args.config.config, &cwd)
        .map_err(Error::io(format!("cannot write the run's record in {}", run_dir.display())))?;
    let started = std::time::SystemTime::now();
    let console = plan.console.clone();
    let mut notifier = plan.notify.clone().map(|n| {
        let config = &args.config.config;
        let run = crate::notify::RunInfo {
            run_id: run_id.clone(),
            config: std::fs::canonicalize(config).unwrap_or_else(|_| cwd.join(config)),
            run_dir: cwd.join(&run_dir),
        };
        crate::notify::Notifier::new(n, run)
    });
    let hooks = notifier.as_ref().map(crate::notify::Notifier::stopper);
    let gate = notifier.as_mut().and_then(crate::notify::Notifier::gate);

    let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
    // Ctrl-C, SIGTERM and a closed stdout all stop the run the same way.
    let (interrupt_tx, interrupts) = mpsc::unbounded_channel();
    let on_stdout_closed = Some(interrupt_tx.clone());
    let reporter = std::thread::spawn(move || {
        let sinks = Sinks {
            stdout: Box::new(std::io::stdout()),
            stderr: Box::new(std::io::stderr()),
            mode,
            on_stdout_closed,
            console,
            notify: notifier,
        };
        output::report(files, events_rx, sinks)
    });

    let outcome = runtime.block_on(async {
        forward_signals(interrupt_tx, hooks);
        let options = supervisor::RunOptions { preflight: !args.no_preflight };
        supervisor::run(&plan, &run_id, options, events_tx, interrupts).await
    });
    // The record is complete before the run_finished hook starts (it may read summary.json).
    write_summary(&run_dir, &run_id, &outcome, started);
    drop(gate);
    // The reporter has already warned about any file it could not write.
    let report = reporter.join().expect("reporter thread panicked");
    if let Err(supervisor::RunError::Preflight(nodes)) = &outcome {
        eprint!("{}", output::doctor_view::text(nodes, true));
    }
    // Stopped before any attempt (a failed preflight, no port): the record says why.
    let outcome = outcome?;

    let closing = output::summary::closing(outcome.status, &outcome.attempts, &run_dir);
    if !closing.is_empty() {
        eprint!("herd: {closing}");
    }
    Ok(match outcome.status {
        RunStatus::Succeeded => exit::OK,
        RunStatus::Interrupted if report.stdout_closed => exit::STDOUT_CLOSED,
        RunStatus::Interrupted => exit::INTERRUPTED,
        RunStatus::Failed => exit::JOB_FAILED,
    })
}

fn exec_command(args: ExecArgs) -> Result<u8, Error> {
    let plan = load_plan(&args.config.config, &args.selection, &[], Active::All)?;
    let command = args.command.join(" ");
    let exec_id = new_run_id();
    ready_to_connect(&plan)?;
    let runtime = runtime()?;
    let hosts: Vec<String> = plan.nodes.iter().map(|n| n.host.clone()).collect();
    let color = output::mode::Surroundings::detect(false, true).color();
    let prefixes = output::prefix::prefixes(&hosts, color);

    let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
    let gather = args.gather;
    let printer = std::thread::spawn(move || {
        output::exec_view::collect(events_rx, &mut std::io::stdout(), &prefixes, gather)
    });
    let outcome = runtime.block_on(async {
        let (interrupt_tx, interrupts) = mpsc::unbounded_channel();
        forward_signals(interrupt_tx, None);
        let commands = vec![command; plan.nodes.len()];
        supervisor::exec::exec(&plan, &exec_id, &commands, events_tx, interrupts).await
    });
    let outputs = printer.join().expect("exec printer panicked");
    let ends = outcome.ends;
    if gather {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&output::exec_view::gathered(&hosts, &outputs, &ends));
        let _ = out.flush();
    }
    eprint!("{}", output::exec_view::failures(&hosts, &ends));
    if outcome.interrupted {
        eprintln!("herd: interrupted; the command was stopped on every node");
        return Ok(exit::INTERRUPTED);
    }
    let worst = ends.iter().map(|e| e.status()).max().unwrap_or(0);
    Ok(u8::try_from(worst).unwrap_or(u8::MAX))
}

fn logs_command(args: LogsArgs) -> Result<u8, Error> {
    use std::io::Write;
    // The config names the logs directory and identifies its runs; the run says its nodes. A
    // config that cannot be planned here is read as `--slurm` would read it in the largest
    // allocation: a config for Slurm only (no nodes of its own, or kind = "slurm") outside
    // its allocation (or one whose nodes are wrong: the logs are still there to read). If
    // that fails too, the first error is the one shown.
    let path = &args.config.config;
    let plan = load_plan(path, &NodeSelection::default(), &[], Active::All)
        .or_else(|e| plan_in_allocation(path, config::MAX_NODES, &[]).map_err(|_| e))?;
    let dir = &plan.logs_dir;
    let runs = logs::list_runs(dir, &plan.config_key)
        .map_err(Error::io(format!("cannot read the log directory {}", dir.display())))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let printed = if args.list {
        runs.iter()
            .try_for_each(|r| writeln!(out, "{}  {} attempt(s)  {}", r.id, r.attempts.len(), r.dir.display()))
    } else {
        let usage = |e: logs::LookupError| Error::Usage(format!("{e} (under {})", dir.display()));
        let run = logs::pick_run(&runs, args.run.as_deref()).map_err(usage)?;
        let usage = |e: logs::LookupError| Error::Usage(e.to_string());
        let mut selection = logs::Selection::default();
        if let Some(node) = &args.node {
            logs::pick_node(run, node, &mut selection).map_err(usage)?;
        }
        if let Some(rank) = args.rank {
            logs::pick_rank(run, rank, &mut selection).map_err(usage)?;
        }
        if let Some(attempt) = args.attempt {
            if !run.attempts.contains(&attempt) {
                return Err(Error::Usage(format!("run {} has no attempt {attempt}", run.id)));
            }
            selection.attempts.push(attempt);
        }
        if let Some(re) = &args.grep {
            let re = regex::bytes::Regex::new(re).map_err(|e| Error::Usage(format!("--grep: {e}")))?;
            selection.grep = Some(re);
        }
        // Each attempt's own nodes and ranks: the world may have changed between attempts.
        let attempts = logs::per_attempt(run, &selection).map_err(usage)?;
        let color = output::mode::Surroundings::detect(false, true).color();
        logs::print(run, &selection, &attempts, color, &mut out)
    };
    match printed.and_then(|_| out.flush()) {
        // `herd logs | head` is not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(exit::OK),
        Err(e) => Err(Error::io("cannot print the logs")(e)),
        Ok(()) => Ok(exit::OK),
    }
}

fn man_command(out_dir: Option<&Path>) -> Result<u8, Error> {
    let cmd = <Cli as clap::CommandFactory>::command();
    match out_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .and_then(|_| clap_mangen::generate_to(cmd, dir))
                .map_err(Error::io(format!("cannot write man pages to {}", dir.display())))?;
            eprintln!("herd: wrote herd.1 and one page per subcommand to {}", dir.display());
        }
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut out).map_err(Error::io("cannot render the man page"))?;
            use std::io::Write;
            std::io::stdout().write_all(&out).map_err(Error::io("cannot print the man page"))?;
        }
    }
    Ok(exit::OK)
}

/// The starter `herd init` writes: the reference example, which a test keeps valid.
const STARTER: &str = include_str!("../cluster.example.toml");

fn init_command(args: InitArgs) -> Result<u8, Error> {
    use std::io::Write;
    let path = &args.config;
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if args.force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let mut file = match options.open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(Error::Usage(format!(
                "{} already exists; not overwriting it (--force does)",
                path.display()
            )));
        }
        other => other.map_err(Error::io(format!("cannot create {}", path.display())))?,
    };
    file.write_all(STARTER.as_bytes()).map_err(Error::io(format!("cannot write {}", path.display())))?;
    eprintln!(
        "herd: wrote {}: edit [[nodes]] and [job], then `herd plan -c {0}` shows what will run where",
        path.display()
    );
    Ok(exit::OK)
}

fn nodes_command(args: NodesArgs) -> Result<u8, Error> {
    let config = &args.config.config;
    let selection = NodeSelection { slurm: args.slurm, ..NodeSelection::default() };
    // A config for Slurm outside its allocation has no nodes here, but its quarantine file is
    // where it always is: it can be read, and nodes released.
    let (plan, outside) = match load_plan(config, &selection, &[], Active::All) {
        Ok(plan) => (plan, false),
        Err(e) if outside_allocation(&e) => {
            (plan_in_allocation(config, config::MAX_NODES, &[]).map_err(|_| e)?, true)
        }
        Err(e) => return Err(e),
    };
    let path = quarantine::path(&plan.logs_dir, &plan.config_key);
    let mut kept_out = Quarantine::load(&path)?;
    if !args.release.is_empty() {
        for host in &args.release {
            if !kept_out.release(host) {
                let listed: Vec<&str> = kept_out.nodes.iter().map(|e| e.host.as_str()).collect();
                let which = if listed.is_empty() {
                    "none is".to_string()
                } else {
                    format!("only {} are", listed.join(", "))
                };
                return Err(Error::Usage(format!("--release {host}: {host} is not quarantined ({which})")));
            }
        }
        kept_out.save(&path)?;
        for host in &args.release {
            eprintln!("herd: released {host}: the next run of this config may use it");
        }
    }
    // What the next run would do; with too few nodes left, only why.
    let plan = match load_plan(config, &selection, &[], Active::Run) {
        Ok(plan) => Some(plan),
        Err(_) if outside => None,
        Err(Error::TooFewNodes(e)) => {
            eprintln!("herd: the next run cannot start: {e}");
            None
        }
        Err(e) => return Err(e),
    };
    let next = match &plan {
        Some(plan) => output::plan_view::NextRun::Plan(plan),
        None if outside => output::plan_view::NextRun::OutsideAllocation,
        None => output::plan_view::NextRun::CannotStart,
    };
    let text = if args.json {
        output::plan_view::nodes_json(next, &kept_out)
    } else {
        output::plan_view::nodes_text(next, &kept_out)
    };
    print!("{text}");
    Ok(exit::OK)
}

/// Whether `e` says that the config's nodes are a Slurm allocation's, and herd is in none.
fn outside_allocation(e: &Error) -> bool {
    matches!(e, Error::Config(c) if c.message().contains(config::OUTSIDE_ALLOCATION))
}

fn stacks_command(config: &Path) -> Result<u8, Error> {
    // Every node of the config: a live run may have promoted any spare.
    let plan = load_plan(config, &NodeSelection::default(), &[], Active::All)?;
    ready_to_connect(&plan)?;
    let runtime = runtime()?;
    let hosts: Vec<String> = plan.nodes.iter().map(|n| n.host.clone()).collect();
    let prefixes = output::prefix::prefixes(&hosts, false);
    let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
    let collector = std::thread::spawn(move || {
        output::exec_view::collect(events_rx, &mut std::io::sink(), &prefixes, true)
    });
    let commands: Vec<String> =
        plan.nodes.iter().map(|n| crate::remote::stacks_command(&plan.config_key, &n.host)).collect();
    let outcome = runtime.block_on(async {
        let (interrupt_tx, interrupts) = mpsc::unbounded_channel();
        forward_signals(interrupt_tx, None);
        supervisor::exec::exec(&plan, &new_run_id(), &commands, events_tx, interrupts).await
    });
    let outputs = collector.join().expect("stacks collector panicked");
    eprint!("{}", output::exec_view::failures(&hosts, &outcome.ends));
    let mut stacks = Vec::new();
    for (node_rank, out) in outputs.iter().enumerate() {
        let mut reader = crate::remote::StackReader::default();
        for line in String::from_utf8_lossy(out).lines() {
            stacks.extend(reader.feed(&crate::remote::parse_agent_line(line)).map(|s| (node_rank, s)));
        }
    }
    if stacks.is_empty() {
        eprintln!("herd: no rank of a run of {} is running on any node", plan.config_path.display());
        return Ok(exit::JOB_FAILED);
    }
    stacks.sort_by_key(|(_, s)| s.rank);
    print!("{}", output::summary::stacks_text(&stacks, &hosts));
    let all: Vec<crate::stacks::RankStack> = stacks.into_iter().map(|(_, s)| s).collect();
    println!("{}", crate::stacks::summarize(&all, &plan.workdir).words());
    Ok(exit::OK)
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

fn submit_command(args: SubmitArgs) -> Result<u8, Error> {
    let path = &args.config.config;
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
    // The config, checked as `herd run --slurm` will check it in an allocation of N nodes;
    // without -N, N is the file's [job] nnodes (read from a check on the most nodes there
    // can be).
    let plan_on = |n: usize| plan_in_allocation(path, n, &args.extra_args);
    let nodes = match args.nnodes {
        Some(0) => return Err(Error::Usage("-N 0: allocate at least one node".into())),
        Some(n) => n,
        None => match plan_on(config::MAX_NODES)?.roster.active.len() {
            n if n < config::MAX_NODES => n,
            _ => {
                return Err(Error::Usage(format!(
                    "{}: how many nodes? Give -N, or set [job] nnodes",
                    path.display()
                )))
            }
        },
    };
    let plan = plan_on(nodes)?;
    let herd = match &args.herd {
        Some(p) => std::fs::canonicalize(p).map_err(Error::io(format!("--herd {}", p.display())))?,
        None => std::env::current_exe().map_err(Error::io("cannot find herd's own executable"))?,
    };
    if herd.to_string_lossy().ends_with(" (deleted)") {
        return Err(Error::Usage(format!(
            "{}: this herd was replaced on disk since it started: give --herd PATH",
            herd.display()
        )));
    }
    let config_file =
        std::fs::canonicalize(path).map_err(Error::io(format!("cannot resolve {}", path.display())))?;
    let cwd = std::env::current_dir().map_err(Error::io("cannot read the current directory"))?;
    let logs_dir = cwd.join(&plan.logs_dir);
    for (what, p) in [("the directory herd submit runs in", &cwd), ("logs.dir", &logs_dir)] {
        if let Some(why) = crate::submit::bad_path(p) {
            return Err(Error::Usage(format!("{what} {}: not a path for sbatch: {why}", p.display())));
        }
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
        print!("{script}");
        return Ok(exit::OK);
    }
    let id = crate::submit::sbatch(&script).map_err(Error::Slurm)?;
    println!("submitted job {id}: herd run --slurm -c {} on {nodes} node(s)", config_file.display());
    println!("  Slurm's output: {}/slurm-{id}.out", logs_dir.display());
    println!(
        "  follow it:      tail -f {}/slurm-{id}.out   (once it runs: squeue -j {id})",
        logs_dir.display()
    );
    println!("  read it back:   herd logs -c {}", path.display());
    Ok(exit::OK)
}

fn kill_command(config: &Path, slurm: bool) -> Result<u8, Error> {
    // Every node of the config: leftovers may be on any of them, whatever a run selected.
    let plan = load_plan(config, &NodeSelection { slurm, ..NodeSelection::default() }, &[], Active::All)?;
    let _lock = lock_config(&plan)?;
    let runtime = runtime()?;
    let mut stopped = 0;
    // Through Slurm, first the config's steps that are still there (any herd's): then the
    // nodes are swept for what outlived them.
    if let Some(plan::Transport::Slurm(t)) = plan.nodes.first().map(|n| &n.transport) {
        let steps = runtime
            .block_on(transport::slurm::cancel_steps(&t.job_id, &t.step_name, true))
            .map_err(|e| Error::Slurm(format!("herd kill: {e}")))?;
        if !steps.is_empty() {
            stopped += steps.len();
            println!("job {}: cancelled {} step(s): {}", t.job_id, steps.len(), steps.join(" "));
        }
    }
    let events = runtime.block_on(supervisor::kill_leftovers(&plan))?;
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
    let plan = load_plan(&args.config.config, &args.selection, &[], Active::All)?;
    ready_to_connect(&plan)?;
    let report = runtime()?.block_on(async {
        let (fleet, _, _) = crate::fleet::Fleet::connect(&plan, None, |_| Vec::new()).await;
        let probe =
            doctor::ProbeOptions { fast: false, test_port: true, presweep: None, import_torch: Vec::new() };
        let report = doctor::diagnose(&plan, &fleet, &probe, Vec::new()).await;
        fleet.close().await;
        report
    });
    if args.json {
        print!("{}", output::doctor_view::json(&report.nodes));
    } else {
        print!("{}", output::doctor_view::text(&report.nodes, false));
    }
    Ok(if report.ok() { exit::OK } else { exit::PREFLIGHT })
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

/// What must hold on this machine before herd contacts any node: the SSH key the config names
/// exists (herd logs in with that key only, IdentitiesOnly=yes: another key must never log in
/// in its place); through Slurm, its commands are on PATH. Then herd's state directory.
fn ready_to_connect(plan: &LaunchPlan) -> Result<std::path::PathBuf, Error> {
    if plan.nodes.iter().any(|n| matches!(n.transport, plan::Transport::Slurm(_))) {
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
        plan::Transport::Ssh(t) => t.identity_file.as_deref(),
        plan::Transport::Local | plan::Transport::Slurm(_) => None,
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

/// Every SIGINT and SIGTERM becomes one interrupt on `tx`; the supervisor decides what each
/// means.
/// summary.json: the run's outcome, or why it stopped before any attempt.
fn write_summary(
    run_dir: &Path,
    run_id: &str,
    outcome: &Result<supervisor::RunOutcome, supervisor::RunError>,
    started: std::time::SystemTime,
) {
    let now = std::time::SystemTime::now();
    let summary = match outcome {
        Ok(o) => output::record::summary(run_id, o.status, &o.attempts, started, now),
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

/// `hooks`: the notify hooks running or waiting are killed at each signal, also once the run
/// is over and herd only waits for them.
fn forward_signals(tx: mpsc::UnboundedSender<()>, hooks: Option<crate::notify::Stopper>) {
    use tokio::signal::unix::{signal, SignalKind};
    for kind in [SignalKind::interrupt(), SignalKind::terminate()] {
        let (tx, hooks) = (tx.clone(), hooks.clone());
        match signal(kind) {
            Ok(mut stream) => {
                tokio::spawn(async move {
                    while stream.recv().await.is_some() {
                        if let Some(hooks) = &hooks {
                            hooks.stop("herd got a signal");
                        }
                        // The run may be over already (herd waits for hooks): nothing to stop.
                        let _ = tx.send(());
                    }
                });
            }
            Err(e) => tracing::warn!("cannot watch signal {kind:?}: {e}"),
        }
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
