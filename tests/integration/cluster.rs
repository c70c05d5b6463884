//! End to end on the namespace testbed: real sshd per host, real torchrun and deepspeed on
//! the CPU with gloo, driven through the real `herd` binary.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::cluster::Cluster;
use crate::support::herd::{self, event_names, events, only_run_dir, wait_until};

/// Every global rank printed exactly one correct result, under its own prefix: its rank and
/// its node's host.
fn assert_all_reduce(c: &Cluster, out: &herd::Finished, nproc: usize, extra_tag: &str) {
    let n = c.tb.nodes().len();
    let world = n * nproc;
    let host_w = (0..n).map(|i| c.addr(i).len()).max().unwrap();
    let rank_w = (world - 1).to_string().len();
    let mut seen = BTreeSet::new();
    for r in 0..world {
        let node = r / nproc;
        let prefix = format!("[r{r:<rank_w$} {:<host_w$}] ", c.addr(node));
        for line in out.node_lines(&prefix).into_iter().filter(|l| l.starts_with("result ")) {
            assert!(line.ends_with(" ok"), "bad result line: {line}\n{out}");
            assert!(line.contains(&format!(" world={world} ")), "{line}");
            assert!(line.contains(&format!(" node_rank={node} ")), "{line}");
            assert!(line.contains(&format!(" host=node{} ", node + 1)), "{line}");
            assert!(line.contains(&format!(" sum={} ", world * (world + 1) / 2)), "{line}");
            assert!(line.contains(extra_tag), "{line}");
            let rank: usize =
                line.split(" rank=").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
            assert_eq!(rank, r, "global rank {rank} printed under rank {r}'s prefix: {line}");
            assert!(seen.insert(rank), "rank {rank} reported twice\n{out}");
        }
    }
    assert_eq!(seen, (0..world).collect(), "missing ranks\n{out}");
}

fn assert_run_files(c: &Cluster, attempts: u32) -> PathBuf {
    let run_dir = only_run_dir(&c.logs());
    for attempt in 0..attempts {
        for node in 0..c.tb.nodes().len() {
            let log = run_dir.join(format!("attempt-{attempt}/node{node}-{}.log", c.addr(node)));
            assert!(log.is_file(), "missing {}", log.display());
        }
    }
    run_dir
}

#[test]
fn torchrun_all_reduce_on_three_nodes_with_two_ranks_each() {
    let c = Cluster::new(3);
    c.write_config(
        "launcher = \"torchrun\"\nscript = \"examples/allreduce.py\"\nargs = [\"--tag\", \"it's a $tag; `x`\"]\nnproc_per_node = 2",
        "",
    );
    let out = c.run();
    out.assert_code(0);
    assert_all_reduce(&c, &out, 2, "tag=\"it's a $tag; `x`\"");

    let run_dir = assert_run_files(&c, 1);
    let log = std::fs::read_to_string(run_dir.join(format!("attempt-0/node1-{}.log", c.addr(1)))).unwrap();
    assert!(log.contains("result rank=2 ") && log.contains("result rank=3 "), "{log}");
    assert!(!log.contains("[1 "), "log files hold raw output, without prefixes");

    let ev = events(&run_dir);
    let names = event_names(&ev);
    assert_eq!(names.first().map(String::as_str), Some("run_started"));
    assert_eq!(names.last().map(String::as_str), Some("run_finished"));
    for name in ["attempt_started", "node_started", "node_exited", "attempt_succeeded"] {
        assert!(names.iter().any(|n| n == name), "no {name} in {names:?}");
    }
    assert!(ev.iter().all(|e| e["ts"].is_string()));
    let started = ev.iter().find(|e| e["event"] == "attempt_started").unwrap();
    assert_eq!(started["master_addr"], c.addr(0));
    let port = started["master_port"].as_u64().unwrap();
    assert!((20000..=40000).contains(&port), "port {port}");
    assert_eq!(names.iter().filter(|n| *n == "node_exited").count(), 3);
    assert!(ev.iter().filter(|e| e["event"] == "node_exited").all(|e| e["exit_code"] == 0));
    assert_eq!(ev.last().unwrap()["status"], "succeeded");
}

