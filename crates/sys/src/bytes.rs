//! Fields of kernel ABI structures read out of bytes: `bpf_prog_info`,
//! BTF, the records and map entries shardrec's own BPF programs write. Native-endian, at
//! byte offsets; perf's records have their own reader in `format`.

/// The u16 at `offset`, if the bytes are there.
pub fn u16_at(bytes: &[u8], offset: usize) -> Option<u16> {
    let raw = bytes.get(offset..offset.checked_add(2)?)?;
    Some(u16::from_ne_bytes(raw.try_into().ok()?))
}

/// The u32 at `offset`, if the bytes are there.
pub fn u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    let raw = bytes.get(offset..offset.checked_add(4)?)?;
    Some(u32::from_ne_bytes(raw.try_into().ok()?))
}

/// The u64 at `offset`, if the bytes are there.
pub fn u64_at(bytes: &[u8], offset: usize) -> Option<u64> {
    let raw = bytes.get(offset..offset.checked_add(8)?)?;
    Some(u64::from_ne_bytes(raw.try_into().ok()?))
}

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
