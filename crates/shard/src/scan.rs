//! Walking a shard to learn what it holds, without trusting it.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use shardrec_format::header::RecordType;
use shardrec_format::sample_id::identifier;
use shardrec_format::walk::{End, RecordWalker};
use shardrec_format::{u64_at, SampleIdLayout};

use crate::{CpuStats, Error};

/// A read-only view of a shard file (empty files have no mapping).
pub struct ShardBytes {
    map: Option<memmap2::Mmap>,
}

impl ShardBytes {
    /// Maps `path` read-only; anything but a regular file is refused.
    pub fn open(path: &Path) -> Result<ShardBytes, Error> {
        use std::os::unix::fs::OpenOptionsExt;
        // Non-blocking: opening a FIFO put in a shard's place must not wait
        // for a writer (for a regular file the flag changes nothing).
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(Error::io(path))?;
        let metadata = file.metadata().map_err(Error::io(path))?;
        if !metadata.is_file() {
            let why = std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file");
            return Err(Error::io(path)(why));
        }
        if metadata.len() == 0 {
            return Ok(ShardBytes { map: None });
        }
        // SAFETY: a regular file, mapped read-only and private, at the
        // length it had when opened. shardrec only ever appends to a shard,
        // which leaves the mapped bytes as they are (a merge of a recording
        // still running sees a prefix). Another process that truncated the
        // file while it is mapped would make reads past the new end raise
        // SIGBUS and end the merge: nothing can guard against that short of
        // copying every shard, and the merge writes NAME.tmp and renames it
        // only when done, so the shards and any earlier output survive.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(Error::io(path))?;
        Ok(ShardBytes { map: Some(map) })
    }

    /// A shard with no bytes.
    pub fn empty() -> ShardBytes {
        ShardBytes { map: None }
    }

    /// The shard's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    /// Tells the kernel the bytes before `offset` will not be read again,
    /// so a long sequential read keeps a bounded resident set.
    pub fn release_before(&self, offset: usize) {
        let Some(map) = &self.map else { return };
        // The kernel rounds the length up to a page; a dropped page still
        // needed is only read again from the file.
        let len = offset.min(map.len());
        if len > 0 {
            // SAFETY: the mapping is a read-only, file-backed one: dropping
            // its pages only makes later reads fault them in from the file
            // again, and nothing is lost or changed.
            let _ =
                unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, 0, len) };
        }
    }

    /// Asks for read-ahead: the shard is read front to back.
    pub fn advise_sequential(&self) {
        if let Some(map) = &self.map {
            let _ = map.advise(memmap2::Advice::Sequential);
        }
    }
}

/// How far a sequential reader gets before it releases the pages behind it.
pub const RELEASE_STEP: usize = 32 << 20;

/// Counts the records, samples and losses of a shard and its time range.
/// Records whose id is unknown count, but give no time. Pages behind the
/// walk are released, so a shard of any size is scanned in bounded memory.
pub fn scan(shard: &ShardBytes, layouts: &HashMap<u64, SampleIdLayout>) -> (CpuStats, End) {
    let bytes = shard.bytes();
    shard.advise_sequential();
    let mut stats = CpuStats::default();
    let mut walker = RecordWalker::new(bytes);
    let mut released = 0;
    for record in walker.by_ref() {
        if record.offset >= released + RELEASE_STEP {
            shard.release_before(record.offset);
            released = record.offset;
        }
        let type_ = record.header.type_;
        stats.records += 1;
        match type_ {
            RecordType::SAMPLE => stats.samples += 1,
            RecordType::LOST => stats.lost += u64_at(record.bytes, 16).unwrap_or(0),
            RecordType::LOST_SAMPLES => stats.lost_samples += u64_at(record.bytes, 8).unwrap_or(0),
            _ => {}
        }
        let time = identifier(record.bytes, type_)
            .and_then(|id| layouts.get(&id))
            .and_then(|layout| layout.time(record.bytes, type_))
            .unwrap_or(0);
        if time != 0 {
            if stats.first_time == 0 || time < stats.first_time {
                stats.first_time = time;
            }
            stats.last_time = stats.last_time.max(time);
        }
    }
    shard.release_before(bytes.len());
    stats.bytes = bytes.len() as u64;
    if let End::Torn { dropped, .. } = walker.end() {
        stats.torn_bytes = dropped as u64;
    }
    (stats, walker.end())
}
