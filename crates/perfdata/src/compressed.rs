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
//! feature states: [`MAX_INPUT`] bounds what one call may hold.

use std::io;

use zstd::stream::raw::{InBuffer, Operation, OutBuffer};

use crate::feature::{Feature, FeatureBuf};

/// `PERF_RECORD_COMPRESSED`.
const RECORD_COMPRESSED: u32 = 81;

/// The most compressed bytes one record carries: its size is a `u16`.
const MAX_PAYLOAD: usize = u16::MAX as usize - 8;

/// The most record bytes one call may compress: readers are told (in the
/// feature's `mmap_len`) that no COMPRESSED record expands beyond this.
pub const MAX_INPUT: usize = 256 << 10;

/// perf's `PERF_COMP_ZSTD`.
const ZSTD: u32 = 1;

/// A zstd stream of records.
pub struct RecordCompressor {
    encoder: zstd::stream::raw::Encoder<'static>,
    level: i32,
    bytes_in: u64,
    bytes_out: u64,
    out: Vec<u8>,
}

impl RecordCompressor {
    /// A stream at zstd `level` (perf's `-z` default is 1).
    pub fn new(level: i32) -> io::Result<RecordCompressor> {
        Ok(RecordCompressor {
            encoder: zstd::stream::raw::Encoder::new(level)?,
            level,
            bytes_in: 0,
            bytes_out: 0,
            out: vec![0; zstd::zstd_safe::CCtx::out_size()],
        })
    }

    /// `records` (whole records, at most [`MAX_INPUT`] bytes) as
    /// COMPRESSED records, appended to `into`.
    /// With `end_frame`, the frame ends after them.
    pub fn compress(
        &mut self,
        records: &[u8],
        into: &mut Vec<u8>,
        end_frame: bool,
    ) -> io::Result<()> {
        assert!(
            records.len() <= MAX_INPUT,
            "a call compresses at most MAX_INPUT"
        );
        let mut payload = Vec::new();
        let mut input = InBuffer::around(records);
        while input.pos() < records.len() {
            let mut output = OutBuffer::around(&mut self.out[..]);
            self.encoder.run(&mut input, &mut output)?;
            payload.extend_from_slice(output.as_slice());
        }
        loop {
            let mut output = OutBuffer::around(&mut self.out[..]);
            let left = match end_frame {
                true => self.encoder.finish(&mut output, true)?,
                false => self.encoder.flush(&mut output)?,
            };
            payload.extend_from_slice(output.as_slice());
            if left == 0 {
                break;
            }
        }
        if end_frame {
            self.encoder.reinit()?;
        }
        for chunk in payload.chunks(MAX_PAYLOAD) {
            let size = (chunk.len() + 8) as u16;
            into.extend_from_slice(&RECORD_COMPRESSED.to_ne_bytes());
            into.extend_from_slice(&0u16.to_ne_bytes());
            into.extend_from_slice(&size.to_ne_bytes());
            into.extend_from_slice(chunk);
            self.bytes_out += u64::from(size);
        }
        self.bytes_in += records.len() as u64;
        Ok(())
    }

    /// What went in and came out so far.
    pub fn totals(&self) -> Totals {
        Totals {
            level: self.level,
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
        }
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
    use shardrec_format::header::{RecordHeader, RecordType};

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
}
