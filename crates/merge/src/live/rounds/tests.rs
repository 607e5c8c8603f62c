//! The live merge's rounds on shards made here and grown by hand, no
//! kernel needed: records as they lie, a round ended only once a look at
//! the rings is covered, a ring's unwritten records, a record that breaks
//! perf's rule, a record cut while its writer is still writing it.

use std::io::{self, Write};
use std::path::PathBuf;

use shardrec_format::header::RecordHeader;
use shardrec_format::header::RecordType;
use shardrec_format::layouts::Layouts;
use shardrec_format::records::comm;
use shardrec_format::sample_id::{ADDR, IDENTIFIER, PERIOD, TID, TIME};
use shardrec_format::views::Comm;
use shardrec_format::{SampleId, SampleIdLayout};

use super::{records_of, Going, RoundSink, Rounds, Unwritten};
use crate::live::follow::Follower;

const ID: u64 = 7;
const MS: u64 = 1_000_000;

/// The event's `sample_type`: its samples are 48 bytes long, as its
/// COMM records are.
const SAMPLE_TYPE: u64 = IDENTIFIER | TID | TIME | ADDR | PERIOD;

fn layouts() -> Layouts {
    Layouts::from([(ID, SampleIdLayout::new(SAMPLE_TYPE))])
}

/// A COMM record of task `tid` at `time`.
fn record(time: u64, tid: u32) -> Vec<u8> {
    let layout = SampleIdLayout::new(SAMPLE_TYPE);
    let sample_id = SampleId {
        pid: 1,
        tid,
        time,
        id: ID,
        ..SampleId::default()
    };
    comm(1, tid, b"task", 0)
        .finish(&layout, &sample_id)
        .unwrap()
}

/// A sample of task `tid` at `time`, of event `id`.
fn sample_of(id: u64, time: u64, tid: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    RecordHeader {
        type_: RecordType::SAMPLE,
        misc: 0,
        size: 48,
    }
    .write_to(&mut bytes);
    for field in [id, u64::from(tid) << 32 | 1, time, 0xdead_0000, 1] {
        bytes.extend_from_slice(&field.to_ne_bytes());
    }
    bytes
}

/// A sample of task `tid` at `time`.
fn sample(time: u64, tid: u32) -> Vec<u8> {
    sample_of(ID, time, tid)
}

/// Shard files in a directory of the test's own, removed on drop.
struct Shards(PathBuf);

impl Shards {
    fn new(name: &str, count: usize) -> Shards {
        let dir =
            std::env::temp_dir().join(format!("shardrec-rounds-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        for i in 0..count {
            std::fs::write(dir.join(format!("{i}.shard")), b"").unwrap();
        }
        Shards(dir)
    }

    fn path(&self, i: usize) -> PathBuf {
        self.0.join(format!("{i}.shard"))
    }

    /// Appends `bytes` to shard `i`; its new length.
    fn append(&self, i: usize, bytes: &[u8]) -> u64 {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(self.path(i))
            .unwrap();
        file.write_all(bytes).unwrap();
        file.metadata().unwrap().len()
    }

    fn len(&self, i: usize) -> u64 {
        std::fs::metadata(self.path(i)).unwrap().len()
    }

    fn rounds(&self, count: usize) -> Rounds {
        let followers = (0..count).map(|i| Follower::open(&self.path(i))).collect();
        Rounds::new(followers, Vec::new())
    }

    /// [`rounds`](Self::rounds) hopping over runs of samples.
    fn hopping(&self, count: usize) -> Rounds {
        let follow = |i| Follower::open(&self.path(i)).unindexed().hopping();
        Rounds::new((0..count).map(follow).collect(), Vec::new())
    }
}

impl Drop for Shards {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What went out: (time, tid) of each record, and `None` for a round's end.
#[derive(Default)]
struct Out {
    went: Vec<Option<(u64, u32)>>,
    /// The runs handed over.
    runs: usize,
    /// The samples hopped over.
    hopped: u64,
}

impl RoundSink for Out {
    fn take(&mut self, _: &[u8]) -> Going {
        Going::AsIs
    }

    fn put_runs(&mut self, runs: &[&[u8]]) -> io::Result<()> {
        self.runs += runs.len();
        for record in runs.iter().flat_map(|run| records_of(run)) {
            let type_ = RecordHeader::parse(record).unwrap().type_;
            let layout = SampleIdLayout::new(SAMPLE_TYPE);
            let id = layout.parse(record, type_).unwrap();
            if type_ == RecordType::COMM {
                assert_eq!(Comm::parse(record).unwrap().tid, id.tid);
            }
            self.went.push(Some((id.time, id.tid)));
        }
        Ok(())
    }

