//! Merging a recording's time slices on several threads.
//!
//! Uncompressed, every slice's output length is known from the shards'
//! time indexes, so the data section is reserved whole and each thread
//! writes its slices at their offsets. With `-z` the lengths are known only
//! once compressed: each slice is compressed into memory (its own zstd
//! frame) and written in slice order, with at most two slices per thread
//! waiting, which bounds the memory.
//!
//! A stream (perf's pipe format) takes its records in order only: with
//! `-z` as above; uncompressed, one slice after the other straight into
//! it, by one thread (a slice in memory is 32 MiB, and the reader of a
//! pipe is slower than one merging thread).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Seek, Write};
use std::sync::{Condvar, Mutex};

use shardrec_format::layouts::Layouts;
use shardrec_perfdata::compressed::Totals;
use shardrec_perfdata::PerfDataWriter;
use shardrec_shard::parallel;
use shardrec_shard::scan::ScannedShard;

use crate::consume::Consumer;
use crate::data_out::{DataOut, PositionedSink, RecordSink, RecordWriter};
use crate::dso::SliceHits;
use crate::order::{release_step, Merged, SortedShard};
use crate::progress::Progress;
use crate::slices::{self, Slice, ROUND_BYTES};

/// What every slice's merge shares.
pub struct Context<'a> {
    /// The shards, CPUs' then the VIP's.
    pub shards: &'a [ScannedShard],
    /// Their events' layouts.
    pub layouts: &'a Layouts,
    /// `-z`'s level.
    pub compression: Option<i32>,
    /// Threads to merge with.
    pub threads: usize,
    /// Bytes merged, for the bar.
    pub progress: &'a Progress,
    /// Free the shards behind the slices written (uncompressed only).
    pub consume: Option<ConsumeShards<'a>>,
    /// Bytes of each positioned write ([`crate::data_out::write_piece`]).
    pub write_piece: usize,
    /// No round ends before a record this late: a resumed merge's prefix
    /// ended its last round holding records up to here, and perf flushes
    /// up to that time at the next round, so every record left earlier
    /// than it goes in the first (the rounds passed meanwhile end at once
    /// after it: perf takes rounds with nothing between them as one).
    pub rounds_from: u64,
}

/// The shards to free as the merge goes, and where to say how far it got.
#[derive(Clone, Copy)]
pub struct ConsumeShards<'a> {
    /// The recording.
    pub recording: &'a shardrec_shard::RecordingDir,
    /// The shards' files, in the order of [`Context::shards`].
    pub paths: &'a [std::path::PathBuf],
}

/// What one slice's merge found.
pub struct SliceDone {
    /// Records written.
    pub records: u64,
    /// What they say about binaries.
    pub hits: SliceHits,
    /// What was compressed.
    pub totals: Totals,
}

/// Merges every slice into the data section after what `writer` has
/// written; `file` is the file under it, for positioned writes.
pub fn write_slices<'a, W: Write + Seek + Send>(
    context: &Context<'a>,
    slices: &[Slice],
    writer: &mut PerfDataWriter<W>,
    file: &File,
) -> io::Result<Vec<SliceDone>> {
    match context.compression {
        None => write_positioned(context, slices, writer, file),
        Some(_) => write_in_order(context, slices, writer),
    }
}

fn write_positioned<'a, W: Write + Seek>(
    context: &Context<'a>,
    slices: &[Slice],
    writer: &mut PerfDataWriter<W>,
    file: &File,
) -> io::Result<Vec<SliceDone>> {
    let head = writer.data_size();
    let base = writer.reserve_data(slices::total_len(slices))?;
    let consumer = context
        .consume
        .map(|c| {
            Consumer::new(
                c.recording,
                context.shards,
                c.paths,
                slices,
                (base - head, base),
            )
        })
        .transpose()?;
    let turn = Mutex::new(());
    parallel::try_map(slices, context.threads, |index, slice| {
        let sink = PositionedSink::new(file, &turn, base + slice.offset, context.write_piece);
        let (mut sink, done) = merge_slice(context, slice, sink)?;
        sink.flush()?;
        if sink.len != slice.output_len() {
            let why = format!(
                "slice {index} of the merge came to {} bytes where the shards' index gave {} (did a shard change during the merge?)",
                sink.len,
                slice.output_len()
            );
            return Err(io::Error::new(io::ErrorKind::InvalidData, why));
        }
        if let Some(consumer) = &consumer {
            consumer.written(index)?;
        }
        Ok(done)
    })
}

