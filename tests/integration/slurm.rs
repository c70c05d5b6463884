//! The slurm transport on a real Slurm (slurmctld, a slurmd in every namespace, munged) with
//! real torchrun over gloo, and no sshd running: every node's agent is a job step that herd
//! starts with `srun`, and restarts are new steps in the same allocation.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::cluster::{Cluster, LIMIT};
use crate::support::herd::{self, events, only_run_dir, wait_until};
use crate::support::slurm::Slurm;
use serde_json::Value;

/// Slurm first: its daemons stop before the testbed's namespaces go.
struct SlurmCluster {
    slurm: Slurm,
    c: Cluster,
}

impl SlurmCluster {
    /// `n` nodes under Slurm, their sshds stopped: nothing below can go through SSH.
    fn new(n: usize) -> SlurmCluster {
        let mut c = Cluster::new(n);
        let slurm = Slurm::start(&mut c.tb);
        c.tb.stop_sshds();
        SlurmCluster { slurm, c }
    }

    fn dir(&self) -> &Path {
        self.c.tb.dir()
    }

    /// cluster.toml with no nodes (they come from the allocation): the given [job] lines,
    /// then `extra`.
    fn write_config(&self, job: &str, extra: &str) {
        let text = format!(
            "[job]\nworkdir = \"{wd}\"\ndevice = \"cpu\"\n{job}\n\n[rendezvous]\ninterface = \"eth0\"\n\n\
             [logs]\ndir = \"{logs}\"\n\n{extra}\n",
            wd = herd::repo_root().display(),
            logs = self.c.logs().display(),
        );
        std::fs::write(self.dir().join("cluster.toml"), text).unwrap();
    }

    /// A torchrun job of 2 ranks per node whose setup prints the Slurm step it runs in, and
    /// what Slurm's task variables say there (herd unsets them: they describe its one-task
    /// step, not the ranks).
    fn torchrun(&self, args: &str, extra: &str) {
        self.torchrun_on(args, "", extra);
    }

    fn torchrun_on(&self, args: &str, job: &str, extra: &str) {
        let job = format!(
            "launcher = \"torchrun\"\nscript = \"examples/allreduce.py\"\nargs = [{args}]\nnproc_per_node = 2\n\
             setup = \"echo slurm-step=$HERD_SLURM_STEP on $SLURMD_NODENAME procid=${{SLURM_PROCID-unset}} \
             ntasks=${{SLURM_NTASKS-unset}}; source {}/bin/activate\"\n{job}",
            self.c.venv.display()
        );
        self.write_config(&job, extra);
    }

    /// A `kind = "slurm"` config whose job runs until killed on every node: two processes
    /// each, one in a session of its own as torchrun's workers are, marked for the test.
    fn write_long_job(&self, extra: &str) {
        let script = "setsid sleep 300 </dev/null >/dev/null 2>&1 & exec sleep 301";
        let job = format!(
            "launcher = \"command\"\nscript = \"sh\"\nargs = [\"-c\", {}]",
            serde_json::to_string(script).unwrap()
        );
        let mark = mark(&self.c);
        self.write_config(
            &job,
            &format!("[env]\nHERD_TEST_MARK = \"{mark}\"\n\n[transport]\nkind = \"slurm\"\n\n{extra}"),
        );
    }

    /// Processes of the test's job on any node.
    fn leftovers(&self) -> Vec<(usize, u32)> {
        self.c.leftovers("HERD_TEST_MARK", &mark(&self.c))
    }

    /// The job's `sleep`s: the steady state of the long job below.
    fn sleepers(&self) -> usize {
        self.leftovers()
            .into_iter()
            .filter(|(_, pid)| {
                std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
            })
            .count()
    }

    /// Every process of any node whose command line names `what`.
    fn processes_named(&self, what: &str) -> Vec<String> {
        (0..self.c.tb.nodes().len())
            .flat_map(|i| self.c.tb.processes(i))
            .filter(|(_, cmd)| cmd.contains(what))
            .map(|(pid, cmd)| format!("{pid} {cmd}"))
            .collect()
    }
}

const FAST_RESTART: &str =
    "[restart]\nbackoff = \"1s\"\nbackoff_max = \"2s\"\ngrace_period = \"3s\"\nheartbeat_timeout = \"10s\"\n";

/// The `srun`s of herd's steps in `slurm` (by the SLURM_CONF in their environment: not those
/// a failed test elsewhere left), with their command lines.
fn herd_sruns(slurm: &Slurm) -> Vec<String> {
    let conf = format!("SLURM_CONF={}", slurm.conf().display());
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, std::fs::read(format!("/proc/{pid}/cmdline")).ok()?)))
        .filter(|(_, c)| c.starts_with(b"srun\0") && String::from_utf8_lossy(c).contains("\0herd-"))
        .filter(|(pid, _)| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|e| e.split(|b| *b == 0).any(|v| v == conf.as_bytes()))
        })
        .map(|(pid, c)| format!("{pid} {}", String::from_utf8_lossy(&c).replace('\0', " ")))
        .collect()
}

fn mark(c: &Cluster) -> String {
    format!("herd-slurm-test-{}", c.tb.k())
}

fn all<'a>(ev: &'a [Value], name: &str) -> Vec<&'a Value> {
    ev.iter().filter(|e| e["event"] == name).collect()
}

/// Every rank's `result` line of `attempt`, under its own name: `[r<R> <host>]`, node rank
/// `n` on `hosts[n]`.
fn assert_results(out: &herd::Finished, hosts: &[&str], attempt: u32) {
    let world = 2 * hosts.len();
    for r in 0..world {
        let node = r / 2;
        let prefix = format!("[r{r} {}] ", hosts[node]);
        let results: Vec<&str> = out
            .node_lines(&prefix)
            .into_iter()
            .filter(|l| l.starts_with("result ") && l.contains(&format!(" attempt={attempt} ")))
            .collect();
        assert_eq!(results.len(), 1, "rank {r}: {results:?}\n{out}");
        let line = results[0];
        assert!(line.ends_with(" ok"), "{line}");
        assert!(line.contains(&format!(" world={world} ")), "{line}");
        assert!(line.contains(&format!(" node_rank={node} ")), "{line}");
        assert!(line.contains(&format!(" host={} ", hosts[node])), "{line}");
    }
}

