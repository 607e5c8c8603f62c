//! A writer process's body, from its fork to its stats: it pins itself to
//! its CPU, maps the ring, sets up its io_uring and says Ready; at Start
//! it enables its CPU's events and says Started; then it serves the ring
//! from shard to shard until a stop. The coordinator forks it and talks
//! to it in control's [`Command`]s and [`Report`]s.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;

use shardrec_control::{Command, Framed, Report, Served, WriterStats};
use shardrec_sys::{cpu, process, ring, PerfEvent, RingBuffer};

use crate::{RingWriter, ShardWriter, ShardWrites, SnapshotWriter, WriterConfig};

/// How every writer of a recording runs.
#[derive(Clone, Copy, Debug)]
pub struct WriterOptions {
    /// Enable the events at Start (not for a workload, whose events the
    /// kernel enables at its exec).
    pub enable: bool,
    /// Ring size in pages.
    pub ring_pages: usize,
    /// Sync the shard at the end (when no merge follows).
    pub sync_shard: bool,
    /// `--overwrite`: the ring is read only at snapshots.
    pub overwrite: bool,
    /// `-r`: SCHED_FIFO at this priority; normal priority without it.
    pub realtime: Option<i32>,
    /// How the shards are written.
    pub writes: ShardWrites,
    /// The live merger takes each ring's bytes into the output first; the
    /// writer spills into the shard what it has not taken once the ring is
    /// half full (see `shardrec_sys::ring` on a ring's two readers).
    pub merger_reads_first: bool,
}

/// What a writer process is given: its CPU's events, how to run, and
/// where its shard begins in the ring.
pub struct WriterSetup<'a> {
    /// Its CPU.
    pub cpu: u32,
    /// The CPU's events, the first the ring's owner: enabled at Start
    /// (with `options.enable`), disabled at the stop.
    pub events: Vec<&'a PerfEvent>,
    /// The CPU's side-band event, which the VIP enabled: disabled at the
    /// stop with the rest.
    pub side_band: Option<&'a PerfEvent>,
    /// How it runs.
    pub options: WriterOptions,
    /// The ring position of its shard's first byte.
    pub base: u64,
    /// The claim it shares with the live merger, which reads the ring
    /// first ([`ring::ClaimSlot`]).
    pub claim: Option<ring::ClaimSlot>,
}

impl WriterSetup<'_> {
    /// The event whose fd the ring belongs to.
    fn ring_owner(&self) -> &PerfEvent {
        self.events[0]
    }

    /// Every event the writer disables at the stop.
    fn disabled_at_stop(&self) -> Vec<&PerfEvent> {
        self.events.iter().copied().chain(self.side_band).collect()
    }
}

/// The smallest ring whose writer leaves it to the live merger up to half
/// full (see [`batch_bytes`]): a smaller one fills within a round.
const SPILL_AT_HALF_FROM: usize = 1 << 20;

/// What a writer writes at once in a ring of `size` bytes. Where the
/// merger reads first, the writer spills only from half a ring on, in
/// rings big enough for the merger's rounds to keep up; a smaller ring
/// fills between two of them in a storm (a 64 KiB one at 33 MB/s in
/// 2 ms), and is written from its wakeup watermark on, as without it.
fn batch_bytes(size: usize, merger_reads_first: bool) -> u64 {
    match merger_reads_first && size >= SPILL_AT_HALF_FROM {
        true => size as u64 / 2,
        false => ring::wakeup_watermark(size) as u64,
    }
}

/// The writer's body: serves its ring into `shard` (then each shard
/// `next_shard` gives at a Switch; `None`: go on in the same one), taking
/// commands from `control` and reporting into `report`.
pub fn run(
    setup: &WriterSetup,
    shard: File,
    control: OwnedFd,
    report: &mut File,
    next_shard: impl FnMut() -> io::Result<Option<File>>,
) -> io::Result<WriterStats> {
    cpu::pin_to(setup.cpu)?;
    let owner = setup.ring_owner();
    let start = File::from(control.try_clone()?);
    if setup.options.overwrite {
        // Read only at snapshots: no wakeups to serve in time.
        let ring = RingBuffer::map_overwrite(owner, setup.options.ring_pages, true)?;
        let writer = SnapshotWriter::new(&ring, owner, shard, control, ring.head())
            .disabling_at_stop(setup.disabled_at_stop());
        return serve(setup, writer, start, report, (&ring, next_shard));
    }
    // Normal priority, as perf's reading thread: a writer at SCHED_FIFO
    // preempts the workload on its CPU at every wakeup (under -F max it
    // starved a 0.5 s workload for 33 s); -r is there for whoever wants
    // perf's -r. Short time slices let it run as it wakes (rather than
    // at the next tick behind a busy task), at the same share of its CPU.
    if let Some(priority) = setup.options.realtime {
        process::realtime(priority).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot run at SCHED_FIFO priority {priority} (-r): {e}"),
            )
        })?;
    } else {
        process::short_time_slices();
    }
    let mut ring = RingBuffer::map_reader(owner, setup.options.ring_pages)?;
    if let Some(slot) = setup.claim.clone() {
        ring.share_claim(slot);
    }
    let config = WriterConfig {
        batch_bytes: batch_bytes(ring.data_size(), setup.options.merger_reads_first),
        merger_reads_first: setup.options.merger_reads_first,
        sync_shard: setup.options.sync_shard,
        writes: setup.options.writes,
        ..WriterConfig::default()
    };
    // The io_uring is set up before Ready, while nothing is recorded yet:
    // set up by every writer at once after Start, it took a contended
    // kernel lock inside the recording (1% of a 64-CPU guest's samples).
    let writer = ShardWriter::new(&ring, owner, shard, control, config)?
        .starting_at(setup.base)
        .disabling_at_stop(setup.disabled_at_stop());
    serve(setup, writer, start, report, (&ring, next_shard))
}

/// Says Ready, waits for Start (on `start`, the control pipe), enables
/// the CPU's events, says Started, then serves the ring from shard to
/// shard until a stop.
fn serve(
    setup: &WriterSetup,
    mut writer: impl RingWriter,
    mut start: File,
    report: &mut File,
    (ring, mut next_shard): (&RingBuffer, impl FnMut() -> io::Result<Option<File>>),
) -> io::Result<WriterStats> {
    Report::Ready {
        records: Vec::new(),
        capturing: false,
    }
    .write_to(report)?;
    // Anything but Start means the recording was abandoned before it began.
    if Command::next_or_drain(&mut start)? != Command::Start {
        return Ok(WriterStats::default());
    }
    drop(start);
    if setup.options.enable {
        // The side-band event is the VIP's to enable, before it lists
        // the programs already loaded.
        setup.events.iter().try_for_each(|e| e.enable())?;
    }
    Report::Started.write_to(report)?;
    while writer.serve()? == Served::Switch {
        if let Some(next) = next_shard()? {
            writer.switch_shard(next);
        }
        Report::Switched {
            base: ring.kept(),
            records: Vec::new(),
        }
        .write_to(report)?;
    }
    writer.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_big_ring_read_first_by_the_merger_spills_from_half() {
        assert_eq!(batch_bytes(4 << 20, true), 2 << 20);
        assert_eq!(batch_bytes(4 << 20, false), 1 << 20);
        assert_eq!(batch_bytes(256 << 10, true), 64 << 10);
    }
}
