//! Writing: records into a zstd stream, carried by COMPRESSED records.

use std::io;

use shardrec_format::header::{RecordHeader, RecordType};
use zstd::stream::raw::{InBuffer, Operation, OutBuffer};

use super::{Totals, MAX_INPUT, MAX_PAYLOAD};

/// What a unit takes in while the stream compresses well: zstd's largest
/// block, as perf record's own stream is cut (it flushes once per pass
/// over a ring). Flushed every 63 KiB, the stream's blocks were half as
/// long, each building its own entropy tables: zstd took a fifth more
/// samples in profiled `-z` DWARF storms, and the output was 3% larger.
const WIDE_UNIT: usize = 128 << 10;

/// What a unit takes in otherwise: its output, stored raw if it does not
/// compress (zstd's worst case), with a frame's header and end, fits one
/// record's payload.
const NARROW_UNIT: usize = 63 << 10;

/// Units stay wide while each compresses at least this much, so a wide
/// unit that outgrows a record (one that compresses less than twofold
/// right after one that compressed eightfold) is rare.
const WIDE_RATIO: usize = 8;

/// Room for a wide unit's output, whatever the bytes: zstd's bound
/// (`ZSTD_compressBound`) with room for a frame's header and end.
const UNIT_OUTPUT: usize = WIDE_UNIT + (WIDE_UNIT >> 7) + 1024;

/// A zstd frame's end as zstd writes it after a flush: an empty raw block
/// marked last (RFC 8878, 3.1.1.2). Written by hand only where a wide
/// unit outgrew a record and was dropped: the frame then ends before it.
const FRAME_END: [u8; 3] = [1, 0, 0];

/// A zstd stream of records.
///
/// The stream goes out in **units**: what zstd gives for a piece of the
/// input, flushed, so each is whole blocks. A COMPRESSED record holds one
/// unit or more, so perf (which decodes each record on its own call and
/// takes one that decodes to nothing as broken: "Couldn't decompress
/// data") always finds a block's end in it. A unit must fit one record's
/// payload: a narrow one always does; a wide one that does not is dropped,
/// the frame is ended before it, and its input goes again, narrow, into a
/// frame of its own.
pub struct RecordCompressor {
    encoder: zstd::stream::raw::Encoder<'static>,
    level: i32,
    bytes_in: u64,
    bytes_out: u64,
    /// One unit's output.
    unit: Vec<u8>,
    /// Whether the next unit is wide.
    wide: bool,
    /// Whether the frame holds records and has not ended.
    frame_open: bool,
}

impl RecordCompressor {
    /// A stream at zstd `level` (perf's `-z` default is 1).
    pub fn new(level: i32) -> io::Result<RecordCompressor> {
        Ok(RecordCompressor {
            encoder: zstd::stream::raw::Encoder::new(level)?,
            level,
            bytes_in: 0,
            bytes_out: 0,
            unit: vec![0; UNIT_OUTPUT],
            wide: true,
            frame_open: false,
        })
    }

    /// `records` (whole records, at most [`MAX_INPUT`] bytes) as
    /// COMPRESSED records, appended to `into`; with `end_frame`, the
    /// frame ends with them. Returns where in `into` the last of them
    /// starts (none for no records), which, without `end_frame`,
    /// [`end_frame_in`](Self::end_frame_in) can end the frame in later.
    pub fn compress(
        &mut self,
        records: &[u8],
        into: &mut Vec<u8>,
        end_frame: bool,
    ) -> io::Result<Option<usize>> {
        assert!(
            records.len() <= MAX_INPUT,
            "a call compresses at most MAX_INPUT"
        );
        let mut out = Packer::new(into);
        let mut at = 0;
        loop {
            let width = if self.wide { WIDE_UNIT } else { NARROW_UNIT };
            let piece = &records[at..records.len().min(at + width)];
            let ends = end_frame && at + piece.len() == records.len();
            let len = self.unit(piece, ends)?;
            if len > MAX_PAYLOAD {
                if !self.wide {
                    // zstd's bound says it cannot; going again would not end.
                    return Err(io::Error::other("a narrow unit outgrew a record"));
                }
                self.drop_unit(&mut out)?;
                continue;
            }
            if !piece.is_empty() {
                self.wide = len * WIDE_RATIO <= piece.len();
            }
            out.put(&self.unit[..len]);
            self.frame_open = !ends && (self.frame_open || !piece.is_empty());
            at += piece.len();
            if at == records.len() {
                break;
            }
        }
        self.bytes_in += records.len() as u64;
        self.bytes_out += out.written;
        Ok(out.last)
    }

