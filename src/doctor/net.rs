//! `herd doctor --deep`: the network between the nodes, and which node is slow. Pure: what
//! the nodes measured (`remote/netcheck.py`) in, one verdict per node out.
//!
//! Each round is a ring with a shift s: every node sends to node + s and receives from
//! node - s at once, and each directed pair is timed by its receiver. Two rounds (shifts 1
//! and 2) give every node two peers to send to and two to receive from, each pair its own. A
//! slow node (its NIC, its cable, its CPU) is slow with both peers, in the direction it is
//! slow in; a healthy neighbour is slow with one of them only. So a node's bandwidth is the
//! best it reached sending and the best it reached receiving, whichever of the two is lower:
//! a healthy node's best is a healthy peer's, and only the slow node keeps a low one.

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
            let mut line = remote::ShellLine::new();
            line.arg(&plan.python).args(["-c", remote::NETCHECK_PY]).args(args);
            let setup = plan.setup.as_deref().filter(|_| plan.container.is_none());
            remote::job_snippet(&plan.workdir, setup, &line.line())
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
    /// Its bandwidth over the median of all nodes' (with two nodes: over their faster
    /// direction).
    pub ratio: Option<f64>,
    pub slow: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetReport {
    pub nodes: Vec<NodeNet>,
    pub median_mbps: Option<f64>,
    pub slow_below: f64,
    /// With two nodes, a slow pair cannot say which end is slow: both are named, and this says
    /// so.
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

/// Every node's verdict from every pair measured, against `slow_below` times the median.
pub fn score(nnodes: usize, samples: &[PairSample], slow_below: f64) -> NetReport {
    let mut nodes: Vec<NodeNet> = (0..nnodes)
        .map(|n| {
            let pairs = || samples.iter().filter(|s| s.src != s.dst);
            let send_mbps = pairs().filter(|s| s.src == n).map(|s| s.mbps).reduce(f64::max);
            let recv_mbps = pairs().filter(|s| s.dst == n).map(|s| s.mbps).reduce(f64::max);
            let mbps = send_mbps.zip(recv_mbps).map(|(send, recv)| send.min(recv));
            let latency_us =
                pairs().filter(|s| s.src == n || s.dst == n).map(|s| s.latency_us).reduce(f64::min);
            NodeNet { node_rank: n, send_mbps, recv_mbps, mbps, latency_us, ratio: None, slow: false }
        })
        .collect();
    let median_mbps = median(nodes.iter().filter_map(|n| n.mbps).collect());
    // Two nodes share their one pair's slow direction, and so their median: the other
    // direction is all there is to compare with.
    let reference = match nnodes {
        2 => samples.iter().map(|s| s.mbps).reduce(f64::max),
        _ => median_mbps,
    };
    for node in &mut nodes {
        if let (Some(m), Some(med)) = (node.mbps, reference) {
            let ratio = m / med;
            node.ratio = Some(ratio);
            node.slow = ratio < slow_below;
        }
    }
    NetReport { nodes, median_mbps, slow_below, ambiguous: nnodes == 2 }
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

    /// Both rounds of an n-node ring, every pair at `fast` MB/s, except what `slow` says.
    fn ring(n: usize, fast: f64, slow: impl Fn(usize, usize) -> Option<f64>) -> Vec<PairSample> {
        let mut out = Vec::new();
        for shift in [1, 2].into_iter().filter(|s| s % n != 0) {
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
