//! The run's record beside its logs: what was run (`config.toml`, the file as given;
//! `plan.json`, the resolved plan; `herd.json`, herd's version and the launch directory's git
//! commit) and how it went (`summary.json`). Secrets never appear: the plan masks forwarded
//! values, and the launching environment is not written.

use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::events::RunStatus;
use crate::plan::LaunchPlan;
use crate::supervisor::AttemptSummary;

/// What was run, written as the run starts.
pub fn write_start(
    run_dir: &Path,
    plan: &LaunchPlan,
    config_file: &Path,
    launch_dir: &Path,
) -> io::Result<()> {
    std::fs::copy(config_file, run_dir.join("config.toml"))?;
    std::fs::write(run_dir.join("plan.json"), super::plan_view::json(plan))?;
    let slurm = crate::transport::slurm::own_job_id()
        .map(|job_id| json!({ "job_id": job_id, "restart_count": crate::transport::slurm::restart_count() }));
    let restarts = crate::transport::slurm::restart_count();
    let previous = match (&slurm, run_dir.parent(), run_dir.file_name()) {
        (Some(s), Some(logs), Some(this)) if restarts > 0 => {
            let job_id = s["job_id"].as_str().unwrap_or_default();
            previous_run(logs, &this.to_string_lossy(), &plan.config_key, job_id, restarts)
        }
        _ => None,
    };
    let about = json!({
        "herd_version": env!("CARGO_PKG_VERSION"),
        "launch_dir": launch_dir.display().to_string(),
        "git": git_state(launch_dir),
        "slurm": slurm,
        "previous_run": previous,
    });
    std::fs::write(run_dir.join("herd.json"), pretty(&about))
}

/// The run before `this` in the lineage of Slurm job `job_id`, requeued `restarts` times: of
/// the runs in `logs` of the same config (`config_key`) whose herd.json names that job at a
/// lower restart count, the newest (run ids sort by their start).
pub fn previous_run(
    logs: &Path,
    this: &str,
    config_key: &str,
    job_id: &str,
    restarts: u32,
) -> Option<String> {
    let of = |name: &str, file: &str| std::fs::read_to_string(logs.join(name).join(file)).unwrap_or_default();
    let mut runs: Vec<String> = std::fs::read_dir(logs)
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.as_str() < this)
        .filter(|name| {
            let about = serde_json::from_str::<Value>(&of(name, "herd.json")).unwrap_or_default();
            let started = of(name, "events.jsonl");
            let started =
                serde_json::from_str::<Value>(started.lines().next().unwrap_or_default()).unwrap_or_default();
            about["slurm"]["job_id"] == job_id
                && about["slurm"]["restart_count"].as_u64().is_some_and(|c| c < u64::from(restarts))
                && started["config_key"] == config_key
        })
        .collect();
    runs.sort();
    runs.pop()
}

/// `summary`, with the lineage's share: this run's effective seconds added to the previous
/// run's lineage total (read from its summary.json), and the previous run named.
pub fn with_lineage(mut summary: Value, run_dir: &Path) -> Value {
    let about = std::fs::read_to_string(run_dir.join("herd.json")).unwrap_or_default();
    let previous =
        serde_json::from_str::<Value>(&about).ok().and_then(|v| v["previous_run"].as_str().map(String::from));
    let own = summary["effective_seconds"].as_f64().unwrap_or(0.0);
    let before = previous
        .as_ref()
        .and_then(|p| std::fs::read_to_string(run_dir.parent()?.join(p).join("summary.json")).ok())
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|s| s["lineage"]["effective_seconds"].as_f64().or(s["effective_seconds"].as_f64()))
        .unwrap_or(0.0);
    summary["lineage"] = json!({ "previous_run": previous, "effective_seconds": own + before });
    summary
}

/// The launch directory's commit and whether its tracked files differ from it; `null` when it
/// is no repository (or git is not installed).
fn git_state(dir: &Path) -> Value {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    match (git(&["rev-parse", "HEAD"]), git(&["status", "--porcelain", "--untracked-files=no"])) {
        (Some(commit), Some(status)) => json!({ "commit": commit, "dirty": !status.is_empty() }),
        _ => Value::Null,
    }
}

