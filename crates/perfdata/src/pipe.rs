//! perf's pipe format: what `perf record -o -` writes to standard output,
//! front to back, as `perf report -i -` reads it from standard input.
//!
//! A pipe cannot be sought back into, so there is no header to fill in at
//! the end: everything a file keeps in its header and its attrs and feature
//! sections comes first, as records, then the data section's records
//! (perf 6.1's `record__synthesize`, `perf_event__synthesize_for_pipe`):
//!
//! | part | bytes |
//! |---|---|
//! | pipe header | `PERFILE2` and its own size, 16 (`perf_header__write_pipe`) |
//! | `HEADER_ATTR` per event | header, the attr as perf 6.1's 128-byte struct, then the event's ids (`perf_event__synthesize_attrs`) |
//! | `HEADER_FEATURE` per feature | header, u64 feature number, the feature's content as in a file, unpadded (the record's size need not be a multiple of 8), in bit order; only the features perf synthesizes ([`Feature::in_pipe`]) and not empty (`perf_event__synthesize_features`) |
//! | `HEADER_FEATURE` end mark | feature number `HEADER_LAST_FEATURE` (32 in perf 6.1), no content |
//! | `HEADER_TRACING_DATA` | with tracepoints: a 16-byte record whose u32 says how many bytes follow it (the formats rounded up to 8), the formats, zeros to that size (`perf_event__synthesize_tracing_data`) |
//! | `EVENT_UPDATE` per event | the unit and scale of clock events, then the name (`perf_event__synthesize_extra_attr` with `is_pipe`) |
//!
//! perf writes its EVENT_UPDATEs a few records later, after its id index and
//! kernel maps; a reader needs only that they follow the ATTRs, and they are
//! written here so the caller's records (the data section as a file has it)
//! follow the whole header part. Build ids are not sent: perf record in pipe
//! mode sends none (`HEADER_BUILD_ID` is not synthesized, and the build ids
//! of the binaries hit are known only at the end); `perf inject -b` adds
//! them.
//!
//! ```
//! use shardrec_perfdata::feature::{Feature, FeatureBuf};
//! use shardrec_perfdata::pipe::{PipeEvent, PipeWriter};
//! let attr = vec![0u8; 128];
//! let event = PipeEvent { attr: &attr, ids: &[7], name: "cpu-clock" };
//! let mut hostname = FeatureBuf::new();
//! hostname.string("myhost");
//! let features = [(Feature::Hostname, hostname.into_bytes())];
//! let mut writer = PipeWriter::create(Vec::new(), &[event], &features, None)?;
//! writer.write_record(&[68, 0, 0, 0, 0, 0, 8, 0])?; // FINISHED_ROUND
//! let stream = writer.finish()?;
//! assert_eq!(&stream[..8], b"PERFILE2");
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io::{self, Write};

use shardrec_format::header::{RecordHeader, RecordType};

use crate::feature::Feature;
use crate::header::MAGIC;

/// `struct perf_pipe_file_header`: the magic, then this size.
pub const PIPE_HEADER_SIZE: u64 = 16;

/// `HEADER_LAST_FEATURE` in perf 6.1: the feature number of the record
/// that ends the features.
pub const LAST_FEATURE: u64 = 32;

/// The most content a feature record holds: a record's size is a u16, and
/// 16 bytes of it are the header and the feature number.
pub const MAX_FEATURE_LEN: usize = u16::MAX as usize - FEATURE_HEAD;

/// Bytes of a feature record before its content.
const FEATURE_HEAD: usize = 16;

/// `sizeof(struct perf_event_attr)` in perf 6.1: an ATTR record holds that
/// many bytes of attr, and perf 6.1 looks for the ids right after them
/// (later perfs look `attr.size` bytes after the attr's start; the two
/// agree for an attr of this size).
const ATTR_LEN: usize = 128;

/// `sizeof(struct perf_record_event_update)` in perf 6.1 (header, type,
/// id, and a 16-byte union): an EVENT_UPDATE is that plus its string or
/// number, rounded up to 8 bytes (`event_update_event__new`).
const EVENT_UPDATE_LEN: usize = 40;

