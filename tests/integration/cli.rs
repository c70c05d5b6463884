//! The command line without any cluster: config errors, plan output, help. Nothing here
//! opens a connection.

use std::path::Path;
use std::time::Duration;

use crate::support::herd;

const LIMIT: Duration = Duration::from_secs(30);

fn write(dir: &Path, text: &str) {
    std::fs::write(dir.join("cluster.toml"), text).unwrap();
}

const GOOD: &str = r#"
[ssh]
user = "ml"

[[nodes]]
host = "gpu-[01-03]"

[[nodes]]
host = "cpu-9"
nproc = 1
env = { NCCL_IB_HCA = "mlx5_0" }

[job]
launcher = "torchrun"
script = "train.py"
args = ["--config", "cfg.yaml"]
workdir = "/shared/project"
nproc_per_node = 4
setup = "source /opt/venv/bin/activate"
forward_env = ["WANDB_API_KEY", "HF_*", "NOT_SET_ANYWHERE"]

[env]
NCCL_DEBUG = "WARN"

[rendezvous]
master = "gpu-02"
interface = "eth0"
"#;

/// Each bad file exits 2 before contacting anything (every host here is unresolvable, so a
/// connection attempt would show up as a different error and exit code) and names the spot.
#[test]
fn bad_configs_exit_2_with_the_location() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "unknown key",
            "[[nodes]]\nhost = \"a\"\n[job]\nscript = \"t.py\"\nscirpt = 1\n",
            "cluster.toml:5:1",
        ),
        (
            "duplicate host",
            "[[nodes]]\nhost = \"a[1-2]\"\n[[nodes]]\nhost = \"a2\"\n[job]\nscript = \"t.py\"\n",
            "duplicate host \"a2\"",
        ),
        ("empty nodes", "nodes = []\n[job]\nscript = \"t.py\"\n", "cluster.toml:1:9"),
        ("nproc < 1", "[[nodes]]\nhost = \"a\"\nnproc = 0\n[job]\nscript = \"t.py\"\n", "cluster.toml:3:9"),
        (
            "unknown launcher",
            "[[nodes]]\nhost = \"a\"\n[job]\nscript = \"t.py\"\nlauncher = \"mpirun\"\n",
            "cluster.toml:5:12",
        ),
        ("descending range", "[[nodes]]\nhost = \"n[3-1]\"\n[job]\nscript = \"t.py\"\n", "cluster.toml:2:8"),
        ("unclosed bracket", "[[nodes]]\nhost = \"n[1-\"\n[job]\nscript = \"t.py\"\n", "cluster.toml:2:8"),
        ("not a number", "[[nodes]]\nhost = \"n[x]\"\n[job]\nscript = \"t.py\"\n", "cluster.toml:2:8"),
        (
            "option injection",
            "[[nodes]]\nhost = \"-oProxyCommand=x\"\n[job]\nscript = \"t.py\"\n",
            "cluster.toml:2:8",
        ),
        (
            "shell metacharacters",
            "[[nodes]]\nhost = \"a;reboot\"\n[job]\nscript = \"t.py\"\n",
            "cluster.toml:2:8",
        ),
        ("whitespace", "[[nodes]]\nhost = \"a b\"\n[job]\nscript = \"t.py\"\n", "cluster.toml:2:8"),
        (
            "master not a node",
            "[[nodes]]\nhost = \"a\"\n[job]\nscript = \"t.py\"\n[rendezvous]\nmaster = \"b\"\n",
            "cluster.toml:6:10",
        ),
        (
            "port out of range",
            "[[nodes]]\nhost = \"a\"\n[job]\nscript = \"t.py\"\n[rendezvous]\nport = 70000\n",
            "cluster.toml:6:8",
        ),
        ("syntax error", "[[nodes]\nhost = \"a\"\n", "cluster.toml:1:"),
        (
            "unknown container runtime",
            "[[nodes]]\nhost = \"a\"\n[job]\nscript = \"t.py\"\n[container]\nimage = \"i\"\nruntime = \"lxc\"\n",
            "cluster.toml:7:11",
        ),
        (
            "reserved env",
            "[[nodes]]\nhost = \"a\"\n[job]\nscript = \"t.py\"\n[env]\nMASTER_PORT = \"1\"\n",
            "MASTER_PORT is set by herd",
        ),
    ];
    for (what, text, needle) in cases {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), text);
        for cmd in ["plan", "run"] {
            let out = herd::run(dir.path(), &[cmd], LIMIT);
            assert_eq!(out.code, Some(2), "{what}: herd {cmd} exited {:?}\n{out}", out.code);
            assert!(out.stderr.contains(needle), "{what}: herd {cmd}: {needle:?} not in\n{}", out.stderr);
            assert!(out.stdout.is_empty(), "{what}: nothing on stdout\n{out}");
            assert!(!dir.path().join("herd-logs").exists(), "{what}: herd {cmd} started a run");
        }
    }
}

/// herd logs in with the named key only: a missing key is an error before any connection,
/// never a silent fallback to another key. (The hosts are unresolvable: a connection attempt
/// would show up as exit 3.)
#[test]
fn a_missing_identity_file_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "[ssh]\nidentity_file = \"~/.ssh/herd-no-such-key\"\n[[nodes]]\nhost = \"gpu-[01-02]\"\n[job]\nscript = \"t.py\"\n",
    );
    for cmd in [&["run"][..], &["doctor"], &["kill"], &["exec", "--", "true"]] {
        let out = herd::run(dir.path(), cmd, LIMIT);
        out.assert_code(2);
        assert!(
            out.stderr.contains("ssh.identity_file ~/.ssh/herd-no-such-key: No such file or directory"),
            "herd {cmd:?}\n{out}"
        );
        assert!(!dir.path().join("herd-logs").exists(), "herd {cmd:?} started a run");
    }
}

