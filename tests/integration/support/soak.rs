//! The goodput soak (issue 41): one long training job on the testbed, faults one after
//! another on a seeded schedule, and what came of it: the training kept against the wall time
//! (ETTR), the time each fault cost, the nodes blamed, and what was left on the nodes. The
//! same schedule and the same script (`examples/train_resumable.py`) serve herd and its peers
//! (torchrun's elastic agent, a shell loop); the integration test runs its 3-minute form, the
//! bench its long one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use super::testbed::{CpuThrottle, Testbed};

/// The job every launcher runs, from the repository root.
pub const SCRIPT: &str = "examples/train_resumable.py";

/// How long a cut link stays down before it heals.
pub const CUT_FOR: Duration = Duration::from_secs(20);

/// How long a throttled node stays slow (a busy neighbour that leaves).
pub const THROTTLE_FOR: Duration = Duration::from_secs(60);

/// How long a node's logins stay slow after `Fault::SlowLogin`, and how slow.
pub const SLOW_FOR: Duration = Duration::from_secs(60);
pub const SLOW_LOGIN: f64 = 10.0;

/// How long the master port stays taken after `Fault::Port`, once it was free to take.
pub const PORT_HELD_FOR: Duration = Duration::from_secs(30);

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// One rank SIGKILLed (the OOM killer, a crash).
    Kill,
    /// One rank dies of SIGSEGV.
    Segv,
    /// One rank SIGSTOPped: a silent hang, the others blocked in the collective.
    Stop,
    /// The node's link down for [`CUT_FOR`], then up again.
    Cut,
    /// The node's link down for good: a spare must take its place.
    Lose,
    /// Every process of the node killed but its sshd (a reboot that came back).
    Reboot,
    /// The node throttled to 5 % of a core for [`THROTTLE_FOR`] (a straggler).
    Throttle,
    /// A rank SIGKILLed, and the master port (where a launcher listens on a node: the
    /// rendezvous store) taken by another process for [`PORT_HELD_FOR`] as soon as it is free:
    /// the restart meets it taken, as after a job whose port another grabbed. torchrun
    /// elastic's agents outlive their workers and keep their ports: for it, a kill.
    Port,
    /// The node's logins made slow ([`SLOW_LOGIN`] s, a shared home's conda init) for
    /// [`SLOW_FOR`], and a rank of it SIGKILLed: the restart pays the slow login.
    SlowLogin,
}

impl Fault {
    pub const ALL: [Fault; 9] = [
        Fault::Kill,
        Fault::Segv,
        Fault::Stop,
        Fault::Cut,
        Fault::Lose,
        Fault::Reboot,
        Fault::Throttle,
        Fault::Port,
        Fault::SlowLogin,
    ];

    /// The kind named `name` (see [`Fault::name`]).
    pub fn named(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Segv => "segv",
            Fault::Stop => "hang",
            Fault::Cut => "cut-link",
            Fault::Lose => "lose-node",
            Fault::Reboot => "reboot",
            Fault::Throttle => "throttle",
            Fault::Port => "port",
            Fault::SlowLogin => "slow-login",
        }
    }

    /// A fault of the node itself, for which blaming (quarantining) it is right.
    pub fn blames_the_node(self) -> bool {
        matches!(self, Fault::Lose | Fault::Throttle | Fault::Cut | Fault::Reboot)
    }
}

/// One fault of a schedule: `at` into the soak, and a random number that picks its target
/// among the nodes that hold a rank then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub at: Duration,
    pub fault: Fault,
    pub draw: u64,
}

/// xorshift64*: the same schedule from the same seed, on every machine.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The faults of a soak of `length`: the first at `first`, then one every `every`, each a
/// kind of `kinds` in a seeded order that uses every kind before any comes again (so that a
/// short soak meets many kinds), `Lose` at most `spares` times (each takes a spare for good).
/// Pure: the same arguments give the same schedule.
pub fn schedule(
    seed: u64,
    first: Duration,
    every: Duration,
    length: Duration,
    kinds: &[Fault],
    spares: usize,
) -> Vec<Planned> {
    let mut rng = Rng::new(seed);
    let mut bag: Vec<Fault> = Vec::new();
    let mut lost = 0;
    let mut out = Vec::new();
    let mut at = first;
    while at < length && !kinds.is_empty() {
        if bag.is_empty() {
            bag = kinds.iter().copied().filter(|&k| k != Fault::Lose || lost < spares).collect();
            // Fisher-Yates, drawn from the seed.
            for i in (1..bag.len()).rev() {
                bag.swap(i, (rng.next() % (i as u64 + 1)) as usize);
            }
        }
        let Some(fault) = bag.pop() else { break };
        lost += usize::from(fault == Fault::Lose);
        out.push(Planned { at, fault, draw: rng.next() });
        at += every;
    }
    out
}

