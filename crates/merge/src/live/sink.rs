//! Where a live merge writes: a perf.data file, whose header and features
//! are written at the end and which is put in place then, or perf's pipe
//! format on a stream, whose features go first ([`crate::pipe`]).

use std::fs::File;
use std::io::{self, BufWriter};

use shardrec_perfdata::feature::Feature;
use shardrec_perfdata::PerfDataWriter;
use shardrec_shard::output::Output;
use shardrec_shard::Meta;

use crate::data_out::RecordSink;
use crate::destination::Destination;
use crate::pipe::{self, Stream};

/// The output's buffer: the side band's small records are gathered in
/// it, while a round's runs (a ring's or a shard's bytes as they lie,
/// usually more) go past it, straight from where they are into one
/// `writev`, without a copy of their own (a 1 MiB buffer took a copy of
/// every round of a DWARF storm's: 6% of the merger's samples).
const BUFFERED: usize = 64 << 10;

/// What a live merge writes into.
pub enum LiveOutput<'p> {
    /// This output, as `-o` named it.
    File(&'p Output),
    /// perf's pipe format into this stream (`-o -`: standard output).
    Stream(File),
}

/// The output being written.
pub enum Sink {
    /// A perf.data file being written in `destination`'s file.
    File {
        /// The perf.data writer.
        writer: PerfDataWriter<BufWriter<File>>,
        /// Where it goes when whole.
        destination: Destination,
        /// The file under the writer.
        file: File,
    },
    /// perf's pipe format.
    Pipe(Stream),
}

impl Sink {
    /// A perf.data file for `target`, written at `tmp` if given, with the
    /// events of `meta`.
    pub fn file(target: Output, tmp: Option<std::path::PathBuf>, meta: &Meta) -> io::Result<Sink> {
        let (destination, file) = Destination::create(target, tmp)?;
        let buffered = BufWriter::with_capacity(BUFFERED, file.try_clone()?);
        let writer = PerfDataWriter::create(buffered, &crate::output::attrs(meta))?;
        Ok(Sink::File {
            writer,
            destination,
            file,
        })
    }

    /// The perf.data file for `target` an earlier merger was writing at
    /// `tmp`, cut back to the first `data_len` bytes of its data section
    /// (what its last checkpoint says is whole), to go on from there.
    pub fn file_resumed(
        target: Output,
        tmp: std::path::PathBuf,
        meta: &Meta,
        data_len: u64,
    ) -> io::Result<Sink> {
        let (destination, file) = Destination::reopen(target, tmp)?;
        let buffered = BufWriter::with_capacity(BUFFERED, file.try_clone()?);
        let writer = PerfDataWriter::resume(buffered, &crate::output::attrs(meta), data_len)?;
        // What the earlier merger wrote after its checkpoint goes.
        file.set_len(writer.data_offset() + data_len)?;
        Ok(Sink::File {
            writer,
            destination,
            file,
        })
    }

    /// perf's pipe format into `stream`, starting with `features`.
    pub fn pipe(stream: File, meta: &Meta, features: &[(Feature, Vec<u8>)]) -> io::Result<Sink> {
        Ok(Sink::Pipe(pipe::open(stream, meta, features)?))
    }

    /// Bytes of data written so far (buffered or not).
    pub fn data_len(&self) -> u64 {
        match self {
            Sink::File { writer, .. } => writer.data_size(),
            Sink::Pipe(stream) => stream.bytes_written(),
        }
    }

    /// Whether this is perf's pipe format, into a stream.
    pub fn is_pipe(&self) -> bool {
        matches!(self, Sink::Pipe(_))
    }

    /// Everything written so far, out of the buffers.
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::File { writer, .. } => writer.flush(),
            Sink::Pipe(stream) => stream.flush(),
        }
    }

    /// Removes the file of a merge given up on (a stream keeps what it
    /// was sent).
    pub fn discard(&self) {
        if let Sink::File { destination, .. } = self {
            destination.discard();
        }
    }
}

impl RecordSink for Sink {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Sink::File { writer, .. } => writer.put(bytes),
            Sink::Pipe(stream) => stream.put(bytes),
        }
    }

    fn put_all(&mut self, records: &[&[u8]]) -> io::Result<()> {
        match self {
            Sink::File { writer, .. } => writer.put_all(records),
            Sink::Pipe(stream) => stream.put_all(records),
        }
    }
}
