//! Preflight checks across the cluster (`herd doctor`, and the fast subset `herd run` does
//! before it starts anything). Each node is probed through the same agent that runs jobs, so
//! the probe sees exactly what the job will: the workdir, `setup`, the env. The probe prints
//! `herd-fact name=value` lines; `checks` turns them into verdicts.

pub mod checks;
pub mod net;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, oneshot};

use crate::config::PortSpec;
use crate::fleet::Fleet;
use crate::plan::{AttemptValues, LaunchPlan, NodePlan};
use crate::port::{self, PortError};
use crate::remote;
use crate::remote::agent::AgentInvocation;
use crate::remote::protocol::{AgentMessage, Control};
use crate::transport::session::{AgentSession, ControlLine, Messages};
use crate::transport::{Connection, Started};

pub use checks::{evaluate, Check, ClockSample, Facts, NodeChecks, PortReach, Status};

/// How long one probe may take once the node's login shell has started it (imports of torch
/// included, on a node busy with the other probes); the login itself has `ssh.login_timeout`.
const PROBE_WORK: Duration = Duration::from_secs(60);

/// How long one probe may take in all: a slow login (conda, pyenv, a cold NFS home) is no
/// failed probe.
fn probe_limit(plan: &LaunchPlan) -> Duration {
    plan.login_timeout + PROBE_WORK
}
/// How long a worker may take to connect to the master's listener, which is up by then.
const REACH_TIMEOUT: Duration = Duration::from_secs(5);
/// The run id the doctor's probes carry in their marker and their trial container's name:
/// `doctor-` and a random part, the same for the whole process, so that two doctors of one
/// config on a node neither collide on the trial's name nor remove each other's.
pub fn doctor_run_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| format!("doctor-{:04x}", rand::random::<u16>()))
}
/// What the master's probe prints once its test listener is up, or when it cannot listen
/// (see `port_test.py`).
const LISTENING: &str = "herd-listening";
const LISTEN_FAILED: &str = "herd-listen-failed";
/// What the master's probe prints once its facts are in (its listener lives on).
const FACTS_DONE: &str = "herd-facts-done";

/// The command that prints a node's facts (`facts.sh`). `fast` leaves out what costs time
/// (importing torch).
pub fn facts_command(plan: &LaunchPlan, node: &NodePlan, fast: bool) -> String {
    remote::shell::command_line(facts_argv(plan, node, fast, !fast))
}

/// The argv of `facts.sh` (after `procs.sh`, in `sh`) on `node`, importing torch when
/// `import_torch` (a fast probe of a node new to the run). Its arguments are in the order of
/// its header.
pub(crate) fn facts_argv(plan: &LaunchPlan, node: &NodePlan, fast: bool, import_torch: bool) -> Vec<String> {
    let (runtime, python, image, trial) = match &plan.container {
        // The launcher, Python and torch are in the image: the node needs the runtime, the
        // image, and a container that starts (a full probe only: it takes a second).
        Some(c) => {
            let trial = if fast { None } else { plan.container_trial(node) };
            (c.runtime.as_str(), "", c.image.as_str(), trial.unwrap_or_default())
        }
        None => ("", if plan.uses_torch { plan.python.as_str() } else { "" }, "", String::new()),
    };
    let interface = plan.interface.as_deref().filter(|i| *i != "auto").unwrap_or("");
    let port = match plan.master.port {
        PortSpec::Fixed(p) => p.to_string(),
        PortSpec::Auto => String::new(),
    };
    let args = [
        if fast { "fast" } else { "full" },
        runtime,
        &plan.launcher_program,
        python,
        remote::scripts::FACTS_PY,
        if import_torch { "import" } else { "" },
        &plan.master.addr,
        interface,
        &crate::marker::Marker::config(&plan.config_key).entry(),
        &port,
        image,
        &trial,
    ];
    remote::shell::script_argv(remote::scripts::FACTS_SCRIPT, "herd-facts", args)
}

/// The argv of one node's probe (`probe.sh`): its facts and, where the env gives a master
/// port (0: none to test), its side of the reachability test (`port_test.py`). The master's
/// listener bounds itself, for a herd that is gone, at twice the probe's limit.
fn probe_argv(plan: &LaunchPlan, node: &NodePlan, options: &ProbeOptions) -> Vec<String> {
    let (role, secs) = match node.node_rank == plan.master.node_rank {
        true => ("master", probe_limit(plan) * 2),
        false => ("worker", REACH_TIMEOUT),
    };
    let secs = secs.as_secs().to_string();
    let args =
        [role, &plan.python, remote::scripts::PORT_TEST_PY, &plan.master.addr, &secs].map(String::from);
    let facts = facts_argv(plan, node, options.fast, options.imports_torch(node.node_rank));
    remote::shell::script_argv(remote::scripts::PROBE_SCRIPT, "herd-probe", args.into_iter().chain(facts))
}

