//! `struct perf_event_header` and the record types shardrec handles by name.

/// `PERF_RECORD_MMAP`
pub const MMAP: u32 = 1;
/// `PERF_RECORD_LOST`: the kernel dropped records because the ring was full.
pub const LOST: u32 = 2;
/// `PERF_RECORD_COMM`
pub const COMM: u32 = 3;
/// `PERF_RECORD_EXIT`
pub const EXIT: u32 = 4;
/// `PERF_RECORD_THROTTLE`
pub const THROTTLE: u32 = 5;
/// `PERF_RECORD_UNTHROTTLE`
pub const UNTHROTTLE: u32 = 6;
/// `PERF_RECORD_FORK`
pub const FORK: u32 = 7;
/// `PERF_RECORD_SAMPLE`
pub const SAMPLE: u32 = 9;
/// `PERF_RECORD_MMAP2`
pub const MMAP2: u32 = 10;
/// `PERF_RECORD_LOST_SAMPLES`
pub const LOST_SAMPLES: u32 = 13;
/// `PERF_RECORD_KSYMBOL`
pub const KSYMBOL: u32 = 17;
/// `PERF_RECORD_BPF_EVENT`
pub const BPF_EVENT: u32 = 18;
/// `PERF_RECORD_ID_INDEX` (written by perf, not the kernel)
pub const ID_INDEX: u32 = 69;
/// `PERF_RECORD_THREAD_MAP` (written by perf, not the kernel)
pub const THREAD_MAP: u32 = 73;
/// `PERF_RECORD_CPU_MAP` (written by perf, not the kernel)
pub const CPU_MAP: u32 = 74;

/// `PERF_RECORD_MISC_KERNEL`
pub const MISC_KERNEL: u16 = 1;
/// `PERF_RECORD_MISC_USER`
pub const MISC_USER: u16 = 2;
/// `PERF_RECORD_MISC_MMAP_DATA`: a mapping that is not executable.
pub const MISC_MMAP_DATA: u16 = 1 << 13;
/// `PERF_RECORD_MISC_COMM_EXEC`
pub const MISC_COMM_EXEC: u16 = 1 << 13;

/// The size of a `perf_event_header`.
pub const HEADER_SIZE: usize = 8;

/// The 8-byte header that frames every perf record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// `PERF_RECORD_*`
    pub type_: u32,
    /// `PERF_RECORD_MISC_*` bits
    pub misc: u16,
    /// The whole record's size, header included.
    pub size: u16,
}

impl RecordHeader {
    /// Reads a header from the first 8 bytes, if there are 8.
    pub fn parse(bytes: &[u8]) -> Option<RecordHeader> {
        Some(RecordHeader {
            type_: crate::u32_at(bytes, 0)?,
            misc: u16::from_ne_bytes(bytes.get(4..6)?.try_into().ok()?),
            size: u16::from_ne_bytes(bytes.get(6..8)?.try_into().ok()?),
        })
    }

    /// Appends the header's 8 bytes.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.type_.to_ne_bytes());
        out.extend_from_slice(&self.misc.to_ne_bytes());
        out.extend_from_slice(&self.size.to_ne_bytes());
    }
}
