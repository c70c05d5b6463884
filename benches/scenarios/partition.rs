//! Scenario 4: training runs on 3 nodes, node 3's link is cut; time to herd's teardown and
//! failed attempt (from events.jsonl), and to no job process left on the two reachable nodes.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use super::herd_support::{self, HERD};
use super::job::{
    event_time, kill_marked, marked, print_timeline, run_events, since, timeline_rows, torch_config,
    torch_shell_loop, training, TRAIN_ON, TRAIN_ON_SHELL,
};
use super::measure::{fmt_stat, poll_until, runs, table, Tracked};
use super::testbed::Testbed;

const CAP: Duration = Duration::from_secs(45);

/// Seconds from the cut, of every run.
#[derive(Default)]
struct Times {
    detect: Vec<f64>,
    failed: Vec<f64>,
    gone: Vec<f64>,
    loop_gone: Vec<f64>,
    loop_hung: usize,
}

pub fn run() {
    let reps = runs(3);
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(3);
    let dir = tempfile::tempdir().unwrap();
    let cut_ns = net_ns_inode(&format!("/run/netns/{}", tb.nodes()[2].netns)).unwrap();
    // How many of the job's processes are left on the nodes that can still be reached.
    let on_reachable = |mark: &str| {
        marked(mark, None)
            .into_iter()
            .filter(|p| net_ns_inode(&format!("/proc/{p}/ns/net")).is_some_and(|i| i != cut_ns))
            .count()
    };
    let mut times = Times::default();
    let mut timeline = Vec::new();
    for rep in 0..reps {
        let mark = format!("BENCH_MARK=part-herd-{rep}-{}", std::process::id());
        let ev = herd_cut(&tb, dir.path(), &venv, &mark, &on_reachable, &mut times);
        if rep + 1 == reps {
            timeline = ev;
        }
        let mark = format!("BENCH_MARK=part-loop-{rep}-{}", std::process::id());
        let mut children = torch_shell_loop(&tb, &venv, TRAIN_ON_SHELL, &mark, 29600 + rep as u16);
        train(&mark);
        let cut = Instant::now();
        tb.link_down(2);
        match poll_until(CAP, Duration::from_millis(20), || on_reachable(&mark) == 0) {
            Some(t) => times.loop_gone.push((t - cut).as_secs_f64()),
            None => times.loop_hung += 1,
        }
        tb.link_up(2);
        for c in &mut children {
            let _ = c.kill();
            let _ = c.wait();
        }
        kill_marked(&mark);
    }
    print(reps, &times, &timeline);
}

/// Training under way for 3 s.
fn train(mark: &str) {
    training(mark, None).expect("training did not start");
    std::thread::sleep(Duration::from_secs(3));
}

/// One run of herd with the link cut: its times into `times`, its events from the cut.
fn herd_cut(
    tb: &Testbed,
    dir: &Path,
    venv: &Path,
    mark: &str,
    on_reachable: &dyn Fn(&str) -> usize,
    times: &mut Times,
) -> Vec<String> {
    let config = torch_config(tb, dir, venv, TRAIN_ON, mark, "[restart]\nmax_restarts = 0\n");
    let config = config.display().to_string();
    let mut herd = Tracked::spawn(HERD, &["run", "--no-preflight", "-c", &config], Stdio::null());
    train(mark);
    let cut_wall = SystemTime::now();
    let cut = Instant::now();
    tb.link_down(2);
    if let Some(t) = poll_until(CAP, Duration::from_millis(20), || on_reachable(mark) == 0) {
        times.gone.push((t - cut).as_secs_f64());
    }
    poll_until(CAP, Duration::from_millis(100), || {
        run_events(&dir.join("logs")).iter().any(|e| e["event"] == "attempt_failed")
    });
    let ev = run_events(&dir.join("logs"));
    times.detect.extend(event_time(&ev, "teardown_started", 0).map(|t| since(t, cut_wall)));
    times.failed.extend(event_time(&ev, "attempt_failed", 0).map(|t| since(t, cut_wall)));
    if poll_until(Duration::from_secs(20), Duration::from_millis(100), || herd.try_done()).is_none() {
        herd.kill();
    }
    herd.finish();
    tb.link_up(2);
    kill_marked(mark);
    timeline_rows(&ev, cut_wall)
}

fn print(reps: usize, times: &Times, timeline: &[String]) {
    println!("\n### Partition detection: torchrun 3 nodes x 2, node 2's link cut during training (node ranks from 0, as in herd's events) ({reps} runs each, alternating)\n");
    println!("Rerun: `BENCH_RUNS={reps} cargo bench --bench herd_bench -- partition`\n");
    table("| launcher | from the cut to | median s | spread s |");
    for (what, xs) in [
        ("teardown started (events.jsonl)", &times.detect),
        ("attempt declared failed (events.jsonl)", &times.failed),
        ("no job process left on nodes 0 and 1", &times.gone),
    ] {
        let (m, s, _) = fmt_stat(xs, 2);
        println!("| herd run --no-preflight | {what} | {m} | {s} |");
    }
    if !times.loop_gone.is_empty() {
        let (m, s, _) = fmt_stat(&times.loop_gone, 2);
        println!("| ssh + torchrun shell loop | no job process left on nodes 0 and 1 | {m} | {s} |");
    }
    if times.loop_hung > 0 {
        println!(
            "| ssh + torchrun shell loop | no job process left on nodes 0 and 1 | still running after {} s in {} of {reps} runs | |",
            CAP.as_secs(),
            times.loop_hung
        );
    }
    print_timeline("herd's events in the last run, from the cut", timeline);
}

fn net_ns_inode(path: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}
