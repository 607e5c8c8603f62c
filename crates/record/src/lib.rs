//! `shardrec record`: the coordinator and its helpers.
//!
//! The coordinator resolves the events and targets (the plan), opens every
//! event disabled with one ring per CPU, synthesizes the state that
//! already exists, forks one pinned writer process per CPU, filters its own processes out of tracepoints, writes
//! `meta`, then enables the events (or lets the held workload exec). On a
//! stop signal, or when the workload exits, it disables everything, lets
//! every writer drain its ring, and rewrites `meta` with what each shard
//! holds.
//!
//! ```no_run
//! use shardrec_record::{options, record, RecordConfig};
//! let mut config = RecordConfig::new();
//! config.events = vec![options::parse_events("cpu-clock").expect("a valid event")];
//! config.command = vec!["sleep".into(), "1".into()];
//! let report = record(&config, &["shardrec".into(), "record".into()])?;
//! eprint!("{report}");
//! # Ok::<(), shardrec_record::RecordError>(())
//! ```

mod attrs;
mod config;
mod coordinator;
mod error;
mod events;
mod helper;
mod host;
mod kcore;
pub mod live_merger;
mod meta;
mod negotiate;
mod open;
pub mod options;
mod plan;
mod run_control;
mod sample_filters;
mod shards_place;
mod signals;
mod summary;
mod tracing_files;
mod vip;
pub mod windows;
mod workload;
mod writers;

pub use config::{
    AddressSpace, CallGraph, ControlSpec, Delay, RecordConfig, SampleOptions, Sampling,
    SwitchOutput, SwitchTrigger,
};
pub use coordinator::record;
pub use error::RecordError;
pub use events::{CgroupArg, EventArg};
pub use summary::{CpuReport, RecordReport};
