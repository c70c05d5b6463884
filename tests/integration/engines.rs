//! `[container]` on real engines, each test run on both (issue 28 for podman, issue 42 for
//! docker):
//! - rootful podman with runc, daemonless: the client, run by each node's agent, starts the
//!   container in the node's namespaces, and all nodes share the machine's one store;
//! - docker: Debian's `dockerd`, one per node, started through the node's sshd
//!   (`support::docker`), each with its own store; the client only talks to it.
//!
//! The image is built here (scripts/container-image.sh: Debian bookworm with python3), and
//! loaded into each docker daemon from podman's copy. The torch virtualenv is mounted from
//! the host, with the interpreter it points to. torchrun 3 × 2 over gloo runs in a container
//! on each node, and whatever ends the run leaves no container and no process on any node.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::support::cluster::{Cluster, LIMIT};
use crate::support::docker::Daemons;
use crate::support::herd::{self, only_run_dir};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Podman,
    Docker,
}

/// The engine the nodes run: podman's store is the machine's; docker's daemons are the
/// nodes' own.
enum Engine {
    Podman,
    Docker(Daemons),
}

impl Engine {
    fn word(&self) -> &'static str {
        match self {
            Engine::Podman => "podman",
            Engine::Docker(_) => "docker",
        }
    }

    /// The names of every container the engine knows of, running or not, on every node.
    fn names(&self) -> Vec<String> {
        match self {
            Engine::Podman => {
                let out =
                    Command::new("podman").args(["ps", "-a", "--format", "{{.Names}}"]).output().unwrap();
                String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect()
            }
            Engine::Docker(d) => d.names(),
        }
    }

    /// The names of the containers the engine started since `since` (RFC 3339), on every node.
    fn started_since(&self, since: &str) -> Vec<String> {
        match self {
            Engine::Podman => {
                let out = Command::new("podman")
                    .args([
                        "events",
                        "--stream=false",
                        "--since",
                        since,
                        "--filter",
                        "event=start",
                        "--format",
                        "{{.Name}}",
                    ])
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect()
            }
            Engine::Docker(d) => d.started_since(since),
        }
    }

    /// `ENGINE ARGS` as node `node` runs it (podman: the machine's store, which every node sees).
    fn command(&self, node: usize) -> Command {
        match self {
            Engine::Podman => Command::new("podman"),
            Engine::Docker(d) => d.docker(node),
        }
    }
}

/// A cluster of nodes running an engine, and what cleans up after it. Fields drop in order:
/// the leftovers of a failed test are removed, the daemons stop, then the testbed goes.
struct Bed {
    _sweeper: Option<Sweeper>,
    engine: Engine,
    c: Cluster,
}

/// `n` nodes with `kind`'s engine; docker's daemons get the image on the nodes `with_image`
/// names (`None`: every node).
fn bed_with(kind: Kind, n: usize, with_image: Option<&[usize]>) -> Bed {
    let c = Cluster::new(n);
    match kind {
        Kind::Podman => {
            let sweeper = Sweeper(c.logs());
            Bed { _sweeper: Some(sweeper), engine: Engine::Podman, c }
        }
        Kind::Docker => {
            let all: Vec<usize> = (0..n).collect();
            let daemons = Daemons::start(&c.tb, &image(), with_image.unwrap_or(&all));
            Bed { _sweeper: None, engine: Engine::Docker(daemons), c }
        }
    }
}

fn bed(kind: Kind, n: usize) -> Bed {
    bed_with(kind, n, None)
}

