//! One node during one attempt: start its agent, hand it the env, pump its output into
//! events, pass on stop requests, and report how it ended.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use regex::Regex;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::config::CheckpointSignal;
use crate::events::{Event, EventSender};
use crate::lines::{LineSplitter, Lines};
use crate::outcome::{NodeExit, ProcessState, TimedLine};
use crate::remote::agent::AgentInvocation;
use crate::remote::frames::{Frame, FrameReader, Source};
use crate::remote::protocol::{AgentMessage, Control, Sample};
use crate::stacks::RankStack;
use crate::transport::session::{AgentSession, ControlLine, Messages};
use crate::transport::{Connection, Started, TransportExit};

/// What the supervisor asks of every running node of an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stop {
    Run,
    /// SIGTERM the job's process group.
    Term,
    /// SIGKILL it.
    Kill,
}

/// What the supervisor tells one node: its one command channel down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeCommand {
    /// The node's env block, once it is known: the agent starts (logs in, sweeps) before, and
    /// starts nothing until it comes.
    Env(Vec<u8>),
    /// Stop the job (a request weaker than one sent before is ignored). `fast`, with
    /// `Stop::Term` and a torch launcher, on every node but the one whose failure stopped the
    /// attempt: the agent ends the launcher as soon as its workers are gone (`term-fast`). A
    /// healthy launcher then has nothing left to do but its interpreter's exit, a second or
    /// more with torch loaded. The failing node's launcher keeps its grace: its summary names
    /// the root cause. `kill_wait`: how long after SIGKILL herd waits for the node's end
    /// (`attempt::KILL_DEADLINE`, or longer on a late fleet: `Attempt::kill_wait`).
    Stop { stop: Stop, fast: bool, kill_wait: Duration },
    /// The job's processes, then its ranks' stacks (answered as `NodeReport::Processes`, then
    /// `NodeReport::Stacks`).
    Probe,
    /// Each rank's busy time (answered as `NodeReport::Sample`), for stragglers.
    Sample,
    /// This signal to every rank, to checkpoint (a time limit or a preemption); with `true`
    /// (a `command` job), to the job's group where it has no rank.
    Checkpoint(CheckpointSignal, bool),
}

/// What one node tells the supervisor, with its node rank: its one report channel up.
#[derive(Debug)]
pub enum NodeReport {
    /// The master's ports in use (with `invocation.report_ports`); `None`: its socket tables
    /// cannot be read.
    Ports(Option<BTreeSet<u16>>),
    /// Its first line that means it failed (see `RuleTable::crash_pattern`).
    Fatal(String),
    /// Its job's processes, the first part of a probe's answer.
    Processes(Vec<ProcessState>),
    /// Its ranks' stacks, which complete the answer.
    Stacks(Vec<RankStack>),
    /// Its ranks' busy time, as asked (`NodeCommand::Sample`).
    Sample(Sample),
    /// How it ended: its last report.
    Ended(NodeResult),
}

/// Where a node's reports go.
pub type Reports = mpsc::UnboundedSender<(usize, NodeReport)>;

/// How long a node's output may stay open, with nothing read from it, after its agent
/// exited. Output that is still flowing (the reporter catching up) is always read to the end.
pub(super) const DRAIN_DEADLINE: Duration = Duration::from_secs(3);

/// The last lines a node printed, kept for classification and the summary: enough to hold
/// the failure itself behind torchrun's teardown traceback and summary.
pub const TAIL_LINES: usize = 200;
const TAIL_LINE_CHARS: usize = 400;
/// How much of a node's output is read at once. With the event queue's capacity, this bounds
/// the output in flight between the nodes and the reporter (see `commands::EVENT_QUEUE`).
/// The output multiplexer reads no more than this into one record (`mux.py`, `READ_SIZE`).
pub const READ_SIZE: usize = 16 * 1024;
/// A node's first reads: a quarter of this at a time, up to READ_SIZE, as reads fill it.
const READ_FIRST: usize = 1024;

#[derive(Debug)]
pub struct NodeResult {
    pub node_rank: usize,
    pub exit: NodeExit,
    /// Since the attempt started.
    pub ended_at: Duration,
    /// Its last lines, with their arrival times.
    pub tail: Vec<TimedLine>,
}

pub struct NodeRun {
    pub node_rank: usize,
    pub host: String,
    pub attempt: u32,
    pub invocation: AgentInvocation,
    /// The agent, if it was started ahead (as `invocation`: another is started otherwise).
    pub early: Option<Started>,
    /// What the supervisor asks of the node. Closed: the supervisor is gone (the agent's
    /// stdin closes as the node's task ends).
    pub commands: mpsc::UnboundedReceiver<NodeCommand>,
    pub reports: Reports,
    /// Shared with the supervisor rather than reported: every line may be progress and every
    /// agent message is a sign of life, far too many for a channel, while the supervisor only
    /// reads the latest of each, at its tick.
    pub liveness: Arc<Liveness>,
    /// Which of its lines are the job's progress.
    pub progress: Progress,
    /// Lines that mean the node has failed (see `RuleTable::crash_pattern`): the first one
    /// is reported (`NodeReport::Fatal`) as soon as it arrives.
    pub fatal_pattern: Option<Arc<regex::bytes::Regex>>,
}

