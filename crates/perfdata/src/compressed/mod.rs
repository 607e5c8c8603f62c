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
