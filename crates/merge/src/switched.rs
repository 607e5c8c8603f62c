//! The `--switch-output` window merger's body, where no live merger
//! runs: one process, forked by the coordinator, that carries out its
//! [`Job`]s one after the other (merge a closed window, or several
//! joined, into an output of its own) and, when they end, reports the
//! [`Outputs`] it kept and those it could not write.

use std::io::BufRead;
use std::path::Path;

use shardrec_control::windows::{Job, Outputs};
use shardrec_control::Framed;
use shardrec_shard::{Meta, RecordingDir};

use crate::{MergeError, MergeOptions};

/// How the windows are merged.
#[derive(Clone, Debug)]
pub struct WindowMerges {
    /// `--switch-max-files=N`: keep only the newest N outputs.
    pub max_files: Option<usize>,
    /// How each window is merged.
    pub merge: MergeOptions,
    /// `--keep-shards`: keep each window's directory after its merge.
    pub keep_shards: bool,
    /// `--keep-last`: the windows stay for later snapshots.
    pub keep_windows: bool,
}

/// What became of one job.
pub enum Merged<'a> {
    /// `output` is whole.
    Written(&'a Path),
    /// `output` could not be written; its shards are kept in `kept_in`.
    Failed {
        /// The output.
        output: &'a Path,
        /// Where its shards are.
        kept_in: &'a Path,
        /// Why.
        error: &'a MergeError,
    },
}

/// The merger's loop: carries out each job read from `jobs`, telling
/// `said` what became of it and keeping to `--switch-max-files`, until
/// the jobs end.
pub fn serve(
    root: &RecordingDir,
    settings: &WindowMerges,
    mut jobs: impl BufRead,
    mut said: impl FnMut(Merged),
) -> Outputs {
    let mut outputs = Outputs {
        max_files: settings.max_files,
        ..Outputs::default()
    };
    while let Some(Job {
        root: from,
        windows,
        output,
    }) = Job::read_from(&mut jobs).ok().flatten()
    {
        let staged = from != root.path();
        let from = RecordingDir::open(from);
        let merged = merge_windows(&from, &windows, &output, settings);
        if staged {
            let _ = std::fs::remove_dir_all(from.path());
        }
        match merged {
            Ok(()) => {
                said(Merged::Written(&output));
                outputs.add(output);
            }
            Err(error) => {
                said(Merged::Failed {
                    output: &output,
                    kept_in: root.path(),
                    error: &error,
                });
                outputs.failed.push(output);
            }
        }
    }
    outputs
}

/// Merges window `windows[0]` alone (then removes it, unless the shards
/// are kept or the windows are kept for later snapshots), or several
/// windows joined into a directory of their own (then removed).
fn merge_windows(
    root: &RecordingDir,
    windows: &[u32],
    output: &Path,
    settings: &WindowMerges,
) -> Result<(), MergeError> {
    match windows {
        [window] if !settings.keep_windows => {
            let dir = root.window(*window);
            merge(&dir, output, settings, !settings.keep_shards)?;
            if !settings.keep_shards {
                let _ = std::fs::remove_dir_all(dir.path());
            }
            Ok(())
        }
        _ => {
            let last = windows.last().copied().unwrap_or_default();
            let joined = RecordingDir::open(root.path().join(format!("joined{last:06}")));
            let _ = std::fs::remove_dir_all(joined.path());
            let dirs: Vec<RecordingDir> = windows.iter().map(|&w| root.window(w)).collect();
            let result = RecordingDir::create(joined.path())
                .and_then(|dir| dir.join_windows(&dirs))
                .map_err(MergeError::from)
                .and_then(|()| merge(&joined, output, settings, true));
            let _ = std::fs::remove_dir_all(joined.path());
            result
        }
    }
}

/// Merges the recording in `dir`: walks its shards, completes its meta,
/// merges into a hidden file renamed to the output when whole (a reader
/// never sees half a file); `consume` frees the shards as it goes (they
/// are removed after).
fn merge(
    dir: &RecordingDir,
    output: &Path,
    settings: &WindowMerges,
    consume: bool,
) -> Result<(), MergeError> {
    let mut meta: Meta = dir.read_surviving_meta()?.0;
    // One thread: the tracepoints leave this process out by its pid, which
    // new threads would not have.
    // An index that cannot be written costs a merge of a time window its
    // walk, and this window is merged now: nothing to say.
    let accounted = shardrec_shard::accounting::account(dir, &mut meta, 1, None)?;
    dir.release_meta_room();
    dir.write_meta(&meta)?;
    let name = output.file_name().unwrap_or_default().to_string_lossy();
    let partial = output.with_file_name(format!(".{name}.partial"));
    let options = MergeOptions {
        progress: false,
        threads: Some(1),
        consume,
        ..settings.merge.clone()
    };
    let target = shardrec_shard::output::Output::resolve(&partial)?;
    crate::merge_scanned(dir.path(), &target, &options, accounted.scanned)?;
    std::fs::rename(&partial, output).map_err(shardrec_shard::Error::io(output))?;
    Ok(())
}
