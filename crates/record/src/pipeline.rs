//! The whole way from `shardrec record`'s options to perf.data, the one
//! entry point the binary calls: standard output set aside for perf's pipe
//! format, the recording (whose live merger writes the output as it goes),
//! the merge after the stop where none ran or it failed, the outputs of
//! `--switch-output` and `--timestamp-filename`, and the shards' removal.

use std::path::{Path, PathBuf};

use shardrec_merge::MergeReport;
use shardrec_shard::output::Output;
use shardrec_shard::{RecordingDir, StopReason};

use crate::config::OutputTarget;
use crate::coordinator::HandOff;
use crate::pipe_mode::{self, PipeMode};
use crate::reporter::Reporter;
use crate::say;
use crate::summary::RecordReport;
use crate::switch_output::{self, Outputs};
use crate::{coordinator, RecordConfig, RecordError};
use shardrec_live_merger::Outcome;

/// How `shardrec record` ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// With this status: the workload's, or 1 when the output could not be
    /// written whole.
    Status(u8),
    /// The reader of the stream left, which ends perf record by SIGPIPE:
    /// the caller ends the same way.
    ReaderLeft,
}

/// Records as `config` asks until the workload exits or a stop is asked
/// for, and turns the recording into perf.data (unless `--no-merge`).
/// `command_line` is the recorder's own, for the header's `cmdline`;
/// everything there is to say goes to `reporter` ([`crate::say`]).
pub fn record(
    mut config: RecordConfig,
    command_line: &[String],
    reporter: Box<dyn Reporter + Send>,
) -> Result<Exit, RecordError> {
    let _reporter = say::install(reporter);
    if let Some(switch) = config.switch_output.as_mut() {
        switch.merge = config.merge.clone();
        switch.quiet = config.quiet;
    }
    // perf's --dry-run: the options are read and checked, nothing more
    // (the output is looked at only to refuse a rename it cannot take).
    if config.dry_run && !config.timestamp_filename {
        return Ok(Exit::Status(0));
    }
    // What the output is, decided once: where the shards go, whether it
    // is perf's pipe format, what the merge writes.
    let target = OutputTarget::resolve(&config)?;
    if config.timestamp_filename {
        refuse_to_rename(&config.output, &target.given)?;
    }
    if config.dry_run {
        return Ok(Exit::Status(0));
    }
    // Merged while recording unless the shards are the product (pipe mode
    // refuses the options that write several outputs).
    let streamed = !config.no_merge;
    let pipe = PipeMode::begin(&target.given, streamed)?;
    let stream = match pipe.as_ref().filter(|_| streamed) {
        // The live merger streams into it as the recording goes.
        Some(pipe) => Some(
            pipe.stream()
                .map_err(RecordError::system("standard output"))?,
        ),
        None => None,
    };
    let stream_given = stream.is_some();
    let recorded = coordinator::record(&config, &target, stream, command_line);
    if let Some(pipe) = pipe {
        pipe.end()?;
    }
    let (report, hand_off) = recorded?;
    say::recorded(&report);
    AfterStop {
        config: &config,
        target: &target,
        streamed: stream_given,
    }
    .finish(report, hand_off)
}

/// What follows the stop.
struct AfterStop<'a> {
    config: &'a RecordConfig,
    target: &'a OutputTarget,
    /// The live merger wrote into a stream (what went cannot go again).
    streamed: bool,
}

