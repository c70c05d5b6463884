//! From the facts each node reported to pass / warn / fail checks with a detail and a fix.
//! Pure: the facts come in as plain maps, the verdicts go out as plain data.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::{Device, LauncherKind};
use crate::container::ContainerPlan;
use crate::plan::LaunchPlan;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warn,
    Fail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn pass(name: &'static str, detail: impl Into<String>) -> Check {
        Check { name, status: Status::Pass, detail: detail.into(), fix: None }
    }
    fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { name, status: Status::Warn, detail: detail.into(), fix: Some(fix.into()) }
    }
    fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { name, status: Status::Fail, detail: detail.into(), fix: Some(fix.into()) }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeChecks {
    pub node_rank: usize,
    pub host: String,
    pub checks: Vec<Check>,
}

impl NodeChecks {
    /// Its first failing check, if one failed.
    pub fn first_failure(&self) -> Option<&Check> {
        self.checks.iter().find(|c| c.status == Status::Fail)
    }
}

/// What one node reported: `herd-fact name=value` lines, plus how the probe went.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// `None`: herd could not reach the node; the error.
    pub unreachable: Option<String>,
    pub connect_ms: u64,
    pub values: BTreeMap<String, String>,
    /// Lines that were not facts (errors of cd, setup, the probe itself).
    pub other_lines: Vec<String>,
    /// The node's clock against herd's, measured once its agent was up.
    pub clock: Option<ClockSample>,
    /// From starting the probe's agent to its first word: the login shell's start.
    pub login_ms: Option<u64>,
}

/// One reading of a node's clock, NTP-style: herd asked at `t0` and had the answer at `t1`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockSample {
    /// The node's time minus the midpoint of herd's `t0` and `t1`, in seconds.
    pub offset: f64,
    /// Half the round trip: the node read its clock somewhere in it.
    pub uncertainty: f64,
}

impl ClockSample {
    pub fn new(t0: std::time::SystemTime, t1: std::time::SystemTime, remote: f64) -> ClockSample {
        let secs = |t: std::time::SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs_f64()
        };
        let (t0, t1) = (secs(t0), secs(t1).max(secs(t0)));
        ClockSample { offset: remote - (t0 + t1) / 2.0, uncertainty: (t1 - t0) / 2.0 }
    }
}

/// The result of connecting from every worker to a listener on the master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortReach {
    /// Not tested (a node was unreachable, or only one node).
    Skipped(String),
    /// The listener could not start on the master.
    NoListener(String),
    /// Per node rank: `Ok` or the error.
    Tested { port: u16, results: BTreeMap<usize, Result<(), String>> },
}

impl Facts {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str).filter(|v| !v.is_empty())
    }
}

/// Parse `herd-fact name=value` lines; everything else is kept as other lines.
pub fn parse_facts(stdout: &str) -> (BTreeMap<String, String>, Vec<String>) {
    let mut values = BTreeMap::new();
    let mut other = Vec::new();
    for line in stdout.lines() {
        match line.strip_prefix("herd-fact ").and_then(|f| f.split_once('=')) {
            Some((k, v)) => {
                values.insert(k.to_string(), v.trim().to_string());
            }
            None if !line.trim().is_empty() => other.push(line.to_string()),
            None => {}
        }
    }
    (values, other)
}

const SHM_MIN_KB: u64 = 1024 * 1024;
const NOFILE_MIN: u64 = 65536;
const DISK_MIN_KB: u64 = 10 * 1024 * 1024;
const CLOCK_SKEW_MAX: f64 = 1.0;

/// Every check on every node. `fast`: only what `herd run` checks before it starts.
pub fn evaluate(plan: &LaunchPlan, facts: &[Facts], port: &PortReach, fast: bool) -> Vec<NodeChecks> {
    evaluate_with(plan, facts, port, fast, &[])
}

/// `evaluate`, with `import torch` checked on the node ranks `import_torch` even when `fast`
/// (their probes imported it: nodes new to the run).
pub fn evaluate_with(
    plan: &LaunchPlan,
    facts: &[Facts],
    port: &PortReach,
    fast: bool,
    import_torch: &[usize],
) -> Vec<NodeChecks> {
    let consistency = version_consistency(plan, facts, fast);
    let skew = clock_skew(facts);
    plan.nodes
        .iter()
        .zip(facts)
        .map(|(node, f)| {
            let mut checks = Vec::new();
            let srun = matches!(node.transport, crate::plan::Transport::Slurm(_));
            if let Some(err) = &f.unreachable {
                let (name, fix) = match srun {
                    true => ("srun", crate::transport::slurm::FIX),
                    false => ("ssh", crate::transport::connect_fix(err)),
                };
                checks.push(Check::fail(name, err.clone(), fix));
                return NodeChecks { node_rank: node.node_rank, host: node.host.clone(), checks };
            }
            checks.push(if srun { srun_check(f) } else { ssh_check(f) });
            let torch = !fast || import_torch.contains(&node.node_rank);
            node_checks(plan, node.node_rank, f, fast, torch, &mut checks);
            if let Some(c) = consistency.get(&node.node_rank) {
                checks.push(c.clone());
            }
            checks.push(port_check(plan, node.node_rank, port));
            if !fast {
                if let Some(c) = skew.get(&node.node_rank) {
                    checks.push(c.clone());
                }
            }
            NodeChecks { node_rank: node.node_rank, host: node.host.clone(), checks }
        })
        .collect()
}

/// Above this, a login's start is worth a warning: every login herd makes pays it, on every
/// node.
const SLOW_LOGIN_MS: u64 = 2000;

/// `login_ms` is measured here, from asking for the agent to its first word: the node's login
/// shell and its init count, but so do sshd and this machine's own ssh, which wait their turn
/// on a loaded launch host (hundreds of logins at once). So the warning says what was measured
/// and both causes, not "the login shell".
fn ssh_check(f: &Facts) -> Check {
    let connected = format!("connected in {} ms", f.connect_ms);
    match f.login_ms {
        Some(ms) if ms > SLOW_LOGIN_MS => Check::warn(
            "ssh",
            format!(
                "{connected}; its agent answered {:.1} s after it was started (the node's login shell, \
                 sshd and this machine's load all count)",
                ms as f64 / 1000.0
            ),
            "time `ssh NODE true` alone: if it is slow too, move conda / pyenv / module init out of non-interactive shells (in ~/.bashrc, after `case $- in *i*) ;; *) return;; esac`); if not, this machine was too busy for that many logins at once",
        ),
        Some(ms) => Check::pass("ssh", format!("{connected}; agent up in {ms} ms")),
        None => Check::pass("ssh", connected),
    }
}

