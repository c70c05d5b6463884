//! Drawing the status board on the terminal (stderr) with indicatif, and keeping job lines
//! and status lines above it.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Live {
    bar: ProgressBar,
}

impl Live {
    pub fn new() -> Live {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(10));
        bar.set_style(ProgressStyle::with_template("{msg}").expect("a valid template"));
        Live { bar }
    }

    /// Draws what `render` makes of the terminal's width.
    pub fn draw(&self, render: impl FnOnce(usize) -> String) {
        self.bar.set_message(render(terminal_width()));
    }

    /// Takes the board off the screen while `f` writes, then puts it back.
    pub fn above<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }

    pub fn clear(&self) {
        self.bar.finish_and_clear();
    }
}

fn terminal_width() -> usize {
    // SAFETY: TIOCGWINSZ fills a winsize; on failure it is left zeroed and ignored.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    if ok && size.ws_col > 0 {
        usize::from(size.ws_col)
    } else {
        80
    }
}
