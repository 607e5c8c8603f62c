//! The kernel ABI of shardrec, and nearly all of its `unsafe`.
//!
//! Everything that touches a perf file descriptor or its mapped ring lives
//! here, so the crates above it (the writer, the coordinator, the merge) are
//! safe code:
//!
//! - [`Attr`]: a `perf_event_attr` with the fields shardrec sets, and the
//!   bytes it is written to disk as;
//! - [`PerfEvent`]: an open event and its ioctls (enable, disable, id,
//!   output redirection, tracepoint filters);
//! - [`RingBuffer`]: the mapped ring of one event, read as two slices between
//!   `data_tail` and `data_head`, with the orderings the kernel documents;
//!   the slices are borrowed for a closure ([`RingBuffer::consume`]), or
//!   released by an `unsafe` call whose caller vouches that no I/O still
//!   reads them;
//! - [`cpu`]: CPU lists, the online set and pinning;
//! - [`tracefs`]: finding (and mounting) tracefs, tracepoint ids and formats;
//! - [`debuginfod`]: debug info by build id, through libdebuginfod loaded
//!   when asked for;
//! - [`stdout`]: standard output set aside while a recording into perf's
//!   pipe format runs, and a signal when the stream's reader leaves.
//!
//! ```no_run
//! use shardrec_sys::{Attr, PerfEvent, RingBuffer, Target};
//! let mut attr = Attr::software(shardrec_sys::abi::PERF_COUNT_SW_CPU_CLOCK as u64);
//! attr.set_frequency(1000);
//! let event = PerfEvent::open(&attr, Target::cpu(0))?;
//! let ring = RingBuffer::map(&event, 8)?;
//! event.enable()?;
//! let bytes = ring.consume(|[first, second]| first.len() + second.len());
//! # let _ = bytes;
//! # Ok::<(), std::io::Error>(())
//! ```

mod attr;
pub mod bpf;
pub mod build_id_probe;
pub mod bytes;
pub mod cpu;
pub mod debuginfod;
mod event;
pub mod fds;
pub mod file_writes;
#[cfg(target_arch = "x86_64")]
pub mod inline_syscall;
pub mod process;
pub mod ring;
pub mod stdout;
pub mod sysctl;
pub mod tracefs;

pub use attr::{Attr, Flag, ATTR_SIZE};
pub use event::{PerfEvent, Target};
pub use ring::{PausedRing, RingBuffer};

/// The raw constants and structs of `<linux/perf_event.h>`.
pub use perf_event_open_sys::bindings as abi;