/// A hard limit on open files too low for the node count stops every command that reaches
/// nodes before any connection (the hosts are unresolvable: an attempt would be exit 3), with
/// the count it needs, the limit and the fix. Under the same limit, 3 nodes are not refused.
#[test]
fn a_hard_open_file_limit_too_low_for_the_nodes_exits_2_with_the_numbers() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "[[nodes]]\nhost = \"gpu-[01-10]\"\n[job]\nscript = \"t.py\"\n");
    let needed = ::herd::limits::needed(10);
    for cmd in [&["run"][..], &["doctor"], &["kill"], &["exec", "--", "true"], &["stacks"]] {
        let out = herd::start_under(&["prlimit", "--nofile=100:100", "--"], dir.path(), cmd, &[]).wait(LIMIT);
        out.assert_code(2);
        for part in [
            format!("10 nodes need about {needed} open files"),
            "hard limit is 100".to_string(),
            format!("ulimit -Hn {needed}"),
            "/etc/security/limits.conf".to_string(),
        ] {
            assert!(out.stderr.contains(&part), "herd {cmd:?}: {part:?} missing\n{out}");
        }
        assert!(!dir.path().join("herd-logs").exists(), "herd {cmd:?} started a run");
    }
    // 3 nodes fit: herd goes on to its next check (a missing key, so that it contacts nothing).
    write(
        dir.path(),
        "[ssh]\nidentity_file = \"~/.ssh/herd-no-such-key\"\n[[nodes]]\nhost = \"gpu-[01-03]\"\n\
         [job]\nscript = \"t.py\"\n",
    );
    let out =
        herd::start_under(&["prlimit", "--nofile=100:100", "--"], dir.path(), &["doctor"], &[]).wait(LIMIT);
    out.assert_code(2);
    assert!(out.stderr.contains("ssh.identity_file") && !out.stderr.contains("open files"), "{out}");
}

/// herd raises its own soft open-file limit, but the job it starts gets the one herd was
/// started with (here through a local node; Slurm's srun and the hooks are given it too).
#[test]
fn the_job_gets_the_open_file_limit_herd_was_started_with() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "[[nodes]]\nhost = \"localhost\"\n[job]\nlauncher = \"command\"\nscript = \"sh\"\n\
         args = [\"-c\", \"echo limits=$(ulimit -Sn):$(ulimit -Hn)\"]\n",
    );
    let out = herd::start_under(
        &["prlimit", "--nofile=1000:4096", "--"],
        dir.path(),
        &["run", "--no-preflight"],
        &[],
    )
    .wait(LIMIT);
    out.assert_code(0);
    assert!(out.stdout.contains("limits=1000:4096"), "{out}");
}

/// A reader who stops reading herd's stdout (a pipe nobody drains) does not stop the run: its
/// job runs to its end and herd records it, while its 2 MB of output wait; once read, every
/// line is there, in order.
#[test]
fn a_stdout_nobody_reads_does_not_stall_the_run() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "[[nodes]]\nhost = \"localhost\"\n[job]\nlauncher = \"command\"\nscript = \"seq\"\nargs = [\"300000\"]\n",
    );
    let mut child = std::process::Command::new(herd::HERD)
        .args(["run", "--no-preflight"])
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let logs = dir.path().join("herd-logs");
    let finished = herd::wait_until(Duration::from_secs(60), || {
        std::fs::read_dir(&logs).into_iter().flatten().flatten().any(|run| {
            std::fs::read_to_string(run.path().join("events.jsonl"))
                .is_ok_and(|e| e.contains("\"run_finished\""))
        })
    });
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let status = child.wait().unwrap();
    assert!(finished, "the run did not finish while its stdout was not read");
    assert_eq!(status.code(), Some(0));
    let numbers: Vec<&str> = out.lines().map(|l| l.rsplit(' ').next().unwrap()).collect();
    assert_eq!(numbers.len(), 300_000, "{}", &out[..200]);
    assert_eq!((numbers[0], numbers[299_999]), ("1", "300000"));
}

#[test]
fn missing_config_file_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = herd::run(dir.path(), &["run", "-c", "nope.toml"], LIMIT);
    out.assert_code(2);
    assert!(out.stderr.contains("nope.toml: cannot read config file"), "{}", out.stderr);
}

#[test]
fn plan_shows_ranks_env_and_commands_and_hides_secrets() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), GOOD);
    let env = [("WANDB_API_KEY", "very-secret"), ("HF_TOKEN", "hf-secret"), ("HF_HOME", "/hf")];
    let out = herd::start(dir.path(), &["plan", "--json"], &env).wait(LIMIT);
    out.assert_code(0);
    assert!(!out.stdout.contains("very-secret") && !out.stdout.contains("hf-secret"), "{out}");
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(plan["world_size"], 13);
    assert_eq!(plan["master"]["host"], "gpu-02");
    let nodes = plan["nodes"].as_array().unwrap();
    let hosts: Vec<&str> = nodes.iter().map(|n| n["host"].as_str().unwrap()).collect();
    assert_eq!(hosts, ["gpu-01", "gpu-02", "gpu-03", "cpu-9"]);
    for (i, node) in nodes.iter().enumerate() {
        assert_eq!(node["node_rank"], i);
        assert_eq!(node["env"]["NODE_RANK"], i.to_string());
        assert_eq!(node["env"]["MASTER_ADDR"], "gpu-02");
        assert_eq!(node["env"]["GLOO_SOCKET_IFNAME"], "eth0");
        assert_eq!(node["env"]["WANDB_API_KEY"], "<forwarded, hidden>");
        assert_eq!(node["env"]["HF_TOKEN"], "<forwarded, hidden>");
        assert!(node["command"].as_str().unwrap().contains(&format!("--node-rank {i} ")));
    }
    assert_eq!(nodes[3]["nproc"], 1);
    assert_eq!(nodes[3]["global_ranks"], serde_json::json!([12, 12]));
    assert_eq!(nodes[3]["env"]["NCCL_IB_HCA"], "mlx5_0");
    assert!(nodes[0]["env"].get("NCCL_IB_HCA").is_none());
    assert!(out.stderr.contains("NOT_SET_ANYWHERE"), "missing forwarded var is warned about\n{out}");

    // Same file, same environment: the same bytes, so a team can diff plans.
    let again = herd::start(dir.path(), &["plan", "--json"], &env).wait(LIMIT);
    assert_eq!(again.stdout, out.stdout);
    let text = herd::start(dir.path(), &["plan"], &env).wait(LIMIT);
    text.assert_code(0);
    assert!(!text.stdout.contains("very-secret"));
}

