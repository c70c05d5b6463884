//! Stragglers (issue 27): a rank that the others wait for is named while the job runs, from
//! its CPU time as its node's agent samples it; a balanced job, every rank printing, names
//! nobody. Real torchrun and gloo on the testbed.

mod support;

use serde_json::Value;
use support::cluster::{Cluster, LIMIT};
use support::herd::{self, events, only_run_dir};

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

#[test]
fn a_rank_with_three_times_the_work_is_named_and_nobody_else() {
    let c = Cluster::new(3);
    c.write_config(&job(40, ", \"--slow-rank\", \"3\""), "");
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
    c.write_config(&job(80, ""), "");
    for _ in 0..2 {
        let _ = std::fs::remove_dir_all(c.logs());
        let out = herd::run(c.tb.dir(), &["run"], LIMIT);
        out.assert_code(0);
        let (named, summary) = stragglers(&c);
        assert!(named.is_empty(), "{named:?}\n{out}");
        assert_eq!(summary["attempts"][0]["stragglers"], Value::Array(vec![]));
    }
}
