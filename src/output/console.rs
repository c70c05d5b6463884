//! The console: each job line with its node's or rank's prefix on stdout (all of them, or the
//! ranks `--ranks` shows), the same line from many ranks once (`collapse`), and herd's own
//! status lines on stderr. Under `--json` only the status lines: the JSON sink writes stdout.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use super::collapse::{self, Collapser, Entry, Printer};
use super::files::rank_log_path;
use super::prefix::{self, RankPrefixes};
use super::sink::{Shared, Sink, Turn};
use super::summary;
use crate::config::RankList;
use crate::events::{Event, RunStatus, Source};
use crate::lines::Lines;
use crate::outcome::NodeExit;

/// How many of a hidden rank's last lines are kept, to show if it fails.
const HIDDEN_TAIL: usize = 20;

/// How often the console says again that herd still waits for a node, with the same error.
const STILL_WAITING_EVERY: Duration = Duration::from_secs(60);

/// When the console shows the same line from many ranks once (`herd run --collapse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Collapse {
    /// When the job has more than 8 ranks (`AUTO_RANKS`).
    #[default]
    Auto,
    /// Whatever the number of ranks.
    Always,
    /// Every line as its rank printed it.
    Never,
}

/// Up to this many ranks (one node of 8 GPUs), `auto` shows every line.
pub const AUTO_RANKS: u32 = 8;

impl Collapse {
    fn on(self, world_size: u32) -> bool {
        match self {
            Collapse::Auto => world_size > AUTO_RANKS,
            Collapse::Always => true,
            Collapse::Never => false,
        }
    }
}

pub struct Console {
    /// Whether job output is echoed (not under `--json`).
    echo: bool,
    color: bool,
    /// The ranks whose lines are shown (`None`: all).
    shown: Option<RankList>,
    prefixes: Vec<Vec<u8>>,
    rank_prefixes: RankPrefixes,
    hosts: Vec<String>,
    collapse: Collapse,
    /// The lines waiting for the same from other printers, when collapsing.
    collapser: Option<Collapser>,
    /// The last lines of each hidden rank in this attempt, kept for a failure's evidence.
    hidden_tails: HashMap<u32, VecDeque<Vec<u8>>>,
    run_dir: PathBuf,
    /// The job's processes that could not be stopped, so far.
    unstopped: usize,
    /// The ranks were told to checkpoint (a time limit, a preemption).
    checkpointed: bool,
    /// The files' error has been told.
    warned: bool,
    /// The nodes herd waits for before a restart, as the console last told of them.
    waits: Waits,
    /// The nodes that end once herd has judged the attempt over.
    stopping: Stopping,
}

/// The nodes herd waits for (`Event::NodeWaiting`, one a try, some seconds apart, for up to
/// `restart.node_wait`): a line for the first try, for one that fails otherwise, and once
/// a minute, each saying how many tries since the last. Every try is in the run's events.
#[derive(Debug, Default)]
struct Waits {
    /// By host: the error last told, when, and the tries not told since.
    told: HashMap<String, (String, SystemTime, u32)>,
}

impl Waits {
    /// The line for this try, if it deserves one.
    fn line(&mut self, node_rank: usize, host: &str, error: &str, now: SystemTime) -> Option<String> {
        match self.told.get_mut(host) {
            Some((told, at, quiet))
                if told == error && now.duration_since(*at).unwrap_or_default() < STILL_WAITING_EVERY =>
            {
                *quiet += 1;
                None
            }
            Some(told) => {
                let line = format!(
                    "still waiting for node {node_rank} ({host}) to come back, {} tries in {} s: {error}",
                    told.2 + 1,
                    now.duration_since(told.1).unwrap_or_default().as_secs()
                );
                *told = (error.to_string(), now, 0);
                Some(line)
            }
            None => {
                self.told.insert(host.to_string(), (error.to_string(), now, 0));
                Some(format!("waiting for node {node_rank} ({host}) to come back: {error}"))
            }
        }
    }

    /// An attempt has started: whoever was waited for came back or was replaced.
    fn clear(&mut self) {
        self.told.clear();
    }
}

