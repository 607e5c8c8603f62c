//! The live merge's rounds on shards made here and grown by hand, no
//! kernel needed: a quiet shard, a lagging one, a late record, a record
//! cut while its writer is still writing it.

use std::io::{self, Write};
use std::path::PathBuf;

use shardrec_format::header::RecordType;
use shardrec_format::layouts::Layouts;
use shardrec_format::records::comm;
use shardrec_format::sample_id::{IDENTIFIER, TID, TIME};
use shardrec_format::views::Comm;
use shardrec_format::{SampleId, SampleIdLayout};

use super::{RoundSink, Rounds, MARGIN_NS};
use crate::live::follow::Follower;

const ID: u64 = 7;
const MS: u64 = 1_000_000;

fn layouts() -> Layouts {
    Layouts::from([(ID, SampleIdLayout::new(IDENTIFIER | TID | TIME))])
}

/// A COMM record of task `tid` at `time`.
fn record(time: u64, tid: u32) -> Vec<u8> {
    let layout = SampleIdLayout::new(IDENTIFIER | TID | TIME);
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
}

impl Drop for Shards {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What went out: (time, tid) of each record, and `None` for a round's end.
#[derive(Default)]
struct Out(Vec<Option<(u64, u32)>>);

impl RoundSink for Out {
    fn put(&mut self, record: &[u8]) -> io::Result<()> {
        let tid = Comm::parse(record).unwrap().tid;
        let layout = SampleIdLayout::new(IDENTIFIER | TID | TIME);
        let time = layout.parse(record, RecordType::COMM).unwrap().time;
        self.0.push(Some((time, tid)));
        Ok(())
    }

