//! `herd doctor --deep`: the network between the nodes, and which node is slow. Pure: what
//! the nodes measured (`remote/netcheck.py`) in, one verdict per node out.
//!
//! Each round is a ring with a shift s: every node sends to node + s and receives from
//! node - s at once, and each directed pair is timed by its receiver. Three rounds (shifts 1,
//! 2 and -1; fewer where the ring has fewer peers) give every node three peers to send to and
//! three to receive from. A slow node (its NIC, its cable, its CPU) is slow with all of them,
//! in the direction it is slow in; a healthy neighbour is slow with some of them only. With
//! the two forward rounds alone, the node before two slow neighbours sends only to them.
//!
//! So each node's side is the best it reached sending, and the best it reached receiving,
//! against a reference (their median, unless that median is itself slow against the fastest
//! nodes'). A low side is not yet a verdict: a healthy node whose two senders are both slow
//! receives slowly too. The verdict explains every slow pair by as few nodes as it can: a side
//! that has a pair whose other end is not low is the node's own; what pairs are left are put
//! on the fewest nodes that cover them, and a node whose low side its peers explain is not
//! named (it is shown, with their names).

use serde::Serialize;

use crate::config::Device;
use crate::plan::{AttemptValues, EnvValue, LaunchPlan};
use crate::remote;

/// MiB per bandwidth step: long enough on a healthy link (tens of ms) that the nodes' skew
/// leaving the barrier before it (a few ms) does not count; a step on a 10 Mbit/s link takes
/// 7 s, and the steps are fitted to the budget.
pub const STEP_MIB: f64 = 8.0;

/// Seconds of measuring, shared by the rounds (torch's import and the rendezvous come first).
pub const BUDGET_SECS: u64 = 20;

/// Every node's command: the measurement, in the job's workdir after its `setup`, by its
/// Python, with the master's `port` (tested free and reachable by the checks before it).
pub fn commands(plan: &LaunchPlan, port: u16) -> Vec<String> {
    let backend = match plan.device {
        Device::Cuda => "nccl",
        Device::Cpu => "gloo",
    };
    let world = plan.nnodes().to_string();
    let (port, mib, budget) = (port.to_string(), STEP_MIB.to_string(), BUDGET_SECS.to_string());
    plan.nodes
        .iter()
        .map(|node| {
            let rank = node.node_rank.to_string();
            let args = [&rank, &world, &plan.master.addr, &port, &backend.to_string(), &mib, &budget];
            let mut line = remote::shell::ShellLine::new();
            line.arg(&plan.python).args(["-c", remote::scripts::NETCHECK_PY]).args(args);
            let setup = plan.setup.as_deref().filter(|_| plan.container.is_none());
            remote::shell::job_snippet(&plan.workdir, setup, &line.line())
        })
        .collect()
}

/// Every node's env for the measurement: the job's (its `[env]`, the rendezvous interface,
/// `auto` as the checks found it in `route_devs`), the master port `port`, and none of a run's
/// own variables (its marker, its container, its NCCL dumps): the measurement is not a run,
/// and no sweep of the config's runs may take it for one.
pub fn envs(plan: &LaunchPlan, port: u16, route_devs: &[Option<String>]) -> Vec<Vec<(String, String)>> {
    let interfaces: Vec<String> = route_devs.iter().map(|d| d.clone().unwrap_or_default()).collect();
    let values = AttemptValues { run_id: "doctor", attempt: 0, master_port: port, interfaces: &interfaces };
    plan.nodes
        .iter()
        .map(|node| {
            let own = |k: &String| {
                matches!(
                    node.env.get(k),
                    Some(EnvValue::Marker { .. } | EnvValue::ContainerName { .. } | EnvValue::NcclDump)
                )
            };
            node.resolved_env(&values).into_iter().filter(|(k, _)| !own(k)).collect()
        })
        .collect()
}

/// What one receiver measured of one directed pair.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairSample {
    pub shift: usize,
    pub src: usize,
    pub dst: usize,
    /// MB/s (10^6 bytes) of its best step.
    pub mbps: f64,
    /// The median time of a 4-byte step, µs.
    pub latency_us: f64,
}

/// The default `--slow-below`: a node below half the median bandwidth is named. Healthy
/// nodes on one fabric measure within a few tens of percent of each other (on this testbed,
/// every node sharing two cores, within 0.6 to 1.6 of the median); half is outside that
/// noise, and is what a link that negotiated a lower speed, or a cable with errors, shows.
pub const SLOW_BELOW: f64 = 0.5;