/// `plan` with each fault moved later by a seeded share of `spread` (below it; in the same
/// order while `spread` is at most the faults' interval). With
/// faults every F seconds and checkpoints every K, F a multiple of K puts every fault at the
/// same point of the checkpoint cycle as a launcher's restarts leave it: one launcher loses
/// little at each fault and another nearly K, by luck. Spread over K, the lost work is a
/// draw, as on a cluster. Its own draws: `schedule`'s kinds and targets for a seed are
/// unchanged.
pub fn jittered(mut plan: Vec<Planned>, seed: u64, spread: Duration) -> Vec<Planned> {
    let mut rng = Rng::new(seed ^ 0x6A09_E667_F3BC_C908);
    let ms = spread.as_millis() as u64;
    for p in &mut plan {
        let shift = if ms == 0 { 0 } else { rng.next() % ms };
        p.at += Duration::from_millis(shift);
    }
    plan
}

/// A fault as it was injected: when, on which node (testbed index), and what was done.
#[derive(Debug, Clone)]
pub struct Injected {
    pub at: Duration,
    pub wall: SystemTime,
    pub fault: Fault,
    pub node: usize,
    pub what: String,
    /// The step rank 0 had reached when it came (`DIR/progress`), if it had written one.
    pub step: Option<u64>,
    /// It did something to the job: between two attempts, with no rank and no launcher to
    /// hit, it did nothing, and no recovery is its.
    pub hit: bool,
}

/// A process of a node: its pid and whole command line.
fn node_processes(tb: &Testbed, node: usize) -> Vec<(u32, String)> {
    tb.processes(node)
        .into_iter()
        .map(|(pid, short)| {
            let whole = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or(short);
            (pid, whole)
        })
        .collect()
}

/// The job's ranks on a node: processes running the script that are not a launcher.
pub fn ranks(tb: &Testbed, node: usize) -> Vec<u32> {
    node_processes(tb, node)
        .into_iter()
        .filter(|(_, cmd)| cmd.contains(SCRIPT) && !is_launcher(cmd))
        .map(|(pid, _)| pid)
        .collect()
}

fn is_launcher(cmd: &str) -> bool {
    cmd.contains("torchrun")
        || cmd.contains("torch.distributed.run")
        || cmd.starts_with("bash ")
        || cmd.starts_with("sh ")
}

/// Whatever of the job is still on any node: its ranks, its launchers, and the shells that
/// started them.
pub fn leftovers(tb: &Testbed) -> Vec<(usize, u32, String)> {
    (0..tb.nodes().len())
        .flat_map(|i| {
            node_processes(tb, i)
                .into_iter()
                .filter(|(_, cmd)| cmd.contains(SCRIPT) || cmd.contains("torchrun"))
                .map(move |(pid, cmd)| (i, pid, cmd))
        })
        .collect()
}

/// The step rank 0 reached last (`DIR/progress`), and when it wrote it.
pub fn progress(save_dir: &Path) -> Option<(u64, SystemTime)> {
    let path = save_dir.join("progress");
    let step = std::fs::read_to_string(&path).ok()?.trim().parse().ok()?;
    Some((step, std::fs::metadata(&path).ok()?.modified().ok()?))
}

/// The newest checkpoint's step (0 when there is none).
pub fn newest_checkpoint(save_dir: &Path) -> u64 {
    std::fs::read_dir(save_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("step_")?.parse().ok())
        .max()
        .unwrap_or(0)
}

/// The training kept at this moment: the step of a job still going (it wrote its progress in
/// the last `fresh`), else the newest checkpoint (what a restart would resume from).
pub fn kept(save_dir: &Path, fresh: Duration) -> u64 {
    let checkpoint = newest_checkpoint(save_dir);
    match progress(save_dir) {
        Some((step, at)) if at.elapsed().unwrap_or_default() <= fresh => step.max(checkpoint),
        _ => checkpoint,
    }
}

