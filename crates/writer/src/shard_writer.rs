//! The writer loop: wait, write `[tail, head)` from the ring, release it.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;

use nix::sys::uio::pwritev;
use shardrec_control::fault::{self, Fault, Site};
use shardrec_control::{Command, Framed, Served, WriterStats};
use shardrec_sys::{PerfEvent, RingBuffer};

use crate::course::{Asked, Course, Effect};
use crate::requests::{Completion, Requests};
use crate::{RingWriter, ShardWrites, WriterConfig};

/// Streams one ring into one shard file. See the crate docs.
pub struct ShardWriter<'a> {
    // First, so it is dropped first: its drop waits for the write in
    // flight, which reads the ring and writes the shard.
    requests: Requests<'a>,
    ring: &'a RingBuffer,
    shard: File,
    control: File,
    course: Course,
    /// The write in flight through io_uring, if any.
    writing: Option<Range>,
    /// Ring position of the shard's first byte.
    base: u64,
    /// When to look at the ring again though nothing wakes the writer:
    /// a claim of the live merger holds back what it kept, and may have
    /// to be broken before the ring is full (see
    /// [`RingBuffer::free_kept`]).
    look_again_in: Option<std::time::Duration>,
    config: WriterConfig,
    /// Disabled when a stop comes, before the last drain.
    stop_events: Vec<&'a PerfEvent>,
    stats: WriterStats,
}

/// What the serve loop does next.
enum Step {
    /// Sleep until a completion comes.
    Wait,
    /// A write was made without io_uring: what it found may have grown
    /// meanwhile, and no completion will come to say so.
    LookAgain,
    Return(Served),
}

impl<'a> ShardWriter<'a> {
    /// A writer of `ring` (mapped from `event`) into `shard`, written from
    /// its start, taking commands from the read end of a pipe.
    pub fn new(
        ring: &'a RingBuffer,
        event: &'a PerfEvent,
        shard: File,
        control: OwnedFd,
        config: WriterConfig,
    ) -> io::Result<Self> {
        let control = File::from(control);
        let warm = config.writes == ShardWrites::IoUring;
        let requests = Requests::new(ring, event, &control, &shard, config.multishot_poll, warm)?;
        Ok(ShardWriter {
            requests,
            ring,
            shard,
            control,
            course: Course::Serving(Asked::Nothing),
            writing: None,
            base: ring.kept(),
            look_again_in: None,
            config,
            stop_events: Vec::new(),
            stats: WriterStats::default(),
        })
    }

    /// Writes the ring from where it is into a shard whose first byte holds
    /// ring position `base` (by default, where the ring was when the writer
    /// was made): a writer that replaces a dead one goes on at the shard
    /// offset of the ring's tail.
    pub fn starting_at(mut self, base: u64) -> Self {
        self.base = base;
        self
    }

    /// Disables `events` when a stop (or the end of the control pipe)
    /// comes, so the last drain reaches an end. Run from the writer's own
    /// CPU, that is a local call for each CPU-bound event.
    pub fn disabling_at_stop(mut self, events: Vec<&'a PerfEvent>) -> Self {
        self.stop_events = events;
        self
    }
}

/// The writer's loop ([`RingWriter::run`] serves until the coordinator
/// says stop, or goes away): it sleeps until its ring reaches the
/// watermark or a command comes, so an idle CPU's writer never wakes. An
/// I/O error ends the writer; the shard holds every write completed
/// before it.
impl RingWriter for ShardWriter<'_> {
    /// Serves the ring until a stop has been carried out or a Switch needs
    /// the next shard (see [`Served`]).
    fn serve(&mut self) -> io::Result<Served> {
        let mut step = Step::Wait;
        loop {
            if let Step::Wait = step {
                if let Some(after) = self.look_again_in {
                    self.requests.arm_timer(after)?;
                }
                self.requests.wait()?;
            }
            self.reap()?;
            step = match self.writing {
                Some(_) => Step::Wait,
                None => self.step()?,
            };
            if let Step::Return(served) = step {
                return Ok(served);
            }
        }
    }

    /// Goes on in `shard`, whose first byte holds the ring's tail (after
    /// [`Served::Switch`], with no write in flight).
    fn switch_shard(&mut self, shard: File) {
        assert!(self.writing.is_none(), "switching shards mid-write");
        self.shard = shard;
        self.base = self.ring.kept();
    }

    /// After a stop: ends the poll and syncs the shard if configured to.
    fn finish(mut self) -> io::Result<WriterStats> {
        self.requests.cancel_poll()?;
        if self.config.sync_shard {
            if let Some(error) = fault::inject(Site::WriterSync).and_then(Fault::error) {
                return Err(error);
            }
            self.shard.sync_data()?;
        }
        Ok(self.stats)
    }
}

