//! A run's files: `<dir>/<run-id>/attempt-<k>/node<rank>-<host>.log` with each node's raw
//! output, and `<dir>/<run-id>/events.jsonl` with one event per line.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::sink::{Shared, Sink, Turn};
use crate::events::Event;

pub struct RunFiles {
    run_dir: PathBuf,
    events: BufWriter<File>,
    hosts: Vec<String>,
    /// The current attempt, once it has started: its node logs exist from then on, and its
    /// rank logs from their first line.
    attempt: Option<u32>,
    /// The ranks whose log this attempt has created.
    rank_logs: HashSet<u32>,
    logs: OpenLogs,
}

impl RunFiles {
    pub fn create(log_root: &Path, run_id: &str, hosts: Vec<String>) -> io::Result<RunFiles> {
        let run_dir = log_root.join(run_id);
        fs::create_dir_all(&run_dir)?;
        let events = BufWriter::new(File::create(run_dir.join("events.jsonl"))?);
        let nhosts = hosts.len();
        Ok(RunFiles {
            run_dir,
            events,
            hosts,
            attempt: None,
            rank_logs: HashSet::new(),
            logs: OpenLogs {
                open: HashMap::new(),
                writes: 0,
                limit: crate::limits::log_files(nhosts),
                unflushed_since: None,
            },
        })
    }

    /// Every node's host, in node-rank order.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The nodes of the attempts from the next on (a spare promoted, the world shrunk): no
    /// node log is written until the next attempt starts.
    pub fn set_hosts(&mut self, hosts: Vec<String>) -> io::Result<()> {
        self.logs.close_all()?;
        self.attempt = None;
        self.hosts = hosts;
        Ok(())
    }

    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    fn node_log_path(&self, attempt: u32, node_rank: usize) -> PathBuf {
        node_log_path(&self.run_dir, attempt, node_rank, &self.hosts[node_rank])
    }

    /// Every node's log of `attempt`, created empty.
    pub fn start_attempt(&mut self, attempt: u32) -> io::Result<()> {
        self.logs.close_all()?;
        self.rank_logs.clear();
        self.attempt = None;
        fs::create_dir_all(attempt_dir(&self.run_dir, attempt))?;
        for rank in 0..self.hosts.len() {
            File::create(self.node_log_path(attempt, rank))?;
        }
        self.attempt = Some(attempt);
        Ok(())
    }

    pub fn write_node(&mut self, node_rank: usize, bytes: &[u8]) -> io::Result<()> {
        match self.attempt {
            Some(attempt) if node_rank < self.hosts.len() => {
                let (dir, host) = (&self.run_dir, &self.hosts[node_rank]);
                let path = || node_log_path(dir, attempt, node_rank, host);
                self.logs.write(LogKey::Node(node_rank), false, path, bytes)
            }
            _ => Ok(()),
        }
    }

    /// Appends to the current attempt's log of one rank.
    pub fn write_rank(&mut self, rank: u32, bytes: &[u8]) -> io::Result<()> {
        let Some(attempt) = self.attempt else { return Ok(()) };
        let fresh = self.rank_logs.insert(rank);
        let path = || rank_log_path(&self.run_dir, attempt, rank);
        self.logs.write(LogKey::Rank(rank), fresh, path, bytes)
    }

    /// A node has ended: its log, and the ranks' (few, and cheap when flushed), on disk.
    pub fn flush_node(&mut self, node_rank: usize) -> io::Result<()> {
        self.logs.flush(|key| key == LogKey::Node(node_rank) || matches!(key, LogKey::Rank(_)))
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
        self.logs.flush(|_| true)
    }

    /// Every log on disk if some of it has waited `LOG_FLUSH` or more: what a node printed is
    /// in its file within about a second (`tail -f`), while a busy run still writes in
    /// buffers' worth.
    pub fn flush_due(&mut self, now: Instant) -> io::Result<()> {
        match self.logs.unflushed_since {
            Some(since) if now.saturating_duration_since(since) >= LOG_FLUSH => self.flush_node_logs(),
            _ => Ok(()),
        }
    }

    #[cfg(test)]
    fn finish_files(&mut self) -> io::Result<()> {
        self.logs.close_all()
    }
}

/// A run writes one log per node and one per rank: a descriptor and a buffer each would make
/// the launch host's limit at scale (9,000 files at 1,000 nodes of 8 ranks). At most
/// `limits::log_files` are open at once (64 to 4,096, from the open-file limit): past that,
/// the least recently written is closed, and opened again to append when it is next written.
#[cfg(test)]
const OPEN_LOGS: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum LogKey {
    Node(usize),
    Rank(u32),
}

/// At most how long a line waits in a log's buffer (see `RunFiles::flush_due`).
pub const LOG_FLUSH: Duration = Duration::from_secs(1);

/// The log files open now, with when each was last written.
struct OpenLogs {
    open: HashMap<LogKey, (BufWriter<File>, u64)>,
    writes: u64,
    /// The most open at once.
    limit: usize,
    /// Since when something written waits in a buffer, if anything does.
    unflushed_since: Option<Instant>,
}

