//! Executes a launch plan: connect to every node, then run attempts until one succeeds, the
//! failure is not one to restart, or restarts run out. An attempt is all nodes together:
//! when one fails, is lost, or the job stops making progress, every node is stopped, the
//! failure is classified, and, if the policy says so, everything is checked and started
//! again on a fresh port. Everything is reported as events; nothing here prints.
//!
//! `attempt` decides (pure), `gang` performs one attempt over every node, `node` is one
//! node's agent, `preflight` and `sweep` are the checks and the sweeps around them, `lines` checks that
//! what they send fits a login shell.

mod attempt;
pub mod exec;
mod gang;
pub mod lines;
mod node;
mod preflight;
mod reserve;
mod sweep;
mod types;

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Instant;

use tokio::sync::mpsc;

use crate::config::PortSpec;
use crate::doctor;
use crate::events::{Event, Quarantined, RunStatus};
use crate::fleet::{stdout_if_ok, EarlyAgents, Fleet};
use crate::classify::hint;
use crate::outcome::{FailureClass, NodeExit, NodeOutcome, Verdict};
use crate::plan::{self, LaunchPlan};
use crate::roster::Blamed;
use crate::transport::{slurm, Started, TransportError};
use crate::{blame, policy};

use gang::{AttemptContext, AttemptOutcome};
pub use node::{Stop, READ_SIZE};
use preflight::Preflighted;
use reserve::{Settled, Unsettled};
pub use sweep::kill_leftovers;
pub use types::{AttemptSummary, Interrupts, RunError, RunOptions, RunOutcome};

pub async fn run(
    plan: &LaunchPlan,
    run_id: &str,
    options: RunOptions,
    events: mpsc::Sender<Event>,
    interrupts: Interrupts,
) -> Result<RunOutcome, RunError> {
    let _ = events.send(run_started(plan, run_id)).await;
    let mut run = Run {
        plan: plan.clone(),
        run_id,
        options,
        events: &events,
        attempts: Vec::new(),
        used_ports: BTreeSet::new(),
        history: blame::History::default(),
        interfaces: Vec::new(),
    };
    let status = run.run(interrupts).await?;
    let attempts = run.attempts;
    let _ = events.send(Event::RunFinished { status, attempts: attempts.len() as u32 }).await;
    Ok(RunOutcome { status, attempts })
}

fn run_started(plan: &LaunchPlan, run_id: &str) -> Event {
    Event::RunStarted {
        run_id: run_id.to_string(),
        config: plan.config_path.display().to_string(),
        config_key: plan.config_key.clone(),
        launcher: plan.launcher.as_str(),
        nnodes: plan.nnodes(),
        world_size: plan.world_size,
        max_restarts: plan.restart.max_restarts,
        hosts: plan.nodes.iter().map(|n| n.host.clone()).collect(),
        nprocs: plan.nodes.iter().map(|n| n.nproc).collect(),
        log_dir: plan.logs_dir.join(run_id).display().to_string(),
        spares: plan.roster.spare_hosts().map(String::from).collect(),
        quarantined: plan
            .roster
            .quarantined_hosts()
            .map(|(host, reason)| Quarantined { host: host.into(), reason: reason.into() })
            .collect(),
    }
}

/// One run's state across its attempts.
struct Run<'a> {
    /// The plan of the attempt at hand: a spare promoted or a node dropped makes a new one.
    plan: LaunchPlan,
    run_id: &'a str,
    options: RunOptions,
    events: &'a mpsc::Sender<Event>,
    attempts: Vec<AttemptSummary>,
    /// The master ports of earlier attempts, which a restart does not reuse.
    used_ports: BTreeSet<u16>,
    /// What the failed attempts so far tell the blame of the next (see `blame`).
    history: blame::History,
    /// Per node rank, its interface to the master (`rendezvous.interface = "auto"`), as the
    /// last preflight found them.
    interfaces: Vec<String>,
}

/// What comes after an attempt.
enum Next {
    Done(RunStatus),
    /// After the delay, without the blamed nodes if the run can do without them.
    Restart(std::time::Duration, Vec<Blamed>),
}

