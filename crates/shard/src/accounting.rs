//! The stop's accounting: what each shard of a recording holds, counted
//! into `meta`'s statistics, with the index a merge of a time window reads.
//! The recorder does it at the stop when no live merger counted the shards
//! (or it failed), and the `--switch-output` merger for each window.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::merged_prefix::MergedPrefix;
use crate::scan::{ScannedShard, ShardBytes, ShardSummary};
use crate::shard_index::ShardIndex;
use crate::{parallel, Error, Meta, RecordingDir};

/// The shards as accounting walked them, and what went wrong on the way
/// that costs only time later.
pub struct Accounted {
    /// Every CPU's shard, in `meta.cpus`'s order, for the merge that
    /// follows to take as it is.
    pub scanned: Vec<ScannedShard>,
    /// Indexes that could not be written: a merge of a time window walks
    /// those shards whole.
    pub index_failures: Vec<Error>,
}

/// Walks every CPU's shard of the recording in `dir` and completes
/// `meta`'s statistics (made at stop, or at a switch, without them) with
/// what each holds, writing each shard's index on the way. The records of
/// the side band's event (named `side_band`) are not a CPU's.
///
/// The shards are walked by `threads` threads; at the stop one per online
/// CPU, as the merge walks them: on a large host the shards are many and
/// each walk waits on its own file's pages.
pub fn account(
    dir: &RecordingDir,
    meta: &mut Meta,
    threads: usize,
    side_band: Option<&str>,
) -> Result<Accounted, Error> {
    let layouts = meta.layouts();
    // Where a merge freed the shards' first part, what is left of them,
    // and what its output holds of them.
    let prefix = dir.read_merged_prefix()?;
    let merged = match &prefix {
        // A stream's part went to its reader: the rest is what is counted.
        Some(prefix) if !prefix.streamed => merged_part(dir, meta, prefix, side_band)?,
        _ => BTreeMap::new(),
    };
    let prefix = prefix.unwrap_or_default();
    let paths: Vec<PathBuf> = meta.cpus.iter().map(|&cpu| dir.shard_path(cpu)).collect();
    let scanned = parallel::try_map(&paths, threads, |_, path| {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        ScannedShard::scan_from(path, &layouts, prefix.resume(&name))
    })?;
    let mut accounted = Accounted {
        scanned,
        index_failures: Vec::new(),
    };
    let Some(stats) = meta.stats.as_mut() else {
        return Ok(accounted);
    };
    stats.cpus.clear();
    for (&cpu, shard) in meta.cpus.iter().zip(&accounted.scanned) {
        let mut summary = shard.summary.clone();
        if let Some(part) = merged.get(&cpu) {
            summary.absorb(part);
        }
        stats.count_cpu(cpu, shard.bytes.bytes().len() as u64, &summary);
        if let Err(error) = dir.write_index(cpu, &ShardIndex::of(&shard.summary)) {
            accounted.index_failures.push(error);
        }
    }
    Ok(accounted)
}

/// What the output of an interrupted merge (`merged.partial`, which
/// `prefix` describes) holds of each CPU's shard, leaving out the side
/// band's event (named `side_band`).
fn merged_part(
    dir: &RecordingDir,
    meta: &Meta,
    prefix: &MergedPrefix,
    side_band: Option<&str>,
) -> Result<BTreeMap<u32, ShardSummary>, Error> {
    let path = dir.partial_output_path();
    let bytes = ShardBytes::open(&path)?;
    let start = (prefix.data_offset as usize).min(bytes.bytes().len());
    let end = (start + prefix.data_len as usize).min(bytes.bytes().len());
    let side_band: Vec<u64> = meta
        .events
        .iter()
        .filter(|e| side_band.is_some_and(|name| e.name == name))
        .flat_map(|e| e.ids.iter().map(|&(_, id)| id))
        .collect();
    Ok(crate::scan::summarize_merged(
        &bytes.bytes()[start..end],
        &meta.layouts(),
        |id| !side_band.contains(&id),
    ))
}
