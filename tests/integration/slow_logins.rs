//! Slow login shells, as on clusters whose shared home runs `conda init` or `pyenv init` for
//! every login: herd pays the time, and blames no node for it.

use std::time::Duration;

use crate::support::cluster::{Cluster, NODE_1_FAILS_ONCE};
use crate::support::herd::{self, events, only_run_dir};
use serde_json::Value;

/// Four shell inits of 35 s in a row on the master (the preflight's login and its `setup`'s
/// bash, the job's login and its `setup`'s bash: bash sources ~/.bashrc again for `setup`,
/// see docs/guide/running.md), and torch's start-up: about 190 s here.
const SLOW_LIMIT: Duration = Duration::from_secs(450);

/// The master's login takes 35 s (a stale lock in the shell init), the others' 2 s. Every
/// herd connection outlives the wait, no node is lost, and the job succeeds in one attempt.
#[test]
fn a_slow_master_login_costs_time_and_no_node() {
    let c = Cluster::new(3);
    c.tb.slow_login(0, 35.0);
    c.tb.slow_login(1, 2.0);
    c.tb.slow_login(2, 2.0);
    c.write_config(
        "launcher = \"torchrun\"\nscript = \"examples/allreduce.py\"\nargs = [\"--steps\", \"3\"]\nnproc_per_node = 2",
        "",
    );
    let out = herd::run(c.tb.dir(), &["run"], SLOW_LIMIT);
    out.assert_code(0);
    let ok = out.stdout.lines().filter(|l| l.contains("result rank=") && l.ends_with(" ok")).count();
    assert_eq!(ok, 6, "{out}");
    let ev = events(&only_run_dir(&c.logs()));
    let names = herd::event_names(&ev);
    assert_eq!(names.iter().filter(|n| *n == "attempt_started").count(), 1, "{names:?}\n{out}");
    assert!(!ev.iter().any(|e| e["lost"].is_string() || e["class"] == "node-lost"), "{ev:?}\n{out}");
}

/// doctor reports a slow login as a warning with its fix, not a failure, and exec works there.
#[test]
fn a_slow_login_is_a_doctor_warning_and_exec_still_works() {
    let c = Cluster::new(2);
    c.tb.slow_login(1, 3.0);
    c.write_config("launcher = \"torchrun\"\nscript = \"examples/allreduce.py\"\nnproc_per_node = 2", "");
    let out = herd::run(c.tb.dir(), &["doctor", "--json"], SLOW_LIMIT);
    out.assert_code(0);
    let json: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{out}"));
    let ssh = |node: usize| {
        json["nodes"][node]["checks"].as_array().unwrap().iter().find(|c| c["name"] == "ssh").unwrap().clone()
    };
    assert_eq!(ssh(1)["status"], "warn", "{}", ssh(1));
    assert!(ssh(1)["detail"].as_str().unwrap().contains("agent answered"), "{}", ssh(1));
    assert!(ssh(1)["fix"].as_str().unwrap().contains("non-interactive"), "{}", ssh(1));
    assert_eq!(ssh(0)["status"], "pass", "{}", ssh(0));

    let out = herd::run(c.tb.dir(), &["exec", "--gather", "--", "echo", "hello"], SLOW_LIMIT);
    out.assert_code(0);
    assert!(out.stdout.contains("hello"), "{out}");
}

/// A restart's logins overlap its backoff. Every login shell takes 4 s and the backoff is
/// 10 s: the restarted attempt has its port (the master's report) and its nodes running
/// within moments of its start, not a login later.
#[test]
fn a_restarts_logins_overlap_its_backoff() {
    let c = Cluster::new(2);
    c.tb.slow_login(0, 4.0);
    c.tb.slow_login(1, 4.0);
    c.write_config(
        NODE_1_FAILS_ONCE,
        "[restart]\nmax_restarts = 1\nbackoff = \"10s\"\nbackoff_max = \"10s\"\n",
    );
    let out = herd::run(c.tb.dir(), &["run"], SLOW_LIMIT);
    out.assert_code(0);
    let ev = events(&only_run_dir(&c.logs()));
    let at = |e: &Value| humantime::parse_rfc3339(e["ts"].as_str().unwrap()).unwrap();
    let of = |name: &str| {
        ev.iter().filter(|e| e["event"] == name && e["attempt"] == 1).map(at).collect::<Vec<_>>()
    };
    let (starting, started, nodes) = (of("attempt_starting"), of("attempt_started"), of("node_started"));
    assert!(starting.len() == 1 && started.len() == 1 && nodes.len() == 2, "{ev:?}\n{out}");
    let after = |t: std::time::SystemTime| t.duration_since(starting[0]).unwrap_or_default();
    // Without the logins ahead, the port waits 4 s for the master's login.
    assert!(
        after(started[0]) < Duration::from_secs(2),
        "port chosen {:?} after the start\n{out}",
        after(started[0])
    );
    let last = nodes.into_iter().max().unwrap();
    assert!(
        after(last) < Duration::from_secs(3),
        "every node running {:?} after the start\n{out}",
        after(last)
    );
    assert!(!ev.iter().any(|e| e["lost"].is_string() || e["class"] == "node-lost"), "{ev:?}\n{out}");
}
