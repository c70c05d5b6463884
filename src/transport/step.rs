//! One Slurm step for the fleet (docs/design/slurm-step.md). The nodes' agents (or a probe
//! round's commands) that start together are gathered into one `srun` of one task per node.
//! Each task (`remote/step.sh`) connects back to this herd over TCP with the step's key, gets
//! its own node's command on the first connection, and runs it with stdin and stdout on that
//! connection and stderr on a second; its exit status comes back on a third. Each node thus
//! keeps its own control line, output, messages and exit status, as with a step of its own,
//! while slurmctld creates one step, and herd holds one srun and two sockets per node.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::Command;
use tokio::sync::{oneshot, Notify, OnceCell};

use super::slurm::{self, ALLOCATION_TASK_VARS};
use super::{AgentHandle, AgentProcess, TransportError, TransportExit};
use crate::plan::SlurmTarget;

/// The node side of a step's task.
pub const STEP_SCRIPT: &str = include_str!("../remote/step.sh");

/// Starts that come this close together are one step: the fan-out starts every node's task
/// at once, so a round's members arrive within a few milliseconds of each other on a quiet
/// host; on a loaded one (two test suites at once here), 20 ms split an attempt into 3 steps.
const GATHER_QUIET: Duration = Duration::from_millis(100);
/// However steadily members keep arriving, a step is started this long after its first.
const GATHER_MOST: Duration = Duration::from_secs(2);
/// How long a connection has to say whose it is.
const HELLO_DEADLINE: Duration = Duration::from_secs(20);
/// Once every node of a step is done with (or given up on), how long its srun has to end on
/// its own before it is killed.
const SRUN_GRACE: Duration = Duration::from_secs(5);
/// At close, how long herd waits for its steps' sruns to end on their own: a step that ends
/// on its own is gone from slurmctld when herd exits; one that is cancelled may not be yet.
const SETTLE: Duration = Duration::from_secs(10);

/// After srun has ended, how long a node's connections that were already made (still in the
/// listener's queue, or saying hello) have to arrive before the node counts as never having
/// connected. A node's task connects before it ends, and srun ends after its tasks.
const LATE_CONNECTIONS: Duration = Duration::from_secs(5);

/// The listener's backlog (the kernel caps it at `net.core.somaxconn`).
const LISTEN_BACKLOG: u32 = 4096;

/// A node's place in a step: its command, and where its connections go when they arrive.
struct Slots {
    command: String,
    /// What was written to the node's stdin before it connected.
    held: Arc<Mutex<Held>>,
    stdout: Option<oneshot::Sender<OwnedReadHalf>>,
    stdin: Option<oneshot::Sender<OwnedWriteHalf>>,
    stderr: Option<oneshot::Sender<OwnedReadHalf>>,
    exit: Option<oneshot::Sender<i32>>,
}

/// One srun of one task per node.
struct Step {
    key: String,
    members: Mutex<HashMap<String, Slots>>,
    /// Members whose handles are still held; at 0, an srun still running is killed.
    held: AtomicUsize,
    released: Notify,
    /// Why the step ended (srun's exit and its last words), once it has.
    ended: Mutex<Option<String>>,
}

impl Step {
    fn new() -> Arc<Step> {
        use rand::Rng;
        let key: u128 = rand::thread_rng().gen();
        Arc::new(Step {
            key: format!("{key:032x}"),
            members: Mutex::default(),
            held: AtomicUsize::new(0),
            released: Notify::new(),
            ended: Mutex::new(None),
        })
    }

    fn why_ended(&self) -> String {
        self.ended.lock().expect("not poisoned").clone().unwrap_or_else(|| "the step was not started".into())
    }
}

/// A member's hold on its step: the last one let go of kills an srun that is still running (a
/// node herd gave up on keeps it waiting).
struct Hold(Arc<Step>);

impl Drop for Hold {
    fn drop(&mut self) {
        if self.0.held.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.released.notify_one();
        }
    }
}

/// One node's part of a fleet step, as the transport hands it out: its exit status.
pub struct Member {
    hold: Hold,
    exit: oneshot::Receiver<i32>,
}

impl Member {
    pub async fn wait(self) -> TransportExit {
        match self.exit.await {
            Ok(status) => TransportExit::Code(status),
            Err(_) => TransportExit::Disconnected(format!(
                "its task in the step ended without reporting back ({})",
                self.hold.0.why_ended()
            )),
        }
    }
}

