//! The cluster config: `cluster.toml` -> validated [`Config`].
//!
//! [`load`] reads a file, [`parse`] validates text. Every problem is a [`ConfigError`]
//! that names the file and, when the problem is at one place in it, the line, column and source
//! line of the offending value.
//!
//! The nodes come from `[[nodes]]` or from `nodes_from` (a hostfile or the Slurm allocation);
//! what that reads outside the config file (the environment, the hostfile) goes through
//! [`LoadOptions`], so [`load_with`] and [`parse_with`] are testable without either.
//!
//! One file per TOML section validates it, with its tests: `ssh`, `nodes`, `job`, `env`,
//! `rendezvous`, `logs`, `restart`, `container`. `check` holds what they share, `load` the
//! whole file, `types` what they produce.

mod check;
mod container;
mod env;
mod error;
pub mod hostfile;
pub mod hostlist;
mod job;
mod load;
mod logs;
mod nodes;
mod notify;
pub mod ranks;
mod raw;
mod rendezvous;
mod restart;
pub mod select;
mod ssh;
pub mod suggest;
#[cfg(test)]
mod testing;
mod transport;
mod types;

pub use check::{
    check_host, is_env_name, is_env_pattern, LoadOptions, MAX_NODES, MAX_NPROC, OUTSIDE_ALLOCATION,
    RESERVED_ENV, SLURM_NODELIST_VARS,
};
pub use error::{help_line, line_col, ConfigError, Location};
pub use hostlist::HostlistError;
pub use load::{load, load_with, parse, parse_with};
pub use ranks::RankList;
pub use restart::{latest_glob, LATEST};
pub use select::{select_nodes, SelectionError};
pub use transport::refused_option;
pub use types::*;

#[cfg(test)]
mod tests {
    use super::testing::*;

    #[test]
    fn full_example_parses() {
        let config = parse_ok(FULL);
        let gpu = |host: &str| Node {
            host: host.to_string(),
            addr: None,
            nproc: Some(8),
            user: Some("x".to_string()),
            port: Some(2222),
            env: [("NCCL_IB_HCA".to_string(), "mlx5_0".to_string())].into(),
        };
        let expected = Config {
            path: PathBuf::from("cluster.toml"),
            ssh: SshSettings {
                user: Some("ubuntu".into()),
                port: Some(22),
                identity_file: Some("~/.ssh/id_ed25519".into()),
                known_hosts: KnownHostsPolicy::AcceptNew,
                known_hosts_file: Some("/path/known_hosts".into()),
                connect_timeout: Duration::from_secs(20),
                login_timeout: DEFAULT_LOGIN_TIMEOUT,
            },
            nodes: vec![
                gpu("gpu-01"),
                gpu("gpu-02"),
                Node { addr: Some("10.0.0.11".into()), ..node("head") },
            ],
            job: Job {
                launcher: LauncherKind::Deepspeed,
                script: "train.py".into(),
                args: vec!["--config".into(), "cfg.yaml".into()],
                module: true,
                workdir: Some("/shared/project".into()),
                nproc_per_node: 4,
                setup: Some("source /opt/venv/bin/activate".into()),
                launcher_args: vec!["--no_local_rank".into()],
                forward_env: vec!["WANDB_API_KEY".into(), "HF_*".into()],
                python: Some("/opt/venv/bin/python".into()),
                device: Device::Cuda,
                nnodes: None,
            },
            env: [
                ("NCCL_DEBUG".to_string(), "WARN".to_string()),
                ("OMP_NUM_THREADS".to_string(), "4".to_string()),
            ]
            .into(),
            rendezvous: Rendezvous {
                master: Some("head".into()),
                port: PortSpec::Fixed(29500),
                port_range: (30000, 31000),
                interface: Some("eth0".into()),
            },
            logs: Logs { dir: PathBuf::from("/var/log/herd"), console: None },
            restart: Restart {
                max_restarts: 5,
                on: vec![FailureClass::Comm, FailureClass::Oom],
                backoff: Duration::from_secs(5),
                backoff_max: Duration::from_secs(60),
                grace_period: Duration::from_secs(20),
                hang_timeout: Some(Duration::from_secs(30 * 60)),
                stall_timeout: None,
                progress_pattern: Some("step \\d+".into()),
                node_wait: Duration::from_secs(120),
                heartbeat_timeout: Duration::from_secs(30),
                rules: vec![
                    RuleSpec { pattern: "my custom error".into(), class: FailureClass::Comm, blame: false },
                    RuleSpec { pattern: "disk full".into(), class: FailureClass::User, blame: false },
                ],
                min_nodes: None,
                resume_args: vec![],
                on_straggler: OnStraggler::Replace,
                checkpoint_signal: CheckpointSignal::parse("TERM").unwrap(),
                checkpoint_grace: Duration::from_secs(90),
            },
            container: None,
            notify: None,
            transport: TransportSettings::Ssh,
        };
        assert_eq!(config, expected);
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let config = parse_ok(&format!("[[nodes]]\nhost = \"a\"\n{JOB}"));
        assert_eq!(
            config,
            Config {
                path: PathBuf::from("cluster.toml"),
                ssh: SshSettings {
                    user: None,
                    port: None,
                    identity_file: None,
                    known_hosts: KnownHostsPolicy::Strict,
                    known_hosts_file: None,
                    connect_timeout: Duration::from_secs(10),
                    login_timeout: DEFAULT_LOGIN_TIMEOUT,
                },
                nodes: vec![node("a")],
                job: Job {
                    launcher: LauncherKind::Torchrun,
                    script: "train.py".into(),
                    args: vec![],
                    module: false,
                    workdir: None,
                    nproc_per_node: 1,
                    setup: None,
                    launcher_args: vec![],
                    forward_env: vec![],
                    python: None,
                    device: Device::Cuda,
                    nnodes: None,
                },
                env: BTreeMap::new(),
                rendezvous: Rendezvous {
                    master: None,
                    port: PortSpec::Auto,
                    port_range: (20000, 40000),
                    interface: None,
                },
                logs: Logs { dir: PathBuf::from("herd-logs"), console: None },
                restart: Restart {
                    max_restarts: 3,
                    on: vec![
                        FailureClass::Comm,
                        FailureClass::NodeLost,
                        FailureClass::Hang,
                        FailureClass::Port,
                        FailureClass::Crash,
                    ],
                    backoff: Duration::from_secs(10),
                    backoff_max: Duration::from_secs(300),
                    grace_period: Duration::from_secs(10),
                    hang_timeout: None,
                    stall_timeout: Some(Duration::from_secs(90)),
                    progress_pattern: None,
                    node_wait: Duration::from_secs(300),
                    heartbeat_timeout: Duration::from_secs(15),
                    rules: vec![],
                    min_nodes: None,
                    resume_args: vec![],
                    on_straggler: OnStraggler::Report,
                    checkpoint_signal: CheckpointSignal::default(),
                    checkpoint_grace: Duration::from_secs(60),
                },
                container: None,
                notify: None,
                transport: TransportSettings::Ssh,
            }
        );
    }

