//! Fields of kernel ABI structures read out of bytes: `bpf_prog_info`,
//! BTF, the records and map entries shardrec's own BPF programs write.
//! Native-endian, at byte offsets, with `format`'s readers; what this
//! adds is the rule for a field an older kernel's structure ends before.

// The same native-endian readers as perf's records are read with.
pub use shardrec_format::{u16_at, u32_at, u64_at};

/// A u32 field of a structure the kernel filled up to its own size: 0
/// where an older kernel's structure ends before it, as the kernel
/// zeroes what it does not know.
pub fn field_u32(bytes: &[u8], offset: usize) -> u32 {
    u32_at(bytes, offset).unwrap_or(0)
}

/// A u64 field, as [`field_u32`].
pub fn field_u64(bytes: &[u8], offset: usize) -> u64 {
    u64_at(bytes, offset).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_past_the_end_read_none_or_zero() {
        let bytes = [1u8, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(u32_at(&bytes, 0), Some(1));
        assert_eq!(u64_at(&bytes, 4), Some(2));
        assert_eq!(u32_at(&bytes, 10), None);
        assert_eq!(u64_at(&bytes, usize::MAX - 2), None);
        assert_eq!((field_u32(&bytes, 12), field_u64(&bytes, 8)), (0, 0));
    }
}
