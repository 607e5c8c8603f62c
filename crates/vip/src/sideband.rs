//! The VIP loop: wait on every CPU's side-band ring, copy what arrived to
//! `vip.shard`, and capture each program whose PROG_LOAD it reads.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use shardrec_format::header::{BPF_EVENT, KSYMBOL};
use shardrec_format::records::{parse_bpf_event, BPF_EVENT_PROG_LOAD, BPF_EVENT_PROG_UNLOAD};
use shardrec_format::walk::RecordWalker;
use shardrec_sys::{PerfEvent, RingBuffer};
use shardrec_writer::Command;

use crate::capture::Capturer;

/// One CPU's side-band event and its ring.
pub struct SideBand<'a> {
    /// The dummy event (ksymbol, bpf_event, wakeup on every record).
    pub event: &'a PerfEvent,
    /// Its ring, mapped by the VIP.
    pub ring: RingBuffer,
}

/// What the VIP saw and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
}

/// The VIP's state while it runs.
pub struct Vip<'a> {
    rings: Vec<SideBand<'a>>,
    shard: File,
    capturer: Capturer<File>,
    control: File,
    stats: VipStats,
    buf: Vec<u8>,
}

impl<'a> Vip<'a> {
    /// A VIP over `rings`, writing `shard`, capturing with `capturer`,
    /// taking commands from `control` (end of file reads as Drain).
    pub fn new(
        rings: Vec<SideBand<'a>>,
        shard: File,
        capturer: Capturer<File>,
        control: File,
    ) -> Self {
        Vip {
            rings,
            shard,
            capturer,
            control,
            stats: VipStats::default(),
            buf: Vec::new(),
        }
    }

    /// Runs until told to stop; a Drain reads the rings once more first.
    pub fn run(mut self) -> io::Result<VipStats> {
        loop {
            let command = self.wait()?;
            if command != Some(Command::Quit) {
                self.drain_all()?;
            }
            if command.is_some() {
                break;
            }
        }
        self.shard.sync_data()?;
        self.stats.captured = self.capturer.captured;
        self.stats.missed = self.capturer.missed;
        Ok(self.stats)
    }

    /// Waits up to 100 ms for a ring or the control pipe; returns the
    /// coordinator's command if one came.
    fn wait(&mut self) -> io::Result<Option<Command>> {
        let mut fds: Vec<PollFd> = self
            .rings
            .iter()
            .map(|s| PollFd::new(s.event.as_fd(), PollFlags::POLLIN))
            .collect();
        fds.push(PollFd::new(self.control.as_fd(), PollFlags::POLLIN));
        match poll(&mut fds, PollTimeout::from(100u16)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        let control_ready = fds
            .last()
            .and_then(PollFd::revents)
            .is_some_and(|r| !r.is_empty());
        if !control_ready {
            return Ok(None);
        }
        let mut byte = [0u8; 1];
        let read = self.control.read(&mut byte)?;
        Ok(Some(Command::from_read(&byte[..read])))
    }

    fn drain_all(&mut self) -> io::Result<()> {
        for i in 0..self.rings.len() {
            self.drain(i)?;
        }
        Ok(())
    }

    /// Takes one ring's new records: frees the ring first, captures any
    /// program that loaded, then appends the records to the shard.
    fn drain(&mut self, index: usize) -> io::Result<()> {
        let ring = &self.rings[index].ring;
        let (tail, head) = (ring.tail(), ring.head());
        if head == tail {
            return Ok(());
        }
        self.buf.clear();
        for segment in ring.segments(tail, head) {
            self.buf.extend_from_slice(segment);
        }
        ring.set_tail(head);
        let buf = std::mem::take(&mut self.buf);
        for record in RecordWalker::new(&buf) {
            self.observe(record.header.type_, record.bytes)?;
        }
        self.shard.write_all(&buf)?;
        self.stats.bytes += buf.len() as u64;
        self.buf = buf;
        Ok(())
    }

    fn observe(&mut self, type_: u32, record: &[u8]) -> io::Result<()> {
        match type_ {
            KSYMBOL => self.stats.ksymbols += 1,
            BPF_EVENT => match parse_bpf_event(record) {
                Some((BPF_EVENT_PROG_LOAD, id, _)) => {
                    self.stats.loaded += 1;
                    self.capturer.capture(id)?;
                }
                Some((BPF_EVENT_PROG_UNLOAD, _, _)) => self.stats.unloaded += 1,
                _ => {}
            },
            _ => {}
        }
        Ok(())
    }
}
