//! What the reporter feeds: every event goes to every sink (the files, `--json`, the
//! console, the `[notify]` hook, the board), each in its own file.

use std::cell::OnceCell;
use std::time::SystemTime;

use super::screen::Screen;
use super::Report;
use crate::events::Event;

/// One of the run's outputs.
pub trait Sink {
    fn event(&mut self, turn: &Turn, shared: &mut Shared);
    /// Nothing happened for a while: the board's clocks move on, the logs are flushed.
    fn tick(&mut self, _shared: &mut Shared) {}
    /// The run's events have ended.
    fn finish(&mut self, _shared: &mut Shared) {}
}

/// What the sinks share: the terminal, and what the reporter tells at the end.
pub struct Shared {
    pub screen: Screen,
    pub report: Report,
}

/// One event, with what is worked out once for every sink.
pub struct Turn<'a> {
    pub event: &'a Event,
    /// Every node's host, in node-rank order, as of this event.
    pub hosts: &'a [String],
    /// Set when this event names the nodes (at the start, and when they change between
    /// attempts).
    pub renamed: Option<Renamed<'a>>,
    /// When the event happened (see `Names::turn`).
    pub at: SystemTime,
    ts: OnceCell<String>,
}

pub struct Renamed<'a> {
    /// Whether a node's host changed (a spare promoted, the world shrunk).
    pub hosts_changed: bool,
    /// Each node's process count.
    pub nprocs: &'a [u32],
}

impl Turn<'_> {
    /// The event's time as the records write it, the same for every sink that writes it
    /// (events.jsonl, `--json`, the hook).
    pub fn ts(&self) -> String {
        self.ts.get_or_init(|| humantime::format_rfc3339_millis(self.at).to_string()).clone()
    }
}

/// How far back an event may be dated from the one before it and still be a race between
/// the tasks that sent them (see `Names::turn`).
const CLOCK_STEP: std::time::Duration = std::time::Duration::from_secs(1);

/// Who is who, as the events say: each node's host and process count.
pub struct Names {
    hosts: Vec<String>,
    nprocs: Vec<u32>,
    /// The last event's time.
    last: SystemTime,
}

impl Names {
    pub fn new(hosts: Vec<String>) -> Names {
        Names { hosts, nprocs: Vec::new(), last: SystemTime::UNIX_EPOCH }
    }

    /// `event`, which happened `at`, with the names it brings taken in. An event dated a
    /// little before the one before it (less than `CLOCK_STEP`) takes that one's time: two
    /// tasks that date their events a moment apart may send them the other way round, and
    /// the record keeps its order. Further back is the clock set back (NTP), which the record
    /// shows as it is, rather than giving every event after it one time until the clock
    /// catches up.
    pub fn turn<'a>(&'a mut self, event: &'a Event, at: SystemTime) -> Turn<'a> {
        let stepped_back = at + CLOCK_STEP < self.last;
        self.last = if stepped_back { at } else { self.last.max(at) };
        let mut hosts_changed = false;
        let renamed = event.renamed(&self.hosts, &self.nprocs).map(|(hosts, nprocs)| {
            if hosts != self.hosts {
                hosts_changed = true;
                self.hosts = hosts;
            }
            self.nprocs = nprocs;
        });
        let renamed = renamed.map(|()| Renamed { hosts_changed, nprocs: &self.nprocs });
        Turn { event, hosts: &self.hosts, renamed, at: self.last, ts: OnceCell::new() }
    }
}
