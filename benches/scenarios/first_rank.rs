//! Scenario 2: a real torchrun job on 3 nodes, from the launcher's start to the first worker
//! process (a process of the job with LOCAL_RANK set) existing on any node.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use super::herd_support::{self, HERD};
use super::job::{
    first_launcher_and_worker, kill_marked, print_timeline, run_events, timeline_rows, torch_config,
    torch_shell_loop,
};
use super::measure::{fmt_stat, rounds, runs, table, Tracked};
use super::testbed::Testbed;

const LIMIT: Duration = Duration::from_secs(120);
const NAMES: [&str; 3] = ["ssh + torchrun shell loop", "herd run --no-preflight", "herd run"];

pub fn run() {
    let reps = runs(5);
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(3);
    let dir = tempfile::tempdir().unwrap();
    // Per launcher: (start to the first torchrun, start to the first worker) of every run.
    let mut times: [Vec<(f64, f64)>; 3] = Default::default();
    let mut timelines = [Vec::new(), Vec::new()];
    for (rep, variant) in rounds(reps, 3) {
        if variant == 0 {
            // The shell loop.
            let mark = format!("BENCH_MARK=first-loop-{rep}-{}", std::process::id());
            let start = Instant::now();
            let children = torch_shell_loop(&tb, &venv, "--steps 3", &mark, 29500 + rep as u16);
            times[0].extend(first_launcher_and_worker(&mark, start, LIMIT));
            for mut c in children {
                let _ = c.wait();
            }
            kill_marked(&mark);
            continue;
        }
        // herd, without and with its preflight.
        let preflight = variant == 2;
        let mark = format!("BENCH_MARK=first-herd-{preflight}-{rep}-{}", std::process::id());
        let config = torch_config(&tb, dir.path(), &venv, "\"--steps\", \"3\"", &mark, "");
        let (first, timeline) = herd_first(dir.path(), &config, preflight, &mark);
        times[variant].extend(first);
        if rep + 1 == reps {
            timelines[usize::from(preflight)] = timeline;
        }
    }
    print(reps, &times, &timelines);
}

/// One run of herd: when its first torchrun and first worker existed, and its events from its
/// start, with those two among them.
fn herd_first(dir: &Path, config: &Path, preflight: bool, mark: &str) -> (Option<(f64, f64)>, Vec<String>) {
    let config = config.display().to_string();
    let mut a = vec!["run", "-c", &config];
    if !preflight {
        a.insert(1, "--no-preflight");
    }
    let spawned = SystemTime::now();
    let herd = Tracked::spawn(HERD, &a, Stdio::null());
    let first = first_launcher_and_worker(mark, herd.started, LIMIT);
    let m = herd.finish();
    let mut timeline = timeline_rows(&run_events(&dir.join("logs")), spawned);
    timeline.retain(|r| {
        !r.contains("node_exited") && !r.contains("attempt_succeeded") && !r.contains("run_finished")
    });
    if let Some((l, w)) = first {
        timeline.push(format!("| +{l:.2} s | first torchrun process exists |"));
        timeline.push(format!("| +{w:.2} s | first worker process exists |"));
    }
    assert!(m.success, "herd run failed");
    kill_marked(mark);
    (first, timeline)
}

fn print(reps: usize, times: &[Vec<(f64, f64)>; 3], timelines: &[Vec<String>; 2]) {
    println!("\n### Time to first rank running: torchrun, 3 nodes x 2, start to the first worker process ({reps} runs each, alternating, order rotated)\n");
    println!("Rerun: `BENCH_RUNS={reps} cargo bench --bench herd_bench -- first-rank`\n");
    println!("Each run is split where the first `torchrun` process exists on any node: before it is the");
    println!("launcher's part (SSH, the agent, `cd`, `setup`), after it is torch's own start-up.\n");
    table("| launcher | to first worker, median s | spread s | overhead above the loop s | to first torchrun, median s | spread s | overhead above the loop s | torchrun to first worker, median s |");
    let mut base = (f64::NAN, f64::NAN);
    for (i, name) in NAMES.iter().enumerate() {
        let worker: Vec<f64> = times[i].iter().map(|t| t.1).collect();
        let launcher: Vec<f64> = times[i].iter().map(|t| t.0).collect();
        let torch: Vec<f64> = times[i].iter().map(|t| t.1 - t.0).collect();
        let (wm, ws, wv) = fmt_stat(&worker, 2);
        let (lm, ls, lv) = fmt_stat(&launcher, 2);
        let (tm, _, _) = fmt_stat(&torch, 2);
        if i == 0 {
            base = (wv, lv);
        }
        println!("| {name} | {wm} | {ws} | {:.2} | {lm} | {ls} | {:.2} | {tm} |", wv - base.0, lv - base.1);
    }
    let missing = 3 * reps - times.iter().map(Vec::len).sum::<usize>();
    if missing > 0 {
        println!("\n{missing} run(s) never showed a worker within {} s.", LIMIT.as_secs());
    }
    for (name, timeline) in NAMES[1..].iter().zip(timelines) {
        print_timeline(&format!("The last `{name}`'s events, from its start"), timeline);
    }
}
