//! The `[notify]` hook as a sink: it hears of the notable events, each as its JSON line.

use super::json;
use super::sink::{Shared, Sink, Turn};
use crate::notify::Notifier;

pub struct NotifySink(Option<Notifier>);

impl NotifySink {
    pub fn new(notifier: Notifier) -> NotifySink {
        NotifySink(Some(notifier))
    }
}

impl Sink for NotifySink {
    fn event(&mut self, turn: &Turn, _shared: &mut Shared) {
        if let Some(n) = self.0.as_ref().filter(|_| Notifier::wants(turn.event)) {
            n.send(json::event_line(turn.event, turn.ts()));
        }
    }

    /// Waits for the hooks left (at most `notify.timeout`).
    fn finish(&mut self, _shared: &mut Shared) {
        if let Some(n) = self.0.take() {
            n.finish();
        }
    }
}
