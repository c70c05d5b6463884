//! How herd reaches a node: one SSH master connection per node (ControlMaster, through the
//! system OpenSSH client, so ~/.ssh/config, ssh-agent and ProxyJump keep working), with every
//! later action multiplexed over it; inside a Slurm allocation, one job step for the nodes
//! that start together (`step`), or a step per node and action (`slurm`); or this machine
//! directly, for `localhost`. In unit tests, a simulated node (`sim`).

pub mod handshake;
pub mod session;
#[cfg(test)]
pub mod sim;
pub mod slurm;
pub mod step;

use std::num::NonZeroUsize;

use crate::policy::ConnectOptions;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use openssh::{ControlPersist, KnownHosts, Session, SessionBuilder};
use tokio::io::AsyncRead;

use crate::config::KnownHostsPolicy;
use crate::plan::{SlurmTarget, SshTarget, Transport};
use crate::remote;
use crate::remote::agent::AgentInvocation;
use crate::remote::protocol::AgentMessage;
pub use handshake::OnBusy;

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("cannot connect over ssh: {0}")]
    Connect(String),
    #[error("cannot start a command over ssh: {0}")]
    Spawn(String),
    /// Slurm will not run a step on the node, or cannot be asked.
    #[error("{0}")]
    Slurm(String),
    #[error("cannot start a local command: {0}")]
    Local(#[from] std::io::Error),
}

/// `command` as the line for the node's login shell (`remote::shell::for_login_shell`), if it takes it.
fn login_line(command: &str) -> Result<String, TransportError> {
    let line = remote::shell::for_login_shell(command);
    if line.len() > remote::shell::MAX_LOGIN_LINE {
        return Err(TransportError::Spawn(format!(
            "the command is {} bytes for the login shell, more than the {} it takes in one argument",
            line.len(),
            remote::shell::MAX_LOGIN_LINE
        )));
    }
    Ok(line)
}

/// An open way to run commands on one node.
pub enum Connection {
    Local,
    Ssh(SshLink),
    /// Nothing is held open: each action is a job step of its own.
    Slurm(SlurmTarget),
    /// A unit test's node, whose agent is a script (`sim`).
    #[cfg(test)]
    Sim(sim::SimNode),
}

/// A node's SSH master connection, with what it takes to open it again: a connection found
/// dead when herd needs it (the network dropped it, or it expired while herd was stalled) is
/// re-established once before anything on it counts as failed.
pub struct SshLink {
    session: std::sync::Mutex<Arc<Session>>,
    /// How many times the master was connected again: what was started on an earlier one
    /// went with it.
    renewals: std::sync::atomic::AtomicU32,
    target: SshTarget,
    options: ConnectOptions,
}

/// An agent started ahead of its use (its login overlapping other work), with what it was
/// started as and when.
/// Its pipes are `session::AgentSession`'s alone.
pub struct Started {
    pub invocation: AgentInvocation,
    process: AgentProcess,
    /// Its stderr as read so far, for an agent whose first messages were read already (the
    /// preflight's probe phase): what is buffered is the next reader's.
    messages: Option<session::Messages>,
    pub at: tokio::time::Instant,
}

impl Started {
    /// Start `inv` on `conn` now.
    pub async fn start(conn: &Connection, inv: AgentInvocation) -> Result<Started, TransportError> {
        Started::start_with(conn, inv, Renew::Once).await
    }

    /// Start `inv` on `conn` now, on its connection as it is: an SSH master found dead is not
    /// connected again (`start` does that, which can take the connect timeout), and the start
    /// fails at once. For an agent started ahead of its use, which must hold nothing up.
    pub async fn start_as_is(conn: &Connection, inv: AgentInvocation) -> Result<Started, TransportError> {
        Started::start_with(conn, inv, Renew::Never).await
    }

    async fn start_with(
        conn: &Connection,
        inv: AgentInvocation,
        renew: Renew,
    ) -> Result<Started, TransportError> {
        let at = tokio::time::Instant::now();
        let process = conn.spawn_agent(&inv, renew).await?;
        Ok(Started { invocation: inv, process, messages: None, at })
    }

