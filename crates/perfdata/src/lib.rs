//! The perf.data file format, as `tools/perf/Documentation/perf.data-file-format.txt`
//! and `tools/perf/util/header.c` define it, for writing.
//!
//! - [`header`]: the file header and its sections;
//! - [`feature`]: header feature numbers and the encoding perf reads them in
//!   (strings padded to 64 bytes, counted lists);
//! - [`features`]: the features whose content is plain facts (host, CPUs,
//!   events, times, clocks);
//! - [`host`]: NUMA nodes, PMUs, caches and memory blocks of the host;
//! - [`build_id`]: the build-id table and reading build ids from ELF files;
//! - [`tracing_data`]: the tracepoint formats perf needs to print fields;
//! - [`PerfDataWriter`]: streams a data section, then writes the features
//!   and the header;
//! - [`pipe`]: perf's pipe format (`perf record -o -`), written in order.
//!
//! ```
//! use shardrec_perfdata::{AttrEntry, PerfDataWriter, feature::{Feature, FeatureBuf}};
//! let attr = vec![0u8; 128];
//! let out = std::io::Cursor::new(Vec::new());
//! let mut writer = PerfDataWriter::create(out, &[AttrEntry { attr, ids: vec![7] }])?;
//! let mut round = Vec::new();
//! let type_ = shardrec_format::header::RecordType::FINISHED_ROUND;
//! shardrec_format::header::RecordHeader { type_, misc: 0, size: 8 }.write_to(&mut round);
//! writer.write_record(&round)?;
//! let mut hostname = FeatureBuf::new();
//! hostname.string("myhost");
//! let file = writer.finish(&[(Feature::Hostname, hostname.into_bytes())])?.into_inner();
//! assert_eq!(&file[..8], b"PERFILE2");
//! # Ok::<(), std::io::Error>(())
//! ```

pub mod bpf_info;
pub mod build_id;
pub mod compressed;
pub mod fact_features;
pub mod feature;
pub mod header;
pub mod host;
pub mod pipe;
pub mod tracing_data;
pub mod tracing_files;
mod writer;

pub use writer::{AttrEntry, PerfDataWriter};
