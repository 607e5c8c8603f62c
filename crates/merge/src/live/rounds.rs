//! The live merge's ordering: records read from growing shards wait in
//! one heap, and each round sends out, in time order, those earlier than
//! the watermark less [`MARGIN_NS`], then ends the round. Ties keep shard
//! order, then file order, as the merge after the fact, so both give the
//! same records in the same order.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;

use shardrec_control::fault::Site;
use shardrec_format::layouts::{FieldReader, Layouts};
use shardrec_shard::merged_prefix::Resume;
use shardrec_shard::scan::file_name;

use super::follow::Follower;
use super::watermark::Watermark;
use crate::slices::ROUND_BYTES;

/// How far a round's cut stays behind the watermark: a record's time is
/// taken a moment before the kernel publishes it, and a vCPU can be held
/// by its host in between.
pub const MARGIN_NS: u64 = 10_000_000;

/// Resident record bytes a round reads ahead, split between the shards.
const READ_BUDGET: usize = 64 << 20;

/// Record bytes written between two releases of the shards' pages behind
/// the output from the merger's mappings.
const RELEASE_EVERY: u64 = 32 << 20;

/// Record bytes a step of the end reads, split between the shards.
const DRAIN_STEP: usize = 16 << 20;

/// Where a round's records go.
pub trait RoundSink {
    /// One whole record.
    fn put(&mut self, record: &[u8]) -> io::Result<()>;
    /// Whole records, in order: those a round writes between two
    /// FINISHED_ROUNDs, a batch at a time, so a sink can write them from
    /// where they are instead of copying each.
    fn put_all(&mut self, records: &[&[u8]]) -> io::Result<()> {
        records.iter().try_for_each(|record| self.put(record))
    }
    /// A FINISHED_ROUND.
    fn end_round(&mut self) -> io::Result<()>;
}

/// The most records a round hands its sink at once (a `writev` takes at
/// most 1024 pieces).
const BATCH: usize = 1024;

/// A record read and not yet written: where it is in its shard (which
/// its follower maps), not a copy.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    time: u64,
    shard: usize,
    seq: u64,
    offset: u64,
    len: usize,
}

/// What a round did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Round {
    /// Records written.
    pub written: u64,
    /// Shard bytes read.
    pub read: u64,
    /// The time written up to (0 before the first cut).
    pub cut: u64,
}

/// The shards followed, and the records read from them not yet written.
pub struct Rounds {
    /// The shards; those from `to_end` on are read to their end each
    /// round (their writer frees a ring only once its records are in the
    /// file), the others up to what the round is told is written.
    pub followers: Vec<Follower>,
    to_end: usize,
    pending: BinaryHeap<Reverse<Pending>>,
    seq: u64,
    watermark: Watermark,
    read_up_to: u64,
    cut: u64,
    /// Records read behind a round already written (they go out in the
    /// next one).
    pub late: u64,
    /// Rounds that wrote records (each one FINISHED_ROUND or more).
    pub rounds: u64,
    /// Bytes of the records in `pending`.
    pending_bytes: usize,
    /// Bytes written since the last FINISHED_ROUND.
    unrounded: u64,
    /// Bytes written since the shards' pages behind were last released.
    unreleased: u64,
    /// Bytes between two FINISHED_ROUNDs.
    round_bytes: u64,
    /// The most the output was behind the recording.
    pub lag: Lag,
}

/// How far a live merge's output fell behind the recording, at most.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Lag {
    /// Bytes in the shards not yet written out.
    pub bytes: u64,
    /// From a look at the rings to the round written up to it.
    pub time: std::time::Duration,
}

impl Rounds {
    /// Follows the shards of `cpus`, each read up to what its writer is
    /// known to have written, and `read_to_end`, read to their end.
    pub fn new(cpus: Vec<Follower>, read_to_end: Vec<Follower>) -> Rounds {
        let to_end = cpus.len();
        Rounds {
            followers: cpus.into_iter().chain(read_to_end).collect(),
            to_end,
            pending: BinaryHeap::new(),
            seq: 0,
            watermark: Watermark::default(),
            read_up_to: 0,
            cut: 0,
            late: 0,
            rounds: 0,
            pending_bytes: 0,
            unrounded: 0,
            unreleased: 0,
            round_bytes: ROUND_BYTES,
            lag: Lag::default(),
        }
    }

