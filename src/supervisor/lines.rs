//! Whether every line a run sends its nodes fits what a login shell takes (see
//! `remote::shell::MAX_LOGIN_LINE`): `herd run` and `herd doctor` check it once the plan is built,
//! before any node is contacted, so that a long `setup` or `args` is a bad config (exit 2)
//! and not a failure to start.

use crate::doctor::{self, ProbeOptions};
use crate::plan::{LaunchPlan, NodePlan, Transport};
use crate::remote;

use super::gang::job_invocation;
use super::sweep::Sweep;

/// A line for a node's login shell longer than it takes.
#[derive(Debug, thiserror::Error)]
#[error(
    "{config}: the command herd sends node {host} ({what}) would be {size} bytes, more than the {limit} \
     a login shell takes in one argument (Linux's limit; quotes, `!` and bytes outside ASCII \
     count several times): {parts}; make it smaller, e.g. put a long setup in a script on the nodes and \
     `source` that"
)]
pub struct LineTooLong {
    pub config: String,
    pub host: String,
    pub what: &'static str,
    pub size: usize,
    pub limit: usize,
    /// The config values that make up most of it, with their sizes, largest first.
    pub parts: String,
}

/// A run id as long as a real one (`commands::new_run_id`).
const RUN_ID: &str = "20260101-000000-0000";

/// Every line a run sends each of the plan's nodes: its preflight probe (a promoted spare's,
/// with `import torch`, as `preflight::probe_options`) and its job's agent with a sweep.
pub fn check_run(plan: &LaunchPlan) -> Result<(), LineTooLong> {
    check(plan, |node| {
        let presweep = Some(Sweep::Config { spare_run: Some(RUN_ID) }.body(plan));
        let preflight =
            ProbeOptions { fast: true, test_port: true, presweep, import_torch: vec![node.node_rank] };
        let sweep = Sweep::Restart { run_id: RUN_ID, attempt: 99 };
        vec![
            ("its preflight", doctor::probe_invocation(plan, node, &preflight).remote_command()),
            ("its job's agent", job_invocation(plan, RUN_ID, node, 99, false, Some(sweep)).remote_command()),
        ]
    })
}

/// The doctor's probe of each of the plan's nodes, herd's longest line.
pub fn check_doctor(plan: &LaunchPlan) -> Result<(), LineTooLong> {
    check(plan, |node| {
        let options = ProbeOptions { fast: false, test_port: true, presweep: None, import_torch: Vec::new() };
        vec![("the doctor's probe", doctor::probe_invocation(plan, node, &options).remote_command())]
    })
}

fn check(
    plan: &LaunchPlan,
    commands: impl Fn(&NodePlan) -> Vec<(&'static str, String)>,
) -> Result<(), LineTooLong> {
    for node in &plan.nodes {
        for (what, command) in commands(node) {
            // Slurm's step and a local agent run the command itself as one argument (or less).
            let size = match node.transport {
                Transport::Ssh(_) => remote::shell::for_login_shell(&command).len(),
                Transport::Local | Transport::Slurm(_) => command.len(),
            };
            if size > remote::shell::MAX_LOGIN_LINE {
                return Err(too_long(plan, node, what, size));
            }
        }
    }
    Ok(())
}

fn too_long(plan: &LaunchPlan, node: &NodePlan, what: &'static str, size: usize) -> LineTooLong {
    let mut parts = [
        (plan.setup.as_deref().map_or(0, str::len), "job.setup"),
        (node.command.len(), "the launcher line (job.script, job.args)"),
        (plan.workdir.len(), "job.workdir"),
    ];
    parts.sort_by_key(|p| std::cmp::Reverse(p.0));
    let parts = parts.iter().map(|(n, name)| format!("{name} is {n} bytes")).collect::<Vec<_>>().join(", ");
    LineTooLong {
        config: plan.config_path.display().to_string(),
        host: node.host.clone(),
        what,
        size,
        limit: remote::shell::MAX_LOGIN_LINE,
        parts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(job: &str) -> LaunchPlan {
        let text = format!(
            "[[nodes]]\nhost = \"n[1-2]\"\n[job]\nscript = \"t.py\"\ndevice = \"cpu\"\n{job}\n\
             [rendezvous]\ninterface = \"eth0\"\n"
        );
        let config = crate::config::parse(std::path::Path::new("c.toml"), &text).unwrap();
        crate::plan::build(&config, &crate::plan::PlanInputs { cwd: "/w".into(), ..Default::default() })
    }

    #[test]
    fn a_usual_setup_and_args_fit() {
        let usual = plan("setup = \"source /opt/venv/bin/activate\"\nargs = [\"--lr\", \"0.1\"]");
        check_run(&usual).unwrap();
        check_doctor(&usual).unwrap();
        // Quotes and non-ASCII grow the most (nested quoting): a KiB of them still fits.
        let quotes = plan(&format!("setup = \"echo '{}'\"", "é'".repeat(300)));
        check_run(&quotes).unwrap();
        check_doctor(&quotes).unwrap();
        // The doctor's probe carries the setup too, and is named when it is what is too long.
        let long = plan(&format!("setup = \"echo {}\"", "x".repeat(110 * 1024)));
        assert_eq!(check_doctor(&long).unwrap_err().what, "the doctor's probe");
    }

    #[test]
    fn a_setup_too_long_for_a_login_shell_is_named_before_any_node_is_contacted() {
        let e = check_run(&plan(&format!("setup = \"echo {}\"", "x".repeat(128 * 1024)))).unwrap_err();
        assert_eq!(e.host, "n1");
        assert!(e.size > remote::shell::MAX_LOGIN_LINE, "{e}");
        let text = e.to_string();
        assert!(text.starts_with("c.toml: the command herd sends node n1 ("), "{text}");
        assert!(text.contains(": job.setup is 131077 bytes, the launcher line"), "{text}");
    }

    #[test]
    fn args_too_long_for_a_login_shell_are_named() {
        let args = format!("args = [{}]", vec!["\"it's!\""; 20_000].join(", "));
        let text = check_run(&plan(&args)).unwrap_err().to_string();
        assert!(text.contains(": the launcher line (job.script, job.args) is "), "{text}");
    }
}
