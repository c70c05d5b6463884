//! One agent's session: the only writer of an agent's stdin (`Control`, down) and the only
//! reader of its stderr (`AgentMessage`, up). The supervisor's nodes, the doctor's probes,
//! `herd exec` and `herd stacks` all speak to agents through it; the protocol itself (the
//! bytes, the lines) is `remote`'s, described in docs/design/agent.md. The job's own output
//! (the agent's stdout) is handed to the caller, who alone knows what it holds.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, Split};

use super::{AgentHandle, AgentProcess, Connection, Started, TransportError};
use crate::remote::agent::AgentInvocation;
use crate::remote::protocol::{self, AgentMessage, Control, StackReader};

/// A started agent, split into what goes down, what comes up, and the rest.
pub struct AgentSession {
    /// Its stdin.
    pub control: ControlLine,
    /// Its stderr, as messages.
    pub messages: Messages,
    /// Its stdout: the job's output.
    pub output: Box<dyn AsyncRead + Send + Unpin>,
    /// Its process (or step), for its exit status.
    pub handle: AgentHandle,
    /// When it was started (its login began).
    pub started_at: tokio::time::Instant,
}

impl AgentSession {
    /// The agent `early` holds, or `inv` started now on `conn`.
    pub async fn open(
        early: Option<Started>,
        conn: &Connection,
        inv: &AgentInvocation,
    ) -> Result<AgentSession, TransportError> {
        let started = Started::take_or_start(early, conn, inv).await?;
        let p = started.process;
        Ok(AgentSession {
            control: p.stdin,
            messages: started.messages.unwrap_or_else(|| Messages::new(p.stderr)),
            output: p.stdout,
            handle: p.handle,
            started_at: started.at,
        })
    }

    /// The session handed on as an agent started ahead of its use, now `invocation` (what is
    /// left of it to do): after the preflight's probe phase, the first attempt's job agent.
    /// What its stderr holds unread stays for the next reader.
    pub fn into_started(self, invocation: AgentInvocation) -> Started {
        let process = AgentProcess {
            stdin: self.control,
            stdout: self.output,
            stderr: Box::new(tokio::io::empty()),
            handle: self.handle,
        };
        Started { invocation, process, messages: Some(self.messages), at: self.started_at }
    }
}

/// An agent's stdin. Dropping it closes it: the agent then ends its job (TERM, grace, KILL).
/// With beats (`beating`), it also says `beat` every so often, from the agent's start until
/// it is dropped: an agent with a fence ends its job when they stop (herd gone, the node cut
/// off), however long its sshd keeps the session.
pub struct ControlLine {
    stdin: Arc<tokio::sync::Mutex<Stdin>>,
    beats: Option<tokio::task::AbortHandle>,
}

type Stdin = Box<dyn AsyncWrite + Send + Unpin>;

impl ControlLine {
    pub(super) fn new(stdin: Stdin) -> ControlLine {
        ControlLine { stdin: Arc::new(tokio::sync::Mutex::new(stdin)), beats: None }
    }

    /// This line, saying `beat` every `every` from now on. Each beat is written whole, between
    /// two of `send`'s writes, never inside one (an env block is many lines).
    pub(super) fn beating(mut self, every: Duration) -> ControlLine {
        let task = tokio::spawn(beat(Arc::downgrade(&self.stdin), every));
        self.beats = Some(task.abort_handle());
        self
    }

    /// Write `control` and flush it.
    pub async fn send(&mut self, control: &Control) -> std::io::Result<()> {
        let mut stdin = self.stdin.lock().await;
        stdin.write_all(&control.encode()).await?;
        stdin.flush().await
    }
}

impl Drop for ControlLine {
    fn drop(&mut self) {
        // The beats hold the pipe only while they write one: it closes now, or once that
        // write is cancelled.
        if let Some(beats) = &self.beats {
            beats.abort();
        }
    }
}

/// `beat` every `every` down `stdin`, until it is gone or cannot be written.
async fn beat(stdin: Weak<tokio::sync::Mutex<Stdin>>, every: Duration) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(stdin) = stdin.upgrade() else { return };
        let mut stdin = stdin.lock().await;
        let wrote = async {
            stdin.write_all(&Control::Beat.encode()).await?;
            stdin.flush().await
        };
        if wrote.await.is_err() {
            return;
        }
    }
}

/// An agent's stderr, read as its messages.
pub struct Messages {
    lines: Split<BufReader<Box<dyn AsyncRead + Send + Unpin>>>,
    decoder: Decoder,
}

impl Messages {
    pub(super) fn new(stderr: Box<dyn AsyncRead + Send + Unpin>) -> Messages {
        // Messages are short lines (a longer one is read in pieces): not the default 8 KiB
        // buffer on every node.
        Messages { lines: BufReader::with_capacity(1024, stderr).split(b'\n'), decoder: Decoder::default() }
    }

