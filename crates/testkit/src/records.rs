//! Record bytes for tests of what carries records (compression, the
//! merge's output), without a kernel.

use shardrec_format::header::{RecordHeader, RecordType};

/// `count` SAMPLE records of 8 bytes to 4 KiB, each filled with its own
/// number (mod 251) after its header: whole records, of many sizes, that
/// compress well.
pub fn numbered_samples(count: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    for i in 0..count {
        let size = 8 + (i * 37 % 500) * 8;
        let header = RecordHeader {
            type_: RecordType::SAMPLE,
            misc: 0,
            size: size as u16,
        };
        header.write_to(&mut bytes);
        bytes.resize(bytes.len() + size - 8, (i % 251) as u8);
    }
    bytes
}