    /// `piece` into the stream, flushed (the frame ended with
    /// `end_frame`): its output, whole blocks, is the first bytes of
    /// `self.unit`; returns their length.
    fn unit(&mut self, piece: &[u8], end_frame: bool) -> io::Result<usize> {
        let mut output = OutBuffer::around(&mut self.unit[..]);
        let mut input = InBuffer::around(piece);
        while input.pos() < piece.len() {
            let before = input.pos();
            self.encoder.run(&mut input, &mut output)?;
            if input.pos() == before {
                return Err(io::Error::other("zstd took no input into a unit"));
            }
        }
        let left = match end_frame {
            true => self.encoder.finish(&mut output, true)?,
            false => self.encoder.flush(&mut output)?,
        };
        if left != 0 {
            return Err(io::Error::other("a unit's output outgrew zstd's bound"));
        }
        if end_frame {
            self.encoder.reinit()?;
        }
        Ok(output.pos())
    }

    /// Drops the unit just made, which outgrew a record: the frame ends
    /// before it (by hand, as zstd would have ended it there) if it held
    /// anything, and the encoder starts a new one, narrow.
    fn drop_unit(&mut self, out: &mut Packer) -> io::Result<()> {
        if self.frame_open {
            out.end_frame_by_hand();
        }
        self.encoder.reinit()?;
        self.frame_open = false;
        self.wide = false;
        Ok(())
    }

    /// Ends the frame in the COMPRESSED record at `last` in `records`, the
    /// last one there and the last [`compress`](Self::compress) gave: a
    /// frame's end goes in a record with data before it, as perf takes
    /// one that decodes to nothing as broken. So a frame can stay open
    /// across rounds, as perf's one frame does, and still end at a
    /// checkpoint with nothing new to compress.
    pub fn end_frame_in(&mut self, records: &mut Vec<u8>, last: usize) -> io::Result<()> {
        let header = RecordHeader::parse(&records[last..]);
        if header.is_none_or(|h| {
            h.type_ != RecordType::COMPRESSED || last + usize::from(h.size) != records.len()
        }) {
            return Err(io::Error::other(
                "a compressed frame ends only in the last COMPRESSED record",
            ));
        }
        // After a flush the end is an empty last block: a few bytes.
        let mut end = [0u8; 64];
        let mut output = OutBuffer::around(&mut end[..]);
        if self.encoder.finish(&mut output, true)? != 0 {
            return Err(io::Error::other(
                "a zstd frame's end took more than 64 bytes",
            ));
        }
        let end = output.as_slice();
        let size = records.len() + end.len() - last;
        if size > usize::from(u16::MAX) {
            return Err(io::Error::other(
                "a COMPRESSED record outgrew its size field",
            ));
        }
        records.extend_from_slice(end);
        shardrec_format::views::set_size(&mut records[last..], size as u16);
        self.bytes_out += end.len() as u64;
        self.encoder.reinit()?;
        self.frame_open = false;
        Ok(())
    }

