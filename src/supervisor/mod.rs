//! Executes a launch plan: connect to every node, then run attempts until one succeeds, the
//! failure is not one to restart, or restarts run out. An attempt is all nodes together:
//! when one fails, is lost, or the job stops making progress, every node is stopped, the
//! failure is classified, and, if the policy says so, everything is checked and started
//! again on a fresh port. Everything is reported as events; nothing here prints.
//!
//! `attempt` decides within an attempt and `decide` between attempts (both pure), `gang`
//! performs one attempt over every node, `node` is one node's agent, `reserve` performs the
//! quarantines and replacements decided, `preflight` and `sweep` are the checks and the
//! sweeps around them, `lines` checks that what they send fits a login shell.

mod attempt;
mod decide;
pub mod exec;
mod gang;
pub mod lines;
mod node;
mod preflight;
mod reserve;
pub mod straggler;
mod sweep;
mod types;

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Instant;

use crate::blame;
use crate::config::PortSpec;
use crate::events::{Event, EventSender, Quarantined, RunStatus};
use crate::fleet::{stdout_if_ok, ConnectError, EarlyAgents, Fleet};
use crate::outcome::{NodeExit, NodeOutcome, Verdict};
use crate::plan::{self, LaunchPlan};
use crate::roster::{Blamed, Change, Roster};
use crate::transport::{slurm, Started, TransportError};

pub use decide::{requeue as requeue_verdict, Kept, RequeueVerdict};
use decide::{Allocation, Decision, Ended, Failure, Next, Replace};
use gang::{AttemptContext, AttemptOutcome};
pub use node::{Progress, Stop, READ_SIZE};
use preflight::Preflighted;
use reserve::{Settled, Unsettled};
pub use sweep::kill_leftovers;
pub use types::{AttemptSummary, Interrupts, RunEnd, RunError, RunOptions, RunOutcome, Signal};

/// The run of `plan`: its attempts, each failure judged and maybe restarted, until it ends.
/// `end` is told as soon as the end is decided, before the last teardown.
pub async fn run(
    plan: &LaunchPlan,
    run_id: &str,
    options: RunOptions,
    events: EventSender,
    mut interrupts: Interrupts,
    end: RunEnd,
) -> Result<RunOutcome, RunError> {
    let _ = events.send(run_started(plan, run_id)).await;
    if plan.restart.on_straggler == crate::config::OnStraggler::Replace && !plan.roster.reserve {
        tracing::warn!("restart.on_straggler = \"replace\", but the config has no spare node and no restart.min_nodes below the job's nodes: a straggler's node will be named, never replaced");
    }
    let mut run = Run {
        plan: plan.clone(),
        run_id,
        options,
        events: &events,
        attempts: Vec::new(),
        used_ports: BTreeSet::new(),
        between: decide::Between::default(),
        interfaces: Vec::new(),
        end: end.clone(),
        resumed_from: None,
        kept: None,
        never_rejoin: plan.roster.quarantined_hosts().map(|(h, _)| h.to_string()).collect(),
        rejoin_tried: (0, Vec::new()),
        copying: None,
    };
    let status = run.run(&mut interrupts).await;
    end.decide();
    // A restart that could not start leaves the copy of the dumps before it to end here.
    match status {
        Ok(RunStatus::Interrupted) => run.abandon_copy().await,
        _ => run.copied().await,
    }
    let status = status?;
    let status = decide::run_end(status, interrupts.preempted());
    let (attempts, kept) = (run.attempts, run.kept);
    let _ = events.send(Event::RunFinished { status, attempts: attempts.len() as u32 }).await;
    Ok(RunOutcome { status, attempts, kept })
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
    events: &'a EventSender,
    attempts: Vec<AttemptSummary>,
    /// The master ports of earlier attempts, which a restart does not reuse.
    used_ports: BTreeSet<u16>,
    /// What the failed attempts so far tell the decisions after the next (see `decide`).
    between: decide::Between,
    /// Per node rank, its interface to the master (`rendezvous.interface = "auto"`), as the
    /// last preflight found them.
    interfaces: Vec<String>,
    end: RunEnd,
    /// The checkpoint the attempt at hand resumed from (`restart.resume_args`).
    resumed_from: Option<String>,
    /// What the run kept for the Slurm job's next generation (see `keep`).
    kept: Option<decide::Kept>,
    /// Hosts no restart lets back in (see `rejoin`): those the config's quarantine file held
    /// when the run started, and those a restart let back in once already.
    never_rejoin: Vec<String>,
    /// The attempt a restart is readying, and the hosts `rejoin` tried for it.
    rejoin_tried: (u32, Vec<String>),
    /// The NCCL dumps of the last failed attempt, being copied (see `copy_nccl_dumps`).
    copying: Option<Copying>,
}

/// The task that copies a failed attempt's NCCL dumps (see `Run::copy_nccl_dumps`); aborted
/// when dropped, so that nothing of it outlives the run.
struct Copying(tokio::task::JoinHandle<()>);

