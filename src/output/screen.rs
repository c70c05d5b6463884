//! stdout and stderr as the sinks share them, with the board (when there is one) kept below
//! everything written.

use std::io::{self, Write};
use std::time::Instant;

use super::live::Live;
use super::BOARD_TICK;

/// Job output is written to stdout in pieces of about this size, or when no event waits.
const STDOUT_CHUNK: usize = 64 * 1024;

pub struct Screen {
    out: Box<dyn Write + Send>,
    err: Box<dyn Write + Send>,
    /// Job output not yet written to stdout.
    pending: Vec<u8>,
    out_ok: bool,
    /// Its reader went away (EPIPE).
    pub out_closed: bool,
    live: Option<Live>,
    flushed_at: Instant,
}

impl Screen {
    /// Without a board, stdout is written by a thread of its own (`Detached`): a reader who
    /// stops reading never stops herd. With one, writes stay in step with the board's drawing
    /// (a terminal on hold stops both).
    pub fn new(out: Box<dyn Write + Send>, err: Box<dyn Write + Send>, live: Option<Live>) -> Screen {
        let out: Box<dyn Write + Send> = match live {
            Some(_) => out,
            None => Box::new(super::detached::Detached::new(out)),
        };
        Screen {
            out,
            err,
            pending: Vec::new(),
            out_ok: true,
            out_closed: false,
            live,
            flushed_at: Instant::now(),
        }
    }

    /// Whether there is a board, kept below the lines.
    pub fn live(&self) -> bool {
        self.live.is_some()
    }

    pub fn job(&mut self, parts: &[&[u8]]) {
        if !self.out_ok {
            return;
        }
        for p in parts {
            self.pending.extend_from_slice(p);
        }
        if self.pending.len() >= STDOUT_CHUNK {
            self.flush_job();
        }
    }

    /// Whether waiting job output should go out now that no event waits: at once without a
    /// board, at the board's pace with one.
    pub fn due(&self) -> bool {
        self.live.is_none() || self.flushed_at.elapsed() >= BOARD_TICK
    }

    pub fn flush_job(&mut self) {
        self.flushed_at = Instant::now();
        if self.pending.is_empty() || !self.out_ok {
            self.pending.clear();
            return;
        }
        let (out, pending) = (&mut self.out, &self.pending);
        let mut write = || out.write_all(pending).and_then(|_| out.flush());
        let written = match &self.live {
            Some(live) => live.above(write),
            None => write(),
        };
        if let Err(e) = written {
            self.out_ok = false;
            self.out_closed = e.kind() == io::ErrorKind::BrokenPipe;
        }
        self.pending.clear();
    }

    /// One of herd's own lines, after the job output before it.
    pub fn status(&mut self, line: &str) {
        self.flush_job();
        let err = &mut self.err;
        let mut write = || {
            let _ = writeln!(err, "herd: {line}");
        };
        match &self.live {
            Some(live) => live.above(write),
            None => write(),
        }
    }

    /// Draws the board, as `render` makes it for the terminal's width.
    pub fn draw(&self, render: impl FnOnce(usize) -> String) {
        if let Some(live) = &self.live {
            live.draw(render);
        }
    }

    /// Takes the board off the screen for good.
    pub fn clear(&self) {
        if let Some(live) = &self.live {
            live.clear();
        }
    }
}
