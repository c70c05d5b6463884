//! `herd logs`: a past run's logs read back from the logs directory, by run, node, rank,
//! attempt or pattern, or drawn as a timeline of where its time went; nothing is contacted.

use std::path::Path;

use super::{load_plan, plan_in_allocation, Active};
use crate::cli::{LogsArgs, NodeSelection};
use crate::error::{exit, Error};
use crate::{config, logs, output, timeline};

pub(super) fn logs_command(args: LogsArgs) -> Result<u8, Error> {
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
            .try_for_each(|r| {
                let after = logs::previous_run(r).map(|p| format!("  after {p}")).unwrap_or_default();
                writeln!(out, "{}  {} attempt(s)  {}{after}", r.id, r.attempts.len(), r.dir.display())
            })
            .map_err(Printed::Io)
    } else {
        let usage = |e: logs::LookupError| Error::Usage(format!("{e} (under {})", dir.display()));
        let run = logs::pick_run(&runs, args.run.as_deref()).map_err(usage)?;
        if args.timeline {
            return timeline(run, args.output.as_deref());
        }
        let chain = if args.lineage { logs::lineage(&runs, run) } else { vec![run] };
        chain.iter().try_for_each(|run| {
            if args.lineage {
                writeln!(out, "== run {} ==", run.id).map_err(Printed::Io)?;
            }
            print_run(run, &args, &mut out)
        })
    };
    match printed.and_then(|()| out.flush().map_err(Printed::Io)) {
        Ok(()) => Ok(exit::OK),
        // `herd logs | head` is not an error.
        Err(Printed::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(exit::OK),
        Err(Printed::Io(e)) => Err(Error::io("cannot print the logs")(e)),
        Err(Printed::Usage(e)) => Err(e),
    }
}

/// Why printing a run stopped: the output failed, or the run has no such node, rank or
/// attempt.
enum Printed {
    Io(std::io::Error),
    Usage(Error),
}

/// One run's lines, as `args` select them: the node, rank and attempt picked in this run's
/// own world (it may have changed between attempts, and between the runs of a lineage).
fn print_run(run: &logs::RunInfo, args: &LogsArgs, out: &mut impl std::io::Write) -> Result<(), Printed> {
    let usage = |e: logs::LookupError| Printed::Usage(Error::Usage(e.to_string()));
    let mut selection = logs::Selection::default();
    if let Some(node) = &args.node {
        logs::pick_node(run, node, &mut selection).map_err(usage)?;
    }
    if let Some(rank) = args.rank {
        logs::pick_rank(run, rank, &mut selection).map_err(usage)?;
    }
    if let Some(attempt) = args.attempt {
        if !run.attempts.contains(&attempt) {
            return Err(Printed::Usage(Error::Usage(format!("run {} has no attempt {attempt}", run.id))));
        }
        selection.attempts.push(attempt);
    }
    if let Some(re) = &args.grep {
        let re =
            regex::bytes::Regex::new(re).map_err(|e| Printed::Usage(Error::Usage(format!("--grep: {e}"))))?;
        selection.grep = Some(re);
    }
    let attempts = logs::per_attempt(run, &selection).map_err(usage)?;
    let color = output::mode::Surroundings::detect(false, true).color();
    logs::print(run, &selection, &attempts, color, out).map_err(Printed::Io)
}

/// `--timeline`: the run's events drawn as a page, written to `to` (`-`: stdout) or beside
/// them; the path written printed. The lines of the record that are no whole event are left
/// out, and said (exit 1).
fn timeline(run: &logs::RunInfo, to: Option<&Path>) -> Result<u8, Error> {
    let events = run.dir.join("events.jsonl");
    let text = std::fs::read(&events).map_err(Error::io(format!("cannot read {}", events.display())))?;
    let record = timeline::read(&String::from_utf8_lossy(&text));
    let drawn = timeline::build(&record.events)
        .map_err(|e| Error::Usage(format!("{}: no timeline to draw: {e}", events.display())))?;
    let page = output::timeline_view::html(&drawn.grouped(timeline::MAX_ROWS));
    let to = to.map_or_else(|| run.dir.join("timeline.html"), Path::to_path_buf);
    if to == Path::new("-") {
        super::out(&page)?;
    } else {
        let context = format!("cannot write {} (another place: --output PATH)", to.display());
        std::fs::write(&to, page).map_err(Error::io(context))?;
        super::out(&format!("{}\n", to.display()))?;
    }
    if record.skipped.is_empty() {
        return Ok(exit::OK);
    }
    eprintln!("herd: {}: {}", events.display(), skipped_words(&record.skipped));
    Ok(exit::RECORD_CUT)
}

/// What `--timeline` says of the lines it skipped (counted from 1).
fn skipped_words(lines: &[usize]) -> String {
    let shown: Vec<String> = lines.iter().take(5).map(usize::to_string).collect();
    let more = if lines.len() > 5 { format!(" and {} more", lines.len() - 5) } else { String::new() };
    let (n, s) = (lines.len(), if lines.len() == 1 { "" } else { "s" });
    format!(
        "{n} line{s} skipped, no whole event (line{s} {}{more}): the run was killed while it wrote, or \
         its disk filled; the timeline shows every whole line",
        shown.join(", ")
    )
}