    /// Whether records went into the frame since it began and it has not
    /// ended: a reader must then have read it from its start.
    pub fn frame_open(&self) -> bool {
        self.frame_open
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

/// Units into COMPRESSED records appended to a buffer: each into the
/// last record made here while it has room, else into a new one.
struct Packer<'a> {
    into: &'a mut Vec<u8>,
    /// Where the last record made here starts.
    last: Option<usize>,
    /// A frame's end that found no room in the last record: it goes at
    /// the start of the next one, whose unit begins a frame.
    end_carried: bool,
    /// The last record ends a frame: nothing more goes into it. perf
    /// decodes a record in calls to zstd that each stop at a frame's
    /// end, and puts what a call after the first decodes at the wrong
    /// place (`zstd_decompress_stream` moves its buffer on without
    /// resetting the position), unless the first gave nothing.
    sealed: bool,
    /// Bytes appended.
    written: u64,
}

impl<'a> Packer<'a> {
    fn new(into: &'a mut Vec<u8>) -> Packer<'a> {
        Packer {
            into,
            last: None,
            end_carried: false,
            sealed: false,
            written: 0,
        }
    }

    /// One unit, whole.
    fn put(&mut self, unit: &[u8]) {
        if unit.is_empty() {
            return;
        }
        let end: &[u8] = if self.end_carried { &FRAME_END } else { &[] };
        self.end_carried = false;
        let payload = end.len() + unit.len();
        if payload > self.room() || self.sealed {
            self.sealed = false;
            self.last = Some(self.into.len());
            let header = RecordHeader {
                type_: RecordType::COMPRESSED,
                misc: 0,
                size: 8,
            };
            header.write_to(self.into);
            self.written += 8;
        }
        self.into.extend_from_slice(end);
        self.into.extend_from_slice(unit);
        self.written += payload as u64;
        self.size_last();
    }

    /// What the last record made here can still take (none if none was).
    fn room(&self) -> usize {
        self.last.map_or(0, |last| {
            MAX_PAYLOAD.saturating_sub(self.into.len() - last - 8)
        })
    }

    /// The last record's size set to what it holds.
    fn size_last(&mut self) {
        let last = self.last.expect("a record was begun");
        let size = u16::try_from(self.into.len() - last).expect("a payload fits a record");
        shardrec_format::views::set_size(&mut self.into[last..], size);
    }

    /// The frame's end, last in the last record if it has room (a record
    /// with data before it: never one alone, which would decode to
    /// nothing), else first in the next, before anything it decodes to.
    fn end_frame_by_hand(&mut self) {
        if self.room() < FRAME_END.len() {
            self.end_carried = true;
            return;
        }
        self.into.extend_from_slice(&FRAME_END);
        self.written += FRAME_END.len() as u64;
        self.sealed = true;
        self.size_last();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compressed::each_record;
    use crate::feature::Feature;
    use shardrec_testkit::records::numbered_samples as records;

    /// 4 KiB SAMPLE records, `bytes` of them in all, whose payloads are
    /// random below `1 << bits` in each byte (0: all zeros; 8:
    /// incompressible).
    fn samples(bytes: usize, bits: u32, seed: u32) -> Vec<u8> {
        let mut state = seed;
        let mut records = Vec::new();
        while records.len() + 4096 <= bytes {
            let header = RecordHeader {
                type_: RecordType::SAMPLE,
                misc: 0,
                size: 4096,
            };
            header.write_to(&mut records);
            for _ in 0..4088 {
                state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
                records.push(((state >> 16) as u8).checked_shr(8 - bits).unwrap_or(0));
            }
        }
        records
    }

    /// The stream `data`'s COMPRESSED records carry, decoded as perf
    /// does (one stream; each record on its own, in calls that stop at
    /// a frame's end), checking that each decodes to something and that
    /// no call after one that gave something decodes more (perf puts
    /// that at the wrong place).
    fn decoded_as_perf_does(data: &[u8]) -> Vec<u8> {
        let mut decoder = zstd::stream::raw::Decoder::new().unwrap();
        let mut chunk = vec![0u8; MAX_INPUT];
        let (mut at, mut back) = (0, Vec::new());
        while at < data.len() {
            let header = RecordHeader::parse(&data[at..]).unwrap();
            assert_eq!(header.type_, RecordType::COMPRESSED);
            let payload = &data[at + 8..at + usize::from(header.size)];
            let mut input = InBuffer::around(payload);
            let mut output = OutBuffer::around(&mut chunk[..]);
            while input.pos() < payload.len() {
                let before = output.pos();
                decoder.run(&mut input, &mut output).unwrap();
                assert!(
                    before == 0 || output.pos() == before,
                    "perf would misplace what the record at {at} decodes to"
                );
            }
            assert!(output.pos() > 0, "the record at {at} decodes to nothing");
            back.extend_from_slice(output.as_slice());
            at += usize::from(header.size);
        }
        back
    }

    /// The records `data` carries, by our own reader.
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
    fn units_stay_wide_while_they_compress_well() {
        let mut compressor = RecordCompressor::new(1).unwrap();
        let records = samples(MAX_INPUT, 0, 7);
        let mut data = Vec::new();
        compressor.compress(&records, &mut data, false).unwrap();
        assert!(compressor.wide);
        let noise = samples(MAX_INPUT, 8, 9);
        compressor.compress(&noise, &mut data, false).unwrap();
        assert!(!compressor.wide, "incompressible units go narrow");
        compressor.compress(&records, &mut data, true).unwrap();
        assert!(compressor.wide, "and wide again once they compress");
        let all = [&records[..], &noise[..], &records[..]].concat();
        assert!(decoded_as_perf_does(&data) == all);
        assert!(carried(&data) == all);
    }

    #[test]
    fn a_wide_unit_too_big_for_a_record_goes_again_in_a_new_frame() {
        let compressible = samples(MAX_INPUT, 0, 3);
        let noise = samples(MAX_INPUT, 8, 5);
        // The noise first in a call of its own (the frame's end goes at
        // the start of the next record), after 128 KiB of a call (in the
        // record before), and in a new stream (no frame to end).
        let half = [&compressible[..WIDE_UNIT], &noise[..MAX_INPUT - WIDE_UNIT]].concat();
        for calls in [
            vec![&compressible[..], &noise[..]],
            vec![&compressible[..], &half[..]],
            vec![&noise[..]],
        ] {
            let mut compressor = RecordCompressor::new(1).unwrap();
            let mut data = Vec::new();
            for call in &calls {
                compressor.compress(call, &mut data, false).unwrap();
            }
            assert!(!compressor.wide);
            let all = calls.concat();
            assert!(decoded_as_perf_does(&data) == all);
            assert!(carried(&data) == all);
            let totals = compressor.totals();
            assert_eq!(totals.bytes_in, all.len() as u64);
            assert_eq!(totals.bytes_out, data.len() as u64);
        }
    }

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

    #[test]
    fn each_compressed_record_decodes_to_records_on_its_own() {
        // Bytes that compress about twofold: 256 KiB would not fit one
        // record's payload.
        let records = samples(MAX_INPUT, 4, 12345);
        let mut compressor = RecordCompressor::new(1).unwrap();
        let mut data = Vec::new();
        compressor.compress(&records, &mut data, false).unwrap();
        let (mut at, mut count) = (0, 0);
        while let Some(header) = RecordHeader::parse(&data[at..]) {
            at += usize::from(header.size);
            count += 1;
        }
        assert!(count > 1, "the payload takes several records");
        assert!(decoded_as_perf_does(&data) == records);
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
