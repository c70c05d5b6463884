//! What a run keeps and tells, on the namespace testbed with real torchrun: a restart resumes
//! from the newest checkpoint, the run directory records what ran and how it went (and never
//! a secret), and the notify hook hears of the run's notable events in order.

use crate::support::cluster::{Cluster, LIMIT};
use crate::support::herd::{self, events, only_run_dir, wait_for_event};
use serde_json::Value;

const FAST_RESTART: &str = "[restart]\nbackoff = \"1s\"\nbackoff_max = \"2s\"\ngrace_period = \"3s\"\n";
const SECRET: &str = "s3cr3t-value-9f1c";

fn job(args: &str) -> String {
    format!("launcher = \"torchrun\"\nscript = \"examples/allreduce.py\"\nargs = [{args}]\nnproc_per_node = 2\nforward_env = [\"HERD_TEST_SECRET\"]")
}

fn git(dir: &std::path::Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .output()
        .unwrap()
        .status
        .success();
    assert!(ok, "git {args:?}");
}

#[test]
fn a_restart_resumes_from_the_newest_checkpoint_and_the_run_is_recorded() {
    let c = Cluster::new(3);
    let ckpt = c.tb.dir().join("ckpt");
    let heard = c.tb.dir().join("heard.jsonl");
    let args = format!(
        "\"--steps\", \"6\", \"--sleep\", \"0.3\", \"--die-rank\", \"3\", \"--fault-step\", \"3\", \"--save-dir\", \"{}\"",
        ckpt.display()
    );
    let extra = format!(
        "{FAST_RESTART}resume_args = [\"--resume\", \"{{latest:{}/step_*}}\"]\n\n[notify]\ncommand = \"cat >> {} && echo >> {}\"\n",
        ckpt.display(),
        heard.display(),
        heard.display()
    );
    c.write_config(&job(&args), &extra);
    // The launch directory is a repository with a commit.
    git(c.tb.dir(), &["init", "-q"]);
    git(c.tb.dir(), &["add", "cluster.toml"]);
    git(c.tb.dir(), &["commit", "-qm", "cluster"]);

    let out = herd::start(c.tb.dir(), &["run"], &[("HERD_TEST_SECRET", SECRET)]).wait(LIMIT);
    out.assert_code(0);
    // Resumed from the last step rank 0 saved before rank 3 died at step 3.
    assert!(
        out.stdout.contains(&format!("rank 0 resumes from {}/step_2 at step 3", ckpt.display())),
        "{out}"
    );
    assert_eq!(
        out.stdout
            .lines()
            .filter(|l| l.contains("result rank=") && l.contains(" attempt=1 ") && l.ends_with(" ok"))
            .count(),
        6,
        "{out}"
    );
    let run = only_run_dir(&c.logs());
    let ev = events(&run);
    let resuming: Vec<&Value> = ev.iter().filter(|e| e["event"] == "resuming").collect();
    assert_eq!(resuming.len(), 1);
    assert_eq!(resuming[0]["from"], format!("{}/step_2", ckpt.display()));

    // The record: the config as given, the plan, herd's version and the commit.
    assert_eq!(
        std::fs::read(run.join("config.toml")).unwrap(),
        std::fs::read(c.tb.dir().join("cluster.toml")).unwrap()
    );
    let plan: Value = serde_json::from_slice(&std::fs::read(run.join("plan.json")).unwrap()).unwrap();
    assert_eq!(plan["nnodes"], 3);
    let about: Value = serde_json::from_slice(&std::fs::read(run.join("herd.json")).unwrap()).unwrap();
    assert_eq!(about["herd_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(about["git"]["commit"].as_str().unwrap().len(), 40, "{about}");
    assert_eq!(about["git"]["dirty"], false, "{about}");
    let summary: Value = serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
    let classes: Vec<&str> =
        summary["attempts"].as_array().unwrap().iter().map(|a| a["class"].as_str().unwrap()).collect();
    assert_eq!(classes, ["crash", "ok"], "{summary}");
    assert_eq!(summary["status"], "succeeded");
    let share = summary["effective_share"].as_f64().unwrap();
    assert!(share > 0.0 && share < 1.0, "{summary}");
    assert!(summary["attempts"][0]["culprit"].as_str().unwrap().contains("rank 3"), "{summary}");
    // A forwarded secret is in no file of the run.
    for entry in walk(&run) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains(SECRET), "{} holds the secret", entry.display());
    }

    // The hook heard the three events, in order.
    let heard_text = std::fs::read_to_string(&heard).unwrap();
    let names: Vec<String> = heard_text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["attempt_failed", "restart_scheduled", "run_finished"]);
    assert_nothing_left(&ev);
}

