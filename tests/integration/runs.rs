//! Runs of one config never hurt each other: the same file from two directories, from
//! another machine (another state directory), and named in different ways. Both nodes use the
//! local transport, so the sweeps and the agents run on this machine.

use std::path::Path;
use std::time::Duration;

use crate::support::herd::{self, processes_with_argv};

const LIMIT: Duration = Duration::from_secs(60);

/// A config with no `[logs]`: its logs go to `herd-logs` beside it, whichever directory herd
/// runs in. The job ticks for about 4 s on each node.
fn write_config(path: &Path) {
    let text = "[[nodes]]\nhost = \"localhost\"\n[[nodes]]\nhost = \"127.0.0.1\"\n\
        [job]\nlauncher = \"command\"\nscript = \"sh\"\n\
        args = [\"-c\", 'for i in 1 2 3 4 5 6 7 8; do echo \"tick $i\"; sleep 0.5; done']\n\
        [restart]\nmax_restarts = 0\n";
    std::fs::write(path, text).unwrap();
}

/// Wait for the run under `logs` to have started its job on every node.
fn wait_started(logs: &Path) {
    let started = herd::wait_until(Duration::from_secs(30), || {
        let Ok(mut runs) = std::fs::read_dir(logs) else { return false };
        let Some(Ok(run)) = runs.next() else { return false };
        let Ok(text) = std::fs::read_to_string(run.path().join("events.jsonl")) else { return false };
        text.matches("\"node_started\"").count() == 2
    });
    assert!(started, "the first run did not start under {}", logs.display());
}

fn assert_all_ticks(out: &herd::Finished) {
    for tick in 1..=8 {
        assert_eq!(
            out.stdout.matches(&format!("tick {tick}\n")).count(),
            2,
            "tick {tick} on both nodes\n{out}"
        );
    }
}

/// A config R.toml and two working directories d1 and d2 beside it.
struct TwoDirs {
    tmp: tempfile::TempDir,
    config: String,
    /// The config's logs directory (beside it, not in d1 or d2).
    logs: std::path::PathBuf,
    d1: std::path::PathBuf,
    d2: std::path::PathBuf,
}

fn two_dirs() -> TwoDirs {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("R.toml");
    write_config(&config);
    let (d1, d2) = (tmp.path().join("d1"), tmp.path().join("d2"));
    std::fs::create_dir_all(&d1).unwrap();
    std::fs::create_dir_all(&d2).unwrap();
    let logs = tmp.path().join("herd-logs");
    TwoDirs { config: config.to_str().unwrap().to_string(), logs, tmp, d1, d2 }
}

#[test]
fn the_same_config_from_another_directory_is_refused_while_it_runs() {
    let TwoDirs { tmp: _tmp, config, logs, d1, d2 } = two_dirs();
    let config = config.as_str();

    let first = herd::start(&d1, &["run", "--no-preflight", "-c", config], &[]);
    wait_started(&logs);
    let second = herd::run(&d2, &["run", "--no-preflight", "-c", config], LIMIT);
    second.assert_code(4);
    assert!(second.stderr.contains("another herd run of"), "{second}");
    // The network measurement would load the run's network, and measure its traffic.
    let deep = herd::run(&d2, &["doctor", "--deep", "-c", config], LIMIT);
    deep.assert_code(4);
    assert!(deep.stderr.contains("another herd run of"), "{deep}");
    let first = first.wait(LIMIT);
    first.assert_code(0);
    assert_all_ticks(&first);
}

#[test]
fn a_live_run_from_another_machine_is_never_swept() {
    let TwoDirs { tmp, config, logs, d1, d2 } = two_dirs();
    let config = config.as_str();
    // Another machine, or another user: a state directory of its own, so no shared lock.
    let elsewhere = tmp.path().join("other-state");

    let first = herd::start(&d1, &["run", "--no-preflight", "-c", config], &[]);
    wait_started(&logs);
    let second = herd::start(
        &d2,
        &["run", "--no-preflight", "-c", config],
        &[("XDG_STATE_HOME", elsewhere.to_str().unwrap())],
    )
    .wait(LIMIT);
    let first = first.wait(LIMIT);
    second.assert_code(0);
    first.assert_code(0);
    assert_all_ticks(&first);
    assert_all_ticks(&second);
    // Both runs' directories are in the config's logs directory; neither swept anything.
    for run in std::fs::read_dir(&logs).unwrap() {
        let run = run.unwrap().path();
        if !run.is_dir() {
            continue;
        }
        let swept = herd::events(&run);
        assert!(
            !herd::event_names(&swept).iter().any(|e| e == "leftovers_stopped"),
            "the second run swept the first one's live processes: {swept:?}"
        );
    }
}