/// `PERF_EVENT_UPDATE__*`: what an EVENT_UPDATE sets.
const UPDATE_UNIT: u64 = 0;
const UPDATE_SCALE: u64 = 1;
const UPDATE_NAME: u64 = 2;

/// One event, as the pipe describes it.
#[derive(Clone, Copy, Debug)]
pub struct PipeEvent<'a> {
    /// Its `perf_event_attr` (128 bytes, or fewer, zero-extended).
    pub attr: &'a [u8],
    /// Every kernel id it was given.
    pub ids: &'a [u64],
    /// Its name, as given on the command line.
    pub name: &'a str,
}

/// Writes perf's pipe format into `out`, in order.
pub struct PipeWriter<W: Write> {
    out: W,
    written: u64,
    left_out: Vec<Feature>,
}

impl<W: Write> PipeWriter<W> {
    /// Writes everything before the data: the pipe header, each event's
    /// ATTR, the `features` perf sends in a pipe (any order; written in
    /// bit order, the pieces of one feature in the order given), the end
    /// of the features, the tracepoint formats if there are any (the
    /// HEADER_TRACING_DATA feature's content), and each event's
    /// EVENT_UPDATEs. A feature too large for a record is left out
    /// ([`left_out`](Self::left_out)).
    pub fn create(
        out: W,
        events: &[PipeEvent],
        features: &[(Feature, Vec<u8>)],
        tracing_data: Option<&[u8]>,
    ) -> io::Result<Self> {
        let mut writer = PipeWriter {
            out,
            written: 0,
            left_out: Vec::new(),
        };
        let mut header = Vec::with_capacity(PIPE_HEADER_SIZE as usize);
        header.extend_from_slice(&MAGIC.to_ne_bytes());
        header.extend_from_slice(&PIPE_HEADER_SIZE.to_ne_bytes());
        writer.write_record(&header)?;
        for event in events {
            writer.write_record(&attr_record(event)?)?;
        }
        let mut sent: Vec<&(Feature, Vec<u8>)> = features
            .iter()
            .filter(|(feature, content)| feature.in_pipe() && !content.is_empty())
            .collect();
        sent.sort_by_key(|(feature, _)| *feature);
        for (feature, content) in sent {
            match feature_record(*feature as u64, content) {
                Some(record) => writer.write_record(&record)?,
                None => writer.left_out.push(*feature),
            }
        }
        let end = feature_record(LAST_FEATURE, &[]).expect("an empty feature fits");
        writer.write_record(&end)?;
        if let Some(formats) = tracing_data {
            writer.tracing_data(formats)?;
        }
        for event in events {
            for record in event_updates(event) {
                writer.write_record(&record)?;
            }
        }
        Ok(writer)
    }

    /// Appends whole records (or any bytes that continue the stream).
    pub fn write_record(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Bytes written so far, the pipe header included.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// The features that were not written: each too large for a record
    /// (64 KiB), which perf 6.1 would have cut and so broken the stream.
    pub fn left_out(&self) -> &[Feature] {
        &self.left_out
    }

    /// Hands what is buffered to the output: a reader sees the stream up
    /// to here.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }

    /// The HEADER_TRACING_DATA record, the formats after it, and zeros up
    /// to the size it states: perf's reader (`trace_report`) reads the
    /// formats from the stream itself, then the padding, and checks that
    /// the two make that size.
    fn tracing_data(&mut self, formats: &[u8]) -> io::Result<()> {
        let padded = formats.len().next_multiple_of(8);
        let size = u32::try_from(padded).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "tracepoint formats of {} bytes: a pipe's HEADER_TRACING_DATA states at most 4 GiB",
                    formats.len()
                ),
            )
        })?;
        let mut record = Vec::with_capacity(16);
        header(RecordType::TRACING_DATA, 16).write_to(&mut record);
        record.extend_from_slice(&size.to_ne_bytes());
        record.extend_from_slice(&[0; 4]);
        self.write_record(&record)?;
        self.write_record(formats)?;
        self.write_record(&vec![0; padded - formats.len()])
    }
}

