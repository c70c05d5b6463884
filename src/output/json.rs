//! The JSON-lines form of a run: the objects of events.jsonl, and for `herd run --json` the
//! job's output as `output` events. One object per line, each with a `ts`.

use serde::Serialize;

use super::sink::{Shared, Sink, Turn};
use crate::events::Event;
use crate::lines::{Line, LineEnd};

/// `herd run --json`: on stdout, each line of the job as an `output` event, and each event.
#[derive(Default)]
pub struct JsonSink {
    attempt: u32,
}

impl Sink for JsonSink {
    fn event(&mut self, turn: &Turn, shared: &mut Shared) {
        match turn.event {
            // Programs filter for themselves: every line, whatever `--ranks` shows.
            Event::NodeOutput { node_rank, source, lines } => {
                let host = &turn.hosts[*node_rank];
                for line in lines.iter() {
                    let ts = turn.ts();
                    shared.screen.job(&[&output_line(self.attempt, *node_rank, host, *source, line, ts)]);
                }
            }
            // Files only: the summary that follows is the event.
            Event::StacksCollected { .. } | Event::NcclDumpsCollected { .. } => {}
            other => {
                if let Event::AttemptStarting { attempt } = other {
                    self.attempt = *attempt;
                }
                shared.screen.job(&[&event_line(other, turn.ts())]);
            }
        }
    }
}

#[derive(Serialize)]
struct Stamped<'a, T: Serialize> {
    ts: String,
    #[serde(flatten)]
    event: &'a T,
}

/// One line of a node's output. The text is UTF-8 with invalid bytes replaced; the node's
/// log file keeps the exact bytes.
#[derive(Serialize)]
#[serde(tag = "event", rename = "output")]
struct Output<'a> {
    attempt: u32,
    node_rank: usize,
    host: &'a str,
    /// The worker's global and local rank; `null` for the launcher's lines.
    rank: Option<u32>,
    local_rank: Option<u32>,
    line: std::borrow::Cow<'a, str>,
    /// Only when the line did not end in a newline: `cr`, `cut` (at 64 KiB) or `eof`.
    #[serde(skip_serializing_if = "Option::is_none")]
    end: Option<&'static str>,
}

/// `event` as one line of JSON, newline included.
pub fn event_line(event: &Event, ts: String) -> Vec<u8> {
    to_line(&Stamped { ts, event })
}

/// A node's output line as one `output` event, newline included.
pub fn output_line(
    attempt: u32,
    node_rank: usize,
    host: &str,
    source: crate::events::Source,
    line: Line<'_>,
    ts: String,
) -> Vec<u8> {
    let end = match line.end {
        LineEnd::Lf | LineEnd::CrLf => None,
        LineEnd::Cr => Some("cr"),
        LineEnd::Cut => Some("cut"),
        LineEnd::Eof => Some("eof"),
    };
    let event = Output {
        attempt,
        node_rank,
        host,
        rank: source.rank,
        local_rank: source.local_rank,
        line: String::from_utf8_lossy(line.text),
        end,
    };
    to_line(&Stamped { ts, event: &event })
}

fn to_line(value: &impl Serialize) -> Vec<u8> {
    let mut out = serde_json::to_vec(value).expect("events serialise");
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_events_carry_attempt_node_and_text() {
        let line = Line { text: b"loss \"1.0\"\t\xff", end: LineEnd::Lf };
        let rank = crate::events::Source { rank: Some(3), local_rank: Some(1), stderr: false };
        let got = output_line(2, 1, "node2", rank, line, "T".into());
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "{\"ts\":\"T\",\"event\":\"output\",\"attempt\":2,\"node_rank\":1,\"host\":\"node2\",\"rank\":3,\"local_rank\":1,\"line\":\"loss \\\"1.0\\\"\\t\u{fffd}\"}\n"
        );
        let cut = Line { text: b"x", end: LineEnd::Cut };
        let launcher = crate::events::Source::default();
        let text = String::from_utf8(output_line(0, 0, "h", launcher, cut, "T".into())).unwrap();
        assert!(text.contains("\"rank\":null,\"local_rank\":null"), "{text}");
        assert!(String::from_utf8(output_line(0, 0, "h", launcher, cut, "T".into()))
            .unwrap()
            .ends_with(",\"end\":\"cut\"}\n"));
    }

    #[test]
    fn events_are_stamped_and_flat() {
        let e = Event::AttemptStarted { attempt: 1, master_addr: "10.0.0.1".into(), master_port: 29500 };
        assert_eq!(
            String::from_utf8(event_line(&e, "T".into())).unwrap(),
            "{\"ts\":\"T\",\"event\":\"attempt_started\",\"attempt\":1,\"master_addr\":\"10.0.0.1\",\"master_port\":29500}\n"
        );
    }
}
