//! Why an attempt failed, from what every node printed and how it ended. Pure.
//!
//! Each node gets a class from the rule table (log lines) and its exit. The root cause is the
//! earliest failure among nodes whose class is not `comm`: when one rank dies, its peers
//! report closed connections, and those are consequences. Only when every failing node
//! reports a communication error is the earliest of those the cause.

use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;

use crate::config::RuleSpec;
use crate::outcome::{
    Consequence, FailureClass, NodeExit, NodeOutcome, RootCause, TimedLine, Trigger, Verdict,
};
use crate::stacks;

/// The built-in rules that also blame the line's node (see `blame`): the hardware is at
/// fault, not the job. Strings from the CUDA runtime, the NVIDIA driver and NCCL's
/// InfiniBand transport; NCCL's `NET/IB` lines at start-up (`NET/IB : Using ...`) are not
/// errors, and do not match.
pub const HARDWARE_RULES: &[(&str, FailureClass)] = &[
    (
        r"NVRM: Xid\b|\bXid \(PCI:|(?i:uncorrectable ECC)|CUDA error: unspecified launch failure",
        FailureClass::Crash,
    ),
    (r"NET/IB\b.*\b(?i:error|failed)\b|\bibv_\w+\b.*\bfailed\b", FailureClass::Comm),
];

/// The built-in rules: a line matching the pattern points at the class. Strings from real
/// PyTorch, NCCL, gloo, DeepSpeed and shell output.
pub const BUILTIN_RULES: &[(&str, FailureClass)] = &[
    (r"(?i)address already in use|EADDRINUSE", FailureClass::Port),
    (
        r"CUDA out of memory|OutOfMemoryError|\bMemoryError\b|oom-kill|Out of memory: Killed process",
        FailureClass::Oom,
    ),
    (r"herd: setup failed|herd: cannot enter workdir", FailureClass::Launch),
    // The launcher itself could not start, before any worker: torchrun's own entry import,
    // or the module of `python -m` (DeepSpeed's launcher) failing to import. A worker's
    // failure shows neither (torchrun's frames there are `sys.exit(main())`).
    (r"^\s*from torch\.distributed\.run import main$|in _get_module_details$", FailureClass::Launch),
    // `[container]`: the runtime could not start the container (no daemon, no such image).
    (
        r"^docker: |Error response from daemon|Cannot connect to the (Docker|Podman) daemon|Unable to find image .* locally|^Error: (initializing source |short-name |.*: image not known|statfs |.*OCI runtime|crun: |runc: |.*mount)",
        FailureClass::Launch,
    ),
    (
        r"command not found|: not found$|can't open file .*No such file or directory|No module named torch\.distributed\.run|Argument list too long",
        FailureClass::Launch,
    ),
    // Killed by a signal a launcher does not send itself: torchrun and DeepSpeed stop the
    // other ranks with SIGTERM (-15), which is a consequence, never a crash.
    (
        r"Signal \d+ \(SIG(KILL|SEGV|ABRT|BUS|ILL|FPE)\) received by PID|exitcode\s*:\s*-(4|6|7|8|9|11)\b|Segmentation fault|core dumped|exits with return code = -(4|6|7|8|9|11)\b",
        FailureClass::Crash,
    ),
    (
        r"Connection closed by peer|Connection reset by peer|ncclRemoteError|ncclSystemError|unhandled system error|Watchdog caught collective operation timeout|NCCL communicator was aborted|DistNetworkError|TCP client failed to connect|The client socket has timed out|Broken pipe|recvValue failed|DistStoreError|RendezvousConnectionError|Socket Timeout|No route to host",
        FailureClass::Comm,
    ),
    (
        r"\b(SyntaxError|IndentationError|ImportError|ModuleNotFoundError|FileNotFoundError|NameError|AttributeError|TypeError|ValueError|KeyError|IndexError|AssertionError|ZeroDivisionError|NotImplementedError)\b",
        FailureClass::User,
    ),
];

/// When a node's lines point at several classes, the one that explains it best: a node
/// whose rank crashed also shows its local peer's closed connection.
const NODE_PRIORITY: [FailureClass; 7] = [
    FailureClass::Port,
    FailureClass::Oom,
    FailureClass::Launch,
    FailureClass::Crash,
    FailureClass::User,
    FailureClass::Hang,
    FailureClass::Comm,
];

pub struct RuleTable {
    rules: Vec<(Regex, FailureClass)>,
    /// The rules that blame their node: the user's with `blame = "node"`, and the built-in
    /// hardware rules.
    blaming: Vec<(Regex, FailureClass)>,
}

/// Equal when they hold the same rules in the same order: the same patterns, classes and
/// blame.
impl PartialEq for RuleTable {
    fn eq(&self, other: &RuleTable) -> bool {
        let rules = |rules: &[(Regex, FailureClass)]| -> Vec<(String, FailureClass)> {
            rules.iter().map(|(re, c)| (re.as_str().to_string(), *c)).collect()
        };
        rules(&self.rules) == rules(&other.rules) && rules(&self.blaming) == rules(&other.blaming)
    }
}

impl Eq for RuleTable {}

impl RuleTable {
    /// The user's rules (already checked by the config) come before the built-in ones.
    pub fn new(user: &[RuleSpec]) -> RuleTable {
        let compiled = |(p, c): (&str, FailureClass)| Some((Regex::new(p).ok()?, c));
        let user: Vec<(Regex, FailureClass, bool)> = user
            .iter()
            .filter_map(|r| compiled((&r.pattern, r.class)).map(|(re, c)| (re, c, r.blame)))
            .collect();
        let hardware =
            HARDWARE_RULES.iter().map(|&(p, c)| (compiled((p, c)).expect("built-in rule compiles"), true));
        let builtin =
            BUILTIN_RULES.iter().map(|&(p, c)| (compiled((p, c)).expect("built-in rule compiles"), false));
        let all: Vec<((Regex, FailureClass), bool)> =
            user.into_iter().map(|(re, c, b)| ((re, c), b)).chain(hardware).chain(builtin).collect();
        RuleTable {
            blaming: all.iter().filter(|(_, b)| *b).map(|(r, _)| r.clone()).collect(),
            rules: all.into_iter().map(|(r, _)| r).collect(),
        }
    }

