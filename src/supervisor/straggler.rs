//! Stragglers: the rank the others wait for. Pure: the agents' samples of each rank's time
//! on a CPU and waiting for one in, a verdict for each rank that stays busier than the rest
//! out.
//!
//! Why those times: in a synchronous job, the ranks that wait for a slow one sleep in the
//! collective (gloo blocks in a receive), and the slow one does not. A rank slowed by more
//! work, or a slower core, computes more: its CPU time is well above the median rank's. A
//! node whose CPU is throttled (a cgroup's quota) or taken by a noisy neighbour computes no
//! more than the others; its ranks wait for a CPU instead, which the kernel's scheduler
//! statistics count (`sample_job` in agent.sh reads them, one look at /proc per thread a
//! sample). So a rank is over when either its CPU time or its busy time (on a CPU or waiting
//! for one) stands out. Each alone falls short: the busy time of every rank on a host whose
//! CPUs are oversubscribed is near a whole core, extra work or not (on the test cluster, every
//! node shares two cores), and the CPU time never shows a throttle. Where the kernel keeps no
//! such statistics, the agent sends the CPU time alone. It is blind on GPUs: NCCL's waits spin
//! a core on every rank alike, so there every rank is busy; the signal there has to come from
//! the GPU itself (its clocks' throttle reasons, its SM activity), which is not built. Stack
//! samples were the other choice: a py-spy dump of every rank costs 50 to 100 ms of CPU, far
//! past 1 % of a core at a rate that would name a straggler within a minute, and on GPUs every
//! rank's Python waits in the same call whichever one is slow.

use std::collections::BTreeMap;

use crate::remote::protocol::{RankTimes, Sample};

/// How often herd asks every node for a sample.
pub const SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// A rank is over when its CPU share, or its busy share, is at least this many times the
/// median rank's...
pub const RATIO: f64 = 1.5;
/// ... and at least this much of a core above it (so that near-idle ranks never are).
pub const MIN_GAP: f64 = 0.15;
/// ... in this many rounds in a row: named 10 to 15 s after it began.
pub const ROUNDS: u32 = 3;
/// The median rank's busy share under which the others do nothing at all: they are blocked
/// in one collective for the whole round, waiting for a rank that computes alone. That is
/// work of the job's own (rank 0 writing a checkpoint, an evaluation on one rank), which no
/// other node would do faster. A slow node slows its peers' steps, but they still compute
/// their part of each: only a node over 30 times slower than its peers would look alike.
pub const IDLE: f64 = 0.03;

/// A rank named a straggler.
#[derive(Debug, Clone, PartialEq)]
pub struct Straggler {
    pub rank: u32,
    pub node_rank: usize,
    /// Its CPU or busy share over the median rank's (the larger), in the round it was named.
    pub score: f64,
    /// Seconds since the attempt started, when it was first over.
    pub since_secs: f64,
    /// It computed more (its CPU share was over) while every other rank sat idle (`IDLE`): the
    /// job waits on work of its own, not on a slow node. It stops being alone once it is over
    /// with the others busy for ROUNDS rounds in a row, as a straggler is named: a round that
    /// holds a checkpoint's start or end (the others idle for part of it only) does not count.
    pub alone: bool,
}

/// A rank's shares of a core over one round: on a CPU, and on one or waiting for one.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Shares {
    node_rank: usize,
    cpu: f64,
    busy: f64,
    /// It read or wrote nothing since the sample before (`false` where the node cannot say).
    still: bool,
    /// The node's seconds these shares are over.
    secs: f64,
}

impl Shares {
    /// Two spans of one rank's in one round (a node's late sample came with its next one):
    /// its shares over both, still only if it was in each.
    fn and(self, later: Shares) -> Shares {
        let secs = self.secs + later.secs;
        let mean = |a: f64, b: f64| (a * self.secs + b * later.secs) / secs;
        Shares {
            node_rank: later.node_rank,
            cpu: mean(self.cpu, later.cpu),
            busy: mean(self.busy, later.busy),
            still: self.still && later.still,
            secs,
        }
    }
}

