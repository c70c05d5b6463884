//! The live status board: what each node is doing, built from run events and rendered as
//! text. Pure: time is passed in, and drawing it on a terminal is `live.rs`'s business.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::sink::{Shared, Sink, Turn};
use crate::events::Event;
use crate::outcome::NodeExit;

/// From this many nodes on, the board shows counts per state and only the nodes that are
/// not healthy, so that it fits on a screen.
pub const COLLAPSE_AT: usize = 64;
/// At most this many unhealthy nodes are listed in the collapsed board.
const MAX_LISTED: usize = 10;
/// A running node silent for this long is listed as not healthy in the collapsed board.
const SILENT_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeState {
    Connecting,
    Connected,
    Preflight,
    Starting,
    Running,
    Stopping,
    Exited(i32),
    Failed(String),
    Unreachable,
    Restarting { at: Instant },
}

impl NodeState {
    /// The word counted in the collapsed board.
    fn kind(&self) -> &'static str {
        match self {
            NodeState::Connecting => "connecting",
            NodeState::Connected => "connected",
            NodeState::Preflight => "preflight",
            NodeState::Starting => "starting",
            NodeState::Running => "running",
            NodeState::Stopping => "stopping",
            NodeState::Exited(0) => "exited 0",
            NodeState::Exited(_) => "exited non-zero",
            NodeState::Failed(_) => "failed",
            NodeState::Unreachable => "unreachable",
            NodeState::Restarting { .. } => "restarting",
        }
    }

    fn words(&self, now: Instant) -> String {
        match self {
            NodeState::Exited(code) => format!("exited {code}"),
            NodeState::Failed(why) => format!("failed: {why}"),
            NodeState::Restarting { at } => {
                format!("restarting in {}", compact(at.saturating_duration_since(now)))
            }
            other => other.kind().to_string(),
        }
    }

    fn healthy(&self) -> bool {
        !matches!(self, NodeState::Exited(c) if *c != 0)
            && !matches!(self, NodeState::Failed(_) | NodeState::Unreachable)
    }
}

#[derive(Debug, Clone)]
struct NodeRow {
    host: String,
    state: NodeState,
    last_output: Option<Instant>,
    /// Its ranks named stragglers in this attempt.
    stragglers: Vec<u32>,
}

impl NodeRow {
    /// Its state, and its stragglers if any.
    fn words(&self, now: Instant) -> String {
        let state = self.state.words(now);
        match self.stragglers.as_slice() {
            [] => state,
            ranks => {
                let ranks: Vec<String> = ranks.iter().map(u32::to_string).collect();
                format!("{state}, straggler rank {}", ranks.join(","))
            }
        }
    }
}

/// Everything the board shows.
#[derive(Debug, Clone)]
pub struct Board {
    run_id: String,
    started: Instant,
    /// Counted from 0, as in events and the `attempt-<k>` log directories.
    attempt: u32,
    max_restarts: u32,
    master: Option<String>,
    nodes: Vec<NodeRow>,
    /// Set while the gang is being stopped.
    teardown: bool,
    spares: Vec<String>,
    /// Host, reason.
    quarantined: Vec<(String, String)>,
}

/// The board as a sink (only with a terminal to draw it on): redrawn after each event and
/// each tick, below the lines.
impl Sink for Board {
    fn event(&mut self, turn: &Turn, shared: &mut Shared) {
        match turn.event {
            Event::NodeOutput { node_rank, .. } => self.output(*node_rank, Instant::now()),
            Event::StacksCollected { .. } | Event::NcclDumpsCollected { .. } => {}
            other => {
                self.apply(other, Instant::now());
                shared.screen.draw(|width| self.render(Instant::now(), width));
            }
        }
    }

    fn tick(&mut self, shared: &mut Shared) {
        shared.screen.draw(|width| self.render(Instant::now(), width));
    }
}

impl Board {
    pub fn new(started: Instant) -> Board {
        Board {
            run_id: String::new(),
            started,
            attempt: 0,
            max_restarts: 0,
            master: None,
            nodes: Vec::new(),
            teardown: false,
            spares: Vec::new(),
            quarantined: Vec::new(),
        }
    }

    pub fn output(&mut self, node_rank: usize, now: Instant) {
        if let Some(n) = self.nodes.get_mut(node_rank) {
            n.last_output = Some(now);
        }
    }

