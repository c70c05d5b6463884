//! The command line without any cluster: config errors, plan output, help. Nothing here
//! opens a connection.

mod support;

use std::path::Path;
use std::time::Duration;

use support::herd;

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
        assert_eq!(node["rank"], i);
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
    assert!(out.stderr.contains("cannot create the log directory /dev/null/logs"), "{out}");
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
