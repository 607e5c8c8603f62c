//! What a recording tells the person who started it, on its way from the
//! rings to perf.data: the caller (the binary) decides how it is shown,
//! whether `-q` silences it, and a test can capture it.

use shardrec_merge::MergeReport;

use crate::summary::RecordReport;

/// Receives what the record → perf.data pipeline has to say.
pub trait Reporter {
    /// The recording stopped: what each CPU's shard holds.
    fn recorded(&mut self, report: &RecordReport);
    /// A merge wrote its output (or as much of it as the shards held).
    fn merged(&mut self, report: &MergeReport);
    /// One of perf record's status lines (`[ ... record: Dump FILE ]`).
    fn note(&mut self, line: &str);
    /// Something went wrong that the recording survives.
    fn warning(&mut self, message: &str);
    /// Something went wrong that decides the exit status, said before the
    /// pipeline ends.
    fn error(&mut self, message: &str);
    /// What `-v` asked to see (each attr tried, each fallback), or an
    /// answer on `--control` (`evlist`): shown as it is, `-q` or not.
    fn detail(&mut self, line: &str);
}
