//! A run's timeline as one self-contained HTML page: a header line (the run, its wall time, how
//! it ended, the share of it spent training), an inline SVG (the job's row and a row per node
//! over a time axis, the faults, stragglers and restarts marked, a legend), and a table of the
//! attempts. No script, no external asset; every segment says what it is and how long it
//! lasted in its tooltip (an SVG `<title>`). Pure: `Timeline` in, the page out.
//!
//! Its size is bounded whatever the run's length: the job's states are drawn once, as a band
//! behind every node's row (each node in the job shares them), and a node's row draws only its
//! own states over it (spare, lost, quarantined, out). What is thinner than a pixel is drawn
//! with its neighbours, in the colour of the state that held most of the time there.

use std::fmt::Write;
use std::time::Duration;

use super::summary::root_cause_words;
use crate::outcome::RootCause;
use crate::timeline::{share, AttemptTimes, Mark, Marked, Outcome, Row, Segment, State, Timeline};

/// The SVG's coordinates: the page scales them to its width.
const WIDTH: f64 = 1200.0;
/// The row labels on the left, the training shares on the right.
const LABEL_W: f64 = 230.0;
const SHARE_W: f64 = 56.0;
const PLOT_X: f64 = LABEL_W;
const PLOT_W: f64 = WIDTH - LABEL_W - SHARE_W;
const AXIS_Y: f64 = 16.0;
const RESTARTS_Y: f64 = 26.0;
const JOB_Y: f64 = 40.0;
const JOB_H: f64 = 22.0;
const ROWS_Y: f64 = JOB_Y + JOB_H + 6.0;
const ROW_H: f64 = 14.0;
const ROW_GAP: f64 = 2.0;
/// Narrower than this, a segment is drawn with its neighbours.
const MIN_W: f64 = 1.0;
/// The longest row label, in characters (its name, ` · `, what it held), and the longest
/// part of it that says what it held.
const LABEL_CHARS: usize = 32;
const DETAIL_CHARS: usize = 15;
/// Past this many attempts, the table of attempts starts folded.
const OPEN_ATTEMPTS: usize = 20;

/// The colours, Okabe and Ito's palette for colour-blind readers; a node's loss and its
/// quarantine are hatched too.
fn fill(state: State) -> &'static str {
    match state {
        State::Launching => "#0072B2",
        State::Starting => "#56B4E9",
        State::Training => "#009E73",
        State::Stopping => "#E69F00",
        State::Backoff => "#F0E442",
        State::Spare => "#D9D9D9",
        State::Lost => "url(#lost)",
        State::Quarantined => "url(#quarantined)",
        State::Out => "#FFFFFF",
    }
}

/// What a state is, for the legend and the tooltips.
fn meaning(state: State) -> &'static str {
    match state {
        State::Launching => "herd connects, checks and starts every node",
        State::Starting => "every node's ranks run, no progress yet",
        State::Training => "progress seen, no failure yet",
        State::Stopping => "a failure seen (or a stop asked): stacks, teardown",
        State::Backoff => "the wait before a restart",
        State::Spare => "idle until it takes a node rank",
        State::Lost => "herd lost the node",
        State::Quarantined => "kept out of the run",
        State::Out => "left the job, no spare in its place",
    }
}

const PATTERNS: &str = r##"<defs>
<pattern id="lost" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#D55E00"/><rect width="2" height="6" fill="#FFFFFF" fill-opacity="0.45"/></pattern>
<pattern id="quarantined" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="#CC79A7"/><path d="M0 0L6 6M6 0L0 6" stroke="#FFFFFF" stroke-opacity="0.5" stroke-width="1"/></pattern>
</defs>
"##;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:16px 24px;color:#222}\
h1{font-size:20px;margin:0 0 6px}p.about{margin:0 0 12px;font-size:14px}\
svg{width:100%;height:auto;max-width:1800px;display:block}\
table{border-collapse:collapse;font-size:13px;margin-top:6px}\
th,td{border:1px solid #ccc;padding:2px 8px;text-align:right;white-space:nowrap}\
td.why,th.why{text-align:left;white-space:normal}summary{cursor:pointer;font-size:14px;margin-top:12px}";

/// The page.
pub fn html(t: &Timeline) -> String {
    let mut s = String::new();
    let id = esc(&t.run_id);
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>herd run {id}: where the time went</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>herd run {id}</h1>\n<p class=\"about\">{}</p>\n",
        about(t)
    );
    s.push_str(&svg(t));
    attempts_table(&mut s, t);
    s.push_str("</body>\n</html>\n");
    s
}