/// Through Slurm there is no connection: what counts is how long a step takes to start.
fn srun_check(f: &Facts) -> Check {
    match f.login_ms {
        Some(ms) if ms > SLOW_LOGIN_MS => Check::warn(
            "srun",
            format!("a job step took {:.1} s to start its shell", ms as f64 / 1000.0),
            "every agent, probe and restart is a step: check slurmctld's load and the node's TaskProlog",
        ),
        Some(ms) => Check::pass("srun", format!("a job step started its shell in {ms} ms")),
        None => Check::pass("srun", "a job step ran"),
    }
}

/// `fast`: only what `herd run` checks; `torch`: check `import torch` all the same.
fn node_checks(plan: &LaunchPlan, rank: usize, f: &Facts, fast: bool, torch: bool, checks: &mut Vec<Check>) {
    if let Some(failed) = start_failure(plan, f, checks) {
        checks.push(failed);
        return;
    }
    match &plan.container {
        Some(container) => container_checks(plan, container, rank, f, fast, checks),
        None => bare_checks(plan, rank, f, fast, torch, checks),
    }
}

/// The probe runs after `cd workdir` and `setup`: if either failed (or the env was too large
/// to start anything), nothing else is known, and that is the node's one failing check.
fn start_failure(plan: &LaunchPlan, f: &Facts, checks: &mut Vec<Check>) -> Option<Check> {
    if let Some(line) = f.other_lines.iter().find(|l| l.starts_with("herd: cannot enter workdir")) {
        return Some(Check::fail(
            "workdir",
            line.clone(),
            "create the directory on this node, or fix job.workdir",
        ));
    }
    checks.push(Check::pass("workdir", plan.workdir.clone()));
    // An env too large to exec: no probe ran at all, so nothing is "not found".
    if let Some(line) = f.other_lines.iter().find(|l| l.contains(ARG_LIST_TOO_LONG)) {
        return Some(Check::fail(
            "env",
            format!("the job's environment is too large to start a process on this node: {line}"),
            "shrink [env], nodes.env and forward_env (Linux takes at most 128 KiB per variable and about 2 MiB in all, argv included)",
        ));
    }
    if let Some(line) = f.other_lines.iter().find(|l| l.starts_with("herd: setup failed")) {
        let why = f.other_lines.iter().rev().find(|l| !l.starts_with("herd: ")).cloned().unwrap_or_default();
        return Some(Check::fail("setup", format!("{line}: {why}"), "run job.setup by hand on this node"));
    }
    None
}

/// With `[container]`: probes run on the node, not in the image: what the node must provide.
fn container_checks(
    plan: &LaunchPlan,
    container: &ContainerPlan,
    rank: usize,
    f: &Facts,
    fast: bool,
    checks: &mut Vec<Check>,
) {
    let runtime = container.runtime.as_str();
    checks.push(match f.get("runtime") {
        Some(path) => Check::pass("runtime", path),
        None => Check::fail(
            "runtime",
            format!("{runtime} not found on PATH ([container] is set)"),
            format!("install {runtime} on this node, or set container.runtime"),
        ),
    });
    checks.extend(image_check(container, f));
    if let Some(rc) = f.get("container_rc") {
        checks.push(trial_check(plan, runtime, rc, f.get("container_out").unwrap_or("")));
    }
    if !fast {
        gpu_check(plan, rank, f, checks);
    }
    host_checks(plan, rank, f, fast, checks);
}

/// Whether the node has the image, pulls it as the job starts, or its runtime cannot say;
/// nothing without a runtime (its own check says so).
fn image_check(container: &ContainerPlan, f: &Facts) -> Option<Check> {
    let (runtime, image) = (container.runtime.as_str(), &container.image);
    // What the engines say of an image they do not have (podman, docker).
    let missing = |error: &str| {
        let error = error.to_ascii_lowercase();
        error.contains("image not known")
            || error.contains("no such image")
            || error.contains("no such object")
    };
    match (f.get("image_id"), f.values.get("image_error")) {
        (Some(id), _) => Some(Check::pass("image", format!("{image} {}", short_id(id)))),
        // No runtime: its own check says so.
        (None, None) => None,
        (None, Some(error)) if !missing(error) => Some(Check::fail(
            "image",
            format!("{runtime} cannot look at its images: {error}"),
            format!("run `{runtime} image inspect {image}` as the SSH user on this node: the engine must be usable without a prompt"),
        )),
        // `--pull` in args: the user means the nodes to pull it.
        (None, Some(_)) if container.pulls() => Some(Check::warn(
            "image",
            format!("{image} is not on this node: it pulls it as the job starts (--pull in container.args)"),
            format!(
                "{runtime} pull {image} on every node before the run: a pull makes the first \
                 attempt slow, and one failed pull fails it"
            ),
        )),
        (None, Some(_)) => Some(Check::fail(
            "image",
            format!("{image} is not on this node"),
            format!(
                "{runtime} pull {image} on every node before the run (or let the nodes pull it as \
                 the job starts: --pull missing in container.args)"
            ),
        )),
    }
}

/// An image ID as the engines print it short: its first 12 hex digits.
fn short_id(id: &str) -> &str {
    let hex = id.strip_prefix("sha256:").unwrap_or(id);
    hex.get(..12).unwrap_or(hex)
}

