//! Walking a shard to learn what it holds, without trusting it.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use shardrec_format::header::RecordType;
use shardrec_format::layouts::{FieldReader, Layouts};
use shardrec_format::views::lost_count;
use shardrec_format::walk::{End, RecordWalker};

use crate::merged_prefix::Resume;
use crate::time_index::{Bytes, TimeIndex};
use crate::Error;

/// A read-only view of a shard file (empty files have no mapping).
#[derive(Debug)]
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
        ShardBytes::map(&file, path)
    }

    /// Maps `file`, opened at `path`, read-only; anything but a regular
    /// file is refused.
    pub fn map(file: &File, path: &Path) -> Result<ShardBytes, Error> {
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
        // still running sees a prefix), or (a merge that frees the shards
        // as it goes) punches out bytes it has merged and does not read
        // again, which keeps the file's length: a read there would see
        // zeros, never a fault. Another process that truncated the
        // file while it is mapped would make reads past the new end raise
        // SIGBUS and end the merge: nothing can guard against that short of
        // copying every shard, and the merge writes NAME.tmp and renames it
        // only when done, so the shards and any earlier output survive.
        let map = unsafe { memmap2::Mmap::map(file) }.map_err(Error::io(path))?;
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

    /// Tells the kernel the bytes in `range` will not be read again, so a
    /// long sequential read keeps a bounded resident set.
    pub fn release(&self, range: std::ops::Range<usize>) {
        if let Some(map) = &self.map {
            drop_pages(map, range);
        }
    }

    /// Asks for read-ahead: the shard is read front to back.
    pub fn advise_sequential(&self) {
        if let Some(map) = &self.map {
            let _ = map.advise(memmap2::Advice::Sequential);
        }
    }
}

/// A read-only view of a shard its writer still appends to: mapped past
/// its end and mapped again, larger, as it grows, so the bytes below what
/// is known written are read in place, at their file offsets (no copy
/// into the reader, and a record taken is found again by its offset).
#[derive(Debug)]
pub struct GrowingBytes {
    file: File,
    map: Option<memmap2::Mmap>,
    /// The bytes known written: the most any call has been given.
    known: u64,
}

/// The least a [`GrowingBytes`] maps at a time: address space only, so
/// mapping ahead costs a remap every doubling instead of every round.
const GROWING_MAP_MIN: u64 = 64 << 20;

impl GrowingBytes {
    /// Follows `file`, a shard only ever appended to (or punched behind
    /// what was read).
    pub fn new(file: File) -> GrowingBytes {
        GrowingBytes {
            file,
            map: None,
            known: 0,
        }
    }

    /// The file's length now.
    pub fn file_len(&self) -> std::io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    /// The bytes up to `end`, which the caller knows the file holds (at
    /// most its length, read after the bytes were written).
    pub fn up_to(&mut self, end: u64) -> std::io::Result<&[u8]> {
        let mapped = self.map.as_ref().map_or(0, |m| m.len() as u64);
        if end > mapped {
            let len = end.max(mapped * 2).max(GROWING_MAP_MIN);
            let len = usize::try_from(len).map_err(std::io::Error::other)?;
            // SAFETY: a read-only mapping of a regular file that
            // is only appended to, or punched behind what was read (a read
            // there sees zeros). It is longer than the file: only the
            // bytes below `known`, which never exceeds the file's length
            // as the caller read it after those bytes were written, are
            // ever handed out, and the pages past the end of the file are
            // never touched. The recorder itself cuts a shard back in
            // two places: a replaced writer's, to its ring's tail, past
            // which a follower of a CPU shard never reads (its limit is
            // that tail); and a restarted VIP's, to its last whole record,
            // which is therefore not followed through a mapping (the live
            // merge reads it into memory). A file truncated by another
            // process would make reads past its new end raise SIGBUS, as
            // for `ShardBytes`: nothing short of copying every shard
            // guards against that.
            let map = unsafe { memmap2::MmapOptions::new().len(len).map(&self.file) }?;
            let _ = map.advise(memmap2::Advice::Sequential);
            self.map = Some(map);
        }
        self.known = self.known.max(end);
        Ok(self.get(0, end as usize))
    }

