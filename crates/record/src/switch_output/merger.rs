//! The merger: one process, forked at the start with the other helpers (so
//! tracepoints leave it out with them), at the least CPU priority and with
//! one thread, which carries out the coordinator's jobs one after the
//! other: merge a window (or several, joined) into an output. [`Job`]s come
//! on a pipe; when it ends, the merger reports the [`Outputs`] it kept and
//! those it could not write, and exits. Both go in control's one framing.

use std::io::{BufRead, BufReader};
use std::path::Path;

use nix::unistd::Pid;
use shardrec_control::{Framed, Helper, HelperEnds};
use shardrec_shard::{Meta, RecordingDir};
use shardrec_sys::process;

use crate::config::SwitchOutput;
use crate::say;
use crate::RecordError;
use shardrec_control::windows::{Job, Outputs};

/// The coordinator's handle on the merger.
pub struct Merger {
    pub pid: Pid,
    helper: Helper<Job, Outputs>,
}

impl Merger {
    /// Forks the merger over the windows in `root`.
    pub fn spawn(root: RecordingDir, settings: SwitchOutput) -> Result<Merger, RecordError> {
        let helper = Helper::spawn(move |ends: HelperEnds<Job, Outputs>| {
            // SAFETY: this forked child uses only its two pipe ends of what
            // it inherited (not the coordinator's events, rings and pipes,
            // which would keep them open) and leaves through `exit_now`,
            // never dropping the rest.
            if unsafe { process::close_fds_except(&ends.fds()) }.is_err() {
                return 1;
            }
            process::prefer_background();
            let HelperEnds {
                orders,
                mut reports,
                ..
            } = ends;
            let outputs = serve(&root, &settings, BufReader::new(orders));
            i32::from(outputs.write_to(&mut reports).is_err())
        })
        .map_err(RecordError::system("starting the merge process"))?;
        Ok(Merger {
            pid: helper.pid,
            helper,
        })
    }

    /// Queues `job`.
    pub fn queue(&mut self, job: &Job) -> Result<(), RecordError> {
        match self.helper.send(job) {
            true => Ok(()),
            false => Err(RecordError::Helper {
                name: "merge process".into(),
                message: "it is gone: a window was not handed to it".into(),
            }),
        }
    }

    /// Ends the job pipe and waits for the merger's report.
    pub fn finish(self) -> Result<Outputs, RecordError> {
        Ok(self.helper.finish().pop().unwrap_or_default())
    }
}

/// The merger's loop: carries out each job, keeping to
/// `--switch-max-files`, until the job pipe ends.
fn serve(root: &RecordingDir, settings: &SwitchOutput, mut jobs: impl BufRead) -> Outputs {
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
            Ok(()) => outputs.add(output),
            Err(error) => {
                say::error(&format!(
                    "cannot write {} (the shards are kept in {}): {}",
                    output.display(),
                    root.path().display(),
                    shardrec_shard::with_causes(&error)
                ));
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
    settings: &SwitchOutput,
) -> Result<(), shardrec_merge::MergeError> {
    match windows {
        [window] if settings.keep_last.is_none() => {
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
                .map_err(shardrec_merge::MergeError::from)
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
    settings: &SwitchOutput,
    consume: bool,
) -> Result<(), shardrec_merge::MergeError> {
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
    let options = shardrec_merge::MergeOptions {
        progress: false,
        threads: Some(1),
        consume,
        ..settings.merge.clone()
    };
    let target = shardrec_shard::output::Output::resolve(&partial)?;
    shardrec_merge::merge_scanned(dir.path(), &target, &options, accounted.scanned)?;
    std::fs::rename(&partial, output).map_err(shardrec_shard::Error::io(output))?;
    if !settings.quiet {
        say::note(&format!("[ shardrec record: Dump {} ]", output.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_read_as_written() {
        let job = |root: &str, windows: &[u32], output: &str| Job {
            root: root.into(),
            windows: windows.to_vec(),
            output: output.into(),
        };
        let jobs = [
            job("/tmp/r", &[3], "/tmp/perf.data.2026112406014842"),
            job("/tmp/r/snapshot000001", &[4, 5, 6], "a b\nc"),
        ];
        let mut bytes = Vec::new();
        for job in &jobs {
            job.write_to(&mut bytes).unwrap();
        }
        let mut read = &bytes[..];
        for job in jobs {
            assert_eq!(Job::read_from(&mut read).unwrap(), Some(job));
        }
        assert_eq!(Job::read_from(&mut read).unwrap(), None);
        let mut outputs = Outputs::default();
        outputs.kept.push_back("x".into());
        outputs.failed.push("y z".into());
        let mut bytes = Vec::new();
        outputs.write_to(&mut bytes).unwrap();
        let back = Outputs::read_from(&mut &bytes[..]).unwrap().unwrap();
        assert_eq!((back.kept, back.failed), (outputs.kept, outputs.failed));
    }
}
