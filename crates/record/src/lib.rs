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
//! The binary calls one entry point, [`record`], which goes on to
//! perf.data: the live merger writes it as the recording goes (or the
//! merge after the stop, where that does not apply), and what there is to
//! say goes to the caller's [`Reporter`].
//!
//! ```no_run
//! use shardrec_record::{record, EventArg, RecordConfig, Reporter};
//! struct Quiet;
//! impl Reporter for Quiet {
//!     fn recorded(&mut self, _: &shardrec_record::RecordReport) {}
//!     fn merged(&mut self, _: &shardrec_merge::MergeReport) {}
//!     fn note(&mut self, _: &str) {}
//!     fn warning(&mut self, message: &str) { eprintln!("warning: {message}") }
//!     fn error(&mut self, message: &str) { eprintln!("{message}") }
//!     fn detail(&mut self, line: &str) { eprintln!("{line}") }
//! }
//! let mut config = RecordConfig::new();
//! config.events = vec![EventArg::parse("cpu-clock").expect("a valid event")];
//! config.command = vec!["sleep".into(), "1".into()];
//! let exit = record(config, &["shardrec".into(), "record".into()], Box::new(Quiet))?;
//! # Ok::<(), shardrec_record::RecordError>(())
//! ```

mod config;
mod coordinator;
mod error;
mod helper_process;

mod kcore;

mod meta;
mod negotiate;
mod off_cpu;
mod open;
mod pinned_filter;
mod pipe_mode;
mod pipeline;
mod plan;
mod reporter;
mod run_control;
mod sample_filters;
mod say;
mod shards_place;
mod signals;
mod summary;
mod switch_output;

mod vip;
mod workload;
mod writers;

pub use config::{
    AddressSpace, CallGraph, ControlSpec, Delay, RecordConfig, SampleOptions, Sampling,
    SwitchOutput, SwitchTrigger, Synthesis,
};
pub use error::RecordError;
pub use open::SideBandUnavailable;
pub use pinned_filter::{setup as setup_filter, SetupFilter};
pub use pipe_mode::{die_of_sigpipe, reader_left};
pub use pipeline::{record, Exit};
pub use reporter::Reporter;
pub use shardrec_events::{CgroupArg, EventArg, DEFAULT_DWARF_STACK};
pub use summary::{ChangedEvent, CpuReport, RecordReport, WindowOutputs};