/// The nodes that end once herd has judged an attempt over (it asked for their stacks, or
/// began to stop them: a failure, Ctrl-C, a preemption): the failure's consequence, or herd's
/// own SIGTERM. Told together, a line for each way they ended, not a line a node (253 lines
/// at each restart of 254 nodes): before the next line, or once no other node has ended for
/// `STOPPED_QUIET`, so that a node that holds the teardown up shows while it does. The
/// failing node and the verdict are told as ever, and each node's end is in the events.
#[derive(Debug, Default)]
struct Stopping {
    /// The attempt judged over, and when.
    since: Option<(u32, SystemTime)>,
    /// Each way nodes ended since the last line, in the order first seen.
    ended: Vec<Ended>,
    /// When the console took the last of them: the lines are due `STOPPED_QUIET` after.
    joined: Option<Instant>,
}

/// The nodes that ended one way (as `NodeExit` says it), and when the last of them did.
#[derive(Debug)]
struct Ended {
    how: String,
    nodes: Vec<(usize, String)>,
    last: SystemTime,
}

/// How long the nodes that ended as an attempt is stopped wait for others before their line.
const STOPPED_QUIET: Duration = Duration::from_secs(1);

impl Stopping {
    /// Attempt `attempt` was judged over `at`: a second look (the teardown after the stacks)
    /// keeps the first's time. The lines of another attempt's nodes are told before.
    fn begin(&mut self, attempt: u32, at: SystemTime) {
        if self.since.map(|(a, _)| a) != Some(attempt) {
            debug_assert!(self.ended.is_empty(), "told before");
            *self = Stopping { since: Some((attempt, at)), ..Stopping::default() };
        }
    }

    /// Whether node `node_rank` ending `at` is one of them (the console took it `now`): then
    /// kept for a line.
    fn ended(
        &mut self,
        attempt: u32,
        node_rank: usize,
        host: &str,
        exit: &NodeExit,
        at: SystemTime,
        now: Instant,
    ) -> bool {
        if self.since.map(|(a, _)| a) != Some(attempt) || exit.success() {
            return false;
        }
        let how = exit.to_string();
        let node = (node_rank, host.to_string());
        match self.ended.iter_mut().find(|e| e.how == how) {
            Some(e) => {
                e.nodes.push(node);
                e.last = at;
            }
            None => self.ended.push(Ended { how, nodes: vec![node], last: at }),
        }
        self.joined = Some(now);
        true
    }

    /// Whether the nodes kept have waited `STOPPED_QUIET` for others.
    fn due(&self, now: Instant) -> bool {
        self.joined.is_some_and(|j| now.duration_since(j) >= STOPPED_QUIET)
    }

    /// The lines for the nodes kept so far, which are then told.
    fn lines(&mut self) -> Vec<String> {
        self.joined = None;
        let Some((attempt, since)) = self.since else {
            return Vec::new();
        };
        std::mem::take(&mut self.ended)
            .into_iter()
            .map(|Ended { how, nodes, last }| match &nodes[..] {
                [(rank, host)] => summary::node_ended(*rank, host, &how),
                _ => {
                    let secs = last.duration_since(since).unwrap_or_default().as_secs_f64();
                    let nodes: Vec<(usize, &str)> = nodes.iter().map(|(r, h)| (*r, h.as_str())).collect();
                    let nodes = summary::nodes_named(&nodes);
                    format!("attempt {attempt}, stopping: {nodes} ended within {secs:.1} s: {how}")
                }
            })
            .collect()
    }

    /// A new attempt: none is being stopped.
    fn clear(&mut self) {
        *self = Stopping::default();
    }
}

impl Console {
    pub fn new(
        hosts: &[String],
        color: bool,
        echo: bool,
        shown: Option<RankList>,
        collapse: Collapse,
        run_dir: PathBuf,
    ) -> Console {
        Console {
            echo,
            color,
            shown,
            prefixes: prefix::prefixes(hosts, color),
            rank_prefixes: RankPrefixes::new(hosts.to_vec(), color),
            hosts: hosts.to_vec(),
            collapse,
            // `auto` waits for the run to say how many ranks it has.
            collapser: (echo && collapse.on(0)).then(Collapser::new),
            hidden_tails: HashMap::new(),
            run_dir,
            unstopped: 0,
            checkpointed: false,
            warned: false,
            waits: Waits::default(),
            stopping: Stopping::default(),
        }
    }

