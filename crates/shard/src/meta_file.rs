//! `meta`'s bytes: MessagePack, then a trailer of four magic bytes and a
//! CRC-32 of what precedes them, so a flipped byte that still decodes is
//! found too. Files without the trailer (written before it existed) are
//! read as they are.

use crate::Meta;

/// Marks the trailer.
const MAGIC: &[u8; 4] = b"SRM1";

/// The file's bytes for `meta`.
pub fn encode(meta: &Meta) -> std::io::Result<Vec<u8>> {
    let mut bytes = rmp_serde::to_vec_named(meta).map_err(std::io::Error::other)?;
    let crc = crc32(&bytes);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&crc.to_le_bytes());
    Ok(bytes)
}

/// The meta in `bytes`, or why not.
pub fn decode(bytes: &[u8]) -> Result<Meta, String> {
    let body = match bytes.len().checked_sub(8).map(|at| bytes.split_at(at)) {
        Some((body, trailer)) if &trailer[..4] == MAGIC => {
            let stored = u32::from_le_bytes(trailer[4..].try_into().expect("4 bytes"));
            if crc32(body) != stored {
                return Err("its checksum does not match: the file is damaged".into());
            }
            body
        }
        _ => bytes,
    };
    rmp_serde::from_slice(body).map_err(|e| e.to_string())
}

/// CRC-32 (IEEE 802.3, reflected), bit by bit: `meta` is a few kilobytes.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xedb8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_of_the_check_string() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn a_flipped_byte_is_found_and_old_files_still_read() {
        // A meta of the fixtures, written before the trailer existed.
        let old = include_bytes!("../../../tests/fixtures/torn/meta");
        let meta = decode(old).expect("a file without the trailer reads");
        let bytes = encode(&meta).unwrap();
        assert!(decode(&bytes).is_ok());
        for at in [0, bytes.len() / 2, bytes.len() - 9] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            assert!(decode(&damaged).is_err(), "byte {at}");
        }
        assert!(decode(&bytes[..bytes.len() - 8]).is_ok());
        assert!(decode(&bytes[..bytes.len() / 2]).is_err());
    }
}