    /// Ends an agent that will not be used, having started nothing: its stdin closes now, and
    /// the agent ends as at EOF. What it said is still to be read (`Ending::said`).
    pub fn end_unused(self) -> Ending {
        let AgentProcess { stdin, stderr, handle, .. } = self.process;
        drop(stdin);
        Ending { messages: self.messages.unwrap_or_else(|| session::Messages::new(stderr)), handle }
    }

    /// The agent, if it was started as `inv`; otherwise a new one (the early one ends, having
    /// started nothing, as its stdin closes).
    pub async fn take_or_start(
        early: Option<Started>,
        conn: &Connection,
        inv: &AgentInvocation,
    ) -> Result<Started, TransportError> {
        match early {
            Some(s) if s.invocation == *inv => Ok(s),
            _ => Started::start(conn, inv.clone()).await,
        }
    }
}

/// An agent told to end before its job (`Started::end_unused`).
pub struct Ending {
    messages: session::Messages,
    handle: AgentHandle,
}

impl Ending {
    /// What the agent said (its sweep's lines among them), read until its stderr ends or
    /// `until`. Its process is let go after.
    pub async fn said(mut self, until: tokio::time::Instant) -> Vec<AgentMessage> {
        let mut said = Vec::new();
        let _ = tokio::time::timeout_at(until, async {
            while let Some(message) = self.messages.next().await {
                said.push(message);
            }
        })
        .await;
        drop(self.handle);
        said
    }
}

/// The running agent of one node: its pipes and a handle to wait on it.
pub struct AgentProcess {
    stdin: session::ControlLine,
    stdout: Box<dyn AsyncRead + Send + Unpin>,
    stderr: Box<dyn AsyncRead + Send + Unpin>,
    handle: AgentHandle,
}

impl AgentProcess {
    /// A child of herd's with its three pipes, as an agent: `handle` says what it is.
    fn piped(
        mut child: tokio::process::Child,
        handle: fn(tokio::process::Child) -> AgentHandle,
    ) -> AgentProcess {
        AgentProcess {
            stdin: session::ControlLine::new(Box::new(child.stdin.take().expect("piped"))),
            stdout: Box::new(child.stdout.take().expect("piped")),
            stderr: Box::new(child.stderr.take().expect("piped")),
            handle: handle(child),
        }
    }
}

pub enum AgentHandle {
    /// The agent itself, a child of herd.
    Child(tokio::process::Child),
    /// The `srun` that carries the agent's step.
    Srun(tokio::process::Child),
    /// The agent's task in a fleet step.
    Step(step::Member),
    Ssh(openssh::Child<Arc<Session>>),
    #[cfg(test)]
    Sim(sim::Ended),
}

/// How an agent process ended, as the transport sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportExit {
    Code(i32),
    Signal(i32),
    /// The connection went away before an exit status arrived.
    Disconnected(String),
}

/// How many commands herd opens at once over its SSH masters. While a command's channel opens,
/// herd holds both ends of its three pipes and its socket to the master (7 descriptors); once
/// it is open, only its own ends and the socket (4). On a loaded host, with every node's
/// command opening at once, each node costs the 7: opening a few dozen at a time bounds that,
/// and costs a local round trip each (the login on the node comes after, in parallel).
const OPENING_AT_ONCE: usize = 32;
static OPENING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(OPENING_AT_ONCE);

/// Where SSH master connections keep their control sockets: herd's own folder (see
/// `state::ssh_dir`), set once at start-up, after the folders a killed herd left are cleaned.
static CONTROL_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Use `dir` for every later SSH master connection's control socket. The first call wins.
pub fn use_control_dir(dir: PathBuf) {
    let _ = CONTROL_DIR.set(dir);
}

/// Connect to a node. Over SSH, the handshake waits its turn, and a busy sshd is tried again
/// or not as `on_busy` says (see `handshake`).
pub async fn connect(
    transport: &Transport,
    options: ConnectOptions,
    on_busy: OnBusy,
) -> Result<Connection, TransportError> {
    match transport {
        Transport::Local => Ok(Connection::Local),
        Transport::Slurm(target) => Ok(Connection::Slurm(target.clone())),
        Transport::Ssh(target) => Ok(Connection::Ssh(SshLink {
            session: std::sync::Mutex::new(Arc::new(connect_ssh(target, options, on_busy).await?)),
            renewals: Default::default(),
            target: target.clone(),
            options,
        })),
    }
}