/// No process of the run's config is left on any node (nor on this machine, where the
/// notify hook ran): every node's job carries the config's marker.
fn assert_nothing_left(ev: &[Value]) {
    let mark = format!("HERD_MARKER={}:", ev[0]["config_key"].as_str().unwrap());
    let clean = herd::wait_until(std::time::Duration::from_secs(10), || {
        herd::processes_with_env_prefix(&mark).is_empty()
    });
    assert!(clean, "left: {:?}", herd::processes_with_env_prefix(&mark));
}

#[test]
fn no_checkpoint_starts_afresh_with_a_warning_and_a_failing_hook_changes_nothing() {
    let c = Cluster::new(2);
    let empty = c.tb.dir().join("no-ckpt");
    std::fs::create_dir_all(&empty).unwrap();
    let args = "\"--steps\", \"4\", \"--sleep\", \"0.2\", \"--die-rank\", \"1\", \"--fault-step\", \"1\"";
    let extra = format!(
        "{FAST_RESTART}resume_args = [\"--resume\", \"{{latest:{}/step_*}}\"]\n\n[notify]\ncommand = \"exit 7\"\ntimeout = \"2s\"\n",
        empty.display()
    );
    c.write_config(&job(args), &extra);
    let out = c.run();
    out.assert_code(0);
    assert!(out.stderr.contains("nothing in") && out.stderr.contains("starts afresh"), "{out}");
    assert!(
        out.stderr.contains("notify.command \"exit 7\": exited with exit status: 7; the run goes on"),
        "{out}"
    );
    assert!(!out.stdout.contains("resumes from"), "{out}");
    let ev = events(&only_run_dir(&c.logs()));
    let resuming: Vec<&Value> = ev.iter().filter(|e| e["event"] == "resuming").collect();
    assert_eq!(
        (resuming[0]["from"].clone(), resuming[0]["args"].clone()),
        (Value::Null, serde_json::json!([]))
    );
    assert_nothing_left(&ev);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            files.extend(walk(&p));
        } else {
            files.push(p);
        }
    }
    files
}

#[test]
fn herd_stacks_prints_every_rank_of_a_live_run_and_changes_nothing() {
    let c = Cluster::new(3);
    c.write_config(&job("\"--steps\", \"150\", \"--sleep\", \"0.2\""), FAST_RESTART);
    let mut running = herd::start(c.tb.dir(), &["run"], &[]);
    let started = running.until(LIMIT, || {
        (0..3)
            .map(|n| {
                c.tb.processes_with_env(n, "LOCAL_RANK", "0").len()
                    + c.tb.processes_with_env(n, "LOCAL_RANK", "1").len()
            })
            .sum::<usize>()
            >= 6
    });
    assert!(started, "training did not start");
    std::thread::sleep(std::time::Duration::from_secs(3));
    let stacks = herd::run(c.tb.dir(), &["stacks"], LIMIT);
    stacks.assert_code(0);
    for rank in 0..6 {
        assert!(
            stacks.stdout.contains(&format!("==> rank {rank}: node {} (", rank / 2)),
            "rank {rank}\n{stacks}"
        );
    }
    assert_eq!(stacks.stdout.matches("\"MainThread\"").count(), 6, "{stacks}");
    assert!(stacks.stdout.lines().last().unwrap().contains("examples/allreduce.py:"), "{stacks}");
    // The run was only read: it goes on and ends well.
    let out = running.wait(LIMIT);
    out.assert_code(0);
    let ev = events(&only_run_dir(&c.logs()));
    assert!(!ev.iter().any(|e| e["event"] == "attempt_failed"), "{out}");
    assert_nothing_left(&ev);
}

/// A GPU job on 2 nodes that does what a rank's watchdog does on a collective's timeout, then
/// fails: each rank dumps, waits for the other's dump (otherwise the first failure may stop
/// the other node before it has dumped anything), and fails as a lost peer does (a restart's
/// case); in an attempt past `fails`, it succeeds. Its workdir's own, for the dumps.
fn dumping_job(fails: u32, restart: &str) -> (Cluster, std::path::PathBuf) {
    let c = Cluster::new(2);
    let wd = c.tb.dir().join("wd");
    std::fs::create_dir_all(&wd).unwrap();
    let dump = wd.join("dump.sh");
    std::fs::write(
        &dump,
        format!(
            "[ \"$HERD_ATTEMPT\" -ge {fails} ] && exit 0\n\
             f=$TORCH_NCCL_DEBUG_INFO_TEMP_FILE\nprintf 'fr %s\\000\\377' \"$NODE_RANK\" >\"$f$NODE_RANK.tmp\"\n\
             mv \"$f$NODE_RANK.tmp\" \"$f$NODE_RANK\"\n\
             i=0; while [ $i -lt 600 ] && ! {{ [ -e \"${{f}}0\" ] && [ -e \"${{f}}1\" ]; }}; do sleep 0.1; i=$((i+1)); done\necho 'RuntimeError: Connection closed by peer' >&2\nexit 7\n"
        ),
    )
    .unwrap();
    let job = format!("launcher = \"command\"\nscript = \"sh\"\nargs = [\"{}\"]", dump.display());
    let config = c.write_config(&job, restart);
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replace("device = \"cpu\"", "device = \"cuda\"").replace(
        &format!("workdir = \"{}\"", herd::repo_root().display()),
        &format!("workdir = \"{}\"", wd.display()),
    );
    std::fs::write(&config, text).unwrap();
    (c, wd)
}

