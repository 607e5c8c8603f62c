//! The VIP loop: wait on every CPU's side-band ring, copy what arrived to
//! `vip.shard`, and capture each program whose PROG_LOAD it reads.
//!
//! Programs are held and read the moment their PROG_LOAD is read; what
//! one wakeup brings (the records, the programs' info and BTF) is written
//! with one write to each file before the VIP sleeps again. It is written
//! at once because what the VIP takes from a ring is gone from it: a VIP
//! that dies loses only what it was handling, and the one that replaces
//! it finds the rest in the rings.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::AsFd;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use shardrec_control::fault::{self, Fault};
use shardrec_control::{Command, Served, VipStats};
use shardrec_format::header::RecordType;
use shardrec_format::records::{parse_bpf_event, BPF_EVENT_PROG_LOAD, BPF_EVENT_PROG_UNLOAD};
use shardrec_format::walk::RecordWalker;
use shardrec_format::SampleIdLayout;
use shardrec_sys::{PerfEvent, RingBuffer};

use crate::capture::Capturer;
use crate::kernel_capture::KernelCapture;

/// One CPU's side-band event and its ring.
pub struct SideBand<'a> {
    /// The dummy event (ksymbol, bpf_event, wakeup on every record).
    pub event: &'a PerfEvent,
    /// Its ring, mapped by the VIP.
    pub ring: RingBuffer,
}

/// The VIP's state while it runs.
pub struct Vip<'a> {
    rings: Vec<SideBand<'a>>,
    shard: BufWriter<File>,
    capturer: Capturer<BufWriter<File>>,
    /// Where the kernel takes shardrec's capture program: each program
    /// as it loaded.
    kernel: Option<KernelCapture<'a>>,
    control: File,
    epoll: Epoll,
    /// Room for every ring's event and the control pipe's.
    events: Vec<EpollEvent>,
    stats: VipStats,
    buf: Vec<u8>,
}

/// The epoll token of the control pipe; a ring's is its index.
const CONTROL: u64 = u64::MAX;

/// With the kernel capture, which reads each program as it loads, a
/// record need not be read the moment it lands: the VIP waits this long
/// after a wakeup and reads what came meanwhile with it. A program's load
/// and unload bring a KSYMBOL and a BPF_EVENT each, every one a wakeup
/// (each its own copy, writes and epoll round trip: in a 16-vCPU guest
/// loading 50 programs, two fifths of the VIP's samples); gathered, they
/// are one. In that guest a program's unload came 1.5 to 50 ms after its
/// load, and the next load 17 to 275 ms later: 10 ms kept a load and its
/// unload apart, two wakeups a program. A stream's rounds come every
/// 50 ms: a side band record holds one back no longer than that.
const GATHER: Duration = Duration::from_millis(50);

/// Room of each buffer: a burst of loads larger than this is written at
/// once.
pub const BUFFER: usize = 256 << 10;

