//! `herd plan`: the launch plan as text for people or JSON for tools. Byte-identical for the
//! same config and environment, so that a team can diff it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::PortSpec;
use crate::plan::{LaunchPlan, NodePlan, SlurmTarget, SshTarget, Transport};
use crate::quarantine::Quarantine;

#[derive(Serialize)]
struct PlanJson<'a> {
    config: String,
    launcher: &'static str,
    world_size: u32,
    nnodes: usize,
    master: MasterJson<'a>,
    workdir: &'a str,
    setup: Option<&'a str>,
    logs_dir: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    container: Option<ContainerJson<'a>>,
    nodes: Vec<NodeJson<'a>>,
    /// Beyond `job.nnodes`, in the order they take a blamed node's place.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    spares: Vec<&'a str>,
    /// Left out: earlier runs of this config blamed them (`herd nodes`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    quarantined: Vec<QuarantinedJson<'a>>,
}

#[derive(Serialize)]
struct QuarantinedJson<'a> {
    host: &'a str,
    reason: &'a str,
}

#[derive(Serialize)]
struct ContainerJson<'a> {
    runtime: &'static str,
    image: &'a str,
    args: &'a [String],
    mounts: &'a [String],
    shm_size: &'a str,
    gpus: bool,
}

#[derive(Serialize)]
struct MasterJson<'a> {
    node_rank: usize,
    host: &'a str,
    addr: &'a str,
    /// A number, or "auto".
    port: serde_json::Value,
    port_range: [u16; 2],
}

#[derive(Serialize)]
struct NodeJson<'a> {
    node_rank: usize,
    host: &'a str,
    addr: &'a str,
    nproc: u32,
    global_ranks: [u32; 2],
    transport: TransportJson<'a>,
    env: BTreeMap<&'a str, &'a str>,
    command: &'a str,
    /// With `[container]`: what the node's shell runs, `command` inside the container.
    #[serde(skip_serializing_if = "Option::is_none")]
    container_command: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum TransportJson<'a> {
    Local,
    Ssh(&'a SshTarget),
    Slurm(&'a SlurmTarget),
}

pub fn json(plan: &LaunchPlan) -> String {
    let view = PlanJson {
        config: plan.config_path.display().to_string(),
        launcher: plan.launcher.as_str(),
        world_size: plan.world_size,
        nnodes: plan.nnodes(),
        master: MasterJson {
            node_rank: plan.master.node_rank,
            host: &plan.master.host,
            addr: &plan.master.addr,
            port: match plan.master.port {
                PortSpec::Auto => "auto".into(),
                PortSpec::Fixed(p) => p.into(),
            },
            port_range: [plan.master.port_range.0, plan.master.port_range.1],
        },
        workdir: &plan.workdir,
        setup: plan.setup.as_deref(),
        logs_dir: plan.logs_dir.display().to_string(),
        container: plan.container.as_ref().map(|c| ContainerJson {
            runtime: c.runtime.as_str(),
            image: &c.image,
            args: &c.args,
            mounts: &c.mounts,
            shm_size: &c.shm_size,
            gpus: c.gpus,
        }),
        nodes: plan.nodes.iter().map(node_json).collect(),
        spares: plan.roster.spare_hosts().collect(),
        quarantined: plan
            .roster
            .quarantined_hosts()
            .map(|(host, reason)| QuarantinedJson { host, reason })
            .collect(),
    };
    let mut s = serde_json::to_string_pretty(&view).expect("plan serialises");
    s.push('\n');
    s
}

fn node_json(node: &NodePlan) -> NodeJson<'_> {
    let r = node.global_ranks();
    NodeJson {
        node_rank: node.node_rank,
        host: &node.host,
        addr: &node.addr,
        nproc: node.nproc,
        global_ranks: [r.start, r.end - 1],
        transport: match &node.transport {
            Transport::Local => TransportJson::Local,
            Transport::Ssh(t) => TransportJson::Ssh(t),
            Transport::Slurm(t) => TransportJson::Slurm(t),
        },
        env: node.env.iter().map(|(k, v)| (k.as_str(), v.display())).collect(),
        command: &node.command,
        container_command: node.container_command.as_deref(),
    }
}

/// The plan for people. Every value from the config is shown through `printable`: a newline
/// or an escape sequence in an env value cannot break the layout or drive the terminal.
pub fn text(plan: &LaunchPlan) -> String {
    let mut s = run_text(plan);
    for node in &plan.nodes {
        s += &node_text(node);
    }
    s
}

/// The run's lines, above the nodes: the world, the master, where it runs and logs.
fn run_text(plan: &LaunchPlan) -> String {
    let p = super::printable;
    let mut s = String::new();
    let m = &plan.master;
    let port = match m.port {
        PortSpec::Auto => {
            format!("auto, free port in {}-{} chosen on the master", m.port_range.0, m.port_range.1)
        }
        PortSpec::Fixed(p) => p.to_string(),
    };
    s += &format!("config      {}\n", p(&plan.config_path.display().to_string()));
    s += &format!("launcher    {}\n", plan.launcher.as_str());
    s += &format!("nodes       {}, world size {}\n", plan.nnodes(), plan.world_size);
    let spares: Vec<&str> = plan.roster.spare_hosts().collect();
    if !spares.is_empty() {
        s += &format!(
            "spares      {} (each takes a blamed node's node rank, in this order)\n",
            spares.join(", ")
        );
    }
    for (host, reason) in plan.roster.quarantined_hosts() {
        s += &format!("quarantined {host}: {} (`herd nodes --release {host}` brings it back)\n", p(reason));
    }
    s += &format!("master      node {} ({}), address {}\n", m.node_rank, m.host, m.addr);
    s += &format!("port        {port}\n");
    s += &format!("workdir     {}\n", p(&plan.workdir));
    if let Some(setup) = &plan.setup {
        let lines: Vec<_> = setup.split('\n').map(p).collect();
        s += &format!("setup       {}\n", lines.join("\n            "));
    }
    if let Some(c) = &plan.container {
        s += &format!(
            "container   {} image {}: setup and the launcher run in it{}\n",
            c.runtime.as_str(),
            p(&c.image),
            if c.gpus { ", with every GPU" } else { "" }
        );
    }
    s += &format!("logs        {}/<run-id>/\n", p(&plan.logs_dir.display().to_string()));
    for name in &plan.missing_forwarded {
        s += &format!(
            "warning     forward_env names {name}, which is not set here: it will not be exported\n"
        );
    }
    s
}