/// Performs a schedule's faults on the testbed, and heals what heals.
pub struct Injector<'a> {
    tb: &'a Testbed,
    /// The job's checkpoint folder, whose progress each fault records.
    save: PathBuf,
    /// Testbed indices the faults may hit (the job's nodes and its spares).
    nodes: Vec<usize>,
    lost: BTreeSet<usize>,
    cuts: Vec<(Instant, usize)>,
    throttles: Vec<(Instant, CpuThrottle)>,
    /// Nodes whose logins are slow: since when, and their shell init before.
    slow: Vec<(Instant, usize, Option<String>)>,
    /// Processes holding a master port (`Fault::Port`): they end by themselves.
    holders: Vec<std::process::Child>,
    pub injected: Vec<Injected>,
}

impl<'a> Injector<'a> {
    pub fn new(tb: &'a Testbed, save: &Path, nodes: Vec<usize>) -> Injector<'a> {
        Injector {
            tb,
            save: save.to_path_buf(),
            nodes,
            lost: BTreeSet::new(),
            cuts: Vec::new(),
            throttles: Vec::new(),
            slow: Vec::new(),
            holders: Vec::new(),
            injected: Vec::new(),
        }
    }

    /// `planned`, at `at` into the soak: on a node that holds a rank now (a fault on a node
    /// the job does not use costs it nothing), or, between attempts, on any node still there.
    pub fn inject(&mut self, planned: &Planned, at: Duration) {
        let alive: Vec<usize> = self.nodes.iter().copied().filter(|n| !self.lost.contains(n)).collect();
        let busy: Vec<(usize, Vec<u32>)> =
            alive.iter().map(|&n| (n, ranks(self.tb, n))).filter(|(_, r)| !r.is_empty()).collect();
        let pick = |len: usize| (planned.draw % len.max(1) as u64) as usize;
        let (node, what) = match planned.fault {
            Fault::Port | Fault::SlowLogin => {
                let Some((node, pids)) = busy.get(pick(busy.len())).cloned() else {
                    return self.record(planned.fault, 0, at, "no job running: nothing done".into(), false);
                };
                // The port a launcher listens on, on the master (torchrun elastic's store may
                // live off the nodes: then only the rank is killed).
                let port = (planned.fault == Fault::Port)
                    .then(|| busy.iter().find_map(|(n, _)| Some((*n, self.store_port(*n)?))))
                    .flatten();
                let pid = pids[(planned.draw >> 16) as usize % pids.len()];
                let what = match (planned.fault, port) {
                    (Fault::Port, Some((master, port))) => {
                        self.holders.push(self.hold_port(master, port));
                        format!(
                            "rank pid {pid} sent SIGKILL, port {port} of node {master} taken as soon as it is free"
                        )
                    }
                    (Fault::Port, None) => {
                        format!("rank pid {pid} sent SIGKILL; no launcher listens on a node")
                    }
                    _ => {
                        match self.slow.iter_mut().find(|(_, n, _)| *n == node) {
                            Some(slow) => slow.0 = Instant::now(),
                            None => {
                                let before = std::fs::read_to_string(self.tb.login_rc(node)).ok();
                                self.slow.push((Instant::now(), node, before));
                            }
                        }
                        self.tb.slow_login(node, SLOW_LOGIN);
                        format!(
                            "logins slowed to {SLOW_LOGIN} s for {} s, rank pid {pid} sent SIGKILL",
                            SLOW_FOR.as_secs()
                        )
                    }
                };
                signal(pid, "KILL");
                (node, what)
            }
            Fault::Kill | Fault::Segv | Fault::Stop => {
                let Some((node, pids)) = busy.get(pick(busy.len())).cloned() else {
                    // Between attempts, a rank fault is a launcher's: the restart meets it.
                    let Some(&node) = alive.get(pick(alive.len())) else { return };
                    let launchers = self.launchers(node);
                    for pid in &launchers {
                        signal(*pid, "KILL");
                    }
                    let what = format!("between attempts: launcher(s) {launchers:?} killed");
                    return self.record(planned.fault, node, at, what, !launchers.is_empty());
                };
                let pid = pids[(planned.draw >> 16) as usize % pids.len()];
                let sig = match planned.fault {
                    Fault::Kill => "KILL",
                    Fault::Segv => "SEGV",
                    _ => "STOP",
                };
                signal(pid, sig);
                (node, format!("rank pid {pid} sent SIG{sig}"))
            }
            Fault::Cut | Fault::Lose | Fault::Reboot | Fault::Throttle => {
                let node = match busy.get(pick(busy.len())) {
                    Some((node, _)) => *node,
                    None => match alive.get(pick(alive.len())) {
                        Some(&node) => node,
                        None => return,
                    },
                };
                (node, self.node_fault(planned.fault, node))
            }
        };
        self.record(planned.fault, node, at, what, true);
    }

    fn node_fault(&mut self, fault: Fault, node: usize) -> String {
        match fault {
            Fault::Cut => {
                self.tb.link_down(node);
                self.cuts.push((Instant::now(), node));
                format!("link down for {} s", CUT_FOR.as_secs())
            }
            Fault::Lose => {
                self.tb.link_down(node);
                self.lost.insert(node);
                "link down for good".into()
            }
            Fault::Reboot => {
                // Everything but the sshd that listens and what keeps the node's namespaces
                // (its ancestors): the node is back at once, with nothing of the job on it.
                let all = node_processes(self.tb, node);
                let mut keep = BTreeSet::new();
                for (pid, _) in all.iter().filter(|(_, cmd)| is_sshd_listener(cmd)) {
                    let mut p = *pid;
                    while p > 1 && keep.insert(p) {
                        p = parent(p).unwrap_or(1);
                    }
                }
                let killed: Vec<u32> =
                    all.iter().map(|(pid, _)| *pid).filter(|pid| !keep.contains(pid)).collect();
                for pid in &killed {
                    signal(*pid, "KILL");
                }
                format!("{} processes killed, sshd kept", killed.len())
            }
            Fault::Throttle => {
                self.throttles.push((Instant::now(), self.tb.throttle_cpu(node, 5)));
                format!("throttled to 5 % of a core for {} s", THROTTLE_FOR.as_secs())
            }
            _ => unreachable!("a rank's fault"),
        }
    }

    /// The port a launcher of the node listens on: the rendezvous store's, on the master
    /// (the ranks' own listening sockets, gloo's, are not the launcher's).
    fn store_port(&self, node: usize) -> Option<u16> {
        let launchers = self.launchers(node);
        let out = self.tb.ns_exec(node, "ss -Hltnp");
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines().find_map(|l| {
            let owned = launchers.iter().any(|p| l.contains(&format!("pid={p},")));
            let local = l.split_whitespace().nth(3)?;
            owned.then(|| local.rsplit(':').next()?.parse().ok()).flatten()
        })
    }

    /// A process in the node's namespace that takes `port` (IPv4 and IPv6) as soon as it can
    /// (within a minute) and holds it for [`PORT_HELD_FOR`].
    fn hold_port(&self, node: usize, port: u16) -> std::process::Child {
        let script = format!(
            r#"
import socket, time
dual = socket.has_dualstack_ipv6()
end = time.time() + 60
while time.time() < end:
    try:
        s = socket.create_server(("", {port}), family=socket.AF_INET6 if dual else socket.AF_INET, dualstack_ipv6=dual)
    except OSError:
        time.sleep(0.05)
        continue
    time.sleep({held})
    break
"#,
            held = PORT_HELD_FOR.as_secs()
        );
        Command::new("ip")
            .args(["netns", "exec", &self.tb.nodes()[node].netns, "python3", "-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3 in the node's namespace")
    }

    fn launchers(&self, node: usize) -> Vec<u32> {
        node_processes(self.tb, node)
            .into_iter()
            .filter(|(_, cmd)| cmd.contains("torchrun") || cmd.contains("torch.distributed.run"))
            .map(|(pid, _)| pid)
            .collect()
    }

    /// A fault as injected; `hit`: it found something of the job to hit (see `Injected::hit`).
    fn record(&mut self, fault: Fault, node: usize, at: Duration, what: String, hit: bool) {
        let wall = SystemTime::now();
        let step = progress(&self.save).map(|(step, _)| step);
        self.injected.push(Injected { at, wall, fault, node, what, step, hit });
    }

    /// Heals the cuts and throttles whose time is up.
    pub fn tick(&mut self) {
        let tb = self.tb;
        self.cuts.retain(|(since, node)| {
            let done = since.elapsed() >= CUT_FOR;
            if done {
                tb.link_up(*node);
            }
            !done
        });
        self.throttles.retain(|(since, _)| since.elapsed() < THROTTLE_FOR);
        self.slow.retain(|(since, node, before)| {
            let done = since.elapsed() >= SLOW_FOR;
            if done {
                fast_login(tb, *node, before);
            }
            !done
        });
        self.holders.retain_mut(|h| matches!(h.try_wait(), Ok(None)));
    }

    /// Heals everything, the lost nodes too: the soak is over.
    pub fn heal_all(&mut self) {
        for (_, node) in std::mem::take(&mut self.cuts) {
            self.tb.link_up(node);
        }
        for node in std::mem::take(&mut self.lost) {
            self.tb.link_up(node);
        }
        self.throttles.clear();
        for (_, node, before) in std::mem::take(&mut self.slow) {
            fast_login(self.tb, node, &before);
        }
        self.free_ports();
    }

    fn free_ports(&mut self) {
        for mut h in std::mem::take(&mut self.holders) {
            let _ = h.kill();
            let _ = h.wait();
        }
    }
}

/// A soak that ends early (a failed assertion) leaves no process holding a port.
impl Drop for Injector<'_> {
    fn drop(&mut self) {
        self.free_ports();
    }
}

/// The node's logins as they were before they were made slow.
fn fast_login(tb: &Testbed, node: usize, before: &Option<String>) {
    let rc = tb.login_rc(node);
    let _ = match before {
        Some(text) => std::fs::write(rc, text),
        None => std::fs::remove_file(rc),
    };
}

/// A process's parent, from /proc/PID/stat (after the command's closing parenthesis).
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()
}