impl<'a> Vip<'a> {
    /// A VIP over `rings`, writing `shard`, capturing with `capturer`
    /// (whose buffer it writes out in time) from what `kernel` read of
    /// each program as it loaded, or else through bpf(2), taking commands
    /// from `control` (end of file reads as Drain).
    pub fn new(
        rings: Vec<SideBand<'a>>,
        shard: File,
        capturer: Capturer<BufWriter<File>>,
        kernel: Option<KernelCapture<'a>>,
        control: File,
    ) -> io::Result<Self> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        for (i, side_band) in rings.iter().enumerate() {
            epoll.add(
                side_band.event,
                EpollEvent::new(EpollFlags::EPOLLIN, i as u64),
            )?;
        }
        epoll.add(&control, EpollEvent::new(EpollFlags::EPOLLIN, CONTROL))?;
        Ok(Vip {
            events: vec![EpollEvent::empty(); rings.len() + 1],
            rings,
            shard: BufWriter::with_capacity(BUFFER, shard),
            capturer,
            kernel,
            control,
            epoll,
            stats: VipStats::default(),
            buf: Vec::new(),
        })
    }

    /// Serves the rings until a stop (carried out: a Drain reads every
    /// ring once more first) or a Switch (every ring read up to then).
    pub fn serve(&mut self) -> io::Result<Served> {
        let mut ready = Vec::with_capacity(self.rings.len());
        loop {
            let mut command = self.wait(&mut ready)?;
            if command.is_none() && self.gather(&mut ready)? {
                command = Some(Command::next_or_drain(&mut self.control)?);
            }
            if command.is_some() || ready.is_empty() {
                // A command, or a quiet spell: read every ring, in case a
                // wakeup was missed.
                ready = (0..self.rings.len()).collect();
            }
            if command != Some(Command::Quit) {
                self.drain(&ready)?;
            }
            match command {
                Some(Command::Switch) => return Ok(Served::Switch),
                Some(_) => return Ok(Served::Stopped),
                None => {}
            }
        }
    }

    /// After [`Served::Switch`]: goes on in the next window's `shard` and
    /// `bpf` file, where the programs loaded now are captured again.
    /// Returns the records that describe them, for the window's
    /// `synth.shard`: each window is read alone.
    pub fn switch_files(
        &mut self,
        shard: File,
        bpf: File,
        layout: &SampleIdLayout,
        event_id: u64,
    ) -> io::Result<Vec<u8>> {
        self.shard.flush()?;
        self.capturer.flush()?;
        self.shard = BufWriter::with_capacity(BUFFER, shard);
        let counts = self.capturer.counts();
        self.capturer = Capturer::new(BufWriter::with_capacity(BUFFER, bpf));
        let (records, _) = crate::existing::describe(&mut self.capturer, layout, event_id)?;
        self.capturer.flush()?;
        // Programs captured again are not captured twice.
        self.capturer.set_counts(counts);
        Ok(records)
    }

    /// Appends records of the VIP's own making (whole, in time order
    /// after what it copied) to the shard.
    pub fn append(&mut self, records: &[u8]) -> io::Result<()> {
        self.shard.write_all(records)?;
        self.stats.bytes += records.len() as u64;
        Ok(())
    }

    /// After a stop: syncs the shard and says what the VIP did.
    pub fn finish(mut self) -> io::Result<VipStats> {
        self.shard.flush()?;
        self.shard.get_ref().sync_data()?;
        self.stats.captured = self.capturer.captured;
        self.stats.missed = self.capturer.missed;
        self.stats.captured_in_kernel = self.capturer.captured_in_kernel;
        self.stats.kernel_capture = self.kernel.as_ref().map(KernelCapture::hook);
        Ok(self.stats)
    }

    /// Waits for rings or the control pipe (a ring wakes it on every
    /// record), up to a second (as perf's side-band thread). Fills `ready`
    /// with the rings that woke and returns the coordinator's command if
    /// one came.
    fn wait(&mut self, ready: &mut Vec<usize>) -> io::Result<Option<Command>> {
        let count = match self.epoll.wait(&mut self.events, 1000u16) {
            Ok(count) => count,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(e) => return Err(e.into()),
        };
        ready.clear();
        let mut control_ready = false;
        for event in &self.events[..count] {
            match event.data() {
                CONTROL => control_ready = true,
                ring => ready.push(ring as usize),
            }
        }
        if !control_ready {
            return Ok(None);
        }
        Command::next_or_drain(&mut self.control).map(Some)
    }

    /// Waits [`GATHER`] after rings woke the VIP, where the kernel
    /// capture reads the programs, and makes `ready` every ring that holds
    /// records then: what came meanwhile is read with what woke it (only
    /// those rings, not all 64 of a 64-vCPU host). Not after a wakeup that
    /// brought nothing (records it came for were read with an earlier
    /// one). A command cuts the wait short: true when one is waiting.
    fn gather(&self, ready: &mut Vec<usize>) -> io::Result<bool> {
        let holds = |i: &usize| {
            let ring = &self.rings[*i].ring;
            ring.head() != ring.tail()
        };
        if self.kernel.is_none() || !ready.iter().any(holds) {
            return Ok(false);
        }
        let mut control = [PollFd::new(self.control.as_fd(), PollFlags::POLLIN)];
        let wait = PollTimeout::try_from(GATHER).expect("GATHER fits a poll");
        let command = match poll(&mut control, wait) {
            Ok(n) => n > 0,
            Err(nix::errno::Errno::EINTR) => false,
            Err(e) => return Err(e.into()),
        };
        *ready = (0..self.rings.len()).filter(holds).collect();
        Ok(command)
    }

    /// Copies the new records of the `ready` rings, holding every program
    /// a PROG_LOAD announces by a fd as soon as it is read; only then reads
    /// the held programs' info, appends the records to the shard (one write
    /// to each file), and frees the rings. A program
    /// that lives for milliseconds is thus caught if it is still there when
    /// the VIP first sees it, however many rings and programs came with it.
    fn drain(&mut self, ready: &[usize]) -> io::Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let (mut held, mut loaded) = (Vec::new(), Vec::new());
        let mut copied = Vec::with_capacity(ready.len());
        for &index in ready {
            let start = buf.len();
            copied.push((index, self.rings[index].ring.copy_unread(&mut buf)));
            for record in RecordWalker::new(&buf[start..]) {
                let Some(id) = self.observe(record.header.type_, record.bytes) else {
                    continue;
                };
                match self.kernel {
                    Some(_) => loaded.push(id),
                    None => held.extend(self.capturer.hold(id)?),
                }
            }
        }
        if let Some(kernel) = self.kernel.as_mut().filter(|_| !loaded.is_empty()) {
            kernel.collect()?;
        }
        for id in loaded {
            self.capture_loaded(id)?;
        }
        for program in held {
            self.capturer.capture_held(program)?;
        }
        if !buf.is_empty() {
            if let Some(error) = fault::inject(fault::Site::VipWrite).and_then(Fault::error) {
                return Err(error);
            }
            self.shard.write_all(&buf)?;
            self.shard.flush()?;
            self.stats.bytes += buf.len() as u64;
        }
        self.capturer.flush()?;
        // Only now, with the records in the shard, may the kernel reuse
        // their room: a VIP killed before leaves them to the next one.
        for (index, copy) in copied {
            self.rings[index].ring.release_copied(copy);
        }
        self.buf = buf;
        Ok(())
    }

    /// Program `id`, as the kernel capture read it when it loaded; through
    /// bpf(2) if it did not read it whole (its ring was full).
    fn capture_loaded(&mut self, id: u32) -> io::Result<()> {
        match self.kernel.as_mut().and_then(|kernel| kernel.take(id)) {
            Some(recorded) => self.capturer.capture_recorded(recorded),
            None => match self.capturer.hold(id)? {
                Some(held) => self.capturer.capture_held(held).map(drop),
                None => Ok(()),
            },
        }
    }

    /// Counts a record; for a PROG_LOAD, the program's id.
    fn observe(&mut self, type_: RecordType, record: &[u8]) -> Option<u32> {
        match type_ {
            RecordType::KSYMBOL => self.stats.ksymbols += 1,
            // header, id, then the count of records lost.
            RecordType::LOST => {
                self.stats.lost +=
                    shardrec_format::views::lost_count(RecordType::LOST, record).unwrap_or(0)
            }
            RecordType::BPF_EVENT => match parse_bpf_event(record) {
                Some((BPF_EVENT_PROG_LOAD, id, _)) => {
                    self.stats.loaded += 1;
                    return Some(id);
                }
                Some((BPF_EVENT_PROG_UNLOAD, _, _)) => self.stats.unloaded += 1,
                _ => {}
            },
            _ => {}
        }
        None
    }
}