/// Merges every slice into `sink`, in order: for a stream, which cannot
/// be written at offsets.
pub fn write_slices_in_order<S: RecordSink + Send>(
    context: &Context,
    slices: &[Slice],
    sink: &mut S,
) -> io::Result<Vec<SliceDone>> {
    if context.compression.is_some() {
        return write_in_order(context, slices, sink);
    }
    slices
        .iter()
        .map(|slice| merge_slice(context, slice, &mut *sink).map(|(_, done)| done))
        .collect()
}

fn write_in_order<'a, S: RecordSink + Send>(
    context: &Context<'a>,
    slices: &[Slice],
    writer: &mut S,
) -> io::Result<Vec<SliceDone>> {
    let queue = InOrder::new(writer, 2 * context.threads);
    parallel::try_map(slices, context.threads, |index, slice| {
        let merged = queue
            .wait_turn(index)
            .and_then(|()| merge_slice(context, slice, Vec::new()));
        let result = merged.and_then(|(bytes, done)| queue.put(index, bytes).map(|()| done));
        if result.is_err() {
            queue.fail();
        }
        result
    })
}

/// Merges `slice`'s records from every shard into `sink`, with a round
/// after each record that passes a multiple of [`ROUND_BYTES`] of the
/// whole data section (once past `context.rounds_from`).
fn merge_slice<'a, S: RecordSink>(
    context: &Context<'a>,
    slice: &Slice,
    sink: S,
) -> io::Result<(S, SliceDone)> {
    let step = release_step(context.shards.len());
    let streams = context
        .shards
        .iter()
        .map(|shard| SortedShard::slice(shard, context.layouts, step, slice))
        .collect();
    let mut out = RecordWriter::new(DataOut::new(sink, context.compression)?, context.layouts);
    let mut read = slice.input_before;
    let mut shown = read;
    let mut records = Merged::new(streams).peekable();
    // Rounds owed: passed, but held back while records earlier than
    // `rounds_from` may follow (only in the first slice, which ends past it).
    let mut owed = 0;
    while let Some((time, record)) = records.next() {
        out.put(record)?;
        let before = read;
        read += record.len() as u64;
        owed += read / ROUND_BYTES - before / ROUND_BYTES;
        let last = records.peek().is_none();
        if owed > 0 && (time >= context.rounds_from || last) {
            for _ in 0..owed {
                out.out.end_round()?;
            }
            owed = 0;
            context.progress.advance(read - shown);
            shown = read;
        }
    }
    context.progress.advance(read - shown);
    let (sink, totals) = out.out.finish()?;
    let done = SliceDone {
        records: out.records,
        hits: out.hits,
        totals,
    };
    Ok((sink, done))
}

/// Slices' compressed bytes, written in slice order whichever thread
/// finishes first.
struct InOrder<'w, S: RecordSink> {
    state: Mutex<Turn<'w, S>>,
    turn: Condvar,
    /// How far past the next slice to write a thread may start one.
    ahead: usize,
}

struct Turn<'w, S: RecordSink> {
    writer: &'w mut S,
    next: usize,
    ready: BTreeMap<usize, Vec<u8>>,
    failed: bool,
}

impl<'w, S: RecordSink> InOrder<'w, S> {
    fn new(writer: &'w mut S, ahead: usize) -> Self {
        InOrder {
            state: Mutex::new(Turn {
                writer,
                next: 0,
                ready: BTreeMap::new(),
                failed: false,
            }),
            turn: Condvar::new(),
            ahead: ahead.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Turn<'w, S>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until slice `index` may be merged: the slice being written is
    /// close enough. The slice being written never waits.
    fn wait_turn(&self, index: usize) -> io::Result<()> {
        let mut turn = self.lock();
        while index >= turn.next + self.ahead && !turn.failed {
            turn = self.turn.wait(turn).unwrap_or_else(|p| p.into_inner());
        }
        match turn.failed {
            true => Err(io::Error::other("another slice of the merge failed")),
            false => Ok(()),
        }
    }

    /// Slice `index`'s bytes; written with every slice ready after it.
    fn put(&self, index: usize, bytes: Vec<u8>) -> io::Result<()> {
        let mut turn = self.lock();
        turn.ready.insert(index, bytes);
        loop {
            let next = turn.next;
            let Some(bytes) = turn.ready.remove(&next) else {
                break;
            };
            turn.writer.put(&bytes)?;
            turn.next += 1;
        }
        self.turn.notify_all();
        Ok(())
    }

    fn fail(&self) {
        self.lock().failed = true;
        self.turn.notify_all();
    }
}