    /// One round. `written[i]` is how far shard `i` (before `to_end`) is
    /// known written, and `unwritten(i, offset)` copies its ring's bytes
    /// not written yet if they would start at that offset of the shard
    /// (see [`Follower::take_unwritten`]); `rings_read` turns what each
    /// shard has been read to into every ring's read position, and
    /// `heads` reads every ring's head, in the same order (see
    /// [`Watermark`]).
    pub fn round(
        &mut self,
        layouts: &Layouts,
        written: &[u64],
        unwritten: impl FnMut(usize, u64) -> Option<Vec<u8>>,
        rings_read: impl FnOnce(&[u64]) -> Vec<u64>,
        heads: impl FnOnce() -> Vec<u64>,
        sink: &mut impl RoundSink,
    ) -> io::Result<Round> {
        // Records wait here until the watermark passes them: while the
        // budget is full, only the shard that holds the watermark back is
        // read on, or the watermark would wait for reading that waits for
        // it (what it adds is written as soon as it is read past).
        let before: Vec<u64> = self.followers.iter().map(Follower::taken).collect();
        let most = (READ_BUDGET / self.followers.len().max(1)).clamp(1 << 20, 32 << 20);
        let only = (self.pending_bytes >= READ_BUDGET).then(|| self.holding_back(written));
        let limit = |i: usize| match only {
            Some(only) if only != Some(i) => before.get(i).copied(),
            _ => written.get(i).copied(),
        };
        let read = self.read(layouts, limit, most, false, unwritten)?;
        let taken: Vec<u64> = self.followers.iter().map(Follower::taken).collect();
        let mut round = Round {
            read,
            ..Round::default()
        };
        let read_times = self.read_times();
        if let Some(mark) = self.watermark.advance(&rings_read(&taken), &read_times) {
            round.written = self.write_until(mark.saturating_sub(MARGIN_NS), sink)?;
        }
        // How far behind the recording the output is: the bytes written
        // into the shards and not out yet.
        let unread: u64 = written
            .iter()
            .zip(&taken)
            .map(|(w, t)| w.saturating_sub(*t))
            .sum();
        let behind = unread + self.pending_bytes as u64;
        self.lag.bytes = self.lag.bytes.max(behind);
        if round.written > 0 {
            crate::data_out::injected_fault(&[Site::MergeRound])?;
        } else if self.pending_bytes > 0 {
            // Records held back by the watermark are as far behind the
            // recording as the last look at the rings it reached, though
            // no round reaches the output.
            self.note_delay();
        }
        // Read after every record taken so far: what comes later is later.
        self.watermark.note(self.read_up_to, heads());
        round.cut = self.cut;
        Ok(round)
    }

    /// For each shard read from one CPU's ring (before `to_end`), the time
    /// no record still to come from it can precede.
    fn read_times(&self) -> Vec<u64> {
        let cpus = &self.followers[..self.to_end.min(self.followers.len())];
        cpus.iter().map(Follower::time_bound).collect()
    }

    /// The CPU shard with records written and not read that was read to
    /// the earliest time: the one that holds the watermark back.
    fn holding_back(&self, written: &[u64]) -> Option<usize> {
        let times = self.read_times();
        let unread = |i: &usize| {
            written
                .get(*i)
                .is_some_and(|&w| w > self.followers[*i].taken())
        };
        (0..times.len()).filter(unread).min_by_key(|&i| times[i])
    }

    /// One round of the end, every writer done: reads on in every shard
    /// and writes what no shard can still precede, as a merge after the
    /// fact does (a shard read to its end holds nothing back; another
    /// holds back what is within its lateness of its latest time read).
    /// False once everything is written.
    pub fn drain_step(&mut self, layouts: &Layouts, sink: &mut impl RoundSink) -> io::Result<bool> {
        // Small steps: between two, the shards behind the output can be
        // freed (see `freeing`).
        let most = (DRAIN_STEP / self.followers.len().max(1)).clamp(64 << 10, 4 << 20);
        self.read(layouts, |_| None, most, true, |_, _| None)?;
        let held_back = self
            .followers
            .iter()
            .filter(|f| !f.exhausted())
            .map(|f| f.time_bound().saturating_sub(MARGIN_NS))
            .min();
        self.write_until(held_back.unwrap_or(u64::MAX), sink)?;
        Ok(held_back.is_some() || !self.pending.is_empty())
    }

    /// The end, every writer done: the rest of every shard, in order.
    pub fn drain(&mut self, layouts: &Layouts, sink: &mut impl RoundSink) -> io::Result<()> {
        while self.drain_step(layouts, sink)? {}
        Ok(())
    }

    /// A round's records reached the output (a stream may have made the
    /// writes wait for its reader): notes how long after the look at the
    /// rings that is.
    pub fn reached_output(&mut self) {
        self.note_delay();
    }

    /// The output is as far behind as the watermark's look at the rings.
    fn note_delay(&mut self) {
        if let Some(delay) = self.watermark.delay() {
            self.lag.time = self.lag.time.max(delay);
        }
    }

    /// Ends a round every `bytes` of records instead: with `-z` a round
    /// ends a compressed record, and compressing 64 KiB at a time took
    /// three times the CPU of perf's rounds (a ring's read at a time).
    pub fn with_round_bytes(mut self, bytes: u64) -> Rounds {
        self.round_bytes = bytes;
        self
    }

    /// Goes on from an output already written up to `cut` (by an earlier
    /// merger): a record earlier than it, not written yet, is late.
    pub fn written_up_to(mut self, cut: u64) -> Rounds {
        self.cut = cut;
        self
    }

