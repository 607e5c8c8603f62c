//! The writer loop: wait, write `[tail, head)` from the ring, release it.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use io_uring::{cqueue, opcode, types, IoUring};
use nix::sys::uio::pwritev;
use shardrec_sys::{PerfEvent, RingBuffer};

use shardrec_control::fault::{self, Fault, Site};
use shardrec_control::{Command, Served, WriterStats};

use crate::RingWriter;

// user_data of each kind of request.
const POLL: u64 = 1;
const CONTROL: u64 = 3;
const WRITE: u64 = 4;
const CANCEL: u64 = 5;
const WARM_UP: u64 = 6;

/// How a writer behaves.
#[derive(Clone, Copy, Debug)]
pub struct WriterConfig {
    /// Use one multishot poll (5.13+). Without it, or when the kernel
    /// refuses it, a one-shot poll is re-armed after each wakeup.
    pub multishot_poll: bool,
    /// Bytes worth a write of their own. A write starts on a ring wakeup,
    /// a Flush from the coordinator or a stop; right after another write completes it
    /// starts only if this much is waiting, so a busy ring is written in
    /// large pieces instead of a stream of small ones. Set it to the
    /// events' wakeup watermark.
    pub batch_bytes: u64,
    /// `fdatasync` the shard before exiting. Only worth it when the shards
    /// are what the recording leaves: shards merged and deleted right away
    /// then never need to reach the disk at all. Off by default, as in
    /// `shardrec record` without `--no-merge`.
    pub sync_shard: bool,
    /// How the ring's bytes go into the shard.
    pub writes: ShardWrites,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            multishot_poll: true,
            batch_bytes: 0,
            sync_shard: false,
            writes: ShardWrites::IoUring,
        }
    }
}

/// How a writer writes: chosen once per recording by whether the shards'
/// file system takes a buffered write without blocking
/// ([`shardrec_sys::file_writes::takes_nonblocking_writes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardWrites {
    /// Submitted to io_uring, which completes them in the submitting call
    /// where the file system allows it, while the writer goes on waiting
    /// for its ring and its commands.
    IoUring,
    /// `pwritev` from the writer itself. Where the file system cannot take
    /// a buffered write without blocking (ext4), io_uring hands each write
    /// to a kernel worker thread that makes the same copy, plus a wakeup
    /// and two switches: by hand, at 20 kHz with DWARF stacks and 256 KiB
    /// rings on ext4, the recorder's CPU was 1.02–1.07 s that way and
    /// 0.75–0.92 s with `pwritev` (five runs each). The writer holds one
    /// write in flight at a time either way, so it waits no longer.
    Pwritev,
}

/// The ring range being written: `[from, to)`, of which `done` bytes are on disk.
struct InFlight {
    from: u64,
    to: u64,
    done: u64,
}

