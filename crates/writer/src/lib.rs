//! The writer: one CPU's perf ring streamed into its shard file (or, for
//! an overwrite ring, copied into it at each snapshot: [`SnapshotWriter`]).
//!
//! A [`ShardWriter`] waits on io_uring for the ring's wakeup (a poll on the
//! event fd) or a word from the coordinator (Flush, for a ring that held
//! data below its watermark for a while; Drain; Quit; Switch, which ends
//! the shard and goes on in the next); then it writes
//! `[data_tail, data_head)` straight from the mapped ring — one or two
//! segments, as the range wraps — at the shard's current end, and moves
//! `data_tail` only once the kernel reports the write complete. The write
//! goes through io_uring, or, where the file system cannot take a
//! buffered write without blocking and io_uring would only hand it to a
//! worker thread, is a `pwritev` of the writer's own ([`ShardWrites`]). It never
//! looks inside a record: the kernel publishes `data_head` only at record
//! boundaries, so the shard is a clean concatenation of records.
//!
//! ```no_run
//! # fn demo(ring: &shardrec_sys::RingBuffer, event: &shardrec_sys::PerfEvent,
//! #         shard: std::fs::File, control: std::os::fd::OwnedFd) -> std::io::Result<()> {
//! use shardrec_writer::{RingWriter, ShardWriter, WriterConfig};
//! let stats = ShardWriter::new(ring, event, shard, control, WriterConfig::default())?.run()?;
//! println!("{} bytes in {} writes", stats.bytes, stats.writes);
//! # Ok(()) }
//! ```

mod config;
mod course;
mod kernel_check;
pub mod process;
mod requests;
mod shard_writer;
mod snapshot_writer;

pub use config::{ShardWrites, WriterConfig};
pub use kernel_check::{check as check_kernel, IoUringUnavailable};
pub use process::{WriterOptions, WriterSetup};
pub use shard_writer::ShardWriter;
pub use snapshot_writer::SnapshotWriter;

use shardrec_control::{Served, WriterStats};

/// What a writer process runs, whichever the ring: serve until a Switch
/// (then go on in the next shard) or a stop (then finish).
pub trait RingWriter: Sized {
    /// Serves until a Switch has been carried out or a stop has.
    fn serve(&mut self) -> std::io::Result<Served>;
    /// Goes on in `shard` after [`Served::Switch`].
    fn switch_shard(&mut self, shard: std::fs::File);
    /// After a stop: what the writer did.
    fn finish(self) -> std::io::Result<WriterStats>;

    /// Serves until a stop, a Switch going on in the same shard, then
    /// finishes.
    fn run(mut self) -> std::io::Result<WriterStats> {
        while self.serve()? == Served::Switch {}
        self.finish()
    }
}
