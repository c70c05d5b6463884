//! Timing policy as plain functions of the config: restart backoff, keepalives, heartbeats.

use std::time::Duration;

use crate::config::Restart;
use crate::outcome::FailureClass;

/// The delay before restart number `restarts_done + 1`: `backoff` doubling with every
/// restart, up to `backoff_max`, times a jitter factor in [0.8, 1.2) (from `unit`, a random
/// number in [0, 1)) so that many jobs failing together do not come back together.
pub fn backoff(policy: &Restart, restarts_done: u32, unit: f64) -> Duration {
    let doubled = policy.backoff.saturating_mul(1u32.checked_shl(restarts_done.min(30)).unwrap_or(u32::MAX));
    let base = doubled.min(policy.backoff_max);
    base.mul_f64(0.8 + 0.4 * unit.clamp(0.0, 1.0)).min(policy.backoff_max)
}

/// The delay before the restart that follows attempt `attempt`'s failure as `class`, if the
/// policy calls for one: restarts left, and a class it restarts on. `untrained`: the failed
/// attempts in a row, this one included, that did not train (see [`trained`]); 0 when this one
/// did. A restart after an attempt that trained is a new fault's, not a crash loop's: it starts
/// at once, after a jitter under [`QUICK_RESTART`], and the doubling starts over. A long run
/// meets a fault every hour or two; waiting minutes after each would cost more than the faults.
pub fn restart_delay(
    policy: &Restart,
    attempt: u32,
    untrained: u32,
    class: FailureClass,
    unit: f64,
) -> Option<Duration> {
    let delay = match untrained.checked_sub(1) {
        None => QUICK_RESTART.mul_f64(unit.clamp(0.0, 1.0)).min(policy.backoff),
        Some(doubled) => backoff(policy, doubled, unit),
    };
    (attempt < policy.max_restarts && policy.on.contains(&class)).then_some(delay)
}

/// The most a restart after an attempt that trained waits: a jitter, so that many jobs failing
/// together (a switch's reboot) do not come back at the same instant.
pub const QUICK_RESTART: Duration = Duration::from_secs(1);

/// Whether a failed attempt trained: it made progress (a line from a rank, or one matching
/// `restart.progress_pattern`) and kept going for `trained_for`, at least `restart.backoff`,
/// before it failed. One that failed before that may be a crash loop (a bad node, a broken
/// config), which the doubling backoff slows.
pub fn trained(policy: &Restart, trained_for: Option<Duration>) -> bool {
    trained_for.is_some_and(|t| t >= policy.backoff)
}

/// SSH keepalive interval, in whole seconds as OpenSSH takes it: the connection drops after
/// 3 unanswered keepalives, so a quarter of the timeout detects a dead node within it.
pub fn keepalive_interval(heartbeat_timeout: Duration) -> Duration {
    Duration::from_secs((heartbeat_timeout.as_secs() / 4).max(1))
}

/// How herd's SSH masters behave for a run: keepalives from the heartbeat timeout, and an idle
/// expiry longer than any wait of herd's with no channel open on a node (a slow login
/// elsewhere, a restart's backoff, a lost node awaited), never less than 30 s.
pub fn connect_options(policy: &Restart, login_timeout: Duration) -> ConnectOptions {
    const MARGIN: Duration = Duration::from_secs(30);
    let longest_wait = login_timeout.max(policy.backoff_max).max(policy.node_wait);
    ConnectOptions {
        alive_interval: keepalive_interval(policy.heartbeat_timeout),
        idle_persist: longest_wait + MARGIN,
    }
}

/// How much longer than `restart.heartbeat_timeout` herd waits at most for a node whose
/// silence is not its own (see `supervisor::attempt::extra_wait`): this many timeouts more.
pub const LATE_CAP_TIMEOUTS: u32 = 3;

/// How long an agent waits for a word from herd (a `beat`, sent every heartbeat) before it
/// takes herd for gone and ends its job (its fence): a timeout past the longest herd waits
/// for a silent node, so that herd has always given a node up before the node gives herd up,
/// and a job herd still counts on is never ended by a late beat. 75 s by default.
pub fn fence(heartbeat_timeout: Duration) -> Duration {
    heartbeat_timeout * (LATE_CAP_TIMEOUTS + 2)
}

/// How often the agent says it is alive: several times per timeout.
pub fn heartbeat_interval(heartbeat_timeout: Duration) -> Duration {
    Duration::from_secs((heartbeat_timeout.as_secs() / 5).max(1))
}

/// Grace before SIGKILL as the agent takes it: whole seconds, at least one.
pub fn grace_secs(d: Duration) -> u64 {
    d.as_secs().max(1)
}

/// How herd's SSH master connections behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    /// SSH keepalives: the connection counts as lost after three unanswered ones.
    pub alive_interval: Duration,
    /// How long a master stays up with no channel open (ControlPersist). herd must never
    /// outwait it while it still needs the connection (a slow login elsewhere, a restart's
    /// backoff, waiting for a lost node); and a master that herd, killed, left behind exits
    /// by itself after it.
    pub idle_persist: Duration,
}