/// The Slurm steps the node logs of `attempt` say their setup ran in, by node rank.
fn steps_of(run: &Path, attempt: u32, nodes: usize) -> Vec<String> {
    (0..nodes)
        .map(|n| {
            let log =
                std::fs::read_to_string(run.join(format!("attempt-{attempt}/node{n}-node{}.log", n + 1)))
                    .unwrap_or_else(|e| panic!("node {n}'s log of attempt {attempt}: {e}"));
            let line = log.lines().find(|l| l.starts_with("slurm-step=")).expect("the step line").to_string();
            assert!(line.ends_with(&format!(" on node{} procid=unset ntasks=unset", n + 1)), "{line}");
            line.split_whitespace().next().unwrap().to_string()
        })
        .collect()
}

#[test]
fn salloc_runs_torchrun_on_every_node_through_srun_with_no_ssh() {
    let s = SlurmCluster::new(3);
    s.torchrun("\"--steps\", \"3\"", "");
    let conf = s.slurm.conf().display().to_string();
    let started = Instant::now();
    let out = herd::start_under(
        &["salloc", "--nodes", "3", "--no-kill"],
        s.dir(),
        &["run", "--slurm"],
        &[("SLURM_CONF", &conf)],
    )
    .wait(LIMIT);
    out.assert_code(0);
    eprintln!("salloc + herd run --slurm, 3 x 2 ranks: {:?}", started.elapsed());
    assert_results(&out, &["node1", "node2", "node3"], 0);
    assert!(s.processes_named("sshd").is_empty(), "an sshd ran: {:?}", s.processes_named("sshd"));

    let run = only_run_dir(&s.c.logs());
    let ev = events(&run);
    let started: Vec<(u64, String)> = all(&ev, "node_started")
        .iter()
        .map(|e| (e["node_rank"].as_u64().unwrap(), e["host"].as_str().unwrap().to_string()))
        .collect();
    let mut sorted = started.clone();
    sorted.sort();
    assert_eq!(sorted, [(0, "node1".into()), (1, "node2".into()), (2, "node3".into())], "{ev:?}");
    assert_eq!(ev.last().unwrap()["status"], "succeeded");
    for r in 0..6 {
        let log = std::fs::read_to_string(run.join(format!("attempt-0/rank{r}.log")))
            .unwrap_or_else(|e| panic!("rank {r}'s own log: {e}"));
        assert!(log.lines().any(|l| l.starts_with("result ") && l.ends_with(" ok")), "rank {r}: {log}");
    }
    // The nodes' agents ran as one step, in the salloc's job.
    let steps = steps_of(&run, 0, 3);
    assert!(steps.iter().all(|s| s.len() > "slurm-step=1.".len()), "{steps:?}");
    assert!(steps.iter().all(|s| *s == steps[0]), "one step for the agents: {steps:?}");
    assert!(s.slurm.steps().is_empty(), "steps left: {:?}", s.slurm.steps());
}

#[test]
fn a_rank_killed_on_attempt_0_restarts_as_new_steps_and_completes() {
    let s = SlurmCluster::new(3);
    let alloc = s.slurm.allocate(3);
    let env: Vec<(&str, &str)> = alloc.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    s.torchrun(
        "\"--steps\", \"6\", \"--sleep\", \"0.3\", \"--die-rank\", \"3\", \"--fault-step\", \"2\"",
        &format!("[transport]\nkind = \"slurm\"\n\n{FAST_RESTART}"),
    );
    let out = herd::start(s.dir(), &["run"], &env).wait(LIMIT);
    out.assert_code(0);
    assert_results(&out, &["node1", "node2", "node3"], 1);

    let run = only_run_dir(&s.c.logs());
    let ev = events(&run);
    let failed = all(&ev, "attempt_failed");
    assert_eq!(failed.len(), 1, "{ev:?}");
    assert_eq!(failed[0]["class"], "crash", "{}", failed[0]);
    let root = &failed[0]["root_cause"];
    assert_eq!((root["node_rank"].as_u64(), root["host"].as_str()), (Some(1), Some("node2")), "{root}");
    assert_eq!(root["rank"].as_u64(), Some(3), "{root}");
    let ports: Vec<u64> =
        all(&ev, "attempt_started").iter().map(|e| e["master_port"].as_u64().unwrap()).collect();
    assert_eq!(ports.len(), 2);
    assert_ne!(ports[0], ports[1], "every attempt gets a fresh port");
    // The restart is a new step of the same allocation: one for each attempt's agents.
    let (first, second) = (steps_of(&run, 0, 3), steps_of(&run, 1, 3));
    let job = format!("slurm-step={}.", alloc[1].1);
    assert!(first.iter().chain(&second).all(|l| l.starts_with(&job)), "{first:?} {second:?}");
    assert!(
        first.iter().all(|l| *l == first[0]) && second.iter().all(|l| *l == second[0]),
        "{first:?} {second:?}"
    );
    for l in &second {
        assert!(!first.contains(l), "attempt 1 reused a step of attempt 0: {l}");
    }
    assert!(s.slurm.steps().is_empty(), "steps left: {:?}", s.slurm.steps());
    s.slurm.release(&alloc[1].1);
}

/// The long job of `write_long_job`, started: herd, once all of its processes are up.
fn start_long_job(s: &SlurmCluster, env: &[(&str, &str)]) -> herd::Running {
    s.write_long_job("[restart]\ngrace_period = \"3s\"\n");
    let mut running = herd::start(s.dir(), &["run"], env);
    let up = running.until(LIMIT, || s.sleepers() == 6);
    assert!(up, "job processes did not come up: {:?}", s.leftovers());
    running
}

#[test]
fn ctrl_c_and_sigkill_of_herd_leave_no_process_and_no_step() {
    let s = SlurmCluster::new(3);
    let alloc = s.slurm.allocate(3);
    let env: Vec<(&str, &str)> = alloc.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();

    let running = start_long_job(&s, &env);
    let steps = s.slurm.steps();
    running.signal("INT");
    let out = running.wait(Duration::from_secs(60));
    // One step for the fleet's agents, on every node.
    assert_eq!(steps.len(), 1, "one step for the agents: {steps:?} {out}");
    assert!(steps[0].ends_with(" node[1-3]"), "{steps:?}");
    out.assert_code(130);
    assert_eq!(s.leftovers(), vec![], "job processes left after Ctrl-C");
    assert!(wait_until(Duration::from_secs(10), || s.slurm.steps().is_empty()), "{:?}", s.slurm.steps());
    assert!(
        s.processes_named("sh -c").iter().all(|p| !p.contains("herd-agent")),
        "{:?}",
        s.processes_named("herd-agent")
    );

    let running = start_long_job(&s, &env);
    running.signal("KILL");
    let killed = Instant::now();
    let gone = wait_until(Duration::from_secs(30), || s.leftovers().is_empty());
    assert!(gone, "left 30 s after SIGKILL of herd: {:?}", s.leftovers());
    eprintln!("all job processes gone {:?} after SIGKILL of herd", killed.elapsed());
    let no_steps = wait_until(Duration::from_secs(30), || s.slurm.steps().is_empty());
    assert!(no_steps, "steps left after SIGKILL of herd: {:?}", s.slurm.steps());
    // herd's sruns (children it can no longer reap) end with their steps.
    let no_srun = wait_until(Duration::from_secs(30), || herd_sruns(&s.slurm).is_empty());
    assert!(
        no_srun,
        "srun left after SIGKILL of herd: {:?}",
        herd_sruns(&s.slurm).iter().map(|l| &l[..120]).collect::<Vec<_>>()
    );
    let _ = running.wait(Duration::from_secs(10));

    // herd kill inside the allocation: nothing of this config left to stop.
    let kill = herd::run_with(s.dir(), &["kill"], &env, LIMIT);
    kill.assert_code(0);
    assert!(kill.stdout.contains("nothing left"), "{kill}");
    s.slurm.release(&alloc[1].1);
}

