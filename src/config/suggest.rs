//! "Did you mean" suggestions for misspelt names (a pure function).

/// How similar (Jaro-Winkler, 0..=1) a candidate must be to be suggested. 0.8 catches a
/// dropped, doubled or swapped letter in names of four or more characters without suggesting
/// unrelated words (`mpirun` is not `torchrun`).
pub const THRESHOLD: f64 = 0.8;

/// The candidate most similar to `input`, if any is similar enough and it is not `input`
/// itself. Ties go to the earlier candidate.
pub fn did_you_mean<'a>(input: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut best: Option<(f64, &str)> = None;
    for candidate in candidates {
        if candidate == input {
            return None;
        }
        let score = strsim::jaro_winkler(input, candidate);
        if score >= THRESHOLD && best.is_none_or(|(b, _)| score > b) {
            best = Some((score, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// The help line text for a suggestion: `did you mean "x"?`.
pub fn help(suggestion: &str) -> String {
    format!("did you mean {suggestion:?}?")
}

/// [`did_you_mean`], as help text.
pub fn help_for<'a>(input: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    did_you_mean(input, candidates).map(help)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_misspellings_are_suggested() {
        assert_eq!(did_you_mean("torchrunn", ["torchrun", "deepspeed", "command"]), Some("torchrun"));
        assert_eq!(did_you_mean("deepseed", ["torchrun", "deepspeed", "command"]), Some("deepspeed"));
        assert_eq!(
            did_you_mean("nproc_per_nod", ["script", "nproc_per_node", "nproc"]),
            Some("nproc_per_node")
        );
        assert_eq!(did_you_mean("scirpt", ["launcher", "script", "args"]), Some("script"));
        assert_eq!(did_you_mean("acept-new", ["strict", "accept-new"]), Some("accept-new"));
        assert_eq!(did_you_mean("gpu-5", ["gpu-04", "gpu-05", "cpu-9"]), Some("gpu-05"));
        assert_eq!(did_you_mean("node_lost", ["comm", "node-lost", "hang"]), Some("node-lost"));
    }

    #[test]
    fn unrelated_words_are_not() {
        assert_eq!(did_you_mean("mpirun", ["torchrun", "deepspeed", "command"]), None);
        assert_eq!(did_you_mean("segfault", ["comm", "node-lost", "hang", "port", "crash", "oom"]), None);
        assert_eq!(did_you_mean("tpu", ["cuda", "cpu"]), None);
        assert_eq!(did_you_mean("x", Vec::<&str>::new()), None);
    }

    #[test]
    fn an_exact_match_is_no_suggestion() {
        assert_eq!(did_you_mean("cpu", ["cuda", "cpu"]), None);
    }

    #[test]
    fn help_text() {
        assert_eq!(help_for("torchrunn", ["torchrun"]).as_deref(), Some("did you mean \"torchrun\"?"));
    }
}