/// Every rank's samples over one attempt.
#[derive(Debug, Default)]
pub struct StragglerWatch {
    /// Per node: its last sample (uptime, times by rank).
    last: BTreeMap<usize, (f64, BTreeMap<u32, RankTimes>)>,
    /// This round's shares of each rank that had two samples.
    shares: BTreeMap<u32, Shares>,
    /// Ranks over in every round since (rounds, first over at, of them the last in a row that
    /// were not alone).
    streaks: BTreeMap<u32, (u32, f64, u32)>,
    /// Ranks named already: once each per attempt.
    named: Vec<Straggler>,
    /// The most ranks a round has held, or its nodes had sent a sample of: a round with fewer
    /// (a node that answered late) says nothing of a stall.
    most: usize,
    /// Since when (the round before the first of them) every rank sat still, if they do.
    still_since: Option<f64>,
    /// When the last round ended.
    last_round: Option<f64>,
}

impl StragglerWatch {
    pub fn new() -> StragglerWatch {
        StragglerWatch::default()
    }

    /// One node's sample. A rank's shares are its times since the node's previous sample over
    /// the node's own time between them (its uptime: the node's clock, not herd's, whose
    /// answer may come late).
    pub fn sample(&mut self, node_rank: usize, sample: &Sample) {
        let times: BTreeMap<u32, RankTimes> = sample.ranks.iter().copied().collect();
        if let Some((before, old)) = self.last.get(&node_rank) {
            let dt = sample.uptime - before;
            if dt >= 1.0 {
                let per_sec = f64::from(sample.hz) * dt;
                for (rank, now) in &times {
                    let Some(then) = old.get(rank) else { continue };
                    // A thread or process that ended (a data loader) took its times with it:
                    // the rank counts less than it did, this round, rather than none.
                    let cpu = now.cpu.saturating_sub(then.cpu) as f64 / per_sec;
                    let busy = cpu + now.wait.saturating_sub(then.wait) as f64 / per_sec;
                    // A rank waiting in an fsync or a close on NFS moves its bytes only as the
                    // call returns: it is not still while it waits there.
                    let still = !now.blocked && now.io.zip(then.io).is_some_and(|(now, then)| now == then);
                    let shares = Shares { node_rank, cpu, busy, still, secs: dt };
                    let merged = match self.shares.get(rank) {
                        Some(earlier) => earlier.and(shares),
                        None => shares,
                    };
                    self.shares.insert(*rank, merged);
                }
            } else if dt >= 0.0 {
                return;
            }
        }
        self.last.insert(node_rank, (sample.uptime, times));
    }

    /// A round is over (`at`: seconds since the attempt started): the ranks named in it.
    pub fn round(&mut self, at: f64) -> Vec<Straggler> {
        let shares = std::mem::take(&mut self.shares);
        self.stall(&shares, at);
        // "In a row": a rank missing from this round (its node answered late) starts over.
        self.streaks.retain(|rank, _| shares.contains_key(rank));
        if shares.len() < 2 {
            return Vec::new();
        }
        // The lower median: with two ranks, or two nodes whose ranks are half of them, the
        // upper one would be a slow rank's own.
        let median = |f: fn(&Shares) -> f64| {
            let mut values: Vec<f64> = shares.values().map(f).collect();
            values.sort_by(f64::total_cmp);
            values[(values.len() - 1) / 2]
        };
        let (cpu, busy) = (median(|s| s.cpu), median(|s| s.busy));
        let mut named = Vec::new();
        for (rank, s) in shares {
            let cpu_over = over(s.cpu, cpu);
            let Some(score) = [cpu_over, over(s.busy, busy)].into_iter().flatten().reduce(f64::max) else {
                self.streaks.remove(&rank);
                continue;
            };
            let alone_now = cpu_over.is_some() && busy < IDLE;
            tracing::trace!(
                "straggler round at {at:.1} s: rank {rank} over, {s:?}; median cpu {cpu:.3}, busy {busy:.3}"
            );
            let (rounds, since, busy_peers) = self.streaks.entry(rank).or_insert((0, at, 0));
            *rounds += 1;
            *busy_peers = if alone_now { 0 } else { *busy_peers + 1 };
            let alone = *busy_peers < ROUNDS;
            if let Some(n) = self.named.iter_mut().find(|n| n.rank == rank) {
                n.alone &= alone;
            } else if *rounds >= ROUNDS {
                let since_secs = *since;
                named.push(Straggler { rank, node_rank: s.node_rank, score, since_secs, alone });
            }
        }
        self.named.extend(named.iter().cloned());
        named
    }