#[test]
fn herd_kill_cancels_the_configs_steps_and_no_other() {
    let s = SlurmCluster::new(2);
    let alloc = s.slurm.allocate(2);
    let env: Vec<(&str, &str)> = alloc.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    // What a herd killed while slurmctld could not be told would leave: a step named for the
    // config, still running. Another step of the job, not herd's, must survive.
    s.write_long_job("");
    let plan = herd::run_with(s.dir(), &["plan", "--json"], &env, LIMIT);
    plan.assert_code(0);
    let plan: Value = serde_json::from_str(&plan.stdout).unwrap();
    let step_name = plan["nodes"][0]["transport"]["step_name"].as_str().unwrap().to_string();
    let spawn = |name: &str| {
        s.slurm
            .command("srun")
            .args(["--jobid", &alloc[1].1, "-N1", "-n1", "-w", "node1", "--overlap", "--job-name", name])
            .args(["sleep", "300"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut ours = spawn(&format!("{step_name}-4242"));
    let mut theirs = spawn("train");
    assert!(wait_until(Duration::from_secs(30), || s.slurm.steps().len() == 2), "{:?}", s.slurm.steps());
    let kill = herd::run_with(s.dir(), &["kill"], &env, LIMIT);
    kill.assert_code(0);
    assert!(kill.stdout.contains("cancelled 1 step(s)"), "{kill}");
    assert!(wait_until(Duration::from_secs(30), || s.slurm.steps().len() == 1), "{:?}", s.slurm.steps());
    assert!(s.slurm.steps()[0].contains(" train "), "{:?}", s.slurm.steps());
    let _ = ours.wait();
    let _ = theirs.kill();
    let _ = theirs.wait();
    s.slurm.release(&alloc[1].1);
}

#[test]
fn herd_doctor_checks_every_node_through_srun() {
    let s = SlurmCluster::new(3);
    let alloc = s.slurm.allocate(3);
    let env: Vec<(&str, &str)> = alloc.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    s.torchrun("\"--steps\", \"1\"", "[transport]\nkind = \"slurm\"\n");
    let doctor = herd::run_with(s.dir(), &["doctor"], &env, LIMIT);
    assert!(doctor.code == Some(0) || doctor.code == Some(1), "{doctor}");
    for n in 1..=3 {
        assert!(doctor.stdout.contains(&format!("node{n}")), "{doctor}");
    }
    assert!(doctor.stdout.starts_with("rank  host   srun "), "{doctor}");
    assert!(!doctor.stdout.contains("ssh"), "{doctor}");
    // The same checks with a step per node (for sites whose nodes cannot reach the launch
    // host), and the same table.
    s.torchrun("\"--steps\", \"1\"", "[transport]\nkind = \"slurm\"\nsteps = \"per-node\"\n");
    let per_node = herd::run_with(s.dir(), &["doctor"], &env, LIMIT);
    assert_eq!(per_node.code, doctor.code, "{per_node}");
    assert!(per_node.stdout.starts_with("rank  host   srun "), "{per_node}");
    assert!(s.slurm.steps().is_empty(), "{:?}", s.slurm.steps());
    s.slurm.release(&alloc[1].1);
}

#[test]
fn a_node_cut_off_for_good_is_lost_and_replaced_by_the_allocations_spare() {
    let s = SlurmCluster::new(4);
    let alloc = s.slurm.allocate(4);
    let env: Vec<(&str, &str)> = alloc.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    s.torchrun_on(
        "\"--steps\", \"400\", \"--sleep\", \"0.2\", \"--retry-steps\", \"3\"",
        "nnodes = 3",
        &format!("[transport]\nkind = \"slurm\"\n\n{FAST_RESTART}"),
    );
    let mut running = herd::start(s.dir(), &["run"], &env);
    let log = |run: &Path| run.join("attempt-0/node2-node3.log");
    let trained = running.until(LIMIT, || {
        std::fs::read_dir(s.c.logs())
            .into_iter()
            .flatten()
            .flatten()
            .any(|run| std::fs::read_to_string(log(&run.path())).is_ok_and(|l| l.contains("step 3 ")))
    });
    assert!(trained, "training did not start");
    s.c.tb.link_down(2);
    let cut = Instant::now();
    let out = running.wait(LIMIT);
    out.assert_code(0);
    eprintln!("cut to completion on the spare: {:?}", cut.elapsed());
    assert_results(&out, &["node1", "node2", "node4"], 1);

    let ev = events(&only_run_dir(&s.c.logs()));
    let q = all(&ev, "node_quarantined");
    assert_eq!(q.len(), 1, "{ev:?}");
    assert_eq!(q[0]["host"], "node3");
    assert!(q[0]["reason"].as_str().unwrap().starts_with("node-lost: "), "{}", q[0]);
    let promoted = all(&ev, "spare_promoted");
    assert_eq!((promoted[0]["host"].as_str(), promoted[0]["node_rank"].as_u64()), (Some("node4"), Some(2)));
    // No srun of herd's is left here: that of the attempt the cut node was in was killed
    // once herd had given up on it and the other nodes were done.
    assert!(
        herd_sruns(&s.slurm).is_empty(),
        "srun processes left: {:?}",
        herd_sruns(&s.slurm).iter().map(|l| &l[..120]).collect::<Vec<_>>()
    );
    // Once the link is back, the cut node's agent ends its job, and Slurm the step.
    s.c.tb.link_up(2);
    let mark = format!("HERD_MARKER={}:", ev[0]["config_key"].as_str().unwrap());
    let clean = wait_until(Duration::from_secs(90), || herd::processes_with_env_prefix(&mark).is_empty());
    assert!(clean, "left: {:?}", herd::processes_with_env_prefix(&mark));
    let no_steps =
        wait_until(Duration::from_secs(90), || !s.slurm.steps().iter().any(|l| l.contains(" herd-")));
    assert!(no_steps, "steps left: {:?}", s.slurm.steps());
    s.slurm.release(&alloc[1].1);
}

/// The job id `herd submit` printed.
fn submitted_id(out: &herd::Finished) -> String {
    out.assert_code(0);
    out.stdout
        .strip_prefix("submitted job ")
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_else(|| panic!("no job id\n{out}"))
        .to_string()
}

/// Whether Slurm's queue no longer lists job `id` within `limit`: it ran and was not requeued.
fn job_gone(slurm: &Slurm, id: &str, limit: Duration) -> bool {
    wait_until(limit, || {
        let out = slurm.command("squeue").args(["--noheader", "--jobs", id]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().is_empty()
    })
}

#[test]
fn herd_submit_runs_the_job_through_sbatch_to_completion() {
    let s = SlurmCluster::new(3);
    // No nodes of its own: [job] nnodes says how many to allocate.
    s.torchrun_on("\"--steps\", \"3\"", "nnodes = 3", "");
    let conf = s.slurm.conf().display().to_string();
    let env = [("SLURM_CONF", conf.as_str())];
    let printed = herd::run_with(s.dir(), &["submit", "--print"], &env, LIMIT);
    printed.assert_code(0);
    assert!(printed.stdout.contains("#SBATCH --nodes=3\n"), "{printed}");
    let submitted = herd::run_with(s.dir(), &["submit", "-t", "10", "--sbatch-arg=--exclusive"], &env, LIMIT);
    let id = submitted_id(&submitted);
    let done = job_gone(&s.slurm, &id, LIMIT);
    assert!(done, "job {id} still queued or running: {:?}", s.slurm.steps());
    let output = std::fs::read_to_string(s.c.logs().join(format!("slurm-{id}.out"))).unwrap();
    for r in 0..6 {
        assert!(
            output
                .lines()
                .any(|l| l.starts_with(&format!("[r{r} node{}] result ", r / 2 + 1)) && l.ends_with(" ok")),
            "rank {r} in Slurm's output:\n{output}"
        );
    }
    let ev = events(&only_run_dir(&s.c.logs()));
    assert_eq!(ev.last().unwrap()["status"], "succeeded", "{output}");
    // herd logs finds the run.
    let logs = herd::run(s.dir(), &["logs", "--rank", "5"], LIMIT);
    logs.assert_code(0);
    assert!(logs.stdout.lines().any(|l| l.contains("result rank=5")), "{logs}");
}

#[test]
fn an_allocation_cancelled_under_the_run_ends_it_as_such_and_blames_no_node() {
    let s = SlurmCluster::new(3);
    let alloc = s.slurm.allocate(3);
    let env: Vec<(&str, &str)> = alloc.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    // Two nodes and a spare: a node blamed for the allocation's end would be quarantined.
    s.write_config(
        "launcher = \"command\"\nscript = \"sleep\"\nargs = [\"300\"]\nnnodes = 2",
        &format!(
            "[env]\nHERD_TEST_MARK = \"{}\"\n\n[transport]\nkind = \"slurm\"\n\n{FAST_RESTART}",
            mark(&s.c)
        ),
    );
    let mut running = herd::start(s.dir(), &["run"], &env);
    assert!(running.until(LIMIT, || s.sleepers() == 2), "the job did not start: {:?}", s.leftovers());
    s.slurm.release(&alloc[1].1);
    let out = running.wait(LIMIT);
    // An allocation cancelled under the run is an interruption, as in a batch job: 130.
    out.assert_code(130);
    let ev = events(&only_run_dir(&s.c.logs()));
    assert!(all(&ev, "node_quarantined").is_empty(), "{ev:?}");
    assert_eq!(all(&ev, "attempt_started").len(), 1, "no restart: {ev:?}");
    let failed = all(&ev, "attempt_failed");
    assert_eq!(failed[0]["class"], "allocation", "{}", failed[0]);
    assert!(failed[0]["root_cause"].is_null(), "{}", failed[0]);
    let abandoned = all(&ev, "restart_abandoned");
    let reason = abandoned[0]["reason"].as_str().unwrap();
    let cancelled = format!("the Slurm allocation {} ended (CANCELLED): cancelled (scancel", alloc[1].1);
    assert!(reason.starts_with(&cancelled), "{reason}");
    assert!(out.stderr.contains("no node is to blame"), "{out}");
    assert!(!out.stderr.contains("quarantined"), "{out}");
}

#[test]
fn a_node_drained_during_an_attempt_is_replaced_by_the_spare_at_the_restart_not_waited_for() {
    let s = SlurmCluster::new(4);
    let alloc = s.slurm.allocate(4);
    let env: Vec<(&str, &str)> = alloc.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    // Attempt 0 runs until a process is killed; attempt 1 ends at once. A node waited for
    // would be waited for a minute, then the run would fail.
    let script = "[ \"$HERD_ATTEMPT\" = 0 ] && exec sleep 300; exit 0";
    s.write_config(
        &format!(
            "launcher = \"command\"\nscript = \"sh\"\nargs = [\"-c\", {}]\nnnodes = 3",
            serde_json::to_string(script).unwrap()
        ),
        &format!(
            "[env]\nHERD_TEST_MARK = \"{}\"\n\n[transport]\nkind = \"slurm\"\n\n\
             {FAST_RESTART}node_wait = \"1m\"\n",
            mark(&s.c)
        ),
    );
    let mut running = herd::start(s.dir(), &["run"], &env);
    assert!(running.until(LIMIT, || s.sleepers() == 3), "the job did not start: {:?}", s.leftovers());
    let drain = s
        .slurm
        .command("scontrol")
        .args(["update", "nodename=node3", "state=drain", "reason=herd-test"])
        .output()
        .unwrap();
    assert!(drain.status.success(), "{}", String::from_utf8_lossy(&drain.stderr));
    // node1's job is killed: a crash, blamed on no node the first time.
    let (_, pid) = *s.leftovers().iter().find(|(node, _)| *node == 0).expect("node1's job");
    let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    let out = running.wait(LIMIT);
    out.assert_code(0);
    let ev = events(&only_run_dir(&s.c.logs()));
    assert!(all(&ev, "node_waiting").is_empty(), "a drained node was waited for: {ev:?}");
    let q = all(&ev, "node_quarantined");
    assert_eq!(q.len(), 1, "{ev:?}");
    assert_eq!(q[0]["host"], "node3");
    assert!(q[0]["reason"].as_str().unwrap().ends_with("node3 as draining"), "{}", q[0]);
    let promoted = all(&ev, "spare_promoted");
    assert_eq!((promoted[0]["host"].as_str(), promoted[0]["node_rank"].as_u64()), (Some("node4"), Some(2)));
    s.slurm.release(&alloc[1].1);
}

/// The Slurm steps the node logs of `attempt` say their setup ran in, one per log.
fn steps_in(run: &Path, attempt: u32) -> std::collections::BTreeSet<String> {
    std::fs::read_dir(run.join(format!("attempt-{attempt}")))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("node"))
        .map(|e| {
            let log = std::fs::read_to_string(e.path()).unwrap();
            let line = log.lines().find(|l| l.starts_with("slurm-step="));
            line.unwrap_or_else(|| panic!("no step line in {:?}", e.path()))
                .split_whitespace()
                .next()
                .unwrap()
                .into()
        })
        .collect()
}

/// At 32 slurmds and a spare: each attempt's agents are one step, not one per node; Ctrl-C
/// and SIGKILL of herd leave no step and no process on any node; and a node cut off for good
/// is replaced by the spare, its torchrun job completing.
#[test]
fn at_32_nodes_each_attempt_is_one_step_and_a_node_lost_for_good_is_replaced() {
    const N: usize = 32;
    let s = SlurmCluster::new(N + 1);
    let alloc = s.slurm.allocate(N + 1);
    let env: Vec<(&str, &str)> = alloc.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let hosts = format!("node[1-{}]", N + 1);

    s.write_long_job("[restart]\ngrace_period = \"3s\"\n");
    let mut running = herd::start(s.dir(), &["run"], &env);
    let up = running.until(LIMIT, || s.sleepers() == 2 * (N + 1));
    assert!(up, "job processes did not come up: {} of {}", s.sleepers(), 2 * (N + 1));
    let steps = s.slurm.steps();
    running.signal("INT");
    let out = running.wait(LIMIT);
    out.assert_code(130);
    assert_eq!(steps.len(), 1, "one step for the agents: {steps:?}");
    assert!(steps[0].ends_with(&hosts), "{steps:?}");
    assert_eq!(s.leftovers(), vec![], "job processes left after Ctrl-C");
    assert!(wait_until(Duration::from_secs(30), || s.slurm.steps().is_empty()), "{:?}", s.slurm.steps());

    let mut running = herd::start(s.dir(), &["run"], &env);
    let up = running.until(LIMIT, || s.sleepers() == 2 * (N + 1));
    assert!(up, "job processes did not come up again: {} of {}", s.sleepers(), 2 * (N + 1));
    running.signal("KILL");
    let gone = wait_until(Duration::from_secs(60), || s.leftovers().is_empty());
    assert!(gone, "left 60 s after SIGKILL of herd: {:?}", s.leftovers());
    assert!(wait_until(Duration::from_secs(60), || s.slurm.steps().is_empty()), "{:?}", s.slurm.steps());
    assert!(
        wait_until(Duration::from_secs(60), || herd_sruns(&s.slurm).is_empty()),
        "srun left: {:?}",
        herd_sruns(&s.slurm)
    );
    let _ = running.wait(Duration::from_secs(10));

    // torchrun, one rank per node, with node 5 cut off for good once it trains. Its ranks
    // only print their steps: 32 torchruns importing torch on this machine's 2 cores are
    // the load this needs, 64 would be minutes of it.
    let worker = s.dir().join("steps.py");
    std::fs::write(
        &worker,
        format!(
            "import os, time\nrank = os.environ['RANK']\nfor step in range(300):\n    print(f\"step {{step}} rank {{rank}}\", flush=True)\n    \
             if step == 3 and os.environ.get('HERD_ATTEMPT') == '0':\n        open(f\"{}/rank{{rank}}-step3\", 'w').close()\n    time.sleep(0.2)\n",
            s.dir().display()
        ),
    )
    .unwrap();
    let job = format!(
        "launcher = \"torchrun\"\nscript = \"{}\"\nnproc_per_node = 1\nnnodes = {N}\n\
         setup = \"echo slurm-step=$HERD_SLURM_STEP on $SLURMD_NODENAME; source {}/bin/activate\"",
        worker.display(),
        s.c.venv.display()
    );
    s.write_config(&job, &format!("[transport]\nkind = \"slurm\"\n\n{FAST_RESTART}"));
    let mut running = herd::start(s.dir(), &["run"], &env);
    let started = Instant::now();
    // 32 torchruns importing torch on this machine's 2 cores come first. The rank says when it
    // is at step 3 in a file: herd's logs are written as they fill, not line by line.
    let at_step_3 = s.dir().join("rank4-step3");
    let trained = running.until(Duration::from_secs(600), || at_step_3.exists());
    if !trained {
        running.signal("INT");
        panic!("training did not start:\n{}", running.wait(Duration::from_secs(900)));
    }
    eprintln!("32 nodes: torchrun's step 3 on node 5 after {:?}", started.elapsed());
    s.c.tb.link_down(4);
    let out = running.wait(Duration::from_secs(900));
    out.assert_code(0);
    s.c.tb.link_up(4);
    // The torchrun run is the last of the three (run ids sort by their start).
    let run = std::fs::read_dir(s.c.logs()).unwrap().flatten().map(|e| e.path()).max().unwrap();
    let run = &run;
    let ev = events(run);
    let q = all(&ev, "node_quarantined");
    let said: Vec<String> = ev
        .iter()
        .filter(|e| e["event"] != "node_started")
        .map(|e| e.to_string().chars().take(300).collect())
        .collect();
    assert_eq!(q.len(), 1, "{said:#?}");
    assert_eq!(q[0]["host"], "node5");
    let promoted = all(&ev, "spare_promoted");
    assert_eq!((promoted[0]["host"].as_str(), promoted[0]["node_rank"].as_u64()), (Some("node33"), Some(4)));
    let (first, second) = (steps_in(run, 0), steps_in(run, 1));
    assert_eq!(first.len(), 1, "attempt 0's agents: one step: {first:?}");
    assert_eq!(second.len(), 1, "attempt 1's agents: one step: {second:?}");
    assert_ne!(first, second);
    let done = ev.last().unwrap();
    assert_eq!(done["status"], "succeeded", "{done}");
    // The link back, the cut node's agent ends its job, and with it the last task of its step.
    let no_steps =
        wait_until(Duration::from_secs(90), || !s.slurm.steps().iter().any(|l| l.contains(" herd-")));
    assert!(no_steps, "steps left: {:?}", s.slurm.steps());
    assert!(herd_sruns(&s.slurm).is_empty(), "srun left: {:?}", herd_sruns(&s.slurm));
    s.slurm.release(&alloc[1].1);
}

/// A torchrun job of 2 ranks per node on `nodes` nodes, for `herd submit`: `steps` steps of
/// 0.3 s, rank 0 saving each in the returned directory, every rank ending after the step in
/// which it got SIG`signal`. A resumed run (`resume_args`: the newest checkpoint) trains at
/// full speed: the last `--sleep` counts. `restart`: more `[restart]` lines.
fn resumable_job(s: &SlurmCluster, nodes: usize, steps: u32, signal: &str, restart: &str) -> PathBuf {
    let ckpt = s.dir().join("ckpt");
    s.torchrun_on(
        &format!(
            "\"--steps\", \"{steps}\", \"--sleep\", \"0.3\", \"--save-dir\", \"{}\", \"--checkpoint-on\", \"SIG{signal}\"",
            ckpt.display()
        ),
        &format!("nnodes = {nodes}"),
        &format!(
            "[env]\nHERD_TEST_MARK = \"{}\"\n\n[restart]\n{restart}\
             resume_args = [\"--resume\", \"{{latest:{}/step_*}}\", \"--sleep\", \"0\"]\n",
            mark(&s.c),
            ckpt.display()
        ),
    );
    ckpt
}

/// Once job `id` has left the queue (within `limit`, asserted): Slurm's output of its batch
/// step, and the run directories of its runs, the oldest first (two: it was requeued once).
fn requeued_once(s: &SlurmCluster, id: &str, limit: Duration) -> (String, Vec<PathBuf>) {
    let done = job_gone(&s.slurm, id, limit);
    let output = std::fs::read_to_string(s.c.logs().join(format!("slurm-{id}.out"))).unwrap_or_default();
    assert!(done, "job {id} still queued or running: {:?}\n{output}", s.slurm.steps());
    assert!(output.contains(&format!("herd: requeued Slurm job {id}")), "{output}");
    let mut runs: Vec<PathBuf> =
        std::fs::read_dir(s.c.logs()).unwrap().flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    runs.sort();
    assert_eq!(runs.len(), 2, "{runs:?}\n{output}");
    (output, runs)
}

/// That every one of `ranks` ranks resumed (`resumed`: from where) and completed once.
fn assert_resumed_to_completion(output: &str, ranks: usize, resumed: &str) {
    let resumes = |l: &&str| l.contains("] rank ") && l.contains(resumed);
    assert_eq!(output.lines().filter(resumes).count(), ranks, "{resumed:?}\n{output}");
    for r in 0..ranks {
        let ok = |l: &&str| l.contains(&format!("result rank={r} ")) && l.ends_with(" ok");
        assert_eq!(output.lines().filter(ok).count(), 1, "rank {r}\n{output}");
    }
}

/// `summary.json` (or another file) of a run, `null` if it is missing or torn.
fn run_file(run: &Path, file: &str) -> Value {
    let text = std::fs::read_to_string(run.join(file)).unwrap_or_default();
    serde_json::from_str(&text).unwrap_or_default()
}

/// Issue 29's chain, by a real time limit: `herd submit -t 2 --warn-before 30s` asks for
/// Slurm's warning and for a requeueable job. Slurm sends the warning 30 to 60 s before the
/// limit (it looks at time limits every 30 s), so 60 to 90 s into the job: every rank
/// checkpoints and exits, herd requeues the job, and the requeued job's run resumes from the
/// newest checkpoint and completes. Its record names the run before it. (`-t 1` would warn
/// 0 to 30 s into the job: before torch is imported, often, with nothing to save.)
#[test]
fn a_time_limit_warning_checkpoints_requeues_and_the_job_resumes_to_completion() {
    let s = SlurmCluster::new(3);
    // 400 steps of 0.3 s outlast the warning, 90 s into the job at the latest; resumed, the
    // ranks are done long before the next allocation's warning, 60 s into it at the earliest.
    let ckpt = resumable_job(&s, 3, 400, "USR1", "checkpoint_grace = \"15s\"\n");
    let conf = s.slurm.conf().display().to_string();
    let env = [("SLURM_CONF", conf.as_str())];
    let printed =
        herd::run_with(s.dir(), &["submit", "--print", "-t", "2", "--warn-before", "30s"], &env, LIMIT);
    printed.assert_code(0);
    for line in
        ["#SBATCH --signal=B:USR1@30\n", "#SBATCH --requeue\n", " run --slurm --no-progress --requeue -c "]
    {
        assert!(printed.stdout.contains(line), "{line:?} missing\n{printed}");
    }
    let submitted = herd::run_with(s.dir(), &["submit", "-t", "2", "--warn-before", "30s"], &env, LIMIT);
    let id = submitted_id(&submitted);
    // The limit is 120 s; the requeued job waits 30 s or more to start again.
    let (output, runs) = requeued_once(&s, &id, Duration::from_secs(420));
    // The first run: every rank checkpointed at one step, the run stopped for the time limit
    // and requeued its job.
    let checkpointed: Vec<&str> = output.lines().filter(|l| l.contains(" checkpointed at step ")).collect();
    assert_eq!(checkpointed.len(), 6, "{output}");
    let step: u32 = checkpointed[0]
        .split(" checkpointed at step ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // The second: it resumed after that step, and completed.
    assert_resumed_to_completion(
        &output,
        6,
        &format!("resumes from {}/step_{step} at step {}", ckpt.display(), step + 1),
    );
    let name = |run: &Path| run.file_name().unwrap().to_string_lossy().into_owned();
    let runs: Vec<String> = runs.iter().map(|r| name(r)).collect();
    let read = |run: &str, file: &str| run_file(&s.c.logs().join(run), file);
    assert_eq!(read(&runs[0], "summary.json")["status"], "time-limit");
    let second = read(&runs[1], "summary.json");
    assert_eq!(second["status"], "succeeded");
    assert_eq!(second["lineage"]["previous_run"], runs[0].as_str(), "{second}");
    let about = read(&runs[1], "herd.json");
    assert_eq!(
        (about["previous_run"].as_str(), about["slurm"]["restart_count"].as_u64()),
        (Some(runs[0].as_str()), Some(1))
    );
    let lineage = second["lineage"]["effective_seconds"].as_f64().unwrap();
    assert!(lineage > second["effective_seconds"].as_f64().unwrap(), "{second}");
    // herd logs follows the lineage: rank 5's lines of both runs, the older first.
    let logs = herd::run(s.dir(), &["logs", "--lineage", "--rank", "5"], LIMIT);
    logs.assert_code(0);
    let heads: Vec<&str> = logs.stdout.lines().filter(|l| l.starts_with("== run ")).collect();
    assert_eq!(heads, [format!("== run {} ==", runs[0]), format!("== run {} ==", runs[1])], "{logs}");
    assert!(
        logs.stdout.contains(" checkpointed at step ") && logs.stdout.contains("result rank=5"),
        "{logs}"
    );
    let list = herd::run(s.dir(), &["logs", "--list"], LIMIT);
    assert!(list.stdout.contains(&format!("  after {}", runs[0])), "{list}");
    // What the requeue cost (BENCHMARKS.md): from the first run's end to the second's start,
    // Slurm's hold of a requeued job (cred_expire) most of it.
    let at = |v: &Value| humantime::parse_rfc3339(v.as_str().unwrap()).unwrap();
    let first_end = at(&read(&runs[0], "summary.json")["ended"]);
    let ev = events(&s.c.logs().join(&runs[1]));
    let started = at(&all(&ev, "attempt_started")[0]["ts"]);
    eprintln!(
        "requeue: the first run's end to the second's attempt 0: {:?}, then its first step after {} s",
        started.duration_since(first_end),
        second["attempts"][0]["progress_after_seconds"]
    );
}

/// A time limit with no warning before it (`herd submit -t 1 --warn-before 0`): Slurm sends
/// SIGTERM to every process of the job at the limit and SIGKILL after its KillWait (5 s
/// here). herd reads the job's state (completing, for `TimeLimit`): no cancel; it requeues the
/// job at once, and the ranks checkpoint on that SIGTERM (Slurm's, which reaches them, and
/// herd's). The requeued job resumes from the newest checkpoint and completes.
#[test]
fn a_time_limit_with_no_warning_requeues_at_once_and_the_job_resumes() {
    let s = SlurmCluster::new(2);
    resumable_job(&s, 2, 400, "TERM", "checkpoint_signal = \"TERM\"\ncheckpoint_grace = \"4s\"\n");
    let conf = s.slurm.conf().display().to_string();
    let env = [("SLURM_CONF", conf.as_str())];
    let id =
        submitted_id(&herd::run_with(s.dir(), &["submit", "-t", "1", "--warn-before", "0"], &env, LIMIT));
    // The limit is 60 s (Slurm looks every 30 s); the requeued job waits 30 s or more.
    let (output, runs) = requeued_once(&s, &id, Duration::from_secs(360));
    assert!(
        output.contains("herd: the Slurm job is at its time limit, with no warning early enough"),
        "{output}"
    );
    // Whether herd told the ranks before they saw Slurm's SIGTERM end torchrun is a race; its
    // run ends as time-limit either way (if Slurm let it write its summary).
    assert_resumed_to_completion(&output, 4, " resumes from ");
    // Slurm may kill herd before it writes its summary (KillWait): if it wrote one, it says
    // time-limit.
    let first = run_file(&runs[0], "summary.json");
    assert!(first.is_null() || first["status"] == "time-limit", "{first}\n{output}");
    assert_eq!(run_file(&runs[1], "summary.json")["status"], "succeeded", "{output}");
    assert!(wait_until(Duration::from_secs(30), || s.leftovers().is_empty()), "left: {:?}", s.leftovers());
}

/// A site's preemption, as the test Slurm has it (`PreemptMode=CANCEL`, `GraceTime=30`,
/// `preempt_send_user_signal`): a job in the `urgent` partition needs the nodes, and Slurm
/// sends herd's job its warning signal at once. herd asks Slurm, sees a preemption (a
/// `PreemptTime`), has every rank checkpoint, ends the run as `preempted` and requeues the
/// job, which waits for the urgent one, then resumes and completes.
#[test]
fn a_sites_preemption_checkpoints_requeues_and_the_job_resumes_after_the_urgent_job() {
    let s = SlurmCluster::new(2);
    let ckpt = resumable_job(&s, 2, 1000, "USR1", "checkpoint_grace = \"15s\"\n");
    let conf = s.slurm.conf().display().to_string();
    let env = [("SLURM_CONF", conf.as_str())];
    let submit = ["submit", "-t", "10", "--sbatch-arg=--exclusive"];
    let id = submitted_id(&herd::run_with(s.dir(), &submit, &env, LIMIT));
    assert!(
        wait_until(LIMIT, || ckpt.join("step_3").exists()),
        "training did not start: {:?}",
        s.slurm.steps()
    );
    let urgent = s
        .slurm
        .command("sbatch")
        .args(["-p", "urgent", "-N", "2", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 5"])
        .output()
        .unwrap();
    assert!(urgent.status.success(), "{}", String::from_utf8_lossy(&urgent.stderr));
    let (output, runs) = requeued_once(&s, &id, Duration::from_secs(300));
    assert!(output.contains("herd: stopping every node: preempted: "), "{output}");
    assert_eq!(output.lines().filter(|l| l.contains(" checkpointed at step ")).count(), 4, "{output}");
    assert_resumed_to_completion(&output, 4, " resumes from ");
    let status = |i: usize| run_file(&runs[i], "summary.json")["status"].clone();
    assert_eq!((status(0), status(1)), ("preempted".into(), "succeeded".into()), "{output}");
    assert!(wait_until(Duration::from_secs(30), || s.leftovers().is_empty()), "left: {:?}", s.leftovers());
}

/// A preemption (SIGTERM to the batch step alone: `scancel --signal=TERM --batch`) has every
/// rank checkpoint, and the run ends as `preempted` (here with `--no-requeue`: not requeued).
/// A plain `scancel` is no preemption, though it sends SIGTERM too: the run ends as
/// interrupted, the job is not requeued, and nothing is left. Nor is a run that failed.
#[test]
fn a_preemption_checkpoints_and_a_cancel_neither_requeues_nor_leaves_anything() {
    let s = SlurmCluster::new(3);
    let ckpt = s.dir().join("ckpt");
    s.torchrun_on(
        &format!(
            "\"--steps\", \"100000\", \"--sleep\", \"0.3\", \"--save-dir\", \"{}\", \"--checkpoint-on\", \"SIGUSR1\"",
            ckpt.display()
        ),
        "nnodes = 3",
        &format!("[env]\nHERD_TEST_MARK = \"{}\"\n", mark(&s.c)),
    );
    let conf = s.slurm.conf().display().to_string();
    let env = [("SLURM_CONF", conf.as_str())];
    let gone = |id: &str| job_gone(&s.slurm, id, LIMIT);
    let status = |id: &str| -> (String, String) {
        let output = std::fs::read_to_string(s.c.logs().join(format!("slurm-{id}.out"))).unwrap_or_default();
        let mut runs: Vec<_> =
            std::fs::read_dir(s.c.logs()).unwrap().flatten().filter(|e| e.path().is_dir()).collect();
        runs.sort_by_key(|e| e.file_name());
        let summary =
            std::fs::read_to_string(runs.last().unwrap().path().join("summary.json")).unwrap_or_default();
        let summary: Value = serde_json::from_str(&summary).unwrap_or_default();
        (summary["status"].as_str().unwrap_or_default().to_string(), output)
    };

    let id = submitted_id(&herd::run_with(s.dir(), &["submit", "-t", "10", "--no-requeue"], &env, LIMIT));
    assert!(
        wait_until(LIMIT, || ckpt.join("step_3").exists()),
        "training did not start: {:?}",
        s.slurm.steps()
    );
    let term = s.slurm.command("scancel").args(["--signal=TERM", "--batch", &id]).output().unwrap();
    assert!(term.status.success(), "{}", String::from_utf8_lossy(&term.stderr));
    assert!(gone(&id), "job {id} still there");
    let (status_1, output) = status(&id);
    assert_eq!(status_1, "preempted", "{output}");
    assert_eq!(output.lines().filter(|l| l.contains(" checkpointed at step ")).count(), 6, "{output}");
    assert!(output.contains("run preempted: the ranks were told to checkpoint"), "{output}");
    assert!(!output.contains("requeue"), "{output}");

    std::fs::remove_dir_all(&ckpt).unwrap();
    let id = submitted_id(&herd::run_with(s.dir(), &["submit", "-t", "10"], &env, LIMIT));
    assert!(
        wait_until(LIMIT, || ckpt.join("step_3").exists()),
        "training did not start: {:?}",
        s.slurm.steps()
    );
    let cancel = s.slurm.command("scancel").arg(&id).output().unwrap();
    assert!(cancel.status.success(), "{}", String::from_utf8_lossy(&cancel.stderr));
    if !gone(&id) {
        let out = s
            .slurm
            .command("squeue")
            .args(["--states", "all", "--jobs", &id, "-o", "%T %r"])
            .output()
            .unwrap();
        let log = std::fs::read_to_string(s.dir().join("slurm/slurmctld.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        let output = status(&id).1;
        let herd: Vec<&str> = output.lines().filter(|l| !l.contains("] step ")).rev().take(30).collect();
        panic!("job {id} still there: {}\n{herd:#?}\n{tail:#?}", String::from_utf8_lossy(&out.stdout));
    }
    std::thread::sleep(Duration::from_secs(2));
    let out =
        s.slurm.command("squeue").args(["--noheader", "--states", "all", "--jobs", &id]).output().unwrap();
    let state = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!state.contains("PENDING") && !state.contains("RUNNING"), "requeued: {state}");
    let (status_2, output) = status(&id);
    assert!(!output.contains("requeue"), "{output}");
    // Slurm may stop herd before it writes its summary (KillWait); if it wrote one, it is no
    // preemption.
    assert!(status_2.is_empty() || status_2 == "interrupted", "{status_2}\n{output}");
    assert!(wait_until(Duration::from_secs(30), || s.leftovers().is_empty()), "left: {:?}", s.leftovers());

    // A run that fails is not requeued, however requeueable its job.
    s.torchrun_on(
        "\"--steps\", \"3\", \"--die-rank\", \"1\", \"--fault-step\", \"0\"",
        "nnodes = 3",
        &format!("[env]\nHERD_TEST_MARK = \"{}\"\n\n[restart]\nmax_restarts = 0\n", mark(&s.c)),
    );
    let id = submitted_id(&herd::run_with(s.dir(), &["submit", "-t", "10"], &env, LIMIT));
    assert!(gone(&id), "job {id} still there");
    let (status_3, output) = status(&id);
    assert_eq!(status_3, "failed", "{output}");
    assert!(!output.contains("requeue"), "{output}");
}

/// Issue 39: a job that never checkpoints was requeued forever, each generation starting
/// afresh. Preempted (`scancel --signal=TERM --batch`) with nothing matching its
/// `{latest:GLOB}`, generation 0 is requeued with a warning; generation 1, preempted the same
/// way, is not requeued, and says why.
#[test]
fn a_job_that_never_checkpoints_is_requeued_once_then_not_again() {
    let s = SlurmCluster::new(2);
    let never = s.dir().join("ckpt");
    s.write_config(
        "launcher = \"command\"\nscript = \"sleep\"\nargs = [\"300\"]\nnnodes = 2",
        &format!(
            "[env]\nHERD_TEST_MARK = \"{}\"\n\n[restart]\ncheckpoint_grace = \"2s\"\n\
             resume_args = [\"{{latest:{}/step_*}}\"]\n",
            mark(&s.c),
            never.display()
        ),
    );
    let conf = s.slurm.conf().display().to_string();
    let env = [("SLURM_CONF", conf.as_str())];
    let id = submitted_id(&herd::run_with(s.dir(), &["submit", "-t", "10"], &env, LIMIT));
    let runs = || -> usize {
        std::fs::read_dir(s.c.logs()).map_or(0, |d| d.flatten().filter(|e| e.path().is_dir()).count())
    };
    for generation in 1..=2 {
        assert!(
            wait_until(Duration::from_secs(240), || runs() == generation && s.sleepers() == 2),
            "generation {} did not start: {:?}",
            generation - 1,
            s.slurm.steps()
        );
        let term = s.slurm.command("scancel").args(["--signal=TERM", "--batch", &id]).output().unwrap();
        assert!(term.status.success(), "{}", String::from_utf8_lossy(&term.stderr));
        if generation == 1 {
            // Requeued: the first generation's processes go before the second's come.
            assert!(wait_until(LIMIT, || s.sleepers() == 0), "{:?}", s.leftovers());
        }
    }
    assert!(job_gone(&s.slurm, &id, LIMIT), "job {id} requeued again: {:?}", s.slurm.steps());
    let output = std::fs::read_to_string(s.c.logs().join(format!("slurm-{id}.out"))).unwrap_or_default();
    assert_eq!(output.matches(&format!("herd: requeued Slurm job {id}")).count(), 1, "{output}");
    assert!(
        output.contains("herd: warning: generation 0 left no checkpoint (nothing on the master matches"),
        "{output}"
    );
    assert!(
        output.contains("herd: not requeued: generation 1 started afresh and left no checkpoint either"),
        "{output}"
    );
    assert_eq!(runs(), 2, "{output}");
    assert!(wait_until(Duration::from_secs(30), || s.leftovers().is_empty()), "left: {:?}", s.leftovers());
}