#[test]
fn deepspeed_all_reduce_on_three_nodes_with_two_ranks_each() {
    let c = Cluster::new(3);
    c.write_config(
        "launcher = \"deepspeed\"\nscript = \"examples/allreduce.py\"\nargs = [\"--deepspeed\", \"--tag\", \"ds\"]\nnproc_per_node = 2",
        &format!("[env]\nTORCH_EXTENSIONS_DIR = \"{}/torch_extensions\"\n", c.venv.display()),
    );
    let out = c.run();
    out.assert_code(0);
    assert_all_reduce(&c, &out, 2, "tag='ds'");
    assert_run_files(&c, 1);
}

/// The [env] marker that lets a test find every job process it started, on every node.
fn mark(c: &Cluster) -> String {
    format!("herd-test-{}", c.tb.k())
}

fn command_job(c: &Cluster, script: &str, extra: &str) {
    c.write_config(
        &format!("launcher = \"command\"\nscript = \"sh\"\nargs = [\"-c\", {}]", toml_str(script)),
        &format!("[env]\nHERD_TEST_MARK = \"{}\"\n\n{extra}", mark(c)),
    );
}

fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

#[test]
fn a_failing_node_stops_the_others_and_is_named_as_the_root_cause() {
    let c = Cluster::new(3);
    command_job(
        &c,
        "if [ \"$NODE_RANK\" = 1 ]; then sleep 1; echo \"fatal: boom on $HERD_NODE\" >&2; exit 7; fi; sleep 300 & exec sleep 300",
        "[restart]\ngrace_period = \"3s\"",
    );
    let out = c.run();
    out.assert_code(1);
    assert!(out.took < Duration::from_secs(30), "took {:?}", out.took);
    let who = format!("node 1 ({})", c.addr(1));
    // No rule matches "fatal: boom": a plain non-zero exit is the user's, and is not restarted.
    assert!(out.stderr.contains(&format!("root cause (user): {who}: exit code 7")), "{out}");
    assert!(out.stderr.contains(&format!("line: fatal: boom on {}", c.addr(1))), "{out}");
    assert!(out.stderr.contains("attempt-0/node1-"), "names the log file\n{out}");
    assert_eq!(c.leftovers("HERD_TEST_MARK", &mark(&c)), vec![], "job processes left behind");

    let ev = events(&only_run_dir(&c.logs()));
    let failed = ev.iter().find(|e| e["event"] == "attempt_failed").expect("attempt_failed");
    assert_eq!(failed["class"], "user");
    assert_eq!(failed["root_cause"]["node_rank"], 1);
    assert_eq!(failed["root_cause"]["exit_code"], 7);
    assert_eq!(failed["consequences"], serde_json::json!([]), "nodes herd stopped are not failures");
    assert_eq!(event_names(&ev).iter().filter(|n| *n == "attempt_started").count(), 1);
    assert!(event_names(&ev).contains(&"teardown_started".to_string()));
    let others: Vec<_> = ev.iter().filter(|e| e["event"] == "node_exited" && e["node_rank"] != 1).collect();
    assert_eq!(others.len(), 2);
    assert!(others.iter().all(|e| e["signal"] == 15), "others were stopped with SIGTERM: {others:?}");
    assert_eq!(ev.last().unwrap()["status"], "failed");
}

/// Job processes that are `sleep`: the steady state of the long jobs below, once every
/// node is past its setup.
fn sleepers(c: &Cluster) -> usize {
    c.leftovers("HERD_TEST_MARK", &mark(c))
        .into_iter()
        .filter(|(_, pid)| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim() == "sleep")
        })
        .count()
}

