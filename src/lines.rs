//! Splitting a node's raw output into lines without losing or changing a byte: joined back
//! together (text + ending), the lines are exactly the bytes that arrived. `\r` ends a line
//! too, so progress bars become one line per update instead of overwriting the prefix; a line
//! longer than the cap is cut into pieces so that one endless line cannot grow memory. And
//! how a line that is not herd's own is shown on a terminal.

/// A value from the config or the environment as herd shows it on a terminal: control
/// characters (newlines, escape sequences) written as escapes, so that a value can neither
/// break the layout nor drive the terminal.
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return s.into();
    }
    s.chars()
        .map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() })
        .collect::<String>()
        .into()
}

/// Longest line kept whole; longer ones are cut into pieces of this size.
pub const MAX_LINE: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineEnd {
    Lf,
    Cr,
    CrLf,
    /// Cut at [`MAX_LINE`]; the line goes on in the next piece.
    Cut,
    /// The stream ended without a final newline.
    Eof,
}

impl LineEnd {
    pub fn bytes(self) -> &'static [u8] {
        match self {
            LineEnd::Lf => b"\n",
            LineEnd::Cr => b"\r",
            LineEnd::CrLf => b"\r\n",
            LineEnd::Cut | LineEnd::Eof => b"",
        }
    }
}

/// One line of a [`Lines`] batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line<'a> {
    /// The line without its ending; any bytes, not necessarily UTF-8.
    pub text: &'a [u8],
    pub end: LineEnd,
}

/// A batch of lines in one buffer: a node prints many short lines, and one allocation per
/// line would cost several times the text itself while the batch waits to be written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lines {
    /// The text of every line, back to back, without the endings.
    text: Vec<u8>,
    /// Per line: the offset in `text` where it ends, and how it ended.
    ends: Vec<(u32, LineEnd)>,
}

impl Lines {
    pub fn one(text: &[u8], end: LineEnd) -> Lines {
        let mut lines = Lines::default();
        lines.push(&[text], end);
        lines
    }

    /// Appends every line of `other`.
    pub fn extend(&mut self, other: &Lines) {
        for line in other.iter() {
            self.push(&[line.text], line.end);
        }
    }

    /// Appends a line made of `parts`, joined.
    fn push(&mut self, parts: &[&[u8]], end: LineEnd) {
        for p in parts {
            self.text.extend_from_slice(p);
        }
        let at = u32::try_from(self.text.len()).expect("a batch holds less than 4 GiB");
        self.ends.push((at, end));
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Gives back the room the buffers grew into: a batch may wait in a queue for a while.
    pub fn shrink_to_fit(&mut self) {
        self.text.shrink_to_fit();
        self.ends.shrink_to_fit();
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Line<'_>> + ExactSizeIterator + '_ {
        self.ends.iter().enumerate().map(|(i, &(end_at, end))| {
            let start = if i == 0 { 0 } else { self.ends[i - 1].0 as usize };
            Line { text: &self.text[start..end_at as usize], end }
        })
    }
}

/// Incremental splitter: feed chunks as they arrive, then `finish` at end of stream.
#[derive(Debug, Default)]
pub struct LineSplitter {
    pending: Vec<u8>,
    /// The pending line ended in `\r`; whether a `\n` follows is not known yet.
    pending_cr: bool,
}

impl LineSplitter {
    pub fn push(&mut self, mut chunk: &[u8], out: &mut Lines) {
        if self.pending_cr && !chunk.is_empty() {
            self.pending_cr = false;
            let end = if chunk[0] == b'\n' {
                chunk = &chunk[1..];
                LineEnd::CrLf
            } else {
                LineEnd::Cr
            };
            out.push(&[&self.pending], end);
            self.pending.clear();
        }
        while !chunk.is_empty() {
            let room = MAX_LINE - self.pending.len();
            let window = &chunk[..chunk.len().min(room)];
            match window.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(i) => {
                    if window[i] == b'\n' {
                        out.push(&[&self.pending, &window[..i]], LineEnd::Lf);
                        self.pending.clear();
                        chunk = &chunk[i + 1..];
                    } else if i + 1 < chunk.len() {
                        let end = if chunk[i + 1] == b'\n' { LineEnd::CrLf } else { LineEnd::Cr };
                        out.push(&[&self.pending, &window[..i]], end);
                        self.pending.clear();
                        chunk = &chunk[i + end.bytes().len()..];
                    } else {
                        self.pending.extend_from_slice(&window[..i]);
                        self.pending_cr = true;
                        return;
                    }
                }
                None => {
                    self.pending.extend_from_slice(window);
                    chunk = &chunk[window.len()..];
                    if self.pending.len() == MAX_LINE {
                        out.push(&[&self.pending], LineEnd::Cut);
                        self.pending.clear();
                    }
                }
            }
        }
    }

    pub fn finish(&mut self, out: &mut Lines) {
        if self.pending_cr {
            self.pending_cr = false;
            out.push(&[&self.pending], LineEnd::Cr);
        } else if !self.pending.is_empty() {
            out.push(&[&self.pending], LineEnd::Eof);
        }
        self.pending = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn split(chunks: &[&[u8]]) -> Lines {
        let mut s = LineSplitter::default();
        let mut out = Lines::default();
        for c in chunks {
            s.push(c, &mut out);
        }
        s.finish(&mut out);
        out
    }

    fn texts(lines: &Lines) -> Vec<(String, LineEnd)> {
        lines.iter().map(|l| (String::from_utf8_lossy(l.text).into_owned(), l.end)).collect()
    }

    #[test]
    fn newline_cr_and_crlf_end_lines_even_across_chunks() {
        let lines = split(&[b"a\nb\r", b"\nc\rd", b"\r", b"e", b"\n"]);
        assert_eq!(
            texts(&lines),
            vec![
                ("a".into(), LineEnd::Lf),
                ("b".into(), LineEnd::CrLf),
                ("c".into(), LineEnd::Cr),
                ("d".into(), LineEnd::Cr),
                ("e".into(), LineEnd::Lf)
            ]
        );
    }

    #[test]
    fn unterminated_tail_and_trailing_cr_are_kept() {
        assert_eq!(texts(&split(&[b"x\ny"])), vec![("x".into(), LineEnd::Lf), ("y".into(), LineEnd::Eof)]);
        assert_eq!(texts(&split(&[b"p\r"])), vec![("p".into(), LineEnd::Cr)]);
        assert!(split(&[b""]).is_empty());
    }

    #[test]
    fn long_lines_are_cut_not_buffered_forever() {
        let big = vec![b'x'; MAX_LINE * 2 + 10];
        let lines = split(&[&big, b"\n"]);
        let lines: Vec<Line> = lines.iter().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].end, LineEnd::Cut);
        assert_eq!(lines[0].text.len(), MAX_LINE);
        assert_eq!(lines[2].text.len(), 10);
        assert_eq!(lines[2].end, LineEnd::Lf);
    }

    proptest! {
        #[test]
        fn rejoined_lines_are_the_input(data in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'\r'), any::<u8>()], 0..400), cuts in proptest::collection::vec(0usize..400, 0..6)) {
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            points.sort();
            let mut chunks = Vec::new();
            let mut last = 0;
            for p in points { chunks.push(&data[last..p]); last = p; }
            chunks.push(&data[last..]);
            let lines = split(&chunks);
            let rejoined: Vec<u8> = lines.iter().flat_map(|l| [l.text, l.end.bytes()].concat()).collect();
            prop_assert_eq!(rejoined, data);
        }
    }
}
