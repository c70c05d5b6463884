//! What a platform team scrapes (`herd run --metrics ADDR`): the run's events folded into a
//! few counters and gauges, rendered as Prometheus' text format. Pure: `Metrics::observe`
//! takes each event with its time, `Metrics::render` writes the page; `serve` only answers
//! HTTP with it.
//!
//! Names follow Prometheus' conventions: a `herd_` prefix, the unit in the name, `_total` on
//! counters, and the process collector's own names (`process_*`) for herd's RSS and
//! descriptors, as every client library exports them. Labels are bounded: a failure class, a
//! node state, a straggler's kind; never a rank or a host.

pub mod serve;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::events::{Event, RunStatus};
use crate::outcome::{FailureClass, NodeExit};

/// What a node is to the run, as the metrics count it (`herd_nodes{state}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NodeState {
    /// In the job, and reachable as far as herd knows.
    Active,
    /// A spare, idle until it takes a node's place.
    Spare,
    /// Kept out of the run.
    Quarantined,
    /// In the job, but its connection was lost or it could not be reached before a restart,
    /// until the next attempt starts with it.
    Lost,
    /// Out of the job with no spare in its place (`restart.min_nodes`), not quarantined.
    Out,
}

impl NodeState {
    pub const ALL: [NodeState; 5] =
        [NodeState::Active, NodeState::Spare, NodeState::Quarantined, NodeState::Lost, NodeState::Out];

    pub fn name(self) -> &'static str {
        match self {
            NodeState::Active => "active",
            NodeState::Spare => "spare",
            NodeState::Quarantined => "quarantined",
            NodeState::Lost => "lost",
            NodeState::Out => "out",
        }
    }
}

/// A node's role, and whether it is lost.
#[derive(Debug, Clone, Copy)]
struct Node {
    role: NodeState,
    lost: bool,
}

impl Node {
    fn state(self) -> NodeState {
        match self.role {
            NodeState::Active if self.lost => NodeState::Lost,
            role => role,
        }
    }
}

/// herd's own process, read when scraped (`serve::process`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Process {
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub open_fds: u64,
    pub max_fds: Option<u64>,
    pub cpu_seconds: f64,
    pub start_time: Option<SystemTime>,
}

/// The run so far, as the metrics tell it.
#[derive(Debug, Default)]
pub struct Metrics {
    run_id: String,
    config: String,
    launcher: String,
    started: Option<SystemTime>,
    attempts: u64,
    failures: BTreeMap<&'static str, u64>,
    restarts: BTreeMap<&'static str, u64>,
    world_size: u32,
    /// Every node the run knows, by host.
    nodes: BTreeMap<String, Node>,
    /// Training time of the attempts before, and the start of the one training now.
    trained: Duration,
    training_since: Option<SystemTime>,
    /// The attempt at hand, and whether it has stopped (a failure seen, a stop asked): a
    /// progress told after that trains nothing.
    attempt: u32,
    stopped: bool,
    /// The most training told so far: the clock may step back, a counter may not.
    told: std::cell::Cell<Duration>,
    stragglers_node: u64,
    stragglers_job: u64,
    last_progress: Option<SystemTime>,
    status: Option<RunStatus>,
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// One of the run's events, seen at `now`.
    pub fn observe(&mut self, event: &Event, now: SystemTime) {
        match event {
            Event::RunStarted {
                run_id, config, launcher, world_size, hosts, spares, quarantined, ..
            } => {
                self.run_id = run_id.clone();
                self.config = config.clone();
                self.launcher = launcher.to_string();
                self.started = Some(now);
                // Before any progress, the run's start: an alert on no progress for a while
                // holds from the start too.
                self.last_progress = Some(now);
                self.world_size = *world_size;
                for host in hosts {
                    self.nodes.insert(host.clone(), Node { role: NodeState::Active, lost: false });
                }
                for host in spares {
                    self.nodes.insert(host.clone(), Node { role: NodeState::Spare, lost: false });
                }
                for q in quarantined {
                    self.nodes.insert(q.host.clone(), Node { role: NodeState::Quarantined, lost: false });
                }
            }
            Event::AttemptStarting { attempt } => {
                self.stop_training(now);
                self.attempts += 1;
                self.attempt = *attempt;
                self.stopped = false;
                for node in self.nodes.values_mut() {
                    node.lost = false;
                }
            }
            Event::ProgressSeen { attempt, .. } => {
                if *attempt == self.attempt && !self.stopped && self.training_since.is_none() {
                    self.training_since = Some(now);
                }
                self.last_progress = Some(now);
            }
            Event::NodeExited { host, exit, .. } => {
                if let NodeExit::Lost(_) = exit {
                    self.node(host).lost = true;
                }
                if !exit.success() {
                    self.stop_training(now);
                }
            }
            Event::StacksRequested { .. }
            | Event::TeardownStarted { .. }
            | Event::CheckpointRequested { .. }
            | Event::AttemptSucceeded { .. } => self.stop_training(now),
            Event::AttemptFailed { verdict, .. } => {
                self.stop_training(now);
                *self.failures.entry(verdict.class.as_str()).or_default() += 1;
            }
            Event::RestartScheduled { class, .. } => {
                *self.restarts.entry(class.as_str()).or_default() += 1;
            }
            Event::Straggler { alone, .. } => match alone {
                true => self.stragglers_job += 1,
                false => self.stragglers_node += 1,
            },
            Event::NodeWaiting { host, .. } => self.node(host).lost = true,
            Event::NodeQuarantined { host, .. } => self.node(host).role = NodeState::Quarantined,
            Event::NodeReleased { host, .. } => {
                *self.node(host) = Node { role: NodeState::Spare, lost: false }
            }
            Event::SparePromoted { host, replaced, .. } => {
                let gone = self.node(replaced);
                if gone.role == NodeState::Active {
                    gone.role = NodeState::Out;
                }
                *self.node(host) = Node { role: NodeState::Active, lost: false };
            }
            Event::WorldChanged { world_size, hosts, .. } => {
                self.world_size = *world_size;
                for (host, node) in self.nodes.iter_mut() {
                    if node.role == NodeState::Active && !hosts.contains(host) {
                        node.role = NodeState::Out;
                    }
                }
                for host in hosts {
                    self.node(host).role = NodeState::Active;
                }
            }
            Event::RunFinished { status, .. } => {
                self.stop_training(now);
                self.status = Some(*status);
            }
            _ => {}
        }
    }