/// Starts a job that runs until killed on every node (two processes each, one of them in a
/// session of its own as torchrun's workers are) and waits until all of them are up.
fn start_long_job(c: &Cluster, trap_term: bool, grace: &str) -> herd::Running {
    let trap = if trap_term { "trap '' TERM; " } else { "" };
    command_job(
        c,
        &format!("{trap}setsid sleep 300 </dev/null >/dev/null 2>&1 & exec sleep 301"),
        &format!("[restart]\ngrace_period = \"{grace}\""),
    );
    let running = herd::start(c.tb.dir(), &["run"], &[]);
    let want = 2 * c.tb.nodes().len();
    let up = wait_until(Duration::from_secs(60), || sleepers(c) == want);
    assert!(up, "job processes did not come up: {:?}", c.leftovers("HERD_TEST_MARK", &mark(c)));
    running
}

#[test]
fn sigkill_of_herd_leaves_no_job_process_on_any_node() {
    let c = Cluster::new(3);
    let running = start_long_job(&c, false, "2s");
    running.signal("KILL");
    let killed = Instant::now();
    let gone = wait_until(Duration::from_secs(5), || c.leftovers("HERD_TEST_MARK", &mark(&c)).is_empty());
    assert!(gone, "left after 5 s: {:?}", c.leftovers("HERD_TEST_MARK", &mark(&c)));
    eprintln!("all job processes gone {:?} after SIGKILL of herd", killed.elapsed());
    let _ = running.wait(Duration::from_secs(10));
}

#[test]
fn ctrl_c_stops_every_node_and_exits_130() {
    let c = Cluster::new(3);
    let running = start_long_job(&c, false, "5s");
    running.signal("INT");
    let out = running.wait(Duration::from_secs(30));
    out.assert_code(130);
    assert!(out.stderr.contains("interrupted"), "{out}");
    assert_eq!(c.leftovers("HERD_TEST_MARK", &mark(&c)), vec![]);
    let ev = events(&only_run_dir(&c.logs()));
    assert_eq!(ev.last().unwrap()["status"], "interrupted");
}

#[test]
fn second_ctrl_c_kills_a_job_that_ignores_sigterm() {
    let c = Cluster::new(2);
    let running = start_long_job(&c, true, "60s");
    running.signal("INT");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(sleepers(&c), 4, "SIGTERM is ignored: still running");
    let second = Instant::now();
    running.signal("INT");
    let out = running.wait(Duration::from_secs(30));
    out.assert_code(130);
    assert!(
        second.elapsed() < Duration::from_secs(10),
        "second Ctrl-C did not kill at once: {:?}",
        second.elapsed()
    );
    assert_eq!(c.leftovers("HERD_TEST_MARK", &mark(&c)), vec![]);
}

#[test]
fn an_unreachable_node_fails_the_start_and_nothing_runs() {
    let c = Cluster::new(2);
    let dead = format!("10.77.{}.250", c.tb.k());
    let text = format!(
        "{}\n[[nodes]]\nhost = \"{}\"\n[[nodes]]\nhost = \"{dead}\"\n[[nodes]]\nhost = \"{}\"\n\n\
         [job]\nlauncher = \"command\"\nscript = \"sleep\"\nargs = [\"300\"]\n\n[env]\nHERD_TEST_MARK = \"{}\"\n\n[logs]\ndir = \"{}\"\n",
        c.tb.ssh_config_toml().replace("connect_timeout = \"5s\"", "connect_timeout = \"2s\""),
        c.addr(0),
        c.addr(1),
        mark(&c),
        c.logs().display()
    );
    std::fs::write(c.tb.dir().join("cluster.toml"), text).unwrap();
    let out = c.run();
    out.assert_code(3);
    assert!(out.stderr.contains(&format!("node 1 ({dead}): ssh: cannot connect over ssh")), "{out}");
    assert!(out.stderr.contains("fix: check that the host is up"), "{out}");
    assert!(out.took < Duration::from_secs(30), "{:?}", out.took);
    assert_eq!(c.leftovers("HERD_TEST_MARK", &mark(&c)), vec![]);
    let ev = events(&only_run_dir(&c.logs()));
    assert!(!event_names(&ev).iter().any(|n| n == "node_started" || n == "attempt_started"), "{ev:?}");
}

