//! The merge's ordering on shards made here, no kernel needed: records
//! late within a shard, ties across shards, damage, tiny release steps.

use std::path::PathBuf;

use shardrec_format::layouts::Layouts;
use shardrec_format::records::comm;
use shardrec_format::sample_id::{IDENTIFIER, TID, TIME};
use shardrec_format::views::Comm;
use shardrec_format::{SampleId, SampleIdLayout};
use shardrec_shard::scan::ScannedShard;

use super::{Merged, SortedShard};

const ID: u64 = 7;

fn layouts() -> Layouts {
    Layouts::from([(ID, SampleIdLayout::new(IDENTIFIER | TID | TIME))])
}

/// A COMM record of task `tid` at `time`, of event `id`.
fn record(time: u64, tid: u32, id: u64) -> Vec<u8> {
    let layout = SampleIdLayout::new(IDENTIFIER | TID | TIME);
    let sample_id = SampleId {
        pid: 1,
        tid,
        time,
        id,
        ..SampleId::default()
    };
    comm(1, tid, b"task", 0)
        .finish(&layout, &sample_id)
        .unwrap()
}

/// A shard file holding `records`, removed on drop.
struct ShardFile(PathBuf);

impl ShardFile {
    fn new(name: &str, records: &[Vec<u8>]) -> ShardFile {
        let path = std::env::temp_dir().join(format!(
            "shardrec-order-{name}-{}.shard",
            std::process::id()
        ));
        std::fs::write(&path, records.concat()).unwrap();
        ShardFile(path)
    }

    fn open(&self) -> ScannedShard {
        ScannedShard::open(&self.0, &layouts())
    }
}

impl Drop for ShardFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// (time, tid) of each record the merge of `shards` gives, with `step`.
fn merged(shards: &[ScannedShard], step: usize) -> Vec<(u64, u32)> {
    let layouts = layouts();
    let streams = shards
        .iter()
        .map(|s| SortedShard::new(s, &layouts, step))
        .collect();
    Merged::new(streams)
        .map(|(time, bytes)| (time, Comm::parse(bytes).unwrap().tid))
        .collect()
}

#[test]
fn late_records_within_a_shard_come_out_in_order() {
    let times = [5, 3, 7, 6, 10, 9, 12];
    let records: Vec<_> = times.iter().map(|&t| record(t, t as u32, ID)).collect();
    let file = ShardFile::new("late", &records);
    let shard = file.open();
    assert_eq!(shard.summary.lateness, 2);
    assert_eq!(shard.summary.records(), times.len() as u64);
    let out: Vec<u64> = merged(&[shard], 1).iter().map(|&(t, _)| t).collect();
    assert_eq!(out, [3, 5, 6, 7, 9, 10, 12]);
}

#[test]
fn ties_keep_shard_order_then_file_order() {
    // Same times everywhere: tids say where each record came from.
    let a = ShardFile::new(
        "tie-a",
        &[record(1, 10, ID), record(2, 11, ID), record(2, 12, ID)],
    );
    let b = ShardFile::new(
        "tie-b",
        &[record(2, 20, ID), record(2, 21, ID), record(3, 22, ID)],
    );
    let out = merged(&[a.open(), b.open()], 1 << 20);
    assert_eq!(out, [(1, 10), (2, 11), (2, 12), (2, 20), (2, 21), (3, 22)]);
}

#[test]
fn many_interleaved_shards_merge_non_decreasing_and_whole() {
    // Four shards, each nearly sorted (a record up to 3 late), interleaved.
    let files: Vec<ShardFile> = (0..4u64)
        .map(|s| {
            let records: Vec<_> = (0..500u64)
                .map(|i| {
                    let time = 4 * i + s + if i % 7 == 3 { 0 } else { 3 };
                    record(time, (s * 1000 + i) as u32, ID)
                })
                .collect();
            ShardFile::new(&format!("many-{s}"), &records)
        })
        .collect();
    let shards: Vec<ScannedShard> = files.iter().map(ShardFile::open).collect();
    for step in [1, 4096, 1 << 20] {
        let out = merged(&shards, step);
        assert_eq!(out.len(), 2000);
        assert!(out.windows(2).all(|w| w[0].0 <= w[1].0), "step {step}");
        let mut tids: Vec<u32> = out.iter().map(|&(_, tid)| tid).collect();
        tids.sort_unstable();
        tids.dedup();
        assert_eq!(tids.len(), 2000, "every record once, step {step}");
    }
}

#[test]
fn a_record_of_no_event_ends_the_shard_as_damage() {
    let records = [
        record(1, 1, ID),
        record(2, 2, ID),
        record(3, 3, 99),
        record(4, 4, ID),
    ];
    let file = ShardFile::new("foreign", &records);
    let shard = file.open();
    let damage = shard.summary.damage.clone().expect("damage");
    assert_eq!(damage.offset, 2 * records[0].len());
    assert_eq!(damage.dropped, 2 * records[0].len());
    assert_eq!(merged(&[shard], 1 << 20), [(1, 1), (2, 2)]);
}

#[test]
fn a_torn_tail_is_damage_and_the_rest_merges() {
    let mut bytes = [record(1, 1, ID), record(2, 2, ID)].concat();
    let whole = bytes.len();
    bytes.extend_from_slice(&record(3, 3, ID)[..12]);
    let file = ShardFile::new("torn", &[bytes]);
    let shard = file.open();
    let damage = shard.summary.damage.clone().expect("damage");
    assert_eq!((damage.offset, damage.dropped), (whole, 12));
    assert_eq!(shard.summary.valid_len, whole);
    assert_eq!(merged(&[shard], 1 << 20), [(1, 1), (2, 2)]);
}