/// The doctor's trial container (see `LaunchPlan::container_trial`): it started with herd's
/// options, and the launcher and Python are in it.
fn trial_check(plan: &LaunchPlan, runtime: &str, rc: &str, out: &str) -> Check {
    let programs = match plan.launcher {
        LauncherKind::Command => plan.launcher_program.clone(),
        _ => format!("{} and {}", plan.launcher_program, plan.python),
    };
    let fix = match rc {
        "0" if plan.launcher == LauncherKind::Command => {
            return Check::pass("container", format!("starts; {programs} found in it"))
        }
        "0" => return Check::pass("container", format!("starts; {programs} found in it, and torch imports")),
        // The trial's own words (`remote/container_trial.sh`).
        "126" => "mount the interpreter's directory too (container.mounts: a venv's python3 is often a link \
                  into a pyenv or conda install outside the venv), or install it in the image"
            .to_string(),
        "3" => "install torch for that Python in the image, or mount the venv that has it \
                (container.mounts) and have job.setup activate it"
            .to_string(),
        // What the shells in the container say when a program is missing (the trial's own
        // word, or setup's).
        "127" => format!(
            "install {programs} in the image, or make job.setup put {} on PATH in it (a \
             host directory goes in container.mounts)",
            if plan.launcher == LauncherKind::Command { "it" } else { "them" }
        ),
        // The engine's own failures: its options, its configuration, the image.
        _ => format!(
            "`herd plan` shows the node's `{runtime} run` command: try it by hand there; \
             check container.args and the engine's configuration ({})",
            match runtime {
                "docker" => "/etc/docker/daemon.json",
                _ => "containers.conf: runtime, cgroup_manager, default_ulimits",
            }
        ),
    };
    let out = if out.is_empty() { String::new() } else { format!(": {out}") };
    Check::fail("container", format!("{runtime} run exited {rc}{out}"), fix)
}

/// Without a container: the launcher, torch, the GPUs and NCCL as the job's setup leaves them.
fn bare_checks(plan: &LaunchPlan, rank: usize, f: &Facts, fast: bool, torch: bool, checks: &mut Vec<Check>) {
    if plan.setup.is_some() {
        checks.push(Check::pass("setup", "ok"));
    }
    match f.get("launcher") {
        Some(path) => checks.push(Check::pass("launcher", path)),
        None => checks.push(Check::fail(
            "launcher",
            format!("{} not found on PATH after setup", plan.launcher_program),
            "install it, or make job.setup put it on PATH (e.g. activate the virtualenv)",
        )),
    }
    if torch && plan.uses_torch {
        checks.push(torch_check(f));
    }
    if !fast {
        gpu_check(plan, rank, f, checks);
        if plan.uses_torch {
            checks.extend(nccl_check(plan.device, f));
        }
    }
    host_checks(plan, rank, f, fast, checks);
}

/// What the node itself must get right, in a container or not: its hostname, its interface to
/// the master, and its limits (`fast`: only the interface, as `herd run` checks).
fn host_checks(plan: &LaunchPlan, rank: usize, f: &Facts, fast: bool, checks: &mut Vec<Check>) {
    if !fast {
        hostname_check(plan, f, checks);
    }
    interface_check(plan, f, checks);
    if !fast {
        resource_checks(plan, rank, f, checks);
    }
}

fn torch_check(f: &Facts) -> Check {
    match f.get("torch_import") {
        Some("ok") => Check::pass("torch", format!("import torch works ({})", f.get("torch").unwrap_or("?"))),
        Some(err) => Check::fail(
            "torch",
            format!("import torch failed: {err}"),
            "check the node's Python environment (PYTHONPATH, virtualenv)",
        ),
        None => Check::fail("torch", "no Python answered", "make job.python run on this node after setup"),
    }
}

fn nccl_check(device: Device, f: &Facts) -> Option<Check> {
    match (device, f.get("nccl_available")) {
        (Device::Cpu, _) => None,
        (Device::Cuda, Some("True")) => Some(Check::pass("nccl", "torch.distributed.is_nccl_available()")),
        (Device::Cuda, _) => {
            Some(Check::fail("nccl", "NCCL is not available in this torch", "install a CUDA build of torch"))
        }
    }
}

fn gpu_check(plan: &LaunchPlan, rank: usize, f: &Facts, checks: &mut Vec<Check>) {
    match (plan.device, f.get("gpus").and_then(|g| g.parse::<u32>().ok())) {
        (Device::Cpu, _) => checks.push(Check::pass("gpus", "job.device = \"cpu\": none needed")),
        (Device::Cuda, Some(n)) if n >= plan.nodes[rank].nproc => {
            checks.push(Check::pass("gpus", format!("{n} GPUs")))
        }
        (Device::Cuda, n) => checks.push(Check::fail(
            "gpus",
            format!(
                "{} GPUs for nproc {}",
                n.map_or("no".to_string(), |n| n.to_string()),
                plan.nodes[rank].nproc
            ),
            "check nvidia-smi on this node, lower nproc, or set job.device = \"cpu\" for a CPU (gloo) job",
        )),
    }
}

fn hostname_check(plan: &LaunchPlan, f: &Facts, checks: &mut Vec<Check>) {
    let host = f.get("hostname").unwrap_or("?");
    match f.get("hostname_addr") {
        Some(addr) if addr.starts_with("127.") || addr == "::1" => {
            let detail = format!("hostname {host} resolves to {addr}");
            if plan.interface.is_some() {
                checks.push(Check::pass("hostname", format!("{detail}; rendezvous.interface is set")));
            } else {
                checks.push(Check::warn(
                    "hostname",
                    detail,
                    "gloo and NCCL may bind to loopback: set rendezvous.interface (or \"auto\")",
                ));
            }
        }
        Some(addr) => checks.push(Check::pass("hostname", format!("{host} resolves to {addr}"))),
        None => checks.push(Check::warn(
            "hostname",
            format!("hostname {host} does not resolve"),
            "add it to /etc/hosts or DNS",
        )),
    }
}

fn interface_check(plan: &LaunchPlan, f: &Facts, checks: &mut Vec<Check>) {
    let route = f.get("route_dev");
    match plan.interface.as_deref() {
        Some("auto") => match route {
            Some(dev) => checks.push(Check::pass("interface", format!("auto: {dev} routes to the master"))),
            None => checks.push(Check::fail(
                "interface",
                format!("auto: no route to the master address {}", plan.master.addr),
                "check the network, or set rendezvous.interface to a name",
            )),
        },
        Some(name) => match f.get("iface_exists") {
            Some("yes") => checks.push(Check::pass(
                "interface",
                match route {
                    Some(dev) if dev != name => format!("{name} exists (but {dev} routes to the master)"),
                    _ => format!("{name} exists"),
                },
            )),
            _ => checks.push(Check::fail(
                "interface",
                format!(
                    "rendezvous.interface {name} does not exist on this node{}",
                    route.map(|d| format!("; {d} routes to the master")).unwrap_or_default()
                ),
                "set rendezvous.interface to an interface of every node, or to \"auto\"",
            )),
        },
        None => checks.push(Check::pass(
            "interface",
            route.map_or("not set".to_string(), |d| format!("not set; {d} routes to the master")),
        )),
    }
}