#[test]
fn env_values_arrive_byte_identical_and_secrets_never_touch_argv() {
    let c = Cluster::new(2);
    let nasty = "a b 'single' \"double\" $HOME `id` \\ ;|&* é\nsecond line\t";
    let secret = format!("s3cr3t-{}-{}", c.tb.k(), std::process::id());
    c.write_config(
        "launcher = \"command\"\nscript = \"python3\"\nargs = [\"-c\", \"import os, json, time; print(json.dumps([os.environ['NASTY'], os.environ['MY_SECRET'], os.environ['PER_NODE']])); time.sleep(3)\"]\nforward_env = [\"MY_*\"]",
        &format!("[env]\nNASTY = {}\nHERD_TEST_MARK = \"{}\"\n", toml_str(nasty), mark(&c)),
    );
    // A per-node env table on the second host.
    let path = c.tb.dir().join("cluster.toml");
    let text = std::fs::read_to_string(&path).unwrap().replace(
        &format!("[[nodes]]\nhost = \"{}\"", c.hostlist()),
        &format!("[[nodes]]\nhost = \"{}\"\nenv = {{ PER_NODE = \"zero\" }}\n[[nodes]]\nhost = \"{}\"\nenv = {{ PER_NODE = \"one\" }}", c.addr(0), c.addr(1)),
    );
    std::fs::write(&path, text).unwrap();

    let running = herd::start(c.tb.dir(), &["run"], &[("MY_SECRET", &secret)]);
    // On each node the job and the output multiplexer it runs under.
    assert!(wait_until(Duration::from_secs(60), || c.leftovers("HERD_TEST_MARK", &mark(&c)).len() == 4));
    let leaks = processes_with_arg_containing(&secret);
    let out = running.wait(Duration::from_secs(60));
    out.assert_code(0);
    assert_eq!(leaks, Vec::<u32>::new(), "the secret is visible in some process's argv");
    for (node, per_node) in [(0, "zero"), (1, "one")] {
        let prefix = format!("[{node} {}] ", c.addr(node));
        let lines = out.node_lines(&prefix);
        let got: Vec<String> =
            serde_json::from_str(lines.iter().find(|l| l.starts_with('[')).unwrap()).unwrap();
        assert_eq!(got, [nasty, secret.as_str(), per_node], "{out}");
    }
    assert!(
        !out.stdout.contains(&secret) || out.stdout.matches(&secret).count() == 2,
        "only the job printed it"
    );
    assert!(!out.stderr.contains(&secret), "herd never prints a forwarded value");
}

