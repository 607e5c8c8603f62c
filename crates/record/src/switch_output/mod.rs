//! `--switch-output`: the recording cut into windows, each a recording
//! directory of its own (`OUTPUT.shards/windowNNNNNN/`), each made its
//! own `OUTPUT.TIMESTAMP` while recording goes on.
//!
//! At a switch every writer writes what its ring held into the closing
//! window's shard and goes on in the next window's; the events stay
//! enabled throughout, so the windows are contiguous. The live merger
//! ([`shardrec_live_merger`]) writes each window's perf.data as it is
//! recorded, and at its close finishes it and names it.
//!
//! Where a window's records are known only at its end (`--overwrite`'s
//! snapshots) or a snapshot joins several (`--keep-last`), a closed
//! window is handed to the batch merger instead: one process, forked at
//! the start with the other helpers (so tracepoints leave it out with
//! them), at the least CPU priority and with one thread, which merges the
//! windows one after the other: it walks a window's shards, completes the
//! window's `meta` with what they hold, merges, and removes the window
//! ([`merger`]).
//!
//! `--keep-last=TIME` keeps the windows instead, a quarter of TIME each,
//! removing those that ended more than TIME ago: the disk holds the last
//! TIME of the recording. A snapshot (SIGUSR2, `snapshot` on
//! `--control`, the stop) joins the windows kept into one perf.data.

pub mod event_trigger;
mod merger;
pub mod naming;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::unistd::Pid;
use shardrec_shard::{EventLoss, RecordingDir};

use crate::config::{SwitchOutput, SwitchTrigger};
use crate::say;
use crate::RecordError;
use merger::Merger;
use naming::timestamped;
pub use shardrec_control::windows::{Job, Outputs};
use shardrec_live_merger::{WindowDone, WindowsOutput};

/// Who makes the windows' outputs.
enum Merging {
    /// The live merger, as each window is recorded.
    Live {
        /// Windows closed and not yet written, oldest first, with the
        /// names their outputs take.
        closed: Vec<(u32, PathBuf)>,
        /// The outputs written.
        outputs: Outputs,
    },
    /// The batch merger, while it runs.
    Batch(Option<Merger>),
}

/// The windows of a `--switch-output` recording, and their merger.
pub struct Windows {
    /// The recording's directory, which holds the windows.
    pub root: RecordingDir,
    /// The window being recorded.
    pub current: u32,
    trigger: SwitchTrigger,
    /// The output each window's name is made from (`perf.data`).
    output: PathBuf,
    /// When the current window began, and the bytes the rings had
    /// produced by then.
    opened: (Instant, u64),
    /// Each event's count of dropped samples at the current window's start.
    lost_before: Vec<EventLoss>,
    merging: Merging,
    /// `--keep-shards`: for the live merger.
    keep_shards: bool,
    /// Windows closed after the merger died: kept unmerged.
    unmerged: Vec<PathBuf>,
    max_files: Option<usize>,
    last_unstamped: bool,
    /// `--keep-last`: how much of the recording the windows kept cover.
    keep_last: Option<Duration>,
    /// With `--keep-last`: the windows kept, oldest first, with when each
    /// ended.
    kept: VecDeque<(u32, Instant)>,
    /// Snapshots of the windows kept so far.
    snapshots: u32,
}

impl Windows {
    /// The windows of a recording in `root`, whose outputs are named after
    /// `output` (window 0 is the first): written by the live merger when
    /// `live`, else with the batch merger forked.
    pub fn start(
        root: RecordingDir,
        settings: SwitchOutput,
        output: PathBuf,
        live: bool,
    ) -> Result<Windows, RecordError> {
        let merging = match live && settings.keep_last.is_none() {
            true => Merging::Live {
                closed: Vec::new(),
                outputs: Outputs {
                    max_files: settings.max_files,
                    ..Outputs::default()
                },
            },
            false => Merging::Batch(Some(Merger::spawn(root.clone(), settings.clone())?)),
        };
        Ok(Windows {
            merging,
            keep_shards: settings.keep_shards,
            current: 0,
            trigger: settings.trigger,
            max_files: settings.max_files,
            last_unstamped: settings.last_unstamped,
            keep_last: settings.keep_last,
            kept: VecDeque::new(),
            snapshots: 0,
            root,
            output,
            opened: (Instant::now(), 0),
            lost_before: Vec::new(),
            unmerged: Vec::new(),
        })
    }

    /// The batch merger's pid, while it runs.
    pub fn merger_pid(&self) -> Option<Pid> {
        match &self.merging {
            Merging::Batch(merger) => merger.as_ref().map(|m| m.pid),
            Merging::Live { .. } => None,
        }
    }

