use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use crate::support::testbed::Testbed;

/// Creations take it shared; the post-drop checks take it exclusively, so that a testbed created
/// concurrently by another test in this binary cannot reuse the freed slot K (and its names)
/// while we check that those names are gone.
static SLOTS: RwLock<()> = RwLock::new(());

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: exit {}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Whether node `from` can open a TCP connection to `addr`:22 (checked through ssh).
fn can_reach(tb: &Testbed, from: usize, addr: &str) -> bool {
    let out = tb.ssh(from, &format!("timeout 2 bash -c 'cat < /dev/null > /dev/tcp/{addr}/22'"));
    let code = out.status.code();
    assert_ne!(code, Some(255), "ssh to node index {from} itself failed: {}", text(&out.stderr));
    out.status.success()
}

fn netns_list() -> String {
    let out = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    text(&out.stdout)
}

#[test]
fn three_node_testbed() {
    let guard = SLOTS.read().unwrap();
    let t0 = Instant::now();
    let tb = Testbed::new(3);
    eprintln!("Testbed::new(3) took {:?} (K={})", t0.elapsed(), tb.k());
    let k = tb.k();
    assert_eq!(tb.nodes().len(), 3);

    for (i, node) in tb.nodes().iter().enumerate() {
        assert_eq!(node.hostname, format!("node{}", i + 1));
        assert_eq!(node.addr, format!("10.77.{k}.{}", i + 2));
        assert_eq!(node.netns, format!("herdt-{k}-{}", i + 1));
        assert_eq!(node.veth_host, format!("hv{k}x{}", i + 1));

        let host = ok(tb.ssh(i, "hostname"), "ssh hostname");
        assert_eq!(host.trim(), node.hostname);

        let hosts = ok(tb.ssh(i, &format!("getent hosts {}", node.hostname)), "getent hosts");
        assert_eq!(hosts.split_whitespace().next(), Some("127.0.0.1"), "getent: {hosts}");

        let addr = ok(tb.ns_exec(i, "ip -4 -o addr show dev eth0"), "ns_exec ip addr");
        assert!(addr.contains(&format!("{}/24", node.addr)), "{addr}");
        let routes = ok(tb.ns_exec(i, "ip route"), "ns_exec ip route");
        assert!(!routes.contains("default"), "node must have no default route: {routes}");
    }

    let toml = tb.ssh_config_toml();
    assert!(toml.starts_with("[ssh]\n"), "{toml}");
    assert!(toml.contains(&format!("identity_file = \"{}\"", tb.identity_file().display())), "{toml}");
    assert!(toml.contains(&format!("known_hosts_file = \"{}\"", tb.known_hosts_file().display())), "{toml}");
    assert!(toml.contains("known_hosts = \"strict\""), "{toml}");
    let kh = std::fs::read_to_string(tb.known_hosts_file()).unwrap();
    for node in tb.nodes() {
        assert!(kh.lines().any(|l| l.starts_with(&format!("{} ssh-ed25519 ", node.addr))), "{kh}");
    }

    // node1 -> node3 over the bridge.
    let (addr2, addr3) = (tb.nodes()[1].addr.clone(), tb.nodes()[2].addr.clone());
    assert!(can_reach(&tb, 0, &addr3), "node1 cannot reach node3");

    // Cut node2 off, then restore it.
    tb.link_down(1);
    assert!(!can_reach(&tb, 0, &addr2), "node1 still reaches node2 after link_down");
    let sock: SocketAddr = format!("{addr2}:22").parse().unwrap();
    assert!(TcpStream::connect_timeout(&sock, Duration::from_secs(1)).is_err());
    assert!(can_reach(&tb, 0, &addr3), "link_down(node2) must not affect node3");
    tb.link_up(1);
    let t = Instant::now();
    while !can_reach(&tb, 0, &addr2) {
        assert!(t.elapsed() < Duration::from_secs(10), "node2 unreachable 10s after link_up");
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("node2 reachable again {:?} after link_up", t.elapsed());

    // A detached process started through ssh on node2.
    ok(tb.ssh(1, "setsid nohup env HERD_TEST_MARK=xyz sleep 30 </dev/null >/dev/null 2>&1 &"), "start sleep");
    let t = Instant::now();
    let pids = loop {
        let pids = tb.processes_with_env(1, "HERD_TEST_MARK", "xyz");
        if !pids.is_empty() {
            break pids;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "sleep with HERD_TEST_MARK=xyz not found on node2");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(pids.len(), 1, "{pids:?}");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", pids[0])).unwrap();
    assert!(cmdline.starts_with(b"sleep\x0030"), "{:?}", text(&cmdline));
    assert!(tb.processes_with_env(0, "HERD_TEST_MARK", "xyz").is_empty());
    assert!(tb.processes_with_env(2, "HERD_TEST_MARK", "xyz").is_empty());
    assert!(tb.processes_with_env(1, "HERD_TEST_MARK", "xy").is_empty(), "must match exactly");
    assert!(tb.processes_with_env(1, "HERD_TEST_MAR", "xyz").is_empty(), "must match exactly");

    // Drop removes everything.
    let names: Vec<String> = tb.nodes().iter().map(|n| n.netns.clone()).collect();
    let veths: Vec<String> = tb.nodes().iter().map(|n| n.veth_host.clone()).collect();
    let dir = tb.dir().to_path_buf();
    drop(guard);
    let _exclusive = SLOTS.write().unwrap();
    let t = Instant::now();
    drop(tb);
    eprintln!("drop took {:?}", t.elapsed());
    let list = netns_list();
    for ns in &names {
        assert!(!list.lines().any(|l| l.split_whitespace().next() == Some(ns)), "{ns} still listed: {list}");
        assert!(!Path::new("/etc/netns").join(ns).exists(), "/etc/netns/{ns} still exists");
    }
    for veth in &veths {
        assert!(!Path::new("/sys/class/net").join(veth).exists(), "{veth} still exists");
    }
    assert!(!Path::new(&format!("/sys/class/net/herdbr{k}")).exists(), "bridge still exists");
    assert!(!Path::new(&format!("/run/herd-testbed/{k}.pid")).exists(), "slot marker still exists");
    assert!(!dir.exists(), "testbed dir still exists");
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pids[0])).unwrap_or_default();
    let state = stat.rsplit(')').next().unwrap_or("").split_whitespace().next();
    assert!(matches!(state, None | Some("Z") | Some("X")), "sleep survived the drop: {stat}");
}

