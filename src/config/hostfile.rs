//! DeepSpeed/MPI hostfiles (`nodes_from = "hostfile:PATH"`), a pure function of the text.
//!
//! ```text
//! # comments run from '#' to the end of the line, anywhere
//! gpu-01 slots=8
//! gpu-02 slots=8   # slots: this node's process count
//! gpu-03           # no slots: job.nproc_per_node
//! ```
//!
//! One host per line, in rank order; blank lines are skipped. `max_slots=N` (Open MPI) is
//! accepted and ignored. Hosts pass the same check as `[[nodes]]` hosts ([`super::check_host`]);
//! hostlist expressions are not expanded here, as neither DeepSpeed nor MPI would.

use std::collections::HashMap;
use std::ops::Range;

/// One line of a hostfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostfileEntry {
    pub host: String,
    /// `slots=N`; `None`: `job.nproc_per_node`.
    pub slots: Option<u32>,
}

/// Why a hostfile is not valid. `span` is the byte range of the offending text in the file,
/// `None` when the problem is the file as a whole (it lists no host).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HostfileError {
    pub message: String,
    pub span: Option<Range<usize>>,
}

impl HostfileError {
    fn at(span: Range<usize>, message: impl Into<String>) -> Self {
        HostfileError { message: message.into(), span: Some(span) }
    }
}

/// Parses a hostfile into its hosts, in file order.
pub fn parse(text: &str) -> Result<Vec<HostfileEntry>, HostfileError> {
    let mut entries = Vec::new();
    // host -> 1-based line it was first listed on
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut line_start = 0;
    for (index, raw_line) in text.split('\n').enumerate() {
        let offset = line_start;
        line_start += raw_line.len() + 1;
        let line = raw_line.split('#').next().unwrap_or_default();
        let mut words = words(line).map(|(at, w)| (offset + at, w));
        let Some((host_at, host)) = words.next() else {
            continue;
        };
        let host_span = host_at..host_at + host.len();
        if let Err(why) = super::check_host(host) {
            return Err(HostfileError::at(host_span, format!("invalid host {}: {why}", token(host))));
        }
        let slots = slots(words)?;
        if let Some(first) = seen.get(host) {
            return Err(HostfileError::at(
                host_span,
                format!("duplicate host {}: already listed on line {first}", token(host)),
            ));
        }
        seen.insert(host.to_string(), index + 1);
        entries.push(HostfileEntry { host: host.to_string(), slots });
    }
    if entries.is_empty() {
        return Err(HostfileError {
            message: "the hostfile lists no hosts (expected lines like `gpu-01 slots=8`)".to_string(),
            span: None,
        });
    }
    Ok(entries)
}

/// What follows a host on its line: `slots=N` at most once (and `max_slots`, ignored).
fn slots<'a>(words: impl Iterator<Item = (usize, &'a str)>) -> Result<Option<u32>, HostfileError> {
    let mut slots = None;
    for (at, word) in words {
        let span = at..at + word.len();
        match word.split_once('=') {
            Some(("slots", value)) => {
                if slots.is_some() {
                    return Err(HostfileError::at(span, "slots is given twice on this line"));
                }
                match value.parse::<u32>() {
                    Ok(n) if (1..=super::MAX_NPROC).contains(&n) => slots = Some(n),
                    Ok(n) if n >= 1 => {
                        return Err(HostfileError::at(
                            span,
                            format!("slots must be at most {}, found {n}", super::MAX_NPROC),
                        ))
                    }
                    _ => {
                        return Err(HostfileError::at(
                            span,
                            format!("slots must be a positive integer, found {}", token(value)),
                        ))
                    }
                }
            }
            Some(("max_slots", _)) => {}
            _ => {
                return Err(HostfileError::at(
                    span,
                    format!("unexpected {} after the host: expected slots=N", token(word)),
                ))
            }
        }
    }
    Ok(slots)
}

/// The whitespace-separated words of `line`, with their byte offsets.
fn words(line: &str) -> impl Iterator<Item = (usize, &str)> {
    line.split(|c: char| c.is_ascii_whitespace())
        .scan(0, |at, word| {
            let start = *at;
            *at += word.len() + 1;
            Some((start, word))
        })
        .filter(|(_, w)| !w.is_empty())
}

/// A word of the hostfile as an error shows it: quoted, escaped, and cut after 40 characters.
/// The file may be any file; an error shows no more of it than this.
fn token(word: &str) -> String {
    const MAX: usize = 40;
    match word.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{:?}...", &word[..cut]),
        None => format!("{word:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(host: &str, slots: Option<u32>) -> HostfileEntry {
        HostfileEntry { host: host.to_string(), slots }
    }

    /// The message and the text the span covers.
    fn err(text: &str) -> (String, Option<&str>) {
        let e = parse(text).expect_err("expected an error");
        (e.message, e.span.map(|s| &text[s]))
    }

    #[test]
    fn hosts_slots_comments_and_blank_lines() {
        let text = "# a comment\n\ngpu-01 slots=8\n  gpu-02\tslots=4   # trailing\r\ngpu-03\n#gpu-04 slots=1\n10.0.0.5 slots=2 max_slots=4\n";
        assert_eq!(
            parse(text).unwrap(),
            [
                entry("gpu-01", Some(8)),
                entry("gpu-02", Some(4)),
                entry("gpu-03", None),
                entry("10.0.0.5", Some(2)),
            ]
        );
    }

    #[test]
    fn order_is_kept() {
        let hosts: Vec<String> = parse("c\nb\na").unwrap().into_iter().map(|e| e.host).collect();
        assert_eq!(hosts, ["c", "b", "a"]);
    }

    #[test]
    fn bad_slots() {
        assert_eq!(
            err("a slots=x\n"),
            ("slots must be a positive integer, found \"x\"".into(), Some("slots=x"))
        );
        assert_eq!(
            err("a slots=0\n"),
            ("slots must be a positive integer, found \"0\"".into(), Some("slots=0"))
        );
        assert_eq!(
            err("a slots=-1\n"),
            ("slots must be a positive integer, found \"-1\"".into(), Some("slots=-1"))
        );
        assert_eq!(
            err("a slots=\n"),
            ("slots must be a positive integer, found \"\"".into(), Some("slots="))
        );
        assert_eq!(err("a slots=1 slots=2\n"), ("slots is given twice on this line".into(), Some("slots=2")));
        assert_eq!(
            err("a\nb slots = 4\n"),
            ("unexpected \"slots\" after the host: expected slots=N".into(), Some("slots"))
        );
    }

    #[test]
    fn duplicates_name_the_first_line() {
        assert_eq!(
            err("a\n# x\nb slots=2\nb slots=2\n"),
            ("duplicate host \"b\": already listed on line 3".into(), Some("b"))
        );
    }

    #[test]
    fn hosts_are_checked_like_nodes() {
        assert_eq!(
            err("ok\n-oProxyCommand=x slots=1\n"),
            (
                "invalid host \"-oProxyCommand=x\": a host may not start with '-'".into(),
                Some("-oProxyCommand=x")
            )
        );
        assert_eq!(
            err("user@h\n"),
            (
                "invalid host \"user@h\": '@' is not allowed (only letters, digits and . _ : % - are)".into(),
                Some("user@h")
            )
        );
    }

    #[test]
    fn empty_hostfiles() {
        let want = ("the hostfile lists no hosts (expected lines like `gpu-01 slots=8`)".to_string(), None);
        assert_eq!(err(""), want);
        assert_eq!(err("\n  \n# only comments\n"), want);
    }
}