fn resource_checks(plan: &LaunchPlan, rank: usize, f: &Facts, checks: &mut Vec<Check>) {
    let num = |k: &str| f.get(k).and_then(|v| v.parse::<u64>().ok());
    match num("shm_kb") {
        Some(kb) if kb >= SHM_MIN_KB => {
            checks.push(Check::pass("shm", format!("/dev/shm {} MiB", kb / 1024)))
        }
        Some(kb) => checks.push(Check::warn(
            "shm",
            format!("/dev/shm only {} MiB", kb / 1024),
            "raise it (docker: --shm-size; mount -o remount,size=16G /dev/shm)",
        )),
        None => checks.push(Check::warn("shm", "no /dev/shm", "mount a tmpfs on /dev/shm")),
    }
    match num("nofile") {
        Some(n) if n >= NOFILE_MIN => checks.push(Check::pass("nofile", format!("open files {n}"))),
        Some(n) => checks.push(Check::warn(
            "nofile",
            format!("open files limited to {n}"),
            format!("raise it to {NOFILE_MIN} or more (ulimit -n, limits.conf)"),
        )),
        None => {}
    }
    match num("disk_free_kb") {
        Some(kb) if kb >= DISK_MIN_KB => {
            checks.push(Check::pass("disk", format!("{} GiB free in workdir", kb / 1024 / 1024)))
        }
        Some(kb) => checks.push(Check::warn(
            "disk",
            format!("only {} MiB free in workdir", kb / 1024),
            "free space for checkpoints and logs",
        )),
        None => {}
    }
    if plan.container.is_none() && plan.uses_torch {
        checks.extend(stack_checks(f));
    }
    match num("leftovers") {
        Some(0) | None => checks.push(Check::pass("leftovers", "none")),
        Some(n) => checks.push(Check::warn(
            "leftovers",
            format!("{n} process(es) of earlier runs of this config"),
            "herd run sweeps them; or run herd kill",
        )),
    }
    if rank == plan.master.node_rank {
        if let Some(n) = num("port_in_use").filter(|n| *n > 0) {
            checks.push(Check::fail(
                "port",
                format!("the fixed master port is already in use ({n} listener)"),
                "free it, or use rendezvous.port = \"auto\"",
            ));
        }
    }
}

/// Whether a hang's stacks can be collected on the node: py-spy on the job's PATH, and the
/// kernel's leave to attach to the ranks (Yama's `ptrace_scope`: 0 lets any process of the
/// same user attach, 1 and 2 only with CAP_SYS_PTRACE, 3 nobody). Warnings: a run works
/// without, and says what it could not collect.
fn stack_checks(f: &Facts) -> Vec<Check> {
    const CAP_SYS_PTRACE: u32 = 19;
    let mut checks = Vec::new();
    let tools_missing = f.get("stack_tools_missing").map(str::trim).filter(|m| !m.is_empty());
    match (f.get("pyspy").filter(|p| !p.is_empty()), tools_missing) {
        (Some(_), Some(missing)) => checks.push(Check::warn(
            "py-spy",
            format!("found, but the node lacks {missing}, which herd's agent runs it with"),
            "install coreutils on the node",
        )),
        (Some(path), None) => checks.push(Check::pass("py-spy", path)),
        (None, _) => checks.push(Check::warn(
            "py-spy",
            "not found: the ranks' stacks cannot be collected (on a hang, after a failure, `herd stacks`)",
            "pip install py-spy in the job's environment, or put it on the nodes' PATH",
        )),
    }
    let scope = f.get("ptrace_scope").and_then(|v| v.trim().parse::<u32>().ok());
    let cap = f
        .get("cap_eff")
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|c| c >> CAP_SYS_PTRACE & 1 == 1);
    match scope {
        None | Some(0) => checks.push(Check::pass("ptrace", "allowed")),
        Some(s @ (1 | 2)) if cap => checks.push(Check::pass("ptrace", format!("ptrace_scope {s}, with CAP_SYS_PTRACE"))),
        Some(s) => checks.push(Check::warn(
            "ptrace",
            format!("kernel.yama.ptrace_scope = {s}: py-spy cannot attach to the ranks"),
            "sysctl -w kernel.yama.ptrace_scope=0, or give the job CAP_SYS_PTRACE (a container: --cap-add SYS_PTRACE)",
        )),
    }
    checks
}

/// Python, torch, CUDA and NCCL versions must be the same everywhere: fail the odd nodes.
fn version_consistency(plan: &LaunchPlan, facts: &[Facts], fast: bool) -> BTreeMap<usize, Check> {
    let keys: &[&str] = if fast { &["python", "torch"] } else { &["python", "torch", "cuda", "nccl"] };
    let mut out = BTreeMap::new();
    let reachable: Vec<(usize, &Facts)> =
        facts.iter().enumerate().filter(|(_, f)| f.unreachable.is_none()).collect();
    if let Some(container) = &plan.container {
        // Python, torch and the rest are the image's: the image must be the same build on
        // every node, which a tag does not promise.
        let known = known_values(&reachable, "image_id");
        let Some((reference, odd)) = odd_values(&known) else { return out };
        for (rank, id) in &known {
            let check = match odd.contains(rank) {
                true => Check::fail(
                    "image-build",
                    format!(
                        "{} is image {}, other nodes have {}: another build of the same name",
                        container.image,
                        short_id(id),
                        short_id(reference)
                    ),
                    "pull the same build on every node (name it by digest, IMAGE@sha256:..., to be sure)",
                ),
                false => Check::pass("image-build", format!("{} on every node", short_id(reference))),
            };
            out.insert(plan.nodes[*rank].node_rank, check);
        }
        return out;
    }
    let mut odd: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut summary = Vec::new();
    for key in keys {
        // Only nodes that know the value take part: a node where `import torch` failed has no
        // CUDA version, and its own check says why.
        let known = known_values(&reachable, key);
        let Some((reference, odd_ranks)) = odd_values(&known) else { continue };
        summary.push(format!("{key} {reference}"));
        for (rank, v) in known.iter().filter(|(r, _)| odd_ranks.contains(r)) {
            odd.entry(*rank).or_default().push(format!("{key} {v}, others {reference}"));
        }
    }
    for (rank, _) in &reachable {
        let check = match odd.get(rank) {
            Some(diffs) => Check::fail(
                "versions",
                diffs.join("; "),
                "install the same Python, torch, CUDA and NCCL on every node",
            ),
            None => Check::pass("versions", summary.join(", ")),
        };
        out.insert(plan.nodes[*rank].node_rank, check);
    }
    out
}