/// The header line.
fn about(t: &Timeline) -> String {
    let started =
        humantime::format_rfc3339_seconds(t.started).to_string().replace('T', " ").replace('Z', " UTC");
    let ended = match &t.status {
        Some(status) => esc(status),
        None => "no end recorded (still running, or herd was killed): drawn to the last event".into(),
    };
    let failed = t.attempts.iter().filter(|a| matches!(a.outcome, Outcome::Failed { .. })).count();
    let mut s = format!(
        "started {started} · wall time {} · {ended} · {} attempt{}, {failed} failed",
        span(t.wall),
        t.attempts.len(),
        if t.attempts.len() == 1 { "" } else { "s" },
    );
    if let Some(why) = &t.abandoned {
        let _ = write!(s, " · no restart: {}", esc(why));
    }
    let _ = write!(
        s,
        " · <b>training {:.1}%</b> of the wall time ({}, every node of the attempt training)",
        100.0 * t.training_share(),
        span(t.training())
    );
    s
}

/// Time → x.
struct Scale(f64);

impl Scale {
    fn new(wall: Duration) -> Scale {
        Scale(PLOT_W / wall.as_secs_f64().max(1.0))
    }

    fn x(&self, at: Duration) -> f64 {
        PLOT_X + at.as_secs_f64() * self.0
    }
}

fn row_y(i: usize) -> f64 {
    ROWS_Y + i as f64 * (ROW_H + ROW_GAP)
}

fn svg(t: &Timeline) -> String {
    let scale = Scale::new(t.wall);
    let bottom = row_y(t.rows.len()) - ROW_GAP;
    let legend_y = bottom + 20.0;
    let legend_lines = legend_items(t).len().div_ceil(LEGEND_PER_LINE);
    let height = legend_y + legend_lines as f64 * LEGEND_LINE;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {height:.0}\" \
         font-family=\"system-ui,sans-serif\" font-size=\"11\" role=\"img\" \
         aria-label=\"where the time of run {} went, node by node\">\n{PATTERNS}",
        esc(&t.run_id)
    );
    let ticks = ticks(t.wall);
    axis(&mut s, &ticks, &scale);
    restarts(&mut s, &t.attempts, &scale);
    // The job's states, behind its own row and every node's; edges on whole pixels, so that
    // no seam shows between neighbours.
    s.push_str("<g shape-rendering=\"crispEdges\">\n");
    for cell in cells(&t.job, &scale) {
        let title = job_title(&cell, t);
        rect(&mut s, (cell.x0, cell.x1), (JOB_Y, bottom), fill(cell.state), &title);
    }
    s.push_str("</g>\n<g fill=\"#FFFFFF\" shape-rendering=\"crispEdges\">\n");
    let _ = writeln!(s, "<rect x=\"{PLOT_X}\" y=\"{}\" width=\"{PLOT_W}\" height=\"6\"/>", JOB_Y + JOB_H);
    for i in 1..t.rows.len() {
        let y = row_y(i) - ROW_GAP;
        let _ = writeln!(s, "<rect x=\"{PLOT_X}\" y=\"{y:.1}\" width=\"{PLOT_W}\" height=\"{ROW_GAP}\"/>");
    }
    s.push_str("</g>\n<g shape-rendering=\"crispEdges\">\n");
    for (i, row) in t.rows.iter().enumerate() {
        own_segments(&mut s, row, i, &scale);
    }
    s.push_str("</g>\n");
    // The ticks' faint lines down the rows.
    s.push_str("<g stroke=\"#FFFFFF\" stroke-opacity=\"0.35\" shape-rendering=\"crispEdges\">\n");
    for &at in &ticks {
        let x = scale.x(Duration::from_secs(at));
        let _ = writeln!(s, "<line x1=\"{x:.1}\" y1=\"{JOB_Y}\" x2=\"{x:.1}\" y2=\"{bottom:.1}\"/>");
    }
    s.push_str("</g>\n<g stroke=\"#FFFFFF\" stroke-width=\"0.8\">\n");
    let faults: Vec<&AttemptTimes> = t.attempts.iter().filter(|a| a.fault.is_some()).collect();
    // Many faults: narrower marks, so that each shows.
    let half = (PLOT_W / faults.len().max(1) as f64 / 2.0).clamp(1.5, 4.5);
    for a in faults {
        if let (Some(at), Outcome::Failed { class, root_cause }) = (a.fault, &a.outcome) {
            fault_mark(
                &mut s,
                scale.x(at),
                JOB_Y,
                half,
                &fault_text(a.attempt, class, root_cause.as_ref(), at),
            );
        }
    }
    for (i, row) in t.rows.iter().enumerate() {
        for m in &row.marks {
            let (x, y) = (scale.x(m.at), row_y(i));
            match &m.what {
                Marked::Fault { attempt, class, cause } => {
                    fault_mark(&mut s, x, y, 4.5, &fault_text(*attempt, class, Some(cause), m.at));
                }
                Marked::Straggler { .. } => straggler_mark(&mut s, x, y, &straggler_text(m)),
            }
        }
    }
    s.push_str("</g>\n");
    labels(&mut s, t);
    legend(&mut s, legend_y, t);
    s.push_str("</svg>\n");
    s
}

