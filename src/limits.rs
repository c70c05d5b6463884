//! herd's open-file limit: every command that reaches nodes raises its soft `RLIMIT_NOFILE`
//! to the hard limit (as Go's runtime and most servers do), and refuses to start, before any
//! connection, when even the hard limit is too low for its nodes. The decision is pure
//! (`decide`); `raise_for` reads and sets the limit.

/// Descriptors herd holds whatever the node count: stdio, the async runtime (epoll, its
/// eventfd and signal pipe), the run's log files, `events.jsonl`, the lock, the terminal.
/// Measured: 24 at the peak of a `herd run` on 1 node; the rest is room.
pub const BASE_FDS: u64 = 64;

/// Descriptors one node costs herd at the peak of a command over SSH, counted in herd's own
/// `/proc/PID/fd` every 20 ms (each node's `ssh` master is a process of its own, with its own
/// table, not counted here): `herd run` of a `command` job with its preflight (herd's
/// defaults), whose peak was above `exec`'s, `doctor`'s and `kill`'s when the four were
/// measured side by side (issue 26: they hold no log files), on one sshd answering on N addresses under `ulimit -n 1024`
/// (BENCHMARKS.md §14; `BENCH_SCALE=16,64,128,252 cargo bench --bench herd_bench -- scale`,
/// 2026-12-04, a 2-core machine):
///
/// | nodes | 16 | 64 | 128 | 252 |
/// |---|---|---|---|---|
/// | descriptors at most | 98 | 290 | 534 | 1,051 |
///
/// By least squares, 4.0 a node and 29 fixed (4.2 a node at 252, fixed included). 5 is that
/// with a quarter more for a peak that falls between two samples, and BASE_FDS twice the
/// fixed part: 1,324 at 252 nodes against the 1,051 measured; a hard limit of 4,096 takes 806
/// nodes, which would need about 3,250. Re-measure when what a node holds changes.
pub const PER_NODE_FDS: u64 = 5;

/// What herd does with its open-file limit before it contacts `nodes` nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Raise the soft limit to the hard one (`to`).
    Raise { to: u64 },
    /// The soft limit is the hard one already, and enough.
    Keep,
    /// Even the hard limit is too low: refuse, before any connection.
    TooLow(TooLow),
}

/// Why herd refuses to start: the hard limit on open files is below what its nodes need.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{nodes} nodes need about {needed} open files in herd ({BASE_FDS} + {PER_NODE_FDS} per node), \
     but this shell's hard limit is {hard}: raise it (`ulimit -Hn {needed}` as root, or a \
     `nofile` line in /etc/security/limits.conf, then log in again), or run on fewer nodes"
)]
pub struct TooLow {
    pub nodes: usize,
    pub needed: u64,
    pub hard: u64,
}

/// The descriptors herd needs for `nodes` nodes.
pub fn needed(nodes: usize) -> u64 {
    BASE_FDS.saturating_add(PER_NODE_FDS.saturating_mul(nodes as u64))
}

/// What to do with the limits `soft` and `hard` for `nodes` nodes.
pub fn decide(soft: u64, hard: u64, nodes: usize) -> Decision {
    let needed = needed(nodes);
    if hard < needed {
        Decision::TooLow(TooLow { nodes, needed, hard })
    } else if soft < hard {
        Decision::Raise { to: hard }
    } else {
        Decision::Keep
    }
}

/// The soft limit herd started with, once it has raised it (`u64::MAX`: not raised).
static STARTED_WITH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);

/// Give the processes `command` starts the soft open-file limit herd started with, not the
/// one it raised for itself: the user's job (a local agent's, a hook, or on Slurm's nodes,
/// where srun's limits are propagated to the tasks) sees the limit of the shell it came from,
/// as Go's `os/exec` does for its children.
pub fn as_started(command: &mut tokio::process::Command) {
    // SAFETY: the hook calls only getrlimit and setrlimit, which are async-signal-safe.
    unsafe {
        command.pre_exec(in_child());
    }
}

/// [`as_started`] for a `std` command.
pub fn as_started_std(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: as in `as_started`.
    unsafe {
        command.pre_exec(in_child());
    }
}

