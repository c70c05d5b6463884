//! One console line for what many ranks print alike (PyTorch's "no distributed log spew"):
//! a line that several ranks (or several nodes' launchers) print the same within `WINDOW` of
//! the first is shown once, the printers named as a compressed list, `[r0-511] text`. Pure:
//! lines go in with their time, entries come out when due; the console renders them.
//!
//! Every line waits at most `WINDOW` (from the time its entry's first line came), and each
//! printer's lines come out in the order it printed them: a line joins an earlier identical
//! one only when nothing of its printer's is queued after that one. Entries come out in the
//! order of their first line.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How long a line may wait for the same line from other printers (plus up to one of the
/// reporter's ticks, `WINDOW / 8`). Ranks that print alike rarely do it in one instant: they
/// finish importing torch, or are released from a barrier, over a second or so (on the test
/// cluster, 512 ranks released at once print over about 2 s: 21 console lines for a 4-line
/// banner at 400 ms). Longer in unit tests, whose lines all come within it however loaded
/// the machine.
pub const WINDOW: Duration = Duration::from_millis(if cfg!(test) { 5000 } else { 1000 });

/// At most this many lines, and this many bytes of text, wait (a flood of distinct lines):
/// past either, the oldest entry goes out early. Bounds the memory whatever the rate.
const MAX_WAITING: usize = 20_000;
const MAX_WAITING_BYTES: usize = 4 << 20;

/// Who printed a line: a rank (with its node), or a node's launcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Printer {
    Rank { rank: u32, node: usize },
    Node(usize),
}

impl Printer {
    fn is_rank(self) -> bool {
        matches!(self, Printer::Rank { .. })
    }
}

/// A line, and every printer that printed it, in the order they did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub text: Vec<u8>,
    pub printers: Vec<Printer>,
    first: Instant,
}

/// The lines waiting to go out.
#[derive(Debug, Default)]
pub struct Collapser {
    queue: VecDeque<Entry>,
    /// The sequence number of `queue[0]`: entry k is `queue[k - base]`.
    base: u64,
    /// For each text (and kind of printer), its entries still waiting, oldest first: a
    /// banner that repeats a line (`*****` above and below) has two.
    open: HashMap<(bool, Vec<u8>), VecDeque<u64>>,
    /// Each printer's last entry (which may have gone out since).
    last: HashMap<Printer, u64>,
    waiting: usize,
    waiting_bytes: usize,
}

impl Collapser {
    pub fn new() -> Collapser {
        Collapser::default()
    }

    /// `printer` printed `text` at `now`. Returns the entries that had to go out early to keep
    /// the memory bounded (rarely any).
    pub fn push(&mut self, now: Instant, printer: Printer, text: &[u8]) -> Vec<Entry> {
        let key = (printer.is_rank(), text.to_vec());
        // The oldest entry of this text that is after everything of this printer's (its own
        // lines keep their order; that also keeps it out of an entry it is in) and whose
        // window is still open.
        let after = self.last.get(&printer).map_or(0, |&own| own + 1);
        let joinable = self.open.get(&key).and_then(|seqs| {
            let from = seqs.partition_point(|&seq| seq < after);
            seqs.range(from..).copied().find(|&seq| {
                now.saturating_duration_since(self.queue[(seq - self.base) as usize].first) < WINDOW
            })
        });
        let seq = match joinable {
            Some(seq) => {
                self.queue[(seq - self.base) as usize].printers.push(printer);
                seq
            }
            None => {
                let seq = self.base + self.queue.len() as u64;
                self.waiting_bytes += text.len();
                self.queue.push_back(Entry { text: key.1.clone(), printers: vec![printer], first: now });
                self.open.entry(key).or_default().push_back(seq);
                seq
            }
        };
        self.last.insert(printer, seq);
        self.waiting += 1;
        let mut early = Vec::new();
        while self.waiting > MAX_WAITING || self.waiting_bytes > MAX_WAITING_BYTES {
            early.extend(self.pop());
        }
        early
    }

    /// The entries whose window has passed at `now`, in order.
    pub fn due(&mut self, now: Instant) -> Vec<Entry> {
        let mut out = Vec::new();
        while self.queue.front().is_some_and(|e| now.saturating_duration_since(e.first) >= WINDOW) {
            out.extend(self.pop());
        }
        out
    }