/// What a probe printed, and what herd measured of the node on the way.
#[derive(Debug, Clone, Default)]
pub struct Probed {
    pub out: String,
    /// From starting the agent to its first word: the node's login shell (its init: conda,
    /// pyenv, modules) and the agent's start.
    pub login_ms: Option<u64>,
    pub clock: Option<ClockSample>,
    /// What the agent's presweep stopped, as it printed it.
    pub swept: Vec<String>,
}

/// What a node's probe tells the doctor while it runs.
#[derive(Debug)]
enum Said {
    /// The master's ports in use (`None`: its socket tables cannot be read).
    Ports(Option<std::collections::BTreeSet<u16>>),
    /// The master's listener is up.
    Listening,
    /// The master's facts are in; its listener lives on.
    FactsDone,
}

/// One node's probe: one login, one agent. It waits for its env (which holds the master port
/// to test, or 0) before it starts anything; then herd asks for its clock. It ends when its
/// output does, or, for the master (whose listener lives on), when `close` fires.
/// An agent whose invocation has a probe phase (`inv.probe`: the first attempt's job agent of
/// `herd run`) runs the probe before its job, in the same login: it is handed back once the
/// probe is done, waiting for the job's env (see `probe_phase`).
#[allow(clippy::too_many_arguments)]
async fn probe_node(
    conn: Arc<Connection>,
    inv: AgentInvocation,
    early: Option<Started>,
    env: oneshot::Receiver<Vec<u8>>,
    close: Option<oneshot::Receiver<()>>,
    said: mpsc::UnboundedSender<(usize, Said)>,
    rank: usize,
    limit: Duration,
) -> (Result<Probed, String>, Option<Started>) {
    let session = match AgentSession::open(early, &conn, &inv).await {
        Ok(session) => session,
        Err(e) => return (Err(e.to_string()), None),
    };
    let mut probe = Probe {
        probed: Probed::default(),
        asked_at: None,
        out: Vec::new(),
        said,
        rank,
        started_at: session.started_at,
    };
    if inv.probe.is_some() {
        return probe_phase(probe, session, inv, env, close, limit).await;
    }
    let AgentSession { mut control, mut messages, output, handle, .. } = session;
    let talk = probe.talk(&mut control, &mut messages, output, env, close);
    let talked = tokio::time::timeout(limit, talk).await;
    drop(control);
    let _ = tokio::time::timeout(Duration::from_secs(5), handle.wait()).await;
    let result = match talked {
        Ok(()) => Ok(probe.result()),
        Err(_) => Err(no_answer(limit)),
    };
    (result, None)
}

/// The probe phase of a job agent (see `probe_node`): its probe's lines come up as messages,
/// its end as `Probed` (or, on the master with a listener, `close`). The agent is handed back
/// as what is left of `inv` to do (its job, once its env comes); it ends if the phase did not
/// finish (its probe is then ended with it, as its stdin closes).
async fn probe_phase(
    mut probe: Probe,
    mut session: AgentSession,
    inv: AgentInvocation,
    env: oneshot::Receiver<Vec<u8>>,
    close: Option<oneshot::Receiver<()>>,
    limit: Duration,
) -> (Result<Probed, String>, Option<Started>) {
    let phase = probe.phase(&mut session.control, &mut session.messages, env, close);
    match tokio::time::timeout(limit, phase).await {
        Ok(true) => {
            let job = AgentInvocation { probe: None, presweep: None, report_ports: false, ..inv };
            (Ok(probe.result()), Some(session.into_started(job)))
        }
        // The agent ended: what its probe said is all there is.
        Ok(false) => (Ok(probe.result()), None),
        Err(_) => (Err(no_answer(limit)), None),
    }
}

/// What `slot`'s sender sends (`None`: it was dropped), once: the slot is empty after, and an
/// empty slot never fires. Cancel-safe: a `select!` that takes another branch keeps it.
async fn once<T>(slot: &mut Option<oneshot::Receiver<T>>) -> Option<T> {
    let Some(rx) = slot else { return std::future::pending().await };
    let got = rx.await.ok();
    *slot = None;
    got
}

