//! Where merged records go: a sink of whole records, optionally through a
//! zstd compressor (`-z`), with every record counted, trimmed of kernel
//! padding and watched for the binaries it hits.

use std::fs::File;
use std::io::{self, Seek, Write};
use std::os::unix::fs::FileExt;

use shardrec_control::fault::{Fault, Site};
use shardrec_format::header::{RecordHeader, RecordType};
use shardrec_format::layouts::{FieldReader, Layouts};
use shardrec_format::{records, SampleIdLayout};
use shardrec_perfdata::compressed::{self, RecordCompressor, Totals};
use shardrec_perfdata::pipe::PipeWriter;
use shardrec_perfdata::PerfDataWriter;

use crate::dso::SliceHits;

/// Takes whole records.
pub trait RecordSink {
    /// Appends `bytes` (whole records).
    fn put(&mut self, bytes: &[u8]) -> io::Result<()>;

    /// Appends each of `records`, in order.
    fn put_all(&mut self, records: &[&[u8]]) -> io::Result<()> {
        records.iter().try_for_each(|record| self.put(record))
    }
}

impl<W: Write + Seek> RecordSink for PerfDataWriter<W> {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        injected_fault(&[Site::MergeWrite])?;
        self.write_record(bytes)
    }

    fn put_all(&mut self, records: &[&[u8]]) -> io::Result<()> {
        for _ in records {
            injected_fault(&[Site::MergeWrite])?;
        }
        self.write_records(records)
    }
}

impl<W: Write> RecordSink for PipeWriter<W> {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        injected_fault(&[Site::MergeWrite])?;
        self.write_record(bytes)
    }
}

/// What `SHARDREC_FAULTS` makes of a write of the merge at these `sites`,
/// for a test (see [`shardrec_control::fault`]).
pub fn injected_fault(sites: &[Site]) -> io::Result<()> {
    let fault = sites
        .iter()
        .filter_map(|&site| shardrec_control::fault::inject(site))
        .find_map(Fault::error);
    match fault {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

impl RecordSink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.extend_from_slice(bytes);
        Ok(())
    }
}

/// Records only counted (and watched for the binaries they hit, by a
/// [`RecordWriter`]): those an earlier merge wrote.
impl RecordSink for io::Sink {
    fn put(&mut self, _: &[u8]) -> io::Result<()> {
        Ok(())
    }
}

impl<S: RecordSink> RecordSink for &mut S {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        (**self).put(bytes)
    }

    fn put_all(&mut self, records: &[&[u8]]) -> io::Result<()> {
        (**self).put_all(records)
    }
}

/// Records written into a file from a given offset on, a
/// [`write_piece`] at a time, with positioned writes (so threads can fill
/// one file).
///
/// The threads take turns at writing (`turn`): a file system copies a
/// buffered write into the page cache under the file's lock anyway, and
/// the kernel's wait for that lock spins, which on a small host took the
/// CPU from the other threads' merging (a 2.4 GB merge on 2 CPUs took
/// 0.95–1.7 s with 2 threads against 0.81–1.0 s with one). Waiting here
/// sleeps, so one thread copies while the others merge.
pub struct PositionedSink<'f> {
    file: &'f File,
    turn: &'f std::sync::Mutex<()>,
    at: u64,
    buf: Vec<u8>,
    piece: usize,
    /// Bytes written or buffered.
    pub len: u64,
}

/// What one positioned write takes, for a recording whose rings held
/// `ring_bytes` each: half a ring (a writer writes a quarter to a half at
/// a time), from 64 KiB to 512 KiB. The page cache gives a write folios of
/// up to its size, which a merge that frees the shards as it goes
/// ([`crate::consume`]) fills from the shards' freed folios only where
/// those are as large; larger writes take new pages, which a VM that hands
/// freed memory to its host makes dear. By hand, such a merge of a DWARF
/// recording (1.2 GB) with 256 KiB rings took 0.57–0.87 s in 128 KiB
/// writes, 0.75 s in 64 KiB and 1.7–3.4 s in 512 KiB; with the default
/// 4 MiB rings, 0.34–0.44 s in 512 KiB writes, 0.52–0.59 s in 128 KiB
/// and 1.04–1.06 s in 2 MiB.
pub fn write_piece(ring_bytes: usize) -> usize {
    (ring_bytes / 2).clamp(64 << 10, 512 << 10)
}

