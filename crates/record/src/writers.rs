//! Writer processes: one per CPU, pinned, each streaming its ring.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use shardrec_sys::{cpu, process, PerfEvent, RingBuffer};
use shardrec_writer::{ShardWriter, WriterConfig, WriterStats};

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

/// Forks the writer of `cpu`'s ring into `shard`.
pub fn spawn(
    cpu: &CpuEvents,
    ring_pages: usize,
    shard: File,
) -> Result<WriterProcess, RecordError> {
    let (cpu_no, owner) = (cpu.cpu, cpu.ring_owner());
    let helper = HelperProcess::spawn(
        format!("writer of CPU {cpu_no}"),
        move |control, mut report| {
            let keep = [
                owner.as_fd().as_raw_fd(),
                shard.as_raw_fd(),
                control.as_raw_fd(),
                report.as_raw_fd(),
            ];
            let outcome = process::close_fds_except(&keep)
                .and_then(|()| run(cpu_no, owner, ring_pages, shard, control, &mut report))
                .map(|s| {
                    format!(
                        "{} {} {} {} {} {}",
                        s.bytes, s.writes, s.short_writes, s.wakeups, s.ticks, s.peak_fill
                    )
                });
            helper::finish(&mut report, outcome)
        },
    )?;
    Ok(WriterProcess {
        cpu: cpu.cpu,
        helper,
        stats: None,
    })
}

impl WriterProcess {
    /// Reads the writer's final report once it has exited.
    pub fn collect(&mut self) -> Result<WriterStats, RecordError> {
        let done = self.helper.read_done()?;
        let stats = parse_stats(&done).ok_or_else(|| self.helper.failure(&done))?;
        self.stats = Some(stats);
        Ok(stats)
    }
}

fn run(
    cpu: u32,
    owner: &PerfEvent,
    ring_pages: usize,
    shard: File,
    control: OwnedFd,
    report: &mut File,
) -> io::Result<WriterStats> {
    cpu::pin_to(cpu)?;
    let ring = RingBuffer::map(owner, ring_pages)?;
    writeln!(report, "ready")?;
    let config = WriterConfig {
        batch_bytes: crate::attrs::wakeup_watermark(ring.data_size()) as u64,
        ..WriterConfig::default()
    };
    ShardWriter::new(&ring, owner, shard, control, config)?.run()
}

fn parse_stats(line: &str) -> Option<WriterStats> {
    let mut fields = line.split(' ').map(|f| f.parse::<u64>().ok());
    let mut next = || fields.next().flatten();
    Some(WriterStats {
        bytes: next()?,
        writes: next()?,
        short_writes: next()?,
        wakeups: next()?,
        ticks: next()?,
        peak_fill: next()?,
    })
}