fn no_answer(limit: Duration) -> String {
    format!("no answer within {} s", limit.as_secs())
}

/// One node's probe as it runs: what it has said so far.
struct Probe {
    probed: Probed,
    /// When herd asked for the node's clock.
    asked_at: Option<SystemTime>,
    /// Its output, but for the lines that tell the doctor how it goes.
    out: Vec<u8>,
    said: mpsc::UnboundedSender<(usize, Said)>,
    rank: usize,
    started_at: tokio::time::Instant,
}

impl Probe {
    /// Until both the agent's messages and the probe's output have ended: the env down when
    /// it is known, the clock asked for, `term` when the doctor closes the probe.
    async fn talk(
        &mut self,
        control: &mut ControlLine,
        messages: &mut Messages,
        output: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
        env: oneshot::Receiver<Vec<u8>>,
        mut close: Option<oneshot::Receiver<()>>,
    ) {
        let mut output = BufReader::new(output).lines();
        let mut env = Some(env);
        let (mut agent_open, mut output_open) = (true, true);
        while agent_open || output_open {
            tokio::select! {
                message = messages.next(), if agent_open => match message {
                    Some(message) => self.heard(message),
                    None => agent_open = false,
                },
                line = output.next_line(), if output_open => match line {
                    Ok(Some(line)) => self.printed(line),
                    _ => output_open = false,
                },
                block = once(&mut env) => self.start(control, block).await,
                _ = once(&mut close) => drop(control.send(&Control::Term).await),
            }
        }
    }

    /// A probe phase (see `probe_phase`) until its probe is done (`true`) or the agent ended
    /// (`false`). The env down when it is known, which the agent answers with its clock; `close`
    /// is the doctor's word that the master's listener has served, which lives on until the
    /// job's env ends it.
    async fn phase(
        &mut self,
        control: &mut ControlLine,
        messages: &mut Messages,
        env: oneshot::Receiver<Vec<u8>>,
        mut close: Option<oneshot::Receiver<()>>,
    ) -> bool {
        let mut env = Some(env);
        loop {
            tokio::select! {
                message = messages.next() => match message {
                    Some(AgentMessage::Fact(line)) => self.printed(line),
                    // The agent's own word on a probe that could not start (`setsid` missing):
                    // the facts' other lines, where the checks look for why.
                    Some(AgentMessage::Other(line)) => self.printed(line),
                    Some(AgentMessage::Probed(_)) => return true,
                    Some(message) => self.heard(message),
                    None => return false,
                },
                block = once(&mut env) => {
                    match block {
                        Some(block) => {
                            self.asked_at = Some(SystemTime::now());
                            let _ = control.send(&Control::Env(block)).await;
                        }
                        None => drop(control.send(&Control::Term).await),
                    }
                }
                _ = once(&mut close) => return true,
            }
        }
    }

    /// What the probe printed and what herd measured on the way.
    fn result(&mut self) -> Probed {
        let out = String::from_utf8_lossy(&std::mem::take(&mut self.out)).into_owned();
        Probed { out, ..std::mem::take(&mut self.probed) }
    }

    /// The env down, then the question of the node's time; no env: the doctor gave up on this
    /// probe before it started, and its agent ends.
    async fn start(&mut self, control: &mut ControlLine, block: Option<Vec<u8>>) {
        let Some(block) = block else {
            let _ = control.send(&Control::Term).await;
            return;
        };
        if control.send(&Control::Env(block)).await.is_ok() {
            // NTP-style: the question's time and the answer's bracket the node's reading.
            self.asked_at = Some(SystemTime::now());
            let _ = control.send(&Control::Clock).await;
        }
    }

    fn heard(&mut self, message: AgentMessage) {
        match message {
            AgentMessage::Up => self.probed.login_ms = Some(self.started_at.elapsed().as_millis() as u64),
            AgentMessage::Ports(in_use) => {
                let _ = self.said.send((self.rank, Said::Ports(in_use)));
            }
            AgentMessage::Swept(text) => self.probed.swept.push(text),
            AgentMessage::Clock(remote) => {
                if let Some(t0) = self.asked_at {
                    self.probed.clock = Some(ClockSample::new(t0, SystemTime::now(), remote));
                }
            }
            _ => {}
        }
    }

