//! A simulated node, for unit tests: a connection whose agent is a script on in-memory pipes
//! that speaks the agent's wire protocol (docs/design/agent.md), byte for byte. The gang, the
//! node tasks, the session and the fleet run their real code on it, without a machine, a
//! login or root; under tokio's paused time, their timeouts pass at once.
//!
//! An agent is a list of `Step`s, plain data: what it says (stderr), prints (stdout) and waits
//! for (stdin), and how it fails: late or out of order, silent, its link dropped, a stop
//! ignored. What herd sent each node is kept (`SimNode::heard`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use tokio::time::{Instant, Interval};

use super::{AgentHandle, AgentProcess, TransportError, TransportExit};
use crate::remote::agent::AgentInvocation;

/// What one pipe holds unread: more than a test's agent ever says at once.
const PIPE: usize = 64 * 1024;

/// One step of a simulated agent.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// `herd-agent up`, and from then on the heartbeat (`herd-agent alive` every
    /// `heartbeat_secs` of its invocation), as agent.sh starts.
    Up,
    /// A line on its stderr, as is: an agent message (`herd-agent pgid 7`), or anything.
    Say(String),
    /// Bytes on its stdout: the job's output.
    Print(String),
    /// What herd sent, taken in order until this comes; anything else before it is passed
    /// over. As in agent.sh, a control line in place of an awaited env block ends the agent
    /// with `herd-agent exit 143`, and the end of its stdin (herd gone) ends it: silently
    /// before any env, with `herd-agent exit 143` after.
    Await(Expect),
    /// This long passes. What herd sends meanwhile waits for the next `Await`, as in a pipe.
    Sleep(Duration),
    /// The heartbeat stops (the node froze, or its link went quiet); the script goes on.
    Silence,
    /// `herd-agent exit S`, then its stdin and stderr close, and S is its transport's exit
    /// status. Its stdout stays open while steps are left (a process of the job that escaped
    /// holds it).
    Exit(i32),
    /// The link drops: every stream ends with no exit status, and `check` fails from now on.
    Drop,
    /// Nothing more, ever: its streams stay open, and nothing herd sends is acted on.
    Hang,
}

/// A line on the agent's stderr.
pub fn say(line: impl Into<String>) -> Step {
    Step::Say(line.into())
}

/// The job's output as the output multiplexer frames it (see `remote::frames`): `rank`'s
/// stdout, its one line `text`. The node's first output: the multiplexer's magic starts it.
pub fn rank_prints(rank: u32, text: &str) -> Step {
    let magic = String::from_utf8(crate::remote::frames::MAGIC.to_vec()).expect("ascii");
    let line = format!("{text}\n");
    Step::Print(format!("{magic}+1 o {rank} 0\n1 {}\n{line}", line.len()))
}

/// One rank's stack as `herd_stack` (procs.sh) sends it: its start, its base64 in two pieces,
/// its end.
pub fn stack(rank: u32, pid: u32, dump: &str) -> Vec<Step> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(dump);
    let (one, two) = b64.split_at(b64.len() / 2);
    vec![
        say(format!("herd-agent stack {rank} {pid} ok")),
        say(format!("herd-agent stack+ {one}")),
        say(format!("herd-agent stack+ {two}")),
        say("herd-agent stack-end"),
    ]
}

/// What an awaited step waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// An env block.
    Env,
    /// This control line (`probe`, `sample`, `checkpoint USR1` ...).
    Line(&'static str),
    /// Any stop: `term`, `term-fast` or `kill`.
    Stop,
}

/// What herd wrote to an agent's stdin, as the agent reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// An env block: its `export` lines.
    Env(Vec<String>),
    /// A control line.
    Line(String),
}

impl Heard {
    fn is(&self, expect: Expect) -> bool {
        match (self, expect) {
            (Heard::Env(_), Expect::Env) => true,
            (Heard::Line(line), Expect::Line(want)) => line == want,
            (Heard::Line(line), Expect::Stop) => ["term", "term-fast", "kill"].contains(&line.as_str()),
            _ => false,
        }
    }
}

/// A simulated node: its link, and the agents it runs, one script each, in the order they are
/// started. Clones are the same node: a test keeps one to read what herd sent.
#[derive(Clone)]
pub struct SimNode(Arc<Node>);

