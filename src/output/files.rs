//! A run's files: `<dir>/<run-id>/attempt-<k>/node<rank>-<host>.log` with each node's raw
//! output, and `<dir>/<run-id>/events.jsonl` with one event per line.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::sink::{Shared, Sink, Turn};
use crate::events::Event;

pub struct RunFiles {
    run_dir: PathBuf,
    events: BufWriter<File>,
    hosts: Vec<String>,
    node_logs: Vec<Option<BufWriter<File>>>,
    /// The current attempt's per-rank logs, opened as each rank first writes.
    attempt: Option<u32>,
    rank_logs: std::collections::HashMap<u32, BufWriter<File>>,
}

impl RunFiles {
    pub fn create(log_root: &Path, run_id: &str, hosts: Vec<String>) -> io::Result<RunFiles> {
        let run_dir = log_root.join(run_id);
        fs::create_dir_all(&run_dir)?;
        let events = BufWriter::new(File::create(run_dir.join("events.jsonl"))?);
        let node_logs = hosts.iter().map(|_| None).collect();
        Ok(RunFiles { run_dir, events, hosts, node_logs, attempt: None, rank_logs: Default::default() })
    }

    /// Every node's host, in node-rank order.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The nodes of the attempts from the next on (a spare promoted, the world shrunk).
    pub fn set_hosts(&mut self, hosts: Vec<String>) -> io::Result<()> {
        self.flush_node_logs()?;
        self.node_logs = hosts.iter().map(|_| None).collect();
        self.hosts = hosts;
        Ok(())
    }

    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    fn node_log_path(&self, attempt: u32, node_rank: usize) -> PathBuf {
        node_log_path(&self.run_dir, attempt, node_rank, &self.hosts[node_rank])
    }

    pub fn start_attempt(&mut self, attempt: u32) -> io::Result<()> {
        self.flush_node_logs()?;
        self.rank_logs.clear();
        self.attempt = Some(attempt);
        fs::create_dir_all(attempt_dir(&self.run_dir, attempt))?;
        for rank in 0..self.hosts.len() {
            self.node_logs[rank] = Some(BufWriter::new(File::create(self.node_log_path(attempt, rank))?));
        }
        Ok(())
    }

    pub fn write_node(&mut self, node_rank: usize, bytes: &[u8]) -> io::Result<()> {
        match self.node_logs.get_mut(node_rank) {
            Some(Some(log)) => log.write_all(bytes),
            _ => Ok(()),
        }
    }

    /// Appends to the current attempt's log of one rank.
    pub fn write_rank(&mut self, rank: u32, bytes: &[u8]) -> io::Result<()> {
        let Some(attempt) = self.attempt else { return Ok(()) };
        if !self.rank_logs.contains_key(&rank) {
            let file = File::create(rank_log_path(&self.run_dir, attempt, rank))?;
            self.rank_logs.insert(rank, BufWriter::new(file));
        }
        self.rank_logs.get_mut(&rank).expect("opened").write_all(bytes)
    }

    /// A node has ended: its log, and the ranks' (few, and cheap when flushed), on disk.
    pub fn flush_node(&mut self, node_rank: usize) -> io::Result<()> {
        if let Some(Some(log)) = self.node_logs.get_mut(node_rank) {
            log.flush()?;
        }
        for log in self.rank_logs.values_mut() {
            log.flush()?;
        }
        Ok(())
    }

    /// Each rank's stack as `attempt-<k>/stacks/rank<R>.txt`: py-spy's dump, or why there
    /// is none.
    pub fn write_stacks(&mut self, attempt: u32, stacks: &[crate::stacks::RankStack]) -> io::Result<()> {
        let dir = attempt_dir(&self.run_dir, attempt).join("stacks");
        fs::create_dir_all(&dir)?;
        for s in stacks {
            fs::write(dir.join(format!("rank{}.txt", s.rank)), s.text())?;
        }
        Ok(())
    }

