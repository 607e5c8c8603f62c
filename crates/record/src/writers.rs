//! Writer processes: one per CPU, pinned, each streaming its ring.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use shardrec_control::{Command, Outcome, Report, WriterStats};
use shardrec_sys::{cpu, process, PerfEvent, RingBuffer};
use shardrec_writer::{ShardWriter, WriterConfig};

use crate::helper::{self, HelperProcess};
use crate::open::CpuEvents;
use crate::RecordError;

/// A writer process and what it reported.
pub struct WriterProcess {
    /// The CPU it writes.
    pub cpu: u32,
    /// The process.
    pub helper: HelperProcess,
    /// What it reported at exit.
    pub stats: Option<WriterStats>,
}

/// What a writer is given: its CPU's events, and how to start them.
pub struct WriterSetup<'a> {
    /// The CPU's events; the first owns the ring.
    pub cpu: &'a CpuEvents,
    /// The CPU's side-band event, disabled at stop with the others.
    pub side_band: Option<&'a PerfEvent>,
    /// Enable the events at Start (not for a workload, whose events the
    /// kernel enables at its exec).
    pub enable: bool,
    /// Ring size in pages.
    pub ring_pages: usize,
    /// Sync the shard at the end (when no merge follows).
    pub sync_shard: bool,
}

impl<'a> WriterSetup<'a> {
    /// Every event the writer disables at stop.
    pub fn events(&self) -> Vec<&'a PerfEvent> {
        let own = self.cpu.events.iter().map(|e| &e.event);
        own.chain(self.side_band).collect()
    }
}

/// Forks the writer of `setup.cpu`'s ring into `shard`. It pins itself,
/// maps the ring and says "ready"; on Start it enables the events and
/// says "started"; on Drain it disables them and writes the rest.
pub fn spawn(setup: WriterSetup<'_>, shard: File) -> Result<WriterProcess, RecordError> {
    let cpu_no = setup.cpu.cpu;
    let helper = HelperProcess::spawn(
        format!("writer of CPU {cpu_no}"),
        move |control, mut report| {
            let mut keep: Vec<RawFd> = setup
                .events()
                .iter()
                .map(|e| e.as_fd().as_raw_fd())
                .collect();
            keep.extend([shard.as_raw_fd(), control.as_raw_fd(), report.as_raw_fd()]);
            // SAFETY: this forked child uses only the kept descriptors and
            // leaves through `exit_now`, never dropping what it inherited.
            let outcome = unsafe { process::close_fds_except(&keep) }
                .and_then(|()| run(&setup, shard, control, &mut report))
                .map(Outcome::Writer);
            helper::finish(&mut report, outcome)
        },
    )?;
    Ok(WriterProcess {
        cpu: cpu_no,
        helper,
        stats: None,
    })
}

impl WriterProcess {
    /// Reads the writer's final report once it has exited.
    pub fn collect(&mut self) -> Result<WriterStats, RecordError> {
        match self.helper.read_outcome()? {
            Outcome::Writer(stats) => {
                self.stats = Some(stats);
                Ok(stats)
            }
            other => Err(self.helper.failure(&format!("reported {other:?}"))),
        }
    }
}

fn run(
    setup: &WriterSetup<'_>,
    shard: File,
    control: OwnedFd,
    report: &mut File,
) -> io::Result<WriterStats> {
    cpu::pin_to(setup.cpu.cpu)?;
    // A wakeup at a quarter full must be served before the ring fills: at
    // 20 kHz with DWARF stacks, a 256 KiB ring lost 6% of its samples at
    // normal priority and none at SCHED_FIFO 1.
    process::prefer_wakeups();
    let owner = setup.cpu.ring_owner();
    let ring = RingBuffer::map(owner, setup.ring_pages)?;
    Report::Ready {
        records: Vec::new(),
    }
    .write_to(report)?;
    // Anything but Start means the recording was abandoned before it began.
    let mut control = File::from(control);
    if Command::read_from(&mut control)? != Command::Start {
        return Ok(WriterStats::default());
    }
    if setup.enable {
        // The side-band event is the VIP's to enable, before it lists
        // the programs already loaded.
        setup.cpu.events.iter().try_for_each(|e| e.event.enable())?;
    }
    Report::Started.write_to(report)?;
    let config = WriterConfig {
        batch_bytes: crate::attrs::wakeup_watermark(ring.data_size()) as u64,
        sync_shard: setup.sync_shard,
        ..WriterConfig::default()
    };
    ShardWriter::new(&ring, owner, shard, control.into(), config)?
        .disabling_at_stop(setup.events())
        .run()
}