/// The test image, built (once, cached) and imported into podman as needed.
fn image() -> String {
    let script = herd::repo_root().join("scripts/container-image.sh");
    let out = Command::new(&script).output().expect("run scripts/container-image.sh");
    assert!(
        out.status.success(),
        "scripts/container-image.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The directories the image needs from the host to run the venv: the venv, and the Python
/// installation its interpreter links to (`home` in pyvenv.cfg), unless that is the system's
/// own, which the image has (bookworm's python3 on a bookworm host).
fn venv_mounts(venv: &std::path::Path) -> Vec<String> {
    let cfg = std::fs::read_to_string(venv.join("pyvenv.cfg")).unwrap();
    let home = cfg.lines().find_map(|l| l.strip_prefix("home = ")).expect("home in pyvenv.cfg");
    let prefix = PathBuf::from(home.trim()).parent().unwrap().to_path_buf();
    let mut mounts = vec![format!("{0}:{0}:ro", venv.display())];
    if prefix != std::path::Path::new("/usr") {
        mounts.push(format!("{0}:{0}:ro", prefix.display()));
    }
    mounts
}

/// Removes, when a podman test ends, the containers of the runs in the test's logs that are
/// still in podman's store: a test that fails mid-run has its testbed torn down under its agents,
/// which kills the containers' processes without removing them, and the store is the machine's.
struct Sweeper(PathBuf);

impl Drop for Sweeper {
    fn drop(&mut self) {
        let runs: Vec<String> = std::fs::read_dir(&self.0)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let left: Vec<String> = runs.iter().flat_map(|run| containers(&Engine::Podman, run)).collect();
        if !left.is_empty() {
            let _ = Command::new("podman").args(["rm", "-f", "-t", "0"]).args(&left).output();
        }
    }
}

/// The [env] marker that finds every job process of the test, on every node.
fn mark(c: &Cluster) -> String {
    format!("engine-{}", c.tb.k())
}

/// torchrun 3 × 2 in containers: `args` for examples/allreduce.py.
fn config(b: &Bed, args: &str) {
    config_with(b, args, "", "");
}

/// `config`, with `container` lines added to `[container]` and `more` (tables) after it. The
/// containers see the testbed's `shared` directory (see [`shared`]) at the same path.
fn config_with(b: &Bed, args: &str, container: &str, more: &str) {
    let c = &b.c;
    let shared = shared(c);
    let mut mounts = venv_mounts(&c.venv);
    mounts.push(format!("{0}:{0}", shared.display()));
    let mounts: Vec<String> = mounts.iter().map(|m| format!("{m:?}")).collect();
    c.write_config(
        &format!(
            "launcher = \"torchrun\"\nscript = \"examples/allreduce.py\"\nnproc_per_node = 2\nargs = [{args}]"
        ),
        &format!(
            "[env]\nHERD_TEST_MARK = \"{}\"\n\n[container]\nruntime = \"{}\"\nimage = \"{}\"\nmounts = [{}]\n{container}\n{more}",
            mark(c),
            b.engine.word(),
            image(),
            mounts.join(", ")
        ),
    );
}

/// The cluster's config with its one `[[nodes]]` table of every host made a table a node,
/// each with `lines(node)` (TOML lines of that node's) added; its path.
fn per_node(c: &Cluster, lines: impl Fn(usize) -> String) -> PathBuf {
    let path = c.tb.dir().join("cluster.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let all = format!("[[nodes]]\nhost = \"{}\"\n", c.hostlist());
    assert!(text.contains(&all), "{text}");
    let nodes: String = (0..c.tb.nodes().len())
        .map(|i| format!("[[nodes]]\nhost = \"{}\"\n{}\n", c.addr(i), lines(i)))
        .collect();
    std::fs::write(&path, text.replace(&all, &nodes)).unwrap();
    path
}

/// A directory of the testbed that every container sees.
fn shared(c: &Cluster) -> PathBuf {
    let dir = c.tb.dir().join("shared");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const FAST_RESTART: &str = "[restart]\nbackoff = \"1s\"\nbackoff_max = \"2s\"\ngrace_period = \"3s\"\n";

/// The containers the engine knows of, running or not, of the run `run_id` (herd names them
/// `herd-<config key>-<run id>-<attempt>-<node rank>`). podman's store is the machine's:
/// another run's containers, left by a test that failed, are not this one's.
fn containers(engine: &Engine, run_id: &str) -> Vec<String> {
    let of_run = |n: &String| n.starts_with("herd-") && n.contains(&format!("-{run_id}-"));
    engine.names().into_iter().filter(of_run).collect()
}

/// No container of run `run_id` on any node, and no process of the test's job.
#[track_caller]
fn assert_nothing_left(b: &Bed, run_id: &str) {
    assert_eq!(containers(&b.engine, run_id), Vec::<String>::new());
    assert_eq!(b.c.leftovers("HERD_TEST_MARK", &mark(&b.c)), vec![]);
}

/// The run's id, once herd has made its directory.
fn run_id(c: &Cluster) -> Option<String> {
    let dir = std::fs::read_dir(c.logs()).ok()?.flatten().map(|e| e.path()).find(|p| p.is_dir())?;
    Some(dir.file_name()?.to_string_lossy().into_owned())
}

/// The ranks (torchrun's workers: they have a LOCAL_RANK) of this test's job, on every node.
fn ranks(c: &Cluster) -> usize {
    let worker = |pid: &u32| {
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        env.split(|&b| b == 0).any(|e| e.starts_with(b"LOCAL_RANK="))
    };
    c.leftovers("HERD_TEST_MARK", &mark(c)).iter().filter(|(_, pid)| worker(pid)).count()
}

fn torchrun_runs_in_a_container_on_every_node_and_none_is_left(kind: Kind) {
    let b = bed(kind, 3);
    let c = &b.c;
    config(&b, "\"--steps\", \"3\"");
    let started_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let out = herd::run(c.tb.dir(), &["run"], LIMIT);
    out.assert_code(0);
    let results: Vec<&str> = out.stdout.lines().filter(|l| l.contains("result rank=")).collect();
    assert_eq!(results.len(), 6, "{out}");
    assert!(results.iter().all(|l| l.ends_with(" ok")), "{results:?}");
    // Each node's launcher ran in a container of its own, named after the run and node rank.
    let run = only_run_dir(&c.logs());
    let run_id = run.file_name().unwrap().to_string_lossy().to_string();
    let mut started: Vec<String> =
        b.engine.started_since(&started_at).into_iter().filter(|n| n.contains(&run_id)).collect();
    started.sort();
    let ends: Vec<&str> = started.iter().map(|n| &n[n.len() - 4..]).collect();
    assert_eq!(ends, ["-0-0", "-0-1", "-0-2"], "{started:?}");
    assert_nothing_left(&b, &run_id);
}

fn herd_killed_mid_run_leaves_no_container_and_no_process(kind: Kind) {
    let b = bed(kind, 3);
    let c = &b.c;
    config(&b, "\"--steps\", \"100000\", \"--sleep\", \"0.2\"");
    let mut running = herd::start(c.tb.dir(), &["run"], &[]);
    let started = |c: &Cluster| run_id(c).is_some_and(|id| containers(&b.engine, &id).len() == 3);
    assert!(running.until(LIMIT, || started(c)), "the containers did not start");
    let run_id = run_id(c).unwrap();
    assert!(running.until(LIMIT, || ranks(c) == 6), "the ranks did not start");
    let mark = mark(c);
    running.signal("KILL");
    let _ = running.wait(LIMIT);
    // Each agent sees herd's end (its stdin closes), stops the job, then removes the
    // container that the killed client left running (under conmon, or in the daemon).
    let clean = herd::wait_until(Duration::from_secs(60), || {
        containers(&b.engine, &run_id).is_empty() && c.leftovers("HERD_TEST_MARK", &mark).is_empty()
    });
    assert!(clean, "left: {:?} {:?}", containers(&b.engine, &run_id), c.leftovers("HERD_TEST_MARK", &mark));
}

/// The names of the containers of run `run_id` that the engine started since `since`, sorted, as
/// `ATTEMPT-NODE_RANK`.
fn attempts_started(engine: &Engine, since: &str, run_id: &str) -> Vec<String> {
    let mut started: Vec<String> = engine
        .started_since(since)
        .into_iter()
        .filter_map(|n| {
            n.strip_prefix("herd-")?.split_once(&format!("-{run_id}-")).map(|(_, rest)| rest.to_string())
        })
        .collect();
    started.sort();
    started
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// A rank killed in attempt 0 fails it; herd removes the attempt's containers, and attempt 1
/// runs in new ones and completes.
fn a_killed_rank_restarts_the_job_in_new_containers(kind: Kind) {
    let b = bed(kind, 3);
    let c = &b.c;
    config_with(
        &b,
        "\"--steps\", \"6\", \"--sleep\", \"0.3\", \"--die-rank\", \"3\", \"--fault-step\", \"2\"",
        "",
        FAST_RESTART,
    );
    let since = now_rfc3339();
    let out = herd::run(c.tb.dir(), &["run"], LIMIT);
    out.assert_code(0);
    let results: Vec<&str> = out.stdout.lines().filter(|l| l.contains("result rank=")).collect();
    assert_eq!(results.len(), 6, "{out}");
    let ev = herd::events(&only_run_dir(&c.logs()));
    let failed: Vec<_> = ev.iter().filter(|e| e["event"] == "attempt_failed").collect();
    assert_eq!(failed.len(), 1, "{ev:?}");
    assert_eq!(failed[0]["class"], "crash", "{:?}", failed[0]);
    assert_eq!(failed[0]["root_cause"]["rank"], 3, "{:?}", failed[0]);
    let run_id = only_run_dir(&c.logs()).file_name().unwrap().to_string_lossy().to_string();
    assert_eq!(attempts_started(&b.engine, &since, &run_id), ["0-0", "0-1", "0-2", "1-0", "1-1", "1-2"]);
    assert_nothing_left(&b, &run_id);
}

/// A bind mount whose source is missing: the engine exits 125 with its own words on every
/// node. That is a launch failure of the engine, not the training script's error (issue 39,
/// item 9): the run ends after one attempt (launch is not restarted by default), its root
/// cause is the engine's line, and nothing is left. (`--mount`, not a `mounts` entry: docker's
/// `-v` makes a missing source, as an empty directory owned by root.)
fn an_engines_own_error_is_a_launch_failure_in_its_words(kind: Kind) {
    let b = bed(kind, 2);
    let c = &b.c;
    let missing = "args = [\"--mount\", \"type=bind,source=/nonexistent/herd-qa,target=/qa\"]";
    config_with(&b, "\"--steps\", \"2\"", missing, FAST_RESTART);
    let out = herd::run(c.tb.dir(), &["run", "--no-preflight"], LIMIT);
    out.assert_code(1);
    let ev = herd::events(&only_run_dir(&c.logs()));
    let failed: Vec<_> = ev.iter().filter(|e| e["event"] == "attempt_failed").collect();
    assert_eq!(failed.len(), 1, "{ev:?}\n{out}");
    assert_eq!(failed[0]["class"], "launch", "{:?}", failed[0]);
    let line = failed[0]["root_cause"]["line"].as_str().unwrap_or_default();
    assert!(line.contains("/nonexistent/herd-qa"), "the engine's own words: {line:?}\n{out}");
    assert!(out.stderr.contains("exit 125 is the engine's own"), "{out}");
    let run_id = only_run_dir(&c.logs()).file_name().unwrap().to_string_lossy().to_string();
    assert_nothing_left(&b, &run_id);
}

/// A time limit's warning (SIGUSR1 to herd) reaches the ranks in their containers (not
/// torchrun, which it would kill): each one checkpoints and exits, the run ends as
/// `time-limit` (75), and no container or process is left.
fn a_time_limit_warning_reaches_the_ranks_in_their_containers(kind: Kind) {
    let b = bed(kind, 2);
    let c = &b.c;
    let ckpt = shared(c).join("ckpt");
    config(
        &b,
        &format!(
            "\"--steps\", \"100000\", \"--sleep\", \"0.2\", \"--save-dir\", \"{}\", \"--checkpoint-on\", \"SIGUSR1\"",
            ckpt.display()
        ),
    );
    let mut running = herd::start(c.tb.dir(), &["run"], &[]);
    // Past its first steps, every rank has its handler installed.
    assert!(running.until(LIMIT, || ckpt.join("step_3").exists()), "the ranks did not train");
    let run_id = run_id(c).unwrap();
    assert_eq!(containers(&b.engine, &run_id).len(), 2);
    running.signal("USR1");
    let out = running.wait(LIMIT);
    out.assert_code(75);
    let saved: Vec<&str> = out.stdout.lines().filter(|l| l.contains(" checkpointed at step ")).collect();
    assert_eq!(saved.len(), 4, "{out}");
    let step = saved[0].split(" checkpointed at step ").nth(1).unwrap().split(' ').next().unwrap();
    assert!(ckpt.join(format!("step_{step}")).exists(), "{saved:?}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(only_run_dir(&c.logs()).join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["status"], "time-limit", "{summary}");
    assert_nothing_left(&b, &run_id);
}

/// Ctrl-C stops the job in its containers: once herd has exited, no container and no process
/// of the run is left. Then `herd kill` removes a leftover container of this config, and only
/// that: another config's container is not touched.
fn ctrl_c_leaves_no_container_and_herd_kill_removes_only_the_configs(kind: Kind) {
    let b = bed(kind, 3);
    let c = &b.c;
    config(&b, "\"--steps\", \"100000\", \"--sleep\", \"0.2\"");
    let mut running = herd::start(c.tb.dir(), &["run"], &[]);
    assert!(running.until(LIMIT, || ranks(c) == 6), "the ranks did not start");
    let run_id = run_id(c).unwrap();
    running.signal("INT");
    running.wait(LIMIT).assert_code(130);
    assert_nothing_left(&b, &run_id);

    let ev = herd::events(&only_run_dir(&c.logs()));
    let key = ev[0]["config_key"].as_str().unwrap().to_string();
    let image = image();
    // On node 0 (docker), or in the machine's store, which every node sees (podman).
    let plant = |name: &str| {
        let out = b
            .engine
            .command(0)
            .args(["run", "-d", "--rm", "--network", "host", "--name", name, &image, "sleep", "300"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    // On the host's network, as herd's are: a container in a network namespace of its own,
    // started outside the nodes, is one whose namespace the nodes cannot see.
    let mine = format!("herd-{key}-20000101-000000-dead-0-1");
    let theirs = format!("herd-0123456789abcdef-20000101-000000-{}-0-1", c.tb.k());
    plant(&mine);
    plant(&theirs);
    let out = herd::run(c.tb.dir(), &["kill"], LIMIT);
    let there = |name: &str| b.engine.names().iter().any(|n| n == name);
    let (mine_left, theirs_left) = (there(&mine), there(&theirs));
    let _ = b.engine.command(0).args(["rm", "-f", &mine, &theirs]).output();
    out.assert_code(0);
    // podman: every node's sweep sees the machine's one store, and the first to list it
    // removes it; docker: node 0's sweep.
    assert!(out.stdout.contains(&format!("removed 1 container(s): {mine}")), "{out}");
    assert!(!mine_left, "{mine} is still there\n{out}");
    assert!(theirs_left && !out.stdout.contains(&theirs), "another config's container was removed\n{out}");
}

/// A node cut off mid-run is lost; its agent (its session ends with the link), or once the
/// link is back the next attempt's sweep, removes the container the cut left there; the job
/// completes, and nothing is left anywhere.
fn a_lost_node_leaves_no_container_once_it_is_back(kind: Kind) {
    let b = bed(kind, 3);
    let c = &b.c;
    config_with(&b, "\"--steps\", \"60\", \"--sleep\", \"0.2\", \"--retry-steps\", \"3\"", "", FAST_RESTART);
    let since = now_rfc3339();
    let mut running = herd::start(c.tb.dir(), &["run"], &[]);
    assert!(running.until(LIMIT, || ranks(c) == 6), "the ranks did not start");
    let run_id = run_id(c).unwrap();
    c.tb.link_down(2);
    let failed = herd::wait_until(LIMIT, || {
        herd::events(&only_run_dir(&c.logs())).iter().any(|e| e["event"] == "attempt_failed")
    });
    std::thread::sleep(Duration::from_secs(2));
    c.tb.link_up(2);
    assert!(failed, "the cut was not seen");
    let out = running.wait(LIMIT);
    out.assert_code(0);
    let ev = herd::events(&only_run_dir(&c.logs()));
    let f = ev.iter().find(|e| e["event"] == "attempt_failed").unwrap();
    assert_eq!(
        (f["class"].as_str(), f["root_cause"]["node_rank"].as_u64()),
        (Some("node-lost"), Some(2)),
        "{f}"
    );
    let started = attempts_started(&b.engine, &since, &run_id);
    assert!(started.starts_with(&["0-0".into(), "0-1".into(), "0-2".into()]), "{started:?}");
    assert_nothing_left(&b, &run_id);
}

/// herd's key of the config at `path` (`plan::config_key`: FNV-1a of its canonical path),
/// which names its containers.
fn config_key(path: &std::path::Path) -> String {
    let canonical = std::fs::canonicalize(path).unwrap();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canonical.as_os_str().as_encoded_bytes() {
        hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// A node whose `[env]` names its docker engine, not the one of its login's environment (a
/// rootless docker's socket): the run's job starts its containers there, and herd's sweeps,
/// the first attempt's and `herd kill`'s, look for leftovers there too, and remove them. They
/// used the login's engine, and a leftover stayed for ever.
#[test]
fn a_nodes_own_docker_host_is_where_its_job_runs_and_its_leftovers_are_removed() {
    let c = Cluster::new(2);
    let daemons = Daemons::start_on(&c.tb, &image(), &[0, 1], "own.sock");
    let b = Bed { _sweeper: None, engine: Engine::Docker(daemons), c };
    let c = &b.c;
    let Engine::Docker(d) = &b.engine else { unreachable!() };
    config(&b, "\"--steps\", \"2\"");
    let path = per_node(c, |i| format!("env.DOCKER_HOST = \"{}\"\n", d.host(i)));
    let key = config_key(&path);
    let image = image();
    let plant = |name: &str| {
        let out = d.run(0, &["run", "-d", "--network", "host", "--name", name, &image, "sleep", "300"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    let mine = format!("herd-{key}-20000101-000000-dead-0-1");
    let theirs = format!("herd-0123456789abcdef-20000101-000000-{}-0-1", c.tb.k());
    plant(&mine);
    plant(&theirs);

    let since = now_rfc3339();
    let out = herd::run(c.tb.dir(), &["run"], LIMIT);
    out.assert_code(0);
    let run_id = only_run_dir(&c.logs()).file_name().unwrap().to_string_lossy().to_string();
    assert_eq!(attempts_started(&b.engine, &since, &run_id), ["0-0", "0-1"], "{out}");
    let ev = herd::events(&only_run_dir(&c.logs()));
    let removed: Vec<_> = ev.iter().filter(|e| e["event"] == "containers_removed").collect();
    assert_eq!(removed.len(), 1, "{removed:?}\n{out}");
    assert_eq!(
        (removed[0]["node_rank"].as_u64(), removed[0]["names"][0].as_str()),
        (Some(0), Some(mine.as_str()))
    );

    plant(&mine);
    let out = herd::run(c.tb.dir(), &["kill"], LIMIT);
    out.assert_code(0);
    assert!(out.stdout.contains(&format!("removed 1 container(s): {mine}")), "{out}");
    let names = b.engine.names();
    let _ = d.run(0, &["rm", "-f", &theirs]);
    assert_eq!(names, [theirs], "another config's container was removed, or this one's left");
    assert_nothing_left(&b, &run_id);
}

/// A podman store of its own (vfs, under `dir`), for a node that must see other images than
/// the machine's: `CONTAINERS_STORAGE_CONF` in its env.
fn store(dir: &std::path::Path, name: &str) -> PathBuf {
    let conf = dir.join(format!("{name}.conf"));
    let root = dir.join(name);
    std::fs::write(
        &conf,
        format!(
            "[storage]\ndriver = \"vfs\"\ngraphroot = \"{0}/root\"\nrunroot = \"{0}/run\"\n",
            root.display()
        ),
    )
    .unwrap();
    conf
}

/// doctor on the real engine: node 1's engine does not have the image, node 2's has another
/// build of the same name (which does not start: it has no shell); node 0 passes every
/// container check, its trial container included. Then options the engine refuses (podman:
/// `--shm-size` with the host's IPC; docker: a memory limit under its minimum) fail the trial
/// on every node that has the image.
fn doctor_names_a_missing_image_another_build_and_refused_options(kind: Kind) {
    // docker: only node 0's daemon gets the image.
    let b = bed_with(kind, 3, Some(&[0]));
    let c = &b.c;
    let image = image();
    let build = c.tb.dir().join("other-build");
    std::fs::create_dir_all(&build).unwrap();
    std::fs::write(build.join("build"), "another build\n").unwrap();
    let tar = format!("tar -C {} -c .", build.display());
    // podman: nodes 1 and 2 see stores of their own (`CONTAINERS_STORAGE_CONF` in their env);
    // docker: each node's daemon is its own already.
    let (import, envs) = match &b.engine {
        Engine::Podman => {
            let empty = store(c.tb.dir(), "empty");
            let other = store(c.tb.dir(), "other");
            let import =
                format!("{tar} | CONTAINERS_STORAGE_CONF={} podman import -q - {image}", other.display());
            let env =
                |conf: &std::path::Path| format!("env.CONTAINERS_STORAGE_CONF = \"{}\"\n", conf.display());
            (import, [String::new(), env(&empty), env(&other)])
        }
        Engine::Docker(d) => {
            let import = format!("{tar} | DOCKER_HOST={} docker import - {image}", d.host(2));
            (import, Default::default())
        }
    };
    let out = Command::new("sh").arg("-c").arg(&import).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let with_nodes = |container: &str| {
        config_with(&b, "\"--steps\", \"2\"", container, "");
        per_node(c, |i| envs[i].clone());
    };
    with_nodes("");
    let (out, json) = doctor_json(c);
    out.assert_code(3);
    let check = |rank: usize, name: &str| check_of(&json, rank, name);
    assert_eq!(
        failures(&json),
        [(1, "image".into()), (2, "container".into()), (2, "image-build".into())],
        "{out}"
    );
    for name in ["runtime", "image", "container", "image-build"] {
        assert_eq!(check(0, name)["status"], "pass", "{name}: {}", check(0, name));
    }
    // python3: the one `setup` puts first on PATH, the venv's, mounted.
    assert_eq!(
        check(0, "container")["detail"],
        "starts; torchrun and python3 found in it, and torch imports"
    );
    assert_eq!(check(1, "image")["detail"], format!("{image} is not on this node"));
    assert!(check(2, "image-build")["detail"].as_str().unwrap().contains("another build of the same name"));

    with_nodes(match kind {
        Kind::Podman => "args = [\"--ipc\", \"host\", \"--shm-size\", \"1g\"]",
        Kind::Docker => "args = [\"--memory\", \"1k\"]",
    });
    let (out, json) = doctor_json(c);
    out.assert_code(3);
    let refused = check_of(&json, 0, "container");
    let detail = refused["detail"].as_str().unwrap_or_default();
    assert!(detail.starts_with(&format!("{} run exited 125: ", b.engine.word())), "{detail}\n{out}");
    // No trial container is left (`--rm`), nor a pull started for node 1.
    let left: Vec<String> = b.engine.names().into_iter().filter(|n| n.contains("-doctor-")).collect();
    assert_eq!(left, Vec::<String>::new());
    assert!(refused["fix"].as_str().unwrap_or_default().contains("container.args"), "{refused}");
    assert_eq!(
        failures(&json),
        [(0, "container".into()), (1, "image".into()), (2, "container".into()), (2, "image-build".into())],
        "{out}"
    );
}

/// Issue 39: a venv whose python3 links outside what the container mounts (a pyenv under
/// the home directory, here the testbed's) passed the trial ("torchrun and python3 found in
/// it"), and every rank then failed at once (`torchrun: not found`, 127). The trial starts the
/// launcher's interpreter: the `#!` path that is not there is named. So is a launcher whose
/// Python (the image's own) has no torch.
fn doctor_names_a_launchers_missing_interpreter_and_a_python_without_torch(kind: Kind) {
    let b = bed(kind, 1);
    let c = &b.c;
    config_with(&b, "\"--steps\", \"2\"", "", "");
    let shared = shared(c);
    let pyenv = c.tb.dir().join("pyenv/bin");
    std::fs::create_dir_all(&pyenv).unwrap();
    let real = std::fs::canonicalize(c.venv.join("bin/python3")).unwrap();
    std::os::unix::fs::symlink(&real, pyenv.join("python3")).unwrap();
    let launcher = |bin: &std::path::Path, interpreter: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(bin).unwrap();
        let path = bin.join("torchrun");
        std::fs::write(&path, format!("#!{}\nimport sys\n", interpreter.display())).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    let config = c.tb.dir().join("cluster.toml");
    let activate = format!("setup = \"source {}/bin/activate\"", c.venv.display());
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains(&activate), "{text}");
    let with_path = |bin: &std::path::Path| {
        std::fs::write(
            &config,
            text.replace(&activate, &format!("setup = \"PATH={}:$PATH\"", bin.display())),
        )
        .unwrap();
    };
    let container = |out: &herd::Finished, json: &serde_json::Value| {
        out.assert_code(3);
        assert_eq!(failures(json), [(0, "container".into())], "{out}");
        check_of(json, 0, "container")
    };

    // The venv the container sees, its python3 a link into the pyenv it does not.
    let venv = shared.join("venv/bin");
    std::fs::create_dir_all(&venv).unwrap();
    std::os::unix::fs::symlink(pyenv.join("python3"), venv.join("python3")).unwrap();
    launcher(&venv, &venv.join("python3"));
    with_path(&venv);
    let (out, json) = doctor_json(c);
    let check = container(&out, &json);
    let want = format!(
        "{engine} run exited 126: herd: torchrun's interpreter {venv}/python3 (its #! line, in {venv}/torchrun) is a link to a file that is not in the container: mount it, or install it in the image",
        engine = b.engine.word(),
        venv = venv.display()
    );
    assert_eq!(check["detail"], want.as_str(), "{out}");
    assert!(check["fix"].as_str().unwrap_or_default().contains("pyenv or conda"), "{check}");

    // A launcher run by the image's own python3, which has no torch.
    let bare = shared.join("bare/bin");
    launcher(&bare, std::path::Path::new("/usr/bin/python3"));
    with_path(&bare);
    let (out, json) = doctor_json(c);
    let check = container(&out, &json);
    assert_eq!(
        check["detail"],
        format!(
            "{} run exited 3: herd: /usr/bin/python3 (the Python torchrun runs) cannot import torch in the container: ModuleNotFoundError: No module named 'torch'",
            b.engine.word()
        ),
        "{out}"
    );
}

/// Node `rank`'s check `name` in doctor's JSON (null when it has none).
fn check_of(json: &serde_json::Value, rank: usize, name: &str) -> serde_json::Value {
    let checks = json["nodes"][rank]["checks"].as_array().unwrap();
    checks.iter().find(|c| c["name"] == name).cloned().unwrap_or_default()
}

fn doctor_json(c: &Cluster) -> (herd::Finished, serde_json::Value) {
    let out = herd::run(c.tb.dir(), &["doctor", "--json"], LIMIT);
    let json = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("doctor --json: {e}\n{out}"));
    (out, json)
}

/// `(node rank, check name)` of every failed check.
fn failures(json: &serde_json::Value) -> Vec<(u64, String)> {
    let nodes = json["nodes"].as_array().unwrap();
    nodes
        .iter()
        .flat_map(|n| {
            let failed = n["checks"].as_array().unwrap().iter().filter(|c| c["status"] == "fail");
            failed.map(move |c| (n["node_rank"].as_u64().unwrap(), c["name"].as_str().unwrap().to_string()))
        })
        .collect()
}

/// Each test above, on each engine: `engines::podman::NAME` and `engines::docker::NAME`.
macro_rules! on_each_engine {
    ($($name:ident),* $(,)?) => {
        mod podman {
            $(#[test]
            fn $name() {
                super::$name(super::Kind::Podman)
            })*
        }
        mod docker {
            $(#[test]
            fn $name() {
                super::$name(super::Kind::Docker)
            })*
        }
    };
}

on_each_engine!(
    torchrun_runs_in_a_container_on_every_node_and_none_is_left,
    herd_killed_mid_run_leaves_no_container_and_no_process,
    a_killed_rank_restarts_the_job_in_new_containers,
    an_engines_own_error_is_a_launch_failure_in_its_words,
    a_time_limit_warning_reaches_the_ranks_in_their_containers,
    ctrl_c_leaves_no_container_and_herd_kill_removes_only_the_configs,
    a_lost_node_leaves_no_container_once_it_is_back,
    doctor_names_a_missing_image_another_build_and_refused_options,
    doctor_names_a_launchers_missing_interpreter_and_a_python_without_torch,
);
