//! After every herd command, nothing it started is left on any node: its agents, their
//! heartbeat sleeps, the probes' listeners, the jobs. Every process of every node is counted
//! before and after.

use std::time::Duration;

use crate::support::cluster::{Cluster, LIMIT};
use crate::support::herd;

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