/// Streams one ring into one shard file. See the crate docs.
pub struct ShardWriter<'a> {
    ring: &'a RingBuffer,
    event: &'a PerfEvent,
    shard: File,
    control: File,
    uring: IoUring,
    // Boxed so their addresses stay put while the kernel reads them.
    iov: Box<[libc::iovec; 2]>,
    in_flight: Option<InFlight>,
    /// A wakeup or a Flush came since the last write started.
    flush_wanted: bool,
    /// The coordinator asked for the ring's data because it waited long:
    /// a trickle, written at once.
    quiet_flush: bool,
    batch_bytes: u64,
    /// Ring position of the shard's first byte.
    base: u64,
    stop: Option<Command>,
    /// A Switch came when the ring's head was here: the current shard
    /// ends at the first write that reaches it.
    switch_at: Option<u64>,
    /// The polls are armed (by the first `serve`).
    armed: bool,
    control_open: bool,
    /// Multishot polls need 5.13; older kernels reject them (EINVAL) and
    /// get a one-shot poll re-armed after each wakeup.
    multishot: bool,
    sync_shard: bool,
    writes: ShardWrites,
    /// A [`ShardWrites::Pwritev`] write was made since the last wait.
    wrote_unwaited: bool,
    /// Disabled when a stop comes, before the last drain.
    stop_events: Vec<&'a PerfEvent>,
    stats: WriterStats,
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
        let mut uring = IoUring::new(8)?;
        if config.writes == ShardWrites::IoUring {
            warm_up(&mut uring, &shard)?;
        }
        Ok(ShardWriter {
            ring,
            event,
            shard,
            control: File::from(control),
            uring,
            iov: Box::new([empty_iovec(); 2]),
            in_flight: None,
            flush_wanted: false,
            quiet_flush: false,
            batch_bytes: config.batch_bytes,
            base: ring.tail(),
            stop: None,
            switch_at: None,
            armed: false,
            control_open: true,
            multishot: config.multishot_poll,
            sync_shard: config.sync_shard,
            writes: config.writes,
            wrote_unwaited: false,
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
        if !self.armed {
            self.arm_poll()?;
            self.arm_control()?;
            self.armed = true;
        }
        loop {
            // After a write made in the last turn, what it found may have
            // grown meanwhile, and no completion will come to say so: look
            // again before sleeping.
            if !std::mem::take(&mut self.wrote_unwaited) {
                self.wait()?;
            }
            self.reap()?;
            if self.in_flight.is_some() {
                continue;
            }
            if self.stop == Some(Command::Quit) {
                return Ok(Served::Stopped);
            }
            if let Some(at) = self.switch_at {
                // Everything the ring held when the Switch came goes into
                // the current shard; a busy ring does not hold it longer.
                if self.ring.tail() >= at || !self.start_write()? {
                    self.switch_at = None;
                    return Ok(Served::Switch);
                }
                continue;
            }
            let draining = self.stop == Some(Command::Drain);
            let fill = self.ring.head() - self.ring.tail();
            if !(self.flush_wanted || draining || fill >= self.batch_bytes.max(1)) {
                continue;
            }
            self.flush_wanted = false;
            if std::mem::take(&mut self.quiet_flush) && !draining && fill < self.batch_bytes {
                self.write_directly()?;
                if self.stop == Some(Command::Quit) {
                    return Ok(Served::Stopped);
                }
                continue;
            }
            if !self.start_write()? && draining {
                return Ok(Served::Stopped);
            }
        }
    }

    /// Goes on in `shard`, whose first byte holds the ring's tail (after
    /// [`Served::Switch`], with no write in flight).
    fn switch_shard(&mut self, shard: File) {
        assert!(self.in_flight.is_none(), "switching shards mid-write");
        self.shard = shard;
        self.base = self.ring.tail();
    }

    /// After a stop: ends the poll and syncs the shard if configured to.
    fn finish(mut self) -> io::Result<WriterStats> {
        self.cancel_poll()?;
        if self.sync_shard {
            if let Some(error) = fault::inject(Site::WriterSync).and_then(Fault::error) {
                return Err(error);
            }
            self.shard.sync_data()?;
        }
        Ok(self.stats)
    }
}