    /// Quarantined, released, a spare promoted, the world changed: the rows and the lists
    /// below them.
    fn roster_changed(&mut self, event: &Event) {
        match event {
            Event::NodeQuarantined { host, reason, .. } => {
                self.quarantined.push((host.clone(), reason.clone()));
            }
            Event::NodeReleased { host, .. } => {
                self.quarantined.retain(|(h, _)| h != host);
                self.spares.push(host.clone());
            }
            _ => {
                if let Event::SparePromoted { host, .. } = event {
                    self.spares.retain(|s| s != host);
                }
                let hosts: Vec<String> = self.nodes.iter().map(|n| n.host.clone()).collect();
                if let Some((hosts, _)) = event.renamed(&hosts, &[]) {
                    self.nodes = rows(&hosts, NodeState::Connecting);
                }
            }
        }
    }

    pub fn apply(&mut self, event: &Event, now: Instant) {
        let set_all = |nodes: &mut Vec<NodeRow>, state: NodeState| {
            for n in nodes.iter_mut() {
                n.state = state.clone();
            }
        };
        match event {
            Event::RunStarted { run_id, hosts, max_restarts, spares, quarantined, .. } => {
                self.run_id = run_id.clone();
                self.max_restarts = *max_restarts;
                self.nodes = rows(hosts, NodeState::Connecting);
                self.spares = spares.clone();
                self.quarantined = quarantined.iter().map(|q| (q.host.clone(), q.reason.clone())).collect();
            }
            Event::NodeQuarantined { .. }
            | Event::NodeReleased { .. }
            | Event::SparePromoted { .. }
            | Event::WorldChanged { .. } => self.roster_changed(event),
            Event::NodeConnected { node_rank, .. } => self.set(*node_rank, NodeState::Connected),
            Event::PreflightStarted { .. } => set_all(&mut self.nodes, NodeState::Preflight),
            Event::AttemptStarting { attempt } => {
                self.attempt = *attempt;
                self.master = None;
                self.teardown = false;
                set_all(&mut self.nodes, NodeState::Starting);
                for n in &mut self.nodes {
                    n.last_output = None;
                    n.stragglers.clear();
                }
            }
            Event::Straggler { node_rank, rank, .. } => {
                if let Some(n) = self.nodes.get_mut(*node_rank) {
                    n.stragglers.push(*rank);
                }
            }
            Event::AttemptStarted { master_addr, master_port, .. } => {
                self.master = Some(format!("{master_addr}:{master_port}"));
            }
            Event::NodeStarted { node_rank, .. } => self.set(*node_rank, NodeState::Running),
            Event::NodeExited { node_rank, exit, .. } => self.set(*node_rank, exited(exit)),
            Event::TeardownStarted { .. } => {
                self.teardown = true;
                for n in &mut self.nodes {
                    if matches!(n.state, NodeState::Running | NodeState::Starting) {
                        n.state = NodeState::Stopping;
                    }
                }
            }
            Event::RestartScheduled { delay_ms, .. } => {
                let at = now + Duration::from_millis(*delay_ms);
                set_all(&mut self.nodes, NodeState::Restarting { at });
            }
            Event::NodeWaiting { node_rank, .. } => self.set(*node_rank, NodeState::Unreachable),
            _ => {}
        }
    }

    fn set(&mut self, node_rank: usize, state: NodeState) {
        if let Some(n) = self.nodes.get_mut(node_rank) {
            n.state = state;
        }
    }

