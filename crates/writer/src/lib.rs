//! The writer: one CPU's perf ring streamed into its shard file.
//!
//! A [`ShardWriter`] waits on io_uring for the ring's wakeup (a poll on the
//! event fd) or a word from the coordinator (Flush, for a ring that held
//! data below its watermark for a while; Drain; Quit; Switch, which ends
//! the shard and goes on in the next); then it writes
//! `[data_tail, data_head)` straight from the mapped ring — one or two
//! segments, as the range wraps — at the shard's current end, and moves
//! `data_tail` only once the kernel reports the write complete. It never
//! looks inside a record: the kernel publishes `data_head` only at record
//! boundaries, so the shard is a clean concatenation of records.
//!
//! ```no_run
//! # fn demo(ring: &shardrec_sys::RingBuffer, event: &shardrec_sys::PerfEvent,
//! #         shard: std::fs::File, control: std::os::fd::OwnedFd) -> std::io::Result<()> {
//! use shardrec_writer::{ShardWriter, WriterConfig};
//! let stats = ShardWriter::new(ring, event, shard, control, WriterConfig::default())?.run()?;
//! println!("{} bytes in {} writes", stats.bytes, stats.writes);
//! # Ok(()) }
//! ```

mod shard_writer;
mod support;

pub use shard_writer::{ShardWriter, WriterConfig};
pub use support::check as check_kernel;
