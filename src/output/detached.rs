//! stdout written by a thread of its own, so that a reader who stops reading (a pipe nobody
//! drains, `less` left at a page) never stops herd: the report loop, and behind it the
//! supervision of the run, only ever hand bytes over. What a stalled reader has not taken is
//! held up to a bound; past it, job output for stdout is dropped and counted (the log files
//! keep every byte), and said on stderr once the reader is back or the run ends.

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes held for a stdout that is not read, before more are dropped.
const HELD_MOST: usize = 64 * 1024 * 1024;
/// At the end, how long the reader may take no bytes at all before herd stops waiting for it
/// (what is still held is then lost to stdout; the log files have it).
const END_WAIT: Duration = Duration::from_secs(if cfg!(test) { 1 } else { 10 });
/// How often, at most, herd tells on stderr that output was dropped.
const TELL_EVERY: Duration = Duration::from_secs(10);

/// How long a flush waits for what was handed over before it to be written: herd's own lines
/// (on stderr) come after the job output before them, unless stdout is stalled.
const FLUSH_WAIT: Duration = Duration::from_secs(1);

#[derive(Default)]
struct State {
    queue: std::collections::VecDeque<Vec<u8>>,
    held: usize,
    /// Bytes handed over, and bytes written, in all.
    handed: u64,
    written: u64,
    dropped: u64,
    error: Option<io::ErrorKind>,
    closing: bool,
    /// A flush found the reader behind for its whole wait: later flushes do not wait until it
    /// has caught up (a stalled reader must not cost herd a second per flush).
    behind: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when bytes are queued (for the writer) or written (for a flush).
    changed: Condvar,
}

/// A `Write` whose writes are handed to a thread that writes them to the real stdout.
pub struct Detached {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Detached {
    /// `out` written by a thread; herd's stderr is told of what was dropped.
    pub fn new(out: Box<dyn Write + Send>) -> Detached {
        let shared = Arc::new(Shared { state: Mutex::default(), changed: Condvar::new() });
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("herd-stdout".into())
                .spawn(move || write_out(out, &shared))
                .expect("a thread for stdout")
        };
        Detached { shared, thread: Some(thread) }
    }
}

fn write_out(mut out: Box<dyn Write + Send>, shared: &Shared) {
    let mut told = 0;
    let mut told_at: Option<Instant> = None;
    let tell = |dropped: u64| {
        let _ = writeln!(
            io::stderr(),
            "herd: {dropped} bytes of job output in all were not shown on stdout, which was not being read; the run's log files have them"
        );
    };
    loop {
        let (chunk, dropped) = {
            let mut s = shared.state.lock().expect("not poisoned");
            while s.queue.is_empty() && !s.closing {
                s = shared.changed.wait(s).expect("not poisoned");
            }
            match s.queue.pop_front() {
                Some(chunk) => (chunk, s.dropped),
                None => {
                    if s.dropped > told {
                        tell(s.dropped);
                    }
                    return;
                }
            }
        };
        let result = out.write_all(&chunk).and_then(|_| out.flush());
        let mut s = shared.state.lock().expect("not poisoned");
        s.held -= chunk.len();
        s.written += chunk.len() as u64;
        if s.written >= s.handed {
            s.behind = false;
        }
        if let Err(e) = result {
            s.error = Some(e.kind());
            s.queue.clear();
            s.held = 0;
            s.written = s.handed;
        }
        shared.changed.notify_all();
        drop(s);
        if dropped > told && told_at.is_none_or(|at| at.elapsed() >= TELL_EVERY) {
            told = dropped;
            told_at = Some(Instant::now());
            tell(dropped);
        }
    }
}

