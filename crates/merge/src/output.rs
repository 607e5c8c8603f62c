//! Writing the merged perf.data: the header and attrs, the start records
//! and the synthesized state, FINISHED_INIT, every shard's records in time
//! order (a slice of time per thread, `slice_writer.rs`), perf's
//! end-of-recording LOST_SAMPLES and a last round.

use std::fs::File;
use std::io::{self, BufWriter};

use shardrec_format::header::{RecordHeader, RecordType};
use shardrec_format::layouts::Layouts;
use shardrec_format::records::RecordBuilder;
use shardrec_format::user_records::{self, IdIndexEntry};
use shardrec_format::{SampleId, SampleIdLayout};
use shardrec_perfdata::compressed::Totals;
use shardrec_perfdata::{AttrEntry, PerfDataWriter};
use shardrec_shard::scan::ScannedShard;
use shardrec_shard::{EventMeta, Meta};

use crate::data_out::{self, marker, DataOut, RecordSink, RecordWriter};
use crate::dso::DsoHits;
use crate::order::{release_step, Merged, SortedShard};
use crate::progress::Progress;
use crate::slice_writer::{self, ConsumeShards, Context, SliceDone};
use crate::slices::{self, Slice};

/// What the data section got.
#[derive(Default)]
pub struct Written {
    /// Records written, the merge's own (rounds, init) not counted.
    pub records: u64,
    /// `PERF_RECORD_LOST_SAMPLES` added from the per-event counts.
    pub lost_samples_added: u64,
    /// Bytes of the data section.
    pub data_bytes: u64,
    /// Binaries that samples fell in.
    pub hits: DsoHits,
    /// With `-z`: the HEADER_COMPRESSED feature.
    pub compressed: Option<(shardrec_perfdata::feature::Feature, Vec<u8>)>,
    /// Time slices merged.
    pub slices: usize,
    /// Threads that merged them.
    pub threads: usize,
}

/// How to write the data section.
pub struct DataPlan<'a> {
    /// The recording's meta.
    pub meta: &'a Meta,
    /// Its events' layouts.
    pub layouts: &'a Layouts,
    /// The synthesized state.
    pub synth: &'a ScannedShard,
    /// The CPUs' shards, then the VIP's.
    pub shards: &'a [ScannedShard],
    /// `-z`'s level.
    pub compression: Option<i32>,
    /// Threads.
    pub threads: usize,
    /// What a slice aims at, if not the default.
    pub slice_bytes: Option<u64>,
    /// Free the shards behind the slices written.
    pub consume: Option<ConsumeShards<'a>>,
    /// The data an interrupted merge wrote (`merged.partial`), and the
    /// time its records end at: written as it is instead of the start
    /// records and the synthesized state, the shards' records from that
    /// time on after it.
    pub resumed: Option<(&'a [u8], u64)>,
}

/// Streams every record into `out`, in order, zstd-compressed if asked,
/// and returns the writer for the features.
pub fn write_data(
    plan: &DataPlan,
    out: File,
    progress: &Progress,
) -> io::Result<(PerfDataWriter<BufWriter<File>>, Written)> {
    let file = out.try_clone()?;
    let buffered = BufWriter::with_capacity(1 << 20, out);
    let mut writer = PerfDataWriter::create(buffered, &attrs(plan.meta))?;
    let mut written = write_records(plan, &mut writer, progress, |context, slices, writer| {
        slice_writer::write_slices(context, slices, writer, &file)
    })?;
    written.data_bytes = writer.data_size();
    Ok((writer, written))
}

/// The records [`write_data`] writes, into `sink` in order (perf's pipe
/// format, which no one can seek into): the slices merged one after the
/// other, or with `-z` compressed by several threads and written in order.
pub fn write_stream<S: RecordSink + Send>(
    plan: &DataPlan,
    sink: &mut S,
    progress: &Progress,
) -> io::Result<Written> {
    write_records(plan, sink, progress, slice_writer::write_slices_in_order)
}