impl ShardWriter<'_> {
    /// What to do, with no write in flight, on the present course.
    fn step(&mut self) -> io::Result<Step> {
        self.look_again_in = self.ring.free_kept();
        // Past what it kept, even where a claim holds the tail back.
        let (tail, head) = (self.ring.kept(), self.ring.head());
        let batch = self.config.batch_bytes;
        match self.course {
            Course::Quitting => Ok(Step::Return(Served::Stopped)),
            // Everything the ring held when the Switch came goes into the
            // current shard; a busy ring does not hold it longer.
            Course::Switching { at, .. } if tail >= at || tail == head => {
                self.course = self.course.switched();
                Ok(Step::Return(Served::Switch))
            }
            Course::Draining if tail == head => Ok(Step::Return(Served::Stopped)),
            Course::Switching { .. } | Course::Draining => self.write(false),
            Course::Serving(asked) if head - tail < self.worth_a_write(asked) => {
                self.course = Course::Serving(Asked::Nothing);
                Ok(Step::Wait)
            }
            Course::Serving(asked) => {
                self.course = Course::Serving(Asked::Nothing);
                self.write(asked == Asked::QuietFlush && head - tail < batch)
            }
        }
    }

    /// The bytes the ring must hold for a write, after `asked`: a batch
    /// unless woken (where the merger reads first, even then: the wakeup
    /// comes every watermark the kernel writes, however much the merger
    /// took), anything when the coordinator asks.
    fn worth_a_write(&self, asked: Asked) -> u64 {
        let batch = self.config.batch_bytes.max(1);
        match asked {
            Asked::Nothing => batch,
            Asked::Wakeup if self.config.merger_reads_first => batch,
            Asked::Wakeup | Asked::QuietFlush => 1,
        }
    }

    /// Writes whatever the ring holds. A `quiet` ring's (less than a batch,
    /// flushed because it waited long) is written with `pwritev` from this
    /// process: handed to io_uring, a write that the file system cannot
    /// take without blocking (tmpfs before Linux 6.6) goes through a worker
    /// thread, and for a few kilobytes a second the wakeup and switch to
    /// that thread cost more than the copy (a quarter of the writers' time
    /// in a 64-vCPU guest).
    fn write(&mut self, quiet: bool) -> io::Result<Step> {
        let (from, to) = (self.ring.kept(), self.ring.head());
        if from == to {
            return Ok(Step::Wait);
        }
        self.stats.peak_fill = self.stats.peak_fill.max(to - from);
        let range = Range { from, to, done: 0 };
        if quiet || self.config.writes == ShardWrites::Pwritev {
            return self.write_now(range);
        }
        self.submit(range)?;
        Ok(Step::Wait)
    }

    /// Writes `range` with `pwritev`, to its end or a failure.
    fn write_now(&mut self, mut range: Range) -> io::Result<Step> {
        loop {
            let segments = self.ring.segments(range.next(), range.to);
            let count = if segments[1].is_empty() { 1 } else { 2 };
            let slices = segments.map(io::IoSlice::new);
            let offset = (range.next() - self.base) as i64;
            let result = match pwritev(&self.shard, &slices[..count], offset) {
                Ok(written) => i32::try_from(written).unwrap_or(i32::MAX),
                Err(errno) => -(errno as i32),
            };
            match range.advance(result, &mut self.stats)? {
                Progress::Again => continue,
                Progress::Done => return Ok(self.written(range)),
                Progress::Failed(error) => return self.write_failed(error, range),
            }
        }
    }

    /// Submits what of `range` is not on disk yet, at the shard offset it
    /// belongs at.
    fn submit(&mut self, range: Range) -> io::Result<()> {
        // The shard holds exactly the ring's bytes from `base` to `next`.
        let offset = range.next() - self.base;
        self.requests
            .write(&self.shard, range.next(), range.to, offset)?;
        self.writing = Some(range);
        Ok(())
    }

    /// The io_uring write in flight ended with `result`.
    fn write_ended(&mut self, result: i32) -> io::Result<()> {
        let mut range = self.writing.take().expect("a write in flight");
        match range.advance(result, &mut self.stats)? {
            Progress::Again => self.submit(range),
            Progress::Done => {
                self.written(range);
                Ok(())
            }
            Progress::Failed(error) => self.write_failed(error, range).map(drop),
        }
    }

    /// `range` is on disk: the ring may have it back.
    fn written(&mut self, range: Range) -> Step {
        self.stats.bytes += range.to - range.from;
        // SAFETY: the bytes up to `range.to` are in the shard, and no
        // write in flight reads them (the io_uring one has completed).
        // The live merger, where it reads first, may have moved the tail
        // further: it stays there; or it may hold a claim on bytes before
        // `range.to`: the tail stops there until the merger drops it.
        unsafe { self.ring.release(range.to) };
        Step::LookAgain
    }

    /// A write failed. Where the storage is what failed (full, over quota,
    /// an I/O error), the shard is cut back to the start of the failed
    /// write, so it ends with the last whole record written, and the
    /// writer stops there: its report says why, and the coordinator stops
    /// the recording cleanly (the kernel counts what the ring drops from
    /// then on). Anything else is an error of the writer.
    fn write_failed(&mut self, error: io::Error, range: Range) -> io::Result<Step> {
        let errno = error.raw_os_error().unwrap_or(0);
        if !matches!(errno, libc::ENOSPC | libc::EDQUOT | libc::EIO | libc::EFBIG) {
            return Err(error);
        }
        self.shard.set_len(range.from - self.base)?;
        self.stats.cut = Some(errno);
        self.course = Course::Quitting;
        Ok(Step::Return(Served::Stopped))
    }

    /// Takes every completion there is.
    fn reap(&mut self) -> io::Result<()> {
        while let Some(completion) = self.requests.next(self.course.wants_wakeups())? {
            match completion {
                Completion::Wakeup => {
                    self.stats.wakeups += 1;
                    self.course = self.course.woken();
                }
                Completion::Control => self.read_command()?,
                Completion::Write(result) => self.write_ended(result)?,
                Completion::Timer => {}
            }
        }
        Ok(())
    }

    fn read_command(&mut self) -> io::Result<()> {
        // A command comes whole, in one write of a few bytes.
        let read = Command::read_from(&mut self.control)?;
        let command = read.unwrap_or(Command::Drain);
        if command == Command::Flush {
            self.stats.flushes += 1;
        }
        let (course, effect) = self.course.after(command, self.ring.head());
        self.course = course;
        if effect == Effect::DisableEvents {
            for event in &self.stop_events {
                // A failure leaves the event running: the drain still ends
                // at the head it reads, only later records are not written.
                let _ = event.disable();
            }
        }
        // The end of the pipe (the coordinator gone) is read only once.
        match read {
            None => Ok(()),
            Some(_) => self.requests.rearm_control(),
        }
    }
}