/// The listener every fleet step of this herd connects back to, and the steps it serves.
struct Listener {
    port: u16,
    steps: Mutex<HashMap<String, Weak<Step>>>,
}

static LISTENER: OnceCell<Arc<Listener>> = OnceCell::const_new();

async fn listener() -> Result<Arc<Listener>, TransportError> {
    LISTENER
        .get_or_try_init(|| async {
            // Every node of a step connects twice within moments: a backlog of the kernel's
            // most (`somaxconn`, 4096 by default) rather than tokio's 128, beyond which a
            // node's connect waits a second for its SYN to be sent again.
            let bind = || {
                let socket = tokio::net::TcpSocket::new_v4()?;
                socket.bind(std::net::SocketAddr::from(([0, 0, 0, 0], 0)))?;
                socket.listen(LISTEN_BACKLOG)
            };
            let socket = bind().map_err(|e| {
                TransportError::Slurm(format!("cannot listen for the nodes of a fleet step: {e}"))
            })?;
            let listener = Arc::new(Listener { port: socket.local_addr()?.port(), steps: Mutex::default() });
            tokio::spawn(accept(socket, Arc::downgrade(&listener)));
            Ok::<_, TransportError>(listener)
        })
        .await
        .cloned()
}

async fn accept(socket: TcpListener, listener: Weak<Listener>) {
    loop {
        let stream = match socket.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, say: the queue waits, rather than a loop that spins.
                tracing::warn!("the fleet step's listener cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(listener) = listener.upgrade() else { return };
        tokio::spawn(async move {
            if let Err(why) = greet(&listener, stream).await {
                tracing::debug!("a connection to the fleet step's listener refused: {why}");
            }
        });
    }
}

/// Read a connection's hello (`KEY NODE KIND [STATUS]`) and hand the connection to its node.
async fn greet(listener: &Listener, mut stream: TcpStream) -> Result<(), String> {
    let hello = tokio::time::timeout(HELLO_DEADLINE, read_line(&mut stream))
        .await
        .map_err(|_| "no hello".to_string())?
        .map_err(|e| e.to_string())?;
    let mut words = hello.split_whitespace();
    let (Some(key), Some(node), Some(kind)) = (words.next(), words.next(), words.next()) else {
        return Err(format!("a malformed hello of {} bytes", hello.len()));
    };
    let step = listener.steps.lock().expect("not poisoned").get(key).and_then(Weak::upgrade);
    let step = step.ok_or("no step has that key")?;
    let status = words.next();
    let io = {
        let mut members = step.members.lock().expect("not poisoned");
        let slots = members.get_mut(node).ok_or_else(|| format!("node {node} is not in the step"))?;
        let twice = || format!("node {node} connected twice");
        match kind {
            "io" => {
                let stdout = slots.stdout.take().ok_or_else(twice)?;
                let stdin = slots.stdin.take().ok_or_else(twice)?;
                let held = std::mem::replace(&mut *slots.held.lock().expect("not poisoned"), Held::Sent);
                let Held::Holding(held) = held else { return Err(twice()) };
                (stdout, stdin, std::mem::take(&mut slots.command), held)
            }
            "err" => {
                let stderr = slots.stderr.take().ok_or_else(twice)?;
                let _ = stderr.send(stream.into_split().0);
                return Ok(());
            }
            "exit" => {
                let status = status.and_then(|s| s.parse().ok()).ok_or("an exit without a status")?;
                let _ = slots.exit.take().ok_or("a second exit")?.send(status);
                return Ok(());
            }
            other => return Err(format!("an unknown connection kind {other:?}")),
        }
    };
    let (stdout, stdin, command, held) = io;
    let header = format!("{}\n", command.len());
    stream.write_all(header.as_bytes()).await.map_err(|e| e.to_string())?;
    stream.write_all(command.as_bytes()).await.map_err(|e| e.to_string())?;
    // What the node was sent before it connected (its env block, a stop) comes first.
    stream.write_all(&held).await.map_err(|e| e.to_string())?;
    let (read, write) = stream.into_split();
    let _ = stdout.send(read);
    let _ = stdin.send(write);
    Ok(())
}

/// One line, read a byte at a time: what follows it on the connection is the node's.
async fn read_line(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut line = Vec::new();
    loop {
        let byte = stream.read_u8().await?;
        if byte == b'\n' || line.len() > 512 {
            return Ok(String::from_utf8_lossy(&line).into_owned());
        }
        line.push(byte);
    }
}

static GATHERING: Mutex<Option<HashMap<GatherKey, Vec<Gathering>>>> = Mutex::new(None);

/// Members waiting to be started together, for one job and step name.
struct Gathering {
    step: Arc<Step>,
    target: SlurmTarget,
    nodes: Vec<String>,
    first: Instant,
    last: Instant,
}

/// What a gathering is for: its job and step name, the site's srun arguments, and whether its
/// members are agents or commands whose output is collected (a probe round and the agents
/// that start beside it are two steps, not one split wherever a node is in both).
type GatherKey = (String, String, Vec<String>, Kind);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Agent,
    Output,
}

