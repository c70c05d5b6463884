//! `[container]`: each node's launcher runs inside a container. This module builds, as plain
//! strings, the `docker run` / `podman run` command around the launcher, the container's name,
//! and the commands that remove containers at teardown and in sweeps. Pure.
//!
//! What runs where, on a node:
//! - outside, in the agent's job shell: `cd WORKDIR` (so that a missing workdir fails as
//!   without a container, and the runtime never creates it as an empty root-owned directory
//!   for the mount), then `exec RUNTIME run ...`: the runtime client leads the job's process
//!   group, which the agent signals and tears down as always;
//! - inside, under `--init` and the image's `bash` (or `sh` if it has none): `setup`, then
//!   `exec` the launcher, so that a `setup` that activates an environment does so in the image.
//!
//! The env never appears in an argv: every variable the node exports is passed as `--env NAME`
//! without a value, and the runtime copies the value from its own environment, which the agent
//! has already exported (secrets included).

use crate::config::{Container, ContainerRuntime, Device};
use crate::remote::shell::{command_line, ShellLine};

/// The variable holding the container's name; the plan exports it on every node when
/// `[container]` is set, and the run command names the container after it.
pub const NAME_VAR: &str = "HERD_CONTAINER";

/// Runs the inner snippet (its `$1`) with bash when the image has it, as the agent does on the
/// node, so that `setup` may use bash (`source`); otherwise with sh.
const INNER_SHELL: &str =
    "if command -v bash >/dev/null 2>&1; then exec bash -c \"$1\"; fi; exec sh -c \"$1\"";

/// The container settings of a launch plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerPlan {
    pub runtime: ContainerRuntime,
    pub image: String,
    pub args: Vec<String>,
    pub mounts: Vec<String>,
    pub shm_size: String,
    /// `--gpus all`: unless `job.device = "cpu"`.
    pub gpus: bool,
}

impl ContainerPlan {
    pub fn new(container: &Container, device: Device) -> ContainerPlan {
        ContainerPlan {
            runtime: container.runtime,
            image: container.image.clone(),
            args: container.args.clone(),
            mounts: container.mounts.clone(),
            shm_size: container.shm_size.clone(),
            gpus: device == Device::Cuda,
        }
    }