impl Run<'_> {
    async fn run(&mut self, mut interrupts: Interrupts) -> Result<RunStatus, RunError> {
        let connected = connect(&self.plan, self.run_id, self.options, self.events);
        let Some((fleet, early, errors)) = interruptible(&mut interrupts, connected).await else {
            return Ok(RunStatus::Interrupted);
        };
        let (probes, jobs): (Vec<_>, Vec<_>) = early
            .into_iter()
            .map(|mut agents| {
                let job = agents.pop().flatten();
                (agents.pop().flatten(), job)
            })
            .unzip();
        // A node that could not be connected changes the plan, or ends the run: either way
        // the first agents are not used, and go before their connections close.
        let jobs = if errors.iter().any(Option::is_some) { Vec::new() } else { jobs };
        let first: Vec<String> = self.plan.nodes.iter().map(|n| n.host.clone()).collect();
        let settled = self.settle(fleet, errors, probes, 0, false, &first);
        let Some(settled) = interruptible(&mut interrupts, settled).await else {
            return Ok(RunStatus::Interrupted);
        };
        let Settled { mut fleet, mut checked, replanned } = match settled {
            Ok(settled) => settled,
            Err(Unsettled::Failed(e)) => return Err(e),
            Err(Unsettled::Gone { .. }) => unreachable!("the first connections are not waited for"),
        };
        // The first attempt's agents are the first plan's.
        let mut jobs = if replanned { Vec::new() } else { jobs };
        let mut attempt = 0;
        loop {
            let early = std::mem::take(&mut jobs);
            let next =
                self.attempt(&fleet, attempt, std::mem::take(&mut checked), early, &mut interrupts).await;
            let (delay, blamed) = match next {
                Ok(Next::Restart(delay, blamed)) => (delay, blamed),
                Ok(Next::Done(status)) => {
                    fleet.close().await;
                    return Ok(status);
                }
                Err(e) => return Err(close_with(fleet, e).await),
            };
            attempt += 1;
            (fleet, checked) = match self.restart(fleet, delay, blamed, attempt, &mut interrupts).await {
                Ok(ready) => ready,
                Err(status) => return Ok(status),
            };
        }
    }

    /// Attempt `attempt`, and what follows it.
    async fn attempt(
        &mut self,
        fleet: &Fleet,
        attempt: u32,
        checked: Preflighted,
        early: Vec<Option<Started>>,
        interrupts: &mut Interrupts,
    ) -> Result<Next, RunError> {
        let started = Instant::now();
        let started_at = std::time::SystemTime::now();
        let nodes = self.plan.nodes.iter().map(|n| n.host.clone()).collect();
        let ctx = AttemptContext {
            plan: &self.plan,
            run_id: self.run_id,
            interfaces: &self.interfaces,
            events: self.events,
        };
        let (outcome, port, first_progress) =
            gang::run_attempt(&ctx, attempt, &checked, early, &self.used_ports, fleet, interrupts).await;
        self.used_ports.extend(port);
        let duration = started.elapsed();
        let summary =
            move |verdict| AttemptSummary { attempt, started_at, duration, first_progress, verdict, nodes };
        let (verdict, outcomes) = match outcome {
            AttemptOutcome::Succeeded | AttemptOutcome::Interrupted => {
                let succeeded = matches!(outcome, AttemptOutcome::Succeeded);
                self.attempts.push(summary(None));
                return Ok(Next::Done(if succeeded { RunStatus::Succeeded } else { RunStatus::Interrupted }));
            }
            AttemptOutcome::NoPort(e) => return Err(e),
            AttemptOutcome::Failed(v, outcomes) => (v, outcomes),
        };
        let millis = duration.as_millis() as u64;
        if let Some((status, verdict)) = self.ended_unjudged(interrupts, attempt, millis, &verdict).await {
            self.attempts.push(summary(Some(verdict)));
            return Ok(Next::Done(status));
        }
        // Ctrl-C while the dumps come: the attempt failed all the same, and the run ends.
        let interrupted =
            interruptible(interrupts, self.collect_nccl_dumps(fleet, attempt, &outcomes)).await.is_none();
        let _ = self.events.send(Event::AttemptFailed { attempt, millis, verdict: verdict.clone() }).await;
        let together = blame::lost_together(self.plan.restart.heartbeat_timeout, attempt::PROBE_WAIT);
        let judged = self.history.judge(&verdict, &outcomes, &self.plan.patterns.rules, together);
        // Dated by this attempt, which showed it: no other may follow.
        self.release(&judged.released, attempt).await;
        let blamed = judged.blamed;
        let class = verdict.class;
        self.attempts.push(summary(Some(verdict)));
        if interrupted {
            return Ok(Next::Done(RunStatus::Interrupted));
        }
        let Some(delay) = policy::restart_delay(&self.plan.restart, attempt, class, rand::random::<f64>())
        else {
            return Ok(Next::Done(RunStatus::Failed));
        };
        let delay_ms = delay.as_millis() as u64;
        let _ = self.events.send(Event::RestartScheduled { attempt: attempt + 1, delay_ms, class }).await;
        Ok(Next::Restart(delay, blamed))
    }

    /// Whether failed attempt `attempt` ends the run before any node is judged, and with
    /// which verdict: Slurm ended the allocation (every node's end follows from it, none is to
    /// blame), or Ctrl-C came while Slurm was asked.
    async fn ended_unjudged(
        &self,
        interrupts: &mut Interrupts,
        attempt: u32,
        millis: u64,
        verdict: &Verdict,
    ) -> Option<(RunStatus, Verdict)> {
        let (status, verdict, reason) = match self.allocation_ended(interrupts).await {
            None => (RunStatus::Interrupted, verdict.clone(), None),
            Some(None) => return None,
            Some(Some(ended)) => {
                let class = FailureClass::Allocation;
                let verdict = Verdict { class, root_cause: None, consequences: Vec::new(), hint: hint(class) };
                (RunStatus::Failed, verdict, Some(nothing_left(&ended)))
            }
        };
        let _ = self.events.send(Event::AttemptFailed { attempt, millis, verdict: verdict.clone() }).await;
        if let Some(reason) = reason {
            let _ = self.events.send(Event::RestartAbandoned { reason }).await;
        }
        Some((status, verdict))
    }

    /// After the backoff, every node of attempt `attempt` ready: the blamed nodes
    /// quarantined and replaced (see `reserve`) if the run can do without them, and a new
    /// node checked as at the start; every other node reachable again, a lost one waited for
    /// up to `restart.node_wait`. What the earlier attempts left, each node's agent sweeps as
    /// the restart starts. Else how the run ends.
    async fn restart(
        &mut self,
        fleet: Fleet,
        delay: std::time::Duration,
        blamed: Vec<Blamed>,
        attempt: u32,
        interrupts: &mut Interrupts,
    ) -> Result<(Fleet, Preflighted), RunStatus> {
        let before: Vec<String> = self.plan.nodes.iter().map(|n| n.host.clone()).collect();
        let replaced = self.replace(&blamed, attempt).await;
        let events = self.events;
        let ready = async {
            tokio::time::sleep(delay).await;
            // Through Slurm, a node now down or drained is replaced as at the start, not
            // waited for (it is, without a spare or min_nodes to take its place).
            let refusals = crate::fleet::slurm_refusals(&self.plan, &|_| true).await;
            let refused = reserve::refused(refusals, self.plan.nnodes());
            let replaced = match self.replace(&refused, attempt).await {
                Some(previous) => Some(replaced.unwrap_or(previous)),
                None => replaced,
            };
            let Some(previous) = replaced else {
                return match fleet.reconnect(&self.plan, events).await {
                    Ok(fleet) => Ok((fleet, Preflighted::default())),
                    Err((node_rank, fleet)) => Err(Unsettled::Gone { node_rank, fleet }),
                };
            };
            let (fleet, errors) = fleet.rearranged(&previous, &self.plan, events).await;
            let mut settled = self.settle(fleet, errors, Vec::new(), attempt, true, &before).await?;
            // The preflight's sweep spares this run: what its earlier attempts left on the
            // nodes it kept is swept as on any restart, and the new nodes as on a first one.
            settled.checked.swept = false;
            settled.checked.fresh = reserve::fresh(&self.plan, &before);
            Ok((settled.fleet, settled.checked))
        };
        let Some(ready) = interruptible(interrupts, ready).await else {
            // The connections were moved into the cancelled future; its drop closes them.
            return Err(RunStatus::Interrupted);
        };
        let reason = match ready {
            Ok(ready) => {
                self.resume(&ready.0, attempt).await;
                return Ok(ready);
            }
            // The new nodes could not be readied: the run ends as after any failed attempt.
            Err(Unsettled::Failed(e)) => format!("the nodes for attempt {attempt}: {e}"),
            Err(Unsettled::Gone { node_rank, fleet }) => {
                fleet.close().await;
                let plan = &self.plan;
                format!(
                    "node {node_rank} ({}) did not come back within restart.node_wait ({})",
                    plan.nodes[node_rank].host,
                    humantime::format_duration(plan.restart.node_wait)
                )
            }
        };
        // A restart that cannot start in an allocation Slurm has ended says so, not why its
        // steps failed.
        let Some(ended) = self.allocation_ended(interrupts).await else {
            return Err(RunStatus::Interrupted);
        };
        let reason = ended.map_or(reason, |ended| nothing_left(&ended));
        let _ = events.send(Event::RestartAbandoned { reason }).await;
        Err(RunStatus::Failed)
    }

    /// Through Slurm, why the run's allocation can run nothing any more, if it cannot: one
    /// `squeue` when an attempt failed or a restart could not start. `Some(None)` over SSH,
    /// while the allocation runs, or when Slurm cannot say (the failure is then judged as
    /// ever); `None` when Ctrl-C or SIGTERM came first, which ends the wait at once.
    async fn allocation_ended(&self, interrupts: &mut Interrupts) -> Option<Option<String>> {
        let Some(job_id) = self.plan.nodes.iter().find_map(|n| match &n.transport {
            plan::Transport::Slurm(t) => Some(t.job_id.clone()),
            _ => None,
        }) else {
            return Some(None);
        };
        let ask = |id: String| async move { slurm::job_state(&id).await };
        interruptible(interrupts, allocation_state(&job_id, ask)).await
    }
}

