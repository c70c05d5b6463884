//! Stragglers (issue 27): a rank that the others wait for is named while the job runs, from
//! its CPU time as its node's agent samples it; a balanced job, every rank printing, names
//! nobody. Real torchrun and gloo on the testbed.

use crate::support::cluster::{Cluster, LIMIT};
use crate::support::herd::{self, events, only_run_dir};
use serde_json::Value;

/// torchrun, 3 nodes x 2 ranks, each rank busy for `work` seconds a step then an all-reduce
/// (every rank prints a line a step); `extra`: more of examples/allreduce.py's arguments.
fn job(steps: u32, extra: &str) -> String {
    format!(
        "launcher = \"torchrun\"\nscript = \"examples/allreduce.py\"\nnproc_per_node = 2\n\
         args = [\"--steps\", \"{steps}\", \"--work\", \"0.3\"{extra}]"
    )
}

/// The run's straggler events and its summary.json.
fn stragglers(c: &Cluster) -> (Vec<Value>, Value) {
    let run = only_run_dir(&c.logs());
    let named = events(&run).into_iter().filter(|e| e["event"] == "straggler").collect();
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    (named, summary)
}

/// Named within ROUNDS (3) rounds of SAMPLE_EVERY (5 s) of its first slow step, plus up to a
/// round for the phase of the sampling against the steps, plus slack for a loaded machine.
const NAMED_WITHIN_SECS: f64 = 27.0;

/// A throttled node's own agent shares its throttle: one answer late for its round starts
/// the streak over, a round (5 s) or two later.
const THROTTLED_WITHIN_SECS: f64 = 37.0;

#[test]
fn a_rank_with_three_times_the_work_is_named_and_nobody_else() {
    let c = Cluster::new(3);
    c.write_config(&job(30, ", \"--slow-rank\", \"3\""), "");
    let out = herd::run(c.tb.dir(), &["run", "--json"], LIMIT);
    out.assert_code(0);
    let (named, summary) = stragglers(&c);
    assert_eq!(named.len(), 1, "{named:?}\n{out}");
    let s = &named[0];
    assert_eq!((&s["rank"], &s["node_rank"]), (&Value::from(3), &Value::from(1)), "{s}");
    assert!(s["score"].as_f64().unwrap() >= 1.5, "{s}");
    assert_eq!(summary["attempts"][0]["stragglers"][0]["rank"], 3, "{summary}");
    // From the slow rank's first step to the event, on herd's own clock (--json's stamps).
    let lines: Vec<Value> = out.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let at = |pick: &dyn Fn(&Value) -> bool| {
        let line = lines.iter().find(|v| pick(v)).unwrap_or_else(|| panic!("not in --json: {out}"));
        humantime::parse_rfc3339(line["ts"].as_str().unwrap()).unwrap()
    };
    let first_step = at(&|v| v["line"].as_str().is_some_and(|l| l.starts_with("step 0 rank 3 ")));
    let event = at(&|v| v["event"] == "straggler");
    let took = event.duration_since(first_step).unwrap().as_secs_f64();
    assert!(took <= NAMED_WITHIN_SECS, "named {took:.1} s after its first step");
    eprintln!("straggler named {took:.1} s after its first step, score {}", s["score"]);
}

#[test]
fn a_balanced_job_with_every_rank_printing_names_nobody() {
    let c = Cluster::new(3);
    c.write_config(&job(45, ""), "");
    for _ in 0..2 {
        let _ = std::fs::remove_dir_all(c.logs());
        let out = herd::run(c.tb.dir(), &["run"], LIMIT);
        out.assert_code(0);
        let (named, summary) = stragglers(&c);
        assert!(named.is_empty(), "{named:?}\n{out}");
        assert_eq!(summary["attempts"][0]["stragglers"], Value::Array(vec![]));
    }
}

