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

/// Where a perf.data file's data section lies, read from its header
/// (`bytes`, the file or its first bytes): its offset and size.
pub fn data_section(bytes: &[u8]) -> Option<(u64, u64)> {
    let u64_at = |at: usize| shardrec_format::u64_at(bytes, at);
    (u64_at(0)? == MAGIC).then_some(())?;
    Some((u64_at(40)?, u64_at(48)?))
}

/// The content of header feature `bit` of the perf.data `file`, if it has
/// it: the file header, then the feature index after the data section
/// (a section per set bit, in bit order), then that section alone, so a
/// file of any size costs three small reads. A file of another byte order
/// or not a perf.data is an error.
pub fn read_feature(file: &std::fs::File, bit: usize) -> std::io::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::FileExt;
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let mut header = [0u8; HEADER_SIZE as usize];
    file.read_exact_at(&mut header, 0)?;
    let u64_at = |bytes: &[u8], at: usize| shardrec_format::u64_at(bytes, at).unwrap_or(0);
    if u64_at(&header, 0) != MAGIC {
        return Err(invalid("not a perf.data file of this byte order"));
    }
    let set = |b: usize| u64_at(&header, 72 + b / 64 * 8) & (1 << (b % 64)) != 0;
    if bit >= FEATURE_BITS || !set(bit) {
        return Ok(None);
    }
    let (data_offset, data_size) = data_section(&header).expect("a whole header");
    let index = data_offset + data_size;
    let position = (0..bit).filter(|&b| set(b)).count() as u64;
    let mut section = [0u8; 16];
    file.read_exact_at(&mut section, index + position * 16)?;
    let (offset, size) = (u64_at(&section, 0), u64_at(&section, 8));
    if size > 1 << 30 {
        return Err(invalid("a header feature larger than 1 GiB"));
    }
    let mut bytes = vec![0u8; size as usize];
    file.read_exact_at(&mut bytes, offset)?;
    Ok(Some(bytes))
}
