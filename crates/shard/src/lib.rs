//! The recording directory (`perf.data.shards/`) and what is in it.
//!
//! - [`RecordingDir`]: its paths, files created `0600` and never through a
//!   symlink, and `meta` rewritten atomically;
//! - [`Meta`]: what the coordinator knows about a recording (attrs, kernel
//!   ids per CPU, host facts, per-CPU statistics), as MessagePack;
//! - [`scan`]: walking a shard to count its records, losses and time range;
//! - [`shard_index`]: what that walk learnt, kept beside each shard for a
//!   merge of a time window.
//! - [`accounting`]: every shard walked at the stop, counted into `meta`;
//! - [`output`]: what the output path is (a file, a device, a FIFO) and
//!   whether the shards can live beside it;
//! - [`merged_prefix`]: how far a merge that frees the shards as it goes
//!   got, so an interrupted one can be completed.
//!
//! ```no_run
//! use shardrec_shard::RecordingDir;
//! let dir = RecordingDir::open("perf.data.shards");
//! let meta = dir.read_meta()?;
//! for cpu in &meta.cpus {
//!     println!("{}", dir.shard_path(*cpu).display());
//! }
//! # Ok::<(), shardrec_shard::Error>(())
//! ```

pub mod accounting;
pub mod bpf_file;
mod dir;
pub mod host;
pub mod merged_prefix;
mod meta;

mod meta_file;
pub mod output;
pub mod parallel;
pub mod scan;
pub mod shard_index;
mod stop_reason;
pub mod time_index;

pub use dir::{RecordingDir, WindowCursor};
pub use meta::{
    dropped, ClockRef, CpuStats, EventLoss, EventMeta, FilterCount, FilterStats, Host, Meta, Stats,
    Topology, META_VERSION,
};
pub use meta_file::MetaDamage;
pub use stop_reason::StopReason;

/// What can go wrong with a recording directory. Each variant's message
/// leaves its cause to `source()`, which the binary prints after it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be created, read or written.
    #[error("{path}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `meta` is not a meta file this version understands.
    #[error("{path}: not a shardrec meta file")]
    BadMeta {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        source: MetaDamage,
    },
    /// `merged.prefix` does not decode.
    #[error("{path}: not the progress of a shardrec merge ({reason})")]
    BadMergedPrefix {
        /// The file.
        path: std::path::PathBuf,
        /// What did not decode.
        reason: String,
    },
    /// The output path cannot take a recording.
    #[error("cannot write the output {}: {why}", .path.display())]
    Output {
        /// The path, as given.
        path: std::path::PathBuf,
        /// What it is, and why that is refused.
        why: String,
    },
    /// Neither `meta` nor its copy from the start can be read.
    #[error("{meta}, and its copy from the start cannot be read either ({start}): the recording's events and CPUs are unknown")]
    MetaLost {
        /// Why `meta` cannot be read.
        meta: String,
        /// Why `meta.start` cannot be read.
        start: String,
    },
}

/// An error and its causes on one line, each after a colon.
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(error) = cause {
        text.push_str(": ");
        text.push_str(&error.to_string());
        cause = error.source();
    }
    text
}

impl Error {
    /// An I/O error on `path`, as a closure for `map_err`.
    pub fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
        move |source| Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
