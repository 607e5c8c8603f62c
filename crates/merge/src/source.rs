//! A shard opened for merging: mapped, and summarized in one walk that
//! validates every header (counts, time range, how far out of order it is).

use std::path::Path;

use shardrec_format::layouts::Layouts;
use shardrec_shard::merged_prefix::Resume;
use shardrec_shard::scan::{ScannedShard, ShardBytes, ShardSummary};

use crate::MergeError;

/// A shard ready to merge.
pub struct Shard {
    /// File name, for messages.
    pub name: String,
    /// The mapped bytes.
    pub bytes: ShardBytes,
    /// What it holds, and where it stops being whole records.
    pub summary: ShardSummary,
    /// What of it an interrupted merge wrote already.
    pub resume: Resume,
}

impl Shard {
    /// Maps and summarizes the shard at `path`. A missing shard is empty (a
    /// recording killed before its writer created it); one that cannot be
    /// mapped (not a regular file, unreadable) is empty and damaged from
    /// its first byte, so the other shards are still merged.
    pub fn open(path: &Path, layouts: &Layouts) -> Result<Shard, MergeError> {
        Self::open_from(path, layouts, Resume::default())
    }

    /// [`Shard::open`], of what an interrupted merge left to merge
    /// ([`shardrec_shard::merged_prefix`]).
    pub fn open_from(path: &Path, layouts: &Layouts, from: Resume) -> Result<Shard, MergeError> {
        if !path.exists() {
            return Ok(Shard::empty(path));
        }
        match ScannedShard::scan_from(path, layouts, from) {
            Ok(scanned) => Ok(Shard {
                resume: from,
                ..Shard::from_scanned(scanned)
            }),
            Err(error) => {
                let reason = match error {
                    shardrec_shard::Error::Io { source, .. } => source.to_string(),
                    other => other.to_string(),
                };
                let dropped = std::fs::metadata(path).map_or(0, |m| m.len() as usize);
                Ok(Shard {
                    name: file_name(path),
                    bytes: ShardBytes::empty(),
                    summary: ShardSummary::unreadable(dropped, format!("cannot be read: {reason}")),
                    resume: from,
                })
            }
        }
    }

    /// A shard with nothing to merge.
    pub fn empty(path: &Path) -> Shard {
        Shard {
            name: file_name(path),
            bytes: ShardBytes::empty(),
            summary: ShardSummary::default(),
            resume: Resume::default(),
        }
    }

    /// A shard the recorder's stop already walked.
    pub fn from_scanned(scanned: ScannedShard) -> Shard {
        Shard {
            name: file_name(&scanned.path),
            bytes: scanned.bytes,
            summary: scanned.summary,
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
