//! Turning run events into what people read: prefixed job output on stdout, herd's own status
//! lines on stderr, and the run's files. The reporter runs on its own thread and never touches
//! a process; the supervisor never prints.

pub mod board;
mod console;
pub mod doctor_view;
pub mod exec_view;
pub mod files;
pub mod json;
mod live;
pub mod mode;
mod notify;
pub mod plan_view;
pub mod prefix;
pub mod record;
mod screen;
mod sink;
pub mod summary;

use std::io::Write;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::events::Event;
use console::Console;
use screen::Screen;
use sink::{Names, Shared, Sink};

pub use crate::lines::printable;
pub use files::{node_log_path, RunFiles};
pub use mode::Mode;

/// Where the reporter writes.
pub struct Sinks {
    /// Job output, or JSON lines.
    pub stdout: Box<dyn Write + Send>,
    /// herd's own status lines, and the board.
    pub stderr: Box<dyn Write + Send>,
    pub mode: Mode,
    /// Told once when stdout is closed under the reporter (`herd run | head`): the reader
    /// is gone, and the run should stop as for Ctrl-C.
    pub on_stdout_closed: Option<mpsc::UnboundedSender<()>>,
    /// The ranks whose lines are shown (`None`: all); the files keep every line.
    pub console: Option<crate::config::RankList>,
    /// `[notify]`: hears of the notable events.
    pub notify: Option<crate::notify::Notifier>,
}

/// What the reporter knows at the end.
#[derive(Debug, Default)]
pub struct Report {
    /// The first error writing the run's files, after which they were no longer written.
    pub file_error: Option<String>,
    /// stdout was closed by its reader; the files kept everything.
    pub stdout_closed: bool,
}

/// How often the board is redrawn when nothing happens (its clocks move on), and at most how
/// long job output waits under it: every write to the terminal takes the board down and puts
/// it back, so with a board, output goes out in batches at this pace.
const BOARD_TICK: Duration = Duration::from_millis(100);

/// Consume events until the channel closes, each fed to every sink. A closed stdout stops the
/// echo but not the log files, and asks for the run to stop (`Sinks::on_stdout_closed`); a
/// failing disk stops the files but not the echo. Neither stops reading events, so the run
/// itself never stalls on its output.
pub fn report(files: RunFiles, mut events: mpsc::Receiver<Event>, sinks: Sinks) -> Report {
    let mut names = Names::new(files.hosts().to_vec());
    let on_stdout_closed = sinks.on_stdout_closed.clone();
    let (mut shared, mut all) = open(files, sinks);
    // Waiting with a timeout needs a timer; only the board needs one.
    let timer = shared
        .screen
        .live()
        .then(|| tokio::runtime::Builder::new_current_thread().enable_time().build().ok())
        .flatten();
    loop {
        let event = match &timer {
            Some(rt) => match rt.block_on(async { tokio::time::timeout(BOARD_TICK, events.recv()).await }) {
                Ok(Some(event)) => event,
                Ok(None) => break,
                Err(_) => {
                    shared.screen.flush_job();
                    all.iter_mut().for_each(|sink| sink.tick(&mut shared));
                    continue;
                }
            },
            None => match events.blocking_recv() {
                Some(event) => event,
                None => break,
            },
        };
        let turn = names.turn(&event);
        all.iter_mut().for_each(|sink| sink.event(&turn, &mut shared));
        if events.is_empty() && shared.screen.due() {
            shared.screen.flush_job();
        }
        if shared.screen.out_closed && !shared.report.stdout_closed {
            shared.report.stdout_closed = true;
            shared.screen.status("stdout was closed: stopping the run (the log files keep everything)");
            if let Some(stop) = &on_stdout_closed {
                let _ = stop.send(());
            }
        }
    }
    all.iter_mut().for_each(|sink| sink.finish(&mut shared));
    shared.screen.flush_job();
    shared.report.stdout_closed = shared.screen.out_closed;
    shared.screen.clear();
    shared.report
}

/// The sinks, in the order each event reaches them: the files, `--json`, the console (which
/// tells of the files' first error after them), the hook, the board.
fn open(files: RunFiles, sinks: Sinks) -> (Shared, Vec<Box<dyn Sink>>) {
    let color = sinks.mode.color();
    let json = sinks.mode == Mode::Json;
    let live = matches!(sinks.mode, Mode::Board { .. }).then(live::Live::new);
    let screen = Screen::new(sinks.stdout, sinks.stderr, live);
    let console = Console::new(files.hosts(), color, !json, sinks.console, files.run_dir().to_path_buf());
    let board = screen.live().then(|| board::Board::new(Instant::now()));
    let mut all: Vec<Box<dyn Sink>> = vec![Box::new(files)];
    if json {
        all.push(Box::new(json::JsonSink::default()));
    }
    all.push(Box::new(console));
    all.extend(sinks.notify.map(|n| Box::new(notify::NotifySink::new(n)) as Box<dyn Sink>));
    all.extend(board.map(|b| Box::new(b) as Box<dyn Sink>));
    (Shared { screen, report: Report::default() }, all)
}