    fn printed(&mut self, line: String) {
        let said = match line.as_str() {
            LISTENING => Said::Listening,
            FACTS_DONE => Said::FactsDone,
            _ => {
                self.out.extend_from_slice(line.as_bytes());
                self.out.push(b'\n');
                return;
            }
        };
        let _ = self.said.send((self.rank, said));
    }
}

/// How the doctor probes: what `herd doctor` does, and the subset `herd run` checks first.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// Leave out what costs time (importing torch) and what only advises.
    pub fast: bool,
    /// Test that every node reaches the master port (chosen on the master, when `auto`, from
    /// the ports it reports in use).
    pub test_port: bool,
    /// A sweep each probe's agent runs before anything else (`herd run`'s leftovers).
    pub presweep: Option<String>,
    /// Node ranks whose probe imports torch even when `fast`: the nodes new to a run (a
    /// promoted spare), which no attempt has tried yet.
    pub import_torch: Vec<usize>,
}

impl ProbeOptions {
    /// Whether node rank `node_rank`'s probe imports torch.
    pub fn imports_torch(&self, node_rank: usize) -> bool {
        !self.fast || self.import_torch.contains(&node_rank)
    }
}

/// Everything `herd doctor` (or `herd run`'s preflight) found.
pub struct Report {
    pub nodes: Vec<NodeChecks>,
    /// Per node: the interface that routes to the master (for `interface = "auto"`).
    pub route_devs: Vec<Option<String>>,
    /// The master port tested (the one the run's first attempt is to use); the error when
    /// none could be chosen.
    pub port: Option<Result<u16, PortError>>,
    /// Per node: what its probe's presweep stopped.
    pub swept: Vec<Vec<String>>,
    /// Per node, the job agent whose probe phase this was, handed back waiting for its job's
    /// env (see `probe_node`); `None` where the probe had its own agent, or the phase did not
    /// finish.
    pub agents: Vec<Option<Started>>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.nodes.iter().all(|n| n.checks.iter().all(|c| c.status != Status::Fail))
    }
}

/// The agent of one node's probe.
pub fn probe_invocation(plan: &LaunchPlan, node: &NodePlan, options: &ProbeOptions) -> AgentInvocation {
    let values = AttemptValues { run_id: doctor_run_id(), attempt: 0, master_port: 0, interfaces: &[] };
    // With [container], setup is for inside the image: the probes run on the node itself.
    let job = remote::shell::job_snippet(
        &plan.workdir,
        plan.setup.as_deref().filter(|_| plan.container.is_none()),
        &remote::shell::command_line(probe_argv(plan, node, options)),
    );
    AgentInvocation {
        grace_secs: 1,
        // A full probe's trial container (see `LaunchPlan::container_trial`), should the probe
        // be stopped while it runs: its killed client would leave it running.
        cleanup: if options.fast { None } else { plan.container_cleanup(node, &values) },
        presweep: options.presweep.clone().map(|sweep| plan.with_engine_env(node, sweep)),
        report_ports: options.test_port
            && plan.master.port == PortSpec::Auto
            && node.node_rank == plan.master.node_rank,
        ..plan.agent(plan.marker(node, &values), job)
    }
}

