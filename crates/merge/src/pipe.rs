//! The merge written to standard output in perf's pipe format (`-o -`), as
//! `perf record -o -` writes it ([`shardrec_perfdata::pipe`]): the events,
//! the header features and the tracepoint formats first, as records, then
//! the data section as a file has it, in order, by one writer.
//!
//! Everything a feature says is known before the first record goes out
//! (the first pass over the shards found the sample times, the VIP's file
//! holds the BPF programs), except two things, which are left as perf
//! record leaves them in a pipe:
//!
//! - build ids: perf sends none in a pipe (`HEADER_BUILD_ID` is not a
//!   feature it synthesizes, and which binaries samples fell in is known
//!   only once every record has gone out), nor adds them to the build-id
//!   cache; `perf inject -b` reads them from the stream where a file with
//!   them is wanted;
//! - `-z`'s ratio: `HEADER_COMPRESSED` goes out before anything is
//!   compressed, with a ratio of 0, as perf's does.

use std::fs::File;
use std::io::{self, BufWriter};
use std::os::fd::AsFd;

use shardrec_perfdata::compressed::Totals;
use shardrec_perfdata::pipe::{PipeEvent, PipeWriter};

use shardrec_perfdata::feature::Feature;
use shardrec_shard::Meta;

use crate::bpf_features::Captured;
use crate::output::{self, DataPlan};
use crate::progress::Progress;
use crate::{header_features, Ending, MergeReport};

/// The stream on standard output ([`open`]).
pub type Stream = PipeWriter<BufWriter<File>>;

/// Writes the merge that `plan` describes to standard output, and reports.
pub(crate) fn write(
    ending: Ending,
    plan: &DataPlan,
    progress: &Progress,
) -> io::Result<MergeReport> {
    let stdout = File::from(io::stdout().as_fd().try_clone_to_owned()?);
    let features = features(
        ending.meta,
        ending.sample_times(),
        ending.bpf,
        plan.compression,
    );
    let mut writer = open(stdout, ending.meta, &features)?;
    let left_out = left_out(&writer);
    let written = output::write_stream(plan, &mut writer, progress)?;
    let bytes = writer.bytes_written();
    writer.finish()?;
    let mut report = ending.report(written, 0);
    report.output_bytes = bytes;
    report.left_out_of_pipe = left_out;
    Ok(report)
}

/// The header features a stream starts with: what is known of the
/// recording before its data (see the module's notes).
pub(crate) fn features(
    meta: &Meta,
    sample_times: (u64, u64),
    bpf: &Captured,
    compression: Option<i32>,
) -> Vec<(Feature, Vec<u8>)> {
    let mut features = header_features::all(meta, sample_times, &[]);
    features.extend(bpf.pipe_features());
    if let Some(level) = compression {
        let totals = Totals {
            level,
            ..Totals::default()
        };
        features.push(totals.feature());
    }
    features
}

/// Starts the stream into `out`: everything before the data.
pub(crate) fn open(out: File, meta: &Meta, features: &[(Feature, Vec<u8>)]) -> io::Result<Stream> {
    let ids: Vec<Vec<u64>> = meta
        .events
        .iter()
        .map(|e| e.ids.iter().map(|&(_, id)| id).collect())
        .collect();
    let attrs: Vec<_> = meta.events.iter().map(|e| e.header_attr()).collect();
    let events: Vec<PipeEvent> = meta
        .events
        .iter()
        .zip(&ids)
        .zip(&attrs)
        .map(|((event, ids), attr)| PipeEvent {
            attr,
            ids,
            name: &event.name,
        })
        .collect();
    let formats = Some(&meta.tracing_data[..]).filter(|f| !f.is_empty());
    let out = BufWriter::with_capacity(1 << 20, out);
    PipeWriter::create(out, &events, features, formats)
}

/// The features the stream could not carry, for the report.
pub(crate) fn left_out(stream: &Stream) -> Vec<String> {
    stream
        .left_out()
        .iter()
        .map(|feature| format!("{feature:?}"))
        .collect()
}
