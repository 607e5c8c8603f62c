//! Stopping, and accounting for what was recorded.

use std::time::Instant;

use nix::sys::signal::{kill, Signal};
use shardrec_control::Command;
use shardrec_shard::accounting::account;
use shardrec_shard::{parallel, RecordingDir, Stats, StopReason};

use super::HandOff;
use super::Recording;
use crate::say;
use crate::signals::{Signals, Wake};
use crate::summary::{RecordReport, WindowOutputs};
use crate::RecordError;
use shardrec_live_merger::Outcome;

impl Recording<'_> {
    /// Disables every event, then stops the writers, then the VIP, and
    /// waits for them. Each writer drains its ring. The VIP drains once no
    /// side-band record can come. A second stop signal makes everyone quit
    /// at once.
    pub(super) fn stop(&mut self, signals: &mut Signals) -> Result<(), RecordError> {
        self.stopping = true;
        self.pool.disable_events(&self.side_band);
        self.pool.drain(&self.side_band);
        self.side_band
            .disable_unrecorded(|cpu| self.pool.records(cpu));
        let mut vip_told = false;
        while self.helpers().any(|h| !h.has_exited()) {
            if !vip_told && !self.pool.any_running() {
                self.side_band.drain();
                vip_told = true;
                continue;
            }
            match signals.wait(Some(1000), None, &[])? {
                Wake::Stop(_) => self.send_all(Command::Quit),
                Wake::Child => {
                    self.reap_children();
                }
                Wake::Control | Wake::Timeout | Wake::Switch | Wake::SwitchEvent => {}
            }
        }
        self.end_workload();
        self.pool.write_given_up_rings(&self.output.dir)
    }

    /// perf ends a workload still running at stop with SIGTERM, and reports
    /// its status.
    fn end_workload(&mut self) {
        let Some(workload) = self.workload.as_ref() else {
            return;
        };
        if self.workload_code.is_none() {
            let _ = kill(workload.pid, Signal::SIGTERM);
            if let Ok(status) = nix::sys::wait::waitpid(workload.pid, None) {
                self.workload_code = Some(match status {
                    nix::sys::wait::WaitStatus::Exited(_, code) => code,
                    nix::sys::wait::WaitStatus::Signaled(_, sig, _) => 128 + sig as i32,
                    _ => 0,
                });
            }
        }
    }

    /// Counts what each shard holds (or has the live merger say it),
    /// rewrites meta with it, and reports.
    pub(super) fn finish(
        mut self,
        stopped_by: StopReason,
        started: Instant,
    ) -> Result<(RecordReport, HandOff), RecordError> {
        let elapsed = started.elapsed();
        // A shard cut while draining cuts the recording as much as one cut
        // before the stop: it is what the user must hear of.
        let stopped_by = match (self.pool.first_cut(), &stopped_by) {
            (Some((cpu, errno)), reason) if !matches!(reason, StopReason::ShardCut(_)) => {
                self.shard_cut(&self.output.dir.shard_path(cpu), errno)
            }
            _ => stopped_by,
        };
        let layouts = self.output.meta.layouts();
        let mut lost_by_event = self.pool.lost_counts(self.plan, &layouts);
        if let Some(windows) = &self.output.windows {
            lost_by_event = windows.losses_since_open(&lost_by_event);
        }
        if self.plan.synthesizes_at_end() {
            self.synthesize_at_end()?;
        }
        let stats = Stats {
            bpf: self.side_band.vip_stats(self.plan),
            filters: self.side_band.filter_stats(self.plan),
            ..self
                .output
                .unwalked_stats(lost_by_event, stopped_by.clone())
        };
        let meta = &mut self.output.meta;
        meta.stats = Some(stats);
        // The facts perf record also reads at its end (after the events
        // are disabled: no sample counts them).
        shardrec_shard::host::complete(&mut meta.host);
        // Modules loaded while recording, for a merge on another host.
        for (name, id) in shardrec_perfdata::build_id::kernel_and_module_build_ids() {
            if meta.host.kernel_build_id(&name).is_none() {
                meta.host.kernel_build_ids.push((name, id));
            }
        }
        // A cut recording is not merged here: the shards are what it
        // leaves.
        if matches!(stopped_by, StopReason::ShardCut(_)) {
            self.output.abandon_live();
        }
        // A live merger writes its last round and counts every shard: it
        // reads the stop's loss counts from meta. Without one (or when it
        // failed), the stop walks the shards.
        let live = self.output.conclude_live()?;
        let scanned = match &live {
            Some(Outcome::Merged { cpus, .. }) => {
                if let Some(stats) = self.output.meta.stats.as_mut() {
                    stats.cpus = cpus.clone();
                }
                Vec::new()
            }
            _ => self.account()?,
        };
        let stats = self.output.meta.stats.as_ref();
        let cpus = self.pool.reports(stats.map_or(&[][..], |s| &s.cpus[..]));
        self.output.write_final_meta()?;
        let mut report = RecordReport {
            windows: None,
            merged_live: matches!(live, Some(Outcome::Merged { .. })),
            dir: self.output.dir.path().to_path_buf(),
            cpus,
            elapsed,
            stopped_by,
            changed_events: self.plan.changed_events(),
            exit_code: self.workload_code.unwrap_or(0),
            bpf: stats.and_then(|s| s.bpf),
            filters: stats.map(|s| s.filters.clone()).unwrap_or_default(),
            vip_restarted_at: self.side_band.restarted_at(),
        };
        let mut hand_off = HandOff {
            scanned,
            live,
            switched: None,
        };
        if let Some(windows) = self.output.windows.take() {
            // --keep-last: the last output joins the windows kept.
            let joined = (!windows.merges_every_window()).then(|| windows.kept_and_current());
            let root = windows.root.clone();
            let switched = windows.finish()?;
            report.windows = Some(WindowOutputs {
                kept: switched.kept.len(),
                failed: switched.failed.len(),
            });
            hand_off.switched = Some(switched);
            if let Some(windows) = joined {
                let last = RecordingDir::create(root.path().join("joined-last"))?;
                last.join_windows(&windows)?;
                report.dir = last.path().to_path_buf();
                hand_off.scanned = Vec::new();
            }
        }
        Ok((report, hand_off))
    }

    /// Walks every shard and completes `meta`'s statistics with what each
    /// holds, as many threads as CPUs are online.
    fn account(&mut self) -> Result<Vec<shardrec_shard::scan::ScannedShard>, RecordError> {
        let side_band = self.side_band.event_name();
        let output = &mut self.output;
        let threads = parallel::online_cpus();
        let accounted = account(&output.dir, &mut output.meta, threads, side_band)?;
        for error in &accounted.index_failures {
            say::warning(&format!(
                "{}: a merge of a time window will walk this shard",
                shardrec_shard::with_causes(error)
            ));
        }
        Ok(accounted.scanned)
    }
}
