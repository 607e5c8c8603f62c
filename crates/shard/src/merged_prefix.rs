//! What a merge that frees the shards as it goes has written so far.
//!
//! The recorder's own merge, whose shards are deleted once it is done,
//! punches each shard's merged bytes out of the file as it goes, so that
//! perf.data is written into the pages they leave instead of new ones (on
//! a host that takes freed memory back, new page-cache pages cost several
//! times a reused one) and the recording never needs twice its size on
//! disk. Before each punch it writes down how far its output
//! (`merged.partial`, in the recording directory) holds the recording, so
//! a merge interrupted after a punch is completed by `shardrec merge`: the
//! output's part as written, the shards' from where the punch stopped.

use serde::{Deserialize, Serialize};

/// How far `merged.partial` holds the recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergedPrefix {
    /// Where its data section starts.
    pub data_offset: u64,
    /// Bytes of its data section that are whole: the start records, the
    /// synthesized state and every shard record earlier than `until`, in
    /// order.
    pub data_len: u64,
    /// The earliest time of the records still to merge.
    pub until: u64,
    /// Each shard (by file name) with the offset of its first record still
    /// to merge; the bytes before it may be freed.
    pub shards: Vec<(String, u64)>,
    /// The recording's first sample time (HEADER_SAMPLE_TIME), which the
    /// shards may no longer hold.
    pub first_sample: u64,
    /// Each shard (by file name) with how far the merge had read it: every
    /// record from there on is still to merge, however early (a live
    /// merge writes a record that comes late in the next round). Absent
    /// (older merges): every record earlier than `until` is merged.
    #[serde(default)]
    pub taken: Vec<(String, u64)>,
    /// The output was a stream (`-o -`): what it holds went to its reader
    /// and is nowhere on disk; a merge of the rest starts with the
    /// synthesized state again, so that it reads alone.
    #[serde(default)]
    pub streamed: bool,
}

/// Where a merge resumes one shard: from byte `start` on, leaving out the
/// records before byte `taken` earlier than `until` (in the output
/// already). The default resumes nothing: the whole shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resume {
    /// The first byte to read.
    pub start: usize,
    /// Records from here on are all still to merge.
    pub taken: usize,
    /// Before `taken`, records earlier than this are merged.
    pub until: u64,
}

impl Resume {
    /// Whether the record at `offset` of time `time` is in the output.
    pub fn merged(&self, offset: usize, time: u64) -> bool {
        offset < self.taken && time < self.until
    }
}

impl MergedPrefix {
    /// Where to resume the shard named `name`.
    pub fn resume(&self, name: &str) -> Resume {
        let find = |list: &[(String, u64)]| {
            list.iter()
                .find(|(shard, _)| shard == name)
                .map(|&(_, offset)| offset as usize)
        };
        Resume {
            start: find(&self.shards).unwrap_or(0),
            taken: find(&self.taken).unwrap_or(usize::MAX),
            until: self.until,
        }
    }
}
