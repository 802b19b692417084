//! Progress bars for long work, drawn only when a person is watching: stderr is a
//! terminal, the output is not JSON, and `--quiet` is off.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Whether progress may be drawn.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    shown: bool,
}

impl Progress {
    /// Progress for a command: shown when stderr is a terminal, not `--quiet`, and the
    /// command does not print JSON.
    pub fn new(quiet: bool, json: bool) -> Self {
        Self {
            shown: !quiet && !json && std::io::stderr().is_terminal(),
        }
    }

    /// A bar of `total` steps with `what` as its message (hidden when not shown).
    pub fn bar(self, total: u64, what: &str) -> ProgressBar {
        if !self.shown {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(
            "{spinner} {msg:<32} [{bar:30}] {pos}/{len} {elapsed_precise}",
        )
        .map(|s| s.progress_chars("=> "));
        if let Ok(style) = style {
            bar.set_style(style);
        }
        bar.set_message(what.to_owned());
        bar
    }
}