#[test]
fn two_testbeds_at_once() {
    let guard = SLOTS.read().unwrap();
    let t0 = Instant::now();
    let handles: Vec<_> = (0..2).map(|_| std::thread::spawn(|| Testbed::new(2))).collect();
    let tbs: Vec<Testbed> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    eprintln!("two concurrent Testbed::new(2) took {:?}", t0.elapsed());
    let (a, b) = (&tbs[0], &tbs[1]);
    assert_ne!(a.k(), b.k());
    assert_ne!(a.nodes()[0].addr, b.nodes()[0].addr);
    for tb in [a, b] {
        for i in 0..2 {
            let host = ok(tb.ssh(i, "hostname"), "ssh hostname");
            assert_eq!(host.trim(), format!("node{}", i + 1));
        }
        assert!(can_reach(tb, 0, &tb.nodes()[1].addr));
    }
    // Separate subnets, no forwarding, no default route: testbeds are isolated.
    assert!(!can_reach(a, 0, &b.nodes()[0].addr));
    assert!(!can_reach(b, 1, &a.nodes()[1].addr));
    // Each testbed has its own keys and known_hosts.
    assert_ne!(a.identity_file(), b.identity_file());
    drop(guard);
    drop(tbs);
}

/// A development aid, not a check: keeps a testbed of `HERD_TESTBED_NODES` (default 3) nodes
/// up for 10 minutes and writes its `[ssh]` table and hosts to /tmp/herd-testbed.toml, for
/// trying herd by hand.
/// `cargo test --test integration testbed_smoke::hold_a_testbed -- --ignored --nocapture`
#[test]
#[ignore]
fn hold_a_testbed() {
    let n = std::env::var("HERD_TESTBED_NODES").ok().and_then(|n| n.parse().ok()).unwrap_or(3);
    let tb = Testbed::new(n);
    let hosts: Vec<&str> = tb.nodes().iter().map(|n| n.addr.as_str()).collect();
    let text = format!("{}\n[[nodes]]\nhost = \"{}\"\n", tb.ssh_config_toml(), hosts.join(","));
    std::fs::write("/tmp/herd-testbed.toml", &text).unwrap();
    eprintln!("{text}");
    std::thread::sleep(std::time::Duration::from_secs(600));
}
