//! The coordinator's window merger: one process, forked at the start with
//! the other helpers (so tracepoints leave it out with them), at the least
//! CPU priority and with one thread, which carries out the coordinator's
//! jobs one after the other (its body is `shardrec_merge::switched`):
//! merge a window (or several, joined) into an output. [`Job`]s go down a
//! pipe; when it ends, the merger reports the [`Outputs`] it kept and
//! those it could not write, and exits. Both go in control's one framing.

use std::io::BufReader;

use nix::unistd::Pid;
use shardrec_control::{Framed, Helper, HelperEnds};
use shardrec_merge::switched::{self, Merged, WindowMerges};
use shardrec_shard::RecordingDir;
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
            let merges = WindowMerges {
                max_files: settings.max_files,
                merge: settings.merge.clone(),
                keep_shards: settings.keep_shards,
                keep_windows: settings.keep_last.is_some(),
            };
            let said = |merged: Merged| say_merged(merged, settings.quiet);
            let outputs = switched::serve(&root, &merges, BufReader::new(orders), said);
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

/// What the merger says of each job, as it is done: perf's "Dump" line,
/// or why an output could not be written.
fn say_merged(merged: Merged, quiet: bool) {
    match merged {
        Merged::Written(output) if !quiet => {
            say::note(&format!("[ shardrec record: Dump {} ]", output.display()));
        }
        Merged::Written(_) => {}
        Merged::Failed {
            output,
            kept_in,
            error,
        } => say::error(&format!(
            "cannot write {} (the shards are kept in {}): {}",
            output.display(),
            kept_in.display(),
            shardrec_shard::with_causes(error)
        )),
    }
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