#[test]
fn plan_text_is_a_stable_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), GOOD);
    let out = herd::start(dir.path(), &["plan"], &[("WANDB_API_KEY", "x")]).wait(LIMIT);
    out.assert_code(0);
    insta::assert_snapshot!(out.stdout);
}

/// `[container]`: the plan shows the runtime command each node runs, and no secret in it.
#[test]
fn plan_with_a_container_is_a_stable_snapshot() {
    let root = herd::repo_root();
    let env = [("WANDB_API_KEY", "very-secret")];
    let out = herd::start(&root, &["plan", "-c", "examples/container.toml"], &env).wait(LIMIT);
    out.assert_code(0);
    assert!(!out.stdout.contains("very-secret"), "{out}");
    insta::assert_snapshot!(out.stdout);

    let out = herd::start(&root, &["plan", "--json", "-c", "examples/container.toml"], &env).wait(LIMIT);
    out.assert_code(0);
    assert!(!out.stdout.contains("very-secret"), "{out}");
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(plan["container"]["image"], "nvcr.io/nvidia/pytorch:24.05-py3");
    assert_eq!(plan["container"]["gpus"], true);
    let node = &plan["nodes"][1];
    assert_eq!(node["env"]["HERD_CONTAINER"], "herd-<config-key>-<run-id>-<attempt>-<node-rank>");
    let command = node["container_command"].as_str().unwrap();
    assert!(command.starts_with("docker run --rm --init --name \"$HERD_CONTAINER\" "), "{command}");
    assert!(command.contains(" --env WANDB_API_KEY "), "{command}");
    assert!(command.contains("--node-rank 1 "), "{command}");
    // Without [container], the JSON has neither key.
    let out = herd::run(&root, &["plan", "--json", "-c", "cluster.example.toml"], LIMIT);
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(plan.get("container").is_none() && plan["nodes"][0].get("container_command").is_none());
}

#[test]
fn extra_args_after_double_dash_reach_the_command() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), GOOD);
    let out = herd::run(dir.path(), &["plan", "--json", "--", "--lr", "0.1 0.2"], LIMIT);
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(plan["nodes"][0]["command"]
        .as_str()
        .unwrap()
        .ends_with("train.py --config cfg.yaml --lr '0.1 0.2'"));
}

#[test]
fn help_reads_well() {
    let out = herd::run(Path::new("."), &["--help"], LIMIT);
    out.assert_code(0);
    for word in ["run", "plan", "--verbose"] {
        assert!(out.stdout.contains(word), "{out}");
    }
    let out = herd::run(Path::new("."), &["run", "--help"], LIMIT);
    assert!(
        out.stdout.contains("--config <FILE>") && out.stdout.contains("[default: cluster.toml]"),
        "{out}"
    );
}

#[test]
fn the_example_cluster_file_is_valid() {
    let out = herd::run(&herd::repo_root(), &["plan", "--json", "-c", "cluster.example.toml"], LIMIT);
    out.assert_code(0);
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(plan["world_size"], 20);
    assert_eq!(plan["nodes"][2]["host"], "gpu-03");
}

#[test]
fn a_log_directory_that_cannot_be_created_stops_the_run_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("job-ran");
    write(
        dir.path(),
        &format!(
            "[[nodes]]\nhost = \"localhost\"\n[job]\nlauncher = \"command\"\nscript = \"touch\"\nargs = [\"{}\"]\n[logs]\ndir = \"/dev/null/logs\"\n",
            marker.display()
        ),
    );
    let out = herd::run(dir.path(), &["run"], LIMIT);
    out.assert_code(5);
    assert!(out.stderr.contains("cannot create the run's log directory under /dev/null/logs"), "{out}");
    assert!(!marker.exists(), "the job ran although its logs could not be kept");
}

/// A disk that fills up mid-run stops the log files with one warning, never the job or the
/// echo: every line still reaches stdout.
#[test]
fn a_full_disk_mid_run_keeps_the_echo_and_warns_once() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "herd-test", logs.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(mounted.success(), "mounting a small tmpfs (needs root)");
    let unmount = || {
        let _ = std::process::Command::new("umount").arg(&logs).status();
    };
    write(
        dir.path(),
        &format!(
            "[[nodes]]\nhost = \"localhost\"\n[job]\nlauncher = \"command\"\nscript = \"sh\"\n\
             args = [\"-c\", \"i=0; while [ $i -lt 5000 ]; do echo line $i of the output; i=$((i+1)); done\"]\n\
             [logs]\ndir = \"{}\"\n",
            logs.display()
        ),
    );
    let out = herd::run(dir.path(), &["run", "--no-preflight"], LIMIT);
    unmount();
    out.assert_code(0);
    assert_eq!(
        out.node_lines("[0 localhost] ").iter().filter(|l| l.starts_with("line ")).count(),
        5000,
        "lines lost"
    );
    assert_eq!(out.stderr.matches("warning: cannot write the run's files").count(), 1, "{}", out.stderr);
}