impl Drop for Copying {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Run<'_> {
    async fn run(&mut self, interrupts: &mut Interrupts) -> Result<RunStatus, RunError> {
        let Some((mut fleet, mut checked, mut jobs)) = self.first(interrupts).await? else {
            return Ok(RunStatus::Interrupted);
        };
        let mut attempt = 0;
        loop {
            let early = std::mem::take(&mut jobs);
            let next = self.attempt(&fleet, attempt, std::mem::take(&mut checked), early, interrupts).await;
            let (delay, replace) = match next {
                Ok(Next::Restart { delay, replace, .. }) => (delay, replace),
                Ok(Next::Done { status, .. }) => {
                    self.end.decide();
                    if status.preempted() {
                        self.kept = self.keep(&fleet).await;
                    }
                    if interruptible(interrupts, self.copied()).await.is_none() {
                        self.abandon_copy().await;
                    }
                    self.close(fleet).await;
                    return Ok(status);
                }
                Err(e) => {
                    self.close(fleet).await;
                    return Err(e);
                }
            };
            attempt += 1;
            (fleet, checked, jobs) = match self.restart(fleet, delay, replace, attempt, interrupts).await {
                Ok(ready) => ready,
                Err(status) => return Ok(status),
            };
        }
    }

    /// Every node connected and checked for the first attempt, and the agents already started
    /// for its job where they can be used; `None`: interrupted meanwhile.
    async fn first(
        &mut self,
        interrupts: &mut Interrupts,
    ) -> Result<Option<(Fleet, Preflighted, Vec<Option<Started>>)>, RunError> {
        let connected = connect(&self.plan, self.run_id, self.options, self.events);
        let Some((fleet, early, errors)) = interruptible(interrupts, connected).await else {
            return Ok(None);
        };
        // One agent per node: with a preflight, the probe is its first phase (see `connect`).
        let probing = preflight::will_preflight(&self.plan, self.options);
        let (probes, jobs): (Vec<_>, Vec<_>) = early
            .into_iter()
            .map(|mut agents| {
                let agent = agents.pop().flatten();
                if probing {
                    (agent, None)
                } else {
                    (None, agent)
                }
            })
            .unzip();
        // A node that could not be connected changes the plan, or ends the run: either way
        // the first agents are not used, and go before their connections close.
        let jobs = if errors.iter().any(Option::is_some) { Vec::new() } else { jobs };
        let first: Vec<String> = self.plan.nodes.iter().map(|n| n.host.clone()).collect();
        let settled = self.settle(fleet, errors, probes, 0, false, &first);
        let Some(settled) = interruptible(interrupts, settled).await else {
            return Ok(None);
        };
        let Settled { fleet, checked, replanned, agents } = match settled {
            Ok(settled) => settled,
            Err(Unsettled::Failed(e)) => return Err(e),
            Err(Unsettled::Gone { .. }) => unreachable!("the first connections are not waited for"),
        };
        // A Slurm job requeued after a time limit or a preemption goes on from its newest
        // checkpoint: the first attempt resumes, as a restart does. The first agents, started
        // with the plan before it, are not used.
        if slurm::restart_count() > 0 && !self.plan.restart.resume_args.is_empty() {
            self.resume(&fleet, 0).await;
            return Ok(Some((fleet, checked, Vec::new())));
        }
        // The first attempt's agents are the first plan's: the preflight's, past their probe.
        let jobs = match (replanned, probing) {
            (true, _) => Vec::new(),
            (false, true) => agents,
            (false, false) => jobs,
        };
        Ok(Some((fleet, checked, jobs)))
    }

