//! The protocol between the coordinator and its helper processes (one
//! writer per CPU, the VIP), defined once for both ends.
//!
//! - [`Command`], coordinator → writer or VIP over its control pipe;
//! - [`Report`], writer or VIP → coordinator over its report pipe, from
//!   `Ready` to `Done` (with the helper's [`Outcome`]) or `Failed`;
//! - the live merger's and the `--switch-output` merger's commands and
//!   reports, typed beside their processes (they carry the merge's types).
//!
//! Every one of them crosses its pipe in the one [`frame`]: a length,
//! then MessagePack. What follows a helper's death is one table,
//! [`restart::RESTARTS`].
//!
//! ```
//! use shardrec_control::{Framed, Outcome, Report, WriterStats};
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
pub mod frame;
pub mod helper;
mod report;
pub mod restart;
pub mod windows;

pub use command::{Command, Served};
pub use frame::{Framed, Unframed};
pub use helper::{Helper, HelperEnds};
pub use report::{CaptureHook, OffCpuStats, Outcome, Report, VipStats, WriterStats};
