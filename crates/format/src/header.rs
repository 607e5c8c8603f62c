//! `struct perf_event_header` and the record types shardrec handles by name.

/// A record's type (`perf_event_header.type`): the kernel's `PERF_RECORD_*`
/// below 64, perf's own records (`PERF_RECORD_HEADER_*` and the like)
/// from 64 on. Unknown types pass through as their number.
#[derive(
    Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct RecordType(pub u32);

/// Declares the named record types once: the constant, and perf's name.
macro_rules! record_types {
    ($($(#[$doc:meta])* $name:ident = $value:literal,)*) => {
        impl RecordType {
            $($(#[$doc])* pub const $name: RecordType = RecordType($value);)*

            /// perf's name of the type (`SAMPLE`, `MMAP2`), if it has one here.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

record_types! {
    /// `PERF_RECORD_MMAP`
    MMAP = 1,
    /// `PERF_RECORD_LOST`: the kernel dropped records because the ring was full.
    LOST = 2,
    /// `PERF_RECORD_COMM`
    COMM = 3,
    /// `PERF_RECORD_EXIT`
    EXIT = 4,
    /// `PERF_RECORD_THROTTLE`
    THROTTLE = 5,
    /// `PERF_RECORD_UNTHROTTLE`
    UNTHROTTLE = 6,
    /// `PERF_RECORD_FORK`
    FORK = 7,
    /// `PERF_RECORD_READ`
    READ = 8,
    /// `PERF_RECORD_SAMPLE`
    SAMPLE = 9,
    /// `PERF_RECORD_MMAP2`
    MMAP2 = 10,
    /// `PERF_RECORD_AUX`
    AUX = 11,
    /// `PERF_RECORD_ITRACE_START`
    ITRACE_START = 12,
    /// `PERF_RECORD_LOST_SAMPLES`: samples dropped before reaching the ring.
    LOST_SAMPLES = 13,
    /// `PERF_RECORD_SWITCH`
    SWITCH = 14,
    /// `PERF_RECORD_SWITCH_CPU_WIDE`
    SWITCH_CPU_WIDE = 15,
    /// `PERF_RECORD_NAMESPACES`
    NAMESPACES = 16,
    /// `PERF_RECORD_KSYMBOL`
    KSYMBOL = 17,
    /// `PERF_RECORD_BPF_EVENT`
    BPF_EVENT = 18,
    /// `PERF_RECORD_CGROUP`
    CGROUP = 19,
    /// `PERF_RECORD_TEXT_POKE`
    TEXT_POKE = 20,
    /// `PERF_RECORD_AUX_OUTPUT_HW_ID`
    AUX_OUTPUT_HW_ID = 21,
    /// `PERF_RECORD_HEADER_ATTR`: an event's attr and ids, in perf's pipe
    /// format (a file holds them in its attrs section).
    ATTR = 64,
    /// `PERF_RECORD_HEADER_TRACING_DATA`: the tracepoint formats follow it,
    /// in perf's pipe format.
    TRACING_DATA = 66,
    /// `PERF_RECORD_FINISHED_ROUND`: readers may sort and flush what came before.
    FINISHED_ROUND = 68,
    /// `PERF_RECORD_ID_INDEX` (written by perf, not the kernel)
    ID_INDEX = 69,
    /// `PERF_RECORD_THREAD_MAP` (written by perf, not the kernel)
    THREAD_MAP = 73,
    /// `PERF_RECORD_CPU_MAP` (written by perf, not the kernel)
    CPU_MAP = 74,
    /// `PERF_RECORD_EVENT_UPDATE`
    EVENT_UPDATE = 78,
    /// `PERF_RECORD_HEADER_FEATURE`: a header feature, in perf's pipe format.
    FEATURE = 80,
    /// `PERF_RECORD_COMPRESSED`
    COMPRESSED = 81,
    /// `PERF_RECORD_FINISHED_INIT`: the synthesized state is complete.
    FINISHED_INIT = 82,
}

impl RecordType {
    /// Whether the kernel writes records of this type (perf's own start at
    /// 64 and carry no `sample_id` trailer).
    pub const fn is_kernels(self) -> bool {
        self.0 < 64
    }

    /// A record that changes what later samples resolve to (a task, a
    /// mapping, a symbol, kernel text), as opposed to an event in time
    /// (a sample, a loss, a throttle, a switch): a window of a recording
    /// needs every one of these from before it.
    pub const fn describes_state(self) -> bool {
        matches!(
            self,
            RecordType::MMAP
                | RecordType::COMM
                | RecordType::EXIT
                | RecordType::FORK
                | RecordType::MMAP2
                | RecordType::NAMESPACES
                | RecordType::KSYMBOL
                | RecordType::BPF_EVENT
                | RecordType::CGROUP
                | RecordType::TEXT_POKE
        )
    }
}

impl std::fmt::Debug for RecordType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "RecordType({})", self.0),
        }
    }
}

impl std::fmt::Display for RecordType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "type {}", self.0),
        }
    }
}

/// `PERF_RECORD_MISC_KERNEL`
pub const MISC_KERNEL: u16 = 1;
/// `PERF_RECORD_MISC_USER`
pub const MISC_USER: u16 = 2;
/// `PERF_RECORD_MISC_MMAP_DATA`: a mapping that is not executable.
pub const MISC_MMAP_DATA: u16 = 1 << 13;
/// `PERF_RECORD_MISC_MMAP_BUILD_ID`: an MMAP2 carries the file's build id
/// (size, reserved bytes, 20 bytes of id) where the device, inode and
/// generation would be (`attr.build_id`, Linux 5.12).
pub const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
/// `PERF_RECORD_MISC_PROC_MAP_PARSE_TIMEOUT`: a synthesized MMAP2 after
/// which the process's other maps were left out (reading them took too
/// long, perf's `--proc-map-timeout`).
pub const MISC_PROC_MAP_PARSE_TIMEOUT: u16 = 1 << 12;
/// `PERF_RECORD_MISC_COMM_EXEC`
pub const MISC_COMM_EXEC: u16 = 1 << 13;

/// The size of a `perf_event_header`.
pub const HEADER_SIZE: usize = 8;

/// The 8-byte header that frames every perf record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// `PERF_RECORD_*`
    pub type_: RecordType,
    /// `PERF_RECORD_MISC_*` bits
    pub misc: u16,
    /// The whole record's size, header included.
    pub size: u16,
}

impl RecordHeader {
    /// Reads a header from the first 8 bytes, if there are 8.
    pub fn parse(bytes: &[u8]) -> Option<RecordHeader> {
        Some(RecordHeader {
            type_: RecordType(crate::u32_at(bytes, 0)?),
            misc: crate::u16_at(bytes, 4)?,
            size: crate::u16_at(bytes, 6)?,
        })
    }

    /// Appends the header's 8 bytes.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.type_.0.to_ne_bytes());
        out.extend_from_slice(&self.misc.to_ne_bytes());
        out.extend_from_slice(&self.size.to_ne_bytes());
    }
}
