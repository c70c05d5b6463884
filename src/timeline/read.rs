//! events.jsonl read back: every whole line that is an event the timeline draws, as plain data
//! with its time. A line that is not whole (a run killed while it wrote, a disk that filled) is
//! counted and left out, never guessed at. Pure: the text in, the events out.

use std::time::SystemTime;

use serde::Deserialize;

use crate::outcome::{NodeExit, RootCause};

/// One event of the record, with its time.
#[derive(Debug, Clone, PartialEq)]
pub struct Stamped {
    pub at: SystemTime,
    pub event: Recorded,
}

/// The events the timeline draws, with the fields it reads, named as `events::Event`
/// serialises them (a test holds the two together). The rest are `Other`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Recorded {
    RunStarted {
        run_id: String,
        hosts: Vec<String>,
        #[serde(default)]
        spares: Vec<String>,
        #[serde(default)]
        quarantined: Vec<Kept>,
    },
    AttemptStarting {
        attempt: u32,
    },
    NodeStarted {
        attempt: u32,
        node_rank: usize,
    },
    ProgressSeen {
        attempt: u32,
        millis: u64,
    },
    NodeExited {
        attempt: u32,
        node_rank: usize,
        host: String,
        #[serde(flatten)]
        exit: NodeExit,
    },
    StacksRequested {
        attempt: u32,
        reason: String,
    },
    TeardownStarted {
        attempt: u32,
        reason: String,
    },
    CheckpointRequested {
        attempt: u32,
        signal: String,
    },
    AttemptFailed {
        attempt: u32,
        class: String,
        root_cause: Option<RootCause>,
    },
    AttemptSucceeded {
        attempt: u32,
    },
    Straggler {
        attempt: u32,
        rank: u32,
        host: String,
        score: f64,
        #[serde(default)]
        alone: bool,
    },
    NodeWaiting {
        host: String,
        error: String,
    },
    NodeQuarantined {
        host: String,
        reason: String,
    },
    NodeReleased {
        host: String,
    },
    SparePromoted {
        node_rank: usize,
        host: String,
        replaced: String,
    },
    WorldChanged {
        hosts: Vec<String>,
    },
    RestartScheduled {
        attempt: u32,
        delay_ms: u64,
    },
    RestartAbandoned {
        reason: String,
    },
    RunFinished {
        status: String,
    },
    #[serde(other)]
    Other,
}

/// A node an earlier run quarantined, as `run_started` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Kept {
    pub host: String,
    pub reason: String,
}

/// What a record's text holds: its events in order, and the lines left out.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Record {
    pub events: Vec<Stamped>,
    /// The lines (counted from 1) that are no whole event: cut short, or not JSON.
    pub skipped: Vec<usize>,
}

/// A line as it is written: the event's time, and the event.
#[derive(Deserialize)]
struct Line {
    ts: String,
    #[serde(flatten)]
    event: Recorded,
}

