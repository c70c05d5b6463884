//! Choosing the master port. The master's agent reports the ports its kernel's socket tables
//! (`/proc/net/tcp` and `tcp6`) hold, in any state, on the login that starts it, and herd
//! picks one that no socket uses. Pure.

use std::collections::BTreeSet;

use rand::Rng;

use crate::config::PortSpec;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    #[error("cannot read its socket tables (/proc/net/tcp, /proc/net/tcp6) to choose a port")]
    NoTables,
    #[error("no free port in {0}-{1}")]
    NoFreePort(u16, u16),
}

/// The master port for an attempt: the fixed one, or a free one in `range` (inclusive) that
/// no socket of the master uses (`in_use`, as its agent reported them; `None`: it could not
/// read them) and no earlier attempt of this run used (`avoid`).
pub fn choose(
    spec: PortSpec,
    range: (u16, u16),
    in_use: Option<&BTreeSet<u16>>,
    avoid: &BTreeSet<u16>,
) -> Result<u16, PortError> {
    match spec {
        PortSpec::Fixed(p) => Ok(p),
        PortSpec::Auto => {
            let used = in_use.ok_or(PortError::NoTables)?;
            pick(range, avoid, |p| !used.contains(&p)).ok_or(PortError::NoFreePort(range.0, range.1))
        }
    }
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

    #[test]
    fn choose_takes_the_fixed_port_or_a_free_one() {
        let used = BTreeSet::from([20000, 20001]);
        let none = BTreeSet::new();
        assert_eq!(choose(PortSpec::Fixed(29500), (1, 2), None, &none), Ok(29500));
        assert_eq!(choose(PortSpec::Auto, (20000, 20002), Some(&used), &none), Ok(20002));
        assert_eq!(
            choose(PortSpec::Auto, (20000, 20001), Some(&used), &none),
            Err(PortError::NoFreePort(20000, 20001))
        );
        assert_eq!(choose(PortSpec::Auto, (20000, 20001), None, &none), Err(PortError::NoTables));
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