impl AfterStop<'_> {
    fn finish(mut self, report: RecordReport, hand_off: HandOff) -> Result<Exit, RecordError> {
        let config = self.config;
        let code = report.exit_code.clamp(0, 255) as u8;
        if let StopReason::ShardCut(what) = &report.stopped_by {
            // The disk that is full holds the shards: merging there would
            // fail too, and the shards are what the recording leaves.
            let dir = report.dir.display();
            say::error(&format!(
                "the recording was cut: {what}. Every record written before that is in {dir}; merge them onto a disk with room: shardrec merge {dir} -o OTHER"
            ));
            return Ok(Exit::Status(1));
        }
        if config.no_merge {
            return Ok(Exit::Status(code));
        }
        let HandOff {
            scanned,
            live,
            switched,
        } = hand_off;
        let output = match &switched {
            // The last window, named as the others.
            Some(switched) if !switched.last_unstamped => {
                Output::resolve(&timestamped(&config.output)?)?
            }
            _ => self.target.merged.clone(),
        };
        let last_window = switched.is_some();
        let merged = match self.merged(&report.dir, live, scanned, last_window, &output)? {
            Some(merged) => merged,
            None => {
                self.drop_shards(&report.dir);
                return Ok(Exit::ReaderLeft);
            }
        };
        // A shard the merge could not read at all is a failure, even when
        // the workload succeeded (its status wins when it failed).
        let code = match merged || report.exit_code != 0 {
            true => code,
            false => 1,
        };
        if merged && !config.keep_shards {
            std::fs::remove_dir_all(&report.dir).map_err(RecordError::system(format!(
                "cannot remove {}",
                report.dir.display()
            )))?;
        }
        match switched {
            Some(switched) => Ok(self
                .last_window_done(switched, output.path().to_path_buf(), merged)
                .unwrap_or(Exit::Status(code))),
            None if config.timestamp_filename => {
                let named = timestamped(&config.output)?;
                std::fs::rename(&config.output, &named).map_err(rename_failed(&config.output))?;
                say::note(&format!("[ shardrec record: Dump {} ]", named.display()));
                Ok(Exit::Status(code))
            }
            None => Ok(Exit::Status(code)),
        }
    }

    /// The output written by the live merger, or by a merge now of the
    /// recording in `dir` (the last window's, for `last_window`): whether
    /// every shard was readable, or `None` when the stream's reader left.
    fn merged(
        &mut self,
        dir: &Path,
        live: Option<Outcome>,
        scanned: Vec<shardrec_shard::scan::ScannedShard>,
        last_window: bool,
        output: &Output,
    ) -> Result<Option<bool>, RecordError> {
        match live {
            Some(Outcome::Merged {
                report: mut merged, ..
            }) => {
                if last_window {
                    merged.output = output.path().to_path_buf();
                    // The last window, as the live merger wrote it.
                    let written = RecordingDir::open(dir).window_output_path();
                    shardrec_shard::output::move_output(&written, output.path()).map_err(
                        RecordError::system(format!("cannot write {}", output.path().display())),
                    )?;
                }
                Ok(Some(self.show(&merged)))
            }
            Some(Outcome::ReaderLeft) => Ok(None),
            Some(Outcome::Failed(why)) if self.streamed => {
                // What went down the stream cannot be sent again.
                Err(RecordError::StreamStopped {
                    why,
                    dir: dir.to_path_buf(),
                })
            }
            Some(Outcome::Failed(why)) => {
                // The merge after the stop completes it from where it stopped.
                let merged = self.merge_now(dir, output, scanned)?;
                say::warning(&format!(
                    "the live merge stopped ({why}): perf.data was completed after the stop"
                ));
                Ok(merged)
            }
            None => self.merge_now(dir, output, scanned),
        }
    }

    /// Merges the recording in `dir` into `output` after the stop.
    fn merge_now(
        &mut self,
        dir: &Path,
        output: &Output,
        scanned: Vec<shardrec_shard::scan::ScannedShard>,
    ) -> Result<Option<bool>, RecordError> {
        let options = &self.config.merge;
        match shardrec_merge::merge_scanned(dir, output, options, scanned) {
            Ok(report) => Ok(Some(self.show(&report))),
            Err(error) if pipe_mode::reader_left(&error) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    /// Reports a merge; false when a shard held no readable record at all.
    fn show(&mut self, report: &MergeReport) -> bool {
        say::merged(report);
        report.unreadable().next().is_none()
    }

    /// A recording whose reader left is dropped, as perf's is, unless
    /// `--keep-shards`.
    fn drop_shards(&self, dir: &Path) {
        if !self.config.keep_shards {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    /// `--switch-output` and the like: the last window's `output` is
    /// written (if `merged`); it joins the others, and the recording's
    /// directory goes unless something in it is still wanted. An exit
    /// when an output could not be written.
    fn last_window_done(
        &mut self,
        mut switched: Outputs,
        output: PathBuf,
        merged: bool,
    ) -> Option<Exit> {
        say::note(&format!("[ shardrec record: Dump {} ]", output.display()));
        if merged && !switched.last_unstamped {
            switched.add(output);
        }
        for failed in &switched.failed {
            say::error(&format!(
                "error: {} was not written: its window's shards are kept in {}",
                failed.display(),
                switched.root.display()
            ));
        }
        if !switched.failed.is_empty() {
            return Some(Exit::Status(1));
        }
        // What is left are the windows kept for --keep-last (or all, with
        // --keep-shards).
        if !self.config.keep_shards {
            let _ = std::fs::remove_dir_all(&switched.root);
        }
        None
    }
}

/// `--timestamp-filename` renames the output at the end: only a file's.
fn refuse_to_rename(output: &Path, target: &Output) -> Result<(), RecordError> {
    match target {
        Output::File { .. } => Ok(()),
        other => Err(RecordError::Usage(format!(
            "--timestamp-filename renames the output at the end, and {} is {}: give a file",
            output.display(),
            other.kind()
        ))),
    }
}

/// `output` named with a timestamp, as perf's `--timestamp-filename`.
fn timestamped(output: &Path) -> Result<PathBuf, RecordError> {
    switch_output::naming::timestamped(output).map_err(rename_failed(output))
}

fn rename_failed(path: &Path) -> impl FnOnce(std::io::Error) -> RecordError {
    RecordError::system(format!("cannot rename {} with a timestamp", path.display()))
}