/// The events of events.jsonl's `text`, each whole line's; an empty line is no event.
pub fn read(text: &str) -> Record {
    let mut record = Record::default();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let parsed = serde_json::from_str::<Line>(line)
            .ok()
            .and_then(|l| Some(Stamped { at: humantime::parse_rfc3339(&l.ts).ok()?, event: l.event }));
        match parsed {
            Some(Stamped { event: Recorded::Other, .. }) => {}
            Some(stamped) => record.events.push(stamped),
            None => record.skipped.push(i + 1),
        }
    }
    record
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Event, Quarantined};
    use crate::outcome::{FailureClass, Verdict};

    /// Each event the timeline draws, as herd writes it, reads back with its fields: the
    /// reader and the writer cannot drift apart.
    #[test]
    fn every_event_the_timeline_draws_reads_back_as_herd_writes_it() {
        let root = RootCause {
            rank: Some(3),
            local_rank: Some(1),
            node_rank: 1,
            host: "n2".into(),
            exit: NodeExit::Signal(11),
            line: Some("Segmentation fault".into()),
        };
        let written = [
            Event::RunStarted {
                run_id: "r1".into(),
                config: "c.toml".into(),
                config_key: "k".into(),
                launcher: "torchrun",
                nnodes: 2,
                world_size: 4,
                max_restarts: 3,
                hosts: vec!["n1".into(), "n2".into()],
                nprocs: vec![2, 2],
                log_dir: "herd-logs/r1".into(),
                spares: vec!["n3".into()],
                quarantined: vec![Quarantined { host: "n9".into(), reason: "lost".into() }],
            },
            Event::AttemptStarting { attempt: 1 },
            Event::NodeStarted { attempt: 1, node_rank: 1, host: "n2".into(), pgid: 77 },
            Event::ProgressSeen { attempt: 1, millis: 1500 },
            Event::NodeExited {
                attempt: 1,
                node_rank: 1,
                host: "n2".into(),
                exit: NodeExit::Lost("gone".into()),
            },
            Event::StacksRequested { attempt: 1, reason: "no progress for 1m".into(), wait_secs: 5 },
            Event::TeardownStarted { attempt: 1, reason: "node 1 failed".into() },
            Event::CheckpointRequested { attempt: 1, signal: "SIGUSR1".into() },
            Event::AttemptFailed {
                attempt: 1,
                millis: 9000,
                verdict: Verdict {
                    class: FailureClass::Crash,
                    root_cause: Some(root.clone()),
                    consequences: vec![],
                    hint: "a hint",
                },
            },
            Event::AttemptSucceeded { attempt: 2, millis: 100 },
            Event::Straggler {
                attempt: 1,
                rank: 3,
                node_rank: 1,
                host: "n2".into(),
                score: 2.5,
                since_secs: 30.0,
                alone: true,
            },
            Event::NodeWaiting { node_rank: 1, host: "n2".into(), error: "refused".into() },
            Event::NodeQuarantined { attempt: 1, host: "n2".into(), reason: "SIGSEGV".into(), saved: true },
            Event::NodeReleased { attempt: 2, host: "n2".into(), reason: "follows rank".into(), saved: true },
            Event::SparePromoted { attempt: 2, node_rank: 1, host: "n3".into(), replaced: "n2".into() },
            Event::WorldChanged {
                attempt: 2,
                nnodes: 1,
                world_size: 2,
                hosts: vec!["n1".into()],
                nprocs: vec![2],
                dropped: vec!["n2".into()],
            },
            Event::RestartScheduled { attempt: 2, delay_ms: 2500, class: FailureClass::Crash },
            Event::RestartAbandoned { reason: "no node".into() },
            Event::RunFinished { status: crate::events::RunStatus::TimeLimit, attempts: 3 },
            Event::PreflightStarted { nnodes: 2 },
        ];
        // As events.jsonl has them: the time, then the event's own fields.
        let line = |e: &Event| {
            let mut line = serde_json::json!({ "ts": "2027-01-15T08:00:00.250Z" });
            line.as_object_mut()
                .unwrap()
                .extend(serde_json::to_value(e).unwrap().as_object().unwrap().clone());
            format!("{line}\n")
        };
        let text: String = written.iter().map(line).collect();
        let record = read(&text);
        assert_eq!(record.skipped, Vec::<usize>::new());
        let at = humantime::parse_rfc3339("2027-01-15T08:00:00.250Z").unwrap();
        assert!(record.events.iter().all(|e| e.at == at));
        let s = |v: &str| v.to_string();
        let read: Vec<Recorded> = record.events.into_iter().map(|e| e.event).collect();
        assert_eq!(
            read,
            [
                Recorded::RunStarted {
                    run_id: s("r1"),
                    hosts: vec![s("n1"), s("n2")],
                    spares: vec![s("n3")],
                    quarantined: vec![Kept { host: s("n9"), reason: s("lost") }],
                },
                Recorded::AttemptStarting { attempt: 1 },
                Recorded::NodeStarted { attempt: 1, node_rank: 1 },
                Recorded::ProgressSeen { attempt: 1, millis: 1500 },
                Recorded::NodeExited {
                    attempt: 1,
                    node_rank: 1,
                    host: s("n2"),
                    exit: NodeExit::Lost(s("gone"))
                },
                Recorded::StacksRequested { attempt: 1, reason: s("no progress for 1m") },
                Recorded::TeardownStarted { attempt: 1, reason: s("node 1 failed") },
                Recorded::CheckpointRequested { attempt: 1, signal: s("SIGUSR1") },
                Recorded::AttemptFailed { attempt: 1, class: s("crash"), root_cause: Some(root) },
                Recorded::AttemptSucceeded { attempt: 2 },
                Recorded::Straggler { attempt: 1, rank: 3, host: s("n2"), score: 2.5, alone: true },
                Recorded::NodeWaiting { host: s("n2"), error: s("refused") },
                Recorded::NodeQuarantined { host: s("n2"), reason: s("SIGSEGV") },
                Recorded::NodeReleased { host: s("n2") },
                Recorded::SparePromoted { node_rank: 1, host: s("n3"), replaced: s("n2") },
                Recorded::WorldChanged { hosts: vec![s("n1")] },
                Recorded::RestartScheduled { attempt: 2, delay_ms: 2500 },
                Recorded::RestartAbandoned { reason: s("no node") },
                Recorded::RunFinished { status: s("time-limit") },
            ]
        );
    }

    #[test]
    fn a_line_cut_short_or_not_json_is_counted_and_the_rest_read() {
        let whole = r#"{"ts":"2027-01-15T08:00:00.000Z","event":"attempt_starting","attempt":0}"#;
        let text = format!("{whole}\nnot json\n\n{whole}\n{}", &whole[..40]);
        let record = read(&text);
        assert_eq!(record.events.len(), 2);
        assert_eq!(record.skipped, [2, 5]);
        // A line without its time is no event either.
        assert_eq!(read(r#"{"event":"attempt_starting","attempt":0}"#).skipped, [1]);
        assert_eq!(read(""), Record::default());
    }
}
