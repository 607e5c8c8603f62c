//! The live merge's rounds, as perf record makes them: each round takes
//! what every shard (or its ring) holds past what went out, in shard
//! order, without sorting, and a FINISHED_ROUND closes it once what went
//! out covers a look at the rings' heads ([`Looks`]). That is the order
//! perf's readers need (tools/perf/util/ordered-events.c): every record
//! after FINISHED_ROUND k is no earlier than the latest record before
//! FINISHED_ROUND k-1. The records go out as runs, a shard's bytes as
//! they lie in its mapping, not one by one; each record is walked once,
//! by its header, for the shard's summary and the build ids, but for the
//! runs of samples a follower hops over ([`Follower::hopping`]), taken as
//! one piece each.

mod looks;
mod steps;

use std::io;

use shardrec_control::fault::Site;
use shardrec_format::header::{RecordHeader, RecordType};
use shardrec_format::layouts::{FieldReader, Layouts};
use shardrec_shard::merged_prefix::Resume;

use super::follow::Follower;
use crate::data_out::{Going, RoundSink};
use crate::report::Lag;
use looks::Looks;
pub use steps::round_aim;
use steps::{Cuts, Out, RoundRecords, Took};

/// Resident record bytes a round reads, split between the shards.
const READ_BUDGET: usize = 64 << 20;

/// Record bytes written between two releases of the shards' pages behind
/// the output from the merger's mappings.
const RELEASE_EVERY: u64 = 32 << 20;

/// Record bytes a step of the end reads, split between the shards.
const DRAIN_STEP: usize = 16 << 20;

/// The room for a round's copies of the rings that [`Rounds::new`]
/// takes at once, before the recording: a round aims at 128 KiB, and a
/// fresh page taken during a round cost about 0.15 ms in a 16-vCPU
/// guest, where the copy buffers' first use was a sixth of the merger's
/// samples. One buffer for every ring: one per ring each grew to its
/// own largest copy.
const COPIES_PREPARED: usize = 2 << 20;

/// Bytes a round copies from the rings it reads first, at most (and
/// then the one copy that passes it): the rest waits for the next round
/// or is spilled by the writers.
pub const ROUND_COPY_BUDGET: u64 = 64 << 20;

/// The copies' buffer is reserved this large (the budget and one
/// default 4 MiB ring's copy past it) from the start, its pages
/// taken only as deep as a round's copies reach: grown by doubling (2,
/// 4, ... 64 MiB, each copied into the next), the fresh pages of a
/// 64-vCPU guest's merger were 9% of shardrec's own samples.
const COPIES_RESERVED: usize = ROUND_COPY_BUDGET as usize + (4 << 20);

/// How far a round's time cuts keep from what they must follow or
/// precede, past the shards' lateness: a record's time is taken just
/// before it is published, microseconds at most.
const CUT_MARGIN: u64 = 1_000_000;

/// How far before the latest record published before a look the cuts
/// stay, for records published after it: a vCPU the host takes away
/// between a record's time and its publication publishes it late. With
/// no more than [`CUT_MARGIN`], recordings beside two spinners on a
/// 2-vCPU VM had 3 and 112 records out of perf's order, in 2 of 16.
const LOOK_MARGIN: u64 = 10_000_000;

/// What a round did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Round {
    /// Records written.
    pub written: u64,
}

/// Where a round finds a CPU ring's bytes its writer has not written
/// ([`Rounds::round`]'s `unwritten`).
pub enum Unwritten<'r> {
    /// Appended to the buffer it was handed, a copy.
    Copied,
    /// In the ring's mapping itself, which nothing writes over until the
    /// round returns (the live merger's claim on them, `shardrec_sys::ring`):
    /// they go out from there, copied only into the output.
    InPlace(&'r [u8]),
}

/// The shards followed, and where perf's round rule stands.
pub struct Rounds {
    /// The shards; those from `to_end` on are read to their end each
    /// round (their writer frees a ring only once its records are in the
    /// file), the others up to what the round is told is written.
    pub followers: Vec<Follower>,
    to_end: usize,
    looks: Looks,
    /// Where each CPU's shard begins in its ring, as the last round saw.
    cpu_bases: Vec<u64>,
    order: RoundOrder,
    /// Records that broke perf's round rule (they should not): perf
    /// counts each as an out-of-order event.
    pub late: u64,
    /// Rounds that wrote records.
    pub rounds: u64,
    /// Whether the last thing written ends a round that covered a look at
    /// the rings: the output can be taken up from there.
    at_round_end: bool,
    /// Bytes written since the shards' pages behind were last released.
    unreleased: u64,
    /// The most the output was behind the recording.
    pub lag: Lag,
    /// What the round being made took.
    records: RoundRecords,
    /// The round's copies of the rings' unwritten bytes, one after the
    /// other; each follower knows where its own lie.
    copies: Vec<u8>,
}