    pub fn class_of(&self, line: &str) -> Option<FailureClass> {
        self.rules.iter().find(|(re, _)| re.is_match(line)).map(|(_, c)| *c)
    }

    /// Whether the line blames its node (a hardware fault), and with which class.
    pub fn blames(&self, line: &str) -> Option<FailureClass> {
        self.blaming.iter().find(|(re, _)| re.is_match(line)).map(|(_, c)| *c)
    }

    /// One pattern for every `crash` rule: a line that says a process of the job was killed
    /// by a signal its launcher does not send (torchrun's `failed (exitcode: -9)`, a
    /// segfault). Such a node has failed whatever comes next, so the supervisor stops the
    /// gang at that line instead of waiting for the launcher to wind down and exit.
    /// It matches raw bytes: it runs on every line a job prints.
    pub fn crash_pattern(&self) -> Option<regex::bytes::Regex> {
        let parts: Vec<String> = self
            .rules
            .iter()
            .filter(|(_, c)| *c == FailureClass::Crash)
            .map(|(re, _)| format!("(?:{})", re.as_str()))
            .collect();
        if parts.is_empty() {
            return None;
        }
        regex::bytes::Regex::new(&parts.join("|")).ok()
    }
}

/// One node's failure as the rules and its exit explain it.
struct NodeFailure<'a> {
    node: &'a NodeOutcome,
    class: FailureClass,
    line: Option<String>,
    at: Duration,
    /// Ended lost only after herd asked it to stop (no exit status by the kill deadline)
    /// while herd's own host was strained (`late_fleet`): herd's teardown, not the node;
    /// never the root cause while another node failed first. On a host at ease, a node that
    /// does not end by the kill deadline (wedged in a driver) still may be.
    by_teardown: bool,
}

fn node_failure<'a>(node: &'a NodeOutcome, rules: &RuleTable) -> Option<NodeFailure<'a>> {
    let matched: Vec<(FailureClass, usize, &TimedLine)> = node
        .lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| rules.class_of(&l.text).map(|c| (c, i, l)))
        .collect();
    // Lines printed after herd asked the node to stop are the teardown's, not the failure's.
    // A line at the stop's own instant came before it: it may be the line that made herd stop.
    let stop_noise = |l: &TimedLine| node.stop_requested_at.is_some_and(|at| l.at > at);
    let best = NODE_PRIORITY
        .iter()
        .find_map(|class| matched.iter().find(|(c, _, l)| c == class && !stop_noise(l)))
        .map(|(c, i, _)| (*c, Some(informative_line(&node.lines, *i))));
    let first_sign = matched
        .iter()
        .filter(|(_, _, l)| !stop_noise(l))
        .map(|(_, _, l)| l.at)
        .min()
        .unwrap_or(node.ended_at);
    let (class, line) = match (&node.exit, best) {
        (NodeExit::ExitCode(0), _) => return None,
        (NodeExit::Lost(_), _) => (FailureClass::NodeLost, None),
        (_, Some(found)) => found,
        // Stopped by herd and nothing of its own to say: not a failure of its own.
        _ if node.stop_requested_at.is_some() => return None,
        (NodeExit::Signal(_), None) => (FailureClass::Crash, None),
        // 125: a container engine's own failure (podman and docker run exit so), as 126 and
        // 127 are the shell's.
        (NodeExit::ExitCode(125..=127), None) => (FailureClass::Launch, None),
        (NodeExit::ExitCode(_), None) => (FailureClass::User, None),
    };
    // A lost node's last words are whatever it was doing; its exit says what happened.
    let line = match class {
        FailureClass::NodeLost => None,
        _ => line.or_else(|| last_error_line(&node.lines.iter().map(|l| l.text.clone()).collect::<Vec<_>>())),
    };
    // A node lost is lost as of when herd saw it lost (its silence judged), if it did: its end
    // may come much later (at the kill deadline), after nodes that herd's teardown ended.
    let at = match class {
        FailureClass::NodeLost => node.lost_at.unwrap_or(node.ended_at),
        _ => first_sign.min(node.ended_at),
    };
    let by_teardown = matches!(node.exit, NodeExit::Lost(_))
        && node.lost_at.is_none()
        && node.stop_requested_at.is_some()
        && node.late_fleet;
    Some(NodeFailure { node, class, line, at, by_teardown })
}

/// `[rank3]: `, which torch puts before each line a rank prints to stderr.
static RANK_PREFIX: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\[rank\d+\]:\s?").expect("compiles"));

/// The last line of a Python traceback: the exception and its message (`ImportError: …`).
static EXCEPTION_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:\[rank\d+\]:\s?)?[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Fault)(?::|$)")
        .expect("compiles")
});

/// herd's rank wrapper (see `mux.py`), which torchrun names in place of the user's program.
const WRAPPER_PATH: &str = r"\S*herd-out-[^/\s]+/rank\b";
static WRAPPER: LazyLock<Regex> = LazyLock::new(|| Regex::new(WRAPPER_PATH).expect("compiles"));
static OF_WRAPPER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!(" of binary: {WRAPPER_PATH}")).expect("compiles"));

/// `line` without herd's rank wrapper: torchrun's ` of binary: WRAPPER` is left out; `None`
/// for a line that names the wrapper otherwise (torchrun's `WRAPPER FAILED` header).
fn without_wrapper(line: &str) -> Option<String> {
    let line = OF_WRAPPER.replace_all(line, "");
    (!WRAPPER.is_match(&line)).then(|| line.trim_end().to_string())
}

/// Whether a traceback's exception line is the error itself: torchrun's own `ChildFailedError`
/// only says that a worker failed.
fn is_exception_line(line: &str) -> bool {
    EXCEPTION_LINE.is_match(line) && !line.contains("ChildFailedError")
}

/// The line at `i` that a rule matched, as quoted: a traceback's frame (`from torch... import
/// main`, `in _get_module_details`) gives way to the exception that ends the traceback, and
/// herd's rank wrapper is no binary of the user's.
fn informative_line(lines: &[TimedLine], i: usize) -> String {
    let indented = |t: &str| {
        let t = RANK_PREFIX.replace(t, "");
        t.is_empty() || t.starts_with(char::is_whitespace)
    };
    let text = &lines[i].text;
    let exception = match indented(text) {
        true => {
            lines[i + 1..].iter().map(|l| &l.text).find(|t| !indented(t)).filter(|t| is_exception_line(t))
        }
        false => None,
    };
    let line = exception.unwrap_or(text);
    without_wrapper(line).unwrap_or_else(|| line.trim_end().to_string())
}

