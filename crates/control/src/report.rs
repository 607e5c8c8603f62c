//! What a helper tells the coordinator, in order: `Ready`, `Started` (a
//! writer, once its events are enabled), `Switched` at each
//! `--switch-output`, then `Done` or `Failed`.

use serde::{Deserialize, Serialize};

use crate::Framed;

/// One message from a helper.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Report {
    /// Set up and waiting for Start. The VIP hands over the records that
    /// describe the BPF programs loaded before recording (the coordinator
    /// writes them into `synth.shard`); a writer sends none.
    Ready {
        /// `perf_event_header`-framed records.
        records: Vec<u8>,
        /// The VIP's: whether its capture program runs in the kernel (a
        /// VIP that replaces it does not try again where it did not).
        #[serde(default)]
        capturing: bool,
    },
    /// A writer's events are enabled.
    Started,
    /// The helper went on in the next window's files (`Command::Switch`).
    Switched {
        /// A writer's: the ring position of the new shard's first byte.
        base: u64,
        /// The VIP's: the records describing the BPF programs loaded now,
        /// for the new window's `synth.shard`.
        records: Vec<u8>,
    },
    /// The helper ended cleanly.
    Done(Outcome),
    /// The helper failed; the error as it would print it.
    Failed(String),
}

/// What a helper accomplished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// A writer's.
    Writer(WriterStats),
    /// The VIP's.
    Vip(VipStats),
}

/// What a writer did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriterStats {
    /// Bytes written to the shard.
    pub bytes: u64,
    /// Completed write requests.
    pub writes: u64,
    /// Of which short (the rest was resubmitted).
    pub short_writes: u64,
    /// Ring wakeups (watermark reached).
    pub wakeups: u64,
    /// Flushes the coordinator asked for (a quiet ring that held data).
    pub flushes: u64,
    /// The most bytes seen waiting in the ring at once.
    pub peak_fill: u64,
    /// The errno that cut the shard (a full disk, a quota, an I/O error):
    /// the writer stopped there, its shard holding every whole record
    /// written before.
    pub cut: Option<i32>,
}

/// What the VIP saw and captured (also kept in a recording's `meta`, where
/// older recordings lack the fields added since: they read as 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VipStats {
    /// PROG_LOAD events read.
    pub loaded: u64,
    /// PROG_UNLOAD events read.
    pub unloaded: u64,
    /// KSYMBOL records read.
    pub ksymbols: u64,
    /// Programs captured (loaded ones and those that existed before).
    pub captured: u64,
    /// Programs gone before they could be captured.
    pub missed: u64,
    /// Bytes written to `vip.shard`.
    pub bytes: u64,
    /// Side-band records the kernel dropped because a VIP ring was full
    /// (its LOST records): apart from the sampling rings' losses.
    pub lost: u64,
    /// What `--off-cpu`'s program did, when it ran.
    pub off_cpu: Option<OffCpuStats>,
    /// How the kernel capture hooked program loads; `None` where it did
    /// not run (bpf(2) alone captured).
    pub kernel_capture: Option<CaptureHook>,
    /// Of `captured`, the programs the kernel capture read as they loaded.
    pub captured_in_kernel: u64,
}

/// How shardrec's capture program hooks the kernel's program loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CaptureHook {
    /// fentry (a BPF trampoline).
    Fentry,
    /// A kprobe.
    Kprobe,
}

impl CaptureHook {
    /// The hook's name, as the summary gives it.
    pub fn name(self) -> &'static str {
        match self {
            CaptureHook::Fentry => "fentry",
            CaptureHook::Kprobe => "kprobe",
        }
    }
}

/// What became of the waits `--off-cpu`'s program saw end, over every CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OffCpuStats {
    /// Written into a CPU's ring.
    pub written: u64,
    /// Shorter than the threshold, summed (written at the end).
    pub short: u64,
    /// Refused by a full ring (the kernel counts them lost on the event).
    pub failed: u64,
    /// Ended where or when nothing was recorded: on a CPU not recorded,
    /// before the workload's exec, after the stop.
    pub unrecorded: u64,
    /// Shorter than the threshold but not summed: the sums were full.
    pub unsummed: u64,
}

impl Framed for Report {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_report_round_trips() {
        let reports = [
            Report::Ready {
                records: (0..=255).collect(),
                capturing: true,
            },
            Report::Started,
            Report::Switched {
                base: 1 << 40,
                records: vec![1, 2, 3],
            },
            Report::Done(Outcome::Vip(VipStats {
                captured: 7,
                ..VipStats::default()
            })),
            Report::Failed("mmap: Operation not permitted".into()),
        ];
        let mut pipe = Vec::new();
        for report in &reports {
            report.write_to(&mut pipe).unwrap();
        }
        // 256 bytes of records take 256 bytes (and a few), not up to twice that.
        assert!(pipe.len() < 256 + 128, "{}", pipe.len());
        let mut read = &pipe[..];
        for report in reports {
            assert_eq!(Report::read_from(&mut read).unwrap(), Some(report));
        }
        assert_eq!(Report::read_from(&mut read).unwrap(), None);
    }
}
