//! Putting records in time order with memory bounded by their disorder.
//!
//! Inside one shard, records are nearly sorted: a record is never later
//! than `lateness` behind the latest time read before it (measured when the
//! shard was opened). So once a shard has been read up to time `T`, every
//! pending record with a time `<= T - lateness` can go: nothing read later
//! can be earlier. A k-way merge of the shards' sorted streams gives the
//! global order; ties keep shard order, then file order.
//!
//! A parallel merge reads one time slice at a time: each shard from the
//! last index checkpoint before the slice, giving only the slice's records,
//! and stopping once the shard is past the slice by more than its lateness.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use shardrec_format::header::RecordHeader;

use shardrec_format::layouts::{FieldReader, Layouts};
use shardrec_shard::scan::ScannedShard;

use crate::slices::Slice;

/// Resident shard bytes the merge allows itself, split between the
/// streams: each releases the pages behind it once it is this far past.
const RESIDENT_BUDGET: usize = 128 << 20;

/// How far one of `streams` concurrent streams reads before releasing.
pub fn release_step(streams: usize) -> usize {
    (RESIDENT_BUDGET / streams.max(1)).clamp(1 << 20, 32 << 20)
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    time: u64,
    seq: u64,
    offset: usize,
    len: usize,
}

/// One shard's records in time order.
pub struct SortedShard<'a> {
    shard: &'a ScannedShard,
    bytes: &'a [u8],
    pos: usize,
    times: FieldReader<'a>,
    heap: BinaryHeap<Reverse<Pending>>,
    /// Offsets of records read, in file order, and whether each has gone
    /// out: the first not gone bounds what may be released.
    outstanding: VecDeque<(usize, bool)>,
    first_seq: u64,
    max_read: u64,
    released: usize,
    release_step: usize,
    /// The times given.
    slice: Slice,
    /// Reading stops once a time this late has been read.
    stop_at: Option<u64>,
}

impl<'a> SortedShard<'a> {
    /// A sorted view of `shard`'s valid records, releasing the pages behind
    /// it every `release_step` bytes.
    pub fn new(shard: &'a ScannedShard, layouts: &'a Layouts, release_step: usize) -> Self {
        shard.bytes.advise_sequential();
        SortedShard {
            shard,
            bytes: shard.valid(),
            pos: shard.summary.start,
            times: FieldReader::new(layouts),
            heap: BinaryHeap::new(),
            outstanding: VecDeque::new(),
            first_seq: 0,
            max_read: 0,
            released: shard.summary.start,
            release_step,
            slice: Slice::default(),
            stop_at: None,
        }
    }

    /// A sorted view of the records of `shard` in `slice`.
    pub fn slice(
        shard: &'a ScannedShard,
        layouts: &'a Layouts,
        release_step: usize,
        slice: &Slice,
    ) -> Self {
        let (pos, latest) = shard.summary.index.start_for(slice.start);
        let pos = pos.max(shard.summary.start);
        let lateness = shard.summary.lateness;
        let mut stream = SortedShard::new(shard, layouts, release_step);
        stream.pos = pos;
        stream.max_read = latest;
        stream.released = pos;
        stream.slice = slice.clone();
        stream.stop_at = slice.end.map(|end| end.saturating_add(lateness));
        stream
    }

    /// Reads one more record into the heap; false at the end.
    fn read_one(&mut self) -> bool {
        // Nothing after this can be earlier than the slice's end.
        if self.stop_at.is_some_and(|stop| self.max_read >= stop) {
            return false;
        }
        let Some(header) = RecordHeader::parse(&self.bytes[self.pos..]) else {
            return false;
        };
        let len = header.size as usize;
        let record = &self.bytes[self.pos..self.pos + len];
        // Validated when opened: every record here has a known id and time.
        let time = self
            .times
            .time(record, header.type_)
            .unwrap_or(self.max_read);
        self.max_read = self.max_read.max(time);
        if !self.slice.contains(time) || self.shard.resume.merged(self.pos, time) {
            self.pos += len;
            return true;
        }
        let seq = self.first_seq + self.outstanding.len() as u64;
        self.heap.push(Reverse(Pending {
            time,
            seq,
            offset: self.pos,
            len,
        }));
        self.outstanding.push_back((self.pos, false));
        self.pos += len;
        true
    }

    fn gone(&mut self, seq: u64) {
        self.outstanding[(seq - self.first_seq) as usize].1 = true;
        while self.outstanding.front().is_some_and(|&(_, gone)| gone) {
            self.outstanding.pop_front();
            self.first_seq += 1;
        }
        let keep = self
            .outstanding
            .front()
            .map_or(self.pos, |&(offset, _)| offset);
        if keep >= self.released + self.release_step {
            self.shard.bytes.release(self.released..keep);
            self.released = keep;
        }
    }
}

impl<'a> Iterator for SortedShard<'a> {
    type Item = (u64, &'a [u8]);

    fn next(&mut self) -> Option<(u64, &'a [u8])> {
        loop {
            let ready = match self.heap.peek() {
                Some(Reverse(top)) => {
                    top.time.saturating_add(self.shard.summary.lateness) <= self.max_read
                }
                None => false,
            };
            if ready || !self.read_one() {
                let Reverse(top) = self.heap.pop()?;
                self.gone(top.seq);
                return Some((top.time, &self.bytes[top.offset..top.offset + top.len]));
            }
        }
    }
}

impl Drop for SortedShard<'_> {
    /// A slice's stream gives its pages back when done: its part of a
    /// shard may be smaller than a release step.
    fn drop(&mut self) {
        self.shard.bytes.release(self.released..self.pos);
    }
}

/// The k-way merge of sorted shards.
pub struct Merged<'a> {
    streams: Vec<SortedShard<'a>>,
    heads: BinaryHeap<Reverse<(u64, usize)>>,
    next: Vec<Option<&'a [u8]>>,
}

impl<'a> Merged<'a> {
    /// Merges these streams.
    pub fn new(mut streams: Vec<SortedShard<'a>>) -> Self {
        let mut heads = BinaryHeap::new();
        let mut next = Vec::with_capacity(streams.len());
        for (i, stream) in streams.iter_mut().enumerate() {
            let first = stream.next();
            if let Some((time, _)) = first {
                heads.push(Reverse((time, i)));
            }
            next.push(first.map(|(_, bytes)| bytes));
        }
        Merged {
            streams,
            heads,
            next,
        }
    }
}

impl<'a> Iterator for Merged<'a> {
    type Item = (u64, &'a [u8]);

    fn next(&mut self) -> Option<(u64, &'a [u8])> {
        let Reverse((time, i)) = self.heads.pop()?;
        let record = self.next[i].take().expect("a head has a record");
        if let Some((next_time, bytes)) = self.streams[i].next() {
            self.heads.push(Reverse((next_time, i)));
            self.next[i] = Some(bytes);
        }
        Some((time, record))
    }
}

#[cfg(test)]
mod tests;
