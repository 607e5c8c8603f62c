//! The coordinator's writers: one per CPU, each its CPU's events and the
//! process that streams their ring into the shard (forked here; its body
//! is `shardrec_writer::process`), with what the coordinator does for it:
//! flush a quiet ring, replace a dead process, account for what it left.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::{Duration, Instant};

use shardrec_control::restart::Helper;
use shardrec_control::{Command, Outcome, WriterStats};
use shardrec_format::header::RecordType;
use shardrec_format::layouts::{FieldReader, Layouts};
use shardrec_format::walk::RecordWalker;
use shardrec_shard::{RecordingDir, WindowCursor};
use shardrec_sys::{file_writes, process, PerfEvent};
use shardrec_writer::process as writer;
use shardrec_writer::{ShardWrites, WriterOptions, WriterSetup};

use crate::helper_process::{self, HelperProcess};
use crate::open::CpuEvents;
use crate::RecordError;

/// One CPU's writer, owned by the coordinator: the CPU's events and ring,
/// the process that streams them into the shard, and what it reported.
/// Starting, stopping and accounting for a writer are methods here.
pub struct Writer {
    /// The CPU's events; the first owns the ring.
    pub events: CpuEvents,
    process: Option<HelperProcess>,
    stats: Option<WriterStats>,
    /// How far the writer had kept its ring when the coordinator last
    /// looked.
    seen_kept: u64,
    /// Since when the ring has held data the writer has not written.
    waiting_since: Option<Instant>,
    /// The ring position of the shard's first byte.
    base: u64,
    /// How its process was started, for a replacement.
    options: Option<WriterOptions>,
    /// When its process died and was replaced (since the recording began).
    pub replaced_at: Vec<Duration>,
    /// Whether it died too often and its CPU went unrecorded from then on.
    pub given_up: bool,
    /// With `--switch-output`: the window being written, whose successor
    /// the process goes on in at a Switch.
    windows: Option<WindowCursor>,
}

/// A writer that dies this often is not replaced again.
pub const MAX_REPLACEMENTS: usize = shardrec_control::restart::times(Helper::Writer);

/// How the writers write into `dir`, probed once per recording on a
/// scratch file there, where every shard goes.
pub fn shard_writes(dir: &RecordingDir) -> Result<ShardWrites, RecordError> {
    let path = dir.path().join(".write-probe");
    let file = dir.create_file(&path)?;
    let nonblocking = file_writes::takes_nonblocking_writes(&file);
    drop(file);
    let _ = std::fs::remove_file(&path);
    match nonblocking.map_err(RecordError::system(format!(
        "writing to {}",
        path.display()
    )))? {
        true => Ok(ShardWrites::IoUring),
        false => Ok(ShardWrites::Pwritev),
    }
}

impl Writer {
    /// The writer of these events; its process starts with [`spawn`](Self::spawn).
    pub fn new(events: CpuEvents) -> Writer {
        Writer {
            seen_kept: events.ring.kept(),
            waiting_since: None,
            base: events.ring.tail(),
            events,
            process: None,
            stats: None,
            options: None,
            replaced_at: Vec::new(),
            given_up: false,
            windows: None,
        }
    }

    /// Records `--switch-output` windows from `windows` on (`None`: one
    /// shard for the whole recording).
    pub fn in_windows(&mut self, windows: Option<WindowCursor>) {
        self.windows = windows;
    }

    /// After a Switch: waits for the process to go on in the next window's
    /// shard (or, for a writer given up on, writes its ring into its shard
    /// in `closing` from here) and notes where that shard begins in the
    /// ring.
    pub fn switched(&mut self, closing: &RecordingDir) -> Result<(), RecordError> {
        if let Some(windows) = self.windows.as_mut() {
            windows.advance();
        }
        let process = self.process.as_mut().filter(|p| !p.has_exited());
        self.base = match process {
            Some(process) => process.wait_switched()?.0,
            None if self.given_up => {
                let shard = closing.shard_path(self.cpu());
                let file = closing.reopen_file(&shard)?;
                self.write_remaining(&file)
                    .map_err(RecordError::system(format!("writing {}", shard.display())))?;
                self.events.ring.kept()
            }
            // Dead and about to be replaced: the replacement starts at the
            // ring's tail in the new window.
            None => self.events.ring.kept(),
        };
        Ok(())
    }