/// What a child runs before its exec: the soft limit put back, if herd raised it.
fn in_child() -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
    let soft = STARTED_WITH.load(std::sync::atomic::Ordering::Relaxed);
    move || {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: both calls read or write only `lim`, on this stack.
        if soft != u64::MAX
            && unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0
            && soft < lim.rlim_cur
        {
            lim.rlim_cur = soft;
            // SAFETY: as above.
            unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
        }
        Ok(())
    }
}

/// How many log files a run of `nodes` nodes may hold open at once (`output::files`): half of
/// what its soft limit leaves past what the nodes need, between 64 (within BASE_FDS) and
/// 4,096. Enough for every node and rank log of a few hundred nodes, so that their writes do
/// not close and reopen files; bounded past that.
pub fn log_files(nodes: usize) -> usize {
    log_files_within(soft().unwrap_or(0), nodes)
}

/// herd's soft open-file limit now; `None` when it cannot be read.
pub fn soft() -> Option<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given, which lives on this stack.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0).then_some(lim.rlim_cur)
}

fn log_files_within(soft: u64, nodes: usize) -> usize {
    let left = soft.saturating_sub(BASE_FDS + PER_NODE_FDS * nodes as u64) / 2;
    left.clamp(64, 4096) as usize
}

/// Raises herd's soft open-file limit to its hard one; refuses when that is too low for
/// `nodes`. A limit that cannot be read or set is left as it is, with a warning: the
/// connections will say if it was too low.
pub fn raise_for(nodes: usize) -> Result<(), TooLow> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given, which lives on this stack.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        tracing::warn!("cannot read the open-file limit: {}", std::io::Error::last_os_error());
        return Ok(());
    }
    match decide(lim.rlim_cur, lim.rlim_max, nodes) {
        Decision::TooLow(e) => Err(e),
        Decision::Keep => Ok(()),
        Decision::Raise { to } => {
            let new = libc::rlimit { rlim_cur: to, rlim_max: lim.rlim_max };
            // SAFETY: setrlimit only reads the struct it is given.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) } != 0 {
                tracing::warn!(
                    "cannot raise the open-file limit from {} to {to}: {}",
                    lim.rlim_cur,
                    std::io::Error::last_os_error()
                );
            } else {
                STARTED_WITH.store(lim.rlim_cur, std::sync::atomic::Ordering::Relaxed);
                tracing::debug!("open-file limit raised from {} to {to}", lim.rlim_cur);
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        assert_eq!(decide(1024, 524_288, 254), Decision::Raise { to: 524_288 });
    }

    #[test]
    fn a_soft_limit_at_the_hard_one_is_kept() {
        assert_eq!(decide(4096, 4096, 3), Decision::Keep);
    }

    #[test]
    fn a_hard_limit_below_the_need_is_refused_with_the_numbers() {
        let need = needed(254);
        assert_eq!(need, BASE_FDS + 254 * PER_NODE_FDS);
        let Decision::TooLow(e) = decide(64, 64, 254) else { panic!("not refused") };
        assert_eq!(e, TooLow { nodes: 254, needed: need, hard: 64 });
        let msg = e.to_string();
        for part in ["254 nodes", &need.to_string(), "hard limit is 64", "ulimit -Hn", "limits.conf"] {
            assert!(msg.contains(part), "{part:?} not in {msg}");
        }
    }

    #[test]
    fn a_hard_limit_exactly_at_the_need_is_enough() {
        let need = needed(100);
        assert_eq!(decide(need, need, 100), Decision::Keep);
        assert!(matches!(decide(need - 1, need - 1, 100), Decision::TooLow(_)));
    }

    #[test]
    fn one_node_fits_the_smallest_usual_limit() {
        // 1024 is the usual soft and often the hard limit of a login: a small run must not be
        // refused there.
        assert_eq!(decide(1024, 1024, 64), Decision::Keep);
    }

    #[test]
    fn log_files_take_half_of_what_the_nodes_leave_between_64_and_4096() {
        assert_eq!(log_files_within(1024, 8), (1024 - 64 - 8 * PER_NODE_FDS as usize) / 2);
        assert_eq!(log_files_within(1024, 200), 64, "the nodes take it all: 64, within BASE_FDS");
        assert_eq!(log_files_within(1_048_576, 1000), 4096);
        assert_eq!(log_files_within(0, 1), 64);
    }
}
