//! Scenario 4: training runs on 3 nodes, node 3's link is cut; time to herd's teardown and
//! failed attempt (from events.jsonl), and to no job process left on the two reachable nodes.

use std::process::Stdio;
use std::time::{Duration, Instant};

use super::herd_support::{self, HERD};
use super::job::{
    event_time, kill_marked, marked, run_events, since, timeline_rows, torch_config, torch_shell_loop,
    workers, TRAIN_ON,
};
use super::measure::{fmt_stat, poll_until, runs, Tracked};
use super::testbed::Testbed;

pub fn run() {
    let reps = runs(3);
    const CAP: Duration = Duration::from_secs(45);
    let venv = herd_support::torch_venv();
    let tb = Testbed::new(3);
    let dir = tempfile::tempdir().unwrap();
    let cut_ns = net_ns_inode(&format!("/run/netns/{}", tb.nodes()[2].netns)).unwrap();
    let on_reachable = |mark: &str| {
        marked(mark, None)
            .into_iter()
            .filter(|p| net_ns_inode(&format!("/proc/{p}/ns/net")).is_some_and(|i| i != cut_ns))
            .count()
    };
    let training = |mark: &str| {
        poll_until(Duration::from_secs(120), Duration::from_millis(100), || workers(mark, None).len() >= 6)
            .expect("training did not start");
        std::thread::sleep(Duration::from_secs(3));
    };
    let (mut detect, mut failed, mut gone, mut loop_gone) = (vec![], vec![], vec![], vec![]);
    let mut loop_hung = 0;
    let mut timeline = Vec::new();
    for rep in 0..reps {
        let mark = format!("BENCH_MARK=part-herd-{rep}-{}", std::process::id());
        let config = torch_config(&tb, dir.path(), &venv, TRAIN_ON, &mark, "[restart]\nmax_restarts = 0\n");
        let config = config.display().to_string();
        let mut herd = Tracked::spawn(HERD, &["run", "--no-preflight", "-c", &config], Stdio::null());
        training(&mark);
        let cut_wall = std::time::SystemTime::now();
        let cut = Instant::now();
        tb.link_down(2);
        if let Some(t) = poll_until(CAP, Duration::from_millis(20), || on_reachable(&mark) == 0) {
            gone.push((t - cut).as_secs_f64());
        }
        poll_until(CAP, Duration::from_millis(100), || {
            run_events(&dir.path().join("logs")).iter().any(|e| e["event"] == "attempt_failed")
        });
        let ev = run_events(&dir.path().join("logs"));
        if let Some(t) = event_time(&ev, "teardown_started", 0) {
            detect.push(since(t, cut_wall));
        }
        if let Some(t) = event_time(&ev, "attempt_failed", 0) {
            failed.push(since(t, cut_wall));
        }
        if rep + 1 == reps {
            timeline = timeline_rows(&ev, cut_wall);
        }
        if poll_until(Duration::from_secs(20), Duration::from_millis(100), || herd.try_done()).is_none() {
            herd.kill();
        }
        herd.finish();
        tb.link_up(2);
        kill_marked(&mark);

        let mark = format!("BENCH_MARK=part-loop-{rep}-{}", std::process::id());
        let mut children =
            torch_shell_loop(&tb, &venv, "--steps 100000 --sleep 0.05", &mark, 29600 + rep as u16);
        training(&mark);
        let cut = Instant::now();
        tb.link_down(2);
        match poll_until(CAP, Duration::from_millis(20), || on_reachable(&mark) == 0) {
            Some(t) => loop_gone.push((t - cut).as_secs_f64()),
            None => loop_hung += 1,
        }
        tb.link_up(2);
        for c in &mut children {
            let _ = c.kill();
            let _ = c.wait();
        }
        kill_marked(&mark);
    }
    println!("\n### Partition detection: torchrun 3 nodes x 2, node 2's link cut during training (node ranks from 0, as in herd's events) ({reps} runs each, alternating)\n");
    println!("Rerun: `BENCH_RUNS={reps} cargo bench --bench herd_bench -- partition`\n");
    println!("| launcher | from the cut to | median s | spread s |");
    println!("|---|---|---|---|");
    for (what, xs) in [
        ("teardown started (events.jsonl)", &detect),
        ("attempt declared failed (events.jsonl)", &failed),
        ("no job process left on nodes 0 and 1", &gone),
    ] {
        let (m, s, _) = fmt_stat(xs, 2);
        println!("| herd run --no-preflight | {what} | {m} | {s} |");
    }
    if !loop_gone.is_empty() {
        let (m, s, _) = fmt_stat(&loop_gone, 2);
        println!("| ssh + torchrun shell loop | no job process left on nodes 0 and 1 | {m} | {s} |");
    }
    if loop_hung > 0 {
        println!(
            "| ssh + torchrun shell loop | no job process left on nodes 0 and 1 | still running after {} s in {loop_hung} of {reps} runs | |",
            CAP.as_secs()
        );
    }
    println!(
        "\nherd's events in the last run, from the cut:\n\n| time | event |\n|---|---|\n{}",
        timeline.join("\n")
    );
}

fn net_ns_inode(path: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}
