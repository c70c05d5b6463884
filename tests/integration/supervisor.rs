//! The supervisor on the namespace testbed: failures of real torchrun and DeepSpeed jobs are
//! classified, communication failures restart the whole job on a fresh port, and nothing is
//! left behind. Faults are injected by examples/allreduce.py on the first attempt only.

use std::time::{Duration, Instant};

use crate::support::cluster::{Cluster, LIMIT, NODE_1_FAILS_ONCE};
use crate::support::herd::{self, events, only_run_dir, wait_for_event, wait_until};
use serde_json::Value;

/// Short backoffs for tests only; the defaults are 10 s and up.
const FAST_RESTART: &str = "[restart]\nbackoff = \"1s\"\nbackoff_max = \"2s\"\ngrace_period = \"3s\"\n";

fn torchrun(args: &str) -> String {
    format!(
        "launcher = \"torchrun\"\nscript = \"examples/allreduce.py\"\nargs = [{args}]\nnproc_per_node = 2"
    )
}

fn all(ev: &[Value], name: &str) -> Vec<Value> {
    ev.iter().filter(|e| e["event"] == name).cloned().collect()
}

/// Every rank printed a correct result on the given attempt.
fn assert_results_on_attempt(out: &herd::Finished, world: usize, attempt: u32) {
    let ok = out
        .stdout
        .lines()
        .filter(|l| {
            l.contains("result rank=") && l.contains(&format!(" attempt={attempt} ")) && l.ends_with(" ok")
        })
        .count();
    assert_eq!(ok, world, "results of attempt {attempt}\n{out}");
}

#[test]
fn a_rank_killed_on_attempt_0_restarts_on_a_new_port_and_completes() {
    let c = Cluster::new(3);
    c.write_config(
        &torchrun("\"--steps\", \"6\", \"--sleep\", \"0.3\", \"--die-rank\", \"3\", \"--fault-step\", \"2\""),
        FAST_RESTART,
    );
    let out = c.run();
    out.assert_code(0);
    assert_results_on_attempt(&out, 6, 1);

    let ev = events(&only_run_dir(&c.logs()));
    let failed = all(&ev, "attempt_failed");
    assert_eq!(failed.len(), 1, "{ev:?}");
    let f = &failed[0];
    assert_eq!(f["class"], "crash", "{f}");
    let root = &f["root_cause"];
    assert_eq!((root["node_rank"].as_u64(), root["host"].as_str()), (Some(1), Some(c.addr(1))), "{f}");
    assert_eq!((root["rank"].as_u64(), root["local_rank"].as_u64()), (Some(3), Some(1)), "{f}");
    assert_eq!(root["signal"], 9, "{f}");
    assert!(f["consequences"].as_array().unwrap().iter().all(|c| c["node_rank"] != 1));
    // Before the teardown, the stacks of the ranks still running; the failure is the cause.
    let reason = all(&ev, "stacks_requested")[0]["reason"].as_str().unwrap().to_string();
    assert!(reason.starts_with(&format!("node 1 ({}) failed: ", c.addr(1))), "{reason}");
    assert_eq!(all(&ev, "stacks_summarized")[0]["culprit"], Value::Null);
    let scheduled = all(&ev, "restart_scheduled");
    assert_eq!(scheduled.len(), 1);
    assert!(scheduled[0]["delay_ms"].as_u64().unwrap() <= 2000);
    let ports: Vec<u64> =
        all(&ev, "attempt_started").iter().map(|e| e["master_port"].as_u64().unwrap()).collect();
    assert_eq!(ports.len(), 2);
    assert_ne!(ports[0], ports[1], "every attempt gets a fresh port");
    assert!(only_run_dir(&c.logs()).join(format!("attempt-1/node0-{}.log", c.addr(0))).is_file());
    assert!(out.stderr.contains("crash"), "the table of attempts names the class\n{out}");
    assert_eq!(ev.last().unwrap()["status"], "succeeded");
    assert_eq!(ev.last().unwrap()["attempts"], 2);
}

