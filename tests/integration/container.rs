//! `[container]` on this machine alone, with a fake `docker` first on PATH, which records its
//! exact argv and environment (a real engine keeps neither), then runs the command meant for
//! the image here. It proves that the env reaches the runtime by name only (`--env NAME`, no
//! value in any argv), that the container is named after the run, and that teardown and
//! `herd kill` remove it. The real engines, docker and podman on the test cluster, are
//! `engines.rs`'.

use std::time::Duration;

use crate::support::herd;

const LIMIT: Duration = Duration::from_secs(60);
const SECRET: &str = "s3cr3t-token-value";

/// `docker run ...`: record argv (NUL-separated) and env, then run what follows the image.
/// `docker rm -f NAME`: record it. `docker ps ... --filter name=^PREFIX`: list one container.
const FAKE_DOCKER: &str = r#"#!/bin/sh
log=$FAKE_DOCKER_LOG
case $1 in
run)
  printf '%s\0' "$@" > "$log/run.argv"
  env > "$log/run.env"
  while [ "$1" != fake-image ]; do shift; done
  shift
  exec "$@"
  ;;
rm)
  echo "$*" >> "$log/rm"
  ;;
ps)
  while [ "$1" != --filter ]; do shift; done
  echo "${2#name=^}old-0-0"
  ;;
image)
  echo sha256:0123456789abcdef
  ;;
esac
"#;

struct Fixture {
    dir: tempfile::TempDir,
    path: String,
}

fn fixture(job: &str) -> Fixture {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(bin.join("docker"), FAKE_DOCKER).unwrap();
    std::fs::set_permissions(bin.join("docker"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(dir.path().join("log")).unwrap();
    std::fs::write(
        dir.path().join("cluster.toml"),
        format!(
            "[[nodes]]\nhost = \"localhost\"\n[job]\nlauncher = \"command\"\nscript = \"sh\"\n\
             args = [\"-c\", {job:?}]\ndevice = \"cpu\"\nforward_env = [\"WANDB_API_KEY\"]\n\
             [env]\nGREETING = \"hello there\"\n[container]\nimage = \"fake-image\"\n"
        ),
    )
    .unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    Fixture { dir, path }
}

impl Fixture {
    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join("log").join(name)).unwrap_or_default()
    }

    fn start(&self, args: &[&str]) -> herd::Running {
        let log = self.dir.path().join("log");
        let env = [
            ("PATH", self.path.as_str()),
            ("FAKE_DOCKER_LOG", log.to_str().unwrap()),
            ("WANDB_API_KEY", SECRET),
        ];
        herd::start(self.dir.path(), args, &env)
    }

    fn run_argv(&self) -> Vec<String> {
        self.log("run.argv").split('\0').filter(|w| !w.is_empty()).map(String::from).collect()
    }
}

fn value_after<'a>(argv: &'a [String], flag: &str) -> &'a str {
    let i = argv.iter().position(|w| w == flag).unwrap_or_else(|| panic!("{flag} not in {argv:?}"));
    &argv[i + 1]
}

#[test]
fn the_env_reaches_the_runtime_by_name_only_and_the_container_is_removed() {
    let f = fixture("echo \"inside $GREETING, key of ${#WANDB_API_KEY} bytes, in $PWD\"");
    let out = f.start(&["run"]).wait(LIMIT);
    out.assert_code(0);
    let workdir = std::fs::canonicalize(f.dir.path()).unwrap();
    assert!(
        out.stdout.contains(&format!(
            "inside hello there, key of {} bytes, in {}",
            SECRET.len(),
            workdir.display()
        )),
        "{out}"
    );

    let argv = f.run_argv();
    assert!(!argv.is_empty(), "the fake docker did not run\n{out}");
    assert!(!argv.iter().any(|w| w.contains(SECRET)), "the secret is in argv: {argv:?}");
    assert!(!argv.iter().any(|w| w.contains("hello there")), "a value is in argv: {argv:?}");
    // Every variable named by --env was in the runtime client's environment.
    let env = f.log("run.env");
    let passed: Vec<&str> = argv.windows(2).filter(|w| w[0] == "--env").map(|w| w[1].as_str()).collect();
    for name in ["WANDB_API_KEY", "GREETING", "HERD_MARKER", "MASTER_PORT", "HERD_CONTAINER", "NODE_RANK"] {
        assert!(passed.contains(&name), "--env {name} missing: {argv:?}");
    }
    for name in &passed {
        assert!(env.lines().any(|l| l.starts_with(&format!("{name}="))), "{name} not exported to docker");
    }
    assert!(env.contains(&format!("WANDB_API_KEY={SECRET}\n")));
    assert!(!argv.contains(&"--gpus".to_string()), "device = cpu: no --gpus");
    let name = value_after(&argv, "--name");
    let marker = env.lines().find_map(|l| l.strip_prefix("HERD_MARKER=")).unwrap();
    assert_eq!(name, format!("herd-{}", marker.replace(':', "-")), "named after the run's marker");
    assert_eq!(value_after(&argv, "-w"), workdir.to_str().unwrap());
    // The sweep before the run removed what the fake lists under the config's prefix; the
    // agent removed the run's container after the job.
    let prefix = name.rsplitn(6, '-').last().unwrap();
    assert_eq!(f.log("rm"), format!("rm -f {prefix}-old-0-0\nrm -f {name}\n"));
}

#[test]
fn an_interrupted_run_removes_its_container_and_herd_kill_sweeps_the_configs() {
    let f = fixture("echo started; sleep 30");
    let running = f.start(&["run", "--no-preflight"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while f.run_argv().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    running.signal("INT");
    let out = running.wait(LIMIT);
    out.assert_code(130);
    let argv = f.run_argv();
    let name = value_after(&argv, "--name").to_string();
    assert!(f.log("rm").contains(&format!("rm -f {name}\n")), "rm log: {:?}\n{out}", f.log("rm"));

    std::fs::remove_file(f.dir.path().join("log/rm")).unwrap();
    let out = f.start(&["kill"]).wait(LIMIT);
    out.assert_code(0);
    // The fake lists one container under the config's prefix; herd kill removes it.
    let prefix = name.rsplitn(6, '-').last().unwrap().to_string();
    let leftover = format!("{prefix}-old-0-0");
    assert!(out.stdout.contains(&format!("removed 1 container(s): {leftover}")), "{out}");
    assert_eq!(f.log("rm"), format!("rm -f {leftover}\n"));
}

/// Preflight checks the node for the runtime, not for the launcher (which is in the image).
#[test]
fn preflight_fails_on_a_node_without_the_runtime() {
    let f = fixture("echo never");
    // A PATH without the fake and without any docker: this machine has clients in
    // /usr/local/bin and /usr/bin (the engines' tests). Every other program of /usr/bin and
    // /bin, linked from a directory of the test's.
    let bin = f.dir.path().join("no-docker");
    std::fs::create_dir_all(&bin).unwrap();
    for dir in ["/usr/bin", "/bin"] {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let (name, to) = (entry.file_name(), bin.join(entry.file_name()));
            if name != "docker" && to.symlink_metadata().is_err() {
                std::os::unix::fs::symlink(entry.path(), to).unwrap();
            }
        }
    }
    let path = bin.display().to_string();
    let out = herd::start(f.dir.path(), &["run"], &[("PATH", path.as_str())]).wait(LIMIT);
    out.assert_code(3);
    assert!(out.stderr.contains("docker not found on PATH ([container] is set)"), "{out}");
    assert!(!out.stdout.contains("never"), "{out}");
}