/// The latest times around the FINISHED_ROUNDs written: what perf's rule
/// holds the next records to.
#[derive(Default)]
struct RoundOrder {
    /// The latest time before the FINISHED_ROUND before last: no record
    /// may now be earlier.
    floor: u64,
    /// The latest time before the last FINISHED_ROUND.
    at_last_round: u64,
    /// The latest time written.
    latest: u64,
}

impl RoundOrder {
    /// A record of `time` (0: none) goes out: whether it breaks the rule.
    fn put(&mut self, time: u64) -> bool {
        self.latest = self.latest.max(time);
        time > 0 && time < self.floor
    }

    fn end_round(&mut self) {
        self.floor = self.at_last_round;
        self.at_last_round = self.latest;
    }
}

/// A run of records that lie one after the other in one follower (its
/// shard, or a copy of its ring): its offset and length.
#[derive(Clone, Copy)]
struct Run {
    follower: usize,
    offset: u64,
    len: usize,
    /// How its records go out.
    out: Out,
}

impl Rounds {
    /// Follows the shards of `cpus`, each read up to what its writer is
    /// known to have written, and `read_to_end`, read to their end.
    pub fn new(cpus: Vec<Follower>, read_to_end: Vec<Follower>) -> Rounds {
        let to_end = cpus.len();
        Rounds {
            followers: cpus.into_iter().chain(read_to_end).collect(),
            to_end,
            looks: Looks::default(),
            cpu_bases: Vec::new(),
            order: RoundOrder::default(),
            late: 0,
            rounds: 0,
            at_round_end: true,
            unreleased: 0,
            lag: Lag::default(),
            records: RoundRecords::prepared(),
            copies: prepared_within(COPIES_PREPARED, COPIES_RESERVED),
        }
    }

