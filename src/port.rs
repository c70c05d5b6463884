//! Choosing the master port. On a remote master herd reads the kernel's socket tables
//! (`/proc/net/tcp` and `tcp6`) over the existing SSH connection and picks a port that no
//! socket uses; on this machine it asks portpicker. Parsing and picking are pure.

use std::collections::BTreeSet;

use rand::Rng;

/// The command that prints the master's socket tables.
pub const SOCKET_TABLES_COMMAND: &str = "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null";

/// Every local port in use (any state, so TIME_WAIT leftovers count too) in the text of
/// `/proc/net/tcp` and/or `/proc/net/tcp6`.
pub fn ports_in_use(tables: &str) -> BTreeSet<u16> {
    tables
        .lines()
        .filter_map(|line| {
            let local = line.split_whitespace().nth(1)?;
            let (_, port) = local.rsplit_once(':')?;
            u16::from_str_radix(port, 16).ok()
        })
        .collect()
}

/// A random port in `range` (inclusive) for which `usable` holds and which is not in `avoid`
/// (ports earlier attempts of this run used). Random so that two runs starting at once, or
/// an attempt after a port clash, do not keep landing on the same port.
pub fn pick(range: (u16, u16), avoid: &BTreeSet<u16>, mut usable: impl FnMut(u16) -> bool) -> Option<u16> {
    let (lo, hi) = range;
    let span = u32::from(hi) - u32::from(lo) + 1;
    let start = rand::thread_rng().gen_range(0..span);
    (0..span).map(|i| (lo as u32 + (start + i) % span) as u16).find(|&p| !avoid.contains(&p) && usable(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLES: &str = "\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:4E21 0100007F:9C40 06 00000000:00000000 03:00000F4E 00000000     0        0 0 3 0000000000000000
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:7531 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 100 0 0 10 0
";

    #[test]
    fn parses_v4_and_v6_tables_in_any_state() {
        assert_eq!(ports_in_use(TABLES), BTreeSet::from([22, 20001, 30001]));
        assert!(ports_in_use("").is_empty());
        assert!(ports_in_use("garbage\nmore garbage here").is_empty());
    }

    #[test]
    fn pick_skips_used_and_avoided_ports() {
        let used = BTreeSet::from([20000, 20001]);
        let avoid = BTreeSet::from([20002]);
        for _ in 0..50 {
            assert_eq!(pick((20000, 20003), &avoid, |p| !used.contains(&p)), Some(20003));
        }
        assert_eq!(pick((20000, 20001), &avoid, |p| !used.contains(&p)), None);
        assert_eq!(pick((65535, 65535), &BTreeSet::new(), |_| true), Some(65535));
    }

    #[test]
    fn pick_spreads_over_the_range() {
        let seen: BTreeSet<u16> =
            (0..200).filter_map(|_| pick((1000, 1009), &BTreeSet::new(), |_| true)).collect();
        assert!(seen.len() > 5, "{seen:?}");
    }
}
