//! A live merge that frees each shard's bytes once they are in the output
//! ([`shardrec_shard::merged_prefix`]), as the merge after the fact does
//! ([`crate::consume`]): the recording then never needs twice its size on
//! disk, and a merger killed along the way is completed from where its
//! output stopped by `shardrec merge` (or the recorder's own merge at the
//! stop): the output's part as written, the shards' from where it had got.
//!
//! Every [`CHECKPOINT`] bytes of output, after a round, the output is
//! flushed, `merged.prefix` says how far it holds the recording, and only
//! then is each shard punched up to its first record not yet written. A
//! stream (`-o -`) is freed behind the same way: the disk holds what its
//! reader has not been sent, and a recording killed leaves the rest, which
//! a merge makes into a perf.data of its own.

use std::fs::File;
use std::io;
use std::path::PathBuf;

use shardrec_shard::merged_prefix::MergedPrefix;
use shardrec_shard::scan::file_name;
use shardrec_shard::RecordingDir;

use super::rounds::Rounds;
use crate::consume::{open_to_punch, punch};

/// Output bytes between two checkpoints.
pub const CHECKPOINT: u64 = 32 << 20;

/// The shards being freed.
pub struct Freeing {
    /// Each shard opened for writing, to punch it (none where it has no
    /// file yet).
    files: Vec<Option<File>>,
    names: Vec<String>,
    punched: Vec<u64>,
    /// Data bytes written at the last checkpoint.
    checkpointed: u64,
    /// Whether a checkpoint was written: the shards then lack what the
    /// output holds.
    pub freed: bool,
    /// The output is a stream: what it holds is gone to its reader.
    streamed: bool,
}

impl Freeing {
    /// Frees the shards at `paths` (in the merge's order), behind a file
    /// or, `streamed`, a stream.
    pub fn open(paths: &[PathBuf], streamed: bool) -> io::Result<Freeing> {
        let files = open_to_punch(paths)?;
        Ok(Freeing {
            punched: vec![0; files.len()],
            files,
            names: paths.iter().map(|p| file_name(p)).collect(),
            checkpointed: 0,
            freed: false,
            streamed,
        })
    }

    /// After a round of an output whose data section starts at
    /// `data_offset` and holds `data_len` bytes, all of them flushed by
    /// `flush`: once [`CHECKPOINT`] more are written, writes down how far
    /// it holds the recording, then frees the shards behind it.
    pub fn after_round(
        &mut self,
        recording: &RecordingDir,
        rounds: &Rounds,
        (data_offset, data_len): (u64, u64),
        flush: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        if data_len < self.checkpointed + CHECKPOINT {
            return Ok(());
        }
        flush()?;
        crate::data_out::injected_fault(&["merge.checkpoint"])?;
        let points = rounds.resume_points();
        let first_sample = rounds
            .followers
            .iter()
            .map(|f| f.summary.first_sample)
            .filter(|&t| t > 0)
            .min();
        let named = |offset: fn(&shardrec_shard::merged_prefix::Resume) -> usize| {
            let offsets = points.iter().map(move |p| offset(p) as u64);
            self.names.iter().cloned().zip(offsets).collect()
        };
        let prefix = MergedPrefix {
            data_offset,
            data_len,
            until: rounds.cut(),
            shards: named(|p| p.start),
            taken: named(|p| p.taken),
            first_sample: first_sample.unwrap_or(0),
            streamed: self.streamed,
        };
        recording
            .write_merged_prefix(&prefix)
            .map_err(io::Error::other)?;
        self.checkpointed = data_len;
        self.freed = true;
        let shards = self.files.iter().zip(&mut self.punched).zip(&points);
        for ((file, punched), point) in shards {
            if let Some(file) = file {
                *punched = punch(file, *punched, point.start as u64)?;
            }
        }
        Ok(())
    }
}
