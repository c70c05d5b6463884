//! Turning run events into what people read: prefixed job output on stdout, herd's own status
//! lines on stderr, and the run's files. The reporter runs on its own thread and never touches
//! a process; the supervisor never prints.

mod files;
pub mod plan_view;
pub mod prefix;
pub mod summary;

use std::io::{self, Write};
use std::path::{Path, PathBuf};

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
    pub run_dir: PathBuf,
    pub lines_out: u64,
    pub bytes_out: u64,
}

/// Consume events until the channel closes. Errors writing stdout (a closed pipe) stop the
/// echo but never the log files: the job's output is never lost from disk.
pub fn report(
    log_root: &Path,
    run_id: &str,
    hosts: Vec<String>,
    mut events: mpsc::Receiver<Event>,
    mut sinks: Sinks,
) -> io::Result<Report> {
    let nodes: Vec<(usize, String)> = hosts.iter().cloned().enumerate().collect();
    let prefixes = prefix::prefixes(&nodes, sinks.color);
    let mut files = RunFiles::create(log_root, run_id, hosts.clone())?;
    let mut report = Report {
        run_dir: files.run_dir().to_path_buf(),
        ..Report::default()
    };
    let mut stdout = io::BufWriter::with_capacity(64 * 1024, sinks.stdout);
    let mut stdout_ok = true;

    while let Some(event) = events.blocking_recv() {
        match &event {
            Event::NodeOutput { node_rank, lines } => {
                for line in lines {
                    files.write_node(*node_rank, &line.text)?;
                    files.write_node(*node_rank, line.end.bytes())?;
                    report.lines_out += 1;
                    report.bytes_out += line.raw_len() as u64;
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
                if let Event::AttemptStarted { attempt, .. } = other {
                    files.start_attempt(*attempt)?;
                }
                if let Event::NodeExited { node_rank, .. } = other {
                    files.flush_node(*node_rank)?;
                }
                files.record(other)?;
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
    files.flush_node_logs()?;
    let _ = stdout.flush();
    Ok(report)
}