/// How many fleet steps' sruns are running, and a wake-up when one ends.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
static AN_SRUN_ENDED: Notify = Notify::const_new();

/// Wait (a few seconds at most) for every fleet step this herd started to end.
pub async fn settle() {
    let _ = tokio::time::timeout(SETTLE, async {
        while RUNNING.load(Ordering::Acquire) > 0 {
            let ended = AN_SRUN_ENDED.notified();
            if RUNNING.load(Ordering::Acquire) == 0 {
                break;
            }
            tokio::time::timeout(Duration::from_millis(200), ended).await.ok();
        }
    })
    .await;
}

/// Start `shell` on the target's node as its task of a fleet step: the stdio are the node's
/// connections, there once it has connected back (until then reads wait and writes are held).
pub async fn spawn(target: &SlurmTarget, shell: &str) -> Result<AgentProcess, TransportError> {
    join(target, shell, Kind::Agent).await
}

async fn join(target: &SlurmTarget, shell: &str, kind: Kind) -> Result<AgentProcess, TransportError> {
    let listener = listener().await?;
    let (stdout, stdout_rx) = oneshot::channel();
    let (stdin, stdin_rx) = oneshot::channel();
    let (stderr, stderr_rx) = oneshot::channel();
    let (exit, exit_rx) = oneshot::channel();
    let held = Arc::new(Mutex::new(Held::Holding(Vec::new())));
    let slots = Slots {
        command: slurm::step_shell(shell),
        held: held.clone(),
        stdout: Some(stdout),
        stdin: Some(stdin),
        stderr: Some(stderr),
        exit: Some(exit),
    };
    let step = gather(&listener, target, kind, slots);
    Ok(AgentProcess {
        stdin: super::session::ControlLine::new(Box::new(HeldWrite { conn: Lazy::Waiting(stdin_rx), held })),
        stdout: Box::new(Lazy::Waiting(stdout_rx)),
        stderr: Box::new(Lazy::Waiting(stderr_rx)),
        handle: AgentHandle::Step(Member { hold: Hold(step), exit: exit_rx }),
    })
}

/// Add the node to a step gathering for its job, and return that step: the first gathering
/// that does not hold the node yet (a probe round and the agents that start beside it, each
/// with one command per node, make two steps).
fn gather(listener: &Arc<Listener>, target: &SlurmTarget, kind: Kind, slots: Slots) -> Arc<Step> {
    let key = (target.job_id.clone(), target.step_name.clone(), target.srun_args.clone(), kind);
    let mut all = GATHERING.lock().expect("not poisoned");
    let gatherings = all.get_or_insert_with(HashMap::new).entry(key.clone()).or_default();
    let now = Instant::now();
    let i = match gatherings.iter().position(|g| !g.nodes.contains(&target.node)) {
        Some(i) => i,
        None => {
            let step = Step::new();
            listener.steps.lock().expect("not poisoned").insert(step.key.clone(), Arc::downgrade(&step));
            tokio::spawn(start_when_gathered(listener.clone(), key, step.key.clone()));
            gatherings.push(Gathering {
                step,
                target: target.clone(),
                nodes: Vec::new(),
                first: now,
                last: now,
            });
            gatherings.len() - 1
        }
    };
    let g = &mut gatherings[i];
    g.nodes.push(target.node.clone());
    g.last = now;
    g.step.members.lock().expect("not poisoned").insert(target.node.clone(), slots);
    // Counted while the gathering is held: a member let go of before another joins cannot
    // leave a wake-up behind that kills the step's srun under the newcomer.
    g.step.held.fetch_add(1, Ordering::AcqRel);
    g.step.clone()
}

