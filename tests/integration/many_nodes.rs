//! 64 nodes: one namespace whose sshd answers on 64 addresses, so herd opens 64 SSH
//! connections and starts 64 agents, on a 2-core machine. run (with its preflight), doctor
//! and exec --gather each succeed three times in a row, and leave nothing behind. Then 252
//! nodes under `ulimit -n 1024`, once each.

use std::time::Duration;

use crate::support::herd;
use crate::support::testbed::Testbed;

const NODES: usize = 64;
const LIMIT: Duration = Duration::from_secs(240);

#[test]
fn sixty_four_nodes_run_doctor_and_exec_three_times_in_a_row() {
    let tb = Testbed::many(NODES);
    let hosts: Vec<String> =
        tb.nodes().iter().map(|n| format!("[[nodes]]\nhost = \"{}\"\n", n.addr)).collect();
    let config = format!(
        "{ssh}\n{hosts}\n[job]\nlauncher = \"command\"\nscript = \"sh\"\n\
         args = [\"-c\", 'echo \"node $NODE_RANK of $NNODES\"']\ndevice = \"cpu\"\n\
         [logs]\ndir = \"{logs}\"\n",
        ssh = tb.ssh_config_toml(),
        hosts = hosts.concat(),
        logs = tb.dir().join("logs").display(),
    );
    std::fs::write(tb.dir().join("cluster.toml"), config).unwrap();
    let before = tb.processes(0);
    for round in 0..3 {
        let out = herd::run(tb.dir(), &["run"], LIMIT);
        out.assert_code(0);
        for rank in 0..NODES {
            assert!(
                out.stdout.contains(&format!("node {rank} of {NODES}\n")),
                "round {round}: node {rank}\n{out}"
            );
        }
        eprintln!("round {round}: run took {:?}", out.took);

        let out = herd::run(tb.dir(), &["doctor"], LIMIT);
        out.assert_code(0);
        assert!(out.stdout.contains(&format!("{NODES} nodes:")), "round {round}\n{out}");
        eprintln!("round {round}: doctor took {:?}", out.took);

        let out = herd::run(tb.dir(), &["exec", "--gather", "--", "echo same"], LIMIT);
        out.assert_code(0);
        assert!(out.stdout.contains("same"), "round {round}\n{out}");
        eprintln!("round {round}: exec took {:?}", out.took);
    }
    let left = || tb.processes(0).into_iter().filter(|p| !before.contains(p)).collect::<Vec<_>>();
    herd::wait_until(Duration::from_secs(5), || left().is_empty());
    assert_eq!(left(), Vec::new(), "left on the host");
}

/// The most nodes `Testbed::many` gives: a cluster of this size, as a platform team would try
/// it first.
const MANY: usize = 252;
const MANY_LIMIT: Duration = Duration::from_secs(900);

/// The most herd held while it ran: its descriptors, its peak RSS (VmHWM), and the SSH
/// masters it kept (their number and their total RSS, at the most).
#[derive(Debug, Default, Clone, Copy)]
struct Peak {
    fds: usize,
    hwm_kib: u64,
    masters: usize,
    masters_kib: u64,
}

