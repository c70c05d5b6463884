//! herd's own words about a run: one status line per notable event, and the closing
//! summary with the table of attempts.

use std::fmt::Write as _;
use std::path::Path;

use crate::events::{Event, RunStatus};
use crate::outcome::{FailureClass, RootCause, Verdict};
use crate::output::node_log_path;
use crate::supervisor::AttemptSummary;

/// The stderr line for an event, if it deserves one.
pub fn status_line(event: &Event) -> Option<String> {
    run_line(event)
        .or_else(|| node_line(event))
        .or_else(|| evidence_line(event))
        .or_else(|| roster_line(event))
}

/// The run's and its attempts' course: started, failed, restarting, resuming, finished.
fn run_line(event: &Event) -> Option<String> {
    Some(match event {
        Event::RunStarted { run_id, launcher, nnodes, world_size, log_dir, spares, quarantined, .. } => {
            let mut s = format!("run {run_id}: {launcher} on {nnodes} nodes, world size {world_size}");
            if !spares.is_empty() {
                let _ = write!(s, ", {} spare(s)", spares.len());
            }
            for q in quarantined {
                let _ = write!(s, "; {} is quarantined ({}), left out", q.host, q.reason);
            }
            let _ = write!(s, "; logs in {log_dir}");
            s
        }
        Event::AttemptStarted { attempt, master_addr, master_port } => {
            format!("attempt {attempt}: master {master_addr}:{master_port}")
        }
        Event::AttemptFailed { attempt, verdict, .. } => {
            format!("attempt {attempt} failed: {}: {}", verdict.class, cause_words(verdict))
        }
        Event::RestartScheduled { attempt, delay_ms, class } => {
            format!("restarting ({class}) as attempt {attempt} in {:.1} s", *delay_ms as f64 / 1000.0)
        }
        Event::RestartAbandoned { reason } => format!("not restarting: {reason}"),
        Event::Resuming { attempt, from: Some(from), args } => {
            // A checkpoint's name is the job's: it may hold a newline or an escape sequence.
            let args = args.iter().map(|a| super::printable(a)).collect::<Vec<_>>().join(" ");
            format!("attempt {attempt} resumes from {} (appends {args})", super::printable(from))
        }
        Event::Resuming { attempt, from: None, args } if args.is_empty() => {
            format!("attempt {attempt} starts afresh: no checkpoint matches restart.resume_args")
        }
        Event::RunFinished { status, attempts } => finished_line(*status, *attempts, false),
        _ => return None,
    })
}

/// The run's last line. `checkpointed`: the ranks were sent the checkpoint signal (an
/// `Event::CheckpointRequested`); a time limit that came during the preflight, or an
/// allocation that ended under the run, sent none.
pub fn finished_line(status: RunStatus, attempts: u32, checkpointed: bool) -> String {
    let told = if checkpointed { ": the ranks were told to checkpoint" } else { "" };
    match status {
        RunStatus::Succeeded => format!("run succeeded ({attempts} attempt{})", plural(attempts)),
        RunStatus::Failed => format!("run failed ({attempts} attempt{})", plural(attempts)),
        RunStatus::Interrupted => "run interrupted; every node stopped".to_string(),
        RunStatus::TimeLimit => format!("run stopped for the time limit{told}; every node stopped"),
        RunStatus::Preempted => format!("run preempted{told}; every node stopped"),
    }
}

/// How one node ended (`how`: a `NodeExit` as it prints).
pub fn node_ended(node_rank: usize, host: &str, how: &dyn std::fmt::Display) -> String {
    format!("node {node_rank} ({host}) ended: {how}")
}

/// Items grouped by their key, the groups in the order their keys first came, each group's
/// items in theirs: the nodes that ended alike, for one line.
pub fn alike<K: PartialEq, T>(items: impl IntoIterator<Item = (K, T)>) -> Vec<(K, Vec<T>)> {
    let mut groups: Vec<(K, Vec<T>)> = Vec::new();
    for (key, item) in items {
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, group)) => group.push(item),
            None => groups.push((key, vec![item])),
        }
    }
    groups
}