/// Wait until no member has joined the gathering (its step's `step_key`) for a moment, or it
/// has gathered long enough, then start its step.
async fn start_when_gathered(listener: Arc<Listener>, key: GatherKey, step_key: String) {
    loop {
        tokio::time::sleep(GATHER_QUIET).await;
        let mut all = GATHERING.lock().expect("not poisoned");
        let Some(gatherings) = all.as_mut().and_then(|all| all.get_mut(&key)) else { return };
        let Some(i) = gatherings.iter().position(|g| g.step.key == step_key) else { return };
        let g = &gatherings[i];
        if g.last.elapsed() >= GATHER_QUIET || g.first.elapsed() >= GATHER_MOST {
            let g = gatherings.remove(i);
            tokio::spawn(launch(listener, g));
            return;
        }
    }
}

/// srun's arguments for the gathered step: one task on each of `nodes`, beside herd's other
/// steps, not ended when one node fails (`--no-kill`), its stdin from nowhere.
pub fn srun_argv(target: &SlurmTarget, step_name: &str, nodes: &[String]) -> Vec<String> {
    let n = nodes.len().to_string();
    let nodelist = nodes.join(",");
    let mut argv: Vec<String> = [
        "--jobid",
        &target.job_id,
        "--nodes",
        &n,
        "--ntasks",
        &n,
        "--ntasks-per-node=1",
        "--nodelist",
        &nodelist,
        "--overlap",
        "--no-kill",
        "--input=none",
        "--job-name",
        step_name,
        "--export=ALL",
        "--mpi=none",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    argv.extend(target.srun_args.iter().cloned());
    // After the site's: one node's end (a failed job, a task that could not connect) never
    // ends the others' tasks, whatever the site's KillOnBadExit or WaitTime say. herd ends
    // them, each with its own teardown.
    argv.extend(["--kill-on-bad-exit=0".into(), "--wait=0".into()]);
    argv.extend(["--".into(), "bash".into(), "-c".into(), STEP_SCRIPT.into(), "herd-step".into()]);
    argv
}

/// Run the gathered step's srun until it ends (or every member has been let go of), then
/// close the step: members that never connected hear why.
async fn launch(listener: Arc<Listener>, g: Gathering) {
    let step = g.step;
    let mut command = Command::new("srun");
    command
        .args(srun_argv(&g.target, &slurm::own_step_name(&g.target), &g.nodes))
        .env("HERD_STEP_PORT", listener.port.to_string())
        .env("HERD_STEP_KEY", &step.key)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    for var in ALLOCATION_TASK_VARS {
        command.env_remove(var);
    }
    crate::limits::as_started(&mut command);
    tracing::debug!(nodes = g.nodes.len(), "starting one step for {} nodes", g.nodes.len());
    let why = match command.spawn() {
        Err(e) => format!("cannot start srun: {e}"),
        Ok(mut child) => {
            RUNNING.fetch_add(1, Ordering::AcqRel);
            let words = tokio::spawn(srun_words(child.stderr.take().expect("piped")));
            let status = tokio::select! {
                status = child.wait() => status,
                _ = all_released(&step) => match tokio::time::timeout(SRUN_GRACE, child.wait()).await {
                    Ok(status) => status,
                    Err(_) => {
                        let _ = child.start_kill();
                        child.wait().await
                    }
                },
            };
            RUNNING.fetch_sub(1, Ordering::AcqRel);
            AN_SRUN_ENDED.notify_waiters();
            let words = words.await.unwrap_or_default();
            let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
            match words.is_empty() {
                true => format!("srun {status}"),
                false => format!("srun {status}: {words}"),
            }
        }
    };
    *step.ended.lock().expect("not poisoned") = Some(why);
    tokio::time::sleep(LATE_CONNECTIONS).await;
    listener.steps.lock().expect("not poisoned").remove(&step.key);
    step.members.lock().expect("not poisoned").clear();
}

/// Once no member of the step is held any more.
async fn all_released(step: &Step) {
    while step.held.load(Ordering::Acquire) > 0 {
        step.released.notified().await;
    }
}

/// srun's own words (a node it could not start a task on, a node it lost), logged as they
/// come; the last few are kept, for the nodes that never connected.
async fn srun_words(stderr: tokio::process::ChildStderr) -> String {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let mut last: std::collections::VecDeque<String> = Default::default();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!("{line}");
        if last.len() == 3 {
            last.pop_front();
        }
        last.push_back(line);
    }
    Vec::from(last).join("; ")
}

