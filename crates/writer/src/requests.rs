//! A writer's io_uring: the polls on its ring's event and its control
//! pipe, and at most one write from the ring. It owns what the kernel
//! reads for that write (the iovecs) and borrows the ring its bytes lie
//! in, and on drop waits until the kernel is done with both: the promise
//! every submission makes ("valid until the completion is reaped") holds
//! by construction, however the writer ends.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};

use io_uring::{cqueue, opcode, types, IoUring};
use shardrec_sys::{PerfEvent, RingBuffer};

// user_data of each kind of request.
const POLL: u64 = 1;
const CONTROL: u64 = 3;
const WRITE: u64 = 4;
const CANCEL: u64 = 5;
const WARM_UP: u64 = 6;
const TIMER: u64 = 7;

/// What a reaped completion says.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Completion {
    /// The ring's event polled readable: the ring reached its watermark.
    Wakeup,
    /// The control pipe has a command (or its end) to read.
    Control,
    /// The write ended with this result (bytes, or `-errno`).
    Write(i32),
    /// The timer ([`Requests::arm_timer`]) ran out.
    Timer,
}

/// The io_uring of one writer. See the module docs.
pub(crate) struct Requests<'a> {
    uring: IoUring,
    ring: &'a RingBuffer,
    event: &'a PerfEvent,
    control: types::Fd,
    // Boxed so their address stays put while the kernel reads them.
    iov: Box<[libc::iovec; 2]>,
    /// A write was submitted and its completion not reaped yet: the kernel
    /// may still read `iov` and the ring bytes it points at.
    writing: bool,
    /// The ring's poll is armed (until cancelled at the end).
    polling: bool,
    /// Multishot polls need 5.13; older kernels reject them (EINVAL) and
    /// get a one-shot poll re-armed after each wakeup.
    multishot: bool,
    /// The timer's time, read by the kernel as the request is submitted.
    timer: Box<types::Timespec>,
    /// A timer is armed.
    timing: bool,
}

impl<'a> Requests<'a> {
    /// An io_uring for the writer of `ring` (mapped from `event`), with
    /// both polls armed; `warm_up` makes its write worker first (see
    /// [`warm_up`]).
    pub(crate) fn new(
        ring: &'a RingBuffer,
        event: &'a PerfEvent,
        control: &File,
        shard: &File,
        multishot: bool,
        warm: bool,
    ) -> io::Result<Self> {
        let mut uring = IoUring::new(8)?;
        if warm {
            warm_up(&mut uring, shard)?;
        }
        let mut requests = Requests {
            uring,
            ring,
            event,
            control: types::Fd(control.as_raw_fd()),
            iov: Box::new([empty_iovec(); 2]),
            writing: false,
            polling: false,
            multishot,
            timer: Box::new(types::Timespec::new()),
            timing: false,
        };
        requests.arm_poll()?;
        requests.arm_control()?;
        Ok(requests)
    }

    /// Submits a write of the ring's bytes `[from, to)` at `offset` in
    /// `shard`; its result comes as [`Completion::Write`].
    pub(crate) fn write(
        &mut self,
        shard: &File,
        from: u64,
        to: u64,
        offset: u64,
    ) -> io::Result<()> {
        assert!(!self.writing, "one write in flight at a time");
        let segments = self.ring.segments(from, to);
        let count: u32 = if segments[1].is_empty() { 1 } else { 2 };
        for (iov, segment) in self.iov.iter_mut().zip(segments) {
            iov.iov_base = segment.as_ptr() as *mut libc::c_void;
            iov.iov_len = segment.len();
        }
        let entry = opcode::Writev::new(types::Fd(shard.as_raw_fd()), self.iov.as_ptr(), count)
            .offset(offset)
            .build()
            .user_data(WRITE);
        // SAFETY: the iovecs live in `self.iov` (boxed, not touched again
        // until this write is reaped) and point into the ring's unread
        // bytes, which the writer releases only after the completion, in
        // a mapping borrowed for longer than `self`, whose drop waits for
        // the write.
        unsafe { self.push(&entry) }?;
        self.writing = true;
        Ok(())
    }