    /// The board as lines of at most `width` characters.
    pub fn render(&self, now: Instant, width: usize) -> String {
        let mut out = String::new();
        let _ = write!(out, "herd run {} · attempt {}/{}", self.run_id, self.attempt, self.max_restarts);
        if let Some(m) = &self.master {
            let _ = write!(out, " · master {m}");
        }
        let _ = write!(out, " · {}", compact(now.saturating_duration_since(self.started)));
        let total = self.nodes.len();
        let count = |f: fn(&NodeState) -> bool| self.nodes.iter().filter(|n| f(&n.state)).count();
        let connecting = count(|s| *s == NodeState::Connecting);
        if connecting > 0 {
            let _ = write!(out, " · connected {}/{total}", total - connecting);
        }
        if self.teardown {
            let _ =
                write!(out, " · stopping, {}/{total} stopped", total - count(|s| *s == NodeState::Stopping));
        }
        out.push('\n');
        self.render_reserve(&mut out);
        if total < COLLAPSE_AT {
            let host_w = self.nodes.iter().map(|n| n.host.len()).max().unwrap_or(4).max(4);
            let rank_w = total.saturating_sub(1).to_string().len().max(4);
            let _ = writeln!(out, "  {:>rank_w$}  {:<host_w$}  {:<24}  last output", "rank", "host", "state");
            for (rank, n) in self.nodes.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "  {rank:>rank_w$}  {:<host_w$}  {:<24}  {}",
                    n.host,
                    n.words(now),
                    age(n.last_output, now)
                );
            }
        } else {
            self.render_counts(&mut out, now);
        }
        out.lines().map(|l| clip(l, width)).collect::<Vec<_>>().join("\n")
    }

    /// The spares and the quarantined nodes, when there are any.
    fn render_reserve(&self, out: &mut String) {
        let mut parts = Vec::new();
        if !self.spares.is_empty() {
            parts.push(format!("spares: {}", listed(self.spares.iter().map(String::as_str))));
        }
        if !self.quarantined.is_empty() {
            let q = self.quarantined.iter().map(|(h, why)| format!("{h} ({why})"));
            parts.push(format!("quarantined: {}", listed(q.collect::<Vec<_>>().iter().map(String::as_str))));
        }
        if !parts.is_empty() {
            let _ = writeln!(out, "  {}", parts.join(" · "));
        }
    }

    fn render_counts(&self, out: &mut String, now: Instant) {
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for n in &self.nodes {
            match counts.iter_mut().find(|(k, _)| *k == n.state.kind()) {
                Some((_, c)) => *c += 1,
                None => counts.push((n.state.kind(), 1)),
            }
        }
        let words: Vec<String> = counts.iter().map(|(k, c)| format!("{k} {c}")).collect();
        let _ = writeln!(out, "  {} nodes: {}", self.nodes.len(), words.join(" · "));
        let silent = |n: &NodeRow| {
            n.state == NodeState::Running
                && n.last_output.is_some_and(|t| now.saturating_duration_since(t) >= SILENT_AFTER)
        };
        let unhealthy: Vec<(usize, &NodeRow)> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| !n.state.healthy() || silent(n) || !n.stragglers.is_empty())
            .collect();
        if unhealthy.is_empty() {
            return;
        }
        let _ = writeln!(out, "  not healthy:");
        for (rank, n) in unhealthy.iter().take(MAX_LISTED) {
            let what = if silent(n) {
                let since = n.last_output.map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
                format!("silent for {}", compact(since))
            } else {
                n.words(now)
            };
            let _ = writeln!(out, "  {rank:>5}  {}  {what}", n.host);
        }
        if unhealthy.len() > MAX_LISTED {
            let _ = writeln!(out, "  … and {} more", unhealthy.len() - MAX_LISTED);
        }
    }
}

/// A node's row once its launcher has ended.
fn exited(exit: &NodeExit) -> NodeState {
    match exit {
        NodeExit::ExitCode(c) => NodeState::Exited(*c),
        NodeExit::Signal(s) => NodeState::Failed(format!("signal {s} ({})", crate::outcome::signal_name(*s))),
        NodeExit::Lost(_) => NodeState::Failed("connection lost".into()),
    }
}

fn rows(hosts: &[String], state: NodeState) -> Vec<NodeRow> {
    hosts
        .iter()
        .map(|h| NodeRow { host: h.clone(), state: state.clone(), last_output: None, stragglers: Vec::new() })
        .collect()
}

/// At most `MAX_LISTED` names, then how many more.
fn listed<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> String {
    let n = names.len();
    let mut s: Vec<&str> = names.take(MAX_LISTED).collect::<Vec<_>>();
    let more = format!("… and {} more", n.saturating_sub(MAX_LISTED));
    if n > MAX_LISTED {
        s.push(&more);
    }
    s.join(", ")
}

fn age(at: Option<Instant>, now: Instant) -> String {
    match at {
        Some(t) => format!("{} ago", compact(now.saturating_duration_since(t))),
        None => "-".to_string(),
    }
}