    /// A line a rank printed that counts as progress (`supervisor::Progress`), at `now`: only
    /// its time is kept, so the caller may skip lines within a second of the last one.
    pub fn progressed(&mut self, now: SystemTime) {
        self.last_progress = Some(now);
    }

    /// When progress was last seen, for the caller's skipping.
    pub fn last_progress(&self) -> Option<SystemTime> {
        self.last_progress
    }

    fn node(&mut self, host: &str) -> &mut Node {
        self.nodes.entry(host.to_string()).or_insert(Node { role: NodeState::Active, lost: false })
    }

    fn stop_training(&mut self, now: SystemTime) {
        self.stopped = true;
        if let Some(since) = self.training_since.take() {
            self.trained += now.duration_since(since).unwrap_or_default();
        }
    }

    /// The time trained up to `now`: the attempts before, and the one training now; never
    /// less than told before.
    pub fn training(&self, now: SystemTime) -> Duration {
        let current =
            self.training_since.map_or(Duration::ZERO, |s| now.duration_since(s).unwrap_or_default());
        let told = self.told.get().max(self.trained + current);
        self.told.set(told);
        told
    }

    /// The page `/metrics` serves, at `now`, with herd's own process as read then.
    pub fn render(&self, now: SystemTime, process: &Process) -> String {
        let mut page = Page::default();
        page.family("herd_run_info", "gauge", "The run this herd supervises: its id, config and launcher.");
        page.sample(
            "herd_run_info",
            &[("run_id", &self.run_id), ("config", &self.config), ("launcher", &self.launcher)],
            1.0,
        );
        page.family(
            "herd_run_start_time_seconds",
            "gauge",
            "When the run started, in seconds since the Unix epoch.",
        );
        page.sample("herd_run_start_time_seconds", &[], self.started.map_or(0.0, unix));
        page.family("herd_run_finished", "gauge", "1 once the run has ended, else 0.");
        page.sample("herd_run_finished", &[], f64::from(u8::from(self.status.is_some())));
        page.family("herd_attempts_total", "counter", "Attempts started, the first included.");
        page.sample("herd_attempts_total", &[], self.attempts as f64);
        page.family("herd_failures_total", "counter", "Attempts that failed, by failure class.");
        for class in classes() {
            page.sample("herd_failures_total", &[("class", class)], count(&self.failures, class));
        }
        page.family(
            "herd_restarts_total",
            "counter",
            "Restarts scheduled, by the failure class that called for them.",
        );
        for class in classes() {
            page.sample("herd_restarts_total", &[("class", class)], count(&self.restarts, class));
        }
        page.family(
            "herd_nodes",
            "gauge",
            "The run's nodes by state: active (in the job), spare, quarantined, lost (in the job \
             but unreachable, until an attempt starts with it again), out (left the job, no spare \
             in its place).",
        );
        for state in NodeState::ALL {
            let n = self.nodes.values().filter(|n| n.state() == state).count();
            page.sample("herd_nodes", &[("state", state.name())], n as f64);
        }
        page.family("herd_world_size", "gauge", "Ranks in the job's current world.");
        page.sample("herd_world_size", &[], f64::from(self.world_size));
        page.family(
            "herd_training_seconds_total",
            "counter",
            "Time the job trained: from each attempt's first progress to its failure seen or its \
             end (the 'training' of herd logs --timeline). Over the run's wall time: its \
             effective training time ratio so far.",
        );
        page.sample("herd_training_seconds_total", &[], self.training(now).as_secs_f64());
        page.family(
            "herd_stragglers_total",
            "counter",
            "Stragglers named: kind=node when a node was slower than the rest, kind=job when one \
             rank computed while the others sat idle (the job's own work).",
        );
        page.sample("herd_stragglers_total", &[("kind", "node")], self.stragglers_node as f64);
        page.sample("herd_stragglers_total", &[("kind", "job")], self.stragglers_job as f64);
        page.family(
            "herd_last_progress_timestamp_seconds",
            "gauge",
            "When a rank last printed progress (restart.progress_pattern, else any rank's line), or \
             the run started if none has, in seconds since the Unix epoch. Alert on time() minus it.",
        );
        let progress = self.last_progress.or(self.started).map_or(0.0, unix);
        page.sample("herd_last_progress_timestamp_seconds", &[], progress);
        page.process(process);
        page.text
    }
}