/// Classify a failed attempt. `None` when no node failed and herd did not end it.
pub fn classify(nodes: &[NodeOutcome], trigger: Trigger, rules: &RuleTable) -> Option<Verdict> {
    classify_with(nodes, trigger, rules, None)
}

/// `classify`, with what every rank's stack said when the job hung (see `stacks`).
pub fn classify_with(
    nodes: &[NodeOutcome],
    trigger: Trigger,
    rules: &RuleTable,
    stacks: Option<&stacks::Summary>,
) -> Option<Verdict> {
    let failures: Vec<NodeFailure> = nodes.iter().filter_map(|n| node_failure(n, rules)).collect();
    let root_index = if trigger == Trigger::Hang {
        None
    } else {
        // A node's own failure before a communication error (its peers' consequence), before
        // a node that only the teardown ended lost.
        let own = |f: &&NodeFailure| !f.by_teardown;
        let primary = |f: &&NodeFailure| own(f) && f.class != FailureClass::Comm;
        let earliest = |keep: &dyn Fn(&&NodeFailure) -> bool| {
            let kept = failures.iter().enumerate().filter(|(_, f)| keep(f));
            kept.min_by_key(|(_, f)| (f.at, f.node.node_rank)).map(|(i, _)| i)
        };
        earliest(&primary).or_else(|| earliest(&own)).or_else(|| earliest(&|_| true))
    };

    let (class, root_cause) = match root_index {
        Some(i) => {
            let f = &failures[i];
            let (rank, local_rank, exit) = failing_rank(f.node);
            (
                f.class,
                Some(RootCause {
                    rank,
                    local_rank,
                    node_rank: f.node.node_rank,
                    host: f.node.host.clone(),
                    exit: exit.unwrap_or_else(|| f.node.exit.clone()),
                    line: f.line.clone(),
                }),
            )
        }
        None if trigger == Trigger::Hang => (FailureClass::Hang, hang_culprit(nodes, stacks)),
        None => return None,
    };
    let consequences = failures
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != root_index)
        .map(|(_, f)| Consequence {
            node_rank: f.node.node_rank,
            host: f.node.host.clone(),
            class: f.class,
            exit: f.node.exit.clone(),
            line: f.line.clone(),
        })
        .collect();
    Some(Verdict { class, root_cause, consequences, hint: hint(class) })
}

/// Who a hang waits for, from evidence only:
/// - a worker its agent found stopped (SIGSTOP, a debugger) or stuck in the kernel (a hung
///   filesystem or driver): the others wait for it in their collectives;
/// - a rank whose stack is at a place no other rank is, while the others are all together
///   (the odd group of `stacks`, when it is one rank);
/// - else a node whose last line came clearly before every other node's (by `HANG_LEAD`): it
///   went quiet while the others were still working.
///
/// Otherwise `None`: every rank stopped at once, waiting for each other, and the output says
/// nothing of which one is stuck (its stack does). The lowest node rank is no culprit.
fn hang_culprit(nodes: &[NodeOutcome], stacks: Option<&stacks::Summary>) -> Option<RootCause> {
    let cause = |n: &NodeOutcome, rank, local_rank, line: Option<String>| RootCause {
        rank,
        local_rank,
        node_rank: n.node_rank,
        host: n.host.clone(),
        exit: n.exit.clone(),
        line,
    };
    let stuck = nodes.iter().find_map(|n| {
        let p = n.processes.iter().filter(|p| p.is_stuck()).min_by_key(|p| (p.rank.is_none(), p.rank))?;
        let what = if p.state == 'D' { "stuck in the kernel (state D)" } else { "stopped (state T)" };
        let who = p.rank.map_or(format!("process {}", p.pid), |r| format!("rank {r} (pid {})", p.pid));
        Some(cause(
            n,
            p.rank,
            p.local_rank,
            Some(format!("{who} was {what} when the job stopped making progress")),
        ))
    });
    if stuck.is_some() {
        return stuck;
    }
    if let Some((s, odd)) = stacks.and_then(|s| Some((s, s.culprit.as_ref()?))) {
        if let [rank] = odd.ranks[..] {
            let node = nodes.iter().find(|n| n.stacks.iter().any(|st| st.rank == rank));
            if let Some(n) = node {
                let local = n.stacks.iter().find(|st| st.rank == rank).and(rank.checked_sub(n.first_rank));
                return Some(cause(n, Some(rank), local, Some(format!("its stack: {}", s.words()))));
            }
        }
    }
    // What printed while being stopped is not the hang's.
    let last_before_stop = |n: &NodeOutcome| {
        n.lines.iter().rev().find(|l| n.stop_requested_at.is_none_or(|at| l.at <= at)).cloned()
    };
    let mut last: Vec<(Option<Duration>, &NodeOutcome)> =
        nodes.iter().map(|n| (last_before_stop(n).map(|l| l.at), n)).collect();
    last.sort_by_key(|(at, n)| (*at, n.node_rank));
    match last.as_slice() {
        [(first, n), (second, _), ..]
            if first.unwrap_or_default() + HANG_LEAD <= second.unwrap_or_default() =>
        {
            Some(cause(n, None, None, last_before_stop(n).map(|l| l.text)))
        }
        _ => None,
    }
}

/// How much sooner than every other node a node must have gone quiet to be named for a hang.
const HANG_LEAD: Duration = Duration::from_secs(5);

