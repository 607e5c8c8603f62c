//! A helper that ends while recording, whichever it is (one [`Ended`]):
//! a writer that died is replaced, a VIP or a live merger that died is
//! restarted (as often as `shardrec_control::restart` says), a shard cut
//! by its storage stops the recording, a stream's reader that left stops
//! it as SIGPIPE stops perf record; at a stop, their failures are
//! warnings.

use std::path::PathBuf;

use shardrec_shard::StopReason;

use super::Recording;
use crate::say;
use crate::signals;
use crate::RecordError;

/// How a helper ended while recording, whichever it was.
pub(super) enum Ended {
    /// A writer stopped at a storage error: its shard and the errno.
    Cut(PathBuf, i32),
    /// A writer ended (killed, crashed, or done at a stop): the index of
    /// its writer, and what it said went wrong, if anything.
    WriterDied(usize, Option<RecordError>),
    /// The VIP ended, and what it said went wrong, if anything.
    VipDied(Option<RecordError>),
    /// The live merger was killed, or stopped as one killed when a writer
    /// took back a ring it held too long (`overtaken`).
    LiveMergerDied { overtaken: bool },
    /// The live merger stopped as the stream's reader left.
    ReaderLeft,
    /// A merger ended on its own (the switch-output merger, or a live
    /// merger that failed and said why: the merge at the stop completes
    /// its output).
    MergerStopped,
}

impl Recording<'_> {
    /// Reaps every child that ended: a reason to stop, if one of them
    /// gives it.
    pub(super) fn reap_children(&mut self) -> Option<(StopReason, Option<RecordError>)> {
        let mut outcome = None;
        for ended in signals::reap() {
            if self.workload.as_ref().is_some_and(|w| w.pid == ended.pid) {
                self.workload_code = Some(ended.code);
                outcome.get_or_insert((StopReason::WorkloadExited, None));
                continue;
            }
            // The output's mergers stop the recording only where nothing
            // else did; a writer's or the VIP's reason is the one told.
            let (ended_as, theirs) = match self.output.helper_ended(ended.pid, ended.code) {
                Some(ended_as) => {
                    // A merger killed mid-round leaves its claims.
                    self.pool.drop_claims();
                    (Some(("live merger".to_string(), ended_as)), true)
                }
                None => (self.helper_ended(ended.pid), false),
            };
            let Some((name, ended_as)) = ended_as else {
                continue;
            };
            match self.after_helper(name, ended_as) {
                Some(stop) if theirs => {
                    outcome.get_or_insert(stop);
                }
                Some(stop) => outcome = Some(stop),
                None => {}
            }
        }
        outcome
    }

    /// What follows a helper's end: a reason to stop, if any.
    fn after_helper(
        &mut self,
        name: String,
        ended: Ended,
    ) -> Option<(StopReason, Option<RecordError>)> {
        match ended {
            // As perf record, killed by SIGPIPE when its reader goes.
            Ended::ReaderLeft => Some((StopReason::Signal("SIGPIPE".into()), None)),
            Ended::MergerStopped => None,
            Ended::LiveMergerDied { .. } if self.stopping => None,
            // What a stream's reader got is nowhere else, nor where inside
            // a record the merger stopped: the recording stops, as perf
            // record's does when its output fails, and the shards keep it.
            Ended::LiveMergerDied { .. } if self.output.streamed() => {
                Some((StopReason::HelperFailed(name), None))
            }
            Ended::LiveMergerDied { overtaken } => {
                if let Err(error) = self.restart_live_merger(overtaken) {
                    // The merge at the stop completes the output.
                    say::warning(&shardrec_shard::with_causes(&error));
                }
                None
            }
            Ended::Cut(shard, errno) => Some((self.shard_cut(&shard, errno), None)),
            Ended::WriterDied(index, error) if self.stopping => {
                // What its ring still holds is written at the end.
                self.pool.died_while_stopping(index, &self.side_band);
                if let Some(error) = error {
                    say::warning(&format!(
                        "the {name} failed while stopping: {}",
                        shardrec_shard::with_causes(&error)
                    ));
                }
                None
            }
            Ended::VipDied(Some(error)) if self.stopping => {
                say::warning(&format!(
                    "the {name} failed while stopping: {}",
                    shardrec_shard::with_causes(&error)
                ));
                None
            }
            Ended::VipDied(None) if self.stopping => None,
            Ended::WriterDied(index, _) => {
                let since = self.since_start();
                let dir = &self.output.dir;
                if let Some(warning) = self.pool.replace(index, dir, &self.side_band, since) {
                    say::warning(&warning);
                }
                None
            }
            Ended::VipDied(error) => {
                // While recording, the VIP never ends on its own: even a
                // clean report is a failure here.
                let error = error.unwrap_or_else(|| RecordError::Helper {
                    name: name.clone(),
                    message: "exited early".to_string(),
                });
                let (since, window) = (self.since_start(), self.output.window_at());
                let restarted = self
                    .side_band
                    .restart_vip(error, &self.output.dir, window, since);
                restarted
                    .err()
                    .map(|error| (StopReason::HelperFailed(name), Some(error)))
            }
        }
    }

    /// The live merger died while recording: a new one goes on from where
    /// its output stopped. A tracepoint takes one filter for good (a
    /// second is refused, EEXIST), so the new merger's own events are
    /// recorded, as a replaced writer's are.
    fn restart_live_merger(&mut self, overtaken: bool) -> Result<(), RecordError> {
        let reads_first = self.output.merger_reads_first();
        let pages = self.plan.ring_pages;
        let rings = super::watched_rings(&self.pool, &self.side_band, pages, reads_first);
        let Some(pid) = self.output.restart_live_merger(rings)? else {
            return Ok(());
        };
        let how = match overtaken {
            true => "held its rings too long (stalled mid-round) and their writers took them back",
            false => "died",
        };
        say::warning(&format!(
            "the live merger {how} at {:.2} s; a new one goes on from where its output stopped",
            self.since_start().as_secs_f64()
        ));
        self.output.meta.recorder_pids.push(pid.as_raw());
        Ok(())
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

    /// The writer or VIP `pid` has exited: its name and how it ended.
    fn helper_ended(&mut self, pid: nix::unistd::Pid) -> Option<(String, Ended)> {
        let Some(index) = self.pool.index_of(pid) else {
            let (name, error) = self.side_band.ended(pid)?;
            return Some((name, Ended::VipDied(error)));
        };
        let shard = self.output.dir.shard_path(self.pool.writers()[index].cpu());
        let writer = self.pool.writer_mut(index);
        let name = writer.process().map(|p| p.name.clone()).unwrap_or_default();
        let ended = match writer.ended() {
            Ok(stats) => match stats.cut {
                Some(errno) => Ended::Cut(shard, errno),
                None => Ended::WriterDied(index, None),
            },
            Err(error) => Ended::WriterDied(index, Some(error)),
        };
        Some((name, ended))
    }
}