    /// Whether the live merger writes the windows.
    pub fn live(&self) -> bool {
        matches!(self.merging, Merging::Live { .. })
    }

    /// For a live merger (forked, or restarted after one died): the
    /// windows it takes over.
    pub fn live_output(&self) -> Option<WindowsOutput> {
        let Merging::Live { closed, .. } = &self.merging else {
            return None;
        };
        Some(WindowsOutput {
            root: self.root.clone(),
            closed: closed.clone(),
            current: self.current,
            keep_shards: self.keep_shards,
        })
    }

    /// The live merger finished these windows.
    pub fn written(&mut self, done: Vec<WindowDone>) {
        let Merging::Live { closed, outputs } = &mut self.merging else {
            return;
        };
        for done in done {
            closed.retain(|(window, _)| *window != done.window);
            if let Some(why) = &done.why {
                say::error(&format!(
                    "cannot write {} (the window's shards are kept): {why}",
                    done.output.display()
                ));
            }
            match done.written {
                true => {
                    say::note(&format!(
                        "[ shardrec record: Dump {} ]",
                        done.output.display()
                    ));
                    outputs.add(done.output)
                }
                false => outputs.failed.push(done.output),
            }
        }
    }

    /// Whether the current window has reached its time or size, the rings
    /// having produced `produced` bytes in all.
    pub fn due(&self, produced: u64) -> bool {
        match (self.period(), self.trigger) {
            (Some(period), _) => self.opened.0.elapsed() >= period,
            (None, SwitchTrigger::Bytes(bytes)) => produced - self.opened.1 >= bytes,
            (None, _) => false,
        }
    }

    /// Whether a signal (or `snapshot` on `--control`) switches.
    pub fn on_signal(&self) -> bool {
        self.trigger == SwitchTrigger::Signal || self.keep_last.is_some()
    }

    /// How long a window lasts, where time ends it: with `--keep-last` a
    /// quarter of what is kept (at least 100 ms), so the windows kept cover
    /// it to a quarter; else `--switch-output=TIME`.
    fn period(&self) -> Option<Duration> {
        match (self.keep_last, self.trigger) {
            (Some(kept), _) => Some((kept / 4).max(Duration::from_millis(100))),
            (None, SwitchTrigger::Every(every)) => Some(every),
            (None, _) => None,
        }
    }

    /// Whether every switch makes an output (else, with `--keep-last`,
    /// only a snapshot does).
    pub fn merges_every_window(&self) -> bool {
        self.keep_last.is_none()
    }

    /// How long the coordinator may sleep before a switch is due to be
    /// checked (a size is checked as often as `--max-size`).
    pub fn tick_ms(&self, size_tick: u16) -> Option<u16> {
        match (self.period(), self.trigger) {
            (Some(period), _) => {
                let left = period.saturating_sub(self.opened.0.elapsed()).as_millis();
                Some(left.min(u16::MAX as u128) as u16)
            }
            (None, SwitchTrigger::Bytes(_)) => Some(size_tick),
            (None, _) => None,
        }
    }

    /// The next window begins: the rings have produced `produced` bytes
    /// and the events count `lost` dropped samples (per CPU and event).
    /// Returns the losses of the window that ended.
    pub fn open_next(&mut self, produced: u64, lost: Vec<EventLoss>) -> Vec<EventLoss> {
        self.current += 1;
        self.opened = (Instant::now(), produced);
        let since = self.losses_since_open(&lost);
        self.lost_before = lost;
        since
    }

    /// Of the events' counts of dropped samples `lost`, those since the
    /// current window began.
    pub fn losses_since_open(&self, lost: &[EventLoss]) -> Vec<EventLoss> {
        lost.iter()
            .map(|&now| {
                let before = self
                    .lost_before
                    .iter()
                    .find(|l| (l.cpu, l.id) == (now.cpu, now.id))
                    .map_or(0, |l| l.lost);
                EventLoss {
                    lost: now.lost - before.min(now.lost),
                    ..now
                }
            })
            .filter(|l| l.lost > 0)
            .collect()
    }