/// Run `shell` on the node as its task of a fleet step, and collect its output.
pub async fn output(target: &SlurmTarget, shell: &str) -> Result<std::process::Output, TransportError> {
    use std::os::unix::process::ExitStatusExt;
    let process = join(target, shell, Kind::Output).await?;
    drop(process.stdin);
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let (mut out, mut err) = (process.stdout, process.stderr);
    let (a, b) = tokio::join!(out.read_to_end(&mut stdout), err.read_to_end(&mut stderr));
    a.and(b).map_err(|e| TransportError::Slurm(format!("reading the node's output: {e}")))?;
    let AgentHandle::Step(member) = process.handle else { unreachable!("spawn makes a step member") };
    let status = match member.wait().await {
        TransportExit::Code(code) => std::process::ExitStatus::from_raw((code & 0xff) << 8),
        TransportExit::Signal(sig) => std::process::ExitStatus::from_raw(sig & 0x7f),
        TransportExit::Disconnected(why) => return Err(TransportError::Slurm(why)),
    };
    Ok(std::process::Output { status, stdout, stderr })
}

/// A connection that is not there yet: reads wait for it, and find the end if it never comes
/// (writes go through `HeldWrite`).
enum Lazy<T> {
    Waiting(oneshot::Receiver<T>),
    Ready(T),
    Never,
}

impl<T> Lazy<T> {
    /// The connection, once it is there: `None` if it never will be.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Option<&mut T>> {
        if let Lazy::Waiting(rx) = self {
            *self = match std::task::ready!(Pin::new(rx).poll(cx)) {
                Ok(t) => Lazy::Ready(t),
                Err(_) => Lazy::Never,
            };
        }
        Poll::Ready(match self {
            Lazy::Ready(t) => Some(t),
            _ => None,
        })
    }
}

use std::future::Future as _;

fn never() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the node never connected back")
}

impl<T: AsyncRead + Unpin> AsyncRead for Lazy<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match std::task::ready!(self.get_mut().poll_ready(cx)) {
            Some(t) => Pin::new(t).poll_read(cx, buf),
            None => Poll::Ready(Ok(())),
        }
    }
}

/// A node's stdin before it has connected: what is written is held, and sent by the listener
/// right after the node's command (`greet`), so that a writer never waits on a node that is
/// slow to connect, or never does. Once sent, writes go to the connection.
enum Held {
    Holding(Vec<u8>),
    Sent,
}

/// Bytes held for a node that has not connected, at most (its env block is a few KiB).
const HELD_MOST: usize = 4 * 1024 * 1024;

struct HeldWrite {
    conn: Lazy<OwnedWriteHalf>,
    held: Arc<Mutex<Held>>,
}

impl HeldWrite {
    /// `Some` once the connection is there (or will never be); `None` while bytes are held.
    fn poll_conn(&mut self, cx: &mut Context<'_>) -> Poll<Option<std::io::Result<&mut OwnedWriteHalf>>> {
        if matches!(self.conn, Lazy::Waiting(_))
            && matches!(*self.held.lock().expect("not poisoned"), Held::Holding(_))
        {
            return Poll::Ready(None);
        }
        // Sent (the connection is on its way), or ready, or never.
        Poll::Ready(Some(std::task::ready!(self.conn.poll_ready(cx)).ok_or_else(never)))
    }
}