    /// Tells the kernel the bytes before `end` will not be read again:
    /// their pages leave this mapping (not the page cache), so following a
    /// long shard keeps a bounded resident set.
    pub fn release_before(&self, end: u64) {
        if let Some(map) = &self.map {
            drop_pages(map, 0..end.min(self.known) as usize);
        }
    }

    /// `len` bytes at `offset`, which must lie below what [`up_to`]
    /// was given.
    ///
    /// [`up_to`]: GrowingBytes::up_to
    pub fn get(&self, offset: u64, len: usize) -> &[u8] {
        let end = offset + len as u64;
        assert!(end <= self.known, "bytes not known written");
        match &self.map {
            Some(map) => &map[offset as usize..end as usize],
            None => &[],
        }
    }
}

/// Drops the pages of `range` of a read-only, file-backed `map` (widened
/// to whole pages; past its end, clipped): a page still needed is only
/// read again from the page cache.
fn drop_pages(map: &memmap2::Mmap, range: std::ops::Range<usize>) {
    let end = range.end.min(map.len());
    if end > range.start {
        // SAFETY: the mapping is a read-only, file-backed one: dropping
        // its pages only makes later reads fault them in from the file
        // again, and nothing is lost or changed.
        let _ = unsafe {
            map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                range.start,
                end - range.start,
            )
        };
    }
}

/// A shard mapped and walked once, validating every header (counts, time
/// range, how far out of order it is): what the recorder's stop learns and
/// hands to its merge, so the merge does not walk it again, and what the
/// merge reads.
#[derive(Debug)]
pub struct ScannedShard {
    /// Where it is (a merge matches the shards handed to it by this).
    pub path: PathBuf,
    /// Its file name, for messages and `merged.prefix` ([`file_name`]).
    pub name: String,
    /// Its bytes.
    pub bytes: ShardBytes,
    /// What they hold, and where they stop being whole records.
    pub summary: ShardSummary,
    /// What of it an interrupted merge wrote already.
    pub resume: Resume,
}

impl ScannedShard {
    /// Maps and walks the shard at `path`.
    pub fn scan(path: &Path, layouts: &Layouts) -> Result<ScannedShard, Error> {
        Self::scan_from(path, layouts, Resume::default())
    }

    /// Maps the shard at `path` and walks what is left of it to merge
    /// ([`summarize_from`]).
    pub fn scan_from(path: &Path, layouts: &Layouts, from: Resume) -> Result<ScannedShard, Error> {
        let bytes = ShardBytes::open(path)?;
        let summary = summarize_from(&bytes, layouts, from);
        Ok(ScannedShard {
            path: path.to_path_buf(),
            name: file_name(path),
            bytes,
            summary,
            resume: from,
        })
    }

    /// [`ScannedShard::scan`] for a merge, which takes what it can: a
    /// missing shard is empty (a recording killed before its writer created
    /// it); one that cannot be mapped (not a regular file, unreadable) is
    /// empty and damaged from its first byte, so the other shards are still
    /// merged.
    pub fn open(path: &Path, layouts: &Layouts) -> ScannedShard {
        Self::open_from(path, layouts, Resume::default())
    }

    /// [`ScannedShard::open`], of what an interrupted merge left to merge
    /// ([`crate::merged_prefix`]).
    pub fn open_from(path: &Path, layouts: &Layouts, from: Resume) -> ScannedShard {
        if !path.exists() {
            return ScannedShard::empty(path);
        }
        match ScannedShard::scan_from(path, layouts, from) {
            Ok(scanned) => scanned,
            Err(error) => {
                let reason = match error {
                    Error::Io { source, .. } => source.to_string(),
                    other => other.to_string(),
                };
                let dropped = std::fs::metadata(path).map_or(0, |m| m.len() as usize);
                ScannedShard {
                    summary: ShardSummary::unreadable(dropped, format!("cannot be read: {reason}")),
                    resume: from,
                    ..ScannedShard::empty(path)
                }
            }
        }
    }

    /// A shard with nothing to merge.
    pub fn empty(path: &Path) -> ScannedShard {
        ScannedShard {
            path: path.to_path_buf(),
            name: file_name(path),
            bytes: ShardBytes::empty(),
            summary: ShardSummary::default(),
            resume: Resume::default(),
        }
    }