/// One node's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeNet {
    pub node_rank: usize,
    /// The best MB/s it sent at, and received at; `None`: no pair of it was measured.
    pub send_mbps: Option<f64>,
    pub recv_mbps: Option<f64>,
    /// The lower of the two.
    pub mbps: Option<f64>,
    /// Its best median latency, µs, over the pairs it received and sent.
    pub latency_us: Option<f64>,
    /// Its bandwidth over the reference (with two nodes: over their faster direction).
    pub ratio: Option<f64>,
    /// Named: its own side explains slow pairs.
    pub slow: bool,
    /// The sides it is named for.
    pub slow_send: bool,
    pub slow_recv: bool,
    /// Not named though a side is low: the named peers that side's pairs all run with.
    pub low_because_of: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetReport {
    pub nodes: Vec<NodeNet>,
    /// The median of every node's best sending and best receiving.
    pub median_mbps: Option<f64>,
    /// What each node is measured against: the median, or, where the median is itself below
    /// `slow_below` of the fastest quarter of the nodes' sending or receiving sides (most of
    /// them slow), that quarter's.
    pub reference_mbps: Option<f64>,
    pub slow_below: f64,
    /// Some slow pairs could be put on either end (with two nodes, always): both ends are
    /// named, and this says so.
    pub ambiguous: bool,
}

impl NetReport {
    pub fn slow(&self) -> impl Iterator<Item = &NodeNet> {
        self.nodes.iter().filter(|n| n.slow)
    }

    /// Every node measured, and none slow.
    pub fn ok(&self) -> bool {
        self.nodes.iter().all(|n| n.mbps.is_some() && !n.slow)
    }
}

/// The `herd-net SHIFT SRC DST MBPS LATENCY_US` lines of one node's output, ignoring any
/// other line (the node's login, its torch's warnings) and any pair it did not receive.
pub fn parse(out: &str, node_rank: usize) -> Vec<PairSample> {
    out.lines()
        .filter_map(|line| {
            let mut words = line.trim_end_matches('\r').strip_prefix("herd-net ")?.split(' ');
            let mut next = || words.next();
            let sample = PairSample {
                shift: next()?.parse().ok()?,
                src: next()?.parse().ok()?,
                dst: next()?.parse().ok()?,
                mbps: next()?.parse().ok()?,
                latency_us: next()?.parse().ok()?,
            };
            let sane = sample.mbps.is_finite() && sample.mbps > 0.0 && sample.latency_us.is_finite();
            (sample.dst == node_rank && sane).then_some(sample)
        })
        .collect()
}

/// Every node's verdict from every pair measured, against `slow_below` times the reference.
pub fn score(nnodes: usize, samples: &[PairSample], slow_below: f64) -> NetReport {
    let pairs: Vec<&PairSample> =
        samples.iter().filter(|s| s.src != s.dst && s.src < nnodes && s.dst < nnodes).collect();
    let best =
        |f: &dyn Fn(&PairSample) -> bool| pairs.iter().filter(|s| f(s)).map(|s| s.mbps).reduce(f64::max);
    let send: Vec<Option<f64>> = (0..nnodes).map(|n| best(&|s| s.src == n)).collect();
    let recv: Vec<Option<f64>> = (0..nnodes).map(|n| best(&|s| s.dst == n)).collect();
    let median_mbps = median(send.iter().chain(&recv).flatten().copied().collect());
    let reference_mbps = match nnodes {
        // Two nodes share their one pair's slow direction: the other direction is all there
        // is to compare with.
        2 => pairs.iter().map(|s| s.mbps).reduce(f64::max),
        _ => reference(median_mbps, &send, &recv, slow_below),
    };
    let low = |v: Option<f64>| matches!((v, reference_mbps), (Some(v), Some(r)) if v < slow_below * r);
    let low_send: Vec<bool> = send.iter().map(|&v| low(v)).collect();
    let low_recv: Vec<bool> = recv.iter().map(|&v| low(v)).collect();
    let named = explain(nnodes, &pairs, &low_send, &low_recv);

    let nodes: Vec<NodeNet> = (0..nnodes)
        .map(|n| {
            let mbps = send[n].zip(recv[n]).map(|(a, b)| a.min(b));
            let latency_us =
                pairs.iter().filter(|s| s.src == n || s.dst == n).map(|s| s.latency_us).reduce(f64::min);
            NodeNet {
                node_rank: n,
                send_mbps: send[n],
                recv_mbps: recv[n],
                mbps,
                latency_us,
                ratio: mbps.zip(reference_mbps).map(|(m, r)| m / r),
                slow: named.node(n),
                slow_send: named.send[n],
                slow_recv: named.recv[n],
                low_because_of: named.explaining(n, &pairs, &low_send, &low_recv),
            }
        })
        .collect();
    NetReport { nodes, median_mbps, reference_mbps, slow_below, ambiguous: named.ambiguous }
}

