//! `[container]` on a real engine (issue 28): rootful podman with runc on every node of the
//! testbed, and an image built here (scripts/container-image.sh: Debian bookworm with
//! python3). The torch virtualenv is mounted from the host, with the interpreter it points
//! to. torchrun 3 × 2 over gloo runs in a container on each node, and whatever ends the run
//! leaves no container and no process on any node.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::support::cluster::{Cluster, LIMIT};
use crate::support::herd::{self, only_run_dir};

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

/// Removes, when the test ends, the containers of the runs in the test's logs that are still
/// in podman's store: a test that fails mid-run has its testbed torn down under its agents,
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
        let left: Vec<String> = runs.iter().flat_map(|run| containers(run)).collect();
        if !left.is_empty() {
            let _ = Command::new("podman").args(["rm", "-f", "-t", "0"]).args(&left).output();
        }
    }
}

/// A cluster of `n` nodes, and what removes its runs' containers when the test ends.
fn cluster(n: usize) -> (Cluster, Sweeper) {
    let c = Cluster::new(n);
    let sweeper = Sweeper(c.logs());
    (c, sweeper)
}

/// The [env] marker that finds every job process of the test, on every node.
fn mark(c: &Cluster) -> String {
    format!("podman-{}", c.tb.k())
}

/// torchrun 3 × 2 in containers: `args` for examples/allreduce.py.
fn config(c: &Cluster, args: &str) {
    config_with(c, args, "", "");
}

/// `config`, with `container` lines added to `[container]` and `more` (tables) after it. The
/// containers see the testbed's `shared` directory (see [`shared`]) at the same path.
fn config_with(c: &Cluster, args: &str, container: &str, more: &str) {
    let shared = shared(c);
    let mut mounts = venv_mounts(&c.venv);
    mounts.push(format!("{0}:{0}", shared.display()));
    let mounts: Vec<String> = mounts.iter().map(|m| format!("{m:?}")).collect();
    c.write_config(
        &format!(
            "launcher = \"torchrun\"\nscript = \"examples/allreduce.py\"\nnproc_per_node = 2\nargs = [{args}]"
        ),
        &format!(
            "[env]\nHERD_TEST_MARK = \"{}\"\n\n[container]\nruntime = \"podman\"\nimage = \"{}\"\nmounts = [{}]\n{container}\n{more}",
            mark(c),
            image(),
            mounts.join(", ")
        ),
    );
}

/// A directory of the testbed that every container sees.
fn shared(c: &Cluster) -> PathBuf {
    let dir = c.tb.dir().join("shared");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const FAST_RESTART: &str = "[restart]\nbackoff = \"1s\"\nbackoff_max = \"2s\"\ngrace_period = \"3s\"\n";

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
    let (c, _sweeper) = cluster(3);
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
    let (c, _sweeper) = cluster(3);
    config(&c, "\"--steps\", \"100000\", \"--sleep\", \"0.2\"");
    let mut running = herd::start(c.tb.dir(), &["run"], &[]);
    let started = |c: &Cluster| run_id(c).is_some_and(|id| containers(&id).len() == 3);
    assert!(running.until(LIMIT, || started(&c)), "the containers did not start");
    let run_id = run_id(&c).unwrap();
    assert!(running.until(LIMIT, || ranks(&c) == 6), "the ranks did not start");
    let mark = mark(&c);
    running.signal("KILL");
    let _ = running.wait(LIMIT);
    // Each agent sees herd's end (its stdin closes), stops the job, then removes the
    // container that the killed client left under conmon.
    let clean = herd::wait_until(Duration::from_secs(60), || {
        containers(&run_id).is_empty() && c.leftovers("HERD_TEST_MARK", &mark).is_empty()
    });
    assert!(clean, "left: {:?} {:?}", containers(&run_id), c.leftovers("HERD_TEST_MARK", &mark));
}

