//! Waiting for a reason to stop, stopping, and accounting for what was
//! recorded.

use std::path::PathBuf;
use std::time::Instant;

use nix::sys::signal::{kill, Signal};
use shardrec_control::Command;
use shardrec_shard::parallel;
use shardrec_shard::scan::ScannedShard;
use shardrec_shard::{Meta, RecordingDir, Stats, StopReason};

use super::{Recording, SIDE_BAND_NAME};
use crate::live_merger::Outcome;
use crate::meta::unix_ns;
use crate::plan::Scope;
use crate::signals::{Signals, Wake};
use crate::summary::{CpuReport, RecordReport};
use crate::writers::Writer;
use crate::RecordError;

impl Recording<'_> {
    /// Waits for a reason to stop. A writer that dies is a failure, but the
    /// others are still stopped cleanly so their shards are complete.
    pub(super) fn wait(
        &mut self,
        signals: &mut Signals,
    ) -> Result<(StopReason, Option<RecordError>), RecordError> {
        loop {
            let control = self.control.as_ref().map(|c| c.fd());
            match signals.wait(self.tick_ms(), control)? {
                Wake::Stop(signal) => {
                    return Ok((StopReason::Signal(signal.as_str().to_string()), None))
                }
                Wake::Control => {
                    if self.obey_control() {
                        return Ok((StopReason::ControlStop, None));
                    }
                }
                Wake::Child => {
                    if let Some(outcome) = self.reap_children() {
                        return Ok(outcome);
                    }
                }
                Wake::Timeout => {
                    if self.targets_gone() {
                        return Ok((StopReason::TargetsExited, None));
                    }
                }
                Wake::Switch => self.switch_asked |= self.switch_on_signal(),
            }
            self.count_when_due();
            self.flush_quiet_rings();
            if let Some(limit) = self.size_limit_reached() {
                return Ok((StopReason::SizeLimit(limit), None));
            }
            let asked = std::mem::take(&mut self.switch_asked);
            if asked || self.switch_due() {
                if let Err(error) = self.switch_output(asked) {
                    return Ok((StopReason::SwitchFailed, Some(error)));
                }
            }
        }
    }

    fn targets_gone(&self) -> bool {
        matches!(self.plan.scope, Scope::Threads(_))
            && self.plan.pids.iter().all(|&pid| !running(pid))
    }

    /// Stops the writers, then the VIP, and waits for them. Each writer
    /// disables its CPU's events (the side-band one too) from its own CPU
    /// and drains its ring; for a writer already gone the coordinator
    /// disables them. The VIP drains once no side-band record can come. A
    /// second stop signal makes everyone quit at once.
    pub(super) fn stop(&mut self, signals: &mut Signals) -> Result<(), RecordError> {
        self.stopping = true;
        for writer in self.writers.iter_mut() {
            writer.drain(self.side_band.as_ref().and_then(|s| s.on_cpu(writer.cpu())));
        }
        self.disable_unrecorded_side_band();
        let mut vip_told = false;
        while self.helpers().any(|h| !h.has_exited()) {
            if !vip_told && !self.writers.iter().any(Writer::is_running) {
                self.vip
                    .iter_mut()
                    .for_each(|v| v.helper.send(Command::Drain));
                vip_told = true;
                continue;
            }
            match signals.wait(1000, None)? {
                Wake::Stop(_) => self.send_all(Command::Quit),
                Wake::Child => {
                    self.reap_children();
                }
                Wake::Control | Wake::Timeout | Wake::Switch => {}
            }
        }
        self.end_workload();
        self.write_given_up_rings()
    }

    /// The side-band events of the CPUs no writer records (their writers
    /// disable the others from their own CPU), so the VIP's last read
    /// finds everything that came.
    fn disable_unrecorded_side_band(&self) {
        let Some(side_band) = &self.side_band else {
            return;
        };
        for (cpu, event, _) in &side_band.events {
            if !self.writers.iter().any(|w| w.cpu() == *cpu) {
                let _ = event.disable();
            }
        }
    }

    /// The rings of the writers given up on, written by the coordinator
    /// now that every event is disabled.
    fn write_given_up_rings(&self) -> Result<(), RecordError> {
        for writer in self.writers.iter().filter(|w| w.given_up) {
            let path = self.dir.shard_path(writer.cpu());
            let shard = self.dir.reopen_file(&path)?;
            writer
                .write_remaining(&shard)
                .map_err(RecordError::system(format!("writing {}", path.display())))?;
        }
        Ok(())
    }

    pub(super) fn send_all(&mut self, command: Command) {
        for helper in self.helpers_mut().filter(|h| !h.has_exited()) {
            helper.send(command);
        }
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

    /// Counts what each shard holds, rewrites meta with it, and reports.
    pub(super) fn finish(
        mut self,
        stopped_by: StopReason,
        started: Instant,
    ) -> Result<RecordReport, RecordError> {
        let elapsed = started.elapsed();
        // A shard cut while draining cuts the recording as much as one cut
        // before the stop: it is what the user must hear of.
        let cut = self
            .writers
            .iter()
            .find_map(|w| Some((w.cpu(), w.stats().cut?)));
        let stopped_by = match (cut, &stopped_by) {
            (Some((cpu, errno)), reason) if !matches!(reason, StopReason::ShardCut(_)) => {
                self.shard_cut(&self.dir.shard_path(cpu), errno)
            }
            _ => stopped_by,
        };
        let layouts = self.meta.layouts();
        let mut lost_by_event = self.read_lost_counts();
        for writer in &self.writers {
            for (id, samples) in writer.unwritten_samples(&layouts) {
                add_lost(&mut lost_by_event, writer.cpu(), id, samples);
            }
        }
        if let Some(windows) = &self.windows {
            lost_by_event = windows.losses_since_open(&lost_by_event);
        }
        if self.plan.overwrite {
            self.synthesize_at_end()?;
        }
        // Modules loaded while recording, for a merge on another host.
        for (name, id) in shardrec_perfdata::build_id::kernel_and_module_build_ids() {
            if self.meta.host.kernel_build_id(&name).is_none() {
                self.meta.host.kernel_build_ids.push((name, id));
            }
        }
        self.meta.stats = Some(Stats {
            bpf: self.vip_stats(),
            filters: self.filters.iter().map(|f| f.stats(self.plan)).collect(),
            ..self.unwalked_stats(lost_by_event, stopped_by.clone())
        });
        // A live merger writes its last round and counts every shard: it
        // reads the stop's loss counts from meta. Without one (or when it
        // failed), the stop walks the shards.
        // A cut recording is not merged here: the live merger gives back
        // the room its output took (or keeps what it freed from the
        // shards), and the shards are what the recording leaves.
        if matches!(stopped_by, StopReason::ShardCut(_)) {
            if let Some(live) = self.live.take() {
                live.abandon();
            }
        }
        let live = self.live.take().map(|mut live| {
            self.dir.release_meta_room();
            let written = self.dir.write_meta(&self.meta);
            live.conclude();
            written.map(|_| live.outcome())
        });
        let live = live.transpose()?;
        let scanned = match (&live, self.meta.stats.as_mut()) {
            (Some(Outcome::Merged { cpus, .. }), Some(stats)) => {
                stats.cpus = cpus.clone();
                Vec::new()
            }
            _ => {
                let side_band = self.side_band.is_some().then_some(SIDE_BAND_NAME);
                account(
                    &self.dir,
                    &mut self.meta,
                    parallel::online_cpus(),
                    side_band,
                )?
            }
        };
        let stats = self.meta.stats.as_ref().map_or(&[][..], |s| &s.cpus[..]);
        let cpus: Vec<CpuReport> = self
            .writers
            .iter()
            .zip(stats)
            .map(|(writer, stats)| CpuReport {
                stats: stats.clone(),
                writer: writer.stats(),
                unwritten: writer.unwritten(),
                replaced_at: writer.replaced_at.clone(),
                given_up: writer.given_up,
            })
            .collect();
        // The room kept at start is given back first: on a full disk, that
        // is what lets meta be written.
        self.dir.release_meta_room();
        self.dir.write_meta(&self.meta)?;
        let (mut dir, mut scanned, mut switched) = (self.dir.path().to_path_buf(), scanned, None);
        if let Some(windows) = self.windows.take() {
            // --keep-last: the last output joins the windows kept.
            let joined = (!windows.merges_every_window()).then(|| windows.kept_and_current());
            let root = windows.root.clone();
            switched = Some(windows.finish()?);
            if let Some(windows) = joined {
                let last = RecordingDir::create(root.path().join("joined-last"))?;
                last.join_windows(&windows)?;
                (dir, scanned) = (last.path().to_path_buf(), Vec::new());
            }
        }
        Ok(RecordReport {
            switched,
            dir,
            cpus,
            elapsed,
            stopped_by,
            exit_code: self.workload_code.unwrap_or(0),
            bpf: self.meta.stats.as_ref().and_then(|s| s.bpf),
            filters: self
                .meta
                .stats
                .as_ref()
                .map(|s| s.filters.clone())
                .unwrap_or_default(),
            scanned,
            live,
            vip_restarted_at: self
                .vip
                .as_ref()
                .map(|v| v.restarted_at.clone())
                .unwrap_or_default(),
        })
    }

    /// The current window's (or the recording's) statistics as far as they
    /// are known without walking its shards, which [`account`] then does.
    pub(super) fn unwalked_stats(
        &self,
        lost_by_event: Vec<(u32, u64, u64)>,
        stopped_by: StopReason,
    ) -> Stats {
        Stats {
            cpus: Vec::new(),
            synth_bytes: self.synth_bytes,
            lost_by_event,
            bpf: None,
            filters: Vec::new(),
            stopped_by,
            stop_unix_ns: unix_ns(),
        }
    }

    /// What the VIP reported, with the side-band records lost in its
    /// rings: the kernel counts every one on its event (PERF_FORMAT_LOST),
    /// while a LOST record comes only with the next record that fits,
    /// which after a burst may never come.
    fn vip_stats(&self) -> Option<shardrec_control::VipStats> {
        let mut stats = self.vip.as_ref()?.stats?;
        if let (Some(side_band), true) = (&self.side_band, self.plan.lost_counts) {
            let counted: u64 = side_band
                .events
                .iter()
                .filter_map(|(_, event, _)| event.read_values().ok()?.get(2).copied())
                .sum();
            stats.lost = stats.lost.max(counted);
        }
        Some(stats)
    }

    /// Each event's count of samples the kernel dropped, as `(cpu, id,
    /// lost)` for the non-zero ones; empty where the kernel keeps none.
    pub(super) fn read_lost_counts(&self) -> Vec<(u32, u64, u64)> {
        if !self.plan.lost_counts {
            return Vec::new();
        }
        // The events are disabled: reading them needs no IPI.
        let counts = self.writers.iter().map(|w| &w.events).flat_map(|cpu| {
            cpu.events.iter().filter_map(|event| {
                // read() gives value, id, lost (read_format ID | LOST).
                let values = event.event.read_values().ok()?;
                let lost = values.get(2).copied().filter(|&lost| lost > 0)?;
                Some((cpu.cpu, event.id, lost))
            })
        });
        counts.collect()
    }
}