fn is_sshd_listener(cmd: &str) -> bool {
    cmd.contains("sshd") && cmd.contains(" -D")
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([&format!("-{sig}"), &pid.to_string()]).status();
}

/// Runs `schedule` against a job started at `start`, until `length` has passed or `done`
/// says the launcher is gone; returns what was injected. The faults stop `quiet` before the
/// end, so that the last one's recovery is in the soak.
pub fn run_schedule(
    injector: &mut Injector,
    schedule: &[Planned],
    start: Instant,
    length: Duration,
    mut done: impl FnMut() -> bool,
) {
    let mut next = schedule.iter().peekable();
    while start.elapsed() < length && !done() {
        if let Some(p) = next.peek() {
            if start.elapsed() >= p.at {
                injector.inject(p, start.elapsed());
                next.next();
            }
        }
        injector.tick();
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A fresh folder for the job's checkpoints.
pub fn save_dir(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(format!("ckpt-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A quarantine herd recorded (a `node_quarantined` event): the host, when, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantine {
    pub host: String,
    pub at: SystemTime,
    pub reason: String,
}

/// The hosts herd quarantined in a run (its `node_quarantined` events).
pub fn quarantined(events: &[serde_json::Value]) -> Vec<Quarantine> {
    events
        .iter()
        .filter(|e| e["event"] == "node_quarantined")
        .filter_map(|e| {
            let at = humantime::parse_rfc3339(e["ts"].as_str()?).ok()?;
            let reason = e["reason"].as_str().unwrap_or_default().to_string();
            Some(Quarantine { host: e["host"].as_str()?.to_string(), at, reason })
        })
        .collect()
}

/// The quarantines no fault of the node explains: a host blamed with no node fault on it in
/// the `window` before (a rank's fault is the rank's, not its node's).
pub fn false_blames<'a>(
    blamed: &'a [Quarantine],
    injected: &[Injected],
    host_of: impl Fn(usize) -> String,
    window: Duration,
) -> Vec<&'a Quarantine> {
    blamed
        .iter()
        .filter(|q| {
            !injected.iter().any(|i| {
                i.fault.blames_the_node()
                    && host_of(i.node) == q.host
                    && q.at.duration_since(i.wall).is_ok_and(|d| d <= window)
            })
        })
        .collect()
}

/// A false blame, for a report: the host, when into the soak (`start`), and herd's reason.
pub fn describe(q: &Quarantine, start: SystemTime) -> String {
    let into = q.at.duration_since(start).unwrap_or_default().as_secs_f64();
    format!("{} at +{into:.0} s: {}", q.host, q.reason)
}

/// One start of the job, as rank 0 wrote it in `DIR/starts` (`examples/train_resumable.py`):
/// when its process began, when torch was imported, when the process group was up, and the
/// step it resumed at.
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    pub began: SystemTime,
    pub imported: SystemTime,
    pub up: SystemTime,
    pub resumed: u64,
}

/// The job's starts, in order; a line cut short (a rank killed while writing) is left out.
pub fn starts(save_dir: &Path) -> Vec<Start> {
    let text = std::fs::read_to_string(save_dir.join("starts")).unwrap_or_default();
    let at = |w: &str| Some(SystemTime::UNIX_EPOCH + Duration::try_from_secs_f64(w.parse().ok()?).ok()?);
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let [began, imported, up, resumed, _world] = w[..] else { return None };
            Some(Start {
                began: at(began)?,
                imported: at(imported)?,
                up: at(up)?,
                resumed: resumed.parse().ok()?,
            })
        })
        .collect()
}

