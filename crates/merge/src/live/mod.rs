//! The live merge: perf.data written while the recording goes on.
//!
//! The same output as after the fact (the same record sink, `-z`,
//! build-id tracking, features and report), but in perf record's order,
//! not sorted: each round writes what every shard holds past what went
//! out, as it lies, and a FINISHED_ROUND ends it once the output covers
//! a look at the rings' heads ([`rounds`]). A record that breaks perf's
//! round rule (it should not) is counted.
//!
//! Its caller knows the rings: it hands each round what every ring's
//! writer has written and a way to read the rings' heads
//! ([`LiveMerge::round`]); the merge only reads files.

mod follow;
mod freeing;
mod hits_walk;
mod rounds;
mod sink;

use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use shardrec_format::layouts::Layouts;
use shardrec_shard::merged_prefix::MergedPrefix;
use shardrec_shard::output::Output;
use shardrec_shard::scan::{ScannedShard, ShardSummary};
use shardrec_shard::{Meta, RecordingDir};

pub use crate::data_out::Going;
pub use crate::data_out::RoundSink;
use crate::data_out::{DataOut, RecordWriter};
use crate::dso::SliceHits;
use crate::output::{self, Written};
pub use crate::report::Lag;
use crate::report::ResumedTally;
use crate::shard_set::ShardPaths;
use crate::{MergeError, MergeOptions, MergeReport};
use follow::Follower;
use freeing::{Checkpoint, Freeing};
use hits_walk::HitsWalk;
pub use rounds::{records_of, round_aim, Round, Rounds, Unwritten, ROUND_COPY_BUDGET};
pub use sink::LiveOutput;
use sink::Sink;

/// A live merge of one recording into one output.
pub struct LiveMerge<'a> {
    recording: RecordingDir,
    layouts: &'a Layouts,
    output: PathBuf,
    options: MergeOptions,
    /// The CPUs' shards in `meta.cpus` order, then the VIP's.
    rounds: Rounds,
    /// Freeing the shards behind the output, where that applies.
    freeing: Option<Freeing>,
    synth: ScannedShard,
    records: RecordWriter<'a, Sink>,
    head_records: u64,
    /// Going on from an earlier merger's checkpoint: what it wrote.
    resumed: Option<Resumed<'a>>,
    /// Where the CPUs' samples are hopped over ([`hops`]), the walk of
    /// the output behind it for the binaries they hit (none with `-B`).
    hits_walk: Option<HitsWalk<'a>>,
    started: Instant,
}

