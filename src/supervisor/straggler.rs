//! Stragglers: the rank the others wait for. Pure: the agents' samples of each rank's CPU
//! time in, a verdict for each rank that stays busier than the rest out.
//!
//! Why CPU time: in a synchronous job, the ranks that wait for a slow one sleep in the
//! collective (gloo blocks in a receive), and the slow one computes. Over a few seconds, its
//! CPU time is well above the median rank's, and it costs the node one look at /proc per
//! sample (`sample_job` in agent.sh). A rank slowed by extra work, or a node whose CPU is
//! throttled (all of its ranks then), shows the same way. It is blind on GPUs: NCCL's waits
//! spin a core on every rank alike, so there every rank is busy; the signal there has to come
//! from the GPU itself (its clocks' throttle reasons, its SM activity), which is not built.
//! Stack samples were the other choice: a py-spy dump of every rank costs 50 to 100 ms of CPU,
//! far past 1 % of a core at a rate that would name a straggler within a minute, and on GPUs
//! every rank's Python waits in the same call whichever one is slow.

use std::collections::BTreeMap;

/// How often herd asks every node for a sample.
pub const SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// A rank is over when its CPU share is at least this many times the median rank's...
pub const RATIO: f64 = 1.5;
/// ... and at least this much of a core above it (so that near-idle ranks never are).
pub const MIN_GAP: f64 = 0.15;
/// ... in this many rounds in a row: named 10 to 15 s after it began.
pub const ROUNDS: u32 = 3;

/// One node's answer to `sample`: its uptime (seconds), its clock ticks per second, and each
/// rank's CPU time in ticks (its processes' summed).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub uptime: f64,
    pub hz: u32,
    pub ticks: Vec<(u32, u64)>,
}

/// A rank named a straggler.
#[derive(Debug, Clone, PartialEq)]
pub struct Straggler {
    pub rank: u32,
    pub node_rank: usize,
    /// Its CPU share over the median rank's, in the round it was named.
    pub score: f64,
    /// Seconds since the attempt started, when it was first over.
    pub since_secs: f64,
}

/// Every rank's samples over one attempt.
#[derive(Debug, Default)]
pub struct StragglerWatch {
    /// Per node: its last sample (uptime, ticks by rank).
    last: BTreeMap<usize, (f64, BTreeMap<u32, u64>)>,
    /// This round's CPU share of each rank that had two samples: (node, share of a core).
    shares: BTreeMap<u32, (usize, f64)>,
    /// Ranks over in every round since (rounds, first over at).
    streaks: BTreeMap<u32, (u32, f64)>,
    /// Ranks named already: once each per attempt.
    named: Vec<Straggler>,
}

impl StragglerWatch {
    pub fn new() -> StragglerWatch {
        StragglerWatch::default()
    }

    /// One node's sample. A rank's share is its ticks since the node's previous sample over
    /// the node's own time between them (its uptime: the node's clock, not herd's, whose
    /// answer may come late).
    pub fn sample(&mut self, node_rank: usize, sample: &Sample) {
        let ticks: BTreeMap<u32, u64> = sample.ticks.iter().copied().collect();
        if let Some((before, old)) = self.last.get(&node_rank) {
            let dt = sample.uptime - before;
            if dt >= 1.0 {
                for (rank, now) in &ticks {
                    // A rank whose processes changed (a data loader gone) may count fewer.
                    if let Some(then) = old.get(rank).filter(|&&then| then <= *now) {
                        let share = (now - then) as f64 / f64::from(sample.hz) / dt;
                        self.shares.insert(*rank, (node_rank, share));
                    }
                }
            } else if dt >= 0.0 {
                return;
            }
        }
        self.last.insert(node_rank, (sample.uptime, ticks));
    }

    /// A round is over (`at`: seconds since the attempt started): the ranks named in it.
    pub fn round(&mut self, at: f64) -> Vec<Straggler> {
        let shares = std::mem::take(&mut self.shares);
        let mut values: Vec<f64> = shares.values().map(|(_, s)| *s).collect();
        if values.len() < 2 {
            return Vec::new();
        }
        values.sort_by(f64::total_cmp);
        let median = values[values.len() / 2];
        // "In a row": a rank missing from this round (its node answered late) starts over.
        self.streaks.retain(|rank, _| shares.contains_key(rank));
        let mut named = Vec::new();
        for (rank, (node_rank, share)) in shares {
            let over = share >= RATIO * median && share - median >= MIN_GAP;
            if !over {
                self.streaks.remove(&rank);
                continue;
            }
            let (rounds, since) = self.streaks.entry(rank).or_insert((0, at));
            *rounds += 1;
            if *rounds >= ROUNDS && !self.named.iter().any(|s| s.rank == rank) {
                let score = share / median.max(0.01);
                named.push(Straggler { rank, node_rank, score, since_secs: *since });
            }
        }
        self.named.extend(named.iter().cloned());
        named
    }