    /// The shard up to the end of its whole, valid records (those before
    /// `summary.start` merged already).
    pub fn valid(&self) -> &[u8] {
        &self.bytes.bytes()[..self.summary.valid_len]
    }
}

/// The name a shard goes by in messages and in `merged.prefix`.
pub fn file_name(path: &Path) -> String {
    path.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

/// How far a sequential reader gets before it releases the pages behind it.
pub const RELEASE_STEP: usize = 32 << 20;

/// Where a shard stops being whole records of its recording.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Damage {
    /// Byte offset of the first bad record.
    pub offset: usize,
    /// Bytes dropped from there to the end.
    pub dropped: usize,
    /// What is wrong there.
    pub reason: String,
}

/// What one walk over a shard finds: every count the recorder's stop, the
/// merge and its report need, so they all agree.
#[derive(Clone, Debug, Default)]
pub struct ShardSummary {
    /// Whole records, by type.
    pub by_type: TypeCounts,
    /// Records the kernel dropped, from `PERF_RECORD_LOST`.
    pub lost: u64,
    /// Samples the kernel dropped, from `PERF_RECORD_LOST_SAMPLES`.
    pub lost_samples: u64,
    /// Earliest and latest record time (perf clock, ns), 0 when none.
    pub first_time: u64,
    /// See `first_time`.
    pub last_time: u64,
    /// Earliest and latest sample time, for HEADER_SAMPLE_TIME.
    pub first_sample: u64,
    /// See `first_sample`.
    pub last_sample: u64,
    /// The most a record's time falls behind a time read before it.
    pub lateness: u64,
    /// Offset of the first record walked: 0, but for a shard whose first
    /// part an interrupted merge already wrote and freed
    /// ([`crate::merged_prefix`]).
    pub start: usize,
    /// Offset of the end of the whole, valid records walked.
    pub valid_len: usize,
    /// What is wrong after `valid_len`, if anything.
    pub damage: Option<Damage>,
    /// The records' bytes by time, for a parallel merge.
    pub index: TimeIndex,
    /// (offset, length) of each run of records that describe state
    /// (`RecordType::describes_state`), for a merge of a time window.
    pub state_spans: Vec<(usize, usize)>,
    /// Whether `index` and `state_spans` are left empty: a live merge
    /// that frees the shards behind it never reads them, and at 64 vCPUs
    /// their buckets' growth was most of its page faults.
    pub unindexed: bool,
}

impl ShardSummary {
    /// Whole records.
    pub fn records(&self) -> u64 {
        self.by_type.iter().map(|(_, n)| n).sum()
    }

    /// Samples.
    pub fn samples(&self) -> u64 {
        self.by_type.get(RecordType::SAMPLE)
    }

    /// A shard that could not be read at all: empty, damaged from byte 0.
    pub fn unreadable(dropped: usize, reason: String) -> ShardSummary {
        ShardSummary {
            damage: Some(Damage {
                offset: 0,
                dropped,
                reason,
            }),
            ..ShardSummary::default()
        }
    }

    /// Takes the whole record `bytes` of type `type_` found at `offset`
    /// into account (one `resume` says is merged only as read, not as
    /// held) and returns its
    /// time; a record of no event of the recording is damage at `offset`
    /// (its `dropped` left for the caller, who knows the shard's length).
    pub fn walk(
        &mut self,
        fields: &mut FieldReader,
        offset: usize,
        (type_, bytes): (RecordType, &[u8]),
        resume: &Resume,
    ) -> Result<u64, Damage> {
        let Some(time) = fields.time(bytes, type_) else {
            return Err(Damage {
                offset,
                dropped: 0,
                reason: "a record of no event of this recording".into(),
            });
        };
        self.valid_len = offset + bytes.len();
        if resume.merged(offset, time) {
            return Ok(time);
        }
        if !self.unindexed {
            let sizes = Bytes {
                input: bytes.len() as u64,
                output: fields.true_len(bytes, type_) as u64,
            };
            self.index.add(offset, self.last_time, time, sizes);
            if type_.describes_state() {
                add_span(&mut self.state_spans, offset, bytes.len());
            }
        }
        self.add(type_, bytes, time);
        Ok(time)
    }