/// Which nodes the slow pairs are put on.
struct Named {
    /// Per node: its sending side is named, its receiving side is.
    send: Vec<bool>,
    recv: Vec<bool>,
    ambiguous: bool,
}

impl Named {
    fn node(&self, n: usize) -> bool {
        self.send[n] || self.recv[n]
    }

    /// The named peers that node `n`'s low sides run with, when `n` itself is not named: they
    /// are why its side is low.
    fn explaining(
        &self,
        n: usize,
        pairs: &[&PairSample],
        low_send: &[bool],
        low_recv: &[bool],
    ) -> Vec<usize> {
        let mut peers: Vec<usize> = Vec::new();
        if self.node(n) {
            return peers;
        }
        for s in pairs {
            let peer = match (s.dst == n && low_recv[n], s.src == n && low_send[n]) {
                (true, _) => s.src,
                (_, true) => s.dst,
                _ => continue,
            };
            if self.node(peer) && !peers.contains(&peer) {
                peers.push(peer);
            }
        }
        peers.sort_unstable();
        peers
    }
}

/// Pure: the fewest nodes whose low sides explain every slow pair. A pair is slow when its
/// sender's best sending is low or its receiver's best receiving is (a side's best is its
/// fastest pair, so a low side has every pair of it slow). A low side with a pair whose other
/// end is not low is the node's own: nothing else explains that pair. The pairs left are low
/// at both ends: they are put on the sides that cover them with the fewest nodes not yet
/// named, then the fewest sides; if several such sets tie, every one is named, and the
/// verdict says it cannot tell.
fn explain(nnodes: usize, pairs: &[&PairSample], low_send: &[bool], low_recv: &[bool]) -> Named {
    // A side: (node, true) sending, (node, false) receiving.
    let mut named: Vec<(usize, bool)> = Vec::new();
    for s in pairs {
        match (low_send[s.src], low_recv[s.dst]) {
            (true, false) => named.push((s.src, true)),
            (false, true) => named.push((s.dst, false)),
            _ => {}
        }
    }
    let mut left: Vec<[(usize, bool); 2]> = pairs
        .iter()
        .map(|s| [(s.src, true), (s.dst, false)])
        .filter(|&[a, b]| low_send[a.0] && low_recv[b.0] && !named.contains(&a) && !named.contains(&b))
        .collect();
    left.sort_unstable();
    left.dedup();
    let mut blamed = vec![false; nnodes];
    for &(n, _) in &named {
        blamed[n] = true;
    }
    let done = |named: Vec<(usize, bool)>, ambiguous| {
        let side = |send| (0..nnodes).map(|n| named.contains(&(n, send))).collect();
        Named { send: side(true), recv: side(false), ambiguous }
    };
    if left.is_empty() {
        return done(named, false);
    }
    let mut sides: Vec<(usize, bool)> = left.iter().flatten().copied().collect();
    sides.sort_unstable();
    sides.dedup();
    // Past MAX_SEARCH sides (a fabric slow almost everywhere), every one is named.
    const MAX_SEARCH: usize = 16;
    if sides.len() > MAX_SEARCH {
        named.extend(sides);
        return done(named, true);
    }
    let has =
        |mask: u32, side: (usize, bool)| mask & (1 << sides.iter().position(|&x| x == side).unwrap()) != 0;
    let cost = |mask: u32| {
        let mut new: Vec<usize> =
            sides.iter().filter(|&&x| has(mask, x) && !blamed[x.0]).map(|x| x.0).collect();
        new.dedup();
        (new.len(), mask.count_ones())
    };
    let covers: Vec<u32> =
        (0u32..1 << sides.len()).filter(|&m| left.iter().all(|&[a, b]| has(m, a) || has(m, b))).collect();
    let least = covers.iter().map(|&m| cost(m)).min().expect("every side at once covers every pair");
    let fewest: Vec<u32> = covers.into_iter().filter(|&m| cost(m) == least).collect();
    let ambiguous = fewest.len() > 1;
    for m in fewest {
        named.extend(sides.iter().filter(|&&x| has(m, x)));
    }
    done(named, ambiguous)
}

