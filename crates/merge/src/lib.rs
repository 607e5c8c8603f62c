//! `shardrec merge`: a recording's shards into one perf.data.
//!
//! Reads `meta` and maps every shard (`shardrec_shard::scan::ScannedShard`,
//! or takes the recorder's stop's), validating each record header and
//! measuring how far out of order each shard is; then writes the
//! synthesized records, `PERF_RECORD_FINISHED_INIT`, every shard's records
//! in global time order (`order.rs`) with `PERF_RECORD_FINISHED_ROUND` at
//! regular intervals, perf's end-of-recording `LOST_SAMPLES`, and the header
//! features perf writes. A torn or corrupt shard contributes every whole
//! record before the damage, and the report says what was dropped.
//!
//! ```no_run
//! let options = shardrec_merge::MergeOptions { progress: true, ..Default::default() };
//! let output = shardrec_shard::output::Output::resolve("perf.data".as_ref())?;
//! let report = shardrec_merge::merge("perf.data.shards".as_ref(), &output, &options)?;
//! eprint!("{report}");
//! # Ok::<(), shardrec_merge::MergeError>(())
//! ```

pub mod archive;
mod bpf_features;
pub mod build_id_cache;
mod consume;
mod data_out;
mod destination;
mod dso;
mod header_features;
pub mod live;
mod order;
mod output;
mod pipe;
mod progress;
mod report;
mod shard_set;
mod slice_writer;
mod slices;
pub mod switched;
pub mod time_spec;
pub mod window;

use std::path::{Path, PathBuf};
use std::time::Instant;

use shardrec_format::header::RecordType;
use shardrec_shard::merged_prefix::MergedPrefix;
use shardrec_shard::output::Output;
use shardrec_shard::scan::ShardBytes;
use shardrec_shard::RecordingDir;

use destination::Destination;
pub use report::{CpuSummary, MergeReport};
use shard_set::{OpenedShards, ShardPaths};
use shardrec_shard::scan::{ScannedShard, ShardSummary};