#[test]
fn a_config_is_one_config_whichever_way_its_path_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("proj");
    std::fs::create_dir_all(&dir).unwrap();
    write_config(&dir.join("c.toml"));
    std::os::unix::fs::symlink(dir.join("c.toml"), tmp.path().join("link.toml")).unwrap();
    herd::run(&dir, &["run", "--no-preflight", "-c", "c.toml"], LIMIT).assert_code(0);
    let run_dir = herd::only_run_dir(&dir.join("herd-logs"));
    let run_id = run_dir.file_name().unwrap().to_str().unwrap().to_string();

    let abs_doubled = format!("{}//c.toml", dir.display());
    let link = tmp.path().join("link.toml").display().to_string();
    for name in ["./c.toml", "../proj/c.toml", abs_doubled.as_str(), link.as_str()] {
        // The logs stay where the run wrote them: in proj/herd-logs.
        let out = herd::run(&dir, &["logs", "--list", "-c", name], LIMIT);
        out.assert_code(0);
        assert!(out.stdout.contains(&run_id), "-c {name} does not find run {run_id}\n{out}");
    }
    // From another directory too: a relative logs.dir is the config file's.
    let out = herd::run(tmp.path(), &["logs", "--list", "-c", "proj/c.toml"], LIMIT);
    out.assert_code(0);
    assert!(out.stdout.contains(&run_id), "from {} -c proj/c.toml\n{out}", tmp.path().display());
}

/// herd stopped for longer than heartbeat_timeout (kill -STOP: Ctrl-Z, a laptop lid, a
/// paused CI runner) and then resumed: its nodes were fine all along, so the run goes on and
/// succeeds, with no node declared lost and no line lost.
#[test]
fn a_suspended_herd_does_not_blame_its_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[[nodes]]\nhost = \"localhost\"\n[[nodes]]\nhost = \"127.0.0.1\"\n\
        [job]\nlauncher = \"command\"\nscript = \"sh\"\n\
        args = [\"-c\", 'i=0; while [ $i -lt 24 ]; do echo \"beat $i\"; i=$((i + 1)); sleep 0.5; done']\n\
        [restart]\nmax_restarts = 0\nheartbeat_timeout = \"3s\"\n";
    std::fs::write(dir.path().join("cluster.toml"), text).unwrap();
    let running = herd::start(dir.path(), &["run", "--no-preflight"], &[]);
    wait_started(&dir.path().join("herd-logs"));
    running.signal("STOP");
    std::thread::sleep(Duration::from_secs(6));
    running.signal("CONT");
    let out = running.wait(LIMIT);
    out.assert_code(0);
    for i in 0..24 {
        assert_eq!(out.stdout.matches(&format!("beat {i}\n")).count(), 2, "beat {i} on both nodes\n{out}");
    }
    let names = herd::event_names(&herd::events(&herd::only_run_dir(&dir.path().join("herd-logs"))));
    assert!(!names.iter().any(|n| n == "teardown_started" || n == "attempt_failed"), "{names:?}\n{out}");
    assert!(out.stderr.contains("herd was not running for"), "{out}");
}

fn write_one_node(dir: &Path, script: &str) {
    let text = format!(
        "[[nodes]]\nhost = \"localhost\"\n[job]\nlauncher = \"command\"\nscript = \"sh\"\nargs = [\"-c\", '{script}']\n\
         [restart]\nmax_restarts = 0\ngrace_period = \"1s\"\n"
    );
    std::fs::write(dir.join("cluster.toml"), text).unwrap();
}

/// Ctrl-C stops every process of the job, one that cleared its environment included, and
/// herd says so only then.
#[test]
fn ctrl_c_stops_a_job_process_that_cleared_its_environment() {
    let dir = tempfile::tempdir().unwrap();
    let secs = (8000 + std::process::id() % 1000).to_string();
    write_one_node(dir.path(), &format!("setsid env -i sleep {secs} </dev/null >/dev/null 2>&1 & sleep 120"));
    let running = herd::start(dir.path(), &["run", "--no-preflight"], &[]);
    assert!(herd::wait_until(Duration::from_secs(30), || !processes_with_argv(&["sleep", &secs]).is_empty()));
    running.signal("INT");
    let out = running.wait(LIMIT);
    out.assert_code(130);
    assert_eq!(
        processes_with_argv(&["sleep", &secs]),
        Vec::<u32>::new(),
        "env -i escaped the teardown\n{out}"
    );
    assert!(out.stderr.contains("run interrupted; every node stopped"), "{out}");
}

