//! A real multi-host test cluster made of Linux network namespaces, for integration tests.
//!
//! ```ignore
//! mod support;
//! use support::testbed::Testbed;
//!
//! let tb = Testbed::new(3);
//! let node = &tb.nodes()[0];            // node index 0 is "node1" at 10.77.K.2
//! let out = tb.ssh(0, "hostname");      // -> "node1\n"
//! ```
//!
//! Layout of one testbed (K in 1..=250 is allocated across concurrent test processes):
//! * bridge `herdbr<K>` in the root namespace, 10.77.K.1/24. No forwarding, NAT or default routes:
//!   nodes can only talk on 10.77.K.0/24 (and the root namespace can reach them through the bridge).
//! * node i (1-based in *names*): netns `herdt-K-i`, veth `hv<K>x<i>` (root side, on the bridge) and
//!   `eth0` (10.77.K.(i+1)/24) inside the namespace, `lo` up.
//! * `/etc/netns/herdt-K-i/hosts` maps `node<i>` to 127.0.0.1 (as on many real clusters).
//! * one sshd per node, in the node's netns, in its own UTS namespace with hostname `node<i>`, and
//!   in its own PID namespace with its own /proc. Its sessions have `DOCKER_HOST` set to the
//!   node's own docker socket (see [`docker_socket`]).
//!
//! **All `node: usize` arguments are 0-based indices into [`Testbed::nodes`]**: index 0 is `node1`.
//!
//! Requires root (CAP_NET_ADMIN / CAP_SYS_ADMIN), iproute2, util-linux and openssh-server.

use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Marker files `<K>.pid` ("<pid> <starttime>\n<testbed dir>\n") that own slot K.
const MARKER_DIR: &str = "/run/herd-testbed";
const MAX_K: u32 = 250;
const MAX_NODES: usize = 200;
/// The most addresses `Testbed::many` gives its one host.
const MAX_MANY: usize = 252;
/// How long `new` waits for every sshd to accept a real ssh login.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

static UNIQUE: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Clone)]
pub struct TestNode {
    /// Network namespace name, e.g. `herdt-12-1`.
    pub netns: String,
    /// Its address on the bridge, e.g. `10.77.12.2`.
    pub addr: String,
    /// UTS hostname seen by processes started through its sshd, e.g. `node1`.
    pub hostname: String,
    /// Root-namespace end of its veth pair (see [`Testbed::link_down`]).
    pub veth_host: String,
}

/// A node's CPU limit (see [`Testbed::throttle_cpu`]); dropping it moves the node's processes
/// back and removes the cgroup.
pub struct CpuThrottle {
    dir: PathBuf,
    parent: PathBuf,
}

impl CpuThrottle {
    /// Moves every process back to the parent and removes the cgroup, if it exists.
    fn empty(&self) {
        if let Ok(pids) = fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in pids.lines() {
                let _ = fs::write(self.parent.join("cgroup.procs"), pid);
            }
        }
        let _ = fs::remove_dir(&self.dir);
    }
}

impl Drop for CpuThrottle {
    fn drop(&mut self) {
        self.empty();
    }
}

pub struct Testbed {
    k: u32,
    bridge: String,
    nodes: Vec<TestNode>,
    sshds: Vec<Child>,
    sshd_cmds: Vec<String>,
    /// `many`'s PID namespaces, one per address (none for `new`).
    holders: Vec<Child>,
    identity: PathBuf,
    known_hosts: PathBuf,
    marker: PathBuf,
    marker_content: String,
    // Declared last so it is removed after `Drop::drop` has torn everything down.
    dir: tempfile::TempDir,
}

impl Testbed {
    /// Builds an `n`-node cluster and returns once every node accepts a real ssh login.
    /// Panics with a descriptive message on any failure (partially built state is cleaned up).
    pub fn new(n: usize) -> Testbed {
        Testbed::with_sshd_config(n, "")
    }

    /// `new`, with `extra` (whole lines) at the end of every node's sshd config.
    pub fn with_sshd_config(n: usize, extra: &str) -> Testbed {
        assert!((1..=MAX_NODES).contains(&n), "Testbed::new({n}): node count must be in 1..={MAX_NODES}");
        preflight();
        cleanup_stale();

        let dir = tempfile::Builder::new()
            .prefix("herd-testbed-")
            .tempdir()
            .unwrap_or_else(|e| panic!("testbed: cannot create temp dir: {e}"));
        let (k, marker, marker_content) = allocate_slot(dir.path());
        let mut tb = Testbed {
            k,
            bridge: format!("herdbr{k}"),
            nodes: Vec::new(),
            sshds: Vec::new(),
            sshd_cmds: Vec::new(),
            holders: Vec::new(),
            identity: dir.path().join("id_ed25519"),
            known_hosts: dir.path().join("known_hosts"),
            marker,
            marker_content,
            dir,
        };
        // From here on, a panic drops `tb`, whose Drop tears down whatever was created.
        tb.setup(n, extra);
        tb
    }

    /// `n` nodes that are one host: one namespace (one sshd) answering on `n` addresses of its
    /// interface (10.77.K.2 to 10.77.K.(n+1)), as a cluster of `n` nodes looks to herd. For
    /// the scale tests: 64 real namespaces with an sshd each would not fit a 2-core machine's
    /// budget. At most 252: the bridge holds .1 and Slurm's controller .254. Each address has
    /// a PID namespace and a /proc of its own, as each node of a cluster has: what an agent
    /// looks through to stop its job, or a sweep for leftovers, is that node's processes, not
    /// the fleet's (which would make every stop cost in proportion to the fleet).
    pub fn many(n: usize) -> Testbed {
        assert!((1..=MAX_MANY).contains(&n), "Testbed::many({n}): at most {MAX_MANY} addresses");
        let mut tb = Testbed::new(1);
        let first = tb.nodes[0].clone();
        let key = fs::read_to_string(&tb.known_hosts)
            .expect("known_hosts")
            .lines()
            .next()
            .expect("a line")
            .to_string();
        let key = key.split_once(' ').expect("addr key").1.to_string();
        let mut known = fs::read_to_string(&tb.known_hosts).expect("known_hosts");
        let mut batch = String::new();
        for j in 1..n {
            let addr = format!("10.77.{}.{}", tb.k, 2 + j);
            batch.push_str(&format!("addr add {addr}/24 dev eth0\n"));
            known.push_str(&format!("{addr} {key}\n"));
            tb.nodes.push(TestNode { addr, ..first.clone() });
        }
        // One `ip` for every address: 250 of them one by one take seconds on a loaded machine.
        let batch_file = tb.dir.path().join("addresses.ip");
        write_file(&batch_file, &batch);
        run(Command::new("ip").args(["-n", &first.netns, "-batch"]).arg(&batch_file));
        write_file(&tb.known_hosts, &known);
        tb.hosts_apart();
        tb
    }

