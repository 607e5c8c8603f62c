//! A round's records as it took them, and the steps they go out in.
//!
//! A round normally goes out whole, as read. One that holds much more
//! than a round aims at (a merger kept off its CPU while the writers
//! spilled, or the end's rest) would hold a reader's reorder buffer as
//! large: hotspot buffered 9.6 MB of such a DWARF recording against
//! 0.73 MB of perf's own. Such a round goes out in steps of about
//! [`round_aim`] bytes, each a time cut: every shard's records up to its
//! first one past the cut, then a FINISHED_ROUND. That keeps perf's rule
//! (every record after FINISHED_ROUND k no earlier than the latest before
//! FINISHED_ROUND k-1) because a shard's records come in time order but
//! for its lateness: what a shard holds past a cut is no earlier than the
//! cut less that lateness, and each cut is past the previous one (and
//! everything written before the round) by more than it ([`Cuts`]).
//! Nothing still to come may precede a cut either: the caller bounds the
//! cuts by that.

use std::ops::Range;

use super::{Going, RoundSink};
use crate::live::follow::{Hopped, Take};

/// Record bytes a round, or a step of one, aims at with one or two
/// shards holding records. A reader holds about two rounds in its
/// reorder buffer, and perf record's rounds are its passes over the
/// rings, one each time a ring is half full (256 KiB of its default
/// 512 KiB). With 50 ms rounds, hotspot held 7.5 MB of a 10 s DWARF
/// recording at once, against 0.58 MB of perf's own file; with 256 KiB
/// rounds, 0.8 to 1.6 MB (a debug build, a busy host), over the 2×
/// perf's the tests allow; with 128 KiB, 0.49 to 0.52 MB against 0.53 to
/// 0.63 MB.
const STEP: u64 = 128 << 10;

/// Each shard holding records past two adds this to the aim, as each busy
/// ring adds to perf's passes.
const BUSY_STEP: u64 = 64 << 10;

/// Record bytes a round, or a step of one, aims at with `busy` shards
/// holding records. A fixed aim made rounds of a 16-vCPU guest come
/// every 50 ms, each with work for every ring, and large rounds cut
/// in steps with a sort of their times: more than perf's passes cost.
pub fn round_aim(busy: usize) -> u64 {
    STEP + busy.saturating_sub(2) as u64 * BUSY_STEP
}

/// One record a round took.
#[derive(Clone, Copy, Default)]
pub struct Took {
    /// Its shard offset.
    pub offset: u64,
    /// Its time, 0 if it has none.
    pub time: u64,
    pub follower: u32,
    pub len: u32,
    /// Whether it lies in a copy of its ring, not in the shard.
    pub copied: bool,
    /// How it goes out ([`super::RoundSink::take`]).
    pub out: Out,
    /// Whether it is a run of samples hopped over by their headers, not
    /// one record: its time is the last one's.
    pub hopped: bool,
}

/// How a record a round took goes out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Out {
    /// As it lies, in a run with the records around it.
    #[default]
    AsIs,
    /// Alone, as the sink changed it: the round's changed record `i`
    /// ([`RoundRecords::changed`]).
    Changed(u32),
    /// Not at all.
    Dropped,
}

impl Took {
    /// Whether it goes out before cut `cut`: a record without a time goes
    /// with the one before it.
    fn within(&self, cut: u64) -> bool {
        self.time <= cut
    }

    /// Whether `next` lies right after it, in the same place.
    fn joins(&self, next: &Took) -> bool {
        (self.follower, self.copied) == (next.follower, next.copied)
            && (self.out, next.out) == (Out::AsIs, Out::AsIs)
            && self.offset + u64::from(self.len) == next.offset
    }
}

/// The records of a round, each follower's after the one before's, each
/// in the order its shard holds them.
#[derive(Default)]
pub struct RoundRecords {
    pub took: Vec<Took>,
    /// Records taken: those in [`took`](Self::took), each run of samples
    /// hopped over counted by its samples.
    pub records: u64,
    pub bytes: u64,
    /// The followers the round took records from.
    pub busy: usize,
    /// The records the sink changed as it took them, in the order taken.
    pub changed: Vec<Vec<u8>>,
    /// The times and lengths [`cuts`](Self::cuts) sorts, kept from round
    /// to round: a large round's fresh buffer each time is fresh pages.
    times: Vec<(u64, u32)>,
}

/// The records [`RoundRecords::prepared`] has room for: a round of
/// 128 KiB holds about a thousand samples with call chains.
const TOOK_PREPARED: usize = 16 << 10;

impl RoundRecords {
    /// Room for [`TOOK_PREPARED`] records, taken before the recording.
    pub fn prepared() -> RoundRecords {
        RoundRecords {
            took: super::prepared(TOOK_PREPARED),
            ..RoundRecords::default()
        }
    }