    /// The NCCL flight-recorder dumps herd has, as `attempt-<k>/nccl/rank_<R>`: named as
    /// PyTorch names them, for its `torchfrtrace` to read the folder.
    pub fn write_nccl_dumps(&mut self, attempt: u32, dumps: &[crate::nccl::RankDump]) -> io::Result<()> {
        let dir = attempt_dir(&self.run_dir, attempt).join("nccl");
        for (rank, bytes) in dumps.iter().filter_map(|d| Some((d.rank, d.bytes.as_ref().ok()?))) {
            fs::create_dir_all(&dir)?;
            fs::write(dir.join(format!("rank_{rank}")), bytes)?;
        }
        Ok(())
    }

    pub fn record(&mut self, event: &Event, ts: String) -> io::Result<()> {
        self.events.write_all(&super::json::event_line(event, ts))?;
        // Events are few and are what an operator reads after a crash: keep them on disk.
        self.events.flush()
    }

    pub fn flush_node_logs(&mut self) -> io::Result<()> {
        for log in self.node_logs.iter_mut().flatten() {
            log.flush()?;
        }
        for log in self.rank_logs.values_mut() {
            log.flush()?;
        }
        Ok(())
    }
}

/// The run's files as a sink: each line in its node's and its rank's log, each event in
/// events.jsonl, the stacks and NCCL dumps. After the first error (the report's
/// `file_error`, which the console tells) nothing more is written, and the echo goes on.
impl Sink for RunFiles {
    fn event(&mut self, turn: &Turn, shared: &mut Shared) {
        // Whether the files were sound when the event came: all of it is written then.
        let ok = shared.report.file_error.is_none();
        match turn.event {
            Event::NodeOutput { node_rank, source, lines } if ok => {
                for line in lines.iter() {
                    let mut written = self
                        .write_node(*node_rank, line.text)
                        .and_then(|_| self.write_node(*node_rank, line.end.bytes()));
                    if let Some(rank) = source.rank {
                        written = written
                            .and_then(|_| self.write_rank(rank, line.text))
                            .and_then(|_| self.write_rank(rank, line.end.bytes()));
                    }
                    self.note(written, shared);
                }
            }
            Event::StacksCollected { attempt, stacks, .. } if ok => {
                let written = self.write_stacks(*attempt, stacks);
                self.note(written, shared);
            }
            Event::NcclDumpsCollected { attempt, dumps, .. } if ok => {
                let written = self.write_nccl_dumps(*attempt, dumps);
                self.note(written, shared);
            }
            Event::NodeOutput { .. } | Event::StacksCollected { .. } | Event::NcclDumpsCollected { .. } => {}
            other => {
                if turn.renamed.as_ref().is_some_and(|r| r.hosts_changed) {
                    let moved = self.set_hosts(turn.hosts.to_vec());
                    self.note(moved, shared);
                }
                if ok {
                    let written = match other {
                        Event::AttemptStarting { attempt } => self.start_attempt(*attempt),
                        Event::NodeExited { node_rank, .. } => self.flush_node(*node_rank),
                        _ => Ok(()),
                    }
                    .and_then(|_| self.record(other, turn.ts()));
                    self.note(written, shared);
                }
            }
        }
    }

    fn finish(&mut self, shared: &mut Shared) {
        let flushed = self.flush_node_logs();
        self.note(flushed, shared);
    }
}

impl RunFiles {
    /// The first error, kept in the report.
    fn note(&self, result: io::Result<()>, shared: &mut Shared) {
        if let (Err(e), None) = (result, &shared.report.file_error) {
            let msg = format!("cannot write the run's files under {}: {e}", self.run_dir.display());
            shared.report.file_error = Some(msg);
        }
    }
}

fn attempt_dir(run_dir: &Path, attempt: u32) -> PathBuf {
    run_dir.join(format!("attempt-{attempt}"))
}

/// One rank's log in one attempt: exactly the bytes that rank wrote, stdout and stderr, line
/// by line as they came.
pub fn rank_log_path(run_dir: &Path, attempt: u32, rank: u32) -> PathBuf {
    attempt_dir(run_dir, attempt).join(format!("rank{rank}.log"))
}

pub fn node_log_path(run_dir: &Path, attempt: u32, node_rank: usize, host: &str) -> PathBuf {
    attempt_dir(run_dir, attempt).join(format!("node{node_rank}-{host}.log"))
}
