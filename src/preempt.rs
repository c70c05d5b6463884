//! Time limits, preemption and requeue, in one place: what a signal Slurm sends herd's batch
//! step means (`forward_signals`, from the job's state as it arrives: `arrival`), what herd
//! says of a job that is ending, and the requeue of the job (`Requeue`). What a run ends as,
//! and whether it is requeued, is decided in `supervisor::decide` (`Context::preempted`,
//! `run_end`, `requeue`); the supervisor only performs it. Outside Slurm, SIGTERM is an
//! interrupt like Ctrl-C.

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::process::Command;
use tokio::sync::mpsc;

use crate::events::{Preemption, RunStatus};
use crate::supervisor::Signal;
use crate::supervisor::{requeue_verdict, Kept, RequeueVerdict};
use crate::transport::slurm::own_job_id;
use crate::transport::TransportError;

/// Every SIGINT and SIGTERM becomes one request on `tx`; the supervisor decides what each
/// means. With `checkpoints` (`herd run`): SIGUSR1 is a time limit's warning, and SIGTERM in
/// a Slurm job (`SLURM_JOB_ID` set) a preemption, each a `Signal::Checkpoint`, unless Slurm
/// says the job is done already when it comes (`scancel` sends SIGTERM too: see
/// [`arrival`]). A SIGTERM that is the time limit itself (no warning came) is one too,
/// and the job is requeued at once (if `checkpoints` says so): Slurm kills what is left after
/// its KillWait. Without `checkpoints`, every signal is an interrupt (and SIGUSR1 is not
/// watched). `hooks`: the notify hooks running or waiting are killed at each signal, also once
/// the run is over and herd only waits for them.
pub fn forward_signals(
    tx: mpsc::UnboundedSender<Signal>,
    hooks: Option<crate::notify::Stopper>,
    checkpoints: Option<Requeue>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let in_slurm = std::env::var_os("SLURM_JOB_ID").is_some_and(|v| !v.is_empty());
    let mut kinds = vec![(SignalKind::interrupt(), Signal::Interrupt)];
    kinds.push(match checkpoints.is_some() && in_slurm {
        true => (SignalKind::terminate(), Signal::Checkpoint(Preemption::Preempted)),
        false => (SignalKind::terminate(), Signal::Interrupt),
    });
    if checkpoints.is_some() {
        kinds.push((SignalKind::user_defined1(), Signal::Checkpoint(Preemption::TimeLimit)));
    }
    for (kind, meaning) in kinds {
        let (tx, hooks, requeue) = (tx.clone(), hooks.clone(), checkpoints.clone());
        match signal(kind) {
            Ok(mut stream) => {
                tokio::spawn(async move {
                    while stream.recv().await.is_some() {
                        if let Some(hooks) = &hooks {
                            hooks.stop("herd got a signal");
                        }
                        let meaning = match meaning {
                            // Once herd has requeued its job, Slurm ends this allocation with
                            // a SIGTERM of its own: no one stopped the run.
                            Signal::Checkpoint(_) if requeue.as_ref().is_some_and(Requeue::done) => {
                                tracing::debug!("a signal after herd requeued its Slurm job: ignored");
                                continue;
                            }
                            Signal::Checkpoint(why) => match arrival_now(why).await {
                                Arrival::Cancelled => Signal::Interrupt,
                                Arrival::Checkpoint(why) => Signal::Checkpoint(why),
                                Arrival::Ending(why) => {
                                    eprintln!("herd: {}", ending(why));
                                    // The ranks are told first; the requeue must not wait for
                                    // them, and only a run still going is requeued.
                                    let _ = tx.send(Signal::Checkpoint(why));
                                    if let Some(requeue) = &requeue {
                                        requeue.early().await;
                                    }
                                    continue;
                                }
                            },
                            other => other,
                        };
                        // The run may be over already (herd waits for hooks): nothing to stop.
                        let _ = tx.send(meaning);
                    }
                });
            }
            Err(e) => tracing::warn!("cannot watch signal {kind:?}: {e}"),
        }
    }
}

