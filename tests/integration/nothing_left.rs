//! After every herd command, nothing it started is left on any node: its agents, their
//! heartbeat sleeps, the probes' listeners, the jobs. Every process of every node is counted
//! before and after.

use std::time::Duration;

use crate::support::cluster::{Cluster, LIMIT};
use crate::support::herd;
use crate::support::testbed::Testbed;

/// The processes not in `before` on each node once the processes had 5 s to go. By pid: a
/// process that was there before may have retitled itself (sshd's listener shows how many
/// logins it is accepting, `[listener] 1 of 10-100 startups`).
fn left_after(c: &Cluster, before: &[Vec<(u32, String)>]) -> Vec<(usize, Vec<(u32, String)>)> {
    let extra = |i: usize| -> Vec<(u32, String)> {
        c.tb.processes(i).into_iter().filter(|(pid, _)| !before[i].iter().any(|(p, _)| p == pid)).collect()
    };
    herd::wait_until(Duration::from_secs(5), || (0..before.len()).all(|i| extra(i).is_empty()));
    (0..before.len()).map(|i| (i, extra(i))).filter(|(_, e)| !e.is_empty()).collect()
}

#[test]
fn no_command_leaves_a_process_on_any_node() {
    let c = Cluster::new(2);
    c.write_config("launcher = \"command\"\nscript = \"sh\"\nargs = [\"-c\", \"sleep 1; echo done\"]", "");
    let nodes = c.tb.nodes().len();
    for args in [
        &["run"][..],
        &["run", "--no-preflight"],
        &["doctor"],
        &["exec", "--", "sleep 0.5; echo hi"],
        &["exec", "--gather", "--", "hostname"],
        &["kill"],
    ] {
        let before: Vec<Vec<(u32, String)>> = (0..nodes).map(|i| c.tb.processes(i)).collect();
        let out = herd::run(c.tb.dir(), args, LIMIT);
        assert!(matches!(out.code, Some(0) | Some(3)), "herd {args:?}\n{out}");
        let left = left_after(&c, &before);
        assert!(left.is_empty(), "herd {args:?} left on the nodes: {left:?}\n{out}");
    }
}

/// A node cut off for good, alive behind its cut (a partition, not a crash), keeps its job
/// until something reaches its agent: herd cannot. With `ClientAliveInterval` set on the node
/// (docs/guide/supervision.md), sshd ends the session after interval × count seconds of
/// silence, the agent reads the end of its stdin as herd's end, and stops the job: nothing is
/// left on the node, though herd never reaches it again.
#[test]
fn a_node_cut_off_for_good_stops_its_job_once_its_sshd_gives_up_on_herd() {
    let tb = Testbed::with_sshd_config(2, "ClientAliveInterval 2\nClientAliveCountMax 3\n");
    // sshd's 6 s of silence, the grace, and time to look. Not before the 6 s: a cut the
    // node's kernel sees (a link down on its side) ends the session at once, with or without
    // ClientAlive, and proves nothing of it.
    cut_off_for_good(tb, "", Duration::from_secs(5)..Duration::from_secs(40));
}

/// The same cut, the node's sshd as it comes (no ClientAlive: it keeps the session for as
/// long as TCP does, minutes to hours): the agent's fence ends the job once herd's beats have
/// stopped for 5 × `restart.heartbeat_timeout` (here 15 s), after herd has given the node up
/// (after 4 × at most), never before.
#[test]
fn a_node_cut_off_for_good_ends_its_job_by_its_fence_whatever_its_sshd_does() {
    cut_off_for_good(
        Testbed::new(2),
        "heartbeat_timeout = \"3s\"\n",
        Duration::from_secs(12)..Duration::from_secs(45),
    );
}

/// Cut node 1 of `tb` off (every packet dropped, its link up) while it runs a job, with these
/// `[restart]` settings; its job must end within `within` of the cut.
fn cut_off_for_good(tb: Testbed, restart: &str, within: std::ops::Range<Duration>) {
    let c = Cluster { tb, venv: herd::torch_venv() };
    let mark = format!("cut-{}", c.tb.k());
    c.write_config(
        "launcher = \"command\"\nscript = \"sh\"\nargs = [\"-c\", \"sleep 600\"]",
        &format!("[env]\nHERD_TEST_MARK = \"{mark}\"\n\n[restart]\nnode_wait = \"10m\"\n{restart}"),
    );
    // The job's own process (the preflight's carry the marker too, and end).
    let job = |c: &Cluster| -> Vec<u32> {
        let sleeps =
            |pid: &u32| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == b"sleep\x00600\x00");
        c.tb.processes_with_env(1, "HERD_TEST_MARK", &mark).into_iter().filter(sleeps).collect()
    };
    let mut running = herd::start(c.tb.dir(), &["run"], &[]);
    assert!(running.until(LIMIT, || !job(&c).is_empty()), "node 1's job did not start");
    c.tb.silence(1);
    let cut = std::time::Instant::now();
    let gone =
        herd::wait_until(within.end, || c.tb.processes_with_env(1, "HERD_TEST_MARK", &mark).is_empty());
    let took = cut.elapsed();
    running.signal("INT");
    let out = running.wait(LIMIT);
    c.tb.unsilence(1);
    assert!(
        gone,
        "node 1 still runs the job {took:?} after the cut: {:?}\n{out}",
        c.tb.processes_with_env(1, "HERD_TEST_MARK", &mark)
    );
    assert!(took >= within.start, "the job ended {took:?} after the cut, before {:?}", within.start);
    eprintln!("the job on the cut node ended {took:?} after the cut");
}
