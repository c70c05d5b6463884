//! `ConfigError` and the byte-span -> line/column rendering.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Everything that can go wrong loading a config file.
///
/// `Display` starts with `path:line:col: message` when the problem is inside the file, followed
/// by the offending source line and a caret line under the span:
///
/// ```text
/// cluster.toml:7:8: malformed hostlist "n[3-1]": range 3-1 is descending
///    |
///  7 | host = "n[3-1]"
///    |        ^^^^^^^^
/// ```
///
/// Problems that are not at one place in the file (a missing `[job]` table, an unreadable file)
/// start with `path: `.
///
/// When herd can guess what was meant (a misspelt key, launcher or class), one more line says so:
///
/// ```text
/// cluster.toml:5:12: unknown launcher "torchrunn": expected one of torchrun, deepspeed, command
///    |
///  5 | launcher = "torchrunn"
///    |            ^^^^^^^^^^^
///    = help: did you mean "torchrun"?
/// ```
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read. (The I/O error is part of the message, so it is not also
    /// reported as `source()`.)
    #[error("{}: cannot read config file: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    /// The file was read but is not a valid config.
    #[error("{}", render(path, message, location.as_deref(), help.as_deref()))]
    Invalid {
        path: PathBuf,
        message: String,
        /// `None` when the problem is not at one place in the file (e.g. a missing table).
        location: Option<Box<Location>>,
        /// A suggestion shown after the source excerpt (`did you mean "x"?`).
        help: Option<String>,
    },
}

impl ConfigError {
    /// An error at `span` (byte offsets into `text`).
    pub fn at(path: &Path, text: &str, span: Range<usize>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            path: path.to_path_buf(),
            message: message.into(),
            location: Some(Box::new(Location::from_span(text, span))),
            help: None,
        }
    }

    /// An error about the file as a whole.
    pub fn whole_file(path: &Path, message: impl Into<String>) -> Self {
        ConfigError::Invalid { path: path.to_path_buf(), message: message.into(), location: None, help: None }
    }

    /// The same error without the source excerpt: `path:line:col: message` only.
    pub fn without_excerpt(mut self) -> Self {
        if let ConfigError::Invalid { location: Some(loc), .. } = &mut self {
            loc.excerpt = false;
        }
        self
    }

    /// Adds a help line (`= help: ...`), e.g. a "did you mean"; `None` leaves the error as it is.
    pub fn with_help(mut self, text: Option<String>) -> Self {
        if let ConfigError::Invalid { help, .. } = &mut self {
            *help = text;
        }
        self
    }

    /// The help line's text, when there is one.
    pub fn help(&self) -> Option<&str> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Invalid { help, .. } => help.as_deref(),
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            ConfigError::Read { path, .. } | ConfigError::Invalid { path, .. } => path,
        }
    }

    /// The pointed message, without path, location or source excerpt.
    pub fn message(&self) -> String {
        match self {
            ConfigError::Read { error, .. } => format!("cannot read config file: {error}"),
            ConfigError::Invalid { message, .. } => message.clone(),
        }
    }

    pub fn location(&self) -> Option<&Location> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Invalid { location, .. } => location.as_deref(),
        }
    }

    /// 1-based `(line, column)` when the problem is at one place in the file.
    pub fn line_col(&self) -> Option<(usize, usize)> {
        self.location().map(|l| (l.line, l.col))
    }
}

/// Where in the file a problem is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// 1-based line number.
    pub line: usize,
    /// 1-based column, counted in characters.
    pub col: usize,
    /// The byte span in the file.
    pub span: Range<usize>,
    /// The whole line the span starts on (without its line terminator).
    pub source_line: String,
    /// How many characters of `source_line` the span covers (at least 1, clipped to the line).
    pub width: usize,
    /// Whether the rendering shows `source_line`: not for a file that is not a config (a
    /// hostfile may be any file, `/etc/shadow` included), where only the message's own token
    /// is shown.
    pub excerpt: bool,
}

impl Location {
    /// Locates a byte span of `text`. Offsets past the end or inside a UTF-8 sequence are
    /// clamped, so this never panics.
    pub fn from_span(text: &str, span: Range<usize>) -> Location {
        let start = floor_char_boundary(text, span.start);
        let end = floor_char_boundary(text, span.end.max(start));
        let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
        let source_line =
            text[line_start..line_end].strip_suffix('\r').unwrap_or(&text[line_start..line_end]);
        let (line, col) = line_col(text, start);
        let visible_end = (line_start + source_line.len()).max(start);
        let covered = &text[start..end.min(visible_end)];
        Location {
            line,
            col,
            span,
            source_line: source_line.to_string(),
            width: covered.chars().count().max(1),
            excerpt: true,
        }
    }
}