#[test]
fn deepspeed_rank_killed_on_attempt_0_restarts_and_completes() {
    let c = Cluster::new(3);
    c.write_config(
        "launcher = \"deepspeed\"\nscript = \"examples/allreduce.py\"\nnproc_per_node = 2\n\
         args = [\"--deepspeed\", \"--steps\", \"6\", \"--sleep\", \"0.3\", \"--die-rank\", \"4\", \"--fault-step\", \"2\"]",
        &format!("{FAST_RESTART}\n[env]\nTORCH_EXTENSIONS_DIR = \"{}/torch_extensions\"\n", c.venv.display()),
    );
    let out = c.run();
    out.assert_code(0);
    assert_results_on_attempt(&out, 6, 1);
    let ev = events(&only_run_dir(&c.logs()));
    let f = &all(&ev, "attempt_failed")[0];
    // The DeepSpeed launcher checks its ranks once a second and does not say which one
    // failed. When it reports the dead rank before herd stops it, the class is crash and the
    // node is right; when the peers' closed connections arrive first, all herd has is comm.
    // Both restart.
    match f["class"].as_str() {
        Some("crash") => {
            assert_eq!(f["root_cause"]["node_rank"], 2, "{f}");
            assert_eq!(f["root_cause"]["signal"], 9, "{f}");
            assert_eq!(f["root_cause"]["rank"], Value::Null, "{f}");
        }
        Some("comm") => {}
        other => panic!("class {other:?}: {f}"),
    }
}

#[test]
fn a_syntax_error_gets_exactly_one_attempt_and_is_shown() {
    let c = Cluster::new(3);
    c.write_config(
        "launcher = \"torchrun\"\nscript = \"tests/fixtures/syntax_error.py\"\nnproc_per_node = 2",
        FAST_RESTART,
    );
    let out = c.run();
    out.assert_code(1);
    assert!(out.stdout.contains("SyntaxError"), "the error is in the job output\n{out}");
    assert!(out.stderr.contains("root cause (user)"), "{out}");
    assert!(out.stderr.contains("line: SyntaxError"), "{out}");
    let ev = events(&only_run_dir(&c.logs()));
    assert_eq!(all(&ev, "attempt_started").len(), 1);
    assert!(all(&ev, "restart_scheduled").is_empty());
    assert_eq!(all(&ev, "attempt_failed")[0]["class"], "user");
}

#[test]
fn a_taken_master_port_is_class_port_and_the_next_attempt_uses_another() {
    let c = Cluster::new(3);
    // On attempt 0 something else grabs the master port on the master right before torchrun.
    let grab = "if [ \"$HERD_ATTEMPT\" = 0 ] && [ \"$NODE_RANK\" = 0 ]; then python3 -c \
        \"import socket, time; s = socket.socket(); s.bind(('', $MASTER_PORT)); s.listen(); time.sleep(120)\" & \
        sleep 0.5; fi";
    let path = c.write_config(&torchrun("\"--steps\", \"2\""), FAST_RESTART);
    let text = std::fs::read_to_string(&path).unwrap();
    let venv_setup = format!("setup = \"source {}/bin/activate\"", c.venv.display());
    let setup = format!("setup = '''\nsource {}/bin/activate\n{grab}\n'''", c.venv.display());
    std::fs::write(&path, text.replace(&venv_setup, &setup)).unwrap();

    // The port is grabbed after preflight would have checked it (setup also runs in the
    // preflight probe, which would catch it there and exit 3).
    let out = herd::run(c.tb.dir(), &["run", "--no-preflight"], LIMIT);
    out.assert_code(0);
    assert_results_on_attempt(&out, 6, 1);
    let ev = events(&only_run_dir(&c.logs()));
    let f = &all(&ev, "attempt_failed")[0];
    assert_eq!(f["class"], "port", "{f}");
    assert_eq!(f["root_cause"]["node_rank"], 0);
    let ports: Vec<u64> =
        all(&ev, "attempt_started").iter().map(|e| e["master_port"].as_u64().unwrap()).collect();
    assert_eq!(ports.len(), 2);
    assert_ne!(ports[0], ports[1]);
}