/// The axis's ticks, in seconds from the start: every round step within the wall time.
fn ticks(wall: Duration) -> Vec<u64> {
    let step = tick_step(wall);
    (0..).map(|i| i * step).take_while(|&at| at as f64 <= wall.as_secs_f64()).collect()
}

/// The time axis on top: each tick's time and its mark.
fn axis(s: &mut String, ticks: &[u64], scale: &Scale) {
    s.push_str("<g fill=\"#444\" text-anchor=\"middle\">\n");
    for &at in ticks {
        let x = scale.x(Duration::from_secs(at));
        let _ = writeln!(
            s,
            "<text x=\"{x:.1}\" y=\"{AXIS_Y}\">{}</text><line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#999\"/>",
            tick_label(at),
            AXIS_Y + 3.0,
            AXIS_Y + 7.0
        );
    }
    s.push_str("</g>\n");
}

/// A round step that puts at most twelve ticks on the axis.
fn tick_step(wall: Duration) -> u64 {
    const STEPS: [u64; 22] = [
        1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800,
        345600, 604800, 2419200,
    ];
    let wall = wall.as_secs_f64();
    STEPS.into_iter().find(|&step| wall / step as f64 <= 12.0).unwrap_or(2419200)
}

/// `0`, `45s`, `1m30s`, `2h`, `1d6h`: the tick's time from the start, its parts that are not 0.
fn tick_label(secs: u64) -> String {
    if secs == 0 {
        return "0".into();
    }
    let parts = [(secs / 86400, "d"), (secs % 86400 / 3600, "h"), (secs % 3600 / 60, "m"), (secs % 60, "s")];
    parts.iter().filter(|(n, _)| *n > 0).map(|(n, unit)| format!("{n}{unit}")).collect()
}

/// Each restart (an attempt after the first begins) as a tick above the job's row.
fn restarts(s: &mut String, attempts: &[AttemptTimes], scale: &Scale) {
    s.push_str("<g stroke=\"#222\" stroke-width=\"1\">\n");
    for a in attempts.iter().filter(|a| a.attempt > 0) {
        let x = scale.x(a.started);
        let title = format!("attempt {} started at {}", a.attempt, clock(a.started));
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{RESTARTS_Y}\" x2=\"{x:.1}\" y2=\"{}\"><title>{}</title></line>",
            JOB_Y - 2.0,
            esc(&title)
        );
    }
    s.push_str("</g>\n");
}

/// A row's own states (those outside the job), over the job's band; at least `MIN_W` wide.
fn own_segments(s: &mut String, row: &Row, i: usize, scale: &Scale) {
    let who = row_name(row);
    for seg in row.segments.iter().filter(|seg| !seg.state.of_job()) {
        let (x0, x1) = (scale.x(seg.from), scale.x(seg.to));
        let mut title = format!("{who} · {} {} ({})", seg.state.name(), span(seg.len()), between(seg));
        match &seg.note {
            Some(note) => {
                let _ = write!(title, "\n{note}");
            }
            None => {
                let _ = write!(title, "\n{}", meaning(seg.state));
            }
        }
        let y = row_y(i);
        rect(s, (x0, x1.max(x0 + MIN_W)), (y, y + ROW_H), fill(seg.state), &title);
    }
}

/// A fault at `x` on the row at `y`: a triangle `half` wide each side.
fn fault_mark(s: &mut String, x: f64, y: f64, half: f64, title: &str) {
    let _ = writeln!(
        s,
        "<path d=\"M{:.1} {y:.1}h{:.1}l-{half:.1} 8z\" fill=\"#000000\"><title>fault: {}</title></path>",
        x - half,
        2.0 * half,
        esc(title)
    );
}

/// A straggler at `x` on the row at `y`: a circle.
fn straggler_mark(s: &mut String, x: f64, y: f64, title: &str) {
    let _ = writeln!(
        s,
        "<circle cx=\"{x:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"#FFFFFF\" stroke=\"#000000\"><title>straggler: {}</title></circle>",
        y + ROW_H / 2.0,
        esc(title)
    );
}