/// Probe every node at once over its open connection (`None` where connecting failed, with
/// the error): one login per node, for the facts and the reachability test together. `early`
/// holds the probes' agents already started (`probe_invocation`), by node; the others start
/// here.
pub async fn diagnose(
    plan: &LaunchPlan,
    fleet: &Fleet,
    options: &ProbeOptions,
    mut early: Vec<Option<Started>>,
) -> Report {
    let started = Instant::now();
    let all_connected = fleet.links().iter().all(|l| l.conn.is_ok());
    let mut probes = Probes::new(plan, options.test_port && plan.nnodes() > 1 && all_connected, options);
    let (said_tx, mut said) = mpsc::unbounded_channel();
    let mut agents: Vec<Option<Started>> = plan.nodes.iter().map(|_| None).collect();
    let shared = remote::agent::SharedTexts::default();
    let mut nodes = fleet.spawn_each(|rank, conn| {
        let agent = early.get_mut(rank).and_then(Option::take);
        let inv = match &agent {
            Some(a) if a.invocation.probe.is_some() => a.invocation.clone(),
            _ => shared.invocation(probe_invocation(plan, &plan.nodes[rank], options)),
        };
        let (env, close) = probes.links(rank);
        let (conn, said_tx, limit) = (conn.clone(), said_tx.clone(), probe_limit(plan));
        Some(probe_node(conn, inv, agent, env, close, said_tx, rank, limit))
    });
    drop(said_tx);
    // The master's agent reports its ports (see `probe_invocation`): herd chooses from them.
    let master = plan.master.node_rank;
    let choosing =
        fleet.conn(master).is_some() && probe_invocation(plan, &plan.nodes[master], options).report_ports;
    probes.first_envs(choosing);
    loop {
        tokio::select! {
            Some((_, what)) = said.recv() => probes.said(what),
            ended = nodes.next() => match ended {
                Some((rank, (result, agent))) => {
                    agents[rank] = agent;
                    probes.ended(rank, result);
                }
                None => break,
            },
        }
        probes.close_when_done();
    }
    tracing::debug!("preflight took {:?}", started.elapsed());
    let (facts, swept) = facts_of(plan, fleet, std::mem::take(&mut probes.results));
    let reach_result = match &probes.port {
        _ if !options.test_port => PortReach::Skipped("not tested".into()),
        _ if plan.nnodes() < 2 => PortReach::Skipped("one node".into()),
        _ if !all_connected => PortReach::Skipped("a node is unreachable".into()),
        None | Some(Err(_)) => PortReach::Skipped("no free port to test".into()),
        Some(Ok(_)) if !probes.listening => PortReach::NoListener(no_listener(&facts[master])),
        Some(Ok(p)) => PortReach::Tested {
            port: *p,
            results: probes.workers.iter().map(|&w| (w, reach_of(&facts[w]))).collect(),
        },
    };
    let nodes = checks::evaluate_with(plan, &facts, &reach_result, options.fast, &options.import_torch);
    let route_devs = facts.iter().map(|f| f.get("route_dev").map(str::to_string)).collect();
    Report { nodes, route_devs, port: probes.port, swept, agents }
}

/// Why the master has no listener: what its probe said, or its last word (the probe did not
/// start: workdir, setup, env), or why it could not be reached.
fn no_listener(master: &Facts) -> String {
    let failed = format!("{LISTEN_FAILED} ");
    master
        .other_lines
        .iter()
        .find_map(|l| l.strip_prefix(&failed).map(str::to_string))
        .or_else(|| master.other_lines.iter().rev().find(|l| !l.trim().is_empty()).cloned())
        .or_else(|| master.unreachable.clone())
        .unwrap_or_else(|| "no listener".into())
}

/// Every node's facts from its probe's result (or its connection's error), and what each
/// probe's presweep stopped.
fn facts_of(
    plan: &LaunchPlan,
    fleet: &Fleet,
    results: Vec<Option<Result<Probed, String>>>,
) -> (Vec<Facts>, Vec<Vec<String>>) {
    let mut swept = vec![Vec::new(); plan.nnodes()];
    let facts = (plan.nodes.iter().zip(results))
        .map(|(node, result)| {
            let link = &fleet.links()[node.node_rank];
            let base = Facts {
                unreachable: link.conn.as_ref().err().cloned(),
                connect_ms: link.connect_ms,
                ..Facts::default()
            };
            match result {
                None => base,
                Some(Err(e)) => Facts { unreachable: Some(format!("probe failed: {e}")), ..base },
                Some(Ok(probed)) => {
                    swept[node.node_rank] = probed.swept;
                    let (values, other_lines) = checks::parse_facts(&probed.out);
                    Facts { values, other_lines, clock: probed.clock, login_ms: probed.login_ms, ..base }
                }
            }
        })
        .collect();
    (facts, swept)
}

/// The probes of one diagnosis while they run: each one's env, sent when its master port is
/// known (fixed, chosen from the master's report, or none: 0), and what came back.
struct Probes<'p> {
    plan: &'p LaunchPlan,
    /// Whether the workers test that they reach the master's port.
    reach: bool,
    master: usize,
    workers: Vec<usize>,
    envs: Vec<Option<oneshot::Sender<Vec<u8>>>>,
    /// Ends the master's listener, with `reach`.
    close_master: Option<oneshot::Sender<()>>,
    port: Option<Result<u16, PortError>>,
    results: Vec<Option<Result<Probed, String>>>,
    listening: bool,
    master_facts: bool,
}

