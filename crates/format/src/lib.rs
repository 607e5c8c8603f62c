//! The byte formats of perf records, kept apart from any I/O.
//!
//! - [`header`]: `perf_event_header` and the record type numbers;
//! - [`walk`]: walking a buffer of concatenated records (a shard), with every
//!   header validated and a torn tail reported instead of trusted;
//! - [`sample_id`]: where a record's pid, tid, time, id and CPU are, given its
//!   attr's `sample_type`, computed once per attr;
//! - [`layouts`]: finding any record's time and ids in a recording of
//!   several events, by the layout of each kernel id;
//! - [`records`]: encoders for the records shardrec synthesizes;
//! - [`user_records`]: encoders for the records perf itself puts at the
//!   start of a perf.data (id index, thread map, CPU map).
//!
//! ```
//! use shardrec_format::walk::{RecordWalker, End};
//! let bytes = [3u8, 0, 0, 0, 0, 0, 8, 0, /* a torn 4-byte tail */ 1, 2, 3, 4];
//! let mut walker = RecordWalker::new(&bytes);
//! assert_eq!(walker.next().unwrap().header.type_, shardrec_format::header::RecordType::COMM);
//! assert!(walker.next().is_none());
//! assert_eq!(walker.end(), End::Torn { offset: 8, dropped: 4, reason: "header cut short" });
//! ```

pub mod header;
pub mod layouts;
pub mod records;
pub mod sample_id;
pub mod user_records;
pub mod views;
pub mod walk;

pub use header::RecordHeader;
pub use sample_id::{SampleId, SampleIdLayout};

/// Reads a native-endian u64 at `offset`, if the bytes are there.
pub fn u64_at(bytes: &[u8], offset: usize) -> Option<u64> {
    let raw = bytes.get(offset..offset.checked_add(8)?)?;
    Some(u64::from_ne_bytes(raw.try_into().ok()?))
}

/// Reads a native-endian u16 at `offset`, if the bytes are there.
pub fn u16_at(bytes: &[u8], offset: usize) -> Option<u16> {
    let raw = bytes.get(offset..offset.checked_add(2)?)?;
    Some(u16::from_ne_bytes(raw.try_into().ok()?))
}

/// Reads a native-endian u32 at `offset`, if the bytes are there.
pub fn u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    let raw = bytes.get(offset..offset.checked_add(4)?)?;
    Some(u32::from_ne_bytes(raw.try_into().ok()?))
}