/// `attempt 3 failed (comm): node 1 (n2): exit code 1, seen at 12m04s`.
fn fault_text(attempt: u32, class: &str, cause: Option<&RootCause>, at: Duration) -> String {
    let cause = cause.map_or_else(|| "no one node to blame".to_string(), root_cause_words);
    format!("attempt {attempt} failed ({class}): {cause}, seen at {}", clock(at))
}

fn straggler_text(m: &Mark) -> String {
    let Marked::Straggler { attempt, rank, score, alone } = m.what else { return String::new() };
    let whose = if alone {
        "the job's own work (every other rank idle): no node blamed"
    } else {
        "the others wait for it"
    };
    format!(
        "attempt {attempt}: rank {rank}, {score:.1}× the median rank's CPU; {whose}; seen at {}",
        clock(m.at)
    )
}

/// The rows' names on the left and their training shares on the right.
fn labels(s: &mut String, t: &Timeline) {
    s.push_str("<g fill=\"#222\">\n");
    let restarts = t.attempts.len().saturating_sub(1);
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#666\">restarts ({restarts})</text>",
        LABEL_W - 6.0,
        JOB_Y - 6.0
    );
    let share_x = WIDTH - 4.0;
    let job_mid = JOB_Y + JOB_H / 2.0 + 4.0;
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{job_mid}\" text-anchor=\"end\" font-weight=\"bold\">job<tspan fill=\"#666\" font-weight=\"normal\"> · every node in it</tspan></text>",
        LABEL_W - 6.0
    );
    let share_title = "the share of the wall time that every node of the attempt trained";
    let _ = writeln!(
        s,
        "<text x=\"{share_x}\" y=\"{job_mid}\" text-anchor=\"end\" font-weight=\"bold\">{:.1}%<title>{share_title}</title></text>",
        100.0 * t.training_share()
    );
    let _ = writeln!(
        s,
        "<text x=\"{share_x}\" y=\"{}\" text-anchor=\"end\" fill=\"#666\">training</text>",
        JOB_Y - 6.0
    );
    for (i, row) in t.rows.iter().enumerate() {
        let y = row_y(i) + ROW_H - 3.0;
        let (name, detail) = row_label(row);
        let detail = clip(&detail, DETAIL_CHARS);
        let name = clip(&name, LABEL_CHARS - 3 - detail.chars().count());
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{y:.1}\" text-anchor=\"end\">{}<tspan fill=\"#666\"> · {}</tspan><title>{}</title></text>",
            LABEL_W - 6.0,
            esc(&name),
            esc(&detail),
            esc(&row_name(row))
        );
        let trained = share(row.time_in(State::Training), t.wall);
        let _ = writeln!(
            s,
            "<text x=\"{share_x}\" y=\"{y:.1}\" text-anchor=\"end\">{:.1}%</text>",
            100.0 * trained
        );
    }
    s.push_str("</g>\n");
}

/// A row's name and what it held: `gpu-07` and `node 3`; `224 nodes` and `nodes 0-223`.
fn row_label(row: &Row) -> (String, String) {
    let ranks = ranks_text(row);
    match row.hosts.len() {
        1 => (row.hosts[0].clone(), ranks),
        n => (format!("{n} nodes"), ranks),
    }
}

/// The row's hosts, for its tooltips: one host, or the group's hostlist.
fn row_name(row: &Row) -> String {
    let hosts: Vec<&str> = row.hosts.iter().map(String::as_str).collect();
    match hosts.len() {
        1 => hosts[0].to_string(),
        n => format!("{n} nodes: {}", crate::config::hostlist::compress(&hosts)),
    }
}

/// `node 3`, `nodes 0-3,7`, or `spare` for a row that never held a node rank.
fn ranks_text(row: &Row) -> String {
    let ranks: Vec<usize> = row.node_ranks.iter().copied().collect();
    let mut runs: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        runs.push(if i == j { ranks[i].to_string() } else { format!("{}-{}", ranks[i], ranks[j]) });
        i = j + 1;
    }
    match ranks.len() {
        0 if row.segments.iter().any(|s| s.state == State::Quarantined) => "quarantined".into(),
        0 => "spare".into(),
        1 => format!("node {}", runs[0]),
        _ => format!("nodes {}", runs.join(",")),
    }
}

fn clip(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_string();
    }
    let mut s: String = text.chars().take(chars - 1).collect();
    s.push('…');
    s
}

/// The legend's items: every state the page can show (`out` only where a node is), then the
/// marks.
fn legend_items(t: &Timeline) -> Vec<(Swatch, &'static str, &'static str)> {
    let out = t.rows.iter().any(|r| r.segments.iter().any(|s| s.state == State::Out));
    let mut items: Vec<(Swatch, &'static str, &'static str)> = State::ALL
        .into_iter()
        .filter(|&st| st != State::Out || out)
        .map(|st| (Swatch::Fill(fill(st)), st.name(), meaning(st)))
        .collect();
    items.push((Swatch::Fault, "fault", "on its root cause's node, when it was seen"));
    items.push((Swatch::Straggler, "straggler", "a rank the others waited for"));
    items.push((Swatch::Restart, "restart", "an attempt after the first begins"));
    items
}