/// The failing rank as the launcher reported it: torchrun's "Root Cause" block gives rank,
/// local rank and exit code; the DeepSpeed launcher's "exits with return code" line only the
/// exit code.
fn failing_rank(node: &NodeOutcome) -> (Option<u32>, Option<u32>, Option<NodeExit>) {
    let torchrun_rank = Regex::new(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)").expect("compiles");
    let torchrun_exit = Regex::new(r"exitcode\s*:\s*(-?\d+)").expect("compiles");
    // DeepSpeed's launcher logs the exit code of the process that failed, but next to the
    // command of the last process it started, whatever rank failed: only the code is usable.
    let deepspeed = Regex::new(r"exits with return code = (-?\d+)").expect("compiles");
    let exit_of = |code: i32| if code < 0 { NodeExit::Signal(-code) } else { NodeExit::ExitCode(code) };

    let root_block = node.lines.iter().rposition(|l| l.text.contains("Root Cause (first observed failure)"));
    if let Some(start) = root_block {
        let block = &node.lines[start..];
        let rank = block.iter().find_map(|l| torchrun_rank.captures(&l.text));
        let exit = block.iter().find_map(|l| torchrun_exit.captures(&l.text));
        if let Some(r) = rank {
            return (r[1].parse().ok(), r[2].parse().ok(), exit.and_then(|e| e[1].parse().ok()).map(exit_of));
        }
    }
    // torchrun's agent logs a dead worker as soon as it sees it; when herd stopped torchrun
    // right then, that line is all there is (no Root Cause block).
    let torchrun_failed = Regex::new(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)").expect("compiles");
    if let Some(c) = node.lines.iter().find_map(|l| torchrun_failed.captures(&l.text)) {
        let local: Option<u32> = c[2].parse().ok();
        return (local.map(|l| node.first_rank + l), local, c[1].parse().ok().map(exit_of));
    }
    if let Some(c) = node.lines.iter().find_map(|l| deepspeed.captures(&l.text)) {
        return (None, None, c[1].parse().ok().map(exit_of));
    }
    (None, None, None)
}

pub fn hint(class: FailureClass) -> &'static str {
    match class {
        FailureClass::Comm => "ranks lost each other: check that every node reaches MASTER_ADDR and its peers (firewall, routes), set rendezvous.interface (NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME) to the right network, and keep CUDA, NCCL and torch versions the same on every node",
        FailureClass::NodeLost => "a node stopped answering over SSH (down, rebooted or partitioned): check that it is up and reachable; herd waits restart.node_wait for it before a restart",
        FailureClass::Hang => "no progress for restart.hang_timeout: a rank is stuck outside collectives or deadlocked; dump its stack (py-spy dump) and rerun with NCCL_DEBUG=INFO",
        FailureClass::Port => "the master port was already in use: free it, or use rendezvous.port = \"auto\" and let herd choose a new one for each attempt",
        FailureClass::Crash => "a process was killed by a signal: check dmesg for the OOM killer or a segfault, and raise /dev/shm if data loader workers die",
        FailureClass::Oom => "out of memory: lower the batch size or use activation checkpointing; check host RAM and /dev/shm",
        FailureClass::User => "the training script raised an error: fix it and run again (herd does not restart user errors by default)",
        FailureClass::Launch => "the job could not start on that node: check workdir, setup, and that the launcher and script exist there; with [container], an exit 125 is the engine's own (podman's, docker's): its words above name the mount, image or runtime it could not use; `herd doctor` checks the node's environment, its torch import and its container included",
        FailureClass::Allocation => "Slurm ended the allocation (scancel, its time limit, preemption, or the salloc or batch script that held it): every step ended with it, and no node is to blame; run again in a new allocation (a longer --time?), resuming from a checkpoint",
    }
}

/// Words that mark a line as the likely reason a process failed. (A traceback's header is no
/// reason: its exception line is, which `last_error_line` prefers.)
const ERROR_MARKERS: &[&str] = &[
    "Error",
    "error:",
    "ERROR",
    "Exception",
    "FAILED",
    "failed",
    "fatal",
    "Killed",
    "not found",
    "No such file",
];