/// Turns a byte offset into `text` into a 1-based `(line, column)`; the column counts characters.
/// An offset past the end points just after the last character.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = floor_char_boundary(text, offset);
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

fn floor_char_boundary(text: &str, offset: usize) -> usize {
    let mut i = offset.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn render(path: &Path, message: &str, location: Option<&Location>, help: Option<&str>) -> String {
    let mut out = String::new();
    let _ = write_rendered(&mut out, path, message, location);
    if let Some(help) = help {
        let gutter = location.map_or(1, |l| l.line.to_string().len());
        out.push('\n');
        out.push_str(&help_line(gutter, help));
    }
    out
}

/// `   = help: TEXT`, the `=` under the `|` of a source excerpt whose line numbers are `gutter`
/// digits wide. Also used for errors that have no excerpt (`gutter` 1).
pub fn help_line(gutter: usize, text: &str) -> String {
    format!(" {} = help: {text}", " ".repeat(gutter))
}

fn write_rendered(
    out: &mut impl fmt::Write,
    path: &Path,
    message: &str,
    location: Option<&Location>,
) -> fmt::Result {
    let Some(loc) = location else {
        return write!(out, "{}: {message}", path.display());
    };
    if !loc.excerpt {
        return write!(out, "{}:{}:{}: {message}", path.display(), loc.line, loc.col);
    }
    writeln!(out, "{}:{}:{}: {message}", path.display(), loc.line, loc.col)?;
    let number = loc.line.to_string();
    let pad = " ".repeat(number.len());
    writeln!(out, " {pad} |")?;
    let (shown, col, width) = excerpt(&loc.source_line, loc.col, loc.width);
    let source = format!(" {number} | {shown}");
    writeln!(out, "{}", source.trim_end())?;
    // Keep tabs so the carets line up under the span however the terminal renders tabs.
    let indent: String = shown.chars().take(col - 1).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
    write!(out, " {pad} | {indent}{}", "^".repeat(width))
}

/// The most characters of a source line an error shows.
const EXCERPT_CHARS: usize = 100;

/// What an error shows of its source line: at most `EXCERPT_CHARS` characters around the
/// span (a minified or deeply nested file can have a 400 KB line), `...` where it was cut,
/// and control characters as `?` so that the line cannot drive the terminal. Returns the text
/// and the span's 1-based column and width in it.
fn excerpt(line: &str, col: usize, width: usize) -> (String, usize, usize) {
    let chars: Vec<char> = line.chars().map(|c| if c.is_control() && c != '\t' { '?' } else { c }).collect();
    if chars.len() <= EXCERPT_CHARS {
        return (chars.into_iter().collect(), col, width);
    }
    const BEFORE: usize = 30;
    let start = (col - 1).saturating_sub(BEFORE);
    let end = (start + EXCERPT_CHARS).min(chars.len());
    let mut shown = String::new();
    let lead = if start > 0 { "..." } else { "" };
    shown.push_str(lead);
    shown.extend(&chars[start..end]);
    if end < chars.len() {
        shown.push_str("...");
    }
    let span_start = col - 1;
    let width = width.min(end.saturating_sub(span_start)).max(1);
    (shown, span_start - start + 1 + lead.len(), width)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one_in_chars() {
        let text = "a = 1\nbé = \"x\"\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 4), (1, 5));
        assert_eq!(line_col(text, 6), (2, 1));
        // "é" is two bytes but one column.
        assert_eq!(line_col(text, 10), (2, 4));
        assert_eq!(line_col(text, text.len()), (3, 1));
        assert_eq!(line_col(text, 1000), (3, 1));
        // Inside a UTF-8 sequence: clamped to the character.
        assert_eq!(line_col(text, 8), (2, 2));
    }

    #[test]
    fn renders_path_line_col_source_and_carets() {
        let text = "[[nodes]]\nhost = \"n[3-1]\"\n";
        let err = ConfigError::at(
            Path::new("cluster.toml"),
            text,
            17..25,
            "malformed hostlist \"n[3-1]\": range 3-1 is descending",
        );
        assert_eq!(err.line_col(), Some((2, 8)));
        assert_eq!(
            err.to_string(),
            "cluster.toml:2:8: malformed hostlist \"n[3-1]\": range 3-1 is descending\n   |\n 2 | host = \"n[3-1]\"\n   |        ^^^^^^^^"
        );
    }

    #[test]
    fn multi_line_spans_are_clipped_and_tabs_kept() {
        let text = "x = 1\r\n\tkey = [\n 1]\n";
        let loc = Location::from_span(text, 14..19);
        assert_eq!((loc.line, loc.col), (2, 8));
        assert_eq!(loc.source_line, "\tkey = [");
        assert_eq!(loc.width, 1);
        let err = ConfigError::at(Path::new("c.toml"), text, 14..19, "bad");
        assert_eq!(err.to_string(), "c.toml:2:8: bad\n   |\n 2 | \tkey = [\n   | \t      ^");
    }

    #[test]
    fn gutter_grows_with_line_number() {
        let text = format!("{}x = 1\n", "\n".repeat(11));
        let err = ConfigError::at(Path::new("c.toml"), &text, 15..16, "bad");
        assert_eq!(err.to_string(), "c.toml:12:5: bad\n    |\n 12 | x = 1\n    |     ^");
    }

    #[test]
    fn span_at_end_of_file() {
        let text = "a = ";
        let err = ConfigError::at(Path::new("c.toml"), text, 4..5, "bad");
        assert_eq!(err.line_col(), Some((1, 5)));
        assert_eq!(err.to_string(), "c.toml:1:5: bad\n   |\n 1 | a =\n   |     ^");
    }

    #[test]
    fn help_goes_after_the_carets() {
        let text = "[job]\nlauncher = \"torchrunn\"\n";
        let err = ConfigError::at(Path::new("c.toml"), text, 17..28, "unknown launcher")
            .with_help(Some("did you mean \"torchrun\"?".into()));
        assert_eq!(err.help(), Some("did you mean \"torchrun\"?"));
        assert_eq!(
            err.to_string(),
            "c.toml:2:12: unknown launcher\n   |\n 2 | launcher = \"torchrunn\"\n   |            ^^^^^^^^^^^\n   = help: did you mean \"torchrun\"?"
        );
        let text = format!("{}x = 1\n", "\n".repeat(11));
        let err = ConfigError::at(Path::new("c.toml"), &text, 11..12, "bad").with_help(Some("h".into()));
        assert!(err.to_string().ends_with("\n    | ^\n    = help: h"), "{err}");
        let err = ConfigError::whole_file(Path::new("c.toml"), "no nodes").with_help(Some("h".into()));
        assert_eq!(err.to_string(), "c.toml: no nodes\n   = help: h");
        let err = ConfigError::whole_file(Path::new("c.toml"), "no nodes").with_help(None);
        assert_eq!(err.to_string(), "c.toml: no nodes");
    }

    #[test]
    fn whole_file_and_read_errors() {
        let err = ConfigError::whole_file(Path::new("c.toml"), "missing [job] table");
        assert_eq!(err.to_string(), "c.toml: missing [job] table");
        assert_eq!(err.line_col(), None);
        let err = ConfigError::Read {
            path: "cluster.toml".into(),
            error: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert!(err.to_string().starts_with("cluster.toml: cannot read config file: "));
    }

    #[test]
    fn a_long_line_shows_a_window_around_the_span_with_the_carets_under_it() {
        let line = format!("{}TARGET{}", "a".repeat(300), "b".repeat(300));
        let (shown, col, width) = excerpt(&line, 301, 6);
        assert!(shown.starts_with("...") && shown.ends_with("..."), "{shown}");
        assert!(shown.chars().count() <= EXCERPT_CHARS + 6);
        let at: String = shown.chars().skip(col - 1).take(width).collect();
        assert_eq!(at, "TARGET");
        // A short line is shown as it is.
        assert_eq!(excerpt("host = 1", 8, 1), ("host = 1".to_string(), 8, 1));
    }

    #[test]
    fn control_characters_in_an_excerpt_cannot_reach_the_terminal() {
        let (shown, _, _) = excerpt("x = \"a\u{1b}[31m\r\tb\"", 5, 1);
        assert_eq!(shown, "x = \"a?[31m?\tb\"");
    }

    #[test]
    fn an_error_without_excerpt_is_one_line() {
        let e = ConfigError::at(Path::new("hosts"), "secret line\n", 0..6, "bad").without_excerpt();
        assert_eq!(e.to_string(), "hosts:1:1: bad");
    }
}