/// What each node is measured against, with three nodes or more: the `median` of every
/// side's best, unless it is below `slow_below` of the fastest quarter's (most nodes slow).
/// Each side apart: one fast pair is the best of its sender's sending and of its receiver's
/// receiving, and must not make two of four nodes look fast (a clean 4-node testbed once had
/// one pair at 2.5 times the others, and every node named).
fn reference(
    median: Option<f64>,
    send: &[Option<f64>],
    recv: &[Option<f64>],
    slow_below: f64,
) -> Option<f64> {
    let fast_send = upper_quartile(send.iter().flatten().copied().collect());
    let fast_recv = upper_quartile(recv.iter().flatten().copied().collect());
    let fast = fast_send.into_iter().chain(fast_recv).reduce(f64::max);
    match (median, fast) {
        (Some(med), Some(fast)) if med < slow_below * fast => Some(fast),
        (med, _) => med,
    }
}

/// The value a quarter of `xs` are at or above (the second fastest of four).
fn upper_quartile(mut xs: Vec<f64>) -> Option<f64> {
    xs.sort_by(f64::total_cmp);
    let last = xs.len().checked_sub(1)?;
    Some(xs[last * 3 / 4])
}

fn median(mut xs: Vec<f64>) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let mid = xs.len() / 2;
    Some(if xs.len() % 2 == 1 { xs[mid] } else { (xs[mid - 1] + xs[mid]) / 2.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every round of an n-node ring (shifts 1, 2 and -1, as netcheck.py picks them), every
    /// pair at `fast` MB/s, except what `slow` says.
    fn ring(n: usize, fast: f64, slow: impl Fn(usize, usize) -> Option<f64>) -> Vec<PairSample> {
        let mut shifts: Vec<usize> = Vec::new();
        for s in [1, 2, n - 1].into_iter().map(|s| s % n) {
            if s != 0 && !shifts.contains(&s) && shifts.len() < n - 1 {
                shifts.push(s);
            }
        }
        let mut out = Vec::new();
        for shift in shifts {
            for dst in 0..n {
                let src = (dst + n - shift) % n;
                let mbps = slow(src, dst).unwrap_or(fast);
                out.push(PairSample { shift, src, dst, mbps, latency_us: 100.0 });
            }
        }
        out
    }

    fn slow_nodes(r: &NetReport) -> Vec<usize> {
        r.slow().map(|n| n.node_rank).collect()
    }

    #[test]
    fn a_node_slow_to_send_is_named_and_its_peers_are_not() {
        let r = score(8, &ring(8, 900.0, |src, _| (src == 5).then_some(1.2)), SLOW_BELOW);
        assert_eq!(slow_nodes(&r), [5]);
        assert_eq!(r.nodes[5].send_mbps, Some(1.2));
        assert_eq!(r.nodes[6].recv_mbps, Some(900.0), "node 6 also received from node 4");
        assert!(!r.ok());
    }

    #[test]
    fn a_node_slow_to_receive_is_named_and_its_peers_are_not() {
        let r = score(5, &ring(5, 900.0, |_, dst| (dst == 0).then_some(1.2)), SLOW_BELOW);
        assert_eq!(slow_nodes(&r), [0]);
    }

    #[test]
    fn a_balanced_cluster_with_noise_names_none() {
        // Within 0.6 to 1.6 of each other, as this testbed's healthy nodes measure.
        let noise = [1.0, 0.62, 1.55, 0.9, 1.3, 0.7, 1.1, 0.8];
        let r =
            score(8, &ring(8, 1.0, |src, dst| Some(500.0 * noise[src] * noise[(dst + 3) % 8])), SLOW_BELOW);
        assert!(r.ok(), "{:?}", r.nodes);
    }

    #[test]
    fn three_nodes_two_rounds_still_tell_the_slow_one() {
        let r = score(3, &ring(3, 900.0, |src, dst| (src == 1 || dst == 1).then_some(2.0)), SLOW_BELOW);
        assert_eq!(slow_nodes(&r), [1]);
        assert!(!r.ambiguous);
    }

    #[test]
    fn two_nodes_name_both_ends_of_a_slow_pair_and_say_they_cannot_tell() {
        let r = score(2, &ring(2, 900.0, |src, _| (src == 0).then_some(2.0)), SLOW_BELOW);
        assert_eq!(slow_nodes(&r), [0, 1]);
        assert!(r.ambiguous);
    }

    /// Issue 39's setup: two neighbours in the ring slow to send (tbf on their egress). The
    /// node both of them send to forward is not to blame.
    #[test]
    fn two_slow_neighbours_are_named_and_the_node_they_both_send_to_is_not() {
        let slow = |src: usize, _| (src == 2 || src == 3).then_some(12.3);
        let r = score(6, &ring(6, 1464.0, slow), SLOW_BELOW);
        assert_eq!(slow_nodes(&r), [2, 3], "{:?}", r.nodes);
        assert!(!r.nodes[4].slow);
        assert!(r.nodes[2].slow_send && !r.nodes[2].slow_recv);
        assert!(!r.ambiguous);
        // Node 5 receives from 4, 3 and 6: with all three slow, it is low only because of them.
        let slow = |src: usize, _| [3, 4, 6].contains(&src).then_some(12.3);
        let r = score(8, &ring(8, 1464.0, slow), SLOW_BELOW);
        assert_eq!(slow_nodes(&r), [3, 4, 6], "{:?}", r.nodes);
        assert_eq!(r.nodes[5].low_because_of, [3, 4, 6]);
    }

    /// The same on four nodes: half the fleet slow, so the median of the nodes' lower side is
    /// a slow one; nothing was named, and doctor passed.
    #[test]
    fn half_a_fleet_slow_is_named_not_taken_for_the_norm() {
        let r = score(4, &ring(4, 1464.0, |src, _| (src == 2 || src == 3).then_some(12.3)), SLOW_BELOW);
        assert_eq!(slow_nodes(&r), [2, 3], "{:?}", r.nodes);
        assert!(!r.ok());
        // Node 0 receives from both of them, and from node 1 in the round back.
        assert_eq!((r.nodes[0].recv_mbps, r.nodes[0].slow), (Some(1464.0), false));
    }

    /// A clean 4-node testbed as CI measured it: one pair (2 to 3) at 2.5 times the rest. It is
    /// node 2's best sending and node 3's best receiving; it is no fabric the rest fall short of.
    #[test]
    fn one_fast_pair_is_no_reference_the_others_fall_short_of() {
        let r = score(4, &ring(4, 900.0, |src, dst| (src == 2 && dst == 3).then_some(2552.0)), SLOW_BELOW);
        assert!(r.ok(), "{:?}", r.nodes);
        assert_eq!(r.reference_mbps, Some(900.0));
    }

    /// Seven of eight nodes slow to send: the median itself is slow, and the fastest nodes'
    /// bandwidth is the reference.
    #[test]
    fn most_of_a_fleet_slow_is_measured_against_what_the_fabric_can_do() {
        let r = score(8, &ring(8, 1464.0, |src, _| (src != 0).then_some(12.3)), SLOW_BELOW);
        // Slow almost everywhere, the fewest nodes that explain it are named, and never node 0.
        // A known weakness of that rule: node 4, as slow to send as the others, is left out,
        // its pairs all having a named end (nodes 3, 5, 6's receiving sides are named instead).
        assert!(!r.ok() && !r.nodes[0].slow, "{:?}", r.nodes);
        assert_eq!(slow_nodes(&r), [1, 2, 3, 5, 6, 7], "{:?}", r.nodes);
        assert_eq!(r.reference_mbps, Some(1464.0));
        assert!(r.median_mbps.unwrap() < 1464.0 * SLOW_BELOW);
    }

    /// Two neighbours slow both ways (a CPU, a NIC at a lower speed): most pairs of four
    /// nodes are slow at both ends, and the two nodes that explain all of them are named.
    #[test]
    fn two_neighbours_slow_both_ways_are_the_fewest_that_explain_every_pair() {
        let bad = |n: usize| n == 2 || n == 3;
        let r = score(4, &ring(4, 900.0, |src, dst| (bad(src) || bad(dst)).then_some(5.0)), SLOW_BELOW);
        assert_eq!(slow_nodes(&r), [2, 3], "{:?}", r.nodes);
        let r = score(8, &ring(8, 900.0, |src, dst| (bad(src) || bad(dst)).then_some(5.0)), SLOW_BELOW);
        assert_eq!(slow_nodes(&r), [2, 3], "{:?}", r.nodes);
    }

    /// The testbed's case (tbf on the host's end of two neighbours' links): nodes 2 and 3
    /// receive slowly, and node 2 sends slowly too (its peers' acknowledgements wait in its
    /// full queue). Node 1 sends to both of them forward: only the round back, to node 0,
    /// shows that its sending is fine. Without that round, {1, 2} explains the pairs as well.
    #[test]
    fn the_round_back_clears_the_node_before_two_slow_neighbours() {
        let slow = |src: usize, dst: usize| (src == 2 || dst == 2 || dst == 3).then_some(1.2);
        let r = score(4, &ring(4, 560.0, slow), SLOW_BELOW);
        assert_eq!(slow_nodes(&r), [2, 3], "{:?}", r.nodes);
        assert!(!r.ambiguous);
        assert_eq!(r.nodes[1].low_because_of, Vec::<usize>::new(), "its send to node 0 was fast");
        let forward: Vec<PairSample> = ring(4, 560.0, slow).into_iter().filter(|s| s.shift != 3).collect();
        let r = score(4, &forward, SLOW_BELOW);
        assert!(r.ambiguous && slow_nodes(&r) == [1, 2, 3], "{:?}", r.nodes);
    }

    /// Two slow nodes apart are named, as before.
    #[test]
    fn two_slow_nodes_apart_are_both_named() {
        let r = score(8, &ring(8, 900.0, |src, _| (src == 1 || src == 5).then_some(3.0)), SLOW_BELOW);
        assert_eq!(slow_nodes(&r), [1, 5]);
        assert!(!r.ambiguous);
    }

    #[test]
    fn a_node_that_measured_nothing_is_not_ok_and_not_blamed() {
        let samples: Vec<PairSample> =
            ring(4, 900.0, |_, _| None).into_iter().filter(|s| s.dst != 2).collect();
        let r = score(4, &samples, SLOW_BELOW);
        assert_eq!(r.nodes[2].mbps, None);
        assert!(slow_nodes(&r).is_empty());
        assert!(!r.ok());
    }

    /// The measurement gets the job's env and the interface the checks found, and none of a
    /// run's own variables; its command holds no value of the env.
    #[test]
    fn the_measurement_has_the_jobs_env_and_no_runs_marker() {
        let text = "[[nodes]]\nhost = \"n[1-3]\"\n[job]\nscript = \"t.py\"\n\
                    [rendezvous]\ninterface = \"auto\"\n[env]\nNCCL_IB_HCA = \"mlx5_0\"\n";
        let config = crate::config::parse(std::path::Path::new("c.toml"), text).unwrap();
        let plan =
            crate::plan::build(&config, &crate::plan::PlanInputs { cwd: "/w".into(), ..Default::default() });
        let devs = [Some("eth1".to_string()), None, Some("ib0".to_string())];
        let envs = envs(&plan, 29555, &devs);
        let get = |n: usize, k: &str| envs[n].iter().find(|(name, _)| name == k).map(|(_, v)| v.as_str());
        assert_eq!(get(0, "NCCL_IB_HCA"), Some("mlx5_0"));
        assert_eq!(get(0, "NCCL_SOCKET_IFNAME"), Some("eth1"));
        assert_eq!(get(1, "NCCL_SOCKET_IFNAME"), None, "no route found: left to torch");
        assert_eq!(get(2, "GLOO_SOCKET_IFNAME"), Some("ib0"));
        for env in &envs {
            assert!(
                env.iter().all(|(k, _)| k != crate::marker::RUN_VAR && k != crate::plan::NCCL_DUMP_VAR),
                "{env:?}"
            );
        }
        let commands = commands(&plan, 29555);
        assert!(commands.iter().all(|c| !c.contains("mlx5_0")));
        assert!(commands[2].ends_with("' 2 3 n1 29555 nccl 8 20"), "rank 2 of 3, GPUs: {}", commands[2]);
    }

    #[test]
    fn only_a_nodes_own_well_formed_lines_count() {
        let out = "login noise\nherd-net 1 3 4 812.5 95.0\nherd-net 1 3 5 1 1\nherd-net 2 x 4 1 1\n\
                   herd-net 2 2 4 inf 1\nherd-net 2 2 4 700.25 120.5\r\n";
        let got = parse(out, 4);
        assert_eq!(
            got,
            [
                PairSample { shift: 1, src: 3, dst: 4, mbps: 812.5, latency_us: 95.0 },
                PairSample { shift: 2, src: 2, dst: 4, mbps: 700.25, latency_us: 120.5 },
            ]
        );
    }
}