    fn output(&mut self, node_rank: usize, source: Source, lines: &Lines, shared: &mut Shared) {
        if !self.echo {
            return;
        }
        let hidden = match (source.rank, &self.shown) {
            (Some(rank), Some(shown)) => !shown.contains(rank),
            _ => false,
        };
        let prefix = match source.rank {
            Some(rank) => self.rank_prefixes.get(rank, node_rank),
            None => &self.prefixes[node_rank],
        };
        if let (Some(collapser), false) = (&mut self.collapser, hidden) {
            let printer = match source.rank {
                Some(rank) => Printer::Rank { rank, node: node_rank },
                None => Printer::Node(node_rank),
            };
            let now = Instant::now();
            let mut out = Vec::new();
            for line in lines.iter() {
                out.extend(collapser.push(now, printer, line.text));
            }
            self.show(out, shared);
            return;
        }
        for line in lines.iter() {
            if hidden {
                let kept = self.hidden_tails.entry(source.rank.expect("a rank")).or_default();
                if kept.len() == HIDDEN_TAIL {
                    kept.pop_front();
                }
                kept.push_back([prefix, line.text].concat());
            } else {
                shared.screen.job(&[prefix, line.text, b"\n"]);
            }
        }
    }

    /// Lines that went through the collapser: one printer's with its own prefix, many
    /// printers' with their list, `[r0-511]` or `[0-63 gpu-[01-64]]`.
    fn show(&mut self, entries: Vec<Entry>, shared: &mut Shared) {
        for entry in entries {
            let (prefix, owned);
            match entry.printers[..] {
                [Printer::Rank { rank, node }] => prefix = self.rank_prefixes.get(rank, node),
                [Printer::Node(node)] => prefix = &self.prefixes[node],
                _ => {
                    owned = self.group_prefix(&entry.printers);
                    prefix = &owned;
                }
            }
            shared.screen.job(&[prefix, &entry.text, b"\n"]);
        }
    }

    fn group_prefix(&self, printers: &[Printer]) -> Vec<u8> {
        let plain = match printers[0] {
            Printer::Rank { .. } => {
                let ranks = printers.iter().filter_map(|p| match *p {
                    Printer::Rank { rank, .. } => Some(rank),
                    Printer::Node(_) => None,
                });
                format!("[r{}]", collapse::ranges(ranks.collect()))
            }
            Printer::Node(_) => {
                let mut nodes: Vec<usize> = printers
                    .iter()
                    .filter_map(|p| match *p {
                        Printer::Node(n) => Some(n),
                        Printer::Rank { .. } => None,
                    })
                    .collect();
                nodes.sort_unstable();
                let hosts: Vec<&str> =
                    nodes.iter().filter_map(|&n| self.hosts.get(n).map(String::as_str)).collect();
                let ids = collapse::ranges(nodes.iter().map(|&n| n as u32).collect());
                format!("[{ids} {}]", crate::config::hostlist::compress(&hosts))
            }
        };
        match self.color {
            true => format!("\x1b[1m{plain}\x1b[0m ").into_bytes(),
            false => format!("{plain} ").into_bytes(),
        }
    }

    /// Every line the collapser holds, before what comes next (herd's own lines, the end).
    fn drain(&mut self, shared: &mut Shared) {
        if let Some(out) = self.collapser.as_mut().map(Collapser::drain) {
            self.show(out, shared);
        }
    }

    /// A failing rank the filter hid: its last lines, and where the rest is.
    fn failed(&mut self, attempt: u32, rank: Option<u32>, shared: &mut Shared) {
        let Some(rank) = rank else { return };
        let Some(kept) = self.hidden_tails.remove(&rank) else { return };
        self.drain(shared);
        let path = rank_log_path(&self.run_dir, attempt, rank);
        shared.screen.status(&format!(
            "rank {rank} failed; its last {} line(s), not shown before (all of it: {}):",
            kept.len(),
            path.display()
        ));
        for line in kept {
            shared.screen.job(&[&line, b"\n"]);
        }
    }

    /// The first error writing the run's files, once.
    fn warn(&mut self, shared: &mut Shared) {
        if let (Some(msg), false) = (&shared.report.file_error, self.warned) {
            self.warned = true;
            let line = format!("warning: {msg}; job output goes on, to stdout only");
            self.drain(shared);
            shared.screen.status(&line);
        }
    }

