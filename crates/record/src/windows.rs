//! `--switch-output`: the recording cut into windows, each a recording
//! directory of its own (`OUTPUT.shards/windowNNNNNN/`), merged into its
//! own `OUTPUT.TIMESTAMP` in the background while recording goes on.
//!
//! At a switch every writer writes what its ring held into the closing
//! window's shard and goes on in the next window's; the events stay
//! enabled throughout, so the windows are contiguous. The closing window
//! is then handed to the merger: one process, forked at the start with
//! the other helpers (so tracepoints leave it out with them), at the least
//! CPU priority and with one thread, which merges the windows one after
//! the other: it walks a window's shards, completes the window's `meta`
//! with what they hold, merges, and removes the window.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::unistd::Pid;
use shardrec_shard::{Meta, RecordingDir};
use shardrec_sys::process;

use crate::config::{SwitchOutput, SwitchTrigger};
use crate::RecordError;

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
    lost_before: Vec<(u32, u64, u64)>,
    /// The merge process, while it runs.
    merger: Option<Merger>,
    /// Windows closed after the merger died: kept unmerged.
    unmerged: Vec<PathBuf>,
    max_files: Option<usize>,
}

impl Windows {
    /// The windows of a recording in `root`, whose outputs are named after
    /// `output`, with the merger forked (window 0 is the first).
    pub fn start(
        root: RecordingDir,
        settings: SwitchOutput,
        output: PathBuf,
    ) -> Result<Windows, RecordError> {
        Ok(Windows {
            current: 0,
            trigger: settings.trigger,
            max_files: settings.max_files,
            merger: Some(Merger::spawn(root.clone(), settings)?),
            root,
            output,
            opened: (Instant::now(), 0),
            lost_before: Vec::new(),
            unmerged: Vec::new(),
        })
    }

    /// The merger's pid, while it runs.
    pub fn merger_pid(&self) -> Option<Pid> {
        self.merger.as_ref().map(|m| m.pid)
    }

    /// Whether the current window has reached its time or size, the rings
    /// having produced `produced` bytes in all.
    pub fn due(&self, produced: u64) -> bool {
        match self.trigger {
            SwitchTrigger::Signal => false,
            SwitchTrigger::Every(every) => self.opened.0.elapsed() >= every,
            SwitchTrigger::Bytes(bytes) => produced - self.opened.1 >= bytes,
        }
    }

    /// Whether a signal (or `snapshot` on `--control`) switches.
    pub fn on_signal(&self) -> bool {
        self.trigger == SwitchTrigger::Signal
    }

    /// How long the coordinator may sleep before a switch is due to be
    /// checked (a size is checked as often as `--max-size`).
    pub fn tick_ms(&self, size_tick: u16) -> Option<u16> {
        match self.trigger {
            SwitchTrigger::Signal => None,
            SwitchTrigger::Bytes(_) => Some(size_tick),
            SwitchTrigger::Every(every) => {
                let left = every.saturating_sub(self.opened.0.elapsed()).as_millis();
                Some(left.min(u16::MAX as u128) as u16)
            }
        }
    }

    /// The next window begins: the rings have produced `produced` bytes
    /// and the events count `lost` dropped samples (per CPU and event).
    /// Returns the losses of the window that ended.
    pub fn open_next(&mut self, produced: u64, lost: Vec<(u32, u64, u64)>) -> Vec<(u32, u64, u64)> {
        self.current += 1;
        self.opened = (Instant::now(), produced);
        let since = self.losses_since_open(&lost);
        self.lost_before = lost;
        since
    }

    /// Of the events' counts of dropped samples `lost`, those since the
    /// current window began.
    pub fn losses_since_open(&self, lost: &[(u32, u64, u64)]) -> Vec<(u32, u64, u64)> {
        lost.iter()
            .map(|&(cpu, id, count)| {
                let before = self
                    .lost_before
                    .iter()
                    .find(|(c, i, _)| (*c, *i) == (cpu, id))
                    .map_or(0, |l| l.2);
                (cpu, id, count - before.min(count))
            })
            .filter(|l| l.2 > 0)
            .collect()
    }