    /// Attempt `attempt`, and what follows it (see `decide`), its events sent.
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
        let gang::AttemptEnd { outcome, port, first_progress, stragglers, still_slow } =
            gang::run_attempt(&ctx, attempt, &checked, early, &self.used_ports, fleet, interrupts).await;
        self.used_ports.extend(port);
        // The dumps of the attempt before were copied while this one started.
        match outcome {
            AttemptOutcome::Interrupted => self.abandon_copy().await,
            _ => self.copied().await,
        }
        let duration = started.elapsed();
        let summary = AttemptSummary {
            attempt,
            started_at,
            duration,
            first_progress,
            verdict: None,
            nodes,
            stragglers,
        };
        let outcomes;
        let ended = match outcome {
            AttemptOutcome::Succeeded => Ended::Succeeded,
            AttemptOutcome::Interrupted => Ended::Interrupted,
            AttemptOutcome::Preempted(why) => Ended::Preempted(why),
            AttemptOutcome::NoPort(e) => return Err(e),
            AttemptOutcome::Failed(verdict, o) => {
                outcomes = o;
                let trained_for = decide::trained_for(first_progress, &outcomes, duration);
                Ended::Failed(self.failure(fleet, attempt, verdict, &outcomes, trained_for, interrupts).await)
            }
        };
        let plan = &self.plan;
        let ctx = decide::Context {
            restart: &plan.restart,
            rules: &plan.patterns.rules,
            roster: &plan.roster,
            unit: rand::random::<f64>(),
            slow: &still_slow,
            named: &summary.stragglers,
            preempted: interrupts.preempted(),
        };
        let decision = self.between.after_attempt(&ctx, attempt, ended);
        Ok(self.record(summary, decision).await)
    }

    /// Attempt `summary.attempt` ended as `decision` says: its failure told, the nodes its
    /// fault clears released, its summary kept, and what follows it announced.
    async fn record(&mut self, mut summary: AttemptSummary, decision: Decision) -> Next {
        let attempt = summary.attempt;
        if let Some(verdict) = &decision.verdict {
            let millis = summary.duration.as_millis() as u64;
            let _ =
                self.events.send(Event::AttemptFailed { attempt, millis, verdict: verdict.clone() }).await;
        }
        // Dated by this attempt, which showed it: no other may follow.
        self.release(decision.roster, decision.released, attempt).await;
        summary.verdict = decision.verdict;
        self.attempts.push(summary);
        self.announce(&decision.next, attempt).await;
        decision.next
    }

    /// What the decision after failed attempt `attempt` needs from outside: whether Slurm
    /// ended the allocation (every node's end follows from it). If not, each node's NCCL
    /// dumps are copied meanwhile, in the background (see `copy_nccl_dumps`).
    async fn failure<'o>(
        &mut self,
        fleet: &Fleet,
        attempt: u32,
        verdict: Verdict,
        outcomes: &'o [NodeOutcome],
        trained_for: Option<std::time::Duration>,
        interrupts: &mut Interrupts,
    ) -> Failure<'o> {
        let allocation = match self.allocation_ended(interrupts).await {
            None => Allocation::Interrupted,
            Some(None) => Allocation::Runs,
            Some(Some(ended)) => Allocation::Ended(ended),
        };
        if allocation == Allocation::Runs {
            self.copy_nccl_dumps(fleet, attempt, outcomes).await;
        }
        Failure { verdict, outcomes, allocation, trained_for }
    }

    /// The event of what follows attempt `attempt`: a restart scheduled, or why none is.
    async fn announce(&self, next: &Next, attempt: u32) {
        let event = match next {
            Next::Restart { delay, class, .. } => {
                let delay_ms = delay.as_millis() as u64;
                Event::RestartScheduled { attempt: attempt + 1, delay_ms, class: *class }
            }
            Next::Done { abandoned: Some(reason), .. } => Event::RestartAbandoned { reason: reason.clone() },
            Next::Done { abandoned: None, .. } => return,
        };
        let _ = self.events.send(event).await;
    }

    /// After the backoff, every node of attempt `attempt` ready: the blamed nodes
    /// quarantined and replaced as decided (see `reserve`), and a new node checked as at the
    /// start; every other node reachable again, a lost one waited for up to
    /// `restart.node_wait`. What the earlier attempts left, each node's agent sweeps as the
    /// restart starts. With the agents started during the backoff that the attempt may use
    /// (see `ready`). Else how the run ends.
    async fn restart(
        &mut self,
        fleet: Fleet,
        delay: std::time::Duration,
        replace: Replace,
        attempt: u32,
        interrupts: &mut Interrupts,
    ) -> Result<(Fleet, Preflighted, Vec<Option<Started>>), RunStatus> {
        let before: Vec<String> = self.plan.nodes.iter().map(|n| n.host.clone()).collect();
        let replaced = self.replace(replace, attempt).await;
        let ready = self.ready(fleet, delay, replaced, attempt, &before);
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
                self.close(fleet).await;
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
        let status = ended.as_ref().map_or(RunStatus::Failed, decide::AllocationEnd::status);
        let reason = decide::abandoned(reason, ended.as_ref().map(|e| e.why.as_str()));
        let _ = self.events.send(Event::RestartAbandoned { reason }).await;
        Err(status)
    }

    /// `restart`'s work, which an interrupt cancels: the backoff, the nodes Slurm now refuses
    /// replaced too, and every node of the plan reconnected, or connected and checked.
    /// `replaced`: the plan before the blamed nodes were replaced, if they were; `before`:
    /// its hosts.
    ///
    /// When the plan stays as it is, the attempt's agents log in during the last
    /// `gang::AHEAD_LEAD` of the backoff (`gang::start_ahead`), so that its start does not
    /// wait for 250 logins on the launch host, nor a slow login shell's. They are used if
    /// every node is reconnected as it was (`gang::kept`); a plan changed after the backoff
    /// (a node Slurm refuses, one lost and replaced) starts its own, and the ones ahead end,
    /// having started nothing. Not with `resume_args`, which change the job's arguments
    /// once the backoff is over.
    async fn ready(
        &mut self,
        fleet: Fleet,
        delay: std::time::Duration,
        replaced: Option<LaunchPlan>,
        attempt: u32,
        before: &[String],
    ) -> Result<(Fleet, Preflighted, Vec<Option<Started>>), Unsettled> {
        let lead = gang::AHEAD_LEAD.min(delay);
        tokio::time::sleep(delay - lead).await;
        let mut ahead = (replaced.is_none() && self.plan.restart.resume_args.is_empty())
            .then(|| gang::start_ahead(&self.plan, self.run_id, attempt, &fleet));
        tokio::time::sleep(lead).await;
        // Through Slurm, a node now down or drained is replaced as at the start, not
        // waited for (it is, without a spare or min_nodes to take its place).
        let refusals = crate::fleet::slurm_refusals(&self.plan, &|_| true).await;
        let refused = reserve::refused(refusals, self.plan.nnodes());
        let replace = decide::replacement(&self.plan.roster, refused);
        if !matches!(replace, Replace::Nothing) {
            // Before the plan changes: what they swept is told under the node ranks and
            // hosts they were started on, before the events of the change.
            gang::drop_ahead(ahead.take(), self.events).await;
        }
        let replaced = match self.replace(replace, attempt).await {
            Some(previous) => Some(replaced.unwrap_or(previous)),
            None => replaced,
        };
        let since = Instant::now();
        // Agents ahead that will not be used are gone before a link they use is dropped.
        let (fleet, errors) = match replaced {
            Some(previous) => {
                gang::drop_ahead(ahead, self.events).await;
                fleet.rearranged(&previous, &self.plan, self.events).await
            }
            None => match self.reconnect(fleet, attempt).await {
                Ok(fleet) => {
                    let early = match ahead {
                        Some(ahead) => gang::kept(ahead, &fleet, self.events).await,
                        None => Vec::new(),
                    };
                    return Ok((fleet, Preflighted::default(), early));
                }
                Err((node_rank, fleet)) => {
                    gang::drop_ahead(ahead, self.events).await;
                    self.without_gone(node_rank, fleet, attempt, since).await?
                }
            },
        };
        let mut settled = self.settle(fleet, errors, Vec::new(), attempt, true, before).await?;
        // The preflight's sweep spares this run: what its earlier attempts left on the
        // nodes it kept is swept as on any restart, and the new nodes as on a first one.
        settled.checked.swept = false;
        settled.checked.fresh = reserve::fresh(&self.plan, before);
        Ok((settled.fleet, settled.checked, Vec::new()))
    }

    /// Through Slurm, why the run's allocation can run nothing any more, if it cannot: one
    /// `squeue` when an attempt failed or a restart could not start. `Some(None)` over SSH,
    /// while the allocation runs, or when Slurm cannot say (the failure is then judged as
    /// ever); `None` when Ctrl-C or SIGTERM came first, which ends the wait at once.
    async fn allocation_ended(&self, interrupts: &mut Interrupts) -> Option<Option<decide::AllocationEnd>> {
        let Some(job_id) = self.plan.nodes.iter().find_map(|n| match &n.transport {
            plan::Transport::Slurm(t) => Some(t.job_id.clone()),
            _ => None,
        }) else {
            return Some(None);
        };
        let ask = |id: String| async move { slurm::job_state(&id).await };
        interruptible(interrupts, allocation_state(&job_id, ask)).await
    }

    /// With `restart.resume_args`: the plan of attempt `attempt` appends them, its
    /// `{latest:GLOB}` resolved on the master now (the newest match in the workdir, by
    /// modification time). No match (or no answer): no resume args, with a warning; the job
    /// starts afresh rather than fails.
    async fn resume(&mut self, fleet: &Fleet, attempt: u32) {
        let args = &self.plan.restart.resume_args;
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
        let Some(resume) = decide::resume(args, from) else {
            return;
        };
        self.resumed_from = resume.from.clone();
        let event = Event::Resuming { attempt, from: resume.from.clone(), args: resume.args.clone() };
        let _ = self.events.send(event).await;
        self.plan = self.plan.resumed(Some(resume));
    }

    /// In a Slurm job, with a `{latest:GLOB}` in `restart.resume_args`: the newest match on
    /// the master as the run stops for a time limit or a preemption, for the requeue's
    /// verdict (`decide::requeue`). `None` outside Slurm, or without one.
    async fn keep(&self, fleet: &Fleet) -> Option<decide::Kept> {
        slurm::own_job_id()?;
        let glob = self.plan.restart.resume_args.iter().find_map(|a| crate::config::latest_glob(a))?;
        let newest = latest_match(fleet, self.plan.master.node_rank, &self.plan.workdir, glob).await;
        Some(decide::Kept { glob: glob.to_string(), resumed_from: self.resumed_from.clone(), newest })
    }

    /// After failed attempt `attempt` of a GPU job: each node's ranks' NCCL flight-recorder
    /// dumps copied into the run's files, in the background (see `copy_nccl_dumps`), while
    /// the run decides and starts its next attempt: on a node whose login takes 10 s, the
    /// copy's login and the next attempt's are paid at once, not one after the other. Joined
    /// before the fleet is next used for anything else (`copied`).
    async fn copy_nccl_dumps(&mut self, fleet: &Fleet, attempt: u32, outcomes: &[NodeOutcome]) {
        self.copied().await;
        let copy = copy_nccl_dumps(&self.plan, self.run_id, fleet, attempt, outcomes, self.events.clone());
        self.copying = Some(Copying(tokio::spawn(copy)));
    }

    /// The NCCL dumps' copy of the attempt before, once it has ended (within `NCCL_COLLECT`).
    /// Cancel safe: the copy is still there to abandon.
    async fn copied(&mut self) {
        if let Some(copying) = self.copying.as_mut() {
            if let Err(e) = (&mut copying.0).await {
                tracing::debug!("copying the NCCL dumps: {e}");
            }
            self.copying = None;
        }
    }

    /// The copy of the NCCL dumps given up on (Ctrl-C or SIGTERM ended the run), and gone.
    async fn abandon_copy(&mut self) {
        if let Some(mut copying) = self.copying.take() {
            copying.0.abort();
            let _ = (&mut copying.0).await;
        }
    }

    /// The fleet closed, once the copy of the dumps that uses it has ended: through Slurm,
    /// closing cancels herd's steps, the copy's too.
    async fn close(&mut self, fleet: Fleet) {
        self.copied().await;
        fleet.close().await;
    }

    /// Until every node of the plan is connected and passes the preflight (when the run has
    /// one): a node that fails either is blamed, and replaced while the run has room.
    /// `errors`: the fleet's connect errors; `probes`: preflight probes already started;
    /// `restart`: the nodes the run kept from an attempt before are checked again, and
    /// waited for up to `restart.node_wait`. `known`: the hosts the run started or last ran
    /// on; the others (promoted spares) also `import torch` in the preflight.
    async fn settle(
        &mut self,
        mut fleet: Fleet,
        mut errors: Vec<Option<TransportError>>,
        mut probes: Vec<Option<Started>>,
        attempt: u32,
        restart: bool,
        known: &[String],
    ) -> Result<Settled, Unsettled> {
        let mut replanned = false;
        loop {
            if errors.iter().any(Option::is_some) {
                drop(std::mem::take(&mut probes));
                (fleet, errors) = self.without_unreachable(fleet, errors, attempt).await?;
                replanned = true;
                continue;
            }
            if restart {
                let since = Instant::now();
                fleet = match self.reconnect(fleet, attempt).await {
                    Ok(fleet) => fleet,
                    Err((node_rank, gone)) => {
                        (fleet, errors) = self.without_gone(node_rank, gone, attempt, since).await?;
                        replanned = true;
                        continue;
                    }
                };
            }
            let checked = self.check(&fleet, known, std::mem::take(&mut probes)).await;
            let nodes = match checked {
                Ok((mut checked, agents)) => {
                    if !checked.interfaces.is_empty() {
                        self.interfaces = checked.interfaces.clone();
                    }
                    // The port the checks tested may be an earlier attempt's.
                    checked.port = checked.port.filter(|p| !self.used_ports.contains(p));
                    return Ok(Settled { fleet, checked, replanned, agents });
                }
                Err(RunError::Preflight(nodes)) => nodes,
                Err(e) => {
                    self.close(fleet).await;
                    return Err(e.into());
                }
            };
            (fleet, errors) = match self.replace_in(fleet, &reserve::failing(&nodes), attempt).await {
                Ok(rearranged) => rearranged,
                Err(fleet) => {
                    self.close(fleet).await;
                    return Err(RunError::Preflight(nodes).into());
                }
            };
            replanned = true;
        }
    }

    /// Every node of the plan reachable again (see `Fleet::reconnect`), a node out of reach
    /// waited for as long as `decide::reconnect_wait` says before something may take its
    /// place (`without_gone`).
    async fn reconnect(&self, fleet: Fleet, attempt: u32) -> Result<Fleet, (usize, Fleet)> {
        let wait = decide::reconnect_wait(self.plan.restart.node_wait, self.stand_in(attempt));
        fleet.reconnect(&self.plan, self.events, wait).await
    }

    /// Whether the run could do without a node lost for attempt `attempt`: a spare left, room
    /// above `restart.min_nodes`, or a node to let back in (`rejoin_candidates`).
    fn stand_in(&self, attempt: u32) -> bool {
        self.plan.roster.has_room() || !self.rejoin_candidates(attempt).is_empty()
    }

    /// The nodes `rejoin` would try for attempt `attempt` (see `decide::rejoinable`): over
    /// SSH only, as `reserve::answering` asks no other.
    fn rejoin_candidates(&self, attempt: u32) -> Vec<String> {
        let tried: &[String] = if self.rejoin_tried.0 == attempt { &self.rejoin_tried.1 } else { &[] };
        let mut hosts = decide::rejoinable(&self.plan.roster, &self.never_rejoin, tried);
        hosts.retain(|h| matches!(self.plan.transport_of(h), Some(plan::Transport::Ssh(_))));
        hosts
    }

    /// The hosts tried, or quarantined, for attempt `attempt`: none is tried again for it.
    fn tried_for(&mut self, attempt: u32) -> &mut Vec<String> {
        if self.rejoin_tried.0 != attempt {
            self.rejoin_tried = (attempt, Vec::new());
        }
        &mut self.rejoin_tried.1
    }

    /// Node `node_rank`, which a restart that began `since` could not reach within
    /// `reconnect`'s wait, replaced by a spare or by a node let back in (`rejoin`), or left
    /// out (`restart.min_nodes`), and the fleet of the new plan. Should none of those be
    /// done after all (the node to let back in did not answer), it is waited for until
    /// `restart.node_wait` after `since`, and the fleet is returned with it back. `Gone`
    /// when it did not come back.
    async fn without_gone(
        &mut self,
        node_rank: usize,
        mut fleet: Fleet,
        attempt: u32,
        since: Instant,
    ) -> Result<(Fleet, Vec<Option<TransportError>>), Unsettled> {
        let node_wait = self.plan.restart.node_wait;
        let stand_in = self.stand_in(attempt);
        if stand_in {
            let waited = decide::reconnect_wait(node_wait, true);
            let error = fleet.error(node_rank).unwrap_or("not connected").to_string();
            let blamed = [decide::unreachable_before_restart(node_rank, &error, waited)];
            fleet = match self.replace_in(fleet, &blamed, attempt).await {
                Ok(rearranged) => return Ok(rearranged),
                Err(fleet) => fleet,
            };
        }
        let rest = node_wait.saturating_sub(since.elapsed());
        if !stand_in || rest.is_zero() {
            return Err(Unsettled::Gone { node_rank, fleet });
        }
        match fleet.reconnect(&self.plan, self.events, rest).await {
            Ok(fleet) => Ok((fleet, (0..self.plan.nnodes()).map(|_| None).collect())),
            Err((node_rank, fleet)) => Err(Unsettled::Gone { node_rank, fleet }),
        }
    }

    /// The nodes that could not be connected (`errors`) replaced, and the fleet of the new
    /// plan; or the first error when the run cannot do without them.
    async fn without_unreachable(
        &mut self,
        fleet: Fleet,
        errors: Vec<Option<TransportError>>,
        attempt: u32,
    ) -> Result<(Fleet, Vec<Option<TransportError>>), Unsettled> {
        // An SSH key not loaded fails every node: that is no node's fault.
        let blamed = blame::unless_most(reserve::unreachable(&errors), self.plan.nnodes());
        match self.replace_in(fleet, &blamed, attempt).await {
            Ok(rearranged) => Ok(rearranged),
            Err(fleet) => {
                let error = ConnectError::first(&self.plan, errors).expect("a node failed");
                self.close(fleet).await;
                Err(RunError::Connect(error).into())
            }
        }
    }

    /// The preflight, when the run has one, of every node of the plan over `fleet`, with the
    /// probes already started; `import torch` too on the nodes new to the run (not `known`).
    async fn check(
        &self,
        fleet: &Fleet,
        known: &[String],
        probes: Vec<Option<Started>>,
    ) -> Result<(Preflighted, Vec<Option<Started>>), RunError> {
        let (plan, events) = (&self.plan, self.events);
        if self.options.preflight {
            let _ = events.send(Event::PreflightStarted { nnodes: plan.nnodes() }).await;
        }
        let fresh = reserve::fresh(plan, known);
        preflight::preflight(plan, self.run_id, fleet, self.options, &fresh, events, probes).await
    }

    /// `replace`, and the fleet of the new plan: the new nodes connected, with their errors.
    /// Without a change, the fleet as it was.
    async fn replace_in(
        &mut self,
        fleet: Fleet,
        blamed: &[Blamed],
        attempt: u32,
    ) -> Result<(Fleet, Vec<Option<TransportError>>), Fleet> {
        let replace = decide::replacement(&self.plan.roster, blamed.to_vec());
        match self.replace(replace, attempt).await {
            Some(previous) => Ok(fleet.rearranged(&previous, &self.plan, self.events).await),
            None => Err(fleet),
        }
    }

    /// Perform `replace` (see `decide`): each blamed node quarantined, the plan the one of
    /// attempt `attempt`, the first without them; the one before is returned. `None`: nothing
    /// blamed, or no room; the plan is unchanged.
    async fn replace(&mut self, replace: Replace, attempt: u32) -> Option<LaunchPlan> {
        let replace = match replace {
            // A node out of reach is waited for (`restart.node_wait`); one blamed for a
            // crash keeps its place and the run goes on: only for the first is a node that
            // was out of reach let back in, a risk worth its while only then.
            Replace::NoRoom { blamed, reserve: true }
                if blamed.iter().any(|b| decide::out_of_reach(&b.reason)) && self.rejoin(attempt).await =>
            {
                decide::replacement(&self.plan.roster, blamed)
            }
            replace => replace,
        };
        let (blamed, roster, changes) = match replace {
            Replace::Nothing => return None,
            Replace::NoRoom { blamed, reserve } => {
                self.no_room(&blamed, reserve);
                return None;
            }
            Replace::With { blamed, roster, changes } => (blamed, roster, changes),
        };
        let events = self.events;
        let mut quarantine_file = None;
        let of = reserve::Of { plan: &self.plan, run_id: self.run_id };
        let mut quarantined = Vec::new();
        for b in blamed {
            let host = self.plan.nodes[b.node_rank].host.clone();
            let saved = decide::remembered(&b.reason)
                && reserve::keep_out(of, &mut quarantine_file, &host, &b.reason, attempt);
            quarantined.push(host.clone());
            let _ = events.send(Event::NodeQuarantined { attempt, host, reason: b.reason, saved }).await;
        }
        // Quarantined for this attempt, none is a node to let back in for it.
        self.tried_for(attempt).extend(quarantined);
        let next = self.plan.with_roster(roster);
        let previous = std::mem::replace(&mut self.plan, next);
        let mut dropped = Vec::new();
        for change in changes {
            match change {
                Change::Promoted { node_rank, spare, replaced } => {
                    let event = Event::SparePromoted { attempt, node_rank, host: spare, replaced };
                    let _ = events.send(event).await;
                }
                Change::Dropped { host } => dropped.push(host),
            }
        }
        let plan = &self.plan;
        let nprocs: Vec<u32> = plan.nodes.iter().map(|n| n.nproc).collect();
        if nprocs != previous.nodes.iter().map(|n| n.nproc).collect::<Vec<_>>() {
            let _ = events
                .send(Event::WorldChanged {
                    attempt,
                    nnodes: plan.nnodes(),
                    world_size: plan.world_size,
                    hosts: plan.nodes.iter().map(|n| n.host.clone()).collect(),
                    nprocs,
                    dropped,
                })
                .await;
        }
        Some(previous)
    }

    /// Blamed nodes the run cannot do without: a config without spares or `min_nodes`
    /// (no `reserve`) runs as it always has; one whose spares are used up is told why it now
    /// waits.
    fn no_room(&self, blamed: &[Blamed], reserve: bool) {
        for b in blamed {
            let (rank, host) = (b.node_rank, &self.plan.nodes[b.node_rank].host);
            if reserve {
                tracing::warn!("node {rank} ({host}) is to blame ({}), but no spare is left and restart.min_nodes does not let the run go on without it", b.reason);
            } else {
                tracing::debug!("node {rank} ({host}) is to blame ({}); no spare", b.reason);
            }
        }
    }

    /// With no spare left for a node out of reach blamed for attempt `attempt`: the nodes
    /// this run quarantined for being out of reach that answer again let back in as spares,
    /// each tried once for the attempt and let back in once in the run (see
    /// `decide::rejoinable`); whether any was. The checks a spare passes before an attempt
    /// uses it are still to come.
    async fn rejoin(&mut self, attempt: u32) -> bool {
        let hosts = self.rejoin_candidates(attempt);
        self.tried_for(attempt).extend(hosts.iter().cloned());
        if hosts.is_empty() {
            return false;
        }
        let why = |host: String| (host, "out of reach when quarantined, it answers again".to_string());
        let answered = reserve::answering(&self.plan, hosts).await.into_iter().map(why).collect();
        let (roster, released) = decide::release(&self.plan.roster, answered);
        self.never_rejoin.extend(released.iter().map(|(host, _)| host.clone()));
        let any = roster.is_some();
        self.release(roster, released, attempt).await;
        any
    }

    /// Let back in the nodes this run quarantined for a fault that turned out to be no
    /// node's, as decided after failed attempt `attempt` (see `decide`): `roster`, the plan's
    /// without them quarantined, and each with why. A spare again for this run, and out of
    /// the config's quarantine file for later runs.
    async fn release(&mut self, roster: Option<Roster>, released: Vec<(String, String)>, attempt: u32) {
        if let Some(roster) = roster {
            self.plan = self.plan.with_roster(roster);
        }
        for (host, reason) in released {
            let saved = reserve::let_in(reserve::Of { plan: &self.plan, run_id: self.run_id }, &host);
            let _ = self.events.send(Event::NodeReleased { attempt, host, reason, saved }).await;
        }
    }
}