/// A GPU job's ranks dump PyTorch's NCCL flight recorder where herd points them; after the
/// failed attempt, herd copies each node's own ranks' dumps into the run, byte for byte. The
/// nodes share the workdir here (as a cluster's shared filesystem): each dump comes once.
#[test]
fn a_failed_gpu_jobs_nccl_dumps_are_copied_into_the_run() {
    let (c, wd) = dumping_job(1, "[restart]\nmax_restarts = 0\ngrace_period = \"2s\"\n");
    // No GPUs here: the preflight would say so.
    let out = herd::run(c.tb.dir(), &["run", "--no-preflight"], LIMIT);
    out.assert_code(1);
    let run = only_run_dir(&c.logs());
    for rank in 0..2 {
        let copied = std::fs::read(run.join(format!("attempt-0/nccl/rank_{rank}"))).unwrap();
        let mut want = format!("fr {rank}").into_bytes();
        want.extend([0, 0xff]);
        assert_eq!(copied, want, "rank {rank}");
    }
    let ev = events(&run);
    let saved: Vec<&Value> = ev.iter().filter(|e| e["event"] == "nccl_dumps_saved").collect();
    assert_eq!(saved.len(), 1, "{ev:?}");
    assert_eq!(saved[0]["ranks"], serde_json::json!([0, 1]), "{}", saved[0]);
    assert!(out.stderr.contains("NCCL flight-recorder dumps of 2 rank(s) in attempt-0/nccl/"), "{out}");
    // On the nodes, where the plan said.
    let run_id = ev[0]["run_id"].as_str().unwrap();
    assert!(wd.join(format!("herd-nccl/{run_id}/attempt-0/rank_1")).is_file());
}

/// The dumps of a failed attempt are copied while the run restarts, not before it: on nodes
/// whose login takes 3 s, the copy's login and the next attempt's are paid at once.
#[test]
fn the_dumps_are_copied_while_the_next_attempt_starts() {
    let (c, _wd) = dumping_job(1, "[restart]\nmax_restarts = 1\nbackoff = \"1s\"\nbackoff_max = \"1s\"\n");
    c.tb.slow_login(0, 3.0);
    c.tb.slow_login(1, 3.0);
    let out = herd::run(c.tb.dir(), &["run", "--no-preflight"], LIMIT);
    out.assert_code(0);
    let run = only_run_dir(&c.logs());
    for rank in 0..2 {
        assert!(run.join(format!("attempt-0/nccl/rank_{rank}")).is_file(), "rank {rank}\n{out}");
    }
    let ev = events(&run);
    let at = |what: &dyn Fn(&Value) -> bool| ev.iter().position(what).unwrap_or_else(|| panic!("{ev:?}"));
    let saved = at(&|e| e["event"] == "nccl_dumps_saved" && e["attempt"] == 0);
    let second = at(&|e| e["event"] == "attempt_starting" && e["attempt"] == 1);
    let finished = at(&|e| e["event"] == "run_finished");
    assert!(second < saved, "attempt 1 started after the copy: {ev:?}");
    assert!(saved < finished, "{ev:?}");
}

/// Ctrl-C while the last attempt's dumps are copied (its nodes' logins take 8 s) cuts the copy
/// short: herd ends at once, the run as failed, and nothing is told after its end.
#[test]
fn ctrl_c_during_the_last_copy_of_the_dumps_ends_the_run_at_once() {
    let (c, _wd) = dumping_job(1, "[restart]\nmax_restarts = 0\n");
    c.tb.slow_login(0, 8.0);
    c.tb.slow_login(1, 8.0);
    let running = herd::start(c.tb.dir(), &["run", "--no-preflight"], &[]);
    assert!(wait_for_event(&c.logs(), "attempt_failed", LIMIT).is_some());
    std::thread::sleep(std::time::Duration::from_millis(500));
    running.signal("INT");
    let signalled = std::time::Instant::now();
    let out = running.wait(LIMIT);
    let took = signalled.elapsed();
    out.assert_code(1);
    assert!(took < std::time::Duration::from_secs(5), "{took:?} after Ctrl-C\n{out}");
    let ev = events(&only_run_dir(&c.logs()));
    assert_eq!(ev.last().unwrap()["event"], "run_finished", "{ev:?}");
    assert!(!ev.iter().any(|e| e["event"] == "nccl_dumps_saved"), "{ev:?}");
}