enum Swatch {
    Fill(&'static str),
    Fault,
    Straggler,
    Restart,
}

const LEGEND_PER_LINE: usize = 3;
const LEGEND_LINE: f64 = 16.0;

/// The legend under the rows, `LEGEND_PER_LINE` items a line.
fn legend(s: &mut String, y: f64, t: &Timeline) {
    s.push_str("<g fill=\"#222\">\n");
    for (i, (swatch, name, meaning)) in legend_items(t).into_iter().enumerate() {
        let x = (10.0 + (i % LEGEND_PER_LINE) as f64 * (WIDTH - 20.0) / LEGEND_PER_LINE as f64).round();
        let y = y + (i / LEGEND_PER_LINE) as f64 * LEGEND_LINE;
        let _ = match swatch {
            Swatch::Fill(fill) => write!(
                s,
                "<rect x=\"{x}\" y=\"{:.1}\" width=\"14\" height=\"11\" fill=\"{fill}\" stroke=\"#888\" stroke-width=\"0.5\"/>",
                y - 9.0
            ),
            Swatch::Fault => write!(s, "<path d=\"M{:.1} {:.1}h9l-4.5 8z\"/>", x + 2.5, y - 8.0),
            Swatch::Straggler => write!(
                s,
                "<circle cx=\"{}\" cy=\"{:.1}\" r=\"3.5\" fill=\"#FFFFFF\" stroke=\"#000000\"/>",
                x + 7.0,
                y - 3.5
            ),
            Swatch::Restart => write!(
                s,
                "<line x1=\"{x2}\" y1=\"{:.1}\" x2=\"{x2}\" y2=\"{:.1}\" stroke=\"#222\"/>",
                y - 10.0,
                y + 1.0,
                x2 = x + 7.0
            ),
        };
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{y:.1}\"><tspan font-weight=\"bold\">{name}</tspan> <tspan fill=\"#555\">{meaning}</tspan></text>",
            x + 20.0
        );
    }
    s.push_str("</g>\n");
}

/// A rectangle from `x.0` to `x.1` and `y.0` to `y.1`. Its ends are rounded, not its width:
/// neighbours that meet still meet, with no seam between them.
fn rect(s: &mut String, x: (f64, f64), y: (f64, f64), fill: &str, title: &str) {
    let round = |v: f64| (v * 10.0).round() / 10.0;
    let (x0, y0) = (round(x.0), round(y.0));
    let (w, h) = (round(x.1) - x0, round(y.1) - y0);
    let _ = writeln!(
        s,
        "<rect x=\"{x0:.1}\" y=\"{y0:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"{fill}\"><title>{}</title></rect>",
        esc(title)
    );
}

/// What is drawn as one rectangle of a row: one segment, or thin ones together.
struct Cell<'a> {
    x0: f64,
    x1: f64,
    /// The state that held most of its time.
    state: State,
    segments: Vec<&'a Segment>,
}

impl<'a> Cell<'a> {
    fn of(segment: &'a Segment, x0: f64, x1: f64) -> Cell<'a> {
        Cell { x0, x1, state: segment.state, segments: vec![segment] }
    }

    fn add(&mut self, segment: &'a Segment, x1: f64) {
        self.segments.push(segment);
        self.x1 = x1;
        self.state = self.most();
    }

    fn most(&self) -> State {
        let by_state = time_by_state(&self.segments);
        by_state.iter().max_by_key(|(_, d)| *d).map_or(State::Training, |(st, _)| *st)
    }
}

/// The time `segments` spent in each state, in the states' order.
fn time_by_state(segments: &[&Segment]) -> Vec<(State, Duration)> {
    let mut by_state: Vec<(State, Duration)> = Vec::new();
    for seg in segments {
        match by_state.iter_mut().find(|(st, _)| *st == seg.state) {
            Some((_, d)) => *d += seg.len(),
            None => by_state.push((seg.state, seg.len())),
        }
    }
    by_state.sort();
    by_state
}

/// The rectangles that draw `segments`: each segment at least `MIN_W` wide is one; thinner
/// ones in a row make one of at least `MIN_W`, and what is left too thin goes to the next.
/// Neighbours mixed alike are one.
fn cells<'a>(segments: &'a [Segment], scale: &Scale) -> Vec<Cell<'a>> {
    let mut out: Vec<Cell<'a>> = Vec::new();
    let mut thin: Option<Cell<'a>> = None;
    for seg in segments {
        let (x0, x1) = (scale.x(seg.from), scale.x(seg.to));
        if x1 - x0 >= MIN_W {
            let mut cell = Cell::of(seg, x0, x1);
            // Too thin to show alone: drawn under this one.
            if let Some(t) = thin.take() {
                cell.x0 = t.x0;
            }
            out.push(cell);
            continue;
        }
        match &mut thin {
            Some(t) => t.add(seg, x1),
            None => thin = Some(Cell::of(seg, x0, x1)),
        }
        if thin.as_ref().is_some_and(|t| t.x1 - t.x0 >= MIN_W) {
            let t = thin.take().expect("just checked");
            match out.last_mut() {
                Some(last) if last.segments.len() > 1 && last.state == t.state => {
                    for seg in t.segments {
                        last.add(seg, t.x1);
                    }
                }
                _ => out.push(t),
            }
        }
    }
    if let Some(t) = thin {
        match out.last_mut() {
            Some(last) => last.x1 = t.x1,
            None => out.push(t),
        }
    }
    out
}