    /// Every rank named in this attempt, in the order they were.
    pub fn named(&self) -> &[Straggler] {
        &self.named
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rounds` rounds of samples 5 s apart: node n's ranks 2n and 2n+1 use `share(round,
    /// rank)` of a core.
    fn watch(nodes: usize, rounds: usize, share: impl Fn(usize, u32) -> f64) -> Vec<(usize, Straggler)> {
        let mut w = StragglerWatch::new();
        let mut ticks = vec![0u64; nodes * 2];
        let mut out = Vec::new();
        for round in 0..=rounds {
            for node in 0..nodes {
                let ranks = [2 * node as u32, 2 * node as u32 + 1];
                let sample = Sample {
                    uptime: 100.0 + 5.0 * round as f64 + 0.01 * node as f64,
                    hz: 100,
                    ticks: ranks.iter().map(|&r| (r, ticks[r as usize])).collect(),
                };
                w.sample(node, &sample);
                for r in ranks {
                    ticks[r as usize] += (share(round, r) * 500.0) as u64;
                }
            }
            out.extend(w.round(5.0 * round as f64).into_iter().map(|s| (round, s)));
        }
        out
    }

    #[test]
    fn a_rank_that_stays_busier_is_named_once_after_three_rounds() {
        let got = watch(4, 10, |round, rank| if rank == 5 && round >= 2 { 0.9 } else { 0.3 });
        assert_eq!(got.len(), 1, "{got:?}");
        let (round, s) = &got[0];
        assert_eq!((s.rank, s.node_rank), (5, 2));
        assert_eq!(*round, 5, "the samples after rounds 2, 3 and 4 are over, named at the third");
        assert_eq!(s.since_secs, 15.0);
        assert!((s.score - 3.0).abs() < 0.1, "{}", s.score);
    }

    #[test]
    fn a_balanced_job_with_noise_names_nobody() {
        // Shares within 0.6 to 1.4 of each other, moving from round to round.
        let noise = [1.0, 0.7, 1.3, 0.9, 1.1, 0.6, 1.4, 0.8];
        let got = watch(4, 20, |round, rank| 0.5 * noise[(round + rank as usize) % 8]);
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn a_rank_over_now_and_then_is_not_named() {
        let got = watch(4, 20, |round, rank| if rank == 1 && round % 3 == 0 { 0.9 } else { 0.3 });
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn a_round_without_the_rank_breaks_its_streak() {
        let mut w = StragglerWatch::new();
        let share = |w: &mut StragglerWatch, r: u32, s: f64| {
            w.shares.insert(r, (0, s));
        };
        for (round, with_rank_5) in [true, true, false, true, true].into_iter().enumerate() {
            for r in 0..4 {
                share(&mut w, r, 0.3);
            }
            if with_rank_5 {
                share(&mut w, 5, 0.9);
            }
            assert!(w.round(round as f64).is_empty(), "round {round}");
        }
        share(&mut w, 0, 0.3);
        share(&mut w, 1, 0.3);
        share(&mut w, 5, 0.9);
        assert_eq!(w.round(5.0).len(), 1, "three in a row at last");
    }

    #[test]
    fn idle_ranks_are_never_stragglers() {
        let got = watch(3, 10, |_, rank| if rank == 0 { 0.1 } else { 0.01 });
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn a_throttled_node_names_its_ranks() {
        let got = watch(4, 8, |_, rank| if rank / 2 == 1 { 0.95 } else { 0.35 });
        let ranks: Vec<(u32, usize)> = got.iter().map(|(_, s)| (s.rank, s.node_rank)).collect();
        assert_eq!(ranks, [(2, 1), (3, 1)]);
    }

    #[test]
    fn a_node_that_did_not_answer_or_restarted_its_clock_is_skipped() {
        let mut w = StragglerWatch::new();
        let s = |uptime: f64, t: u64| Sample { uptime, hz: 100, ticks: vec![(0, t)] };
        w.sample(0, &s(100.0, 0));
        w.sample(0, &s(100.5, 40));
        assert!(w.shares.is_empty(), "less than a second apart: not a share");
        w.sample(0, &s(50.0, 10));
        w.sample(0, &s(55.0, 260));
        assert_eq!(w.shares[&0], (0, 0.5));
    }
}
