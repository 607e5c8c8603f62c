//! The window merger's orders and report: with `--switch-output` and no
//! live merger, it merges each closed window (or several, joined) into
//! an output of its own, one [`Job`] after another, and reports the
//! [`Outputs`] it kept when its orders end.

use std::collections::VecDeque;
use std::path::PathBuf;

use crate::Framed;

/// What the merger is asked to do: merge these windows (oldest first;
/// several are joined first) of the recording in `root` into `output`. A
/// single window of the recording's own directory is removed once
/// merged, unless the windows are kept for later snapshots; a snapshot's
/// own directory (links to the windows it joins) is removed once merged.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Job {
    /// The recording (or a snapshot's own directory of links).
    #[serde(with = "crate::frame::path_bytes")]
    pub root: PathBuf,
    /// Its windows to merge, oldest first.
    pub windows: Vec<u32>,
    /// The perf.data to write.
    #[serde(with = "crate::frame::path_bytes")]
    pub output: PathBuf,
}

impl Framed for Job {}

/// The outputs of a `--switch-output` recording, the oldest first, kept
/// to `--switch-max-files` (also the window merger's report).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Outputs {
    /// The recording's directory.
    #[serde(with = "crate::frame::path_bytes")]
    pub root: PathBuf,
    /// The outputs kept.
    #[serde(with = "crate::frame::path_bytes::list")]
    pub kept: VecDeque<PathBuf>,
    /// How many may be kept (`None`: all).
    pub max_files: Option<usize>,
    /// Outputs not written, their windows' shards kept.
    #[serde(with = "crate::frame::path_bytes::list")]
    pub failed: Vec<PathBuf>,
    /// The last window goes to the output itself, not timestamped.
    pub last_unstamped: bool,
}

impl Outputs {
    /// Adds a finished output, removing the oldest past the maximum, as
    /// perf does.
    pub fn add(&mut self, output: PathBuf) {
        self.kept.push_back(output);
        while self.max_files.is_some_and(|max| self.kept.len() > max) {
            if let Some(old) = self.kept.pop_front() {
                let _ = std::fs::remove_file(&old);
            }
        }
    }
}

impl Framed for Outputs {}