async fn connect_ssh(
    target: &SshTarget,
    options: ConnectOptions,
    on_busy: OnBusy,
) -> Result<Session, TransportError> {
    let mut b = SessionBuilder::default();
    b.known_hosts_check(match target.known_hosts {
        KnownHostsPolicy::Strict => KnownHosts::Strict,
        KnownHostsPolicy::AcceptNew => KnownHosts::Add,
    })
    .connect_timeout(target.connect_timeout)
    .server_alive_interval(options.alive_interval.max(Duration::from_secs(1)))
    // If herd dies without closing the master, it exits on its own once idle that long.
    .control_persist(ControlPersist::IdleFor(
        NonZeroUsize::new(options.idle_persist.as_secs() as usize).unwrap_or(NonZeroUsize::MIN),
    ));
    if let Some(dir) = CONTROL_DIR.get() {
        b.control_directory(dir);
    }
    if let Some(user) = &target.user {
        b.user(user.clone());
    }
    if let Some(port) = target.port {
        b.port(port);
    }
    if let Some(key) = &target.identity_file {
        b.keyfile(expand_tilde(key));
    }
    if let Some(file) = &target.known_hosts_file {
        b.user_known_hosts_file(expand_tilde(file));
    }
    let mut tries = 0;
    loop {
        let tried = {
            let _turn = handshake::turn().await;
            b.connect_mux(&target.host).await
        };
        let error = match tried {
            Ok(session) => return Ok(session),
            Err(e) => error_chain(&e),
        };
        tries += 1;
        let again = match on_busy {
            OnBusy::TryAgain => handshake::again_after(&error, tries, rand::random()),
            OnBusy::GiveUp => None,
        };
        match again {
            Some(wait) => {
                tracing::debug!(host = %target.host, "sshd busy ({error}): trying again in {wait:?}");
                tokio::time::sleep(wait).await;
            }
            None => return Err(TransportError::Connect(handshake::gave_up(error, tries))),
        }
    }
}

impl SshLink {
    fn session(&self) -> Arc<Session> {
        self.session.lock().expect("not poisoned").clone()
    }

    /// Run `attempt` on the session; when it fails and the master is found dead, connect again
    /// once and run it on the new one.
    async fn with_session<T, F, Fut>(&self, attempt: F) -> Result<T, TransportError>
    where
        F: Fn(Arc<Session>) -> Fut,
        Fut: std::future::Future<Output = Result<T, TransportError>>,
    {
        let session = self.session();
        match attempt(session.clone()).await {
            Ok(v) => Ok(v),
            Err(first) => {
                if session.check().await.is_ok() {
                    return Err(first);
                }
                tracing::debug!(host = %self.target.host, "ssh master gone ({first}): connecting again");
                let fresh = Arc::new(connect_ssh(&self.target, self.options, OnBusy::GiveUp).await?);
                // Counted before the swap, under the lock: whoever sees the old count may
                // hold either master, whoever sees the new one holds the new.
                {
                    let mut session = self.session.lock().expect("not poisoned");
                    self.renewals.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    *session = fresh.clone();
                }
                attempt(fresh).await
            }
        }
    }
}

/// Whether an agent's start may connect a dead SSH master again (`SshLink::with_session`).
#[derive(Clone, Copy)]
enum Renew {
    Once,
    Never,
}

impl Connection {
    /// Whether an agent started on it ahead of its use (during a restart's backoff) is cheap
    /// to drop: over SSH or here, it is one session that ends as its stdin closes. Through
    /// Slurm each agent is a step, which a plan changed after the backoff would cancel.
    pub fn starts_ahead(&self) -> bool {
        match self {
            Connection::Local | Connection::Ssh(_) => true,
            Connection::Slurm(_) => false,
            #[cfg(test)]
            Connection::Sim(_) => true,
        }
    }

    /// Which master connection it holds now, of those it has held (0 but over SSH): an agent
    /// started on an earlier one is gone with it.
    pub fn generation(&self) -> u32 {
        match self {
            Connection::Ssh(link) => link.renewals.load(std::sync::atomic::Ordering::SeqCst),
            _ => 0,
        }
    }

