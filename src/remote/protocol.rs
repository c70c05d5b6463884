//! The agent protocol, both ways: the lines herd writes to an agent's stdin (`Control`, the
//! env block first) and those the agent writes back on its stderr (`AgentMessage`, from
//! `parse_agent_line`): its heartbeat, its job's start and end, the processes, stacks, clock
//! and busy times (`Sample`) herd asked for. `frames` reads the agent's stdout, the job's
//! output. The lowest layer: the transport, the supervisor and the doctor read what it holds,
//! and it imports none of them, only plain data (`outcome`, `stacks`). Pure.

use std::borrow::Cow;

use crate::outcome::ProcessState;
use crate::stacks::RankStack;

/// What herd writes to an agent's stdin (see `agent.sh`): first the env block, then control
/// lines. `transport::session` is the only writer; this is only the encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// The env block (`env_block`): the agent starts nothing before it. A control line in its
    /// place ends the agent, having started nothing.
    Env(Vec<u8>),
    /// SIGTERM the job.
    Term,
    /// `Term`, and then end the launcher as soon as its workers are gone.
    TermFast,
    /// SIGKILL the job.
    Kill,
    /// The job's processes, then every worker's stack (`AgentMessage::Probe`, then stacks).
    Probe,
    /// The node's time (`AgentMessage::Clock`).
    Clock,
    /// Each rank's busy time (`AgentMessage::Sample`).
    Sample,
    /// herd is there (see `ControlLine::beating`): an agent with a fence ends its job once
    /// these stop coming.
    Beat,
    /// This signal (a name without `SIG`, of `CheckpointSignal::ALL`) to every rank; with
    /// `true` (a `command` job), to the job's process group where it has no rank.
    Checkpoint(&'static str, bool),
}

impl Control {
    /// The bytes the agent reads.
    pub fn encode(&self) -> Cow<'_, [u8]> {
        let line: &'static [u8] = match self {
            Control::Env(block) => return Cow::Borrowed(block),
            Control::Term => b"term\n",
            Control::TermFast => b"term-fast\n",
            Control::Kill => b"kill\n",
            Control::Probe => b"probe\n",
            Control::Clock => b"clock\n",
            Control::Sample => b"sample\n",
            Control::Beat => b"beat\n",
            Control::Checkpoint(signal, group) => {
                let group = if *group { " group" } else { "" };
                return Cow::Owned(format!("checkpoint {signal}{group}\n").into_bytes());
            }
        };
        Cow::Borrowed(line)
    }
}

impl ProcessState {
    /// `PID:STATE:RANK:LOCAL_RANK`, `-` for a rank it has not.
    fn parse(word: &str) -> Option<ProcessState> {
        let mut parts = word.split(':');
        let pid = parts.next()?.parse().ok()?;
        let state = parts.next()?.chars().next()?;
        let rank = parts.next()?.parse().ok();
        let local_rank = parts.next()?.parse().ok();
        Some(ProcessState { pid, state, rank, local_rank })
    }

    /// Whether it cannot be taking part: stopped (SIGSTOP, a debugger) or stuck in the
    /// kernel (a hung filesystem or driver).
    pub fn is_stuck(&self) -> bool {
        matches!(self.state, 'T' | 't' | 'D')
    }
}