impl<'a> LiveMerge<'a> {
    /// Opens `output` and writes everything before the recorded data: the
    /// attrs (and for a stream, the features), the start records, the
    /// synthesized state (`synth.shard`, whole by now) and FINISHED_INIT.
    pub fn start(
        dir: &Path,
        meta: &'a Meta,
        layouts: &'a Layouts,
        output: LiveOutput,
        options: &MergeOptions,
    ) -> Result<LiveMerge<'a>, MergeError> {
        let recording = RecordingDir::open(dir);
        let path = match &output {
            LiveOutput::File(target) => target.path().to_path_buf(),
            LiveOutput::Stream(_) => PathBuf::from(shardrec_shard::output::STDOUT),
        };
        let fail = |source| MergeError::Output {
            path: path.clone(),
            source,
        };
        let shards = ShardPaths::followed(&recording, meta);
        let paths = shards.recorded();
        let hop = hops(&output, layouts, options);
        let mut resumed = None;
        let (mut sink, freeing) = match output {
            LiveOutput::File(target) => {
                let opened = open_file(&recording, target, &paths, (meta, layouts), options)?;
                let (sink, freeing, earlier) = opened;
                resumed = earlier;
                (sink, freeing)
            }
            LiveOutput::Stream(stream) => open_stream(&recording, stream, &paths, meta, options)?,
        };
        // The synthesized state is in what an earlier merger wrote.
        let synth = match resumed {
            Some(_) => ScannedShard::empty(&recording.synth_path()),
            None => ScannedShard::open(&recording.synth_path(), layouts),
        };
        let (head_records, head_hits) = match resumed.as_mut() {
            Some(earlier) => (
                earlier.walked.records,
                std::mem::take(&mut earlier.walked.hits),
            ),
            None => {
                let out = DataOut::new(&mut sink, None).map_err(fail)?;
                let mut head = RecordWriter::new(out, layouts);
                output::write_head(meta, layouts, &synth, &mut head).map_err(fail)?;
                (head.records, head.hits)
            }
        };
        let mut records = RecordWriter::new(
            DataOut::new(sink, options.compression_level).map_err(fail)?,
            layouts,
        );
        records.hits = head_hits;
        let mut hits_walk = None;
        if hop {
            records = records.unwatched();
            if options.build_ids != crate::BuildIds::None {
                hits_walk = Some(HitsWalk::new(layouts).map_err(fail)?);
            }
        }
        let (prefix, tally) = resumed
            .map(|earlier| (earlier.prefix, earlier.walked.tally))
            .unzip();
        let (cpus, read_to_end) = followers(&shards, prefix.as_ref(), (!options.consume, hop));
        let rounds = Rounds::new(cpus, read_to_end);
        Ok(LiveMerge {
            recording,
            layouts,
            output: path.clone(),
            options: options.clone(),
            rounds: match &prefix {
                Some(prefix) => rounds.written_up_to(prefix.until, prefix.latest),
                None => rounds,
            },
            freeing,
            synth,
            records,
            head_records,
            resumed: prefix.zip(tally).map(|(p, tally)| Resumed {
                bytes: p.data_len,
                first_sample: p.first_sample,
                tally,
            }),
            hits_walk,
            started: Instant::now(),
        })
    }

    /// One round ([`Rounds::round`]): `written[i]` is how far CPU shard
    /// `i` is known written (how far its writer kept the ring, less the
    /// shard's start in the ring), and `unwritten(i, offset, into)` finds
    /// its ring's bytes its writer has not written, if they would start at
    /// that offset of the shard, appended to `into` or in place
    /// ([`Unwritten`]); the VIP's shard is read to its end. `rings_read` turns what
    /// each shard has been read to into every ring's read position, and
    /// `heads` reads every ring's head.
    pub fn round<'r>(
        &mut self,
        written: &[u64],
        unwritten: impl FnMut(usize, u64, &mut Vec<u8>) -> Option<Unwritten<'r>>,
        rings_read: impl FnOnce(&[u64]) -> Vec<u64>,
        heads: impl FnOnce() -> Vec<u64>,
    ) -> io::Result<Round> {
        let (layouts, sink) = (self.layouts, &mut self.records);
        let round = self
            .rounds
            .round(layouts, written, unwritten, rings_read, heads, sink)?;
        self.free_behind()?;
        if round.written == 0 {
            return Ok(round);
        }
        self.walk_for_hits(false)?;
        if self.records.out.sink_mut().is_pipe() {
            // The reader follows the recording: each round reaches it now.
            self.records.out.hand_over()?;
            self.records.out.sink_mut().flush()?;
        }
        self.rounds.reached_output();
        Ok(round)
    }

    /// The recording's smallest CPU ring is `bytes` long: whether a file
    /// output's shards can be freed while the writers append to them
    /// (see [`freeing`]).
    pub fn rings_are(&mut self, bytes: u64) {
        if let Some(freeing) = self.freeing.as_mut() {
            freeing.rings_are(bytes);
        }
    }

    /// After a round: frees the shards behind the output, where it does,
    /// once the output ends a round that a merge can take it up from.
    fn free_behind(&mut self) -> io::Result<()> {
        match self.rounds.at_round_end() {
            true => self.checkpoint_when(Checkpoint::Periodic),
            false => Ok(()),
        }
    }

    /// Writes down how far the output holds the recording now, flushed
    /// (a round's end or not), for a merger that read rings first and
    /// gives their bytes back only then: one that dies before leaves them
    /// in the rings, one that dies after is taken up from here. Only an
    /// output that frees the shards keeps checkpoints
    /// ([`frees_shards`]).
    pub fn checkpoint(&mut self) -> io::Result<()> {
        if self.freeing.is_none() {
            return Err(io::Error::other(
                "a live merge that frees no shards keeps no checkpoint",
            ));
        }
        self.checkpoint_when(Checkpoint::Now)
    }

    /// The output flushed and a checkpoint written, `when` says.
    fn checkpoint_when(&mut self, when: Checkpoint) -> io::Result<()> {
        let Some(freeing) = self.freeing.as_mut() else {
            return Ok(());
        };
        if freeing.due(when, self.records.out.sink_mut().data_len()) {
            // A merger taken up from here starts a compressed frame of
            // its own (`-z`).
            self.records.out.end_frame()?;
        }
        let (recording, rounds) = (&self.recording, &self.rounds);
        match self.records.out.sink_mut() {
            Sink::File { writer, .. } => {
                let data = (writer.data_offset(), writer.data_size());
                freeing.after_round(recording, rounds, data, || writer.flush(), when)
            }
            Sink::Pipe(stream) => {
                let data = (0, stream.bytes_written());
                freeing.after_round(recording, rounds, data, || stream.flush(), when)
            }
        }
    }

    /// Gives up: the output's file goes and the shards stay for a merge
    /// after the fact; once shards were freed, the output holds what they
    /// no longer do, and stays with `merged.prefix` for that merge.
    pub fn abandon(mut self) {
        if !self.freed() {
            self.records.out.sink_mut().discard();
        }
    }

    /// Whether shards were freed: the output then holds what they no
    /// longer do.
    fn freed(&self) -> bool {
        self.freeing.as_ref().is_some_and(|f| f.freed)
    }

    /// The end, once every writer and the VIP are done and `meta` is
    /// final: the rest of every shard, perf's LOST_SAMPLES, the features
    /// and the header, and the output put in place. Returns the report and
    /// what each shard held (the CPUs' in `meta.cpus` order, then the
    /// VIP's).
    pub fn finish(
        mut self,
        meta: &Meta,
        meta_damage: Option<String>,
    ) -> Result<(MergeReport, Vec<ShardSummary>), MergeError> {
        // What the stop waits for is what counts.
        self.started = Instant::now();
        let output = self.output.clone();
        let fail = |source| MergeError::Output {
            path: output.clone(),
            source,
        };
        if let Some(freeing) = self.freeing.as_mut() {
            freeing.stop_punching().map_err(fail)?;
        }
        let layouts = self.layouts;
        while self
            .rounds
            .drain_step(layouts, &mut self.records)
            .map_err(fail)?
        {
            self.free_behind().map_err(fail)?;
        }
        self.walk_for_hits(true).map_err(fail)?;
        if let Some(walk) = self.hits_walk.take() {
            self.records.hits = walk.hits();
        }
        let followers = std::mem::take(&mut self.rounds.followers);
        let names: Vec<String> = followers
            .iter()
            .map(|f| shardrec_shard::scan::file_name(&f.path))
            .collect();
        let shards: Vec<crate::Held> = (followers.iter().zip(&names))
            .map(|(f, name)| crate::Held {
                name,
                summary: &f.summary,
            })
            .collect();
        let RecordWriter {
            out, hits, records, ..
        } = self.records;
        let level = self.options.compression_level;
        let last_time = output::last_time(&shards);
        let (sink, lost_samples_added, compressed) =
            output::write_tail(meta, last_time, out, Default::default(), level).map_err(fail)?;
        let mut written = Written {
            records: records + self.head_records,
            lost_samples_added,
            compressed,
            slices: 1,
            threads: 1,
            ..Written::default()
        };
        written.hits.trust_build_ids = meta.events.iter().any(|e| e.build_id_mmap());
        written.hits.replay(hits);
        let bpf = crate::bpf_features::read(&self.recording.bpf_path())?;
        let ending = crate::Ending {
            bpf: &bpf,
            meta,
            meta_damage,
            options: &self.options,
            output: &output,
            synth: (&self.synth).into(),
            shards: &shards,
            first_sample: self
                .resumed
                .as_ref()
                .map(|r| r.first_sample)
                .filter(|&t| t > 0),
            started: self.started,
        };
        let freed = self.freeing.as_ref().is_some_and(|f| f.freed);
        let mut report = match sink {
            Sink::File {
                writer,
                destination,
                file,
            } => {
                written.data_bytes = writer.data_size();
                let report = ending.conclude(writer, written, |writer, features| {
                    writer.finish(features)?;
                    destination.publish(file)
                });
                if report.is_err() && !freed {
                    destination.discard();
                }
                report.map_err(fail)?
            }
            Sink::Pipe(stream) => {
                let (bytes, left_out) = (stream.bytes_written(), crate::pipe::left_out(&stream));
                stream.finish().map_err(fail)?;
                let mut report = ending.report(written, 0);
                report.output_bytes = bytes;
                report.left_out_of_pipe = left_out;
                report
            }
        };
        if self.freeing.is_some() {
            self.recording.mark_spent(&output);
        }
        if let Some(resumed) = &self.resumed {
            report.add_resumed(resumed.bytes, &resumed.tally);
        }
        report.late_records = self.rounds.late;
        report.rounds = self.rounds.rounds;
        report.lag = Some(self.rounds.lag);
        drop(shards);
        Ok((report, followers.into_iter().map(|f| f.summary).collect()))
    }
}