/// Every record of the data section into `sink`, the time slices through
/// `slices_into`.
fn write_records<S: RecordSink>(
    plan: &DataPlan,
    sink: &mut S,
    progress: &Progress,
    slices_into: impl FnOnce(&Context, &[Slice], &mut S) -> io::Result<Vec<SliceDone>>,
) -> io::Result<Written> {
    let mut written = Written::default();
    // An MMAP2 says it carries a build id only if an event of the
    // recording asked for them: the kernel sets the bit on other events'
    // records too (see shardrec_sys::build_id_probe).
    written.hits.trust_build_ids = plan.meta.events.iter().any(|e| e.build_id_mmap());
    // The start records and the synthesized state are written as they are;
    // -z compresses what follows, as perf record compresses what it reads
    // from its rings.
    let mut head = RecordWriter::new(DataOut::new(&mut *sink, None)?, plan.layouts);
    match plan.resumed {
        Some((prefix, _)) => write_resumed(prefix, &mut head)?,
        None => write_head(plan.meta, plan.layouts, plan.synth, &mut head)?,
    }
    written.records = head.records;
    written.hits.replay(head.hits);
    progress.advance(plan.synth.summary.valid_len as u64);

    // A resumed merge's shards leave out what is written already
    // (`ScannedShard::resume`): a record that came late, earlier than
    // `until` but not in the prefix, is in the first slice and its first
    // round.
    let rounds_from = plan.resumed.map_or(0, |(_, until)| until);
    let slices = slices::plan(plan.shards, plan.slice_bytes, rounds_from);
    let context = Context {
        shards: plan.shards,
        layouts: plan.layouts,
        compression: plan.compression,
        threads: slices::threads_for(&slices, plan.threads),
        progress,
        consume: plan.consume,
        write_piece: data_out::write_piece(plan.meta.ring_pages * page_size()),
        rounds_from,
    };
    let mut totals = Totals::default();
    for done in slices_into(&context, &slices, sink)? {
        written.records += done.records;
        written.hits.replay(done.hits);
        totals += done.totals;
    }
    written.slices = slices.len();
    written.threads = context.threads;

    let tail = DataOut::new(&mut *sink, plan.compression)?;
    (_, written.lost_samples_added, written.compressed) = write_tail(
        plan.meta,
        last_time(&crate::held(plan.shards)),
        tail,
        totals,
        plan.compression,
    )?;
    Ok(written)
}

/// A header feature and its content.
type FeatureEntry = (shardrec_perfdata::feature::Feature, Vec<u8>);

/// The latest record time in `shards` (0 where none has one), the time
/// perf's LOST_SAMPLES records at the end take.
pub fn last_time(shards: &[crate::Held]) -> u64 {
    shards
        .iter()
        .map(|s| s.summary.last_time)
        .max()
        .unwrap_or(0)
}

/// The end of the data section, into `tail`: perf's LOST_SAMPLES and the
/// last round. Returns the sink, the LOST_SAMPLES added and, with `-z`
/// (`level`), HEADER_COMPRESSED from `totals` and the tail's own.
pub fn write_tail<S: RecordSink>(
    meta: &Meta,
    last_time: u64,
    mut tail: DataOut<S>,
    mut totals: Totals,
    level: Option<i32>,
) -> io::Result<(S, u64, Option<FeatureEntry>)> {
    let lost_samples = write_lost_samples(meta, last_time, &mut tail)?;
    tail.end_round()?;
    let (sink, tail_totals) = tail.finish()?;
    totals += tail_totals;
    let compressed = level.map(|level| {
        totals.level = level;
        totals.feature()
    });
    Ok((sink, lost_samples, compressed))
}

