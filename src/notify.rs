//! `[notify]`: the user's command, run on the launching machine at `attempt_failed`,
//! `restart_scheduled` and `run_finished`, with the event's JSON line on stdin (curl to a
//! chat hook, a pager): the line of `events.jsonl`, its fields in their order, with which run
//! it is about appended (`run_id`, `config`, `run_dir`), as the hook's environment says too
//! (`HERD_RUN_ID`, `HERD_CONFIG`, `HERD_RUN_DIR`, `HERD_EVENT`). The `run_finished` hook
//! starts only once the run's record is complete (its [`Gate`] dropped): it can read
//! `$HERD_RUN_DIR/summary.json`. A hook that fails or hangs is a warning, never the run's failure.
//!
//! Hooks start in the events' order, each when the one before has ended or has had
//! [`HEAD_START`]: a quick hook (a curl) is delivered in order, and a hung one delays the
//! later ones by that much, not by its timeout. Each is killed (its process group) after
//! `notify.timeout`. At the end of the run herd waits for the hooks left at most
//! `notify.timeout` in all; a signal to herd (Ctrl-C, SIGTERM) kills the hooks running or
//! waiting at that moment at once, so herd never outlives its job by more than that.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::Notify;
use crate::events::Event;

/// How long a hook runs alone before the next one starts beside it.
pub const HEAD_START: Duration = Duration::from_secs(3);

/// The run the hooks are about.
#[derive(Debug, Clone)]
pub struct RunInfo {
    pub run_id: String,
    /// The config file (absolute).
    pub config: PathBuf,
    /// The run's directory of logs (absolute).
    pub run_dir: PathBuf,
}