/// What the launcher's own record says of a restart (herd's events; the peers keep none):
/// from the fault to the teardown's start (detection), the teardown, the backoff, and herd's
/// own start of the next attempt (its checks, sweep, port and env) until its agents are told
/// to start the job.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Supervised {
    pub detect: Option<Duration>,
    pub teardown: Option<Duration>,
    pub backoff: Option<Duration>,
    pub own_start: Option<Duration>,
    /// From the agents told to start to the job's process began.
    pub spawn: Option<Duration>,
}

/// What one fault cost until the job trained again: all of it (to the process group up), its
/// parts, and the steps done again. `None` where the job did not start again before the next
/// fault (that fault met this one's recovery) or the soak's end.
#[derive(Debug, Clone, PartialEq)]
pub struct Cost {
    pub fault: Fault,
    pub at: Duration,
    pub to_training: Option<Duration>,
    /// From the fault to the job's next process began: detection, teardown, the launcher's start.
    pub to_process: Option<Duration>,
    pub import: Option<Duration>,
    pub rendezvous: Option<Duration>,
    pub redone: Option<u64>,
    pub supervised: Supervised,
}

fn between(from: SystemTime, to: SystemTime) -> Option<Duration> {
    to.duration_since(from).ok()
}

/// Each fault's cost: the first start after it and before the next fault that hit the job.
/// A fault that hit nothing costs nothing, and claims no start. Pure.
pub fn costs(injected: &[Injected], starts: &[Start]) -> Vec<Cost> {
    injected
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let next = injected[i + 1..].iter().find(|n| n.hit).map(|n| n.wall);
            let start = starts
                .iter()
                .filter(|_| f.hit)
                .find(|s| s.began >= f.wall && next.is_none_or(|n| s.began < n));
            Cost {
                fault: f.fault,
                at: f.at,
                to_training: start.and_then(|s| between(f.wall, s.up)),
                to_process: start.and_then(|s| between(f.wall, s.began)),
                import: start.and_then(|s| between(s.began, s.imported)),
                rendezvous: start.and_then(|s| between(s.imported, s.up)),
                redone: start.and_then(|s| Some(f.step?.saturating_sub(s.resumed))),
                supervised: Supervised::default(),
            }
        })
        .collect()
}