    /// What takes follower `follower`'s records (`copied`: from a copy of
    /// its ring) as they are read, handing each to `sink` as well.
    pub fn taker<'s, S: RoundSink>(
        &'s mut self,
        follower: usize,
        copied: bool,
        sink: &'s mut S,
    ) -> Taker<'s, S> {
        Taker {
            records: self,
            follower: follower as u32,
            copied,
            sink,
        }
    }

    /// Each run of samples hopped over ([`Took::hopped`]) taken apart
    /// into its samples, each timed by `time`, where `bytes` finds a
    /// run: a round cut in steps needs every record's time.
    pub fn time_hopped<'b>(
        &mut self,
        bytes: impl Fn(&Took) -> &'b [u8],
        mut time: impl FnMut(&[u8]) -> u64,
    ) {
        if !self.took.iter().any(|t| t.hopped) {
            return;
        }
        let mut timed = Vec::with_capacity(self.took.len());
        for took in &self.took {
            if !took.hopped {
                timed.push(*took);
                continue;
            }
            let mut offset = took.offset;
            for record in super::records_of(bytes(took)) {
                let len = record.len() as u32;
                timed.push(Took {
                    offset,
                    time: time(record),
                    len,
                    hopped: false,
                    ..*took
                });
                offset += u64::from(len);
            }
        }
        self.took = timed;
    }

    pub fn clear(&mut self) {
        self.took.clear();
        self.records = 0;
        self.changed.clear();
        self.bytes = 0;
        self.busy = 0;
    }

    /// The latest time among the records `published` says are.
    pub fn latest(&self, published: impl Fn(&Took) -> bool) -> u64 {
        let times = self.took.iter().filter(|t| published(t));
        times.map(|t| t.time).max().unwrap_or(0)
    }

    /// Whether the round goes out in steps, `cuts` permitting.
    pub fn large(&self) -> bool {
        self.bytes > 2 * self.step_aim()
    }

    /// The bytes a step of this round aims at.
    fn step_aim(&self) -> u64 {
        round_aim(self.busy)
    }

    /// The cuts this round's records go out at: none if it is small, or
    /// `cuts` allows none.
    pub fn cuts(&mut self, cuts: &Cuts) -> Vec<u64> {
        if !self.large() {
            return Vec::new();
        }
        let last = cuts.bound.saturating_sub(cuts.margin);
        let aim = self.step_aim();
        let times = &mut self.times;
        times.clear();
        let within = self.took.iter().filter(|t| t.time > 0 && t.time <= last);
        times.extend(within.map(|t| (t.time, t.len)));
        times.sort_unstable();
        let (mut chosen, mut floor) = (Vec::new(), cuts.past);
        let (mut step, mut through) = (0, 0);
        for &(time, len) in times.iter() {
            step += u64::from(len);
            through += u64::from(len);
            let far_enough = time >= floor.saturating_add(cuts.margin);
            // The last step is no crumb: it ends with the round.
            let rest_large = self.bytes - through >= aim / 2;
            if step >= aim && far_enough && rest_large {
                chosen.push(time);
                floor = time;
                step = 0;
            }
        }
        chosen
    }

    /// Each follower's records: where they are in [`took`](Self::took).
    pub fn by_follower(&self) -> Vec<Range<usize>> {
        let mut ranges: Vec<Range<usize>> = Vec::new();
        for (i, took) in self.took.iter().enumerate() {
            match ranges.last_mut() {
                Some(range) if self.took[range.start].follower == took.follower => {
                    range.end = i + 1
                }
                _ => ranges.push(i..i + 1),
            }
        }
        ranges
    }

    /// The next step's records out of `left` (each follower's not yet
    /// out): those up to `cut` (all if `None`), handed to `run` in runs
    /// of records that lie one after the other in one place.
    pub fn step(&self, left: &mut [Range<usize>], cut: Option<u64>, mut run: impl FnMut(&[Took])) {
        for range in left {
            let records = &self.took[range.clone()];
            let within = records
                .iter()
                .take_while(|t| cut.is_none_or(|cut| t.within(cut)))
                .count();
            let mut records = &records[..within];
            while !records.is_empty() {
                let joined = 1
                    + (records.windows(2))
                        .take_while(|pair| pair[0].joins(&pair[1]))
                        .count();
                run(&records[..joined]);
                records = &records[joined..];
            }
            range.start += within;
        }
    }
}

/// Takes one follower's records into a round's ([`RoundRecords::taker`]).
pub struct Taker<'s, S> {
    records: &'s mut RoundRecords,
    follower: u32,
    copied: bool,
    sink: &'s mut S,
}

impl<S: RoundSink> Take for Taker<'_, S> {
    fn record(&mut self, offset: u64, time: u64, bytes: &[u8]) {
        let out = match self.sink.take(bytes) {
            Going::AsIs => Out::AsIs,
            Going::Changed(record) => {
                self.records.changed.push(record);
                Out::Changed(self.records.changed.len() as u32 - 1)
            }
            Going::Dropped => Out::Dropped,
        };
        self.push(offset, time, bytes, out, 1);
    }

    fn samples(&mut self, offset: u64, hopped: Hopped, bytes: &[u8]) {
        self.sink.hopped(hopped.samples);
        self.push(offset, hopped.last, bytes, Out::AsIs, hopped.samples);
    }
}

impl<S> Taker<'_, S> {
    fn push(&mut self, offset: u64, time: u64, bytes: &[u8], out: Out, records: u64) {
        self.records.bytes += bytes.len() as u64;
        self.records.records += records;
        self.records.took.push(Took {
            offset,
            time,
            follower: self.follower,
            len: bytes.len() as u32,
            copied: self.copied,
            out,
            // A run of one sample is timed by it.
            hopped: records > 1,
        });
    }
}

/// What a round's cuts must keep to.
pub struct Cuts {
    /// A time nothing still to come precedes (but by a shard's lateness):
    /// no cut within the margin of it.
    pub bound: u64,
    /// Every cut comes at least the margin past this and the cut before:
    /// the latest time written before this round. The first cut too, not
    /// only past the last FINISHED_ROUND's latest: rounds that ended with
    /// no FINISHED_ROUND since (their looks not covered) may have written
    /// records read after the look this round covers, and with one of
    /// them before a cut, the FINISHED_ROUND that ends this round would
    /// let records published after that look, but earlier than it,
    /// follow (1,378 of 6,000 samples out of perf's order once, in a
    /// recording whose writers spilled past a stalled merger).
    pub past: u64,
    /// The shards' lateness and more.
    pub margin: u64,
}