struct Node {
    scripts: Mutex<VecDeque<Vec<Step>>>,
    heard: Mutex<Vec<Heard>>,
    link_down: AtomicBool,
    started: AtomicUsize,
}

impl SimNode {
    /// A node whose agents run `scripts`; one started beyond them cannot start.
    pub fn agents(scripts: impl IntoIterator<Item = Vec<Step>>) -> SimNode {
        SimNode(Arc::new(Node {
            scripts: Mutex::new(scripts.into_iter().collect()),
            heard: Mutex::new(Vec::new()),
            link_down: AtomicBool::new(false),
            started: AtomicUsize::new(0),
        }))
    }

    /// A node whose one agent runs `script`.
    pub fn agent(script: Vec<Step>) -> SimNode {
        SimNode::agents([script])
    }

    /// What herd has sent the node's agents, in order, acted on or not.
    pub fn heard(&self) -> Vec<Heard> {
        self.0.heard.lock().expect("not poisoned").clone()
    }

    /// The control lines herd has sent, in order.
    pub fn lines(&self) -> Vec<String> {
        let heard = self.heard();
        heard.into_iter().filter_map(|h| if let Heard::Line(l) = h { Some(l) } else { None }).collect()
    }

    /// How many agents were started on it.
    pub fn started(&self) -> usize {
        self.0.started.load(Ordering::SeqCst)
    }

    /// Start the next agent: its pipes, herd's ends of them.
    pub(super) fn spawn(&self, inv: &AgentInvocation) -> Result<AgentProcess, TransportError> {
        if self.0.link_down.load(Ordering::SeqCst) {
            return Err(TransportError::Spawn("the simulated link is down".into()));
        }
        let script = self.0.scripts.lock().expect("not poisoned").pop_front();
        let script =
            script.ok_or_else(|| TransportError::Spawn("the simulated node has no agent to start".into()))?;
        self.0.started.fetch_add(1, Ordering::SeqCst);
        let (stdin, agent_stdin) = tokio::io::duplex(PIPE);
        let (stdout, agent_stdout) = tokio::io::duplex(PIPE);
        let (stderr, agent_stderr) = tokio::io::duplex(PIPE);
        let agent = Agent {
            node: self.0.clone(),
            stdin: Some(BufReader::new(agent_stdin).lines()),
            block: None,
            pending: VecDeque::new(),
            stdout: Some(agent_stdout),
            stderr: Some(agent_stderr),
            heartbeat: Duration::from_secs(inv.heartbeat_secs.max(1)),
            beat: None,
            env_read: false,
            status: None,
        };
        Ok(AgentProcess {
            stdin: super::session::ControlLine::new(Box::new(stdin)),
            stdout: Box::new(stdout),
            stderr: Box::new(stderr),
            handle: AgentHandle::Sim(Ended(tokio::spawn(agent.run(script)))),
        })
    }

    pub(super) fn check(&self) -> Result<(), TransportError> {
        match self.0.link_down.load(Ordering::SeqCst) {
            true => Err(TransportError::Connect("the simulated link is down".into())),
            false => Ok(()),
        }
    }
}

/// A simulated agent's end, as its transport reports it.
pub struct Ended(tokio::task::JoinHandle<TransportExit>);

impl Ended {
    pub(super) async fn wait(self) -> TransportExit {
        self.0.await.unwrap_or_else(|e| TransportExit::Disconnected(e.to_string()))
    }
}

/// One running simulated agent: its ends of the pipes, and what it has read.
struct Agent {
    node: Arc<Node>,
    /// `None` once closed, by herd or by its `exit`.
    stdin: Option<Lines<BufReader<DuplexStream>>>,
    /// An env block being read: the lines it has left, and those read.
    block: Option<(usize, Vec<String>)>,
    /// What herd sent that no step has taken yet, as a pipe holds what is not read.
    pending: VecDeque<Heard>,
    stdout: Option<DuplexStream>,
    stderr: Option<DuplexStream>,
    heartbeat: Duration,
    /// The heartbeat, once up and until silent.
    beat: Option<Interval>,
    /// An env block was taken: the job started.
    env_read: bool,
    /// What it said as its exit.
    status: Option<i32>,
}

/// How a step that waits ended.
enum Waited {
    Done,
    /// The agent ends, as agent.sh would: with this exit status said, if any.
    Quit(Option<i32>),
}

