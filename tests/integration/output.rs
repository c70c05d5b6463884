//! How a run looks: JSON lines on stdout with `--json`, the live board on a terminal, and
//! plain lines without escape codes everywhere else. Both nodes use the local transport.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::browser;
use crate::support::herd::{self, HERD};

const LIMIT: Duration = Duration::from_secs(60);

/// Two local nodes; node 0 prints to stdout and stderr and ends without a newline.
fn write_config(dir: &Path, script: &str) {
    let text = format!(
        "[[nodes]]\nhost = \"localhost\"\n[[nodes]]\nhost = \"127.0.0.1\"\n\
         [job]\nlauncher = \"command\"\nscript = \"sh\"\nargs = [\"-c\", '{script}']\n\
         [logs]\ndir = \"logs\"\n"
    );
    std::fs::write(dir.join("cluster.toml"), text).unwrap();
}

/// `write_config`, with one restart 100 ms after a failure of the classes `on` (quoted, with
/// commas between).
fn write_config_restarting(dir: &Path, script: &str, on: &str) {
    write_config(dir, script);
    let mut text = std::fs::read_to_string(dir.join("cluster.toml")).unwrap();
    text.push_str(&format!("[restart]\nmax_restarts = 1\non = [{on}]\nbackoff = \"100ms\"\n"));
    std::fs::write(dir.join("cluster.toml"), text).unwrap();
}

/// `herd run --no-preflight` in `dir` with stdout piped for the test to read, and its stderr
/// read to the end by a thread of its own.
fn run_reading_stderr(dir: &Path) -> (std::process::Child, std::thread::JoinHandle<String>) {
    use std::io::Read;
    let mut child = Command::new(HERD)
        .args(["run", "--no-preflight"])
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    (child, reader)
}

/// `program` in `dir` with the environment of a person at a colour terminal (no NO_COLOR,
/// no CI), whatever the test runner's is.
fn like_a_person(program: &str, dir: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(dir).env_remove("NO_COLOR").env_remove("CI").env("TERM", "xterm-256color");
    cmd.stdin(Stdio::null());
    cmd
}

const CHATTY: &str = r#"echo "one $NODE_RANK"; echo "two $NODE_RANK" >&2; printf "three""#;

#[test]
fn json_puts_events_and_output_on_stdout_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), CHATTY);
    let out = herd::run(dir.path(), &["run", "--json", "--no-preflight"], LIMIT);
    out.assert_code(0);

    let objects: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON on stdout: {l:?}: {e}\n{out}")))
        .collect();
    assert!(objects.iter().all(|o| o["ts"].is_string()), "{out}");
    let names = herd::event_names(&objects);
    assert_eq!(names.first().map(String::as_str), Some("run_started"), "{names:?}");
    assert_eq!(names.last().map(String::as_str), Some("run_finished"), "{names:?}");

    for rank in 0..2u64 {
        let lines: Vec<&serde_json::Value> =
            objects.iter().filter(|o| o["event"] == "output" && o["node_rank"] == rank).collect();
        let mut texts: Vec<&str> = lines.iter().map(|o| o["line"].as_str().unwrap()).collect();
        texts.sort();
        assert_eq!(texts, [format!("one {rank}"), "three".into(), format!("two {rank}")], "{out}");
        assert!(lines.iter().all(|o| o["attempt"] == 0 && o["host"].is_string()));
        let three = lines.iter().find(|o| o["line"] == "three").unwrap();
        assert_eq!(three["end"], "eof", "a line without a newline says so");
    }

    // Every other object is exactly what events.jsonl holds, in the same order.
    let run_dir = herd::only_run_dir(&dir.path().join("logs"));
    let recorded = herd::events(&run_dir);
    let echoed: Vec<&serde_json::Value> = objects.iter().filter(|o| o["event"] != "output").collect();
    assert_eq!(echoed, recorded.iter().collect::<Vec<_>>());

    // herd's own words still reach stderr.
    assert!(out.stderr.contains("herd: run "), "{out}");
    assert!(!out.stdout.contains("herd:"), "{out}");
}

