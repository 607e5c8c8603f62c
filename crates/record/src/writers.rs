//! Writer processes: one per CPU, pinned, each streaming its ring.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::OFlag;
use nix::unistd::Pid;
use shardrec_sys::{cpu, process, PerfEvent, RingBuffer};
use shardrec_writer::{Command, ShardWriter, WriterConfig, WriterStats};

use crate::open::CpuEvents;
use crate::RecordError;

/// The coordinator's handle on one writer process.
pub struct WriterProcess {
    /// The CPU it writes.
    pub cpu: u32,
    /// Its pid.
    pub pid: Pid,
    control: Option<File>,
    result: BufReader<File>,
    /// Set once the process has been reaped.
    pub exited: bool,
    /// What it reported at exit.
    pub stats: Option<WriterStats>,
}

/// Forks the writer of `cpu`'s ring into `shard`.
pub fn spawn(
    cpu: &CpuEvents,
    ring_pages: usize,
    shard: File,
) -> Result<WriterProcess, RecordError> {
    let fail = RecordError::system("starting a writer process");
    let (control_read, control_write) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| fail(e.into()))?;
    let (result_read, result_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)
        .map_err(|e| RecordError::system("starting a writer process")(e.into()))?;
    let (cpu_no, owner) = (cpu.cpu, cpu.ring_owner());
    let pid = process::spawn(move || {
        writer_main(cpu_no, owner, ring_pages, shard, control_read, result_write)
    })
    .map_err(RecordError::system("starting a writer process"))?;
    Ok(WriterProcess {
        cpu: cpu.cpu,
        pid,
        control: Some(File::from(control_write)),
        result: BufReader::new(File::from(result_read)),
        exited: false,
        stats: None,
    })
}

impl WriterProcess {
    /// Waits for the writer to say it has mapped its ring (or why not).
    pub fn wait_ready(&mut self) -> Result<(), RecordError> {
        match self.read_line()?.as_deref() {
            Some("ready") => Ok(()),
            Some(line) => Err(self.failure(line)),
            None => Err(self.failure("exited before its ring was mapped")),
        }
    }

    /// Sends a command; a writer already gone is not an error.
    pub fn send(&mut self, command: Command) {
        if let Some(control) = &mut self.control {
            let _ = control.write_all(&[command.byte()]);
        }
    }

    /// Reads the writer's final report once it has exited.
    pub fn collect(&mut self) -> Result<WriterStats, RecordError> {
        let line = self.read_line()?;
        let stats = line.as_deref().and_then(parse_done);
        match (stats, line) {
            (Some(stats), _) => {
                self.stats = Some(stats);
                Ok(stats)
            }
            (None, Some(line)) => Err(self.failure(&line)),
            (None, None) => Err(self.failure("exited without a report")),
        }
    }

    fn read_line(&mut self) -> Result<Option<String>, RecordError> {
        let mut line = String::new();
        let read = self
            .result
            .read_line(&mut line)
            .map_err(RecordError::system(format!(
                "reading from the writer of CPU {}",
                self.cpu
            )))?;
        Ok((read > 0).then(|| line.trim_end().to_string()))
    }

    fn failure(&self, message: &str) -> RecordError {
        RecordError::Writer {
            cpu: self.cpu,
            message: message
                .strip_prefix("error ")
                .unwrap_or(message)
                .to_string(),
        }
    }
}

/// The writer's body, in the child process.
fn writer_main(
    cpu: u32,
    owner: &PerfEvent,
    ring_pages: usize,
    shard: File,
    control: OwnedFd,
    result: OwnedFd,
) -> i32 {
    let mut report = File::from(result);
    let keep = [
        owner.as_fd().as_raw_fd(),
        shard.as_raw_fd(),
        control.as_raw_fd(),
        report.as_raw_fd(),
    ];
    let outcome = process::close_fds_except(&keep)
        .and_then(|()| run_writer(cpu, owner, ring_pages, shard, control, &mut report));
    let line = match &outcome {
        Ok(s) => format!(
            "done {} {} {} {} {} {}",
            s.bytes, s.writes, s.short_writes, s.wakeups, s.ticks, s.peak_fill
        ),
        Err(e) => format!("error {e}"),
    };
    let _ = writeln!(report, "{line}");
    i32::from(outcome.is_err())
}

fn run_writer(
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
    ShardWriter::new(&ring, owner, shard, control, WriterConfig::default())?.run()
}

fn parse_done(line: &str) -> Option<WriterStats> {
    let mut fields = line
        .strip_prefix("done ")?
        .split(' ')
        .map(|f| f.parse::<u64>().ok());
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
