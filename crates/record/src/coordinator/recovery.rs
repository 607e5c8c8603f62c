//! A helper that ends while recording: a writer that died is replaced, a
//! VIP that died is restarted, a shard cut by its storage stops the
//! recording; at a stop, their failures are warnings.

use std::path::PathBuf;
use std::time::Duration;

use shardrec_shard::StopReason;

use super::Recording;
use crate::helper::HelperProcess;
use crate::live_merger;
use crate::meta::unix_ns;
use crate::signals;
use crate::vip;
use crate::writers::MAX_REPLACEMENTS;
use crate::RecordError;

/// How a helper ended while recording.
enum Ended {
    /// A writer stopped at a storage error: its shard and the errno.
    Cut(PathBuf, i32),
    /// A writer ended (killed, crashed, or done at a stop): the index of
    /// its writer, and what it said went wrong, if anything.
    WriterDied(usize, Option<RecordError>),
    /// The VIP ended, and what it said went wrong, if anything.
    VipDied(Option<RecordError>),
}

impl Recording<'_> {
    pub(super) fn reap_children(&mut self) -> Option<(StopReason, Option<RecordError>)> {
        let mut outcome = None;
        for ended in signals::reap() {
            if self.workload.as_ref().is_some_and(|w| w.pid == ended.pid) {
                self.workload_code = Some(ended.code);
                outcome.get_or_insert((StopReason::WorkloadExited, None));
                continue;
            }
            if let Some(windows) = self.windows.as_mut() {
                if windows.merger_ended(ended.pid) {
                    continue;
                }
            }
            // A live merger that ends while recording says why at the stop,
            // whose merge completes its output.
            if let Some(live) = self.live.as_mut().filter(|l| l.pid == ended.pid) {
                live.ended = true;
                // As perf record, killed by SIGPIPE when its reader goes.
                if ended.code == live_merger::READER_LEFT {
                    outcome.get_or_insert((StopReason::Signal("SIGPIPE".into()), None));
                }
                continue;
            }
            if let Some((name, ended_as)) = self.helper_ended(ended.pid) {
                match ended_as {
                    Ended::Cut(shard, errno) => {
                        outcome = Some((self.shard_cut(&shard, errno), None))
                    }
                    Ended::WriterDied(_, Some(error)) | Ended::VipDied(Some(error))
                        if self.stopping =>
                    {
                        eprintln!(
                            "shardrec: warning: the {name} failed while stopping: {}",
                            shardrec_shard::with_causes(&error)
                        );
                    }
                    Ended::WriterDied(..) | Ended::VipDied(None) if self.stopping => {}
                    Ended::WriterDied(index, _) => self.replace_writer(index),
                    Ended::VipDied(error) => {
                        // While recording, the VIP never ends on its own:
                        // even a clean report is a failure here.
                        let error = error.unwrap_or_else(|| RecordError::Helper {
                            name: name.clone(),
                            message: "exited early".to_string(),
                        });
                        if let Err(error) = self.restart_vip(error) {
                            outcome = Some((StopReason::HelperFailed(name), Some(error)));
                        }
                    }
                }
            }
        }
        outcome
    }

    /// Why the recording stops when a writer could not write its shard.
    pub(super) fn shard_cut(&self, shard: &std::path::Path, errno: i32) -> StopReason {
        let name = shard.file_name().unwrap_or_default().to_string_lossy();
        let why = std::io::Error::from_raw_os_error(errno);
        StopReason::ShardCut(format!(
            "{name} at {:.2} s: {why}",
            self.since_start().as_secs_f64()
        ))
    }

    fn since_start(&self) -> Duration {
        Duration::from_nanos(unix_ns().saturating_sub(self.meta.start_unix_ns))
    }

    /// A writer died while recording: a new one takes over its ring and
    /// shard, up to [`MAX_REPLACEMENTS`] times; after that, or if the
    /// replacement cannot start, the kernel goes on filling its ring,
    /// which the coordinator writes at the stop, and the rest of the
    /// recording goes on.
    fn replace_writer(&mut self, index: usize) {
        let since = self.since_start();
        let writer = &mut self.writers[index];
        let cpu = writer.cpu();
        if writer.replaced_at.len() >= MAX_REPLACEMENTS {
            writer.given_up = true;
            eprintln!(
                "shardrec: warning: the writer of CPU {cpu} died {} times and is not replaced again ({:.2} s): its ring is written at the stop, and what it cannot hold until then is counted as lost",
                MAX_REPLACEMENTS + 1,
                since.as_secs_f64()
            );
            return;
        }
        let path = self.dir.shard_path(cpu);
        let side_band = self.side_band.as_ref().and_then(|s| s.on_cpu(cpu));
        let replaced = self
            .dir
            .reopen_file(&path)
            .map_err(RecordError::from)
            .and_then(|shard| writer.replace(side_band, shard, since));
        if let Err(error) = replaced {
            writer.given_up = true;
            eprintln!(
                "shardrec: warning: the writer of CPU {cpu} died and could not be replaced ({}) at {:.2} s: its ring is written at the stop, and what it cannot hold until then is counted as lost",
                shardrec_shard::with_causes(&error),
                since.as_secs_f64()
            );
        }
    }

    /// The helper `pid` has exited: its name and how it ended.
    fn helper_ended(&mut self, pid: nix::unistd::Pid) -> Option<(String, Ended)> {
        let is_it = |p: Option<&HelperProcess>| p.is_some_and(|p| p.pid == pid);
        if let Some(index) = self.writers.iter().position(|w| is_it(w.process())) {
            let writer = &mut self.writers[index];
            let name = writer.process().map(|p| p.name.clone()).unwrap_or_default();
            let shard = self.dir.shard_path(writer.cpu());
            let ended = match writer.ended() {
                Ok(stats) => match stats.cut {
                    Some(errno) => Ended::Cut(shard, errno),
                    None => Ended::WriterDied(index, None),
                },
                Err(error) => Ended::WriterDied(index, Some(error)),
            };
            return Some((name, ended));
        }
        let vip = self.vip.as_mut().filter(|v| v.helper.pid == pid)?;
        Some((vip.helper.name.clone(), Ended::VipDied(vip.ended().err())))
    }

    /// The VIP died while recording: a new one takes over its rings and
    /// files, up to [`vip::MAX_RESTARTS`] times. Past that, or if it cannot
    /// start, the recording ends (cleanly) with `died`, why the VIP died.
    fn restart_vip(&mut self, died: RecordError) -> Result<(), RecordError> {
        let since = self.since_start();
        let window = self.window_at();
        let (Some(events), Some(old)) = (self.side_band.as_ref(), self.vip.as_mut()) else {
            return Err(died);
        };
        if old.restarted_at.len() >= vip::MAX_RESTARTS {
            return Err(died);
        }
        let mut restarted = vip::restart(events, &self.dir, window)?;
        restarted.restarted_at = std::mem::take(&mut old.restarted_at);
        restarted.restarted_at.push(since);
        self.vip = Some(restarted);
        Ok(())
    }
}
