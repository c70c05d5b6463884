//! How the agent is started: `AgentInvocation`, the inputs of one node's agent (its grace,
//! heartbeat, marker, job, cleanup, presweep, probe), as an argv here and as the line a node's
//! shell runs; `SharedTexts`, which holds each text of many nodes' invocations once. Its tests
//! run the agent (`agent.sh`) on this machine, end to end: the env block, the teardown, the
//! sweeps it runs, the probe phase.

use std::sync::Arc;

use super::scripts::{AGENT_NAME, AGENT_SCRIPT};
use super::shell::{command_line, subreaper_line};

/// What the agent needs to start one node's job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentInvocation {
    /// Seconds between SIGTERM and SIGKILL when the group is torn down.
    pub grace_secs: u64,
    /// Seconds between heartbeat lines, the agent's and herd's `beat`s to it alike.
    pub heartbeat_secs: u64,
    /// The fence: seconds without a `beat` from herd after which the agent takes herd for
    /// gone and ends its job, as at EOF. `None`: only EOF ends it (and herd sends no beats).
    pub fence_secs: Option<u64>,
    /// `NAME=VALUE` held in the environment of every job process (the env block sets it).
    pub marker: String,
    /// The job as a shell snippet (see `shell::job_snippet`). Shared: every copy of a node's
    /// invocation (the agent started ahead, the attempt's) holds the same one, some KiB.
    pub job: Arc<str>,
    /// A shell command the agent runs once the job is gone, whichever way it went (e.g. remove
    /// the job's container). No env; its output is discarded.
    pub cleanup: Option<String>,
    /// A shell command the agent runs before it starts the job (sweep this config's leftovers),
    /// with no env and stdin from /dev/null. Each line it prints is reported as `herd-agent
    /// swept LINE`.
    pub presweep: Option<String>,
    /// After the presweep, report the node's ports in use, and only then read the env block
    /// (on the master, when herd chooses its port).
    pub report_ports: bool,
    /// The preflight's probe as a job snippet, run in the same login before the job (see
    /// docs/design/agent.md, "One login per node"): its own env block first, its output as
    /// `Fact` messages, then `Probed`; the job's env block then ends it and starts the job.
    pub probe: Option<Arc<str>>,
}

impl AgentInvocation {
    /// argv for running the agent on this machine:
    /// `sh -c AGENT herd-agent GRACE HEARTBEAT MARKER JOB CLEANUP PRESWEEP PORTS PROBE FENCE`.
    pub fn local_argv(&self) -> Vec<String> {
        vec![
            "sh".into(),
            "-c".into(),
            AGENT_SCRIPT.into(),
            AGENT_NAME.into(),
            self.grace_secs.to_string(),
            self.heartbeat_secs.to_string(),
            self.marker.clone(),
            self.job.to_string(),
            self.cleanup.clone().unwrap_or_default(),
            self.presweep.clone().unwrap_or_default(),
            if self.report_ports { "ports" } else { "" }.into(),
            self.probe.as_deref().unwrap_or_default().to_string(),
            self.fence_secs.map(|s| s.to_string()).unwrap_or_default(),
        ]
    }

    /// The command for `sh` that ssh runs (through `for_login_shell`) and srun: the agent's
    /// argv, started through /usr/bin/perl or python3 where the node has one, which makes it a
    /// child subreaper (the flag survives exec) and then execs it unchanged.
    pub fn remote_command(&self) -> String {
        subreaper_line(&command_line(self.local_argv()))
    }
}

/// The texts of many nodes' invocations, each held once: a probe's is the same on every
/// worker, and a `command` job's on every node, some KiB each. For while the invocations are
/// made: it keeps every text it has seen.
#[derive(Default)]
pub struct SharedTexts(std::sync::Mutex<std::collections::HashSet<Arc<str>>>);

impl SharedTexts {
    /// `inv`, its job and probe replaced by the copies already held of the same texts.
    pub fn invocation(&self, mut inv: AgentInvocation) -> AgentInvocation {
        inv.job = self.text(inv.job);
        inv.probe = inv.probe.map(|p| self.text(p));
        inv
    }

