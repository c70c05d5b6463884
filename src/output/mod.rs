//! Turning run events into what people read: prefixed job output on stdout, herd's own status
//! lines on stderr, and the run's files. The reporter runs on its own thread and never touches
//! a process; the supervisor never prints.

pub mod board;
pub mod doctor_view;
pub mod exec_view;
pub mod files;
pub mod json;
mod live;
pub mod mode;
pub mod plan_view;
pub mod prefix;
pub mod record;
pub mod summary;

use std::io::{self, Write};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::events::Event;

pub use crate::lines::printable;
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
    pub on_stdout_closed: Option<mpsc::UnboundedSender<()>>,
    /// The ranks whose lines are shown (`None`: all); the files keep every line.
    pub console: Option<crate::config::RankList>,
    /// `[notify]`: hears of the notable events.
    pub notify: Option<crate::notify::Notifier>,
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
/// How many of a hidden rank's last lines are kept, to show if it fails.
const HIDDEN_TAIL: usize = 20;
/// Job output is written to stdout in pieces of about this size, or when no event waits.
const STDOUT_CHUNK: usize = 64 * 1024;

/// Consume events until the channel closes. A closed stdout stops the echo but not the log
/// files, and asks for the run to stop (`Sinks::on_stdout_closed`); a failing disk stops the
/// files but not the echo. Neither stops reading events, so the run itself never stalls on
/// its output.
pub fn report(mut files: RunFiles, mut events: mpsc::Receiver<Event>, sinks: Sinks) -> Report {
    let color = sinks.mode.color();
    let json = sinks.mode == Mode::Json;
    let mut prefixes = prefix::prefixes(files.hosts(), color);
    let mut rank_prefixes = prefix::RankPrefixes::new(files.hosts().to_vec(), color);
    let sinks_console = sinks.console.clone();
    let mut hidden_tails: std::collections::HashMap<u32, std::collections::VecDeque<Vec<u8>>> =
        Default::default();
    let mut hosts = files.hosts().to_vec();
    let mut nprocs: Vec<u32> = Vec::new();
    let live = matches!(sinks.mode, Mode::Board { .. }).then(live::Live::new);
    // Waiting with a timeout needs a timer; only the board needs one.
    let timer =
        live.as_ref().and_then(|_| tokio::runtime::Builder::new_current_thread().enable_time().build().ok());
    let mut screen = Screen {
        out: sinks.stdout,
        err: sinks.stderr,
        pending: Vec::new(),
        out_ok: true,
        out_closed: false,
        live,
        flushed_at: Instant::now(),
    };
    let mut board = board::Board::new(Instant::now());
    let mut attempt = 0;
    let mut unstopped = 0;
    let mut report = Report::default();
    let run_dir = files.run_dir().display().to_string();
    let file_result = |report: &mut Report, result: io::Result<()>, screen: &mut Screen| {
        if let (Err(e), None) = (result, &report.file_error) {
            let msg = format!("cannot write the run's files under {run_dir}: {e}");
            screen.status(&format!("warning: {msg}; job output goes on, to stdout only"));
            report.file_error = Some(msg);
        }
    };

    loop {
        let event = match &timer {
            Some(rt) => match rt.block_on(async { tokio::time::timeout(BOARD_TICK, events.recv()).await }) {
                Ok(Some(event)) => event,
                Ok(None) => break,
                Err(_) => {
                    screen.flush_job();
                    screen.draw(&board);
                    continue;
                }
            },
            None => match events.blocking_recv() {
                Some(event) => event,
                None => break,
            },
        };
        let files_ok = report.file_error.is_none();
        match &event {
            Event::NodeOutput { node_rank, source, lines } => {
                board.output(*node_rank, Instant::now());
                let ts = if json { json::timestamp() } else { String::new() };
                // `--json` is for programs, which filter themselves: every line.
                let hidden = match (source.rank, &sinks_console) {
                    (Some(rank), Some(shown)) => !json && !shown.contains(rank),
                    _ => false,
                };
                let prefix = match source.rank {
                    Some(rank) => rank_prefixes.get(rank, *node_rank),
                    None => &prefixes[*node_rank],
                };
                for line in lines.iter() {
                    if files_ok {
                        let mut written = files
                            .write_node(*node_rank, line.text)
                            .and_then(|_| files.write_node(*node_rank, line.end.bytes()));
                        if let Some(rank) = source.rank {
                            written = written
                                .and_then(|_| files.write_rank(rank, line.text))
                                .and_then(|_| files.write_rank(rank, line.end.bytes()));
                        }
                        file_result(&mut report, written, &mut screen);
                    }
                    if hidden {
                        // Kept for a failure's evidence: the last lines of each hidden rank.
                        let kept = hidden_tails.entry(source.rank.expect("a rank")).or_default();
                        if kept.len() == HIDDEN_TAIL {
                            kept.pop_front();
                        }
                        kept.push_back([prefix, line.text].concat());
                    } else if json {
                        let host = &hosts[*node_rank];
                        screen.job(&[&json::output_line(
                            attempt,
                            *node_rank,
                            host,
                            *source,
                            line,
                            ts.clone(),
                        )]);
                    } else {
                        screen.job(&[prefix, line.text, b"\n"]);
                    }
                }
            }
            // Files only: the summary that follows is the event.
            Event::StacksCollected { attempt, stacks, .. } => {
                if files_ok {
                    let written = files.write_stacks(*attempt, stacks);
                    file_result(&mut report, written, &mut screen);
                }
            }
            Event::NcclDumpsCollected { attempt, dumps, .. } => {
                if files_ok {
                    let written = files.write_nccl_dumps(*attempt, dumps);
                    file_result(&mut report, written, &mut screen);
                }
            }
            other => {
                if let Event::AttemptStarting { attempt: a } = other {
                    attempt = *a;
                    hidden_tails.clear();
                }
                // A failing rank the filter hid: its last lines, and where the rest is.
                if let Event::AttemptFailed { attempt: a, verdict, .. } = other {
                    if let Some(rank) = verdict.root_cause.as_ref().and_then(|c| c.rank) {
                        if let Some(kept) = hidden_tails.remove(&rank) {
                            let path = files::rank_log_path(files.run_dir(), *a, rank);
                            screen.status(&format!(
                                "rank {rank} failed; its last {} line(s), not shown before (all of it: {}):",
                                kept.len(),
                                path.display()
                            ));
                            for line in kept {
                                screen.job(&[&line, b"\n"]);
                            }
                        }
                    }
                }
                // Who is who: at the start, and again when the nodes change between attempts.
                let renamed = other.renamed(&hosts, &nprocs);
                if let Some((h, n)) = renamed {
                    if h != hosts {
                        let moved = files.set_hosts(h.clone());
                        file_result(&mut report, moved, &mut screen);
                        prefixes = prefix::prefixes(&h, color);
                        rank_prefixes = prefix::RankPrefixes::new(h.clone(), color);
                        hosts = h;
                    }
                    rank_prefixes.set_ranks(&n);
                    nprocs = n;
                }
                board.apply(other, Instant::now());
                let ts = json::timestamp();
                if files_ok {
                    let written = match other {
                        Event::AttemptStarting { attempt } => files.start_attempt(*attempt),
                        Event::NodeExited { node_rank, .. } => files.flush_node(*node_rank),
                        _ => Ok(()),
                    }
                    .and_then(|_| files.record(other, ts.clone()));
                    file_result(&mut report, written, &mut screen);
                }
                if let Some(n) = sinks.notify.as_ref().filter(|_| crate::notify::Notifier::wants(other)) {
                    n.send(json::event_line(other, ts.clone()));
                }
                if json {
                    screen.job(&[&json::event_line(other, ts)]);
                }
                if let Event::ProcessesUnstopped { pids, .. } = other {
                    unstopped += pids.len();
                }
                let line = match other {
                    Event::RunFinished { status: crate::events::RunStatus::Interrupted, .. } if unstopped > 0 => {
                        Some(format!("run interrupted; {unstopped} process(es) of the job could not be stopped (see above)"))
                    }
                    _ => summary::status_line(other),
                };
                if let Some(line) = line {
                    screen.status(&line);
                }
                screen.draw(&board);
            }
        }
        if events.is_empty() && screen.due() {
            screen.flush_job();
        }
        if screen.out_closed && !report.stdout_closed {
            report.stdout_closed = true;
            screen.status("stdout was closed: stopping the run (the log files keep everything)");
            if let Some(stop) = &sinks.on_stdout_closed {
                let _ = stop.send(());
            }
        }
    }
    let flushed = files.flush_node_logs();
    file_result(&mut report, flushed, &mut screen);
    if let Some(n) = sinks.notify {
        n.finish();
    }
    screen.flush_job();
    report.stdout_closed = screen.out_closed;
    if let Some(live) = &screen.live {
        live.clear();
    }
    report
}

