//! `herd nodes`: the config's quarantined nodes and what the next run would use; `--release`
//! gives quarantined nodes back.

use std::path::Path;

use super::{load_plan, plan_in_allocation, Active};
use crate::cli::{NodeSelection, NodesArgs};
use crate::error::{exit, Error};
use crate::plan::LaunchPlan;
use crate::quarantine::{self, Quarantine};
use crate::{config, output};

pub(super) fn nodes_command(args: NodesArgs) -> Result<u8, Error> {
    let config = &args.config.config;
    let selection = NodeSelection { slurm: args.slurm, ..NodeSelection::default() };
    let (plan, outside) = quarantine_plan(config, &selection)?;
    let path = quarantine::path(&plan.logs_dir, &plan.config_key);
    let mut kept_out = Quarantine::load(&path)?;
    if !args.release.is_empty() {
        release(&mut kept_out, &args.release)?;
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
    super::out(&text)?;
    Ok(exit::OK)
}

/// The plan whose quarantine file this is, and whether it was read outside the Slurm
/// allocation it is for. A config for Slurm outside its allocation has no nodes here, but its
/// quarantine file is where it always is: it can be read, and nodes released. So can that of
/// a config with no nodes of its own, used only with `--slurm` (read as `herd logs` reads
/// it); if it is not that either, the first error is the one shown.
fn quarantine_plan(config: &Path, selection: &NodeSelection) -> Result<(LaunchPlan, bool), Error> {
    match load_plan(config, selection, &[], Active::All) {
        Ok(plan) => Ok((plan, false)),
        Err(e) if outside_allocation(&e) => {
            Ok((plan_in_allocation(config, config::MAX_NODES, &[]).map_err(|_| e)?, true))
        }
        Err(e) if !selection.slurm => {
            let plan = plan_in_allocation(config, config::MAX_NODES, &[]).map_err(|_| e)?;
            eprintln!(
                "herd: {} has no nodes of its own: read as a config for Slurm; inside its allocation, \
                 `herd nodes --slurm` shows the nodes a run would use",
                config.display()
            );
            Ok((plan, true))
        }
        Err(e) => Err(e),
    }
}

/// `--release`: each host out of the quarantine, in turn; one that is not in it is an error,
/// and nothing is saved.
fn release(kept_out: &mut Quarantine, hosts: &[String]) -> Result<(), Error> {
    for host in hosts {
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
    Ok(())
}

/// Whether `e` says that the config's nodes are a Slurm allocation's, and herd is in none.
fn outside_allocation(e: &Error) -> bool {
    matches!(e, Error::Config(c) if c.message().contains(config::OUTSIDE_ALLOCATION))
}