#[test]
fn a_rank_that_stops_taking_part_is_a_hang() {
    let c = Cluster::new(3);
    c.write_config(
        &torchrun("\"--steps\", \"60\", \"--sleep\", \"0.2\", \"--hang-rank\", \"2\", \"--fault-step\", \"3\", \"--retry-steps\", \"3\""),
        // Start-up takes about 10 s here with no step lines: the timeout must be longer.
        &format!("{FAST_RESTART}hang_timeout = \"25s\"\nprogress_pattern = \"^step \"\n"),
    );
    let out = c.run();
    out.assert_code(0);
    assert_results_on_attempt(&out, 6, 1);
    let run = only_run_dir(&c.logs());
    let ev = events(&run);
    let failed = &all(&ev, "attempt_failed")[0];
    assert_eq!(failed["class"], "hang");
    assert!(all(&ev, "teardown_started")[0]["reason"].as_str().unwrap().starts_with("no progress for"));
    // The sleeping rank looks like its peers waiting for it (state S, same last step); its
    // stack does not: it is in the script's loop, every other rank in all_reduce.
    for rank in 0..6 {
        let stack = std::fs::read_to_string(run.join(format!("attempt-0/stacks/rank{rank}.txt"))).unwrap();
        assert!(stack.contains("\"MainThread\""), "rank {rank}: {stack}");
    }
    let summary = &all(&ev, "stacks_summarized")[0];
    assert_eq!(summary["culprit"]["ranks"], serde_json::json!([2]), "{summary}");
    let place = summary["culprit"]["place"].as_str().unwrap();
    assert!(place.starts_with("main (examples/allreduce.py:"), "{summary}");
    assert!(
        summary["groups"][0]["place"].as_str().unwrap().starts_with("all_reduce (examples/allreduce.py:"),
        "{summary}"
    );
    assert_eq!(
        (failed["root_cause"]["rank"].as_u64(), failed["root_cause"]["node_rank"].as_u64()),
        (Some(2), Some(1)),
        "{failed}"
    );
    assert!(out.stderr.contains(&format!("1 rank (2) in {place}, the likely culprit")), "{out}");
    let mark = format!("HERD_MARKER={}:", ev[0]["config_key"].as_str().unwrap());
    assert_eq!(herd::processes_with_env_prefix(&mark), Vec::<u32>::new(), "nothing of the run is left");
}

/// One worker SIGSTOPped: every rank waits for it. Its node's agent finds it stopped when
/// herd asks, before the teardown, so the hang is pinned on that rank and not on a healthy
/// node.
#[test]
fn a_stopped_worker_is_named_as_the_cause_of_the_hang() {
    let c = Cluster::new(3);
    c.write_config(
        &torchrun("\"--steps\", \"400\", \"--sleep\", \"0.2\", \"--retry-steps\", \"3\""),
        &format!("{FAST_RESTART}hang_timeout = \"20s\"\nprogress_pattern = \"^step \"\n"),
    );
    let mut running = herd::start(c.tb.dir(), &["run"], &[]);
    c.wait_training(&mut running, 1, "step 5 ");
    let rank3 = c.tb.processes_with_env(1, "RANK", "3");
    assert!(!rank3.is_empty(), "no worker with RANK=3 on node 1");
    for pid in &rank3 {
        assert!(std::process::Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .unwrap()
            .success());
    }
    let out = running.wait(LIMIT);
    out.assert_code(0);
    assert_results_on_attempt(&out, 6, 1);
    let ev = events(&only_run_dir(&c.logs()));
    let failed = &all(&ev, "attempt_failed")[0];
    assert_eq!(failed["class"], "hang", "{failed}");
    assert_eq!(failed["root_cause"]["node_rank"], 1, "{failed}");
    assert_eq!(failed["root_cause"]["rank"], 3, "{failed}");
    assert!(failed["root_cause"]["line"].as_str().unwrap().contains("stopped (state T)"), "{failed}");
    let mark = format!("HERD_MARKER={}:", ev[0]["config_key"].as_str().unwrap());
    assert_eq!(herd::processes_with_env_prefix(&mark), Vec::<u32>::new(), "nothing of the run is left");
}

