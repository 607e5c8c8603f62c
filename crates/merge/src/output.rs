//! Writing the merged perf.data.

use std::fs::File;
use std::io::{self, BufWriter};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use shardrec_format::header::{RecordHeader, RecordType};
use shardrec_format::records::RecordBuilder;
use shardrec_format::user_records::{self, IdIndexEntry};
use shardrec_format::{SampleId, SampleIdLayout};
use shardrec_perfdata::compressed::{self, RecordCompressor};
use shardrec_perfdata::{AttrEntry, PerfDataWriter};
use shardrec_shard::{EventMeta, Meta};

use crate::dso::DsoHits;
use crate::order::{release_step, Merged, SortedShard};
use crate::progress::Progress;
use shardrec_format::layouts::{FieldReader, Layouts};

use crate::source::Shard;

/// A round every this many bytes of records. The data is already in time
/// order, so a round costs 8 bytes and nothing else, while a reader holds
/// every record of the last round or two in its reorder buffer (perf's
/// ordered events, hotspot's perfparser). perf record ends a round per pass
/// over its rings, which is a quarter to half a ring per busy CPU (128 to
/// 256 KiB at its default 512 KiB rings); this is smaller still.
const ROUND_BYTES: u64 = 64 << 10;

/// The data section's records after the synthesized state: written as
/// they are, or (`-z`) gathered a round at a time and written as
/// `PERF_RECORD_COMPRESSED` records, as perf record compresses what it
/// reads from its rings. The rounds stay outside, uncompressed, as perf
/// writes them.
struct DataOut {
    writer: PerfDataWriter<BufWriter<File>>,
    compressor: Option<RecordCompressor>,
    pending: Vec<u8>,
    scratch: Vec<u8>,
}

impl DataOut {
    fn record(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self.compressor {
            None => self.writer.write_record(bytes),
            Some(_) => {
                if self.pending.len() + bytes.len() > compressed::MAX_INPUT {
                    self.compress_pending()?;
                }
                self.pending.extend_from_slice(bytes);
                Ok(())
            }
        }
    }

    fn end_round(&mut self) -> io::Result<()> {
        self.compress_pending()?;
        self.writer
            .write_record(&marker(RecordType::FINISHED_ROUND))
    }

    fn compress_pending(&mut self) -> io::Result<()> {
        let Some(compressor) = self.compressor.as_mut() else {
            return Ok(());
        };
        if self.pending.is_empty() {
            return Ok(());
        }
        self.scratch.clear();
        compressor.compress(&self.pending, &mut self.scratch)?;
        self.pending.clear();
        self.writer.write_record(&self.scratch)
    }
}

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
}

/// Streams every record into `out`, in order, zstd-compressed at
/// `compression` if given, and returns the writer for the features.
pub fn write_data(
    meta: &Meta,
    layouts: &Layouts,
    (synth, shards): (&Shard, &[Shard]),
    out: File,
    compression: Option<i32>,
    progress: &Progress,
) -> io::Result<(PerfDataWriter<BufWriter<File>>, Written)> {
    let writer = PerfDataWriter::create(BufWriter::with_capacity(1 << 20, out), &attrs(meta))?;
    let mut written = Written::default();
    let mut times = FieldReader::new(layouts);
    // Marks the binaries samples fall in, and writes the record, without
    // any padding the kernel left after its trailer.
    let mut put = |out: &mut DataOut, written: &mut Written, record: &[u8]| {
        let header = RecordHeader::parse(record).expect("validated");
        written
            .hits
            .observe(header, record, || times.sample_id(record, header.type_));
        written.records += 1;
        let len = times.true_len(record, header.type_);
        if len == record.len() {
            return out.record(record);
        }
        let mut trimmed = record[..len].to_vec();
        trimmed[6..8].copy_from_slice(&(len as u16).to_ne_bytes());
        out.record(&trimmed)
    };
    // The start records and the synthesized state are written as they are;
    // -z compresses what follows, as perf record compresses what it reads
    // from its rings.
    let mut data = DataOut {
        writer,
        compressor: None,
        pending: Vec::new(),
        scratch: Vec::new(),
    };
    for record in start_records(meta) {
        data.record(&record)?;
    }
    for (_, record) in Merged::new(vec![SortedShard::new(synth, layouts, release_step(1))]) {
        put(&mut data, &mut written, record)?;
    }
    data.record(&marker(RecordType::FINISHED_INIT))?;
    data.compressor = compression.map(RecordCompressor::new).transpose()?;
    progress.advance(synth.summary.valid_len as u64);
    let step = release_step(shards.len());
    let streams = shards
        .iter()
        .map(|s| SortedShard::new(s, layouts, step))
        .collect();
    let mut since_round = 0u64;
    for (_, record) in Merged::new(streams) {
        put(&mut data, &mut written, record)?;
        since_round += record.len() as u64;
        if since_round >= ROUND_BYTES {
            data.end_round()?;
            progress.advance(since_round);
            since_round = 0;
        }
    }
    progress.advance(since_round);
    written.lost_samples_added = write_lost_samples(meta, shards, &mut data)?;
    data.end_round()?;
    written.compressed = data.compressor.as_ref().map(RecordCompressor::feature);
    written.data_bytes = data.writer.data_size();
    Ok((data.writer, written))
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
fn attrs(meta: &Meta) -> Vec<AttrEntry> {
    meta.events
        .iter()
        .map(|event| AttrEntry {
            attr: event.attr.clone(),
            ids: event.ids.iter().map(|&(_, id)| id).collect(),
        })
        .collect()
}

fn marker(type_: RecordType) -> [u8; 8] {
    let mut bytes = Vec::with_capacity(8);
    RecordHeader {
        type_,
        misc: 0,
        size: 8,
    }
    .write_to(&mut bytes);
    bytes.try_into().expect("8 bytes")
}

/// perf record ends with a `PERF_RECORD_LOST_SAMPLES` per event that the
/// kernel counted drops for; so does the merge, stamped with the last time
/// so the order stays non-decreasing.
fn write_lost_samples(meta: &Meta, shards: &[Shard], out: &mut DataOut) -> io::Result<u64> {
    let Some(stats) = &meta.stats else {
        return Ok(0);
    };
    let last_time = shards
        .iter()
        .map(|s| s.summary.last_time)
        .max()
        .unwrap_or(0);
    let mut added = 0;
    for &(cpu, id, lost) in &stats.lost_by_event {
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

/// Creates the output next to its final name (`NAME.tmp`), so a merge
/// that fails leaves any earlier file untouched.
pub fn create_temp(output: &Path) -> io::Result<(File, std::path::PathBuf)> {
    let mut tmp = output.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    Ok((file, tmp))
}

/// Moves the finished file into place; an existing one is kept as
/// `NAME.old`, as perf keeps `perf.data.old`.
pub fn publish(tmp: &Path, output: &Path) -> io::Result<()> {
    if output.exists() {
        let mut old = output.as_os_str().to_owned();
        old.push(".old");
        std::fs::rename(output, old)?;
    }
    std::fs::rename(tmp, output)
}