/// Which lines of a node's output are the job's progress: what the stall rule waits for, and
/// what tells an attempt that trained from a crash loop (`policy::trained`).
#[derive(Clone)]
pub enum Progress {
    /// Lines matching `restart.progress_pattern`, whoever prints them.
    Pattern(Arc<Regex>),
    /// Any line of a rank's: a torch launcher's own (its warnings as it starts, its
    /// "restarting workers") are not the job's.
    RankLines,
    /// Any line: a `command` job's lines are all its own.
    AnyLine,
}

impl Progress {
    /// `Pattern`'s, or a torch launcher's ranks' lines, or any line (`command`).
    pub fn of(plan: &crate::plan::LaunchPlan) -> Progress {
        match (&plan.patterns.progress, plan.launcher) {
            (Some(p), _) => Progress::Pattern(p.clone()),
            (None, crate::config::LauncherKind::Command) => Progress::AnyLine,
            (None, _) => Progress::RankLines,
        }
    }

    /// Whether any non-empty line of `lines`, from `source`, is progress.
    pub fn in_lines(&self, source: &Source, lines: &Lines) -> bool {
        lines.iter().any(|l| !l.text.is_empty() && self.counts(source, || text(l)))
    }

    /// Whether the non-empty line `text`, from `source`, is progress.
    fn counts(&self, source: &Source, text: impl FnOnce() -> String) -> bool {
        match self {
            Progress::Pattern(p) => p.is_match(&text()),
            Progress::RankLines => source.rank.is_some(),
            Progress::AnyLine => true,
        }
    }
}

/// A line as the tail and the fatal report keep it: at most `TAIL_LINE_CHARS`, lossily UTF-8.
fn text(l: crate::lines::Line<'_>) -> String {
    String::from_utf8_lossy(&l.text[..l.text.len().min(TAIL_LINE_CHARS * 4)])
        .chars()
        .take(TAIL_LINE_CHARS)
        .collect()
}

/// Where a node reports its first fatal line.
#[derive(Clone)]
struct FatalWatch {
    pattern: Arc<regex::bytes::Regex>,
    report: Reports,
}

/// When the attempt last made progress and when each node's agent was last heard from,
/// shared between the node tasks that see it and the supervisor that judges it. On tokio's
/// clock, as the attempt's timers are: under a test's paused time, silences grow with them.
pub struct Liveness {
    start: Instant,
    last_progress_ms: AtomicU64,
    /// `NOT_YET` until the first progress.
    first_progress_ms: AtomicU64,
    /// `NOT_YET` until the node's agent first speaks.
    last_heard_ms: Vec<AtomicU64>,
}

/// A node whose agent has not spoken yet: its login shell may still be starting (conda,
/// pyenv, a cold NFS home), which is no silence of the agent's.
const NOT_YET: u64 = u64::MAX;