/// What docs/guide/supervision.md tells a network that flaps: with
/// `restart.heartbeat_timeout` at twice the cut, a 20 s cut costs 20 s and no restart, as gloo
/// outlives it too.
#[test]
fn a_heartbeat_timeout_of_twice_a_cut_keeps_the_run_through_it() {
    let c = Cluster::new(3);
    c.write_config(
        &torchrun("\"--steps\", \"150\", \"--sleep\", \"0.2\""),
        &format!("{FAST_RESTART}heartbeat_timeout = \"40s\"\n"),
    );
    let mut running = herd::start(c.tb.dir(), &["run"], &[]);
    c.wait_training(&mut running, 2, "step 5 ");
    c.tb.link_down(2);
    let so_far = herd::events_so_far(&c.logs());
    assert!(!so_far.iter().any(|e| e["event"] == "node_exited"), "the cut came after the job: {so_far:?}");
    std::thread::sleep(Duration::from_secs(20));
    c.tb.link_up(2);
    let out = running.wait(LIMIT);
    out.assert_code(0);
    assert_results_on_attempt(&out, 6, 0);
    let ev = events(&only_run_dir(&c.logs()));
    assert_eq!(all(&ev, "attempt_started").len(), 1, "{ev:?}");
}

#[test]
fn a_cut_link_is_detected_within_15_s_and_the_job_restarts_when_it_returns() {
    let c = Cluster::new(3);
    c.write_config(
        &torchrun("\"--steps\", \"200\", \"--sleep\", \"0.2\", \"--retry-steps\", \"3\""),
        FAST_RESTART,
    );
    let mut running = herd::start(c.tb.dir(), &["run"], &[]);
    // Training is under way once node 3 has printed a few steps.
    c.wait_training(&mut running, 2, "step 5 ");
    c.tb.link_down(2);
    let cut = Instant::now();
    // Nodes 0 and 1 still run: their stacks are asked for first, then every node is stopped.
    let detected = wait_for_event(&c.logs(), "stacks_requested", Duration::from_secs(30));
    let took = cut.elapsed();
    assert!(detected.is_some(), "the cut was not detected");
    eprintln!("link cut detected after {took:?}");
    assert!(took <= Duration::from_secs(15), "detected only after {took:?}");
    assert!(wait_for_event(&c.logs(), "attempt_failed", Duration::from_secs(30)).is_some());
    std::thread::sleep(Duration::from_secs(3));
    c.tb.link_up(2);
    let healed = std::time::SystemTime::now();

    let out = running.wait(LIMIT);
    out.assert_code(0);
    assert_results_on_attempt(&out, 6, 1);
    let ev = events(&only_run_dir(&c.logs()));
    let f = &all(&ev, "attempt_failed")[0];
    assert_eq!(f["class"], "node-lost", "{f}");
    assert_eq!(f["root_cause"]["node_rank"], 2, "{f}");
    let lost = f["root_cause"]["lost"].as_str().unwrap();
    assert!(lost.contains("connection to the node was lost") || lost.contains("no heartbeat"), "{f}");
    // The ranks that outlived the cut wait for node 2's in all_reduce, and their stacks say
    // so; node 2's ranks have none, and say why. The root cause is the loss: no culprit.
    let run = only_run_dir(&c.logs());
    for rank in 0..4 {
        let stack = std::fs::read_to_string(run.join(format!("attempt-0/stacks/rank{rank}.txt"))).unwrap();
        assert!(stack.contains("\"MainThread\""), "rank {rank}: {stack}");
    }
    for rank in 4..6 {
        let none = std::fs::read_to_string(run.join(format!("attempt-0/stacks/rank{rank}.txt"))).unwrap();
        assert!(none.contains("node 2 (") && none.contains("was lost"), "rank {rank}: {none}");
    }
    let summary = &all(&ev, "stacks_summarized")[0];
    assert_eq!(summary["culprit"], Value::Null, "{summary}");
    assert_eq!(summary["groups"].as_array().unwrap().len(), 1, "{summary}");
    let place = summary["groups"][0]["place"].as_str().unwrap();
    assert!(place.starts_with("all_reduce (examples/allreduce.py:"), "{summary}");
    let at = |name: &str| humantime::parse_rfc3339(all(&ev, name)[0]["ts"].as_str().unwrap()).unwrap();
    let probing = at("teardown_started").duration_since(at("stacks_requested")).unwrap();
    eprintln!("stacks taken in {probing:?} before the teardown");
    assert!(probing <= Duration::from_secs(6), "the teardown waited {probing:?} for the stacks");
    // The restart waited for the node: its attempt started only once the link was back.
    let restarted = &all(&ev, "attempt_started")[1];
    let at = humantime::parse_rfc3339(restarted["ts"].as_str().unwrap()).unwrap();
    assert!(at >= healed, "attempt 1 started before the link came back: {restarted}");
    let mark = format!("HERD_MARKER={}:", ev[0]["config_key"].as_str().unwrap());
    assert_eq!(herd::processes_with_env_prefix(&mark), Vec::<u32>::new(), "nothing of the run is left");
}