/// Why allocation `job_id` has ended, from `ask` ([`slurm::job_state`]), and whether for its
/// time limit or a preemption: `None` while it runs or when Slurm cannot say.
async fn allocation_state<F, Fut>(job_id: &str, ask: F) -> Option<decide::AllocationEnd>
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
            Ok(Ok(state)) => {
                let preemption = slurm::ended_by(state.as_deref());
                let cancelled = state.as_deref().is_some_and(|s| s.trim().eq_ignore_ascii_case("CANCELLED"));
                let why = slurm::allocation_ended(job_id, state.as_deref())?;
                return Some(decide::AllocationEnd { why, preemption, cancelled });
            }
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

/// Each node's ranks' NCCL flight-recorder dumps after failed attempt `attempt`, copied into
/// the run's files (`NcclDumpsCollected`), all nodes at once, within `NCCL_COLLECT`; then what
/// was copied (`NcclDumpsSaved`), if anything was. A node that was lost is not asked: it
/// would only cost the wait. The commands start at the call; the future owns what it needs.
fn copy_nccl_dumps(
    plan: &LaunchPlan,
    run_id: &str,
    fleet: &Fleet,
    attempt: u32,
    outcomes: &[NodeOutcome],
    events: EventSender,
) -> impl Future<Output = ()> + Send + 'static {
    let dir = crate::nccl::dump_dir(run_id, attempt);
    let lost = |r: usize| outcomes.iter().any(|o| o.node_rank == r && matches!(o.exit, NodeExit::Lost(_)));
    let asks = fleet.on_each(NCCL_COLLECT, |rank| {
        let node = &plan.nodes[rank];
        (node.dumps_nccl() && !lost(rank))
            .then(|| crate::nccl::command(&plan.workdir, &dir, node.global_ranks()))
    });
    let on_node = format!("{}/{dir}", plan.workdir.trim_end_matches('/'));
    let hosts: Vec<String> = plan.nodes.iter().map(|n| n.host.clone()).collect();
    async move {
        let mut saved = Vec::new();
        let mut missing = Vec::new();
        for (node_rank, ran) in asks.all().await {
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
                        let _ = events.send(Event::NcclDumpsCollected { attempt, node_rank, dumps }).await;
                    }
                    continue;
                }
                Err(why) => why,
            };
            let host = &hosts[node_rank];
            tracing::warn!(
                "node {node_rank} ({host}): cannot copy its NCCL flight-recorder dumps from {on_node}: {why}"
            );
        }
        if !saved.is_empty() || !missing.is_empty() {
            saved.sort_unstable();
            missing.sort_unstable();
            let _ = events.send(Event::NcclDumpsSaved { attempt, ranks: saved, missing }).await;
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
        fleet.on_each(RESUME_LOOKUP, |rank| (rank == master).then(|| command.clone())).all().await.pop()?;
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
    crate::remote::shell::script_call(crate::remote::scripts::LATEST_SCRIPT, "herd-latest", [workdir, glob])
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

/// Every node connected; on each, as soon as it is, the first attempt's job agent, which
/// starts nothing before it gets its env, with the preflight's probe as its first phase if
/// the run probes. One login per node, overlapping the other handshakes, as pdsh's logins
/// do. Each agent sweeps its node's leftovers as it starts.
/// The nodes that could not be connected are in the fleet with their errors (see `settle`).
async fn connect(
    plan: &LaunchPlan,
    run_id: &str,
    options: RunOptions,
    events: &EventSender,
) -> (Fleet, EarlyAgents, Vec<Option<TransportError>>) {
    let probing = preflight::probe_options(plan, run_id, options, &[]);
    let port_known = options.preflight || matches!(plan.master.port, PortSpec::Fixed(_));
    let shared = crate::remote::agent::SharedTexts::default();
    let early = |node: &crate::plan::NodePlan| {
        let sweep = gang::presweep(run_id, 0, probing.is_some(), true);
        let job = gang::job_invocation(plan, run_id, node, 0, port_known, sweep);
        let inv = match &probing {
            Some(probe) => preflight::with_probe_phase(plan, node, probe, job),
            None => job,
        };
        vec![shared.invocation(inv)]
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

    /// A preemption is what a run ends as only when no interrupt came, before or after it:
    /// someone who stopped the run is never requeued.
    #[tokio::test]
    async fn an_interrupt_before_or_after_a_preemption_wins() {
        use crate::events::Preemption::TimeLimit;
        for signals in [
            vec![Signal::Checkpoint(TimeLimit), Signal::Interrupt],
            vec![Signal::Interrupt, Signal::Checkpoint(TimeLimit)],
        ] {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let mut interrupts = Interrupts::new(rx);
            for s in &signals {
                tx.send(*s).unwrap();
                interrupts.recv().await;
            }
            assert_eq!(interrupts.preempted(), None, "{signals:?}");
        }
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut interrupts = Interrupts::new(rx);
        tx.send(Signal::Checkpoint(TimeLimit)).unwrap();
        tx.send(Signal::Checkpoint(crate::events::Preemption::Preempted)).unwrap();
        interrupts.recv().await;
        interrupts.recv().await;
        assert_eq!(interrupts.preempted(), Some(TimeLimit), "the first one counts");
    }

    /// Ctrl-C or SIGTERM ends the wait for Slurm's word on the allocation at once, however
    /// long slurmctld takes (here: never answers).
    #[tokio::test]
    async fn an_interrupt_ends_the_allocation_check_at_once() {
        let ask = |_: String| std::future::pending::<Result<Option<String>, TransportError>>();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut interrupts = Interrupts::new(rx);
        tx.send(Signal::Interrupt).unwrap();
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
        assert!(ended.why.contains("cancelled"), "{ended:?}");
        assert_eq!(ended.preemption, None);
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