/// The hosts, node ranks and nproc of a `plan --json`.
fn plan_nodes(out: &crate::support::herd::Finished) -> Vec<(String, u64, u64)> {
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{out}"));
    plan["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["host"].as_str().unwrap().to_string(),
                n["node_rank"].as_u64().unwrap(),
                n["nproc"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn owned(nodes: &[(&str, u64, u64)]) -> Vec<(String, u64, u64)> {
    nodes.iter().map(|(h, r, n)| (h.to_string(), *r, *n)).collect()
}

/// No Slurm allocation, whatever the environment the tests run in (empty counts as unset).
const NO_SLURM: [(&str, &str); 2] = [("SLURM_JOB_NODELIST", ""), ("SLURM_NODELIST", "")];

#[test]
fn plan_takes_the_nodes_from_a_hostfile_next_to_the_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("conf")).unwrap();
    std::fs::write(
        dir.path().join("conf/hosts.txt"),
        "# DeepSpeed hostfile\nw-2 slots=2\nw-1   # default slots\n\nw-3 slots=8\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("conf/cluster.toml"),
        "nodes_from = \"hostfile:hosts.txt\"\n[job]\nscript = \"t.py\"\nnproc_per_node = 4\n",
    )
    .unwrap();
    let out = herd::start(dir.path(), &["plan", "--json", "-c", "conf/cluster.toml"], &NO_SLURM).wait(LIMIT);
    out.assert_code(0);
    assert_eq!(plan_nodes(&out), owned(&[("w-2", 0, 2), ("w-1", 1, 4), ("w-3", 2, 8)]));
}

#[test]
fn plan_takes_the_nodes_from_the_slurm_allocation() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "nodes_from = \"slurm\"\n[job]\nscript = \"t.py\"\nnproc_per_node = 2\n");
    let env = [("SLURM_JOB_NODELIST", "gpu-[07,01-02],cpu9")];
    let out = herd::start(dir.path(), &["plan", "--json"], &env).wait(LIMIT);
    out.assert_code(0);
    assert_eq!(
        plan_nodes(&out),
        owned(&[("gpu-07", 0, 2), ("gpu-01", 1, 2), ("gpu-02", 2, 2), ("cpu9", 3, 2)])
    );

    // --slurm overrides the file's [[nodes]]; the master must be in the allocation.
    write(dir.path(), GOOD);
    let env = [("SLURM_JOB_NODELIST", "gpu-[02-03]"), ("SLURM_JOB_ID", "12")];
    let out = herd::start(dir.path(), &["plan", "--json", "--slurm"], &env).wait(LIMIT);
    out.assert_code(0);
    assert_eq!(plan_nodes(&out), owned(&[("gpu-02", 0, 4), ("gpu-03", 1, 4)]));
    // ... and runs each node's agent as a step of the allocation.
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let via = &plan["nodes"][1]["transport"];
    assert_eq!(
        (via["kind"].as_str(), via["node"].as_str(), via["job_id"].as_str()),
        (Some("slurm"), Some("gpu-03"), Some("12"))
    );
}

#[test]
fn nodes_and_exclude_select_and_ranks_follow() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), GOOD);
    let args = ["plan", "--json", "--nodes", "cpu-9,gpu-[02-03]", "--exclude", "gpu-03"];
    let out = herd::run(dir.path(), &args, LIMIT);
    out.assert_code(0);
    assert_eq!(plan_nodes(&out), owned(&[("gpu-02", 0, 4), ("cpu-9", 1, 1)]));
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(plan["world_size"], 5);
    assert_eq!(plan["master"]["host"], "gpu-02");
    assert_eq!(plan["nodes"][1]["env"]["NODE_RANK"], "1");
    assert_eq!(plan["nodes"][1]["env"]["NNODES"], "2");

    let out = herd::run(dir.path(), &["plan", "--exclude", "gpu-01"], LIMIT);
    out.assert_code(0);
    assert!(out.stdout.contains("nodes       3, world size 9\n"), "{out}");
    assert!(out.stdout.contains("master      node 0 (gpu-02)"), "{out}");
    assert!(out.stdout.contains("\nnode 2  cpu-9  nproc 1  ranks 8-8"), "{out}");
}

/// One bad case: what, the config text, extra arguments, environment, expected stderr text.
type BadCase<'a> = (&'a str, &'a str, &'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

/// Node sources and selections that cannot work exit 2 before contacting anything, saying why.
#[test]
fn bad_node_sources_and_selections_exit_2() {
    let cases: &[BadCase] = &[
        ("malformed --nodes", GOOD, &["--nodes", "gpu-[3-1]"], &[], "--nodes \"gpu-[3-1]\": malformed hostlist: range 3-1 is descending"),
        (
            "unknown --exclude host",
            GOOD,
            &["--exclude", "gpu-3"],
            &[],
            "--exclude: \"gpu-3\" is not one of the nodes (gpu-01, gpu-02, gpu-03, cpu-9)\n   = help: did you mean \"gpu-03\"?",
        ),
        ("empty selection", GOOD, &["--exclude", "gpu-[01-03],cpu-9"], &[], "no node left to run on after --exclude"),
        ("master excluded", GOOD, &["--nodes", "gpu-01"], &[], "rendezvous.master \"gpu-02\" is not among the selected nodes"),
        (
            "--slurm outside slurm",
            GOOD,
            &["--slurm"],
            &NO_SLURM,
            "cluster.toml: --slurm: not inside a Slurm allocation",
        ),
        (
            "nodes_from slurm outside slurm",
            "nodes_from = \"slurm\"\n[job]\nscript = \"t.py\"\n",
            &[],
            &NO_SLURM,
            "cluster.toml:1:14: nodes_from = \"slurm\": not inside a Slurm allocation",
        ),
        (
            "malformed SLURM_JOB_NODELIST",
            "nodes_from = \"slurm\"\n[job]\nscript = \"t.py\"\n",
            &[],
            &[("SLURM_JOB_NODELIST", "n[1-")],
            "malformed SLURM_JOB_NODELIST \"n[1-\"",
        ),
        (
            "bad slots",
            "nodes_from = \"hostfile:hosts.txt\"\n[job]\nscript = \"t.py\"\n",
            &[],
            &[],
            "hosts.txt:3:3: slots must be a positive integer, found \"x\"",
        ),
        (
            "missing hostfile",
            "nodes_from = \"hostfile:nope.txt\"\n[job]\nscript = \"t.py\"\n",
            &[],
            &[],
            "cluster.toml:1:14: cannot read hostfile nope.txt",
        ),
        (
            "both nodes_from and nodes",
            "nodes_from = \"hostfile:hosts.txt\"\n[[nodes]]\nhost = \"a\"\n[job]\nscript = \"t.py\"\n",
            &[],
            &[],
            "both `nodes_from` and [[nodes]] list the nodes",
        ),
        (
            "neither",
            "[job]\nscript = \"t.py\"\n",
            &[],
            &[],
            "no nodes: add at least one [[nodes]] table",
        ),
        (
            "misspelt launcher",
            "[[nodes]]\nhost = \"a\"\n[job]\nscript = \"t.py\"\nlauncher = \"torchrunn\"\n",
            &[],
            &[],
            "   |            ^^^^^^^^^^^\n   = help: did you mean \"torchrun\"?",
        ),
        (
            "misspelt key",
            "[[nodes]]\nhost = \"a\"\n[job]\nscript = \"t.py\"\nnproc_per_nod = 2\n",
            &[],
            &[],
            "cluster.toml:5:1: unknown field `nproc_per_nod`",
        ),
    ];
    for (what, text, args, env, needle) in cases {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), text);
        std::fs::write(dir.path().join("hosts.txt"), "a slots=1\nb\nc slots=x\n").unwrap();
        for cmd in ["plan", "run", "doctor"] {
            let all: Vec<&str> = std::iter::once(cmd).chain(args.iter().copied()).collect();
            let out = herd::start(dir.path(), &all, env).wait(LIMIT);
            assert_eq!(out.code, Some(2), "{what}: herd {cmd} exited {:?}\n{out}", out.code);
            assert!(out.stderr.contains(needle), "{what}: herd {cmd}: {needle:?} not in\n{}", out.stderr);
            assert!(out.stdout.is_empty(), "{what}: nothing on stdout\n{out}");
            assert!(!dir.path().join("herd-logs").exists(), "{what}: herd {cmd} started a run");
        }
    }
}