    /// The agent's next message; `None` once its stderr has ended (or cannot be read).
    pub async fn next(&mut self) -> Option<AgentMessage> {
        let line = self.lines.next_segment().await.ok()??;
        Some(self.decoder.decode(&String::from_utf8_lossy(&line)))
    }
}

/// Agent lines into messages, a rank's stack pieces put together: its `StackEnd` comes out as
/// `AgentMessage::Stack`.
#[derive(Default)]
struct Decoder {
    stacks: StackReader,
}

impl Decoder {
    fn decode(&mut self, line: &str) -> AgentMessage {
        let message = protocol::parse_agent_line(line);
        match self.stacks.feed(&message) {
            Some(stack) => AgentMessage::Stack(stack),
            None => message,
        }
    }
}

/// The messages in output that speaks the agent's protocol on its stdout (what
/// `remote::procs::stacks_command` prints, run by `herd exec`'s agents), in order.
pub fn messages_in(output: &[u8]) -> Vec<AgentMessage> {
    let mut decoder = Decoder::default();
    String::from_utf8_lossy(output).lines().map(|line| decoder.decode(line)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_pieces_come_out_as_one_stack_in_place_of_its_end() {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode("Thread 1\n  f (a.py:3)\n");
        let (one, two) = b64.split_at(5);
        let out = format!(
            "herd-agent probe 7:S:0:0\nherd-agent stack 0 7 ok\nherd-agent stack+ {one}\n\
             herd-agent stack+ {two}\nherd-agent stack-end\nherd-agent stacks-done\n"
        );
        let messages = messages_in(out.as_bytes());
        assert_eq!(messages.len(), 6);
        assert!(matches!(messages[1], AgentMessage::StackStart { rank: 0, pid: 7, .. }));
        match &messages[4] {
            AgentMessage::Stack(s) => {
                assert_eq!((s.rank, s.pid), (0, 7));
                assert_eq!(s.dump, Ok("Thread 1\n  f (a.py:3)\n".to_string()));
            }
            other => panic!("not a stack: {other:?}"),
        }
        assert_eq!(messages[5], AgentMessage::StacksDone);
    }

    #[tokio::test]
    async fn control_goes_down_as_the_agent_reads_it_and_messages_come_up() {
        let (down, mut seen) = tokio::io::duplex(256);
        let mut control = ControlLine::new(Box::new(down));
        control.send(&Control::Env(crate::remote::shell::env_block([("A", "1")]))).await.unwrap();
        control.send(&Control::Probe).await.unwrap();
        control.send(&Control::TermFast).await.unwrap();
        drop(control);
        let mut got = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut seen, &mut got).await.unwrap();
        assert_eq!(String::from_utf8(got).unwrap(), "1\nexport A=1\nprobe\nterm-fast\n");

        let up: &[u8] = b"herd-agent up\nherd-agent exit 3\n";
        let mut messages = Messages::new(Box::new(up));
        assert_eq!(messages.next().await, Some(AgentMessage::Up));
        assert_eq!(messages.next().await, Some(AgentMessage::Exited { status: 3 }));
        assert_eq!(messages.next().await, None);
    }

    /// Beats go down between herd's writes, never inside one (an env block of many lines is
    /// read by count), and dropping the line closes it at once, beats or not.
    #[tokio::test]
    async fn beats_come_between_writes_and_the_line_still_closes_when_dropped() {
        let (down, mut seen) = tokio::io::duplex(4096);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut seen, &mut got).await.map(|_| got)
        });
        let mut control = ControlLine::new(Box::new(down)).beating(Duration::from_millis(2));
        let names: Vec<String> = (0..300).map(|i| format!("V{i}")).collect();
        let value = "x".repeat(200);
        let block = crate::remote::shell::env_block(names.iter().map(|n| (n.as_str(), value.as_str())));
        for _ in 0..10 {
            control.send(&Control::Env(block.clone())).await.unwrap();
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        drop(control);
        let got =
            tokio::time::timeout(Duration::from_secs(5), reader).await.expect("closed").unwrap().unwrap();
        let text = String::from_utf8(got).unwrap();
        let mut lines = text.lines();
        let (mut blocks, mut beats) = (0, 0);
        while let Some(line) = lines.next() {
            if line == "beat" {
                beats += 1;
                continue;
            }
            let count: usize = line.parse().unwrap_or_else(|_| panic!("not a count: {line:?}"));
            for _ in 0..count {
                assert!(lines.next().unwrap().starts_with("export V"), "a beat inside an env block");
            }
            blocks += 1;
        }
        assert_eq!(blocks, 10);
        assert!(beats > 0, "no beat came");
    }
}