impl Liveness {
    pub fn new(nodes: usize) -> Liveness {
        Liveness {
            start: Instant::now(),
            last_progress_ms: AtomicU64::new(0),
            first_progress_ms: AtomicU64::new(NOT_YET),
            last_heard_ms: (0..nodes).map(|_| AtomicU64::new(NOT_YET)).collect(),
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn progress(&self) {
        let now = self.now_ms();
        self.last_progress_ms.store(now, Ordering::Relaxed);
        let _ = self.first_progress_ms.compare_exchange(NOT_YET, now, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// When the attempt first made progress, if it has.
    pub fn first_progress(&self) -> Option<Duration> {
        match self.first_progress_ms.load(Ordering::Relaxed) {
            NOT_YET => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    fn heard(&self, rank: usize) {
        self.last_heard_ms[rank].store(self.now_ms(), Ordering::Relaxed);
    }

    /// The node's job printed: it came over the agent's own channel, so the node is alive
    /// however late its heartbeat is (a loaded host reads them late). Not before the agent
    /// first spoke: a login shell's banner is no agent, whose start `ssh.login_timeout` waits
    /// for.
    fn output(&self, rank: usize) {
        let heard = &self.last_heard_ms[rank];
        if self.has_heard(rank) {
            heard.fetch_max(self.now_ms(), Ordering::Relaxed);
        }
    }

    pub fn since_progress(&self) -> Duration {
        Duration::from_millis(self.now_ms().saturating_sub(self.last_progress_ms.load(Ordering::Relaxed)))
    }

    /// herd itself was not running for a while (suspended, stopped, not scheduled): whatever
    /// its nodes said meanwhile is still unread, so silence up to now counts against none of
    /// them. Every node, and the progress clock, starts a fresh window now.
    pub fn forgive(&self) {
        let now = self.now_ms();
        self.last_progress_ms.fetch_max(now, Ordering::Relaxed);
        for heard in &self.last_heard_ms {
            // fetch_max leaves NOT_YET as it is.
            heard.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// Whether the node's agent has spoken yet.
    pub fn has_heard(&self, rank: usize) -> bool {
        self.last_heard_ms[rank].load(Ordering::Relaxed) != NOT_YET
    }

    /// How long the node's agent has been silent; zero before it first spoke (until then the
    /// node is in its login shell, judged by `ssh.login_timeout`: see `judge_silence`).
    pub fn since_heard(&self, rank: usize) -> Duration {
        match self.last_heard_ms[rank].load(Ordering::Relaxed) {
            NOT_YET => Duration::ZERO,
            heard => Duration::from_millis(self.now_ms().saturating_sub(heard)),
        }
    }
}

/// One node's task: its agent run, then its end reported (`NodeReport::Ended`).
pub async fn run(conn: Arc<Connection>, node: NodeRun, events: EventSender) {
    let reports = node.reports.clone();
    let result = run_agent(conn, node, events).await;
    let _ = reports.send((result.node_rank, NodeReport::Ended(result)));
}

/// One node's agent, from its start to its end.
async fn run_agent(conn: Arc<Connection>, node: NodeRun, events: EventSender) -> NodeResult {
    let rank = node.node_rank;
    let liveness = node.liveness.clone();
    let result = |exit: NodeExit, tail: Vec<TimedLine>| NodeResult {
        node_rank: rank,
        exit,
        ended_at: liveness.elapsed(),
        tail,
    };
    // Boxed, as `node_exit` below: a future held inline is held for the whole task, and a
    // task per node is what the launch host holds per node. The invocation (the job's script
    // and env, some KiB) is not needed once the agent has it.
    let invocation = node.invocation;
    let session = match Box::pin(AgentSession::open(node.early, &conn, &invocation)).await {
        Ok(session) => session,
        Err(e) => return result(NodeExit::Lost(e.to_string()), vec![]),
    };
    drop(invocation);
    let progress = Arc::new(PumpProgress::default());
    let out_pump = tokio::spawn(pump_output(
        session.output,
        progress.clone(),
        rank,
        events.clone(),
        node.liveness.clone(),
        node.progress.clone(),
        node.fatal_pattern.clone().map(|pattern| FatalWatch { pattern, report: node.reports.clone() }),
    ));
    let err_pump = tokio::spawn(pump_agent(
        session.messages,
        Relay::new(node.attempt, rank, node.host.clone()),
        events.clone(),
        node.liveness.clone(),
        node.reports.clone(),
    ));
    let control = Controller { line: session.control, rank, sent: Stop::Run };
    let (agent_status, gave_up) = control.serve(err_pump, node.commands).await;
    drain(out_pump, rank, &progress).await;
    let tail = progress.take_tail();
    let exit = Box::pin(node_exit(agent_status, gave_up, session.handle, &conn)).await;
    let _ = events
        .send(Event::NodeExited {
            attempt: node.attempt,
            node_rank: rank,
            host: node.host,
            exit: exit.clone(),
        })
        .await;
    result(exit, tail)
}

/// How the node ended, from what its agent said (its job's wait status) and how its
/// transport ended (unless herd gave up on it, and why). Only now, the agent's output read to
/// its end, is the transport asked for its exit status.
async fn node_exit(
    agent_status: Option<i32>,
    gave_up: Option<String>,
    handle: crate::transport::AgentHandle,
    conn: &Connection,
) -> NodeExit {
    let given_up = gave_up.is_some();
    let transport_exit = match gave_up {
        Some(why) => {
            handle.abandon();
            TransportExit::Disconnected(why)
        }
        None => match tokio::time::timeout(DRAIN_DEADLINE, handle.wait()).await {
            Ok(exit) => exit,
            Err(_) => TransportExit::Disconnected(format!(
                "no exit status {} s after the agent's output ended",
                DRAIN_DEADLINE.as_secs()
            )),
        },
    };
    match (agent_status, transport_exit) {
        (Some(status), _) => NodeExit::from_shell_status(status),
        // ssh's multiplexing cannot tell a dead connection from a killed process ("the
        // remote process has terminated"): ask the connection itself.
        (None, TransportExit::Disconnected(why)) => {
            let slurm = matches!(conn, Connection::Slurm(_));
            NodeExit::Lost(match tokio::time::timeout(DRAIN_DEADLINE, conn.check()).await {
                // Its link works: herd stopped waiting for an agent that still runs, or the
                // agent's output ended.
                Ok(Ok(())) if given_up => why,
                Ok(Ok(())) => format!("the agent's output ended without an exit status ({why})"),
                Ok(Err(e)) if slurm => format!("{e} ({why})"),
                _ if slurm => format!("Slurm did not say how the node is ({why})"),
                _ => "the ssh connection to the node was lost (keepalives unanswered, or the link is down)"
                    .into(),
            })
        }
        (None, TransportExit::Code(code)) => {
            NodeExit::Lost(format!("agent ended with exit code {code} before the job did"))
        }
        (None, TransportExit::Signal(sig)) => NodeExit::Lost(format!("agent killed by signal {sig}")),
    }
}

/// What goes down to the agent: the env block, then control lines.
struct Controller {
    line: ControlLine,
    rank: usize,
    /// The strongest stop sent so far.
    sent: Stop,
}

impl Controller {
    /// Hand the agent its env when it is known, the supervisor's probes and stop requests as
    /// they come, until the agent's stderr ends (it exited, having said how the job ended, or
    /// the connection went). Only then may the transport be asked for its exit status: over
    /// SSH, collecting it closes the session, and with it any output the SSH master still
    /// holds for a reader that fell behind. Returns the job's status if the agent reported it,
    /// or why herd stopped waiting.
    async fn serve(
        mut self,
        mut err_pump: tokio::task::JoinHandle<Option<i32>>,
        mut commands: mpsc::UnboundedReceiver<NodeCommand>,
    ) -> (Option<i32>, Option<String>) {
        let (mut env_sent, mut probe_asked, mut open) = (false, false, true);
        let (mut give_up_at, mut waited) = (None, Duration::ZERO);
        loop {
            tokio::select! {
                joined = &mut err_pump => return (joined.ok().flatten(), None),
                () = sleep_until(give_up_at) => {
                    // A node whose shell never reached the agent cannot act on `kill`; closing
                    // stdin (on return) is all that is left, and the agent acts on that if it
                    // ever runs.
                    err_pump.abort();
                    let secs = waited.as_secs();
                    return (None, Some(format!("no exit status {secs} s after SIGKILL was requested; stopped waiting for it")));
                }
                // None: the supervisor is gone; closing stdin (on return) tears the job down.
                command = commands.recv(), if open => match command {
                    None => open = false,
                    Some(NodeCommand::Env(block)) => {
                        env_sent = true;
                        // Once a stop was sent, the agent has ended without starting anything.
                        if self.sent == Stop::Run {
                            self.send(Control::Env(block)).await;
                        }
                        if std::mem::take(&mut probe_asked) {
                            self.send(Control::Probe).await;
                        }
                    }
                    // Not before the env: the agent would read `probe` as the env block's start.
                    Some(NodeCommand::Probe) if !env_sent => probe_asked = true,
                    Some(NodeCommand::Probe) => self.send(Control::Probe).await,
                    // Before the env, there is no job to sample.
                    Some(NodeCommand::Sample) if !env_sent => {}
                    Some(NodeCommand::Sample) => self.send(Control::Sample).await,
                    // Before the env, no rank runs: the stop that follows is all there is.
                    Some(NodeCommand::Checkpoint(..)) if !env_sent => {}
                    Some(NodeCommand::Checkpoint(signal, group)) => {
                        self.send(Control::Checkpoint(signal.name, group)).await
                    }
                    Some(NodeCommand::Stop { stop, fast, kill_wait }) => {
                        if stop == Stop::Kill && self.sent < Stop::Kill {
                            waited = kill_wait;
                            give_up_at = Some(Instant::now() + kill_wait);
                        }
                        self.stop(stop, fast).await;
                    }
                },
            }
        }
    }

    /// Pass on a stop request stronger than any sent.
    async fn stop(&mut self, want: Stop, fast: bool) {
        if want <= self.sent {
            return;
        }
        self.sent = want;
        let control = match want {
            Stop::Kill => Control::Kill,
            _ if fast => Control::TermFast,
            _ => Control::Term,
        };
        self.send(control).await;
    }

    async fn send(&mut self, control: Control) {
        if let Err(e) = self.line.send(&control).await {
            let what = match control {
                Control::Env(_) => "env block".to_string(),
                other => format!("{other:?}"),
            };
            tracing::debug!(node = self.rank, "sending {what}: {e}");
        }
    }
}

/// Sleep until `at`; never, without one.
pub(super) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// What an output pump has read and is doing, shared with its node's task: the tail is kept
/// even when the task stops waiting for the pump (`drain`).
#[derive(Default)]
struct PumpProgress {
    /// Bytes read so far.
    read: AtomicU64,
    /// Waiting for room in the event queue: the reporter is behind, not the node.
    sending: AtomicBool,
    /// The last lines read, for classification and the summary.
    tail: std::sync::Mutex<VecDeque<TimedLine>>,
}

impl PumpProgress {
    /// `lines` at the tail's end, the oldest dropped past `TAIL_LINES`.
    fn keep(&self, lines: impl Iterator<Item = TimedLine>) {
        let mut tail = self.tail.lock().expect("not poisoned");
        for line in lines {
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    }

    /// The last lines read so far, taken.
    fn take_tail(&self) -> Vec<TimedLine> {
        std::mem::take(&mut *self.tail.lock().expect("not poisoned")).into()
    }
}

/// Wait for a pump to reach end of stream, but not forever: a process that escaped every
/// teardown could hold the pipe open. A pump that still reads, or waits for the reporter to
/// take what it read, is only behind, and is waited for: no output is dropped.
async fn drain(mut pump: tokio::task::JoinHandle<()>, rank: usize, progress: &PumpProgress) {
    let mut seen = progress.read.load(Ordering::Relaxed);
    loop {
        match tokio::time::timeout(DRAIN_DEADLINE, &mut pump).await {
            Ok(_) => return,
            Err(_) => {
                let now = progress.read.load(Ordering::Relaxed);
                if now != seen || progress.sending.load(Ordering::Relaxed) {
                    seen = now;
                    continue;
                }
                tracing::warn!(
                    node = rank,
                    "output still open {} s after the job ended, with nothing more to read; stopped reading it",
                    DRAIN_DEADLINE.as_secs()
                );
                pump.abort();
                return;
            }
        }
    }
}

/// Forward the job's output as lines, keeping the last few in `progress`.
async fn pump_output(
    mut stdout: impl AsyncRead + Unpin,
    progress: Arc<PumpProgress>,
    rank: usize,
    events: EventSender,
    liveness: Arc<Liveness>,
    progress_rule: Progress,
    mut fatal: Option<FatalWatch>,
) {
    let mut split = SourceSplitter::default();
    // Most nodes of a large job print little: their buffer grows only when a read fills it.
    let mut buf = vec![0u8; READ_FIRST];
    loop {
        let (n, batches) = match stdout.read(&mut buf).await {
            Ok(0) => (0, split.finish()),
            Err(e) => {
                tracing::warn!(
                    node = rank,
                    "reading the node's output failed, after {} bytes: {e}",
                    progress.read.load(Ordering::Relaxed)
                );
                (0, split.finish())
            }
            Ok(n) => {
                progress.read.fetch_add(n as u64, Ordering::Relaxed);
                let batches = split.push(&buf[..n]);
                if n == buf.len() && n < READ_SIZE {
                    buf.resize((n * 4).min(READ_SIZE), 0);
                }
                (n, batches)
            }
        };
        for (source, lines) in batches {
            pass_on(rank, source, lines, &events, &liveness, &progress, &progress_rule, &mut fatal).await;
        }
        if n == 0 {
            break;
        }
    }
}

/// A node's output as lines of each source: the multiplexer's records (see
/// `remote::frames`) split by source, each source's bytes into lines of its own.
#[derive(Default)]
struct SourceSplitter {
    frames: FrameReader,
    raw: LineSplitter,
    sources: std::collections::HashMap<u32, (Source, LineSplitter)>,
}

impl SourceSplitter {
    /// The lines `chunk` completes, by source, in the order they came.
    fn push(&mut self, chunk: &[u8]) -> Vec<(Source, Lines)> {
        let mut frames = Vec::new();
        self.frames.push(chunk, &mut frames);
        self.apply(frames)
    }

    /// The end of the output: every source's last, unfinished line.
    fn finish(&mut self) -> Vec<(Source, Lines)> {
        let mut frames = Vec::new();
        self.frames.finish(&mut frames);
        let mut out = self.apply(frames);
        let mut lines = Lines::default();
        self.raw.finish(&mut lines);
        add(&mut out, Source::default(), lines);
        let mut open: Vec<u32> = self.sources.keys().copied().collect();
        open.sort();
        for sid in open {
            let (source, mut splitter) = self.sources.remove(&sid).expect("listed");
            let mut lines = Lines::default();
            splitter.finish(&mut lines);
            add(&mut out, source, lines);
        }
        out
    }

    fn apply(&mut self, frames: Vec<Frame>) -> Vec<(Source, Lines)> {
        let mut out = Vec::new();
        for frame in frames {
            let mut lines = Lines::default();
            let source = match frame {
                Frame::Raw(bytes) => {
                    self.raw.push(&bytes, &mut lines);
                    Source::default()
                }
                Frame::Open { sid, source } => {
                    self.sources.insert(sid, (source, LineSplitter::default()));
                    continue;
                }
                Frame::Data { sid, bytes } => match self.sources.get_mut(&sid) {
                    Some((source, splitter)) => {
                        splitter.push(&bytes, &mut lines);
                        *source
                    }
                    None => {
                        self.raw.push(&bytes, &mut lines);
                        Source::default()
                    }
                },
                Frame::Close { sid } => match self.sources.remove(&sid) {
                    Some((source, mut splitter)) => {
                        splitter.finish(&mut lines);
                        source
                    }
                    None => continue,
                },
            };
            add(&mut out, source, lines);
        }
        out
    }
}

/// Append `lines` of `source`, to the last batch when it is the same source's.
fn add(out: &mut Vec<(Source, Lines)>, source: Source, lines: Lines) {
    if lines.is_empty() {
        return;
    }
    match out.last_mut() {
        Some((s, batch)) if *s == source => batch.extend(&lines),
        _ => out.push((source, lines)),
    }
}

/// One source's new lines: progress, the fatal-line watch, the tail, and the event.
#[allow(clippy::too_many_arguments)]
async fn pass_on(
    rank: usize,
    source: Source,
    mut lines: Lines,
    events: &EventSender,
    liveness: &Liveness,
    progress: &PumpProgress,
    progress_rule: &Progress,
    fatal: &mut Option<FatalWatch>,
) {
    {
        let at = liveness.elapsed();
        if progress_rule.in_lines(&source, &lines) {
            liveness.progress();
        }
        if !lines.is_empty() {
            liveness.output(rank);
        }
        if let Some(watch) = fatal.as_ref() {
            if let Some(line) = lines.iter().find(|l| watch.pattern.is_match(l.text)) {
                let _ = watch.report.send((rank, NodeReport::Fatal(text(line))));
                *fatal = None;
            }
        }
        // Only the last TAIL_LINES of a batch can stay in the tail.
        let non_empty = lines.iter().filter(|l| !l.text.is_empty()).count();
        let last = lines.iter().filter(|l| !l.text.is_empty()).skip(non_empty.saturating_sub(TAIL_LINES));
        progress.keep(last.map(|line| TimedLine { at, text: text(line) }));
        // If nobody listens any more, keep reading anyway: a job must never block on a full pipe.
        if !lines.is_empty() {
            lines.shrink_to_fit();
            progress.sending.store(true, Ordering::Relaxed);
            let _ = events.send(Event::NodeOutput { node_rank: rank, source, lines }).await;
            progress.sending.store(false, Ordering::Relaxed);
        }
    }
}

/// Read the agent's own messages, each passed on where its relay routes it. Returns the job's
/// wait status if the agent reported one.
async fn pump_agent(
    mut messages: Messages,
    mut relay: Relay,
    events: EventSender,
    liveness: Arc<Liveness>,
    reports: Reports,
) -> Option<i32> {
    while let Some(message) = messages.next().await {
        liveness.heard(relay.rank);
        match relay.route(message) {
            None => {}
            Some(Route::Report(report)) => {
                let _ = reports.send((relay.rank, report));
            }
            Some(Route::Events(routed)) => {
                for event in routed {
                    let _ = events.send(event).await;
                }
            }
        }
    }
    relay.status
}

/// What the agent says besides its job's output, sorted: to the supervisor, to the reporter,
/// or kept here until it is complete (a probe's stacks) or asked for (the job's wait status).
struct Relay {
    attempt: u32,
    rank: usize,
    host: String,
    /// The job's wait status, once the agent said it.
    status: Option<i32>,
    /// A probe's stacks, as they come in.
    stacks: Vec<RankStack>,
}

/// Where one agent message goes.
#[derive(Debug)]
enum Route {
    Report(NodeReport),
    Events(Vec<Event>),
}

impl Relay {
    fn new(attempt: u32, rank: usize, host: String) -> Relay {
        Relay { attempt, rank, host, status: None, stacks: Vec::new() }
    }

    /// Where `message` goes, if anywhere. Anything that is not a message is shown as node
    /// output.
    fn route(&mut self, message: AgentMessage) -> Option<Route> {
        let report = |report| Some(Route::Report(report));
        let event = |event| Some(Route::Events(vec![event]));
        let rank = self.rank;
        match message {
            AgentMessage::Stack(stack) => {
                self.stacks.push(stack);
                None
            }
            AgentMessage::Started { pgid } => event(Event::NodeStarted {
                attempt: self.attempt,
                node_rank: rank,
                host: self.host.clone(),
                pgid,
            }),
            AgentMessage::Exited { status } => {
                self.status = Some(status);
                None
            }
            AgentMessage::Up | AgentMessage::Alive | AgentMessage::Clock(_) => None,
            // The probe phase's last words, read after it (the master's listener, which the
            // job's env ends).
            AgentMessage::Fact(_) | AgentMessage::Probed(_) => None,
            AgentMessage::Ports(in_use) => report(NodeReport::Ports(in_use)),
            AgentMessage::Sample(sample) => report(NodeReport::Sample(sample)),
            AgentMessage::Probe(processes) => {
                self.stacks.clear();
                report(NodeReport::Processes(processes))
            }
            AgentMessage::StackStart { .. } | AgentMessage::StackPart(_) | AgentMessage::StackEnd => None,
            AgentMessage::StacksDone => report(NodeReport::Stacks(std::mem::take(&mut self.stacks))),
            AgentMessage::Unstopped(pids) => {
                event(Event::ProcessesUnstopped { node_rank: rank, host: self.host.clone(), pids })
            }
            AgentMessage::Swept(text) => {
                Some(Route::Events(super::sweep::swept_events(rank, &self.host, &text)))
            }
            AgentMessage::Other(text) => event(Event::NodeOutput {
                node_rank: rank,
                source: crate::events::Source::default(),
                lines: Lines::one(text.as_bytes(), crate::lines::LineEnd::Lf),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torch_launchers_own_lines_are_not_the_jobs_progress() {
        let (rank, launcher) =
            (Source { rank: Some(3), local_rank: Some(1), stderr: false }, Source::default());
        let text = || "WARNING: Setting OMP_NUM_THREADS environment variable".to_string();
        assert!(Progress::RankLines.counts(&rank, text));
        assert!(!Progress::RankLines.counts(&launcher, text), "torchrun's warning as it starts");
        assert!(Progress::AnyLine.counts(&launcher, text), "a command job's lines are its own");
        let steps = Progress::Pattern(Arc::new(Regex::new("^step ").unwrap()));
        assert!(!steps.counts(&rank, text));
        assert!(steps.counts(&launcher, || "step 7 loss 0.1".to_string()));
    }
    use crate::transport::sim::{say, Expect, Heard, SimNode, Step};

    #[test]
    fn a_node_is_silent_only_after_its_agent_first_spoke() {
        let l = Liveness::new(2);
        std::thread::sleep(Duration::from_millis(30));
        // Node 0 still logging in: no silence counted.
        assert_eq!(l.since_heard(0), Duration::ZERO);
        l.heard(1);
        std::thread::sleep(Duration::from_millis(30));
        assert!(l.since_heard(1) >= Duration::from_millis(30));
        assert_eq!(l.since_heard(0), Duration::ZERO);
        // A stall of herd's own gives the heard nodes a fresh window, and the others none.
        l.forgive();
        assert!(l.since_heard(1) < Duration::from_millis(30));
        assert_eq!(l.since_heard(0), Duration::ZERO);
    }

    /// The job's output proves the node alive as a heartbeat does, once its agent spoke (a
    /// login banner before it is no agent's).
    #[test]
    fn a_nodes_output_counts_as_hearing_from_it_once_its_agent_spoke() {
        let l = Liveness::new(2);
        l.output(0);
        assert!(!l.has_heard(0), "a login banner is no agent");
        l.heard(1);
        std::thread::sleep(Duration::from_millis(40));
        assert!(l.since_heard(1) >= Duration::from_millis(40));
        l.output(1);
        assert!(l.since_heard(1) < Duration::from_millis(40));
    }

    /// A probe's stacks go up together once the last has come, and a new probe's without an
    /// older one's; the job's wait status is kept for the node's end, and a heartbeat goes
    /// nowhere.
    #[test]
    fn a_probes_stacks_go_up_together_and_the_exit_status_waits_for_the_end() {
        let mut relay = Relay::new(0, 1, "n2".into());
        let stack =
            |rank: u32| AgentMessage::Stack(RankStack { rank, pid: 100 + rank, dump: Ok(String::new()) });
        assert!(matches!(
            relay.route(AgentMessage::Probe(vec![])),
            Some(Route::Report(NodeReport::Processes(_)))
        ));
        assert!(relay.route(stack(0)).is_none());
        // An answer cut short, then the next probe's.
        relay.route(AgentMessage::Probe(vec![]));
        assert!(relay.route(stack(1)).is_none());
        let Some(Route::Report(NodeReport::Stacks(stacks))) = relay.route(AgentMessage::StacksDone) else {
            panic!("no stacks")
        };
        assert_eq!(stacks.iter().map(|s| s.rank).collect::<Vec<_>>(), [1]);
        assert!(relay.route(AgentMessage::Alive).is_none());
        assert!(relay.route(AgentMessage::Exited { status: 0 }).is_none());
        assert_eq!(relay.status, Some(0));
    }

    /// One node's task on a simulated node: what the supervisor tells it, what it reports.
    struct Task {
        tell: mpsc::UnboundedSender<NodeCommand>,
        reports: mpsc::UnboundedReceiver<(usize, NodeReport)>,
        events: tokio::task::JoinHandle<Vec<Event>>,
    }

    impl Task {
        fn start(node: &SimNode) -> Task {
            let (tell, commands) = mpsc::unbounded_channel();
            let (reports_tx, reports) = mpsc::unbounded_channel();
            let (events_tx, mut seen) = crate::events::channel(16);
            let invocation = AgentInvocation {
                grace_secs: 5,
                heartbeat_secs: 3,
                fence_secs: None,
                marker: "HERD_MARKER=k:r:0:0".into(),
                job: "train".into(),
                cleanup: None,
                presweep: None,
                report_ports: false,
                probe: None,
            };
            let node_run = NodeRun {
                node_rank: 0,
                host: "n1".into(),
                attempt: 0,
                invocation,
                early: None,
                commands,
                reports: reports_tx,
                liveness: Arc::new(Liveness::new(1)),
                progress: Progress::AnyLine,
                fatal_pattern: None,
            };
            let conn = Arc::new(Connection::Sim(node.clone()));
            tokio::spawn(run(conn, node_run, events_tx));
            let events = tokio::spawn(async move {
                let mut all = Vec::new();
                while let Some(dated) = seen.recv().await {
                    all.push(dated.event);
                }
                all
            });
            Task { tell, reports, events }
        }

        fn tell(&self, command: NodeCommand) {
            self.tell.send(command).expect("the node's task runs");
        }

        /// Every report up to the last, how the node ended.
        async fn ended(mut self) -> (Vec<NodeReport>, NodeResult, Vec<Event>) {
            let mut reports = Vec::new();
            while let Some((_, report)) = self.reports.recv().await {
                if let NodeReport::Ended(result) = report {
                    return (reports, result, self.events.await.unwrap());
                }
                reports.push(report);
            }
            panic!("no end reported; reports: {reports:?}");
        }
    }

    fn env() -> NodeCommand {
        NodeCommand::Env(crate::remote::shell::env_block([("RANK", "0")]))
    }

    fn stop(stop: Stop) -> NodeCommand {
        NodeCommand::Stop { stop, fast: false, kill_wait: super::super::attempt::KILL_DEADLINE }
    }

    fn started() -> Vec<Step> {
        vec![Step::Up, Step::Await(Expect::Env), say("herd-agent pgid 10")]
    }

    /// The agent reads the first line after its env's count as the env: a probe asked
    /// before the env goes after it, and a sample or a checkpoint, with no job to act on,
    /// not at all.
    #[tokio::test(start_paused = true)]
    async fn what_is_asked_before_the_env_goes_after_it_or_not_at_all() {
        let answer = vec![
            Step::Await(Expect::Line("probe")),
            say("herd-agent probe 10:S:0:0"),
            say("herd-agent stacks-done"),
            Step::Await(Expect::Stop),
            Step::Exit(143),
        ];
        let node = SimNode::agent([started(), answer].concat());
        let task = Task::start(&node);
        task.tell(NodeCommand::Probe);
        task.tell(NodeCommand::Sample);
        task.tell(NodeCommand::Checkpoint(crate::config::CheckpointSignal::ALL[0], false));
        task.tell(env());
        task.tell(stop(Stop::Term));
        let (reports, result, _) = task.ended().await;
        let env = Heard::Env(vec!["export RANK=0".into()]);
        assert_eq!(node.heard(), [env, Heard::Line("probe".into()), Heard::Line("term".into())]);
        assert!(matches!(reports[..], [NodeReport::Processes(_), NodeReport::Stacks(_)]), "{reports:?}");
        assert_eq!(result.exit, NodeExit::Signal(15));
    }

    /// A stop before the env goes in its place, and the agent ends having started nothing;
    /// the env that comes after it is never sent.
    #[tokio::test(start_paused = true)]
    async fn a_stop_before_the_env_takes_its_place() {
        let node = SimNode::agent(started());
        let task = Task::start(&node);
        task.tell(stop(Stop::Term));
        task.tell(env());
        let (_, result, events) = task.ended().await;
        assert_eq!(node.heard(), [Heard::Line("term".into())]);
        assert_eq!(result.exit, NodeExit::Signal(15));
        assert!(!events.iter().any(|e| matches!(e, Event::NodeStarted { .. })), "{events:?}");
    }

    /// A stop never goes down: `term` after `kill` is not sent, nor `kill` twice.
    #[tokio::test(start_paused = true)]
    async fn a_stop_weaker_than_one_sent_is_not_sent() {
        let killed = vec![Step::Await(Expect::Stop), Step::Sleep(Duration::from_secs(1)), Step::Exit(137)];
        let node = SimNode::agent([started(), killed].concat());
        let task = Task::start(&node);
        task.tell(env());
        task.tell(stop(Stop::Kill));
        task.tell(stop(Stop::Term));
        task.tell(stop(Stop::Kill));
        let (_, result, _) = task.ended().await;
        assert_eq!(node.lines(), ["kill"]);
        assert_eq!(result.exit, NodeExit::Signal(9));
    }

    /// How a node whose agent said no exit status is lost: its link gone, or its agent gone
    /// before its job.
    #[tokio::test(start_paused = true)]
    async fn an_agent_gone_without_an_exit_status_is_lost_saying_how() {
        for (end, why) in [
            (vec![Step::Drop], "the ssh connection to the node was lost"),
            (vec![], "agent ended with exit code 0 before the job did"),
        ] {
            let node = SimNode::agent([started(), end].concat());
            let task = Task::start(&node);
            task.tell(env());
            let (_, result, _) = task.ended().await;
            assert!(matches!(&result.exit, NodeExit::Lost(w) if w.contains(why)), "{:?}", result.exit);
        }
    }

    /// A node deaf to SIGKILL is given up on after the kill wait, and lost for that: its link
    /// is up, and its output never ended.
    #[tokio::test(start_paused = true)]
    async fn a_node_given_up_on_after_sigkill_is_lost_for_that() {
        let node = SimNode::agent([started(), vec![Step::Hang]].concat());
        let task = Task::start(&node);
        task.tell(env());
        task.tell(stop(Stop::Kill));
        let (_, result, _) = task.ended().await;
        let why = "no exit status 15 s after SIGKILL was requested; stopped waiting for it";
        assert_eq!(result.exit, NodeExit::Lost(why.into()));
        let given_up = super::super::attempt::KILL_DEADLINE + DRAIN_DEADLINE;
        assert!(result.ended_at >= given_up && result.ended_at < given_up + Duration::from_secs(1));
    }

    /// A process of the job that escaped the teardown holds the node's output open: herd
    /// stops reading it, and keeps the lines it read, which may say why the node failed.
    #[tokio::test(start_paused = true)]
    async fn output_held_open_after_the_exit_keeps_the_lines_read() {
        let job = vec![Step::Print("ValueError: bad lr\n".into()), Step::Exit(1), Step::Hang];
        let node = SimNode::agent([started(), job].concat());
        let task = Task::start(&node);
        task.tell(env());
        let (_, result, _) = task.ended().await;
        assert_eq!(result.exit, NodeExit::ExitCode(1));
        let tail: Vec<&str> = result.tail.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(tail, ["ValueError: bad lr"]);
    }
}
