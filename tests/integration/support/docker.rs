//! A real docker engine on every node of a testbed: Debian's `dockerd`, one per node, started
//! through the node's sshd, so that it, its containerd and its containers live in the node's
//! network and PID namespaces, as on a machine of its own. It leaves the testbed's network
//! alone (`--iptables=false --bridge=none`: no rules, no bridge of its own); herd's
//! containers use the node's network (`--network host`).
//!
//! Each daemon keeps its state in the testbed's directory (`docker<i>/`), listens on
//! [`testbed::docker_socket`], which every session on the node has as `DOCKER_HOST`, and runs
//! a containerd of its own under its exec root. The test image is the one podman has
//! (scripts/container-image.sh), saved once as a docker archive and loaded into each daemon
//! that should have it: every node then has the same image ID, as nodes that pulled one
//! image have.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::testbed::{self, Testbed};

/// How long a daemon may take to answer after its start: a new data root, on a loaded machine.
const READY: Duration = Duration::from_secs(90);

/// The docker daemons of a testbed's nodes. Dropping it stops them (TERM, then the testbed's
/// own teardown kills what is left): it must be dropped before the testbed, i.e. declared
/// after it.
pub struct Daemons {
    /// Per node (index as in [`Testbed::nodes`]): its daemon's directory.
    dirs: Vec<PathBuf>,
    /// The file name of the daemons' sockets, in their directories.
    socket: String,
}

impl Daemons {
    /// Starts a daemon on every node of `tb` and waits until each answers; loads the test
    /// image `image` (podman's name for it) into the daemons of the nodes `with_image` names.
    pub fn start(tb: &Testbed, image: &str, with_image: &[usize]) -> Daemons {
        Daemons::start_on(tb, image, with_image, "docker.sock")
    }

    /// `start`, with each daemon listening on `socket` in its directory: a name other than
    /// `docker.sock` is not the engine of the nodes' sessions (their `DOCKER_HOST`), as a
    /// rootless docker is not the machine's.
    pub fn start_on(tb: &Testbed, image: &str, with_image: &[usize], socket: &str) -> Daemons {
        let dirs: Vec<PathBuf> = (0..tb.nodes().len())
            .map(|i| testbed::docker_socket(tb.dir(), i + 1).parent().unwrap().to_path_buf())
            .collect();
        let daemons = Daemons { dirs, socket: socket.to_string() };
        // Node 0's first: a daemon's first start writes the machine's /etc/docker/key.json
        // (dockerd 20.10 has no flag for it), which the others then only read.
        daemons.start_daemon(tb, 0);
        daemons.ready(0);
        for i in 1..daemons.dirs.len() {
            daemons.start_daemon(tb, i);
        }
        for i in 1..daemons.dirs.len() {
            daemons.ready(i);
        }
        if !with_image.is_empty() {
            let archive = archive(image);
            let loads: Vec<_> = with_image
                .iter()
                .map(|&i| {
                    let mut c = daemons.docker(i);
                    c.args(["load", "-q", "-i"]).arg(&archive);
                    (i, c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap())
                })
                .collect();
            for (i, child) in loads {
                let out = child.wait_with_output().unwrap();
                assert!(out.status.success(), "docker: loading the image on node {i}: {}", text(&out));
            }
        }
        daemons
    }

    /// Starts node `i`'s daemon, through the node's sshd.
    fn start_daemon(&self, tb: &Testbed, i: usize) {
        let (dir, socket) = (&self.dirs[i], &self.socket);
        std::fs::create_dir_all(dir).unwrap();
        // cgroupfs, as podman's (scripts/container-image.sh): with systemd's driver runc
        // would hand systemd pids of the node's PID namespace.
        std::fs::write(dir.join("daemon.json"), "{\"exec-opts\": [\"native.cgroupdriver=cgroupfs\"]}\n")
            .unwrap();
        let d = dir.display();
        // Its own config, data and exec roots: nothing of the machine's /var/lib/docker or
        // daemon.json, and nothing shared between nodes but /etc/docker/key.json (see
        // `start_on`). /run/containerd, the node's
        // own (the node has a mount namespace of its own): dockerd would use a containerd
        // of the machine's found there, whose containers run in the root namespaces (then
        // `--network host` is the machine's network, not the node's), and the shims of
        // the daemon's own containerd keep their sockets there. A second of grace for the
        // containers at its stop: a test's are ended by then, or meant to be removed.
        // Two lines: a background job of `a && b &` is a subshell that holds the session's
        // output, and the ssh, open until dockerd ends.
        let start = format!(
            "mkdir -p /run/containerd && mount -t tmpfs -o mode=711 herd-node /run/containerd && cd / || exit 1\n\
             setsid dockerd -H unix://{d}/{socket} --config-file {d}/daemon.json \
             --data-root {d}/data --exec-root {d}/run \
             -p {d}/docker.pid --storage-driver overlay2 --iptables=false --ip-masq=false \
             --ip-forward=false --bridge=none --shutdown-timeout 1 </dev/null >{d}/dockerd.log 2>&1 &"
        );
        let out = tb.ssh(i, &start);
        assert!(out.status.success(), "docker: starting dockerd on node {i}: {}", text(&out));
    }

    /// Whether node `i`'s daemon answers.
    fn answers(&self, i: usize) -> bool {
        let out = self.docker(i).args(["version", "--format", "{{.Server.Version}}"]).output().unwrap();
        out.status.success()
    }

