//! Cutting a recording into time slices that threads merge apart.
//!
//! The merged order is every record sorted by (time, shard, place in the
//! shard), so the records of a time range are a run of it: a slice is a
//! range of time, and slices written one after the other are the whole
//! merge. The shards' time indexes give each slice's exact bytes, so where
//! each slice's output starts is known before any is written. Slices are
//! cut from the recording alone, never from the thread count: the output
//! is the same bytes whatever the number of threads.

use std::collections::BTreeMap;

use shardrec_shard::scan::ScannedShard;
use shardrec_shard::time_index::{Bytes, TimeIndex};

/// A round every this many bytes of records (`record.len()` as read, over
/// the whole data section). The data is already in time order, so a round
/// costs 8 bytes and nothing else, while a reader holds every record of
/// the last round or two in its reorder buffer (perf's ordered events,
/// hotspot's perfparser). perf record ends a round per pass over its
/// rings, which is a quarter to half a ring per busy CPU (128 to 256 KiB
/// at its default 512 KiB rings); this is smaller still. A record (at most
/// 64 KiB - 1) passes at most one multiple of it.
pub const ROUND_BYTES: u64 = 64 << 10;

/// Record bytes a slice aims at: enough that reading each shard's part of
/// it costs little more than the part itself (a part starts at the last
/// index checkpoint before it, up to 64 KiB early).
fn target_bytes(streams: usize) -> u64 {
    (32u64 << 20).max(streams as u64 * (256 << 10))
}

/// A range of time and what the merge writes for it (by default, all of
/// time).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slice {
    /// The earliest time in it.
    pub start: u64,
    /// The first time past it; `None` for the last slice.
    pub end: Option<u64>,
    /// Its records' bytes.
    pub bytes: Bytes,
    /// Record bytes (as read) of every slice before it.
    pub input_before: u64,
    /// Where its output starts, counted from the first slice's start,
    /// when written uncompressed.
    pub offset: u64,
}

impl Slice {
    /// Whether a record at `time` is in this slice.
    pub fn contains(&self, time: u64) -> bool {
        time >= self.start && self.end.is_none_or(|end| time < end)
    }

    /// FINISHED_ROUND records in it: one after each record that passes a
    /// multiple of [`ROUND_BYTES`].
    pub fn rounds(&self) -> u64 {
        let after = self.input_before + self.bytes.input;
        after / ROUND_BYTES - self.input_before / ROUND_BYTES
    }

    /// Bytes it writes uncompressed.
    pub fn output_len(&self) -> u64 {
        self.bytes.output + 8 * self.rounds()
    }
}

/// The slices of `shards`: at least one, each of about `target` bytes (by
/// default [`target_bytes`]) unless one bucket of the time index is larger,
/// the first ending after time `first_past` (a resumed merge's records
/// earlier than its prefix's end all go in its first round).
pub fn plan(shards: &[ScannedShard], target: Option<u64>, first_past: u64) -> Vec<Slice> {
    let (shift, buckets) = TimeIndex::combined(shards.iter().map(|s| &s.summary.index));
    let target = target.unwrap_or_else(|| target_bytes(shards.len()));
    cut(shift, &buckets, target.max(1), first_past)
}

/// Slices of at least `target` bytes (the last may be smaller), cut
/// between buckets of width `1 << shift`, the first after `first_past`.
fn cut(shift: u32, buckets: &BTreeMap<u64, Bytes>, target: u64, first_past: u64) -> Vec<Slice> {
    let mut slices = Vec::new();
    let mut current = Slice {
        start: 0,
        end: None,
        bytes: Bytes::default(),
        input_before: 0,
        offset: 0,
    };
    let mut buckets = buckets.iter().peekable();
    while let Some((&key, &bytes)) = buckets.next() {
        current.bytes.add(bytes);
        if current.bytes.input < target || buckets.peek().is_none() {
            continue;
        }
        let end = u128::from(key + 1) << shift;
        let Ok(end) = u64::try_from(end) else { break };
        if slices.is_empty() && end <= first_past {
            continue;
        }
        current.end = Some(end);
        let next = Slice {
            start: end,
            end: None,
            bytes: Bytes::default(),
            input_before: current.input_before + current.bytes.input,
            offset: current.offset + current.output_len(),
        };
        slices.push(std::mem::replace(&mut current, next));
    }
    slices.push(current);
    slices
}