/// `resume_args` for a restart: `{latest:GLOB}` replaced by `found`, the newest match. No
/// match: no resume args at all (the job starts afresh rather than fails).
pub fn resume_args(args: &[String], found: Option<&str>) -> Vec<String> {
    use crate::config::{latest_glob, LATEST};
    let needs = args.iter().any(|a| latest_glob(a).is_some());
    match (needs, found) {
        (false, _) => args.to_vec(),
        (true, None) => Vec::new(),
        (true, Some(path)) => args
            .iter()
            .map(|a| match latest_glob(a) {
                Some(glob) => a.replacen(&format!("{LATEST}{glob}}}"), path, 1),
                None => a.clone(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_args_take_the_newest_checkpoint_or_are_dropped() {
        let args = vec!["--resume".to_string(), "{latest:ckpt/step_*}".to_string()];
        assert_eq!(crate::config::latest_glob(&args[1]), Some("ckpt/step_*"));
        assert_eq!(crate::config::latest_glob("--x={latest:}"), None);
        assert_eq!(resume_args(&args, Some("ckpt/step_40")), ["--resume", "ckpt/step_40"]);
        assert_eq!(resume_args(&args, None), Vec::<String>::new());
        let inline = vec!["--resume={latest:c/*}/model.pt".to_string()];
        assert_eq!(resume_args(&inline, Some("c/9")), ["--resume=c/9/model.pt"]);
        let plain = vec!["--resume".to_string()];
        assert_eq!(resume_args(&plain, None), ["--resume"]);
    }

    fn policy(backoff: u64, max: u64) -> Restart {
        Restart {
            backoff: Duration::from_secs(backoff),
            backoff_max: Duration::from_secs(max),
            ..Restart::default()
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_maximum() {
        let p = policy(10, 60);
        let mid = |n| backoff(&p, n, 0.5);
        assert_eq!(mid(0), Duration::from_secs(10));
        assert_eq!(mid(1), Duration::from_secs(20));
        assert_eq!(mid(2), Duration::from_secs(40));
        assert_eq!(mid(3), Duration::from_secs(60));
        assert_eq!(mid(40), Duration::from_secs(60));
    }

    #[test]
    fn jitter_stays_within_twenty_percent_and_under_the_maximum() {
        let p = policy(10, 60);
        assert_eq!(backoff(&p, 0, 0.0), Duration::from_secs(8));
        assert!(backoff(&p, 0, 0.999) < Duration::from_secs(12));
        assert_eq!(backoff(&p, 5, 0.999), Duration::from_secs(60));
        assert_eq!(backoff(&policy(0, 0), 3, 0.7), Duration::ZERO);
    }

    #[test]
    fn a_restart_needs_restarts_left_and_a_class_the_policy_restarts_on() {
        let p = Restart { max_restarts: 2, on: vec![FailureClass::Comm], ..policy(10, 60) };
        assert_eq!(restart_delay(&p, 0, 1, FailureClass::Comm, 0.5), Some(Duration::from_secs(10)));
        assert_eq!(restart_delay(&p, 1, 2, FailureClass::Comm, 0.5), Some(Duration::from_secs(20)));
        assert_eq!(restart_delay(&p, 2, 3, FailureClass::Comm, 0.5), None);
        assert_eq!(restart_delay(&p, 0, 1, FailureClass::User, 0.5), None);
    }

    /// An attempt that trained is followed by a restart at once (a jitter under a second), and
    /// the doubling starts over; those that fail before training back off as before.
    #[test]
    fn a_restart_after_an_attempt_that_trained_waits_no_backoff() {
        let p = Restart { max_restarts: 100, ..policy(10, 60) };
        let comm = FailureClass::Comm;
        assert_eq!(restart_delay(&p, 7, 0, comm, 0.5), Some(Duration::from_millis(500)));
        assert!(restart_delay(&p, 7, 0, comm, 0.999).unwrap() < QUICK_RESTART);
        assert_eq!(restart_delay(&p, 8, 1, comm, 0.5), Some(Duration::from_secs(10)));
        assert_eq!(restart_delay(&p, 9, 2, comm, 0.5), Some(Duration::from_secs(20)));
        // Never more than the backoff itself, when that is under a second.
        let fast = Restart { backoff: Duration::from_millis(200), ..p.clone() };
        assert_eq!(restart_delay(&fast, 0, 0, comm, 0.9), Some(Duration::from_millis(200)));
        let s = Duration::from_secs;
        assert!(trained(&p, Some(s(10))), "10 s of training is one backoff");
        assert!(!trained(&p, Some(s(9))));
        assert!(!trained(&p, None), "no progress at all: a loop, however long it ran");
    }

    #[test]
    fn a_master_outlives_every_wait_of_herds() {
        let o = connect_options(&Restart::default(), Duration::from_secs(300));
        assert_eq!(o.idle_persist, Duration::from_secs(330));
        let p = Restart { node_wait: Duration::from_secs(900), ..Restart::default() };
        assert_eq!(connect_options(&p, Duration::from_secs(60)).idle_persist, Duration::from_secs(930));
        let quick = Restart { node_wait: Duration::ZERO, backoff_max: Duration::ZERO, ..Restart::default() };
        assert_eq!(connect_options(&quick, Duration::ZERO).idle_persist, Duration::from_secs(30));
    }

    #[test]
    fn keepalives_and_heartbeats_fit_the_timeout() {
        assert_eq!(keepalive_interval(Duration::from_secs(15)), Duration::from_secs(3));
        assert_eq!(keepalive_interval(Duration::from_secs(2)), Duration::from_secs(1));
        assert_eq!(heartbeat_interval(Duration::from_secs(15)), Duration::from_secs(3));
        assert_eq!(heartbeat_interval(Duration::from_secs(3)), Duration::from_secs(1));
    }

    #[test]
    fn a_node_gives_herd_up_only_after_herd_gave_the_node_up() {
        for secs in [3, 15, 60] {
            let timeout = Duration::from_secs(secs);
            let herds_longest = timeout + timeout * LATE_CAP_TIMEOUTS;
            // herd's last beat before a cut may have reached the node a heartbeat before it.
            assert!(fence(timeout) - heartbeat_interval(timeout) > herds_longest, "{secs} s");
        }
        assert_eq!(fence(Duration::from_secs(15)), Duration::from_secs(75));
    }
}