    /// Every entry, due or not: before herd's own lines, and at the end.
    pub fn drain(&mut self) -> Vec<Entry> {
        let mut out = Vec::new();
        while let Some(e) = self.pop() {
            out.push(e);
        }
        out
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    fn pop(&mut self) -> Option<Entry> {
        let entry = self.queue.pop_front()?;
        let key = (entry.printers[0].is_rank(), entry.text);
        // Entries go out in order: this one is the oldest of its text.
        if let Some(seqs) = self.open.get_mut(&key) {
            seqs.pop_front();
            if seqs.is_empty() {
                self.open.remove(&key);
            }
        }
        self.base += 1;
        self.waiting -= entry.printers.len();
        self.waiting_bytes -= key.1.len();
        if self.queue.is_empty() {
            // No entry is left for the printers' last ones to point into.
            self.last.clear();
        }
        Some(Entry { text: key.1, printers: entry.printers, first: entry.first })
    }
}

/// Sorted numbers as ranges: `0-3,8,10-11`.
pub fn ranges(mut ns: Vec<u32>) -> String {
    ns.sort_unstable();
    ns.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < ns.len() {
        let mut j = i;
        while j + 1 < ns.len() && ns[j + 1] == ns[j] + 1 {
            j += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        match j > i {
            true => out.push_str(&format!("{}-{}", ns[i], ns[j])),
            false => out.push_str(&ns[i].to_string()),
        }
        i = j + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(r: u32) -> Printer {
        Printer::Rank { rank: r, node: (r / 8) as usize }
    }

    /// The entries as (text, printers' ranks or nodes).
    fn shown(entries: &[Entry]) -> Vec<(String, Vec<u32>)> {
        entries
            .iter()
            .map(|e| {
                let who = e
                    .printers
                    .iter()
                    .map(|p| match *p {
                        Printer::Rank { rank, .. } => rank,
                        Printer::Node(n) => 1000 + n as u32,
                    })
                    .collect();
                (String::from_utf8(e.text.clone()).unwrap(), who)
            })
            .collect()
    }

    #[test]
    fn the_same_line_from_every_rank_within_the_window_is_one_entry() {
        let t0 = Instant::now();
        let mut c = Collapser::new();
        for r in 0..512 {
            assert!(c
                .push(t0 + Duration::from_micros(u64::from(r) * 500), rank(r), b"Setting OMP_NUM_THREADS")
                .is_empty());
        }
        assert!(c.due(t0 + WINDOW - Duration::from_millis(1)).is_empty(), "held for the window");
        let out = c.due(t0 + WINDOW);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].printers.len(), 512);
        assert!(c.is_empty());
    }

    #[test]
    fn each_printers_lines_keep_their_order() {
        let t0 = Instant::now();
        let mut c = Collapser::new();
        c.push(t0, rank(1), b"A");
        c.push(t0, rank(0), b"B");
        // Rank 0's A came after its B: it may not join rank 1's A, which goes out before B.
        c.push(t0, rank(0), b"A");
        c.push(t0, rank(2), b"A");
        let out = shown(&c.drain());
        assert_eq!(out, [("A".into(), vec![1, 2]), ("B".into(), vec![0]), ("A".into(), vec![0])]);
    }

    #[test]
    fn a_banner_that_repeats_a_line_is_still_one_entry_a_line() {
        let t0 = Instant::now();
        let mut c = Collapser::new();
        for r in 0..64 {
            for line in ["***", "hello", "***"] {
                c.push(t0, rank(r), line.as_bytes());
            }
        }
        let out = shown(&c.drain());
        let all: Vec<u32> = (0..64).collect();
        assert_eq!(out, [("***".into(), all.clone()), ("hello".into(), all.clone()), ("***".into(), all)]);
    }

    #[test]
    fn a_printer_that_repeats_itself_gets_a_line_each_time() {
        let t0 = Instant::now();
        let mut c = Collapser::new();
        c.push(t0, rank(0), b"tick");
        c.push(t0, rank(0), b"tick");
        c.push(t0, rank(1), b"tick");
        let out = shown(&c.drain());
        assert_eq!(out, [("tick".into(), vec![0, 1]), ("tick".into(), vec![0])]);
    }

    #[test]
    fn ranks_and_launchers_are_not_mixed_and_no_line_waits_past_the_window() {
        let t0 = Instant::now();
        let mut c = Collapser::new();
        c.push(t0, rank(0), b"warn");
        c.push(t0, Printer::Node(0), b"warn");
        c.push(t0 + Duration::from_millis(300), rank(1), b"warn");
        // Past the first entry's window, a line starts an entry of its own.
        c.push(t0 + WINDOW + Duration::from_millis(10), rank(2), b"warn");
        let first = shown(&c.due(t0 + WINDOW));
        assert_eq!(first, [("warn".into(), vec![0, 1]), ("warn".into(), vec![1000])]);
        assert_eq!(shown(&c.due(t0 + WINDOW * 2 + Duration::from_millis(10))), [("warn".into(), vec![2])]);
    }

    #[test]
    fn a_flood_of_distinct_lines_goes_out_early_rather_than_pile_up() {
        let t0 = Instant::now();
        let mut c = Collapser::new();
        let mut out = 0;
        for i in 0..(MAX_WAITING + 100) {
            out += c.push(t0, rank(0), format!("line {i}").as_bytes()).len();
        }
        assert_eq!(out, 100);
        assert_eq!(c.drain().len(), MAX_WAITING);
    }

    #[test]
    fn long_lines_go_out_early_past_a_few_mib() {
        let t0 = Instant::now();
        let mut c = Collapser::new();
        let out: usize = (0..6).map(|r| c.push(t0, rank(r), &vec![r as u8; 1 << 20]).len()).sum();
        assert_eq!(out, 2, "4 MiB wait at most");
        assert_eq!(c.drain().len(), 4);
    }

    #[test]
    fn numbers_compress_into_ranges() {
        assert_eq!(ranges(vec![3, 0, 1, 2, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(ranges(vec![5]), "5");
        assert_eq!(ranges((0..512).collect()), "0-511");
    }
}