/// Piped, with NO_COLOR unset and a colour terminal type: plain lines, no escape codes.
#[test]
fn piped_output_has_no_escape_codes() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), CHATTY);
    let out = like_a_person(HERD, dir.path()).args(["run", "--no-preflight"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("[0 localhost] one 0\n"), "{stdout}");
    assert!(!stdout.contains('\x1b') && !stderr.contains('\x1b'), "{stdout}\n{stderr}");
}

/// On a terminal (a pty from `script`): coloured prefixes and the board, which names the
/// run, the attempt and every node.
#[test]
fn a_terminal_gets_the_board_and_coloured_prefixes() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), r#"echo "start $NODE_RANK"; sleep 1.5; echo "end $NODE_RANK""#);
    let command = format!("{HERD} run --no-preflight");
    let out = like_a_person("script", dir.path())
        .args(["-qefc", &command, "/dev/null"])
        .output()
        .expect("run script(1) from util-linux");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let run_dir = herd::only_run_dir(&dir.path().join("logs"));
    let run_id = run_dir.file_name().unwrap().to_string_lossy();
    assert!(text.contains(&format!("herd run {run_id} · attempt 0/3 · master ")), "{text}");
    assert!(text.contains("rank  host"), "{text}");
    assert!(text.contains("running"), "{text}");
    assert!(text.contains("\x1b[36m[0 localhost]\x1b[0m start 0"), "{text}");
    assert!(text.contains("end 1"), "{text}");
    // The board is cleared at the end: the last thing on the screen is herd's summary.
    let last = text.trim_end().lines().last().unwrap_or_default();
    assert!(!last.contains("running"), "{text}");
}

/// `herd logs` reads back what a run wrote: the latest run by default, by node, by global
/// rank, by attempt, filtered by a regex; and says clearly what is not there.
#[test]
fn logs_reads_back_a_past_run() {
    let dir = tempfile::tempdir().unwrap();
    // Attempt 0 fails everywhere, attempt 1 succeeds. A failing node waits a second, so that
    // the other has printed everything before the gang teardown stops it.
    write_config_restarting(
        dir.path(),
        r#"echo "attempt $HERD_ATTEMPT node $NODE_RANK"; echo noise; [ $HERD_ATTEMPT = 1 ] || { sleep 1; exit 1; }"#,
        r#""user", "crash", "launch", "comm""#,
    );
    herd::run(dir.path(), &["run", "--no-preflight"], LIMIT).assert_code(0);
    let first =
        herd::only_run_dir(&dir.path().join("logs")).file_name().unwrap().to_string_lossy().into_owned();

    let out = herd::run(dir.path(), &["logs"], LIMIT);
    out.assert_code(0);
    assert_eq!(
        out.stdout,
        "==> attempt 0 <==\n[0 localhost] attempt 0 node 0\n[0 localhost] noise\n\
         [1 127.0.0.1] attempt 0 node 1\n[1 127.0.0.1] noise\n\
         ==> attempt 1 <==\n[0 localhost] attempt 1 node 0\n[0 localhost] noise\n\
         [1 127.0.0.1] attempt 1 node 1\n[1 127.0.0.1] noise\n",
        "{out}"
    );
    let out =
        herd::run(dir.path(), &["logs", "--node", "127.0.0.1", "--attempt", "1", "--grep", "^att"], LIMIT);
    assert_eq!(out.stdout, "[1 127.0.0.1] attempt 1 node 1\n", "{out}");
    // One rank per node here: global rank 1 is node 1.
    let out = herd::run(dir.path(), &["logs", "--rank", "1", "--attempt", "0", "--grep", "node"], LIMIT);
    assert_eq!(out.stdout, "[1 127.0.0.1] attempt 0 node 1\n", "{out}");

    // A second run becomes the default; the first stays reachable by a prefix of its id.
    std::thread::sleep(Duration::from_millis(1100));
    herd::run(dir.path(), &["run", "--no-preflight"], LIMIT).assert_code(0);
    let out = herd::run(dir.path(), &["logs", "--list"], LIMIT);
    assert_eq!(out.stdout.lines().count(), 2, "{out}");
    assert!(out.stdout.starts_with(&first), "{out}");
    let out =
        herd::run(dir.path(), &["logs", &first, "--attempt", "0", "--node", "0", "--grep", "att"], LIMIT);
    assert_eq!(out.stdout, "[0 localhost] attempt 0 node 0\n", "{out}");

    for (args, says) in [
        (vec!["logs", "--attempt", "7"], "has no attempt 7"),
        (vec!["logs", "--node", "9"], "has nodes 0-1, not 9"),
        (vec!["logs", "--rank", "2"], "has ranks 0-1, not 2"),
        (vec!["logs", "nosuchrun"], "no run nosuchrun of this config; the latest runs are: "),
        (vec!["logs", "--grep", "("], "--grep: "),
    ] {
        let out = herd::run(dir.path(), &args, LIMIT);
        out.assert_code(2);
        assert!(out.stderr.contains(says), "{args:?}: {out}");
        assert!(out.stdout.is_empty(), "{out}");
    }
}