/// How it went: every attempt's start, end, class, root cause and culprit, and the share of
/// the run's wall time that was training: each attempt's time after its first progress.
pub fn summary(
    run_id: &str,
    status: RunStatus,
    attempts: &[AttemptSummary],
    started: SystemTime,
    ended: SystemTime,
) -> Value {
    let wall = ended.duration_since(started).unwrap_or_default();
    let effective: Duration =
        attempts.iter().filter_map(|a| Some(a.duration.saturating_sub(a.first_progress?))).sum();
    let last = attempts.len().saturating_sub(1);
    let rows: Vec<Value> = attempts
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let class = match &a.verdict {
                Some(v) => v.class.as_str(),
                None if i == last && status == RunStatus::Interrupted => "interrupted",
                None if i == last && status == RunStatus::Preempted => "preempted",
                None if i == last && status == RunStatus::TimeLimit => "time-limit",
                None => "ok",
            };
            let root = a.verdict.as_ref().and_then(|v| v.root_cause.as_ref());
            json!({
                "attempt": a.attempt,
                "started": rfc3339(a.started_at),
                "ended": rfc3339(a.started_at + a.duration),
                "seconds": a.duration.as_secs_f64(),
                "class": class,
                "root_cause": root,
                "culprit": root.map(super::summary::root_cause_words),
                "progress_after_seconds": a.first_progress.map(|d| d.as_secs_f64()),
                "nodes": a.nodes,
                "stragglers": a.stragglers.iter().map(|s| json!({
                    "rank": s.rank,
                    "node_rank": s.node_rank,
                    "host": a.nodes.get(s.node_rank),
                    "score": s.score,
                    "since_seconds": s.since_secs,
                    "alone": s.alone,
                })).collect::<Vec<Value>>(),
            })
        })
        .collect();
    json!({
        "run_id": run_id,
        "status": status,
        "started": rfc3339(started),
        "ended": rfc3339(ended),
        "wall_seconds": wall.as_secs_f64(),
        "attempts": rows,
        "effective_seconds": effective.as_secs_f64(),
        "effective_share": if wall.is_zero() { 0.0 } else { effective.as_secs_f64() / wall.as_secs_f64() },
    })
}

pub fn write_summary(run_dir: &Path, summary: &Value) -> io::Result<()> {
    std::fs::write(run_dir.join("summary.json"), pretty(summary))
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).expect("serialises");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{FailureClass, NodeExit, RootCause, Verdict};

    #[test]
    fn the_summary_counts_training_time_from_each_attempts_first_progress() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let failed = Verdict {
            class: FailureClass::Comm,
            root_cause: Some(RootCause {
                rank: Some(3),
                local_rank: Some(1),
                node_rank: 1,
                host: "n2".into(),
                exit: NodeExit::ExitCode(1),
                line: None,
            }),
            consequences: vec![],
            hint: "",
        };
        let attempts = [
            AttemptSummary {
                attempt: 0,
                started_at: t0,
                duration: Duration::from_secs(40),
                first_progress: Some(Duration::from_secs(10)),
                verdict: Some(failed),
                nodes: vec!["n1".into(), "n2".into()],
                stragglers: vec![crate::supervisor::straggler::Straggler {
                    rank: 3,
                    node_rank: 1,
                    score: 2.5,
                    since_secs: 12.0,
                    alone: false,
                }],
            },
            AttemptSummary {
                attempt: 1,
                started_at: t0 + Duration::from_secs(50),
                duration: Duration::from_secs(50),
                first_progress: Some(Duration::from_secs(10)),
                verdict: None,
                nodes: vec!["n1".into(), "n2".into()],
                stragglers: vec![],
            },
        ];
        let s = summary("r", RunStatus::Succeeded, &attempts, t0, t0 + Duration::from_secs(100));
        assert_eq!(s["attempts"][0]["class"], "comm");
        assert_eq!(s["attempts"][0]["culprit"], "node 1 (n2), rank 3 (local 1): exit code 1");
        let straggler = &s["attempts"][0]["stragglers"][0];
        assert_eq!(
            (&straggler["rank"], &straggler["host"], &straggler["score"]),
            (&json!(3), &json!("n2"), &json!(2.5))
        );
        assert_eq!(straggler["alone"], false);
        assert_eq!(s["attempts"][1]["stragglers"], json!([]));
        assert_eq!(s["attempts"][1]["class"], "ok");
        assert_eq!(s["attempts"][1]["ended"], "2027-01-15T08:01:40.000Z");
        // 30 s + 40 s of training in 100 s.
        assert_eq!(s["effective_seconds"], 70.0);
        assert_eq!(s["effective_share"], 0.7);
    }
}
