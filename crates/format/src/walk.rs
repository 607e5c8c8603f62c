//! Walking concatenated records, trusting no header.

use crate::header::{RecordHeader, HEADER_SIZE};

/// One record found in a buffer.
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    /// Where the record starts in the buffer.
    pub offset: usize,
    /// Its header.
    pub header: RecordHeader,
    /// The whole record, header included.
    pub bytes: &'a [u8],
}

/// How a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Not walked to the end yet.
    Unfinished,
    /// Every byte belonged to a whole, valid record.
    Clean,
    /// The bytes from `offset` on (`dropped` of them) are not a valid record.
    Torn {
        /// Where the first invalid record starts.
        offset: usize,
        /// How many bytes were left over from there.
        dropped: usize,
        /// What was wrong with the header there.
        reason: &'static str,
    },
}

/// Why bytes do not begin with a whole record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoRecord {
    /// Fewer than 8 bytes: the header is cut short.
    HeaderCut,
    /// The header's size is no record's: below 8, or not a multiple of 8.
    NotAHeader(&'static str),
    /// The record runs past the end of the bytes.
    RecordCut,
}

impl NoRecord {
    /// What is wrong, in a few words.
    pub fn reason(self) -> &'static str {
        match self {
            NoRecord::HeaderCut => "header cut short",
            NoRecord::NotAHeader(why) => why,
            NoRecord::RecordCut => "record runs past the end",
        }
    }
}

/// The whole record `bytes` begin with, and its header: the one place
/// that decides whether a header can be a record's.
pub fn leading_record(bytes: &[u8]) -> Result<(RecordHeader, &[u8]), NoRecord> {
    let header = RecordHeader::parse(bytes).ok_or(NoRecord::HeaderCut)?;
    let size = usize::from(header.size);
    if size < HEADER_SIZE {
        return Err(NoRecord::NotAHeader("record size below 8"));
    }
    if size % 8 != 0 {
        return Err(NoRecord::NotAHeader("record size not a multiple of 8"));
    }
    let record = bytes.get(..size).ok_or(NoRecord::RecordCut)?;
    Ok((header, record))
}

/// An iterator over the records of a buffer. A header with a size below 8,
/// not a multiple of 8, or past the end stops the walk; [`end`](Self::end)
/// then says where and why.
pub struct RecordWalker<'a> {
    bytes: &'a [u8],
    offset: usize,
    end: End,
}

impl<'a> RecordWalker<'a> {
    /// Walks `bytes` from the start.
    pub fn new(bytes: &'a [u8]) -> Self {
        RecordWalker {
            bytes,
            offset: 0,
            end: End::Unfinished,
        }
    }

    /// How the walk ended ([`End::Unfinished`] until it has).
    pub fn end(&self) -> End {
        self.end
    }

    fn stop(&mut self, reason: &'static str) -> Option<Record<'a>> {
        self.end = End::Torn {
            offset: self.offset,
            dropped: self.bytes.len() - self.offset,
            reason,
        };
        None
    }
}

impl<'a> Iterator for RecordWalker<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        if self.end != End::Unfinished {
            return None;
        }
        let rest = &self.bytes[self.offset..];
        if rest.is_empty() {
            self.end = End::Clean;
            return None;
        }
        let (header, bytes) = match leading_record(rest) {
            Ok(record) => record,
            Err(no_record) => return self.stop(no_record.reason()),
        };
        let record = Record {
            offset: self.offset,
            header,
            bytes,
        };
        self.offset += bytes.len();
        Some(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::RecordType;

    fn record(type_: u32, size: u16) -> Vec<u8> {
        let mut out = Vec::new();
        RecordHeader {
            type_: RecordType(type_),
            misc: 0,
            size,
        }
        .write_to(&mut out);
        out.resize(size as usize, 0xab);
        out
    }

    #[test]
    fn walks_clean_buffers() {
        let mut bytes = record(9, 16);
        bytes.extend(record(3, 24));
        let mut walker = RecordWalker::new(&bytes);
        let types: Vec<RecordType> = walker.by_ref().map(|r| r.header.type_).collect();
        assert_eq!(types, [RecordType::SAMPLE, RecordType::COMM]);
        assert_eq!(
            format!("{types:?} {}", RecordType(99)),
            "[SAMPLE, COMM] type 99"
        );
        assert_eq!(walker.end(), End::Clean);
    }

    #[test]
    fn reports_bad_headers() {
        for (size, reason) in [
            (4u16, "record size below 8"),
            (12, "record size not a multiple of 8"),
            (64, "record runs past the end"),
        ] {
            let mut bytes = record(9, 16);
            let mut bad = record(9, 16);
            bad[6..8].copy_from_slice(&size.to_ne_bytes());
            bytes.extend(bad);
            let mut walker = RecordWalker::new(&bytes);
            assert_eq!(walker.by_ref().count(), 1);
            assert_eq!(
                walker.end(),
                End::Torn {
                    offset: 16,
                    dropped: 16,
                    reason
                }
            );
        }
    }
}
