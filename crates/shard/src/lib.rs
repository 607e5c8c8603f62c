//! The recording directory (`perf.data.shards/`) and what is in it.
//!
//! - [`RecordingDir`]: its paths, files created `0600` and never through a
//!   symlink, and `meta` rewritten atomically;
//! - [`Meta`]: what the coordinator knows about a recording (attrs, kernel
//!   ids per CPU, host facts, per-CPU statistics), as MessagePack;
//! - [`scan`]: walking a shard to count its records, losses and time range.
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

pub mod bpf_file;
mod dir;
mod meta;
pub mod parallel;
pub mod scan;
pub mod time_index;

pub use dir::RecordingDir;
pub use meta::{
    dropped, ClockRef, CpuStats, EventMeta, Host, Meta, Stats, StopReason, Topology, META_VERSION,
};

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
    #[error("{path}: not a shardrec meta file ({reason})")]
    BadMeta {
        /// The file.
        path: std::path::PathBuf,
        /// What did not decode.
        reason: String,
    },
}

impl Error {
    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
        move |source| Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