fn header(type_: RecordType, size: usize) -> RecordHeader {
    RecordHeader {
        type_,
        misc: 0,
        size: size as u16,
    }
}

/// `HEADER_ATTR`: the attr as perf 6.1's struct (a shorter one zero-extended
/// and its size field set to match), then the ids.
fn attr_record(event: &PipeEvent) -> io::Result<Vec<u8>> {
    let attr_len = event.attr.len().max(ATTR_LEN).next_multiple_of(8);
    let size = 8 + attr_len + 8 * event.ids.len();
    if size > u16::MAX as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "event {} has {} ids: more than a pipe's ATTR record holds ({})",
                event.name,
                event.ids.len(),
                (u16::MAX as usize - 8 - attr_len) / 8
            ),
        ));
    }
    let mut record = Vec::with_capacity(size);
    header(RecordType::ATTR, size).write_to(&mut record);
    let start = record.len();
    record.extend_from_slice(event.attr);
    record.resize(start + attr_len, 0);
    if event.attr.len() < attr_len {
        // attr.size, at offset 4, says how much of the struct holds.
        record[start + 4..start + 8].copy_from_slice(&(attr_len as u32).to_ne_bytes());
    }
    for id in event.ids {
        record.extend_from_slice(&id.to_ne_bytes());
    }
    Ok(record)
}

/// `HEADER_FEATURE`: header, feature number, content; `None` when it does
/// not fit a record.
fn feature_record(feature: u64, content: &[u8]) -> Option<Vec<u8>> {
    if content.len() > MAX_FEATURE_LEN {
        return None;
    }
    let mut record = Vec::with_capacity(FEATURE_HEAD + content.len());
    header(RecordType::FEATURE, FEATURE_HEAD + content.len()).write_to(&mut record);
    record.extend_from_slice(&feature.to_ne_bytes());
    record.extend_from_slice(content);
    Some(record)
}

/// The EVENT_UPDATEs perf sends for an event in a pipe, keyed by its first
/// id: a clock event's unit and scale (`msec`, 1e-6: perf counts
/// cpu-clock and task-clock in ns and shows ms), then every event's name.
fn event_updates(event: &PipeEvent) -> Vec<Vec<u8>> {
    let Some(&id) = event.ids.first() else {
        return Vec::new();
    };
    let update = |kind: u64, payload: &[u8]| {
        let size = (EVENT_UPDATE_LEN + payload.len()).next_multiple_of(8);
        let mut record = Vec::with_capacity(size);
        header(RecordType::EVENT_UPDATE, size).write_to(&mut record);
        record.extend_from_slice(&kind.to_ne_bytes());
        record.extend_from_slice(&id.to_ne_bytes());
        record.extend_from_slice(payload);
        record.resize(size, 0);
        record
    };
    let string = |text: &str| [text.as_bytes(), &[0]].concat();
    let mut updates = Vec::new();
    if is_clock(event.attr) {
        updates.push(update(UPDATE_UNIT, &string("msec")));
        updates.push(update(UPDATE_SCALE, &1e-6f64.to_ne_bytes()));
    }
    updates.push(update(UPDATE_NAME, &string(event.name)));
    updates
}