    /// Hands window `window` (whose `meta` is written, with every
    /// statistic but its shards' own) to the merger, to become a
    /// timestamped output.
    pub fn close(&mut self, window: u32) -> Result<(), RecordError> {
        let output = timestamped(&self.output)
            .map_err(RecordError::system("naming a --switch-output file"))?;
        match self.merger.as_mut() {
            Some(merger) => merger.merge(window, &output),
            None => {
                self.unmerged
                    .push(self.root.window(window).path().to_path_buf());
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
        self.merger = None;
        eprintln!(
            "shardrec: warning: the --switch-output merge process ended early: windows are kept unmerged in {}",
            self.root.path().display()
        );
        true
    }

    /// Waits for the merger to merge every window closed so far and
    /// returns the outputs.
    pub fn finish(mut self) -> Result<Outputs, RecordError> {
        let mut outputs = match self.merger.take() {
            Some(merger) => merger.finish()?,
            None => Outputs::default(),
        };
        outputs.root = self.root.path().to_path_buf();
        outputs.max_files = self.max_files;
        outputs.failed.append(&mut self.unmerged);
        Ok(outputs)
    }
}

/// The merge process: windows come as `NUMBER\0OUTPUT\0` on its job pipe;
/// when the pipe ends, it reports `kept\0PATH\0` and `failed\0PATH\0` for
/// what it wrote, and exits.
struct Merger {
    pid: Pid,
    jobs: File,
    results: BufReader<File>,
}

impl Merger {
    fn spawn(root: RecordingDir, settings: SwitchOutput) -> Result<Merger, RecordError> {
        let failed = |e: nix::Error| RecordError::system("starting the merge process")(e.into());
        let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
        let (jobs_in, jobs) = nix::unistd::pipe2(cloexec).map_err(failed)?;
        let (results, results_out) = nix::unistd::pipe2(cloexec).map_err(failed)?;
        let keep = [jobs_in.as_raw_fd(), results_out.as_raw_fd()];
        let pid = process::spawn(move || {
            // SAFETY: this forked child uses only its two pipe ends of what
            // it inherited (not the coordinator's events, rings and pipes,
            // which would keep them open) and leaves through `exit_now`,
            // never dropping the rest.
            if unsafe { process::close_fds_except(&keep) }.is_err() {
                return 1;
            }
            process::prefer_background();
            let outputs = serve(&root, &settings, BufReader::new(File::from(jobs_in)));
            let mut report = Vec::new();
            for (word, path) in outputs
                .kept
                .iter()
                .map(|p| ("kept", p))
                .chain(outputs.failed.iter().map(|p| ("failed", p)))
            {
                report.extend_from_slice(word.as_bytes());
                report.push(0);
                report.extend_from_slice(path.as_os_str().as_bytes());
                report.push(0);
            }
            i32::from(File::from(results_out).write_all(&report).is_err())
        })
        .map_err(RecordError::system("starting the merge process"))?;
        Ok(Merger {
            pid,
            jobs: File::from(jobs),
            results: BufReader::new(File::from(results)),
        })
    }

    /// Queues window `window`'s merge into `output`.
    fn merge(&mut self, window: u32, output: &Path) -> Result<(), RecordError> {
        let mut job = format!("{window}\0").into_bytes();
        job.extend_from_slice(output.as_os_str().as_bytes());
        job.push(0);
        self.jobs
            .write_all(&job)
            .map_err(RecordError::system("handing a window to the merge process"))
    }

    /// Ends the job pipe and waits for the merger's report.
    fn finish(self) -> Result<Outputs, RecordError> {
        let Merger {
            pid,
            jobs,
            mut results,
        } = self;
        drop(jobs);
        let mut words = Vec::new();
        loop {
            let mut word = Vec::new();
            match results.read_until(0, &mut word) {
                Ok(0) => break,
                Ok(_) => {
                    word.pop();
                    words.push(word);
                }
                Err(e) => return Err(RecordError::system("reading the merge process's report")(e)),
            }
        }
        let _ = nix::sys::wait::waitpid(pid, None);
        let mut outputs = Outputs::default();
        for pair in words.chunks_exact(2) {
            let path = PathBuf::from(OsString::from_vec(pair[1].clone()));
            match &pair[0][..] {
                b"kept" => outputs.kept.push_back(path),
                _ => outputs.failed.push(path),
            }
        }
        Ok(outputs)
    }
}

/// The merger's loop: merges each window it is handed, keeping to
/// `--switch-max-files`, until the job pipe ends.
fn serve(root: &RecordingDir, settings: &SwitchOutput, mut jobs: impl BufRead) -> Outputs {
    let mut outputs = Outputs {
        max_files: settings.max_files,
        ..Outputs::default()
    };
    loop {
        let (mut window, mut output) = (Vec::new(), Vec::new());
        let read = jobs
            .read_until(0, &mut window)
            .and_then(|_| jobs.read_until(0, &mut output));
        if !matches!(read, Ok(n) if n > 0) {
            return outputs;
        }
        window.pop();
        output.pop();
        let window: u32 = String::from_utf8_lossy(&window).parse().unwrap_or(u32::MAX);
        let output = PathBuf::from(OsString::from_vec(output));
        let dir = root.window(window);
        match merge(&dir, &output, settings) {
            Ok(()) => outputs.add(output),
            Err(error) => {
                eprintln!(
                    "shardrec: cannot merge {} (kept): {}",
                    dir.path().display(),
                    shardrec_shard::with_causes(&error)
                );
                outputs.failed.push(output);
            }
        }
    }
}

/// Merges one window: walks its shards, completes its meta, merges into a
/// hidden file renamed to the output when whole (a reader never sees half
/// a file), and removes the window.
fn merge(
    dir: &RecordingDir,
    output: &Path,
    settings: &SwitchOutput,
) -> Result<(), shardrec_merge::MergeError> {
    let mut meta: Meta = dir.read_meta()?;
    // One thread: the tracepoints leave this process out by its pid, which
    // new threads would not have.
    let scanned = crate::coordinator::account(dir, &mut meta, 1)?;
    dir.release_meta_room();
    dir.write_meta(&meta)?;
    let name = output.file_name().unwrap_or_default().to_string_lossy();
    let partial = output.with_file_name(format!(".{name}.partial"));
    let options = shardrec_merge::MergeOptions {
        progress: false,
        threads: Some(1),
        ..settings.merge.clone()
    };
    shardrec_merge::merge_scanned(dir.path(), &partial, &options, scanned)?;
    std::fs::rename(&partial, output).map_err(shardrec_shard::Error::io(output))?;
    if !settings.quiet {
        eprintln!("[ shardrec record: Dump {} ]", output.display());
    }
    if !settings.keep_shards {
        let _ = std::fs::remove_dir_all(dir.path());
    }
    Ok(())
}

/// The outputs of a `--switch-output` recording, the oldest first, kept
/// to `--switch-max-files`.
#[derive(Clone, Debug, Default)]
pub struct Outputs {
    /// The recording's directory.
    pub root: PathBuf,
    /// The outputs kept.
    pub kept: VecDeque<PathBuf>,
    /// How many may be kept (`None`: all).
    pub max_files: Option<usize>,
    /// Outputs not written, their windows' shards kept.
    pub failed: Vec<PathBuf>,
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

/// `output` with perf's `--timestamp-filename` suffix for now
/// (`perf.data.YYYYMMDDhhmmsscc`), never the name of a file that exists:
/// two switches within a hundredth of a second get two names.
pub fn timestamped(output: &Path) -> std::io::Result<PathBuf> {
    loop {
        let mut named = output.as_os_str().to_owned();
        named.push(format!(".{}", process::local_timestamp()?));
        let named = PathBuf::from(named);
        if named.symlink_metadata().is_err() {
            return Ok(named);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
