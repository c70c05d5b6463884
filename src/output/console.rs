//! The console: each job line with its node's or rank's prefix on stdout (all of them, or the
//! ranks `--ranks` shows), and herd's own status lines on stderr. Under `--json` only the
//! status lines: the JSON sink writes stdout.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;

use super::files::rank_log_path;
use super::prefix::{self, RankPrefixes};
use super::sink::{Shared, Sink, Turn};
use super::summary;
use crate::config::RankList;
use crate::events::{Event, RunStatus, Source};
use crate::lines::Lines;

/// How many of a hidden rank's last lines are kept, to show if it fails.
const HIDDEN_TAIL: usize = 20;

pub struct Console {
    /// Whether job output is echoed (not under `--json`).
    echo: bool,
    color: bool,
    /// The ranks whose lines are shown (`None`: all).
    shown: Option<RankList>,
    prefixes: Vec<Vec<u8>>,
    rank_prefixes: RankPrefixes,
    /// The last lines of each hidden rank in this attempt, kept for a failure's evidence.
    hidden_tails: HashMap<u32, VecDeque<Vec<u8>>>,
    run_dir: PathBuf,
    /// The job's processes that could not be stopped, so far.
    unstopped: usize,
    /// The ranks were told to checkpoint (a time limit, a preemption).
    checkpointed: bool,
    /// The files' error has been told.
    warned: bool,
}

impl Console {
    pub fn new(
        hosts: &[String],
        color: bool,
        echo: bool,
        shown: Option<RankList>,
        run_dir: PathBuf,
    ) -> Console {
        Console {
            echo,
            color,
            shown,
            prefixes: prefix::prefixes(hosts, color),
            rank_prefixes: RankPrefixes::new(hosts.to_vec(), color),
            hidden_tails: HashMap::new(),
            run_dir,
            unstopped: 0,
            checkpointed: false,
            warned: false,
        }
    }

    fn output(&mut self, node_rank: usize, source: Source, lines: &Lines, shared: &mut Shared) {
        if !self.echo {
            return;
        }
        let hidden = match (source.rank, &self.shown) {
            (Some(rank), Some(shown)) => !shown.contains(rank),
            _ => false,
        };
        let prefix = match source.rank {
            Some(rank) => self.rank_prefixes.get(rank, node_rank),
            None => &self.prefixes[node_rank],
        };
        for line in lines.iter() {
            if hidden {
                let kept = self.hidden_tails.entry(source.rank.expect("a rank")).or_default();
                if kept.len() == HIDDEN_TAIL {
                    kept.pop_front();
                }
                kept.push_back([prefix, line.text].concat());
            } else {
                shared.screen.job(&[prefix, line.text, b"\n"]);
            }
        }
    }

    /// A failing rank the filter hid: its last lines, and where the rest is.
    fn failed(&mut self, attempt: u32, rank: Option<u32>, shared: &mut Shared) {
        let Some(rank) = rank else { return };
        let Some(kept) = self.hidden_tails.remove(&rank) else { return };
        let path = rank_log_path(&self.run_dir, attempt, rank);
        shared.screen.status(&format!(
            "rank {rank} failed; its last {} line(s), not shown before (all of it: {}):",
            kept.len(),
            path.display()
        ));
        for line in kept {
            shared.screen.job(&[&line, b"\n"]);
        }
    }

    /// The first error writing the run's files, once.
    fn warn(&mut self, shared: &mut Shared) {
        if let (Some(msg), false) = (&shared.report.file_error, self.warned) {
            self.warned = true;
            shared.screen.status(&format!("warning: {msg}; job output goes on, to stdout only"));
        }
    }

    fn status(&mut self, event: &Event, shared: &mut Shared) {
        match event {
            Event::ProcessesUnstopped { pids, .. } => self.unstopped += pids.len(),
            Event::CheckpointRequested { .. } => self.checkpointed = true,
            _ => {}
        }
        let unstopped = self.unstopped;
        let line = match event {
            Event::RunFinished { status: RunStatus::Interrupted, .. } if unstopped > 0 => Some(format!(
                "run interrupted; {unstopped} process(es) of the job could not be stopped (see above)"
            )),
            Event::RunFinished { status, attempts } => {
                Some(summary::finished_line(*status, *attempts, self.checkpointed))
            }
            _ => summary::status_line(event),
        };
        if let Some(line) = line {
            shared.screen.status(&line);
        }
    }
}

impl Sink for Console {
    fn event(&mut self, turn: &Turn, shared: &mut Shared) {
        if let Some(renamed) = &turn.renamed {
            if renamed.hosts_changed {
                self.prefixes = prefix::prefixes(turn.hosts, self.color);
                self.rank_prefixes = RankPrefixes::new(turn.hosts.to_vec(), self.color);
            }
            self.rank_prefixes.set_ranks(renamed.nprocs);
        }
        match turn.event {
            Event::NodeOutput { node_rank, source, lines } => {
                self.warn(shared);
                self.output(*node_rank, *source, lines, shared);
            }
            // Files only: the summary that follows is the event.
            Event::StacksCollected { .. } | Event::NcclDumpsCollected { .. } => self.warn(shared),
            other => {
                match other {
                    Event::AttemptStarting { .. } => self.hidden_tails.clear(),
                    Event::AttemptFailed { attempt, verdict, .. } => {
                        self.failed(*attempt, verdict.root_cause.as_ref().and_then(|c| c.rank), shared)
                    }
                    _ => {}
                }
                self.warn(shared);
                self.status(other, shared);
            }
        }
    }

    fn finish(&mut self, shared: &mut Shared) {
        self.warn(shared);
    }
}
