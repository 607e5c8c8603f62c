//! The progress bar over bytes merged: on a terminal only, and never with
//! `--quiet`.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A byte counter that may draw a bar.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar over `total` bytes, hidden when `show` is false or stderr is
    /// not a terminal.
    pub fn new(total: u64, show: bool) -> Progress {
        let bar = if show && std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template(
                    "merging {bar:40} {bytes}/{total_bytes} ({binary_bytes_per_sec}, {eta})",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        } else {
            ProgressBar::hidden()
        };
        Progress { bar }
    }

    /// Counts `bytes` more as done.
    pub fn advance(&self, bytes: u64) {
        self.bar.inc(bytes);
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