/// `herd logs` reads each attempt in its own world: a spare with more ranks, or fewer nodes
/// after a shrink. The later attempts are written into a real run's directory as a run with
/// a promotion and a shrink would have written them.
#[test]
fn logs_follow_each_attempts_own_world() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), r#"echo "attempt $HERD_ATTEMPT node $NODE_RANK""#);
    herd::run(dir.path(), &["run", "--no-preflight"], LIMIT).assert_code(0);
    let run = herd::only_run_dir(&dir.path().join("logs"));
    // Attempt 1: node 1 runs 2 ranks (ranks 1-2), whose lines carry their ranks' prefixes
    // as they did live. Attempt 2: node 0 alone.
    let changed = |attempt: u32, hosts: &str, nprocs: &str| {
        format!(
            "{{\"event\":\"world_changed\",\"attempt\":{attempt},\"nnodes\":2,\"world_size\":3,\
             \"hosts\":[{hosts}],\"nprocs\":[{nprocs}]}}\n"
        )
    };
    let mut events = std::fs::OpenOptions::new().append(true).open(run.join("events.jsonl")).unwrap();
    use std::io::Write;
    events.write_all(changed(1, r#""localhost","127.0.0.1""#, "1,2").as_bytes()).unwrap();
    events.write_all(changed(2, r#""localhost""#, "1").as_bytes()).unwrap();
    for (attempt, file, text) in [
        (1, "node0-localhost.log", "a1 n0\n"),
        (1, "node1-127.0.0.1.log", "a1 n1\na1 rank 2\na1 rank 1\n"),
        (1, "rank1.log", "a1 rank 1\n"),
        (1, "rank2.log", "a1 rank 2\n"),
        (2, "node0-localhost.log", "a2 n0\n"),
    ] {
        std::fs::create_dir_all(run.join(format!("attempt-{attempt}"))).unwrap();
        std::fs::write(run.join(format!("attempt-{attempt}")).join(file), text).unwrap();
    }

    let out = herd::run(dir.path(), &["logs", "--rank", "2"], LIMIT);
    out.assert_code(0);
    assert_eq!(out.stdout, "==> attempt 1 <==\n[r2 127.0.0.1] a1 rank 2\n", "{out}");
    let out = herd::run(dir.path(), &["logs", "--rank", "2", "--attempt", "0"], LIMIT);
    out.assert_code(2);
    assert!(out.stderr.contains("rank 2 did not run in attempt 0 of run "), "{out}");
    assert!(out.stderr.contains("; ranks 0-1 did"), "{out}");

    let out = herd::run(dir.path(), &["logs", "--node", "1", "--attempt", "2"], LIMIT);
    out.assert_code(2);
    assert!(out.stderr.contains("node rank 1 did not run in attempt 2 of run "), "{out}");
    assert!(out.stderr.contains("; node rank 0 did"), "{out}");
    assert!(out.stdout.is_empty(), "{out}");
    let out = herd::run(dir.path(), &["logs", "--node", "1"], LIMIT);
    out.assert_code(0);
    assert_eq!(
        out.stdout,
        "==> attempt 0 <==\n[1 127.0.0.1] attempt 0 node 1\n==> attempt 1 <==\n[1 127.0.0.1] a1 n1\n\
         [r2 127.0.0.1] a1 rank 2\n[r1 127.0.0.1] a1 rank 1\n",
        "{out}"
    );
}

/// A reader of herd's stdout that falls behind must not cost a line. Here it stops reading
/// once the job has ended, for longer than herd waits for the output of a node whose job
/// ended but whose pipe stays silent, while the job's last lines are still queued in herd.
#[test]
fn a_slow_reader_loses_no_line_after_the_job_ended() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cluster.toml"),
        "[[nodes]]\nhost = \"localhost\"\n[job]\nlauncher = \"command\"\nscript = \"seq\"\nargs = [\"1\", \"1000000\"]\n[logs]\ndir = \"logs\"\n",
    )
    .unwrap();
    let (mut child, err_reader) = run_reading_stderr(dir.path());
    // The job is the `seq` running in this test's directory.
    let workdir = dir.path().canonicalize().unwrap();
    let seq_running = || {
        std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()).any(|e| {
            let p = e.path();
            std::fs::read_to_string(p.join("comm")).is_ok_and(|c| c.trim() == "seq")
                && std::fs::read_link(p.join("cwd")).is_ok_and(|cwd| cwd == workdir)
        })
    };
    let mut out = child.stdout.take().unwrap();
    let mut stdout = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let mut seen_running = false;
    loop {
        let running = seq_running();
        seen_running |= running;
        if seen_running && !running {
            break;
        }
        let n = out.read(&mut buf).unwrap();
        assert!(n > 0, "herd's output ended while its job was still running");
        stdout.extend_from_slice(&buf[..n]);
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_secs(5));
    out.read_to_end(&mut stdout).unwrap();
    let stderr = err_reader.join().unwrap();
    assert!(child.wait().unwrap().success(), "{stderr}");
    let stdout = String::from_utf8(stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix("[0 localhost] ")).collect();
    assert_eq!(lines.len(), 1_000_000, "lines lost; stderr:\n{stderr}");
    assert_eq!(lines.last(), Some(&"1000000"));
    assert!(!stderr.contains("stopped reading"), "{stderr}");
}