/// The names of the containers of run `run_id` that podman started since `since`, sorted, as
/// `ATTEMPT-NODE_RANK`.
fn attempts_started(since: &str, run_id: &str) -> Vec<String> {
    let mut started: Vec<String> = started_since(since)
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
#[test]
fn a_killed_rank_restarts_the_job_in_new_containers() {
    let (c, _sweeper) = cluster(3);
    config_with(
        &c,
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
    assert_eq!(attempts_started(&since, &run_id), ["0-0", "0-1", "0-2", "1-0", "1-1", "1-2"]);
    assert_eq!(containers(&run_id), Vec::<String>::new());
    assert_eq!(c.leftovers("HERD_TEST_MARK", &mark(&c)), vec![]);
}

/// A mount whose source is missing: podman exits 125 with its own words on every node. That
/// is a launch failure of the engine, not the training script's error (issue 39, item 9): the
/// run ends after one attempt (launch is not restarted by default), its root cause is
/// podman's line, and nothing is left.
#[test]
fn an_engines_own_error_is_a_launch_failure_in_its_words() {
    let (c, _sweeper) = cluster(2);
    config_with(&c, "\"--steps\", \"2\"", "", FAST_RESTART);
    let toml = c.tb.dir().join("cluster.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    let text = text.replacen("mounts = [", "mounts = [\"/nonexistent/herd-qa:/qa\", ", 1);
    std::fs::write(&toml, text).unwrap();
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
    assert_eq!(containers(&run_id), Vec::<String>::new());
    assert_eq!(c.leftovers("HERD_TEST_MARK", &mark(&c)), vec![]);
}

/// A time limit's warning (SIGUSR1 to herd) reaches the ranks in their containers (not
/// torchrun, which it would kill): each one checkpoints and exits, the run ends as
/// `time-limit` (75), and no container or process is left.
#[test]
fn a_time_limit_warning_reaches_the_ranks_in_their_containers() {
    let (c, _sweeper) = cluster(2);
    let ckpt = shared(&c).join("ckpt");
    config(
        &c,
        &format!(
            "\"--steps\", \"100000\", \"--sleep\", \"0.2\", \"--save-dir\", \"{}\", \"--checkpoint-on\", \"SIGUSR1\"",
            ckpt.display()
        ),
    );
    let mut running = herd::start(c.tb.dir(), &["run"], &[]);
    // Past its first steps, every rank has its handler installed.
    assert!(running.until(LIMIT, || ckpt.join("step_3").exists()), "the ranks did not train");
    let run_id = run_id(&c).unwrap();
    assert_eq!(containers(&run_id).len(), 2);
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
    assert_eq!(containers(&run_id), Vec::<String>::new());
    assert_eq!(c.leftovers("HERD_TEST_MARK", &mark(&c)), vec![]);
}

/// Ctrl-C stops the job in its containers: once herd has exited, no container and no process
/// of the run is left. Then `herd kill` removes a leftover container of this config, and only
/// that: another config's container is not touched.
#[test]
fn ctrl_c_leaves_no_container_and_herd_kill_removes_only_the_configs() {
    let (c, _sweeper) = cluster(3);
    config(&c, "\"--steps\", \"100000\", \"--sleep\", \"0.2\"");
    let mut running = herd::start(c.tb.dir(), &["run"], &[]);
    assert!(running.until(LIMIT, || ranks(&c) == 6), "the ranks did not start");
    let run_id = run_id(&c).unwrap();
    running.signal("INT");
    running.wait(LIMIT).assert_code(130);
    assert_eq!(containers(&run_id), Vec::<String>::new());
    assert_eq!(c.leftovers("HERD_TEST_MARK", &mark(&c)), vec![]);

    let ev = herd::events(&only_run_dir(&c.logs()));
    let key = ev[0]["config_key"].as_str().unwrap().to_string();
    let image = image();
    let plant = |name: &str| {
        let out = Command::new("podman")
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
    let there = |name: &str| {
        let out = Command::new("podman").args(["ps", "-a", "--format", "{{.Names}}"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).lines().any(|n| n == name)
    };
    let (mine_left, theirs_left) = (there(&mine), there(&theirs));
    let _ = Command::new("podman").args(["rm", "-f", "-t", "0", &mine, &theirs]).output();
    out.assert_code(0);
    // Every node's sweep sees the machine's one store: the first to list it removes it.
    assert!(out.stdout.contains(&format!("removed 1 container(s): {mine}")), "{out}");
    assert!(!mine_left, "{mine} is still there\n{out}");
    assert!(theirs_left && !out.stdout.contains(&theirs), "another config's container was removed\n{out}");
}

/// A node cut off mid-run is lost; once its link is back, the next attempt's sweep removes the
/// container the cut left there, the job completes, and nothing is left anywhere.
#[test]
fn a_lost_node_leaves_no_container_once_it_is_back() {
    let (c, _sweeper) = cluster(3);
    config_with(&c, "\"--steps\", \"60\", \"--sleep\", \"0.2\", \"--retry-steps\", \"3\"", "", FAST_RESTART);
    let since = now_rfc3339();
    let mut running = herd::start(c.tb.dir(), &["run"], &[]);
    assert!(running.until(LIMIT, || ranks(&c) == 6), "the ranks did not start");
    let run_id = run_id(&c).unwrap();
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
    let started = attempts_started(&since, &run_id);
    assert!(started.starts_with(&["0-0".into(), "0-1".into(), "0-2".into()]), "{started:?}");
    assert_eq!(containers(&run_id), Vec::<String>::new());
    assert_eq!(c.leftovers("HERD_TEST_MARK", &mark(&c)), vec![]);
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
/// `--shm-size` with the host's IPC) fail the trial on every node that has the image.
#[test]
fn doctor_names_a_missing_image_another_build_and_refused_options() {
    let (c, _sweeper) = cluster(3);
    let image = image();
    let empty = store(c.tb.dir(), "empty");
    let other = store(c.tb.dir(), "other");
    let build = c.tb.dir().join("other-build");
    std::fs::create_dir_all(&build).unwrap();
    std::fs::write(build.join("build"), "another build\n").unwrap();
    let import = format!(
        "tar -C {} -c . | CONTAINERS_STORAGE_CONF={} podman import -q - {image}",
        build.display(),
        other.display()
    );
    let out = Command::new("sh").arg("-c").arg(&import).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let nodes: String = (0..3)
        .map(|i| {
            let env = match i {
                1 => format!("env.CONTAINERS_STORAGE_CONF = \"{}\"\n", empty.display()),
                2 => format!("env.CONTAINERS_STORAGE_CONF = \"{}\"\n", other.display()),
                _ => String::new(),
            };
            format!("[[nodes]]\nhost = \"{}\"\n{env}\n", c.addr(i))
        })
        .collect();
    let with_nodes = |container: &str| {
        config_with(&c, "\"--steps\", \"2\"", container, "");
        let path = c.tb.dir().join("cluster.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let all = format!("[[nodes]]\nhost = \"{}\"\n", c.hostlist());
        assert!(text.contains(&all));
        std::fs::write(&path, text.replace(&all, &nodes)).unwrap();
    };
    with_nodes("");
    let (out, json) = doctor_json(&c);
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

    with_nodes("args = [\"--ipc\", \"host\", \"--shm-size\", \"1g\"]");
    let (out, json) = doctor_json(&c);
    out.assert_code(3);
    let refused = check_of(&json, 0, "container");
    let detail = refused["detail"].as_str().unwrap_or_default();
    assert!(detail.starts_with("podman run exited 125: "), "{detail}\n{out}");
    // No trial container is left (`--rm`), nor a pull started for node 1.
    let all = Command::new("podman").args(["ps", "-a", "--format", "{{.Names}}"]).output().unwrap();
    let left: Vec<String> = String::from_utf8_lossy(&all.stdout)
        .lines()
        .filter(|n| n.contains("-doctor-"))
        .map(String::from)
        .collect();
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
#[test]
fn doctor_names_a_launchers_missing_interpreter_and_a_python_without_torch() {
    let (c, _sweeper) = cluster(1);
    config_with(&c, "\"--steps\", \"2\"", "", "");
    let shared = shared(&c);
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
    let (out, json) = doctor_json(&c);
    let check = container(&out, &json);
    let want = format!(
        "podman run exited 126: herd: torchrun's interpreter {0}/python3 (its #! line, in {0}/torchrun) is a link to a file that is not in the container: mount it, or install it in the image",
        venv.display()
    );
    assert_eq!(check["detail"], want.as_str(), "{out}");
    assert!(check["fix"].as_str().unwrap_or_default().contains("pyenv or conda"), "{check}");

    // A launcher run by the image's own python3, which has no torch.
    let bare = shared.join("bare/bin");
    launcher(&bare, std::path::Path::new("/usr/bin/python3"));
    with_path(&bare);
    let (out, json) = doctor_json(&c);
    let check = container(&out, &json);
    assert_eq!(
        check["detail"],
        "podman run exited 3: herd: /usr/bin/python3 (the Python torchrun runs) cannot import torch in the container: ModuleNotFoundError: No module named 'torch'",
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