impl Write for Detached {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut s = self.shared.state.lock().expect("not poisoned");
        if let Some(kind) = s.error {
            return Err(io::Error::new(kind, "stdout"));
        }
        s.handed += buf.len() as u64;
        if s.held + buf.len() > HELD_MOST {
            s.dropped += buf.len() as u64;
            s.written += buf.len() as u64;
        } else {
            s.held += buf.len();
            s.queue.push_back(buf.to_vec());
            self.shared.changed.notify_all();
        }
        Ok(buf.len())
    }

    /// Waits (briefly) for everything handed over so far to be written.
    fn flush(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + FLUSH_WAIT;
        let mut s = self.shared.state.lock().expect("not poisoned");
        let target = s.handed;
        while s.written < target && s.error.is_none() && !s.behind {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                s.behind = true;
                break;
            }
            s = self.shared.changed.wait_timeout(s, left).expect("not poisoned").0;
        }
        match s.error {
            Some(kind) => Err(io::Error::new(kind, "stdout")),
            None => Ok(()),
        }
    }
}

impl Drop for Detached {
    /// At the run's end, everything held is written, then the thread ends; but a reader that
    /// takes nothing for `END_WAIT` is not waited for (herd would otherwise never exit, deaf to
    /// Ctrl-C): the thread is left to the process's exit.
    fn drop(&mut self) {
        let mut s = self.shared.state.lock().expect("not poisoned");
        s.closing = true;
        self.shared.changed.notify_all();
        let mut written = s.written;
        let mut progress_at = Instant::now();
        while s.written < s.handed && s.error.is_none() {
            if s.written != written {
                (written, progress_at) = (s.written, Instant::now());
            }
            let left = END_WAIT.saturating_sub(progress_at.elapsed());
            if left.is_zero() {
                let held = s.held;
                drop(s);
                let _ = writeln!(
                    io::stderr(),
                    "herd: stdout took nothing for {} s: {held} bytes of job output were not shown there; the run's log files have them",
                    END_WAIT.as_secs()
                );
                return;
            }
            s = self.shared.changed.wait_timeout(s, left).expect("not poisoned").0;
        }
        drop(s);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that blocks until told to go on, as a pipe nobody reads.
    struct Stalled {
        go: Arc<(Mutex<bool>, Condvar)>,
        got: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Stalled {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let (lock, cv) = &*self.go;
            let mut go = lock.lock().unwrap();
            while !*go {
                go = cv.wait(go).unwrap();
            }
            self.got.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stalled_reader_never_blocks_the_writer_and_gets_everything_at_the_end() {
        let go = Arc::new((Mutex::new(false), Condvar::new()));
        let got = Arc::new(Mutex::new(Vec::new()));
        let mut d = Detached::new(Box::new(Stalled { go: go.clone(), got: got.clone() }));
        let started = Instant::now();
        for i in 0..1000 {
            d.write_all(format!("line {i}\n").as_bytes()).unwrap();
        }
        // A flush waits a moment at most, then lets herd go on; the next ones do not wait.
        d.flush().unwrap();
        for _ in 0..10 {
            d.write_all(b"more\n").unwrap();
            d.flush().unwrap();
        }
        assert!(started.elapsed() < FLUSH_WAIT * 3, "{:?}", started.elapsed());
        *go.0.lock().unwrap() = true;
        go.1.notify_all();
        drop(d);
        let got = String::from_utf8(got.lock().unwrap().clone()).unwrap();
        assert_eq!(got.lines().count(), 1010);
        assert!(got.contains("line 999\nmore\n"));
    }

    #[test]
    fn a_reader_that_never_reads_again_is_not_waited_for_at_the_end() {
        let go = Arc::new((Mutex::new(false), Condvar::new()));
        let got = Arc::new(Mutex::new(Vec::new()));
        let mut d = Detached::new(Box::new(Stalled { go, got }));
        d.write_all(b"never read\n").unwrap();
        let dropped_at = Instant::now();
        drop(d);
        assert!(dropped_at.elapsed() < END_WAIT * 3, "{:?}", dropped_at.elapsed());
    }

    #[test]
    fn a_closed_reader_is_an_error_on_the_next_write() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut d = Detached::new(Box::new(Closed));
        d.write_all(b"x\n").unwrap();
        assert_eq!(d.flush().unwrap_err().kind(), io::ErrorKind::BrokenPipe);
        assert_eq!(d.write(b"y").unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }
}