impl<'f> PositionedSink<'f> {
    /// A sink writing `file` from offset `at`, `piece` bytes at a time
    /// ([`write_piece`]), taking `turn` to write.
    pub fn new(file: &'f File, turn: &'f std::sync::Mutex<()>, at: u64, piece: usize) -> Self {
        PositionedSink {
            file,
            turn,
            at,
            buf: Vec::with_capacity(piece),
            piece,
            len: 0,
        }
    }

    /// Writes what is buffered.
    pub fn flush(&mut self) -> io::Result<()> {
        injected_fault(&[Site::MergeWrite, Site::MergeSlice])?;
        let turn = self.turn.lock().unwrap_or_else(|p| p.into_inner());
        self.file.write_all_at(&self.buf, self.at)?;
        drop(turn);
        self.at += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }
}

impl RecordSink for PositionedSink<'_> {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.buf.len() + bytes.len() > self.piece {
            self.flush()?;
        }
        self.buf.extend_from_slice(bytes);
        self.len += bytes.len() as u64;
        Ok(())
    }
}

/// Records into a sink as they are, or (`-z`) gathered and written as
/// `PERF_RECORD_COMPRESSED` records, as perf record compresses what it
/// reads from its rings. Rounds stay outside, uncompressed, as perf
/// writes them; the zstd frame goes on across them, as perf's one frame
/// does (a frame per round cost 5 to 7% more zstd time and a quarter
/// more bytes), and ends only where a merge may take the output up
/// ([`end_frame`](Self::end_frame)) and at the end.
pub struct DataOut<S> {
    sink: S,
    compressor: Option<RecordCompressor>,
    /// Records gathered, not yet compressed.
    pending: Vec<u8>,
    /// The last compression's COMPRESSED records, not yet in the sink,
    /// and the FINISHED_ROUNDs that follow them: the frame can still end
    /// in the last of those records, at `held_last`.
    held: Vec<u8>,
    held_last: Option<usize>,
    held_rounds: usize,
}

impl<S: RecordSink> DataOut<S> {
    /// Records into `sink`, compressed at `level` if given.
    pub fn new(sink: S, level: Option<i32>) -> io::Result<Self> {
        Ok(DataOut {
            sink,
            compressor: level.map(RecordCompressor::new).transpose()?,
            pending: Vec::new(),
            held: Vec::new(),
            held_last: None,
            held_rounds: 0,
        })
    }

