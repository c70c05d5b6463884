//! A run's files: `<dir>/<run-id>/attempt-<k>/node<rank>-<host>.log` with each node's raw
//! output, and `<dir>/<run-id>/events.jsonl` with one event per line.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

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