/// Why allocation `job_id` has ended, from `ask` ([`slurm::job_state`]): `None` while it runs
/// or when Slurm cannot say.
async fn allocation_state<F, Fut>(job_id: &str, ask: F) -> Option<String>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<Option<String>, TransportError>>,
{
    // A job Slurm is ending shows as COMPLETING until its steps are gone: asked again
    // for a while, for its state underneath (CANCELLED, TIMEOUT, ...).
    let settle = Instant::now() + ALLOCATION_QUERY;
    loop {
        let asked = tokio::time::timeout(ALLOCATION_QUERY, ask(job_id.to_string())).await;
        let error = match asked {
            Ok(Ok(Some(state))) if state == "COMPLETING" && Instant::now() < settle => {
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                continue;
            }
            Ok(Ok(state)) => return slurm::allocation_ended(job_id, state.as_deref()),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {} s", ALLOCATION_QUERY.as_secs()),
        };
        tracing::warn!("cannot ask Slurm whether allocation {job_id} still runs: {error}");
        return None;
    }
}

/// How long slurmctld may take to say whether the allocation still runs, and to finish
/// ending one.
const ALLOCATION_QUERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The reason a run ends in an allocation Slurm has ended.
fn nothing_left(ended: &str) -> String {
    format!("{ended}; no node is to blame, and no step can start in it any more")
}