/// How many of `wanted` threads to merge `slices` with: no more than
/// slices, and no more than a quarter of the memory available holds
/// slices' worth of shard pages (each thread maps about one slice).
pub fn threads_for(slices: &[Slice], wanted: usize) -> usize {
    let largest = slices.iter().map(|s| s.bytes.input).max().unwrap_or(0);
    let budget = mem_available().map_or(usize::MAX, |bytes| {
        (bytes / 4 / largest.max(1)).max(1) as usize
    });
    wanted.min(slices.len()).min(budget).max(1)
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn mem_available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The bytes of all of `slices` written uncompressed.
pub fn total_len(slices: &[Slice]) -> u64 {
    slices.last().map_or(0, |s| s.offset + s.output_len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(input: u64) -> Bytes {
        Bytes {
            input,
            output: input - input / 10,
        }
    }

    #[test]
    fn slices_cover_every_bucket_once_and_follow_each_other() {
        let buckets: BTreeMap<u64, Bytes> = (0..1000u64)
            .map(|k| (k * 3, bytes(1000 + k * 37 % 5000)))
            .collect();
        let slices = cut(4, &buckets, 200_000, 0);
        assert!(slices.len() > 5);
        let input: u64 = slices.iter().map(|s| s.bytes.input).sum();
        assert_eq!(input, buckets.values().map(|b| b.input).sum::<u64>());
        for pair in slices.windows(2) {
            assert_eq!(pair[0].end, Some(pair[1].start));
            assert_eq!(
                pair[1].input_before,
                pair[0].input_before + pair[0].bytes.input
            );
            assert_eq!(pair[1].offset, pair[0].offset + pair[0].output_len());
        }
        assert_eq!(slices[0].start, 0);
        assert_eq!(slices.last().unwrap().end, None);
        // Every bucket's times fall in exactly one slice.
        for &key in buckets.keys() {
            let (first, last) = (key << 4, ((key + 1) << 4) - 1);
            let holders = slices.iter().filter(|s| s.contains(first)).count();
            assert_eq!(holders, 1);
            assert!(slices.iter().any(|s| s.contains(first) && s.contains(last)));
        }
        // Rounds over the whole: one per multiple of ROUND_BYTES passed.
        let rounds: u64 = slices.iter().map(Slice::rounds).sum();
        assert_eq!(rounds, input / ROUND_BYTES);
    }

    #[test]
    fn an_empty_or_small_recording_is_one_slice() {
        assert_eq!(cut(0, &BTreeMap::new(), 100, 0).len(), 1);
        let one: BTreeMap<u64, Bytes> = [(7, bytes(50))].into();
        let slices = cut(0, &one, 100, 0);
        assert_eq!(slices.len(), 1);
        assert!(slices[0].contains(0) && slices[0].contains(u64::MAX));
    }

    #[test]
    fn a_resumed_merge_s_first_slice_ends_past_its_prefix() {
        let buckets: BTreeMap<u64, Bytes> = (0..100u64).map(|k| (k, bytes(1000))).collect();
        let slices = cut(4, &buckets, 2000, 50 << 4);
        assert!(slices[0].end.unwrap() > 50 << 4, "{:?}", slices[0].end);
        assert!(slices[0].contains(50 << 4) && !slices[1].contains(50 << 4));
        assert_eq!(slices[1].start, slices[0].end.unwrap());
        let whole = cut(4, &buckets, 2000, u64::MAX);
        assert_eq!(whole.len(), 1);
    }
}
