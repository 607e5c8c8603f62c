//! `PerfDataWriter`: a perf.data file written front to back, header last.
//!
//! Layout: header (written last, at offset 0), each event's id array, the
//! attrs section, the data section, then the feature index (one section per
//! feature, in bit order) and the feature contents.

use std::io::{self, IoSlice, Seek, SeekFrom, Write};

use crate::feature::Feature;
use crate::header::{FileHeader, FileSection, HEADER_SIZE};

/// One event: its attr bytes and every kernel id it was given.
#[derive(Clone, Debug)]
pub struct AttrEntry {
    /// The `perf_event_attr`, exactly `attr.size` bytes.
    pub attr: Vec<u8>,
    /// Ids found in this event's records.
    pub ids: Vec<u64>,
}

/// Writes one perf.data file.
pub struct PerfDataWriter<W: Write + Seek> {
    out: W,
    header: FileHeader,
    data_size: u64,
}

impl<W: Write + Seek> PerfDataWriter<W> {
    /// Writes everything up to the data section. All attrs must be the same
    /// size (perf.data has one `attr_size`).
    pub fn create(mut out: W, attrs: &[AttrEntry]) -> io::Result<Self> {
        let (header, front) = front_matter(attrs)?;
        out.seek(SeekFrom::Start(0))?;
        out.write_all(&front)?;
        Ok(PerfDataWriter {
            out,
            header,
            data_size: 0,
        })
    }

    /// Goes on with a file [`create`](Self::create)d with the same `attrs`
    /// whose data section's first `data_size` bytes are written (by a
    /// writer that was interrupted): the next record follows them.
    pub fn resume(mut out: W, attrs: &[AttrEntry], data_size: u64) -> io::Result<Self> {
        let (header, _) = front_matter(attrs)?;
        out.seek(SeekFrom::Start(header.data.offset + data_size))?;
        Ok(PerfDataWriter {
            out,
            header,
            data_size,
        })
    }

    /// Appends records (whole, header-framed) to the data section.
    pub fn write_record(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.data_size += bytes.len() as u64;
        Ok(())
    }

    /// Appends records (each whole, header-framed) to the data section
    /// from where they are: a writer that buffers takes more than its
    /// buffer holds in one `writev`, without copying them.
    pub fn write_records(&mut self, records: &[&[u8]]) -> io::Result<()> {
        let mut slices: Vec<IoSlice> = records.iter().map(|r| IoSlice::new(r)).collect();
        let mut left = &mut slices[..];
        while !left.is_empty() {
            match self.out.write_vectored(left) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.data_size += n as u64;
                    IoSlice::advance_slices(&mut left, n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Leaves the next `len` bytes of the data section to be written by
    /// others (at the returned file offset, with positioned writes), and
    /// goes on after them.
    pub fn reserve_data(&mut self, len: u64) -> io::Result<u64> {
        let at = self.header.data.offset + self.data_size;
        self.out.seek(SeekFrom::Start(at + len))?;
        self.data_size += len;
        Ok(at)
    }

    /// Where the data section starts in the file.
    pub fn data_offset(&self) -> u64 {
        self.header.data.offset
    }

    /// Hands what is buffered to the output.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Bytes in the data section so far.
    pub fn data_size(&self) -> u64 {
        self.data_size
    }

    /// Writes the features (any order; written in bit order) and the
    /// header, and returns the output.
    pub fn finish(mut self, features: &[(Feature, Vec<u8>)]) -> io::Result<W> {
        self.header.data.size = self.data_size;
        let mut sorted: Vec<&(Feature, Vec<u8>)> = features.iter().collect();
        sorted.sort_by_key(|(feature, _)| *feature);
        let index_offset = self.header.data.offset + self.data_size;
        let mut offset = index_offset + 16 * sorted.len() as u64;
        let mut index = Vec::new();
        for (feature, content) in &sorted {
            self.header.set_feature(*feature as usize);
            FileSection {
                offset,
                size: content.len() as u64,
            }
            .write_to(&mut index);
            offset += content.len() as u64;
        }
        self.out.write_all(&index)?;
        for (_, content) in &sorted {
            self.out.write_all(content)?;
        }
        self.out.seek(SeekFrom::Start(0))?;
        self.out.write_all(&self.header.to_bytes())?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// The header (its data section empty) and the bytes before the data
/// section: room for the header, each event's id array, the attrs.
fn front_matter(attrs: &[AttrEntry]) -> io::Result<(FileHeader, Vec<u8>)> {
    let attr_len = attrs.first().map_or(128, |a| a.attr.len());
    if attrs.iter().any(|a| a.attr.len() != attr_len) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "attrs of different sizes",
        ));
    }
    let mut front = vec![0; HEADER_SIZE as usize];
    let mut id_sections = Vec::with_capacity(attrs.len());
    for entry in attrs {
        let offset = front.len() as u64;
        front.extend(entry.ids.iter().flat_map(|id| id.to_ne_bytes()));
        id_sections.push(FileSection {
            offset,
            size: front.len() as u64 - offset,
        });
    }
    let offset = front.len() as u64;
    for (entry, ids) in attrs.iter().zip(&id_sections) {
        front.extend_from_slice(&entry.attr);
        ids.write_to(&mut front);
    }
    let header = FileHeader {
        attr_size: attr_len as u64 + 16,
        attrs: FileSection {
            offset,
            size: front.len() as u64 - offset,
        },
        data: FileSection {
            offset: front.len() as u64,
            size: 0,
        },
        ..FileHeader::default()
    };
    Ok((header, front))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs() -> Vec<AttrEntry> {
        let entry = |id: u64| AttrEntry {
            attr: vec![id as u8; 136],
            ids: vec![id, id + 100],
        };
        vec![entry(1), entry(2)]
    }

    #[test]
    fn a_resumed_file_is_the_file_written_at_once() {
        let records: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 24]).collect();
        let mut whole = PerfDataWriter::create(io::Cursor::new(Vec::new()), &attrs()).unwrap();
        for record in &records {
            whole.write_record(record).unwrap();
        }
        let whole = whole.finish(&[]).unwrap().into_inner();

        let mut first = PerfDataWriter::create(io::Cursor::new(Vec::new()), &attrs()).unwrap();
        first.write_record(&records[0]).unwrap();
        first.write_record(&records[1]).unwrap();
        // Interrupted after a third record it was not known to hold.
        first.write_record(&records[2]).unwrap();
        let mut file = first.out;
        let mut second = PerfDataWriter::resume(&mut file, &attrs(), 48).unwrap();
        second.write_record(&records[2]).unwrap();
        second.write_record(&records[3]).unwrap();
        second.finish(&[]).unwrap();
        assert_eq!(file.into_inner(), whole);
    }

    #[test]
    fn records_written_together_are_those_written_one_by_one() {
        let records: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 8 * (i as usize + 1)]).collect();
        let slices: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
        let mut one_by_one = PerfDataWriter::create(io::Cursor::new(Vec::new()), &attrs()).unwrap();
        for record in &records {
            one_by_one.write_record(record).unwrap();
        }
        // A buffer smaller than the records: they go past it, in pieces.
        let small = io::BufWriter::with_capacity(16, io::Cursor::new(Vec::new()));
        let mut together = PerfDataWriter::create(small, &attrs()).unwrap();
        together.write_records(&slices[..4]).unwrap();
        together.write_records(&slices[4..]).unwrap();
        assert_eq!(together.data_size(), one_by_one.data_size());
        let together = together.finish(&[]).unwrap().into_inner().unwrap();
        assert_eq!(
            together.into_inner(),
            one_by_one.finish(&[]).unwrap().into_inner()
        );
    }
}