    /// `samples` samples passed over by their headers alone (a live
    /// merge's hop over a run of them), the first of time `first` and the
    /// last of time `last`, ending at `end`: counted, their span timed, no
    /// index (an unindexed summary's), and lateness seen only where the
    /// run's first sample is earlier than what came before it.
    pub fn add_hopped(&mut self, samples: u64, (first, last): (u64, u64), end: usize) {
        debug_assert!(self.unindexed, "a hop leaves no index");
        self.valid_len = end;
        self.by_type.add(RecordType::SAMPLE, samples);
        self.samples_span(first, last);
        self.span(first, last);
    }

    fn add(&mut self, type_: RecordType, record: &[u8], time: u64) {
        self.by_type.add(type_, 1);
        match type_ {
            RecordType::SAMPLE => self.samples_span(time, time),
            RecordType::LOST => self.lost += lost_count(type_, record).unwrap_or(0),
            RecordType::LOST_SAMPLES => self.lost_samples += lost_count(type_, record).unwrap_or(0),
            _ => {}
        }
        self.span(time, time);
    }

    /// Samples from time `first` to `last` were read.
    fn samples_span(&mut self, first: u64, last: u64) {
        self.first_sample = min_nonzero(self.first_sample, first);
        self.last_sample = self.last_sample.max(last);
    }

    /// Records from time `first` to `last` were read next: lateness is
    /// what `first` is earlier than what came before.
    fn span(&mut self, first: u64, last: u64) {
        if first < self.last_time {
            self.lateness = self.lateness.max(self.last_time - first);
        }
        self.first_time = min_nonzero(self.first_time, first);
        self.last_time = self.last_time.max(last);
    }
}

impl ShardSummary {
    /// Adds what `other` holds: counts, losses and times (not its offsets,
    /// index or damage).
    pub fn absorb(&mut self, other: &ShardSummary) {
        for (type_, count) in other.by_type.iter() {
            self.by_type.add(type_, count);
        }
        self.lost += other.lost;
        self.lost_samples += other.lost_samples;
        self.first_time = min_nonzero(self.first_time, other.first_time);
        self.last_time = self.last_time.max(other.last_time);
        self.first_sample = min_nonzero(self.first_sample, other.first_sample);
        self.last_sample = self.last_sample.max(other.last_sample);
    }
}

/// What an interrupted merge's output holds of the CPUs' shards: the
/// whole records of `data` (its data section so far) after FINISHED_INIT
/// (before it is the synthesized state), of an event id `from_cpus`
/// accepts (not the side band's), by the CPU in their sample id.
pub fn summarize_merged(
    data: &[u8],
    layouts: &Layouts,
    from_cpus: impl Fn(u64) -> bool,
) -> BTreeMap<u32, ShardSummary> {
    let mut fields = FieldReader::new(layouts);
    let mut by_cpu: BTreeMap<u32, ShardSummary> = BTreeMap::new();
    let mut records = RecordWalker::new(data);
    records
        .by_ref()
        .find(|r| r.header.type_ == RecordType::FINISHED_INIT);
    for record in records {
        let type_ = record.header.type_;
        let Some(id) = fields.sample_id(record.bytes, type_) else {
            continue;
        };
        if !from_cpus(id.id) {
            continue;
        }
        let summary = by_cpu.entry(id.cpu).or_default();
        summary.add(type_, record.bytes, id.time);
    }
    by_cpu
}

/// Walks a shard once, validating every header and finding every record's
/// time: a torn tail, or a record of no event of this recording, ends the
/// shard there as damage. Pages behind the walk are released, so a shard
/// of any size is read in bounded memory.
pub fn summarize(shard: &ShardBytes, layouts: &Layouts) -> ShardSummary {
    summarize_from(shard, layouts, Resume::default())
}