    fn hopped(&mut self, samples: u64) {
        self.hopped += samples;
    }

    fn put_changed(&mut self, _: &[u8]) -> io::Result<()> {
        Err(io::Error::other(
            "every record of these rounds goes out as it lies",
        ))
    }

    fn end_round(&mut self) -> io::Result<()> {
        self.went.push(None);
        Ok(())
    }
}

impl Out {
    fn records(&self) -> Vec<(u64, u32)> {
        self.went.iter().flatten().copied().collect()
    }
}

/// A round in which every shard is written to its end and is its own
/// ring, whose head is `heads` (its length where `None`).
fn round(rounds: &mut Rounds, shards: &Shards, heads: &[Option<u64>], out: &mut Out) {
    round_copying(rounds, shards, (heads, &[], &[]), out);
}

/// Each ring's head (if not the shard's end), its bytes not written (if
/// any), and whether those are handed over in place.
type RingsNow<'a> = (&'a [Option<u64>], &'a [Option<&'a [u8]>], &'a [bool]);

/// [`round`], the rings also holding `unwritten[i]` (if any) past what
/// their writers wrote, handed to the merge (its head then the shard's
/// length and that copy's): in place where `in_place[i]`, else copied.
fn round_copying(
    rounds: &mut Rounds,
    shards: &Shards,
    (heads, unwritten, in_place): RingsNow,
    out: &mut Out,
) {
    let lens: Vec<u64> = (0..heads.len()).map(|i| shards.len(i)).collect();
    let copy = |i: usize| unwritten.get(i).copied().flatten();
    let heads: Vec<u64> = (0..heads.len())
        .map(|i| heads[i].unwrap_or(lens[i] + copy(i).map_or(0, |c| c.len() as u64)))
        .collect();
    let copied = |i: usize, at: u64, into: &mut Vec<u8>| {
        let copy = copy(i).filter(|_| at == lens[i])?;
        if in_place.get(i) == Some(&true) {
            return Some(Unwritten::InPlace(copy));
        }
        into.extend_from_slice(copy);
        Some(Unwritten::Copied)
    };
    rounds
        .round(
            &layouts(),
            &lens,
            copied,
            |taken| taken.to_vec(),
            || heads,
            out,
        )
        .unwrap();
}

fn shard_bytes(times: &[u64], tid: u32) -> Vec<u8> {
    times.iter().flat_map(|&t| record(t, tid)).collect()
}

fn samples(times: &[u64], tid: u32) -> Vec<u8> {
    times.iter().flat_map(|&t| sample(t, tid)).collect()
}

#[test]
fn records_go_out_as_they_lie_a_run_per_shard_and_the_round_ends() {
    let shards = Shards::new("as-they-lie", 2);
    let mut rounds = shards.rounds(2);
    let mut out = Out::default();
    shards.append(0, &shard_bytes(&[300 * MS, 100 * MS, 200 * MS], 1));
    shards.append(1, &shard_bytes(&[150 * MS, 250 * MS], 2));
    round(&mut rounds, &shards, &[None, None], &mut out);
    assert_eq!(
        out.went,
        [
            Some((300 * MS, 1)),
            Some((100 * MS, 1)),
            Some((200 * MS, 1)),
            Some((150 * MS, 2)),
            Some((250 * MS, 2)),
            None
        ],
        "not sorted: perf's rounds need no order inside a round"
    );
    assert_eq!(out.runs, 2, "one run per shard, not one per record");
    assert_eq!((rounds.rounds, rounds.late), (1, 0));
    assert!(rounds.at_round_end());
}

#[test]
fn a_quiet_shard_does_not_hold_the_rounds_back() {
    let shards = Shards::new("quiet", 2);
    let mut rounds = shards.rounds(2);
    let mut out = Out::default();
    shards.append(0, &shard_bytes(&[100 * MS, 200 * MS], 1));
    // Shard 1 never gets a record: its ring's head stays where it is read.
    round(&mut rounds, &shards, &[None, Some(0)], &mut out);
    assert_eq!(out.went, [Some((100 * MS, 1)), Some((200 * MS, 1)), None]);
    round(&mut rounds, &shards, &[None, Some(0)], &mut out);
    assert_eq!(out.went.len(), 3, "nothing new, no round");
}

#[test]
fn a_ring_its_writer_has_not_written_ends_no_round_until_it_is_read() {
    let shards = Shards::new("behind", 2);
    let mut rounds = shards.rounds(2);
    let mut out = Out::default();
    shards.append(0, &shard_bytes(&[100 * MS, 200 * MS], 1));
    // Ring 1 holds 48 bytes its writer has not written (nor are they
    // copied): the look is not covered, the round stays open.
    round(&mut rounds, &shards, &[None, Some(48)], &mut out);
    assert_eq!(out.went, [Some((100 * MS, 1)), Some((200 * MS, 1))]);
    assert!(!rounds.at_round_end(), "no checkpoint inside a round");
    // A checkpoint here holds ring 0 up to 200 ms and ring 1 not at all:
    // a merge that takes the output up ends no round before 200 ms.
    assert_eq!((rounds.cut(), rounds.latest()), (0, 200 * MS));
    // Its writer writes them, the second record only in part so far.
    let early = shard_bytes(&[150 * MS], 2);
    assert_eq!(early.len(), 48);
    shards.append(1, &[early.clone(), early[..16].to_vec()].concat());
    round(&mut rounds, &shards, &[None, Some(96)], &mut out);
    assert_eq!(
        out.went[2..],
        [Some((150 * MS, 2)), None],
        "the first look is covered: the round ends; the record cut at the end of what is written waits"
    );
    shards.append(1, &early[16..]);
    round(&mut rounds, &shards, &[None, None], &mut out);
    assert_eq!(out.went[4..], [Some((150 * MS, 2)), None]);
    rounds.drain(&layouts(), &mut out).unwrap();
    assert_eq!(out.records().len(), 4);
    assert!(rounds.followers.iter().all(|f| f.summary.damage.is_none()));
}

#[test]
fn a_rings_unwritten_records_go_out_from_a_copy_and_once() {
    rings_unwritten_records_go_out_once("copied", &[false, false]);
}

#[test]
fn a_rings_unwritten_records_go_out_in_place_and_once() {
    rings_unwritten_records_go_out_once("in-place", &[false, true]);
}

#[test]
fn one_ring_copied_and_one_in_place_go_out_in_one_round() {
    let shards = Shards::new("copied-and-in-place", 2);
    let mut rounds = shards.rounds(2);
    let mut out = Out::default();
    let (copied, in_place) = (shard_bytes(&[120 * MS], 1), shard_bytes(&[130 * MS], 2));
    let rings = [Some(&copied[..]), Some(&in_place[..])];
    round_copying(
        &mut rounds,
        &shards,
        (&[None, None], &rings, &[false, true]),
        &mut out,
    );
    assert_eq!(out.records(), [(120 * MS, 1), (130 * MS, 2)]);
}

fn rings_unwritten_records_go_out_once(name: &str, in_place: &[bool]) {
    let shards = Shards::new(name, 2);
    let mut rounds = shards.rounds(2);
    let mut out = Out::default();
    shards.append(0, &shard_bytes(&[100 * MS, 200 * MS], 1));
    // Ring 1 holds a record its writer has not written: the merge takes
    // it, and the round ends without waiting for the writer.
    let unwritten = shard_bytes(&[150 * MS], 2);
    let rings = [None, Some(&unwritten[..])];
    for _ in 0..3 {
        let round = (&[None, None][..], &rings[..], in_place);
        round_copying(&mut rounds, &shards, round, &mut out);
    }
    assert_eq!(
        out.went,
        [
            Some((100 * MS, 1)),
            Some((200 * MS, 1)),
            Some((150 * MS, 2)),
            None
        ],
    );
    // The writer writes it: read past, not taken again.
    shards.append(1, &unwritten);
    shards.append(1, &shard_bytes(&[310 * MS], 2));
    round(&mut rounds, &shards, &[None, None], &mut out);
    rounds.drain(&layouts(), &mut out).unwrap();
    assert_eq!(out.records().last(), Some(&(310 * MS, 2)));
    assert_eq!(out.records().len(), 4);
    assert!(rounds.followers.iter().all(|f| f.summary.damage.is_none()));
}

#[test]
fn a_record_earlier_than_perfs_rule_allows_is_counted_and_written() {
    let shards = Shards::new("late", 2);
    let mut rounds = shards.rounds(2);
    let mut out = Out::default();
    for time in [100, 200, 300] {
        shards.append(0, &shard_bytes(&[time * MS], 1));
        round(&mut rounds, &shards, &[None, None], &mut out);
    }
    // After the third round, records must be no earlier than the latest
    // before the second (200 ms): 250 ms is fine, 150 ms is not.
    shards.append(1, &shard_bytes(&[250 * MS, 150 * MS], 2));
    round(&mut rounds, &shards, &[None, None], &mut out);
    assert_eq!(rounds.late, 1);
    assert_eq!(out.records().len(), 5, "written all the same");
}

#[test]
fn the_end_ends_a_round_after_the_rest_of_every_shard() {
    let shards = Shards::new("end", 3);
    let mut rounds = shards.rounds(3);
    let mut out = Out::default();
    shards.append(2, &shard_bytes(&[5 * MS, 5 * MS], 3));
    shards.append(0, &shard_bytes(&[5 * MS], 1));
    shards.append(1, &shard_bytes(&[MS, 5 * MS], 2));
    rounds.drain(&layouts(), &mut out).unwrap();
    assert_eq!(out.records().len(), 5);
    assert_eq!(out.went.last(), Some(&None), "a round ends the data");
    assert_eq!(
        out.went.iter().filter(|r| r.is_none()).count(),
        1,
        "one round"
    );
}

#[test]
fn a_record_cut_short_when_the_writer_is_done_is_damage() {
    let shards = Shards::new("torn", 1);
    let mut rounds = shards.rounds(1);
    let mut out = Out::default();
    let bytes = shard_bytes(&[MS, 2 * MS], 1);
    shards.append(0, &bytes[..bytes.len() - 8]);
    rounds.drain(&layouts(), &mut out).unwrap();
    assert_eq!(out.records(), [(MS, 1)]);
    let damage = rounds.followers[0].summary.damage.clone().expect("damage");
    assert_eq!((damage.offset, damage.dropped), (48, 40));
}

/// Records perf's reader would call out of order in what went out: at
/// each FINISHED_ROUND it sorts out everything up to the latest time
/// before the round before, and a record earlier than that is late.
fn perfs_out_of_order(went: &[Option<(u64, u32)>]) -> usize {
    let (mut flushed, mut next_flush, mut latest, mut late) = (0, 0, 0, 0);
    for record in went {
        match record {
            Some((time, _)) => {
                late += usize::from(*time < flushed);
                latest = latest.max(*time);
            }
            None => (flushed, next_flush) = (next_flush, latest),
        }
    }
    late
}

/// Checks that no two FINISHED_ROUNDs hold 400 KiB of records or more
/// between them: a step aims at 128 KiB, and the last holds what follows
/// the last cut.
fn assert_rounds_small(went: &[Option<(u64, u32)>]) {
    let rounds = went.split(Option::is_none);
    let largest = rounds.map(|round| round.len() * 48).max().unwrap_or(0);
    assert!(largest < 400 << 10, "a round of {largest} bytes");
}

/// `count` records of task `tid`, `apart` ns apart from `from`, every
/// seventh a little late (as an interrupt's sample written first).
fn storm(from: u64, apart: u64, count: u64, tid: u32) -> Vec<u8> {
    shard_bytes(&storm_times(from, apart, count), tid)
}

/// [`storm`]'s times.
fn storm_times(from: u64, apart: u64, count: u64) -> Vec<u64> {
    (0..count)
        .map(|i| from + i * apart - if i % 7 == 3 { apart / 2 } else { 0 })
        .collect()
}

/// [`storm`] of samples.
fn sample_storm(from: u64, apart: u64, count: u64, tid: u32) -> Vec<u8> {
    samples(&storm_times(from, apart, count), tid)
}

#[test]
fn a_round_that_holds_much_goes_out_in_steps_each_a_round_perf_sorts_in_order() {
    let shards = Shards::new("steps", 3);
    let mut rounds = shards.rounds(3);
    let mut out = Out::default();
    // A merger kept off its CPU for a second: 1.5 MB behind in two
    // shards, a few records in the third.
    shards.append(0, &storm(MS, 30_000, 16_000, 1));
    shards.append(1, &storm(MS + 7_000, 50_000, 16_000, 2));
    shards.append(2, &storm(300 * MS, 100 * MS, 5, 3));
    round(&mut rounds, &shards, &[None, None, None], &mut out);
    let records = out.records();
    assert_eq!(records.len(), 32_005);
    for tid in 1..=3 {
        let shard: Vec<_> = records.iter().filter(|r| r.1 == tid).collect();
        let bytes = shards.len(tid as usize - 1) as usize;
        assert_eq!(shard.len() * 48, bytes, "shard {tid} whole, once");
    }
    assert_eq!(perfs_out_of_order(&out.went), 0);
    assert_eq!(rounds.late, 0);
    assert!(rounds.rounds >= 8, "{} rounds", rounds.rounds);
    assert_rounds_small(&out.went);
    assert_eq!(out.went.last(), Some(&None), "the round ends");
    assert!(rounds.at_round_end());
}

#[test]
fn steps_end_before_records_published_after_the_look() {
    let shards = Shards::new("steps-look", 2);
    let mut rounds = shards.rounds(2);
    let mut out = Out::default();
    shards.append(0, &storm(MS, 30_000, 16_000, 1));
    let looked = shards.len(0);
    // Published after the look, read all the same: records no earlier
    // than the latest before it (480 ms), which no cut may pass, or a
    // record published later still could be earlier than a cut.
    shards.append(0, &storm(500 * MS, 30_000, 8_000, 1));
    shards.append(1, &shard_bytes(&[490 * MS], 2));
    round(&mut rounds, &shards, &[Some(looked), Some(0)], &mut out);
    // The latest time before each FINISHED_ROUND.
    let mut latest = 0;
    let mut cuts = Vec::new();
    for record in &out.went {
        match record {
            Some((time, _)) => latest = latest.max(*time),
            None => cuts.push(latest),
        }
    }
    assert_eq!(out.went.last(), Some(&None), "the look is covered");
    cuts.pop();
    assert!(cuts.len() >= 4, "{cuts:?}");
    assert!(cuts.iter().all(|&cut| cut < 480 * MS), "{cuts:?}");
    assert_eq!(perfs_out_of_order(&out.went), 0);
}

#[test]
fn the_end_goes_out_in_steps_when_much_is_left() {
    let shards = Shards::new("steps-end", 2);
    let mut rounds = shards.rounds(2);
    let mut out = Out::default();
    shards.append(0, &storm(MS, 20_000, 40_000, 1));
    shards.append(1, &storm(MS, 90_000, 9_000, 2));
    rounds.drain(&layouts(), &mut out).unwrap();
    assert_eq!(out.records().len(), 49_000);
    assert_eq!(perfs_out_of_order(&out.went), 0);
    assert_eq!(rounds.late, 0);
    assert_rounds_small(&out.went);
}

#[test]
fn steps_keep_before_the_look_that_was_covered_not_the_latest_one() {
    let shards = Shards::new("steps-older-look", 2);
    let mut rounds = shards.rounds(2);
    let mut out = Out::default();
    // Round 1: ring 1 holds a record its writer has not written (nor is
    // it copied): the look is not covered.
    let a = shards.append(0, &storm(MS, 10_000, 16_000, 1));
    let b = shards.append(1, &shard_bytes(&[100 * MS], 2));
    round(&mut rounds, &shards, &[Some(a), Some(b + 48)], &mut out);
    // Round 2: ring 1's record is written (150 ms), covering the first
    // look; shard 0 got records published after it (200 to 360 ms), and
    // ring 1 one more not written yet (250 ms): the round's own look is
    // not covered, and no cut may pass the first look's latest (161 ms).
    shards.append(0, &storm(200 * MS, 10_000, 16_000, 1));
    let b = shards.append(1, &shard_bytes(&[150 * MS], 2));
    round(&mut rounds, &shards, &[None, Some(b + 48)], &mut out);
    shards.append(1, &shard_bytes(&[250 * MS], 2));
    round(&mut rounds, &shards, &[None, None], &mut out);
    assert_eq!(out.records().len(), 32_003);
    assert_eq!(perfs_out_of_order(&out.went), 0);
    assert_eq!(rounds.late, 0);
}

#[test]
fn samples_are_hopped_over_counted_timed_and_go_out_as_they_lie() {
    let shards = Shards::new("hop", 2);
    let mut rounds = shards.hopping(2);
    let mut out = Out::default();
    let shard = [
        samples(&[100 * MS, 200 * MS], 1),
        shard_bytes(&[250 * MS], 1),
        samples(&[300 * MS, 90 * MS, 310 * MS], 1),
    ];
    shards.append(0, &shard.concat());
    shards.append(1, &samples(&[150 * MS], 2));
    round(&mut rounds, &shards, &[None, None], &mut out);
    assert_eq!(
        out.records(),
        [
            (100 * MS, 1),
            (200 * MS, 1),
            (250 * MS, 1),
            (300 * MS, 1),
            (90 * MS, 1),
            (310 * MS, 1),
            (150 * MS, 2)
        ]
    );
    assert_eq!(out.hopped, 6, "every sample hopped over, the COMM walked");
    assert_eq!(out.runs, 2, "one run per shard");
    let summary = &rounds.followers[0].summary;
    assert_eq!((summary.samples(), summary.records()), (5, 6));
    assert_eq!(
        (summary.first_sample, summary.last_sample),
        (100 * MS, 310 * MS)
    );
    assert_eq!(
        (summary.first_time, summary.last_time),
        (100 * MS, 310 * MS)
    );
    assert_eq!(rounds.latest(), 310 * MS);
    assert_eq!((rounds.rounds, rounds.late), (1, 0));
}

#[test]
fn a_large_round_of_samples_hopped_over_is_timed_and_goes_out_in_steps() {
    let shards = Shards::new("hop-steps", 3);
    let mut rounds = shards.hopping(3);
    let mut out = Out::default();
    shards.append(0, &sample_storm(MS, 30_000, 16_000, 1));
    shards.append(1, &sample_storm(MS + 7_000, 50_000, 16_000, 2));
    shards.append(2, &sample_storm(300 * MS, 100 * MS, 5, 3));
    round(&mut rounds, &shards, &[None, None, None], &mut out);
    assert_eq!(out.records().len(), 32_005);
    assert_eq!(out.hopped, 32_005);
    assert_eq!(perfs_out_of_order(&out.went), 0);
    assert_eq!(rounds.late, 0);
    assert!(rounds.rounds >= 8, "{} rounds", rounds.rounds);
    assert_rounds_small(&out.went);
    assert!(rounds.at_round_end());
}

#[test]
fn the_end_of_samples_hopped_over_goes_out_in_steps() {
    let shards = Shards::new("hop-end", 2);
    let mut rounds = shards.hopping(2);
    let mut out = Out::default();
    shards.append(0, &sample_storm(MS, 20_000, 40_000, 1));
    shards.append(1, &sample_storm(MS, 90_000, 9_000, 2));
    rounds.drain(&layouts(), &mut out).unwrap();
    assert_eq!(out.records().len(), 49_000);
    assert_eq!(perfs_out_of_order(&out.went), 0);
    assert_rounds_small(&out.went);
}

#[test]
fn a_run_of_samples_that_ends_in_one_of_no_event_is_walked_to_its_damage() {
    let shards = Shards::new("hop-damage", 1);
    let mut rounds = shards.hopping(1);
    let mut out = Out::default();
    let bytes = [samples(&[MS, 2 * MS], 1), sample_of(99, 3 * MS, 1)].concat();
    shards.append(0, &bytes);
    rounds.drain(&layouts(), &mut out).unwrap();
    assert_eq!(out.records(), [(MS, 1), (2 * MS, 1)]);
    let damage = rounds.followers[0].summary.damage.clone().expect("damage");
    assert_eq!((damage.offset, damage.dropped), (96, 48));
}

#[test]
fn no_cut_comes_before_what_rounds_with_no_finished_round_wrote() {
    let shards = Shards::new("steps-after-open-rounds", 2);
    let mut rounds = shards.rounds(2);
    let mut out = Out::default();
    // Round 1: ring 0 holds records its writer has not written (its look
    // is not covered), and ring 1 a record read late, at 600 ms.
    let a = shards.append(0, &storm(MS, 10_000, 16_000, 1));
    let behind = 16_000 * 48;
    shards.append(1, &shard_bytes(&[600 * MS], 2));
    round(&mut rounds, &shards, &[Some(a + behind), None], &mut out);
    // Round 2: ring 0's writer caught up with round 1's look (161 to
    // 320 ms), which is covered now: a large round, but no cut may come
    // before 600 ms, or the FINISHED_ROUND that ends it would let round
    // 3's records (330 ms on, published after round 1's look) follow it.
    let b = shards.append(0, &storm(161 * MS, 10_000, 16_000, 1));
    round(&mut rounds, &shards, &[Some(b + 48), None], &mut out);
    shards.append(0, &storm(330 * MS, 10_000, 16_000, 1));
    round(&mut rounds, &shards, &[None, None], &mut out);
    assert_eq!(out.records().len(), 48_001);
    assert_eq!(perfs_out_of_order(&out.went), 0);
    assert_eq!(rounds.late, 0);
}