/// Four nodes of one rank and a spare, `on_straggler = "replace"`. Once training is under way,
/// node 2's CPU is throttled to a tenth of a core (its cgroup): its rank computes no more than
/// the others but waits for a CPU, and is named. Then rank 0 is killed: at the restart, node 2
/// is quarantined for its straggler, the spare takes its place, and the job completes.
#[test]
fn a_throttled_node_is_named_and_replaced_by_the_spare_at_the_next_restart() {
    let c = Cluster::new(5);
    let steps = c.tb.dir().join("steps");
    c.write_config(
        &format!(
            "launcher = \"torchrun\"\nscript = \"examples/allreduce.py\"\nnproc_per_node = 1\nnnodes = 4\n\
             args = [\"--steps\", \"100000\", \"--work\", \"0.1\", \"--retry-steps\", \"3\", \"--save-dir\", \"{}\"]",
            steps.display()
        ),
        "[restart]\nbackoff = \"1s\"\nbackoff_max = \"2s\"\ngrace_period = \"3s\"\non_straggler = \"replace\"\n",
    );
    let mut running = herd::start(c.tb.dir(), &["run"], &[]);
    // Rank 0 writes steps/step_N after each step (the node logs are written in blocks).
    assert!(running.until(LIMIT, || steps.join("step_3").exists()), "no training");
    let _throttle = c.tb.throttle_cpu(2, 10);
    let throttled = std::time::Instant::now();
    let named = || {
        let run = only_run_dir(&c.logs());
        events(&run).into_iter().find(|e| e["event"] == "straggler")
    };
    assert!(running.until(LIMIT, || named().is_some()), "no straggler named");
    let took = throttled.elapsed().as_secs_f64();
    let s = named().unwrap();
    assert_eq!((&s["rank"], &s["node_rank"]), (&Value::from(2), &Value::from(2)), "{s}");
    for pid in c.tb.processes_with_env(0, "RANK", "0") {
        let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    }
    let out = running.wait(LIMIT);
    out.assert_code(0);
    assert!(took <= THROTTLED_WITHIN_SECS, "named {took:.1} s after the throttle\n{out}");
    eprintln!("throttled node named {took:.1} s after its throttle, score {}", s["score"]);
    let run = only_run_dir(&c.logs());
    let ev = events(&run);
    let quarantined: Vec<&Value> = ev.iter().filter(|e| e["event"] == "node_quarantined").collect();
    assert_eq!(quarantined.len(), 1, "{quarantined:?}\n{out}");
    assert_eq!(quarantined[0]["host"], c.addr(2), "{out}");
    let reason = quarantined[0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("a straggler: rank 2, ") && reason.ends_with(" times as busy as the median rank"),
        "{reason}"
    );
    let promoted = ev.iter().find(|e| e["event"] == "spare_promoted").unwrap_or_else(|| panic!("{out}"));
    assert_eq!((&promoted["node_rank"], &promoted["host"]), (&Value::from(2), &Value::from(c.addr(4))));
    // Attempt 1 ran on the spare and not on node 2, and completed.
    let results: Vec<&str> =
        out.stdout.lines().filter(|l| l.contains("result rank=") && l.contains(" attempt=1 ")).collect();
    assert_eq!(results.len(), 4, "{out}");
    assert!(results.iter().all(|l| l.ends_with(" ok")), "{results:?}");
    let (throttled_host, spare_host) = (&c.tb.nodes()[2].hostname, &c.tb.nodes()[4].hostname);
    assert!(results.iter().any(|l| l.contains(&format!(" host={spare_host} "))), "{results:?}");
    assert!(!results.iter().any(|l| l.contains(&format!(" host={throttled_host} "))), "{results:?}");
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["attempts"][0]["stragglers"][0]["rank"], 2, "{summary}");
}

/// Four nodes of one rank, one a spare, `on_straggler = "replace"`. After step 3, rank 0
/// computes alone for 50 s of CPU time, as a checkpoint write does, while the others wait in
/// a barrier; 40 s into it, on the first attempt, rank 2 is killed. Rank 0 is named a
/// straggler, alone, and blames no node: the restart runs on the same three nodes, the spare
/// stays a spare, and nothing is quarantined (issue 39, item 5).
#[test]
fn a_rank_that_works_while_the_others_wait_costs_no_node() {
    let c = Cluster::new(4);
    c.write_config(
        "launcher = \"torchrun\"\nscript = \"examples/allreduce.py\"\nnproc_per_node = 1\nnnodes = 3\n\
         args = [\"--steps\", \"6\", \"--work\", \"0.1\", \"--retry-steps\", \"3\", \"--solo\", \"0:3:50\", \
         \"--kill-in-solo\", \"2:40\"]",
        "[restart]\nbackoff = \"1s\"\nbackoff_max = \"2s\"\ngrace_period = \"3s\"\non_straggler = \"replace\"\n",
    );
    let out = herd::run(c.tb.dir(), &["run"], LIMIT);
    out.assert_code(0);
    let run = only_run_dir(&c.logs());
    let ev = events(&run);
    let named: Vec<&Value> = ev.iter().filter(|e| e["event"] == "straggler").collect();
    assert_eq!(named.len(), 1, "{named:?}\n{out}");
    assert_eq!((&named[0]["rank"], &named[0]["alone"]), (&Value::from(0), &Value::from(true)), "{out}");
    assert!(out.stdout.contains("rank 0 works alone after step 3"), "{out}");
    let kinds = ["node_quarantined", "spare_promoted"];
    let unwanted: Vec<&Value> = ev.iter().filter(|e| kinds.iter().any(|k| e["event"] == *k)).collect();
    assert!(unwanted.is_empty(), "{unwanted:?}\n{out}");
    let results: Vec<&str> =
        out.stdout.lines().filter(|l| l.contains("result rank=") && l.contains(" attempt=1 ")).collect();
    assert_eq!(results.len(), 3, "{out}");
    let spare = &c.tb.nodes()[3].hostname;
    assert!(!results.iter().any(|l| l.contains(&format!(" host={spare} "))), "{results:?}");
}
