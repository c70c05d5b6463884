//! Reading failures out of what nodes printed. Pure.

/// Words that mark a line as the likely reason a process failed.
const ERROR_MARKERS: &[&str] = &[
    "Error",
    "error:",
    "ERROR",
    "Exception",
    "Traceback",
    "FAILED",
    "failed",
    "fatal",
    "Killed",
    "not found",
    "No such file",
];

/// The line that best explains a failure: the last one that looks like an error, or else the
/// last non-empty one.
pub fn last_error_line(tail: &[String]) -> Option<String> {
    let non_empty = || tail.iter().rev().filter(|l| !l.trim().is_empty());
    non_empty()
        .find(|l| ERROR_MARKERS.iter().any(|m| l.contains(m)))
        .or_else(|| non_empty().next())
        .map(|l| l.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn prefers_the_last_error_looking_line() {
        let tail = lines(&[
            "Traceback (most recent call last):",
            "  File \"train.py\", line 3",
            "SyntaxError: invalid syntax",
            "",
            "[2026-11-30 10:00:00] torch.distributed.elastic: exiting",
        ]);
        assert_eq!(last_error_line(&tail).as_deref(), Some("SyntaxError: invalid syntax"));
    }

    #[test]
    fn falls_back_to_the_last_line() {
        assert_eq!(last_error_line(&lines(&["a", "b", "  "])).as_deref(), Some("b"));
        assert_eq!(last_error_line(&[]), None);
    }
}