/// Adds `lost` samples of event `id` on `cpu` to the per-event counts.
fn add_lost(counts: &mut Vec<(u32, u64, u64)>, cpu: u32, id: u64, lost: u64) {
    match counts.iter_mut().find(|(c, i, _)| (*c, *i) == (cpu, id)) {
        Some((_, _, count)) => *count += lost,
        None => counts.push((cpu, id, lost)),
    }
}

/// Walks every shard of the recording in `dir` and completes `meta`'s
/// statistics (made at stop, or at a switch, without them) with what each
/// holds, writing each shard's index on the way.
///
/// The shards are walked by `threads` threads; at the stop one per online
/// CPU, as the merge walks them (each holds up to `scan::RELEASE_STEP` of
/// its shard's pages mapped): on a large host the shards are many and each
/// scan waits on its own file's pages.
pub(crate) fn account(
    dir: &RecordingDir,
    meta: &mut Meta,
    threads: usize,
    side_band: Option<&str>,
) -> Result<Vec<ScannedShard>, shardrec_shard::Error> {
    let layouts = meta.layouts();
    // Where a merge freed the shards' first part, what is left of them,
    // and what its output holds of them.
    let prefix = dir.read_merged_prefix()?;
    let merged = match &prefix {
        // A stream's part went to its reader: the rest is what is counted.
        Some(prefix) if !prefix.streamed => merged_part(dir, meta, prefix, side_band)?,
        _ => Default::default(),
    };
    let prefix = prefix.unwrap_or_default();
    let paths: Vec<PathBuf> = meta.cpus.iter().map(|&cpu| dir.shard_path(cpu)).collect();
    let scanned = parallel::try_map(&paths, threads, |_, path| {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        ScannedShard::scan_from(path, &layouts, prefix.resume(&name))
    })?;
    let Some(stats) = meta.stats.as_mut() else {
        return Ok(scanned);
    };
    stats.cpus.clear();
    for (&cpu, shard) in meta.cpus.iter().zip(&scanned) {
        let mut summary = shard.summary.clone();
        if let Some(part) = merged.get(&cpu) {
            summary.absorb(part);
        }
        stats.count_cpu(cpu, shard.bytes.bytes().len() as u64, &summary);
        // Without an index, a merge of a time window walks the shard: a
        // failure here only costs time later.
        let index = shardrec_shard::shard_index::ShardIndex::of(&shard.summary);
        if let Err(error) = dir.write_index(cpu, &index) {
            eprintln!("shardrec: warning: {error}: a merge of a time window will walk this shard");
        }
    }
    Ok(scanned)
}