    fn end_round(&mut self) -> io::Result<()> {
        self.0.push(None);
        Ok(())
    }
}

impl Out {
    fn records(&self) -> Vec<(u64, u32)> {
        self.0.iter().flatten().copied().collect()
    }
}

/// A round in which every shard is written to its end and is its own
/// ring, whose head is `heads` (its length where `None`).
fn round(rounds: &mut Rounds, shards: &Shards, heads: &[Option<u64>], out: &mut Out) {
    round_copying(rounds, shards, (heads, &[]), out);
}

/// [`round`], the rings also holding `unwritten[i]` (if any) past what
/// their writers wrote, copied to the merge (its head then the shard's
/// length and that copy's).
fn round_copying(
    rounds: &mut Rounds,
    shards: &Shards,
    (heads, unwritten): (&[Option<u64>], &[Option<&[u8]>]),
    out: &mut Out,
) {
    let lens: Vec<u64> = (0..heads.len()).map(|i| shards.len(i)).collect();
    let copy = |i: usize| unwritten.get(i).copied().flatten();
    let heads: Vec<u64> = (0..heads.len())
        .map(|i| heads[i].unwrap_or(lens[i] + copy(i).map_or(0, |c| c.len() as u64)))
        .collect();
    let copied = |i: usize, at: u64| copy(i).filter(|_| at == lens[i]).map(<[u8]>::to_vec);
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

#[test]
fn a_quiet_shard_does_not_hold_the_rounds_back() {
    let shards = Shards::new("quiet", 2);
    let mut rounds = shards.rounds(2);
    let mut out = Out::default();
    shards.append(0, &shard_bytes(&[100 * MS, 200 * MS], 1));
    // Shard 1 never gets a record: its ring's head stays where it is read.
    round(&mut rounds, &shards, &[None, None], &mut out);
    assert!(out.0.is_empty(), "no round before a snapshot is read past");
    shards.append(0, &shard_bytes(&[300 * MS], 1));
    round(&mut rounds, &shards, &[None, None], &mut out);
    assert_eq!(
        out.0,
        [Some((100 * MS, 1)), None],
        "written up to the first snapshot's latest time less the margin"
    );
    round(&mut rounds, &shards, &[None, None], &mut out);
    assert_eq!(out.records(), [(100 * MS, 1), (200 * MS, 1)]);
}

/// A ring whose writer leaves records unwritten holds the watermark
/// back: the rounds write nothing, and the lag says how long.
#[test]
fn a_watermark_held_back_counts_in_the_lag_though_nothing_is_written() {
    let shards = Shards::new("held", 2);
    let mut rounds = shards.rounds(2);
    let mut out = Out::default();
    shards.append(0, &shard_bytes(&[100 * MS], 1));
    round(&mut rounds, &shards, &[None, None], &mut out);
    // Ring 1 now holds 64 bytes its writer does not write.
    shards.append(0, &shard_bytes(&[200 * MS], 1));
    round(&mut rounds, &shards, &[None, Some(64)], &mut out);
    let held = std::time::Duration::from_millis(50);
    std::thread::sleep(held);
    round(&mut rounds, &shards, &[None, Some(64)], &mut out);
    assert!(out.0.is_empty(), "{:?}", out.0);
    assert!(rounds.lag.time >= held, "{:?}", rounds.lag);
}

#[test]
fn a_shard_behind_its_ring_holds_the_rounds_back() {
    let shards = Shards::new("lagging", 2);
    let mut rounds = shards.rounds(2);
    let mut out = Out::default();
    shards.append(0, &shard_bytes(&[100 * MS, 200 * MS, 300 * MS], 1));
    // Ring 1 holds 64 bytes its writer has not written.
    round(&mut rounds, &shards, &[None, Some(64)], &mut out);
    round(&mut rounds, &shards, &[None, Some(64)], &mut out);
    round(&mut rounds, &shards, &[None, Some(64)], &mut out);
    assert!(out.0.is_empty(), "{:?}", out.0);
    // Its writer writes them, the second record only in part so far.
    let early = shard_bytes(&[150 * MS], 2);
    assert_eq!(early.len(), 48);
    shards.append(1, &[early.clone(), early[..16].to_vec()].concat());
    round(&mut rounds, &shards, &[None, Some(64)], &mut out);
    assert_eq!(
        out.records(),
        [(100 * MS, 1)],
        "ring 1, read to 150 ms, bounds the round there (less the margin); the record cut at the end of what is written waits"
    );
    shards.append(1, &early[16..]);
    round(&mut rounds, &shards, &[None, Some(64)], &mut out);
    assert_eq!(
        out.records(),
        [(100 * MS, 1), (150 * MS, 2), (150 * MS, 2), (200 * MS, 1)],
        "the early records go next, up to the first snapshot's time less the margin"
    );
    rounds.drain(&layouts(), &mut out).unwrap();
    assert_eq!(out.records().last(), Some(&(300 * MS, 1)));
    assert!(rounds.followers.iter().all(|f| f.summary.damage.is_none()));
}

#[test]
fn a_rings_unwritten_records_go_out_from_a_copy_and_once() {
    let shards = Shards::new("copied", 2);
    let mut rounds = shards.rounds(2);
    let mut out = Out::default();
    shards.append(0, &shard_bytes(&[100 * MS, 200 * MS, 300 * MS], 1));
    // Ring 1 holds a record its writer has not written: the merge copies
    // it, and the round goes on past it instead of waiting for the writer.
    let unwritten = shard_bytes(&[150 * MS], 2);
    let rings = [None, Some(&unwritten[..])];
    for _ in 0..3 {
        round_copying(&mut rounds, &shards, (&[None, None], &rings), &mut out);
    }
    assert_eq!(
        out.records(),
        [(100 * MS, 1), (150 * MS, 2), (200 * MS, 1)],
        "not held back by ring 1"
    );
    // The writer writes it: read past, not taken again.
    shards.append(1, &unwritten);
    shards.append(1, &shard_bytes(&[310 * MS], 2));
    round(&mut rounds, &shards, &[None, None], &mut out);
    rounds.drain(&layouts(), &mut out).unwrap();
    assert_eq!(
        out.records(),
        [
            (100 * MS, 1),
            (150 * MS, 2),
            (200 * MS, 1),
            (300 * MS, 1),
            (310 * MS, 2)
        ]
    );
    assert!(rounds.followers.iter().all(|f| f.summary.damage.is_none()));
}

#[test]
fn a_late_record_is_counted_and_written_in_the_next_round() {
    let shards = Shards::new("late", 2);
    let mut rounds = shards.rounds(2);
    let mut out = Out::default();
    shards.append(0, &shard_bytes(&[100 * MS, 200 * MS, 300 * MS], 1));
    for _ in 0..3 {
        round(&mut rounds, &shards, &[None, None], &mut out);
    }
    let cut = 300 * MS - MARGIN_NS;
    assert_eq!(out.records(), [(100 * MS, 1), (200 * MS, 1)]);
    // Behind the cut: it should not happen, and is not lost when it does.
    shards.append(1, &shard_bytes(&[cut - 5 * MS], 2));
    round(&mut rounds, &shards, &[None, None], &mut out);
    assert_eq!(rounds.late, 1);
    assert_eq!(out.records().last(), Some(&(cut - 5 * MS, 2)));
    rounds.drain(&layouts(), &mut out).unwrap();
    assert_eq!(out.records().len(), 4);
}

#[test]
fn ties_keep_shard_order_then_file_order() {
    let shards = Shards::new("ties", 3);
    let mut rounds = shards.rounds(3);
    let mut out = Out::default();
    shards.append(2, &shard_bytes(&[5 * MS, 5 * MS], 3));
    shards.append(0, &shard_bytes(&[5 * MS], 1));
    shards.append(1, &shard_bytes(&[MS, 5 * MS], 2));
    rounds.drain(&layouts(), &mut out).unwrap();
    assert_eq!(
        out.records(),
        [(MS, 2), (5 * MS, 1), (5 * MS, 2), (5 * MS, 3), (5 * MS, 3)]
    );
    assert_eq!(out.0.iter().filter(|r| r.is_none()).count(), 1, "one round");
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