/// A cell of the job's row: one segment, said with its attempt's story; or what thin ones
/// held together.
fn job_title(cell: &Cell<'_>, t: &Timeline) -> String {
    let [seg] = cell.segments[..] else {
        return mixed_title(cell);
    };
    let k = seg.attempt.unwrap_or(0);
    let what = match seg.state {
        State::Backoff => format!("backoff {} before attempt {k}", span(seg.len())),
        State::Stopping => {
            let why = t.attempts.iter().find(|a| a.attempt == k).and_then(|a| a.stopping.as_ref());
            let why = why.map(|(_, why)| format!(": {why}")).unwrap_or_default();
            format!("attempt {k} · stopping {}{why}", span(seg.len()))
        }
        state => format!("attempt {k} · {} {}: {}", state.name(), span(seg.len()), meaning(state)),
    };
    let story = t.attempts.iter().find(|a| a.attempt == k).map(story).unwrap_or_default();
    format!("{what} ({})\n{story}", between(seg))
}

/// Thin segments drawn as one: their span, and the time in each state.
fn mixed_title(cell: &Cell<'_>) -> String {
    let (first, last) = (cell.segments[0], cell.segments[cell.segments.len() - 1]);
    let parts: Vec<String> =
        time_by_state(&cell.segments).iter().map(|(st, d)| format!("{} {}", st.name(), span(*d))).collect();
    let attempts = match (first.attempt, last.attempt) {
        (Some(a), Some(b)) if a != b => format!(" (attempts {a}-{b})"),
        (Some(a), _) => format!(" (attempt {a})"),
        _ => String::new(),
    };
    format!(
        "{} → {}, too short to draw apart{attempts}: {}",
        clock(first.from),
        clock(last.to),
        parts.join(", ")
    )
}

/// An attempt in one line: each of its moments after its start, how it ended, its backoff.
fn story(a: &AttemptTimes) -> String {
    let after = |at: Duration| format!("+{}", span(at.saturating_sub(a.started)));
    let mut s = format!("attempt {}: started at {}", a.attempt, clock(a.started));
    if let Some(at) = a.running {
        let _ = write!(s, ", every node running {}", after(at));
    }
    if let Some(at) = a.progress {
        let _ = write!(s, ", progress {}", after(at));
    }
    if let Some((at, _)) = &a.stopping {
        let _ = write!(s, ", stopping {}", after(*at));
    }
    if let Some(at) = a.ended {
        let _ = write!(s, ", ended {}: {}", after(at), outcome(&a.outcome));
    }
    if let Some(d) = a.backoff {
        let _ = write!(s, ", then a backoff of {}", span(d));
    }
    s
}

fn outcome(o: &Outcome) -> String {
    match o {
        Outcome::Succeeded => "succeeded".into(),
        Outcome::Failed { class, root_cause: Some(cause) } => format!("{class}, {}", root_cause_words(cause)),
        Outcome::Failed { class, root_cause: None } => format!("{class}, no one node to blame"),
        Outcome::Stopped(status) => status.clone(),
        Outcome::Unknown => "the record ends".into(),
    }
}