    #[test]
    fn empty_tables_get_defaults() {
        let text = format!("[ssh]\n[[nodes]]\nhost = \"a\"\n{JOB}[env]\n[rendezvous]\n[logs]\n[restart]\n");
        let config = parse_ok(&text);
        assert_eq!(config.ssh, SshSettings::default());
        assert_eq!(config.rendezvous, Rendezvous::default());
        assert_eq!(config.logs, Logs::default());
        assert_eq!(config.restart, Restart::default());
        // `[[restart.rules]]` alone creates `[restart]` implicitly.
        let text =
            format!("[[nodes]]\nhost = \"a\"\n{JOB}[[restart.rules]]\npattern = \"x\"\nclass = \"oom\"\n");
        let restart = parse_ok(&text).restart;
        assert_eq!(restart.max_restarts, 3);
        assert_eq!(restart.rules, [RuleSpec { pattern: "x".into(), class: FailureClass::Oom, blame: false }]);
    }

    #[test]
    fn unknown_keys_anywhere() {
        assert_err(
            "[jobs]\nscript = \"x\"\n",
            1,
            2,
            "unknown field `jobs`, expected one of `nodes_from`, `ssh`, `nodes`, `job`, `env`, `rendezvous`, `logs`, `restart`, `container`, `notify`, `transport`",
        );
        assert_err(
            "[ssh]\nusr = \"x\"\n",
            2,
            1,
            "unknown field `usr`, expected one of `user`, `port`, `identity_file`, `known_hosts`, `known_hosts_file`, `connect_timeout`, `login_timeout`",
        );
        assert_err(
            "[[nodes]]\nhost = \"a\"\nnprocs = 2\n",
            3,
            1,
            "unknown field `nprocs`, expected one of `host`, `addr`, `nproc`, `user`, `port`, `env`",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\n{JOB}scirpt = \"y\"\n"),
            5,
            1,
            "unknown field `scirpt`, expected one of `launcher`, `script`, `args`, `module`, `workdir`, `nproc_per_node`, `setup`, `launcher_args`, `forward_env`, `python`, `device`, `nnodes`",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\n{JOB}[[restart.rules]]\npattern = \"x\"\nclass = \"comm\"\nklass = 1\n"),
            8,
            1,
            "unknown field `klass`, expected one of `pattern`, `class`, `blame`",
        );
    }

    #[test]
    fn did_you_mean_for_misspelt_names() {
        let base = "[[nodes]]\nhost = \"a\"\n";
        let cases = [
            (format!("{base}{JOB}nproc_per_nod = 2\n"), "nproc_per_node"),
            (format!("{base}[job]\nscirpt = \"x\"\n"), "script"),
            (format!("[jobs]\nscript = \"x\"\n{base}"), "job"),
            (format!("[ssh]\nusr = \"x\"\n{base}{JOB}"), "user"),
            (format!("{base}nprocs = 2\n{JOB}"), "nproc"),
            (format!("node_from = \"slurm\"\n{base}{JOB}"), "nodes_from"),
            (format!("{base}{JOB}[[restart.rules]]\npattern = \"x\"\nclas = \"comm\"\n"), "class"),
            (format!("{base}{JOB}launcher = \"torchrunn\"\n"), "torchrun"),
            (format!("{base}{JOB}launcher = \"deepseed\"\n"), "deepspeed"),
            (format!("[ssh]\nknown_hosts = \"accept_new\"\n{base}{JOB}"), "accept-new"),
            (format!("{base}{JOB}[restart]\non = [\"node_lost\"]\n"), "node-lost"),
            (format!("{base}{JOB}[[restart.rules]]\npattern = \"x\"\nclass = \"comms\"\n"), "comm"),
            (format!("{base}{JOB}device = \"cudа\"\n"), "cuda"),
            (format!("{base}{JOB}device = \"cpus\"\n"), "cpu"),
        ];
        for (text, want) in cases {
            assert_eq!(help_of(&text), Some(format!("did you mean {want:?}?")), "{text}");
        }
        // Nothing close: no help line.
        assert_eq!(help_of(&format!("{base}{JOB}launcher = \"mpirun\"\n")), None);
        assert_eq!(help_of(&format!("{base}{JOB}[restart]\non = [\"segfault\"]\n")), None);
        assert_eq!(help_of(&format!("{base}{JOB}zzz = 1\n")), None);
    }

    #[test]
    fn unknown_key_help_reads_every_serde_shape() {
        assert_eq!(
            unknown_key_help("unknown field `clas`, expected one of `pattern`, `class`, `blame`").as_deref(),
            Some("did you mean \"class\"?")
        );
        assert_eq!(
            unknown_key_help("unknown field `dirr`, expected `dir`").as_deref(),
            Some("did you mean \"dir\"?")
        );
        assert_eq!(unknown_key_help("invalid type: integer `5`, expected a string"), None);
    }

    #[test]
    fn type_errors_are_located() {
        assert_err(
            "[[nodes]]\nhost = \"a\"\nnproc = \"8\"\n",
            3,
            9,
            "invalid type: string \"8\", expected an integer",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\n{JOB}args = \"--x\"\n"),
            5,
            8,
            "invalid type: string \"--x\", expected an array",
        );
        assert_err("[[nodes]]\nport = 22\n", 1, 1, "missing required key `host`");
        assert_err("[[nodes]]\nhost = \"a\"\n[job]\nargs = []\n", 3, 1, "missing required key `script`");
    }

    #[test]
    fn counts_at_least_one() {
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\nnproc = 0\n{JOB}"),
            3,
            9,
            "nodes[0].nproc must be at least 1, found 0",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\n{JOB}nproc_per_node = -2\n"),
            5,
            18,
            "job.nproc_per_node must be at least 1, found -2",
        );
    }

    #[test]
    fn unknown_names() {
        let base = "[[nodes]]\nhost = \"a\"\n";
        assert_err(
            &format!("{base}[job]\nscript = \"x\"\nlauncher = \"mpirun\"\n"),
            5,
            12,
            "unknown launcher \"mpirun\": expected one of torchrun, deepspeed, command",
        );
        assert_err(
            &format!("[ssh]\nknown_hosts = \"yes\"\n{base}{JOB}"),
            2,
            15,
            "unknown known_hosts policy \"yes\": expected one of strict, accept-new",
        );
        assert_err(
            &format!("{base}{JOB}[restart]\non = [\"comm\", \"segfault\"]\n"),
            6,
            15,
            "unknown restart class \"segfault\" in restart.on: expected one of comm, node-lost, hang, port, crash, oom, user, launch",
        );
        assert_err(
            &format!("{base}{JOB}[[restart.rules]]\npattern = \"x\"\nclass = \"nccl\"\n"),
            7,
            9,
            "unknown restart class \"nccl\" in restart.rules[0].class: expected one of comm, node-lost, hang, port, crash, oom, user, launch",
        );
    }

    #[test]
    fn bad_durations() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}");
        assert_err(
            &format!("{base}[restart]\nbackoff = \"10\"\n"),
            6,
            11,
            "invalid duration \"10\" for restart.backoff: time unit needed, for example 10sec or 10ms (write e.g. \"10s\", \"5m\", \"1h 30m\")",
        );
        assert_err(
            &format!("[ssh]\nconnect_timeout = \"soon\"\n{base}"),
            2,
            19,
            "invalid duration \"soon\" for ssh.connect_timeout: expected number at 0 (write e.g. \"10s\", \"5m\", \"1h 30m\")",
        );
        assert_err(
            &format!("{base}[restart]\nnode_wait = 5\n"),
            6,
            13,
            "invalid type: integer `5`, expected a duration string such as \"10s\" or \"5m\"",
        );
        assert_err(
            &format!("{base}[restart]\nhang_timeout = \"0s\"\n"),
            6,
            16,
            "restart.hang_timeout must be greater than zero",
        );
        assert_err(
            &format!("{base}[restart]\nbackoff = \"10m\"\n"),
            6,
            11,
            "restart.backoff (10m) is longer than restart.backoff_max (5m)",
        );
        assert_err(
            &format!("{base}[restart]\nmax_restarts = -1\n"),
            6,
            16,
            "restart.max_restarts must be between 0 and 4294967295, found -1",
        );
    }

    #[test]
    fn every_number_is_bounded() {
        // nproc = 2000000000 on 3 nodes once gave "world size 1705032704".
        assert_err(
            &format!("[[nodes]]\nhost = \"n[1-3]\"\nnproc = 2000000000\n{JOB}"),
            3,
            9,
            "nodes[0].nproc must be at most 1024, found 2000000000",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\n{JOB}nproc_per_node = 5000\n"),
            5,
            18,
            "job.nproc_per_node must be at most 1024, found 5000",
        );
        // heartbeat_timeout = "1000000000h" once ended in a bogus ssh error.
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}");
        assert_err(
            &format!("{base}[restart]\nheartbeat_timeout = \"1000000000h\"\n"),
            6,
            21,
            "restart.heartbeat_timeout must be at most 1h, found \"1000000000h\"",
        );
        // "1ms" was taken, and every attempt then failed in 0.7 s; "0s" was refused.
        for short in ["1ms", "0s", "2s 999ms"] {
            assert_err(
                &format!("{base}[restart]\nheartbeat_timeout = \"{short}\"\n"),
                6,
                21,
                &format!(
                    "restart.heartbeat_timeout must be at least 3s (three of the agent's heartbeats, which \
                     come at most once a second), found \"{short}\""
                ),
            );
        }
        assert_eq!(
            parse_ok(&format!("{base}[restart]\nheartbeat_timeout = \"3s\"\n"))
                .restart
                .heartbeat_timeout
                .as_secs(),
            3
        );
        assert_err(
            &format!("{base}[restart]\nnode_wait = \"30days\"\n"),
            6,
            13,
            "restart.node_wait must be at most 7days, found \"30days\"",
        );
        // 20 entries of x[1-99999] once made `herd plan` use 7.8 GB: the total is bounded,
        // checked as the entries expand.
        let many: String = (0..20).map(|i| format!("[[nodes]]\nhost = \"x{i}-[1-99999]\"\n")).collect();
        let err = parse(Path::new("c.toml"), &format!("{many}{JOB}")).unwrap_err().to_string();
        assert!(err.starts_with("c.toml:2:8: too many nodes: with \"x0-[1-99999]\""), "{err}");
        let fine: String = (0..2).map(|i| format!("[[nodes]]\nhost = \"x{i}-[1-5000]\"\n")).collect();
        assert_eq!(parse_ok(&format!("{fine}{JOB}")).nodes.len(), MAX_NODES);
    }

    #[test]
    fn interface_and_other_strings() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}");
        for bad in ["", "eth 0", "../x"] {
            assert_err(
                &format!("{base}[rendezvous]\ninterface = \"{bad}\"\n"),
                6,
                13,
                &format!("invalid rendezvous.interface {bad:?}: expected a network interface name such as \"eth0\" (non-empty, no whitespace or '/')"),
            );
        }
        assert_err(&format!("{base}[logs]\ndir = \"\"\n"), 6, 7, "logs.dir must not be empty");
        assert_err(
            &format!("[ssh]\nuser = \"-oProxyCommand=x\"\n{base}"),
            2,
            8,
            "invalid ssh.user \"-oProxyCommand=x\": it starts with '-'",
        );
        assert_err(
            &format!("{base}[[restart.rules]]\npattern = \"\"\nclass = \"comm\"\n"),
            6,
            11,
            "restart.rules[0].pattern must not be empty",
        );
    }

    #[test]
    fn dotted_key_where_a_value_belongs() {
        assert_err(
            "[[nodes]]\nhost = \"a\"\n[rendezvous]\nport.x = 1\n",
            4,
            6,
            "expected a plain value here, found a dotted key (a table)",
        );
    }
}
