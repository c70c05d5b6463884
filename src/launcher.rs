//! From the job settings to the launcher's command line on one node: torchrun, the
//! DeepSpeed per-node launcher, or any command. Pure.
//!
//! The master port is referenced as `"$MASTER_PORT"` rather than written in, so the command
//! line is the same for every attempt and `herd plan` shows exactly what runs.

use base64::Engine as _;

use crate::config::{Job, LauncherKind};
use crate::remote::shell::ShellLine;

/// What a node's command line depends on besides the job settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLaunch<'a> {
    pub node_rank: usize,
    pub nproc: u32,
    pub master_addr: &'a str,
    /// `(host, nproc)` of every node in rank order: DeepSpeed's world info.
    pub world: &'a [(String, u32)],
}

/// The program a node's launcher line starts with: what must be on `PATH` after `setup`.
pub fn program(job: &Job) -> &str {
    match job.launcher {
        LauncherKind::Torchrun => "torchrun",
        LauncherKind::Deepspeed => job.python(),
        LauncherKind::Command if job.module => job.python(),
        LauncherKind::Command => &job.script,
    }
}

const MASTER_PORT_REF: &str = "\"$MASTER_PORT\"";
/// The rank wrapper herd's output multiplexer writes (see `remote::shell::under_mux`): each worker is
/// started through it, and gets a stdout and a stderr of its own.
const RANK_WRAPPER_REF: &str = "\"$HERD_RANK_WRAPPER\"";

/// How a torch launcher starts each worker: through the rank wrapper, which is told how many
/// of the words after it are herd's (the interpreter, `-u`, `-m`, the script: DeepSpeed puts
/// `--local_rank=N` after them), then the interpreter, as the launcher itself would run it.
/// `no_python_flag`: the launcher's own flag for running what follows as it is. With the
/// user's own `no_python_flag` (the script is a program), only the wrapper is added.
fn worker_words(job: &Job, no_python_flag: &str, words: &mut ShellLine) {
    let users_own = job.launcher_args.iter().any(|a| a == "--no-python" || a == "--no_python");
    if users_own {
        if job.module {
            // The launcher's own refusal of both says it best.
            words.arg(if no_python_flag == "--no-python" { "-m" } else { "--module" });
        }
        words.raw(RANK_WRAPPER_REF).arg("1");
        return;
    }
    let mut run = ShellLine::new();
    run.args([job.python(), "-u"]);
    if job.module {
        run.arg("-m");
    }
    words.arg(no_python_flag).raw(RANK_WRAPPER_REF).arg((run.len() + 1).to_string());
    words.extend(run);
}

pub fn command_line(job: &Job, node: &NodeLaunch<'_>) -> String {
    let mut words = ShellLine::new();
    match job.launcher {
        LauncherKind::Torchrun => {
            words.args([
                "torchrun",
                "--nnodes",
                &node.world.len().to_string(),
                "--nproc-per-node",
                &node.nproc.to_string(),
                "--node-rank",
                &node.node_rank.to_string(),
                "--master-addr",
                node.master_addr,
            ]);
            words.raw(format!("--master-port {MASTER_PORT_REF}"));
            // herd owns restarts: torchrun must not restart workers behind its back.
            words.args(["--rdzv-backend", "static", "--max-restarts", "0"]);
            words.args(&job.launcher_args);
            worker_words(job, "--no-python", &mut words);
        }
        LauncherKind::Deepspeed => {
            // The per-node launcher that `deepspeed` itself runs on every host through pdsh;
            // herd starts it on each node directly instead.
            words.args([job.python(), "-m", "deepspeed.launcher.launch"]);
            words.arg(format!("--world_info={}", world_info(node.world)));
            words.arg(format!("--node_rank={}", node.node_rank));
            words.arg(format!("--master_addr={}", node.master_addr));
            words.raw(format!("--master_port={MASTER_PORT_REF}"));
            words.args(&job.launcher_args);
            worker_words(job, "--no_python", &mut words);
        }
        LauncherKind::Command => {
            if job.module {
                words.args([job.python(), "-m"]);
            }
        }
    }
    words.arg(&job.script).args(&job.args);
    words.line()
}