#[test]
fn leftovers_of_an_earlier_run_of_this_config_are_swept_and_other_jobs_are_not() {
    let c = Cluster::new(2);
    c.write_config("launcher = \"command\"\nscript = \"true\"", "");
    let first = c.run();
    first.assert_code(0);
    let key = events(&only_run_dir(&c.logs()))[0]["config_key"].as_str().unwrap().to_string();

    // Processes of an earlier run of this config that nobody stopped, on the master (swept
    // before its port is chosen) and on the worker (swept by its agent before the job
    // starts), and one of another config.
    let plant = |node: usize, marker: &str| {
        let out =
            c.tb.ssh(node, &format!("HERD_MARKER={marker} setsid sleep 300 </dev/null >/dev/null 2>&1 &"));
        assert!(out.status.success());
    };
    let dead = |node: usize| format!("{key}:20000101-000000-dead:{node}");
    plant(0, &dead(0));
    plant(1, &dead(1));
    plant(1, "0123456789abcdef:20000101-000000-beef:1");
    assert!(wait_until(Duration::from_secs(10), || (0..2).all(|n| c
        .tb
        .processes_with_env(n, "HERD_MARKER", &dead(n))
        .len()
        == 1)));

    std::fs::remove_dir_all(c.logs()).unwrap();
    let second = c.run();
    second.assert_code(0);
    for n in 0..2 {
        assert_eq!(c.tb.processes_with_env(n, "HERD_MARKER", &dead(n)), Vec::<u32>::new(), "node {n}");
    }
    let other = c.tb.processes_with_env(1, "HERD_MARKER", "0123456789abcdef:20000101-000000-beef:1");
    assert_eq!(other.len(), 1, "another config's job was touched");
    let ev = events(&only_run_dir(&c.logs()));
    let mut swept: Vec<u64> =
        all(&ev, "leftovers_stopped").iter().map(|e| e["node_rank"].as_u64().unwrap()).collect();
    swept.sort();
    assert_eq!(swept, [0, 1], "{ev:?}");
    let _ = c.tb.ssh(1, "pkill -f 'sleep 300'");
}

#[test]
fn a_second_run_of_the_same_config_is_refused_while_one_is_live() {
    let c = Cluster::new(1);
    c.write_config("launcher = \"command\"\nscript = \"sleep\"\nargs = [\"30\"]", "");
    let first = herd::start(c.tb.dir(), &["run"], &[]);
    assert!(wait_for_event(&c.logs(), "node_started", Duration::from_secs(30)).is_some());
    let second = c.run();
    second.assert_code(4);
    assert!(second.stderr.contains("another herd run of"), "{second}");
    first.signal("INT");
    first.wait(Duration::from_secs(30)).assert_code(130);
}