/// What herd says of a Slurm job that is ending as a signal comes (`Arrival::Ending`).
fn ending(why: Preemption) -> &'static str {
    match why {
        Preemption::Preempted => {
            "the Slurm job's preemption grace is over: Slurm has sent SIGTERM to every process of \
             the job and kills what is left after its KillWait (ranks that save on SIGTERM save now)"
        }
        _ => {
            "the Slurm job is at its time limit, with no warning early enough before it \
             (herd submit --warn-before): Slurm has sent SIGTERM to every process of the job and \
             kills what is left after its KillWait (ranks that save on SIGTERM save now)"
        }
    }
}

/// What the Slurm job herd runs in is as `why` arrives (see [`arrival`]). Slurm's answer
/// is awaited for a few seconds at most; without one, it is what `why` says.
async fn arrival_now(why: Preemption) -> Arrival {
    let Some(job_id) = own_job_id() else { return Arrival::Checkpoint(why) };
    let taken = match why {
        Preemption::TimeLimit => "a time limit's warning",
        Preemption::Preempted => "a preemption",
        Preemption::OutOfTime => "the time limit",
    };
    match job_now(&job_id).await {
        Ok(Some(now)) => {
            let arrival = arrival(why, &now);
            if arrival == Arrival::Cancelled {
                tracing::info!(
                    "Slurm job {job_id} is {}: cancelled, not preempted: the run stops as interrupted",
                    now.state
                );
            }
            arrival
        }
        Ok(None) => Arrival::Checkpoint(why),
        Err(e) => {
            tracing::warn!("{e}: taken as {taken}");
            Arrival::Checkpoint(why)
        }
    }
}

/// Job `job_id`'s state as Slurm says it within `STATE_QUERY`, or why it did not.
async fn job_now(job_id: &str) -> Result<Option<JobNow>, String> {
    match tokio::time::timeout(STATE_QUERY, scontrol_job_state(job_id)).await {
        Ok(Ok(now)) => Ok(now),
        Ok(Err(e)) => Err(format!("cannot ask Slurm for job {job_id}'s state: {e}")),
        Err(_) => Err(format!("Slurm did not say job {job_id}'s state within {} s", STATE_QUERY.as_secs())),
    }
}

/// `herd run`'s requeue of the Slurm job it runs in (`--requeue`), at most once: after the
/// run stopped for a time limit or a preemption ([`Requeue::now`]), or, when the job is
/// ending already (the time limit itself, a preemption's grace over), at once while the run
/// has not decided its end ([`Requeue::early`]): Slurm kills what is left, herd included,
/// after its KillWait. Never a job Slurm says was cancelled. Off, it does nothing.
#[derive(Clone)]
pub struct Requeue {
    on: bool,
    end: crate::supervisor::RunEnd,
    /// Held through a requeue, so that the run's end waits for one under way.
    busy: Arc<tokio::sync::Mutex<()>>,
    /// Set as a requeue starts (cleared if it fails): the signals it brings are Slurm's.
    requeued: Arc<AtomicBool>,
}

impl Requeue {
    pub fn new(on: bool, end: crate::supervisor::RunEnd) -> Requeue {
        let busy = Arc::new(tokio::sync::Mutex::new(()));
        Requeue { on, end, busy, requeued: Arc::new(AtomicBool::new(false)) }
    }

    /// Whether herd has requeued its job, or is requeuing it.
    pub fn done(&self) -> bool {
        self.requeued.load(Ordering::SeqCst)
    }

    /// The requeue of a job that is ending, if the run has not decided its end.
    pub async fn early(&self) {
        let _busy = self.busy.lock().await;
        if !self.end.decided() {
            self.requeue().await;
        }
    }

    /// The requeue of a run that stopped for a time limit or a preemption.
    pub async fn now(&self) {
        let _busy = self.busy.lock().await;
        self.requeue().await;
    }