/// Samples `pid` every 10 ms until it exits (the masters every 500 ms): the most seen.
fn peaks(pid: u32) -> std::thread::JoinHandle<Peak> {
    std::thread::spawn(move || {
        let mut peak = Peak::default();
        for tick in 0u64.. {
            let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { break };
            peak.fds = peak.fds.max(dir.count());
            peak.hwm_kib = peak.hwm_kib.max(herd::status_kib(pid, "VmHWM:").unwrap_or(0));
            if tick % 50 == 0 {
                let (n, kib) = herd::ssh_masters();
                peak.masters = peak.masters.max(n);
                peak.masters_kib = peak.masters_kib.max(kib);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        peak
    })
}

/// `herd ARGS` under the usual soft limit of a login session (1024 open files; the hard
/// limit is left as it is), with the most herd held (see `Peak`).
fn herd_at_1024(dir: &std::path::Path, args: &[&str]) -> (herd::Finished, Peak) {
    let running = herd::start_under(&["prlimit", "--nofile=1024:", "--"], dir, args, &[]);
    let peak = peaks(running.pid());
    let out = running.wait(MANY_LIMIT);
    (out, peak.join().unwrap())
}

/// A testbed of `n` nodes whose job is `true`, with its config written.
fn testbed_of(n: usize) -> Testbed {
    let tb = Testbed::many(n);
    let hosts: Vec<String> =
        tb.nodes().iter().map(|n| format!("[[nodes]]\nhost = \"{}\"\n", n.addr)).collect();
    let config = format!(
        "{ssh}\n{hosts}\n[job]\nlauncher = \"command\"\nscript = \"true\"\ndevice = \"cpu\"\n\
         [logs]\ndir = \"{logs}\"\n",
        ssh = tb.ssh_config_toml(),
        hosts = hosts.concat(),
        logs = tb.dir().join("logs").display(),
    );
    std::fs::write(tb.dir().join("cluster.toml"), config).unwrap();
    tb
}

/// What herd and its SSH masters cost per node, at 16 and 64 nodes: each command's peaks, as a
/// table for `limits::PER_NODE_FDS` (and herd's RSS). A measurement, run by hand:
/// `--run-ignored ignored-only -E 'test(per_node_costs)' --no-capture`.
#[test]
#[ignore = "a measurement, not a check"]
fn per_node_costs_at_16_and_64_nodes() {
    eprintln!("| nodes | command | fds | herd VmHWM KiB | ssh masters | masters' RSS KiB | took |");
    eprintln!("|---|---|---|---|---|---|---|");
    for n in [16, 64] {
        let tb = testbed_of(n);
        for args in
            [&["run"][..], &["run", "--no-preflight"], &["exec", "--", "true"], &["doctor"], &["kill"]]
        {
            let (out, p) = herd_at_1024(tb.dir(), args);
            out.assert_code(0);
            eprintln!(
                "| {n} | {} | {} | {} | {} | {} | {:.1} s |",
                args.join(" "),
                p.fds,
                p.hwm_kib,
                p.masters,
                p.masters_kib,
                out.took.as_secs_f64()
            );
        }
    }
}

/// 252 nodes with herd's default settings, under `ulimit -n 1024`: run (a `command` job of
/// `true`, with its preflight), exec, doctor and kill succeed, their output names the nodes
/// as one hostlist rather than line by line, herd stays within the descriptors it counts per
/// node, and nothing is left on any node. About 2 minutes on 2 cores since each node has a
/// /proc of its own (11 before: every agent looked through the whole fleet's processes, at a
/// load of up to 542).
#[test]
fn two_hundred_fifty_two_nodes_under_ulimit_1024() {
    let tb = testbed_of(MANY);
    let addrs: Vec<&str> = tb.nodes().iter().map(|n| n.addr.as_str()).collect();
    let all = ::herd::config::hostlist::compress(&addrs);
    assert!(!all.contains(','), "one range: {all}");
    let before = tb.processes(0);
    let within = |what: &str, peak: Peak| {
        eprintln!("{what}: herd peaked at {peak:?}");
        assert!(peak.fds as u64 <= ::herd::limits::needed(MANY), "{what}: {peak:?}");
    };

    let (out, peak) = herd_at_1024(tb.dir(), &["run"]);
    eprintln!("run took {:?}", out.took);
    for line in out.stderr.lines().filter(|l| l.contains("heartbeat") || l.contains("not running for")) {
        eprintln!("run said: {line}");
    }
    out.assert_code(0);
    assert!(out.stderr.contains("run succeeded"), "{out}");
    within("run", peak);

    let (out, peak) = herd_at_1024(tb.dir(), &["exec", "--gather", "--", "echo same"]);
    eprintln!("exec took {:?}", out.took);
    out.assert_code(0);
    assert!(out.stdout.contains(&format!("\n{all}\n")), "one block for every node\n{out}");
    assert_eq!(out.stdout.matches("same").count(), 1, "{out}");
    within("exec", peak);

    let (out, peak) = herd_at_1024(tb.dir(), &["doctor"]);
    eprintln!("doctor took {:?}", out.took);
    out.assert_code(0);
    assert!(out.stdout.contains(&format!("{MANY} nodes:")), "{out}");
    assert!(out.stdout.lines().count() < 40, "a line per node\n{out}");
    within("doctor", peak);

    let (out, peak) = herd_at_1024(tb.dir(), &["kill"]);
    eprintln!("kill took {:?}", out.took);
    out.assert_code(0);
    within("kill", peak);

    let left = || tb.processes(0).into_iter().filter(|p| !before.contains(p)).collect::<Vec<_>>();
    herd::wait_until(Duration::from_secs(10), || left().is_empty());
    assert_eq!(left(), Vec::new(), "left on the host");
}