impl Run<'_> {
    /// With `restart.resume_args`: the plan of attempt `attempt` appends them, its
    /// `{latest:GLOB}` resolved on the master now (the newest match in the workdir, by
    /// modification time). No match (or no answer): no resume args, with a warning; the job
    /// starts afresh rather than fails.
    async fn resume(&mut self, fleet: &Fleet, attempt: u32) {
        let args = &self.plan.restart.resume_args;
        if args.is_empty() {
            return;
        }
        let glob = args.iter().find_map(|a| crate::config::latest_glob(a)).map(String::from);
        let from = match &glob {
            None => None,
            Some(glob) => latest_match(fleet, self.plan.master.node_rank, &self.plan.workdir, glob).await,
        };
        if let (Some(glob), None) = (&glob, &from) {
            tracing::warn!(
                "restart.resume_args: nothing in {} on the master matches {glob:?}: attempt {attempt} starts afresh",
                self.plan.workdir
            );
        }
        let resume = plan::Resume { args: policy::resume_args(args, from.as_deref()), from };
        let event = Event::Resuming { attempt, from: resume.from.clone(), args: resume.args.clone() };
        let _ = self.events.send(event).await;
        self.plan = self.plan.resumed(Some(resume));
    }
}

impl Run<'_> {
    /// After a failed attempt of a GPU job: each node's ranks' NCCL flight-recorder dumps,
    /// copied into the run's files (`NcclDumpsCollected`), all nodes at once, within
    /// `NCCL_COLLECT`; then what was copied (`NcclDumpsSaved`), if anything was. A node that
    /// was lost is not asked: it would only cost the wait.
    async fn collect_nccl_dumps(&self, fleet: &Fleet, attempt: u32, outcomes: &[NodeOutcome]) {
        let plan = &self.plan;
        let dir = crate::nccl::dump_dir(self.run_id, attempt);
        let lost =
            |r: usize| outcomes.iter().any(|o| o.node_rank == r && matches!(o.exit, NodeExit::Lost(_)));
        let asks = fleet.on_each(NCCL_COLLECT, |rank| {
            let node = &plan.nodes[rank];
            (node.dumps_nccl() && !lost(rank))
                .then(|| crate::nccl::command(&plan.workdir, &dir, node.global_ranks()))
        });
        let on_node = format!("{}/{dir}", plan.workdir.trim_end_matches('/'));
        let mut saved = Vec::new();
        let mut missing = Vec::new();
        for (node_rank, ran) in asks.await {
            let why = match stdout_if_ok(ran) {
                Ok(stdout) => {
                    let dumps = crate::nccl::parse(&stdout, &on_node);
                    for d in &dumps {
                        match &d.bytes {
                            Ok(_) => saved.push(d.rank),
                            Err(why) => missing.push((d.rank, why.clone())),
                        }
                    }
                    if !dumps.is_empty() {
                        let _ =
                            self.events.send(Event::NcclDumpsCollected { attempt, node_rank, dumps }).await;
                    }
                    continue;
                }
                Err(why) => why,
            };
            let host = &plan.nodes[node_rank].host;
            tracing::warn!(
                "node {node_rank} ({host}): cannot copy its NCCL flight-recorder dumps from {on_node}: {why}"
            );
        }
        if !saved.is_empty() || !missing.is_empty() {
            saved.sort_unstable();
            missing.sort_unstable();
            let _ = self.events.send(Event::NcclDumpsSaved { attempt, ranks: saved, missing }).await;
        }
    }
}