    /// What follows a run that ended as `ended` (its status and what it kept; `None`: it
    /// could not run): one stopped for a time limit or a preemption (not a cancelled one)
    /// goes on in a new allocation, if `supervisor::decide::requeue` says so; otherwise a requeue under
    /// way is waited for.
    pub async fn after_run(&self, ended: Option<(RunStatus, Option<&Kept>)>) {
        let Some((_, kept)) = ended.filter(|(status, _)| status.preempted()) else {
            return self.settle().await;
        };
        if !self.on {
            return;
        }
        match requeue_verdict(crate::transport::slurm::restart_count(), kept) {
            RequeueVerdict::Refused(why) => eprintln!("herd: {why}"),
            RequeueVerdict::Warned(why) => {
                eprintln!("herd: warning: {why}");
                self.now().await
            }
            RequeueVerdict::Go => self.now().await,
        }
    }

    /// Waits for a requeue under way, if any: herd's exit would cut it short.
    pub async fn settle(&self) {
        let _busy = self.busy.lock().await;
    }

    /// `scontrol requeue` of the job, unless it was requeued already or Slurm says it was
    /// cancelled; what came of it on stderr. A requeue that failed may be tried again.
    async fn requeue(&self) {
        if !self.on || self.done() {
            return;
        }
        let Some(job_id) = own_job_id() else {
            tracing::warn!("--requeue: not in a Slurm job (no SLURM_JOB_ID): nothing to requeue");
            return;
        };
        // A SIGTERM taken as a preemption because Slurm did not answer in time may have been
        // a cancel: asked again, a cancelled job stays cancelled.
        if let Ok(Some(now)) = job_now(&job_id).await {
            if arrival(Preemption::Preempted, &now) == Arrival::Cancelled {
                return eprintln!("herd: Slurm job {job_id} was cancelled ({}): not requeued", now.state);
            }
        }
        self.requeued.store(true, Ordering::SeqCst);
        match scontrol_requeue(&job_id).await {
            Ok(Requeued::Now) => {
                eprintln!("herd: requeued Slurm job {job_id}: it goes on in a new allocation")
            }
            Ok(Requeued::Already) => {
                eprintln!(
                    "herd: Slurm job {job_id} is requeued already (by Slurm): it goes on in a new allocation"
                )
            }
            Err(e) => {
                self.requeued.store(false, Ordering::SeqCst);
                eprintln!("herd: could not requeue Slurm job {job_id}: {e}")
            }
        }
    }
}

/// How long Slurm may take to say a job's state as a signal comes, or before a requeue.
const STATE_QUERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Job `job_id`'s state as `scontrol show job` says it (squeue lists nothing for a cancelled
/// job that is still completing).
pub async fn scontrol_job_state(job_id: &str) -> Result<Option<JobNow>, TransportError> {
    let out = Command::new("scontrol")
        .args(["show", "job", "--oneliner", job_id])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| TransportError::Slurm(format!("cannot run scontrol: {e}")))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(TransportError::Slurm(format!("scontrol show job {job_id}: {}", stderr.trim())));
    }
    Ok(parse_job_now(&String::from_utf8_lossy(&out.stdout)))
}

/// A job's `JobState` (`RUNNING`, `COMPLETING`, `CANCELLED`, ...), `Reason` (`None`,
/// `TimeLimit`, ...), `PreemptTime` (when it was preempted, if it was) and `EndTime`, as
/// `scontrol show job` says them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobNow {
    pub state: String,
    pub reason: String,
    pub preempt_time: Option<String>,
    pub end_time: String,
}

impl JobNow {
    /// Slurm has preempted the job (its grace may still run).
    pub fn preempted(&self) -> bool {
        self.preempt_time.is_some()
    }

    /// A preemption's grace is over: slurmctld then stamps the job's `PreemptTime` and
    /// `EndTime` both with the moment it kills it. A job `scancel`led during the grace ends
    /// later than it was preempted.
    pub fn grace_over(&self) -> bool {
        self.preempt_time.as_deref() == Some(self.end_time.as_str())
    }
}

/// The `JobState=`, `Reason=`, `PreemptTime=` and `EndTime=` of `scontrol show job
/// --oneliner`'s line.
pub fn parse_job_now(line: &str) -> Option<JobNow> {
    let field = |name: &str| line.split_whitespace().find_map(|w| w.strip_prefix(name)).map(str::to_string);
    let preempt_time = field("PreemptTime=").filter(|t| !matches!(t.as_str(), "None" | "Unknown" | ""));
    Some(JobNow {
        state: field("JobState=")?,
        reason: field("Reason=").unwrap_or_default(),
        preempt_time,
        end_time: field("EndTime=").unwrap_or_default(),
    })
}

