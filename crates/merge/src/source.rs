//! A shard opened for merging: mapped, every header validated, and
//! measured in one pass (counts, time range, how far out of order it is).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use shardrec_format::header::RecordType;
use shardrec_format::sample_id::{body_end, identifier, padded_identifier};
use shardrec_format::walk::{End, RecordWalker};
use shardrec_format::{u64_at, SampleIdLayout};
use shardrec_shard::scan::{ShardBytes, RELEASE_STEP};

use crate::MergeError;

/// The layout of each kernel id of the recording.
pub type Layouts = HashMap<u64, SampleIdLayout>;

/// Where a shard stops being whole records.
#[derive(Clone, Debug)]
pub struct Damage {
    /// Byte offset of the first bad record.
    pub offset: usize,
    /// Bytes dropped from there to the end.
    pub dropped: usize,
    /// What is wrong there.
    pub reason: String,
}

/// What a shard holds.
#[derive(Clone, Debug, Default)]
pub struct ShardCounts {
    /// Whole records, by `PERF_RECORD_*` type.
    pub by_type: BTreeMap<RecordType, u64>,
    /// Records lost, from `PERF_RECORD_LOST`.
    pub lost: u64,
    /// Samples lost, from `PERF_RECORD_LOST_SAMPLES`.
    pub lost_samples: u64,
    /// Earliest and latest time, 0 when none.
    pub first_time: u64,
    /// See `first_time`.
    pub last_time: u64,
    /// The earliest sample time and latest, for HEADER_SAMPLE_TIME.
    pub first_sample: u64,
    /// See `first_sample`.
    pub last_sample: u64,
}

impl ShardCounts {
    /// Whole records in the shard.
    pub fn records(&self) -> u64 {
        self.by_type.values().sum()
    }

    /// Samples in the shard.
    pub fn samples(&self) -> u64 {
        self.by_type.get(&RecordType::SAMPLE).copied().unwrap_or(0)
    }
}

/// A shard ready to merge.
pub struct Shard {
    /// File name, for messages.
    pub name: String,
    /// The mapped bytes.
    pub bytes: ShardBytes,
    /// Bytes of whole, valid records from the start.
    pub valid_len: usize,
    /// What is wrong after `valid_len`, if anything.
    pub damage: Option<Damage>,
    /// The most a record's time falls behind a time read before it.
    pub lateness: u64,
    /// What it holds.
    pub counts: ShardCounts,
}

impl Shard {
    /// Maps and measures the shard at `path`. A missing shard is empty (a
    /// recording killed before its writer created it); one that cannot be
    /// mapped (not a regular file, unreadable) is empty and damaged from
    /// its first byte, so the other shards are still merged.
    pub fn open(path: &Path, layouts: &Layouts) -> Result<Shard, MergeError> {
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let opened = match path.exists() {
            true => ShardBytes::open(path),
            false => Ok(ShardBytes::empty()),
        };
        let (bytes, damage) = match opened {
            Ok(bytes) => (bytes, None),
            Err(error) => {
                let reason = match error {
                    shardrec_shard::Error::Io { source, .. } => source.to_string(),
                    other => other.to_string(),
                };
                let damage = Damage {
                    offset: 0,
                    dropped: std::fs::metadata(path).map_or(0, |m| m.len() as usize),
                    reason: format!("cannot be read: {reason}"),
                };
                (ShardBytes::empty(), Some(damage))
            }
        };
        let mut shard = Shard {
            name,
            valid_len: 0,
            damage,
            lateness: 0,
            counts: ShardCounts::default(),
            bytes,
        };
        shard.measure(layouts);
        Ok(shard)
    }