    /// Start the node agent with piped stdin, stdout and stderr; with a fence, its stdin
    /// beats from now on (see `ControlLine::beating`).
    async fn spawn_agent(&self, inv: &AgentInvocation, renew: Renew) -> Result<AgentProcess, TransportError> {
        let mut process = self.spawn_piped(inv, renew).await?;
        if inv.fence_secs.is_some() {
            process.stdin = process.stdin.beating(Duration::from_secs(inv.heartbeat_secs.max(1)));
        }
        Ok(process)
    }

    async fn spawn_piped(&self, inv: &AgentInvocation, renew: Renew) -> Result<AgentProcess, TransportError> {
        match self {
            Connection::Local => {
                let argv = inv.local_argv();
                let mut command = tokio::process::Command::new(&argv[0]);
                command.args(&argv[1..]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
                crate::limits::as_started(&mut command);
                // The agent is a child subreaper, as on a remote node (see
                // `AgentInvocation::remote_command`): what the job orphans stays its descendant.
                // SAFETY: prctl is async-signal-safe, and touches nothing of the parent's.
                unsafe {
                    command.pre_exec(|| {
                        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
                        Ok(())
                    });
                }
                Ok(AgentProcess::piped(command.spawn()?, AgentHandle::Child))
            }
            Connection::Slurm(target) if !target.per_node_steps => {
                step::spawn(target, &inv.remote_command()).await
            }
            Connection::Slurm(target) => {
                let child = slurm::srun(target, &inv.remote_command())
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| TransportError::Slurm(format!("cannot start srun: {e}")))?;
                Ok(AgentProcess::piped(child, AgentHandle::Srun))
            }
            Connection::Ssh(link) => {
                let open = |session| async move {
                    // The login line holds the node scripts (tens of KiB): it is built once
                    // its turn to open has come, and gone once it has, so that the launch
                    // host holds OPENING_AT_ONCE of them at most, not one per node.
                    let _opening = OPENING.acquire().await.expect("never closed");
                    let command = login_line(&inv.remote_command())?;
                    Session::to_raw_command(session, command)
                        .stdin(openssh::Stdio::piped())
                        .stdout(openssh::Stdio::piped())
                        .stderr(openssh::Stdio::piped())
                        .spawn()
                        .await
                        .map_err(|e| TransportError::Spawn(error_chain(&e)))
                };
                let mut child = match renew {
                    Renew::Once => link.with_session(open).await?,
                    Renew::Never => open(link.session()).await?,
                };
                // Taken out here so that wait() cannot close stdin: it is the agent's lifeline.
                let stdin = child.stdin().take().expect("piped");
                let stdout = child.stdout().take().expect("piped");
                let stderr = child.stderr().take().expect("piped");
                Ok(AgentProcess {
                    stdin: session::ControlLine::new(Box::new(stdin)),
                    stdout: Box::new(stdout),
                    stderr: Box::new(stderr),
                    handle: AgentHandle::Ssh(child),
                })
            }
            #[cfg(test)]
            Connection::Sim(node) => node.spawn(inv),
        }
    }

    /// Run a shell command on the node and collect its output.
    pub async fn output(&self, shell: &str) -> Result<std::process::Output, TransportError> {
        match self {
            Connection::Local => {
                let mut command = tokio::process::Command::new("sh");
                command.arg("-c").arg(shell).stdin(Stdio::null());
                crate::limits::as_started(&mut command);
                Ok(command.output().await?)
            }
            Connection::Slurm(target) if !target.per_node_steps => step::output(target, shell).await,
            Connection::Slurm(target) => slurm::output(target, shell).await,
            Connection::Ssh(link) => {
                link.with_session(|session| async move {
                    let spawn = |e: openssh::Error| TransportError::Spawn(error_chain(&e));
                    // Built in its turn, as the agent's (see `spawn_agent`).
                    let opening = OPENING.acquire().await.expect("never closed");
                    let child = (session.raw_command(login_line(shell)?))
                        .stdin(openssh::Stdio::null())
                        .stdout(openssh::Stdio::piped())
                        .stderr(openssh::Stdio::piped())
                        .spawn()
                        .await
                        .map_err(spawn)?;
                    drop(opening);
                    child.wait_with_output().await.map_err(spawn)
                })
                .await
            }
            #[cfg(test)]
            Connection::Sim(_) => Err(TransportError::Spawn("a simulated node runs no commands".into())),
        }
    }