impl LiveMerge<'_> {
    /// Where samples are hopped over, walks the output for the binaries
    /// they hit: to its end at the stop (`whole`), and while recording a
    /// step of it, only while it is further ahead than the stop may walk
    /// ([`hits_walk`]).
    fn walk_for_hits(&mut self, whole: bool) -> io::Result<()> {
        let Some(walk) = self.hits_walk.as_mut() else {
            return Ok(());
        };
        let Sink::File { writer, file, .. } = self.records.out.sink_mut() else {
            return Err(io::Error::other("only a file's records are hopped over"));
        };
        let records = self.head_records + self.records.records;
        if !whole && !walk.behind(records, writer.data_size()) {
            return Ok(());
        }
        writer.flush()?;
        let data = hits_walk::Data {
            file,
            path: &self.output,
            offset: writer.data_offset(),
            size: writer.data_size(),
        };
        walk.walk(data, whole)
    }
}

/// Whether the CPUs' shards' samples are hopped over by their headers
/// ([`Follower::hopping`]), which leaves the build-id watch to a walk of
/// the output at the end: into a file (a stream's reader has the records
/// already), uncompressed, with no off-CPU waits to turn into perf's
/// samples, and the shards freed behind the output (nothing reads their
/// time index).
fn hops(output: &LiveOutput, layouts: &Layouts, options: &MergeOptions) -> bool {
    matches!(output, LiveOutput::File(_))
        && options.consume
        && options.compression_level.is_none()
        && !layouts.has_off_cpu()
}

