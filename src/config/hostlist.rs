//! Hostlist expressions (Slurm-style, a pure function).
//!
//! * `gpu-[01-04]` -> `gpu-01`, `gpu-02`, `gpu-03`, `gpu-04`. Zero padding is kept: when the
//!   lower bound of a range is written with a leading zero, every number of that range is padded
//!   to its width (`[08-10]` -> `08`, `09`, `10`; `[8-10]` -> `8`, `9`, `10`).
//! * `[1,3,5-7]` is a list of numbers and ranges.
//! * `a[1-2]b[3,5]` is a cartesian product, the rightmost bracket varying fastest:
//!   `a1b3`, `a1b5`, `a2b3`, `a2b5`.
//! * Commas outside brackets separate expressions: `gpu-[01-02],cpu-01`.
//! * Order is kept as written, never sorted, and duplicates are not removed. A name without
//!   brackets is itself (`10.1.2.3`, `10.1.2.[3-5]` work).
//!
//! `compress` goes the other way, for output that names many nodes at once (as `dshbak -c`
//! and clush do): `n1,n2,n3,gpu-07` → `n[1-3],gpu-07`. Which characters a host may contain is
//! checked by the config validation.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

/// The most hosts one expression may expand to.
pub const MAX_HOSTS: usize = 100_000;

/// Why an expression could not be expanded.
///
/// `Display` is the message alone; `offset` is the byte offset within the expression where it
/// went wrong (for `n[3-1]` it points at the `3`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HostlistError {
    pub message: String,
    pub offset: usize,
}

impl HostlistError {
    fn new(offset: usize, message: impl Into<String>) -> Self {
        HostlistError { message: message.into(), offset }
    }
}

/// One piece of a single host pattern.
enum Segment<'a> {
    Literal(&'a str),
    /// A bracket: the numbers it stands for, already formatted.
    Numbers(Vec<Range>),
}

/// `lo..=hi`, each number printed with at least `width` digits.
#[derive(Clone, Copy)]
struct Range {
    lo: u64,
    hi: u64,
    width: usize,
}

impl Range {
    fn len(self) -> usize {
        usize::try_from(self.hi - self.lo).ok().and_then(|n| n.checked_add(1)).unwrap_or(usize::MAX)
    }
}

/// Expands a hostlist expression into host names, in order.
pub fn expand(expr: &str) -> Result<Vec<String>, HostlistError> {
    if expr.is_empty() {
        return Err(HostlistError::new(0, "empty hostlist expression"));
    }
    let mut patterns = Vec::new();
    let mut total: usize = 0;
    for (start, item) in split_top_level(expr)? {
        if item.is_empty() {
            let msg = if expr.len() == start && start > 0 {
                "trailing ',' (empty host name)"
            } else {
                "empty host name (two ',' in a row or a leading ',')"
            };
            return Err(HostlistError::new(start, msg));
        }
        let segments = parse_pattern(item, start)?;
        let count = segments.iter().fold(1usize, |acc, seg| match seg {
            Segment::Literal(_) => acc,
            Segment::Numbers(ranges) => {
                acc.saturating_mul(ranges.iter().fold(0usize, |n, r| n.saturating_add(r.len())))
            }
        });
        total = total.saturating_add(count);
        if total > MAX_HOSTS {
            return Err(HostlistError::new(start, format!("expands to more than {MAX_HOSTS} hosts")));
        }
        patterns.push(segments);
    }

    let mut hosts = Vec::with_capacity(total);
    for segments in &patterns {
        let mut prefix = String::new();
        emit(segments, &mut prefix, &mut hosts);
    }
    Ok(hosts)
}

