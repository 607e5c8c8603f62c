//! The report printed when a recording stops.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use shardrec_control::WriterStats;
use shardrec_shard::CpuStats;

/// One CPU's outcome: what its shard holds and what its writer did.
#[derive(Clone, Debug)]
pub struct CpuReport {
    /// Counted from the shard.
    pub stats: CpuStats,
    /// Reported by the writer.
    pub writer: WriterStats,
    /// Bytes left in the ring when the writer stopped (only after a
    /// second stop signal made it quit without draining).
    pub unwritten: u64,
    /// When its writer died and was replaced (since the start).
    pub replaced_at: Vec<Duration>,
    /// Whether its writer died too often and was not replaced again.
    pub given_up: bool,
}

/// An event recorded otherwise than asked, as perf's fallbacks change it
/// (perf says so only with `-v`; the summary always does).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangedEvent {
    /// The name asked for (or the default event's).
    pub asked: String,
    /// The name it was recorded as, in perf.data.
    pub recorded: String,
    /// Why, each change in the order made.
    pub why: Vec<&'static str>,
}

/// The outcome of a recording.
#[derive(Debug)]
pub struct RecordReport {
    /// The shard directory.
    pub dir: PathBuf,
    /// Per CPU, in CPU order.
    pub cpus: Vec<CpuReport>,
    /// From enabling to the stop.
    pub elapsed: Duration,
    /// Why it stopped.
    pub stopped_by: shardrec_shard::StopReason,
    /// The events recorded otherwise than asked.
    pub changed_events: Vec<ChangedEvent>,
    /// The workload's exit code (0 without a workload).
    pub exit_code: i32,
    /// What the VIP saw of BPF programs, when it ran.
    pub bpf: Option<shardrec_control::VipStats>,
    /// What each `--filter` on a sampling event kept and dropped.
    pub filters: Vec<shardrec_shard::FilterStats>,
    /// When the VIP died and was restarted (since the start).
    pub vip_restarted_at: Vec<Duration>,
    /// Every CPU's shard as the stop walked it, for the merge that
    /// follows to take as it is (`shardrec_merge::merge_scanned`).
    pub scanned: Vec<shardrec_shard::scan::ScannedShard>,
    /// How the live merger ended, when there was one.
    pub live: Option<crate::live_merger::Outcome>,
    /// With `--switch-output`: the windows merged while recording (`dir`
    /// is then the last window, not merged yet).
    pub switched: Option<crate::switch_output::Outputs>,
}

impl RecordReport {
    /// Records the kernel dropped, over all CPUs.
    pub fn lost(&self) -> u64 {
        self.cpus.iter().map(|c| c.stats.dropped()).sum()
    }

    /// Where the live merger read the rings first: how much went through
    /// the shards all the same, spilled by the writers while it was
    /// behind (with the default rings, about nothing).
    fn write_spilled(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes: u64 = self.cpus.iter().map(|c| c.stats.bytes).sum();
        let spilled: u64 = self.cpus.iter().map(|c| c.writer.bytes).sum();
        if self.live.is_none() || spilled >= bytes {
            return Ok(());
        }
        writeln!(
            f,
            "  through the shards: {:.3} MB; the live merger took the other {:.3} MB from the rings",
            spilled as f64 / 1e6,
            (bytes - spilled) as f64 / 1e6
        )
    }
}

impl fmt::Display for RecordReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        let bytes: u64 = self.cpus.iter().map(|c| c.stats.bytes).sum();
        let samples: u64 = self.cpus.iter().map(|c| c.stats.samples).sum();
        writeln!(
            f,
            "[ shardrec record: {:.3} MB in {} ({} samples, {} lost) over {:.2} s; stopped by {} ]",
            bytes as f64 / 1e6,
            self.dir.display(),
            samples,
            self.lost(),
            secs,
            self.stopped_by
        )?;
        for event in &self.changed_events {
            let why = event.why.join("; ");
            writeln!(
                f,
                "  event {} recorded as {}: {why}",
                event.asked, event.recorded
            )?;
        }
        writeln!(
            f,
            "  {:>4} {:>12} {:>9} {:>10} {:>8}",
            "CPU", "bytes", "MB/s", "records", "lost"
        )?;
        for cpu in &self.cpus {
            let s = &cpu.stats;
            writeln!(
                f,
                "  {:>4} {:>12} {:>9.2} {:>10} {:>8}",
                s.cpu,
                s.bytes,
                s.bytes as f64 / 1e6 / secs,
                s.records,
                s.dropped()
            )?;
        }
        self.write_spilled(f)?;
        if let Some(switched) = &self.switched {
            writeln!(
                f,
                "  the figures above are the last window's: {} earlier outputs kept, {} not written",
                switched.kept.len(),
                switched.failed.len()
            )?;
        }
        if let Some(bpf) = &self.bpf {
            let how = match bpf.kernel_capture {
                Some(hook) => format!(
                    "{} of them as they loaded, by a {} in the kernel",
                    bpf.captured_in_kernel,
                    hook.name()
                ),
                None => "through bpf(2): no capture program in the kernel".into(),
            };
            writeln!(
                f,
                "  BPF programs: {} loaded, {} unloaded, {} captured ({how}), {} missed (gone before capture)",
                bpf.loaded, bpf.unloaded, bpf.captured, bpf.missed
            )?;
            if bpf.lost > 0 {
                writeln!(
                    f,
                    "  side-band: {} records lost in the VIP's rings (not samples: BPF programs may be unnamed)",
                    bpf.lost
                )?;
            }
            if let Some(waits) = &bpf.off_cpu {
                writeln!(
                    f,
                    "  off-CPU: {} waits written, {} lost to full rings, {} ended outside the recording (a CPU not recorded, before the exec or after the stop)",
                    waits.written, waits.failed, waits.unrecorded
                )?;
                if waits.short + waits.unsummed > 0 {
                    writeln!(
                        f,
                        "  off-CPU: {} waits under --off-cpu-thresh summed by thread and stack, written at the end; {} not summed (the sums were full)",
                        waits.short, waits.unsummed
                    )?;
                }
            }
        }
        for filter in &self.filters {
            writeln!(
                f,
                "  --filter '{}' on {}: {} samples kept, {} dropped in the kernel (filtered out, not lost)",
                filter.filter,
                filter.event,
                filter.kept(),
                filter.dropped()
            )?;
        }
        for cpu in self.cpus.iter().filter(|c| !c.replaced_at.is_empty()) {
            let times: Vec<String> = cpu
                .replaced_at
                .iter()
                .map(|t| format!("{:.2} s", t.as_secs_f64()))
                .collect();
            let end = match cpu.given_up {
                true => ", then died again and was given up on",
                false => "",
            };
            writeln!(
                f,
                "  the writer of CPU {} died and was replaced at {}{end}",
                cpu.stats.cpu,
                times.join(", ")
            )?;
        }
        if !self.vip_restarted_at.is_empty() {
            let times: Vec<String> = self
                .vip_restarted_at
                .iter()
                .map(|t| format!("{:.2} s", t.as_secs_f64()))
                .collect();
            writeln!(
                f,
                "  the VIP died and was restarted at {} (programs loaded and unloaded while none ran were not captured)",
                times.join(", ")
            )?;
        }
        let unwritten: u64 = self.cpus.iter().map(|c| c.unwritten).sum();
        if unwritten > 0 {
            writeln!(
                f,
                "  {unwritten} bytes were still in the rings when the writers quit"
            )?;
        }
        Ok(())
    }
}
