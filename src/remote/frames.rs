//! A node's stdout, read back: raw bytes until herd's output multiplexer (`mux.py`) starts,
//! then its records, each naming the source (the launcher's stdout or stderr, or one rank's)
//! that wrote the bytes it carries. Pure.

/// What the multiplexer writes first.
pub const MAGIC: &[u8] = b"\x1dherd-mux/1\n";

/// Who wrote a piece of a node's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Source {
    /// The global rank and the local rank of the worker; `None` for the launcher (and for
    /// whatever the node printed before the multiplexer started, or without it).
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub stderr: bool,
}

/// One thing read off a node's stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Open {
        sid: u32,
        source: Source,
    },
    Data {
        sid: u32,
        bytes: Vec<u8>,
    },
    Close {
        sid: u32,
    },
    /// Output that is no record: before the multiplexer, without it, or a broken record.
    Raw(Vec<u8>),
}

#[derive(Debug, Default)]
pub struct FrameReader {
    framed: bool,
    buf: Vec<u8>,
}

impl FrameReader {
    pub fn push(&mut self, input: &[u8], out: &mut Vec<Frame>) {
        self.buf.extend_from_slice(input);
        if !self.framed {
            match find(&self.buf, MAGIC) {
                Some(i) => {
                    if i > 0 {
                        out.push(Frame::Raw(self.buf[..i].to_vec()));
                    }
                    self.buf.drain(..i + MAGIC.len());
                    self.framed = true;
                }
                None => {
                    // Hold back only what could be the start of the magic.
                    let keep = (1..MAGIC.len().min(self.buf.len() + 1))
                        .rev()
                        .find(|&k| self.buf.ends_with(&MAGIC[..k]))
                        .unwrap_or(0);
                    let cut = self.buf.len() - keep;
                    if cut > 0 {
                        out.push(Frame::Raw(self.buf.drain(..cut).collect()));
                    }
                    return;
                }
            }
        }
        let mut at = 0;
        while let Some((frame, used)) = parse(&self.buf[at..]) {
            out.push(frame);
            at += used;
        }
        self.buf.drain(..at);
    }

    /// The end of the stream: whatever is left is raw output (a record cut short).
    pub fn finish(&mut self, out: &mut Vec<Frame>) {
        if !self.buf.is_empty() {
            out.push(Frame::Raw(std::mem::take(&mut self.buf)));
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One record from the start of `buf`, and its length; `None` until it is all there.
fn parse(buf: &[u8]) -> Option<(Frame, usize)> {
    let nl = buf.iter().position(|&b| b == b'\n')?;
    let head = std::str::from_utf8(&buf[..nl]).ok();
    let broken = || Some((Frame::Raw(buf[..=nl].to_vec()), nl + 1));
    let Some(head) = head else { return broken() };
    if let Some(rest) = head.strip_prefix('+') {
        let w: Vec<&str> = rest.split(' ').collect();
        let (Some(sid), true) = (w.first().and_then(|s| s.parse().ok()), w.len() == 4) else {
            return broken();
        };
        let source = Source { rank: w[2].parse().ok(), local_rank: w[3].parse().ok(), stderr: w[1] == "e" };
        return Some((Frame::Open { sid, source }, nl + 1));
    }
    if let Some(sid) = head.strip_prefix('-') {
        let Ok(sid) = sid.parse() else { return broken() };
        return Some((Frame::Close { sid }, nl + 1));
    }
    let Some((Ok(sid), Ok(len))) = head.split_once(' ').map(|(s, l)| (s.parse(), l.parse::<usize>())) else {
        return broken();
    };
    let end = nl + 1 + len;
    if buf.len() < end {
        return None;
    }
    Some((Frame::Data { sid, bytes: buf[nl + 1..end].to_vec() }, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(chunks: &[&[u8]]) -> Vec<Frame> {
        let mut r = FrameReader::default();
        let mut out = Vec::new();
        for c in chunks {
            r.push(c, &mut out);
        }
        r.finish(&mut out);
        out
    }

    #[test]
    fn raw_output_then_records_in_any_split() {
        let stream: Vec<u8> =
            [b"setup says hi\n".as_slice(), MAGIC, b"+2 o 5 1\n2 3\nab\n+0 e - -\n0 2\nx\r-2\n"].concat();
        let want = [
            Frame::Raw(b"setup says hi\n".to_vec()),
            Frame::Open { sid: 2, source: Source { rank: Some(5), local_rank: Some(1), stderr: false } },
            Frame::Data { sid: 2, bytes: b"ab\n".to_vec() },
            Frame::Open { sid: 0, source: Source { rank: None, local_rank: None, stderr: true } },
            Frame::Data { sid: 0, bytes: b"x\r".to_vec() },
            Frame::Close { sid: 2 },
        ];
        // Every way of cutting the stream in two reads the same, raw bytes joined.
        for cut in 0..=stream.len() {
            let mut got = read_all(&[&stream[..cut], &stream[cut..]]);
            let mut raw = Vec::new();
            got.retain(|f| match f {
                Frame::Raw(b) => {
                    raw.extend_from_slice(b);
                    false
                }
                _ => true,
            });
            assert_eq!(raw, b"setup says hi\n", "cut at {cut}");
            assert_eq!(got, want[1..], "cut at {cut}");
        }
    }

    #[test]
    fn without_the_multiplexer_everything_is_raw_and_nothing_waits() {
        let mut r = FrameReader::default();
        let mut out = Vec::new();
        r.push(b"hello\n", &mut out);
        // A line is passed on at once: no holding back for a magic that never comes.
        assert_eq!(out, vec![Frame::Raw(b"hello\n".to_vec())]);
        out.clear();
        r.push(b"tail\x1dherd", &mut out);
        assert_eq!(out, vec![Frame::Raw(b"tail".to_vec())]);
        out.clear();
        r.finish(&mut out);
        assert_eq!(out, vec![Frame::Raw(b"\x1dherd".to_vec())]);
    }

    #[test]
    fn a_broken_record_is_kept_as_raw_output() {
        let got = read_all(&[MAGIC, b"nonsense\n3 5\nok"]);
        assert_eq!(got, vec![Frame::Raw(b"nonsense\n".to_vec()), Frame::Raw(b"3 5\nok".to_vec())]);
    }
}