/// How long the nodes may take to hand over their NCCL dumps after a failed attempt.
const NCCL_COLLECT: std::time::Duration = std::time::Duration::from_secs(10);

/// The newest match of `glob` under `workdir` on a node, by modification time (see
/// `latest.sh`), within `RESUME_LOOKUP`, found on the master (none without its connection).
async fn latest_match(fleet: &Fleet, master: usize, workdir: &str, glob: &str) -> Option<String> {
    let command = latest_command(workdir, glob);
    let (_, ran) =
        fleet.on_each(RESUME_LOOKUP, |rank| (rank == master).then(|| command.clone())).await.pop()?;
    match stdout_if_ok(ran) {
        Ok(stdout) => match latest_found(&stdout) {
            Ok(found) => found,
            Err(why) => {
                tracing::warn!("restart.resume_args: the newest match of {glob:?} on the master {why}");
                None
            }
        },
        Err(why) => {
            tracing::warn!("restart.resume_args: cannot look for {glob:?} on the master: {why}");
            None
        }
    }
}

/// The command that prints the newest match of `glob` under `workdir` (`latest.sh`, in `sh`,
/// not the login shell, which may be zsh), between two NULs.
fn latest_command(workdir: &str, glob: &str) -> String {
    crate::remote::script_call(crate::remote::LATEST_SCRIPT, "herd-latest", [workdir, glob])
}

/// The name `latest.sh` printed: `None` when nothing matched; an error for output that
/// is not framed as it prints, or a name that is not UTF-8.
fn latest_found(stdout: &[u8]) -> Result<Option<String>, String> {
    let framed =
        stdout.strip_suffix(b"\0").and_then(|s| s.rsplit(|&b| b == 0).next().filter(|_| s.contains(&0)));
    let name =
        framed.ok_or_else(|| format!("was not printed as asked: {:?}", String::from_utf8_lossy(stdout)))?;
    let name =
        String::from_utf8(name.to_vec()).map_err(|_| "is not UTF-8: it cannot be passed on".to_string())?;
    Ok(Some(name).filter(|n| !n.is_empty()))
}

