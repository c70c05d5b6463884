//! `[container]` on a real engine (issue 28): rootful podman with runc on every node of the
//! testbed, and an image built here (scripts/container-image.sh: Debian bookworm with
//! python3). The torch virtualenv is mounted from the host, with the interpreter it points
//! to. torchrun 3 × 2 over gloo runs in a container on each node, and whatever ends the run
//! leaves no container and no process on any node.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use support::cluster::{Cluster, LIMIT};
use support::herd::{self, only_run_dir};

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

/// The [env] marker that finds every job process of the test, on every node.
fn mark(c: &Cluster) -> String {
    format!("podman-{}", c.tb.k())
}

/// torchrun 3 × 2 in containers: `args` for examples/allreduce.py.
fn config(c: &Cluster, args: &str) {
    let mounts: Vec<String> = venv_mounts(&c.venv).iter().map(|m| format!("{m:?}")).collect();
    c.write_config(
        &format!(
            "launcher = \"torchrun\"\nscript = \"examples/allreduce.py\"\nnproc_per_node = 2\nargs = [{args}]"
        ),
        &format!(
            "[env]\nHERD_TEST_MARK = \"{}\"\n\n[container]\nruntime = \"podman\"\nimage = \"{}\"\nmounts = [{}]\n",
            mark(c),
            image(),
            mounts.join(", ")
        ),
    );
}

/// The names of the containers podman started since `since` (RFC 3339), from its events.
fn started_since(since: &str) -> Vec<String> {
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

/// The containers podman knows of, running or not, of the run `run_id` (herd names them
/// `herd-<config key>-<run id>-<attempt>-<node rank>`). podman's store is the machine's:
/// another run's containers, left by a test that failed, are not this one's.
fn containers(run_id: &str) -> Vec<String> {
    let out = Command::new("podman").args(["ps", "-a", "--format", "{{.Names}}"]).output().unwrap();
    let of_run = |n: &&str| n.starts_with("herd-") && n.contains(&format!("-{run_id}-"));
    String::from_utf8_lossy(&out.stdout).lines().filter(of_run).map(String::from).collect()
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

#[test]
fn torchrun_runs_in_a_container_on_every_node_and_none_is_left() {
    let c = Cluster::new(3);
    config(&c, "\"--steps\", \"3\"");
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
        started_since(&started_at).into_iter().filter(|n| n.contains(&run_id)).collect();
    started.sort();
    let ends: Vec<&str> = started.iter().map(|n| &n[n.len() - 4..]).collect();
    assert_eq!(ends, ["-0-0", "-0-1", "-0-2"], "{started:?}");
    assert_eq!(containers(&run_id), Vec::<String>::new());
    assert_eq!(c.leftovers("HERD_TEST_MARK", &mark(&c)), vec![]);
}

#[test]
fn herd_killed_mid_run_leaves_no_container_and_no_process() {
    let c = Cluster::new(3);
    config(&c, "\"--steps\", \"100000\", \"--sleep\", \"0.2\"");
    let mut running = herd::start(c.tb.dir(), &["run"], &[]);
    let started = |c: &Cluster| run_id(c).is_some_and(|id| containers(&id).len() == 3);
    assert!(running.until(LIMIT, || started(&c)), "the containers did not start");
    let run_id = run_id(&c).unwrap();
    assert!(running.until(LIMIT, || ranks(&c) == 6), "the ranks did not start");
    let mark = mark(&c);
    running.signal("KILL");
    let _ = running.wait(Duration::from_secs(10));
    // Each agent sees herd's end (its stdin closes), stops the job, then removes the
    // container that the killed client left under conmon.
    let clean = herd::wait_until(Duration::from_secs(60), || {
        containers(&run_id).is_empty() && c.leftovers("HERD_TEST_MARK", &mark).is_empty()
    });
    assert!(clean, "left: {:?} {:?}", containers(&run_id), c.leftovers("HERD_TEST_MARK", &mark));
}