impl<'p> Probes<'p> {
    fn new(plan: &'p LaunchPlan, reach: bool, options: &ProbeOptions) -> Probes<'p> {
        let (n, master) = (plan.nnodes(), plan.master.node_rank);
        Probes {
            plan,
            reach,
            master,
            workers: (0..n).filter(|r| *r != master).collect(),
            envs: (0..n).map(|_| None).collect(),
            close_master: None,
            port: match plan.master.port {
                PortSpec::Fixed(p) if options.test_port => Some(Ok(p)),
                _ => None,
            },
            results: (0..n).map(|_| None).collect(),
            listening: false,
            master_facts: false,
        }
    }

    /// Node `rank`'s env to come and, for the master with `reach`, the end of its listener.
    fn links(&mut self, rank: usize) -> (oneshot::Receiver<Vec<u8>>, Option<oneshot::Receiver<()>>) {
        let (env_tx, env_rx) = oneshot::channel();
        self.envs[rank] = Some(env_tx);
        let close = (rank == self.master && self.reach).then(|| {
            let (tx, rx) = oneshot::channel();
            self.close_master = Some(tx);
            rx
        });
        (env_rx, close)
    }

    /// The envs known at once: the master's, unless its port is chosen from its report; the
    /// workers', port 0, when they test nothing.
    fn first_envs(&mut self, choosing: bool) {
        if !choosing {
            self.send_env(self.master, if self.reach { port_value(&self.port) } else { 0 });
        }
        if !self.reach {
            self.workers_env(0);
        }
    }

    fn send_env(&mut self, rank: usize, port: u16) {
        if let Some(tx) = self.envs[rank].take() {
            let values =
                AttemptValues { run_id: doctor_run_id(), attempt: 0, master_port: port, interfaces: &[] };
            let _ = tx.send(self.plan.nodes[rank].env_block(&values));
        }
    }

    fn workers_env(&mut self, port: u16) {
        for w in self.workers.clone() {
            self.send_env(w, port);
        }
    }

    fn said(&mut self, what: Said) {
        match what {
            Said::Ports(in_use) => {
                let (spec, range) = (self.plan.master.port, self.plan.master.port_range);
                let chosen = port::choose(spec, range, in_use.as_ref(), &Default::default());
                let p = chosen.as_ref().copied().unwrap_or(0);
                self.port = Some(chosen);
                self.send_env(self.master, if self.reach { p } else { 0 });
                if self.reach && p == 0 {
                    self.workers_env(0);
                }
            }
            Said::Listening => {
                self.listening = true;
                self.workers_env(port_value(&self.port));
            }
            Said::FactsDone => self.master_facts = true,
        }
    }

    fn ended(&mut self, rank: usize, result: Result<Probed, String>) {
        self.results[rank] = Some(result);
        // The master's probe ended without a listener: the workers test nothing.
        if rank == self.master {
            self.workers_env(0);
        }
    }

    /// The listener has served its purpose once the master's facts are in and every worker
    /// has answered.
    fn close_when_done(&mut self) {
        if self.master_facts && self.workers.iter().all(|w| self.results[*w].is_some()) {
            if let Some(tx) = self.close_master.take() {
                let _ = tx.send(());
            }
        }
    }
}

fn port_value(port: &Option<Result<u16, PortError>>) -> u16 {
    match port {
        Some(Ok(p)) => *p,
        _ => 0,
    }
}

/// A worker's reachability answer, from the lines its probe printed.
fn reach_of(f: &Facts) -> Result<(), String> {
    if let Some(e) = &f.unreachable {
        return Err(e.clone());
    }
    if f.other_lines.iter().any(|l| l == "herd-reached") {
        return Ok(());
    }
    Err(f
        .other_lines
        .iter()
        .find_map(|l| l.strip_prefix("herd-unreached "))
        .or_else(|| f.other_lines.last().map(String::as_str))
        .unwrap_or("no answer")
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The master's probe is herd's longest command (the probe, the port test and the facts
    /// with the process functions, each once, quoted inside quotes). Its line for the login
    /// shell (`remote::shell::for_login_shell`) must stay one argument of `$SHELL -c`, which Linux
    /// takes up to 128 KiB.
    #[test]
    fn the_masters_probe_fits_one_login_shell_argument() {
        let text = "[[nodes]]\nhost = \"n[1-3]\"\n[job]\nscript = \"t.py\"\ndevice = \"cpu\"\n\
            setup = \"source /opt/venv/bin/activate\"\n[rendezvous]\ninterface = \"eth0\"\n";
        let config = crate::config::parse(std::path::Path::new("c.toml"), text).unwrap();
        let plan =
            crate::plan::build(&config, &crate::plan::PlanInputs { cwd: "/w".into(), ..Default::default() });
        let options = ProbeOptions {
            fast: false,
            test_port: true,
            presweep: Some("true".into()),
            import_torch: Vec::new(),
        };
        let command = probe_invocation(&plan, &plan.nodes[0], &options).remote_command();
        let line = remote::shell::for_login_shell(&command);
        assert!(line.len() < 120 * 1024, "{} bytes, from {}", line.len(), command.len());
    }

    /// The shipped facts script, run here as a full probe would run it, prints what the checks
    /// read: Python's facts (torch or not), the route to the master, the named interface, the
    /// fixed port's listener, the limits and the leftovers.
    #[test]
    fn the_facts_script_prints_every_fact_the_checks_read() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let text = format!(
            "[[nodes]]\nhost = \"127.0.0.1\"\n[job]\nscript = \"t.py\"\ndevice = \"cpu\"\npython = \"python3\"\n\
             [rendezvous]\nport = {port}\ninterface = \"lo\"\n"
        );
        let config = crate::config::parse(std::path::Path::new("c.toml"), &text).unwrap();
        let plan =
            crate::plan::build(&config, &crate::plan::PlanInputs { cwd: "/".into(), ..Default::default() });
        let run = |command: String| std::process::Command::new("sh").arg("-c").arg(command).output().unwrap();
        let out = run(facts_command(&plan, &plan.nodes[0], false));
        let (facts, other) = checks::parse_facts(&String::from_utf8_lossy(&out.stdout));
        let fact = |name: &str| facts.get(name).map(String::as_str);
        let python = run("python3 -c 'import platform; print(platform.python_version())'".into());
        let python = String::from_utf8_lossy(&python.stdout);
        assert_eq!(fact("python"), Some(python.trim()), "{facts:?} {other:?}");
        assert!(fact("torch").is_some() && fact("torch_import").is_some(), "{facts:?}");
        assert_eq!(fact("launcher"), Some(""), "t.py is on no PATH");
        assert_eq!((fact("route_dev"), fact("iface_exists")), (Some("lo"), Some("yes")));
        assert_eq!((fact("port_in_use"), fact("leftovers")), (Some("1"), Some("0")));
        for name in ["hostname", "shm_kb", "nofile", "disk_free_kb", "gpus", "cap_eff"] {
            assert!(fact(name).is_some_and(|v| !v.is_empty()), "{name}: {facts:?}");
        }
        assert_eq!(fact("stack_tools_missing"), Some(""));
        drop(listener);
    }

    /// facts.py reads torch's version from its METADATA (importlib.metadata costs 100 ms
    /// and more on every node): the same version importlib.metadata gives, the first on
    /// sys.path, with a local label, from a dist-info or an egg-info; none where there is no
    /// torch.
    #[test]
    fn the_facts_read_torchs_version_as_importlib_metadata_does() {
        let dir = tempfile::tempdir().unwrap();
        let (first, second) = (dir.path().join("a"), dir.path().join("b"));
        for (folder, version) in [(&first, "9.8.7+cu121"), (&second, "1.0.0")] {
            let info = folder.join(format!("torch-{version}.dist-info"));
            std::fs::create_dir_all(&info).unwrap();
            let metadata = format!("Metadata-Version: 2.1\nName: torch\nVersion: {version}\n\nVersion: 0\n");
            std::fs::write(info.join("METADATA"), metadata).unwrap();
        }
        // A distribution whose name only starts like torch's.
        std::fs::create_dir_all(first.join("torch_tb-0.1.dist-info")).unwrap();
        let run = |code: &str, path: &str| {
            let out = std::process::Command::new("python3")
                .args(["-c", code])
                .env("PYTHONPATH", path)
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap()
        };
        let path = format!("{}:{}", first.display(), second.display());
        let metadata = run("import importlib.metadata as m; print(m.version('torch'))", &path);
        assert_eq!(metadata.trim(), "9.8.7+cu121");
        let facts = run(remote::scripts::FACTS_PY, &path);
        assert!(facts.contains("herd-fact torch=9.8.7+cu121\n"), "{facts}");
        // An egg-info (`setup.py develop`), as a folder and as a file.
        let egg = dir.path().join("egg");
        std::fs::create_dir_all(egg.join("torch.egg-info")).unwrap();
        std::fs::write(egg.join("torch.egg-info/PKG-INFO"), "Name: torch\nVersion: 2.0.0a0+git1\n").unwrap();
        let file = dir.path().join("file");
        std::fs::create_dir_all(&file).unwrap();
        std::fs::write(file.join("torch-1.13.1-py3.11.egg-info"), "Name: torch\nVersion: 1.13.1\n").unwrap();
        // An .egg folder (`setup.py install`), its header in lower case.
        let built = dir.path().join("built");
        std::fs::create_dir_all(built.join("torch-2.0.0a0-py3.11-linux-x86_64.egg/EGG-INFO")).unwrap();
        let pkg_info = built.join("torch-2.0.0a0-py3.11-linux-x86_64.egg/EGG-INFO/PKG-INFO");
        std::fs::write(pkg_info, "Name: torch\nversion: 2.0.0a0+src\n").unwrap();
        let built_first =
            format!("{}:{}", built.join("torch-2.0.0a0-py3.11-linux-x86_64.egg").display(), second.display());
        let metadata = run("import importlib.metadata as m; print(m.version('torch'))", &built_first);
        assert_eq!(metadata.trim(), "2.0.0a0+src");
        assert!(run(remote::scripts::FACTS_PY, &built_first).contains("herd-fact torch=2.0.0a0+src\n"));
        for (path, version) in [(&egg, "2.0.0a0+git1"), (&file, "1.13.1")] {
            let path = path.display().to_string();
            let metadata = run("import importlib.metadata as m; print(m.version('torch'))", &path);
            assert_eq!(metadata.trim(), version);
            let facts = run(remote::scripts::FACTS_PY, &path);
            assert!(facts.contains(&format!("herd-fact torch={version}\n")), "{facts}");
        }
        let facts = run(remote::scripts::FACTS_PY, &dir.path().join("none").display().to_string());
        assert!(facts.contains("herd-fact torch=\n"), "{facts}");
    }

    /// The probes as they ship, run here on a free loopback port: the master's listener says
    /// it is up, then runs the facts and says when they are done; a worker's connection
    /// reaches it. Without a port to test, the facts alone; without the Python, the master
    /// says so and its facts still come.
    #[test]
    fn the_probes_test_the_master_port_on_this_machine() {
        use std::io::BufRead;
        let text =
            "[[nodes]]\nhost = \"127.0.0.1\"\n[[nodes]]\nhost = \"localhost\"\n[job]\nscript = \"t.py\"\n\
             device = \"cpu\"\npython = \"python3\"\n";
        let config = crate::config::parse(std::path::Path::new("c.toml"), text).unwrap();
        let mut plan =
            crate::plan::build(&config, &crate::plan::PlanInputs { cwd: "/".into(), ..Default::default() });
        let options = ProbeOptions { fast: true, test_port: true, presweep: None, import_torch: Vec::new() };
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
        let probe = |plan: &LaunchPlan, rank: usize, port: &str| {
            let mut command = std::process::Command::new("sh");
            let exec = format!(
                "exec {}",
                remote::shell::command_line(probe_argv(plan, &plan.nodes[rank], &options))
            );
            command.arg("-c").arg(exec).env("MASTER_PORT", port);
            command.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::piped());
            command
        };
        let mut master = probe(&plan, 0, &port).spawn().unwrap();
        let mut lines = std::io::BufReader::new(master.stdout.take().unwrap()).lines().map(Result::unwrap);
        assert_eq!(lines.next().as_deref(), Some(LISTENING));
        let facts: Vec<String> = lines.by_ref().take_while(|l| l != FACTS_DONE).collect();
        assert!(facts.iter().any(|l| l.starts_with("herd-fact hostname=")), "{facts:?}");
        let worker = probe(&plan, 1, &port).output().unwrap();
        let (_, other) = checks::parse_facts(&String::from_utf8_lossy(&worker.stdout));
        assert_eq!(other, ["herd-reached"], "{worker:?}");
        master.kill().unwrap();
        let _ = master.wait();
        // No port to test: the facts alone, on either side.
        for rank in [0, 1] {
            let out = probe(&plan, rank, "0").output().unwrap();
            let (facts, other) = checks::parse_facts(&String::from_utf8_lossy(&out.stdout));
            assert!(facts.contains_key("hostname") && other.is_empty(), "{facts:?} {other:?}");
        }
        plan.python = "/nonexistent/python3".into();
        let out = probe(&plan, 0, &port).output().unwrap();
        let (facts, other) = checks::parse_facts(&String::from_utf8_lossy(&out.stdout));
        // The facts say the same of the Python (a line the checks keep).
        assert_eq!(other[0], format!("{LISTEN_FAILED} /nonexistent/python3 not found"), "{other:?}");
        assert!(facts.contains_key("hostname"), "{facts:?}");
    }
}
