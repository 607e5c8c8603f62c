//! `shardrec merge --time`: a time window of a recording, read at a cost
//! that follows the window. Each CPU's index (`cpuNNN.index`, written at
//! stop) says where in the shard the window's records start and end, and
//! where the records of state before it are (tasks, mappings, symbols,
//! kernel text: every later sample needs them to resolve). Those bytes
//! alone are read, with `pread`, into a recording of the window, which is
//! then merged as any recording. A shard without an index is walked whole.
//!
//! What is kept: samples as `perf report --time` keeps them; records of
//! state up to the window's end; other records (losses, throttling,
//! switches) within the window. The per-event loss counts read at stop
//! cover the whole recording and are left out.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

use shardrec_format::layouts::{FieldReader, Layouts};
use shardrec_format::walk::RecordWalker;
use shardrec_shard::scan::ScannedShard;
use shardrec_shard::shard_index::ShardIndex;
use shardrec_shard::{Error, RecordingDir};

use crate::time_spec::TimeRanges;

/// What cutting a window read.
#[derive(Clone, Debug, Default)]
pub struct WindowReport {
    /// Bytes read from the CPUs' shards.
    pub read: u64,
    /// Bytes in those shards.
    pub total: u64,
    /// The CPUs whose shard had no index and was walked whole.
    pub walked: Vec<u32>,
}

/// Writes the window `spec` of the recording in `dir` as a recording in
/// `into` (which must not exist).
pub fn extract(dir: &Path, spec: &str, into: &Path) -> Result<WindowReport, crate::MergeError> {
    let recording = RecordingDir::open(dir);
    let (mut meta, _) = recording.read_surviving_meta()?;
    let layouts = meta.layouts();
    let mut report = WindowReport::default();
    let mut indexes = Vec::with_capacity(meta.cpus.len());
    for &cpu in &meta.cpus {
        let path = recording.shard_path(cpu);
        report.total += std::fs::metadata(&path).map_or(0, |m| m.len());
        let index = match ShardIndex::read(&recording.index_path(cpu)) {
            Some(index) => index,
            None => {
                let scanned = ScannedShard::scan(&path, &layouts)?;
                report.walked.push(cpu);
                report.read += scanned.bytes.bytes().len() as u64;
                ShardIndex::of(&scanned.summary)
            }
        };
        indexes.push(index);
    }
    let first = indexes
        .iter()
        .map(|i| i.first_sample)
        .filter(|&t| t > 0)
        .min();
    let last = indexes.iter().map(|i| i.last_sample).max();
    let ranges = TimeRanges::parse(spec, first.unwrap_or(0), last.unwrap_or(0))
        .map_err(crate::MergeError::BadTime)?;
    let out = RecordingDir::create(into)?;
    for (&cpu, index) in meta.cpus.iter().zip(&indexes) {
        let bytes = cpu_window(
            &recording.shard_path(cpu),
            index,
            &ranges,
            &layouts,
            &mut report,
        )?;
        write(&out, &out.shard_path(cpu), &bytes)?;
    }
    let vip = recording.vip_path();
    if vip.exists() {
        let all = std::fs::read(&vip).map_err(Error::io(&vip))?;
        write(&out, &out.vip_path(), &keep(&all, &ranges, &layouts))?;
    }
    for (from, to) in [
        (recording.synth_path(), out.synth_path()),
        (recording.bpf_path(), out.bpf_path()),
    ] {
        if from.exists() {
            let all = std::fs::read(&from).map_err(Error::io(&from))?;
            write(&out, &to, &all)?;
        }
    }
    if let Some(stats) = &mut meta.stats {
        stats.lost_by_event.clear();
    }
    out.write_meta(&meta)?;
    Ok(report)
}

/// The window's records of one CPU's shard: for each range, its state
/// records before the checkpoint the range needs (those not read for an
/// earlier range), then what the window keeps of the bytes from there to
/// the checkpoint past the range's end.
fn cpu_window(
    path: &Path,
    index: &ShardIndex,
    ranges: &TimeRanges,
    layouts: &Layouts,
    report: &mut WindowReport,
) -> Result<Vec<u8>, Error> {
    let file = File::open(path).map_err(Error::io(path))?;
    // Exactly the bytes asked for: read-ahead would read what lies
    // between the ranges and the state records.
    let advice = nix::fcntl::PosixFadviseAdvice::POSIX_FADV_RANDOM;
    let _ = nix::fcntl::posix_fadvise(&file, 0, 0, advice);
    let mut read = |offset: usize, len: usize| -> Result<Vec<u8>, Error> {
        let mut bytes = vec![0u8; len];
        file.read_exact_at(&mut bytes, offset as u64)
            .map_err(Error::io(path))?;
        report.read += len as u64;
        Ok(bytes)
    };
    let mut out = Vec::new();
    // Bytes of the shard before this offset have been read or skipped.
    let mut done = 0;
    for (start, end) in regions(index, ranges) {
        let state = index
            .state_spans
            .iter()
            .filter(|&&(offset, len)| offset + len > done && offset < start);
        for &(offset, len) in state {
            // Runs of state records are whole records, and `done` and
            // `start` are record offsets: a run is cut at either.
            let from = offset.max(done);
            out.extend(read(from, (offset + len).min(start) - from)?);
        }
        let region = read(start, end - start)?;
        out.extend(keep(&region, ranges, layouts));
        done = end;
    }
    Ok(out)
}

/// Each range's bytes of a shard, from the checkpoint before its start
/// to the one past its end, joined where they meet.
fn regions(index: &ShardIndex, ranges: &TimeRanges) -> Vec<(usize, usize)> {
    let mut regions: Vec<(usize, usize)> = Vec::new();
    for range in &ranges.0 {
        let start = index.start_for(range.start);
        let end = match range.end {
            0 => index.valid_len,
            end => index.end_for(end),
        };
        match regions.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ if end > start => regions.push((start, end)),
            _ => {}
        }
    }
    regions
}

/// The records of `bytes` a window keeps.
fn keep(bytes: &[u8], ranges: &TimeRanges, layouts: &Layouts) -> Vec<u8> {
    let mut fields = FieldReader::new(layouts);
    let mut out = Vec::with_capacity(bytes.len());
    let (first, last) = (ranges.first(), ranges.last());
    for record in RecordWalker::new(bytes) {
        let type_ = record.header.type_;
        let time = fields.time(record.bytes, type_).unwrap_or(0);
        let kept = if type_ == shardrec_format::header::RecordType::SAMPLE {
            ranges.keeps(time)
        } else if type_.describes_state() {
            time <= last
        } else {
            time == 0 || (first..=last).contains(&time)
        };
        if kept {
            out.extend_from_slice(record.bytes);
        }
    }
    out
}

fn write(dir: &RecordingDir, path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let mut file = dir.create_file(path)?;
    file.write_all(bytes).map_err(Error::io(path))
}