    /// `many`'s PID namespaces: for each address, a holder (catatonit, which reaps what is
    /// orphaned to it) in a PID namespace of its own inside the host's, with its own /proc;
    /// sshd's `ForceCommand` runs each login in the holder of the address it came to, in the
    /// login shell and the home it would have had. ForceCommand itself runs in the login
    /// shell: the inner one is told it is not the one sshd started (SHLVL), so that bash reads
    /// ~/.bashrc once a login, as without it.
    fn hosts_apart(&mut self) {
        const CATATONIT: &str = "/usr/libexec/podman/catatonit";
        assert!(Path::new(CATATONIT).exists(), "Testbed::many needs {CATATONIT} (apt-get install catatonit)");
        let unshare = self.sshds[0].id();
        let sshd = fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"))
            .ok()
            .and_then(|c| c.split_whitespace().next()?.parse::<u32>().ok())
            .expect("testbed: the host's sshd, under its unshare");
        for j in 0..self.nodes.len() {
            let mut c = Command::new("nsenter");
            c.args(["-t", &sshd.to_string(), "-n", "-u", "-p", "-m", "--"])
                .args(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", CATATONIT, "-P"])
                .env("HERD_TB_HOST", format!("{}:{j}", self.k))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0);
            self.holders.push(c.spawn().expect("testbed: spawn a host's PID namespace"));
        }
        // Each holder's pid as the host's sshd sees it (NSpid's last but one: its own is the
        // last, 1; this process's the first), found by its slot and address: another testbed's
        // may be running.
        let ours = format!("HERD_TB_HOST={}:", self.k);
        let deadline = Instant::now() + READY_TIMEOUT * 3;
        let mut pids = vec![None; self.nodes.len()];
        while pids.iter().any(Option::is_none) {
            assert!(Instant::now() < deadline, "testbed: the hosts' PID namespaces did not start");
            for pid in pids_whose_cmdline(|cmd| cmd.starts_with(CATATONIT.as_bytes())) {
                let env = fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
                let Some(j) = env.split(|&b| b == 0).find_map(|e| {
                    std::str::from_utf8(e.strip_prefix(ours.as_bytes())?).ok()?.parse::<usize>().ok()
                }) else {
                    continue;
                };
                let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let ns: Vec<&str> = status
                    .lines()
                    .find_map(|l| l.strip_prefix("NSpid:"))
                    .map(|l| l.split_whitespace().collect())
                    .unwrap_or_default();
                if let (Some(slot), [.., host, _]) = (pids.get_mut(j), ns.as_slice()) {
                    *slot = host.parse::<u32>().ok();
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut config = String::new();
        for (node, pid) in self.nodes.iter().zip(&pids) {
            config.push_str(&format!(
                "Match LocalAddress {}\n  ForceCommand exec nsenter -t {} -p -m --wd=\"$HOME\" -- env SHLVL=1 \"$SHELL\" -c \"$SSH_ORIGINAL_COMMAND\"\n",
                node.addr,
                pid.expect("a pid")
            ));
        }
        let cfg = self.dir.path().join("sshd1.conf");
        let mut text = fs::read_to_string(&cfg).expect("sshd1.conf");
        text.push_str(&config);
        write_file(&cfg, &text);
        // sshd reads its configuration again as it re-executes itself.
        run(Command::new("kill").args(["-HUP", &sshd.to_string()]));
        // Until a login to the first and the last address finds its own namespace.
        let host_ns = fs::read_link(format!("/proc/{sshd}/ns/pid")).expect("the host's PID namespace");
        for i in [0, self.nodes.len() - 1] {
            loop {
                let out = self.ssh(i, "readlink /proc/$$/ns/pid");
                let ns = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if out.status.success() && !ns.is_empty() && Path::new(&ns) != host_ns {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "testbed: a login to {} is not in a PID namespace of its own: {:?} {}",
                    self.nodes[i].addr,
                    ns,
                    String::from_utf8_lossy(&out.stderr)
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    pub fn nodes(&self) -> &[TestNode] {
        &self.nodes
    }

    /// The slot number K (the third octet of every address, the suffix of the bridge name).
    pub fn k(&self) -> u32 {
        self.k
    }

    /// Private key accepted by every node's sshd for `root`.
    pub fn identity_file(&self) -> &Path {
        &self.identity
    }

    /// known_hosts listing every node's addr with its host key (StrictHostKeyChecking=yes works).
    pub fn known_hosts_file(&self) -> &Path {
        &self.known_hosts
    }

    /// A temp dir owned by the testbed (keys, sshd configs and logs live here); removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `sh -c cmd` inside node's network namespace (and its /etc/netns bind mounts) via
    /// `ip netns exec`, NOT via ssh. Not in the node's UTS namespace. Does not panic on a non-zero
    /// exit status. Stdin is /dev/null; stdout/stderr are captured (so a background process that
    /// keeps them open makes this block: redirect its output).
    pub fn ns_exec(&self, node: usize, cmd: &str) -> Output {
        let ns = &self.node(node).netns;
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, "sh", "-c", cmd]);
        spawn_output(&mut c)
    }

    /// Runs `cmd` on the node through its sshd as root (ssh -F /dev/null, strict host keys,
    /// BatchMode). Does not panic on a non-zero exit status.
    pub fn ssh(&self, node: usize, cmd: &str) -> Output {
        let mut c = self.ssh_command(node);
        c.arg(cmd);
        spawn_output(&mut c)
    }

    /// An `ssh ... root@<addr>` command (no remote command yet) using this testbed's key and
    /// known_hosts; append the remote command with `.arg(..)`.
    pub fn ssh_command(&self, node: usize) -> Command {
        self.ssh_command_kex(node, Some("curve25519-sha256"))
    }

    /// `ssh_command` with the client's default key exchange (`kex` None), as herd's master
    /// connections and pdsh use it: the baseline for what herd's own start costs. The
    /// default's post-quantum hybrid takes twice the CPU of curve25519 on this machine.
    pub fn ssh_command_kex(&self, node: usize, kex: Option<&str>) -> Command {
        let addr = &self.node(node).addr;
        let mut c = Command::new("ssh");
        c.arg("-F").arg("/dev/null");
        c.arg("-i").arg(&self.identity);
        c.arg("-o").arg(opt("UserKnownHostsFile=", &self.known_hosts));
        c.args([
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "ConnectTimeout=5",
            "-o",
            "LogLevel=ERROR",
        ]);
        // Much cheaper than the default sntrup761 hybrid on slow test machines.
        if let Some(kex) = kex {
            c.arg("-o").arg(format!("KexAlgorithms={kex}"));
        }
        c.arg(format!("root@{addr}"));
        c.stdin(Stdio::null());
        c
    }

    /// Makes every login shell on the node take `secs` to start, as a shared home whose
    /// ~/.bashrc runs `conda init` or `pyenv init` does: bash sources it for every command
    /// sshd runs. Each node has a home of its own.
    pub fn slow_login(&self, node: usize, secs: f64) {
        let home = self.home(node);
        write_file(
            &home.join(".bashrc"),
            &format!(
                "# a slow shell init, as conda's or pyenv's
sleep {secs}
"
            ),
        );
    }

    /// The node's login shell init (`~/.bashrc`), which `slow_login` writes: read it first to
    /// put it back.
    pub fn login_rc(&self, node: usize) -> PathBuf {
        self.home(node).join(".bashrc")
    }

    /// Makes `shell` (e.g. `/usr/bin/tcsh`) root's login shell on the node's host: sshd runs
    /// every command sent to it with `shell -c`.
    pub fn login_shell(&self, node: usize, shell: &str) {
        let passwd = PathBuf::from(format!("/etc/netns/{}/passwd", self.node(node).netns));
        let text =
            fs::read_to_string(&passwd).unwrap_or_else(|e| panic!("testbed: {}: {e}", passwd.display()));
        let text: String = text
            .lines()
            .map(|line| match line.rsplit_once(':') {
                Some((rest, _)) if line.starts_with("root:") => format!("{rest}:{shell}\n"),
                _ => format!("{line}\n"),
            })
            .collect();
        // Written in place: the file is bind-mounted over the host's /etc/passwd.
        write_file(&passwd, &text);
    }

    /// From now on, every login on the node's host (a shell sshd starts) writes a line to a
    /// file of its home: `logins` counts them. A shell that a login's command starts is no
    /// login, and is not counted; a shell init it pays is, though: see `shell_inits`. Call it
    /// after `slow_login`, which writes the same `.bashrc`.
    pub fn count_logins(&self) {
        let mut homes: Vec<PathBuf> = (0..self.nodes.len()).map(|i| self.home(i)).collect();
        homes.dedup();
        for home in homes {
            let rc = home.join(".bashrc");
            let old = fs::read_to_string(&rc).unwrap_or_default();
            write_file(
                &rc,
                &format!(
                    "{old}# herd's tests count logins (parent sshd) and shell inits (any parent)
h=${{SSH_CONNECTION#* * }}
case $(cat /proc/$PPID/comm 2>/dev/null) in sshd*) echo \"login ${{h%% *}}\" >> ~/.herd-logins ;; *) echo \"init ${{h%% *}}\" >> ~/.herd-logins ;; esac
unset h
"
                ),
            );
        }
    }

    /// How many logins the node has had since `count_logins`.
    pub fn logins(&self, node: usize) -> usize {
        self.counted(node, "login")
    }

    /// How many times a shell on the node read its init (`~/.bashrc`) since `count_logins`,
    /// logins included.
    pub fn shell_inits(&self, node: usize) -> usize {
        self.logins(node) + self.counted(node, "init")
    }

    fn counted(&self, node: usize, kind: &str) -> usize {
        let want = format!("{kind} {}", self.node(node).addr);
        fs::read_to_string(self.home(node).join(".herd-logins"))
            .unwrap_or_default()
            .lines()
            .filter(|l| *l == want)
            .count()
    }

    /// The node's home: its own, or, in `Testbed::many`, the one host's.
    fn home(&self, node: usize) -> PathBuf {
        let host = self.nodes.iter().position(|n| n.netns == self.node(node).netns).unwrap_or(node);
        self.dir.path().join(format!("home{}", host + 1))
    }

    /// Cuts the node off the bridge (`ip link set <veth_host> down`).
    pub fn link_down(&self, node: usize) {
        let veth = &self.node(node).veth_host;
        run(Command::new("ip").args(["link", "set", veth, "down"]));
    }

    /// Restores the node's link (`ip link set <veth_host> up`).
    pub fn link_up(&self, node: usize) {
        let veth = &self.node(node).veth_host;
        run(Command::new("ip").args(["link", "set", veth, "up"]));
    }

    /// Cuts the node off without a word: every packet in and out of its namespace dropped
    /// (iptables in the namespace), its link up. Where [`Testbed::link_down`] is a cable
    /// pulled, which the node's kernel sees (its TCP sessions fail at once), this is a
    /// switch gone dark: the node's sessions stay up until a timeout of theirs. Undone by
    /// [`Testbed::unsilence`].
    pub fn silence(&self, node: usize) {
        let out = self.ns_exec(node, "iptables -I INPUT -j DROP && iptables -I OUTPUT -j DROP");
        assert!(out.status.success(), "iptables: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Lets the node's traffic through again after [`Testbed::silence`].
    pub fn unsilence(&self, node: usize) {
        let _ = self.ns_exec(node, "iptables -D INPUT -j DROP; iptables -D OUTPUT -j DROP");
    }

    /// Limits what reaches the node to `rate` (tc's words, e.g. `10mbit`): a tbf on the host
    /// side of its veth (this kernel has no netem). Undone by [`Testbed::heal_links`].
    pub fn limit_link(&self, node: usize, rate: &str) {
        let veth = &self.node(node).veth_host;
        let tbf =
            ["qdisc", "add", "dev", veth, "root", "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms"];
        run(Command::new("tc").args(tbf));
    }

    /// Takes every link limit off.
    pub fn heal_links(&self) {
        for node in &self.nodes {
            let _ = Command::new("tc").args(["qdisc", "del", "dev", &node.veth_host, "root"]).output();
        }
    }

    /// Limits the node's CPU to `percent` of one core, through a cpu cgroup that every one of
    /// its processes (its sshd too, so whatever it starts from now on) is moved into: a node
    /// throttled as a cgroup's quota or a busy neighbour would. Undone when the guard drops.
    pub fn throttle_cpu(&self, node: usize, percent: u32) -> CpuThrottle {
        let name = format!("herdt-{}-{}", self.k, node + 1);
        let quota = percent as u64 * 1000;
        let (dir, parent, limit) = if Path::new("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists() {
            let parent = PathBuf::from("/sys/fs/cgroup/cpu");
            (
                parent.join(&name),
                parent,
                vec![("cpu.cfs_period_us", "100000".to_string()), ("cpu.cfs_quota_us", quota.to_string())],
            )
        } else if fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "cpu"))
        {
            let parent = PathBuf::from("/sys/fs/cgroup");
            let _ = fs::write(parent.join("cgroup.subtree_control"), "+cpu");
            (parent.join(&name), parent, vec![("cpu.max", format!("{quota} 100000"))])
        } else {
            panic!("testbed: no cpu cgroup controller (neither /sys/fs/cgroup/cpu nor cgroup2's cpu) to throttle a node with");
        };
        let throttle = CpuThrottle { dir, parent };
        throttle.empty();
        fs::create_dir(&throttle.dir)
            .unwrap_or_else(|e| panic!("testbed: mkdir {}: {e}", throttle.dir.display()));
        for (file, value) in limit {
            fs::write(throttle.dir.join(file), value).unwrap_or_else(|e| panic!("testbed: {file}: {e}"));
        }
        for (pid, _) in self.processes(node) {
            // A process that ended meanwhile is no matter.
            let _ = fs::write(throttle.dir.join("cgroup.procs"), pid.to_string());
        }
        throttle
    }

    /// Every live process of the node (its network namespace), with its command line: what
    /// a command leaves behind shows as a difference.
    pub fn processes(&self, node: usize) -> Vec<(u32, String)> {
        let ns = &self.node(node).netns;
        let Some(ns_id) = netns_id(ns) else {
            panic!("testbed: network namespace {ns} does not exist (/run/netns/{ns})");
        };
        let mut all: Vec<(u32, String)> = pids_in_netns(ns_id)
            .into_iter()
            .map(|pid| {
                let cmd = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                (pid, String::from_utf8_lossy(&cmd).replace('\0', " ").chars().take(120).collect())
            })
            .collect();
        all.sort();
        all
    }

    /// Pids (sorted) of live, non-zombie processes in the node's network namespace whose
    /// environment contains exactly `key=value`.
    pub fn processes_with_env(&self, node: usize, key: &str, value: &str) -> Vec<u32> {
        let ns = &self.node(node).netns;
        let Some(ns_id) = netns_id(ns) else {
            panic!("testbed: network namespace {ns} does not exist (/run/netns/{ns})");
        };
        let wanted = format!("{key}={value}").into_bytes();
        let mut pids: Vec<u32> = pids_in_netns(ns_id)
            .into_iter()
            .filter(|&pid| {
                let mut buf = Vec::new();
                let read = match fs::File::open(format!("/proc/{pid}/environ")) {
                    Ok(mut f) => f.read_to_end(&mut buf).is_ok(),
                    Err(_) => false,
                };
                read && buf.split(|&b| b == 0).any(|entry| entry == wanted.as_slice())
            })
            .collect();
        pids.sort_unstable();
        pids
    }

    /// Stops every node's sshd (and with it what runs in its PID namespace): from now on the
    /// nodes cannot be reached over SSH at all.
    pub fn stop_sshds(&mut self) {
        for child in &mut self.sshds {
            quiet(Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]));
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Every node's name resolves to its address on every node, as a cluster's DNS does
    /// (`/etc/hosts` of the namespaces, for processes started from now on).
    pub fn name_every_node(&self) {
        let all: String = self.nodes.iter().map(|n| format!("{} {}\n", n.addr, n.hostname)).collect();
        for node in &self.nodes {
            let hosts = format!("127.0.0.1 localhost\n::1 localhost\n{all}");
            write_file(&PathBuf::from(format!("/etc/netns/{}/hosts", node.netns)), &hosts);
        }
    }

    /// One more host on the bridge, for a service the nodes use (a scheduler): namespace
    /// `herdt-K-250`, address 10.77.K.254, torn down with the testbed like the nodes. Run
    /// things in it with `ip netns exec <netns>`.
    pub fn service_host(&mut self, hostname: &str) -> TestNode {
        let k = self.k;
        let node = TestNode {
            netns: format!("herdt-{k}-250"),
            addr: format!("10.77.{k}.254"),
            hostname: hostname.to_string(),
            veth_host: format!("hv{k}x250"),
        };
        let etc = PathBuf::from(format!("/etc/netns/{}", node.netns));
        fs::create_dir_all(&etc).unwrap_or_else(|e| panic!("testbed: cannot create {}: {e}", etc.display()));
        write_file(&etc.join("hosts"), &format!("127.0.0.1 localhost\n{} {hostname}\n", node.addr));
        self.plug(&node);
        node
    }

    /// The host's network namespace, plugged into the bridge: its veth pair, its address on
    /// `eth0`, `eth0` and `lo` up.
    fn plug(&self, node: &TestNode) {
        run(Command::new("ip").args(["netns", "add", &node.netns]));
        run(Command::new("ip").args([
            "link",
            "add",
            &node.veth_host,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &node.netns,
        ]));
        run(Command::new("ip").args(["link", "set", &node.veth_host, "master", &self.bridge, "up"]));
        run(Command::new("ip").args([
            "-n",
            &node.netns,
            "addr",
            "add",
            &format!("{}/24", node.addr),
            "dev",
            "eth0",
        ]));
        run(Command::new("ip").args(["-n", &node.netns, "link", "set", "eth0", "up"]));
        run(Command::new("ip").args(["-n", &node.netns, "link", "set", "lo", "up"]));
    }

    /// A `[ssh]` TOML table for herd's cluster file.
    pub fn ssh_config_toml(&self) -> String {
        format!(
            "[ssh]\nuser = \"root\"\nidentity_file = {}\nknown_hosts = \"strict\"\nknown_hosts_file = {}\nconnect_timeout = \"5s\"\n",
            toml_str(&self.identity),
            toml_str(&self.known_hosts),
        )
    }

    fn node(&self, node: usize) -> &TestNode {
        self.nodes.get(node).unwrap_or_else(|| {
            panic!(
                "testbed: node index {node} out of range: this testbed has {} nodes and indices are \
                 0-based (index 0 is node1)",
                self.nodes.len()
            )
        })
    }

    fn setup(&mut self, n: usize, extra: &str) {
        let start = Instant::now();
        let k = self.k;
        let dir = self.dir.path().to_path_buf();

        // Keys: one user key, one host key per node; generated in parallel.
        let mut keygens = Vec::new();
        let mut keygen = |path: &Path| {
            let mut c = Command::new("ssh-keygen");
            c.args(["-q", "-N", "", "-t", "ed25519", "-C", "herd-testbed", "-f"]).arg(path);
            let child = spawn_piped(&mut c);
            keygens.push((c, child));
        };
        keygen(&self.identity);
        for i in 1..=n {
            keygen(&dir.join(format!("host{i}_ed25519")));
        }
        for (c, child) in keygens {
            check(&c, wait_output(&c, child));
        }
        fs::copy(dir.join("id_ed25519.pub"), dir.join("authorized_keys"))
            .unwrap_or_else(|e| panic!("testbed: cannot write authorized_keys: {e}"));

        // Bridge (already created by allocate_slot, which uses it as the slot lock).
        run(Command::new("ip").args(["addr", "add", &format!("10.77.{k}.1/24"), "dev", &self.bridge]));
        run(Command::new("ip").args(["link", "set", &self.bridge, "up"]));

        fs::create_dir_all("/run/sshd").unwrap_or_else(|e| panic!("testbed: cannot create /run/sshd: {e}"));
        let mut known_hosts = String::new();
        for i in 1..=n {
            let node = TestNode {
                netns: format!("herdt-{k}-{i}"),
                addr: format!("10.77.{k}.{}", i + 1),
                hostname: format!("node{i}"),
                veth_host: format!("hv{k}x{i}"),
            };
            // Record before creating anything so Drop covers it (it also sweeps by name).
            self.nodes.push(node.clone());

            let etc = PathBuf::from(format!("/etc/netns/{}", node.netns));
            fs::create_dir_all(&etc)
                .unwrap_or_else(|e| panic!("testbed: cannot create {}: {e}", etc.display()));
            write_file(
                &etc.join("hosts"),
                &format!("127.0.0.1 localhost {}\n::1 localhost\n", node.hostname),
            );
            write_file(&etc.join("hostname"), &format!("{}\n", node.hostname));
            // Each host's root has its own empty home, as on a separate machine: the build
            // machine's dotfiles (here a .bashrc that runs `pyenv rehash` under a lock) must
            // not run, and serialise, on every ssh login.
            let home = dir.join(format!("home{i}"));
            fs::create_dir_all(&home)
                .unwrap_or_else(|e| panic!("testbed: cannot create {}: {e}", home.display()));
            write_file(&etc.join("passwd"), &passwd_with_root_home(&home));

            self.plug(&node);

            let host_key = dir.join(format!("host{i}_ed25519"));
            let cfg = dir.join(format!("sshd{i}.conf"));
            write_file(
                &cfg,
                // Every address of the namespace: `Testbed::many` adds more after the start.
                // There one sshd answers for up to 252 nodes, whose logins herd starts all at
                // once: MaxStartups (unauthenticated connections) above that, or sshd drops
                // them; MaxSessions is per connection (herd's few sessions per master).
                &format!(
                    "ListenAddress 0.0.0.0\n\
                     Port 22\n\
                     HostKey {host_key}\n\
                     PidFile none\n\
                     AuthorizedKeysFile {auth}\n\
                     PermitRootLogin prohibit-password\n\
                     PubkeyAuthentication yes\n\
                     PasswordAuthentication no\n\
                     KbdInteractiveAuthentication no\n\
                     UsePAM no\n\
                     StrictModes no\n\
                     MaxSessions 100\n\
                     MaxStartups 1000\n\
                     LogLevel ERROR\n\
                     PrintMotd no\n\
                     Subsystem sftp internal-sftp\n\
                     SetEnv DOCKER_HOST=unix://{docker}\n\
                     {extra}",
                    host_key = host_key.display(),
                    auth = dir.join("authorized_keys").display(),
                    docker = docker_socket(&dir, i).display(),
                ),
            );
            let host_pub = fs::read_to_string(dir.join(format!("host{i}_ed25519.pub")))
                .unwrap_or_else(|e| panic!("testbed: cannot read host key of node{i}: {e}"));
            let mut fields = host_pub.split_whitespace();
            let (kt, kb) = (fields.next().unwrap_or(""), fields.next().unwrap_or(""));
            known_hosts.push_str(&format!("{} {kt} {kb}\n", node.addr));

            let log_path = dir.join(format!("sshd{i}.log"));
            let log = fs::File::create(&log_path)
                .unwrap_or_else(|e| panic!("testbed: cannot create {}: {e}", log_path.display()));
            let sshd = format!("exec /usr/sbin/sshd -D -e -f {}", sh_quote(&cfg.to_string_lossy()));
            let mut c = host_command(&node.netns, &node.hostname, &sshd);
            c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
            let child =
                c.spawn().unwrap_or_else(|e| panic!("testbed: failed to spawn `{}`: {e}", cmdline(&c)));
            self.sshds.push(child);
            self.sshd_cmds.push(cmdline(&c));
        }
        write_file(&self.known_hosts, &known_hosts);

        // Readiness 1: sshd listens on port 22 in the node's netns. Checked through
        // /proc/<sshd pid>/net/tcp (that pid's netns) instead of probe connections, which sshd
        // would log as errors.
        let deadline = start + READY_TIMEOUT;
        for i in 0..n {
            loop {
                self.check_sshd_alive(i);
                if listening_on_22(self.sshds[i].id(), &self.nodes[i].addr) {
                    break;
                }
                if Instant::now() > deadline {
                    panic!(
                        "testbed: sshd of {} ({}) not listening on port 22 after {READY_TIMEOUT:?}\n{}",
                        self.nodes[i].hostname,
                        self.nodes[i].addr,
                        self.sshd_log_tail(i)
                    );
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        // Readiness 2: a real, strict ssh login to every node (in parallel, retried).
        let mut pending: Vec<usize> = (0..n).collect();
        loop {
            let attempts: Vec<(usize, Command, Child)> = pending
                .iter()
                .map(|&i| {
                    let mut c = self.ssh_command(i);
                    c.arg("true");
                    let child = spawn_piped(&mut c);
                    (i, c, child)
                })
                .collect();
            let mut failed = Vec::new();
            for (i, c, child) in attempts {
                let out = wait_output(&c, child);
                if !out.status.success() {
                    failed.push((i, c, out));
                }
            }
            if failed.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                let (i, c, out) = &failed[0];
                panic!(
                    "testbed: ssh login to {} ({}) still failing after {READY_TIMEOUT:?}\n`{}` exited with {}\nstderr: {}\n{}",
                    self.nodes[*i].hostname,
                    self.nodes[*i].addr,
                    cmdline(c),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim_end(),
                    self.sshd_log_tail(*i)
                );
            }
            pending = failed.iter().map(|(i, _, _)| *i).collect();
            for &i in &pending {
                self.check_sshd_alive(i);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn check_sshd_alive(&mut self, i: usize) {
        if let Ok(Some(status)) = self.sshds[i].try_wait() {
            panic!(
                "testbed: sshd of {} ({}) exited during startup with {status}\ncommand: {}\n{}",
                self.nodes[i].hostname,
                self.nodes[i].addr,
                self.sshd_cmds[i],
                self.sshd_log_tail(i)
            );
        }
    }

    fn sshd_log_tail(&self, i: usize) -> String {
        let path = self.dir.path().join(format!("sshd{}.log", i + 1));
        let text = fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("--- tail of {} ---\n{tail}", path.display())
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        // Never panic here: every step ignores failures.
        for child in &mut self.sshds {
            let pgid = child.id();
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pgid}")])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
        // The host's sshd took its PID namespaces with it.
        for child in &mut self.holders {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Kills everything left in the namespaces (ssh sessions, setsid'd jobs), deletes them,
        // the veths, /etc/netns dirs and finally the bridge.
        teardown_slot(self.k);
        // Release the slot, unless somebody else's marker took its place.
        if fs::read_to_string(&self.marker).ok().as_deref() == Some(self.marker_content.as_str()) {
            let _ = fs::remove_file(&self.marker);
        }
    }
}

/// Removes leftovers of testbeds whose creating process no longer exists (per the marker files
/// in /run/herd-testbed). Called at the start of [`Testbed::new`]. Never panics.
/// /etc/passwd with root's home directory replaced.
fn passwd_with_root_home(home: &Path) -> String {
    let passwd =
        fs::read_to_string("/etc/passwd").unwrap_or_else(|e| panic!("testbed: cannot read /etc/passwd: {e}"));
    passwd
        .lines()
        .map(|line| {
            let mut fields: Vec<&str> = line.split(':').collect();
            let home = home.to_str().expect("utf-8 path");
            if fields.first() == Some(&"root") && fields.len() == 7 {
                fields[5] = home;
            }
            fields.join(":") + "\n"
        })
        .collect()
}

/// Where the docker daemon of node `i` (1-based, as in names) listens, if a test starts one
/// (`support::docker`): every session on the node has `DOCKER_HOST` pointing there, as a
/// node's default socket is `/run/docker.sock`. Without a daemon, docker says that nothing
/// listens there, as on a node whose docker is not running.
pub fn docker_socket(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("docker{i}/docker.sock"))
}

/// `sh -c script` on a test host: in network namespace `netns`, with its own UTS namespace
/// (`hostname`) and PID namespace with its own /proc, like a separate machine (a node's /proc
/// shows only its own processes), in a process group of its own, which Drop kills whole. Its
/// cgroup hierarchies are mounted as this machine's are (see `cgroup_mounts`).
pub fn host_command(netns: &str, hostname: &str, script: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", netns, "unshare", "--uts", "--pid", "--fork", "--kill-child", "--mount-proc"])
        .args(["sh", "-c", &format!("hostname {hostname} && {{ {}; }} && {script}", cgroup_mounts())])
        .process_group(0);
    c
}

/// Shell commands that mount, on a host's own /sys, the cgroup hierarchies this machine has
/// mounted under /sys/fs/cgroup: `ip netns exec` mounts a fresh /sys for the namespace
/// (its /sys/class/net is the node's), without them, and a container engine (podman) finds
/// no cgroup there. The same hierarchies with their own options (a cgroup2 mount without
/// `nsdelegate` would clear it for the whole machine), so a limit set on one shows on the
/// host. Best effort: a mount refused says so on the host's stderr, and the host starts all
/// the same (only the container tests need them). Read once, from /proc/self/mountinfo.
fn cgroup_mounts() -> &'static str {
    static MOUNTS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        const CONTROLLERS: [&str; 14] = [
            "cpu",
            "cpuacct",
            "cpuset",
            "memory",
            "devices",
            "freezer",
            "blkio",
            "pids",
            "net_cls",
            "net_prio",
            "perf_event",
            "hugetlb",
            "rdma",
            "misc",
        ];
        let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut script = Vec::new();
        for line in info.lines() {
            let Some((left, right)) = line.split_once(" - ") else { continue };
            let Some(point) = left.split(' ').nth(4) else { continue };
            if !(point == "/sys/fs/cgroup" || point.starts_with("/sys/fs/cgroup/")) {
                continue;
            }
            let mut fields = right.split(' ');
            let (fstype, options) = (fields.next().unwrap_or(""), fields.nth(1).unwrap_or(""));
            // The hierarchy's own options (its controllers, its name, cgroup2's delegation),
            // not the access mode, nor a release agent, which is the machine's.
            let own: Vec<&str> = options
                .split(',')
                .filter(|o| !matches!(*o, "rw" | "ro") && !o.starts_with("release_agent="))
                .collect();
            let with = |o: &[&str]| if o.is_empty() { String::new() } else { format!("-o {} ", o.join(",")) };
            let mount = match fstype {
                "tmpfs" => "mount -t tmpfs -o mode=755 tmpfs".to_string(),
                "cgroup2" => format!("mount -t cgroup2 {}cgroup2", with(&own)),
                // A named hierarchy without a controller: `none`, or the mount would ask for
                // every controller.
                "cgroup" if !own.iter().any(|o| CONTROLLERS.contains(o)) => {
                    format!("mount -t cgroup -o none,{} cgroup", own.join(","))
                }
                "cgroup" => format!("mount -t cgroup {}cgroup", with(&own)),
                _ => continue,
            };
            script.push(format!(
                "{{ mkdir -p {point} && {mount} {point}; }} || echo 'testbed: could not mount {point}' >&2"
            ));
        }
        script.push("true".to_string());
        script.join("; ")
    });
    &MOUNTS
}

pub fn cleanup_stale() {
    let Ok(entries) = fs::read_dir(MARKER_DIR) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if let Some(rest) = name.strip_prefix(".tmp-") {
            // Allocation temp files: ".tmp-<pid>-<n>".
            let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
            if pid.is_none_or(|p| !Path::new(&format!("/proc/{p}")).exists()) {
                let _ = fs::remove_file(&path);
            }
            continue;
        }
        let Some(k) = name.strip_suffix(".pid").and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(content) = fs::read_to_string(&path) else {
            continue;
        };
        if owner_alive(&content) {
            continue;
        }
        // Claim the stale marker atomically so only one process reaps slot K.
        let claimed = PathBuf::from(MARKER_DIR).join(format!(
            ".reap-{k}-{}-{}",
            std::process::id(),
            UNIQUE.fetch_add(1, Ordering::Relaxed)
        ));
        if fs::rename(&path, &claimed).is_err() {
            continue; // someone else is reaping it
        }
        let content = fs::read_to_string(&claimed).unwrap_or_default();
        if owner_alive(&content) {
            // Raced with a fresh allocation of K: put its marker back.
            let _ = fs::hard_link(&claimed, &path);
            let _ = fs::remove_file(&claimed);
            continue;
        }
        teardown_slot(k);
        if let Some(dir) = content.lines().nth(1) {
            let dir = Path::new(dir);
            let tmp = std::env::temp_dir();
            let is_ours = dir.starts_with(&tmp)
                && dir.file_name().is_some_and(|f| f.to_string_lossy().starts_with("herd-testbed-"));
            if is_ours {
                let _ = fs::remove_dir_all(dir);
            }
        }
        let _ = fs::remove_file(&claimed);
    }
}

// ---------------------------------------------------------------------------------------------
// Slot allocation and teardown

/// Claims a slot K: a marker file `<K>.pid` (created atomically with a hard link) plus the bridge
/// `herdbr<K>` (`ip link add` fails if it exists, which moves us on to K+1).
fn allocate_slot(dir: &Path) -> (u32, PathBuf, String) {
    fs::create_dir_all(MARKER_DIR).unwrap_or_else(|e| panic!("testbed: cannot create {MARKER_DIR}: {e}"));
    let me = std::process::id();
    let content = format!("{me} {}\n{}\n", start_time(me).unwrap_or(0), dir.display());
    // The counter's address too: the integration binary holds two copies of this file (its
    // support, and the bench's through bench_smoke), each with its own counter.
    let copy = &UNIQUE as *const AtomicU64 as usize;
    let n = UNIQUE.fetch_add(1, Ordering::Relaxed);
    let tmp = PathBuf::from(MARKER_DIR).join(format!(".tmp-{me}-{copy:x}-{n}"));
    write_file(&tmp, &content);
    let k0 = me % MAX_K; // 0-based start, derived from the pid
    for off in 0..MAX_K {
        let k = (k0 + off) % MAX_K + 1;
        let marker = PathBuf::from(MARKER_DIR).join(format!("{k}.pid"));
        match fs::hard_link(&tmp, &marker) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                panic!("testbed: cannot create marker {}: {e}", marker.display());
            }
        }
        let mut c = Command::new("ip");
        c.args(["link", "add", &format!("herdbr{k}"), "type", "bridge"]);
        let out = spawn_output(&mut c);
        if out.status.success() {
            let _ = fs::remove_file(&tmp);
            return (k, marker, content);
        }
        let _ = fs::remove_file(&marker);
        if String::from_utf8_lossy(&out.stderr).contains("File exists") {
            continue; // a bridge without (our) marker: leave it alone
        }
        let _ = fs::remove_file(&tmp);
        check(&c, out);
    }
    let _ = fs::remove_file(&tmp);
    panic!("testbed: no free slot: herdbr1..herdbr{MAX_K} are all taken (see {MARKER_DIR} and `ip link`)");
}

/// Best-effort removal of everything belonging to slot K. The bridge goes last: it is the lock
/// that keeps another allocator from reusing K while we are still cleaning.
fn teardown_slot(k: u32) {
    let ns_prefix = format!("herdt-{k}-");
    let namespaces = names_with_numeric_suffix("/run/netns", &ns_prefix);
    // Kill everything in all namespaces first (their sshds may have sessions anywhere).
    let ids: Vec<(u64, u64)> = namespaces.iter().filter_map(|ns| netns_id(ns)).collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids: Vec<u32> = ids.iter().flat_map(|&id| pids_in_netns(id)).collect();
        if pids.is_empty() || Instant::now() > deadline {
            break;
        }
        let _ = Command::new("kill")
            .arg("-KILL")
            .args(pids.iter().map(|p| p.to_string()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        std::thread::sleep(Duration::from_millis(20));
    }
    for ns in &namespaces {
        quiet(Command::new("ip").args(["netns", "del", ns]));
    }
    // The veths normally vanish with their namespace's eth0 peer; delete any stragglers.
    for link in names_with_numeric_suffix("/sys/class/net", &format!("hv{k}x")) {
        quiet(Command::new("ip").args(["link", "del", &link]));
    }
    for d in names_with_numeric_suffix("/etc/netns", &ns_prefix) {
        let _ = fs::remove_dir_all(Path::new("/etc/netns").join(d));
    }
    quiet(Command::new("ip").args(["link", "del", &format!("herdbr{k}")]));
}

/// Entries of `dir` named `<prefix><digits>`.
fn names_with_numeric_suffix(dir: &str, prefix: &str) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| {
            name.strip_prefix(prefix)
                .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// /proc helpers

/// (st_dev, st_ino) identifying a named network namespace, or None if it does not exist.
fn netns_id(ns: &str) -> Option<(u64, u64)> {
    let path = format!("/run/netns/{ns}");
    let own = fs::metadata("/proc/self/ns/net").ok()?;
    let m = fs::metadata(&path).ok()?;
    // A still-mounted netns file lives on nsfs (same st_dev as our own ns/net link target);
    // an unmounted placeholder file would be on tmpfs and must not match anything.
    if m.dev() != own.dev() {
        return None;
    }
    Some((m.dev(), m.ino()))
}

/// The processes on this machine whose command line (`/proc/PID/cmdline`: argv, each word
/// followed by a NUL) `keep` accepts.
pub fn pids_whose_cmdline(keep: impl Fn(&[u8]) -> bool) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| keep(&c)))
        .collect()
}

/// Live, non-zombie processes whose network namespace is `id`.
fn pids_in_netns(id: (u64, u64)) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            let Ok(m) = fs::metadata(format!("/proc/{pid}/ns/net")) else {
                return false;
            };
            (m.dev(), m.ino()) == id && !is_zombie(pid)
        })
        .collect()
}

/// Fields of /proc/<pid>/stat after the `(comm)`: index 0 is the state (field 3).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().map(str::to_owned).collect())
}

/// Whether the network namespace of `pid` has a TCP socket listening on `addr`:22.
fn listening_on_22(pid: u32, addr: &str) -> bool {
    let Ok(ip) = addr.parse::<std::net::Ipv4Addr>() else {
        return false;
    };
    // /proc/net/tcp prints the raw network-order address as a native-endian %08X; sshd
    // listens on every address of its namespace (0.0.0.0).
    let wanted = [ip, std::net::Ipv4Addr::UNSPECIFIED]
        .map(|ip| format!("{:08X}:0016", u32::from_ne_bytes(ip.octets())));
    let Ok(tcp) = fs::read_to_string(format!("/proc/{pid}/net/tcp")) else {
        return false;
    };
    tcp.lines().skip(1).any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        f.len() > 3 && wanted.contains(&f[1].to_string()) && f[3] == "0A"
    })
}