    /// Whether every rank sat still this round: under `IDLE` of a core each, none of them
    /// reading or writing a byte (a file, a pipe, a socket). A rank that waits on I/O (a
    /// checkpoint's write, a download) moves bytes; one that computes (an evaluation that
    /// prints nothing) uses a CPU; the ranks waiting for either in a collective sit still, as
    /// all do when the job is stuck. Blind where every rank spins a core while it waits
    /// (NCCL on GPUs) and where a node shows no bytes (`RankTimes::io`): never a stall there.
    fn stall(&mut self, shares: &BTreeMap<u32, Shares>, at: f64) {
        let known: usize = self.last.values().map(|(_, ranks)| ranks.len()).sum();
        self.most = self.most.max(shares.len()).max(known);
        let quiet = |s: &Shares| s.still && s.cpu < IDLE;
        let all_still = shares.values().all(quiet);
        if shares.is_empty() && self.still_since.is_none() {
            // No share yet (the first samples) or none this round: a stall that starts at the
            // next counts from here at the latest.
            self.last_round = Some(at);
            return;
        }
        if shares.is_empty() || (all_still && shares.len() < self.most) {
            // A node answered late (a loaded launch host, hundreds of nodes), or every node
            // did: the ranks heard say nothing against a stall, the others nothing at all.
            // The round neither starts, ends nor extends one. The late sample comes with the
            // node's next one, in a round to come, whose shares span both (`Shares::and`): a
            // byte it moved meanwhile ends the stall then.
            return;
        }
        self.still_since = match (all_still, self.still_since) {
            (false, _) => None,
            (true, Some(since)) => Some(since),
            (true, None) => Some(self.last_round.unwrap_or(at)),
        };
        self.last_round = Some(at);
    }

    /// How long every rank had sat still when the last round ended (see `stall`): zero while
    /// one moves. Not beyond it: a rank may have moved since, which the next round shows.
    pub fn still_for(&self) -> std::time::Duration {
        let at = self.last_round.unwrap_or(0.0);
        let secs = self.still_since.map_or(0.0, |since| (at - since).max(0.0));
        std::time::Duration::from_secs_f64(secs)
    }

    /// Every rank named in this attempt, in the order they were.
    pub fn named(&self) -> &[Straggler] {
        &self.named
    }

    /// The ranks named in this attempt that were still over in the last round.
    pub fn still_slow(&self) -> Vec<Straggler> {
        self.named.iter().filter(|s| self.streaks.contains_key(&s.rank)).cloned().collect()
    }
}