/// What a signal Slurm sent herd's batch step means, from the job's state as it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// A cancel (`scancel` sends SIGTERM too): no checkpoint, no requeue.
    Cancelled,
    /// A warning or a preemption's grace: the ranks checkpoint, the job goes on.
    Checkpoint(Preemption),
    /// The job is ending already: its time limit itself, with no warning early enough
    /// (`OutOfTime`), or the end of a preemption's grace (`Preempted`). Slurm kills what is
    /// left after its KillWait: the ranks checkpoint if they can; a requeue must not wait.
    Ending(Preemption),
}

/// What signal `why` (SIGUSR1: a warning; SIGTERM: a preemption) means for a job that is
/// `now` as it arrives. `scancel` marks the job done at once: cancelled, or, for a SIGTERM,
/// completing with no reason. A time limit's SIGTERM finds it completing for `TimeLimit` (or
/// timed out). A preemption (`PreemptTime` set) is one whatever the signal: a site's
/// `preempt_send_user_signal` sends the job's warning signal at once, and its grace's end a
/// SIGTERM to a completing job (see [`JobNow::grace_over`]: a cancel during the grace is
/// still a cancel). `scancel --signal=TERM --batch` leaves the job running. A warning is
/// never a cancel.
pub fn arrival(why: Preemption, now: &JobNow) -> Arrival {
    use Preemption::{OutOfTime, Preempted};
    let timed_out = now.reason.eq_ignore_ascii_case("TimeLimit");
    match now.state.trim().to_ascii_uppercase().as_str() {
        "CANCELLED" => Arrival::Cancelled,
        "TIMEOUT" => Arrival::Ending(OutOfTime),
        "COMPLETING" if timed_out => Arrival::Ending(OutOfTime),
        "COMPLETING" | "PREEMPTED" if now.grace_over() => Arrival::Ending(Preempted),
        "COMPLETING" if why == Preempted => Arrival::Cancelled,
        _ if now.preempted() => Arrival::Checkpoint(Preempted),
        _ => Arrival::Checkpoint(why),
    }
}

/// What came of a requeue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeued {
    /// herd's `scontrol requeue` did it.
    Now,
    /// Slurm had requeued the job already (a site's `PreemptMode=REQUEUE`).
    Already,
}

/// `scontrol requeue JOB_ID`: the job goes back to the queue, and its batch script runs again
/// in a new allocation (`SLURM_RESTART_COUNT` counts the times).
pub async fn scontrol_requeue(job_id: &str) -> Result<Requeued, TransportError> {
    let run =
        Command::new("scontrol").args(["requeue", job_id]).stdin(Stdio::null()).kill_on_drop(true).output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), run)
        .await
        .map_err(|_| TransportError::Slurm("scontrol requeue: no answer within 60 s".into()))?
        .map_err(|e| TransportError::Slurm(format!("cannot run scontrol: {e}")))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        return Ok(Requeued::Now);
    }
    if requeued_already(&stderr) {
        return Ok(Requeued::Already);
    }
    Err(TransportError::Slurm(format!("scontrol requeue {job_id}: {}", stderr.trim())))
}

