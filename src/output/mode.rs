//! How a run is shown, decided once from the flags and the environment. Pure.

/// What `herd run` writes where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `[rank host]`-prefixed job lines on stdout, herd's status lines on stderr, nothing else.
    Plain { color: bool },
    /// As `Plain`, with a live status board pinned at the bottom of the terminal (on stderr).
    Board { color: bool },
    /// One JSON object per line on stdout (events and job output); status lines on stderr.
    Json,
}

impl Mode {
    /// Whether node prefixes are coloured.
    pub fn color(self) -> bool {
        matches!(self, Mode::Plain { color: true } | Mode::Board { color: true })
    }
}

/// What the decision looks at.
#[derive(Debug, Clone, Copy, Default)]
pub struct Surroundings<'a> {
    pub json: bool,
    pub no_progress: bool,
    pub stdout_is_terminal: bool,
    pub stderr_is_terminal: bool,
    /// `NO_COLOR`; set and non-empty turns colour and the board off.
    pub no_color: Option<&'a str>,
    /// `TERM`
    pub term: Option<&'a str>,
    /// `CI`; set and non-empty: a log, not a person, reads this.
    pub ci: Option<&'a str>,
}

impl Surroundings<'static> {
    /// From this process's flags, terminals and environment.
    pub fn detect(json: bool, no_progress: bool) -> Mode {
        use std::io::IsTerminal;
        let no_color = std::env::var("NO_COLOR").ok();
        let term = std::env::var("TERM").ok();
        let ci = std::env::var("CI").ok();
        choose(&Surroundings {
            json,
            no_progress,
            stdout_is_terminal: std::io::stdout().is_terminal(),
            stderr_is_terminal: std::io::stderr().is_terminal(),
            no_color: no_color.as_deref(),
            term: term.as_deref(),
            ci: ci.as_deref(),
        })
    }
}

/// `--json` wins; escape codes only for a person at a capable terminal; the board only when
/// both streams are that terminal (it is drawn on stderr and must not end up in a file).
pub fn choose(s: &Surroundings) -> Mode {
    if s.json {
        return Mode::Json;
    }
    let set = |v: Option<&str>| v.is_some_and(|v| !v.is_empty());
    let escapes_ok = !set(s.no_color) && s.term != Some("dumb");
    let color = s.stdout_is_terminal && escapes_ok;
    if color && s.stderr_is_terminal && !s.no_progress && !set(s.ci) {
        Mode::Board { color }
    } else {
        Mode::Plain { color }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tty<'a>() -> Surroundings<'a> {
        Surroundings {
            stdout_is_terminal: true,
            stderr_is_terminal: true,
            term: Some("xterm-256color"),
            ..Default::default()
        }
    }

    #[test]
    fn a_person_at_a_terminal_gets_the_board() {
        assert_eq!(choose(&tty()), Mode::Board { color: true });
        assert_eq!(choose(&Surroundings { term: None, ..tty() }), Mode::Board { color: true });
        assert_eq!(choose(&Surroundings { no_color: Some(""), ..tty() }), Mode::Board { color: true });
    }

    #[test]
    fn json_wins_over_everything() {
        assert_eq!(choose(&Surroundings { json: true, ..tty() }), Mode::Json);
        assert_eq!(choose(&Surroundings { json: true, ..Default::default() }), Mode::Json);
    }

    #[test]
    fn no_escape_codes_unless_wanted() {
        for s in [
            Surroundings { no_color: Some("1"), ..tty() },
            Surroundings { term: Some("dumb"), ..tty() },
            Surroundings { stdout_is_terminal: false, ..tty() },
            Surroundings::default(),
        ] {
            assert_eq!(choose(&s), Mode::Plain { color: false }, "{s:?}");
        }
    }

    #[test]
    fn colour_without_board() {
        for s in [
            Surroundings { no_progress: true, ..tty() },
            Surroundings { stderr_is_terminal: false, ..tty() },
            Surroundings { ci: Some("true"), ..tty() },
        ] {
            assert_eq!(choose(&s), Mode::Plain { color: true }, "{s:?}");
        }
        assert_eq!(choose(&Surroundings { ci: Some(""), ..tty() }), Mode::Board { color: true });
    }
}