/// A process that survives SIGKILL (frozen here, as one stuck on a hung filesystem or GPU
/// driver would be) is named, and herd does not claim that every node stopped.
#[test]
fn a_process_that_survives_sigkill_is_named_and_not_called_stopped() {
    let freezer = Path::new("/sys/fs/cgroup/freezer");
    assert!(freezer.is_dir(), "this test needs the cgroup v1 freezer (and root)");
    let group = freezer.join(format!("herd-runs-{}", std::process::id()));
    std::fs::create_dir_all(&group).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let secs = (9000 + std::process::id() % 1000).to_string();
    write_one_node(dir.path(), &format!("sleep {secs} & wait"));
    let running = herd::start(dir.path(), &["run", "--no-preflight"], &[]);
    assert!(herd::wait_until(Duration::from_secs(30), || !processes_with_argv(&["sleep", &secs]).is_empty()));
    let stuck = processes_with_argv(&["sleep", &secs])[0];
    std::fs::write(group.join("cgroup.procs"), stuck.to_string()).unwrap();
    std::fs::write(group.join("freezer.state"), "FROZEN").unwrap();
    running.signal("INT");
    let out = running.wait(LIMIT);
    std::fs::write(group.join("freezer.state"), "THAWED").unwrap();
    assert!(herd::wait_until(Duration::from_secs(5), || processes_with_argv(&["sleep", &secs]).is_empty()));
    let _ = std::fs::remove_dir(&group);
    out.assert_code(130);
    assert!(
        out.stderr.contains(&format!(
            "could not stop 1 process(es) of the job, still there after SIGKILL: {stuck}"
        )),
        "{out}"
    );
    assert!(!out.stderr.contains("every node stopped"), "{out}");
    assert!(out.stderr.contains("run interrupted; 1 process(es) of the job could not be stopped"), "{out}");
}

/// A run its preflight stops (here: a workdir no node has) still leaves its record: a
/// summary.json that says it never started, and why.
#[test]
fn a_run_the_preflight_stops_records_why_it_never_started() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[[nodes]]\nhost = \"localhost\"\n[job]\nlauncher = \"command\"\nscript = \"true\"\n\
        workdir = \"/nonexistent-herd-test-workdir\"\n";
    std::fs::write(dir.path().join("cluster.toml"), text).unwrap();
    let out = herd::run(dir.path(), &["run"], LIMIT);
    out.assert_code(3);
    let run = herd::only_run_dir(&dir.path().join("herd-logs"));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["status"], "failed", "{summary}");
    assert_eq!(summary["attempts"].as_array().map(Vec::len), Some(0), "{summary}");
    let why = summary["not_started"].as_str().unwrap_or_default();
    assert!(why.contains("preflight failed") && why.contains("workdir"), "{summary}");
}

/// A notify hook that hangs after a job that succeeded: Ctrl-C ends it at once (its whole
/// process group) and herd exits with the run's code, 0, instead of waiting out the hook's
/// 10-minute timeout through every signal.
#[test]
fn a_signal_ends_a_hanging_notify_hook_and_herd_exits_with_the_runs_code() {
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("hook-started");
    let text = format!(
        "[[nodes]]\nhost = \"localhost\"\n[job]\nlauncher = \"command\"\nscript = \"true\"\n\
         [restart]\nmax_restarts = 0\n\
         [notify]\ncommand = \"touch '{}'; sleep 617 & sleep 617\"\ntimeout = \"10m\"\n",
        started.display()
    );
    std::fs::write(dir.path().join("cluster.toml"), text).unwrap();
    let mut running = herd::start(dir.path(), &["run", "--no-preflight"], &[]);
    assert!(running.until(LIMIT, || started.exists()), "the hook never started");
    running.signal("INT");
    let out = running.wait(2 * LIMIT);
    out.assert_code(0);
    assert!(out.stderr.contains("herd got a signal: killed (run_finished)"), "{out}");
    let left =
        herd::wait_until(Duration::from_secs(10), || processes_with_argv(&["sleep", "617"]).is_empty());
    assert!(left, "the hook's processes outlived herd");
}