    fn status(&mut self, event: &Event, at: SystemTime, shared: &mut Shared) {
        match event {
            Event::ProcessesUnstopped { pids, .. } => self.unstopped += pids.len(),
            Event::CheckpointRequested { .. } => self.checkpointed = true,
            Event::StacksRequested { attempt, .. } | Event::TeardownStarted { attempt, .. } => {
                self.tell_stopped(shared);
                self.stopping.begin(*attempt, at)
            }
            _ => {}
        }
        // A node that ends as its attempt is stopped waits for the line of them all.
        if let Event::NodeExited { attempt, node_rank, host, exit } = event {
            if self.stopping.ended(*attempt, *node_rank, host, exit, at, Instant::now()) {
                return;
            }
        }
        let unstopped = self.unstopped;
        if let Event::AttemptStarted { .. } = event {
            self.waits.clear();
        }
        let line = match event {
            Event::NodeWaiting { node_rank, host, error } => self.waits.line(*node_rank, host, error, at),
            Event::RunFinished { status: RunStatus::Interrupted, .. } if unstopped > 0 => Some(format!(
                "run interrupted; {unstopped} process(es) of the job could not be stopped (see above)"
            )),
            Event::RunFinished { status, attempts } => {
                Some(summary::finished_line(*status, *attempts, self.checkpointed))
            }
            _ => summary::status_line(event),
        };
        if let Some(line) = line {
            // After the job's lines before it, the ones waiting for their twins included.
            self.drain(shared);
            self.tell_stopped(shared);
            shared.screen.status(&line);
        }
    }

    /// The nodes that ended since the attempt was judged over, after the job's lines before
    /// them and before any other line.
    fn tell_stopped(&mut self, shared: &mut Shared) {
        let lines = self.stopping.lines();
        if !lines.is_empty() {
            self.drain(shared);
        }
        for line in lines {
            shared.screen.status(&line);
        }
    }
}

impl Sink for Console {
    fn event(&mut self, turn: &Turn, shared: &mut Shared) {
        if let Some(renamed) = &turn.renamed {
            self.drain(shared);
            if renamed.hosts_changed {
                self.prefixes = prefix::prefixes(turn.hosts, self.color);
                self.rank_prefixes = RankPrefixes::new(turn.hosts.to_vec(), self.color);
                self.hosts = turn.hosts.to_vec();
            }
            self.rank_prefixes.set_ranks(renamed.nprocs);
            // The ranks whose lines show: `--ranks 0` leaves nothing to collapse.
            let world: u32 = renamed.nprocs.iter().sum();
            let shown = match &self.shown {
                Some(list) => (0..world).filter(|&r| list.contains(r)).count() as u32,
                None => world,
            };
            let on = self.echo && self.collapse.on(shown);
            self.collapser = on.then(Collapser::new);
        }
        // What has waited its window goes out first, whatever the event: the reporter's tick
        // comes only when no event does.
        if let Some(out) = self.collapser.as_mut().map(|c| c.due(Instant::now())) {
            self.show(out, shared);
        }
        if self.stopping.due(Instant::now()) {
            self.tell_stopped(shared);
        }
        match turn.event {
            Event::NodeOutput { node_rank, source, lines } => {
                self.warn(shared);
                self.output(*node_rank, *source, lines, shared);
            }
            // Files only: the summary that follows is the event.
            Event::StacksCollected { .. } | Event::NcclDumpsCollected { .. } => self.warn(shared),
            other => {
                match other {
                    Event::AttemptStarting { .. } => {
                        self.tell_stopped(shared);
                        self.stopping.clear();
                        self.hidden_tails.clear();
                    }
                    Event::AttemptFailed { attempt, verdict, .. } => {
                        self.tell_stopped(shared);
                        self.failed(*attempt, verdict.root_cause.as_ref().and_then(|c| c.rank), shared)
                    }
                    _ => {}
                }
                self.warn(shared);
                self.status(other, turn.at, shared);
            }
        }
    }

    /// The lines whose window has passed, while no event comes.
    fn tick(&mut self, shared: &mut Shared) {
        if let Some(out) = self.collapser.as_mut().map(|c| c.due(Instant::now())) {
            self.show(out, shared);
        }
        if self.stopping.due(Instant::now()) {
            self.tell_stopped(shared);
        }
    }