/// How long the master may take to find the newest checkpoint (a hung filesystem).
const RESUME_LOOKUP: std::time::Duration = std::time::Duration::from_secs(20);

async fn close_with(fleet: Fleet, error: RunError) -> RunError {
    fleet.close().await;
    error
}

/// Every node connected; on each, as soon as it is, the first agents: the preflight's
/// probe, if it probes, and beside it the first attempt's job agent, which starts nothing
/// before it gets its env. One login per node for each, overlapping the other handshakes,
/// as pdsh's logins do. Each agent sweeps its node's leftovers as it starts.
/// The nodes that could not be connected are in the fleet with their errors (see `settle`).
async fn connect(
    plan: &LaunchPlan,
    run_id: &str,
    options: RunOptions,
    events: &mpsc::Sender<Event>,
) -> (Fleet, EarlyAgents, Vec<Option<TransportError>>) {
    let probing = preflight::probe_options(plan, run_id, options, &[]);
    let port_known = options.preflight || matches!(plan.master.port, PortSpec::Fixed(_));
    let early = |node: &crate::plan::NodePlan| {
        let probe = probing.as_ref().map(|o| doctor::probe_invocation(plan, node, o));
        let sweep = gang::presweep(run_id, 0, probing.is_some(), true);
        let job = gang::job_invocation(plan, run_id, node, 0, port_known, sweep);
        probe.into_iter().chain([job]).collect()
    };
    Fleet::connect(plan, Some(events), early).await
}

/// `work`, unless an interrupt comes first (`None`): nothing of the job has started.
async fn interruptible<T>(interrupts: &mut Interrupts, work: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        done = work => Some(done),
        _ = interrupts.recv() => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checkpoint's name may hold a newline: it stays one name, never split into a name
    /// of the attacker's choice (`evil`), nor shifted by what a login's init prints.
    /// Ctrl-C or SIGTERM ends the wait for Slurm's word on the allocation at once, however
    /// long slurmctld takes (here: never answers).
    #[tokio::test]
    async fn an_interrupt_ends_the_allocation_check_at_once() {
        let ask = |_: String| std::future::pending::<Result<Option<String>, TransportError>>();
        let (tx, mut interrupts) = tokio::sync::mpsc::unbounded_channel();
        tx.send(()).unwrap();
        let started = Instant::now();
        let asked = interruptible(&mut interrupts, allocation_state("7", ask)).await;
        assert_eq!(asked, None);
        assert!(started.elapsed() < ALLOCATION_QUERY, "{:?}", started.elapsed());
        // Never asked again: a job Slurm is still ending, asked until it has ended.
        let states = std::sync::Mutex::new(vec!["CANCELLED", "COMPLETING"]);
        let ask = |_: String| {
            let state = states.lock().unwrap().pop().map(str::to_string);
            async move { Ok(state) }
        };
        let ended = allocation_state("7", ask).await.unwrap();
        assert!(ended.contains("cancelled"), "{ended}");
    }

    #[test]
    fn the_newest_checkpoint_keeps_a_newline_in_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let wd = dir.path().join("w d");
        std::fs::create_dir_all(wd.join("ck")).unwrap();
        std::fs::write(wd.join("ck/step_1"), "").unwrap();
        let newest = wd.join("ck/step_2\nevil");
        std::fs::write(&newest, "").unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
        std::fs::File::options().write(true).open(&newest).unwrap().set_modified(later).unwrap();
        let run = |glob: &str| {
            let script = format!("echo 'hello from .bashrc'; {}", latest_command(wd.to_str().unwrap(), glob));
            let out = std::process::Command::new("sh").arg("-c").arg(script).output().unwrap();
            latest_found(&out.stdout)
        };
        assert_eq!(run("ck/step_*"), Ok(Some("ck/step_2\nevil".to_string())));
        assert_eq!(run("ck/none_*"), Ok(None));
        assert!(latest_found(b"ck/step_2\n").is_err(), "not framed");
        assert!(latest_found(b"\0\xff\0").is_err(), "not UTF-8");
    }
}