    /// Whether the connection still works.
    pub async fn check(&self) -> Result<(), TransportError> {
        match self {
            Connection::Local => Ok(()),
            Connection::Slurm(target) => slurm::check(target).await,
            Connection::Ssh(link) => {
                link.session().check().await.map_err(|e| TransportError::Connect(error_chain(&e)))
            }
            #[cfg(test)]
            Connection::Sim(node) => node.check(),
        }
    }

    /// Close the master connection.
    pub async fn close(self) {
        if let Connection::Ssh(link) = self {
            if let Ok(session) = Arc::try_unwrap(link.session.into_inner().expect("not poisoned")) {
                if let Err(e) = session.close().await {
                    tracing::debug!("closing ssh master: {}", error_chain(&e));
                }
            }
        }
    }
}

impl AgentHandle {
    /// herd has given up on the node: an srun waiting on a node it cannot reach is killed
    /// (Slurm would keep it for as long as it takes to call the node down), its step then
    /// cancelled with herd's others; a fleet step's srun, once every node of it is given up on
    /// or done. An SSH client or a local agent is left to end with its connection or job.
    pub fn abandon(self) {
        if let AgentHandle::Srun(mut child) = self {
            let _ = child.start_kill();
            tokio::spawn(async move {
                let _ = child.wait().await;
            });
        }
    }

    pub async fn wait(self) -> TransportExit {
        use std::os::unix::process::ExitStatusExt;
        let status = match self {
            AgentHandle::Child(mut child) | AgentHandle::Srun(mut child) => {
                child.wait().await.map_err(|e| e.to_string())
            }
            AgentHandle::Ssh(child) => child.wait().await.map_err(|e| error_chain(&e)),
            AgentHandle::Step(member) => return member.wait().await,
            #[cfg(test)]
            AgentHandle::Sim(agent) => return agent.wait().await,
        };
        match status {
            Ok(s) => match (s.code(), s.signal()) {
                (Some(code), _) => TransportExit::Code(code),
                (None, Some(sig)) => TransportExit::Signal(sig),
                (None, None) => TransportExit::Disconnected("no exit status".into()),
            },
            Err(e) => TransportExit::Disconnected(e),
        }
    }
}

impl TransportError {
    /// How herd reached (or failed to reach) the node, for messages: `ssh`, `srun` or `local`.
    pub fn via(&self) -> &'static str {
        match self {
            TransportError::Slurm(_) => "srun",
            TransportError::Local(_) => "local",
            _ => "ssh",
        }
    }

    /// What to do about it.
    pub fn fix(&self) -> &'static str {
        match self {
            TransportError::Slurm(_) => slurm::FIX,
            _ => connect_fix(&self.to_string()),
        }
    }
}

/// A path from the config, with a leading `~/` meaning the home directory, as ssh reads it.
pub fn expand_tilde(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

/// What to do about a failed SSH connection, from ssh's own words: a changed host key is
/// not a host that is down.
pub fn connect_fix(error: &str) -> &'static str {
    let has = |s: &str| error.contains(s);
    if has("REMOTE HOST IDENTIFICATION HAS CHANGED") || has("Host key verification failed") {
        "the node's host key is not the one in known_hosts: if the node was reinstalled, remove the old key (ssh-keygen -R HOST, or in ssh.known_hosts_file); otherwise do not connect until you know why it changed"
    } else if has("Permission denied") || has("Too many authentication failures") {
        "the node refused the login: check ssh.user, ssh.identity_file and ssh-agent; `ssh HOST true` must work without a prompt"
    } else if has("Could not resolve hostname") || has("Name or service not known") {
        "the host name does not resolve: check it, or give the node an `addr`"
    } else if has("Connection refused") {
        "nothing listens for ssh there: check that sshd runs on the node, and ssh.port"
    } else if handshake::sshd_was_busy(error) {
        "the node's sshd was too busy to take the connection, tries apart: MaxStartups reached or its CPU starved; a bastion (ProxyJump) in front of the nodes needs MaxStartups above herd's handshakes at once (8 per core of this host, 16 at least)"
    } else {
        "check that the host is up and that `ssh <host> true` works without a prompt"
    }
}

/// An error and its sources on one line; ssh's own words are usually in the innermost one.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        let msg = inner.to_string();
        if !s.contains(&msg) {
            s.push_str(": ");
            s.push_str(msg.trim());
        }
        cur = inner.source();
    }
    s
}