    /// The command line that runs `inner` (a shell snippet: setup, then `exec` the launcher)
    /// in the container, with `workdir` mounted at the same path and as the working directory,
    /// and every variable in `env_names` passed through by name. The job shell runs it after
    /// `cd WORKDIR`; a relative workdir is therefore mounted as `$PWD`.
    pub fn run_command<'a>(
        &self,
        workdir: &str,
        env_names: impl IntoIterator<Item = &'a str>,
        inner: &str,
    ) -> String {
        let mut words = ShellLine::new();
        words.args([self.runtime.as_str(), "run", "--rm", "--init", "--name"]);
        words.raw(format!("\"${NAME_VAR}\""));
        words.args(["--network", "host"]);
        let ipc = self.ipc_in_args();
        if ipc.is_none() {
            words.args(["--ipc", "host"]);
        }
        // With the host's IPC namespace the container uses the host's /dev/shm: docker then
        // ignores the size, podman refuses it.
        if self.runtime == ContainerRuntime::Docker || ipc.is_some_and(|mode| mode != "host") {
            words.args(["--shm-size", &self.shm_size]);
        }
        // Pinned memory for the GPUs' RDMA (NCCL over InfiniBand): a node may refuse to raise
        // the limit (a root without CAP_SYS_RESOURCE), and gloo on CPUs has no use for it.
        if self.gpus {
            words.args(["--ulimit", "memlock=-1", "--gpus", "all"]);
        }
        words.arg("-v");
        if workdir.starts_with('/') {
            words.arg(format!("{workdir}:{workdir}")).arg("-w").arg(workdir);
        } else {
            words.raw("\"$PWD:$PWD\"").arg("-w").raw("\"$PWD\"");
        }
        for m in &self.mounts {
            words.args(["-v", m]);
        }
        for name in env_names {
            debug_assert!(crate::config::is_env_name(name), "invalid env name {name:?}");
            // No `=value`: the runtime takes the value from its own environment.
            words.args(["--env", name]);
        }
        words.args(&self.args).arg(&self.image);
        words.args(["sh", "-c", INNER_SHELL, "herd-job", inner]);
        words.line()
    }

    /// Whether `args` ask the runtime to pull the image (`--pull MODE` or `--pull=MODE`, any
    /// mode but `never`): a node without it then gets it as the job starts.
    pub fn pulls(&self) -> bool {
        self.args.iter().enumerate().any(|(i, a)| match a.strip_prefix("--pull") {
            Some("") => self.args.get(i + 1).is_some_and(|m| m != "never"),
            Some(rest) => rest.strip_prefix('=').is_some_and(|m| m != "never"),
            None => false,
        })
    }

    /// The IPC mode that `args` choose (`--ipc MODE` or `--ipc=MODE`), which replaces herd's
    /// `--ipc host`.
    fn ipc_in_args(&self) -> Option<&str> {
        self.args.iter().enumerate().find_map(|(i, a)| match a.strip_prefix("--ipc") {
            Some("") => Some(self.args.get(i + 1).map_or("", String::as_str)),
            Some(rest) => rest.strip_prefix('='),
            None => None,
        })
    }

    /// Whether `name` says which engine the runtime's client talks to, and how: docker's
    /// host, context, config and TLS; podman's connection, configuration and store. A list,
    /// not a prefix: these go into an argv (`with_client_env`), and a prefix would take
    /// `CONTAINER_PASSPHRASE` along.
    pub fn client_reads(&self, name: &str) -> bool {
        const DOCKER: [&str; 6] = [
            "DOCKER_HOST",
            "DOCKER_CONTEXT",
            "DOCKER_CONFIG",
            "DOCKER_TLS_VERIFY",
            "DOCKER_CERT_PATH",
            "DOCKER_API_VERSION",
        ];
        const PODMAN: [&str; 9] = [
            "CONTAINER_HOST",
            "CONTAINER_CONNECTION",
            "CONTAINER_SSHKEY",
            "CONTAINERS_CONF",
            "CONTAINERS_STORAGE_CONF",
            "CONTAINERS_REGISTRIES_CONF",
            "STORAGE_DRIVER",
            "STORAGE_OPTS",
            "XDG_RUNTIME_DIR",
        ];
        match self.runtime {
            ContainerRuntime::Docker => DOCKER.contains(&name),
            ContainerRuntime::Podman => PODMAN.contains(&name),
        }
    }

    /// `command`, for `sh`, with the client's settings among `env` (see `client_reads`)
    /// exported first: for the sweeps, which run on a node before the job's env is there.
    /// Without them a node whose `[env]` names its engine (a rootless docker's `DOCKER_HOST`, a
    /// store of its own) would be swept on another engine, and its leftovers stay. `env` holds
    /// plain values only: these appear in an argv (a forwarded secret does not, and a sweep
    /// does not see it).
    pub fn with_client_env<'a>(
        &self,
        env: impl IntoIterator<Item = (&'a str, &'a str)>,
        command: String,
    ) -> String {
        let words: Vec<String> =
            env.into_iter().filter(|(k, _)| self.client_reads(k)).map(|(k, v)| format!("{k}={v}")).collect();
        if words.is_empty() {
            return command;
        }
        format!("export {}; {command}", command_line(&words))
    }

    /// The command the agent runs once the job's process group is gone: a killed runtime
    /// client does not stop its container. Quiet and best effort.
    pub fn remove_command(&self, name: &str) -> String {
        let words = self.remove_words().iter().copied().chain([name]);
        format!("{} >/dev/null 2>&1 || true", command_line(words))
    }

    /// `RUNTIME rm -f`, at once: podman otherwise gives a running container 10 s to stop.
    fn remove_words(&self) -> &'static [&'static str] {
        match self.runtime {
            ContainerRuntime::Docker => &["docker", "rm", "-f"],
            ContainerRuntime::Podman => &["podman", "rm", "-f", "-t", "0"],
        }
    }

    /// A shell command that removes every container whose name starts with `prefix` but not
    /// with `spare` (see [`name_prefix`]) and prints `container NAME` for each. Does nothing,
    /// quietly, on a node without the runtime; prints `container-unlisted ERROR` when the
    /// runtime cannot list its containers (a store one broken container makes unreadable).
    pub fn sweep_command(&self, prefix: &str, spare: Option<&str>) -> String {
        let plain = |p: &str| p.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        debug_assert!(plain(prefix) && spare.is_none_or(plain), "{prefix} {spare:?}");
        let rt = self.runtime.as_str();
        let keep = match spare {
            None => String::new(),
            Some(spare) => format!(
                "names=$(for n in $names; do case $n in {}*) ;; *) echo $n ;; esac; done); [ -n \"$names\" ] || exit 0; ",
                command_line([spare])
            ),
        };
        format!(
            "command -v {rt} >/dev/null 2>&1 || exit 0; \
             names=$({rt} {ps} 2>/dev/null) || \
             {{ echo \"container-unlisted $({rt} {ps} 2>&1 >/dev/null | tail -n 1)\"; exit 0; }}; \
             [ -n \"$names\" ] || exit 0; {keep}{rm} $names >/dev/null 2>&1; \
             for n in $names; do echo \"container $n\"; done; exit 0",
            ps = format!(
                "ps -a --filter {} --format '{{{{.Names}}}}'",
                command_line([format!("name=^{prefix}")])
            ),
            rm = self.remove_words().join(" "),
        )
    }
}

