//! The writer of an overwrite ring (`--overwrite`, a flight recorder): the
//! kernel writes the ring backward over its oldest records and nothing
//! reads it while recording, so the writer sleeps on its control pipe
//! alone. At a snapshot (a Switch, and the stop) it pauses the ring,
//! copies the records that came since the last snapshot (the newest ring's
//! worth, oldest first) into its shard, and resumes.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;

use shardrec_control::{Command, Served, WriterStats};

use crate::RingWriter;
use shardrec_sys::{PerfEvent, RingBuffer};

/// Snapshots one overwrite ring into one shard file.
pub struct SnapshotWriter<'a> {
    ring: &'a RingBuffer,
    /// The event whose ring it is (pausing it pauses the ring).
    owner: &'a PerfEvent,
    shard: File,
    control: File,
    /// The ring's head at the last snapshot: the next takes what came since.
    since: u64,
    /// Disabled when a stop comes, before the last snapshot.
    stop_events: Vec<&'a PerfEvent>,
    stats: WriterStats,
    buf: Vec<u8>,
}

impl<'a> SnapshotWriter<'a> {
    /// A writer of overwrite ring `ring` (mapped from `owner`) into `shard`,
    /// appended to, taking commands from the read end of a pipe. The ring
    /// holds what came since `since` (its head when it was last read; 0,
    /// for a new ring).
    pub fn new(
        ring: &'a RingBuffer,
        owner: &'a PerfEvent,
        shard: File,
        control: OwnedFd,
        since: u64,
    ) -> Self {
        SnapshotWriter {
            ring,
            owner,
            shard,
            control: File::from(control),
            since,
            stop_events: Vec::new(),
            stats: WriterStats::default(),
            buf: Vec::new(),
        }
    }

    /// Disables `events` when a stop comes, before the last snapshot.
    pub fn disabling_at_stop(mut self, events: Vec<&'a PerfEvent>) -> Self {
        self.stop_events = events;
        self
    }

    /// Copies what the ring received since the last snapshot into the
    /// shard, with the ring paused meanwhile (the kernel counts what it
    /// drops then, and reports it as LOST).
    fn snapshot(&mut self) -> io::Result<()> {
        let paused = self.ring.pause(self.owner)?;
        self.buf.clear();
        self.since = paused.snapshot(self.since, &mut self.buf);
        let resumed = paused.resume();
        self.stats.peak_fill = self.stats.peak_fill.max(self.buf.len() as u64);
        self.shard.write_all(&self.buf)?;
        self.stats.writes += 1;
        self.stats.bytes += self.buf.len() as u64;
        resumed
    }
}

impl RingWriter for SnapshotWriter<'_> {
    /// Waits for commands: returns after a snapshot for a Switch (the
    /// caller hands over the next shard), or after a stop (Drain: the
    /// events disabled, a last snapshot; Quit: none; the end of the pipe
    /// reads as Drain).
    fn serve(&mut self) -> io::Result<Served> {
        loop {
            match Command::next_or_drain(&mut self.control)? {
                Command::Switch => {
                    self.snapshot()?;
                    return Ok(Served::Switch);
                }
                Command::Drain => {
                    for event in &self.stop_events {
                        let _ = event.disable();
                    }
                    self.snapshot()?;
                    return Ok(Served::Stopped);
                }
                Command::Quit => return Ok(Served::Stopped),
                Command::Start | Command::Flush => {}
            }
        }
    }

    /// Goes on in `shard` (after [`Served::Switch`]).
    fn switch_shard(&mut self, shard: File) {
        self.shard = shard;
    }

    /// After a stop: what it wrote.
    fn finish(self) -> io::Result<WriterStats> {
        self.shard.sync_data()?;
        Ok(self.stats)
    }
}
