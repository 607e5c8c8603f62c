//! `-z`: records carried in `PERF_RECORD_COMPRESSED` records, zstd
//! compressed, as perf record writes them, and the `HEADER_COMPRESSED`
//! feature that tells readers how.
//!
//! The records of a data section (whole records, a round at a time) go
//! through a zstd stream, flushed at the end of each call, so a reader's
//! single decompression stream (perf's, linux-perf-data's) gets every
//! record of a call before it meets the round that follows. A call may
//! also end the stream's frame: the next call starts a new one, which
//! those readers take up where the last ended. That is what lets a
//! parallel merge compress each slice of a recording apart. perf
//! decompresses each COMPRESSED record into a buffer of the size the
//! feature states: [`MAX_INPUT`] bounds what one call may hold. How a
//! call's stream is cut into records: [`RecordCompressor`].

use std::io;

use shardrec_format::header::{RecordHeader, RecordType};
use zstd::stream::raw::{InBuffer, Operation, OutBuffer};

use crate::feature::{Feature, FeatureBuf};

mod compressor;

pub use compressor::RecordCompressor;

/// The most compressed bytes one record carries: its size is a `u16`.
const MAX_PAYLOAD: usize = u16::MAX as usize - 8;

/// The most record bytes one call may compress: readers are told (in the
/// feature's `mmap_len`) that no COMPRESSED record expands beyond this.
pub const MAX_INPUT: usize = 256 << 10;

/// perf's `PERF_COMP_ZSTD`.
const ZSTD: u32 = 1;

/// The records in `data` (whole records, as a data section holds them),
/// each handed to `each`, those COMPRESSED records carry in their place:
/// their payloads are one zstd stream, frame after frame, and a
/// record's payload need not end at the end of a record it carries.
/// Returns the bytes at the end that are no whole record (none, if
/// `data` is whole).
pub fn each_record(
    data: &[u8],
    mut each: impl FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<&[u8]> {
    let mut expander: Option<Expander> = None;
    let mut rest = data;
    // Not `walk::leading_record`: a COMPRESSED record's size is its
    // payload's plus 8, not padded to 8 (perf's neither).
    while let Some(header) = RecordHeader::parse(rest) {
        let len = usize::from(header.size);
        if len < 8 || len > rest.len() {
            break;
        }
        let (record, after) = rest.split_at(len);
        match header.type_ {
            RecordType::COMPRESSED => {
                let expander = match expander.as_mut() {
                    Some(expander) => expander,
                    None => expander.insert(Expander::new()?),
                };
                expander.expand(&record[8..], &mut each)?;
            }
            _ => each(record)?,
        }
        rest = after;
    }
    match expander.is_none_or(|e| e.decoded.is_empty()) {
        true => Ok(rest),
        false => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "COMPRESSED records end inside a record they carry",
        )),
    }
}

/// A zstd stream of COMPRESSED records' payloads, read back.
struct Expander {
    decoder: zstd::stream::raw::Decoder<'static>,
    /// Decoded bytes not yet a whole record.
    decoded: Vec<u8>,
    chunk: Vec<u8>,
}

impl Expander {
    fn new() -> io::Result<Expander> {
        Ok(Expander {
            decoder: zstd::stream::raw::Decoder::new()?,
            decoded: Vec::new(),
            chunk: vec![0; zstd::zstd_safe::DCtx::out_size()],
        })
    }

    /// Decodes one record's `payload`, handing `each` every record it
    /// completes.
    fn expand(
        &mut self,
        payload: &[u8],
        each: &mut impl FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut input = InBuffer::around(payload);
        loop {
            let mut output = OutBuffer::around(&mut self.chunk[..]);
            let left = self.decoder.run(&mut input, &mut output)?;
            let produced = output.pos();
            self.decoded.extend_from_slice(&self.chunk[..produced]);
            if left == 0 {
                // A frame ended; another may follow.
                self.decoder.reinit()?;
            }
            if input.pos() == payload.len() && produced < self.chunk.len() {
                break;
            }
        }
        let mut at = 0;
        while let Some(header) = RecordHeader::parse(&self.decoded[at..]) {
            let len = usize::from(header.size);
            if len < 8 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a COMPRESSED record carries a record shorter than its header",
                ));
            }
            if at + len > self.decoded.len() {
                break;
            }
            each(&self.decoded[at..at + len])?;
            at += len;
        }
        self.decoded.drain(..at);
        Ok(())
    }
}

/// What one or more compressors took and gave, for the feature.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// The zstd level.
    pub level: i32,
    /// Record bytes compressed.
    pub bytes_in: u64,
    /// COMPRESSED record bytes written.
    pub bytes_out: u64,
}

impl std::ops::AddAssign for Totals {
    fn add_assign(&mut self, other: Totals) {
        self.level = other.level;
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
    }
}