/// The attempts, one a line, under the picture.
fn attempts_table(s: &mut String, t: &Timeline) {
    let open = if t.attempts.len() <= OPEN_ATTEMPTS { " open" } else { "" };
    let _ = writeln!(
        s,
        "<details{open}>\n<summary>{} attempt{}</summary>\n<table>\n<tr><th>attempt</th><th>started</th>\
         <th>every node running</th><th>progress</th><th>stopping</th><th>ended</th><th>teardown</th>\
         <th>backoff</th><th class=\"why\">how it ended</th></tr>",
        t.attempts.len(),
        if t.attempts.len() == 1 { "" } else { "s" }
    );
    for a in &t.attempts {
        let after = |at: Option<Duration>| at.map(|at| format!("+{}", span(at.saturating_sub(a.started))));
        let stopping = a.stopping.as_ref().map(|(at, _)| *at);
        let teardown = stopping.zip(a.ended).map(|(from, to)| span(to.saturating_sub(from)));
        let mut how = outcome(&a.outcome);
        // Why it stopped, unless a node's failure did (its root cause says it).
        let blamed = matches!(a.outcome, Outcome::Failed { root_cause: Some(_), .. });
        if let Some((_, why)) = a.stopping.as_ref().filter(|_| !blamed) {
            let _ = write!(how, " (stopping: {why})");
        }
        let cells = [
            Some(clock(a.started)),
            after(a.running),
            after(a.progress),
            after(stopping),
            after(a.ended),
            teardown,
            a.backoff.map(span),
        ];
        let _ = write!(s, "<tr><td>{}</td>", a.attempt);
        for cell in cells {
            let _ = write!(s, "<td>{}</td>", cell.as_deref().unwrap_or("-"));
        }
        let _ = writeln!(s, "<td class=\"why\">{}</td></tr>", esc(&how));
    }
    s.push_str("</table>\n</details>\n");
}

/// `from → to` of a segment, from the run's start.
fn between(seg: &Segment) -> String {
    format!("{} → {}", clock(seg.from), clock(seg.to))
}

/// A moment, from the run's start: `4.2s`, `1m05s`, `1h02m05s`, `2d03h04m`.
fn clock(at: Duration) -> String {
    let secs = at.as_secs();
    let (d, h, m, s) = (secs / 86400, secs % 86400 / 3600, secs % 3600 / 60, secs % 60);
    match secs {
        0..60 => format!("{:.1}s", at.as_secs_f64()),
        60..3600 => format!("{m}m{s:02}s"),
        3600..86400 => format!("{h}h{m:02}m{s:02}s"),
        _ => format!("{d}d{h:02}h{m:02}m"),
    }
}

/// How long: `0.4s`, `12s`, `2m05s`, `3h04m`, `2d03h`.
fn span(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0..10 => format!("{:.1}s", d.as_secs_f64()),
        10..86400 => super::board::compact(d),
        _ => format!("{}d{:02}h", secs / 86400, secs % 86400 / 3600),
    }
}