/// `herd run | head -3`: once the reader is gone, the run stops on every node as for Ctrl-C
/// and exits 141 (128 + SIGPIPE); the log files still hold every line the job printed.
#[test]
fn a_closed_stdout_stops_the_run_and_the_logs_keep_everything() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    // 60 s of output, one line every 0.1 s, on each node.
    write_config(
        dir.path(),
        r#"i=0; while [ $i -lt 600 ]; do echo "line $i"; i=$((i + 1)); sleep 0.1; done"#,
    );
    let (mut child, err_reader) = run_reading_stderr(dir.path());
    let started = std::time::Instant::now();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    for _ in 0..3 {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert!(line.contains("line "), "{line:?}");
    }
    drop(reader);
    let ended = herd::wait_until(Duration::from_secs(30), || child.try_wait().unwrap().is_some());
    let stderr = err_reader.join().unwrap();
    assert!(ended, "herd ran on with nobody reading its stdout\n{stderr}");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(141), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(30), "{stderr}");
    assert!(stderr.contains("stdout was closed: stopping the run"), "{stderr}");
    let run = herd::only_run_dir(&dir.path().join("logs"));
    let mut total = 0;
    for log in ["node0-localhost.log", "node1-127.0.0.1.log"] {
        let log = std::fs::read_to_string(run.join("attempt-0").join(log)).unwrap();
        // Every line the job printed before it was stopped, in order, none lost.
        for (i, line) in log.lines().enumerate() {
            assert_eq!(line, format!("line {i}"), "{log}");
            total += 1;
        }
    }
    assert!(total >= 3, "the files hold fewer lines than stdout showed");
    let events = herd::event_names(&herd::events(&run));
    assert!(events.contains(&"teardown_started".to_string()), "{events:?}");
}

