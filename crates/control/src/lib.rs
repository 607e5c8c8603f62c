//! The protocol between the coordinator and its helper processes (one
//! writer per CPU, the VIP), defined once for both ends.
//!
//! - [`Command`], coordinator → helper over its control pipe: one byte
//!   each, since a writer reads them between io_uring completions and a
//!   fixed size never needs reassembly;
//! - [`Report`], helper → coordinator over its report pipe: a MessagePack
//!   enum behind a length, from `Ready` to `Done` (with the helper's
//!   [`Outcome`]) or `Failed`.
//!
//! ```
//! use shardrec_control::{Outcome, Report, WriterStats};
//! let mut pipe = Vec::new();
//! Report::Started.write_to(&mut pipe)?;
//! Report::Done(Outcome::Writer(WriterStats { bytes: 4096, ..WriterStats::default() }))
//!     .write_to(&mut pipe)?;
//! let mut read = &pipe[..];
//! assert_eq!(Report::read_from(&mut read)?, Some(Report::Started));
//! assert!(matches!(Report::read_from(&mut read)?, Some(Report::Done(Outcome::Writer(s))) if s.bytes == 4096));
//! assert_eq!(Report::read_from(&mut read)?, None);
//! # Ok::<(), std::io::Error>(())
//! ```

mod command;
pub mod fault;
mod report;

pub use command::{Command, Served};
pub use report::{CaptureHook, OffCpuStats, Outcome, Report, VipStats, WriterStats};
