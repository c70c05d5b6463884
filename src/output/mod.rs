//! Turning run events into what people read: prefixed job output on stdout, herd's own status
//! lines on stderr, and the run's files. The reporter runs on its own thread and never touches
//! a process; the supervisor never prints.

pub mod board;
mod collapse;
mod console;
mod detached;
pub mod doctor_view;
pub mod exec_view;
pub mod files;
pub mod json;
mod live;
mod metrics;
pub mod mode;
mod notify;
pub mod plan_view;
pub mod prefix;
pub mod record;
mod screen;
mod sink;
pub mod summary;
pub mod timeline_view;

use std::io::Write;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::events::Dated;
use console::Console;
use screen::Screen;
use sink::{Names, Shared, Sink};

pub use crate::lines::printable;
pub use console::Collapse;
pub use files::{node_log_path, RunFiles};
pub use mode::Mode;

/// Where the reporter writes.
pub struct Sinks {
    /// Job output, or JSON lines.
    pub stdout: Box<dyn Write + Send>,
    /// herd's own status lines, and the board.
    pub stderr: Box<dyn Write + Send>,
    pub mode: Mode,
    /// Told once when stdout is closed under the reporter (`herd run | head`): the reader
    /// is gone, and the run should stop as for Ctrl-C.
    pub on_stdout_closed: Option<mpsc::UnboundedSender<crate::supervisor::Signal>>,
    /// The ranks whose lines are shown (`None`: all); the files keep every line.
    pub console: Option<crate::config::RankList>,
    /// When the same line from many ranks is shown once.
    pub collapse: Collapse,
    /// `[notify]`: hears of the notable events.
    pub notify: Option<crate::notify::Notifier>,
    /// `--metrics`: the metrics the scrapes are answered from, and which lines are progress.
    pub metrics:
        Option<(std::sync::Arc<std::sync::Mutex<crate::metrics::Metrics>>, crate::supervisor::Progress)>,
}

/// What the reporter knows at the end.
#[derive(Debug, Default)]
pub struct Report {
    /// The first error writing the run's files, after which they were no longer written.
    pub file_error: Option<String>,
    /// stdout was closed by its reader; the files kept everything.
    pub stdout_closed: bool,
}

/// How often the board is redrawn when nothing happens (its clocks move on), and at most how
/// long job output waits under it: every write to the terminal takes the board down and puts
/// it back, so with a board, output goes out in batches at this pace.
const BOARD_TICK: Duration = Duration::from_millis(100);

/// Consume events until the channel closes, each fed to every sink. A closed stdout stops the
/// echo but not the log files, and asks for the run to stop (`Sinks::on_stdout_closed`); a
/// failing disk stops the files but not the echo. Neither stops reading events, so the run
/// itself never stalls on its output.
pub fn report(files: RunFiles, mut events: mpsc::Receiver<Dated>, sinks: Sinks) -> Report {
    let mut names = Names::new(files.hosts().to_vec());
    let on_stdout_closed = sinks.on_stdout_closed.clone();
    let (collapse, json) = (sinks.collapse, sinks.mode == Mode::Json);
    let (mut shared, mut all) = open(files, sinks);
    // The sinks' clocks: the board's, the logs' flush (`files::LOG_FLUSH`), and the lines
    // waiting for the same from other ranks (`collapse::WINDOW`).
    let tick = match (shared.screen.live(), collapse) {
        (true, _) => BOARD_TICK,
        (false, Collapse::Never) => files::LOG_FLUSH,
        (false, _) if json => files::LOG_FLUSH,
        (false, _) => collapse::WINDOW / 8,
    };
    let timer = tokio::runtime::Builder::new_current_thread().enable_time().build().ok();
    loop {
        let event = match &timer {
            Some(rt) => match rt.block_on(async { tokio::time::timeout(tick, events.recv()).await }) {
                Ok(Some(event)) => event,
                Ok(None) => break,
                Err(_) => {
                    all.iter_mut().for_each(|sink| sink.tick(&mut shared));
                    shared.screen.flush_job();
                    continue;
                }
            },
            None => match events.blocking_recv() {
                Some(event) => event,
                None => break,
            },
        };
        let turn = names.turn(&event.event, event.at);
        all.iter_mut().for_each(|sink| sink.event(&turn, &mut shared));
        if events.is_empty() && shared.screen.due() {
            shared.screen.flush_job();
        }
        if shared.screen.out_closed && !shared.report.stdout_closed {
            shared.report.stdout_closed = true;
            shared.screen.status("stdout was closed: stopping the run (the log files keep everything)");
            if let Some(stop) = &on_stdout_closed {
                let _ = stop.send(crate::supervisor::Signal::Interrupt);
            }
        }
    }
    all.iter_mut().for_each(|sink| sink.finish(&mut shared));
    shared.screen.flush_job();
    shared.report.stdout_closed = shared.screen.out_closed;
    shared.screen.clear();
    shared.report
}

