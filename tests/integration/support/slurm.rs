//! A real Slurm on the namespace testbed: munged and slurmctld on a service host of the
//! bridge (10.77.K.254, hostname `ctl`), one slurmd per node in the node's namespace, with the
//! node's hostname as its `NodeName` and its bridge address as `NodeAddr`. Everything runs in
//! namespaces of the testbed's slot, so the testbed's teardown (and its sweep of stale slots)
//! ends it. Commands on this machine reach it through `SLURM_CONF` (see [`Slurm::command`]).
//!
//! What makes it run without systemd or a cgroup hierarchy of its own: `proctrack/linuxproc`,
//! `task/none`, and `cgroup.conf` naming cgroup v1 at /sys/fs/cgroup (autodetection fails on a
//! /sys/fs/cgroup that is a tmpfs of v1 hierarchies).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::testbed::{self, Testbed};

/// How long the daemons may take to come up with every node idle, on a loaded machine.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Slurm {
    dir: PathBuf,
    conf: PathBuf,
    nodes: Vec<String>,
    daemons: Vec<Child>,
}

impl Slurm {
    /// Starts Slurm on `tb` and returns once every node is idle in `sinfo`.
    pub fn start(tb: &mut Testbed) -> Slurm {
        for bin in ["/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "/usr/bin/srun"] {
            assert!(Path::new(bin).exists(), "slurm testbed: {bin} missing: apt-get install slurm-wlm munge");
        }
        tb.name_every_node();
        let ctl = tb.service_host("ctl");
        let dir = tb.dir().join("slurm");
        fs::create_dir_all(dir.join("state")).unwrap();
        let nodes: Vec<String> = tb.nodes().iter().map(|n| n.hostname.clone()).collect();
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let socket = dir.join("munge.sock");
        let d = dir.display();
        // cred_expire: a requeued job waits this long before it may start again (Slurm's
        // default is 120 s); long enough still for a step's launch on a loaded machine. Then it
        // waits for the scheduler's next pass over pending jobs: sched_interval, 60 s by default.
        let mut conf = format!(
            "ClusterName=herdt{k}\nSlurmctldHost=ctl({addr})\nSlurmctldPort={port}\nSlurmdPort=6818\n\
             AuthType=auth/munge\nAuthInfo=socket={sock},cred_expire=30\nCredType=cred/munge\n\
             SlurmUser=root\nSlurmdUser=root\nStateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool-%n\n\
             SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd-%n.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd-%n.log\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSwitchType=switch/none\nMpiDefault=none\n\
             SchedulerType=sched/builtin\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
             ReturnToService=2\nSlurmdTimeout=30\nInactiveLimit=0\nKillWait=5\nMessageTimeout=30\n\
             SchedulerParameters=sched_interval=5\n\
             JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n",
            k = tb.k(),
            addr = ctl.addr,
            port = 20000 + tb.k(),
            sock = socket.display(),
        );
        for n in tb.nodes() {
            conf += &format!(
                "NodeName={} NodeAddr={} CPUs={cpus} CoresPerSocket={cpus} ThreadsPerCore=1\n",
                n.hostname, n.addr
            );
        }
        // A job in `urgent` preempts one in `herd` (the default): SIGTERM (and SIGCONT) to the
        // job, then GraceTime seconds before Slurm kills it.
        conf += "PreemptType=preempt/partition_prio\nPreemptMode=CANCEL\nSlurmctldParameters=preempt_send_user_signal\n";
        conf += &format!(
            "PartitionName=herd Nodes={n} Default=YES MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=30\n\
             PartitionName=urgent Nodes={n} MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF\n",
            n = nodes.join(",")
        );
        let conf_path = dir.join("slurm.conf");
        fs::write(&conf_path, conf).unwrap();
        fs::write(dir.join("cgroup.conf"), "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n")
            .unwrap();
        let mut slurm = Slurm { dir: dir.clone(), conf: conf_path.clone(), nodes, daemons: Vec::new() };

        // munged: its own key and socket, for this testbed only.
        let key = dir.join("munge.key");
        check(
            Command::new("mungekey").args(["--create", "--bits", "1024", "--keyfile"]).arg(&key),
            "mungekey",
        );
        fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o400)).unwrap();
        let munged = format!(
            "exec /usr/sbin/munged --foreground --force --key-file={d}/munge.key --socket={} \
             --pid-file={d}/munged.pid --log-file={d}/munged.log --seed-file={d}/munge.seed",
            socket.display()
        );
        slurm.spawn(&ctl.netns, "ctl", &munged, "munged");
        slurm.wait_for("munged's socket", || socket.exists());
        let ctld = format!("exec /usr/sbin/slurmctld -D -i -f {}", conf_path.display());
        slurm.spawn(&ctl.netns, "ctl", &ctld, "slurmctld");
        for n in tb.nodes() {
            let slurmd = format!("exec /usr/sbin/slurmd -D -N {} -f {}", n.hostname, conf_path.display());
            slurm.spawn(&n.netns, &n.hostname, &slurmd, &format!("slurmd-{}", n.hostname));
        }
        let want = format!("idle {}", slurm.nodes.len());
        let conf = slurm.conf.clone();
        slurm.wait_for("every node idle in sinfo", || {
            let out = Command::new("sinfo")
                .env("SLURM_CONF", &conf)
                .args(["--noheader", "--format", "%T %D"])
                .output();
            out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == want)
        });
        slurm
    }

    /// `program` with this Slurm's config in its environment.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf).stdin(Stdio::null());
        c
    }

    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// An allocation of `n` nodes with no shell (`salloc --no-shell`): the environment herd
    /// sees inside it (`SLURM_JOB_ID`, `SLURM_JOB_NODELIST`), for a herd started directly, so
    /// that a test can signal herd itself. Released by [`Slurm::release`].
    pub fn allocate(&self, n: usize) -> Vec<(String, String)> {
        let out = self
            .command("salloc")
            .args(["--no-shell", "--nodes", &n.to_string(), "--no-kill"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        let id = text
            .split_whitespace()
            .skip_while(|w| *w != "allocation")
            .nth(1)
            .unwrap_or_else(|| panic!("salloc --no-shell: no job id in {text:?}"))
            .to_string();
        let squeue =
            self.command("squeue").args(["--noheader", "--format", "%N", "--jobs", &id]).output().unwrap();
        let nodelist = String::from_utf8_lossy(&squeue.stdout).trim().to_string();
        assert!(!nodelist.is_empty(), "no nodes for job {id}: {text}");
        vec![
            ("SLURM_CONF".into(), self.conf.display().to_string()),
            ("SLURM_JOB_ID".into(), id),
            ("SLURM_JOB_NODELIST".into(), nodelist),
        ]
    }

    pub fn release(&self, job_id: &str) {
        let _ = self.command("scancel").arg(job_id).status();
    }

    /// `squeue --steps` of every job: the steps still there.
    pub fn steps(&self) -> Vec<String> {
        let out =
            self.command("squeue").args(["--steps", "--noheader", "--format", "%i %j %N"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .filter(|l| !l.trim().is_empty())
            .collect()
    }

    /// The last lines of every daemon's log, for a failing test's message.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for entry in fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "log") {
                let text = fs::read_to_string(&path).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                s += &format!("--- {} ---\n", path.display());
                for l in tail.iter().rev() {
                    s += l;
                    s.push('\n');
                }
            }
        }
        s
    }

    /// `sh -c script` in namespace `netns`, with its own PID and UTS namespaces and `hostname`.
    fn spawn(&mut self, netns: &str, hostname: &str, script: &str, name: &str) {
        let log = fs::File::create(self.dir.join(format!("{name}.out"))).unwrap();
        let mut c = testbed::host_command(netns, hostname, script);
        c.env("SLURM_CONF", &self.conf).stdin(Stdio::null()).stdout(log.try_clone().unwrap()).stderr(log);
        self.daemons.push(c.spawn().unwrap_or_else(|e| panic!("slurm testbed: cannot start {name}: {e}")));
    }

    fn wait_for(&mut self, what: &str, mut ready: impl FnMut() -> bool) {
        let start = Instant::now();
        while !ready() {
            for d in &mut self.daemons {
                if let Ok(Some(status)) = d.try_wait() {
                    panic!("slurm testbed: a daemon exited ({status}) before {what}\n{}", self.logs());
                }
            }
            if start.elapsed() > READY_TIMEOUT {
                panic!("slurm testbed: no {what} after {READY_TIMEOUT:?}\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", d.id())])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

fn check(c: &mut Command, what: &str) -> Output {
    let out = c.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("slurm testbed: {what}: {e}"));
    assert!(out.status.success(), "slurm testbed: {what}: {}", String::from_utf8_lossy(&out.stderr));
    out
}