/// perf's `evsel__is_clock`: the software cpu-clock or task-clock.
fn is_clock(attr: &[u8]) -> bool {
    const SOFTWARE: u32 = 1;
    let attr = shardrec_format::views::AttrBytes(attr);
    attr.type_() == Some(SOFTWARE) && matches!(attr.config(), Some(0 | 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feature::FeatureBuf;
    use shardrec_format::views::tracing_data_len;

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The first bytes `perf record -e cpu-clock -o - -- true` (perf 6.1.187,
    /// x86_64) wrote on this project's VM, named `vm`: the pipe header, the
    /// ATTR of cpu-clock with its two ids, the hostname feature.
    const PERF_START: &str = concat!(
        "50455246494c4532100000000000000040000000000098000100000080000000",
        "0000000000000000a00f00000000000047010000000000001400000000000000",
        "0337946100000000000000000000000000000000000000000000000000000000",
        "0000000000000000000000000000000000000000000000000000000000000000",
        "000000000000000000000000000000000000000000000000f341030000000000",
        "f4410300000000005000000000005400030000000000000040000000766d0000",
        "0000000000000000000000000000000000000000000000000000000000000000",
        "00000000000000000000000000000000000000000000000000000000",
    );

    /// perf's EVENT_UPDATEs for that cpu-clock (id 0x341f3): unit, scale,
    /// name.
    const PERF_UPDATES: &str = concat!(
        "4e000000000030000000000000000000f3410300000000006d73656300000000",
        "00000000000000000000000000000000",
        "4e000000000030000100000000000000f3410300000000008dedb5a0f7c6b03e",
        "00000000000000000000000000000000",
        "4e000000000038000200000000000000f3410300000000006370752d636c6f63",
        "6b0000000000000000000000000000000000000000000000",
    );

    fn cpu_clock() -> (Vec<u8>, Vec<u64>) {
        let start = hex(PERF_START);
        (start[24..24 + 128].to_vec(), vec![0x341f3, 0x341f4])
    }

    fn hostname(name: &str) -> (Feature, Vec<u8>) {
        let mut buf = FeatureBuf::new();
        buf.string(name);
        (Feature::Hostname, buf.into_bytes())
    }

    /// Splits a stream after its pipe header into (type, size, bytes).
    fn records(stream: &[u8]) -> Vec<(u32, usize, &[u8])> {
        let mut at = PIPE_HEADER_SIZE as usize;
        let mut out = Vec::new();
        while at < stream.len() {
            let header = RecordHeader::parse(&stream[at..]).unwrap();
            let size = usize::from(header.size);
            let mut len = size;
            if header.type_ == RecordType::TRACING_DATA {
                len += tracing_data_len(&stream[at..]).unwrap() as usize;
            }
            out.push((header.type_.0, size, &stream[at..at + len]));
            at += len;
        }
        out
    }

    #[test]
    fn the_start_is_perfs_own_bytes() {
        let (attr, ids) = cpu_clock();
        let event = PipeEvent {
            attr: &attr,
            ids: &ids,
            name: "cpu-clock",
        };
        let stream = PipeWriter::create(Vec::new(), &[event], &[hostname("vm")], None)
            .unwrap()
            .finish()
            .unwrap();
        let perf = hex(PERF_START);
        assert_eq!(&stream[..perf.len()], &perf[..]);
        // Then the end of the features, and the EVENT_UPDATEs as perf's.
        let end = &stream[perf.len()..perf.len() + 16];
        assert_eq!(end, hex("50000000000010002000000000000000"));
        assert_eq!(&stream[perf.len() + 16..], &hex(PERF_UPDATES)[..]);
    }

    #[test]
    fn features_go_in_bit_order_unpadded_and_only_those_perf_sends() {
        let attr = vec![0u8; 120]; // an older, shorter attr
        let event = PipeEvent {
            attr: &attr,
            ids: &[5],
            name: "page-faults",
        };
        let features = [
            (Feature::NrCpus, vec![2, 0, 0, 0, 2, 0, 0, 0]),
            hostname("h"),
            (Feature::BuildId, vec![1; 40]),
            (Feature::Cache, vec![1; 8]),
            (Feature::TracingData, vec![1; 8]),
            (Feature::BpfBtf, vec![0, 0, 0, 0]),
            (Feature::GroupDesc, Vec::new()),
            (Feature::BpfProgInfo, vec![1, 0, 0, 0, 9]),
            (Feature::BpfProgInfo, vec![1, 0, 0, 0, 8]),
        ];
        let writer = PipeWriter::create(Vec::new(), &[event], &features, None).unwrap();
        assert!(writer.left_out().is_empty());
        let stream = writer.finish().unwrap();
        let records = records(&stream);
        let types: Vec<u32> = records.iter().map(|r| r.0).collect();
        assert_eq!(types, [64, 80, 80, 80, 80, 80, 80, 78]);
        let (_, size, attr_record) = records[0];
        assert_eq!(size, 8 + 128 + 8);
        assert_eq!(
            &attr_record[12..16],
            &128u32.to_ne_bytes(),
            "size set to the struct's"
        );
        assert_eq!(&attr_record[136..], &5u64.to_ne_bytes());
        let feature_ids: Vec<u64> = records[1..6]
            .iter()
            .map(|r| u64::from_ne_bytes(r.2[8..16].try_into().unwrap()))
            .collect();
        assert_eq!(feature_ids, [3, 7, 25, 25, 26]);
        assert_eq!(
            records[1].1,
            16 + 68,
            "a string feature: not a multiple of 8"
        );
        assert_eq!(
            &records[3].2[16..],
            &[1, 0, 0, 0, 9],
            "pieces in the order given"
        );
        assert_eq!(records[6].2, hex("50000000000010002000000000000000"));
        // No unit or scale for a non-clock event: its name only, 40 + 12
        // rounded up.
        assert_eq!(records[7].1, 56);
        assert_eq!(&records[7].2[24..36], b"page-faults\0");
        assert_eq!(
            stream.len() as u64,
            PIPE_HEADER_SIZE + records.iter().map(|r| r.1 as u64).sum::<u64>()
        );
    }

    #[test]
    fn tracing_data_states_its_padded_size_and_is_followed_by_it() {
        // As perf wrote sched:sched_switch's formats here: 6,317 bytes,
        // stated as 6,320, three zeros after them.
        let formats = vec![7u8; 6317];
        let event = PipeEvent {
            attr: &[0; 128],
            ids: &[1],
            name: "sched:sched_switch",
        };
        let writer = PipeWriter::create(Vec::new(), &[event], &[], Some(&formats)).unwrap();
        let written = writer.bytes_written();
        let stream = writer.finish().unwrap();
        assert_eq!(written, stream.len() as u64);
        let records = records(&stream);
        let (type_, size, bytes) = records[2];
        assert_eq!((type_, size), (66, 16));
        assert_eq!(&bytes[..16], hex("4200000000001000b018000000000000"));
        assert_eq!(&bytes[16..16 + 6317], &formats[..]);
        assert_eq!(&bytes[16 + 6317..], &[0, 0, 0]);
        assert_eq!(records[3].0, 78, "the name follows");
        // A size already a multiple of 8 gets no padding.
        let stream = PipeWriter::create(Vec::new(), &[], &[], Some(&[1; 16]))
            .unwrap()
            .finish()
            .unwrap();
        assert_eq!(stream.len(), 16 + 16 + 16 + 16);
        assert_eq!(&stream[40..44], &16u32.to_ne_bytes());
    }

    #[test]
    fn what_does_not_fit_a_record_is_left_out_or_refused() {
        let features = [
            hostname("h"),
            (Feature::BpfBtf, vec![0; MAX_FEATURE_LEN + 1]),
        ];
        let writer = PipeWriter::create(Vec::new(), &[], &features, None).unwrap();
        assert_eq!(writer.left_out(), [Feature::BpfBtf]);
        let just = [(Feature::BpfBtf, vec![0; MAX_FEATURE_LEN])];
        let writer = PipeWriter::create(Vec::new(), &[], &just, None).unwrap();
        assert!(writer.left_out().is_empty());
        let stream = writer.finish().unwrap();
        assert_eq!(&stream[22..24], &u16::MAX.to_ne_bytes());
        let ids: Vec<u64> = (0..8200).collect();
        let event = PipeEvent {
            attr: &[0; 128],
            ids: &ids,
            name: "cycles",
        };
        let refused = PipeWriter::create(Vec::new(), &[event], &[], None)
            .err()
            .unwrap();
        assert!(refused.to_string().contains("8200 ids"), "{refused}");
    }
}
