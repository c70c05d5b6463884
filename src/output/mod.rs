//! Turning run events into what people read: prefixed job output on stdout, herd's own status
//! lines on stderr, and the run's files. The reporter runs on its own thread and never touches
//! a process; the supervisor never prints.

pub mod doctor_view;
mod files;
pub mod plan_view;
pub mod prefix;
pub mod summary;

use std::io::{self, Write};

use tokio::sync::mpsc;

use crate::events::Event;

pub use files::{node_log_path, RunFiles};

/// Where the reporter writes.
pub struct Sinks {
    /// Job output.
    pub stdout: Box<dyn Write + Send>,
    /// herd's own status lines.
    pub stderr: Box<dyn Write + Send>,
    pub color: bool,
}

/// What the reporter knows at the end.
#[derive(Debug, Default)]
pub struct Report {
    /// The first error writing the run's files, after which they were no longer written.
    pub file_error: Option<String>,
}

/// Consume events until the channel closes. A closed stdout stops the echo but not the log
/// files; a failing disk stops the files but not the echo. Neither stops reading events, so
/// the run itself never stalls on its output.
pub fn report(mut files: RunFiles, mut events: mpsc::Receiver<Event>, mut sinks: Sinks) -> Report {
    let prefixes = prefix::prefixes(&files.nodes(), sinks.color);
    let mut report = Report::default();
    let mut stdout = io::BufWriter::with_capacity(64 * 1024, sinks.stdout);
    let mut stdout_ok = true;
    let run_dir = files.run_dir().display().to_string();
    let file_result = |report: &mut Report, result: io::Result<()>, stderr: &mut dyn Write| {
        if let (Err(e), None) = (result, &report.file_error) {
            let msg = format!("cannot write the run's files under {run_dir}: {e}");
            let _ = writeln!(stderr, "herd: warning: {msg}; job output goes on, to stdout only");
            report.file_error = Some(msg);
        }
    };

    while let Some(event) = events.blocking_recv() {
        let files_ok = report.file_error.is_none();
        match &event {
            Event::NodeOutput { node_rank, lines } => {
                for line in lines {
                    if files_ok {
                        let written = files
                            .write_node(*node_rank, &line.text)
                            .and_then(|_| files.write_node(*node_rank, line.end.bytes()));
                        file_result(&mut report, written, &mut *sinks.stderr);
                    }
                    if stdout_ok {
                        let prefix = &prefixes[*node_rank];
                        stdout_ok = stdout
                            .write_all(prefix)
                            .and_then(|_| stdout.write_all(&line.text))
                            .and_then(|_| stdout.write_all(b"\n"))
                            .is_ok();
                    }
                }
            }
            other => {
                if files_ok {
                    let written = match other {
                        Event::AttemptStarted { attempt, .. } => files.start_attempt(*attempt),
                        Event::NodeExited { node_rank, .. } => files.flush_node(*node_rank),
                        _ => Ok(()),
                    }
                    .and_then(|_| files.record(other));
                    file_result(&mut report, written, &mut *sinks.stderr);
                }
                if let Some(line) = summary::status_line(other) {
                    // Keep job output and status in order on a shared terminal.
                    if stdout_ok {
                        stdout_ok = stdout.flush().is_ok();
                    }
                    let _ = writeln!(sinks.stderr, "herd: {line}");
                }
            }
        }
        if stdout_ok && events.is_empty() {
            stdout_ok = stdout.flush().is_ok();
        }
    }
    let flushed = files.flush_node_logs();
    file_result(&mut report, flushed, &mut *sinks.stderr);
    let _ = stdout.flush();
    report
}