impl OpenLogs {
    /// `bytes` appended to `key`'s log (at `path()`, created empty first if `fresh`).
    fn write(
        &mut self,
        key: LogKey,
        fresh: bool,
        path: impl FnOnce() -> PathBuf,
        bytes: &[u8],
    ) -> io::Result<()> {
        self.writes += 1;
        if fresh {
            self.open.remove(&key);
        }
        if !self.open.contains_key(&key) {
            if self.open.len() >= self.limit {
                let oldest = self.open.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| *k);
                if let Some((mut log, _)) = oldest.and_then(|k| self.open.remove(&k)) {
                    log.flush()?;
                }
            }
            let file =
                if fresh { File::create(path())? } else { OpenOptions::new().append(true).open(path())? };
            self.open.insert(key, (BufWriter::new(file), self.writes));
        }
        let (log, at) = self.open.get_mut(&key).expect("opened");
        *at = self.writes;
        self.unflushed_since.get_or_insert_with(Instant::now);
        log.write_all(bytes)
    }

    /// Flushes the open logs `which` selects.
    fn flush(&mut self, which: impl Fn(LogKey) -> bool) -> io::Result<()> {
        let mut all = true;
        for (key, (log, _)) in self.open.iter_mut() {
            if which(*key) {
                log.flush()?;
            } else {
                all = false;
            }
        }
        if all {
            self.unflushed_since = None;
        }
        Ok(())
    }

    fn close_all(&mut self) -> io::Result<()> {
        self.flush(|_| true)?;
        self.open.clear();
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
                let flushed = self.flush_due(Instant::now());
                self.note(flushed, shared);
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

    fn tick(&mut self, shared: &mut Shared) {
        if shared.report.file_error.is_none() {
            let flushed = self.flush_due(Instant::now());
            self.note(flushed, shared);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn open_fds() -> usize {
        fs::read_dir("/proc/self/fd").unwrap().count()
    }

    #[test]
    fn every_line_reaches_its_log_with_at_most_open_logs_files_open() {
        let root = tempfile::tempdir().unwrap();
        let nodes = 40;
        let hosts: Vec<String> = (0..nodes).map(|n| format!("h{n}")).collect();
        let mut files = RunFiles::create(root.path(), "run", hosts).unwrap();
        files.logs.limit = OPEN_LOGS;
        files.start_attempt(0).unwrap();
        // Every node's 4 ranks print, in turn, three times: 200 logs through 64 files.
        let before = open_fds();
        for round in 0..3 {
            for node in 0..nodes {
                for local in 0..4 {
                    let rank = (node * 4 + local) as u32;
                    let line = format!("round {round} rank {rank}\n");
                    files.write_node(node, line.as_bytes()).unwrap();
                    files.write_rank(rank, line.as_bytes()).unwrap();
                }
            }
            assert!(files.logs.open.len() <= OPEN_LOGS);
        }
        // Other tests of this process open files too: the bound, with room for theirs.
        assert!(open_fds() <= before + OPEN_LOGS + 16, "{} descriptors open", open_fds() - before);
        files.finish_files().unwrap();
        let run = root.path().join("run");
        for node in 0..nodes {
            let log = fs::read_to_string(node_log_path(&run, 0, node, &format!("h{node}"))).unwrap();
            let want: String = (0..3)
                .flat_map(|round| (0..4).map(move |l| format!("round {round} rank {}\n", node * 4 + l)))
                .collect();
            assert_eq!(log, want, "node {node}");
        }
        for rank in 0..nodes as u32 * 4 {
            let log = fs::read_to_string(rank_log_path(&run, 0, rank)).unwrap();
            assert_eq!(log, (0..3).map(|r| format!("round {r} rank {rank}\n")).collect::<String>());
        }
    }

    /// A quiet node's line is in its file within `LOG_FLUSH`, not once a buffer fills or the
    /// node ends; flushing everything starts the wait over.
    #[test]
    fn a_line_waits_in_its_buffer_at_most_log_flush() {
        let root = tempfile::tempdir().unwrap();
        let mut files = RunFiles::create(root.path(), "run", vec!["a".into()]).unwrap();
        files.start_attempt(0).unwrap();
        let log = files.node_log_path(0, 0);
        files.write_node(0, b"step 5\n").unwrap();
        let written = files.logs.unflushed_since.expect("waiting");
        files.flush_due(written + LOG_FLUSH / 2).unwrap();
        assert_eq!(fs::read_to_string(&log).unwrap(), "");
        files.flush_due(written + LOG_FLUSH).unwrap();
        assert_eq!(fs::read_to_string(&log).unwrap(), "step 5\n");
        assert_eq!(files.logs.unflushed_since, None);
        files.write_node(0, b"step 6\n").unwrap();
        assert!(files.logs.unflushed_since.is_some_and(|t| t >= written));
    }

    #[test]
    fn a_new_attempt_starts_every_log_empty_and_a_new_world_writes_none_until_it_starts() {
        let root = tempfile::tempdir().unwrap();
        let mut files = RunFiles::create(root.path(), "run", vec!["a".into(), "b".into()]).unwrap();
        files.start_attempt(0).unwrap();
        files.write_node(1, b"first\n").unwrap();
        files.write_rank(3, b"first\n").unwrap();
        files.start_attempt(1).unwrap();
        files.write_rank(3, b"second\n").unwrap();
        files.set_hosts(vec!["a".into(), "c".into()]).unwrap();
        files.write_node(1, b"lost\n").unwrap();
        files.write_rank(3, b"lost\n").unwrap();
        files.finish_files().unwrap();
        let run = root.path().join("run");
        assert_eq!(fs::read_to_string(node_log_path(&run, 0, 1, "b")).unwrap(), "first\n");
        assert_eq!(fs::read_to_string(node_log_path(&run, 1, 1, "b")).unwrap(), "");
        assert_eq!(fs::read_to_string(rank_log_path(&run, 1, 3)).unwrap(), "second\n");
        assert!(!node_log_path(&run, 1, 1, "c").exists());
    }
}