    /// The sink (records given to a compressor may not have reached it).
    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.sink
    }

    /// One whole record.
    pub fn record(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self.compressor {
            None => self.sink.put(bytes),
            Some(_) => self.compress_run(bytes),
        }
    }

    /// Whole records, in order: each a run of whole records, of any
    /// length (a ring's bytes as they lie).
    pub fn records(&mut self, records: &[&[u8]]) -> io::Result<()> {
        match self.compressor {
            None => self.sink.put_all(records),
            Some(_) => records.iter().try_for_each(|run| self.compress_run(run)),
        }
    }

    /// `run` (whole records) into the compressor: small runs gathered, a
    /// large one compressed where it lies, up to [`compressed::MAX_INPUT`]
    /// at a time.
    fn compress_run(&mut self, mut run: &[u8]) -> io::Result<()> {
        if run.is_empty() {
            return Ok(());
        }
        if self.pending.len() + run.len() > compressed::MAX_INPUT {
            self.compress_pending(false)?;
        }
        while run.len() > compressed::MAX_INPUT {
            // Validated records are whole; bytes that are not go in
            // pieces all the same rather than nowhere.
            let whole = match whole_records_within(run, compressed::MAX_INPUT) {
                0 => compressed::MAX_INPUT,
                whole => whole,
            };
            self.compress(&run[..whole], false)?;
            run = &run[whole..];
        }
        // A long run is compressed where it lies but for its last record,
        // which stays gathered: gathered whole, a DWARF storm's runs were
        // copied once more (53 of the merger's 1,553 samples in a profile
        // under -z).
        let last = last_record_at(run);
        if last >= GATHER_BELOW {
            self.compress_pending(false)?;
            self.compress(&run[..last], false)?;
            run = &run[last..];
        }
        self.pending.extend_from_slice(run);
        Ok(())
    }

    /// Ends the compressed frame, if one is open, and puts everything
    /// taken into the sink: the output then reads whole up to here,
    /// without what follows (a checkpoint's, which a merger taken up
    /// from it follows with a frame of its own).
    pub fn end_frame(&mut self) -> io::Result<()> {
        self.end_frame_if_held()?;
        match self.compressor.as_ref().is_some_and(|c| c.frame_open()) {
            true => Err(io::Error::other(
                "a compressed frame is open with no record of it held to end it",
            )),
            false => Ok(()),
        }
    }

    /// Everything taken into the sink, the frame left open: a pipe's
    /// reader gets each round as it ends. The frame cannot end in what
    /// went before ([`finish`](Self::finish) leaves it open, as perf
    /// leaves its own).
    pub fn hand_over(&mut self) -> io::Result<()> {
        self.compress_pending(false)?;
        self.put_held()
    }

    /// A `PERF_RECORD_FINISHED_ROUND`, after the records before it.
    pub fn end_round(&mut self) -> io::Result<()> {
        match self.compressor {
            None => self.sink.put(&marker(RecordType::FINISHED_ROUND)),
            Some(_) => {
                self.compress_pending(false)?;
                self.held_rounds += 1;
                Ok(())
            }
        }
    }

    /// Ends the compressed frame where it can; the sink and what was
    /// compressed.
    pub fn finish(mut self) -> io::Result<(S, Totals)> {
        self.end_frame_if_held()?;
        let totals = self
            .compressor
            .as_ref()
            .map(RecordCompressor::totals)
            .unwrap_or_default();
        Ok((self.sink, totals))
    }

    /// Ends the frame with what is gathered, or in the last record held,
    /// and puts everything into the sink.
    fn end_frame_if_held(&mut self) -> io::Result<()> {
        self.compress_pending(true)?;
        if let (Some(compressor), Some(last)) = (self.compressor.as_mut(), self.held_last) {
            if compressor.frame_open() {
                compressor.end_frame_in(&mut self.held, last)?;
            }
        }
        self.put_held()
    }

    fn compress_pending(&mut self, end_frame: bool) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        let compressed = self.compress(&pending, end_frame);
        self.pending = pending;
        self.pending.clear();
        compressed
    }

    /// `records` compressed; the last compression's output (and rounds
    /// after it) into the sink, this one's held.
    fn compress(&mut self, records: &[u8], end_frame: bool) -> io::Result<()> {
        // (Without a compressor nothing is held.)
        self.put_held()?;
        if let Some(compressor) = self.compressor.as_mut() {
            self.held_last = compressor.compress(records, &mut self.held, end_frame)?;
        }
        Ok(())
    }

    fn put_held(&mut self) -> io::Result<()> {
        self.held_last = None;
        if !self.held.is_empty() {
            self.sink.put(&self.held)?;
            self.held.clear();
        }
        for _ in 0..std::mem::take(&mut self.held_rounds) {
            self.sink.put(&marker(RecordType::FINISHED_ROUND))?;
        }
        Ok(())
    }
}

/// Runs this long or more are compressed where they lie, not gathered.
const GATHER_BELOW: usize = 64 << 10;

/// Where the last whole record of `run` starts (0 for one record or none).
fn last_record_at(run: &[u8]) -> usize {
    let (mut at, mut last) = (0, 0);
    while let Some(header) = RecordHeader::parse(&run[at..]) {
        let next = at + usize::from(header.size).max(8);
        if next > run.len() {
            break;
        }
        (last, at) = (at, next);
    }
    last
}

/// The length of the whole records at the start of `run` that fit in
/// `room` bytes (a record is at most 64 KiB, so most of it).
fn whole_records_within(run: &[u8], room: usize) -> usize {
    let mut at = 0;
    while let Some(header) = RecordHeader::parse(&run[at..]) {
        let next = at + usize::from(header.size).max(8);
        if next > room || next > run.len() {
            break;
        }
        at = next;
    }
    at
}

/// A header-only record.
pub fn marker(type_: RecordType) -> [u8; 8] {
    let mut bytes = Vec::with_capacity(8);
    RecordHeader {
        type_,
        misc: 0,
        size: 8,
    }
    .write_to(&mut bytes);
    bytes.try_into().expect("8 bytes")
}

/// Shard records going out: counted, watched for the binaries they hit,
/// and written without any padding the kernel left after their trailer.
pub struct RecordWriter<'a, S> {
    /// Where they go.
    pub out: DataOut<S>,
    fields: FieldReader<'a>,
    /// What they say about binaries.
    pub hits: SliceHits,
    /// How many went out.
    pub records: u64,
    /// Whether they are watched for the binaries they hit as they go, not
    /// from the output after the fact ([`unwatched`](Self::unwatched)).
    watch: bool,
}

