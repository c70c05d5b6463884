//! `--metrics` as a sink: every event folded into the run's `Metrics`, which the metrics
//! thread renders when scraped. Ranks' lines count only for the time of the last progress,
//! taken at most once a second.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::sink::{Shared, Sink, Turn};
use crate::events::Event;
use crate::metrics::Metrics;
use crate::supervisor::Progress;

/// The finest the time of the last progress is kept at: lines within it are not looked at.
const PROGRESS_STEP: Duration = Duration::from_secs(1);

pub struct MetricsSink {
    metrics: Arc<Mutex<Metrics>>,
    progress: Progress,
}

impl MetricsSink {
    pub fn new(metrics: Arc<Mutex<Metrics>>, progress: Progress) -> MetricsSink {
        MetricsSink { metrics, progress }
    }
}

impl Sink for MetricsSink {
    fn event(&mut self, turn: &Turn, _shared: &mut Shared) {
        let now = turn.at;
        let mut metrics = self.metrics.lock().unwrap_or_else(|e| e.into_inner());
        if let Event::NodeOutput { source, lines, .. } = turn.event {
            let recent = metrics
                .last_progress()
                .is_some_and(|t| now.duration_since(t).unwrap_or_default() < PROGRESS_STEP);
            if !recent && self.progress.in_lines(source, lines) {
                metrics.progressed(now);
            }
        } else {
            metrics.observe(turn.event, now);
        }
    }
}