impl AsyncWrite for HeldWrite {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        match std::task::ready!(this.poll_conn(cx)) {
            Some(conn) => Pin::new(conn?).poll_write(cx, buf),
            None => {
                let mut held = this.held.lock().expect("not poisoned");
                let Held::Holding(bytes) = &mut *held else { unreachable!("holding, just seen") };
                if bytes.len() + buf.len() > HELD_MOST {
                    return Poll::Ready(Err(never()));
                }
                bytes.extend_from_slice(buf);
                Poll::Ready(Ok(buf.len()))
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match std::task::ready!(self.get_mut().poll_conn(cx)) {
            Some(conn) => Pin::new(conn?).poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().conn {
            Lazy::Ready(t) => Pin::new(t).poll_shutdown(cx),
            _ => Poll::Ready(Ok(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(node: &str) -> SlurmTarget {
        SlurmTarget {
            node: node.into(),
            job_id: "42".into(),
            srun_args: vec!["--partition=p".into()],
            step_name: "herd-x".into(),
            per_node_steps: false,
        }
    }

    #[test]
    fn one_task_on_each_node_that_outlives_a_failed_node_with_the_sites_args_last() {
        let argv = srun_argv(&target("n1"), "herd-x-h-7", &["n1".into(), "n2".into(), "n3".into()]);
        let s = argv.join(" ");
        assert!(
            s.starts_with(
                "--jobid 42 --nodes 3 --ntasks 3 --ntasks-per-node=1 --nodelist n1,n2,n3 --overlap --no-kill"
            ),
            "{s}"
        );
        let sep = argv.iter().position(|a| a == "--").unwrap();
        // The site's args, then herd's: no node's end ends the others' tasks.
        assert_eq!(&argv[sep - 3..sep], ["--partition=p", "--kill-on-bad-exit=0", "--wait=0"]);
        assert_eq!(&argv[sep + 1..sep + 3], ["bash", "-c"]);
        // No key and no port in the arguments: they are in srun's environment.
        assert!(!s.contains("HERD_STEP_KEY="));
    }

    #[test]
    fn the_node_script_passes_shellcheck() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("step.sh");
        std::fs::write(&path, STEP_SCRIPT).unwrap();
        let out = std::process::Command::new("shellcheck").args(["-s", "bash"]).arg(&path).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    }

    /// The node script against a listener of this process, as a node would run it: its
    /// command arrives on the first connection, stdin and stdout go over it, stderr over the
    /// second, the exit status over the third.
    #[tokio::test]
    async fn a_task_connects_back_runs_its_command_and_reports_its_status() {
        let listener = listener().await.unwrap();
        let step = Step::new();
        listener.steps.lock().unwrap().insert(step.key.clone(), Arc::downgrade(&step));
        let (stdout, out_rx) = oneshot::channel();
        let (stdin, in_rx) = oneshot::channel();
        let (stderr, err_rx) = oneshot::channel();
        let (exit, exit_rx) = oneshot::channel();
        let command = "read -r line; echo \"got $line\"; echo oops >&2; exit 3".to_string();
        let held = Arc::new(Mutex::new(Held::Holding(Vec::new())));
        // Written, and the stdin closed, before the node has even started: held, then sent
        // after its command, then the end of its stdin.
        let mut control = HeldWrite { conn: Lazy::Waiting(in_rx), held: held.clone() };
        control.write_all(b"hello\n").await.unwrap();
        control.flush().await.unwrap();
        drop(control);
        let slots = Slots {
            command,
            held,
            stdout: Some(stdout),
            stdin: Some(stdin),
            stderr: Some(stderr),
            exit: Some(exit),
        };
        step.members.lock().unwrap().insert("n1".into(), slots);
        let task = tokio::process::Command::new("bash")
            .args(["-c", STEP_SCRIPT, "herd-step"])
            .env("SLURM_LAUNCH_NODE_IPADDR", "127.0.0.1")
            .env("HERD_STEP_PORT", listener.port.to_string())
            .env("HERD_STEP_KEY", &step.key)
            .env("SLURMD_NODENAME", "n1")
            .spawn()
            .unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        Lazy::Waiting(out_rx).read_to_end(&mut out).await.unwrap();
        Lazy::Waiting(err_rx).read_to_end(&mut err).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&out), "got hello\n");
        assert_eq!(String::from_utf8_lossy(&err), "oops\n");
        assert_eq!(exit_rx.await.unwrap(), 3);
        assert_eq!(task.wait_with_output().await.unwrap().status.code(), Some(3));
    }

    #[tokio::test]
    async fn a_connection_that_never_comes_reads_as_the_end_and_refuses_writes() {
        let (tx, rx) = oneshot::channel::<OwnedReadHalf>();
        drop(tx);
        let mut buf = Vec::new();
        assert_eq!(Lazy::Waiting(rx).read_to_end(&mut buf).await.unwrap(), 0);
        // A stdin whose held bytes went out with the node's command, but whose connection then
        // failed: writes are refused.
        let (tx, rx) = oneshot::channel::<OwnedWriteHalf>();
        drop(tx);
        let mut stdin = HeldWrite { conn: Lazy::Waiting(rx), held: Arc::new(Mutex::new(Held::Sent)) };
        assert!(stdin.write_all(b"x").await.is_err());
    }
}