/// The run_finished hook starts once the run's record is complete: a hook reading
/// `$HERD_RUN_DIR/summary.json` finds it, and its stdin is the event's line of events.jsonl
/// with the run's fields appended.
#[test]
fn the_run_finished_hook_finds_the_summary_in_its_run_dir() {
    let dir = tempfile::tempdir().unwrap();
    let (copied, line) = (dir.path().join("copied.json"), dir.path().join("line.json"));
    let text = format!(
        "[[nodes]]\nhost = \"localhost\"\n[job]\nlauncher = \"command\"\nscript = \"true\"\n\
         [restart]\nmax_restarts = 0\n\
         [notify]\ncommand = 'cat > \"{}\"; cp \"$HERD_RUN_DIR/summary.json\" \"{}\"'\ntimeout = \"5m\"\n",
        line.display(),
        copied.display()
    );
    std::fs::write(dir.path().join("cluster.toml"), text).unwrap();
    let out = herd::start(dir.path(), &["run", "--no-preflight"], &[]).wait(2 * LIMIT);
    out.assert_code(0);
    let summary =
        std::fs::read_to_string(&copied).unwrap_or_else(|e| panic!("no summary for the hook: {e}\n{out}"));
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    assert_eq!(summary["status"], "succeeded", "{summary}");
    let run = herd::only_run_dir(&dir.path().join("herd-logs"));
    let events = std::fs::read_to_string(run.join("events.jsonl")).unwrap();
    let finished = events.lines().find(|l| l.contains("\"event\":\"run_finished\"")).unwrap();
    let line = std::fs::read_to_string(&line).unwrap();
    let (head, tail) = line.split_at(finished.len() - 1);
    assert_eq!(head, &finished[..finished.len() - 1], "the event's own line first");
    assert!(tail.starts_with(",\"run_id\":"), "{line}");
}

/// A `command` job's failure takes the stacks of what still runs, but its processes are the
/// user's own and not Python: no stacks line that only counts ranks "without a stack".
#[test]
fn a_command_jobs_failure_has_no_stacks_line_of_missing_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[[nodes]]\nhost = \"localhost\"\n[[nodes]]\nhost = \"127.0.0.1\"\n\
        [job]\nlauncher = \"command\"\nscript = \"sh\"\n\
        args = [\"-c\", 'if [ \"$NODE_RANK\" = 1 ]; then sleep 1; exit 3; fi; sleep 60']\n\
        [restart]\nmax_restarts = 0\ngrace_period = \"1s\"\n";
    std::fs::write(dir.path().join("cluster.toml"), text).unwrap();
    let out = herd::run(dir.path(), &["run", "--no-preflight"], LIMIT);
    out.assert_code(1);
    assert!(out.stderr.contains("taking the stacks of the ranks still running"), "{out}");
    assert!(!out.stderr.contains("without a stack"), "{out}");
    assert!(!out.stderr.contains("every rank's stack"), "{out}");
}

/// A time limit's warning (SIGUSR1) tells the ranks of a running job to checkpoint, and the
/// last line says so; one that comes during the preflight, before any rank runs, tells no
/// rank, and the last line does not claim it did.
#[test]
fn the_time_limits_last_line_says_checkpoint_only_when_the_ranks_were_told() {
    let logs_have = |dir: &Path, what: &str| {
        let what = what.to_string();
        let logs = dir.join("herd-logs");
        herd::wait_until(Duration::from_secs(30), move || {
            let Ok(mut runs) = std::fs::read_dir(&logs) else { return false };
            let Some(Ok(run)) = runs.next() else { return false };
            std::fs::read_to_string(run.path().join("events.jsonl")).is_ok_and(|t| t.contains(&what))
        })
    };
    for (setup, told) in [("sleep 3", false), ("true", true)] {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let text = format!(
            "[[nodes]]\nhost = \"localhost\"\n[job]\nlauncher = \"command\"\nscript = \"sh\"\n\
             args = [\"-c\", 'trap \"exit 0\" USR1; touch {}; sleep 30 & wait']\nsetup = \"{setup}\"\n\
             [restart]\ncheckpoint_signal = \"USR1\"\n",
            ready.display()
        );
        std::fs::write(dir.path().join("cluster.toml"), text).unwrap();
        let running = herd::start(dir.path(), &["run"], &[]);
        if told {
            assert!(herd::wait_until(Duration::from_secs(30), || ready.exists()), "the job never started");
        } else {
            assert!(logs_have(dir.path(), "preflight_started"), "no preflight");
        }
        running.signal("USR1");
        let out = running.wait(LIMIT);
        out.assert_code(75);
        let events = herd::event_names(&herd::events(&herd::only_run_dir(&dir.path().join("herd-logs"))));
        assert_eq!(events.iter().any(|e| e == "checkpoint_requested"), told, "{events:?}\n{out}");
        if told {
            assert!(
                out.stderr.contains("run stopped for the time limit: the ranks were told to checkpoint"),
                "{out}"
            );
        } else {
            assert!(out.stderr.contains("run stopped for the time limit; every node stopped"), "{out}");
            assert!(!out.stderr.contains("told to checkpoint"), "{out}");
        }
    }
}