fn processes_with_arg_containing(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| c.windows(needle.len()).any(|w| w == needle.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}

#[test]
fn output_keeps_every_byte_in_logs_and_every_line_on_stdout() {
    const LINES: usize = 20_000;
    let c = Cluster::new(3);
    c.write_config(
        &format!(
            "launcher = \"command\"\nscript = \"python3\"\nargs = [\"tests/fixtures/chatter.py\", \"{LINES}\"]"
        ),
        "",
    );
    let out = c.run();
    out.assert_code(0);
    let run_dir = only_run_dir(&c.logs());
    for node in 0..3 {
        let mut expected = Vec::new();
        for i in 0..LINES {
            expected.extend_from_slice(format!("node {node} line {i}\n").as_bytes());
        }
        expected.extend_from_slice(b"progress 1\rprogress 2\rprogress 3\r\n");
        expected.extend_from_slice(&[b'x'; 200_000]);
        expected.extend_from_slice(b"\nbad \xff\xfe utf8\nend without newline");
        let log = std::fs::read(run_dir.join(format!("attempt-0/node{node}-{}.log", c.addr(node)))).unwrap();
        assert!(
            log == expected,
            "node {node}: log differs from what the node wrote ({} vs {} bytes)",
            log.len(),
            expected.len()
        );

        let prefix = format!("[{node} {}] ", c.addr(node));
        let lines = out.node_lines(&prefix);
        let numbered = lines.iter().filter(|l| l.starts_with(&format!("node {node} line "))).count();
        assert_eq!(numbered, LINES, "node {node}: lines lost on stdout");
        let x = |n: usize| "x".repeat(n);
        let expected_tail = [
            "progress 1".to_string(),
            "progress 2".into(),
            "progress 3".into(),
            x(65536),
            x(65536),
            x(65536),
            x(200_000 - 3 * 65536),
            "bad \u{fffd}\u{fffd} utf8".into(),
            "end without newline".into(),
        ];
        assert_eq!(lines[lines.len() - expected_tail.len()..], expected_tail, "node {node}");
    }
}

/// The README's first command runs this file: two nodes on the local transport, no sshd.
#[test]
fn the_readme_demo_runs_on_the_local_transport() {
    let venv = herd::torch_venv();
    let logs = tempfile::tempdir().unwrap();
    let root = herd::repo_root();
    let config = std::fs::read_to_string(root.join("examples/local.toml"))
        .unwrap()
        .replace("dir = \"herd-logs\"", &format!("dir = \"{}\"", logs.path().display()));
    let path = logs.path().join("local.toml");
    std::fs::write(&path, config).unwrap();
    let out =
        herd::start(&root, &["run", "-c", path.to_str().unwrap()], &[("HERD_VENV", venv.to_str().unwrap())])
            .wait(crate::support::cluster::LIMIT);
    out.assert_code(0);
    for (node, host) in [(0, "localhost"), (1, "127.0.0.1")] {
        let results: usize = (node * 2..node * 2 + 2)
            .map(|rank| {
                out.node_lines(&format!("[r{rank} {host:<9}] "))
                    .into_iter()
                    .filter(|l| l.starts_with("result ") && l.ends_with(" ok") && l.contains(" world=4 "))
                    .count()
            })
            .sum();
        assert_eq!(results, 2, "node {node}\n{out}");
    }
}

#[test]
fn ctrl_c_while_connecting_ends_the_run_with_nothing_started() {
    let c = Cluster::new(2);
    let dead = format!("10.77.{}.250", c.tb.k());
    let text = format!(
        "{}\n[[nodes]]\nhost = \"{}\"\n[[nodes]]\nhost = \"{dead}\"\n\n\
         [job]\nlauncher = \"command\"\nscript = \"sleep\"\nargs = [\"300\"]\n\n[env]\nHERD_TEST_MARK = \"{}\"\n\n[logs]\ndir = \"{}\"\n",
        c.tb.ssh_config_toml().replace("connect_timeout = \"5s\"", "connect_timeout = \"20s\""),
        c.addr(0),
        mark(&c),
        c.logs().display()
    );
    std::fs::write(c.tb.dir().join("cluster.toml"), text).unwrap();
    let running = herd::start(c.tb.dir(), &["run"], &[]);
    std::thread::sleep(Duration::from_secs(2));
    running.signal("INT");
    let out = running.wait(Duration::from_secs(15));
    out.assert_code(130);
    assert!(out.took < Duration::from_secs(10), "waited for the connect timeout: {:?}", out.took);
    assert_eq!(c.leftovers("HERD_TEST_MARK", &mark(&c)), vec![]);
    let ev = events(&only_run_dir(&c.logs()));
    assert!(!event_names(&ev).iter().any(|n| n == "attempt_started"), "{ev:?}");
    assert_eq!(ev.last().unwrap()["status"], "interrupted");
}