/// [`summarize`] of what `resume` leaves to merge: the records from
/// offset `resume.start` on (a record's) that an interrupted merge did not
/// write (the bytes before `start` freed, the others in its output).
pub fn summarize_from(shard: &ShardBytes, layouts: &Layouts, resume: Resume) -> ShardSummary {
    let start = resume.start;
    let all = shard.bytes();
    let start = start.min(all.len());
    shard.advise_sequential();
    let mut summary = ShardSummary {
        start,
        valid_len: start,
        ..ShardSummary::default()
    };
    let mut walker = RecordWalker::new(&all[start..]);
    let mut fields = FieldReader::new(layouts);
    let mut released = start;
    for record in walker.by_ref() {
        let offset = start + record.offset;
        let walked = summary.walk(
            &mut fields,
            offset,
            (record.header.type_, record.bytes),
            &resume,
        );
        if let Err(damage) = walked {
            summary.damage = Some(Damage {
                dropped: all.len() - offset,
                ..damage
            });
            break;
        }
        if offset >= released + RELEASE_STEP {
            shard.release(released..offset);
            released = offset;
        }
    }
    shard.release(released..all.len());
    summary.index.finish();
    if let End::Torn {
        offset,
        dropped,
        reason,
    } = walker.end()
    {
        summary.damage = Some(Damage {
            offset: start + offset,
            dropped,
            reason: reason.to_string(),
        });
    }
    summary
}

/// Adds a record to the runs of `spans`, joining it to the last run it
/// follows directly.
fn add_span(spans: &mut Vec<(usize, usize)>, offset: usize, len: usize) {
    match spans.last_mut() {
        Some((start, run)) if *start + *run == offset => *run += len,
        _ => spans.push((offset, len)),
    }
}

fn min_nonzero(current: u64, time: u64) -> u64 {
    if current == 0 || (time != 0 && time < current) {
        time
    } else {
        current
    }
}

/// Records counted by type: an array for the kernel's and perf's types
/// (below 128), where a map looked up for every record was 6% of the live
/// merger's samples on a 16-vCPU guest; a map for any other.
#[derive(Clone, Debug, Default)]
pub struct TypeCounts {
    common: Vec<u64>,
    rest: BTreeMap<RecordType, u64>,
}

/// Types counted in [`TypeCounts`]'s array.
const COMMON_TYPES: usize = 128;

/// Where `type_` is counted in [`TypeCounts`]'s array, if it is.
fn common_index(type_: RecordType) -> Option<usize> {
    usize::try_from(type_.0).ok().filter(|&t| t < COMMON_TYPES)
}

impl TypeCounts {
    /// Counts `n` more records of `type_`.
    pub fn add(&mut self, type_: RecordType, n: u64) {
        match common_index(type_) {
            Some(t) => {
                if self.common.is_empty() {
                    self.common = vec![0; COMMON_TYPES];
                }
                self.common[t] += n;
            }
            None => *self.rest.entry(type_).or_default() += n,
        }
    }

    /// Records of `type_`.
    pub fn get(&self, type_: RecordType) -> u64 {
        match common_index(type_) {
            Some(t) => self.common.get(t).copied().unwrap_or(0),
            None => self.rest.get(&type_).copied().unwrap_or(0),
        }
    }

    /// Each type counted, with its count, in type order.
    pub fn iter(&self) -> impl Iterator<Item = (RecordType, u64)> + '_ {
        let common = (self.common.iter().enumerate())
            .filter(|(_, &n)| n > 0)
            .map(|(t, &n)| (RecordType(t as u32), n));
        common.chain(self.rest.iter().map(|(&t, &n)| (t, n)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_type_come_back_in_type_order_whatever_the_type() {
        let mut counts = TypeCounts::default();
        let rare = RecordType(4096);
        for (type_, n) in [(RecordType::SAMPLE, 3), (rare, 2), (RecordType::MMAP, 1)] {
            counts.add(type_, n);
        }
        counts.add(RecordType::SAMPLE, 4);
        assert_eq!((counts.get(RecordType::SAMPLE), counts.get(rare)), (7, 2));
        assert_eq!(counts.get(RecordType::COMM), 0);
        let all: Vec<_> = counts.iter().collect();
        assert_eq!(
            all,
            [(RecordType::MMAP, 1), (RecordType::SAMPLE, 7), (rare, 2)]
        );
    }
}