    /// The pids, here, of the daemons of `nodes`: their pid files hold their pids in the
    /// nodes' PID namespaces. Found by their command lines.
    fn pids_of(&self, nodes: &[usize]) -> Vec<u32> {
        let configs: Vec<String> =
            nodes.iter().map(|&i| format!("{}/daemon.json", self.dirs[i].display())).collect();
        testbed::pids_whose_cmdline(|cmd| {
            let cmd = String::from_utf8_lossy(cmd);
            cmd.starts_with("dockerd\0") && configs.iter().any(|c| cmd.contains(&format!("\0{c}\0")))
        })
    }

    /// Waits until node `i`'s daemon answers, or panics with its log's tail once it has
    /// ended or `READY` has passed. Its process is looked for only after a few seconds: the
    /// shell that started it may not have run it yet.
    fn ready(&self, i: usize) {
        let started = Instant::now();
        loop {
            if self.answers(i) {
                return;
            }
            let gone = started.elapsed() > Duration::from_secs(5) && self.pids_of(&[i]).is_empty();
            if started.elapsed() > READY || (gone && !self.answers(i)) {
                panic!("docker: node {i}'s dockerd did not answer in {READY:?}:\n{}", self.log_tail(i));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn log_tail(&self, i: usize) -> String {
        let log = std::fs::read_to_string(self.dirs[i].join("dockerd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// A `docker` client for node `i`'s daemon, run from here (the socket is a file of the
    /// testbed's directory). What it starts runs in the node's namespaces, by the daemon.
    pub fn docker(&self, i: usize) -> Command {
        let mut c = Command::new("docker");
        c.env("DOCKER_HOST", self.host(i));
        c.stdin(Stdio::null());
        c
    }

    /// Where node `i`'s daemon listens, as `DOCKER_HOST` says it.
    pub fn host(&self, i: usize) -> String {
        format!("unix://{}", self.dirs[i].join(&self.socket).display())
    }

    /// Runs `docker ARGS` on node `i`'s daemon; its output, whatever its status.
    pub fn run(&self, i: usize, args: &[&str]) -> Output {
        self.docker(i).args(args).output().unwrap()
    }

    /// The names of every container (running or not) of every node's daemon.
    pub fn names(&self) -> Vec<String> {
        (0..self.dirs.len())
            .flat_map(|i| {
                let out = self.run(i, &["ps", "-a", "--format", "{{.Names}}"]);
                assert!(out.status.success(), "docker ps on node {i}: {}", text(&out));
                lines(&out)
            })
            .collect()
    }

    /// The names of the containers that the nodes' daemons started since `since` (RFC 3339).
    pub fn started_since(&self, since: &str) -> Vec<String> {
        let until = humantime::format_rfc3339_seconds(std::time::SystemTime::now() + Duration::from_secs(1));
        (0..self.dirs.len())
            .flat_map(|i| {
                let out = self.run(
                    i,
                    &[
                        "events",
                        "--since",
                        since,
                        "--until",
                        &until.to_string(),
                        "--filter",
                        "event=start",
                        "--format",
                        "{{.Actor.Attributes.name}}",
                    ],
                );
                lines(&out)
            })
            .collect()
    }
}

impl Drop for Daemons {
    fn drop(&mut self) {
        // A daemon stopped by TERM stops its containers and its containerd; SIGKILLed by the
        // testbed's teardown, it would leave their cgroups. Never panics.
        let all: Vec<usize> = (0..self.dirs.len()).collect();
        let pids = self.pids_of(&all);
        for pid in &pids {
            let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).stderr(Stdio::null()).status();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while pids.iter().any(|p| Path::new(&format!("/proc/{p}")).exists()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The test image as a docker archive, saved from podman once per image ID, next to the
/// image's cached root file system (`HERD_IMAGE_CACHE`, default ~/.cache/herd).
fn archive(image: &str) -> PathBuf {
    let id =
        Command::new("podman").args(["image", "inspect", "--format", "{{.Id}}", image]).output().unwrap();
    assert!(id.status.success(), "podman image inspect {image}: {}", text(&id));
    let id = String::from_utf8_lossy(&id.stdout).trim().to_string();
    let cache = std::env::var_os("HERD_IMAGE_CACHE").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or("/root".into())).join(".cache/herd")
    });
    std::fs::create_dir_all(&cache).unwrap();
    let name = format!("docker-archive-{}.tar", &id[..12.min(id.len())]);
    let path = cache.join(&name);
    if !path.exists() {
        // Saved aside, then renamed: a test that finds the file finds all of it. An archive
        // of an older build of the image goes.
        let part = cache.join(format!("{name}.{}.part", std::process::id()));
        let out = Command::new("podman")
            .args(["save", "-q", "--format", "docker-archive", "-o"])
            .arg(&part)
            .arg(image)
            .output()
            .unwrap();
        if !out.status.success() {
            let _ = std::fs::remove_file(&part);
            panic!("podman save {image}: {}", text(&out));
        }
        std::fs::rename(&part, &path).unwrap();
        for old in std::fs::read_dir(&cache).into_iter().flatten().flatten() {
            let file = old.file_name().to_string_lossy().into_owned();
            if file.starts_with("docker-archive-") && file.ends_with(".tar") && file != name {
                let _ = std::fs::remove_file(old.path());
            }
        }
    }
    path
}

fn lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()).map(String::from).collect()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}