    /// One round. `heads` reads every ring's head, first: the look this
    /// round's FINISHED_ROUND must cover. Then every shard's new records
    /// go out: `written[i]` is how far shard `i` (before `to_end`) is
    /// known written, and `unwritten(i, offset, into)` finds its ring's
    /// bytes not written yet if they would start at that offset of the
    /// shard: appended to `into`, or in place ([`Unwritten`]; see
    /// [`Follower::take_copy`]). `rings_read` turns what each
    /// shard has been read to into every ring's read position, in the
    /// order of the heads.
    pub fn round<'r>(
        &mut self,
        layouts: &Layouts,
        written: &[u64],
        unwritten: impl FnMut(usize, u64, &mut Vec<u8>) -> Option<Unwritten<'r>>,
        rings_read: impl FnOnce(&[u64]) -> Vec<u64>,
        heads: impl FnOnce() -> Vec<u64>,
        sink: &mut impl RoundSink,
    ) -> io::Result<Round> {
        self.looks.look(heads());
        let most = (READ_BUDGET / self.followers.len().max(1)).clamp(1 << 20, 32 << 20);
        let limit = |i: usize| written.get(i).copied();
        let in_place = self.read_out(layouts, limit, (most, false), unwritten, sink)?;
        let taken: Vec<u64> = self.followers.iter().map(Follower::taken).collect();
        let positions = rings_read(&taken);
        // Where each CPU's shard begins in its ring, for the end's rounds.
        self.cpu_bases = (positions.iter().zip(&taken).take(self.to_end))
            .map(|(position, taken)| position.wrapping_sub(*taken))
            .collect();
        let covered = self.looks.covered(&positions);
        if let Some(delay) = covered {
            self.lag.time = self.lag.time.max(delay);
        }
        // Everything published before the look covered was read, and what
        // was published after it is no earlier (that look may be older
        // than this round's: records published since may still be
        // unread, and earlier than this round's latest).
        let large = covered.is_some() && self.records.large();
        if large {
            self.time_hopped(layouts, &in_place);
        }
        let bound = large.then(|| {
            let latest = self.published_before(self.looks.covered_heads());
            latest.saturating_sub(LOOK_MARGIN)
        });
        let records = self.write_out(bound, sink, &in_place)?;
        self.close_round(covered.is_some(), records, sink)?;
        // How far behind the recording the output is: the bytes written
        // into the shards and not out yet.
        let unread: u64 = written
            .iter()
            .zip(&taken)
            .map(|(w, t)| w.saturating_sub(*t))
            .sum();
        self.lag.bytes = self.lag.bytes.max(unread);
        if records > 0 {
            crate::data_out::injected_fault(&[Site::MergeRound])?;
        }
        Ok(Round { written: records })
    }

    /// After a round that wrote `records`: a FINISHED_ROUND if the round
    /// covered a look at the rings taken since the last one, as perf's
    /// rule needs (the records before the last FINISHED_ROUND were all
    /// read before that look, so anything still to come was published
    /// after every one of them).
    fn close_round(
        &mut self,
        covered: bool,
        records: u64,
        sink: &mut impl RoundSink,
    ) -> io::Result<()> {
        if records > 0 {
            self.at_round_end = false;
        }
        if !covered || self.at_round_end {
            return Ok(());
        }
        sink.end_round()?;
        self.order.end_round();
        self.looks.round_ended();
        self.at_round_end = true;
        self.rounds += 1;
        Ok(())
    }

    /// Whether the output ends with a FINISHED_ROUND that covered a look
    /// at the rings: a merge can go on from here ([`resume_points`](Self::resume_points)).
    pub fn at_round_end(&self) -> bool {
        self.at_round_end
    }

    /// One step of the end, every writer done: reads on in every shard
    /// and writes what it read, then a FINISHED_ROUND (nothing can come
    /// after it that is earlier than what the shards still hold, which
    /// their writers wrote before the stop). False once everything is
    /// written.
    pub fn drain_step(&mut self, layouts: &Layouts, sink: &mut impl RoundSink) -> io::Result<bool> {
        // Small steps: between two, the shards behind the output can be
        // freed (see `freeing`).
        let most = (DRAIN_STEP / self.followers.len().max(1)).clamp(64 << 10, 4 << 20);
        let no_copies = |_, _, _: &mut Vec<u8>| None;
        self.read_out(layouts, |_| None, (most, true), no_copies, sink)?;
        // Only the shards' rest is still to come: each no earlier than
        // what it held last, but for its lateness.
        let behind = self.followers.iter().filter(|f| f.more_written());
        let bound = behind.map(Follower::time_bound).min().unwrap_or(u64::MAX);
        if self.records.large() {
            self.time_hopped(layouts, &[]);
        }
        let records = self.write_out(Some(bound), sink, &[])?;
        // Looks taken while recording that the output has not covered yet
        // end rounds as it does (the side band, its VIP done and its shard
        // read whole, covers them all); the end ends one anyway.
        let more = self.followers.iter().any(|f| !f.exhausted());
        let read = self.rings_read_at_end();
        let covered = self.looks.covered(&read).is_some();
        self.close_round(covered || !more, records, sink)?;
        Ok(more)
    }

    /// The latest time of the round's records published before the look
    /// whose heads were `heads`: those of a CPU's ring that lie before
    /// its head then (the rest follow, their times no earlier).
    fn published_before(&self, heads: &[u64]) -> u64 {
        let bases = &self.cpu_bases;
        self.records.latest(|took| {
            let i = took.follower as usize;
            let end = took.offset + u64::from(took.len);
            let at = bases.get(i).map(|base| base.wrapping_add(end));
            at.zip(heads.get(i)).is_some_and(|(at, head)| at <= *head)
        })
    }

    /// Each ring's read position once every writer is done: a CPU's ring
    /// where its shard is read to, the side band's past every head.
    fn rings_read_at_end(&self) -> Vec<u64> {
        let rings = self.looks.rings().unwrap_or(0);
        let cpu = |i: usize| {
            let base = self.cpu_bases.get(i)?;
            Some(base.wrapping_add(self.followers.get(i)?.taken()))
        };
        (0..rings).map(|i| cpu(i).unwrap_or(u64::MAX)).collect()
    }

    /// The end, every writer done: the rest of every shard.
    pub fn drain(&mut self, layouts: &Layouts, sink: &mut impl RoundSink) -> io::Result<()> {
        while self.drain_step(layouts, sink)? {}
        Ok(())
    }

    /// A round's records reached the output (a stream may have made the
    /// writes wait for its reader).
    pub fn reached_output(&mut self) {
        if let Some(delay) = self.looks.delay() {
            self.lag.time = self.lag.time.max(delay);
        }
    }

    /// Goes on from an output an earlier merger wrote: `cut` the latest
    /// time before its last FINISHED_ROUND (nothing earlier may follow
    /// this merger's first), `latest` the latest it wrote at all (its
    /// checkpoint may fall inside a round).
    pub fn written_up_to(mut self, cut: u64, latest: u64) -> Rounds {
        self.order = RoundOrder {
            floor: 0,
            at_last_round: cut,
            latest: latest.max(cut),
        };
        self
    }

    /// The latest time written.
    pub fn latest(&self) -> u64 {
        self.order.latest
    }

    /// The latest time before the last FINISHED_ROUND. A live merger
    /// that takes the output up holds what follows its first round to
    /// it. A merge after the fact that does (after `kill -9`) sorts what
    /// is left, and ends its first round only past [`latest`](Self::latest):
    /// a checkpoint inside a round may follow one shard's records later
    /// than another's still to merge (a writer kept off its CPU), which
    /// must all come before that round's end.
    pub fn cut(&self) -> u64 {
        self.order.at_last_round
    }

    /// Where a merge would resume each shard now, in the followers'
    /// order: from the first record not written (everything before it
    /// is).
    pub fn resume_points(&self) -> impl Iterator<Item = Resume> + '_ {
        self.followers.iter().map(|f| Resume {
            start: f.taken() as usize,
            taken: f.taken() as usize,
            until: self.cut(),
        })
    }

    /// Reads every shard's new records into [`records`](Self::records),
    /// each shard up to `limit(i)` (its end if `None`), at most `most`
    /// bytes (`last`: its writer is done), and for a shard read from one
    /// CPU's ring (before `to_end`), what `unwritten` finds of its ring
    /// past that. `sink` takes each record as it is read. Returns the
    /// ring bytes found in place, by follower (empty where none were).
    fn read_out<'r>(
        &mut self,
        layouts: &Layouts,
        limit: impl Fn(usize) -> Option<u64>,
        (most, last): (usize, bool),
        mut unwritten: impl FnMut(usize, u64, &mut Vec<u8>) -> Option<Unwritten<'r>>,
        sink: &mut impl RoundSink,
    ) -> io::Result<Vec<&'r [u8]>> {
        let mut fields = FieldReader::new(layouts);
        self.records.clear();
        let mut in_place = vec![&[][..]; self.to_end];
        for (i, follower) in self.followers.iter_mut().enumerate() {
            let took_before = self.records.took.len();
            // A shard read to its end each round is read whole.
            let (limit, most) = match i >= self.to_end {
                true => (None, usize::MAX >> 1),
                false => (limit(i), most),
            };
            follower.read(
                limit,
                most,
                last,
                &mut fields,
                &mut self.records.taker(i, false, sink),
            )?;
            let before = self.copies.len();
            let found = match i < self.to_end {
                true => unwritten(i, follower.taken(), &mut self.copies),
                false => None,
            };
            let copy = match found {
                Some(Unwritten::Copied) => Some((&self.copies[..], before..self.copies.len())),
                Some(Unwritten::InPlace(bytes)) => {
                    in_place[i] = bytes;
                    Some((bytes, 0..bytes.len()))
                }
                None => None,
            };
            if let Some(copy) = copy {
                follower.take_copy(copy, &mut fields, &mut self.records.taker(i, true, sink));
            }
            self.records.busy += usize::from(self.records.took.len() > took_before);
        }
        Ok(in_place)
    }

    /// Writes out what the round took: whole, or, if it is large, in
    /// steps cut at times up to `bound` (see [`steps`]; `None`: not
    /// cut), each but the last ended by a FINISHED_ROUND; the rings'
    /// bytes from `in_place`, by follower, where they are there. Returns
    /// the records written.
    fn write_out(
        &mut self,
        bound: Option<u64>,
        sink: &mut impl RoundSink,
        in_place: &[&[u8]],
    ) -> io::Result<u64> {
        let cuts = bound.map_or_else(Vec::new, |bound| {
            let margin = self.followers.iter().map(|f| f.summary.lateness).max();
            self.records.cuts(&Cuts {
                bound,
                past: self.order.latest,
                margin: margin.unwrap_or(0) + CUT_MARGIN,
            })
        });
        let mut left = self.records.by_follower();
        for cut in cuts.into_iter().map(Some).chain([None]) {
            let mut runs = Vec::new();
            let (order, late) = (&mut self.order, &mut self.late);
            self.records.step(&mut left, cut, |run: &[Took]| {
                for took in run {
                    *late += u64::from(order.put(took.time));
                }
                runs.push(Run {
                    follower: run[0].follower as usize,
                    offset: run[0].offset,
                    len: run.iter().map(|t| t.len as usize).sum(),
                    out: run[0].out,
                });
            });
            self.put_runs(&runs, sink, in_place)?;
            if cut.is_some() {
                sink.end_round()?;
                self.order.end_round();
                self.rounds += 1;
            }
        }
        self.followers.iter_mut().for_each(Follower::forget_copy);
        self.copies.clear();
        self.release_behind(self.records.bytes);
        Ok(self.records.records)
    }

    /// A round that goes out in steps needs each record's time: its runs
    /// of samples hopped over are taken apart and timed.
    fn time_hopped(&mut self, layouts: &Layouts, in_place: &[&[u8]]) {
        let mut fields = FieldReader::new(layouts);
        let (followers, copies) = (&self.followers, &self.copies[..]);
        self.records.time_hopped(
            |took| {
                let (i, len) = (took.follower as usize, took.len as usize);
                followers[i].record(took.offset, len, held(copies, in_place, i))
            },
            |sample| fields.time(sample, RecordType::SAMPLE).unwrap_or(0),
        );
    }

    /// Hands `runs` to `sink` from where the followers hold them: those
    /// that go out as they lie as pieces of one write, the others record
    /// by record.
    fn put_runs(
        &self,
        runs: &[Run],
        sink: &mut impl RoundSink,
        in_place: &[&[u8]],
    ) -> io::Result<()> {
        let mut pieces: Vec<&[u8]> = Vec::new();
        for run in runs {
            // A writev takes at most 1024 pieces.
            if run.out != Out::AsIs || pieces.len() == 1024 {
                put_pieces(&mut pieces, sink)?;
            }
            match run.out {
                Out::AsIs => pieces.push(self.followers[run.follower].record(
                    run.offset,
                    run.len,
                    held(&self.copies, in_place, run.follower),
                )),
                Out::Changed(i) => sink.put_changed(&self.records.changed[i as usize])?,
                Out::Dropped => {}
            }
        }
        put_pieces(&mut pieces, sink)
    }

    /// After `bytes` more went out: every [`RELEASE_EVERY`], the pages
    /// behind the output leave the merger's mappings.
    fn release_behind(&mut self, bytes: u64) {
        self.unreleased += bytes;
        if self.unreleased < RELEASE_EVERY {
            return;
        }
        self.unreleased = 0;
        for follower in &self.followers {
            follower.release_before(follower.taken());
        }
    }
}