    /// Every record earlier than this is written.
    pub fn cut(&self) -> u64 {
        self.cut
    }

    /// Where a merge would resume each shard now, by its file name.
    pub fn resume_points_by_name(&self) -> HashMap<String, Resume> {
        let names = self.followers.iter().map(|f| file_name(&f.path));
        names.zip(self.resume_points()).collect()
    }

    /// Where a merge would resume each shard now (in the followers'
    /// order): from its first record not written, leaving out those before
    /// what was read that are earlier than [`cut`](Self::cut) (see
    /// [`Resume`]).
    fn resume_points(&self) -> Vec<Resume> {
        let mut points: Vec<Resume> = self
            .followers
            .iter()
            .map(|f| Resume {
                start: f.taken() as usize,
                taken: f.taken() as usize,
                until: self.cut,
            })
            .collect();
        for Reverse(pending) in &self.pending {
            let point = &mut points[pending.shard];
            point.start = point.start.min(pending.offset as usize);
        }
        points
    }

    /// Takes every shard's new records into `pending`; then, for a shard
    /// read from one CPU's ring, those `unwritten` copies of its ring's
    /// bytes its writer has not written yet, given the shard's offset the
    /// copy would start at.
    fn read(
        &mut self,
        layouts: &Layouts,
        limit: impl Fn(usize) -> Option<u64>,
        most: usize,
        last: bool,
        mut unwritten: impl FnMut(usize, u64) -> Option<Vec<u8>>,
    ) -> io::Result<u64> {
        let mut fields = FieldReader::new(layouts);
        let mut total = 0;
        for (i, follower) in self.followers.iter_mut().enumerate() {
            let (pending, seq, cut) = (&mut self.pending, &mut self.seq, self.cut);
            let (read_up_to, late) = (&mut self.read_up_to, &mut self.late);
            let pending_bytes = &mut self.pending_bytes;
            let mut take = |offset, time, bytes: &[u8]| {
                *late += u64::from(time < cut);
                *read_up_to = (*read_up_to).max(time);
                *pending_bytes += bytes.len();
                pending.push(Reverse(Pending {
                    time,
                    shard: i,
                    seq: *seq,
                    offset,
                    len: bytes.len(),
                }));
                *seq += 1;
            };
            // A shard read to its end each round is read whole: its rings
            // count as read up to their tails.
            let (limit, most) = match i >= self.to_end {
                true => (None, usize::MAX >> 1),
                false => (limit(i), most),
            };
            total += follower.read(limit, most, last, &mut fields, &mut take)?;
            if i < self.to_end {
                if let Some(copy) = unwritten(i, follower.taken()) {
                    total += follower.take_unwritten(copy, &mut fields, &mut take);
                }
            }
        }
        Ok(total)
    }

    /// Writes every pending record earlier than `cut` (and every late
    /// one), then ends the round if it wrote any.
    fn write_until(&mut self, cut: u64, sink: &mut impl RoundSink) -> io::Result<u64> {
        let cut = cut.max(self.cut);
        let mut written = 0;
        let mut batch = Vec::new();
        while self
            .pending
            .peek()
            .is_some_and(|Reverse(next)| next.time < cut)
        {
            let Reverse(next) = self.pending.pop().expect("peeked");
            self.pending_bytes -= next.len;
            batch.push((next.shard, next.offset, next.len));
            written += 1;
            // Readers hold a round or two in their reorder buffer: a long
            // cut is several rounds, as the merge after the fact cuts them.
            self.unrounded += next.len as u64;
            self.unreleased += next.len as u64;
            let round_ends = self.unrounded >= self.round_bytes;
            if round_ends || batch.len() == BATCH {
                self.put_batch(&mut batch, sink)?;
            }
            if round_ends {
                sink.end_round()?;
                self.unrounded = 0;
            }
        }
        self.put_batch(&mut batch, sink)?;
        self.cut = cut;
        if self.unreleased >= RELEASE_EVERY {
            self.unreleased = 0;
            let points = self.resume_points();
            for (follower, point) in self.followers.iter().zip(points) {
                follower.release_before(point.start as u64);
            }
        }
        if written > 0 {
            if self.unrounded > 0 {
                sink.end_round()?;
                self.unrounded = 0;
            }
            self.rounds += 1;
        }
        Ok(written)
    }

    /// Hands `batch` (each record's shard, offset and length) to `sink`
    /// from where the followers hold the records, and empties it.
    fn put_batch(
        &self,
        batch: &mut Vec<(usize, u64, usize)>,
        sink: &mut impl RoundSink,
    ) -> io::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let records: Vec<&[u8]> = batch
            .iter()
            .map(|&(shard, offset, len)| self.followers[shard].record(offset, len))
            .collect();
        batch.clear();
        sink.put_all(&records)
    }
}

#[cfg(test)]
mod tests;