/// A line the agent wrote on its stderr.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentMessage {
    /// The agent's first word: the login shell has started it.
    Up,
    /// The node's local TCP ports in use, any state; `None`: its socket tables cannot be read.
    Ports(Option<std::collections::BTreeSet<u16>>),
    /// The job's process group id.
    Started { pgid: u32 },
    /// The launcher's wait status as the shell reports it (128+N for signal N).
    Exited { status: i32 },
    /// The heartbeat.
    Alive,
    /// A line of the pre-sweep's output: stopped pids, or `container NAME`.
    Swept(String),
    /// Processes of the job that were still alive after SIGKILL.
    Unstopped(Vec<u32>),
    /// The job's processes as they were when herd asked (`probe`).
    Probe(Vec<ProcessState>),
    /// The start of one rank's stack, after `probe` (see `StackReader`).
    StackStart { rank: u32, pid: u32, status: String },
    /// A piece of its base64.
    StackPart(String),
    /// Its end.
    StackEnd,
    /// One rank's whole stack, in place of its `StackEnd`: only `transport::session`, which
    /// puts the pieces together, says it; a line never parses as one.
    Stack(RankStack),
    /// Every worker's stack has been sent.
    StacksDone,
    /// The node's time in seconds since the epoch, as soon as herd asked (`clock`).
    Clock(f64),
    /// Each rank's busy time, as herd asked (`sample`).
    Sample(Sample),
    /// A line the preflight's probe printed, in a probe phase (see `AgentInvocation::probe`).
    Fact(String),
    /// The probe phase's probe has ended, with this exit status.
    Probed(i32),
    /// Anything else (a shell error from the agent itself): kept as output, never dropped.
    Other(String),
}

/// One rank's times, in a node's units (`Sample::hz`), its processes' summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RankTimes {
    /// On a CPU.
    pub cpu: u64,
    /// Ready to run, waiting for a CPU (0 where the node cannot say).
    pub wait: u64,
    /// Bytes read and written, to anything (`None` where the node cannot say).
    pub io: Option<u64>,
    /// A thread of it was in uninterruptible sleep (state D: an fsync, a close on NFS), whose
    /// bytes count only once the call returns.
    pub blocked: bool,
}

/// One node's answer to `sample`: its uptime (seconds), the units of its times in a second,
/// and each rank's times.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub uptime: f64,
    pub hz: u32,
    pub ranks: Vec<(u32, RankTimes)>,
}

/// One rank's stack as the agent sends it, in pieces (see `herd_stack` in procs.sh).
#[derive(Debug, Default)]
pub struct StackReader {
    current: Option<(u32, u32, String, String)>,
}

impl StackReader {
    /// Take one agent message; a whole stack once its last piece is in.
    pub fn feed(&mut self, message: &AgentMessage) -> Option<RankStack> {
        use base64::Engine as _;
        match message {
            AgentMessage::StackStart { rank, pid, status } => {
                self.current = Some((*rank, *pid, status.clone(), String::new()));
                None
            }
            AgentMessage::StackPart(chunk) => {
                if let Some((_, _, _, b64)) = &mut self.current {
                    b64.push_str(chunk);
                }
                None
            }
            AgentMessage::StackEnd => {
                let (rank, pid, status, b64) = self.current.take()?;
                let bytes = base64::engine::general_purpose::STANDARD.decode(b64.trim()).unwrap_or_default();
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let dump = match status.as_str() {
                    "ok" if text.is_empty() => {
                        Err("py-spy printed nothing (is base64 installed on the node?)".into())
                    }
                    "ok" => Ok(text),
                    "missing" | "lost" => Err(text),
                    _ => Err(format!("py-spy failed: {}", text.lines().last().unwrap_or("no output").trim())),
                };
                Some(RankStack { rank, pid, dump })
            }
            _ => None,
        }
    }
}

/// `UPTIME HZ RANK:CPU:WAIT:IO ...`: a rank's times and bytes are its processes' summed
/// (`RANK:CPU` is a wait of 0; without IO, the rank's bytes are unknown).
fn parse_sample(words: &str) -> Option<Sample> {
    let mut words = words.split_whitespace();
    let uptime: f64 = words.next()?.parse().ok()?;
    let hz: u32 = words.next()?.parse().ok().filter(|&hz| hz > 0)?;
    let mut ranks: Vec<(u32, RankTimes)> = Vec::new();
    for word in words {
        let mut fields = word.split(':');
        let rank: u32 = fields.next()?.parse().ok()?;
        let cpu: u64 = fields.next()?.parse().ok()?;
        let wait: u64 = fields.next().map_or(Some(0), |w| w.parse().ok())?;
        let io: Option<u64> = match fields.next() {
            None => None,
            Some(io) => Some(io.parse().ok()?),
        };
        let blocked = match fields.next() {
            None => false,
            Some("1") => true,
            Some(_) => return None,
        };
        if fields.next().is_some() {
            return None;
        }
        match ranks.iter_mut().find(|(r, _)| *r == rank) {
            Some((_, sum)) => {
                sum.cpu += cpu;
                sum.wait += wait;
                sum.io = sum.io.zip(io).map(|(a, b)| a + b);
                sum.blocked |= blocked;
            }
            None => ranks.push((rank, RankTimes { cpu, wait, io, blocked })),
        }
    }
    Some(Sample { uptime, hz, ranks })
}