/// Whether a live merge of `recording` into `target` frees the shards
/// behind its output: it then writes down how far its output holds the
/// recording ([`MergedPrefix`]), which a merger that reads the rings
/// first needs before it gives their bytes back to the kernel. Compressed
/// (`-z`) or not: a checkpoint comes where a zstd frame ends.
pub fn frees_shards(recording: &RecordingDir, target: &Output, options: &MergeOptions) -> bool {
    options.consume
        && matches!(target, Output::File { .. })
        && crate::same_file_system(recording.path(), target.path())
}

/// Records an earlier merger wrote, the binaries they hit, their counts.
struct Walked<'a> {
    records: u64,
    hits: SliceHits,
    tally: ResumedTally<'a>,
}

/// An earlier merger's last checkpoint, and what it wrote up to there.
struct Earlier<'a> {
    prefix: MergedPrefix,
    walked: Walked<'a>,
}

/// The perf.data file a live merge writes at `path`, with the freeing of
/// the shards at `paths` where that applies (see
/// `MergeOptions::consume`: its output is then `merged.partial`, which a
/// merge completes), and what an earlier merger of it wrote, if one that
/// freed shards was killed: the new one goes on from its last checkpoint.
fn open_file<'a>(
    recording: &RecordingDir,
    target: &Output,
    paths: &[PathBuf],
    (meta, layouts): (&Meta, &'a Layouts),
    options: &MergeOptions,
) -> Result<(Sink, Option<Freeing>, Option<Earlier<'a>>), MergeError> {
    let fail = |source| MergeError::Output {
        path: target.path().to_path_buf(),
        source,
    };
    let frees = frees_shards(recording, target, options);
    let tmp = recording.partial_output_path();
    match frees.then(|| recording.read_merged_prefix()).transpose()? {
        Some(Some(prefix)) => {
            let walked = walk_resumed(recording, &prefix, layouts)?;
            let freeing = Freeing::resume(paths, &prefix).map_err(fail)?;
            let sink =
                Sink::file_resumed(target.clone(), tmp, meta, prefix.data_len).map_err(fail)?;
            Ok((sink, Some(freeing), Some(Earlier { prefix, walked })))
        }
        frees_from_start => {
            let freeing = frees_from_start
                .map(|_| Freeing::open(paths, false, &recording.merged_prefix_path()))
                .transpose()
                .map_err(fail)?;
            let tmp = freeing.as_ref().map(|_| tmp);
            Ok((
                Sink::file(target.clone(), tmp, meta).map_err(fail)?,
                freeing,
                None,
            ))
        }
    }
}