fn is_zombie(pid: u32) -> bool {
    stat_fields(pid).is_none_or(|f| matches!(f.first().map(String::as_str), Some("Z") | Some("X")))
}

/// Process start time (field 22 of /proc/<pid>/stat), to tell a pid apart from its reuse.
fn start_time(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// Marker content is "<pid> <starttime>\n<dir>\n".
fn owner_alive(content: &str) -> bool {
    let mut it = content.split_whitespace();
    let (Some(pid), Some(start)) =
        (it.next().and_then(|p| p.parse::<u32>().ok()), it.next().and_then(|s| s.parse::<u64>().ok()))
    else {
        // Unparseable (e.g. a half-written marker): treat as alive, never reap.
        return true;
    };
    !is_zombie(pid) && (start == 0 || start_time(pid) == Some(start))
}

// ---------------------------------------------------------------------------------------------
// Command helpers

fn preflight() {
    let is_root = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false);
    assert!(is_root, "Testbed needs root (network namespaces, bridges, sshd); run the tests as root");
    assert!(Path::new("/usr/sbin/sshd").exists(), "Testbed needs /usr/sbin/sshd (install openssh-server)");
}

fn cmdline(cmd: &Command) -> String {
    let mut s = sh_quote(&cmd.get_program().to_string_lossy());
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&sh_quote(&a.to_string_lossy()));
    }
    s
}