/// Why a merge could not produce its output.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// `meta` or a shard could not be read.
    #[error(transparent)]
    Recording(#[from] shardrec_shard::Error),
    /// A `--time` that is not one.
    #[error("{0}")]
    BadTime(String),
    /// The merge failed after it had freed part of the shards: that part
    /// is in `merged.partial`, and a merge of the directory completes it.
    #[error("the merge stopped after it had freed the first part of the shards, which is in {}: shardrec merge {} -o FILE completes it", .partial.display(), .dir.display())]
    Interrupted {
        /// The recording.
        dir: PathBuf,
        /// What the merge wrote.
        partial: PathBuf,
        /// Why it stopped.
        source: std::io::Error,
    },
    /// The output could not be written.
    #[error("cannot write {}", .path.display())]
    Output {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// How to merge.
#[derive(Clone, Debug, Default)]
pub struct MergeOptions {
    /// Show a progress bar on the terminal.
    pub progress: bool,
    /// `-z`: compress the records with zstd at this level, as perf record
    /// `-z` does.
    pub compression_level: Option<i32>,
    /// Threads to read and merge with (`--threads`); `None` for one per
    /// online CPU. The output is the same whatever the number.
    pub threads: Option<usize>,
    /// Record bytes a time slice aims at; `None` picks from the recording
    /// (32 MiB, more with many shards). Smaller slices cost more reading
    /// at their edges and change nothing in an uncompressed output (with
    /// `-z`, each slice is its own zstd frame); the tests use them to cut
    /// small recordings into many slices.
    pub slice_bytes: Option<u64>,
    /// Which build ids the header gets.
    pub build_ids: BuildIds,
    /// The build-id cache to add them to (perf's `~/.debug`); `None`
    /// (`-N`) for none.
    pub build_id_cache: Option<build_id_cache::BuildIdCache>,
    /// Free each shard's bytes once they are merged
    /// ([`shardrec_shard::merged_prefix`]): for a merge whose shards are
    /// deleted after it. Done only where it is safe and pays: without
    /// `-z`, with no damaged shard, the output on the shards' file system.
    pub consume: bool,
}

/// Which binaries get their build id in the header (and the cache).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BuildIds {
    /// Those samples fell in, and the kernel (perf's default).
    #[default]
    Hit,
    /// Every mapped binary (`--buildid-all`).
    All,
    /// None (`-B`).
    None,
}

/// Merges the recording in `dir` into `output`, with a progress bar when
/// asked for and stderr is a terminal.
pub fn merge(
    dir: &Path,
    output: &Output,
    options: &MergeOptions,
) -> Result<MergeReport, MergeError> {
    merge_scanned(dir, output, options, Vec::new())
}

/// Merges only the time window `spec` (perf's `--time`) of the recording
/// in `dir` into `output` ([`window`]): the window is cut into
/// `OUTPUT.window.shards/` (for a device or FIFO output, a private
/// directory in `$TMPDIR`), merged, and that directory removed.
pub fn merge_window(
    dir: &Path,
    output: &Output,
    options: &MergeOptions,
    spec: &str,
) -> Result<(window::WindowReport, MergeReport), MergeError> {
    let recording = RecordingDir::open(dir);
    spent(&recording)?;
    if recording.merged_prefix_path().exists() {
        return Err(refused(dir, format!(
            "an interrupted merge freed the first part of the shards: complete it first (shardrec merge {} -o FILE), then read its output with perf report --time {spec}",
            dir.display()
        )));
    }
    // Beside the output, or where the output is a device or FIFO, in a
    // private directory of $TMPDIR.
    let (cut, scratch) = match output.shards_beside() {
        Some(_) => {
            let mut cut = output.path().as_os_str().to_owned();
            cut.push(".window.shards");
            (PathBuf::from(cut.clone()), PathBuf::from(cut))
        }
        None => {
            let private = RecordingDir::create_private(&std::env::temp_dir())?;
            (private.path().join("window"), private.path().to_path_buf())
        }
    };
    let _ = std::fs::remove_dir_all(&cut);
    let result = window::extract(dir, spec, &cut)
        .and_then(|window| Ok((window, merge_scanned(&cut, output, options, Vec::new())?)));
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// [`merge`], taking the shards in `scanned` as they are instead of
/// walking them again: the recorder's stop has just walked every CPU's
/// shard to count what it holds, so its merge starts writing at once.
pub fn merge_scanned(
    dir: &Path,
    target: &Output,
    options: &MergeOptions,
    scanned: Vec<ScannedShard>,
) -> Result<MergeReport, MergeError> {
    let progress = options.progress;
    let started = Instant::now();
    let recording = RecordingDir::open(dir);
    let (meta, meta_damage) = recording.read_surviving_meta()?;
    let layouts = meta.layouts();
    let threads = options
        .threads
        .unwrap_or_else(shardrec_shard::parallel::online_cpus)
        .max(1);
    // Each shard opened (and walked) by a thread.
    let paths = ShardPaths::of(&recording, &meta);
    spent(&recording)?;
    let resumed = recording.read_merged_prefix()?;
    let OpenedShards {
        recorded: shards,
        synth,
    } = match &resumed {
        None => paths.open(&layouts, threads, scanned),
        Some(prefix) => paths.open_resumed(&layouts, threads, prefix),
    };
    let recorded_paths = paths.recorded();
    // A stream's part went to its reader: this output holds the rest.
    let resumed = resumed.filter(|prefix| !prefix.streamed);
    let partial = resumed
        .as_ref()
        .map(|prefix| resumed_data(&recording, prefix))
        .transpose()?;
    let bpf = bpf_features::read(&recording.bpf_path())?;
    let held_shards = held(&shards);
    let bar = progress::Progress::new(input_bytes((&synth).into(), &held_shards), progress);
    let output = target.path();
    let consume = options.consume
        && resumed.is_none()
        && options.compression_level.is_none()
        && shards.iter().all(|s| s.summary.damage.is_none())
        && matches!(target, Output::File { .. })
        && same_file_system(dir, target.path());
    let plan = output::DataPlan {
        meta: &meta,
        layouts: &layouts,
        synth: &synth,
        shards: &shards,
        compression: options.compression_level,
        threads,
        slice_bytes: options.slice_bytes,
        consume: consume.then_some(slice_writer::ConsumeShards {
            recording: &recording,
            paths: &recorded_paths,
        }),
        resumed: partial.as_ref().map(|p| (p.data(), p.until)),
    };
    let ending = Ending {
        bpf: &bpf,
        meta: &meta,
        meta_damage: meta_damage.map(|e| shardrec_shard::with_causes(&e)),
        options,
        output,
        synth: (&synth).into(),
        shards: &held_shards,
        first_sample: resumed.as_ref().map(|p| p.first_sample).filter(|&t| t > 0),
        started,
    };
    if *target == Output::Pipe {
        let mut report = pipe::write(ending, &plan, &bar).map_err(|source| MergeError::Output {
            path: output.to_path_buf(),
            source,
        })?;
        bar.finish();
        if let Some(partial) = &partial {
            report.add_resumed(partial.data().len() as u64, &partial.tally(&layouts));
        }
        return Ok(report);
    }
    let fail = |source| MergeError::Output {
        path: output.to_path_buf(),
        source,
    };
    let tmp_path = consume.then(|| recording.partial_output_path());
    let (destination, file) = Destination::create(target.clone(), tmp_path).map_err(fail)?;
    let result_file = file.try_clone().map_err(fail)?;
    // A merge that fails leaves no half-written output behind, but the
    // part of the recording only its output holds: what it freed from the
    // shards, or what the interrupted merge it resumed had freed.
    let fail = |source| {
        let freed = consume && recording.merged_prefix_path().exists();
        match (freed, destination.tmp(), resumed.is_some()) {
            (true, Some(partial), _) => MergeError::Interrupted {
                dir: dir.to_path_buf(),
                partial: partial.to_path_buf(),
                source,
            },
            (_, _, true) => {
                destination.discard();
                MergeError::Interrupted {
                    dir: dir.to_path_buf(),
                    partial: recording.partial_output_path(),
                    source,
                }
            }
            _ => {
                destination.discard();
                fail(source)
            }
        }
    };
    let (writer, written) = output::write_data(&plan, file, &bar).map_err(fail)?;
    let mut report = ending
        .conclude(writer, written, |writer, features| {
            writer.finish(features)?;
            destination.publish(result_file)
        })
        .map_err(fail)?;
    if consume {
        recording.mark_spent(output);
    }
    bar.finish();
    if let Some(partial) = &partial {
        report.add_resumed(partial.data().len() as u64, &partial.tally(&layouts));
    }
    Ok(report)
}

/// What the end of a merge reads of a shard: its name (for the damage it
/// reports) and what it held, however it was read (scanned after the
/// fact, or followed while recording).
#[derive(Clone, Copy)]
pub(crate) struct Held<'a> {
    pub name: &'a str,
    pub summary: &'a ShardSummary,
}

impl<'a> From<&'a ScannedShard> for Held<'a> {
    fn from(shard: &'a ScannedShard) -> Held<'a> {
        Held {
            name: &shard.name,
            summary: &shard.summary,
        }
    }
}

/// What each of `shards` held.
pub(crate) fn held(shards: &[ScannedShard]) -> Vec<Held<'_>> {
    shards.iter().map(Held::from).collect()
}