/// A share over the median's (the score) when it is over: RATIO times it and MIN_GAP above.
fn over(share: f64, median: f64) -> Option<f64> {
    (share >= RATIO * median && share - median >= MIN_GAP).then(|| share / median.max(0.01))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rounds` rounds of samples 5 s apart: node n's ranks 2n and 2n+1 are on a CPU and
    /// waiting for one `times(round, rank)` of a core.
    fn watch_times(
        nodes: usize,
        rounds: usize,
        times: impl Fn(usize, u32) -> (f64, f64),
    ) -> Vec<(usize, Straggler)> {
        let mut w = StragglerWatch::new();
        let mut sums = vec![RankTimes::default(); nodes * 2];
        let mut out = Vec::new();
        for round in 0..=rounds {
            for node in 0..nodes {
                let ranks = [2 * node as u32, 2 * node as u32 + 1];
                let sample = Sample {
                    uptime: 100.0 + 5.0 * round as f64 + 0.01 * node as f64,
                    hz: 100,
                    ranks: ranks.iter().map(|&r| (r, sums[r as usize])).collect(),
                };
                w.sample(node, &sample);
                for r in ranks {
                    let (cpu, wait) = times(round, r);
                    sums[r as usize].cpu += (cpu * 500.0) as u64;
                    sums[r as usize].wait += (wait * 500.0) as u64;
                }
            }
            out.extend(w.round(5.0 * round as f64).into_iter().map(|s| (round, s)));
        }
        out
    }

    /// As `watch_times`, on a CPU `share(round, rank)` of a core and never waiting for one.
    fn watch(nodes: usize, rounds: usize, share: impl Fn(usize, u32) -> f64) -> Vec<(usize, Straggler)> {
        watch_times(nodes, rounds, |round, rank| (share(round, rank), 0.0))
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
        // The same on an oversubscribed host, where every rank waits for a CPU too.
        let got = watch_times(4, 20, |round, rank| {
            let n = noise[(round + rank as usize) % 8];
            (0.3 * n, 0.6 * noise[(round + 3 * rank as usize) % 8])
        });
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn a_node_that_waits_for_a_cpu_is_named_though_it_computes_no_more() {
        // Node 1 throttled: its ranks get a fifth of a core, and wait for the rest of it.
        let got = watch_times(4, 8, |_, rank| if rank / 2 == 1 { (0.2, 0.8) } else { (0.2, 0.05) });
        let ranks: Vec<(u32, usize)> = got.iter().map(|(_, s)| (s.rank, s.node_rank)).collect();
        assert_eq!(ranks, [(2, 1), (3, 1)]);
        assert!(got.iter().all(|(_, s)| s.score > 3.9), "{got:?}");
    }

    #[test]
    fn two_nodes_name_the_slow_one() {
        // 2 nodes of 2 ranks, node 1 throttled: half the ranks are slow.
        let got = watch_times(2, 8, |_, rank| if rank / 2 == 1 { (0.2, 0.8) } else { (0.2, 0.05) });
        assert_eq!(got.iter().map(|(_, s)| s.rank).collect::<Vec<_>>(), [2, 3]);
        // 2 ranks in all (1 a node): the slow one against the other.
        let mut w = StragglerWatch::new();
        for round in 0..5 {
            w.shares.insert(0, Shares { node_rank: 0, cpu: 0.2, busy: 0.25, still: false, secs: 5.0 });
            w.shares.insert(1, Shares { node_rank: 1, cpu: 0.2, busy: 1.0, still: false, secs: 5.0 });
            let named = w.round(round as f64);
            assert_eq!(named.len(), usize::from(round == 2), "round {round}: {named:?}");
        }
    }

    #[test]
    fn still_slow_is_a_named_rank_over_in_the_last_round() {
        let mut w = StragglerWatch::new();
        let round = |w: &mut StragglerWatch, slow: f64| {
            for r in 0..3 {
                w.shares.insert(
                    r,
                    Shares { node_rank: r as usize, cpu: 0.3, busy: 0.3, still: false, secs: 5.0 },
                );
            }
            w.shares.insert(3, Shares { node_rank: 3, cpu: slow, busy: slow, still: false, secs: 5.0 });
            w.round(0.0)
        };
        for _ in 0..3 {
            round(&mut w, 0.9);
        }
        assert_eq!(w.named().len(), 1);
        assert_eq!(w.still_slow().len(), 1);
        // Its checkpoint written, it keeps pace again: named, no longer slow.
        round(&mut w, 0.3);
        assert_eq!((w.named().len(), w.still_slow().len()), (1, 0));
        // Slow again, then a round that only one node answered in time: the streak of a rank
        // missing from it ends, though too few ranks answered to judge any.
        round(&mut w, 0.9);
        assert_eq!(w.still_slow().len(), 1);
        w.shares.insert(0, Shares { node_rank: 0, cpu: 0.3, busy: 0.3, still: false, secs: 5.0 });
        w.round(0.0);
        assert!(w.still_slow().is_empty(), "{:?}", w.streaks);
    }

    #[test]
    fn more_work_is_named_on_a_host_where_every_rank_waits_for_a_cpu() {
        // Oversubscribed: every rank is busy most of the time; rank 5 computes twice as much.
        let got = watch_times(4, 8, |_, rank| if rank == 5 { (0.6, 0.4) } else { (0.3, 0.55) });
        let ranks: Vec<u32> = got.iter().map(|(_, s)| s.rank).collect();
        assert_eq!(ranks, [5]);
        assert!((got[0].1.score - 2.0).abs() < 0.1, "{got:?}");
    }

    #[test]
    fn a_rank_that_computes_while_every_other_idles_is_named_alone() {
        // Rank 0 writes a checkpoint from round 2 on; the others are blocked in a collective.
        let writing = |round: usize, rank: u32| match (round >= 2, rank) {
            (true, 0) => (0.95, 0.02),
            (true, _) => (0.005, 0.0),
            (false, _) => (0.3, 0.05),
        };
        let got = watch_times(4, 8, writing);
        assert_eq!(got.iter().map(|(_, s)| (s.rank, s.alone)).collect::<Vec<_>>(), [(0, true)]);
        // Three times the work while the others compute theirs: not alone.
        let got = watch(4, 8, |_, rank| if rank == 0 { 0.9 } else { 0.3 });
        assert_eq!(got.iter().map(|(_, s)| (s.rank, s.alone)).collect::<Vec<_>>(), [(0, false)]);
        // A throttled node waits for a CPU, and computes no more: never alone, however idle
        // the others.
        let got = watch_times(4, 8, |_, rank| if rank / 2 == 1 { (0.02, 0.9) } else { (0.02, 0.0) });
        assert!(got.iter().all(|(_, s)| !s.alone) && got.len() == 2, "{got:?}");
        // Checkpoints one after another: the rounds that hold a start or an end (the others busy
        // for part of them) leave it alone. Then over for three rounds while the others
        // compute: no longer alone.
        let mut w = StragglerWatch::new();
        let others = [0.3, 0.005, 0.005, 0.1, 0.3, 0.005, 0.005, 0.1, 0.3, 0.3, 0.3, 0.3];
        let mut alone = Vec::new();
        for (round, others) in others.into_iter().enumerate() {
            for r in 1..4 {
                w.shares.insert(
                    r,
                    Shares { node_rank: r as usize, cpu: others, busy: others, still: false, secs: 5.0 },
                );
            }
            w.shares.insert(0, Shares { node_rank: 0, cpu: 0.95, busy: 0.95, still: false, secs: 5.0 });
            w.round(round as f64);
            alone.push(w.named().first().map(|s| s.alone));
        }
        let (t, f) = (Some(true), Some(false));
        assert_eq!(alone, [None, None, t, t, t, t, t, t, t, f, f, f]);
        assert!(!w.still_slow()[0].alone);
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
            w.shares.insert(r, Shares { node_rank: 0, cpu: s, busy: s, still: false, secs: 5.0 });
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
    fn a_node_with_more_work_names_its_ranks() {
        let got = watch(4, 8, |_, rank| if rank / 2 == 1 { 0.95 } else { 0.35 });
        let ranks: Vec<(u32, usize)> = got.iter().map(|(_, s)| (s.rank, s.node_rank)).collect();
        assert_eq!(ranks, [(2, 1), (3, 1)]);
    }

    #[test]
    fn a_node_that_did_not_answer_or_restarted_its_clock_is_skipped() {
        let mut w = StragglerWatch::new();
        let s = |uptime: f64, cpu: u64, wait: u64| Sample {
            uptime,
            hz: 100,
            ranks: vec![(0, RankTimes { cpu, wait, io: Some(0), blocked: false })],
        };
        w.sample(0, &s(100.0, 0, 0));
        w.sample(0, &s(100.5, 40, 0));
        assert!(w.shares.is_empty(), "less than a second apart: not a share");
        w.sample(0, &s(50.0, 10, 0));
        w.sample(0, &s(55.0, 260, 100));
        assert_eq!(w.shares[&0], Shares { node_rank: 0, cpu: 0.5, busy: 0.7, still: true, secs: 5.0 });
        // A thread gone with its wait: what is left counts, none of it below zero.
        w.shares.clear();
        w.sample(0, &s(60.0, 300, 50));
        assert_eq!(w.shares[&0], Shares { node_rank: 0, cpu: 0.08, busy: 0.08, still: true, secs: 5.0 });
    }

    /// Four ranks on two nodes, a round every 5 s: `io(round, rank)` bytes and `cpu(round,
    /// rank)` of a core each; how long every rank had sat still after each round.
    fn still(
        rounds: usize,
        cpu: impl Fn(usize, u32) -> f64,
        io: impl Fn(usize, u32) -> Option<u64>,
    ) -> Vec<u64> {
        still_late(rounds, cpu, io, |_, _| false, |_, _| false)
    }

    /// `still`, with `blocked(round, rank)`: a thread of the rank in uninterruptible sleep
    /// as the round's sample is taken, and `late(round, node)`: the node's sample misses the
    /// round, and comes in the next round it does not miss, just before that round's own.
    fn still_late(
        rounds: usize,
        cpu: impl Fn(usize, u32) -> f64,
        io: impl Fn(usize, u32) -> Option<u64>,
        blocked: impl Fn(usize, u32) -> bool,
        late: impl Fn(usize, usize) -> bool,
    ) -> Vec<u64> {
        let mut w = StragglerWatch::new();
        let mut sums = [RankTimes { io: Some(0), ..RankTimes::default() }; 4];
        let mut out = Vec::new();
        let mut held: [Vec<Sample>; 2] = [Vec::new(), Vec::new()];
        for round in 0..=rounds {
            for (node, held) in held.iter_mut().enumerate() {
                let ranks = [2 * node as u32, 2 * node as u32 + 1];
                let uptime = 100.0 + 5.0 * round as f64;
                held.push(Sample {
                    uptime,
                    hz: 100,
                    ranks: ranks.iter().map(|&r| (r, sums[r as usize])).collect(),
                });
                if !late(round, node) {
                    for sample in std::mem::take(held) {
                        w.sample(node, &sample);
                    }
                }
                for r in ranks {
                    sums[r as usize].blocked = blocked(round + 1, r);
                    sums[r as usize].cpu += (cpu(round, r) * 500.0) as u64;
                    sums[r as usize].io = sums[r as usize].io.zip(io(round, r)).map(|(a, b)| a + b);
                }
            }
            w.round(5.0 * round as f64);
            out.push(w.still_for().as_secs());
        }
        out
    }

    /// A stuck job (every rank blocked, one stopped) sits still; a checkpoint written by rank 0
    /// while the others wait moves bytes, an evaluation that prints nothing uses a CPU, and a
    /// node that shows no bytes never makes a stall.
    #[test]
    fn a_stall_is_every_rank_still_with_no_cpu_and_no_bytes() {
        let stuck_from_4 =
            still(12, |r, _| if r < 4 { 0.5 } else { 0.01 }, |r, _| Some(if r < 4 { 100 } else { 0 }));
        assert_eq!(stuck_from_4, [0, 0, 0, 0, 0, 5, 10, 15, 20, 25, 30, 35, 40]);
        let checkpoint = still(
            12,
            |r, rank| {
                if rank == 0 && r >= 4 {
                    0.02
                } else if r < 4 {
                    0.5
                } else {
                    0.0
                }
            },
            |r, rank| Some(if rank == 0 || r < 4 { 1 << 20 } else { 0 }),
        );
        assert!(checkpoint.iter().all(|&s| s == 0), "{checkpoint:?}");
        let evaluation = still(12, |_, _| 0.4, |_, _| Some(0));
        assert!(evaluation.iter().all(|&s| s == 0), "{evaluation:?}");
        let blind = still(12, |_, _| 0.0, |_, rank| (rank != 3).then_some(0));
        assert!(blind.iter().all(|&s| s == 0), "{blind:?}");
        // One byte moved starts it over (after round 4: the round at 25 s counts it).
        let again = still(8, |_, _| 0.0, |r, _| Some(u64::from(r == 4)));
        assert_eq!(again, [0, 5, 10, 15, 20, 0, 5, 10, 15]);
    }

    /// Rank 0 in an fsync (or a close on NFS) for rounds 2 to 6, moving no byte until it
    /// returns, the others waiting for it: no stall while it waits there; once it is out and
    /// every rank sits still again, the stall counts from there.
    #[test]
    fn a_rank_in_uninterruptible_sleep_is_not_still() {
        let fsync = still_late(
            9,
            |_, _| 0.0,
            |_, _| Some(0),
            |r, rank| rank == 0 && (2..=6).contains(&r),
            |_, _| false,
        );
        assert_eq!(fsync, [0, 5, 0, 0, 0, 0, 0, 5, 10, 15]);
    }

    /// A node whose sample misses a round (herd's host loaded, hundreds of nodes) does not
    /// start a stuck job's stall over: at 254 nodes, some node is late nearly every round,
    /// and the hang would never be found. Nor does it hide a rank that moved meanwhile: the
    /// late samples come with the next one, and the round's shares span them all.
    #[test]
    fn a_node_answering_late_neither_ends_a_stall_nor_hides_a_move() {
        let late = |r: usize, node: usize| node == 1 && [3, 5, 6].contains(&r);
        let stuck = still_late(9, |_, _| 0.0, |_, _| Some(0), |_, _| false, late);
        assert_eq!(stuck, [0, 5, 10, 10, 20, 20, 20, 35, 40, 45]);
        // Rank 2 (node 1) writes a byte in round 4, while its node is late in rounds 5 and
        // 6: the sample of round 7 shows it, and the stall starts over from there.
        let moved =
            still_late(9, |_, _| 0.0, |r, rank| Some(u64::from(rank == 2 && r == 4)), |_, _| false, late);
        assert_eq!(moved, [0, 5, 10, 10, 20, 20, 20, 0, 5, 10]);
        // A checkpoint by rank 0 on a node late every other round never looks like a stall.
        let busy_late = |r: usize, node: usize| node == 0 && r % 2 == 1;
        let checkpoint =
            still_late(9, |_, _| 0.0, |_, rank| Some(u64::from(rank == 0) << 20), |_, _| false, busy_late);
        assert!(checkpoint.iter().all(|&s| s == 0), "{checkpoint:?}");
    }
}
