//! `struct perf_file_header` and `struct perf_file_section`.

/// "PERFILE2" read as a little-endian u64 (the byte order tells readers the
/// file's endianness).
pub const MAGIC: u64 = 0x3245_4c49_4652_4550;

/// Bytes in the file header.
pub const HEADER_SIZE: u64 = 104;

/// Bits in the feature bitmap (`HEADER_FEAT_BITS`).
pub const FEATURE_BITS: usize = 256;

/// Where a part of the file is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileSection {
    /// Byte offset in the file.
    pub offset: u64,
    /// Length in bytes.
    pub size: u64,
}

impl FileSection {
    /// Appends the section's 16 bytes.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_ne_bytes());
        out.extend_from_slice(&self.size.to_ne_bytes());
    }
}

/// The file header.
#[derive(Clone, Debug, Default)]
pub struct FileHeader {
    /// Bytes of one attrs-section entry: the attr plus its ids section.
    pub attr_size: u64,
    /// The attrs section.
    pub attrs: FileSection,
    /// The data section.
    pub data: FileSection,
    /// Which header features follow the data section.
    pub features: [u64; FEATURE_BITS / 64],
}

impl FileHeader {
    /// The header's 104 bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_SIZE as usize);
        out.extend_from_slice(&MAGIC.to_ne_bytes());
        out.extend_from_slice(&HEADER_SIZE.to_ne_bytes());
        out.extend_from_slice(&self.attr_size.to_ne_bytes());
        self.attrs.write_to(&mut out);
        self.data.write_to(&mut out);
        FileSection::default().write_to(&mut out); // event_types: unused since 2.6.x
        for word in self.features {
            out.extend_from_slice(&word.to_ne_bytes());
        }
        debug_assert_eq!(out.len() as u64, HEADER_SIZE);
        out
    }

    /// Marks feature `bit` as present.
    pub fn set_feature(&mut self, bit: usize) {
        self.features[bit / 64] |= 1 << (bit % 64);
    }
}