/// What every merge ends with, once its data section is written: the
/// header features (build ids of the binaries hit, the BPF programs
/// captured), the output put in place, the build-id cache, the report.
pub(crate) struct Ending<'a> {
    pub bpf: &'a bpf_features::Captured,
    pub meta: &'a shardrec_shard::Meta,
    pub meta_damage: Option<String>,
    pub options: &'a MergeOptions,
    pub output: &'a Path,
    /// What `synth.shard` held.
    pub synth: Held<'a>,
    /// What each CPU's shard held, in `meta.cpus` order.
    pub shards: &'a [Held<'a>],
    /// The first sample's time where the shards no longer hold it (an
    /// interrupted merge freed it).
    pub first_sample: Option<u64>,
    pub started: Instant,
}

impl Ending<'_> {
    /// Writes the features through `finish` (which also puts the output
    /// in place) and reports.
    pub fn conclude<W: std::io::Write + std::io::Seek>(
        self,
        writer: shardrec_perfdata::PerfDataWriter<W>,
        written: output::Written,
        finish: impl FnOnce(
            shardrec_perfdata::PerfDataWriter<W>,
            &[(shardrec_perfdata::feature::Feature, Vec<u8>)],
        ) -> std::io::Result<()>,
    ) -> std::io::Result<MergeReport> {
        let options = self.options;
        let build_ids = header_features::build_ids(self.meta, &written.hits, options.build_ids);
        let mut features = header_features::all(self.meta, self.sample_times(), &build_ids);
        features.extend(self.bpf.features());
        features.extend(written.compressed.clone());
        finish(writer, &features)?;
        let mut report = self.report(written, build_ids.len());
        if let Some(cache) = &options.build_id_cache {
            report.cached = build_id_cache::add(cache, &build_ids);
        }
        Ok(report)
    }

    /// The first and last sample time of the recording.
    pub fn sample_times(&self) -> (u64, u64) {
        let mut times = sample_times(self.shards);
        if let Some(first) = self.first_sample {
            times.0 = first;
        }
        times
    }

    /// The report of a merge that wrote `written`, with `build_ids` build
    /// ids in its header.
    pub fn report(self, written: output::Written, build_ids: usize) -> MergeReport {
        let (meta, shards) = (self.meta, self.shards);
        let all = || std::iter::once(&self.synth).chain(shards);
        let mut by_type = std::collections::BTreeMap::new();
        for held in all() {
            for (t, n) in held.summary.by_type.iter() {
                *by_type.entry(t).or_default() += n;
            }
        }
        if written.lost_samples_added > 0 {
            *by_type.entry(RecordType::LOST_SAMPLES).or_default() += written.lost_samples_added;
        }
        let cpus = (meta.cpus.iter().zip(shards))
            .map(|(&cpu, held)| CpuSummary {
                cpu,
                samples: held.summary.samples(),
                lost: lost_on(meta, cpu, held.summary),
            })
            .collect();
        let damage = all()
            .filter_map(|h| Some((h.name.to_string(), h.summary.damage.clone()?)))
            .collect();
        MergeReport {
            output: self.output.to_path_buf(),
            by_type,
            cpus,
            lost_samples_added: written.lost_samples_added,
            time_span: span(shards, |s| (s.first_time, s.last_time)),
            input_bytes: input_bytes(self.synth, shards),
            output_bytes: std::fs::metadata(self.output).map_or(0, |m| m.len()),
            damage,
            build_ids,
            elapsed: self.started.elapsed(),
            slices: written.slices,
            threads: written.threads,
            meta_damage: self.meta_damage,
            bpf_programs: self.bpf.programs.len(),
            bpf_torn_bytes: self.bpf.torn_bytes,
            bpf_broken: self.bpf.broken,
            ..MergeReport::default()
        }
    }
}