/// perf's pipe format into `stream`, its features first, and the freeing
/// of the shards at `paths` behind it (unless they are kept).
fn open_stream(
    recording: &RecordingDir,
    stream: std::fs::File,
    paths: &[PathBuf],
    meta: &Meta,
    options: &MergeOptions,
) -> Result<(Sink, Option<Freeing>), MergeError> {
    let fail = |source| MergeError::Output {
        path: PathBuf::from(shardrec_shard::output::STDOUT),
        source,
    };
    let freeing = options
        .consume
        .then(|| Freeing::open(paths, true, &recording.merged_prefix_path()))
        .transpose()
        .map_err(fail)?;
    // What is known before the data: the programs loaded before
    // recording, no sample times yet.
    let bpf = crate::bpf_features::read(&recording.bpf_path())?;
    let compression = options.compression_level;
    let features = crate::pipe::features(meta, (0, 0), &bpf, compression);
    Ok((Sink::pipe(stream, meta, &features).map_err(fail)?, freeing))
}

/// Followers of the CPUs' shards (mapped) and of those read to their end
/// each round (the VIP's, read into memory), each from where an earlier
/// merger left it, if one did (`prefix`), with a time index if the
/// shards are `kept`.
fn followers(
    shards: &ShardPaths,
    prefix: Option<&MergedPrefix>,
    (kept, hop): (bool, bool),
) -> (Vec<Follower>, Vec<Follower>) {
    let follow = |follower: Follower| {
        let resume = match prefix {
            Some(prefix) => prefix.resume(&shardrec_shard::scan::file_name(&follower.path)),
            None => Default::default(),
        };
        let follower = follower.resumed(resume);
        match kept {
            true => follower,
            false => follower.unindexed(),
        }
    };
    let cpus = shards.cpus().map(|path| follow(Follower::open(path)));
    let cpus = cpus.map(|follower| match hop {
        true => follower.hopping(),
        false => follower,
    });
    let vip = shards.vip().into_iter();
    let vip = vip.map(|path| follow(Follower::open_copied(path)));
    (cpus.collect(), vip.collect())
}

/// What an earlier merger of this output wrote, which a restarted one
/// goes on from.
struct Resumed<'a> {
    /// Bytes of data.
    bytes: u64,
    /// The first sample's time (0 if none).
    first_sample: u64,
    /// Its records, counted.
    tally: ResumedTally<'a>,
}

/// What an earlier merger of this output wrote up to `prefix`, its last
/// checkpoint: how many records, the binaries they hit, and their counts.
fn walk_resumed<'a>(
    recording: &RecordingDir,
    prefix: &MergedPrefix,
    layouts: &'a Layouts,
) -> Result<Walked<'a>, MergeError> {
    let data = crate::resumed_data(recording, prefix)?;
    let walked = DataOut::new(ResumedTally::new(layouts), None).and_then(|out| {
        let mut walker = RecordWriter::new(out, layouts);
        output::write_resumed(data.data(), &mut walker)?;
        let RecordWriter {
            out, hits, records, ..
        } = walker;
        let tally = out.finish()?.0;
        Ok(Walked {
            records,
            hits,
            tally,
        })
    });
    walked.map_err(|source| MergeError::Output {
        path: recording.partial_output_path(),
        source,
    })
}