impl<'a, S: RecordSink> RecordWriter<'a, S> {
    /// Records of a recording with these `layouts` into `out`.
    pub fn new(out: DataOut<S>, layouts: &'a Layouts) -> Self {
        RecordWriter {
            out,
            fields: FieldReader::new(layouts),
            hits: SliceHits::default(),
            records: 0,
            watch: true,
        }
    }

    /// Records not watched for the binaries they hit: the output is
    /// walked for those behind it (`live::hits_walk`), as perf record
    /// marks them at its end.
    pub fn unwatched(mut self) -> Self {
        self.watch = false;
        self
    }

    /// One record read from a shard (validated when the shard was opened).
    pub fn put(&mut self, record: &[u8]) -> io::Result<()> {
        match self.observe(record) {
            Going::AsIs => self.out.record(record),
            Going::Changed(changed) => self.out.record(&changed),
            Going::Dropped => Ok(()),
        }
    }

    /// Counts `record`, watches it for the binaries it hits, and says how
    /// it goes out ([`going`](Self::going)). The live merger asks this of
    /// every record while the workload runs: a sample costs one header
    /// parse and one look-up of its event's layout.
    fn observe(&mut self, record: &[u8]) -> Going {
        let header = RecordHeader::parse(record).expect("validated");
        let going = self.going(header, record);
        if let Going::Dropped = going {
            return going;
        }
        if self.watch {
            self.watch(header, record, &going);
        }
        self.records += 1;
        going
    }

    /// Watches `record`, going out as `going` says, for the binaries it
    /// hits.
    fn watch(&mut self, header: RecordHeader, record: &[u8], going: &Going) {
        let fields = &mut self.fields;
        match going {
            Going::AsIs => self.hits.observe(header, record, fields),
            // Only an off-CPU wait becomes a sample of another layout (the
            // watch asks a sample alone for its pid and ip).
            Going::Changed(changed) => {
                let header = RecordHeader::parse(changed).expect("made whole");
                let mut layout = SampleIdLayout::new(records::OFF_CPU_SAMPLE_TYPE);
                self.hits.observe(header, changed, &mut layout)
            }
            Going::Dropped => {}
        }
    }

    /// How `record` goes out: without the padding the kernel left after
    /// its trailer (only KSYMBOL and BPF_EVENT records can have any), or,
    /// a wait of the off-CPU program, as perf's `offcpu-time` sample. Only
    /// the off-CPU program writes into its events, a wait each time: a
    /// sample without one was not written by it, and perf would misread
    /// it under the offcpu-time attr, so it is dropped.
    fn going(&mut self, header: RecordHeader, record: &[u8]) -> Going {
        match header.type_ {
            RecordType::SAMPLE => match self.fields.off_cpu_layout(record) {
                Some((layout, user_stack)) => {
                    let sample = records::off_cpu_sample_of_output(&layout, user_stack, record);
                    sample.map_or(Going::Dropped, Going::Changed)
                }
                None => Going::AsIs,
            },
            RecordType::KSYMBOL | RecordType::BPF_EVENT => {
                let len = self.fields.true_len(record, header.type_);
                if len == record.len() {
                    return Going::AsIs;
                }
                let mut trimmed = record[..len].to_vec();
                shardrec_format::views::set_size(&mut trimmed, len as u16);
                Going::Changed(trimmed)
            }
            _ => Going::AsIs,
        }
    }
}

/// How a record read from a shard goes out.
pub enum Going {
    /// As it is.
    AsIs,
    /// Changed (trimmed, or made perf's).
    Changed(Vec<u8>),
    /// Not at all.
    Dropped,
}

/// Where a round's records go. Each record is walked once, as it is
/// read (but for samples hopped over, which it only counts): the sink
/// takes it then (counts it, watches it for build ids) and
/// says how it goes out; when the round writes it out, it goes in a run
/// of records that go as they lie, or alone, as the sink changed it,
/// through [`put_changed`](Self::put_changed). (A round cut in steps
/// writes its records in another order than it read them: the build-id
/// watch sees them in the order they were read, as it does every other
/// round.)
pub trait RoundSink {
    /// A record the round took: how it goes out.
    fn take(&mut self, record: &[u8]) -> Going;
    /// Runs of whole records taken, in order, each run the bytes of
    /// records that go out as they lie, one after the other (in a shard,
    /// or in a copy of its ring), so a sink can write a run from where it
    /// is.
    fn put_runs(&mut self, runs: &[&[u8]]) -> io::Result<()>;
    /// `samples` samples were hopped over ([`Follower::hopping`]): taken
    /// unseen, to go out as they lie.
    fn hopped(&mut self, samples: u64);
    /// A record as [`take`](Self::take) changed it, at its turn.
    fn put_changed(&mut self, changed: &[u8]) -> io::Result<()>;
    /// A FINISHED_ROUND.
    fn end_round(&mut self) -> io::Result<()>;
}