/// Refuses a recording whose shards a merge freed as it went.
fn spent(recording: &RecordingDir) -> Result<(), MergeError> {
    let Ok(output) = std::fs::read(recording.spent_path()) else {
        return Ok(());
    };
    Err(refused(recording.path(), format!(
        "a merge that freed the shards as it went (--consume, or the recorder's own) wrote this recording into {} already: the shards hold nothing more",
        String::from_utf8_lossy(&output)
    )))
}

/// A merge refused for what it found at `path`.
fn refused(path: &Path, why: String) -> MergeError {
    let error = std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    shardrec_shard::Error::io(path)(error).into()
}

/// What an interrupted merge wrote, mapped: the data `prefix` describes.
pub(crate) fn resumed_data(
    recording: &RecordingDir,
    prefix: &MergedPrefix,
) -> Result<ResumedData, MergeError> {
    let path = recording.partial_output_path();
    let bytes = ShardBytes::open(&path)?;
    let (start, end) = (
        prefix.data_offset,
        prefix.data_offset.checked_add(prefix.data_len),
    );
    let end = end.unwrap_or(u64::MAX);
    if (bytes.bytes().len() as u64) < end {
        return Err(refused(&path, format!(
            "an interrupted merge wrote the first {} bytes of this recording's data here and freed them from the shards, but the file holds {} bytes",
            prefix.data_len,
            bytes.bytes().len()
        )));
    }
    Ok(ResumedData {
        bytes,
        range: start as usize..end as usize,
        until: prefix.rounds_from(),
    })
}