/// DeepSpeed's `--world_info`: urlsafe base64 of `{"host": [local device ids], ...}` in rank order.
pub fn world_info(world: &[(String, u32)]) -> String {
    let mut json = String::from("{");
    for (i, (host, nproc)) in world.iter().enumerate() {
        if i > 0 {
            json.push_str(", ");
        }
        let ids: Vec<String> = (0..*nproc).map(|d| d.to_string()).collect();
        json.push_str(&format!("{}: [{}]", serde_json::to_string(host).expect("string"), ids.join(", ")));
    }
    json.push('}');
    base64::engine::general_purpose::URL_SAFE.encode(json)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(launcher: LauncherKind) -> Job {
        Job {
            launcher,
            script: "train.py".into(),
            args: vec!["--name".into(), "a b".into()],
            module: false,
            workdir: None,
            nproc_per_node: 2,
            setup: None,
            launcher_args: vec![],
            forward_env: vec![],
            python: None,
            device: crate::config::Device::Cpu,
            nnodes: None,
        }
    }

    fn world() -> Vec<(String, u32)> {
        vec![("n1".into(), 2), ("n2".into(), 4)]
    }

    #[test]
    fn torchrun_gets_static_rendezvous_and_no_restarts() {
        let w = world();
        let line = command_line(
            &job(LauncherKind::Torchrun),
            &NodeLaunch { node_rank: 1, nproc: 4, master_addr: "10.0.0.1", world: &w },
        );
        assert_eq!(
            line,
            "torchrun --nnodes 2 --nproc-per-node 4 --node-rank 1 --master-addr 10.0.0.1 \
             --master-port \"$MASTER_PORT\" --rdzv-backend static --max-restarts 0 \
             --no-python \"$HERD_RANK_WRAPPER\" 3 python3 -u train.py --name 'a b'"
        );
    }

    #[test]
    fn deepspeed_world_info_lists_hosts_in_rank_order() {
        let w = world();
        let line = command_line(
            &job(LauncherKind::Deepspeed),
            &NodeLaunch { node_rank: 0, nproc: 2, master_addr: "n1", world: &w },
        );
        let decoded = base64::engine::general_purpose::URL_SAFE.decode(world_info(&w)).unwrap();
        assert_eq!(String::from_utf8(decoded).unwrap(), r#"{"n1": [0, 1], "n2": [0, 1, 2, 3]}"#);
        assert!(line.starts_with("python3 -m deepspeed.launcher.launch --world_info="), "{line}");
        assert!(
            line.contains(
                "--node_rank=0 --master_addr=n1 --master_port=\"$MASTER_PORT\" --no_python \"$HERD_RANK_WRAPPER\" 3 python3 -u train.py"
            ),
            "{line}"
        );
    }

    #[test]
    fn command_and_module_forms() {
        let w = world();
        let n = NodeLaunch { node_rank: 0, nproc: 1, master_addr: "n1", world: &w };
        assert_eq!(command_line(&job(LauncherKind::Command), &n), "train.py --name 'a b'");
        let mut j = job(LauncherKind::Command);
        j.module = true;
        j.script = "pkg.main".into();
        assert_eq!(command_line(&j, &n), "python3 -m pkg.main --name 'a b'");
        let mut j = job(LauncherKind::Torchrun);
        j.module = true;
        j.launcher_args = vec!["--log-dir".into(), "/tmp/x".into()];
        assert!(command_line(&j, &n)
            .ends_with("--max-restarts 0 --log-dir /tmp/x --no-python \"$HERD_RANK_WRAPPER\" 4 python3 -u -m train.py --name 'a b'"));
        // The user's own --no-python: the script is a program, started through the wrapper.
        j.module = false;
        j.launcher_args = vec!["--no-python".into()];
        assert!(command_line(&j, &n).ends_with("--no-python \"$HERD_RANK_WRAPPER\" 1 train.py --name 'a b'"));
    }
}