/// Whether `scontrol requeue`'s error says the job is back in the queue already (Slurm's
/// `Job is pending execution`).
pub fn requeued_already(stderr: &str) -> bool {
    stderr.to_ascii_lowercase().contains("job is pending execution")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `scancel` marks the job done at once (squeue then lists nothing while it completes);
    /// a preemption's SIGTERM finds it running, and a time limit's warning came first. A time
    /// limit reached with no warning is completing for `TimeLimit` (as a real slurmctld says).
    #[test]
    fn a_cancelled_job_is_told_from_a_preempted_or_timed_out_one() {
        use Preemption::{OutOfTime, Preempted, TimeLimit};
        let line = "JobId=1 JobName=job.sh UserId=root(0) JobState=COMPLETING Reason=None Requeue=1\n";
        let now = |state: &str, reason: &str| JobNow {
            state: state.into(),
            reason: reason.into(),
            ..JobNow::default()
        };
        assert_eq!(parse_job_now(line), Some(now("COMPLETING", "None")));
        assert_eq!(parse_job_now("JobId=1 Partition=x"), None);
        let line =
            "JobId=7 JobState=COMPLETING Reason=TimeLimit Dependency=(null) Restarts=0 PreemptTime=None";
        assert_eq!(parse_job_now(line), Some(now("COMPLETING", "TimeLimit")));
        let line = "JobId=7 JobState=RUNNING Reason=None EndTime=2026-12-03T18:01:05 PreemptTime=2026-12-03T18:00:35";
        let graced = parse_job_now(line).unwrap();
        assert_eq!(
            (graced.preempt_time.as_deref(), graced.end_time.as_str()),
            (Some("2026-12-03T18:00:35"), "2026-12-03T18:01:05")
        );

        assert_eq!(arrival(Preempted, &now("COMPLETING", "None")), Arrival::Cancelled);
        assert_eq!(arrival(TimeLimit, &now("CANCELLED", "None")), Arrival::Cancelled);
        assert_eq!(arrival(Preempted, &now("RUNNING", "None")), Arrival::Checkpoint(Preempted));
        assert_eq!(arrival(TimeLimit, &now("COMPLETING", "None")), Arrival::Checkpoint(TimeLimit));
        assert_eq!(arrival(Preempted, &now("PREEMPTED", "None")), Arrival::Checkpoint(Preempted));
        assert_eq!(arrival(Preempted, &now("COMPLETING", "TimeLimit")), Arrival::Ending(OutOfTime));
        assert_eq!(arrival(Preempted, &now("TIMEOUT", "TimeLimit")), Arrival::Ending(OutOfTime));
        assert_eq!(arrival(TimeLimit, &now("TIMEOUT", "None")), Arrival::Ending(OutOfTime));
    }

    /// A site's preemption with a grace (`GraceTime`, `preempt_send_user_signal`), as a real
    /// slurmctld shows it: the job's warning signal while it runs with a `PreemptTime`, then,
    /// at the grace's end, SIGTERM to the completing job, `PreemptTime` and `EndTime` both the
    /// moment of the kill. A cancel during the grace ends the job later than its preemption.
    #[test]
    fn a_sites_preemption_is_told_by_its_preempt_time() {
        use Preemption::{Preempted, TimeLimit};
        let line = "JobId=1 JobState=RUNNING Reason=None EndTime=2026-12-03T18:01:05 PreemptTime=2026-12-03T18:00:35";
        let graced = parse_job_now(line).unwrap();
        assert!(graced.preempted() && !graced.grace_over());
        assert_eq!(arrival(TimeLimit, &graced), Arrival::Checkpoint(Preempted));
        assert_eq!(arrival(Preempted, &graced), Arrival::Checkpoint(Preempted));
        let line = "JobId=1 JobState=COMPLETING Reason=None EndTime=2026-12-03T18:01:12 PreemptTime=2026-12-03T18:01:12";
        let ended = parse_job_now(line).unwrap();
        assert_eq!(arrival(Preempted, &ended), Arrival::Ending(Preempted));
        let line = "JobId=1 JobState=COMPLETING Reason=None EndTime=2026-12-03T18:00:50 PreemptTime=2026-12-03T18:00:35";
        let cancelled = parse_job_now(line).unwrap();
        assert_eq!(arrival(Preempted, &cancelled), Arrival::Cancelled);
        let unknown = parse_job_now("JobId=1 JobState=RUNNING Reason=None PreemptTime=Unknown").unwrap();
        assert!(!unknown.preempted());
    }

    #[test]
    fn a_job_slurm_requeued_itself_is_no_failed_requeue() {
        assert!(requeued_already("scontrol: error: Job is pending execution for job 42\n"));
        assert!(!requeued_already("scontrol: error: Invalid job id specified"));
    }
}