/// What comes before the recorded data: the start records, the
/// synthesized state in time order, FINISHED_INIT.
pub fn write_head<S: RecordSink>(
    meta: &Meta,
    layouts: &Layouts,
    synth: &ScannedShard,
    head: &mut RecordWriter<S>,
) -> io::Result<()> {
    for record in start_records(meta) {
        head.out.record(&record)?;
    }
    let synth = SortedShard::new(synth, layouts, release_step(1));
    for (_, record) in Merged::new(vec![synth]) {
        head.put(record)?;
    }
    head.out.record(&marker(RecordType::FINISHED_INIT))
}

/// The records an interrupted merge wrote, as they are (those it
/// compressed, as they were before); the kernel's are watched for the
/// binaries they hit, as every other record merged.
pub(crate) fn write_resumed<S: RecordSink>(
    prefix: &[u8],
    out: &mut RecordWriter<'_, S>,
) -> io::Result<()> {
    // A `-z` merger's COMPRESSED records go out as the records they
    // carry: counted, watched, and compressed again if this output is.
    let rest = shardrec_perfdata::compressed::each_record(prefix, |record| {
        match RecordHeader::parse(record).is_some_and(|h| h.type_.is_kernels()) {
            true => out.put(record),
            false => out.out.record(record),
        }
    })?;
    match rest.is_empty() {
        true => Ok(()),
        false => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the data an interrupted merge wrote is cut {} bytes before its end",
                rest.len()
            ),
        )),
    }
}

/// What perf record writes before any synthesized state: which ring, CPU
/// and thread each id belongs to, the followed threads and the CPUs.
fn start_records(meta: &Meta) -> Vec<Vec<u8>> {
    let ring_of = |cpu: u32| meta.cpus.iter().position(|&c| c == cpu).unwrap_or(0) as u64;
    let entries: Vec<IdIndexEntry> = meta
        .events
        .iter()
        .flat_map(EventMeta::ids_with_threads)
        .map(|(cpu, tid, id)| IdIndexEntry {
            id,
            ring: ring_of(cpu),
            cpu: cpu.into(),
            tid: tid.into(),
        })
        .collect();
    let threads = meta.events.first().map_or(&[][..], |e| &e.threads[..]);
    let threads = if threads.is_empty() {
        &[-1][..]
    } else {
        threads
    };
    [
        user_records::id_index(&entries),
        user_records::thread_map(threads),
        user_records::cpu_map(&meta.cpus),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Each event with every id it has on any CPU.
pub fn attrs(meta: &Meta) -> Vec<AttrEntry> {
    meta.events
        .iter()
        .map(|event| AttrEntry {
            attr: event.header_attr().into_owned(),
            ids: event.ids.iter().map(|&(_, id)| id).collect(),
        })
        .collect()
}

/// perf record ends with a `PERF_RECORD_LOST_SAMPLES` per event that the
/// kernel counted drops for; so does the merge, stamped with the last time
/// so the order stays non-decreasing.
pub fn write_lost_samples<S: crate::data_out::RecordSink>(
    meta: &Meta,
    last_time: u64,
    out: &mut DataOut<S>,
) -> io::Result<u64> {
    let Some(stats) = &meta.stats else {
        return Ok(0);
    };
    let mut added = 0;
    for &shardrec_shard::EventLoss { cpu, id, lost } in &stats.lost_by_event {
        let Some(event) = meta
            .events
            .iter()
            .find(|e| e.ids.iter().any(|&(_, i)| i == id))
        else {
            continue;
        };
        let layout = SampleIdLayout::new(event.sample_type());
        let sample_id = SampleId {
            id,
            cpu,
            time: last_time,
            ..SampleId::default()
        };
        if let Some(record) = RecordBuilder::new(RecordType::LOST_SAMPLES, 0)
            .u64(lost)
            .finish(&layout, &sample_id)
        {
            out.record(&record)?;
            added += 1;
        }
    }
    Ok(added)
}

/// This host's page size (the recording's rings are counted in pages).
fn page_size() -> usize {
    use nix::unistd::{sysconf, SysconfVar};
    match sysconf(SysconfVar::PAGE_SIZE) {
        Ok(Some(size)) if size > 0 => size as usize,
        _ => 4096,
    }
}