/// `herd logs --timeline` draws a real run's record: a failed attempt and its restart; to the
/// run's directory, a file or stdout. A run that is not there, a record cut short and a run
/// with no attempt are each said, naming what is wrong.
#[test]
fn logs_timeline_draws_a_run_and_says_what_it_cannot() {
    let dir = tempfile::tempdir().unwrap();
    write_config_restarting(
        dir.path(),
        r#"echo "attempt $HERD_ATTEMPT node $NODE_RANK"; sleep 1; [ $HERD_ATTEMPT = 1 ] || [ $NODE_RANK = 0 ] || exit 1; sleep 1"#,
        r#""user""#,
    );
    herd::run(dir.path(), &["run", "--no-preflight"], LIMIT).assert_code(0);
    let run = herd::only_run_dir(&dir.path().join("logs"));
    let id = run.file_name().unwrap().to_string_lossy().into_owned();
    let names = herd::event_names(&herd::events(&run));
    assert_eq!(names.iter().filter(|n| *n == "progress_seen").count(), 2, "{names:?}");

    let out = herd::run(dir.path(), &["logs", "--timeline"], LIMIT);
    out.assert_code(0);
    // Paths as herd names them: under the logs directory as the config gives it.
    let shown = Path::new("logs").join(&id);
    assert_eq!(out.stdout, format!("{}\n", shown.join("timeline.html").display()), "{out}");
    let page = std::fs::read_to_string(run.join("timeline.html")).unwrap();
    for said in [
        format!("<h1>herd run {id}</h1>"),
        "succeeded · 2 attempts, 1 failed".into(),
        "fault: attempt 0 failed (user): node 1 (127.0.0.1): exit code 1".into(),
        "attempt 1 · training".into(),
    ] {
        assert!(page.contains(&said), "no {said:?} in\n{page}");
    }
    // Drawn by a real browser: the bars are there in their colours (training, starting),
    // and a page with no drawing has none of them.
    let (shot, blank) = (dir.path().join("timeline.png"), dir.path().join("blank.png"));
    browser::screenshot(&run.join("timeline.html"), &shot, 1000, 700);
    let [training, starting] = browser::colour_counts(&shot, &["009E73", "56B4E9"])[..] else {
        unreachable!()
    };
    assert!(training > 5_000 && starting > 500, "training {training} px, starting {starting} px");
    std::fs::write(dir.path().join("blank.html"), "<html><body><p>no drawing</p></body></html>").unwrap();
    browser::screenshot(&dir.path().join("blank.html"), &blank, 1000, 700);
    assert_eq!(browser::colour_counts(&blank, &["009E73", "56B4E9"]), [0, 0]);
    let out = herd::run(dir.path(), &["logs", "--timeline", &id, "-o", "-"], LIMIT);
    out.assert_code(0);
    assert_eq!(out.stdout, page);
    let elsewhere = dir.path().join("t.html");
    let out = herd::run(dir.path(), &["logs", "--timeline", "--output", elsewhere.to_str().unwrap()], LIMIT);
    assert_eq!(
        (out.stdout.trim(), std::fs::read_to_string(&elsewhere).unwrap()),
        (elsewhere.to_str().unwrap(), page)
    );

    let out = herd::run(dir.path(), &["logs", "--timeline", "nope"], LIMIT);
    out.assert_code(2);
    assert!(out.stderr.contains("no run nope of this config") && out.stderr.contains("logs"), "{out}");

    // A run killed as it wrote its last event.
    let events = run.join("events.jsonl");
    let mut cut = std::fs::read_to_string(&events).unwrap();
    cut.push_str(r#"{"ts":"2027-01-15T08:00:00.000Z","event":"node_exi"#);
    std::fs::write(&events, &cut).unwrap();
    let lines = cut.lines().count();
    let out = herd::run(dir.path(), &["logs", "--timeline"], LIMIT);
    out.assert_code(1);
    let said =
        format!("{}: 1 line skipped, no whole event (line {lines})", shown.join("events.jsonl").display());
    assert!(out.stderr.contains(&said), "{out}");
    assert_eq!(out.stdout, format!("{}\n", shown.join("timeline.html").display()), "written all the same");

    // A run that stopped before its first attempt.
    let started = cut.lines().next().unwrap().replace(&id, "29991231-000000-none");
    let none = dir.path().join("logs/29991231-000000-none");
    std::fs::create_dir(&none).unwrap();
    let finished =
        r#"{"ts":"2027-01-15T08:00:01.000Z","event":"run_finished","status":"failed","attempts":0}"#;
    std::fs::write(none.join("events.jsonl"), format!("{started}\n{finished}\n")).unwrap();
    let out = herd::run(dir.path(), &["logs", "--timeline"], LIMIT);
    out.assert_code(2);
    let said = "logs/29991231-000000-none/events.jsonl: no timeline to draw: the run made no attempt";
    assert!(out.stderr.contains(said), "{out}");
}