/// stdout and stderr, with the board (when there is one) kept below everything written.
struct Screen {
    out: Box<dyn Write + Send>,
    err: Box<dyn Write + Send>,
    /// Job output not yet written to stdout.
    pending: Vec<u8>,
    out_ok: bool,
    /// Its reader went away (EPIPE).
    out_closed: bool,
    live: Option<live::Live>,
    flushed_at: Instant,
}

impl Screen {
    fn job(&mut self, parts: &[&[u8]]) {
        if !self.out_ok {
            return;
        }
        for p in parts {
            self.pending.extend_from_slice(p);
        }
        if self.pending.len() >= STDOUT_CHUNK {
            self.flush_job();
        }
    }

    /// Whether waiting job output should go out now that no event waits: at once without a
    /// board, at the board's pace with one.
    fn due(&self) -> bool {
        self.live.is_none() || self.flushed_at.elapsed() >= BOARD_TICK
    }

    fn flush_job(&mut self) {
        self.flushed_at = Instant::now();
        if self.pending.is_empty() || !self.out_ok {
            self.pending.clear();
            return;
        }
        let (out, pending) = (&mut self.out, &self.pending);
        let mut write = || out.write_all(pending).and_then(|_| out.flush());
        let written = match &self.live {
            Some(live) => live.above(write),
            None => write(),
        };
        if let Err(e) = written {
            self.out_ok = false;
            self.out_closed = e.kind() == io::ErrorKind::BrokenPipe;
        }
        self.pending.clear();
    }

    /// One of herd's own lines, after the job output before it.
    fn status(&mut self, line: &str) {
        self.flush_job();
        let err = &mut self.err;
        let mut write = || {
            let _ = writeln!(err, "herd: {line}");
        };
        match &self.live {
            Some(live) => live.above(write),
            None => write(),
        }
    }

    fn draw(&self, board: &board::Board) {
        if let Some(live) = &self.live {
            live.draw(board, Instant::now());
        }
    }
}
