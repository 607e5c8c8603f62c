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

/// Why a `meta` file's bytes are not a meta.
#[derive(Debug, thiserror::Error)]
pub enum MetaDamage {
    /// The trailer's CRC does not match what precedes it.
    #[error("its checksum does not match: the file is damaged")]
    Checksum,
    /// The bytes are not a meta this version decodes.
    #[error("it does not decode")]
    Decode(#[source] rmp_serde::decode::Error),
    /// A meta of another format version.
    #[error("format version {found}, this shardrec reads {reads}")]
    Version {
        /// The file's.
        found: u32,
        /// This build's.
        reads: u32,
    },
}

/// The meta in `bytes`, or why not.
pub fn decode(bytes: &[u8]) -> Result<Meta, MetaDamage> {
    let body = match bytes.len().checked_sub(8).map(|at| bytes.split_at(at)) {
        Some((body, trailer)) if &trailer[..4] == MAGIC => {
            let stored = u32::from_le_bytes(trailer[4..].try_into().expect("4 bytes"));
            if crc32(body) != stored {
                return Err(MetaDamage::Checksum);
            }
            body
        }
        _ => bytes,
    };
    let meta: Meta = rmp_serde::from_slice(body).map_err(MetaDamage::Decode)?;
    if meta.version != crate::META_VERSION {
        return Err(MetaDamage::Version {
            found: meta.version,
            reads: crate::META_VERSION,
        });
    }
    Ok(meta)
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
            let found = decode(&damaged);
            assert!(matches!(found, Err(MetaDamage::Checksum)), "byte {at}");
        }
        assert!(decode(&bytes[..bytes.len() - 8]).is_ok());
        // What did not decode is kept as the cause.
        let cut = decode(&bytes[..bytes.len() / 2]).err().unwrap();
        assert!(matches!(cut, MetaDamage::Decode(_)));
        assert!(std::error::Error::source(&cut).is_some());
    }
}