/// The name of one node's container in one attempt: unique per config, run, attempt and node,
/// and matched by [`name_prefix`]. Only `[a-zA-Z0-9_.-]`, as container names must be.
pub fn name(config_key: &str, run_id: &str, attempt: u32, node_rank: usize) -> String {
    format!("{}{node_rank}", attempt_prefix(config_key, run_id, attempt))
}

/// The start of the names of every container of one attempt of a run.
pub fn attempt_prefix(config_key: &str, run_id: &str, attempt: u32) -> String {
    format!("{}{attempt}-", name_prefix(config_key, Some(run_id)))
}

/// The start of the names of every container of this config's runs, or of one run.
pub fn name_prefix(config_key: &str, run_id: Option<&str>) -> String {
    match run_id {
        Some(run) => format!("herd-{config_key}-{run}-"),
        None => format!("herd-{config_key}-"),
    }
}

/// The containers a sweep removed, from its output (other lines are ignored).
pub fn parse_removed(out: &str) -> Vec<String> {
    out.lines().filter_map(|l| l.strip_prefix("container ")).map(|n| n.trim().to_string()).collect()
}

/// Why a sweep could not list the node's containers, from its output, if it could not.
pub fn parse_unlisted(out: &str) -> Option<&str> {
    out.lines().find_map(|l| l.strip_prefix("container-unlisted ")).map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container;
    use crate::plan::{self, AttemptValues, PlanInputs};
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::process::Command;

    fn docker() -> ContainerPlan {
        ContainerPlan {
            runtime: ContainerRuntime::Docker,
            image: "nvcr.io/nvidia/pytorch:24.05-py3".into(),
            args: vec![],
            mounts: vec![],
            shm_size: "8g".into(),
            gpus: true,
        }
    }

    /// The words the job shell would pass to the runtime: the command run through `sh` with a
    /// `printf` in place of the runtime, variables set as the agent would.
    fn argv_of(command: &str, env: &[(&str, &str)]) -> Vec<String> {
        let (_, rest) = command.split_once(' ').unwrap();
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("printf '%s\\0' {rest}"))
            .env_clear()
            .current_dir("/tmp")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
            .split(|&b| b == 0)
            .filter(|w| !w.is_empty())
            .map(|w| String::from_utf8(w.to_vec()).unwrap())
            .collect()
    }

    fn has_pair(argv: &[String], flag: &str, value: &str) -> bool {
        argv.windows(2).any(|w| w[0] == flag && w[1] == value)
    }

    #[test]
    fn run_command_has_the_flags_distributed_training_needs() {
        let cmd = docker().run_command("/shared/project", ["A", "B"], "exec torchrun x.py");
        assert!(cmd.starts_with("docker run --rm --init --name \"$HERD_CONTAINER\" "), "{cmd}");
        let argv = argv_of(&cmd, &[("HERD_CONTAINER", "herd-k-r-0-1")]);
        assert_eq!(&argv[..3], ["run", "--rm", "--init"]);
        for (flag, value) in [
            ("--name", "herd-k-r-0-1"),
            ("--network", "host"),
            ("--ipc", "host"),
            ("--shm-size", "8g"),
            ("--ulimit", "memlock=-1"),
            ("--gpus", "all"),
            ("-v", "/shared/project:/shared/project"),
            ("-w", "/shared/project"),
            ("--env", "A"),
            ("--env", "B"),
        ] {
            assert!(has_pair(&argv, flag, value), "{flag} {value} missing from {argv:?}");
        }
        let image = argv.iter().position(|w| w == "nvcr.io/nvidia/pytorch:24.05-py3").unwrap();
        assert_eq!(&argv[image + 1..image + 3], ["sh", "-c"]);
        assert_eq!(argv[image + 4], "herd-job");
        assert_eq!(argv[image + 5], "exec torchrun x.py");
        assert_eq!(argv.len(), image + 6);
    }

    #[test]
    fn the_clients_own_settings_are_exported_before_a_sweep() {
        let env = [
            ("DOCKER_HOST", "unix:///run/user/1000/docker.sock"),
            ("NCCL_DEBUG", "WARN"),
            ("CONTAINERS_STORAGE_CONF", "/etc/my storage.conf"),
        ];
        let podman = ContainerPlan { runtime: ContainerRuntime::Podman, ..docker() };
        let show = "printf '%s|' \"${DOCKER_HOST-}\" \"${NCCL_DEBUG-}\" \"${CONTAINERS_STORAGE_CONF-}\"";
        let run = |c: &ContainerPlan| {
            let line = c.with_client_env(env, show.to_string());
            let out = Command::new("sh").arg("-c").arg(&line).env_clear().output().unwrap();
            String::from_utf8(out.stdout).unwrap()
        };
        assert_eq!(run(&docker()), "unix:///run/user/1000/docker.sock|||");
        assert_eq!(run(&podman), "||/etc/my storage.conf|");
        // None of the client's: the command as it was. Nor a passphrase, whatever its prefix.
        assert_eq!(docker().with_client_env([("NCCL_DEBUG", "WARN")], "true".into()), "true");
        assert_eq!(podman.with_client_env([("CONTAINER_PASSPHRASE", "x")], "true".into()), "true");
    }

    #[test]
    fn pull_in_args_is_seen_in_either_spelling_and_never_is_no_pull() {
        let with =
            |args: &[&str]| ContainerPlan { args: args.iter().map(|a| a.to_string()).collect(), ..docker() };
        assert!(with(&["--pull", "missing"]).pulls() && with(&["--pull=always"]).pulls());
        assert!(!with(&["--pull", "never"]).pulls() && !with(&["--pull=never"]).pulls());
        assert!(!with(&[]).pulls() && !with(&["--pull"]).pulls() && !with(&["--pullx=1"]).pulls());
    }

    #[test]
    fn no_gpus_on_cpu_and_podman_is_the_runtime_word() {
        let cpu = ContainerPlan { gpus: false, runtime: ContainerRuntime::Podman, ..docker() };
        let cmd = cpu.run_command("/w", [], "exec true");
        assert!(cmd.starts_with("podman run "), "{cmd}");
        assert!(!cmd.contains("--gpus") && !cmd.contains("--ulimit"), "{cmd}");
        assert_eq!(
            cpu.remove_command("herd-k-r-0-0"),
            "podman rm -f -t 0 herd-k-r-0-0 >/dev/null 2>&1 || true"
        );
        assert!(cpu.sweep_command("herd-k-", None).contains("podman rm -f -t 0 $names"));
        assert_eq!(docker().remove_command("n"), "docker rm -f n >/dev/null 2>&1 || true");
        assert!(cpu.sweep_command("herd-k-", None).starts_with("command -v podman "));
        assert!(docker()
            .sweep_command("herd-k-", None)
            .contains("docker ps -a --filter 'name=^herd-k-' --format '{{.Names}}'"));
        // The plan picks cpu from job.device.
        let container = Container {
            image: "i".into(),
            runtime: ContainerRuntime::Docker,
            args: vec![],
            mounts: vec![],
            shm_size: "1g".into(),
        };
        assert!(!ContainerPlan::new(&container, Device::Cpu).gpus);
        assert!(ContainerPlan::new(&container, Device::Cuda).gpus);
    }

    #[test]
    fn podman_gets_no_shm_size_with_host_ipc_and_args_may_choose_the_ipc() {
        let podman = ContainerPlan { runtime: ContainerRuntime::Podman, ..docker() };
        let argv = argv_of(&podman.run_command("/w", [], "exec true"), &[]);
        assert!(has_pair(&argv, "--ipc", "host") && !argv.contains(&"--shm-size".to_string()), "{argv:?}");
        for args in [vec!["--ipc", "private"], vec!["--ipc=shareable"]] {
            let args: Vec<String> = args.into_iter().map(String::from).collect();
            for c in
                [ContainerPlan { args: args.clone(), ..podman.clone() }, ContainerPlan { args, ..docker() }]
            {
                let argv = argv_of(&c.run_command("/w", [], "exec true"), &[]);
                assert!(!has_pair(&argv, "--ipc", "host"), "{argv:?}");
                assert!(has_pair(&argv, "--shm-size", "8g"), "{argv:?}");
            }
        }
        let c = ContainerPlan { args: vec!["--ipc=host".into()], ..podman };
        let argv = argv_of(&c.run_command("/w", [], "exec true"), &[]);
        assert!(!argv.contains(&"--shm-size".to_string()), "{argv:?}");
    }

    #[test]
    fn mounts_args_and_relative_workdir() {
        let c = ContainerPlan {
            mounts: vec!["/data:/data:ro".into(), "/my files:/files".into()],
            args: vec!["--label".into(), "team=it's \"ml\"".into(), "--pull=always".into()],
            ..docker()
        };
        let argv = argv_of(&c.run_command("project", [], "exec true"), &[]);
        assert!(has_pair(&argv, "-v", "/data:/data:ro"), "{argv:?}");
        assert!(has_pair(&argv, "-v", "/my files:/files"), "{argv:?}");
        assert!(has_pair(&argv, "--label", "team=it's \"ml\""), "{argv:?}");
        // A relative workdir is where the job shell's `cd` went.
        assert!(has_pair(&argv, "-v", "/tmp:/tmp"), "{argv:?}");
        assert!(has_pair(&argv, "-w", "/tmp"), "{argv:?}");
        // Extra args come after herd's flags (so they can override them) and before the image.
        let label = argv.iter().position(|w| w == "--label").unwrap();
        let image = argv.iter().position(|w| w == &c.image).unwrap();
        let last_flag = argv.iter().rposition(|w| w == "-v").unwrap();
        assert!(last_flag < label && label < image && argv[image - 1] == "--pull=always", "{argv:?}");
    }

    #[test]
    fn inner_snippet_with_quotes_survives_and_runs() {
        let inner = "{\nX='a b'; export X # comment\n} || exit 3\nexec printf '%s|' \"$X\" \"it's\"";
        let cmd = docker().run_command("/w", [], inner);
        let argv = argv_of(&cmd, &[]);
        assert_eq!(argv.last().unwrap(), inner);
        // What the image's shell would do with it.
        let image = argv.iter().position(|w| w == &docker().image).unwrap();
        let out = Command::new(&argv[image + 1]).args(&argv[image + 2..]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "a b|it's|");
    }

    #[test]
    fn names_are_valid_container_names_and_match_their_prefixes() {
        let n = name("0123456789abcdef", "20261130-105803-abcd", 3, 12);
        assert_eq!(n, "herd-0123456789abcdef-20261130-105803-abcd-3-12");
        let mut chars = n.chars();
        assert!(chars.next().unwrap().is_ascii_alphanumeric());
        assert!(chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')), "{n}");
        assert!(n.starts_with(&name_prefix("0123456789abcdef", Some("20261130-105803-abcd"))));
        assert!(n.starts_with(&name_prefix("0123456789abcdef", None)));
        assert!(!n.starts_with(&name_prefix("0123456789abcdef", Some("20261130-105803-abc"))));
        assert_eq!(parse_removed("container herd-a-1\n17\ncontainer herd-a-2\n"), ["herd-a-1", "herd-a-2"]);
    }

    const CONFIG: &str = r#"
[[nodes]]
host = "n[1-2]"
[job]
script = "train.py"
setup = "source /opt/venv/bin/activate"
forward_env = ["WANDB_API_KEY"]
[env]
NCCL_DEBUG = "WARN"
[container]
image = "img"
"#;

    fn plan(text: &str) -> plan::LaunchPlan {
        let config = crate::config::parse(Path::new("c.toml"), text).unwrap();
        let env: BTreeMap<String, String> =
            [("WANDB_API_KEY".to_string(), "s3cr3t-value".to_string())].into();
        plan::build(&config, &PlanInputs { cwd: "/w".into(), env, ..Default::default() })
    }

    #[test]
    fn the_plan_passes_every_variable_by_name_and_no_value_in_argv() {
        let p = plan(CONFIG);
        let values = AttemptValues { run_id: "r1", attempt: 2, master_port: 29500, interfaces: &[] };
        for node in &p.nodes {
            let snippet = p.job_snippet(node);
            let command = node.container_command.as_deref().unwrap();
            assert!(snippet.starts_with("cd -- /w || "), "{snippet}");
            assert!(snippet.ends_with(&format!("exec {command}")), "{snippet}");
            // setup runs inside, not before the runtime.
            assert_eq!(snippet.matches("source /opt/venv/bin/activate").count(), 1);
            let env = node.resolved_env(&values);
            let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let argv = argv_of(command, &env_refs);
            for (k, v) in &env {
                assert!(has_pair(&argv, "--env", k), "--env {k} missing");
                if k != NAME_VAR {
                    assert!(
                        !argv.iter().any(|w| w.contains(v.as_str()) && !v.is_empty() && v.len() > 2),
                        "{k}={v} in {argv:?}"
                    );
                }
            }
            assert!(!argv.iter().any(|w| w.contains("s3cr3t")), "secret in argv {argv:?}");
            assert!(!snippet.contains("s3cr3t"));
            let name = container::name(&p.config_key, "r1", 2, node.node_rank);
            assert!(has_pair(&argv, "--name", &name), "{argv:?}");
            assert_eq!(
                p.container_cleanup(node, &values).unwrap(),
                format!("docker rm -f {name} >/dev/null 2>&1 || true")
            );
        }
    }

    #[test]
    fn without_a_container_nothing_changes() {
        let p = plan(CONFIG.split("[container]").next().unwrap());
        let values = AttemptValues { run_id: "r1", attempt: 0, master_port: 1, interfaces: &[] };
        assert!(p.container.is_none());
        for node in &p.nodes {
            assert!(node.container_command.is_none());
            assert!(!node.env.contains_key(NAME_VAR));
            assert!(p.container_cleanup(node, &values).is_none());
            assert!(p.job_snippet(node).contains("source /opt/venv/bin/activate\n}"));
        }
    }

    #[test]
    fn a_sweep_that_spares_a_run_removes_only_the_other_runs_containers() {
        // A fake runtime on PATH: `ps` lists three containers of the config (by the name
        // filter), `rm` records.
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("rm");
        let fake = dir.path().join("docker");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\ncase $1 in ps) printf 'herd-k-old-0-1\\nherd-k-now-0-0\\nherd-k-old-1-0\\n' | grep \"^${{4#name=^}}\" ;; rm) shift; echo \"$@\" >> {} ;; esac\n",
                log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let path = format!("{}:{}", dir.path().display(), std::env::var("PATH").unwrap_or_default());
        let sweep = |spare: Option<&str>| {
            let out = Command::new("sh")
                .arg("-c")
                .arg(docker().sweep_command("herd-k-", spare))
                .env("PATH", &path)
                .output()
                .unwrap();
            assert!(out.status.success());
            parse_removed(&String::from_utf8_lossy(&out.stdout))
        };
        assert_eq!(sweep(Some("herd-k-now-")), ["herd-k-old-0-1", "herd-k-old-1-0"]);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "-f herd-k-old-0-1 herd-k-old-1-0\n");
        assert_eq!(sweep(None).len(), 3);
        // Nothing but the spared run: nothing removed, no `rm` at all.
        std::fs::remove_file(&log).unwrap();
        let only_now = docker().sweep_command("herd-k-now-", Some("herd-k-now-"));
        let out = Command::new("sh").arg("-c").arg(only_now).env("PATH", &path).output().unwrap();
        assert!(out.stdout.is_empty() && !log.exists(), "{out:?}");
        // A store the runtime cannot read: the sweep says so, with the runtime's last word.
        std::fs::write(
            &fake,
            "#!/bin/sh\necho 'level=error msg=first' >&2\necho 'Error: broken store' >&2\nexit 125\n",
        )
        .unwrap();
        let out = Command::new("sh")
            .arg("-c")
            .arg(docker().sweep_command("herd-k-", None))
            .env("PATH", &path)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            (parse_unlisted(&out), parse_removed(&out).len()),
            (Some("Error: broken store"), 0),
            "{out}"
        );
    }
}