#[test]
fn herd_kill_stops_leftovers_of_the_config_only_and_refuses_while_a_run_is_live() {
    let c = Cluster::new(2);
    c.write_config("launcher = \"command\"\nscript = \"sleep\"\nargs = [\"30\"]", "");
    let live = herd::start(c.tb.dir(), &["run"], &[]);
    let started = wait_for_event(&c.logs(), "run_started", Duration::from_secs(30)).expect("run_started");
    let key = started["config_key"].as_str().unwrap().to_string();
    let refused = herd::run(c.tb.dir(), &["kill"], LIMIT);
    refused.assert_code(4);
    assert!(refused.stderr.contains("another herd run of"), "{refused}");
    live.signal("INT");
    live.wait(Duration::from_secs(30)).assert_code(130);

    let plant = |marker: &str| {
        let out = c.tb.ssh(0, &format!("HERD_MARKER={marker} setsid sleep 300 </dev/null >/dev/null 2>&1 &"));
        assert!(out.status.success());
    };
    let mine = format!("{key}:20000101-000000-dead:0");
    let theirs = "0123456789abcdef:20000101-000000-beef:0";
    plant(&mine);
    plant(theirs);
    assert!(
        wait_until(Duration::from_secs(10), || c.tb.processes_with_env(0, "HERD_MARKER", &mine).len() == 1)
    );
    let out = herd::run(c.tb.dir(), &["kill"], LIMIT);
    out.assert_code(0);
    assert!(out.stdout.contains(&format!("node 0 ({}): stopped 1 process(es)", c.addr(0))), "{out}");
    assert_eq!(c.tb.processes_with_env(0, "HERD_MARKER", &mine), Vec::<u32>::new());
    assert_eq!(
        c.tb.processes_with_env(0, "HERD_MARKER", theirs).len(),
        1,
        "another config's job was touched"
    );
    let again = herd::run(c.tb.dir(), &["kill"], LIMIT);
    again.assert_code(0);
    assert!(again.stdout.contains("nothing left of earlier runs"), "{again}");
}

/// Processes in node `i`'s network namespace whose command line contains `part`.
fn processes_with_cmdline(c: &Cluster, node: usize, part: &str) -> Vec<u32> {
    let ns = std::fs::metadata(format!("/run/netns/{}", c.tb.nodes()[node].netns)).map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.ino()
    });
    let Ok(ns) = ns else { return vec![] };
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(format!("/proc/{pid}/ns/net")).is_ok_and(|m| m.ino() == ns)
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.windows(part.len()).any(|w| w == part.as_bytes()))
        })
        .collect()
}

/// A node whose SSH connection stays up but whose agent stops answering (here: frozen with
/// SIGSTOP) is declared lost after restart.heartbeat_timeout; herd stops the others and,
/// since the frozen node cannot act on SIGKILL, gives up on it a few seconds later.
#[test]
fn a_silent_node_is_lost_by_heartbeat_and_given_up() {
    let c = Cluster::new(2);
    c.write_config(
        "launcher = \"command\"\nscript = \"sleep\"\nargs = [\"300\"]",
        "[restart]\nmax_restarts = 0\ngrace_period = \"2s\"\nheartbeat_timeout = \"3s\"\n",
    );
    let running = herd::start(c.tb.dir(), &["run", "--no-preflight"], &[]);
    assert!(wait_for_event(&c.logs(), "node_started", Duration::from_secs(30)).is_some());
    std::thread::sleep(Duration::from_secs(1));
    // The agent runs as `sh -c SCRIPT herd-agent ...`: its $0 names it.
    let agent = "\0herd-agent\0";
    let frozen = processes_with_cmdline(&c, 1, agent);
    assert!(frozen.len() >= 2, "the agent and its helper shells: {frozen:?}");
    for pid in &frozen {
        assert!(std::process::Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .unwrap()
            .success());
    }
    let out = running.wait(Duration::from_secs(40));
    for pid in &frozen {
        let _ = std::process::Command::new("kill").args(["-CONT", &pid.to_string()]).status();
    }
    out.assert_code(1);
    assert!(out.took < Duration::from_secs(30), "took {:?}", out.took);
    let ev = events(&only_run_dir(&c.logs()));
    let teardown = &all(&ev, "teardown_started")[0];
    assert!(teardown["reason"].as_str().unwrap().contains("is silent: no heartbeat"), "{teardown}");
    let f = &all(&ev, "attempt_failed")[0];
    assert_eq!(f["class"], "node-lost", "{f}");
    assert_eq!(f["root_cause"]["node_rank"], 1, "{f}");
    assert!(f["root_cause"]["lost"].as_str().unwrap().contains("no heartbeat"), "{f}");
}