    /// Asks the writer to write its ring once the ring has held data for
    /// `after` without the writer writing: a writer whose ring is empty, or
    /// that writes on its own (its ring reaches the watermark), is never
    /// woken by this.
    pub fn flush_if_waiting(&mut self, after: Duration) {
        let (tail, head) = (self.events.ring.kept(), self.events.ring.head());
        if tail != self.seen_kept || head == tail {
            self.seen_kept = tail;
            self.waiting_since = None;
        }
        if head == tail {
            return;
        }
        let since = *self.waiting_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= after {
            self.waiting_since = None;
            if let Some(process) = self.process.as_mut().filter(|p| !p.has_exited()) {
                process.send(Command::Flush);
            }
        }
    }

    /// The ring position of its shard's first byte.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Its CPU.
    pub fn cpu(&self) -> u32 {
        self.events.cpu
    }

    /// Forks the process that streams the ring into `shard`. It pins
    /// itself, maps the ring and reports Ready; on Start it enables the
    /// CPU's events and reports Started; on Drain it disables them and
    /// `side_band` (the CPU's side-band event, which the VIP enabled) and
    /// writes the rest.
    pub fn spawn(
        &mut self,
        side_band: Option<&PerfEvent>,
        options: WriterOptions,
        shard: File,
    ) -> Result<(), RecordError> {
        self.options = Some(options);
        let setup = WriterSetup {
            cpu: self.events.cpu,
            events: self.events.events.iter().map(|e| &e.event).collect(),
            side_band,
            options,
            base: self.base,
            claim: self.events.ring.claim_slot().cloned(),
        };
        let (cpu, mut windows) = (self.events.cpu, self.windows.clone());
        let replacing = !self.replaced_at.is_empty();
        // At a Switch, the next window's shard; without windows, none: the
        // writer goes on in the same one.
        let next_shard = move || -> io::Result<Option<File>> {
            let Some(windows) = windows.as_mut() else {
                return Ok(None);
            };
            let dir = windows.advance();
            let next = dir.create_file(&dir.shard_path(cpu));
            next.map(Some).map_err(io::Error::other)
        };
        let process = HelperProcess::spawn(
            format!("writer of CPU {cpu}"),
            move |control, mut report| {
                let mut keep: Vec<RawFd> = setup
                    .events
                    .iter()
                    .chain(&setup.side_band)
                    .map(|e| e.as_fd().as_raw_fd())
                    .collect();
                keep.extend([shard.as_raw_fd(), control.as_raw_fd(), report.as_raw_fd()]);
                if replacing {
                    shardrec_control::fault::disarm_in_replacement();
                }
                // SAFETY: this forked child uses only the kept descriptors and
                // leaves through `exit_now`, never dropping what it inherited.
                let outcome = unsafe { process::close_fds_except(&keep) }
                    .and_then(|()| writer::run(&setup, shard, control, &mut report, next_shard))
                    .map(Outcome::Writer);
                helper_process::finish(&mut report, outcome)
            },
        )?;
        self.process = Some(process);
        Ok(())
    }