impl ShardWriter<'_> {
    /// Writes whatever the ring holds, if no write is in flight. Returns
    /// whether a write was started.
    fn start_write(&mut self) -> io::Result<bool> {
        let (tail, head) = (self.ring.tail(), self.ring.head());
        if head == tail {
            return Ok(false);
        }
        self.stats.peak_fill = self.stats.peak_fill.max(head - tail);
        self.in_flight = Some(InFlight {
            from: tail,
            to: head,
            done: 0,
        });
        self.submit_write()?;
        Ok(true)
    }

    /// Writes what a quiet ring holds (less than a batch) with `pwritev`
    /// from this process. Handed to io_uring, a write that the file system
    /// cannot take without blocking (tmpfs before Linux 6.6) goes through a
    /// worker thread: for a few kilobytes a second, the wakeup and switch
    /// to that thread cost more than the copy (a quarter of the writers'
    /// time in a 64-vCPU guest).
    fn write_directly(&mut self) -> io::Result<()> {
        let tail = self.ring.tail();
        let written = match fault::inject(Site::WriterWrite).and_then(Fault::error) {
            Some(error) => Err(error),
            None => self.ring.write_unread_at(&self.shard, tail - self.base),
        };
        let head = match written {
            Ok(head) => head,
            Err(error) => return self.write_failed(error),
        };
        self.stats.writes += 1;
        self.stats.bytes += head - tail;
        // SAFETY: the bytes up to `head` are in the shard, and no iovec
        // points at them (no write is in flight).
        unsafe { self.ring.release(head) };
        Ok(())
    }

    /// A write failed. Where the storage is what failed (full, over quota,
    /// an I/O error), the shard is cut back to the start of the failed
    /// write, so it ends with the last whole record written, and the
    /// writer stops there: its report says why, and the coordinator stops
    /// the recording cleanly (the kernel counts what the ring drops from
    /// then on). Anything else is an error of the writer.
    fn write_failed(&mut self, error: io::Error) -> io::Result<()> {
        let errno = error.raw_os_error().unwrap_or(0);
        if !matches!(errno, libc::ENOSPC | libc::EDQUOT | libc::EIO | libc::EFBIG) {
            return Err(error);
        }
        let from = self.in_flight.take().map_or(self.ring.tail(), |f| f.from);
        self.shard.set_len(from - self.base)?;
        self.stats.cut = Some(errno);
        self.stop = Some(Command::Quit);
        Ok(())
    }

    /// Submits the part of the in-flight range not yet on disk, at the
    /// shard offset it belongs at, or with [`ShardWrites::Pwritev`] writes
    /// it now.
    fn submit_write(&mut self) -> io::Result<()> {
        let flight = self.in_flight.as_ref().expect("a write in flight");
        let start = flight.from + flight.done;
        let segments = self.ring.segments(start, flight.to);
        let count: u32 = if segments[1].is_empty() { 1 } else { 2 };
        if self.writes == ShardWrites::Pwritev {
            let slices = segments.map(io::IoSlice::new);
            let offset = (start - self.base) as i64;
            let result = match pwritev(&self.shard, &slices[..count as usize], offset) {
                Ok(written) => i32::try_from(written).unwrap_or(i32::MAX),
                Err(errno) => -(errno as i32),
            };
            self.wrote_unwaited = true;
            return self.write_done(injected(result));
        }
        for (iov, segment) in self.iov.iter_mut().zip(segments) {
            iov.iov_base = segment.as_ptr() as *mut libc::c_void;
            iov.iov_len = segment.len();
        }
        // The shard holds exactly the ring's bytes from `base` to `start`.
        let entry =
            opcode::Writev::new(types::Fd(self.shard.as_raw_fd()), self.iov.as_ptr(), count)
                .offset(start - self.base)
                .build()
                .user_data(WRITE);
        // SAFETY: the iovecs live in `self.iov` (boxed, not touched again
        // until this write completes) and point into ring bytes in
        // [tail, head), which stay mapped and unreleased until
        // `write_done` moves the tail after the completion.
        unsafe { self.push(&entry) }
    }

    fn write_done(&mut self, result: i32) -> io::Result<()> {
        if result == -libc::EINTR || result == -libc::EAGAIN {
            return self.submit_write();
        }
        if result < 0 {
            return self.write_failed(io::Error::from_raw_os_error(-result));
        }
        if result == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "shard write wrote nothing",
            ));
        }
        self.stats.writes += 1;
        let flight = self.in_flight.as_mut().expect("a write in flight");
        flight.done += result as u64;
        if flight.from + flight.done < flight.to {
            self.stats.short_writes += 1;
            return self.submit_write();
        }
        self.stats.bytes += flight.to - flight.from;
        // SAFETY: this completion ends the only I/O that read these bytes,
        // and the iovecs that pointed at them are not used again before the
        // next write sets them anew.
        unsafe { self.ring.release(flight.to) };
        self.in_flight = None;
        Ok(())
    }

    fn reap(&mut self) -> io::Result<()> {
        let mut done = [(0u64, 0i32, 0u32); 8];
        loop {
            let mut count = 0;
            for cqe in self.uring.completion().take(done.len()) {
                done[count] = (cqe.user_data(), cqe.result(), cqe.flags());
                count += 1;
            }
            if count == 0 {
                return Ok(());
            }
            for &(kind, result, flags) in &done[..count] {
                self.handle(kind, result, flags)?;
            }
        }
    }

    fn handle(&mut self, kind: u64, result: i32, flags: u32) -> io::Result<()> {
        match kind {
            POLL => {
                if result == -libc::EINVAL && self.multishot {
                    self.multishot = false;
                    return self.arm_poll();
                }
                if result < 0 && result != -libc::ECANCELED {
                    return Err(io::Error::from_raw_os_error(-result));
                }
                self.stats.wakeups += 1;
                self.flush_wanted = true;
                // A multishot poll ends on overflow of the completion queue,
                // a one-shot one after each wakeup: re-arm either.
                if !cqueue::more(flags) && self.stop.is_none() {
                    self.arm_poll()?;
                }
            }
            CONTROL => self.control_ready()?,
            WRITE => self.write_done(injected(result))?,
            _ => {}
        }
        Ok(())
    }

    fn control_ready(&mut self) -> io::Result<()> {
        let mut byte = [0u8; 1];
        let read = match self.control.read(&mut byte) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return self.arm_control(),
            Err(e) => return Err(e),
        };
        let command = Command::from_read(&byte[..read]);
        if command == Command::Flush {
            self.stats.flushes += 1;
            self.flush_wanted = true;
            self.quiet_flush = true;
            return self.arm_control();
        }
        if command == Command::Switch {
            self.switch_at = Some(self.ring.head());
            return self.arm_control();
        }
        if command != Command::Start && self.stop.is_none() {
            for event in &self.stop_events {
                // A failure leaves the event running: the drain still ends
                // at the head it reads, only later records are not written.
                let _ = event.disable();
            }
        }
        // Quit overrides Drain, never the other way round.
        if command != Command::Start && self.stop != Some(Command::Quit) {
            self.stop = Some(command);
        }
        if read == 0 {
            self.control_open = false;
            return Ok(());
        }
        self.arm_control()
    }

    fn arm_poll(&mut self) -> io::Result<()> {
        let fd = types::Fd(self.event.as_fd().as_raw_fd());
        let entry = opcode::PollAdd::new(fd, libc::POLLIN as u32)
            .multi(self.multishot)
            .build()
            .user_data(POLL);
        // SAFETY: a poll request carries no buffer; the event fd outlives
        // the request, which `cancel_poll` ends before `run` returns.
        unsafe { self.push(&entry) }
    }

    fn arm_control(&mut self) -> io::Result<()> {
        if !self.control_open {
            return Ok(());
        }
        let fd = types::Fd(self.control.as_raw_fd());
        let entry = opcode::PollAdd::new(fd, libc::POLLIN as u32)
            .build()
            .user_data(CONTROL);
        // SAFETY: a poll request carries no buffer; the control pipe is owned
        // by `self` and outlives the ring.
        unsafe { self.push(&entry) }
    }

    /// Ends the multishot poll: an armed poll holds a reference to the perf
    /// event, which would otherwise outlive the close.
    fn cancel_poll(&mut self) -> io::Result<()> {
        let entry = opcode::AsyncCancel::new(POLL).build().user_data(CANCEL);
        // SAFETY: a cancel request carries no buffer.
        unsafe { self.push(&entry) }?;
        loop {
            self.wait()?;
            if self.uring.completion().any(|cqe| cqe.user_data() == CANCEL) {
                return Ok(());
            }
        }
    }

    fn wait(&mut self) -> io::Result<()> {
        match self.uring.submit_and_wait(1) {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Queues one request, submitting first if the queue is full.
    ///
    /// # Safety
    /// Every buffer the entry points to must stay valid, and unmoved, until
    /// its completion has been reaped.
    unsafe fn push(&mut self, entry: &io_uring::squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: the caller guarantees the entry's buffers outlive it.
            if unsafe { self.uring.submission().push(entry) }.is_ok() {
                return Ok(());
            }
            self.uring.submit()?;
        }
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

/// Writes nothing to `shard` through `uring`, and waits. Where the file
/// system cannot take a write without blocking (tmpfs before Linux 6.6,
/// as in the many-CPU guest), io_uring hands every write to a worker
/// thread, which it creates at the first one: created here, before the
/// recording starts, that thread costs nothing inside it (it was 0.2
/// points of a 16-vCPU guest's samples). Elsewhere the write completes at
/// once.
fn warm_up(uring: &mut IoUring, shard: &File) -> io::Result<()> {
    let entry = opcode::Write::new(types::Fd(shard.as_raw_fd()), std::ptr::null(), 0)
        .offset(0)
        .build()
        .user_data(WARM_UP);
    // SAFETY: a write of zero bytes reads no memory.
    unsafe { uring.submission().push(&entry) }
        .map_err(|_| io::Error::other("the io_uring submission queue is full"))?;
    uring.submit_and_wait(1)?;
    let result = uring.completion().next().map_or(0, |cqe| cqe.result());
    if result < 0 {
        return Err(io::Error::from_raw_os_error(-result));
    }
    Ok(())
}

fn empty_iovec() -> libc::iovec {
    libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }
}