/// A selection that leaves fewer nodes than `job.nnodes` would change the world size (and the
/// global batch): `plan` and `run` refuse it as they refuse a too small allocation.
#[test]
fn a_selection_below_nnodes_exits_2_before_any_connection() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "[[nodes]]\nhost = \"n[1-4]\"\n[job]\nscript = \"t.py\"\nnnodes = 3\n");
    for cmd in ["plan", "run"] {
        let out = herd::run(dir.path(), &[cmd, "--exclude", "n[3-4]"], LIMIT);
        out.assert_code(2);
        let needle = "job.nnodes = 3 but --exclude \"n[3-4]\" leaves 2 node(s)";
        assert!(out.stderr.contains(needle), "herd {cmd}: {needle:?} not in\n{}", out.stderr);
        assert!(!dir.path().join("herd-logs").exists(), "herd {cmd} started a run");
    }
    herd::run(dir.path(), &["plan", "--exclude", "n4"], LIMIT).assert_code(0);
}

#[test]
fn init_writes_a_starter_that_plans_and_never_overwrites_by_accident() {
    let dir = tempfile::tempdir().unwrap();
    herd::run(dir.path(), &["init"], LIMIT).assert_code(0);
    let written = std::fs::read_to_string(dir.path().join("cluster.toml")).unwrap();
    assert!(written.starts_with("# herd cluster file"), "{written}");
    herd::run(dir.path(), &["plan"], LIMIT).assert_code(0);

    std::fs::write(dir.path().join("cluster.toml"), "mine").unwrap();
    let out = herd::run(dir.path(), &["init"], LIMIT);
    out.assert_code(2);
    assert!(out.stderr.contains("cluster.toml already exists"), "{out}");
    assert_eq!(std::fs::read_to_string(dir.path().join("cluster.toml")).unwrap(), "mine");
    herd::run(dir.path(), &["init", "--force"], LIMIT).assert_code(0);
    assert_eq!(std::fs::read_to_string(dir.path().join("cluster.toml")).unwrap(), written);

    let out = herd::run(dir.path(), &["init", "-c", "/nonexistent-dir/c.toml"], LIMIT);
    out.assert_code(5);
    assert!(out.stderr.contains("cannot create /nonexistent-dir/c.toml"), "{out}");
}

#[test]
fn completions_and_man_pages_come_from_the_cli_definition() {
    let dir = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let out = herd::run(dir.path(), &["completions", shell], LIMIT);
        out.assert_code(0);
        for word in ["exec", "logs", "no-preflight"] {
            assert!(out.stdout.contains(word), "{shell} completion lacks {word}");
        }
    }
    herd::run(dir.path(), &["completions", "tcsh"], LIMIT).assert_code(2);

    let out = herd::run(dir.path(), &["man"], LIMIT);
    out.assert_code(0);
    assert!(out.stdout.contains(".TH herd 1"), "{out}");
    assert!(out.stdout.contains("exec"), "{out}");
    herd::run(dir.path(), &["man", "--out-dir", "pages"], LIMIT).assert_code(0);
    let run_page = std::fs::read_to_string(dir.path().join("pages/herd-run.1")).unwrap();
    assert!(run_page.contains("no\\-preflight"), "{run_page}");
}

/// Values from the config reach the terminal escaped: a newline or an escape sequence in an
/// env value can neither break `herd plan`'s layout nor drive the terminal.
#[test]
fn plan_escapes_control_characters_in_config_values() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "[[nodes]]\nhost = \"a\"\n[job]\nscript = \"t.py\"\nargs = [\"x\\u001b]0;pwned\\u0007\"]\n[env]\nX = \"a\\u001b[31mred\\nline2\"\n",
    );
    let out = herd::run(dir.path(), &["plan"], LIMIT);
    out.assert_code(0);
    assert!(!out.stdout.contains('\u{1b}') && !out.stdout.contains('\u{7}'), "{out}");
    assert!(out.stdout.contains("  env  X=a\\u{1b}[31mred\\nline2\n"), "{out}");
}

/// Diagnostics written to a file (`-v 2> file`) hold no colour codes, even for a person
/// whose terminal has colour.
#[test]
fn verbose_diagnostics_into_a_file_have_no_escape_codes() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "[[nodes]]\nhost = \"localhost\"\n[job]\nlauncher = \"command\"\nscript = \"true\"\n");
    let out = std::process::Command::new(herd::HERD)
        .args(["-v", "run", "--no-preflight"])
        .current_dir(dir.path())
        .env_remove("NO_COLOR")
        .env_remove("CI")
        .env("TERM", "xterm-256color")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("DEBUG"), "-v shows debug lines: {stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}

