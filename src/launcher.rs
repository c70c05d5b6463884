//! From the job settings to the launcher's command line on one node: torchrun, the
//! DeepSpeed per-node launcher, or any command. Pure.
//!
//! The master port is referenced as `"$MASTER_PORT"` rather than written in, so the command
//! line is the same for every attempt and `herd plan` shows exactly what runs.

use base64::Engine as _;

use crate::config::{Job, LauncherKind};
use crate::remote::quote;

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

pub fn command_line(job: &Job, node: &NodeLaunch<'_>) -> String {
    let mut words: Vec<String> = Vec::new();
    match job.launcher {
        LauncherKind::Torchrun => {
            words.extend(
                [
                    "torchrun",
                    "--nnodes",
                    &node.world.len().to_string(),
                    "--nproc-per-node",
                    &node.nproc.to_string(),
                    "--node-rank",
                    &node.node_rank.to_string(),
                    "--master-addr",
                    node.master_addr,
                ]
                .map(quote),
            );
            words.push(format!("--master-port {MASTER_PORT_REF}"));
            // herd owns restarts: torchrun must not restart workers behind its back.
            words.extend(["--rdzv-backend", "static", "--max-restarts", "0"].map(quote));
            words.extend(job.launcher_args.iter().map(|a| quote(a)));
            if job.module {
                words.push("-m".into());
            }
        }
        LauncherKind::Deepspeed => {
            // The per-node launcher that `deepspeed` itself runs on every host through pdsh;
            // herd starts it on each node directly instead.
            words.extend([quote(job.python()), "-m".into(), "deepspeed.launcher.launch".into()]);
            words.push(quote(&format!("--world_info={}", world_info(node.world))));
            words.push(quote(&format!("--node_rank={}", node.node_rank)));
            words.push(quote(&format!("--master_addr={}", node.master_addr)));
            words.push(format!("--master_port={MASTER_PORT_REF}"));
            words.extend(job.launcher_args.iter().map(|a| quote(a)));
            if job.module {
                words.push("--module".into());
            }
        }
        LauncherKind::Command => {
            if job.module {
                words.extend([quote(job.python()), "-m".into()]);
            }
        }
    }
    words.push(quote(&job.script));
    words.extend(job.args.iter().map(|a| quote(a)));
    words.join(" ")
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
             --master-port \"$MASTER_PORT\" --rdzv-backend static --max-restarts 0 train.py --name 'a b'"
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
            line.contains("--node_rank=0 --master_addr=n1 --master_port=\"$MASTER_PORT\" train.py"),
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
        assert!(command_line(&j, &n).ends_with("--max-restarts 0 --log-dir /tmp/x -m train.py --name 'a b'"));
    }
}
