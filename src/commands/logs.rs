//! `herd logs`: a past run's logs read back from the logs directory, by run, node, rank,
//! attempt or pattern; nothing is contacted.

use super::{load_plan, plan_in_allocation, Active};
use crate::cli::{LogsArgs, NodeSelection};
use crate::error::{exit, Error};
use crate::{config, logs, output};

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