    /// A [`Completion::Timer`] in `after`, unless a timer is armed
    /// already (it comes sooner, or soon enough).
    pub(crate) fn arm_timer(&mut self, after: std::time::Duration) -> io::Result<()> {
        if self.timing {
            return Ok(());
        }
        *self.timer = types::Timespec::from(after);
        let entry = opcode::Timeout::new(&*self.timer).build().user_data(TIMER);
        // SAFETY: the timespec is boxed in `self`, which outlives the
        // submission (the kernel copies it as it takes the request).
        unsafe { self.push(&entry) }?;
        self.timing = true;
        Ok(())
    }

    /// Submits what is queued and sleeps until a completion comes.
    pub(crate) fn wait(&mut self) -> io::Result<()> {
        match self.uring.submit_and_wait(1) {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The next completion, if one is there. A ring poll is re-armed where
    /// it ended (unless `rearm` is false: a stop needs no more wakeups),
    /// and a refused multishot one becomes one-shot; a control poll is
    /// re-armed by [`rearm_control`](Self::rearm_control) once read.
    pub(crate) fn next(&mut self, rearm: bool) -> io::Result<Option<Completion>> {
        loop {
            let Some(cqe) = self.uring.completion().next() else {
                return Ok(None);
            };
            let (result, flags) = (cqe.result(), cqe.flags());
            match cqe.user_data() {
                POLL => {
                    if result == -libc::EINVAL && self.multishot {
                        self.multishot = false;
                        self.arm_poll()?;
                        continue;
                    }
                    if result < 0 && result != -libc::ECANCELED {
                        return Err(io::Error::from_raw_os_error(-result));
                    }
                    // A multishot poll ends on overflow of the completion
                    // queue, a one-shot one after each wakeup.
                    self.polling = cqueue::more(flags);
                    if !self.polling && rearm {
                        self.arm_poll()?;
                    }
                    return Ok(Some(Completion::Wakeup));
                }
                CONTROL => return Ok(Some(Completion::Control)),
                TIMER => {
                    self.timing = false;
                    return Ok(Some(Completion::Timer));
                }
                WRITE => {
                    self.writing = false;
                    return Ok(Some(Completion::Write(result)));
                }
                _ => {}
            }
        }
    }

    /// Polls the control pipe again, after reading a command from it.
    pub(crate) fn rearm_control(&mut self) -> io::Result<()> {
        self.arm_control()
    }

    /// Ends the ring's poll and waits until it has: an armed poll holds a
    /// reference to the perf event, which would otherwise outlive the close.
    pub(crate) fn cancel_poll(&mut self) -> io::Result<()> {
        let entry = opcode::AsyncCancel::new(POLL).build().user_data(CANCEL);
        // SAFETY: a cancel request carries no buffer.
        unsafe { self.push(&entry) }?;
        self.polling = false;
        loop {
            self.wait()?;
            for cqe in self.uring.completion() {
                match cqe.user_data() {
                    CANCEL => return Ok(()),
                    WRITE => self.writing = false,
                    _ => {}
                }
            }
        }
    }

    fn arm_poll(&mut self) -> io::Result<()> {
        let fd = types::Fd(self.event.as_fd().as_raw_fd());
        let entry = opcode::PollAdd::new(fd, libc::POLLIN as u32)
            .multi(self.multishot)
            .build()
            .user_data(POLL);
        // SAFETY: a poll request carries no buffer; the event is borrowed
        // for longer than `self`, whose drop cancels the poll.
        unsafe { self.push(&entry) }?;
        self.polling = true;
        Ok(())
    }

    fn arm_control(&mut self) -> io::Result<()> {
        let entry = opcode::PollAdd::new(self.control, libc::POLLIN as u32)
            .build()
            .user_data(CONTROL);
        // SAFETY: a poll request carries no buffer; the writer owns the
        // pipe and drops it after `self`.
        unsafe { self.push(&entry) }
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

impl Drop for Requests<'_> {
    /// A writer that ends on an error may still have a write in flight or
    /// the poll armed: wait until the kernel is done reading the iovecs
    /// and the ring, and let go of the event.
    fn drop(&mut self) {
        if self.polling {
            let _ = self.cancel_poll();
        }
        while self.writing {
            if self.wait().is_err() {
                // Cannot wait: the iovecs must outlive the write anyway.
                Box::leak(std::mem::replace(
                    &mut self.iov,
                    Box::new([empty_iovec(); 2]),
                ));
                return;
            }
            if self.uring.completion().any(|cqe| cqe.user_data() == WRITE) {
                self.writing = false;
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};

    use shardrec_sys::{abi, Attr, Target};

    /// A ring holding this thread's cpu-clock samples of a few ms.
    fn sampled_ring() -> (PerfEvent, RingBuffer) {
        let mut attr = Attr::software(abi::PERF_COUNT_SW_TASK_CLOCK as u64);
        attr.set_period(50_000);
        attr.set_sample_type(abi::PERF_SAMPLE_IP as u64);
        let tid = nix::unistd::gettid().as_raw();
        let event = PerfEvent::open(&attr, Target { pid: tid, cpu: -1 }).expect("perf_event_open");
        let ring = RingBuffer::map(&event, 4).expect("mmap ring");
        event.enable().unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(20) {
            std::hint::black_box(start.elapsed());
        }
        event.disable().unwrap();
        (event, ring)
    }

    /// Dropped with a write blocked on a full pipe, the requests wait for
    /// it: the reader, which empties the pipe only 300 ms later, still
    /// gets every ring byte, read from the iovecs and the ring while the
    /// drop waited.
    #[test]
    fn dropping_the_requests_waits_for_the_write_in_flight() {
        let (event, ring) = sampled_ring();
        let (from, to) = (ring.tail(), ring.head());
        assert!(to > from, "no samples in 20 ms of cpu-clock");
        let expected: Vec<u8> = ring.segments(from, to).concat();
        let (control, _control_writer) = nix::unistd::pipe().unwrap();
        let control = File::from(control);
        let (pipe_out, pipe_in) = nix::unistd::pipe().unwrap();
        let (mut pipe_out, pipe_in) = (File::from(pipe_out), File::from(pipe_in));
        let filler = fill(&pipe_in);
        let reader = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let mut got = vec![0u8; filler + expected.len()];
            pipe_out.read_exact(&mut got).unwrap();
            got[filler..] == expected[..]
        });
        let mut requests = Requests::new(&ring, &event, &control, &pipe_in, true, false).unwrap();
        requests.write(&pipe_in, from, to, 0).unwrap();
        let dropped = Instant::now();
        drop(requests);
        assert!(dropped.elapsed() >= Duration::from_millis(200));
        assert!(
            reader.join().unwrap(),
            "the pipe got other bytes than the ring's"
        );
    }

    /// A timer comes as one completion, after its time; armed twice, it
    /// comes once; once it came, it may be armed again.
    #[test]
    fn a_timer_comes_once_after_its_time() {
        let (event, ring) = sampled_ring();
        let (control, _control_writer) = nix::unistd::pipe().unwrap();
        let (control, shard) = (File::from(control), File::open("/dev/null").unwrap());
        let mut requests = Requests::new(&ring, &event, &control, &shard, true, false).unwrap();
        for _ in 0..2 {
            let armed = Instant::now();
            requests.arm_timer(Duration::from_millis(20)).unwrap();
            requests.arm_timer(Duration::from_millis(20)).unwrap();
            let mut timers = 0;
            while armed.elapsed() < Duration::from_millis(60) {
                requests.wait_at_most(Duration::from_millis(10));
                while let Some(completion) = requests.next(false).unwrap() {
                    if let Completion::Timer = completion {
                        assert!(armed.elapsed() >= Duration::from_millis(20));
                        timers += 1;
                    }
                }
            }
            assert_eq!(timers, 1);
        }
    }

    impl Requests<'_> {
        /// Waits for a completion or `most`, whichever comes first.
        fn wait_at_most(&mut self, most: Duration) {
            let timespec = types::Timespec::from(most);
            let args = types::SubmitArgs::new().timespec(&timespec);
            let _ = self.uring.submitter().submit_with_args(1, &args);
        }
    }

    /// Fills a pipe until it would block; returns how many bytes it took.
    fn fill(pipe: &File) -> usize {
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        let flags = OFlag::from_bits_truncate(fcntl(pipe, FcntlArg::F_GETFL).unwrap());
        fcntl(pipe, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK)).unwrap();
        let mut filled = 0;
        let chunk = [0u8; 4096];
        while let Ok(n) = (&*pipe).write(&chunk) {
            filled += n;
        }
        fcntl(pipe, FcntlArg::F_SETFL(flags)).unwrap();
        filled
    }
}