impl Agent {
    async fn run(mut self, script: Vec<Step>) -> TransportExit {
        for step in script {
            let waited = match step {
                Step::Up => {
                    self.say("herd-agent up").await;
                    let first = Instant::now() + self.heartbeat;
                    let mut beat = tokio::time::interval_at(first, self.heartbeat);
                    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    self.beat = Some(beat);
                    Waited::Done
                }
                Step::Say(line) => {
                    self.say(&line).await;
                    Waited::Done
                }
                Step::Print(text) => {
                    if let Some(out) = self.stdout.as_mut() {
                        let _ = out.write_all(text.as_bytes()).await;
                    }
                    Waited::Done
                }
                Step::Await(expect) => self.wait(Some(expect), None).await,
                Step::Sleep(d) => self.wait(None, Some(Instant::now() + d)).await,
                Step::Hang => self.wait(None, None).await,
                Step::Silence => {
                    self.beat = None;
                    Waited::Done
                }
                Step::Exit(status) => {
                    self.end(status).await;
                    Waited::Done
                }
                Step::Drop => {
                    self.node.link_down.store(true, Ordering::SeqCst);
                    return TransportExit::Disconnected("the simulated link dropped".into());
                }
            };
            if let Waited::Quit(status) = waited {
                if let Some(status) = status {
                    self.end(status).await;
                }
                return TransportExit::Code(status.unwrap_or(70));
            }
        }
        // Out of steps: its process ends, having said what it said.
        TransportExit::Code(self.status.unwrap_or(0))
    }

    /// `herd-agent exit S`: the agent is gone, its stdin and stderr closed.
    async fn end(&mut self, status: i32) {
        self.say(&format!("herd-agent exit {status}")).await;
        (self.stdin, self.stderr, self.beat) = (None, None, None);
        self.status = Some(status);
    }

    async fn say(&mut self, line: &str) {
        if let Some(err) = self.stderr.as_mut() {
            let _ = err.write_all(format!("{line}\n").as_bytes()).await;
        }
    }