    /// Window `window` ended (its `meta` is written, with every statistic
    /// but its shards' own): it becomes a timestamped output, whose name
    /// is returned where the live merger writes it; with `--keep-last` it
    /// is kept, those older than kept are removed, and a `snapshot` joins
    /// the windows kept into a timestamped output.
    pub fn close(&mut self, window: u32, snapshot: bool) -> Result<Option<PathBuf>, RecordError> {
        if let Merging::Live { closed, .. } = &mut self.merging {
            let output = timestamped(&self.output)
                .map_err(RecordError::system("naming a --switch-output file"))?;
            closed.push((window, output.clone()));
            return Ok(Some(output));
        }
        let Some(keep_last) = self.keep_last else {
            return self
                .queue_merge(self.root.path().to_path_buf(), vec![window])
                .map(|()| None);
        };
        self.kept.push_back((window, Instant::now()));
        while let Some(&(old, ended)) = self.kept.front() {
            if ended.elapsed() <= keep_last || self.kept.len() == 1 {
                break;
            }
            self.kept.pop_front();
            // At once, whatever the merger is doing: a snapshot it has
            // not merged yet holds links of its own to the windows it
            // joins. (Left to the merger, which runs at the least
            // priority, removals waited behind a snapshot's merge: beside
            // two busy loops the disk held 1.7 s of a recording kept for
            // 0.5 s.)
            let _ = std::fs::remove_dir_all(self.root.window(old).path());
        }
        if snapshot {
            self.queue_snapshot()?;
        }
        Ok(None)
    }

    /// Has the merger join the windows kept into a timestamped output,
    /// from a directory of the snapshot's own that links their files.
    fn queue_snapshot(&mut self) -> Result<(), RecordError> {
        self.snapshots += 1;
        let name = format!("snapshot{:06}", self.snapshots);
        let staged = self.root.path().join(name);
        let windows: Vec<u32> = self.kept.iter().map(|k| k.0).collect();
        link_windows(&self.root, &staged, &windows)
            .map_err(RecordError::system("linking the windows of a snapshot"))?;
        self.queue_merge(staged, windows)
    }

    /// With `--keep-last`: the windows kept that ended within its time
    /// (the last switch may be a while ago), and the current one after
    /// them, for the last output.
    pub fn kept_and_current(&self) -> Vec<RecordingDir> {
        let keep_last = self.keep_last.unwrap_or(Duration::MAX);
        let within = self
            .kept
            .iter()
            .filter(|(_, ended)| ended.elapsed() <= keep_last);
        let kept = within.map(|&(w, _)| w);
        kept.chain([self.current])
            .map(|w| self.root.window(w))
            .collect()
    }

    /// Has the merger write `windows` (joined if several) into a new
    /// timestamped output.
    fn queue_merge(&mut self, root: PathBuf, windows: Vec<u32>) -> Result<(), RecordError> {
        let output = timestamped(&self.output)
            .map_err(RecordError::system("naming a --switch-output file"))?;
        let job = Job {
            root,
            windows,
            output,
        };
        let merger = match &mut self.merging {
            Merging::Batch(merger) => merger.as_mut(),
            Merging::Live { .. } => None,
        };
        match merger {
            Some(merger) => merger.queue(&job),
            None => {
                self.unmerged.push(job.output);
                Ok(())
            }
        }
    }

    /// Whether `pid` was the merger, which ended while recording (it
    /// should not): the windows closed from now on are kept unmerged.
    pub fn merger_ended(&mut self, pid: Pid) -> bool {
        if self.merger_pid() != Some(pid) {
            return false;
        }
        self.merging = Merging::Batch(None);
        say::warning(&format!(
            "the --switch-output merge process ended early: windows are kept unmerged in {}",
            self.root.path().display()
        ));
        true
    }

    /// Waits for the batch merger to merge every window closed so far and
    /// returns the outputs (with the live merger, those it wrote; the
    /// windows it did not are kept).
    pub fn finish(mut self) -> Result<Outputs, RecordError> {
        let mut outputs = match self.merging {
            Merging::Batch(Some(merger)) => merger.finish()?,
            Merging::Batch(None) => Outputs::default(),
            Merging::Live { closed, outputs } => {
                let unwritten = closed.into_iter().map(|(_, output)| output);
                self.unmerged.extend(unwritten);
                outputs
            }
        };
        outputs.root = self.root.path().to_path_buf();
        outputs.max_files = self.max_files;
        outputs.last_unstamped = self.last_unstamped;
        outputs.failed.append(&mut self.unmerged);
        Ok(outputs)
    }
}

/// Makes `staged` a recording root holding `windows` of `root`, each file
/// a hard link to the window's (a copy where the file system has no
/// links): the windows can then be removed (their bytes stay while the
/// links do) and the files are not written again (a window is linked
/// once closed).
fn link_windows(root: &RecordingDir, staged: &Path, windows: &[u32]) -> std::io::Result<()> {
    let staged = RecordingDir::create(staged).map_err(std::io::Error::other)?;
    for &window in windows {
        let into = staged
            .create_window(window)
            .map_err(std::io::Error::other)?;
        for entry in std::fs::read_dir(root.window(window).path())? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                let to = into.path().join(entry.file_name());
                if std::fs::hard_link(entry.path(), &to).is_err() {
                    std::fs::copy(entry.path(), &to)?;
                }
            }
        }
    }
    Ok(())
}
