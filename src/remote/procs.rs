//! What herd asks of `procs.sh` outside the agent, each a line for a node's login shell with
//! the script in front (`with_procs`): a sweep of a config's processes (`sweep_call`, in a
//! `SweepScope`), and the stacks of a live run's ranks (`stacks_command`, for `herd stacks`).
//! Pure: building strings; the tests run them on this machine.

use super::scripts::PROCS_SCRIPT;
use super::shell::quote;

/// A command for a node's login shell that runs `body` in `sh`, with `procs.sh` defined: the
/// login shell may be bash, dash or zsh, which splits words differently.
pub fn with_procs(body: &str) -> String {
    format!("sh -c {}", quote(&format!("{PROCS_SCRIPT}{body}\n")))
}

/// Which of a config's processes a sweep stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepScope<'a> {
    /// Those whose agent is gone: a live run, of this herd or another, is never touched.
    Leftovers,
    /// All of them, live agent or not.
    All,
    /// All of them but those whose marker entry starts with this (live agent or not): as a
    /// restart starts, what is left of the run's earlier attempts, whose agents herd has given
    /// up on, and never a node's new job, started beside it on a shared host.
    AllBut(&'a str),
}

/// The shell call (for a shell where `procs.sh` is defined) that stops a config's processes
/// whose marker entry starts with `prefix`, in `scope` (SIGTERM, up to `grace_secs`, SIGKILL),
/// and prints their pids.
pub fn sweep_call(prefix: &str, scope: SweepScope<'_>, grace_secs: u64) -> String {
    let plain = |p: &str| p.bytes().all(|b| b.is_ascii_alphanumeric() || b"_=:-".contains(&b));
    debug_assert!(plain(prefix), "{prefix}");
    let scope = match scope {
        SweepScope::Leftovers => "leftovers".to_string(),
        SweepScope::All => "all".to_string(),
        SweepScope::AllBut(skip) => {
            debug_assert!(plain(skip) && skip.starts_with(prefix), "{skip}");
            quote(&format!("except={skip}"))
        }
    };
    format!("herd_sweep {} {scope} {grace_secs}", quote(prefix))
}