/// SIGUSR1 to herd, Slurm's warning before a time limit: every rank gets
/// `restart.checkpoint_signal` (here USR1; examples/allreduce.py stops after the step it is in,
/// rank 0 having saved it), the ranks exit on their own within `checkpoint_grace`, and herd
/// exits 75 with the run recorded as `time-limit`, not as a failure. Nothing is left.
#[test]
fn a_time_limit_warning_has_every_rank_checkpoint_and_is_no_failure() {
    let c = Cluster::new(3);
    let ckpt = c.tb.dir().join("ckpt");
    c.write_config(
        &torchrun(&format!(
            "\"--steps\", \"100000\", \"--sleep\", \"0.2\", \"--save-dir\", \"{}\", \"--checkpoint-on\", \"SIGUSR1\"",
            ckpt.display()
        )),
        "[restart]\ncheckpoint_grace = \"60s\"\ngrace_period = \"3s\"\n",
    );
    let mut running = herd::start(c.tb.dir(), &["run"], &[]);
    assert!(running.until(LIMIT, || ckpt.join("step_3").exists()), "training did not start");
    running.signal("USR1");
    let signalled = Instant::now();
    let out = running.wait(LIMIT);
    let took = signalled.elapsed();
    out.assert_code(75);
    eprintln!("from SIGUSR1 to herd's exit: {took:?}");
    let checkpointed: Vec<&str> =
        out.stdout.lines().filter(|l| l.contains(" checkpointed at step ")).collect();
    assert_eq!(checkpointed.len(), 6, "every rank checkpoints\n{out}");
    // All at the same step, the one rank 0 saved last.
    let step =
        |l: &str| l.split(" checkpointed at step ").nth(1).unwrap().split(' ').next().unwrap().to_string();
    let steps: std::collections::BTreeSet<String> = checkpointed.iter().map(|l| step(l)).collect();
    assert_eq!(steps.len(), 1, "{checkpointed:?}");
    assert!(ckpt.join(format!("step_{}", steps.first().unwrap())).exists());
    // The ranks exited on their own: no teardown signal was needed.
    assert!(took < Duration::from_secs(55), "took {took:?}");
    let run = only_run_dir(&c.logs());
    let ev = events(&run);
    assert!(all(&ev, "attempt_failed").is_empty(), "{ev:?}");
    let teardown = &all(&ev, "teardown_started")[0];
    assert!(
        teardown["reason"]
            .as_str()
            .unwrap()
            .starts_with("the time limit is near (SIGUSR1): SIGUSR1 to every rank"),
        "{teardown}"
    );
    assert_eq!(ev.last().unwrap()["status"], "time-limit");
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["status"], "time-limit", "{summary}");
    assert!(out.stderr.contains("run stopped for the time limit"), "{out}");
    let mark = format!("HERD_MARKER={}:", ev[0]["config_key"].as_str().unwrap());
    assert_eq!(herd::processes_with_env_prefix(&mark), Vec::<u32>::new(), "nothing of the run is left");
}

/// A node's SSH master that dies during a restart's backoff takes the agent started ahead on
/// it along (see `a_restarts_logins_overlap_its_backoff`): herd connects to the node again
/// and starts its agent anew. The restart runs with no node lost and no false failure.
#[test]
fn a_master_that_dies_during_the_backoff_is_connected_again_and_its_agent_started_anew() {
    let c = Cluster::new(2);
    c.write_config(
        NODE_1_FAILS_ONCE,
        "[restart]\nmax_restarts = 1\nbackoff = \"8s\"\nbackoff_max = \"8s\"\n",
    );
    let running = herd::start(c.tb.dir(), &["run"], &[]);
    assert!(wait_for_event(&c.logs(), "restart_scheduled", LIMIT).is_some(), "no restart");
    // The agents ahead are up within moments; the backoff is 6.4 s at least.
    std::thread::sleep(Duration::from_secs(2));
    let masters = herd::ssh_master_pids_to(c.addr(1));
    assert_eq!(masters.len(), 1, "node 1's master: {masters:?}");
    let killed =
        std::process::Command::new("kill").args(["-KILL", &masters[0].to_string()]).status().unwrap();
    assert!(killed.success(), "kill node 1's master");
    let out = running.wait(LIMIT);
    out.assert_code(0);
    let ev = events(&only_run_dir(&c.logs()));
    assert_eq!(all(&ev, "attempt_started").len(), 2, "{ev:?}\n{out}");
    assert!(!ev.iter().any(|e| e["lost"].is_string() || e["class"] == "node-lost"), "{ev:?}\n{out}");
    assert_eq!(out.stdout.lines().filter(|l| l.ends_with("done")).count(), 2, "{out}");
}