/// Nodes (node rank, host) as a line names them: `node 3 (gpu-07)`, or, for more than one,
/// `4 nodes (gpu-[01-04])`: at scale one cause ends hundreds, on one line.
pub fn nodes_named(nodes: &[(usize, &str)]) -> String {
    match nodes {
        [(rank, host)] => format!("node {rank} ({host})"),
        _ => {
            let hosts: Vec<&str> = nodes.iter().map(|(_, h)| *h).collect();
            format!("{} nodes ({})", nodes.len(), crate::config::hostlist::compress(&hosts))
        }
    }
}

/// One node's trouble, and what herd cleaned up on it.
fn node_line(event: &Event) -> Option<String> {
    Some(match event {
        Event::NodeExited { node_rank, host, exit, .. } if !exit.success() => node_ended(*node_rank, host, exit),
        Event::Straggler { attempt, rank, node_rank, host, score, since_secs, alone } => {
            let why = if *alone {
                ", while every other rank sits idle: work of the job's own (a checkpoint, an evaluation?), which blames no node"
            } else {
                ": the other ranks wait for it"
            };
            format!(
                "straggler: rank {rank} on node {node_rank} ({host}) has used {score:.1}x the CPU of the median rank since {since_secs:.0} s into attempt {attempt}{why}"
            )
        }
        Event::LeftoversStopped { node_rank, host, pids } => {
            format!("stopped {} leftover process(es) of this config on node {node_rank} ({host})", pids.len())
        }
        Event::ContainersRemoved { node_rank, host, names } => {
            format!(
                "removed {} leftover container(s) of this config on node {node_rank} ({host})",
                names.len()
            )
        }
        Event::ProcessesUnstopped { node_rank, host, pids } => format!(
            "node {node_rank} ({host}): could not stop {} process(es) of the job, still there after SIGKILL: {} \
             (stuck in the kernel? `herd exec -- ps -o pid,stat,wchan,args -p {}` shows where)",
            pids.len(),
            pids.iter().map(u32::to_string).collect::<Vec<_>>().join(" "),
            pids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        ),
        _ => return None,
    })
}

/// The teardown, and the evidence taken before and after it: the stacks, the NCCL dumps.
fn evidence_line(event: &Event) -> Option<String> {
    Some(match event {
        Event::StacksRequested { reason, wait_secs, .. } => format!(
            "{reason}: taking the stacks of the ranks still running (at most {wait_secs} s), then stopping every node"
        ),
        Event::TeardownStarted { reason, .. } => format!("stopping every node: {reason}"),
        Event::StacksSummarized { attempt, summary } => {
            format!("attempt {attempt}: every rank's stack (attempt-{attempt}/stacks/): {}", summary.words())
        }
        Event::NcclDumpsSaved { attempt, ranks, missing } => {
            let mut s = match ranks.len() {
                0 => format!("attempt {attempt}: no NCCL flight-recorder dump copied"),
                n => format!(
                    "attempt {attempt}: NCCL flight-recorder dumps of {n} rank(s) in attempt-{attempt}/nccl/ (`torchfrtrace` reads them)"
                ),
            };
            for (rank, why) in missing {
                let _ = write!(s, "; rank {rank}: {why}");
            }
            s
        }
        _ => return None,
    })
}

/// Which nodes run: quarantined, released, a spare promoted, the world changed.
fn roster_line(event: &Event) -> Option<String> {
    Some(match event {
        Event::NodeQuarantined { host, reason, saved: true, .. } => {
            format!("quarantined {host}: {reason} (later runs of this config skip it too; `herd nodes --release {host}` clears it)")
        }
        Event::NodeQuarantined { host, reason, saved: false, .. } => {
            // Not written: a judgement of this run's (a restart's few seconds of tries), or a
            // quarantine file that could not be, which a warning said.
            format!(
                "quarantined {host}: {reason} (for this run only: the next run of this config may use it)"
            )
        }
        Event::NodeReleased { host, reason, saved: true, .. } => {
            format!("released {host}: {reason} (a spare again; later runs of this config may use it)")
        }
        Event::NodeReleased { host, reason, saved: false, .. } => {
            format!("released {host}: {reason} (a spare again for this run only: the quarantine file could not be rewritten; `herd nodes --release {host}` clears it)")
        }
        Event::SparePromoted { attempt, node_rank, host, replaced } => {
            format!("spare {host} takes node rank {node_rank} from {replaced} for attempt {attempt}")
        }
        Event::WorldChanged { attempt, nnodes, world_size, nprocs, dropped, .. } => {
            let s = format!("attempt {attempt} runs on {nnodes} node(s), world size {world_size}");
            if dropped.is_empty() {
                let per_node: Vec<String> = nprocs.iter().map(u32::to_string).collect();
                format!(
                    "{s}: a promoted spare runs another number of ranks (per node: {})",
                    per_node.join(", ")
                )
            } else {
                format!("{s}, without {} (restart.min_nodes)", dropped.join(", "))
            }
        }
        _ => return None,
    })
}