/// What the output of an interrupted merge (`merged.partial`, which
/// `prefix` describes) holds of each CPU's shard, leaving out the side
/// band's event (named `side_band`).
fn merged_part(
    dir: &RecordingDir,
    meta: &Meta,
    prefix: &shardrec_shard::merged_prefix::MergedPrefix,
    side_band: Option<&str>,
) -> Result<
    std::collections::BTreeMap<u32, shardrec_shard::scan::ShardSummary>,
    shardrec_shard::Error,
> {
    let path = dir.partial_output_path();
    let bytes = shardrec_shard::scan::ShardBytes::open(&path)?;
    let start = (prefix.data_offset as usize).min(bytes.bytes().len());
    let end = (start + prefix.data_len as usize).min(bytes.bytes().len());
    let side_band: Vec<u64> = meta
        .events
        .iter()
        .filter(|e| side_band.is_some_and(|name| e.name == name))
        .flat_map(|e| e.ids.iter().map(|&(_, id)| id))
        .collect();
    Ok(shardrec_shard::scan::summarize_merged(
        &bytes.bytes()[start..end],
        &meta.layouts(),
        |id| !side_band.contains(&id),
    ))
}

/// Whether process `pid` still runs: it exists and is not a zombie
/// waiting for its parent (which `kill(pid, 0)` cannot tell).
fn running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may
    // itself contain ") ".
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next());
    !matches!(state, None | Some('Z') | Some('X'))
}