/// One node's block: its ranks, how herd reaches it, its env and its command lines.
fn node_text(node: &NodePlan) -> String {
    let p = super::printable;
    let r = node.global_ranks();
    let via = match &node.transport {
        Transport::Local => "local".to_string(),
        Transport::Ssh(t) => format!(
            "ssh {}{}{}",
            t.user.as_deref().map(|u| format!("{u}@")).unwrap_or_default(),
            t.host,
            t.port.map(|p| format!(":{p}")).unwrap_or_default()
        ),
        Transport::Slurm(t) => format!("srun in job {}", t.job_id),
    };
    let mut s = format!(
        "\nnode {}  {}  nproc {}  ranks {}-{}  via {}\n",
        node.node_rank,
        node.host,
        node.nproc,
        r.start,
        r.end - 1,
        via
    );
    for (k, v) in &node.env {
        s += &format!("  env  {k}={}\n", p(v.display()));
    }
    s += &format!("  run  {}\n", p(&node.command));
    if let Some(command) = &node.container_command {
        let command = without_mux(command);
        let lines: Vec<_> = command.split('\n').map(p).collect();
        s += &format!("  in   {}\n", lines.join("\n       "));
    }
    s
}

/// `herd nodes`: which nodes the next run uses, its spares, and the quarantined ones with
/// why, which run blamed them, and when.
/// What `herd nodes` knows of the config's next run.
#[derive(Debug, Clone, Copy)]
pub enum NextRun<'a> {
    Plan(&'a LaunchPlan),
    /// Too few nodes are left that are not quarantined.
    CannotStart,
    /// The config's nodes are those of a Slurm allocation, and herd is in none.
    OutsideAllocation,
}

impl<'a> NextRun<'a> {
    fn plan(self) -> Option<&'a LaunchPlan> {
        match self {
            NextRun::Plan(plan) => Some(plan),
            _ => None,
        }
    }
}

/// What `herd nodes` says when it cannot know the active nodes.
pub const OUTSIDE_ALLOCATION: &str = "unknown outside a Slurm allocation (a Slurm run's nodes are \
     its allocation's: run `herd nodes` inside it)";

pub fn nodes_text(next: NextRun<'_>, kept_out: &Quarantine) -> String {
    let p = super::printable;
    let plan = next.plan();
    let mut s = if let NextRun::OutsideAllocation = next {
        format!("active: {OUTSIDE_ALLOCATION}\nspares: unknown\n")
    } else {
        let mut s = String::from("active (node rank, host):\n");
        for node in plan.iter().flat_map(|p| &p.nodes) {
            s += &format!("  {:>4}  {}\n", node.node_rank, node.host);
        }
        let spares: Vec<&str> = plan.iter().flat_map(|p| p.roster.spare_hosts()).collect();
        s + &format!("spares: {}\n", if spares.is_empty() { "none".to_string() } else { spares.join(", ") })
    };
    if kept_out.nodes.is_empty() {
        s += "quarantined: none\n";
    } else {
        s += "quarantined:\n";
        for e in &kept_out.nodes {
            s += &format!(
                "  {}  {}  (run {}, attempt {}, {})\n",
                e.host,
                p(&e.reason),
                e.run_id,
                e.attempt,
                e.at
            );
        }
    }
    s
}

/// `herd nodes --json`: `active` and `spares` are null when they cannot be known (outside a
/// Slurm allocation).
pub fn nodes_json(next: NextRun<'_>, kept_out: &Quarantine) -> String {
    #[derive(Serialize)]
    struct Active<'a> {
        node_rank: usize,
        host: &'a str,
    }
    #[derive(Serialize)]
    struct View<'a> {
        active: Option<Vec<Active<'a>>>,
        spares: Option<Vec<&'a str>>,
        quarantined: &'a [crate::quarantine::Entry],
    }
    let plan = next.plan();
    let known = !matches!(next, NextRun::OutsideAllocation);
    let view = View {
        active: known.then(|| {
            let nodes = plan.iter().flat_map(|p| &p.nodes);
            nodes.map(|n| Active { node_rank: n.node_rank, host: &n.host }).collect()
        }),
        spares: known.then(|| plan.iter().flat_map(|p| p.roster.spare_hosts()).collect()),
        quarantined: &kept_out.nodes,
    };
    let mut s = serde_json::to_string_pretty(&view).expect("serialises");
    s.push('\n');
    s
}

/// A container's command with herd's output multiplexer (its 200 lines of Python, as the
/// container's shell gets them) named instead of shown; `--json` keeps it all.
fn without_mux(command: &str) -> String {
    crate::remote::shell::name_nested_mux(command, "<herd's output multiplexer, src/remote/mux.py>")
}