/// The line that best explains a failure: the last exception a traceback ended with, else the
/// last line that looks like an error, else the last non-empty one; all without herd's rank
/// wrapper (see `without_wrapper`), and never torchrun's `ChildFailedError`, which only says
/// that a worker failed (its `RuntimeError: …` says why).
pub fn last_error_line(tail: &[String]) -> Option<String> {
    let said = |l: &String| !l.trim().is_empty() && !l.contains("ChildFailedError");
    let lines = || tail.iter().rev().filter_map(|l| without_wrapper(l)).filter(said);
    lines()
        .find(|l| is_exception_line(l))
        .or_else(|| lines().find(|l| ERROR_MARKERS.iter().any(|m| l.contains(m))))
        .or_else(|| lines().next())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::ProcessState;

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn prefers_the_last_error_looking_line() {
        let tail = lines(&[
            "Traceback (most recent call last):",
            "  File \"train.py\", line 3",
            "SyntaxError: invalid syntax",
            "",
            "[2026-11-30 10:00:00] torch.distributed.elastic: exiting",
        ]);
        assert_eq!(last_error_line(&tail).as_deref(), Some("SyntaxError: invalid syntax"));
    }

    #[test]
    fn falls_back_to_the_last_line() {
        assert_eq!(last_error_line(&lines(&["a", "b", "  "])).as_deref(), Some("b"));
        assert_eq!(last_error_line(&[]), None);
    }

    #[test]
    fn every_listed_comm_string_is_comm() {
        let rules = RuleTable::new(&[]);
        for s in [
            "Connection closed by peer",
            "Connection reset by peer",
            "ncclRemoteError",
            "ncclSystemError",
            "unhandled system error",
            "Watchdog caught collective operation timeout",
            "NCCL communicator was aborted",
            "DistNetworkError",
            "TCP client failed to connect",
            "The client socket has timed out",
            "Broken pipe",
            "recvValue failed",
            "DistStoreError",
            "RendezvousConnectionError",
            "Socket Timeout",
            "No route to host",
        ] {
            assert_eq!(
                rules.class_of(&format!("RuntimeError: [x] {s} (y)")),
                Some(FailureClass::Comm),
                "{s}"
            );
        }
        assert_eq!(rules.class_of("OSError: [Errno 98] Address already in use"), Some(FailureClass::Port));
        assert_eq!(rules.class_of("torch.OutOfMemoryError: CUDA out of memory."), Some(FailureClass::Oom));
        assert_eq!(rules.class_of("sh: 1: torchrun: not found"), Some(FailureClass::Launch));
        for s in [
            "docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
            "docker: Error response from daemon: pull access denied for nope, repository does not exist.",
            "Unable to find image 'nope:latest' locally",
            "Error: initializing source docker://nope:latest: reading manifest latest in docker.io/library/nope: requested access to the resource is denied",
            "Error: short-name \"nope\" did not resolve to an alias and no unqualified-search registries are defined",
        ] {
            assert_eq!(rules.class_of(s), Some(FailureClass::Launch), "{s}");
        }
        assert_eq!(rules.class_of("Error: loss is NaN"), None);
        assert_eq!(rules.class_of("Error: cannot decode image 17"), None);
        assert_eq!(rules.class_of("SyntaxError: invalid syntax"), Some(FailureClass::User));
        assert_eq!(rules.class_of("step 3 rank 1 sum 21"), None);
    }

    #[test]
    fn a_launcher_stopping_its_own_ranks_with_sigterm_is_not_a_crash() {
        let rules = RuleTable::new(&[]);
        assert_eq!(rules.class_of("  exitcode  : -15 (pid: 70)  (SIGTERM)"), None);
        assert_eq!(rules.class_of("  traceback : Signal 15 (SIGTERM) received by PID 70"), None);
        assert_eq!(rules.class_of("  exitcode  : -9 (pid: 64)  (SIGKILL)"), Some(FailureClass::Crash));
        assert_eq!(
            rules.class_of("  traceback : Signal 11 (SIGSEGV) received by PID 64"),
            Some(FailureClass::Crash)
        );
        assert_eq!(
            rules.class_of("failed (exitcode: -9) local_rank: 1 (pid: 64)"),
            Some(FailureClass::Crash)
        );
    }

    #[test]
    fn user_rules_come_first() {
        let rules = RuleTable::new(&[RuleSpec {
            pattern: "Connection closed by peer".into(),
            class: FailureClass::User,
            blame: false,
        }]);
        assert_eq!(rules.class_of("Connection closed by peer"), Some(FailureClass::User));
    }

    /// Real node logs captured from herd runs on the namespace testbed (tests/fixtures/logs).
    fn fixture(scenario: &str, node: usize) -> String {
        let path = format!("{}/tests/fixtures/logs/{scenario}/node{node}.txt", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// podman could not start the container (a mount whose source is missing): its words, and
    /// its exit 125, are the engine's launch failure, not the training script's error.
    #[test]
    fn a_container_engines_error_is_launch_not_user() {
        let rules = RuleTable::new(&[]);
        let text = "Error: statfs /nonexistent/qa: no such file or directory";
        let nodes = [node(0, text, NodeExit::ExitCode(125), 0, 100, None)];
        let v = classify(&nodes, Trigger::NodeFailed, &rules).unwrap();
        assert_eq!(v.class, FailureClass::Launch, "{v:?}");
        assert_eq!(v.root_cause.unwrap().line.as_deref(), Some(text));
        // Exit 125 with nothing said: the engine's too.
        let nodes = [node(0, "", NodeExit::ExitCode(125), 0, 100, None)];
        assert_eq!(classify(&nodes, Trigger::NodeFailed, &rules).unwrap().class, FailureClass::Launch);
    }

    #[test]
    fn a_launcher_that_cannot_import_torch_is_launch_not_user() {
        let rules = RuleTable::new(&[]);
        for scenario in ["torchrun-broken-torch", "deepspeed-broken-torch"] {
            let nodes = [node(0, &fixture(scenario, 0), NodeExit::ExitCode(1), 0, 100, None)];
            let v = classify(&nodes, Trigger::NodeFailed, &rules).unwrap();
            assert_eq!(v.class, FailureClass::Launch, "{scenario}: {v:?}");
            assert!(v.hint.contains("herd doctor"), "{scenario}");
        }
        // A worker's own ImportError, reported by torchrun, stays the user's.
        let worker = "Traceback (most recent call last):\n  File \"/w/train.py\", line 3, in <module>\n    import missing\n\
            ModuleNotFoundError: No module named 'missing'\n  File \"/opt/venv/bin/torchrun\", line 8, in <module>\n    sys.exit(main())\n\
            torch.distributed.elastic.multiprocessing.errors.ChildFailedError:";
        let nodes = [node(0, worker, NodeExit::ExitCode(1), 0, 100, None)];
        assert_eq!(classify(&nodes, Trigger::NodeFailed, &rules).unwrap().class, FailureClass::User);
    }

    /// The quoted line of a launch failure is the exception, not the traceback's frame that
    /// the launch rule matched (`from torch.distributed.run import main`).
    #[test]
    fn a_launch_failure_quotes_the_exception_not_the_frame() {
        let rules = RuleTable::new(&[]);
        for scenario in ["torchrun-broken-torch", "deepspeed-broken-torch"] {
            let nodes = [node(0, &fixture(scenario, 0), NodeExit::ExitCode(1), 0, 100, None)];
            let v = classify(&nodes, Trigger::NodeFailed, &rules).unwrap();
            let line = v.root_cause.unwrap().line;
            assert_eq!(line.as_deref(), Some("ImportError: broken on purpose"), "{scenario}");
        }
    }

    /// torchrun runs herd's rank wrapper (see mux.py), which it names where the user's program
    /// belongs: `of binary: /tmp/herd-out-…/rank`, `/tmp/herd-out-…/rank FAILED`.
    fn wrapped(log: &str) -> String {
        let venv_python = "/root/.cache/herd/venv-torch2.15.0-ds0.19.8/bin/python3";
        let wrapper = "/tmp/herd-out-5f2a9c1b0d3e/rank";
        let log = log.replace(&format!("of binary: {venv_python}"), &format!("of binary: {wrapper}"));
        log.lines()
            .map(|l| match l.ends_with(" FAILED") && !l.starts_with(' ') {
                true => format!("{wrapper} FAILED\n"),
                false => format!("{l}\n"),
            })
            .collect()
    }

    #[test]
    fn herds_rank_wrapper_is_never_quoted_as_the_users_program() {
        let rules = RuleTable::new(&[]);
        let killed = wrapped(&fixture("torchrun-sigkill", 1));
        assert!(killed.contains("of binary: /tmp/herd-out-") && killed.contains("/rank FAILED"));
        let nodes = [node(1, &killed, NodeExit::ExitCode(1), 0, 100, None)];
        let line = classify(&nodes, Trigger::NodeFailed, &rules).unwrap().root_cause.unwrap().line.unwrap();
        assert!(line.ends_with("failed (exitcode: -9) local_rank: 1 (pid: 29288)"), "{line}");

        // An exception no rule knows: the traceback's last one, not torchrun's report after it.
        let boom = "[rank0]: Traceback (most recent call last):\n[rank0]:   File \"/w/train.py\", line 5, in <module>\n\
            [rank0]:     raise RuntimeError(\"boom\")\n[rank0]: RuntimeError: boom\n\
            E1202 10:00:00.000000 12 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 13) of binary: /root/.cache/herd/venv-torch2.15.0-ds0.19.8/bin/python3\n\
            Traceback (most recent call last):\n  File \"/opt/venv/bin/torchrun\", line 8, in <module>\n    sys.exit(main())\n\
            torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n=====\ntrain.py FAILED\n-----\n\
            Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 13)\n\
            error_file: <N/A>\n  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n=====\n";
        let nodes = [node(0, &wrapped(boom), NodeExit::ExitCode(1), 0, 100, None)];
        let v = classify(&nodes, Trigger::NodeFailed, &rules).unwrap();
        assert_eq!(v.root_cause.unwrap().line.as_deref(), Some("[rank0]: RuntimeError: boom"));

        // Without a traceback, torchrun's line without the wrapper, not its FAILED header.
        let quiet = boom.lines().skip(4).collect::<Vec<_>>().join("\n");
        let nodes = [node(0, &wrapped(&quiet), NodeExit::ExitCode(1), 0, 100, None)];
        let line = classify(&nodes, Trigger::NodeFailed, &rules).unwrap().root_cause.unwrap().line.unwrap();
        assert!(line.ends_with("failed (exitcode: 1) local_rank: 0 (pid: 13)"), "{line}");
    }

    /// A node whose lines arrived one millisecond apart from `first_ms`.
    fn node(
        rank: usize,
        text: &str,
        exit: NodeExit,
        first_ms: u64,
        ended_ms: u64,
        stop_ms: Option<u64>,
    ) -> NodeOutcome {
        NodeOutcome {
            node_rank: rank,
            host: format!("10.0.0.{}", rank + 1),
            first_rank: 2 * rank as u32,
            exit,
            ended_at: Duration::from_millis(ended_ms),
            stop_requested_at: stop_ms.map(Duration::from_millis),
            lost_at: None,
            late_fleet: false,
            processes: Vec::new(),
            stacks: Vec::new(),
            lines: text
                .lines()
                .filter(|l| !l.is_empty())
                .enumerate()
                .map(|(i, l)| TimedLine {
                    at: Duration::from_millis(first_ms + i as u64),
                    text: l.to_string(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_killed_rank_is_the_root_cause_even_when_its_peers_complain_first() {
        let rules = RuleTable::new(&[]);
        // The peers' "Connection closed by peer" arrives before the dead rank's node reports.
        let nodes = [
            node(0, &fixture("torchrun-sigkill", 0), NodeExit::ExitCode(1), 0, 2_000, Some(1_500)),
            node(1, &fixture("torchrun-sigkill", 1), NodeExit::ExitCode(1), 500, 1_500, None),
            node(2, &fixture("torchrun-sigkill", 2), NodeExit::ExitCode(1), 100, 2_100, Some(1_500)),
        ];
        let v = classify(&nodes, Trigger::NodeFailed, &rules).unwrap();
        assert_eq!(v.class, FailureClass::Crash);
        assert_eq!(v.root_cause.as_ref().unwrap().node_rank, 1);
        assert_eq!(
            (v.root_cause.as_ref().unwrap().rank, v.root_cause.as_ref().unwrap().local_rank),
            (Some(3), Some(1))
        );
        assert_eq!(v.root_cause.as_ref().unwrap().exit, NodeExit::Signal(9));
        let consequences: Vec<(usize, FailureClass)> =
            v.consequences.iter().map(|c| (c.node_rank, c.class)).collect();
        assert_eq!(consequences, [(0, FailureClass::Comm), (2, FailureClass::Comm)]);
    }

    /// herd sees a fatal line no sooner than the node printed it, and its stop is as of then:
    /// on a clock that does not move between the two (a test's paused time), the line is at
    /// the stop's own instant, and is still the failure's, not the teardown's.
    #[test]
    fn the_line_that_made_herd_stop_is_the_failure_even_at_the_stops_instant() {
        let rules = RuleTable::new(&[]);
        let nodes = [
            node(
                0,
                "step 1\nSegmentation fault (core dumped)\n",
                NodeExit::Signal(15),
                999,
                1_100,
                Some(1_000),
            ),
            node(1, "step 1\n", NodeExit::Signal(15), 999, 1_100, Some(1_000)),
        ];
        let v = classify(&nodes, Trigger::NodeFailed, &rules).expect("a failure");
        assert_eq!(v.class, FailureClass::Crash);
        let root = v.root_cause.unwrap();
        assert_eq!((root.node_rank, root.line.as_deref()), (0, Some("Segmentation fault (core dumped)")));
        assert!(v.consequences.is_empty(), "{:?}", v.consequences);
    }

    /// herd stops the gang at torchrun's first "failed (exitcode: -9)" line, so torchrun on
    /// the failing node is stopped before it prints its Root Cause block: that line alone
    /// still names the rank and the signal.
    #[test]
    fn a_killed_rank_stopped_early_is_still_named_from_torchruns_first_line() {
        let rules = RuleTable::new(&[]);
        let full = fixture("torchrun-sigkill", 1);
        let cut =
            full.find("Traceback (most recent call last):\n  File").map_or(full.as_str(), |i| &full[..i]);
        assert!(cut.contains("failed (exitcode: -9) local_rank: 1") && !cut.contains("Root Cause"), "{cut}");
        let nodes = [
            node(0, &fixture("torchrun-sigkill", 0), NodeExit::Signal(15), 0, 400, Some(300)),
            node(
                1,
                &format!("{cut}SignalException: Process 1 got signal: 15\n"),
                NodeExit::ExitCode(1),
                100,
                400,
                Some(300),
            ),
            node(2, &fixture("torchrun-sigkill", 2), NodeExit::Signal(15), 50, 400, Some(300)),
        ];
        let v = classify(&nodes, Trigger::NodeFailed, &rules).unwrap();
        assert_eq!(v.class, FailureClass::Crash);
        assert_eq!(v.root_cause.as_ref().unwrap().node_rank, 1);
        assert_eq!(
            (v.root_cause.as_ref().unwrap().rank, v.root_cause.as_ref().unwrap().local_rank),
            (Some(3), Some(1))
        );
        assert_eq!(v.root_cause.as_ref().unwrap().exit, NodeExit::Signal(9));
    }

    #[test]
    fn the_crash_pattern_matches_what_kills_and_not_what_launchers_send() {
        let rules = RuleTable::new(&[RuleSpec {
            pattern: "my custom abort".into(),
            class: FailureClass::Crash,
            blame: false,
        }]);
        let p = rules.crash_pattern().unwrap();
        for line in [
            "E1130 11:49:30.970000 29262 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 29288) of binary: python3",
            "Segmentation fault (core dumped)",
            "[INFO] [launch.py:319:sigkill_handler] Killing subprocess 5 ... exits with return code = -11",
            "my custom abort",
        ] {
            assert!(p.is_match(line.as_bytes()), "{line}");
        }
        for line in [
            "failed (exitcode: -15) local_rank: 0 (pid: 1) of binary: python3",
            "failed (exitcode: 1) local_rank: 0 (pid: 1) of binary: python3",
            "Connection reset by peer",
            "step 9 loss 0.1",
        ] {
            assert!(!p.is_match(line.as_bytes()), "{line}");
        }
    }

    #[test]
    fn a_syntax_error_is_the_users_and_shows_the_error() {
        let rules = RuleTable::new(&[]);
        let nodes = [
            node(0, &fixture("torchrun-syntax-error", 0), NodeExit::Signal(15), 10, 900, Some(800)),
            node(1, &fixture("torchrun-syntax-error", 1), NodeExit::ExitCode(1), 0, 800, None),
            node(2, &fixture("torchrun-syntax-error", 2), NodeExit::Signal(15), 20, 950, Some(800)),
        ];
        let v = classify(&nodes, Trigger::NodeFailed, &rules).unwrap();
        assert_eq!(v.class, FailureClass::User);
        assert_eq!(v.root_cause.as_ref().unwrap().node_rank, 1);
        assert!(v.root_cause.as_ref().unwrap().line.as_deref().unwrap().contains("SyntaxError"), "{v:?}");
    }

    #[test]
    fn a_taken_master_port_is_port() {
        let rules = RuleTable::new(&[]);
        let nodes = [
            node(0, &fixture("torchrun-port-in-use", 0), NodeExit::ExitCode(1), 50, 1_000, None),
            node(1, &fixture("torchrun-port-in-use", 1), NodeExit::Signal(15), 0, 1_200, Some(1_000)),
            node(2, &fixture("torchrun-port-in-use", 2), NodeExit::Signal(15), 0, 1_200, Some(1_000)),
        ];
        let v = classify(&nodes, Trigger::NodeFailed, &rules).unwrap();
        assert_eq!(v.class, FailureClass::Port);
        assert_eq!(v.root_cause.as_ref().unwrap().node_rank, 0);
        assert!(v.root_cause.as_ref().unwrap().line.as_deref().unwrap().contains("EADDRINUSE"), "{v:?}");
    }

    #[test]
    fn a_partitioned_node_is_lost_and_its_peers_are_consequences() {
        let rules = RuleTable::new(&[]);
        let lost = NodeExit::Lost("the remote process has terminated".into());
        let nodes = [
            node(0, &fixture("torchrun-link-down", 0), NodeExit::ExitCode(1), 0, 12_500, Some(12_000)),
            node(1, &fixture("torchrun-link-down", 1), NodeExit::ExitCode(1), 0, 12_400, Some(12_000)),
            node(2, &fixture("torchrun-link-down", 2), lost.clone(), 0, 12_000, None),
        ];
        let v = classify(&nodes, Trigger::NodeFailed, &rules).unwrap();
        assert_eq!(v.class, FailureClass::NodeLost);
        assert_eq!(v.root_cause.as_ref().unwrap().node_rank, 2);
        assert_eq!(v.root_cause.as_ref().unwrap().exit, lost);
        assert_eq!(v.root_cause.as_ref().unwrap().line, None);
    }

    #[test]
    fn the_node_herd_saw_lost_first_is_the_root_cause_not_one_its_teardown_ended_lost() {
        // Node 2 was judged silent at 20 s; herd then killed every node, and gave up on all of
        // them at the kill deadline, node 0 a little before node 2.
        let rules = RuleTable::new(&[]);
        let gave_up = NodeExit::Lost("no exit status 15 s after SIGKILL was requested".into());
        let mut nodes = [
            node(0, "", gave_up.clone(), 0, 35_000, Some(20_000)),
            node(1, "", gave_up.clone(), 0, 35_200, Some(20_000)),
            node(2, "", NodeExit::Lost("no heartbeat for 15s".into()), 0, 35_100, Some(20_000)),
        ];
        nodes[2].lost_at = Some(Duration::from_millis(20_000));
        let v = classify(&nodes, Trigger::NodeFailed, &rules).unwrap();
        assert_eq!(v.class, FailureClass::NodeLost);
        assert_eq!(v.root_cause.as_ref().unwrap().node_rank, 2, "{v:?}");
    }

    #[test]
    fn a_node_the_teardown_ended_lost_is_no_root_cause_before_a_comm_error() {
        // 252 nodes on a host at load 300 (issue 39, item 4): node 3 printed a communication
        // error and exited 1; herd stopped the rest, and gave up on node 1's exit status at
        // the kill deadline, its host strained. The attempt was node 3's, not a lost node's.
        let rules = RuleTable::new(&[]);
        let gave_up = NodeExit::Lost("no exit status 15 s after SIGKILL was requested".into());
        let mut nodes = [
            node(0, "", NodeExit::Signal(9), 0, 3_000, Some(2_000)),
            node(1, "", gave_up.clone(), 0, 39_000, Some(2_000)),
            node(3, "RuntimeError: Connection closed by peer\n", NodeExit::ExitCode(1), 1_999, 2_000, None),
        ];
        // On a host at ease, a node that does not end by the kill deadline (wedged in a
        // driver) is the attempt's own failure, before a peer's comm error.
        let v = classify(&nodes, Trigger::NodeFailed, &rules).unwrap();
        assert_eq!((v.class, v.root_cause.as_ref().unwrap().node_rank), (FailureClass::NodeLost, 1), "{v:?}");
        nodes[1].late_fleet = true;
        let v = classify(&nodes, Trigger::NodeFailed, &rules).unwrap();
        assert_eq!(v.class, FailureClass::Comm, "{v:?}");
        assert_eq!(v.root_cause.as_ref().unwrap().node_rank, 3, "{v:?}");
        assert_eq!(
            v.consequences.iter().map(|c| (c.node_rank, c.class)).collect::<Vec<_>>(),
            [(1, FailureClass::NodeLost)]
        );
        // With nothing else failed, the node is still named: the loss is all there is.
        let v = classify(&nodes[..2], Trigger::NodeFailed, &rules).unwrap();
        assert_eq!((v.class, v.root_cause.unwrap().node_rank), (FailureClass::NodeLost, 1));
    }

    /// The hang fixture, stopped by herd where torchrun says "Received 15 death signal".
    fn hung_nodes() -> Vec<NodeOutcome> {
        (0..3)
            .map(|n| {
                let text = fixture("torchrun-hang", n);
                let stop =
                    text.lines().filter(|l| !l.is_empty()).position(|l| l.contains("death signal")).unwrap();
                node(n, &text, NodeExit::ExitCode(1), 0, 1_000, Some(stop as u64))
            })
            .collect()
    }

    #[test]
    fn a_hang_with_no_evidence_blames_no_node() {
        // Every rank stopped making progress at once: the output does not say which one is
        // stuck, and the lowest node rank (or the last to print) is no culprit.
        let v = classify(&hung_nodes(), Trigger::Hang, &RuleTable::new(&[])).unwrap();
        assert_eq!(v.class, FailureClass::Hang);
        assert_eq!(v.root_cause, None, "{v:?}");
    }

    #[test]
    fn a_hang_is_pinned_on_the_rank_found_stopped() {
        // One worker on node 1 was SIGSTOPped: its agent saw it in state T.
        let mut nodes = hung_nodes();
        let worker =
            |pid, state, rank, local| ProcessState { pid, state, rank: Some(rank), local_rank: Some(local) };
        nodes[0].processes = vec![worker(10, 'S', 0, 0), worker(11, 'S', 1, 1)];
        nodes[1].processes = vec![
            ProcessState { pid: 19, state: 'S', rank: None, local_rank: None },
            worker(20, 'S', 2, 0),
            worker(21, 'T', 3, 1),
        ];
        nodes[2].processes = vec![worker(30, 'S', 4, 0), worker(31, 'S', 5, 1)];
        let v = classify(&nodes, Trigger::Hang, &RuleTable::new(&[])).unwrap();
        let r = v.root_cause.unwrap();
        assert_eq!((r.node_rank, r.rank, r.local_rank), (1, Some(3), Some(1)));
        assert_eq!(
            r.line.as_deref(),
            Some("rank 3 (pid 21) was stopped (state T) when the job stopped making progress")
        );
        // Stuck in the kernel counts the same way.
        nodes[1].processes[2].state = 'S';
        nodes[2].processes[0].state = 'D';
        let r = classify(&nodes, Trigger::Hang, &RuleTable::new(&[])).unwrap().root_cause.unwrap();
        assert_eq!((r.node_rank, r.rank), (2, Some(4)));
    }

    /// A NCCL job hung on one rank stuck in its data loader: all_reduce returned at once on
    /// the others, which wait at a later synchronisation in the user's code, not in
    /// torch.distributed. Its stack still stands out, and the hang is pinned on it.
    #[test]
    fn a_hang_is_pinned_on_the_odd_stack_when_the_others_wait_in_user_code() {
        let waiting = "Thread 7 (idle): \"MainThread\"\n    \
            synchronize (/v/lib/python3.11/site-packages/torch/cuda/__init__.py:792)\n    \
            main (/work/train.py:55)\n";
        let loading = "Thread 8 (idle): \"MainThread\"\n    \
            poll (/usr/lib/python3.11/multiprocessing/connection.py:440)\n    \
            main (/work/train.py:48)\n";
        let mut nodes = hung_nodes();
        for n in &mut nodes {
            n.stacks = (n.first_rank..n.first_rank + 2)
                .map(|rank| {
                    let dump = if rank == 3 { loading } else { waiting };
                    stacks::RankStack { rank, pid: 100 + rank, dump: Ok(dump.into()) }
                })
                .collect();
        }
        let all: Vec<stacks::RankStack> = nodes.iter().flat_map(|n| n.stacks.clone()).collect();
        let summary = stacks::summarize(&all, "/work", stacks::Taken::Stalled);
        let v = classify_with(&nodes, Trigger::Hang, &RuleTable::new(&[]), Some(&summary)).unwrap();
        let r = v.root_cause.expect("the odd rank is named");
        assert_eq!((r.node_rank, r.rank, r.local_rank), (1, Some(3), Some(1)));
        assert!(r.line.as_deref().unwrap().contains("1 rank (3) in poll (train.py:48), the likely culprit"));
    }

    #[test]
    fn a_hang_is_pinned_on_a_node_that_went_quiet_well_before_the_others() {
        let rules = RuleTable::new(&[]);
        // Node 1's last line came 10 s before anyone else's; teardown noise comes after.
        let mut nodes = vec![
            node(0, "step 40", NodeExit::ExitCode(1), 20_000, 30_000, Some(29_000)),
            node(1, "step 20", NodeExit::ExitCode(1), 10_000, 30_000, Some(29_000)),
            node(2, "step 40", NodeExit::ExitCode(1), 20_000, 30_000, Some(29_000)),
        ];
        let r = classify(&nodes, Trigger::Hang, &rules).unwrap().root_cause.unwrap();
        assert_eq!((r.node_rank, r.line.as_deref()), (1, Some("step 20")));
        // A second sooner is no lead: nobody is named.
        nodes[1] = node(1, "step 39", NodeExit::ExitCode(1), 19_000, 30_000, Some(29_000));
        assert_eq!(classify(&nodes, Trigger::Hang, &rules).unwrap().root_cause, None);
    }

    #[test]
    fn a_clean_run_has_no_verdict() {
        let rules = RuleTable::new(&[]);
        let ok = [node(0, "step 1\nresult ok", NodeExit::ExitCode(0), 0, 10, None)];
        assert_eq!(classify(&ok, Trigger::NodeFailed, &rules), None);
    }
}