fn sh_quote(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:@%+,".contains(&b)) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn toml_str(p: &Path) -> String {
    let s = p.to_string_lossy();
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn opt(prefix: &str, path: &Path) -> std::ffi::OsString {
    let mut s = std::ffi::OsString::from(prefix);
    s.push(path.as_os_str());
    s
}

fn spawn_piped(cmd: &mut Command) -> Child {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.spawn().unwrap_or_else(|e| panic!("testbed: failed to spawn `{}`: {e}", cmdline(cmd)))
}

fn wait_output(cmd: &Command, child: Child) -> Output {
    child.wait_with_output().unwrap_or_else(|e| panic!("testbed: failed to wait for `{}`: {e}", cmdline(cmd)))
}

/// Runs to completion, capturing output; panics only if it cannot be spawned.
fn spawn_output(cmd: &mut Command) -> Output {
    let child = spawn_piped(cmd);
    wait_output(cmd, child)
}

/// Panics with command line, exit status and stderr unless `out` is a success.
fn check(cmd: &Command, out: Output) -> Output {
    if !out.status.success() {
        panic!(
            "testbed: `{}` failed with {}\nstderr: {}\nstdout: {}",
            cmdline(cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end(),
            String::from_utf8_lossy(&out.stdout).trim_end()
        );
    }
    out
}

/// Runs a command that must succeed (see [`check`]).
fn run(cmd: &mut Command) -> Output {
    let out = spawn_output(cmd);
    check(cmd, out)
}

/// Runs a command, ignoring every failure (for teardown).
fn quiet(cmd: &mut Command) {
    let _ = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status();
}

fn write_file(path: &Path, content: &str) {
    let mut f =
        fs::File::create(path).unwrap_or_else(|e| panic!("testbed: cannot create {}: {e}", path.display()));
    f.write_all(content.as_bytes())
        .unwrap_or_else(|e| panic!("testbed: cannot write {}: {e}", path.display()));
}