/// A preempted run's last attempt, in the table of attempts (as summary.json says it).
fn status_word(status: RunStatus) -> &'static str {
    match status {
        RunStatus::TimeLimit => "time-limit",
        _ => "preempted",
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// What herd says when a verdict names no node (a hang that no evidence pins on one).
pub const NO_ROOT_CAUSE: &str = "no single node: every rank stopped making progress at once, and none was found stopped or stuck in the kernel";

/// What herd says when Slurm ended the run's allocation: no node failed.
pub const ALLOCATION_ENDED: &str = "no node: Slurm ended the allocation, and every step with it";

/// The root cause's words, or why there is none.
pub fn cause_words(v: &Verdict) -> String {
    match (&v.root_cause, v.class) {
        (Some(r), _) => root_cause_words(r),
        (None, FailureClass::Allocation) => ALLOCATION_ENDED.to_string(),
        (None, _) => NO_ROOT_CAUSE.to_string(),
    }
}

/// `node 1 (gpu-02), rank 3 (local 1): signal 9 (SIGKILL)`
pub fn root_cause_words(r: &RootCause) -> String {
    let mut s = format!("node {} ({})", r.node_rank, r.host);
    match (r.rank, r.local_rank) {
        (Some(rank), Some(local)) => {
            let _ = write!(s, ", rank {rank} (local {local})");
        }
        (Some(rank), None) => {
            let _ = write!(s, ", rank {rank}");
        }
        _ => {}
    }
    let _ = write!(s, ": {}", r.exit);
    s
}

/// The closing words: a table of attempts when there were several, and for a failed run
/// its root cause, the line that shows it, the hint, the consequences and the log to read.
pub fn closing(status: RunStatus, attempts: &[AttemptSummary], run_dir: &Path) -> String {
    let mut s = String::new();
    if attempts.len() > 1 || attempts.iter().any(|a| a.verdict.is_some()) {
        let _ = writeln!(s, "attempts:");
        let _ = writeln!(s, "  {:>3}  {:>9}  {:<9}  {:<32}  line", "#", "duration", "class", "root cause");
        let mut before: Option<&Vec<String>> = None;
        for a in attempts {
            let (class, cause, line) = match &a.verdict {
                Some(v) => (
                    v.class.to_string(),
                    match &v.root_cause {
                        Some(r) => root_cause_words(r).split(':').next().unwrap_or_default().to_string(),
                        None if v.class == FailureClass::Allocation => "no node".to_string(),
                        None => "no single node".to_string(),
                    },
                    v.root_cause.as_ref().and_then(|r| r.line.clone()).unwrap_or_default(),
                ),
                None if status == RunStatus::Interrupted && a.attempt + 1 == attempts.len() as u32 => {
                    ("interrupted".into(), String::new(), String::new())
                }
                None if status.preempted() && a.attempt + 1 == attempts.len() as u32 => {
                    (status_word(status).into(), String::new(), String::new())
                }
                None => ("ok".into(), String::new(), String::new()),
            };
            let _ = writeln!(
                s,
                "  {:>3}  {:>8.1}s  {:<9}  {:<32}  {}",
                a.attempt,
                a.duration.as_secs_f64(),
                class,
                cause,
                line.chars().take(120).collect::<String>()
            );
            if let Some(before) = before.filter(|b| **b != a.nodes) {
                let _ = writeln!(s, "       {}", node_changes(before, &a.nodes));
            }
            before = Some(&a.nodes);
        }
    }
    if status == RunStatus::Failed {
        if let Some(last) = attempts.last() {
            if let Some(v) = &last.verdict {
                let log = match &v.root_cause {
                    Some(r) => node_log_path(run_dir, last.attempt, r.node_rank, &r.host),
                    None => run_dir.join(format!("attempt-{}", last.attempt)),
                };
                s += &failure(v, &log);
            }
        }
    }
    s
}

/// Which node held which node rank from one attempt to the next: the ranks a spare took, or
/// with fewer nodes, every node rank.
fn node_changes(before: &[String], now: &[String]) -> String {
    if before.len() == now.len() {
        let moved: Vec<String> = (before.iter().zip(now).enumerate())
            .filter(|(_, (b, n))| b != n)
            .map(|(r, (b, n))| format!("node rank {r}: {n} (was {b})"))
            .collect();
        return format!("nodes: {}", moved.join(", "));
    }
    const SHOWN: usize = 16;
    let mut ranks: Vec<String> =
        now.iter().take(SHOWN).enumerate().map(|(r, h)| format!("{r} {h}")).collect();
    if now.len() > SHOWN {
        ranks.push(format!("… (events.jsonl's world_changed has all {})", now.len()));
    }
    format!("on {} node(s), by node rank: {}", now.len(), ranks.join(", "))
}

/// `herd stacks`: each rank's dump under a `==> rank R: node N (host), pid P <==` line. A
/// dump holds the job's own text (its scripts' paths, py-spy's errors): each line is shown
/// with its control characters escaped, as `herd plan` shows paths.
pub fn stacks_text(stacks: &[(usize, crate::stacks::RankStack)], hosts: &[String]) -> String {
    let mut s = String::new();
    for (node_rank, st) in stacks {
        let host = hosts.get(*node_rank).map_or("?", String::as_str);
        let _ = writeln!(s, "==> rank {}: node {node_rank} ({host}), pid {} <==", st.rank, st.pid);
        for line in st.text().lines() {
            let _ = writeln!(s, "{}", super::printable(line));
        }
        s.push('\n');
    }
    s
}

/// How the last attempt failed, for people.
pub fn failure(v: &Verdict, log: &Path) -> String {
    let mut s = format!("root cause ({}): {}\n", v.class, cause_words(v));
    if let Some(line) = v.root_cause.as_ref().and_then(|r| r.line.as_ref()) {
        let _ = writeln!(s, "  line: {line}");
    }
    let _ = writeln!(s, "  hint: {}", v.hint);
    let alike = alike(v.consequences.iter().map(|c| ((&c.class, &c.exit), (c.node_rank, c.host.as_str()))));
    for ((class, exit), nodes) in alike {
        let _ = writeln!(s, "  then {} failed too ({class}): {exit}", nodes_named(&nodes));
    }
    let _ = writeln!(s, "  full log: {}", log.display());
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::outcome::{Consequence, NodeExit};
    use std::time::Duration;

    #[test]
    fn a_straggler_reads_as_one_sentence() {
        let mut e = Event::Straggler {
            attempt: 1,
            rank: 3,
            node_rank: 1,
            host: "n2".into(),
            score: 2.54,
            since_secs: 35.2,
            alone: false,
        };
        assert_eq!(
            status_line(&e).unwrap(),
            "straggler: rank 3 on node 1 (n2) has used 2.5x the CPU of the median rank since 35 s into attempt 1: \
             the other ranks wait for it"
        );
        let Event::Straggler { alone, .. } = &mut e else { unreachable!() };
        *alone = true;
        assert_eq!(
            status_line(&e).unwrap(),
            "straggler: rank 3 on node 1 (n2) has used 2.5x the CPU of the median rank since 35 s into attempt 1, \
             while every other rank sits idle: work of the job's own (a checkpoint, an evaluation?), which blames no node"
        );
    }

    fn verdict() -> Verdict {
        Verdict {
            class: FailureClass::Crash,
            root_cause: Some(RootCause {
                rank: Some(3),
                local_rank: Some(1),
                node_rank: 1,
                host: "gpu-02".into(),
                exit: NodeExit::Signal(9),
                line: Some("Signal 9 (SIGKILL) received by PID 7".into()),
            }),
            consequences: vec![Consequence {
                node_rank: 0,
                host: "gpu-01".into(),
                class: FailureClass::Comm,
                exit: NodeExit::ExitCode(1),
                line: None,
            }],
            hint: crate::classify::hint(FailureClass::Crash),
        }
    }

    fn blank() -> AttemptSummary {
        AttemptSummary {
            attempt: 0,
            started_at: std::time::SystemTime::UNIX_EPOCH,
            duration: Duration::from_secs(1),
            first_progress: None,
            verdict: None,
            nodes: vec![],
            stragglers: vec![],
        }
    }

    #[test]
    fn failure_names_root_cause_line_hint_and_consequences() {
        let text = failure(&verdict(), Path::new("logs/r/attempt-0/node1-gpu-02.log"));
        assert!(
            text.starts_with("root cause (crash): node 1 (gpu-02), rank 3 (local 1): signal 9 (SIGKILL)\n"),
            "{text}"
        );
        assert!(text.contains("  line: Signal 9 (SIGKILL) received by PID 7\n"));
        assert!(text.contains("  hint: a process was killed by a signal"));
        assert!(text.contains("  then node 0 (gpu-01) failed too (comm): exit code 1\n"));
        assert!(text.ends_with("  full log: logs/r/attempt-0/node1-gpu-02.log\n"));
    }

    #[test]
    fn consequences_alike_share_a_line_naming_their_nodes() {
        let mut v = verdict();
        let then = |rank: usize, code| Consequence {
            node_rank: rank,
            host: format!("gpu-{:02}", rank + 1),
            class: FailureClass::Comm,
            exit: NodeExit::ExitCode(code),
            line: None,
        };
        v.consequences = vec![then(0, 1), then(2, 1), then(3, 1), then(4, 2)];
        let text = failure(&v, Path::new("l"));
        assert!(text.contains("  then 3 nodes (gpu-[01,03-04]) failed too (comm): exit code 1\n"), "{text}");
        assert!(text.contains("  then node 4 (gpu-05) failed too (comm): exit code 2\n"), "{text}");
        assert_eq!(text.matches("then").count(), 2, "{text}");
    }

    #[test]
    fn the_table_lists_every_attempt() {
        let attempts = vec![
            AttemptSummary {
                attempt: 0,
                duration: Duration::from_millis(12_340),
                verdict: Some(verdict()),
                ..blank()
            },
            AttemptSummary { attempt: 1, duration: Duration::from_millis(9_000), verdict: None, ..blank() },
        ];
        let text = closing(RunStatus::Succeeded, &attempts, Path::new("r"));
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows.len(), 4, "{text}");
        assert!(rows[2].contains("0      12.3s  crash      node 1 (gpu-02), rank 3 (local 1)"), "{text}");
        assert!(rows[2].ends_with("Signal 9 (SIGKILL) received by PID 7"), "{text}");
        assert!(rows[3].contains("1       9.0s  ok"), "{text}");
    }

    #[test]
    fn the_table_says_which_node_held_which_node_rank() {
        let hosts = |h: &[&str]| h.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let row = |attempt, nodes| AttemptSummary { attempt, verdict: Some(verdict()), nodes, ..blank() };
        let attempts = vec![
            row(0, hosts(&["n1", "n2", "n3"])),
            row(1, hosts(&["n1", "n4", "n3"])),
            row(2, hosts(&["n1", "n4", "n3"])),
            AttemptSummary { verdict: None, ..row(3, hosts(&["n1", "n3"])) },
        ];
        let text = closing(RunStatus::Succeeded, &attempts, Path::new("r"));
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows.len(), 8, "{text}");
        assert_eq!(rows[4], "       nodes: node rank 1: n4 (was n2)", "{text}");
        assert!(rows[5].starts_with("    2 "), "unchanged: no line\n{text}");
        assert_eq!(rows[7], "       on 2 node(s), by node rank: 0 n1, 1 n3", "{text}");
    }

    #[test]
    fn herd_stacks_shows_a_dump_with_its_control_characters_escaped() {
        let dump = "Thread 7 (idle): \"MainThread\"\n    main (/w/ev\x1b[2Jil.py:3)\n".to_string();
        let st = crate::stacks::RankStack { rank: 0, pid: 7, dump: Ok(dump) };
        let text = stacks_text(&[(0, st)], &["n1".into()]);
        assert_eq!(
            text,
            "==> rank 0: node 0 (n1), pid 7 <==\nThread 7 (idle): \"MainThread\"\n    main (/w/ev\\u{1b}[2Jil.py:3)\n\n"
        );
    }

    /// A checkpoint's name is any file name: a newline or an escape sequence in it is shown
    /// escaped, as one line.
    #[test]
    fn a_resume_from_an_odd_name_is_one_line() {
        let from = "ck/step_2\nevil\x1b[2J".to_string();
        let event =
            Event::Resuming { attempt: 1, from: Some(from.clone()), args: vec!["--resume".into(), from] };
        let line = status_line(&event).unwrap();
        assert!(!line.chars().any(char::is_control), "{line:?}");
        assert!(
            line.contains("from ck/step_2\\nevil\\u{1b}[2J (appends --resume ck/step_2\\nevil"),
            "{line}"
        );
    }

    #[test]
    fn a_changed_world_says_why_it_changed() {
        let changed = |nprocs: Vec<u32>, dropped: &[&str]| Event::WorldChanged {
            attempt: 1,
            nnodes: nprocs.len(),
            world_size: nprocs.iter().sum(),
            hosts: (0..nprocs.len()).map(|i| format!("n{i}")).collect(),
            nprocs,
            dropped: dropped.iter().map(|h| h.to_string()).collect(),
        };
        // A spare with a larger nproc took a node's place: no node left, no min_nodes in it.
        let promoted = status_line(&changed(vec![2, 4], &[])).unwrap();
        assert_eq!(
            promoted,
            "attempt 1 runs on 2 node(s), world size 6: a promoted spare runs another number of ranks (per node: 2, 4)"
        );
        assert!(!promoted.contains("min_nodes"), "{promoted}");
        let shrunk = status_line(&changed(vec![2, 2], &["n9"])).unwrap();
        assert_eq!(shrunk, "attempt 1 runs on 2 node(s), world size 4, without n9 (restart.min_nodes)");
    }

    #[test]
    fn a_released_node_says_why_and_that_later_runs_may_use_it() {
        let reason = "rank 0 failed the same way (crash, signal 11 (SIGSEGV)) on n3: the fault follows the rank, not the node";
        let line = |saved| {
            let e = Event::NodeReleased { attempt: 2, host: "n1".into(), reason: reason.into(), saved };
            status_line(&e).unwrap()
        };
        assert_eq!(
            line(true),
            format!("released n1: {reason} (a spare again; later runs of this config may use it)")
        );
        // The quarantine file could not be rewritten: the warning said "later runs still skip
        // n1", and the line agrees.
        let unsaved = line(false);
        assert!(!unsaved.contains("later runs of this config may use it"), "{unsaved}");
        assert!(unsaved.contains("for this run only") && unsaved.contains("--release n1"), "{unsaved}");
    }

    #[test]
    fn an_ended_allocation_is_no_nodes_fault() {
        let class = FailureClass::Allocation;
        let v = Verdict { class, root_cause: None, consequences: vec![], hint: crate::classify::hint(class) };
        let failed =
            status_line(&Event::AttemptFailed { attempt: 0, millis: 1, verdict: v.clone() }).unwrap();
        assert_eq!(failed, format!("attempt 0 failed: allocation: {ALLOCATION_ENDED}"));
        let text = failure(&v, Path::new("r/attempt-0"));
        assert!(text.starts_with("root cause (allocation): no node: Slurm ended the allocation"), "{text}");
        assert!(!text.contains("SSH"), "{text}");
    }

    #[test]
    fn quiet_events_have_no_status_line() {
        assert!(status_line(&Event::AttemptSucceeded { attempt: 0, millis: 1 }).is_none());
        let ok =
            Event::NodeExited { attempt: 0, node_rank: 0, host: "a".into(), exit: NodeExit::ExitCode(0) };
        assert!(status_line(&ok).is_none());
    }

    #[test]
    fn a_quarantine_not_saved_is_not_said_to_hold_for_later_runs() {
        let line = |saved| {
            let e = Event::NodeQuarantined { attempt: 1, host: "n2".into(), reason: "SIGSEGV".into(), saved };
            status_line(&e).unwrap()
        };
        assert_eq!(
            line(true),
            "quarantined n2: SIGSEGV (later runs of this config skip it too; `herd nodes --release n2` clears it)"
        );
        // The warning before it said "kept out of this run only": the line agrees.
        let unsaved = line(false);
        assert!(!unsaved.contains("later runs"), "{unsaved}");
        assert!(unsaved.contains("for this run only"), "{unsaved}");
    }
}
