//! `[notify]`: the user's command, run on the launching machine at `attempt_failed`,
//! `restart_scheduled` and `run_finished`, with the event's JSON line on stdin (curl to a
//! chat hook, a pager). One at a time, in the events' order, each bounded by its timeout; a
//! hook that fails or hangs is a warning, never the run's failure.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::Notify;
use crate::events::Event;

pub struct Notifier {
    queue: Option<mpsc::Sender<Vec<u8>>>,
    worker: Option<JoinHandle<()>>,
}

impl Notifier {
    pub fn new(notify: Notify) -> Notifier {
        let (queue, events) = mpsc::channel::<Vec<u8>>();
        let worker = std::thread::spawn(move || {
            for payload in events {
                if let Err(why) = run_hook(&notify, &payload) {
                    tracing::warn!("notify.command {:?}: {why}; the run goes on", notify.command);
                }
            }
        });
        Notifier { queue: Some(queue), worker: Some(worker) }
    }

    /// Whether `event` is one the hook hears of.
    pub fn wants(event: &Event) -> bool {
        matches!(
            event,
            Event::AttemptFailed { .. } | Event::RestartScheduled { .. } | Event::RunFinished { .. }
        )
    }

    /// Queue the event's JSON line for the hook.
    pub fn send(&self, line: Vec<u8>) {
        if let Some(q) = &self.queue {
            let _ = q.send(line);
        }
    }

    /// Wait for the hooks still queued (each within its timeout).
    pub fn finish(mut self) {
        drop(self.queue.take());
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

fn run_hook(notify: &Notify, payload: &[u8]) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(&notify.command)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own group: a timeout stops what it started too (curl under sh).
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start: {e}"))?;
    // Fed from a thread: a hook that never reads its stdin cannot stall the timeout.
    if let Some(mut stdin) = child.stdin.take() {
        let payload = payload.to_vec();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&payload);
        });
    }
    let deadline = Instant::now() + notify.timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(format!("exited with {status}")),
            Ok(None) if Instant::now() >= deadline => {
                // SAFETY: a plain kill(2) of the hook's own process group.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.wait();
                return Err(format!(
                    "still running after {}: killed",
                    humantime::format_duration(notify.timeout)
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("cannot wait for it: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notify(command: String, ms: u64) -> Notify {
        Notify { command, timeout: Duration::from_millis(ms) }
    }

    #[test]
    fn hooks_run_in_order_with_the_event_on_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("got");
        let n = Notifier::new(notify(format!("cat >> {}", out.display()), 5_000));
        n.send(b"{\"event\":\"a\"}\n".to_vec());
        n.send(b"{\"event\":\"b\"}\n".to_vec());
        n.finish();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "{\"event\":\"a\"}\n{\"event\":\"b\"}\n");
    }

    #[test]
    fn a_failing_or_hanging_hook_is_an_error_not_a_hang() {
        assert_eq!(run_hook(&notify("exit 3".into(), 5_000), b"x"), Err("exited with exit status: 3".into()));
        let started = Instant::now();
        // Neither reads its stdin (a payload over a pipe's size) nor ends; its child neither.
        let big = vec![b'x'; 1 << 20];
        let err = run_hook(&notify("sleep 30 & sleep 30".into(), 200), &big).unwrap_err();
        assert!(err.starts_with("still running after 200ms: killed"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(run_hook(&notify("true".into(), 5_000), b"ignored"), Ok(()));
    }
}