/// herd's part of each cost, from its events: the first teardown after the fault, the attempt's
/// failure and restart after it, and the next attempt's start; and the job's process start.
pub fn supervised(costs: &mut [Cost], injected: &[Injected], events: &[serde_json::Value], starts: &[Start]) {
    let at = |e: &serde_json::Value| humantime::parse_rfc3339(e["ts"].as_str()?).ok();
    let named = |name: &'static str| events.iter().filter(move |e| e["event"] == name).filter_map(at);
    for (cost, f) in costs.iter_mut().zip(injected) {
        if cost.to_process.is_none() {
            continue;
        }
        let after = |name: &'static str, t: SystemTime| named(name).find(|&e| e >= t);
        let Some(torn) = after("teardown_started", f.wall) else { continue };
        let failed = after("attempt_failed", torn);
        let scheduled =
            events.iter().find(|e| e["event"] == "restart_scheduled" && at(e).is_some_and(|t| t >= torn));
        let backoff = scheduled.and_then(|e| Some(Duration::from_millis(e["delay_ms"].as_u64()?)));
        let started = failed.and_then(|t| after("attempt_started", t));
        let began = started.and_then(|t| starts.iter().find(|s| s.began >= t)).map(|s| s.began);
        cost.supervised = Supervised {
            detect: between(f.wall, torn),
            teardown: failed.and_then(|t| between(torn, t)),
            backoff,
            own_start: failed
                .zip(started)
                .and_then(|(a, b)| between(a, b))
                .map(|d| d.saturating_sub(backoff.unwrap_or_default())),
            spawn: started.zip(began).and_then(|(a, b)| between(a, b)),
        };
    }
}