    fn text(&self, text: Arc<str>) -> Arc<str> {
        let mut held = self.0.lock().expect("not poisoned");
        match held.get(&text) {
            Some(same) => same.clone(),
            None => {
                held.insert(text.clone());
                text
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};

    use proptest::prelude::*;

    use super::super::procs::{sweep_call, with_procs, SweepScope};
    use super::super::protocol::{parse_agent_line, AgentMessage, Control};
    use super::super::shell::{env_block, for_login_shell, in_bash, job_snippet, quote, under_mux};
    use super::super::testing::*;
    use super::*;

    /// Equal texts are held once, whichever invocation brought them; different ones apart.
    #[test]
    fn shared_texts_hold_each_text_once() {
        let inv = |job: &str, probe: &str| AgentInvocation {
            heartbeat_secs: 1,
            probe: Some(probe.into()),
            ..agent("M=1", job)
        };
        let shared = SharedTexts::default();
        let a = shared.invocation(inv("exec true", "probe worker"));
        let b = shared.invocation(inv("exec true", "probe worker"));
        let c = shared.invocation(inv("exec false", "probe master"));
        assert!(Arc::ptr_eq(&a.job, &b.job));
        assert!(Arc::ptr_eq(a.probe.as_ref().unwrap(), b.probe.as_ref().unwrap()));
        assert!(!Arc::ptr_eq(&a.job, &c.job) && &*c.job == "exec false");
        assert_eq!(c.probe.as_deref(), Some("probe master"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_env_value_round_trips_through_the_agent(v in "[^\u{0}]{0,40}") {
            let inv = agent(format!("HERD_T_MARK={}", test_mark()), "printf '%s' \"$HERD_T\"");
            let out = run_agent(&inv, &env_block([("HERD_T", v.as_str())]));
            prop_assert_eq!(String::from_utf8_lossy(&out.stdout), v);
        }
    }

    /// The agent as a node's login shell starts it for sshd: `sh -c` of its remote command
    /// line, with all three pipes.
    fn spawn_remote(inv: &AgentInvocation) -> std::process::Child {
        spawn_under("sh", inv)
    }

    /// The agent as sshd starts it where the login shell is `shell`.
    fn spawn_under(shell: &str, inv: &AgentInvocation) -> std::process::Child {
        Command::new(shell)
            .arg("-c")
            .arg(for_login_shell(&inv.remote_command()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Run the agent here, feeding `input` and holding its stdin open until the job is done
    /// (closing it early is the signal to tear the job down).
    fn run_agent(inv: &AgentInvocation, input: &[u8]) -> std::process::Output {
        use std::io::{Read, Write};
        let mut child = spawn_agent(inv);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input).unwrap();
        let mut stdout = Vec::new();
        child.stdout.take().unwrap().read_to_end(&mut stdout).unwrap();
        drop(stdin);
        let mut out = child.wait_with_output().unwrap();
        out.stdout = stdout;
        out
    }

    /// Live (not zombie) processes of a process group, from /proc.
    fn live_members(pgid: u32) -> Vec<u32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                    return false;
                };
                let Some((_, rest)) = stat.rsplit_once(')') else {
                    return false;
                };
                let fields: Vec<&str> = rest.split_whitespace().collect();
                fields.first() != Some(&"Z") && fields.get(2) == Some(&pgid.to_string().as_str())
            })
            .collect()
    }

    /// Live processes whose argv is exactly `argv`.
    fn processes_with_argv(argv: &[&str]) -> Vec<u32> {
        let want: Vec<u8> = argv.iter().flat_map(|w| [w.as_bytes(), b"\0"].concat()).collect();
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
            .collect()
    }

    /// An agent for a test: `job` under `marker` (`NAME=VALUE`), with a grace of 1 s, a
    /// heartbeat that does not come within a test, and nothing else.
    fn agent(marker: impl Into<String>, job: impl Into<Arc<str>>) -> AgentInvocation {
        AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 60,
            fence_secs: None,
            marker: marker.into(),
            job: job.into(),
            cleanup: None,
            presweep: None,
            report_ports: false,
            probe: None,
        }
    }

    /// An agent started here, `env` sent as its env block, once it has started the job.
    struct Running {
        child: std::process::Child,
        /// Held open: closing it tears the job down.
        stdin: std::process::ChildStdin,
        /// Read up to the job's start.
        stderr: std::io::BufReader<std::process::ChildStderr>,
        /// The job's process group.
        pgid: u32,
    }

    fn start(inv: &AgentInvocation, env: &[u8]) -> Running {
        use std::io::Write;
        let mut child = spawn_agent(inv);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(env).unwrap();
        let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let pgid = started(&mut stderr);
        Running { child, stdin, stderr, pgid }
    }

    /// A sleep duration no other test uses, so that its process can be found by its argv.
    fn unique_secs(base: u32) -> String {
        (base + std::process::id() % 1000).to_string()
    }

    #[test]
    fn closing_stdin_tears_the_whole_group_down() {
        // The job ignores SIGTERM and leaves a grandchild: only SIGKILL of the group ends both.
        let inv = agent(
            format!("HERD_T_MARK={}", test_mark()),
            "trap '' TERM; sleep 60 & sleep 60; echo not reached",
        );
        let Running { child, stdin, stderr: _stderr, pgid } = start(&inv, &env_block([]));
        let group_alive = || !live_members(pgid).is_empty();
        // The agent names the group as it forks its leader, which then calls setsid.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !group_alive() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(group_alive());
        let started = std::time::Instant::now();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
        assert!(out.stdout.is_empty());
        assert_eq!(live_members(pgid), Vec::<u32>::new(), "process group {pgid} outlived the agent");
    }

    #[test]
    fn nothing_of_the_heartbeat_outlives_the_agent() {
        // A heartbeat interval no other test uses, so that its sleep can be told apart.
        let beat = 4000 + std::process::id() % 1000;
        let inv = AgentInvocation {
            heartbeat_secs: beat.into(),
            ..agent(format!("HERD_T_MARK=beat-{beat}"), "sleep 0.3")
        };
        let out = run_agent(&inv, &env_block([]));
        assert!(out.status.success());
        let sleep = ["sleep".to_string(), beat.to_string()];
        let left = processes_with_argv(&[&sleep[0], &sleep[1]]);
        assert_eq!(left, Vec::<u32>::new(), "the heartbeat's sleep outlived the agent");
    }

    #[test]
    fn processes_that_leave_the_group_are_found_by_marker_and_stopped() {
        let marker = format!("HERD_T_MARK=escape-{}", std::process::id());
        let inv = agent(marker.clone(), "setsid sleep 61 </dev/null >/dev/null 2>&1 & sleep 61");
        let (name, value) = marker.split_once('=').unwrap();
        let Running { mut child, stdin, .. } = start(&inv, &env_block([(name, value)]));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        // The job's bash, its sleep, and the sleep that left for a session of its own.
        while processes_with_env(&marker).len() < 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(processes_with_env(&marker).len(), 3);
        drop(stdin);
        child.wait().unwrap();
        assert_eq!(processes_with_env(&marker), Vec::<u32>::new(), "a process outlived the agent");
    }

    /// Found by descent alone, whatever its name: this one's (from the file it runs) holds
    /// what a parser of /proc/PID/stat that stopped at its first `) ` would take for its
    /// state and parent. Not numbers: another program on the machine that parses so (a CI
    /// runner's process reaper, say) must not read pid 1 there and signal its group.
    #[test]
    fn a_job_process_that_cleared_its_environment_is_stopped_too() {
        use std::io::Write;
        let secs = unique_secs(5000);
        let dir = tempfile::tempdir().unwrap();
        let sleep = dir.path().join("z) S z z z (z");
        let found = Command::new("sh").args(["-c", "command -v sleep"]).output().unwrap().stdout;
        std::os::unix::fs::symlink(String::from_utf8(found).unwrap().trim_end(), &sleep).unwrap();
        let sleep = sleep.to_str().unwrap();
        let inv = agent(
            format!("HERD_T_MARK={}", test_mark()),
            format!("setsid env -i '{sleep}' {secs} </dev/null >/dev/null 2>&1 & sleep 61"),
        );
        let mut child = spawn_agent(&inv);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&env_block([("HERD_T_MARK", test_mark().as_str())])).unwrap();
        assert!(wait_for(|| !processes_with_argv(&[sleep, &secs]).is_empty()), "the job did not start");
        drop(stdin);
        child.wait().unwrap();
        assert_eq!(processes_with_argv(&[sleep, &secs]), Vec::<u32>::new(), "env -i let it escape");
    }