impl<S: RecordSink> RoundSink for RecordWriter<'_, S> {
    fn take(&mut self, record: &[u8]) -> Going {
        self.observe(record)
    }

    /// The runs go out as the pieces of one write, not one per record.
    fn put_runs(&mut self, runs: &[&[u8]]) -> io::Result<()> {
        self.out.records(runs)
    }

    fn hopped(&mut self, samples: u64) {
        debug_assert!(!self.watch, "samples hopped over go unwatched");
        self.records += samples;
    }

    fn put_changed(&mut self, changed: &[u8]) -> io::Result<()> {
        self.out.record(changed)
    }

    fn end_round(&mut self) -> io::Result<()> {
        self.out.end_round()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardrec_testkit::records::numbered_samples as records;

    #[test]
    fn runs_of_every_length_come_back_in_order_through_the_compressor() {
        let data = records(3000);
        let mut out = DataOut::new(Vec::new(), Some(1)).unwrap();
        let mut at = 0;
        // Runs from one record to past MAX_INPUT, a round ended now and then.
        for (i, len) in [9000, 300, 70 << 10, 1 << 20, 40, 200 << 10, 5000]
            .iter()
            .cycle()
            .enumerate()
        {
            let first = usize::from(RecordHeader::parse(&data[at..]).unwrap().size);
            let end = at + whole_records_within(&data[at..], *len).max(first);
            out.records(&[&data[at..end]]).unwrap();
            at = end;
            if i % 3 == 2 {
                out.end_round().unwrap();
            }
            if at == data.len() {
                break;
            }
        }
        let (written, _) = out.finish().unwrap();
        let mut back = Vec::new();
        let rest = compressed::each_record(&written, |record| {
            if RecordHeader::parse(record).unwrap().type_ != RecordType::FINISHED_ROUND {
                back.extend_from_slice(record);
            }
            Ok(())
        })
        .unwrap();
        assert!(rest.is_empty());
        assert_eq!(back.len(), data.len());
        assert!(back == data, "records changed or reordered");
    }

    /// The records and rounds `data` carries, compressed or not.
    fn carried(data: &[u8]) -> Vec<u8> {
        let mut back = Vec::new();
        let rest = compressed::each_record(data, |record| {
            back.extend_from_slice(record);
            Ok(())
        })
        .unwrap();
        assert!(rest.is_empty());
        back
    }

    #[test]
    fn the_frame_goes_on_across_rounds_and_ends_at_a_checkpoint() {
        let (first, second) = (records(200), records(50));
        let round = marker(RecordType::FINISHED_ROUND);
        let mut out = DataOut::new(Vec::new(), Some(1)).unwrap();
        out.records(&[&first]).unwrap();
        out.end_round().unwrap();
        out.records(&[&second]).unwrap();
        out.end_round().unwrap();
        // A checkpoint with nothing gathered: the frame ends in the last
        // COMPRESSED record, before the round after it.
        out.end_frame().unwrap();
        let cut = out.sink_mut().len();
        out.records(&[&first]).unwrap();
        out.end_round().unwrap();
        let (written, totals) = out.finish().unwrap();
        assert_eq!(totals.bytes_in as usize, 2 * first.len() + second.len());
        // Read whole, the output is one stream; read from the cut, a frame
        // of its own starts there, as a merger taken up from a checkpoint
        // writes. (Had the first frame not ended, the second's start
        // would read as a broken block of the first.)
        let all = [&first[..], &round[..], &second[..], &round[..]].concat();
        assert!(
            carried(&written[..cut]) == all,
            "every record before the cut"
        );
        assert!(carried(&written) == [&all[..], &first[..], &round[..]].concat());
        assert!(carried(&written[cut..]) == [&first[..], &round[..]].concat());
    }

    #[test]
    fn a_write_is_half_a_ring_within_bounds() {
        assert_eq!(write_piece(4 << 20), 512 << 10, "default rings");
        assert_eq!(write_piece(256 << 10), 128 << 10, "-m 64");
        assert_eq!(write_piece(4096), 64 << 10, "one page");
        assert_eq!(write_piece(0), 64 << 10, "no ring size recorded");
    }
}
