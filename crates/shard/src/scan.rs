//! Walking a shard to learn what it holds, without trusting it.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use shardrec_format::header::{LOST, LOST_SAMPLES, SAMPLE};
use shardrec_format::sample_id::identifier;
use shardrec_format::walk::{End, RecordWalker};
use shardrec_format::{u64_at, SampleIdLayout};

use crate::{CpuStats, Error};

/// A read-only view of a shard file (empty files have no mapping).
pub struct ShardBytes {
    map: Option<memmap2::Mmap>,
}

impl ShardBytes {
    /// Maps `path` read-only.
    pub fn open(path: &Path) -> Result<ShardBytes, Error> {
        let file = File::open(path).map_err(Error::io(path))?;
        let len = file.metadata().map_err(Error::io(path))?.len();
        if len == 0 {
            return Ok(ShardBytes { map: None });
        }
        // SAFETY: shards are append-only while recording and never truncated
        // by shardrec, so the mapped bytes stay valid for the map's life.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(Error::io(path))?;
        Ok(ShardBytes { map: Some(map) })
    }

    /// The shard's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

/// Counts the records, samples and losses of a shard and its time range.
/// Records whose id is unknown count, but give no time.
pub fn scan(bytes: &[u8], layouts: &HashMap<u64, SampleIdLayout>) -> (CpuStats, End) {
    let mut stats = CpuStats::default();
    let mut walker = RecordWalker::new(bytes);
    for record in walker.by_ref() {
        let type_ = record.header.type_;
        stats.records += 1;
        match type_ {
            SAMPLE => stats.samples += 1,
            LOST => stats.lost += u64_at(record.bytes, 16).unwrap_or(0),
            LOST_SAMPLES => stats.lost_samples += u64_at(record.bytes, 8).unwrap_or(0),
            _ => {}
        }
        let time = identifier(record.bytes, type_)
            .and_then(|id| layouts.get(&id))
            .and_then(|layout| layout.parse(record.bytes, type_))
            .map(|id| id.time)
            .unwrap_or(0);
        if time != 0 {
            if stats.first_time == 0 || time < stats.first_time {
                stats.first_time = time;
            }
            stats.last_time = stats.last_time.max(time);
        }
    }
    stats.bytes = bytes.len() as u64;
    if let End::Torn { dropped, .. } = walker.end() {
        stats.torn_bytes = dropped as u64;
    }
    (stats, walker.end())
}