impl Totals {
    /// `HEADER_COMPRESSED`: version 0, zstd, the level, the ratio perf
    /// prints (record bytes per compressed byte), and the bound on what
    /// one COMPRESSED record expands to.
    pub fn feature(&self) -> (Feature, Vec<u8>) {
        let ratio = self.bytes_in.checked_div(self.bytes_out).unwrap_or(0) as u32;
        let mut buf = FeatureBuf::new();
        buf.u32(0)
            .u32(ZSTD)
            .u32(self.level as u32)
            .u32(ratio)
            .u32(MAX_INPUT as u32);
        (Feature::Compressed, buf.into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_come_back_whole_from_one_stream() {
        let mut compressor = RecordCompressor::new(1).unwrap();
        let records: Vec<u8> = (0..4000u32).flat_map(|i| (i % 7).to_ne_bytes()).collect();
        let mut out = Vec::new();
        compressor.compress(&records, &mut out, false).unwrap();
        compressor
            .compress(&records[..800], &mut out, true)
            .unwrap();
        compressor
            .compress(&records[..400], &mut out, false)
            .unwrap();
        // Every record is a COMPRESSED one; their payloads are one stream.
        let mut stream = Vec::new();
        let mut at = 0;
        while at < out.len() {
            let header = RecordHeader::parse(&out[at..]).unwrap();
            assert_eq!(header.type_, RecordType::COMPRESSED);
            let size = usize::from(header.size);
            stream.extend_from_slice(&out[at + 8..at + size]);
            at += size;
        }
        // One ended frame, then one flushed but not ended (as perf's): a
        // streaming decoder gives back everything, then finds no frame end.
        let mut decoder = zstd::stream::read::Decoder::new(&stream[..]).unwrap();
        let mut back = Vec::new();
        let _ = std::io::Read::read_to_end(&mut decoder, &mut back);
        let second = records.len() + 800;
        assert_eq!(&back[..records.len()], &records[..]);
        assert_eq!(&back[records.len()..second], &records[..800]);
        assert_eq!(&back[second..], &records[..400]);
        let (feature, bytes) = compressor.totals().feature();
        assert_eq!(feature, Feature::Compressed);
        assert_eq!(bytes.len(), 20);
    }

    /// Records of 8 to 4,000 bytes, each its length over and over.
    fn records(count: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        for i in 0..count {
            let size = 8 + (i * 37 % 500) * 8;
            let header = RecordHeader {
                type_: RecordType::SAMPLE,
                misc: 0,
                size: size as u16,
            };
            header.write_to(&mut bytes);
            bytes.resize(bytes.len() + size - 8, (i % 251) as u8);
        }
        bytes
    }

    #[test]
    fn each_compressed_record_decodes_to_records_on_its_own() {
        // Bytes that compress about twofold: 256 KiB would not fit one
        // record's payload.
        let mut state = 12345u32;
        let mut records = Vec::new();
        while records.len() + 4096 <= MAX_INPUT {
            let header = RecordHeader {
                type_: RecordType::SAMPLE,
                misc: 0,
                size: 4096,
            };
            header.write_to(&mut records);
            for _ in 0..4088 {
                state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
                records.push((state >> 28) as u8);
            }
        }
        let mut compressor = RecordCompressor::new(1).unwrap();
        let mut data = Vec::new();
        compressor.compress(&records, &mut data, false).unwrap();
        let mut decoder = zstd::stream::raw::Decoder::new().unwrap();
        let (mut at, mut count, mut back) = (0, 0, Vec::new());
        let mut chunk = vec![0u8; 1 << 20];
        while at < data.len() {
            let header = RecordHeader::parse(&data[at..]).unwrap();
            let record = &data[at + 8..at + usize::from(header.size)];
            let mut input = InBuffer::around(record);
            let mut output = OutBuffer::around(&mut chunk[..]);
            decoder.run(&mut input, &mut output).unwrap();
            assert!(output.pos() > 0, "record {count} decodes to nothing alone");
            back.extend_from_slice(output.as_slice());
            at += usize::from(header.size);
            count += 1;
        }
        assert!(count > 1, "the payload takes several records");
        assert!(back == records);
    }

    /// The records `data` carries, compressed or not, which are whole.
    fn carried(data: &[u8]) -> Vec<u8> {
        let mut back = Vec::new();
        let rest = each_record(data, |record| {
            back.extend_from_slice(record);
            Ok(())
        })
        .unwrap();
        assert!(rest.is_empty());
        back
    }

    #[test]
    fn a_frame_ends_later_in_its_last_record() {
        let mut compressor = RecordCompressor::new(1).unwrap();
        let (first, second) = (records(40), records(20));
        let round = [3u8, 0, 0, 0, 0, 0, 8, 0];
        let mut data = Vec::new();
        compressor.compress(&first, &mut data, false).unwrap();
        data.extend_from_slice(&round);
        let last = compressor.compress(&second, &mut data, false).unwrap();
        let last = last.expect("records give a COMPRESSED record");
        let before = data.len();
        assert!(
            compressor.end_frame_in(&mut data, 0).is_err(),
            "only the last record can take the end"
        );
        compressor.end_frame_in(&mut data, last).unwrap();
        assert!(!compressor.frame_open());
        assert!(data.len() > before, "the frame's end was added");
        let size = usize::from(RecordHeader::parse(&data[last..]).unwrap().size);
        assert_eq!(last + size, data.len(), "the record's size grew with it");
        // A frame of its own follows, as a merger taken up from here writes.
        compressor.compress(&first, &mut data, true).unwrap();
        let back = carried(&data);
        assert!(back == [&first[..], &round[..], &second[..], &first[..]].concat());
    }

    #[test]
    fn every_record_comes_back_across_frames_and_uncompressed_records() {
        let mut compressor = RecordCompressor::new(1).unwrap();
        let (first, second) = (records(30), records(100));
        assert!(second.len() <= MAX_INPUT);
        let round = [3u8, 0, 0, 0, 0, 0, 8, 0];
        let mut data = Vec::new();
        compressor.compress(&first, &mut data, false).unwrap();
        data.extend_from_slice(&round);
        assert!(compressor.frame_open());
        compressor.compress(&first[..8], &mut data, true).unwrap();
        assert!(!compressor.frame_open());
        compressor.compress(&second, &mut data, true).unwrap();
        let back = carried(&data);
        let expected = [&first[..], &round[..], &first[..8], &second[..]].concat();
        assert_eq!(back.len(), expected.len());
        assert!(back == expected, "the records, in order, whole");
    }
}