/// `7s`, `2m05s`, `3h04m`.
pub fn compact(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

fn clip(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return line.to_string();
    }
    let mut s: String = line.chars().take(width.saturating_sub(1)).collect();
    s.push('…');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(t0: Instant, n: usize) -> Board {
        let mut b = Board::new(t0);
        b.apply(
            &Event::RunStarted {
                run_id: "20261130-120000-abcd".into(),
                config: "c.toml".into(),
                config_key: "k".into(),
                launcher: "torchrun",
                nnodes: n,
                world_size: 2 * n as u32,
                max_restarts: 3,
                hosts: (1..=n).map(|i| format!("node{i}")).collect(),
                nprocs: vec![2; n],
                log_dir: "l".into(),
                spares: Vec::new(),
                quarantined: Vec::new(),
            },
            t0,
        );
        b
    }

    fn at(t0: Instant, secs: u64) -> Instant {
        t0 + Duration::from_secs(secs)
    }

    #[test]
    fn rows_follow_a_run_through_its_states() {
        let t0 = Instant::now();
        let mut b = started(t0, 3);
        let connected = Event::NodeConnected { node_rank: 0, host: "node1".into(), millis: 5 };
        b.apply(&connected, at(t0, 1));
        assert_eq!(
            b.render(at(t0, 1), 200),
            "herd run 20261130-120000-abcd · attempt 0/3 · 1s · connected 1/3\n\
             \x20 rank  host   state                     last output\n\
             \x20    0  node1  connected                 -\n\
             \x20    1  node2  connecting                -\n\
             \x20    2  node3  connecting                -"
        );
        b.apply(&Event::AttemptStarting { attempt: 0 }, t0);
        b.apply(
            &Event::AttemptStarted { attempt: 0, master_addr: "10.0.0.1".into(), master_port: 23456 },
            t0,
        );
        for r in 0..3 {
            b.apply(&Event::NodeStarted { attempt: 0, node_rank: r, host: String::new(), pgid: 1 }, t0);
        }
        b.output(1, at(t0, 5));
        b.apply(
            &Event::NodeExited { attempt: 0, node_rank: 2, host: String::new(), exit: NodeExit::Signal(9) },
            at(t0, 6),
        );
        b.apply(&Event::TeardownStarted { attempt: 0, reason: "x".into() }, at(t0, 6));
        let text = b.render(at(t0, 65), 200);
        assert!(text.starts_with("herd run 20261130-120000-abcd · attempt 0/3 · master 10.0.0.1:23456 · 1m05s · stopping, 1/3 stopped\n"), "{text}");
        assert!(text.contains("    0  node1  stopping                  -\n"), "{text}");
        assert!(text.contains("    1  node2  stopping                  1m00s ago\n"), "{text}");
        assert!(text.ends_with("    2  node3  failed: signal 9 (SIGKILL)  -"), "{text}");

        b.apply(
            &Event::RestartScheduled {
                attempt: 1,
                delay_ms: 4000,
                class: crate::outcome::FailureClass::Comm,
            },
            at(t0, 66),
        );
        assert!(b.render(at(t0, 67), 200).contains("node1  restarting in 3s"));
        b.apply(&Event::AttemptStarting { attempt: 1 }, at(t0, 70));
        b.apply(
            &Event::AttemptStarted { attempt: 1, master_addr: "10.0.0.1".into(), master_port: 23457 },
            at(t0, 70),
        );
        let text = b.render(at(t0, 70), 200);
        assert!(
            text.starts_with("herd run 20261130-120000-abcd · attempt 1/3 · master 10.0.0.1:23457 · 1m10s\n"),
            "{text}"
        );
        assert!(text.contains("node2  starting                  -"), "{text}");
    }

    /// A straggler shows on its node's row, in the table and among the collapsed board's
    /// nodes to look at, until the next attempt starts.
    #[test]
    fn a_straggler_shows_on_its_nodes_row_for_its_attempt() {
        let t0 = Instant::now();
        for n in [3, 100] {
            let mut b = started(t0, n);
            b.apply(&Event::AttemptStarting { attempt: 0 }, t0);
            for r in 0..n {
                b.apply(&Event::NodeStarted { attempt: 0, node_rank: r, host: String::new(), pgid: 1 }, t0);
                b.output(r, at(t0, 1));
            }
            let straggler = Event::Straggler {
                attempt: 0,
                rank: 3,
                node_rank: 1,
                host: "node2".into(),
                score: 2.5,
                since_secs: 20.0,
                alone: false,
            };
            b.apply(&straggler, at(t0, 2));
            let text = b.render(at(t0, 2), 200);
            assert!(text.contains("node2  running, straggler rank 3"), "{text}");
            b.apply(&Event::AttemptStarting { attempt: 1 }, at(t0, 3));
            assert!(!b.render(at(t0, 3), 200).contains("straggler"));
        }
    }

    #[test]
    fn many_nodes_collapse_into_counts_and_the_unhealthy() {
        let t0 = Instant::now();
        let mut b = started(t0, 100);
        b.apply(&Event::AttemptStarting { attempt: 0 }, t0);
        for r in 0..100 {
            b.apply(&Event::NodeStarted { attempt: 0, node_rank: r, host: String::new(), pgid: 1 }, t0);
            b.output(r, at(t0, 100));
        }
        for r in [7, 8] {
            let exit = NodeExit::ExitCode(if r == 7 { 0 } else { 3 });
            b.apply(&Event::NodeExited { attempt: 0, node_rank: r, host: String::new(), exit }, t0);
        }
        b.output(42, at(t0, 10));
        let text = b.render(at(t0, 100), 200);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "  100 nodes: running 98 · exited 0 1 · exited non-zero 1", "{text}");
        assert_eq!(lines[2], "  not healthy:");
        assert_eq!(lines[3], "      8  node9  exited 3");
        assert_eq!(lines[4], "     42  node43  silent for 1m30s");
        assert_eq!(lines.len(), 5, "{text}");

        for r in 10..30 {
            b.apply(&Event::NodeWaiting { node_rank: r, host: String::new(), error: "e".into() }, t0);
        }
        let text = b.render(at(t0, 100), 200);
        assert!(text.ends_with("  … and 12 more"), "{text}");
        assert_eq!(text.lines().count(), 2 + 1 + MAX_LISTED + 1, "{text}");
    }

    #[test]
    fn lines_are_clipped_to_the_width() {
        let t0 = Instant::now();
        let b = started(t0, 2);
        for line in b.render(t0, 20).lines() {
            assert!(line.chars().count() <= 20, "{line}");
        }
        assert!(b.render(t0, 20).starts_with("herd run 20261130-1…"));
    }

    #[test]
    fn compact_durations() {
        assert_eq!(compact(Duration::from_millis(999)), "0s");
        assert_eq!(compact(Duration::from_secs(59)), "59s");
        assert_eq!(compact(Duration::from_secs(125)), "2m05s");
        assert_eq!(compact(Duration::from_secs(3 * 3600 + 4 * 60 + 9)), "3h04m");
    }

    #[test]
    fn spares_and_quarantined_nodes_show_and_a_promoted_spare_takes_its_row() {
        let t0 = Instant::now();
        let mut b = Board::new(t0);
        b.apply(
            &Event::RunStarted {
                run_id: "r".into(),
                config: "c.toml".into(),
                config_key: "k".into(),
                launcher: "torchrun",
                nnodes: 2,
                world_size: 2,
                max_restarts: 3,
                hosts: vec!["n1".into(), "n2".into()],
                nprocs: vec![1, 1],
                log_dir: "l".into(),
                spares: vec!["n3".into()],
                quarantined: vec![crate::events::Quarantined {
                    host: "n9".into(),
                    reason: "node-lost".into(),
                }],
            },
            t0,
        );
        let text = b.render(t0, 200);
        assert!(text.contains("  spares: n3 · quarantined: n9 (node-lost)\n"), "{text}");
        b.apply(
            &Event::NodeQuarantined { attempt: 1, host: "n2".into(), reason: "SIGSEGV".into(), saved: true },
            t0,
        );
        let promoted =
            Event::SparePromoted { attempt: 1, node_rank: 1, host: "n3".into(), replaced: "n2".into() };
        b.apply(&promoted, t0);
        let text = b.render(t0, 200);
        assert!(text.contains("  quarantined: n9 (node-lost), n2 (SIGSEGV)\n"), "{text}");
        assert!(!text.contains("spares:"), "{text}");
        assert!(text.lines().any(|l| l.contains("  1  n3 ")), "{text}");
        // Its fault followed its rank to n3: n2 is a spare again.
        b.apply(
            &Event::NodeReleased { attempt: 2, host: "n2".into(), reason: "the rank's".into(), saved: true },
            t0,
        );
        let text = b.render(t0, 200);
        assert!(text.contains("  spares: n2 · quarantined: n9 (node-lost)\n"), "{text}");
    }
}