/// The quarantine as a user meets it without any cluster: two local nodes, one a spare.
#[test]
fn too_many_quarantined_nodes_stop_the_run_before_it_starts_and_herd_nodes_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("job-ran");
    write(
        dir.path(),
        &format!(
            "[[nodes]]\nhost = \"localhost,127.0.0.1\"\n[job]\nnnodes = 1\nlauncher = \"command\"\nscript = \"touch\"\nargs = [\"{}\"]\n[logs]\ndir = \"logs\"\n",
            marker.display()
        ),
    );
    let nodes = herd::run(dir.path(), &["nodes"], LIMIT);
    nodes.assert_code(0);
    assert_eq!(
        nodes.stdout,
        "active (node rank, host):\n     0  localhost\nspares: 127.0.0.1\nquarantined: none\n"
    );
    let first = herd::run(dir.path(), &["run"], LIMIT);
    first.assert_code(0);
    let run_dir = herd::only_run_dir(&dir.path().join("logs"));
    let key = herd::events(&run_dir)[0]["config_key"].as_str().unwrap().to_string();
    std::fs::remove_file(&marker).unwrap();

    let file = dir.path().join(format!("logs/.quarantine-{key}.json"));
    let entry = |host: &str| {
        format!(
            r#"{{"host":"{host}","reason":"node-lost: test","run_id":"r","attempt":1,"at":"2026-12-01T00:00:00Z"}}"#
        )
    };
    std::fs::write(&file, format!(r#"{{"nodes":[{},{}]}}"#, entry("localhost"), entry("127.0.0.1"))).unwrap();
    let out = herd::run(dir.path(), &["run"], LIMIT);
    out.assert_code(2);
    assert!(
        out.stderr.contains("1 node(s) needed but only 0 are not quarantined (quarantined: localhost, 127.0.0.1); `herd nodes --release HOST` clears one"),
        "{out}"
    );
    assert!(!marker.exists(), "nothing ran");
    let nodes = herd::run(dir.path(), &["nodes"], LIMIT);
    nodes.assert_code(0);
    assert!(nodes.stderr.contains("the next run cannot start: 1 node(s) needed"), "{nodes}");
    assert!(
        nodes.stdout.contains("  localhost  node-lost: test  (run r, attempt 1, 2026-12-01T00:00:00Z)"),
        "{nodes}"
    );

    // One released: the run goes on the other.
    let released = herd::run(dir.path(), &["nodes", "--release", "127.0.0.1", "--json"], LIMIT);
    released.assert_code(0);
    let json: serde_json::Value = serde_json::from_str(&released.stdout).unwrap();
    assert_eq!(json["active"], serde_json::json!([{ "node_rank": 0, "host": "127.0.0.1" }]), "{released}");
    assert_eq!(json["quarantined"][0]["host"], "localhost");
    let out = herd::run(dir.path(), &["run"], LIMIT);
    out.assert_code(0);
    assert!(out.stderr.contains("localhost is quarantined (node-lost: test), left out"), "{out}");
    assert!(marker.exists());

    // A damaged file is named, and stops the run.
    std::fs::write(&file, "{ half").unwrap();
    let out = herd::run(dir.path(), &["run"], LIMIT);
    out.assert_code(2);
    assert!(
        out.stderr.contains(&format!("logs/.quarantine-{key}.json: not a herd quarantine file")),
        "{out}"
    );
}

/// `herd nodes` for a run through Slurm: inside the allocation its nodes; outside, only the
/// quarantine, which can still be released.
#[test]
fn herd_nodes_with_slurm_lists_the_allocations_nodes_and_releases_outside_one() {
    let dir = tempfile::tempdir().unwrap();
    let job = "[job]\nscript = \"train.py\"\nnnodes = 2\n[logs]\ndir = \"logs\"\n";
    write(dir.path(), &format!("{job}[transport]\nkind = \"slurm\"\n"));
    let inside = [("SLURM_JOB_ID", "42"), ("SLURM_JOB_NODELIST", "n[1-3]")];
    let plan = herd::run_with(dir.path(), &["plan", "--json"], &inside, LIMIT);
    plan.assert_code(0);
    let plan: serde_json::Value = serde_json::from_str(&plan.stdout).unwrap();
    let key = plan["nodes"][0]["transport"]["step_name"].as_str().unwrap().strip_prefix("herd-").unwrap();
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let entry =
        r#"{"host":"n2","reason":"node-lost: test","run_id":"r","attempt":1,"at":"2026-12-01T00:00:00Z"}"#;
    let file = dir.path().join(format!("logs/.quarantine-{key}.json"));
    std::fs::write(&file, format!(r#"{{"nodes":[{entry}]}}"#)).unwrap();

    let nodes = herd::run_with(dir.path(), &["nodes"], &inside, LIMIT);
    nodes.assert_code(0);
    let want = "active (node rank, host):\n     0  n1\n     1  n3\nspares: none\n";
    assert!(nodes.stdout.starts_with(want), "{nodes}");
    let outside = herd::run(dir.path(), &["nodes", "--json"], LIMIT);
    outside.assert_code(0);
    let json: serde_json::Value = serde_json::from_str(&outside.stdout).unwrap();
    assert!(json["active"].is_null() && json["spares"].is_null(), "{outside}");
    assert_eq!(json["quarantined"][0]["host"], "n2", "{outside}");
    let outside = herd::run(dir.path(), &["nodes"], LIMIT);
    outside.assert_code(0);
    assert!(outside.stdout.starts_with("active: unknown outside a Slurm allocation"), "{outside}");
    let released = herd::run(dir.path(), &["nodes", "--release", "n2"], LIMIT);
    released.assert_code(0);
    assert!(released.stdout.contains("quarantined: none"), "{released}");
    assert!(!std::fs::read_to_string(&file).unwrap().contains("\"n2\""));

    // A config with no nodes of its own, used only with `herd run --slurm`: the same, with a
    // word on `--slurm` (it once said "no nodes: add at least one [[nodes]] table").
    write(dir.path(), job);
    std::fs::write(&file, format!(r#"{{"nodes":[{entry}]}}"#)).unwrap();
    let outside = herd::run(dir.path(), &["nodes"], LIMIT);
    outside.assert_code(0);
    assert!(outside.stdout.starts_with("active: unknown outside a Slurm allocation"), "{outside}");
    assert!(outside.stdout.contains("n2"), "{outside}");
    assert!(outside.stderr.contains("has no nodes of its own: read as a config for Slurm"), "{outside}");
    assert!(outside.stderr.contains("`herd nodes --slurm`"), "{outside}");
    let wrong = herd::run(dir.path(), &["nodes", "--release", "n9"], LIMIT);
    wrong.assert_code(2);
    assert!(wrong.stderr.contains("--release n9: n9 is not quarantined (only n2 are)"), "{wrong}");
    herd::run(dir.path(), &["nodes", "--release", "n2"], LIMIT).assert_code(0);
    assert!(!std::fs::read_to_string(&file).unwrap().contains("\"n2\""));

    // An SSH config run with --slurm: `herd nodes --slurm` lists the allocation's nodes.
    write(dir.path(), &format!("[[nodes]]\nhost = \"a,b,c\"\n{job}"));
    let nodes = herd::run_with(dir.path(), &["nodes", "--slurm"], &inside, LIMIT);
    nodes.assert_code(0);
    let want = "active (node rank, host):\n     0  n1\n     1  n2\nspares: n3\n";
    assert!(nodes.stdout.starts_with(want), "{nodes}");
    let outside = herd::run(dir.path(), &["nodes", "--slurm"], LIMIT);
    outside.assert_code(0);
    assert!(outside.stdout.starts_with("active: unknown outside a Slurm allocation"), "{outside}");
}

/// Every test binary that builds a namespace testbed runs in nextest's `cluster` group, one
/// test at a time: two clusters of torch processes at once on a 2-core machine make both slow
/// enough to miss their bounds (a CI run once failed that way).
#[test]
fn every_cluster_test_module_is_in_the_serial_cluster_group() {
    let root = herd::repo_root();
    let nextest: toml::Value =
        std::fs::read_to_string(root.join(".config/nextest.toml")).unwrap().parse().unwrap();
    let filters: Vec<String> = nextest["profile"]["default"]["overrides"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o.get("test-group").and_then(|g| g.as_str()) == Some("cluster"))
        .map(|o| o["filter"].as_str().unwrap().to_string())
        .collect();
    // The modules the filters name: `test(/^(a|b|c)::/)`.
    let grouped: Vec<String> = filters
        .iter()
        .filter_map(|f| f.split("test(/^(").nth(1)?.split(")::").next().map(str::to_string))
        .flat_map(|names| names.split('|').map(str::to_string).collect::<Vec<_>>())
        .collect();
    let (mut missing, mut builders) = (Vec::new(), 0);
    for entry in std::fs::read_dir(root.join("tests/integration")).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path.file_name().unwrap().to_str().unwrap().strip_suffix(".rs") else { continue };
        let text = std::fs::read_to_string(&path).unwrap();
        let builds_cluster = ["crate::support::cluster", "crate::support::testbed", "crate::support::slurm"]
            .iter()
            .any(|m| text.contains(&format!("use {m}")));
        builders += usize::from(builds_cluster);
        if builds_cluster && !grouped.iter().any(|g| g == name) {
            missing.push(name.to_string());
        }
    }
    // A guard that finds no module that builds a testbed guards nothing.
    assert!(
        builders >= 10,
        "only {builders} modules build a testbed: is the scan looking in the right place?"
    );
    assert!(missing.is_empty(), "not in the cluster test group of .config/nextest.toml: {missing:?}");
}

/// The slurm transport's bad inputs, with no Slurm running: each exits 2 with what to do, and
/// nothing is started. `herd plan` shows what would run through srun.
#[test]
fn slurm_outside_an_allocation_without_srun_or_too_small_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let job = "[job]\nscript = \"train.py\"\nnproc_per_node = 2\n";
    write(dir.path(), job);
    let outside = herd::run(dir.path(), &["run", "--slurm"], LIMIT);
    outside.assert_code(2);
    assert!(outside.stderr.contains("--slurm: not inside a Slurm allocation"), "{outside}");
    assert!(outside.stderr.contains("run under salloc or sbatch"), "{outside}");

    let alloc = [("SLURM_JOB_ID", "77"), ("SLURM_JOB_NODELIST", "gpu-[1-2]")];
    let plan = herd::run_with(dir.path(), &["plan", "--slurm"], &alloc, LIMIT);
    plan.assert_code(0);
    assert!(plan.stdout.contains("node 1  gpu-2  nproc 2  ranks 2-3  via srun in job 77"), "{plan}");

    let no_srun = [alloc[0], alloc[1], ("PATH", "/nonexistent-herd-test-path")];
    let missing = herd::run_with(dir.path(), &["run", "--slurm"], &no_srun, LIMIT);
    missing.assert_code(2);
    assert!(
        missing
            .stderr
            .contains("the slurm transport needs srun, squeue, scancel, sinfo on PATH, which are not"),
        "{missing}"
    );

    write(dir.path(), &format!("{job}nnodes = 3\n\n[transport]\nkind = \"slurm\"\n"));
    let small = herd::run_with(dir.path(), &["run"], &alloc, LIMIT);
    small.assert_code(2);
    assert!(
        small
            .stderr
            .contains("job.nnodes must be between 1 and the nodes of the Slurm allocation (2), found 3"),
        "{small}"
    );
    assert!(small.stderr.contains("salloc --nodes=3, or #SBATCH --nodes=3"), "{small}");
    assert!(!dir.path().join("herd-logs").exists(), "nothing is started");
}

/// `herd submit` with no Slurm running: the script it would submit, and each bad input
/// exits 2 before anything is submitted.
#[test]
fn submit_prints_its_script_and_refuses_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "[job]\nscript = \"train.py\"\nnproc_per_node = 2\nnnodes = 4\n");
    let no_sbatch =
        herd::run_with(dir.path(), &["submit"], &[("PATH", "/nonexistent-herd-test-path")], LIMIT);
    no_sbatch.assert_code(2);
    assert!(no_sbatch.stderr.contains("herd submit needs Slurm's sbatch on PATH"), "{no_sbatch}");
    assert!(!dir.path().join("herd-logs").exists(), "nothing is made for a job that was not submitted");
    let printed = herd::run(dir.path(), &["submit", "--print", "-p", "gpu", "--", "--lr", "3e-4"], LIMIT);
    printed.assert_code(0);
    let config = std::fs::canonicalize(dir.path().join("cluster.toml")).unwrap();
    for line in [
        "#SBATCH --nodes=4",
        "#SBATCH --no-kill",
        "#SBATCH --partition=gpu",
        &format!("#SBATCH --chdir=\"{}\"", std::fs::canonicalize(dir.path()).unwrap().display()),
        "#SBATCH --signal=B:USR1@180",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        &format!("run --slurm --no-progress --requeue -c {} -- --lr 3e-4", config.display()),
    ] {
        assert!(printed.stdout.lines().any(|l| l.ends_with(line) || l == line), "{line}\n{printed}");
    }
    // No warning, no requeue: neither is asked for.
    let plain = herd::run(dir.path(), &["submit", "--print", "--warn-before", "0", "--no-requeue"], LIMIT);
    plain.assert_code(0);
    assert!(!plain.stdout.contains("--signal") && !plain.stdout.contains("requeue"), "{plain}");
    // A warning that would come before the job starts.
    let early = herd::run(dir.path(), &["submit", "--print", "-t", "2", "--warn-before", "3m"], LIMIT);
    early.assert_code(2);
    assert!(early.stderr.contains("--warn-before 3m is not shorter than --time 2 (2m)"), "{early}");
    // A warning shorter than the checkpoint grace (60 s) and the teardown (5 s) together: a
    // warning, and the script.
    let short = herd::run(dir.path(), &["submit", "--print", "-t", "10", "--warn-before", "45s"], LIMIT);
    short.assert_code(0);
    assert!(short.stdout.contains("#SBATCH --signal=B:USR1@45\n"), "{short}");
    assert!(
        short.stderr.contains("--warn-before 45 s is shorter than restart.checkpoint_grace (60 s)"),
        "{short}"
    );
    let env = herd::run_with(dir.path(), &["submit", "--print"], &[("SBATCH_TIMELIMIT", "5")], LIMIT);
    env.assert_code(0);
    assert!(env.stderr.contains("SBATCH_TIMELIMIT is set: sbatch lets it override"), "{env}");
    let timed = herd::run(dir.path(), &["submit", "--print", "--sbatch-arg=--time=10"], LIMIT);
    timed.assert_code(2);
    assert!(timed.stderr.contains("give the time limit with -t"), "{timed}");
    // Under a second, sbatch would get no warning at all: refused, not dropped.
    let tiny = herd::run(dir.path(), &["submit", "--print", "-t", "10", "--warn-before", "999ms"], LIMIT);
    tiny.assert_code(2);
    assert!(tiny.stderr.contains("--warn-before 999ms: sbatch --signal counts whole seconds"), "{tiny}");
    let early = herd::run(dir.path(), &["submit", "--print", "-t", "1-0", "--warn-before", "20h"], LIMIT);
    early.assert_code(2);
    assert!(early.stderr.contains("sbatch --signal takes at most 65535 s"), "{early}");
    let small = herd::run(dir.path(), &["submit", "--print", "-N", "2"], LIMIT);
    small.assert_code(2);
    assert!(
        small.stderr.contains("job.nnodes must be between 1 and the nodes of the Slurm allocation (2)"),
        "{small}"
    );
    let bad = herd::run(dir.path(), &["submit", "--print", "-t", "1 day"], LIMIT);
    bad.assert_code(2);
    assert!(bad.stderr.contains("--time \"1 day\": not a value for sbatch"), "{bad}");
    let bad = herd::run(dir.path(), &["submit", "--print", "--sbatch-arg=--comment=a#b"], LIMIT);
    bad.assert_code(2);
    assert!(bad.stderr.contains("--sbatch-arg \"--comment=a#b\": not a value for sbatch"), "{bad}");
    let more = herd::run(dir.path(), &["submit", "--print", "--sbatch-arg=--exclusive"], LIMIT);
    more.assert_code(0);
    assert!(more.stdout.contains("#SBATCH --exclusive\n"), "{more}");
    // An sbatch option that would undo one of herd's own (the last #SBATCH line wins).
    let undoing = [("--nodes=1", "--nodes"), ("--nod=1", "--nodes"), ("-k", "-k"), ("--out=x", "--output")];
    for (arg, option) in undoing {
        let bad = herd::run(dir.path(), &["submit", "--print", &format!("--sbatch-arg={arg}")], LIMIT);
        bad.assert_code(2);
        let want = format!("--sbatch-arg {arg:?}: herd submit sets {option} itself");
        assert!(bad.stderr.contains(&want), "{want}\n{bad}");
    }
    // A checkpoint signal that does not exist: the file and line are named.
    write(
        dir.path(),
        "[job]\nscript = \"train.py\"\nnnodes = 4\n[restart]\ncheckpoint_signal = \"SIGUSR3\"\n",
    );
    let bad = herd::run(dir.path(), &["submit", "--print"], LIMIT);
    bad.assert_code(2);
    assert!(bad.stderr.contains("cluster.toml:5:21"), "{bad}");
    assert!(
        bad.stderr.contains("unknown restart.checkpoint_signal \"SIGUSR3\": expected one of USR1, USR2"),
        "{bad}"
    );
    write(dir.path(), "[job]\nscript = \"train.py\"\n");
    let how_many = herd::run(dir.path(), &["submit", "--print"], LIMIT);
    how_many.assert_code(2);
    assert!(how_many.stderr.contains("how many nodes? Give -N, or set [job] nnodes"), "{how_many}");
}

/// A reader that closes stdout before herd writes (`herd plan | head -1`) is no panic and no
/// failure: every subcommand that prints to stdout without a cluster exits 0, with nothing on
/// stderr but what it says anyway. The read end is closed before herd starts, so every write
/// meets EPIPE.
#[test]
fn a_closed_stdout_is_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), GOOD);
    let cases: &[&[&str]] = &[
        &["plan"],
        &["plan", "--json"],
        &["nodes"],
        &["man"],
        &["completions", "bash"],
        &["--help"],
        &["plan", "--help"],
        &["--version"],
    ];
    for args in cases {
        let mut child = std::process::Command::new(crate::support::herd::HERD)
            .args(*args)
            .current_dir(dir.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "herd {args:?} panicked on a closed stdout:\n{stderr}");
        assert_eq!(out.status.code(), Some(0), "herd {args:?} on a closed stdout:\n{stderr}");
    }
}