/// The ring range being written: `[from, to)`, of which `done` bytes are
/// on disk.
#[derive(Clone, Copy, Debug)]
struct Range {
    from: u64,
    to: u64,
    done: u64,
}

/// What a write's result leaves of its range to do.
enum Progress {
    /// The rest is to be written (after a short or interrupted write).
    Again,
    Done,
    Failed(io::Error),
}

impl Range {
    /// The first ring position not on disk yet.
    fn next(&self) -> u64 {
        self.from + self.done
    }

    /// Takes one write's `result` (bytes written, or `-errno`).
    fn advance(&mut self, result: i32, stats: &mut WriterStats) -> io::Result<Progress> {
        let result = injected(result);
        if result == -libc::EINTR || result == -libc::EAGAIN {
            return Ok(Progress::Again);
        }
        if result < 0 {
            return Ok(Progress::Failed(io::Error::from_raw_os_error(-result)));
        }
        if result == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "shard write wrote nothing",
            ));
        }
        stats.writes += 1;
        self.done += result as u64;
        if self.next() < self.to {
            stats.short_writes += 1;
            return Ok(Progress::Again);
        }
        Ok(Progress::Done)
    }
}

/// A write's result, or what `SHARDREC_FAULTS` makes of it for a test
/// (see [`shardrec_control::fault`]).
fn injected(result: i32) -> i32 {
    match fault::inject(Site::WriterWrite) {
        Some(Fault::Errno(errno)) => -errno,
        Some(Fault::Short) if result > 1 => result / 2,
        _ => result,
    }
}
