//! An SSH handshake's two policies, apart from the ssh it runs: how many are in flight at once,
//! and which failures are worth another try.

use std::sync::LazyLock;
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

/// How many handshakes herd has in flight at once: 8 per core of this host, at least 16.
///
/// A handshake is CPU on both ends: OpenSSH 9.2's default key exchange (sntrup761x25519) costs
/// the client about 130 ms of CPU on the test machine. 252 handshakes started together kept
/// its two cores busy for 24 to 35 s, the first node up only after 12 s, and the sshd on the
/// far side (one process for the whole testbed, as a bastion's is for a cluster behind it)
/// had hundreds of connections queued: some waited past `ssh.connect_timeout` for their
/// banner. In turns, a handshake is quick, the first nodes are up (their logins under way) at
/// once, and the whole takes as long: the CPU was the bound either way. A node that does not
/// answer holds its turn for `connect_timeout`, as in pdsh's fanout.
fn at_once() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (8 * cores).max(16)
}

static TURNS: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(at_once()));

/// Wait for a turn to hand-shake; the turn ends when the permit is dropped.
pub async fn turn() -> SemaphorePermit<'static> {
    TURNS.acquire().await.expect("never closed")
}

/// Whether a connection tries again when the node's sshd was busy. A caller that loops on its
/// own (a reconnect before a restart, every 2 s up to its deadline; the look for nodes that
/// may rejoin, within its own bound) tries once: its deadline is its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnBusy {
    TryAgain,
    GiveUp,
}

/// How a handshake's failure says the far sshd was there but busy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Busy {
    /// It closed or reset the connection before its banner: its `MaxStartups` reached (a
    /// bastion's is 10 by default). Each try costs a round trip.
    Dropped,
    /// It sent no banner within `connect_timeout`: its accept queue full or its CPU starved,
    /// or a wedged sshd that will never answer. Each try costs the whole timeout.
    Silent,
}

/// Tries in all, for a node whose sshd dropped the connection, and for one that was silent.
pub const DROPPED_TRIES: u32 = 4;
pub const SILENT_TRIES: u32 = 2;

/// What a failed handshake's words say of the far sshd (see `Busy`), if it was busy. A refusal,
/// no route, an address that never answers, a key or a host key rejected are not busy; nor is
/// a node behind a bastion (ProxyJump) that the bastion could not reach: ssh then reports the
/// bastion's refusal to forward ("open failed", "stdio forwarding failed") before the same
/// closed connection a busy sshd gives.
fn busy(error: &str) -> Option<Busy> {
    let has = |s: &str| error.contains(s);
    if has("open failed") || has("stdio forwarding failed") {
        return None;
    }
    let before_banner = has("kex_exchange_identification") || has("ssh_exchange_identification");
    if before_banner && (has("Connection closed by remote host") || has("Connection reset by peer")) {
        Some(Busy::Dropped)
    } else if has("timed out during banner exchange") {
        Some(Busy::Silent)
    } else {
        None
    }
}

/// Whether a handshake's failure says the far sshd was there but busy.
pub fn sshd_was_busy(error: &str) -> bool {
    busy(error).is_some()
}

/// After the `tries`-th failed handshake, with `error`: how long to wait before the next, or
/// `None` to give up. Waits double from 1 s, each stretched by `jitter` (0 to 1) of itself, so
/// that the nodes a busy sshd dropped together do not come back together.
pub fn again_after(error: &str, tries: u32, jitter: f64) -> Option<Duration> {
    let most = match busy(error)? {
        Busy::Dropped => DROPPED_TRIES,
        Busy::Silent => SILENT_TRIES,
    };
    if tries >= most {
        return None;
    }
    let base = Duration::from_secs(1 << (tries.max(1) - 1));
    Some(base.mul_f64(1.0 + jitter.clamp(0.0, 1.0)))
}

/// The error a connection reports after `tries`, the last failing with `error`.
pub fn gave_up(error: String, tries: u32) -> String {
    match tries {
        0 | 1 => error,
        _ if sshd_was_busy(&error) => {
            format!("its sshd was busy on each of {tries} tries; the last: {error}")
        }
        _ => format!("{error} (on try {tries}: its sshd was busy on each try before)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLOSED: &str = "failed to connect to the remote host: kex_exchange_identification: Connection closed by remote host\r\nConnection closed by 10.0.0.2 port 22";
    const RESET: &str =
        "failed to connect to the remote host: kex_exchange_identification: read: Connection reset by peer";
    const BANNER: &str = "failed to connect to the remote host: Connection timed out during banner exchange\r\nConnection to 10.0.0.2 port 22 timed out";

    #[test]
    fn a_busy_sshd_is_one_that_dropped_the_connection_before_its_banner_or_sent_none() {
        for busy in [CLOSED, RESET, BANNER] {
            assert!(sshd_was_busy(busy), "{busy}");
        }
        for not in [
            "ssh: connect to host 10.0.0.2 port 22: Connection refused",
            "ssh: connect to host 10.0.0.2 port 22: No route to host",
            "ssh: connect to host 10.0.0.2 port 22: Connection timed out",
            "root@10.0.0.2: Permission denied (publickey).",
            "Host key verification failed.",
            "kex_exchange_identification: banner line contains invalid characters",
            // A session that had its banner, ended later: not a busy sshd's doing.
            "Connection reset by peer",
        ] {
            assert!(!sshd_was_busy(not), "{not}");
        }
    }

    #[test]
    fn a_node_behind_a_bastion_that_cannot_reach_it_is_not_busy() {
        let unreachable = "channel 0: open failed: connect failed: No route to host\r\nstdio forwarding failed\r\nkex_exchange_identification: Connection closed by remote host";
        assert!(!sshd_was_busy(unreachable));
        assert_eq!(again_after(unreachable, 1, 0.0), None);
    }

    #[test]
    fn a_dropped_connection_is_tried_four_times_a_silent_sshd_twice_waits_doubling_from_a_second() {
        let s = Duration::from_secs;
        let waits = |e| (1..=DROPPED_TRIES).map(|t| again_after(e, t, 0.0)).collect::<Vec<_>>();
        assert_eq!(waits(CLOSED), [Some(s(1)), Some(s(2)), Some(s(4)), None]);
        assert_eq!(waits(RESET), [Some(s(1)), Some(s(2)), Some(s(4)), None]);
        assert_eq!(waits(BANNER), [Some(s(1)), None, None, None], "each try costs connect_timeout");
        assert_eq!(again_after(CLOSED, 2, 0.5), Some(s(3)));
        assert_eq!(again_after(RESET, 1, 7.0), Some(s(2)), "the jitter at most doubles a wait");
    }

    #[test]
    fn the_error_after_tries_says_how_many_and_what_they_found() {
        assert_eq!(gave_up("refused".into(), 1), "refused");
        assert!(
            gave_up(CLOSED.into(), 4).starts_with("its sshd was busy on each of 4 tries; the last: failed")
        );
        assert_eq!(
            gave_up("Permission denied (publickey).".into(), 2),
            "Permission denied (publickey). (on try 2: its sshd was busy on each try before)"
        );
    }

    #[test]
    fn a_busy_sshd_has_a_fix_of_its_own() {
        assert!(crate::transport::connect_fix(CLOSED).contains("MaxStartups"));
        assert!(!crate::transport::connect_fix("Connection refused").contains("MaxStartups"));
    }

    #[test]
    fn any_other_failure_is_final_at_once() {
        assert_eq!(again_after("ssh: connect to host 10.0.0.2 port 22: Connection refused", 1, 0.3), None);
        assert_eq!(again_after("Host key verification failed.", 1, 0.3), None);
    }
}
