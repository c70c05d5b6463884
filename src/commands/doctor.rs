//! `herd doctor`: the preflight's checks on every node of the config at once (spares and
//! quarantined nodes too), printed as a table or JSON; exit 3 when one fails.

use super::{load_plan, ready_to_connect, runtime, Active};
use crate::cli::DoctorArgs;
use crate::error::{exit, Error};
use crate::{doctor, output};

pub(super) fn doctor_command(args: DoctorArgs) -> Result<u8, Error> {
    let plan = load_plan(&args.config.config, &args.selection, &[], Active::All)?;
    crate::supervisor::lines::check_doctor(&plan)?;
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
