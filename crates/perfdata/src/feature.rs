//! Header feature numbers, and the encoding their contents use.

/// The header features shardrec writes (`HEADER_*` in perf's header.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Feature {
    /// Tracepoint formats.
    TracingData = 1,
    /// Build ids of the binaries with samples.
    BuildId = 2,
    /// `uname -n`
    Hostname = 3,
    /// `uname -r`
    OsRelease = 4,
    /// The writer's version.
    Version = 5,
    /// `uname -m`
    Arch = 6,
    /// CPUs available and online.
    NrCpus = 7,
    /// CPU model name.
    CpuDesc = 8,
    /// CPU vendor, family, model, stepping.
    CpuId = 9,
    /// Memory in kB.
    TotalMem = 10,
    /// The recording command line.
    Cmdline = 11,
    /// Each event's attr, name and ids.
    EventDesc = 12,
    /// Package, core and die siblings.
    CpuTopology = 13,
    /// NUMA nodes: memory and CPUs.
    NumaTopology = 14,
    /// Event groups: each leader's index and member count.
    GroupDesc = 17,
    /// PMU names by type.
    PmuMappings = 16,
    /// CPU caches.
    Cache = 20,
    /// First and last sample time.
    SampleTime = 21,
    /// Memory blocks of each NUMA node.
    MemTopology = 22,
    /// Resolution of the clock used for timestamps.
    ClockId = 23,
    /// BPF program info.
    BpfProgInfo = 25,
    /// BPF BTF blobs.
    BpfBtf = 26,
    /// How the data section is compressed (`-z`).
    Compressed = 27,
    /// The core PMU's capabilities.
    CpuPmuCaps = 28,
    /// A reference point between the clock and wall time.
    ClockData = 29,
    /// Other PMUs' capabilities.
    PmuCaps = 31,
}

impl Feature {
    /// Whether perf record sends the feature as a `HEADER_FEATURE` record
    /// in its pipe format (`FEAT_OPR` in perf 6.1's `feat_ops`, as opposed
    /// to `FEAT_OPN`): the tracepoint formats go as a record of their own
    /// (`HEADER_TRACING_DATA`), and build ids and caches are written only
    /// into a file.
    pub fn in_pipe(self) -> bool {
        !matches!(
            self,
            Feature::TracingData | Feature::BuildId | Feature::Cache
        )
    }
}

/// `NAME_ALIGN`: strings in features are padded to 64 bytes.
const NAME_ALIGN: usize = 64;

/// A feature's content, built in perf's encoding (native endianness).
#[derive(Clone, Debug, Default)]
pub struct FeatureBuf {
    bytes: Vec<u8>,
}

impl FeatureBuf {
    /// An empty content.
    pub fn new() -> Self {
        FeatureBuf::default()
    }

    /// Appends a u32.
    pub fn u32(&mut self, value: u32) -> &mut Self {
        self.bytes.extend_from_slice(&value.to_ne_bytes());
        self
    }

    /// Appends a u64.
    pub fn u64(&mut self, value: u64) -> &mut Self {
        self.bytes.extend_from_slice(&value.to_ne_bytes());
        self
    }

    /// Appends raw bytes.
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        self.bytes.extend_from_slice(bytes);
        self
    }

    /// Appends a `perf_header_string`: u32 length (with the NUL, rounded up
    /// to 64), then the string padded with NULs (`do_write_string`).
    pub fn string(&mut self, text: &str) -> &mut Self {
        let len = (text.len() + 1).next_multiple_of(NAME_ALIGN);
        self.u32(len as u32);
        self.bytes.extend_from_slice(text.as_bytes());
        self.bytes.resize(self.bytes.len() + len - text.len(), 0);
        self
    }

    /// Appends a `perf_header_string_list`: u32 count, then the strings.
    pub fn string_list<S: AsRef<str>>(&mut self, items: &[S]) -> &mut Self {
        self.u32(items.len() as u32);
        for item in items {
            self.string(item.as_ref());
        }
        self
    }

    /// The encoded content.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_padded_to_64() {
        let mut buf = FeatureBuf::new();
        buf.string("x86_64");
        let bytes = buf.into_bytes();
        assert_eq!(bytes.len(), 4 + 64);
        assert_eq!(u32::from_ne_bytes(bytes[..4].try_into().unwrap()), 64);
        assert_eq!(&bytes[4..11], b"x86_64\0");
        let mut exact = FeatureBuf::new();
        exact.string(&"a".repeat(64));
        assert_eq!(exact.into_bytes().len(), 4 + 128);
    }
}
