//! `herd plan`: the plan a run of the config would make, printed as text or JSON; nothing is
//! contacted.

use super::{load_plan, out, Active};
use crate::cli::PlanArgs;
use crate::error::{exit, Error};
use crate::output;

pub(super) fn plan_command(args: PlanArgs) -> Result<u8, Error> {
    let plan = load_plan(&args.config.config, &args.selection, &args.extra_args, Active::Run)?;
    let text = if args.json { output::plan_view::json(&plan) } else { output::plan_view::text(&plan) };
    out(&text)?;
    Ok(exit::OK)
}