/// The sinks, in the order each event reaches them: the files, `--json`, the console (which
/// tells of the files' first error after them), the hook, the metrics, the board.
fn open(files: RunFiles, sinks: Sinks) -> (Shared, Vec<Box<dyn Sink>>) {
    let color = sinks.mode.color();
    let json = sinks.mode == Mode::Json;
    let live = matches!(sinks.mode, Mode::Board { .. }).then(live::Live::new);
    let screen = Screen::new(sinks.stdout, sinks.stderr, live);
    let console = Console::new(
        files.hosts(),
        color,
        !json,
        sinks.console,
        sinks.collapse,
        files.run_dir().to_path_buf(),
    );
    let board = screen.live().then(|| board::Board::new(Instant::now()));
    let mut all: Vec<Box<dyn Sink>> = vec![Box::new(files)];
    if json {
        all.push(Box::new(json::JsonSink::default()));
    }
    all.push(Box::new(console));
    all.extend(sinks.notify.map(|n| Box::new(notify::NotifySink::new(n)) as Box<dyn Sink>));
    all.extend(sinks.metrics.map(|(m, p)| Box::new(metrics::MetricsSink::new(m, p)) as Box<dyn Sink>));
    all.extend(board.map(|b| Box::new(b) as Box<dyn Sink>));
    (Shared { screen, report: Report::default() }, all)
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::classify;
    use crate::events::{Event, RunStatus, Source};
    use crate::lines::{LineEnd, Lines};
    use crate::outcome::{FailureClass, NodeExit, RootCause, Verdict};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Buf {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    /// stdout, stderr and the report of a report of `events` on one node `n1`, and its
    /// events.jsonl.
    fn report_of(
        mode: Mode,
        console: &str,
        events: Vec<Event>,
        break_files: bool,
    ) -> (String, String, Report, String) {
        report_collapsing(mode, console, events, break_files, Collapse::Never)
    }

    /// `report_of`, with `--collapse`.
    fn report_collapsing(
        mode: Mode,
        console: &str,
        events: Vec<Event>,
        break_files: bool,
        collapse: Collapse,
    ) -> (String, String, Report, String) {
        let now = std::time::SystemTime::now();
        let events = events.into_iter().map(|event| Dated { at: now, event }).collect();
        report_dated(mode, console, events, break_files, collapse)
    }

    /// `report_collapsing` of events each dated as given.
    fn report_dated(
        mode: Mode,
        console: &str,
        events: Vec<Dated>,
        break_files: bool,
        collapse: Collapse,
    ) -> (String, String, Report, String) {
        let dir = tempfile::tempdir().unwrap();
        let files = RunFiles::create(dir.path(), "r1", vec!["n1".into()]).unwrap();
        if break_files {
            // The run's folder is gone, a file in its place: no attempt folder can be made.
            std::fs::remove_dir_all(files.run_dir()).unwrap();
            std::fs::write(files.run_dir(), "").unwrap();
        }
        let (tx, rx) = mpsc::channel(events.len() + 1);
        for e in events {
            tx.try_send(e).unwrap();
        }
        drop(tx);
        let (out, err) = (Buf::default(), Buf::default());
        let sinks = Sinks {
            stdout: Box::new(out.clone()),
            stderr: Box::new(err.clone()),
            mode,
            on_stdout_closed: None,
            console: crate::config::RankList::parse(console).unwrap(),
            notify: None,
            metrics: None,
            collapse,
        };
        let run_dir = files.run_dir().to_path_buf();
        let report = report(files, rx, sinks);
        let recorded = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap_or_default();
        (out.text(), err.text(), report, recorded)
    }

    fn output(rank: u32, text: &str) -> Event {
        let source = Source { rank: Some(rank), local_rank: Some(rank), stderr: false };
        Event::NodeOutput { node_rank: 0, source, lines: Lines::one(text.as_bytes(), LineEnd::Lf) }
    }

    fn failed(rank: u32) -> Event {
        let class = FailureClass::Crash;
        let root_cause = RootCause {
            rank: Some(rank),
            local_rank: Some(rank),
            node_rank: 0,
            host: "n1".into(),
            exit: NodeExit::ExitCode(1),
            line: None,
        };
        let verdict = Verdict {
            class,
            root_cause: Some(root_cause),
            consequences: vec![],
            hint: classify::hint(class),
        };
        Event::AttemptFailed { attempt: 1, millis: 5, verdict }
    }

    #[test]
    fn a_hidden_rank_that_fails_shows_its_last_lines_before_the_failure() {
        let events = vec![
            Event::AttemptStarting { attempt: 1 },
            output(0, "zero"),
            output(1, "one a"),
            output(1, "one b"),
            failed(1),
        ];
        let (out, err, report, _) = report_of(Mode::Plain { color: false }, "0", events, false);
        assert!(report.file_error.is_none() && !report.stdout_closed);
        let out: Vec<&str> = out.lines().collect();
        assert_eq!(out.len(), 3, "{out:?}");
        assert!(
            out[0].ends_with("zero") && out[1].ends_with("one a") && out[2].ends_with("one b"),
            "{out:?}"
        );
        let err: Vec<&str> = err.lines().collect();
        assert!(err[0].starts_with("herd: rank 1 failed; its last 2 line(s), not shown before"), "{err:?}");
        assert!(err[1].starts_with("herd: attempt 1 failed: "), "{err:?}");
    }

    #[test]
    fn the_same_line_from_many_ranks_shows_once_before_herds_own_lines() {
        let mut events = vec![Event::AttemptStarting { attempt: 1 }];
        events.extend((0..4).map(|r| output(r, "hello")));
        events.push(output(1, "mine"));
        events.push(output(5, "hello"));
        events.push(output(4, "hello"));
        events.push(failed(1));
        let (out, err, _, _) =
            report_collapsing(Mode::Plain { color: false }, "all", events, false, Collapse::Always);
        let out: Vec<&str> = out.lines().collect();
        assert_eq!(out, ["[r0-5] hello", "[r1 n1] mine"], "rank 1's line after its hello");
        assert!(err.starts_with("herd: attempt 1 failed"), "{err}");
    }

    #[test]
    fn json_lines_on_stdout_are_those_of_events_jsonl_with_the_same_time() {
        let events = vec![Event::AttemptStarting { attempt: 3 }, output(1, "hello"), failed(1)];
        let (out, err, _, recorded) = report_of(Mode::Json, "0", events, false);
        assert!(err.contains("herd: attempt 1 failed: "), "status lines stay on stderr: {err}");
        let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 3, "{out}");
        let (out, recorded): (Vec<&str>, Vec<&str>) = (out.lines().collect(), recorded.lines().collect());
        assert_eq!([out[0], out[2]], recorded[..], "the same events, each with one time");
        assert_eq!(lines[1]["event"], "output");
        assert_eq!(lines[1]["attempt"], 3, "the attempt the line belongs to");
        assert_eq!(lines[1]["line"], "hello", "--ranks does not filter --json");
        assert_eq!(lines[2]["event"], "attempt_failed");
    }

    #[test]
    fn the_record_dates_each_event_when_it_happened_and_keeps_its_order_through_a_race() {
        // The reporter takes them all at once, long after: a busy launch host's reporter.
        let t0 = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let at = |ms| t0 + Duration::from_millis(ms);
        let started = Event::AttemptStarted { attempt: 1, master_addr: "n1".into(), master_port: 29500 };
        let events = vec![
            Dated { at: at(0), event: Event::AttemptStarting { attempt: 1 } },
            Dated { at: at(1_500), event: started },
            // Dated a moment before the event sent before it, by another task.
            Dated { at: at(1_499), event: failed(0) },
            // The clock set back an hour: shown as it is.
            Dated {
                at: at(1_600) - Duration::from_secs(3_600),
                event: Event::AttemptStarting { attempt: 2 },
            },
        ];
        let (_, _, _, recorded) = report_dated(Mode::Json, "all", events, false, Collapse::Never);
        let ts: Vec<String> = recorded
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["ts"].as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(
            ts,
            [
                "2027-01-15T08:00:00.000Z",
                "2027-01-15T08:00:01.500Z",
                "2027-01-15T08:00:01.500Z",
                "2027-01-15T07:00:01.600Z"
            ]
        );
    }

    /// The nodes that end as an attempt is stopped: one line before the next, not a line each.
    #[test]
    fn the_nodes_stopped_are_told_in_one_line_before_the_next() {
        let reason = "node 0 (n1) failed: exit code 1".to_string();
        let ended = |node_rank: usize| Event::NodeExited {
            attempt: 1,
            node_rank,
            host: format!("n{}", node_rank + 1),
            exit: NodeExit::Signal(15),
        };
        let events = vec![
            Event::AttemptStarting { attempt: 1 },
            Event::StacksRequested { attempt: 1, reason: reason.clone(), wait_secs: 5 },
            ended(1),
            ended(2),
            Event::TeardownStarted { attempt: 1, reason },
            ended(3),
            failed(0),
        ];
        let (_, err, _, _) = report_of(Mode::Plain { color: false }, "all", events, false);
        let err: Vec<&str> = err.lines().collect();
        assert_eq!(err.len(), 5, "{err:?}");
        assert!(err[0].contains("taking the stacks"), "{err:?}");
        assert_eq!(
            err[1],
            "herd: attempt 1, stopping: 2 nodes (n[2-3]) ended within 0.0 s: signal 15 (SIGTERM)"
        );
        assert!(err[2].starts_with("herd: stopping every node: "), "{err:?}");
        assert_eq!(err[3], "herd: node 3 (n4) ended: signal 15 (SIGTERM)");
        assert!(err[4].starts_with("herd: attempt 1 failed"), "{err:?}");
    }

    /// Ctrl-C: the nodes herd stops are one line before the run's last; and the reporter's
    /// end tells what it still holds.
    #[test]
    fn the_nodes_stopped_by_an_interrupt_are_told_before_the_runs_end() {
        let ended = |node_rank: usize| Event::NodeExited {
            attempt: 1,
            node_rank,
            host: format!("n{}", node_rank + 1),
            exit: NodeExit::Signal(15),
        };
        let interrupted = Event::TeardownStarted { attempt: 1, reason: "interrupted".into() };
        let finished = Event::RunFinished { status: RunStatus::Interrupted, attempts: 2 };
        let events = vec![
            Event::AttemptStarting { attempt: 1 },
            interrupted.clone(),
            ended(0),
            ended(1),
            ended(2),
            finished,
        ];
        let (_, err, _, _) = report_of(Mode::Plain { color: false }, "all", events, false);
        let err: Vec<&str> = err.lines().collect();
        assert_eq!(
            err,
            [
                "herd: stopping every node: interrupted",
                "herd: attempt 1, stopping: 3 nodes (n[1-3]) ended within 0.0 s: signal 15 (SIGTERM)",
                "herd: run interrupted; every node stopped",
            ]
        );
        let events = vec![Event::AttemptStarting { attempt: 1 }, interrupted, ended(0), ended(1)];
        let (_, err, _, _) = report_of(Mode::Plain { color: false }, "all", events, false);
        assert!(
            err.ends_with(
                "herd: attempt 1, stopping: 2 nodes (n[1-2]) ended within 0.0 s: signal 15 (SIGTERM)\n"
            ),
            "{err}"
        );
    }

    #[test]
    fn the_files_first_error_is_told_once_after_the_lines_before_it() {
        let started = Event::AttemptStarted { attempt: 1, master_addr: "n1".into(), master_port: 29500 };
        let events = vec![Event::AttemptStarting { attempt: 1 }, started, output(0, "zero"), failed(0)];
        let (out, err, report, _) = report_of(Mode::Plain { color: false }, "all", events, true);
        assert!(report.file_error.as_deref().is_some_and(|e| e.starts_with("cannot write the run's files")));
        assert!(out.ends_with("zero\n"), "the echo goes on: {out}");
        let err: Vec<&str> = err.lines().collect();
        assert_eq!(err.len(), 3, "{err:?}");
        assert!(err[0].starts_with("herd: warning: cannot write the run's files under "), "{err:?}");
        assert!(err[1].starts_with("herd: attempt 1: master n1:29500"), "{err:?}");
        assert!(err[2].starts_with("herd: attempt 1 failed"), "{err:?}");
    }
}