    #[test]
    fn what_the_job_orphans_is_stopped_once_its_leader_has_exited() {
        // Through sh -c, as sshd runs it: the agent starts as a child subreaper, so the
        // sleep, orphaned when its shell exits, stays the agent's descendant.
        let secs = unique_secs(6000);
        let inv = agent(
            format!("HERD_T_MARK={}", test_mark()),
            format!("setsid env -i sleep {secs} </dev/null >/dev/null 2>&1 & sleep 0.5; exit 0"),
        );
        use std::io::{Read, Write};
        let mut child = spawn_remote(&inv);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&env_block([])).unwrap();
        let mut stderr = String::new();
        child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        drop(stdin);
        child.wait().unwrap();
        assert!(stderr.contains("herd-agent exit 0"), "{stderr}");
        assert_eq!(
            processes_with_argv(&["sleep", &secs]),
            Vec::<u32>::new(),
            "the orphan outlived the agent"
        );
    }

    #[test]
    fn a_process_that_survives_sigkill_is_reported_not_passed_over() {
        use std::io::{BufRead, BufReader, Read, Write};
        // A frozen process (cgroup v1 freezer) is stuck in the kernel, as one on a hung NFS
        // mount or GPU driver is: SIGKILL waits until it is thawed.
        let freezer = std::path::Path::new("/sys/fs/cgroup/freezer");
        assert!(freezer.is_dir(), "this test needs the cgroup v1 freezer (and root)");
        let group = freezer.join(format!("herd-test-{}", std::process::id()));
        std::fs::create_dir_all(&group).unwrap();
        let secs = unique_secs(7000);
        let inv = agent(format!("HERD_T_MARK={}", test_mark()), format!("sleep {secs} & wait"));
        let mut child = spawn_agent(&inv);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&env_block([("HERD_T_MARK", test_mark().as_str())])).unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        assert!(wait_for(|| !processes_with_argv(&["sleep", &secs]).is_empty()), "the job did not start");
        let stuck = processes_with_argv(&["sleep", &secs])[0];
        std::fs::write(group.join("cgroup.procs"), stuck.to_string()).unwrap();
        std::fs::write(group.join("freezer.state"), "FROZEN").unwrap();
        drop(stdin);
        let mut said = String::new();
        let mut line = String::new();
        while stderr.read_line(&mut line).unwrap() > 0 {
            said.push_str(&line);
            line.clear();
        }
        std::fs::write(group.join("freezer.state"), "THAWED").unwrap();
        child.wait().unwrap();
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest);
        assert!(wait_for(|| processes_with_argv(&["sleep", &secs]).is_empty()), "killed once thawed");
        let _ = std::fs::remove_dir(&group);
        let messages: Vec<AgentMessage> = said.lines().map(parse_agent_line).collect();
        assert!(messages.contains(&AgentMessage::Unstopped(vec![stuck])), "{said}");
    }

    #[test]
    fn term_fast_ends_a_launcher_as_soon_as_its_workers_are_gone() {
        use std::io::{BufRead, Write};
        // A launcher like torchrun: on SIGTERM it stops its worker, then takes 8 s to exit, in
        // its own process as torch's interpreter shutdown does (bash's read -t on a FIFO: a
        // `sleep` would be another process of the job). The worker has a LOCAL_RANK and leaves
        // the group, as torchrun's do.
        let job = "f=$(mktemp -u); mkfifo \"$f\"; exec 7<>\"$f\"; rm \"$f\"; \
                   trap 'kill $w; read -t 8 -u 7; exit 1' TERM; LOCAL_RANK=0 setsid sleep 62 & w=$!; wait; wait";
        // Each run with a marker of its own: nothing of the first may reach the second.
        let run = |control: &[u8], mark: String| {
            let inv =
                AgentInvocation { grace_secs: 30, ..agent(format!("HERD_T_MARK={mark}"), in_bash(job)) };
            let Running { mut child, mut stdin, mut stderr, .. } =
                start(&inv, &env_block([("HERD_T_MARK", mark.as_str())]));
            // The worker starts after the trap is set (`mktemp` and `mkfifo`, before it, carry
            // the marker too).
            let worker = || {
                let workers = processes_with_env("LOCAL_RANK=0");
                processes_with_env(&format!("HERD_T_MARK={mark}")).iter().any(|p| workers.contains(p))
            };
            assert!(wait_for(worker));
            let started = std::time::Instant::now();
            stdin.write_all(control).unwrap();
            stdin.flush().unwrap();
            let mut rest = String::new();
            while stderr.read_line(&mut rest).unwrap() > 0 {}
            child.wait().unwrap();
            (started.elapsed(), rest)
        };
        let (took, said) = run(&Control::TermFast.encode(), format!("{}-fast", test_mark()));
        assert!(took < std::time::Duration::from_secs(4), "term-fast took {took:?}: {said}");
        assert!(said.contains("herd-agent exit 137"), "the launcher was SIGKILLed: {said}");
        assert_eq!(processes_with_env(&format!("HERD_T_MARK={}-fast", test_mark())), Vec::<u32>::new());
        // Plain `term` leaves the launcher its time (here: its 8 s).
        let (took, said) = run(&Control::Term.encode(), format!("{}-slow", test_mark()));
        assert!(took >= std::time::Duration::from_secs(7), "term took only {took:?}: {said}");
        assert!(said.contains("herd-agent exit 1"), "{said}");
    }

    /// `term-fast` ends a launcher whose workers are gone, never herd's output multiplexer,
    /// whether it leads the group (a job as herd writes it) or not (a container engine's
    /// client leads, say): it passes on what it still holds and exits by itself, also once
    /// its launcher has exited first and while herd reads its output late.
    #[test]
    fn term_fast_leaves_the_multiplexer_to_pass_on_the_last_lines() {
        use super::super::frames::{Frame, FrameReader};
        use std::io::{Read, Write};
        const BYTES: usize = 100_000;
        let secs = unique_secs(8000);
        // The launcher ends at once on SIGTERM, its worker with it. The worker has written
        // more than the pipes to herd hold: the multiplexer holds the rest until herd reads.
        let worker = format!("head -c {BYTES} /dev/zero | tr '\\0' x; exec sleep {secs}");
        let launcher = format!(
            "trap 'kill $w 2>/dev/null; wait $w; exit 3' TERM; LOCAL_RANK=0 sh -c {} & w=$!; wait",
            quote(&worker)
        );
        let mux = under_mux("python3", &format!("bash -c {}", quote(&launcher)), true);
        for (leads, job) in [(false, format!("{mux}; exit $?")), (true, job_snippet("/", None, &mux))] {
            let mark = format!("{}-relay-{leads}", test_mark());
            // Its grace as long as herd's: a leader that dies of SIGTERM (here, the job's sh
            // where the multiplexer does not lead) would have the agent stop the rest at once.
            let inv = AgentInvocation { grace_secs: 30, ..agent(format!("HERD_T_MARK={mark}"), job) };
            let Running { mut child, mut stdin, mut stderr, .. } =
                start(&inv, &env_block([("HERD_T_MARK", mark.as_str())]));
            assert!(
                wait_for(|| !processes_with_argv(&["sleep", &secs]).is_empty()),
                "the worker did not write"
            );
            stdin.write_all(&Control::TermFast.encode()).unwrap();
            stdin.flush().unwrap();
            // Only the multiplexer is left; the agent's next look (every 50 ms) finds it so,
            // within the wait below but on a machine loaded past reason.
            let alone = wait_for(|| {
                let left = processes_with_env(&format!("HERD_T_MARK={mark}"));
                let cmdline = |p: &u32| std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                let relays =
                    |p: &u32| String::from_utf8_lossy(&cmdline(p)).contains("herd's output multiplexer");
                left.len() == 1 && left.iter().all(relays)
            });
            std::thread::sleep(std::time::Duration::from_millis(1500));
            let mut out = Vec::new();
            child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
            drop(stdin);
            child.wait().unwrap();
            let mut said = String::new();
            stderr.read_to_string(&mut said).unwrap();
            let mut frames = Vec::new();
            let mut reader = FrameReader::default();
            reader.push(&out, &mut frames);
            reader.finish(&mut frames);
            let data: Vec<u8> = frames
                .iter()
                .flat_map(|f| match f {
                    Frame::Data { bytes, .. } => bytes.clone(),
                    _ => vec![],
                })
                .collect();
            let opened = frames.iter().filter(|f| matches!(f, Frame::Open { .. })).count();
            let closed = frames.iter().filter(|f| matches!(f, Frame::Close { .. })).count();
            assert!(alone, "leads {leads}: the multiplexer was not left alone: {said}");
            let xs = data.iter().filter(|&&b| b == b'x').count();
            assert!(xs == BYTES && data.len() == BYTES, "leads {leads}: {xs} of {BYTES} passed on: {said}");
            assert!(
                opened > 0 && closed == opened,
                "leads {leads}: {opened} streams opened, {closed} closed: {said}"
            );
        }
    }

    /// A probe names every process of the job with its state, RANK and LOCAL_RANK (- where
    /// it has none), and dumps the stack of each rank's own process: not of a helper that
    /// inherited its rank's RANK.
    #[test]
    fn a_probe_names_the_jobs_processes_and_dumps_each_ranks_own_only() {
        use std::io::{BufRead, Write};
        let mark = format!("{}-probe", test_mark());
        let inv = agent(
            format!("HERD_T_MARK={mark}"),
            "RANK=3 LOCAL_RANK=1 sh -c 'sleep 63 & wait' & RANK=4 LOCAL_RANK=0 sleep 64 & \
                  sleep 65 & kill -STOP $!; wait",
        );
        let Running { mut child, mut stdin, mut stderr, .. } =
            start(&inv, &env_block([("HERD_T_MARK", mark.as_str())]));
        let marked = format!("HERD_T_MARK={mark}");
        let with = |entry: &str| -> Vec<u32> {
            let job = processes_with_env(&marked);
            processes_with_env(entry).into_iter().filter(|p| job.contains(p)).collect()
        };
        let stopped = || {
            processes_with_env(&marked).into_iter().any(|p| {
                std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T')))
            })
        };
        // Every process there, exec'd (rank 4's sleep has its RANK) and stopped where asked.
        let ready = || processes_with_env(&marked).len() == 5 && with("RANK=4").len() == 1 && stopped();
        assert!(wait_for(ready), "{:?}", processes_with_env(&marked));
        // Rank 3's own process: its shell, not the sleep that inherited its RANK.
        let rank3 = with("RANK=3")
            .into_iter()
            .find(|p| std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with(b"sh\0")))
            .expect("rank 3's shell");
        stdin.write_all(&Control::Probe.encode()).unwrap();
        stdin.flush().unwrap();
        let mut said = Vec::new();
        loop {
            let mut line = String::new();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "no stacks-done in {said:?}");
            if line.trim_end() == "herd-agent stacks-done" {
                break;
            }
            said.push(line.trim_end().to_string());
        }
        drop(stdin);
        child.wait().unwrap();

        let probe = said.iter().find_map(|l| l.strip_prefix("herd-agent probe ")).expect("a probe line");
        let mut seen: Vec<&str> = probe.split(' ').map(|w| w.split_once(':').unwrap().1).collect();
        seen.sort();
        // The job's shell, the stopped sleep, rank 3's shell and its sleep, rank 4's sleep.
        assert_eq!(seen, ["S:-:-", "S:3:1", "S:3:1", "S:4:0", "T:-:-"], "{said:?}");
        // `herd-agent stack RANK PID STATUS`, one a rank.
        let mut dumped: Vec<(&str, &str)> = said
            .iter()
            .filter_map(|l| l.strip_prefix("herd-agent stack "))
            .map(|rest| {
                let mut w = rest.split(' ');
                (w.next().unwrap(), w.next().unwrap())
            })
            .collect();
        dumped.sort();
        assert_eq!(dumped.iter().map(|d| d.0).collect::<Vec<_>>(), ["3", "4"], "{said:?}");
        assert_eq!(dumped[0].1, rank3.to_string(), "rank 3's stack is not its shell's: {said:?}");
    }

    #[test]
    fn the_agent_reports_its_presweep_and_starts_the_job_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let order = dir.path().join("order");
        let inv = AgentInvocation {
            presweep: Some(format!(
                "echo sweep >> {}; echo 12 34; echo \"container herd-k-old-0-$HERD_T_MARK\"; echo noise >&2",
                quote(order.to_str().unwrap())
            )),
            ..agent(
                format!("HERD_T_MARK={}", test_mark()),
                format!("echo job >> {}", quote(order.to_str().unwrap())),
            )
        };
        let out = run_agent(&inv, &env_block([("HERD_T_MARK", test_mark().as_str())]));
        assert!(out.status.success());
        assert_eq!(std::fs::read_to_string(&order).unwrap(), "sweep\njob\n");
        let stderr = String::from_utf8(out.stderr).unwrap();
        let messages: Vec<AgentMessage> = stderr.lines().map(parse_agent_line).collect();
        assert_eq!(messages[0], AgentMessage::Up, "{stderr}");
        assert_eq!(messages[1], AgentMessage::Swept("12 34".into()), "{stderr}");
        // It runs without the job's env, and its own stderr is dropped.
        assert_eq!(messages[2], AgentMessage::Swept("container herd-k-old-0-".into()), "{stderr}");
        assert!(matches!(messages[3], AgentMessage::Started { .. }), "{stderr}");
        assert!(!messages.iter().any(|m| matches!(m, AgentMessage::Other(_))), "{stderr}");
    }

    #[test]
    fn remote_command_is_one_shell_line_running_the_agent() {
        let inv = AgentInvocation {
            grace_secs: 7,
            ..agent(format!("HERD_T_MARK={}", test_mark()), "exec echo 'hi there'")
        };
        let mut child = spawn_remote(&inv);
        use std::io::{Read, Write};
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&env_block([])).unwrap();
        let mut stdout = Vec::new();
        child.stdout.take().unwrap().read_to_end(&mut stdout).unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert_eq!(stdout, b"hi there\n");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains("herd-agent exit 0"), "{stderr}");
    }

    /// sshd runs a command as `$SHELL -c LINE`: herd's lines run the same in every shell, the
    /// agent's, its job's and a sweep's, though they hold newlines, quotes and `!`.
    #[test]
    fn the_agent_and_a_sweep_start_under_any_login_shell() {
        let job = job_snippet("/", Some("echo 'setup!'\n# a comment"), "printf '%s\\n' \"it's $HERD_T\"");
        let inv = AgentInvocation {
            presweep: Some(with_procs(&sweep_call("herd-none", SweepScope::Leftovers, 1))),
            cleanup: Some("echo 'done!'".into()),
            ..agent(format!("HERD_T_MARK={}", test_mark()), job)
        };
        let line = for_login_shell(&inv.remote_command());
        assert_eq!(csh_or_fish_would_misread(&line), None, "{line}");
        for shell in login_shells() {
            use std::io::{Read, Write};
            let mut child = spawn_under(shell, &inv);
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(&env_block([("HERD_T", "a $b `c` \\ 'd' \"e\"!")])).unwrap();
            let mut stdout = Vec::new();
            child.stdout.take().unwrap().read_to_end(&mut stdout).unwrap();
            drop(stdin);
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            let expected = "setup!\nit's a $b `c` \\ 'd' \"e\"!\n";
            assert_eq!(String::from_utf8_lossy(&stdout), expected, "{shell}: {stderr}");
            assert!(stderr.contains("herd-agent exit 0"), "{shell}: {stderr}");
        }
    }

    /// The agent's line with a torch job's multiplexer and setup stays one argument for
    /// `$SHELL -c`: Linux takes at most 128 KiB in one.
    #[test]
    fn a_torch_agents_login_line_fits_one_argument() {
        let command = under_mux("/opt/venv/bin/python", "torchrun --nnodes=2 train.py --lr 0.1", true);
        let job = job_snippet("/work dir", Some("source /opt/venv/bin/activate\nmodule load cuda"), &command);
        let inv = AgentInvocation {
            grace_secs: 30,
            heartbeat_secs: 5,
            cleanup: Some("docker rm -f herd-abc".into()),
            presweep: Some(with_procs(&sweep_call("abc", SweepScope::Leftovers, 10))),
            report_ports: true,
            ..agent("HERD_MARKER=abc:r1:0:0", job)
        };
        let line = for_login_shell(&inv.remote_command());
        assert_eq!(csh_or_fish_would_misread(&line), None);
        assert!(
            line.len() < 96 * 1024,
            "{} bytes (the command itself: {})",
            line.len(),
            inv.remote_command().len()
        );
    }

    #[test]
    fn cleanup_runs_after_the_job_with_its_env_but_its_marker_and_is_quiet() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("cleanup");
        let record_path = quote(&record.display().to_string());
        let inv = AgentInvocation {
            cleanup: Some(format!(
                "echo \"cleaned ${{HERD_T_MARK:-without-marker}} on $DOCKER_HOST\" > {record_path}; \
                 echo noise; echo noise >&2; exit 9"
            )),
            ..agent(
                format!("HERD_T_MARK={}", test_mark()),
                format!("test ! -e {record_path} && echo job-ran && exit 3"),
            )
        };
        // The engine the job ran on (a node's own, or a forwarded secret): the one its
        // container is removed from.
        let env = env_block([("HERD_T_MARK", test_mark().as_str()), ("DOCKER_HOST", "unix:///run/u/d.sock")]);
        let out = run_agent(&inv, &env);
        assert_eq!(out.stdout, b"job-ran\n");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.ends_with("herd-agent exit 3\n") && !stderr.contains("noise"), "{stderr}");
        assert_eq!(
            std::fs::read_to_string(&record).unwrap(),
            "cleaned without-marker on unix:///run/u/d.sock\n"
        );
        // The optional arguments are always there, empty when not wanted.
        let presweep = AgentInvocation { cleanup: None, presweep: Some("true".into()), ..inv.clone() };
        assert_eq!(presweep.local_argv()[8..], ["", "true", "", "", ""].map(String::from));
    }

    #[test]
    fn the_master_reports_its_ports_before_it_reads_the_env() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let inv = AgentInvocation {
            report_ports: true,
            ..agent(format!("HERD_T_MARK={}", test_mark()), "echo \"port $MASTER_PORT\"")
        };
        let mut agent = spawn_agent(&inv);
        let mut stderr = std::io::BufReader::new(agent.stderr.take().unwrap());
        let mut line = String::new();
        let mut said = Vec::new();
        let ports = loop {
            line.clear();
            assert!(std::io::BufRead::read_line(&mut stderr, &mut line).unwrap() > 0, "{said:?}");
            match parse_agent_line(line.trim_end()) {
                AgentMessage::Ports(ports) => break ports.expect("readable tables"),
                other => said.push(other),
            }
        };
        // First word at once; nothing started before the env came.
        assert_eq!(said, [AgentMessage::Up]);
        assert!(ports.contains(&port), "{port} not in {ports:?}");
        let mut stdin = agent.stdin.take().unwrap();
        std::io::Write::write_all(&mut stdin, &env_block([("MASTER_PORT", "29555")])).unwrap();
        drop(stdin);
        let out = agent.wait_with_output().unwrap();
        assert_eq!(out.stdout, b"port 29555\n");
    }

    /// A hardened login's TMOUT does not end an agent waiting for its env: under bash
    /// (RHEL's sh), `read` gives up after TMOUT seconds, and the agent would end with it.
    #[test]
    fn a_login_shells_tmout_does_not_end_the_wait_for_the_env() {
        let inv = agent(format!("HERD_T_MARK={}", test_mark()), "echo started");
        let argv = inv.local_argv();
        let mut agent = Command::new("bash")
            .args(&argv[1..])
            .env("TMOUT", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2500));
        let mut stdin = agent.stdin.take().unwrap();
        // The agent may have ended: the write then fails, and the output says why.
        let _ = std::io::Write::write_all(&mut stdin, &env_block([("A", "1")]));
        drop(stdin);
        let out = agent.wait_with_output().unwrap();
        assert_eq!(out.stdout, b"started\n", "{}", String::from_utf8_lossy(&out.stderr));
    }

    #[test]
    fn an_attempt_stopped_before_its_env_starts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ran = dir.path().join("ran");
        // A heartbeat interval no other test uses, so that its sleep can be told apart.
        let beat = unique_secs(6000);
        let inv = AgentInvocation {
            heartbeat_secs: beat.parse().unwrap(),
            report_ports: true,
            ..agent(format!("HERD_T_MARK={}", test_mark()), format!("touch {}", quote(ran.to_str().unwrap())))
        };
        for control in [Control::Term, Control::Kill] {
            let out = run_agent(&inv, &control.encode());
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.starts_with("herd-agent up\n") && stderr.ends_with("herd-agent exit 143\n"),
                "{stderr}"
            );
            assert_eq!(out.status.code(), Some(143));
            assert!(!ran.exists());
        }
        // herd gone before it sent the env: the agent ends quietly, its heartbeat with it.
        let mut agent = spawn_agent(&inv);
        drop(agent.stdin.take());
        let out = agent.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(70));
        assert_eq!(processes_with_argv(&["sleep", &beat]), Vec::<u32>::new(), "the heartbeat outlived it");
    }

    /// With a probe phase, one login runs the preflight's probe, then the job: the probe with
    /// its own env, its lines as `fact` messages (stdout stays the job's), `probed` with its
    /// status; the job's env block ends what is left of the probe before the job starts.
    #[test]
    fn a_probe_phase_runs_the_probe_then_the_job_in_one_login() {
        use std::io::{BufRead, BufReader, Write};
        let dir = tempfile::tempdir().unwrap();
        let lingering = dir.path().join("lingering");
        let inv = AgentInvocation {
            // A last line without its newline, then a process that outlives the probe's
            // shell (the master's listener does): the env of the job ends it.
            probe: Some(
                format!(
                    "echo \"fact $HERD_T $HERD_T_MARK\"; echo oops >&2; printf '%s\\n' 'a\\cb'; \
                 head -c 5000 /dev/zero | tr '\\0' x; echo; \
                 (sleep 60 & echo $! > {}; wait) & printf partial; exit 3",
                    quote(lingering.to_str().unwrap())
                )
                .into(),
            ),
            ..agent(format!("HERD_T_MARK={}", test_mark()), "echo \"job $HERD_T\"")
        };
        let mut agent = spawn_agent(&inv);
        let mut stdin = agent.stdin.take().unwrap();
        // The probe's processes carry the agent's marker, whatever its env says (a sweep on the
        // same host must see them as a live agent's).
        stdin.write_all(&env_block([("HERD_T", "probe-env"), ("HERD_T_MARK", "doctor")])).unwrap();
        stdin.flush().unwrap();
        let mut stderr = BufReader::new(agent.stderr.take().unwrap());
        let mut said = Vec::new();
        loop {
            let mut line = String::new();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "{said:?}");
            match parse_agent_line(line.trim_end()) {
                AgentMessage::Probed(status) => {
                    assert_eq!(status, 3, "{said:?}");
                    break;
                }
                AgentMessage::Alive => {}
                other => said.push(other),
            }
        }
        assert_eq!(said[0], AgentMessage::Up);
        assert!(matches!(said[1], AgentMessage::Clock(_)), "{said:?}");
        let mut facts: Vec<_> = said[2..].iter().map(|m| format!("{m:?}")).collect();
        facts.sort();
        let marked = format!("Fact(\"fact probe-env {}\")", test_mark());
        // Backslashes as printed (dash's echo would have read `\c`); a line past 4000 bytes cut
        // there, one write beside the heartbeat's.
        let long = format!("Fact({:?})", "x".repeat(4000));
        let mut expected =
            [marked.as_str(), "Fact(\"a\\\\cb\")", "Fact(\"oops\")", "Fact(\"partial\")", &long];
        expected.sort();
        assert_eq!(facts, expected);
        let pid: i32 = std::fs::read_to_string(&lingering).unwrap().trim().parse().unwrap();
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists(), "the probe's process is running");
        stdin.write_all(&env_block([("HERD_T", "job-env")])).unwrap();
        drop(stdin);
        let out = agent.wait_with_output().unwrap();
        assert_eq!(out.stdout, b"job job-env\n");
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "the probe's process outlived the phase"
        );
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
        assert!(rest.ends_with("herd-agent exit 0\n"), "{rest}");
    }

    /// A probe phase stopped (a failed preflight, Ctrl-C) or left (herd gone) ends its probe
    /// and starts no job.
    #[test]
    fn a_probe_phase_stopped_ends_its_probe_and_starts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ran = dir.path().join("ran");
        let pidfile = dir.path().join("probe");
        let inv = AgentInvocation {
            probe: Some(format!("echo $$ > {}; exec sleep 60", quote(pidfile.to_str().unwrap())).into()),
            ..agent(format!("HERD_T_MARK={}", test_mark()), format!("touch {}", quote(ran.to_str().unwrap())))
        };
        let env = env_block([("HERD_T", "1")]);
        for end in [Some(Control::Term), None] {
            let started = std::time::Instant::now();
            let mut child = spawn_agent(&inv);
            let mut stdin = child.stdin.take().unwrap();
            std::io::Write::write_all(&mut stdin, &env).unwrap();
            // The stop (or EOF) comes once the probe is running.
            while !pidfile.exists() || std::fs::read_to_string(&pidfile).unwrap().is_empty() {
                assert!(started.elapsed() < std::time::Duration::from_secs(30), "the probe never started");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            if let Some(c) = &end {
                std::io::Write::write_all(&mut stdin, &c.encode()).unwrap();
            }
            drop(stdin);
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(if end.is_some() { 143 } else { 70 }), "{stderr}");
            assert!(started.elapsed() < std::time::Duration::from_secs(30), "the probe was waited for");
            let pid = std::fs::read_to_string(&pidfile).unwrap();
            assert!(
                !std::path::Path::new(&format!("/proc/{}", pid.trim())).exists(),
                "the probe outlived the agent"
            );
            assert!(!ran.exists());
            std::fs::remove_file(&pidfile).unwrap();
        }
    }

    /// A fenced agent's processes (its relay and timer are forks of it: the same command
    /// line, which holds `mark`), and the FIFO of its relay.
    fn fence_left(mark: &str) -> (Vec<u32>, Vec<std::path::PathBuf>) {
        let procs = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                    c.split(|&b| b == 0).any(|w| w == format!("HERD_T_MARK={mark}").as_bytes())
                })
            })
            .collect();
        let fifos = std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("herd-in-"))
            .filter(|p| p.to_string_lossy().ends_with(&format!("-{mark}")))
            .collect();
        (procs, fifos)
    }

    fn fenced(mark: &str) -> AgentInvocation {
        AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 1,
            fence_secs: Some(2),
            marker: format!("HERD_T_MARK={mark}"),
            job: "sleep 60".into(),
            cleanup: None,
            presweep: None,
            report_ports: false,
            probe: None,
        }
    }

    /// An agent with a fence that hears no `beat` takes herd for gone, as at EOF, though its
    /// stdin stays open (a node cut off, its sshd none the wiser): before its env block, it
    /// ends having started nothing; with its job running, it ends the job. Nothing of the
    /// fence (its relay, its timer, its FIFO) is left.
    #[test]
    fn an_agent_herd_stops_beating_to_ends_as_if_herd_were_gone() {
        use std::time::{Duration, Instant};
        let mark = format!("fence-{}-{}", std::process::id(), rand_suffix());
        let inv = fenced(&mark);

        let began = Instant::now();
        let mut agent = spawn_agent(&inv);
        let held = agent.stdin.take().unwrap();
        let out = agent.wait_with_output().unwrap();
        let took = began.elapsed();
        assert_eq!(out.status.code(), Some(70), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(took >= Duration::from_secs(2), "ended {took:?} after its start, before its fence");
        drop(held);

        // stderr is read on, or the agent's last word would find the pipe closed (SIGPIPE).
        let Running { child: mut agent, stdin, mut stderr, pgid } = start(&inv, &env_block([]));
        let began = Instant::now();
        std::io::copy(&mut stderr, &mut std::io::sink()).unwrap();
        let status = agent.wait().unwrap();
        let took = began.elapsed();
        assert_eq!(status.code(), Some(143));
        assert!(took >= Duration::from_secs(1), "the job ended {took:?} after its start");
        assert_eq!(live_members(pgid), Vec::<u32>::new(), "the job outlived the agent");
        drop(stdin);
        // The relay's timer ends with it; its sleep is reaped.
        assert!(wait_for(|| fence_left(&mark) == (vec![], vec![])), "left: {:?}", fence_left(&mark));
    }

    /// Beats keep a fenced agent going as long as they come, before its env block, among its
    /// lines and its control lines, and reach neither its job nor its reader of control
    /// lines; EOF still ends it at once.
    #[test]
    fn beats_keep_a_fenced_agent_going_and_reach_nothing_else() {
        use std::io::{BufRead, BufReader, Write};
        use std::time::{Duration, Instant};
        let mark = format!("beats-{}-{}", std::process::id(), rand_suffix());
        let inv =
            AgentInvocation { job: "sleep 60 & read -r l; echo \"read: $l\"; wait".into(), ..fenced(&mark) };
        let mut agent = spawn_agent(&inv);
        let mut stdin = agent.stdin.take().unwrap();
        stdin.write_all(b"beat\n").unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        stdin.write_all(b"beat\n").unwrap();
        stdin.write_all(&env_block([("HERD_T", "1")])).unwrap();
        let mut stderr = BufReader::new(agent.stderr.take().unwrap());
        let pgid = started(&mut stderr);
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(6) {
            stdin.write_all(b"beat\n").unwrap();
            std::thread::sleep(Duration::from_millis(400));
        }
        stdin.write_all(b"clock\nbeat\n").unwrap();
        stdin.flush().unwrap();
        let mut said = Vec::new();
        loop {
            let mut line = String::new();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "no clock in {said:?}");
            match parse_agent_line(line.trim_end()) {
                AgentMessage::Clock { .. } => break,
                other => said.push(other),
            }
        }
        assert!(!live_members(pgid).is_empty(), "the job ended though beats came");
        let ended = Instant::now();
        drop(stdin);
        let out = agent.wait_with_output().unwrap();
        assert!(ended.elapsed() < Duration::from_secs(5), "EOF took {:?}", ended.elapsed());
        assert_eq!(out.status.code(), Some(143));
        // The job's stdin is /dev/null: it read nothing of herd's lines.
        assert_eq!(String::from_utf8_lossy(&out.stdout), "read: \n");
        assert!(wait_for(|| fence_left(&mark) == (vec![], vec![])), "left: {:?}", fence_left(&mark));
    }

    /// The fence's relay ends with the agent, herd's end of its stdin still open: in a Slurm
    /// step that end is also the job's output, which herd reads to its end before it lets go
    /// of the agent (a relay that waited for herd to let go would hang both).
    #[test]
    fn the_fence_ends_with_the_agent_while_herd_still_holds_its_stdin() {
        use std::io::Write;
        let mark = format!("ends-{}-{}", std::process::id(), rand_suffix());
        let inv = AgentInvocation { job: "true".into(), fence_secs: Some(600), ..fenced(&mark) };
        for env in [Some(env_block([])), None] {
            let mut agent = spawn_agent(&inv);
            let mut stdin = agent.stdin.take().unwrap();
            match &env {
                Some(block) => stdin.write_all(block).unwrap(),
                // A control line in place of the env: the agent ends having started nothing.
                None => stdin.write_all(&Control::Term.encode()).unwrap(),
            }
            let status = agent.wait().unwrap();
            assert_eq!(status.code(), Some(if env.is_some() { 0 } else { 143 }));
            assert!(wait_for(|| fence_left(&mark) == (vec![], vec![])), "left: {:?}", fence_left(&mark));
            drop(stdin);
        }
    }

    /// A value may hold a line that reads `beat`, or a count: the relay passes an env block's
    /// lines on as they are. Where there is no FIFO for the fence, the agent passes herd's
    /// beats over itself, before the env and after.
    #[test]
    fn env_blocks_pass_the_fence_whole_and_a_node_without_a_fifo_skips_the_beats() {
        use std::io::{BufReader, Write};
        let mark = format!("whole-{}-{}", std::process::id(), rand_suffix());
        let value = "x\nbeat\n3\nbeat\ny";
        let inv =
            AgentInvocation { job: "printf '%s' \"$HERD_T\"".into(), fence_secs: Some(600), ..fenced(&mark) };
        for tmpdir in [None, Some("/nonexistent")] {
            let argv = inv.local_argv();
            let mut command = Command::new(&argv[0]);
            command.args(&argv[1..]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
            if let Some(dir) = tmpdir {
                command.env("TMPDIR", dir);
            }
            let mut agent = command.spawn().unwrap();
            let mut stdin = agent.stdin.take().unwrap();
            stdin.write_all(b"beat\n").unwrap();
            stdin.write_all(&env_block([("HERD_T", value)])).unwrap();
            stdin.write_all(b"beat\n").unwrap();
            let mut stderr = BufReader::new(agent.stderr.take().unwrap());
            started(&mut stderr);
            std::io::copy(&mut stderr, &mut std::io::sink()).unwrap();
            let mut out = Vec::new();
            std::io::Read::read_to_end(agent.stdout.as_mut().unwrap(), &mut out).unwrap();
            assert_eq!(agent.wait().unwrap().code(), Some(0), "TMPDIR {tmpdir:?}");
            assert_eq!(String::from_utf8_lossy(&out), value, "TMPDIR {tmpdir:?}");
            drop(stdin);
        }
    }

    /// An agent SIGKILLed (nothing of it ran to its end) leaves no relay holding herd's end
    /// of its stdin, which in a Slurm step is also its output: the relay's timer ends it.
    #[test]
    fn a_killed_agents_relay_ends_without_waiting_for_herd() {
        let mark = format!("killed-{}-{}", std::process::id(), rand_suffix());
        let inv = AgentInvocation { fence_secs: Some(600), ..fenced(&mark) };
        let Running { child: mut agent, stdin, pgid, .. } = start(&inv, &env_block([]));
        agent.kill().unwrap();
        agent.wait().unwrap();
        let gone = wait_for(|| fence_left(&mark).0.is_empty());
        // The job, which nothing stops now. By the syscall: procps-ng 4.0.2's kill(1) reads
        // `kill -KILL -13` as kill(-1, SIGKILL), every process on the machine.
        assert!(pgid > 1, "pgid {pgid}");
        unsafe { libc::kill(-(pgid as i32), libc::SIGKILL) };
        assert!(gone, "the relay outlived its agent: {:?}", fence_left(&mark));
        drop(stdin);
    }
}