/// Splits at commas outside brackets, checking bracket structure on the way.
/// Yields `(byte offset, item)`.
fn split_top_level(expr: &str) -> Result<Vec<(usize, &str)>, HostlistError> {
    let mut items = Vec::new();
    let mut open: Option<usize> = None;
    let mut start = 0;
    for (i, c) in expr.char_indices() {
        match c {
            '[' if open.is_some() => {
                return Err(HostlistError::new(i, "nested '[' is not allowed"));
            }
            '[' => open = Some(i),
            ']' if open.is_none() => return Err(HostlistError::new(i, "unmatched ']'")),
            ']' => open = None,
            ',' if open.is_none() => {
                items.push((start, &expr[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    if let Some(i) = open {
        return Err(HostlistError::new(i, "unclosed '[' (missing ']')"));
    }
    items.push((start, &expr[start..]));
    Ok(items)
}

/// Parses one comma-free (at top level) pattern; brackets are known to be balanced and flat.
fn parse_pattern(item: &str, base: usize) -> Result<Vec<Segment<'_>>, HostlistError> {
    let mut segments = Vec::new();
    let mut rest = item;
    let mut pos = base;
    while !rest.is_empty() {
        match rest.find('[') {
            None => {
                segments.push(Segment::Literal(rest));
                break;
            }
            Some(open) => {
                if open > 0 {
                    segments.push(Segment::Literal(&rest[..open]));
                }
                let close = open + rest[open..].find(']').expect("brackets checked");
                let inner = &rest[open + 1..close];
                segments.push(Segment::Numbers(parse_ranges(inner, pos + open + 1)?));
                pos += close + 1;
                rest = &rest[close + 1..];
            }
        }
    }
    Ok(segments)
}

/// Parses the inside of a bracket: `1,3,5-7`. `base` is the offset of `inner` in the expression.
fn parse_ranges(inner: &str, base: usize) -> Result<Vec<Range>, HostlistError> {
    if inner.is_empty() {
        return Err(HostlistError::new(base - 1, "empty brackets '[]'"));
    }
    let mut ranges = Vec::new();
    let mut count: usize = 0;
    let mut start = 0;
    for part in inner.split(',') {
        let at = base + start;
        start += part.len() + 1;
        if part.is_empty() {
            return Err(HostlistError::new(at, "empty element in brackets (stray ',')"));
        }
        let (lo_s, hi_s) = match part.split_once('-') {
            Some((lo, hi)) => (lo, Some(hi)),
            None => (part, None),
        };
        let lo = parse_number(lo_s, at)?;
        let hi = match hi_s {
            Some(hi_s) => parse_number(hi_s, at + lo_s.len() + 1)?,
            None => lo,
        };
        if lo > hi {
            return Err(HostlistError::new(
                at,
                format!("range {lo_s}-{} is descending", hi_s.unwrap_or_default()),
            ));
        }
        let width = if lo_s.starts_with('0') { lo_s.len() } else { 0 };
        let range = Range { lo, hi, width };
        count = count.saturating_add(range.len());
        if count > MAX_HOSTS {
            return Err(HostlistError::new(at, format!("expands to more than {MAX_HOSTS} hosts")));
        }
        ranges.push(range);
    }
    Ok(ranges)
}

fn parse_number(s: &str, at: usize) -> Result<u64, HostlistError> {
    if s.is_empty() {
        return Err(HostlistError::new(at, "expected a number, found nothing"));
    }
    if let Some((i, _)) = s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        return Err(HostlistError::new(at + i, format!("expected a number, found {s:?}")));
    }
    s.parse::<u64>().map_err(|_| HostlistError::new(at, format!("number {s} is too large")))
}

fn emit(segments: &[Segment<'_>], prefix: &mut String, out: &mut Vec<String>) {
    let Some((first, rest)) = segments.split_first() else {
        out.push(prefix.clone());
        return;
    };
    let len = prefix.len();
    match first {
        Segment::Literal(s) => {
            prefix.push_str(s);
            emit(rest, prefix, out);
        }
        Segment::Numbers(ranges) => {
            for r in ranges {
                for n in r.lo..=r.hi {
                    let _ = write!(prefix, "{n:0width$}", width = r.width);
                    emit(rest, prefix, out);
                    prefix.truncate(len);
                }
            }
        }
    }
    prefix.truncate(len);
}

/// Hosts that differ only in their last number, with one prefix, one suffix and one padding.
struct Run<'a> {
    prefix: &'a str,
    suffix: &'a str,
    /// Digits of zero-padded numbers, or 0.
    width: usize,
    numbers: Vec<u64>,
}

/// A host around its last run of digits: (prefix, digits, suffix).
type Split<'a> = (&'a str, &'a str, &'a str);

/// `host` split around its last run of digits; `None` without digits, or with a number too
/// long to hold.
fn split_number(host: &str) -> Option<Split<'_>> {
    let end = host.rfind(|c: char| c.is_ascii_digit())? + 1;
    let start = host[..end].rfind(|c: char| !c.is_ascii_digit()).map_or(0, |i| i + 1);
    if end - start > 18 {
        return None;
    }
    Some((&host[..start], &host[start..end], &host[end..]))
}

/// Hosts as one hostlist expression, the inverse of `expand` up to order and duplicates:
/// hosts that differ only in their last number share brackets (`node[1-3]`, `gpu-[01-02,04]`,
/// `tux[1-2]-ib`). Groups come in the order of their first host; numbers within a bracket are
/// sorted, and a repeated host is named once. Which hosts share a bracket does not depend on
/// their order, so compressing what an expression expands to gives it back.
pub fn compress<S: AsRef<str>>(hosts: &[S]) -> String {
    let mut seen = HashSet::new();
    let hosts: Vec<(&str, Option<Split<'_>>)> =
        hosts.iter().map(AsRef::as_ref).filter(|h| seen.insert(*h)).map(|h| (h, split_number(h))).collect();
    let padded = |digits: &str| digits.len() > 1 && digits.starts_with('0');
    // An unpadded number as long as a padded one reads the same padded (`n[08-10]`): it joins
    // their run, unless some number of its prefix and suffix could not (`n[08-09],n[7,10]`).
    let mut widths: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
    for (prefix, digits, suffix) in hosts.iter().filter_map(|(_, s)| *s).filter(|s| padded(s.1)) {
        widths.entry((prefix, suffix)).or_default().push(digits.len());
    }
    let mut joins: HashMap<(&str, &str), bool> = HashMap::new();
    for (prefix, digits, suffix) in hosts.iter().filter_map(|(_, s)| *s) {
        let fits = padded(digits) || widths.get(&(prefix, suffix)).is_some_and(|w| w.contains(&digits.len()));
        *joins.entry((prefix, suffix)).or_insert(true) &= fits;
    }
    let mut parts: Vec<Result<&str, usize>> = Vec::new();
    let mut runs: Vec<Run<'_>> = Vec::new();
    for (host, split) in &hosts {
        let Some((prefix, digits, suffix)) = *split else {
            parts.push(Ok(host));
            continue;
        };
        let n: u64 = digits.parse().expect("at most 18 digits");
        let width = if padded(digits) || joins[&(prefix, suffix)] { digits.len() } else { 0 };
        match runs.iter_mut().find(|r| r.prefix == prefix && r.suffix == suffix && r.width == width) {
            Some(run) => run.numbers.push(n),
            None => {
                parts.push(Err(runs.len()));
                runs.push(Run { prefix, suffix, width, numbers: vec![n] });
            }
        }
    }
    let texts: Vec<String> = parts
        .into_iter()
        .map(|p| match p {
            Ok(host) => host.to_string(),
            Err(i) => run_text(&mut runs[i]),
        })
        .collect();
    texts.join(",")
}

/// One run as `prefix[ranges]suffix`, or as its one host.
fn run_text(run: &mut Run<'_>) -> String {
    run.numbers.sort_unstable();
    run.numbers.dedup();
    let w = run.width;
    if let [n] = run.numbers[..] {
        return format!("{}{n:0w$}{}", run.prefix, run.suffix);
    }
    let mut ranges: Vec<String> = Vec::new();
    let ns = &run.numbers;
    let mut i = 0;
    while i < ns.len() {
        let start = ns[i];
        while i + 1 < ns.len() && ns[i + 1] == ns[i] + 1 {
            i += 1;
        }
        ranges.push(if ns[i] == start {
            format!("{start:0w$}")
        } else {
            format!("{start:0w$}-{:0w$}", ns[i])
        });
        i += 1;
    }
    format!("{}[{}]{}", run.prefix, ranges.join(","), run.suffix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(expr: &str) -> Vec<String> {
        expand(expr).unwrap_or_else(|e| panic!("{expr}: {e} at {}", e.offset))
    }

    fn err(expr: &str) -> (String, usize) {
        match expand(expr) {
            Ok(v) => panic!("{expr} expanded to {v:?}"),
            Err(e) => (e.message, e.offset),
        }
    }

    #[test]
    fn plain_names_are_themselves() {
        assert_eq!(ok("gpu-01"), ["gpu-01"]);
        assert_eq!(ok("10.1.2.3"), ["10.1.2.3"]);
        assert_eq!(ok("fe80::1%eth0"), ["fe80::1%eth0"]);
    }

    #[test]
    fn ranges_with_zero_padding() {
        assert_eq!(ok("gpu-[01-04]"), ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]);
        assert_eq!(ok("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(ok("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(ok("n[098-101]"), ["n098", "n099", "n100", "n101"]);
        assert_eq!(ok("n[007]"), ["n007"]);
        assert_eq!(ok("n[0-2]"), ["n0", "n1", "n2"]);
        assert_eq!(ok("n[5-5]"), ["n5"]);
    }

    #[test]
    fn lists_inside_brackets() {
        assert_eq!(ok("n[1,3,5-7]"), ["n1", "n3", "n5", "n6", "n7"]);
        assert_eq!(ok("n[3,1]"), ["n3", "n1"], "order kept, not sorted");
    }

    #[test]
    fn cartesian_product_rightmost_fastest() {
        assert_eq!(ok("a[1-2]b[3,5]"), ["a1b3", "a1b5", "a2b3", "a2b5"]);
        assert_eq!(ok("[1-2][1-2]"), ["11", "12", "21", "22"]);
        assert_eq!(ok("r[1-2]-gpu"), ["r1-gpu", "r2-gpu"]);
    }

    #[test]
    fn top_level_commas_separate() {
        assert_eq!(ok("gpu-[01-02],cpu-01"), ["gpu-01", "gpu-02", "cpu-01"]);
        assert_eq!(ok("b,a,c"), ["b", "a", "c"]);
        assert_eq!(ok("n[1,2],m"), ["n1", "n2", "m"]);
    }

    /// What Slurm prints in SLURM_JOB_NODELIST, expanded in Slurm's order.
    #[test]
    fn slurm_nodelists() {
        assert_eq!(ok("gpu-[01-04,07],cpu9"), ["gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-07", "cpu9"]);
        assert_eq!(ok("r[1-2]n[01-02]"), ["r1n01", "r1n02", "r2n01", "r2n02"]);
        assert_eq!(ok("tux[1-2]-ib,login"), ["tux1-ib", "tux2-ib", "login"]);
        assert_eq!(ok("node[001-002,010]"), ["node001", "node002", "node010"]);
    }

    #[test]
    fn ipv4_ranges() {
        assert_eq!(ok("10.1.2.[3-5]"), ["10.1.2.3", "10.1.2.4", "10.1.2.5"]);
    }

    #[test]
    fn errors_with_offsets() {
        assert_eq!(err("n[3-1]"), ("range 3-1 is descending".into(), 2));
        assert_eq!(err("n[1-"), ("unclosed '[' (missing ']')".into(), 1));
        assert_eq!(err("n[x]"), ("expected a number, found \"x\"".into(), 2));
        assert_eq!(err("n[1-x]"), ("expected a number, found \"x\"".into(), 4));
        assert_eq!(err("n[1-]"), ("expected a number, found nothing".into(), 4));
        assert_eq!(err("n[]"), ("empty brackets '[]'".into(), 1));
        assert_eq!(err("n]"), ("unmatched ']'".into(), 1));
        assert_eq!(err("n[1[2]]"), ("nested '[' is not allowed".into(), 3));
        assert_eq!(err(""), ("empty hostlist expression".into(), 0));
        assert_eq!(err("a,,b"), ("empty host name (two ',' in a row or a leading ',')".into(), 2));
        assert_eq!(err("a,"), ("trailing ',' (empty host name)".into(), 2));
        assert_eq!(err("n[1,]"), ("empty element in brackets (stray ',')".into(), 4));
        assert_eq!(
            err("n[99999999999999999999999]"),
            ("number 99999999999999999999999 is too large".into(), 2)
        );
    }

    #[test]
    fn cap_on_expansion() {
        assert_eq!(ok("n[1-100000]").len(), MAX_HOSTS);
        assert_eq!(err("n[1-100001]"), ("expands to more than 100000 hosts".into(), 2));
        // Products and lists are capped too, without materialising them.
        assert_eq!(err("a[1-1000]b[1-1000]"), ("expands to more than 100000 hosts".into(), 0));
        assert_eq!(err("a[1-60000],b[1-60000]"), ("expands to more than 100000 hosts".into(), 11));
        assert_eq!(err("n[0-18446744073709551615]"), ("expands to more than 100000 hosts".into(), 2));
    }

    #[test]
    fn hosts_compress_around_their_last_number() {
        assert_eq!(compress(&["n1", "n2", "n3"]), "n[1-3]");
        assert_eq!(compress(&["gpu-01", "gpu-02", "gpu-04", "cpu9"]), "gpu-[01-02,04],cpu9");
        assert_eq!(compress(&["n08", "n09", "n10", "n11"]), "n[08-11]");
        assert_eq!(compress(&["n9", "n10", "n08"]), "n[9-10],n08");
        assert_eq!(compress(&["n10", "n08", "n09"]), "n[08-10]");
        assert_eq!(compress(&["tux1-ib", "tux2-ib", "login"]), "tux[1-2]-ib,login");
        assert_eq!(compress(&["r1n01", "r1n02", "r2n01"]), "r1n[01-02],r2n01");
        assert_eq!(compress(&["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.1.7"]), "10.0.0.[1-3],10.0.1.7");
        assert_eq!(compress(&["n3", "n1", "n3", "x", "x"]), "n[1,3],x");
        assert_eq!(compress(&["n1", "n01"]), "n1,n01");
        // A host named twice is named once.
        assert_eq!(compress(&["n08", "n10", "n9", "n10"]), "n08,n[9-10]");
        assert_eq!(compress::<&str>(&[]), "");
    }

    #[test]
    fn a_long_number_is_a_plain_name() {
        let long = "n1234567890123456789";
        assert_eq!(compress(&[long, "n1"]), format!("{long},n1"));
    }

    proptest! {
        /// expand ∘ compress gives the hosts back, as a set; compress is stable under it.
        #[test]
        fn compress_then_expand_round_trips(
            hosts in proptest::collection::vec(
                "[a-c]{0,2}(-?[0-9]{1,3})?(-[a-b0-9]{1,2})?|10\\.0\\.[0-2]\\.[0-9]{1,3}", 1..40)
                .prop_filter("a host is not empty", |h| h.iter().all(|s| !s.is_empty()))
        ) {
            let compressed = compress(&hosts);
            let back = expand(&compressed).unwrap();
            let mut want = hosts.clone();
            want.sort();
            want.dedup();
            let mut got = back.clone();
            got.sort();
            prop_assert_eq!(&got, &want, "{}", compressed);
            prop_assert_eq!(back.len(), want.len(), "{} names a host twice", compressed);
            prop_assert_eq!(compress(&back), compressed);
        }
    }

    proptest! {
        #[test]
        fn distinct_names_round_trip(
            names in proptest::collection::vec("[A-Za-z0-9_][A-Za-z0-9._:%-]{0,15}", 1..20)
        ) {
            let mut distinct: Vec<String> = Vec::new();
            for n in names {
                if !distinct.contains(&n) {
                    distinct.push(n);
                }
            }
            let joined = distinct.join(",");
            prop_assert_eq!(expand(&joined).unwrap(), distinct);
        }

        #[test]
        fn ranges_match_a_loop(lo in 0u32..500, n in 0u32..50, pad in any::<bool>()) {
            let hi = lo + n;
            let lo_s = if pad { format!("0{lo}") } else { lo.to_string() };
            let got = expand(&format!("h[{lo_s}-{hi}]")).unwrap();
            let want: Vec<String> = (lo..=hi)
                .map(|i| if pad { format!("h{i:0w$}", w = lo_s.len()) } else { format!("h{i}") })
                .collect();
            prop_assert_eq!(got, want);
        }
    }
}