/// What `herd stacks` runs on the node `host`: every rank of a live run of the config with
/// `config_key` (its agent alive) that runs there as `host` (`HERD_NODE`), dumped at once as
/// the agent does on a hang. Two nodes of the config may be one machine (localhost and
/// 127.0.0.1): each reports its own ranks only, never the other's too.
pub fn stacks_command(config_key: &str, host: &str) -> String {
    let marker = crate::marker::Marker::config(config_key).entry();
    let body = format!(
        "# shellcheck disable=SC2046\nherd_stacks $(herd_on_node {} $(herd_live_job {}))",
        quote(host),
        quote(&marker)
    );
    with_procs(&body)
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};

    use super::super::agent::AgentInvocation;
    use super::super::protocol::parse_pids;
    use super::super::shell::env_block;
    use super::super::testing::*;
    use super::*;

    /// A `sleep` whose environment holds `HERD_MARKER=marker`.
    fn marked_sleep(marker: &str) -> std::process::Child {
        Command::new("sleep").arg("63").env("HERD_MARKER", marker).stdin(Stdio::null()).spawn().unwrap()
    }

    /// Run a sweep, as a node's login shell would; the pids it says it stopped.
    fn sweep(prefix: &str, scope: SweepScope) -> Vec<u32> {
        let out =
            Command::new("sh").arg("-c").arg(with_procs(&sweep_call(prefix, scope, 1))).output().unwrap();
        assert!(out.status.success());
        parse_pids(&String::from_utf8_lossy(&out.stdout))
    }

    #[test]
    fn sweep_stops_only_processes_whose_marker_matches() {
        let tag = format!("{}-{}", std::process::id(), rand_suffix());
        let mut mine = marked_sleep(&format!("k{tag}:run1:0:0"));
        let mut other_run = marked_sleep(&format!("k{tag}:run2:0:0"));
        assert_eq!(sweep(&format!("HERD_MARKER=k{tag}:run1:"), SweepScope::All), vec![mine.id()]);
        assert!(mine.wait().unwrap().code().is_none(), "killed by a signal");
        assert!(other_run.try_wait().unwrap().is_none(), "another run's process was touched");
        other_run.kill().unwrap();
        let _ = other_run.wait();
    }

    #[test]
    fn a_restarts_sweep_stops_the_earlier_attempts_and_spares_its_own() {
        let tag = format!("{}-{}", std::process::id(), rand_suffix());
        let mut first = marked_sleep(&format!("k{tag}:run1:0:0"));
        let mut second = marked_sleep(&format!("k{tag}:run1:1:1"));
        // Attempt 2 already started on another node of the same host.
        let mut current = marked_sleep(&format!("k{tag}:run1:2:0"));
        let mut other_run = marked_sleep(&format!("k{tag}:run2:0:0"));
        let prefix = format!("HERD_MARKER=k{tag}:run1:");
        let mut swept = sweep(&prefix, SweepScope::AllBut(&format!("{prefix}2:")));
        swept.sort();
        assert_eq!(swept, vec![first.id(), second.id()]);
        for gone in [&mut first, &mut second] {
            assert!(gone.wait().unwrap().code().is_none(), "killed by a signal");
        }
        for spared in [&mut current, &mut other_run] {
            assert!(
                spared.try_wait().unwrap().is_none(),
                "a process of this attempt or another run was touched"
            );
            spared.kill().unwrap();
            let _ = spared.wait();
        }
    }

    #[test]
    fn a_leftover_sweep_spares_every_process_whose_agent_is_alive() {
        use std::io::{BufReader, Write};
        let tag = format!("{}-{}", std::process::id(), rand_suffix());
        // A live run of the same config: its agent is alive, so its job is not a leftover.
        let live = format!("HERD_MARKER=k{tag}:run2:0:0");
        let inv = AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 60,
            fence_secs: None,
            marker: live.clone(),
            job: "exec sleep 63".into(),
            cleanup: None,
            presweep: None,
            report_ports: false,
            probe: None,
        };
        let mut agent = spawn_agent(&inv);
        let mut stdin = agent.stdin.take().unwrap();
        let (name, value) = live.split_once('=').unwrap();
        stdin.write_all(&env_block([(name, value)])).unwrap();
        started(&mut BufReader::new(agent.stderr.take().unwrap()));
        // The job's steady state: its `sleep`, the only process with the marker once the
        // subshells that set it up have exec'd (one of them, seen mid-way, is gone a moment
        // later). A bound for a loaded machine, not a measure of speed.
        let is_sleep = |pid: &u32| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
        };
        let settled = || {
            let found = processes_with_env(&live);
            (found.len() == 1 && found.iter().all(is_sleep)).then_some(found)
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while settled().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let job = settled()
            .unwrap_or_else(|| panic!("the live job did not settle: {:?}", processes_with_env(&live)));
        // A leftover of an earlier run (no agent), and a process of another config.
        let mut old = marked_sleep(&format!("k{tag}:run1:0:1"));
        let mut other_config = marked_sleep(&format!("j{tag}:run1:0:0"));

        assert_eq!(sweep(&format!("HERD_MARKER=k{tag}:"), SweepScope::Leftovers), vec![old.id()]);
        assert!(old.wait().unwrap().code().is_none(), "killed by a signal");
        assert_eq!(processes_with_env(&live), job, "the live run's job was touched");
        assert!(other_config.try_wait().unwrap().is_none(), "another config's process was touched");

        // Once its agent is gone, what it left is a leftover (here: nothing, it stopped it).
        drop(stdin);
        agent.wait().unwrap();
        assert_eq!(sweep(&format!("HERD_MARKER=k{tag}:"), SweepScope::Leftovers), Vec::<u32>::new());
        other_config.kill().unwrap();
        let _ = other_config.wait();
    }

    /// Where no process holds the config's marker (a start's usual case), a leftover sweep looks
    /// through /proc once (one grep) and starts nothing else: no look for live agents. With
    /// some, it reads their markers in one grep, not one (and a `tr`) per process.
    #[test]
    fn a_sweep_looks_through_proc_a_fixed_number_of_times() {
        let dir = tempfile::tempdir().unwrap();
        let calls = dir.path().join("calls");
        for tool in ["grep", "tr", "sort"] {
            let path = dir.path().join(tool);
            let body = format!(
                "#!/bin/sh\necho {tool} >> {}\nexec /usr/bin/{tool} \"$@\"\n",
                quote(calls.to_str().unwrap())
            );
            std::fs::write(&path, body).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        }
        let path = format!("{}:{}", dir.path().display(), std::env::var("PATH").unwrap());
        let tools = |body: &str| {
            let _ = std::fs::remove_file(&calls);
            let out = Command::new("sh").arg("-c").arg(with_procs(body)).env("PATH", &path).output().unwrap();
            assert!(out.status.success(), "{out:?}");
            (String::from_utf8(out.stdout).unwrap(), std::fs::read_to_string(&calls).unwrap_or_default())
        };
        let none = format!("HERD_T_NONE={}x:", test_mark());
        assert_eq!(tools(&sweep_call(&none, SweepScope::Leftovers, 1)), (String::new(), "grep\n".into()));

        // Three leftovers (no agent holds their marker): the same few looks as for one.
        let mark = format!("few{}", test_mark());
        let mut kids: Vec<_> = (0..3).map(|i| marked_sleep(&format!("{mark}:r:0:{i}"))).collect();
        let prefix = format!("HERD_MARKER={mark}:");
        assert!(wait_for(|| processes_with_env(&format!("HERD_MARKER={mark}:r:0:2")).len() == 1));
        let (found, looks) = tools(&format!("herd_pick {} leftovers", quote(&prefix)));
        let mut found: Vec<u32> = parse_pids(&found);
        found.sort();
        let mut want: Vec<u32> = kids.iter().map(|k| k.id()).collect();
        want.sort();
        assert_eq!(found, want);
        for k in &mut kids {
            let _ = k.kill();
            let _ = k.wait();
        }
        // A pipeline's tools start in any order.
        let mut looks: Vec<&str> = looks.lines().collect();
        looks.sort();
        assert_eq!(
            looks,
            ["grep", "grep", "grep", "sort", "tr", "tr"],
            "one look each: marked, live agents, markers"
        );
    }

    /// Two nodes of one config that are this one machine (localhost and 127.0.0.1): each
    /// node's `herd stacks` command reports the ranks it runs, not the other node's too.
    #[test]
    fn stacks_are_taken_of_the_nodes_own_ranks_only() {
        let key = format!("stacks{}x{}", test_mark(), rand_suffix());
        let spawn = |argv: &[&str], env: &[(&str, &str)]| {
            Command::new(argv[0])
                .args(&argv[1..])
                .envs(env.iter().copied())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        };
        let mut children = Vec::new();
        for (node, host) in [(0, "localhost"), (1, "127.0.0.1")] {
            let marker = format!("{key}:r:0:{node}");
            // The node's live agent holds its marker in its argv; its rank, in its environment.
            // The agent's stand-in has its argv from its exec on, and no child: `python3` may be
            // a shim (pyenv) that execs three times, and a look at /proc between two found no
            // live agent (1 run in 40 beside 3 busy loops).
            let agent = format!("HERD_MARKER={marker}");
            children.push(spawn(&["perl", "-e", "sleep 30", &agent], &[]));
            let rank = node.to_string();
            let env = [("HERD_MARKER", marker.as_str()), ("RANK", rank.as_str()), ("HERD_NODE", host)];
            children.push(spawn(&["sleep", "30"], &env));
        }
        // Both ranks are in /proc before their stacks are asked for (a loaded CI host).
        let seen =
            wait_for(|| (0..2).all(|n| processes_with_env(&format!("HERD_MARKER={key}:r:0:{n}")).len() == 1));
        let ranks = |host: &str| -> (Vec<String>, String) {
            let out = Command::new("sh").arg("-c").arg(stacks_command(&key, host)).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let heads = text.lines().filter_map(|l| l.strip_prefix("herd-agent stack "));
            let ranks = heads.map(|l| l.split(' ').next().unwrap().to_string()).collect();
            (ranks, format!("{text}{}", String::from_utf8_lossy(&out.stderr)))
        };
        let (on_0, on_1) = (ranks("localhost"), ranks("127.0.0.1"));
        for mut c in children {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert!(seen, "the test's own ranks never showed in /proc");
        assert_eq!(on_0.0, ["0"], "node localhost printed:\n{}", on_0.1);
        assert_eq!(on_1.0, ["1"], "node 127.0.0.1 printed:\n{}", on_1.1);
    }

    /// Each rank's answer, then `stacks-done`, whatever the room to hold the dumps: they go
    /// to TMPDIR, else /dev/shm; where neither holds them (missing, full, read-only), each
    /// rank is answered `lost`, with the reason, never passed over. Each case in a mount
    /// namespace of its own, where a full tmpfs and a read-only /dev/shm harm nothing else.
    #[test]
    fn stacks_end_with_their_last_word_whatever_room_the_node_has() {
        use super::super::protocol::{parse_agent_line, StackReader};
        let mut ranks: Vec<_> =
            (0..2).map(|_| Command::new("sleep").arg("30").stdin(Stdio::null()).spawn().unwrap()).collect();
        let want = [(3, ranks[0].id()), (4, ranks[1].id())];
        let call = format!("herd_dump_stacks {} 3 {} 4", ranks[0].id(), ranks[1].id());
        let room = tempfile::tempdir().unwrap();
        let full = tempfile::tempdir().unwrap();
        let (room, full) = (room.path().to_str().unwrap(), full.path().to_str().unwrap());
        let fill = format!("mount -t tmpfs -o size=8k herd-test {full} && {{ head -c 65536 /dev/zero >{full}/fill; }} 2>/dev/null;");
        let cases = [
            ("", room, false),
            ("", "/dev/null/not-a-folder", false),
            (fill.as_str(), full, true),
            ("mount -t tmpfs -o ro herd-test /dev/shm &&", "/dev/null/not-a-folder", true),
        ];
        let results: Vec<_> = cases
            .iter()
            .map(|(prepare, tmpdir, lost)| {
                let out = Command::new("unshare")
                    .args(["-m", "sh", "-c", &format!("{prepare} exec sh -c \"$HERD_T_SCRIPT\"")])
                    .env("HERD_T_SCRIPT", with_procs(&call))
                    .env("TMPDIR", tmpdir)
                    .output()
                    .unwrap();
                (
                    String::from_utf8_lossy(&out.stdout).into_owned(),
                    String::from_utf8_lossy(&out.stderr).into_owned(),
                    *lost,
                    *tmpdir,
                )
            })
            .collect();
        for mut r in ranks.drain(..) {
            let _ = r.kill();
            let _ = r.wait();
        }
        for (text, stderr, lost, tmpdir) in results {
            let mut reader = StackReader::default();
            let stacks: Vec<_> = text.lines().filter_map(|l| reader.feed(&parse_agent_line(l))).collect();
            let got: Vec<_> = stacks.iter().map(|s| (s.rank, s.pid)).collect();
            assert_eq!(got, want, "TMPDIR {tmpdir}:\n{text}{stderr}");
            assert!(text.ends_with("herd-agent stacks-done\n"), "TMPDIR {tmpdir}:\n{text}{stderr}");
            for s in &stacks {
                let said_lost = s.dump.as_ref().is_err_and(|e| e.contains("could not be held on the node"));
                assert_eq!(said_lost, lost, "TMPDIR {tmpdir}: {:?}", s.dump);
            }
        }
    }
}