    /// Until `expect` is taken from what herd sent (if any), or `until` (if any), or forever;
    /// beating, and reading stdin, meanwhile.
    async fn wait(&mut self, expect: Option<Expect>, until: Option<Instant>) -> Waited {
        let deadline = async {
            match until {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(deadline);
        loop {
            if let Some(want) = expect {
                if let Some(waited) = self.take(want) {
                    return waited;
                }
            }
            tokio::select! {
                () = &mut deadline => return Waited::Done,
                _ = tick(&mut self.beat) => self.say("herd-agent alive").await,
                line = read(&mut self.stdin) => match line {
                    None => self.stdin = None,
                    Some(line) => {
                        if let Some(heard) = self.parse(line) {
                            self.node.heard.lock().expect("not poisoned").push(heard.clone());
                            self.pending.push_back(heard);
                        }
                    }
                },
            }
        }
    }

    /// What herd sent, taken in order, up to `want`, as agent.sh reads it; `None` while it
    /// has not come yet.
    fn take(&mut self, want: Expect) -> Option<Waited> {
        while let Some(heard) = self.pending.pop_front() {
            let env = matches!(heard, Heard::Env(_));
            self.env_read |= env;
            if heard.is(want) {
                return Some(Waited::Done);
            }
            // A control line in place of the env: herd stopped the attempt before it started.
            if want == Expect::Env && !env {
                return Some(Waited::Quit(Some(143)));
            }
        }
        // herd is gone: agent.sh stops its job, if it started one, and ends.
        self.stdin.is_none().then_some(Waited::Quit(self.env_read.then_some(143)))
    }

    /// One line of stdin, as agent.sh reads it: a count starts an env block of that many
    /// lines; herd's `beat`s are its fence's, passed over; any other line is a control line.
    fn parse(&mut self, line: String) -> Option<Heard> {
        if let Some((left, lines)) = self.block.as_mut() {
            lines.push(line);
            *left -= 1;
            if *left > 0 {
                return None;
            }
            let (_, lines) = self.block.take().expect("reading one");
            return Some(Heard::Env(lines));
        }
        match line.parse::<usize>() {
            Ok(0) => Some(Heard::Env(Vec::new())),
            Ok(count) => {
                self.block = Some((count, Vec::new()));
                None
            }
            Err(_) if line == "beat" => None,
            Err(_) => Some(Heard::Line(line)),
        }
    }
}

/// The next line herd sent; `None` at its end. Never, once it ended.
async fn read(stdin: &mut Option<Lines<BufReader<DuplexStream>>>) -> Option<String> {
    match stdin.as_mut() {
        Some(lines) => lines.next_line().await.ok().flatten(),
        None => std::future::pending().await,
    }
}

/// The heartbeat's next beat; never, without one.
async fn tick(beat: &mut Option<Interval>) {
    match beat.as_mut() {
        Some(beat) => {
            beat.tick().await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::protocol::{AgentMessage, Control};
    use crate::remote::shell::env_block;
    use crate::transport::session::AgentSession;
    use crate::transport::Connection;

    fn invocation() -> AgentInvocation {
        AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 1,
            fence_secs: None,
            marker: "HERD_MARKER=k:r:0:0".into(),
            job: "true".into(),
            cleanup: None,
            presweep: None,
            report_ports: false,
            probe: None,
        }
    }

    /// The real session reads a simulated agent as it reads agent.sh.
    #[tokio::test(start_paused = true)]
    async fn the_session_reads_a_simulated_agent_as_the_real_one() {
        let node = SimNode::agent(vec![
            Step::Up,
            Step::Await(Expect::Env),
            say("herd-agent pgid 7"),
            Step::Print("hello\n".into()),
            Step::Await(Expect::Stop),
            Step::Exit(143),
        ]);
        let conn = Connection::Sim(node.clone());
        let mut session = AgentSession::open(None, &conn, &invocation()).await.unwrap();
        session.control.send(&Control::Env(env_block([("A", "1")]))).await.unwrap();
        session.control.send(&Control::Probe).await.unwrap();
        session.control.send(&Control::Term).await.unwrap();
        let mut said = Vec::new();
        while let Some(message) = session.messages.next().await {
            said.push(message);
        }
        assert_eq!(
            said,
            [AgentMessage::Up, AgentMessage::Started { pgid: 7 }, AgentMessage::Exited { status: 143 }]
        );
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut session.output, &mut out).await.unwrap();
        assert_eq!(out, "hello\n");
        assert_eq!(session.handle.wait().await, TransportExit::Code(143));
        let env = Heard::Env(vec!["export A=1".into()]);
        assert_eq!(node.heard(), [env, Heard::Line("probe".into()), Heard::Line("term".into())]);
        assert_eq!(node.started(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_in_place_of_the_env_ends_it_and_a_dropped_link_fails_the_check() {
        let node = SimNode::agents([vec![Step::Up, Step::Await(Expect::Env)], vec![Step::Up, Step::Drop]]);
        let conn = Connection::Sim(node.clone());
        let mut session = AgentSession::open(None, &conn, &invocation()).await.unwrap();
        session.control.send(&Control::Kill).await.unwrap();
        assert_eq!(session.messages.next().await, Some(AgentMessage::Up));
        assert_eq!(session.messages.next().await, Some(AgentMessage::Exited { status: 143 }));
        assert_eq!(session.handle.wait().await, TransportExit::Code(143));

        let session = AgentSession::open(None, &conn, &invocation()).await.unwrap();
        assert!(matches!(session.handle.wait().await, TransportExit::Disconnected(_)));
        assert!(conn.check().await.is_err());
        assert!(
            AgentSession::open(None, &conn, &invocation()).await.is_err(),
            "no agent starts on a dead link"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn it_beats_from_its_start_until_silent() {
        let node = SimNode::agent(vec![
            Step::Up,
            Step::Sleep(Duration::from_millis(2500)),
            Step::Silence,
            Step::Hang,
        ]);
        let conn = Connection::Sim(node);
        let mut session = AgentSession::open(None, &conn, &invocation()).await.unwrap();
        assert_eq!(session.messages.next().await, Some(AgentMessage::Up));
        assert_eq!(session.messages.next().await, Some(AgentMessage::Alive));
        assert_eq!(session.messages.next().await, Some(AgentMessage::Alive));
        let silent = tokio::time::timeout(Duration::from_secs(60), session.messages.next()).await;
        assert!(silent.is_err(), "{silent:?}");
    }
}