/// Every failure class a label may hold, each exported from the start (at 0), so that a
/// rate over it is defined before its first failure.
fn classes() -> impl Iterator<Item = &'static str> {
    FailureClass::ALL.into_iter().chain([FailureClass::Allocation]).map(FailureClass::as_str)
}

fn count(counts: &BTreeMap<&'static str, u64>, class: &str) -> f64 {
    counts.get(class).copied().unwrap_or(0) as f64
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}

/// Prometheus' text exposition format (version 0.0.4), a family at a time.
#[derive(Default)]
struct Page {
    text: String,
}

impl Page {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
            let _ = write!(self.text, "{{{}}}", labels.join(","));
        }
        let _ = writeln!(self.text, " {}", number(value));
    }

    /// The process collector's families, as Prometheus' client libraries name them.
    fn process(&mut self, p: &Process) {
        self.family(
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
        );
        self.sample("process_cpu_seconds_total", &[], p.cpu_seconds);
        self.family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
        self.sample("process_resident_memory_bytes", &[], p.resident_bytes as f64);
        self.family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
        self.sample("process_virtual_memory_bytes", &[], p.virtual_bytes as f64);
        self.family("process_open_fds", "gauge", "Number of open file descriptors.");
        self.sample("process_open_fds", &[], p.open_fds as f64);
        if let Some(max) = p.max_fds {
            self.family("process_max_fds", "gauge", "Maximum number of open file descriptors.");
            self.sample("process_max_fds", &[], max as f64);
        }
        if let Some(start) = p.start_time {
            self.family(
                "process_start_time_seconds",
                "gauge",
                "Start time of the process since unix epoch in seconds.",
            );
            self.sample("process_start_time_seconds", &[], unix(start));
        }
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A sample's value: integers without a fraction, others as Rust prints them (which
/// Prometheus parses), and the specials by their exposition names.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{RootCause, Verdict};

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn started(hosts: &[&str], spares: &[&str]) -> Event {
        Event::RunStarted {
            run_id: "r1".into(),
            config: "cluster.toml".into(),
            config_key: "k".into(),
            launcher: "torchrun",
            nnodes: hosts.len(),
            world_size: 2 * hosts.len() as u32,
            max_restarts: 3,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            nprocs: vec![2; hosts.len()],
            log_dir: "logs".into(),
            spares: spares.iter().map(|h| h.to_string()).collect(),
            quarantined: vec![],
        }
    }

    fn failed(attempt: u32, class: FailureClass, host: &str, exit: NodeExit) -> Event {
        let root_cause =
            RootCause { rank: None, local_rank: None, node_rank: 1, host: host.into(), exit, line: None };
        let verdict = Verdict {
            class,
            root_cause: Some(root_cause),
            consequences: vec![],
            hint: crate::classify::hint(class),
        };
        Event::AttemptFailed { attempt, millis: 0, verdict }
    }

    /// The value of the sample `series` (name and labels as the page writes them).
    fn value(page: &str, series: &str) -> f64 {
        let line = page
            .lines()
            .find(|l| l.strip_prefix(series).is_some_and(|rest| rest.starts_with(' ')))
            .unwrap_or_else(|| panic!("no {series} in\n{page}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    /// A run on a, b, c with spare d: attempt 1 trains 100 s, b's link is lost, b is
    /// quarantined and d takes its place; attempt 2 trains from 130 s.
    fn two_attempts() -> Metrics {
        let mut m = Metrics::new();
        let lost = NodeExit::Lost("connection closed".into());
        let events = [
            (0, started(&["a", "b", "c"], &["d"])),
            (0, Event::AttemptStarting { attempt: 1 }),
            (10, Event::ProgressSeen { attempt: 1, millis: 10_000 }),
            (110, Event::NodeExited { attempt: 1, node_rank: 1, host: "b".into(), exit: lost.clone() }),
            (112, failed(1, FailureClass::NodeLost, "b", lost)),
            (
                112,
                Event::NodeQuarantined { attempt: 1, host: "b".into(), reason: "lost".into(), saved: true },
            ),
            (112, Event::RestartScheduled { attempt: 2, delay_ms: 1000, class: FailureClass::NodeLost }),
            (113, Event::SparePromoted { attempt: 2, node_rank: 1, host: "d".into(), replaced: "b".into() }),
            (113, Event::AttemptStarting { attempt: 2 }),
            (130, Event::ProgressSeen { attempt: 2, millis: 17_000 }),
        ];
        for (secs, e) in events {
            m.observe(&e, at(secs));
        }
        m
    }

    #[test]
    fn training_runs_from_each_attempts_first_progress_to_its_failure_seen() {
        let m = two_attempts();
        assert_eq!(m.training(at(130)), Duration::from_secs(100));
        assert_eq!(m.training(at(150)), Duration::from_secs(120), "the attempt training now counts");
        let page = m.render(at(150), &Process::default());
        assert_eq!(value(&page, "herd_training_seconds_total"), 120.0);
        assert_eq!(value(&page, "herd_attempts_total"), 2.0);
        assert_eq!(value(&page, "herd_failures_total{class=\"node-lost\"}"), 1.0);
        assert_eq!(value(&page, "herd_failures_total{class=\"crash\"}"), 0.0, "every class from the start");
        assert_eq!(value(&page, "herd_restarts_total{class=\"node-lost\"}"), 1.0);
        assert_eq!(value(&page, "herd_last_progress_timestamp_seconds"), 1_800_000_130.0);
        assert_eq!(value(&page, "herd_run_finished"), 0.0);
    }

    #[test]
    fn nodes_are_counted_by_state_as_spares_replace_and_links_come_back() {
        let mut m = Metrics::new();
        m.observe(&started(&["a", "b", "c"], &["d", "e"]), at(0));
        m.observe(&Event::AttemptStarting { attempt: 1 }, at(0));
        let lost = NodeExit::Lost("timeout".into());
        m.observe(&Event::NodeExited { attempt: 1, node_rank: 2, host: "c".into(), exit: lost }, at(5));
        let states = |m: &Metrics| {
            let page = m.render(at(10), &Process::default());
            NodeState::ALL.map(|s| value(&page, &format!("herd_nodes{{state=\"{}\"}}", s.name())) as u32)
        };
        assert_eq!(states(&m), [2, 2, 0, 1, 0], "active, spare, quarantined, lost, out");
        m.observe(&Event::AttemptStarting { attempt: 2 }, at(8));
        assert_eq!(states(&m), [3, 2, 0, 0, 0], "back with the next attempt");
        m.observe(
            &Event::NodeQuarantined { attempt: 2, host: "a".into(), reason: "x".into(), saved: false },
            at(9),
        );
        m.observe(
            &Event::SparePromoted { attempt: 3, node_rank: 0, host: "d".into(), replaced: "a".into() },
            at(9),
        );
        assert_eq!(states(&m), [3, 1, 1, 0, 0]);
        m.observe(&Event::NodeWaiting { node_rank: 1, host: "b".into(), error: "refused".into() }, at(9));
        assert_eq!(states(&m), [2, 1, 1, 1, 0]);
        let world = Event::WorldChanged {
            attempt: 3,
            nnodes: 2,
            world_size: 4,
            hosts: vec!["d".into(), "c".into()],
            nprocs: vec![2, 2],
            dropped: vec!["b".into()],
        };
        m.observe(&world, at(10));
        assert_eq!(states(&m), [2, 1, 1, 0, 1], "b left the world: out, not lost");
        m.observe(
            &Event::NodeReleased { attempt: 3, host: "a".into(), reason: "y".into(), saved: false },
            at(11),
        );
        assert_eq!(states(&m), [2, 2, 0, 0, 1]);
    }

    #[test]
    fn a_progress_told_after_the_attempt_stopped_trains_nothing() {
        let mut m = Metrics::new();
        m.observe(&started(&["a"], &[]), at(0));
        assert_eq!(
            value(&m.render(at(1), &Process::default()), "herd_last_progress_timestamp_seconds"),
            1_800_000_000.0,
            "the start, before any progress"
        );
        m.observe(&Event::AttemptStarting { attempt: 1 }, at(0));
        let crashed = NodeExit::ExitCode(1);
        m.observe(&Event::NodeExited { attempt: 1, node_rank: 0, host: "a".into(), exit: crashed }, at(5));
        m.observe(&Event::ProgressSeen { attempt: 1, millis: 4900 }, at(5));
        assert_eq!(m.training(at(100)), Duration::ZERO);
        // The clock steps back: the counter does not.
        m.observe(&Event::AttemptStarting { attempt: 2 }, at(10));
        m.observe(&Event::ProgressSeen { attempt: 2, millis: 0 }, at(10));
        assert_eq!(m.training(at(30)), Duration::from_secs(20));
        assert_eq!(m.training(at(20)), Duration::from_secs(20));
    }

    #[test]
    fn a_stop_without_a_failure_ends_the_training_too() {
        let mut m = Metrics::new();
        m.observe(&started(&["a"], &[]), at(0));
        m.observe(&Event::AttemptStarting { attempt: 1 }, at(0));
        m.observe(&Event::ProgressSeen { attempt: 1, millis: 0 }, at(5));
        m.observe(&Event::CheckpointRequested { attempt: 1, signal: "SIGUSR1".into() }, at(65));
        m.observe(&Event::RunFinished { status: RunStatus::TimeLimit, attempts: 1 }, at(90));
        assert_eq!(m.training(at(1000)), Duration::from_secs(60));
        assert_eq!(value(&m.render(at(1000), &Process::default()), "herd_run_finished"), 1.0);
    }

    #[test]
    fn the_page_is_prometheus_text_with_help_and_type_before_each_family() {
        let m = two_attempts();
        let process = Process {
            resident_bytes: 20 << 20,
            open_fds: 12,
            max_fds: Some(1024),
            cpu_seconds: 1.25,
            ..Process::default()
        };
        let page = m.render(at(150), &process);
        let mut declared = std::collections::HashSet::new();
        for line in page.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap();
                assert!(declared.insert(name.to_string()), "{name} declared twice");
            } else if !line.starts_with("# HELP ") {
                let name = line.split(['{', ' ']).next().unwrap();
                assert!(declared.contains(name), "{name} sampled before its TYPE");
                assert!(name.starts_with("herd_") || name.starts_with("process_"), "{name}");
            }
        }
        assert!(
            page.contains("herd_run_info{run_id=\"r1\",config=\"cluster.toml\",launcher=\"torchrun\"} 1\n")
        );
        assert_eq!(value(&page, "process_resident_memory_bytes"), 20_971_520.0);
        assert_eq!(value(&page, "process_cpu_seconds_total"), 1.25);
        assert!(!page.contains("process_start_time_seconds"), "not known: not exported");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(f64::NAN), "NaN");
    }
}