    fn measure(&mut self, layouts: &Layouts) {
        self.bytes.advise_sequential();
        let bytes = self.bytes.bytes();
        let mut released = 0;
        let mut walker = RecordWalker::new(bytes);
        let mut times = TimeReader::new(layouts);
        let mut max_seen = 0u64;
        let counts = &mut self.counts;
        for record in walker.by_ref() {
            let type_ = record.header.type_;
            let Some(time) = times.time(record.bytes, type_) else {
                self.damage = Some(Damage {
                    offset: record.offset,
                    dropped: bytes.len() - record.offset,
                    reason: "a record of no event of this recording".into(),
                });
                break;
            };
            self.valid_len = record.offset + record.bytes.len();
            *counts.by_type.entry(type_).or_default() += 1;
            match type_ {
                RecordType::SAMPLE => {
                    counts.first_sample = min_nonzero(counts.first_sample, time);
                    counts.last_sample = counts.last_sample.max(time);
                }
                RecordType::LOST => counts.lost += u64_at(record.bytes, 16).unwrap_or(0),
                RecordType::LOST_SAMPLES => {
                    counts.lost_samples += u64_at(record.bytes, 8).unwrap_or(0)
                }
                _ => {}
            }
            counts.first_time = min_nonzero(counts.first_time, time);
            counts.last_time = counts.last_time.max(time);
            if time < max_seen {
                self.lateness = self.lateness.max(max_seen - time);
            }
            max_seen = max_seen.max(time);
            // Keep the resident set bounded: this pass reads every byte once.
            if record.offset >= released + RELEASE_STEP {
                self.bytes.release_before(record.offset);
                released = record.offset;
            }
        }
        self.bytes.release_before(bytes.len());
        if let End::Torn {
            offset,
            dropped,
            reason,
        } = walker.end()
        {
            self.damage = Some(Damage {
                offset,
                dropped,
                reason: reason.to_string(),
            });
        }
    }

    /// The whole, valid records.
    pub fn valid(&self) -> &[u8] {
        &self.bytes.bytes()[..self.valid_len]
    }
}

fn min_nonzero(current: u64, time: u64) -> u64 {
    if current == 0 || (time != 0 && time < current) {
        time
    } else {
        current
    }
}

/// Finds records' times, remembering the last id's layout (consecutive
/// records nearly always share it).
pub struct TimeReader<'a> {
    layouts: &'a Layouts,
    last: Option<(u64, SampleIdLayout)>,
    /// The distinct trailer sizes of the recording's attrs.
    trailer_sizes: Vec<usize>,
}

impl<'a> TimeReader<'a> {
    /// A reader over the recording's layouts.
    pub fn new(layouts: &'a Layouts) -> Self {
        let mut trailer_sizes: Vec<usize> = layouts.values().map(|l| l.trailer_size()).collect();
        trailer_sizes.sort_unstable();
        trailer_sizes.dedup();
        TimeReader {
            layouts,
            last: None,
            trailer_sizes,
        }
    }

    /// The record's time, or `None` when its id is not the recording's or
    /// it is too short for its layout.
    pub fn time(&mut self, record: &[u8], type_: RecordType) -> Option<u64> {
        self.layout(record, type_)?.time(record, type_)
    }

    /// The record's event id: for KSYMBOL and BPF_EVENT, whichever of the
    /// recording's trailer sizes, read after the body, gives a known id
    /// (the kernel may have padded them).
    fn identifier(&self, record: &[u8], type_: RecordType) -> Option<u64> {
        if body_end(record, type_).is_none() {
            return identifier(record, type_);
        }
        self.trailer_sizes
            .iter()
            .filter_map(|&size| padded_identifier(record, type_, size))
            .find(|id| self.layouts.contains_key(id))
    }

    /// The record's length without kernel padding after its trailer (only
    /// KSYMBOL and BPF_EVENT records can have any: the rest cost nothing).
    pub fn true_len(&mut self, record: &[u8], type_: RecordType) -> usize {
        if type_ != RecordType::KSYMBOL && type_ != RecordType::BPF_EVENT {
            return record.len();
        }
        match self
            .identifier(record, type_)
            .and_then(|id| self.layouts.get(&id))
        {
            Some(layout) => layout.true_len(record, type_),
            None => record.len(),
        }
    }

    /// The record's identifying fields.
    pub fn sample_id(
        &mut self,
        record: &[u8],
        type_: RecordType,
    ) -> Option<shardrec_format::SampleId> {
        self.layout(record, type_)?.parse(record, type_)
    }

    /// The layout of the record's event (the last one found is kept: runs
    /// of records of one event are the rule).
    fn layout(&mut self, record: &[u8], type_: RecordType) -> Option<SampleIdLayout> {
        let id = self.identifier(record, type_)?;
        match self.last {
            Some((last, layout)) if last == id => Some(layout),
            _ => {
                let layout = *self.layouts.get(&id)?;
                self.last = Some((id, layout));
                Some(layout)
            }
        }
    }
}
