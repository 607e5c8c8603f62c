//! `cpuNNN.index`: what the recorder's stop learnt of each shard, kept so
//! that a merge of a time window (`shardrec merge --time`) reads only the
//! bytes around the window and the records of state before it, not the
//! whole shard. A recording without index files (cut short, or older) is
//! still merged by window: by walking its shards.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::scan::ShardSummary;
use crate::time_index;

/// The index format this build writes and reads.
const VERSION: u32 = 1;

/// Where a shard's records fall in time, and where its state records are.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardIndex {
    version: u32,
    /// Bytes of whole records from the start.
    pub valid_len: usize,
    /// Earliest and latest sample time.
    pub first_sample: u64,
    /// See `first_sample`.
    pub last_sample: u64,
    /// The most a record's time falls behind a time read before it.
    pub lateness: u64,
    /// (offset of a record, the latest time of any record before it).
    pub checkpoints: Vec<(usize, u64)>,
    /// (offset, length) of each run of records that describe state
    /// (tasks, mappings, symbols, kernel text).
    pub state_spans: Vec<(usize, usize)>,
}

impl ShardIndex {
    /// The index of a walked shard.
    pub fn of(summary: &ShardSummary) -> ShardIndex {
        ShardIndex {
            version: VERSION,
            valid_len: summary.valid_len,
            first_sample: summary.first_sample,
            last_sample: summary.last_sample,
            lateness: summary.lateness,
            checkpoints: summary.index.checkpoints().to_vec(),
            state_spans: summary.state_spans.clone(),
        }
    }

    /// The index as written to its file.
    pub fn to_bytes(&self) -> Vec<u8> {
        rmp_serde::to_vec(self).expect("an index serializes")
    }

    /// Reads the index at `path`; `None` when there is none, or it is not
    /// one this build reads (the shard is then walked instead).
    pub fn read(path: &Path) -> Option<ShardIndex> {
        let bytes = std::fs::read(path).ok()?;
        let index: ShardIndex = rmp_serde::from_slice(&bytes).ok()?;
        (index.version == VERSION).then_some(index)
    }

    /// An offset before which every record is earlier than `time`.
    pub fn start_for(&self, time: u64) -> usize {
        time_index::start_in(&self.checkpoints, time).0
    }

    /// An offset from which every record is later than `time`: the first
    /// checkpoint after a record later than `time` by more than the
    /// lateness; the end of the valid records if there is none.
    pub fn end_for(&self, time: u64) -> usize {
        let limit = time.saturating_add(self.lateness);
        self.checkpoints
            .iter()
            .find(|&&(_, latest)| latest > limit)
            .map_or(self.valid_len, |&(offset, _)| offset)
    }
}