    fn finish(&mut self, shared: &mut Shared) {
        self.drain(shared);
        self.tell_stopped(shared);
        self.warn(shared);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 251 nodes end after attempt 0 was judged over: a line for each way they ended, with
    /// their hostlist and when the last of that way ended, not a line a node; a way only one
    /// node ended names it. Before the attempt was judged over, and from the next attempt on,
    /// each node's end is its own line. The lines are due once no node has ended for a second.
    #[test]
    fn the_nodes_that_end_after_a_failure_are_told_together() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let at = |ms| t0 + Duration::from_millis(ms);
        let i0 = Instant::now();
        let took = |ms| i0 + Duration::from_millis(ms);
        let mut stopping = Stopping::default();
        let host = |r: usize| format!("10.0.0.{r}");
        let term = NodeExit::Signal(15);
        assert!(
            !stopping.ended(0, 3, &host(3), &NodeExit::ExitCode(1), at(0), took(0)),
            "the failure itself"
        );
        stopping.begin(0, at(100));
        for r in (0..252).filter(|&r| r != 3 && r != 7) {
            assert!(stopping.ended(0, r, &host(r), &term, at(200 + r as u64), took(200 + r as u64)));
        }
        assert!(!stopping.due(took(1_000)), "0.5 s since the last");
        stopping.begin(0, at(5_000));
        assert!(stopping.ended(0, 7, &host(7), &NodeExit::ExitCode(1), at(2_600), took(2_600)));
        let success = NodeExit::ExitCode(0);
        assert!(!stopping.ended(0, 9, &host(9), &success, at(2_700), took(2_700)), "a success is no trouble");
        assert!(stopping.due(took(3_600)));
        assert_eq!(
            stopping.lines(),
            [
                "attempt 0, stopping: 250 nodes (10.0.0.[0-2,4-6,8-251]) ended within 0.4 s: signal 15 (SIGTERM)",
                "node 7 (10.0.0.7) ended: exit code 1",
            ]
        );
        assert!(stopping.lines().is_empty(), "told once");
        assert!(!stopping.due(took(9_000)));
        stopping.clear();
        stopping.begin(1, at(10_000));
        assert!(!stopping.ended(0, 1, &host(1), &term, at(10_100), took(10_100)), "the attempt before's");
        assert!(stopping.ended(1, 1, &host(1), &term, at(10_100), took(10_100)));
    }

    /// A node waited for for 5 minutes, a try every 5 s: a line at the first try, none for the
    /// next ones with the same error, then one a minute with the tries since; a new error at
    /// once. After an attempt starts, the next wait is told from its first try.
    #[test]
    fn a_node_waited_for_is_told_of_once_a_minute_not_at_every_try() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut waits = Waits::default();
        let refused = "connect to host n2 port 22: Connection refused";
        let no_route = "connect to host n2 port 22: No route to host";
        let mut lines = Vec::new();
        for i in 0..60u64 {
            let error = if i < 30 { refused } else { no_route };
            if let Some(l) = waits.line(2, "n2", error, t0 + Duration::from_secs(5 * i)) {
                lines.push((5 * i, l));
            }
        }
        assert_eq!(
            lines,
            [
                (0, format!("waiting for node 2 (n2) to come back: {refused}")),
                (60, format!("still waiting for node 2 (n2) to come back, 12 tries in 60 s: {refused}")),
                (120, format!("still waiting for node 2 (n2) to come back, 12 tries in 60 s: {refused}")),
                (150, format!("still waiting for node 2 (n2) to come back, 6 tries in 30 s: {no_route}")),
                (210, format!("still waiting for node 2 (n2) to come back, 12 tries in 60 s: {no_route}")),
                (270, format!("still waiting for node 2 (n2) to come back, 12 tries in 60 s: {no_route}")),
            ]
        );
        // Another node's wait is its own.
        assert!(waits.line(5, "n5", refused, t0 + Duration::from_secs(280)).is_some());
        waits.clear();
        let again = waits.line(2, "n2", refused, t0 + Duration::from_secs(290));
        assert_eq!(again, Some(format!("waiting for node 2 (n2) to come back: {refused}")));
    }
}