/// One line of the agent's stderr, without its newline: `herd-agent WORD` or `herd-agent
/// WORD ARGS`; any other line, or one whose args do not parse, is `Other`.
pub fn parse_agent_line(line: &str) -> AgentMessage {
    let message = line.strip_prefix("herd-agent ").and_then(|rest| match rest.split_once(' ') {
        Some((word, args)) => agent_message(word, Some(args)),
        None => agent_message(rest, None),
    });
    message.unwrap_or_else(|| AgentMessage::Other(line.to_string()))
}

/// The words of the agent's messages, and what each carries (`None`: nothing after the word).
fn agent_message(word: &str, args: Option<&str>) -> Option<AgentMessage> {
    use AgentMessage as M;
    Some(match (word, args) {
        ("up", None) => M::Up,
        ("alive", None) => M::Alive,
        ("stacks-done", None) => M::StacksDone,
        ("stack-end", None) => M::StackEnd,
        ("ports", ports) => M::Ports(parse_ports(ports.unwrap_or_default())),
        ("probe", processes) => M::Probe(
            processes.unwrap_or_default().split_whitespace().filter_map(ProcessState::parse).collect(),
        ),
        ("fact", Some(fact)) => M::Fact(fact.to_string()),
        ("probed", Some(status)) => M::Probed(status.trim().parse().ok()?),
        ("swept", Some(swept)) => M::Swept(swept.to_string()),
        ("unstopped", Some(pids)) => M::Unstopped(parse_pids(pids)),
        ("clock", Some(clock)) => M::Clock(clock.trim().parse().ok()?),
        ("sample", Some(sample)) => M::Sample(parse_sample(sample)?),
        ("stack+", Some(chunk)) => M::StackPart(chunk.to_string()),
        ("stack", Some(start)) => parse_stack_start(start)?,
        ("pgid", Some(pgid)) => M::Started { pgid: pgid.parse().ok()? },
        ("exit", Some(status)) => M::Exited { status: status.parse().ok()? },
        _ => return None,
    })
}

/// `HEX HEX ...`, the local ports in use; a `?` among them: the socket tables cannot be read.
fn parse_ports(words: &str) -> Option<std::collections::BTreeSet<u16>> {
    let words: Vec<&str> = words.split_whitespace().collect();
    if words.contains(&"?") {
        return None;
    }
    Some(words.iter().filter_map(|w| u16::from_str_radix(w, 16).ok()).collect())
}

/// `RANK PID STATUS`, the start of one rank's stack.
fn parse_stack_start(words: &str) -> Option<AgentMessage> {
    let [rank, pid, status] = words.split(' ').collect::<Vec<_>>()[..] else {
        return None;
    };
    Some(AgentMessage::StackStart {
        rank: rank.parse().ok()?,
        pid: pid.parse().ok()?,
        status: status.to_string(),
    })
}

