//! What a recording did, as data: the binary renders it as the summary
//! printed when a recording stops.

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
    /// Whether a live merger wrote the output while recording.
    pub merged_live: bool,
    /// With `--switch-output`: the earlier windows' outputs (the figures
    /// above are then the last window's).
    pub windows: Option<WindowOutputs>,
}

/// The outputs of a `--switch-output` recording's earlier windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowOutputs {
    /// Written and kept.
    pub kept: usize,
    /// Not written: their windows' shards are kept.
    pub failed: usize,
}

impl RecordReport {
    /// Records the kernel dropped, over all CPUs.
    pub fn lost(&self) -> u64 {
        self.cpus.iter().map(|c| c.stats.dropped()).sum()
    }
}
