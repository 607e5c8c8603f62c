//! Where a shard's records fall in time, learnt in the walk that
//! summarizes it: what a parallel merge needs to cut a recording into time
//! slices of similar size, know each slice's exact bytes before writing it,
//! and start reading each shard near a slice's start.

use std::collections::BTreeMap;

/// The most buckets a shard's histogram keeps: past it, buckets double in
/// width and pairs are joined.
const MAX_BUCKETS: usize = 4096;

/// A checkpoint every this many bytes of shard.
const CHECKPOINT_BYTES: usize = 64 << 10;

/// Bytes of records in one bucket of time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bytes {
    /// As they are in the shard.
    pub input: u64,
    /// As the merge writes them (without the padding some kernels leave
    /// after a KSYMBOL's or BPF_EVENT's trailer).
    pub output: u64,
}

impl Bytes {
    /// Adds `other` to these.
    pub fn add(&mut self, other: Bytes) {
        self.input += other.input;
        self.output += other.output;
    }
}

/// A shard's records by time, and where to start reading for a time.
#[derive(Clone, Debug, Default)]
pub struct TimeIndex {
    /// A bucket holds the records whose `time >> shift` is its key.
    shift: u32,
    /// By key: a shard's times mostly grow, so a new bucket is nearly
    /// always the last (in a map, each was an insert: a tenth of a live
    /// merger's samples in a 16-vCPU guest).
    buckets: Vec<(u64, Bytes)>,
    /// The bucket records are being added to, kept out of `buckets` until
    /// another one is needed (runs of records share a bucket).
    open: Option<(u64, Bytes)>,
    /// (offset of a record, the latest time of any record before it), one
    /// every [`CHECKPOINT_BYTES`].
    checkpoints: Vec<(usize, u64)>,
}

impl TimeIndex {
    /// Takes the record at `offset` into account; `latest` is the latest
    /// time of the records before it.
    pub fn add(&mut self, offset: usize, latest: u64, time: u64, bytes: Bytes) {
        let next_checkpoint = self
            .checkpoints
            .last()
            .map_or(0, |&(at, _)| at + CHECKPOINT_BYTES);
        if offset >= next_checkpoint {
            self.checkpoints.push((offset, latest));
        }
        if let Some((open, sum)) = &mut self.open {
            if *open == time >> self.shift {
                sum.add(bytes);
                return;
            }
        }
        // Closing may widen the buckets: the key is taken after.
        self.close();
        self.open = Some((time >> self.shift, bytes));
    }

    fn close(&mut self) {
        let Some((key, bytes)) = self.open.take() else {
            return;
        };
        match self.buckets.last_mut() {
            Some((last, sum)) if *last == key => sum.add(bytes),
            Some((last, _)) if *last > key => {
                match self.buckets.binary_search_by_key(&key, |&(k, _)| k) {
                    Ok(at) => self.buckets[at].1.add(bytes),
                    Err(at) => self.buckets.insert(at, (key, bytes)),
                }
            }
            _ => self.buckets.push((key, bytes)),
        }
        if self.buckets.len() > MAX_BUCKETS {
            self.coarsen(self.shift + 1);
        }
    }

    fn coarsen(&mut self, shift: u32) {
        let by = shift - self.shift;
        let mut joined: Vec<(u64, Bytes)> = Vec::with_capacity(self.buckets.len() / 2 + 1);
        for &(key, bytes) in &self.buckets {
            match joined.last_mut() {
                Some((last, sum)) if *last == key >> by => sum.add(bytes),
                _ => joined.push((key >> by, bytes)),
            }
        }
        self.buckets = joined;
        self.shift = shift;
    }

    /// Ends the walk.
    pub fn finish(&mut self) {
        self.close();
    }

    /// The histograms of `indexes` summed, in buckets of the coarsest
    /// width among them: (shift, bytes by `time >> shift`).
    pub fn combined<'a>(
        indexes: impl Iterator<Item = &'a TimeIndex> + Clone,
    ) -> (u32, BTreeMap<u64, Bytes>) {
        let shift = indexes.clone().map(|i| i.shift).max().unwrap_or(0);
        let mut sum: BTreeMap<u64, Bytes> = BTreeMap::new();
        for index in indexes {
            let by = shift - index.shift;
            for &(key, bytes) in &index.buckets {
                sum.entry(key >> by).or_default().add(bytes);
            }
        }
        (shift, sum)
    }

    /// Where to start reading for the records at `time` or later: an
    /// offset before which every record is earlier than `time`, and the
    /// latest time before it.
    pub fn start_for(&self, time: u64) -> (usize, u64) {
        start_in(&self.checkpoints, time)
    }

    /// The checkpoints: (offset of a record, the latest time before it).
    pub fn checkpoints(&self) -> &[(usize, u64)] {
        &self.checkpoints
    }
}

/// [`TimeIndex::start_for`] over `checkpoints`.
pub fn start_in(checkpoints: &[(usize, u64)], time: u64) -> (usize, u64) {
    let after = checkpoints.partition_point(|&(_, latest)| latest < time);
    match after.checked_sub(1) {
        Some(i) if time > 0 => checkpoints[i],
        _ => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: u64) -> Bytes {
        Bytes {
            input: n,
            output: n,
        }
    }

    #[test]
    fn buckets_widen_and_keep_every_byte() {
        let mut index = TimeIndex::default();
        for i in 0..100_000u64 {
            index.add(i as usize * 8, i * 10, i * 10 + 3, bytes(8));
        }
        index.finish();
        assert!(index.buckets.len() <= MAX_BUCKETS);
        let (_, sum) = TimeIndex::combined([&index].into_iter());
        assert_eq!(sum.values().map(|b| b.input).sum::<u64>(), 800_000);
    }

    #[test]
    fn a_start_has_only_earlier_records_before_it() {
        let mut index = TimeIndex::default();
        // Records 100 bytes apart, each 1 later; every 50th 30 late.
        let mut latest = 0;
        for i in 0..10_000u64 {
            let time = if i % 50 == 0 {
                (i + 1000).saturating_sub(30)
            } else {
                i + 1000
            };
            index.add(i as usize * 100, latest, time, bytes(100));
            latest = latest.max(time);
        }
        index.finish();
        for want in [0, 500, 1000, 1001, 5000, 10_999, 20_000] {
            let (offset, before) = index.start_for(want);
            assert!(before < want || offset == 0, "{want}: {offset} {before}");
            // And it is not far before the first wanted record: at most a
            // checkpoint's worth of records (655) and the lateness (30).
            let first_wanted = (want.saturating_sub(1000) as usize).min(10_000);
            assert!(offset / 100 <= first_wanted, "{want}: {offset}");
            assert!(first_wanted - offset / 100 <= 655 + 30, "{want}: {offset}");
        }
        assert_eq!(index.start_for(0), (0, 0));
    }

    #[test]
    fn a_late_record_joins_or_opens_its_bucket_in_time_order() {
        let mut index = TimeIndex::default();
        for (i, time) in [100u64, 300, 200, 100, 300, 50].into_iter().enumerate() {
            index.add(i * 8, 0, time, bytes(8));
        }
        index.finish();
        let keys: Vec<(u64, u64)> = index.buckets.iter().map(|&(k, b)| (k, b.input)).collect();
        assert_eq!(keys, [(50, 8), (100, 16), (200, 8), (300, 16)]);
    }
}
