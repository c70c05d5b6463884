//! A testbed plus the torch virtualenv, and the cluster file that points herd at it.

use std::path::PathBuf;
use std::time::Duration;

use super::herd;
use super::testbed::Testbed;

/// Generous: a 2-core machine running six torch ranks plus launchers is slow to start.
pub const LIMIT: Duration = Duration::from_secs(180);

/// A `command` job in which node 1 fails on attempt 0, as a rank that lost its peer would
/// (a restartable `comm` failure); otherwise a node prints `done` and exits.
pub const NODE_1_FAILS_ONCE: &str = "launcher = \"command\"\nscript = \"sh\"\nargs = [\"-c\", \"\
    if [ $HERD_ATTEMPT = 0 ] && [ $NODE_RANK = 1 ]; then \
    echo 'RuntimeError: Connection closed by peer' >&2; exit 1; fi; echo done\"]";

pub struct Cluster {
    pub tb: Testbed,
    pub venv: PathBuf,
}

impl Cluster {
    pub fn new(n: usize) -> Cluster {
        let venv = herd::torch_venv();
        Cluster { tb: Testbed::new(n), venv }
    }

    pub fn hostlist(&self) -> String {
        let k = self.tb.k();
        format!("10.77.{k}.[2-{}]", self.tb.nodes().len() + 1)
    }

    pub fn addr(&self, node: usize) -> &str {
        &self.tb.nodes()[node].addr
    }

    pub fn logs(&self) -> PathBuf {
        self.tb.dir().join("logs")
    }

    /// Wait until node `node`'s log of attempt 0 shows `line` (training under way: a step
    /// printed), or panic if herd exits first or `LIMIT` passes.
    pub fn wait_training(&self, running: &mut herd::Running, node: usize, line: &str) {
        let log = format!("attempt-0/node{node}-{}.log", self.addr(node));
        let trained = running.until(LIMIT, || {
            let runs = std::fs::read_dir(self.logs()).into_iter().flatten().flatten();
            runs.into_iter().any(|run| {
                std::fs::read_to_string(run.path().join(&log)).is_ok_and(|text| text.contains(line))
            })
        });
        assert!(trained, "training did not start: no {line:?} in node {node}'s log");
    }

    /// Write cluster.toml: the testbed's [ssh], all its hosts, the given [job] body, and
    /// anything else after it.
    pub fn write_config(&self, job: &str, extra: &str) -> PathBuf {
        let text = format!(
            "{ssh}\n[[nodes]]\nhost = \"{hosts}\"\n\n[job]\nworkdir = \"{wd}\"\ndevice = \"cpu\"\nsetup = \"source {venv}/bin/activate\"\n{job}\n\n\
             [rendezvous]\ninterface = \"eth0\"\n\n[logs]\ndir = \"{logs}\"\n\n{extra}\n",
            ssh = self.tb.ssh_config_toml(),
            hosts = self.hostlist(),
            wd = herd::repo_root().display(),
            venv = self.venv.display(),
            logs = self.logs().display(),
        );
        let path = self.tb.dir().join("cluster.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    pub fn run(&self) -> herd::Finished {
        herd::run(self.tb.dir(), &["run"], LIMIT)
    }

    /// Live processes on any node whose environment holds KEY=VALUE.
    pub fn leftovers(&self, key: &str, value: &str) -> Vec<(usize, u32)> {
        (0..self.tb.nodes().len())
            .flat_map(|i| self.tb.processes_with_env(i, key, value).into_iter().map(move |p| (i, p)))
            .collect()
    }
}