    /// Replaces a process that died while recording: a new one, pinned
    /// and prioritized as the first, goes on from the ring's tail into
    /// `shard` (the same file, cut back to the tail's offset: bytes the
    /// dead one wrote past it are still in the ring). The events stay
    /// enabled throughout; what the ring could not hold meanwhile the
    /// kernel counts as lost.
    pub fn replace(
        &mut self,
        side_band: Option<&PerfEvent>,
        shard: File,
        since_start: Duration,
    ) -> Result<(), RecordError> {
        let options = WriterOptions {
            enable: false,
            ..self.options.expect("a writer spawned before")
        };
        // A streamed shard holds the ring's bytes from `base`: what the dead
        // writer wrote past the tail is cut, as it is still in the ring. A
        // snapshot shard is whole snapshots: the new writer appends.
        let mut shard = shard;
        let cut = match options.overwrite {
            true => Ok(()),
            false => shard.set_len(self.events.ring.kept() - self.base),
        };
        cut.and_then(|()| std::io::Seek::seek(&mut shard, io::SeekFrom::End(0)).map(drop))
            .map_err(RecordError::system("cutting a dead writer's shard back"))?;
        self.replaced_at.push(since_start);
        self.spawn(side_band, options, shard)?;
        let process = self.process.as_mut().expect("just spawned");
        process.wait_ready()?;
        process.send(Command::Start);
        process.wait_started()
    }

    /// Its process, once spawned.
    pub fn process(&self) -> Option<&HelperProcess> {
        self.process.as_ref()
    }

    /// Its process, once spawned, to command.
    pub fn process_mut(&mut self) -> Option<&mut HelperProcess> {
        self.process.as_mut()
    }

    /// Whether its process runs.
    pub fn is_running(&self) -> bool {
        self.process.as_ref().is_some_and(|p| !p.has_exited())
    }

    /// Recording ends: the writer disables its events from its CPU and
    /// drains its ring. A writer already gone cannot, so the coordinator
    /// disables them (with `side_band`, the CPU's side-band event).
    pub fn drain(&mut self, side_band: Option<&PerfEvent>) {
        match self.process.as_mut().filter(|p| !p.has_exited()) {
            Some(process) => process.send(Command::Drain),
            None => {
                let own = self.events.events.iter().map(|e| &e.event);
                own.chain(side_band).for_each(|e| drop(e.disable()));
            }
        }
    }

    /// Its process has exited: reads its final report.
    pub fn ended(&mut self) -> Result<WriterStats, RecordError> {
        let process = self.process.as_mut().expect("a spawned writer");
        process.mark_exited();
        match process.read_outcome()? {
            Outcome::Writer(stats) => {
                self.stats = Some(stats);
                Ok(stats)
            }
            other => Err(process.failure(&format!("reported {other:?}"))),
        }
    }

    /// What it reported at exit (zeros if it reported nothing).
    pub fn stats(&self) -> WriterStats {
        self.stats.unwrap_or_default()
    }

    /// Bytes still in its ring: none after a drain, some after a Quit or
    /// a shard cut by a full disk.
    pub fn unwritten(&self) -> u64 {
        self.events.ring.head() - self.events.ring.kept()
    }

    /// Writes what its ring holds into `shard` from the coordinator, for a
    /// writer given up on: the kernel kept recording into the ring, and
    /// whatever it still holds at stop is not lost. Only after the events
    /// are disabled and with no writer process left.
    pub fn write_remaining(&self, shard: &File) -> io::Result<u64> {
        let ring = &self.events.ring;
        let tail = ring.kept();
        let head = ring.write_unread_at(shard, tail - self.base)?;
        // SAFETY: no writer process is left to read the ring, and the
        // bytes up to `head` are in the shard.
        unsafe { ring.release(head) };
        Ok(head - tail)
    }

    /// The samples still in its ring, by event id: what a writer that
    /// could not write them leaves, counted as lost so that nothing goes
    /// unaccounted for. Only read after the writer has exited.
    pub fn unwritten_samples(&self, layouts: &Layouts) -> BTreeMap<u64, u64> {
        let ring = &self.events.ring;
        let [first, second] = ring.segments(ring.kept(), ring.head());
        // A record may wrap around the ring's end: walk a copy.
        let bytes = [first, second].concat();
        let mut fields = FieldReader::new(layouts);
        let mut samples = BTreeMap::new();
        for record in RecordWalker::new(&bytes) {
            if record.header.type_ != RecordType::SAMPLE {
                continue;
            }
            if let Some(id) = fields.sample_id(record.bytes, record.header.type_) {
                *samples.entry(id.id).or_default() += 1;
            }
        }
        samples
    }
}