/// Where follower `i`'s copy of its ring lies this round: in place, or
/// in the round's `copies`.
fn held<'a>(copies: &'a [u8], in_place: &[&'a [u8]], i: usize) -> &'a [u8] {
    match in_place.get(i) {
        Some(bytes) if !bytes.is_empty() => bytes,
        _ => copies,
    }
}

/// Hands `pieces` to `sink` as runs, if there are any, and empties them.
fn put_pieces(pieces: &mut Vec<&[u8]>, sink: &mut impl RoundSink) -> io::Result<()> {
    if pieces.is_empty() {
        return Ok(());
    }
    sink.put_runs(pieces)?;
    pieces.clear();
    Ok(())
}

/// An empty buffer with room for `items`, its pages already taken (each
/// written once: zeroed memory from the allocator may not be mapped yet),
/// so that filling it later takes no page faults.
pub(super) fn prepared<T: Default + Clone>(items: usize) -> Vec<T> {
    prepared_within(items, items)
}

/// A buffer with room for `reserved` items, of which the first `items`
/// are written once (see [`prepared`]); the rest stays untouched until
/// used.
fn prepared_within<T: Default + Clone>(items: usize, reserved: usize) -> Vec<T> {
    let mut buffer = Vec::with_capacity(reserved.max(items));
    buffer.resize(items, T::default());
    buffer.clear();
    buffer
}

/// The whole records of `run`, one after the other (a run a follower
/// handed out: whole records, validated as they were read).
pub fn records_of(run: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let header = RecordHeader::parse(run.get(at..)?)?;
        let record = run.get(at..at + usize::from(header.size))?;
        at += record.len();
        Some(record)
    })
}

#[cfg(test)]
mod tests;