/// Kills the hooks running or waiting when it is used; later ones run as usual.
#[derive(Clone, Default)]
pub struct Stopper(Arc<(AtomicU64, Mutex<&'static str>)>);

impl Stopper {
    /// `why` ends the warning of each hook killed.
    pub fn stop(&self, why: &'static str) {
        *self.0 .1.lock().unwrap_or_else(|e| e.into_inner()) = why;
        self.0 .0.fetch_add(1, Ordering::SeqCst);
    }

    fn generation(&self) -> u64 {
        self.0 .0.load(Ordering::SeqCst)
    }

    fn why(&self) -> &'static str {
        *self.0 .1.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One event for the hook: its JSON line (with the run's fields) and its name.
struct Hook {
    payload: Vec<u8>,
    event: String,
    /// The [`Stopper`]'s generation when it was sent: a stop since then skips or kills it.
    generation: u64,
}

/// Holds the `run_finished` hook back while it lives: dropped once `summary.json` is written.
pub struct Gate(#[allow(dead_code)] mpsc::Sender<()>);

pub struct Notifier {
    notify: Notify,
    run: RunInfo,
    stopper: Stopper,
    queue: Option<mpsc::Sender<Hook>>,
    worker: Option<JoinHandle<()>>,
    /// Closed when every hook has ended.
    done: mpsc::Receiver<()>,
    /// Until [`Notifier::gate`] takes it, the notifier's own: dropped at [`Notifier::finish`].
    gate: Option<Gate>,
}

impl Notifier {
    pub fn new(notify: Notify, run: RunInfo) -> Notifier {
        let (queue, hooks) = mpsc::channel::<Hook>();
        let (done_tx, done) = mpsc::channel();
        let (gate, opened) = mpsc::channel::<()>();
        let stopper = Stopper::default();
        let worker = {
            let (notify, run, stopper) = (notify.clone(), run.clone(), stopper.clone());
            std::thread::spawn(move || {
                deliver(&notify, &run, &stopper, hooks, opened);
                drop(done_tx);
            })
        };
        let gate = Some(Gate(gate));
        Notifier { notify, run, stopper, queue: Some(queue), worker: Some(worker), done, gate }
    }

    /// What holds the `run_finished` hook back until it is dropped (once the record is written).
    pub fn gate(&mut self) -> Option<Gate> {
        self.gate.take()
    }

    /// Whether `event` is one the hook hears of.
    pub fn wants(event: &Event) -> bool {
        matches!(
            event,
            Event::AttemptFailed { .. } | Event::RestartScheduled { .. } | Event::RunFinished { .. }
        )
    }

    /// What a signal to herd uses to end the hooks at once.
    pub fn stopper(&self) -> Stopper {
        self.stopper.clone()
    }

    /// Queue the event's JSON line for the hook, with the run's fields added.
    pub fn send(&self, line: Vec<u8>) {
        let value: serde_json::Value = serde_json::from_slice(&line).unwrap_or_default();
        let event = value["event"].as_str().unwrap_or_default().to_string();
        let payload = with_run_fields(&line, &self.run);
        if let Some(q) = &self.queue {
            let _ = q.send(Hook { payload, event, generation: self.stopper.generation() });
        }
    }

    /// Wait for the hooks left, at most `notify.timeout` in all; then kill them.
    pub fn finish(mut self) {
        drop(self.queue.take());
        drop(self.gate.take());
        if let Err(mpsc::RecvTimeoutError::Timeout) = self.done.recv_timeout(self.notify.timeout) {
            self.stopper.stop("herd waited notify.timeout for the hooks after the run and stopped waiting");
        }
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

/// The event's line as written (its fields in their order), the run's fields appended.
fn with_run_fields(line: &[u8], run: &RunInfo) -> Vec<u8> {
    let text = String::from_utf8_lossy(line);
    let body = text.trim_end().strip_suffix('}').unwrap_or("{");
    let field = |s: String| serde_json::Value::String(s).to_string();
    let comma = if body.trim_end().ends_with('{') { "" } else { "," };
    format!(
        "{body}{comma}\"run_id\":{},\"config\":{},\"run_dir\":{}}}\n",
        field(run.run_id.clone()),
        field(run.config.display().to_string()),
        field(run.run_dir.display().to_string())
    )
    .into_bytes()
}

/// Runs the hooks in order, each given [`HEAD_START`] before the next starts; `run_finished`
/// once `opened` is closed (the record is complete).
fn deliver(
    notify: &Notify,
    run: &RunInfo,
    stopper: &Stopper,
    hooks: mpsc::Receiver<Hook>,
    opened: mpsc::Receiver<()>,
) {
    let warn = |why: String| tracing::warn!("notify.command {:?}: {why}; the run goes on", notify.command);
    let mut running: Vec<JoinHandle<()>> = Vec::new();
    for hook in hooks {
        if hook.event == "run_finished" {
            // Nothing is sent on it: this returns when every Gate is dropped.
            let _ = opened.recv();
        }
        if hook.generation != stopper.generation() {
            warn(format!("not run for {}: {}", hook.event, stopper.why()));
            continue;
        }
        let (ended_tx, ended) = mpsc::channel::<()>();
        let (n, run, stopper) = (notify.clone(), run.clone(), stopper.clone());
        running.push(std::thread::spawn(move || {
            if let Err(why) = run_hook(&n, &run, &hook, &stopper) {
                tracing::warn!("notify.command {:?}: {why}; the run goes on", n.command);
            }
            drop(ended_tx);
        }));
        let _ = ended.recv_timeout(HEAD_START.min(notify.timeout));
        running.retain(|h| !h.is_finished());
    }
    for h in running {
        let _ = h.join();
    }
}

fn run_hook(notify: &Notify, run: &RunInfo, hook: &Hook, stopper: &Stopper) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new("sh");
    crate::limits::as_started_std(&mut command);
    let mut child = command
        .arg("-c")
        .arg(&notify.command)
        .env("HERD_RUN_ID", &run.run_id)
        .env("HERD_CONFIG", &run.config)
        .env("HERD_RUN_DIR", &run.run_dir)
        .env("HERD_EVENT", &hook.event)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own group: a timeout stops what it started too (curl under sh).
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start: {e}"))?;
    // Fed from a thread: a hook that never reads its stdin cannot stall the timeout.
    if let Some(mut stdin) = child.stdin.take() {
        let payload = hook.payload.clone();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&payload);
        });
    }
    let deadline = Instant::now() + notify.timeout;
    loop {
        let killed = match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(format!("exited with {status}")),
            Err(e) => return Err(format!("cannot wait for it: {e}")),
            Ok(None) if stopper.generation() != hook.generation => stopper.why().to_string(),
            Ok(None) if Instant::now() >= deadline => {
                format!("still running after {}", humantime::format_duration(notify.timeout))
            }
            Ok(None) => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        // SAFETY: a plain kill(2) of the hook's own process group.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
        let _ = child.wait();
        return Err(format!("{killed}: killed ({})", hook.event));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notify(command: String, ms: u64) -> Notify {
        Notify { command, timeout: Duration::from_millis(ms) }
    }

    fn run_info() -> RunInfo {
        RunInfo { run_id: "r1".into(), config: "/p/c.toml".into(), run_dir: "/p/herd-logs/r1".into() }
    }

    fn hook(payload: &[u8], stopper: &Stopper) -> Hook {
        Hook { payload: payload.to_vec(), event: "run_finished".into(), generation: stopper.generation() }
    }

    fn run_one(n: &Notify, payload: &[u8]) -> Result<(), String> {
        let stopper = Stopper::default();
        run_hook(n, &run_info(), &hook(payload, &stopper), &stopper)
    }

    #[test]
    fn hooks_run_in_order_with_the_event_on_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("got");
        let n = Notifier::new(notify(format!("cat >> {}", out.display()), 5_000), run_info());
        n.send(b"{\"event\":\"a\"}\n".to_vec());
        n.send(b"{\"event\":\"b\"}\n".to_vec());
        n.finish();
        let got = std::fs::read_to_string(&out).unwrap();
        let events: Vec<serde_json::Value> = got.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(events.iter().map(|e| e["event"].as_str().unwrap()).collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn the_hook_is_told_which_run_it_is_about() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("got");
        let command = format!("{{ cat; env | grep '^HERD_' | sort; }} > {}", out.display());
        let n = Notifier::new(notify(command, 5_000), run_info());
        n.send(b"{\"ts\":\"t\",\"event\":\"run_finished\",\"status\":\"succeeded\"}\n".to_vec());
        n.finish();
        let got = std::fs::read_to_string(&out).unwrap();
        let (line, env) = got.split_once('\n').unwrap();
        // What the hook got on top of the test's own environment (which may hold HERD_
        // variables of its own: HERD_METRICS, a CI's).
        let inherited: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
        let env: String =
            env.lines().filter(|l| !inherited.iter().any(|i| i == l)).map(|l| format!("{l}\n")).collect();
        let line: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(line["event"], "run_finished");
        assert_eq!(line["status"], "succeeded");
        assert_eq!(line["run_id"], "r1");
        assert_eq!(line["config"], "/p/c.toml");
        assert_eq!(line["run_dir"], "/p/herd-logs/r1");
        assert_eq!(
            env,
            "HERD_CONFIG=/p/c.toml\nHERD_EVENT=run_finished\nHERD_RUN_DIR=/p/herd-logs/r1\nHERD_RUN_ID=r1\n"
        );
    }

    #[test]
    fn a_failing_or_hanging_hook_is_an_error_not_a_hang() {
        assert_eq!(run_one(&notify("exit 3".into(), 5_000), b"x"), Err("exited with exit status: 3".into()));
        let started = Instant::now();
        // Neither reads its stdin (a payload over a pipe's size) nor ends; its child neither.
        let big = vec![b'x'; 1 << 20];
        let err = run_one(&notify("sleep 30 & sleep 30".into(), 200), &big).unwrap_err();
        assert!(err.starts_with("still running after 200ms: killed"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
        assert_eq!(run_one(&notify("true".into(), 5_000), b"ignored"), Ok(()));
    }

    /// Wait (a bound for a loaded machine) for `path` to exist.
    fn wait_for(path: &std::path::Path) {
        let started = Instant::now();
        while !path.exists() {
            assert!(started.elapsed() < Duration::from_secs(120), "{} never came", path.display());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_stop_kills_the_running_hook_and_skips_the_waiting_ones_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let (started, second) = (dir.path().join("started"), dir.path().join("second"));
        // The first hangs (and its child too); the second would leave a file.
        let command = format!(
            "if grep -q first; then touch {}; sleep 600 & sleep 600; else touch {}; fi",
            started.display(),
            second.display()
        );
        let mut n = Notifier::new(notify(command, 600_000), run_info());
        // The second waits (behind the gate, held however slow this machine) when the stop comes.
        let gate = n.gate();
        n.send(b"{\"event\":\"first\"}\n".to_vec());
        n.send(b"{\"event\":\"run_finished\"}\n".to_vec());
        wait_for(&started);
        let t0 = Instant::now();
        n.stopper().stop("herd got a signal");
        drop(gate);
        n.finish();
        // Without the stop, finish waits for the hook's 10-minute timeout.
        assert!(t0.elapsed() < Duration::from_secs(300), "{:?}", t0.elapsed());
        assert!(!second.exists(), "a hook sent before the stop still ran");
        // A hook sent after a stop runs as usual.
        let n = Notifier::new(notify(format!("touch {}", second.display()), 60_000), run_info());
        n.stopper().stop("herd got a signal");
        n.send(b"{\"event\":\"after\"}\n".to_vec());
        n.finish();
        assert!(second.exists());
    }

    #[test]
    fn a_hung_hook_delays_the_next_by_its_head_start_only() {
        let dir = tempfile::tempdir().unwrap();
        let (order, second) = (dir.path().join("order"), dir.path().join("second"));
        let command = format!(
            "if grep -q first; then echo first >> {o}; sleep 600; else echo second >> {o}; touch {}; fi",
            second.display(),
            o = order.display()
        );
        let n = Notifier::new(notify(command, 600_000), run_info());
        let t0 = Instant::now();
        n.send(b"{\"event\":\"first\"}\n".to_vec());
        n.send(b"{\"event\":\"second\"}\n".to_vec());
        // One at a time, the second would wait for the first's 10-minute timeout.
        wait_for(&second);
        // Side by side from the start, the second would not wait for the first's head start.
        assert!(t0.elapsed() >= HEAD_START, "started {:?} after the first", t0.elapsed());
        assert_eq!(std::fs::read_to_string(&order).unwrap(), "first\nsecond\n");
        n.stopper().stop("test over");
        n.finish();
    }

    #[test]
    fn the_run_finished_hook_waits_for_the_gate_and_gets_the_line_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let (got, gone) = (dir.path().join("got"), dir.path().join("gate-gone"));
        // It reports whether the gate (here: a file the test leaves after dropping it) was gone.
        let command = format!(
            "cat > {}.tmp; test -e {} > /dev/null && mv {g}.tmp {g}",
            got.display(),
            gone.display(),
            g = got.display()
        );
        let mut n = Notifier::new(notify(command, 600_000), run_info());
        let gate = n.gate();
        n.send(b"{\"ts\":\"t\",\"event\":\"run_finished\",\"status\":\"succeeded\"}\n".to_vec());
        // However long the record takes to write, the hook waits for it.
        std::thread::sleep(HEAD_START + Duration::from_secs(1));
        std::fs::write(&gone, "").unwrap();
        drop(gate);
        n.finish();
        let line = std::fs::read_to_string(&got).expect("the hook ran before the gate was dropped");
        assert_eq!(
            line,
            "{\"ts\":\"t\",\"event\":\"run_finished\",\"status\":\"succeeded\",\
             \"run_id\":\"r1\",\"config\":\"/p/c.toml\",\"run_dir\":\"/p/herd-logs/r1\"}\n"
        );
    }

    #[test]
    fn herd_waits_for_its_hooks_at_most_the_timeout_in_all_at_the_end() {
        // Five hung hooks of a 4 s timeout: one at a time, 20 s.
        let n = Notifier::new(notify("sleep 600".into(), 4_000), run_info());
        for _ in 0..5 {
            n.send(b"{\"event\":\"attempt_failed\"}\n".to_vec());
        }
        let t0 = Instant::now();
        n.finish();
        assert!(t0.elapsed() < Duration::from_secs(14), "{:?}", t0.elapsed());
    }
}
