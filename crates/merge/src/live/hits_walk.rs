//! The binaries a live merge's samples hit, found in its output behind
//! it, where the merge hops over the samples as it writes them
//! ([`super::follow::Follower::hopping`]): perf record marks them in one
//! pass over its file at its end. The stop's share of that pass is
//! bounded: while the output holds more than [`BEHIND_RECORDS`] records or
//! [`BEHIND_BYTES`] bytes past the walk, each round walks a step of them
//! (a syscall storm writes 5M records in as many seconds, whose walk at
//! the stop took 0.12 to 0.17 s of the 0.1 s the stop may take).

use std::fs::File;
use std::io;
use std::path::Path;

use shardrec_format::layouts::Layouts;
use shardrec_format::walk::RecordWalker;
use shardrec_shard::scan::ShardBytes;

use crate::data_out::{DataOut, RecordWriter};
use crate::dso::SliceHits;
use crate::output;

/// Records the output may hold past the walk while recording: walked at
/// the stop, about 10 ms of a 2-vCPU VM (30 to 35 ns a record).
pub const BEHIND_RECORDS: u64 = 256 << 10;

/// Bytes the output may hold past the walk while recording: walked at the
/// stop, about 10 ms of a 2-vCPU VM (its pages mapped from the page
/// cache, 35 to 45 µs a MB, with DWARF samples' 8 KiB each).
pub const BEHIND_BYTES: u64 = 256 << 20;

/// What a round walks at most while recording: about a millisecond of a
/// 2-vCPU VM. Walked at once, 256 MiB of a DWARF storm held the merger
/// off its rings for longer than a 4 MiB ring takes to fill at 160 MB/s,
/// and the writers spilled.
const STEP_BYTES: usize = 16 << 20;
const STEP_RECORDS: usize = 32 << 10;

/// Where a step of the walk over `bytes` (whole records) ends: after
/// [`STEP_BYTES`] or [`STEP_RECORDS`], at a record's end.
fn step_end(bytes: &[u8]) -> usize {
    let records = RecordWalker::new(bytes).take(STEP_RECORDS);
    let within = records.take_while(|record| record.offset < STEP_BYTES);
    within.last().map_or(0, |r| r.offset + r.bytes.len())
}

/// The walk over the output's data for the binaries its records hit.
pub struct HitsWalk<'a> {
    watcher: RecordWriter<'a, io::Sink>,
    /// How far into the data section it has walked.
    walked: u64,
}

/// Where the output's data is: the file, its path (for errors), the
/// data section's offset and its size so far (whole records, flushed).
pub struct Data<'f> {
    pub file: &'f File,
    pub path: &'f Path,
    pub offset: u64,
    pub size: u64,
}

impl<'a> HitsWalk<'a> {
    /// A walk from the start of the data section, with `layouts`.
    pub fn new(layouts: &'a Layouts) -> io::Result<HitsWalk<'a>> {
        Ok(HitsWalk {
            watcher: RecordWriter::new(DataOut::new(io::sink(), None)?, layouts),
            walked: 0,
        })
    }

    /// Whether an output of `records` records in a data section of
    /// `size` bytes is further ahead of the walk than the stop may walk.
    pub fn behind(&self, records: u64, size: u64) -> bool {
        records.saturating_sub(self.watcher.records) > BEHIND_RECORDS
            || size.saturating_sub(self.walked) > BEHIND_BYTES
    }

    /// Walks `data` from where the walk stopped: to its end (`whole`, at
    /// the stop), or one [`STEP_BYTES`] or [`STEP_RECORDS`] step of it.
    pub fn walk(&mut self, data: Data, whole: bool) -> io::Result<()> {
        let output = ShardBytes::map(data.file, data.path).map_err(io::Error::other)?;
        let (from, to) = (data.offset + self.walked, data.offset + data.size);
        let bytes = output.bytes().get(from as usize..to as usize);
        let bytes = bytes.ok_or_else(|| io::Error::other("the output is shorter than its data"))?;
        let bytes = match whole {
            true => bytes,
            false => &bytes[..step_end(bytes)],
        };
        output::write_resumed(bytes, &mut self.watcher)?;
        self.walked += bytes.len() as u64;
        Ok(())
    }

    /// What the records walked hit.
    pub fn hits(self) -> SliceHits {
        self.watcher.hits
    }
}