/// Text for HTML and SVG: markup characters escaped.
fn esc(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => s.push_str("&amp;"),
            '<' => s.push_str("&lt;"),
            '>' => s.push_str("&gt;"),
            '"' => s.push_str("&quot;"),
            '\'' => s.push_str("&#39;"),
            c => s.push(c),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::NodeExit;
    use crate::timeline::testing::*;
    use crate::timeline::{build, Recorded, MAX_ROWS};

    /// Two nodes and a spare: a node's segfault quarantines it and the spare takes its place;
    /// a straggler; the second attempt succeeds.
    fn small() -> Timeline {
        let s = Stream::default()
            .at(0.0, started(&["gpu-01", "gpu-02"], &["gpu-03"]))
            .attempt(1.0, 0, 2)
            .at(
                40.0,
                Recorded::Straggler { attempt: 0, rank: 1, host: "gpu-01".into(), score: 2.5, alone: false },
            )
            .fault(60.0, 0, root(1, "gpu-02", NodeExit::Signal(11)), "crash", 4.0)
            .at(
                61.0,
                Recorded::NodeQuarantined {
                    host: "gpu-02".into(),
                    reason: "a process died of SIGSEGV".into(),
                },
            )
            .at(
                61.0,
                Recorded::SparePromoted { node_rank: 1, host: "gpu-03".into(), replaced: "gpu-02".into() },
            )
            .attempt(70.0, 1, 2)
            .at(130.0, Recorded::AttemptSucceeded { attempt: 1 })
            .at(130.0, finished("succeeded"));
        build(&s.0).unwrap()
    }

    #[test]
    fn a_small_run_draws_as_its_snapshot() {
        insta::assert_snapshot!(html(&small()));
    }

    #[test]
    fn the_page_stands_alone_and_says_what_each_segment_is() {
        let page = html(&small());
        // Nothing to fetch, nothing to run.
        for outside in ["<script", "http://", "https://", "<link", "<img", "@import", "url(http"] {
            let outside = outside.replace("http://www.w3.org/2000/svg", "");
            assert!(!page.replace("http://www.w3.org/2000/svg", "").contains(&outside), "{outside}");
        }
        assert!(page.contains("training 83.8%"), "{}", about(&small()));
        // Every drawn rectangle says what it is and how long, but the legend's and the gaps'.
        let rects = page.matches("<rect x=").count();
        let titled = page.matches("\"><title>").count();
        assert!(titled >= rects - 12 - 3, "{titled} of {rects}");
        assert!(
            page.contains("gpu-02 · quarantined 1m09s (1m01s → 2m10s)\na process died of SIGSEGV"),
            "{page}"
        );
        assert!(
            page.contains("attempt 0 · training 54s: progress seen, no failure yet (6.0s → 1m00s)"),
            "{page}"
        );
        assert!(page.contains(
            "fault: attempt 0 failed (crash): node 1 (gpu-02): signal 11 (SIGSEGV), seen at 1m00s"
        ));
        assert!(page.contains(
            "straggler: attempt 0: rank 1, 2.5× the median rank&#39;s CPU; the others wait for it"
        ));
    }

    #[test]
    fn text_from_the_record_is_escaped() {
        let mut t = small();
        t.rows[0].hosts[0] = "<b>&\"x'".into();
        t.abandoned = Some("a <reason>".into());
        let page = html(&t);
        assert!(page.contains("&lt;b&gt;&amp;&quot;x&#39;") && page.contains("a &lt;reason&gt;"));
        assert!(!page.contains("<b>&"));
    }

    #[test]
    fn the_axis_ticks_in_round_steps_of_seconds_to_days() {
        let secs = Duration::from_secs;
        assert_eq!(ticks(secs(43)), [0, 5, 10, 15, 20, 25, 30, 35, 40]);
        assert_eq!(ticks(secs(1224)).len(), 11);
        assert_eq!(tick_step(secs(1224)), 120);
        assert_eq!(tick_step(secs(3 * 86400)), 21600);
        assert_eq!(ticks(Duration::from_millis(300)), [0]);
        let labels: Vec<String> = [0, 45, 90, 7200, 9000, 86400, 108000].map(tick_label).to_vec();
        assert_eq!(labels, ["0", "45s", "1m30s", "2h", "2h30m", "1d", "1d6h"]);
        assert_eq!(span(Duration::from_millis(400)), "0.4s");
        assert_eq!(span(secs(125)), "2m05s");
        assert_eq!(span(secs(2 * 86400 + 3 * 3600)), "2d03h");
    }

    #[test]
    fn segments_thinner_than_a_pixel_are_drawn_together_in_the_state_that_held_most() {
        let seg = |state, from: u64, to: u64| Segment {
            state,
            from: Duration::from_secs(from),
            to: Duration::from_secs(to),
            attempt: Some(0),
            note: None,
        };
        // 940 units for 10,000 s: about 10.6 s a unit.
        let scale = Scale(PLOT_W / 10_000.0);
        let segments = [
            seg(State::Training, 0, 5000),
            seg(State::Stopping, 5000, 5002),
            seg(State::Backoff, 5002, 5010),
            seg(State::Launching, 5010, 5013),
            seg(State::Starting, 5013, 5030),
            seg(State::Training, 5030, 9990),
            seg(State::Stopping, 9990, 10_000),
        ];
        let cells = cells(&segments, &scale);
        let drawn: Vec<(State, usize)> = cells.iter().map(|c| (c.state, c.segments.len())).collect();
        // The first three thin ones (13 s) are one cell, in the state of its 8 s; the next is
        // wide enough alone; the last is drawn with the cell before it.
        assert_eq!(
            drawn,
            [(State::Training, 1), (State::Backoff, 3), (State::Starting, 1), (State::Training, 1)]
        );
        assert!(cells.windows(2).all(|w| (w[0].x1 - w[1].x0).abs() < 1e-9), "no gap, no overlap");
        assert!((cells[3].x1 - (PLOT_X + PLOT_W)).abs() < 1e-9);
        let title = mixed_title(&cells[1]);
        assert_eq!(
            title,
            "1h23m20s → 1h23m33s, too short to draw apart (attempt 0): launching 3.0s, stopping 2.0s, backoff 8.0s"
        );
    }

    #[test]
    fn a_three_day_run_of_300_attempts_on_254_nodes_stays_small() {
        let t = build(&long_run(254, 300, 864.0, |k| (k as usize * 7) % 254).0).unwrap();
        let page = html(&t.grouped(MAX_ROWS));
        // The job's cells, a fault mark each, a restart tick each, one row of 254 nodes.
        assert!(page.len() < 400_000, "{} bytes", page.len());
        assert!(page.matches("<rect").count() < 300 * 2 + 50, "{}", page.matches("<rect").count());
        assert!(page.contains("254 nodes"));
    }
}