/// The nonempty values of fact `key`, by node (in `facts`' order).
fn known_values<'a>(reachable: &[(usize, &'a Facts)], key: &str) -> Vec<(usize, &'a str)> {
    reachable.iter().filter_map(|(r, f)| Some((*r, f.get(key).filter(|v| !v.is_empty())?))).collect()
}

/// The reference among `known` values, the most common (ties go to the first node's), and
/// the nodes whose value differs from it. `None` when no node knows the value.
fn odd_values<'a>(known: &[(usize, &'a str)]) -> Option<(&'a str, Vec<usize>)> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, v) in known {
        *counts.entry(v).or_default() += 1;
    }
    let max = *counts.values().max()?;
    let reference = known.iter().map(|(_, v)| *v).find(|v| counts[v] == max)?;
    Some((reference, known.iter().filter(|(_, v)| *v != reference).map(|(r, _)| *r).collect()))
}

/// Each node's clock against the median node's (the launching machine's clock does not
/// matter to training). A node warns only when its skew is larger than the threshold even at
/// the far end of both readings' uncertainty: nodes that share a clock never warn, however
/// slowly a loaded machine answers.
fn clock_skew(facts: &[Facts]) -> BTreeMap<usize, Check> {
    let samples: Vec<(usize, ClockSample)> =
        facts.iter().enumerate().filter_map(|(i, f)| Some((i, f.clock?))).collect();
    let mut sorted: Vec<ClockSample> = samples.iter().map(|(_, s)| *s).collect();
    sorted.sort_by(|a, b| a.offset.total_cmp(&b.offset));
    let Some(reference) = sorted.get(sorted.len() / 2).copied() else { return BTreeMap::new() };
    samples
        .into_iter()
        .map(|(i, s)| {
            let skew = s.offset - reference.offset;
            let margin = s.uncertainty + reference.uncertainty;
            let check = if skew.abs() - margin > CLOCK_SKEW_MAX {
                Check::warn(
                    "clock",
                    format!("{skew:+.2} s (± {margin:.2} s) from the other nodes"),
                    "run NTP / chrony on every node",
                )
            } else {
                Check::pass("clock", format!("{skew:+.3} s (± {margin:.3} s)"))
            };
            (i, check)
        })
        .collect()
}

/// A line that says the job's shell could not start what it was given on the node: the
/// workdir, `setup`, or an environment too large for exec. Every probe fails the same way, and
/// the check that names the cause is the one to read.
fn job_start_failure(line: &str) -> bool {
    line.starts_with("herd: cannot enter workdir")
        || line.starts_with("herd: setup failed")
        || line.contains(ARG_LIST_TOO_LONG)
}

const ARG_LIST_TOO_LONG: &str = "Argument list too long";

fn port_check(plan: &LaunchPlan, rank: usize, port: &PortReach) -> Check {
    let master = format!("{}:", plan.master.addr);
    match port {
        PortReach::Skipped(why) => Check::pass("port-reach", format!("not tested: {why}")),
        // The listener never ran: its port says nothing, the master's own checks say why.
        PortReach::NoListener(err) if job_start_failure(err) => Check::pass(
            "port-reach",
            "not tested: the master could not start the listener (see its workdir, setup and env checks)",
        ),
        PortReach::NoListener(err) if rank == plan.master.node_rank => Check::fail(
            "port-reach",
            format!("cannot listen on the master port: {err}"),
            "free the port, or use rendezvous.port = \"auto\"",
        ),
        PortReach::NoListener(_) => {
            Check::fail("port-reach", "the master could not listen", "see the master's row")
        }
        PortReach::Tested { port, results } => match results.get(&rank) {
            None | Some(Ok(())) if rank == plan.master.node_rank => {
                Check::pass("port-reach", format!("listening on {port}"))
            }
            Some(Ok(())) => Check::pass("port-reach", format!("reached {master}{port}")),
            Some(Err(e)) => Check::fail(
                "port-reach",
                format!("cannot reach {master}{port}: {e}"),
                "open the port range in the master's firewall and check the route to MASTER_ADDR",
            ),
            None => Check::pass("port-reach", "not tested"),
        },
    }
}

