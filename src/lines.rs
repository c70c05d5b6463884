//! Splitting a node's raw output into lines without losing or changing a byte: joined back
//! together (text + ending), the lines are exactly the bytes that arrived. `\r` ends a line
//! too, so progress bars become one line per update instead of overwriting the prefix; a line
//! longer than the cap is cut into pieces so that one endless line cannot grow memory.

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The line without its ending; any bytes, not necessarily UTF-8.
    pub text: Vec<u8>,
    pub end: LineEnd,
}

/// Incremental splitter: feed chunks as they arrive, then `finish` at end of stream.
#[derive(Debug, Default)]
pub struct LineSplitter {
    pending: Vec<u8>,
    /// The pending line ended in `\r`; whether a `\n` follows is not known yet.
    pending_cr: bool,
}

impl LineSplitter {
    pub fn push(&mut self, mut chunk: &[u8], out: &mut Vec<Line>) {
        if self.pending_cr && !chunk.is_empty() {
            self.pending_cr = false;
            let end = if chunk[0] == b'\n' {
                chunk = &chunk[1..];
                LineEnd::CrLf
            } else {
                LineEnd::Cr
            };
            out.push(Line { text: std::mem::take(&mut self.pending), end });
        }
        while !chunk.is_empty() {
            let room = MAX_LINE - self.pending.len();
            let window = &chunk[..chunk.len().min(room)];
            match window.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(i) => {
                    self.pending.extend_from_slice(&window[..i]);
                    if window[i] == b'\n' {
                        out.push(Line { text: std::mem::take(&mut self.pending), end: LineEnd::Lf });
                        chunk = &chunk[i + 1..];
                    } else if i + 1 < chunk.len() {
                        let end = if chunk[i + 1] == b'\n' { LineEnd::CrLf } else { LineEnd::Cr };
                        out.push(Line { text: std::mem::take(&mut self.pending), end });
                        chunk = &chunk[i + end.bytes().len()..];
                    } else {
                        self.pending_cr = true;
                        return;
                    }
                }
                None => {
                    self.pending.extend_from_slice(window);
                    chunk = &chunk[window.len()..];
                    if self.pending.len() == MAX_LINE {
                        out.push(Line { text: std::mem::take(&mut self.pending), end: LineEnd::Cut });
                    }
                }
            }
        }
    }

    pub fn finish(&mut self, out: &mut Vec<Line>) {
        if self.pending_cr {
            self.pending_cr = false;
            out.push(Line { text: std::mem::take(&mut self.pending), end: LineEnd::Cr });
        } else if !self.pending.is_empty() {
            out.push(Line { text: std::mem::take(&mut self.pending), end: LineEnd::Eof });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn split(chunks: &[&[u8]]) -> Vec<Line> {
        let mut s = LineSplitter::default();
        let mut out = Vec::new();
        for c in chunks {
            s.push(c, &mut out);
        }
        s.finish(&mut out);
        out
    }

    fn texts(lines: &[Line]) -> Vec<(String, LineEnd)> {
        lines.iter().map(|l| (String::from_utf8_lossy(&l.text).into_owned(), l.end)).collect()
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
            let rejoined: Vec<u8> = lines.iter().flat_map(|l| [l.text.as_slice(), l.end.bytes()].concat()).collect();
            prop_assert_eq!(rejoined, data);
        }
    }
}