/// The pids a sweep printed, or an `unstopped` message holds.
pub fn parse_pids(out: &str) -> Vec<u32> {
    out.split_whitespace().filter_map(|w| w.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_lines_parse() {
        assert_eq!(
            parse_agent_line("herd-agent fact herd-fact a=b"),
            AgentMessage::Fact("herd-fact a=b".into())
        );
        assert_eq!(parse_agent_line("herd-agent probed 130"), AgentMessage::Probed(130));
        assert_eq!(parse_agent_line("herd-agent pgid 42"), AgentMessage::Started { pgid: 42 });
        assert_eq!(parse_agent_line("herd-agent exit 137"), AgentMessage::Exited { status: 137 });
        assert_eq!(parse_agent_line("Terminated"), AgentMessage::Other("Terminated".into()));
        assert_eq!(parse_agent_line("herd-agent alive"), AgentMessage::Alive);
        assert_eq!(parse_agent_line("herd-agent exit x"), AgentMessage::Other("herd-agent exit x".into()));
        assert_eq!(
            parse_agent_line("herd-agent probe 10:S:-:- 11:T:3:1"),
            AgentMessage::Probe(vec![
                ProcessState { pid: 10, state: 'S', rank: None, local_rank: None },
                ProcessState { pid: 11, state: 'T', rank: Some(3), local_rank: Some(1) },
            ])
        );
        assert_eq!(parse_agent_line("herd-agent probe"), AgentMessage::Probe(vec![]));
        let mut reader = StackReader::default();
        let mut read = |lines: &[&str]| {
            lines.iter().filter_map(|l| reader.feed(&parse_agent_line(l))).collect::<Vec<_>>()
        };
        let pieces = [
            "herd-agent stack 3 77 ok",
            "herd-agent stack+ VGhyZ",
            "herd-agent alive",
            "herd-agent stack+ WFkIDEK",
            "herd-agent stack-end",
        ];
        assert_eq!(read(&pieces), [RankStack { rank: 3, pid: 77, dump: Ok("Thread 1\n".into()) }]);
        let failed = read(&[
            "herd-agent stack 3 77 failed",
            "herd-agent stack+ UGVybWlzc2lvbiBkZW5pZWQ=",
            "herd-agent stack-end",
        ]);
        assert_eq!(failed[0].dump, Err("py-spy failed: Permission denied".into()));
        let empty = read(&["herd-agent stack 4 78 ok", "herd-agent stack-end"]);
        assert!(empty[0].dump.as_ref().unwrap_err().contains("base64"), "{empty:?}");
        assert_eq!(parse_agent_line("herd-agent stacks-done"), AgentMessage::StacksDone);
        assert_eq!(
            parse_agent_line("herd-agent clock 1796113363.512764529"),
            AgentMessage::Clock(1_796_113_363.512_764_5)
        );
        // busybox date has no %N.
        assert_eq!(
            parse_agent_line("herd-agent clock 1796113363.%N"),
            AgentMessage::Other("herd-agent clock 1796113363.%N".into())
        );
        assert_eq!(parse_agent_line("herd-agent unstopped 4 5"), AgentMessage::Unstopped(vec![4, 5]));
        // A rank's processes (its data loaders) are summed; no rank at all is a sample too.
        let times = |cpu, wait, io| RankTimes { cpu, wait, io, blocked: false };
        let waiting = RankTimes { blocked: true, ..times(7, 1, Some(4096)) };
        let ranks = vec![(3, times(170, 9, None)), (2, times(40, 0, None)), (1, waiting)];
        let sample = Sample { uptime: 812.5, hz: 100, ranks };
        // Bytes are known for a rank only when they are for every process of it; one process
        // in uninterruptible sleep makes the rank blocked.
        let line = "herd-agent sample 812.5 100 3:150:4:100 2:40 3:20:5 1:3:1:1000 1:4:0:3096:1";
        assert_eq!(parse_agent_line(line), AgentMessage::Sample(sample));
        let none = Sample { uptime: 9.0, hz: 250, ranks: vec![] };
        assert_eq!(parse_agent_line("herd-agent sample 9.00 250"), AgentMessage::Sample(none));
        for bad in [
            "herd-agent sample 9.0 0 1:2",
            "herd-agent sample 9.0 100 x:2",
            "herd-agent sample 9.0",
            "herd-agent sample 9.0 100 1:2:3:4:5",
            "herd-agent sample 9.0 100 1:2:3:4:1:1",
            "herd-agent sample 9.0 100 1:2:3:x",
            "herd-agent sample 9.0 100 1:2:x",
        ] {
            assert_eq!(parse_agent_line(bad), AgentMessage::Other(bad.into()));
        }
    }
}