/// Count of checks by status, and whether anything failed.
pub fn tally(nodes: &[NodeChecks]) -> (usize, usize, usize) {
    let all = nodes.iter().flat_map(|n| &n.checks);
    let count = |s: Status| all.clone().filter(|c| c.status == s).count();
    (count(Status::Pass), count(Status::Warn), count(Status::Fail))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{self, PlanInputs};
    use std::path::Path;

    fn plan() -> LaunchPlan {
        let text = "[[nodes]]\nhost = \"n[1-3]\"\n[job]\nscript = \"t.py\"\ndevice = \"cpu\"\n[rendezvous]\ninterface = \"eth0\"\n";
        let config = crate::config::parse(Path::new("c.toml"), text).unwrap();
        plan::build(&config, &PlanInputs { cwd: "/w".into(), ..Default::default() })
    }

    fn facts(torch: &str, clock_offset: f64) -> Facts {
        let text = format!(
            "herd-fact launcher=/v/bin/torchrun\nherd-fact python=3.11.7\nherd-fact torch={torch}\n\
             herd-fact torch_import=ok\nherd-fact cuda=None\nherd-fact hostname=n\nherd-fact hostname_addr=10.0.0.1\n\
             herd-fact route_dev=eth0\nherd-fact iface_exists=yes\nherd-fact shm_kb=8000000\nherd-fact nofile=1048576\n\
             herd-fact disk_free_kb=900000000\nherd-fact leftovers=0\nherd-fact pyspy=/v/bin/py-spy\n\
             herd-fact ptrace_scope=1\nherd-fact cap_eff=000001ffffffffff\n"
        );
        let (values, other_lines) = parse_facts(&text);
        Facts {
            values,
            other_lines,
            clock: Some(ClockSample { offset: clock_offset, uncertainty: 0.01 }),
            login_ms: Some(40),
            connect_ms: 5,
            unreachable: None,
        }
    }

    fn status_of(nodes: &[NodeChecks], rank: usize, name: &str) -> Option<Status> {
        nodes[rank].checks.iter().find(|c| c.name == name).map(|c| c.status)
    }

    #[test]
    fn stacks_need_py_spy_and_leave_to_attach() {
        let f = facts("2.5.0", 0.0);
        let statuses =
            |f: &Facts| stack_checks(f).into_iter().map(|c| (c.name, c.status)).collect::<Vec<_>>();
        assert_eq!(statuses(&f), [("py-spy", Status::Pass), ("ptrace", Status::Pass)]);
        let mut no_tools = f.clone();
        no_tools.values.insert("stack_tools_missing".into(), " timeout base64".into());
        let spy = &stack_checks(&no_tools)[0];
        assert_eq!(
            (spy.status, spy.detail.as_str()),
            (Status::Warn, "found, but the node lacks timeout base64, which herd's agent runs it with")
        );
        let mut without = f.clone();
        without.values.insert("pyspy".into(), String::new());
        without.values.insert("cap_eff".into(), "0000000000000000".into());
        assert_eq!(statuses(&without), [("py-spy", Status::Warn), ("ptrace", Status::Warn)]);
        let ptrace = &stack_checks(&without)[1];
        assert_eq!(ptrace.detail, "kernel.yama.ptrace_scope = 1: py-spy cannot attach to the ranks");
        without.values.insert("ptrace_scope".into(), "0".into());
        assert_eq!(statuses(&without)[1], ("ptrace", Status::Pass));
        without.values.insert("ptrace_scope".into(), "3".into());
        without.values.insert("cap_eff".into(), "000001ffffffffff".into());
        assert_eq!(statuses(&without)[1], ("ptrace", Status::Warn), "3: nobody attaches");
    }

    /// The image on each node, the same build everywhere, and the trial container: a node
    /// without the image, a node with another build of it and a container that does not
    /// start are each named with their fix.
    #[test]
    fn with_a_container_every_node_needs_the_image_the_same_build_and_a_container_that_starts() {
        let text = "[[nodes]]\nhost = \"n[1-4]\"\n[job]\nscript = \"t.py\"\ndevice = \"cpu\"\n\
                    [container]\nimage = \"img:1\"\nruntime = \"podman\"\n";
        let config = crate::config::parse(Path::new("c.toml"), text).unwrap();
        let p = plan::build(&config, &PlanInputs { cwd: "/w".into(), ..Default::default() });
        let node = |id: &str, trial: Option<(&str, &str)>| {
            let mut f = facts("2.5.0", 0.0);
            f.values.insert("runtime".into(), "/usr/bin/podman".into());
            match id {
                "" => f.values.insert("image_error".into(), "Error: img:1: image not known".into()),
                "denied" => f.values.insert(
                    "image_error".into(),
                    "permission denied while trying to connect to the Docker daemon socket".into(),
                ),
                _ => f.values.insert("image_id".into(), id.into()),
            };
            if let Some((rc, out)) = trial {
                f.values.insert("container_rc".into(), rc.into());
                f.values.insert("container_out".into(), out.into());
            }
            f
        };
        let (a, b) = ("sha256:aaaaaaaaaaaa1111", "sha256:bbbbbbbbbbbb2222");
        let all = [
            node(a, Some(("0", ""))),
            node("", None),
            node(b, Some(("125", "Error: invalid option"))),
            node(a, Some(("127", "herd: torchrun is not in the container"))),
        ];
        let port = PortReach::Skipped("test".into());
        let nodes = evaluate(&p, &all, &port, false);
        let check = |rank: usize, name: &str| nodes[rank].checks.iter().find(|c| c.name == name).cloned();
        assert_eq!(check(0, "image").unwrap().detail, "img:1 aaaaaaaaaaaa");
        assert_eq!(check(0, "container").unwrap().status, Status::Pass);
        assert_eq!(check(0, "image-build").unwrap().status, Status::Pass);
        let missing = check(1, "image").unwrap();
        assert_eq!((missing.status, missing.detail.as_str()), (Status::Fail, "img:1 is not on this node"));
        assert!(missing.fix.unwrap().starts_with("podman pull img:1 on every node before the run (or"));
        assert!(check(1, "container").is_none() && check(1, "image-build").is_none());
        let odd = check(2, "image-build").unwrap();
        assert_eq!(odd.status, Status::Fail);
        assert!(odd.detail.contains("is image bbbbbbbbbbbb, other nodes have aaaaaaaaaaaa"), "{odd:?}");
        let refused = check(2, "container").unwrap();
        assert_eq!(refused.detail, "podman run exited 125: Error: invalid option");
        assert!(refused.fix.unwrap().contains("containers.conf"));
        let lacking = check(3, "container").unwrap();
        assert_eq!(lacking.status, Status::Fail);
        assert!(
            lacking.fix.as_deref().unwrap().starts_with("install torchrun and python3 in the image"),
            "{lacking:?}"
        );
        // An engine that cannot be used is not a missing image.
        let denied = evaluate(&p, &[node("denied", None)], &port, true);
        let check = denied[0].checks.iter().find(|c| c.name == "image").unwrap();
        assert_eq!(check.status, Status::Fail);
        assert!(check.detail.starts_with("podman cannot look at its images: permission denied"), "{check:?}");
        // `--pull` in args: a node without the image pulls it, which is worth a warning.
        let pulling = {
            let mut p = p.clone();
            p.container.as_mut().unwrap().args = vec!["--pull".into(), "missing".into()];
            p
        };
        assert_eq!(status_of(&evaluate(&pulling, &all, &port, false), 1, "image"), Some(Status::Warn));
        // A fast preflight has no trial, and checks the image all the same.
        let fast = evaluate(&p, &all, &port, true);
        assert_eq!(status_of(&fast, 1, "image"), Some(Status::Fail));
        assert_eq!(status_of(&fast, 2, "image-build"), Some(Status::Fail));
        // The trial: the job's own `run`, with the launcher and Python looked for in it.
        let trial = p.container_trial(&p.nodes[0]).unwrap();
        assert!(trial.starts_with("podman run --rm --init --name \"$HERD_CONTAINER\" "), "{trial}");
        assert!(trial.contains(" img:1 sh -c ") && trial.contains("herd-check torchrun python3"), "{trial}");
    }

    #[test]
    fn with_a_container_the_node_needs_the_runtime_not_the_launcher() {
        let text = "[[nodes]]\nhost = \"n[1-2]\"\n[job]\nscript = \"t.py\"\nsetup = \"pip install -e .\"\n[container]\nimage = \"i\"\nruntime = \"podman\"\n";
        let config = crate::config::parse(Path::new("c.toml"), text).unwrap();
        let p = plan::build(&config, &PlanInputs { cwd: "/w".into(), ..Default::default() });
        // facts.sh's $2 (the runtime) and $4 (the Python that torch is looked for with).
        let argv = crate::doctor::facts_argv(&p, &p.nodes[0], true, true);
        assert_eq!((argv[5].as_str(), argv[7].as_str()), ("podman", ""), "{:?}", &argv[4..]);
        let mut with = facts("2.5.0", 0.0);
        with.values.insert("runtime".into(), "/usr/bin/podman".into());
        with.values.insert("gpus".into(), "1".into());
        let mut without = facts("2.4.0", 0.0);
        without.values.remove("launcher");
        without.values.insert("gpus".into(), "0".into());
        let port = PortReach::Skipped("one node".into());
        for fast in [true, false] {
            let nodes = evaluate(&p, &[with.clone(), without.clone()], &port, fast);
            assert_eq!(status_of(&nodes, 0, "runtime"), Some(Status::Pass));
            assert_eq!(status_of(&nodes, 1, "runtime"), Some(Status::Fail));
            for rank in 0..2 {
                for name in ["launcher", "torch", "setup", "versions", "nccl"] {
                    assert_eq!(status_of(&nodes, rank, name), None, "{name} on node {rank}");
                }
            }
            if !fast {
                assert_eq!(
                    status_of(&nodes, 1, "gpus"),
                    Some(Status::Fail),
                    "the node's GPUs are still checked"
                );
            }
        }
    }

    #[test]
    fn a_command_job_is_checked_for_torch_only_when_it_names_its_python() {
        let build = |job: &str| {
            let text = format!(
                "[[nodes]]\nhost = \"n[1-2]\"\n[job]\nlauncher = \"command\"\n{job}device = \"cpu\"\n"
            );
            let config = crate::config::parse(Path::new("c.toml"), &text).unwrap();
            plan::build(&config, &PlanInputs { cwd: "/w".into(), ..Default::default() })
        };
        // A node without torch, whose launcher is the script itself.
        let mut no_torch = facts("", 0.0);
        for key in ["torch", "torch_import", "python"] {
            no_torch.values.remove(key);
        }
        no_torch.values.insert("launcher".into(), "/w/run.sh".into());
        let port = PortReach::Skipped("test".into());
        let plain = build("script = \"./run.sh\"\n");
        assert_eq!(plain.launcher_program, "./run.sh");
        // facts.sh's $4: the Python that torch is looked for with, none.
        let python = |p: &LaunchPlan| crate::doctor::facts_argv(p, &p.nodes[0], false, true)[7].clone();
        assert_eq!(python(&plain), "");
        for fast in [true, false] {
            let nodes = evaluate(&plain, &[no_torch.clone(), no_torch.clone()], &port, fast);
            assert!(
                nodes.iter().all(|n| n.checks.iter().all(|c| c.status != Status::Fail)),
                "fast={fast}: {nodes:?}"
            );
            assert_eq!(status_of(&nodes, 0, "torch"), None);
        }
        // Naming the interpreter says the job needs it, and torch with it.
        let with_python = build("script = \"train.py\"\npython = \"/opt/v/bin/python\"\n");
        assert_eq!(with_python.launcher_program, "train.py");
        assert_eq!(python(&with_python), "/opt/v/bin/python");
        let nodes = evaluate(&with_python, &[no_torch.clone(), no_torch], &port, false);
        assert_eq!(status_of(&nodes, 0, "torch"), Some(Status::Fail));
    }

    #[test]
    fn a_fast_preflight_imports_torch_on_the_nodes_new_to_the_run_only() {
        let p = plan();
        let mut broken = facts("2.15.0", 0.0);
        broken.values.insert("torch_import".into(), "ImportError('broken')".into());
        let f = [facts("2.15.0", 0.0), facts("2.15.0", 0.0), broken];
        let port = PortReach::Skipped("test".into());
        // The fast checks leave torch out: the broken node passes.
        assert_eq!(tally(&evaluate(&p, &f, &port, true)).2, 0);
        // Node 2 is new to the run (a promoted spare): its probe imported torch, and it fails.
        let nodes = evaluate_with(&p, &f, &port, true, &[2]);
        assert_eq!(status_of(&nodes, 2, "torch"), Some(Status::Fail));
        assert_eq!(status_of(&nodes, 0, "torch"), None);
        assert_eq!(status_of(&nodes, 2, "gpus"), None, "the rest stays fast");
        let options = crate::doctor::ProbeOptions {
            fast: true,
            test_port: false,
            presweep: None,
            import_torch: vec![2],
        };
        // facts.sh's $1 (fast or full) and $6 (import torch or not), in each probe's argv.
        let facts = |rank: usize| {
            let argv = crate::doctor::probe_argv(&p, &p.nodes[rank], &options);
            let at = argv.iter().position(|w| w == "herd-facts").unwrap();
            (argv[at + 1].clone(), argv[at + 6].clone())
        };
        assert_eq!(facts(2), ("fast".to_string(), "import".to_string()));
        assert_eq!(facts(0), ("fast".to_string(), String::new()));
    }

    #[test]
    fn facts_and_other_lines_are_told_apart() {
        let (values, other) =
            parse_facts("herd-fact a=1\nherd: setup failed with exit 2\nherd-fact b=x=y\n\n");
        assert_eq!(values.get("a").map(String::as_str), Some("1"));
        assert_eq!(values.get("b").map(String::as_str), Some("x=y"));
        assert_eq!(other, vec!["herd: setup failed with exit 2"]);
    }

    #[test]
    fn the_odd_torch_version_fails_on_that_node_only() {
        let p = plan();
        let f = [facts("2.15.0", 0.0), facts("2.15.0", 0.0), facts("2.14.1", 0.0)];
        let nodes = evaluate(&p, &f, &PortReach::Skipped("test".into()), false);
        assert_eq!(status_of(&nodes, 0, "versions"), Some(Status::Pass));
        assert_eq!(status_of(&nodes, 1, "versions"), Some(Status::Pass));
        assert_eq!(status_of(&nodes, 2, "versions"), Some(Status::Fail));
        let detail = &nodes[2].checks.iter().find(|c| c.name == "versions").unwrap().detail;
        assert_eq!(detail, "torch 2.14.1, others 2.15.0");
    }

    #[test]
    fn an_unreachable_node_gets_only_its_ssh_failure() {
        let p = plan();
        let down = Facts { unreachable: Some("Connection timed out".into()), ..Facts::default() };
        let f = [facts("2.15.0", 0.0), down, facts("2.15.0", 0.0)];
        let nodes = evaluate(&p, &f, &PortReach::Skipped("a node is unreachable".into()), false);
        assert_eq!(nodes[1].checks.len(), 1);
        assert_eq!(nodes[1].checks[0].status, Status::Fail);
        assert_eq!(tally(&nodes).2, 1);
    }

    #[test]
    fn clock_skew_over_a_second_warns() {
        let p = plan();
        let f = [facts("2.15.0", 0.1), facts("2.15.0", 0.2), facts("2.15.0", 2.5)];
        let nodes = evaluate(&p, &f, &PortReach::Skipped("test".into()), false);
        assert_eq!(status_of(&nodes, 0, "clock"), Some(Status::Pass));
        assert_eq!(status_of(&nodes, 2, "clock"), Some(Status::Warn));
    }

    #[test]
    fn nodes_that_share_a_clock_never_warn_however_slowly_they_answer() {
        let p = plan();
        // One kernel clock, a loaded machine: readings 1.6 s apart, each answered within a
        // 2 s round trip. This warned "-1.59 s from the other nodes" before.
        let at = |offset, uncertainty| {
            let mut f = facts("2.15.0", 0.0);
            f.clock = Some(ClockSample { offset, uncertainty });
            f
        };
        let f = [at(0.0, 1.0), at(-1.59, 1.0), at(0.2, 0.9)];
        let nodes = evaluate(&p, &f, &PortReach::Skipped("test".into()), false);
        for rank in 0..3 {
            assert_eq!(status_of(&nodes, rank, "clock"), Some(Status::Pass), "{:?}", nodes[rank]);
        }
        // A node 5 s off, read within 10 ms, is off whatever the uncertainty.
        let f = [at(0.0, 0.01), at(0.02, 0.01), at(5.0, 0.01)];
        let nodes = evaluate(&p, &f, &PortReach::Skipped("test".into()), false);
        assert_eq!(status_of(&nodes, 2, "clock"), Some(Status::Warn));
        assert_eq!(status_of(&nodes, 0, "clock"), Some(Status::Pass));
    }

    #[test]
    fn the_sample_is_taken_at_the_midpoint_of_the_round_trip() {
        let t0 = std::time::UNIX_EPOCH + std::time::Duration::from_secs(100);
        let t1 = t0 + std::time::Duration::from_secs(2);
        let s = ClockSample::new(t0, t1, 101.5);
        assert!((s.offset - 0.5).abs() < 1e-9 && (s.uncertainty - 1.0).abs() < 1e-9, "{s:?}");
    }

    #[test]
    fn a_slow_login_shell_is_a_warning_with_its_fix() {
        let p = plan();
        let mut slow = facts("2.15.0", 0.0);
        slow.login_ms = Some(35_000);
        let nodes = evaluate(
            &p,
            &[slow, facts("2.15.0", 0.0), facts("2.15.0", 0.0)],
            &PortReach::Skipped("t".into()),
            false,
        );
        let ssh = nodes[0].checks.iter().find(|c| c.name == "ssh").unwrap();
        assert_eq!(ssh.status, Status::Warn);
        assert!(ssh.detail.contains("its agent answered 35.0 s after it was started"), "{ssh:?}");
        assert!(!ssh.detail.contains("login shell took"), "blames the shell alone: {ssh:?}");
        assert!(ssh.fix.as_deref().unwrap().contains("non-interactive"), "{ssh:?}");
        assert_eq!(status_of(&nodes, 1, "ssh"), Some(Status::Pass));
    }

    #[test]
    fn a_worker_that_cannot_reach_the_master_port_fails() {
        let p = plan();
        let f = [facts("2.15.0", 0.0), facts("2.15.0", 0.0), facts("2.15.0", 0.0)];
        let results = [(1, Ok(())), (2, Err("Connection refused".to_string()))].into_iter().collect();
        let nodes = evaluate(&p, &f, &PortReach::Tested { port: 20001, results }, true);
        assert_eq!(status_of(&nodes, 0, "port-reach"), Some(Status::Pass));
        assert_eq!(status_of(&nodes, 1, "port-reach"), Some(Status::Pass));
        assert_eq!(status_of(&nodes, 2, "port-reach"), Some(Status::Fail));
        // The fast subset leaves out the slow and the advisory checks.
        assert_eq!(status_of(&nodes, 0, "torch"), None);
        assert_eq!(status_of(&nodes, 0, "clock"), None);
    }

    #[test]
    fn the_leftovers_fact_counts_only_the_configs_processes_whose_agent_is_gone() {
        use crate::marker::{Marker, RUN_VAR};
        use crate::remote::agent::AgentInvocation;
        use crate::remote::shell::env_block;
        use std::io::{Read, Write};
        use std::process::{Command, Stdio};
        let p = plan();
        let marker = |run: &str| Marker::config(&p.config_key).run(run).attempt(0).node(0).value();
        // The agent as the doctor starts it, with `job` and the marker of `run`.
        let agent = |run: &str, job: String| {
            let m = marker(run);
            let inv = AgentInvocation {
                grace_secs: 1,
                heartbeat_secs: 60,
                fence_secs: None,
                marker: format!("{RUN_VAR}={m}"),
                job: job.into(),
                cleanup: None,
                presweep: None,
                report_ports: false,
                probe: None,
            };
            let argv = inv.local_argv();
            let mut child = Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            child.stdin.as_mut().unwrap().write_all(&env_block([(RUN_VAR, m.as_str())])).unwrap();
            child
        };
        // A leftover: marked, and no agent.
        let mut old = Command::new("sleep")
            .arg("62")
            .env(RUN_VAR, marker("20000101-000000-dead"))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        // A live run of the config, under its agent.
        let mut live = agent("20000101-000001-live", "sleep 62".into());
        let mut probe = agent(
            crate::doctor::doctor_run_id(),
            format!("sleep 0.3; {}", crate::doctor::facts_command(&p, &p.nodes[0], false)),
        );
        let mut out = String::new();
        probe.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        drop(probe.stdin.take());
        let _ = probe.wait();
        drop(live.stdin.take());
        let _ = live.wait();
        old.kill().unwrap();
        let _ = old.wait();
        let (values, _) = parse_facts(&out);
        assert_eq!(values.get("leftovers").map(String::as_str), Some("1"), "{out}");
    }
}