/// The data section an interrupted merge wrote.
pub(crate) struct ResumedData {
    bytes: ShardBytes,
    range: std::ops::Range<usize>,
    /// The earliest time of the records it does not hold.
    until: u64,
}

impl ResumedData {
    pub(crate) fn data(&self) -> &[u8] {
        &self.bytes.bytes()[self.range.clone()]
    }

    /// Its records, counted as the merge counts those it writes.
    pub(crate) fn tally<'a>(
        &self,
        layouts: &'a shardrec_format::layouts::Layouts,
    ) -> report::ResumedTally<'a> {
        let mut tally = report::ResumedTally::new(layouts);
        // Counting only: it cannot fail.
        let _ = shardrec_perfdata::compressed::each_record(self.data(), |record| {
            data_out::RecordSink::put(&mut tally, record)
        });
        tally
    }
}

/// Whether `output` is written on the file system that holds `dir`, so
/// that the pages the shards give back are the output's to take and the
/// finished output is renamed into place.
pub(crate) fn same_file_system(dir: &Path, output: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let parent = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match (std::fs::metadata(dir), std::fs::metadata(parent)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev(),
        _ => false,
    }
}

/// The first and last sample time over all shards.
pub(crate) fn sample_times(shards: &[Held]) -> (u64, u64) {
    span(shards, |s| (s.first_sample, s.last_sample))
}

/// The earliest non-zero first and the latest last of `times` over all
/// shards (0 where there is none).
fn span(shards: &[Held], times: impl Fn(&ShardSummary) -> (u64, u64)) -> (u64, u64) {
    let all = || shards.iter().map(|s| times(s.summary));
    let first = all().map(|(first, _)| first).filter(|&t| t > 0).min();
    let last = all().map(|(_, last)| last).max();
    (first.unwrap_or(0), last.unwrap_or(0))
}

/// Records lost on a CPU, from its shard's LOST records and the kernel's
/// per-event counts ([`shardrec_shard::dropped`]).
fn lost_on(meta: &shardrec_shard::Meta, cpu: u32, held: &ShardSummary) -> u64 {
    let counted: u64 = meta
        .stats
        .iter()
        .flat_map(|s| &s.lost_by_event)
        .filter(|loss| loss.cpu == cpu)
        .map(|loss| loss.lost)
        .sum();
    shardrec_shard::dropped(held.lost, counted, held.lost_samples)
}

/// The record bytes a merge of `synth` and `shards` reads.
fn input_bytes(synth: Held, shards: &[Held]) -> u64 {
    let all = std::iter::once(synth).chain(shards.iter().copied());
    all.map(|s| (s.summary.valid_len - s.summary.start) as u64)
        .sum()
}
