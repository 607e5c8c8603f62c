//! The `bpf` file: what the VIP captured of each BPF program, appended as
//! it goes and readable as a prefix (a recording cut short keeps every
//! whole entry).
//!
//! Framing: a u32 length, then that many bytes of one MessagePack-encoded
//! [`BpfEntry`]. Byte arrays are MessagePack `bin` objects: encoded as
//! serde encodes a `Vec<u8>` by default (an array of integers), a JITed
//! image or a BTF blob cost the VIP a call per byte and up to twice the
//! room. Older files, written that way, still read.

use std::io::Write;

use serde::{Deserialize, Serialize};

/// One captured object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BpfEntry {
    /// A program's info, already in perf's `perf_bpil` layout (array
    /// addresses turned into offsets), ready for HEADER_BPF_PROG_INFO.
    Program {
        /// Program id.
        id: u32,
        /// The `perf_bpil` block.
        #[serde(with = "bytes")]
        bpil: Vec<u8>,
        /// Its BTF object id (0: none).
        btf_id: u32,
    },
    /// A BTF object, for HEADER_BPF_BTF.
    Btf {
        /// BTF object id.
        id: u32,
        /// The raw BTF.
        #[serde(with = "bytes")]
        data: Vec<u8>,
    },
    /// A program as the in-kernel capture wrote it when it loaded: its
    /// ring records, each framed by its length, which the merge puts
    /// together (`shardrec_sys::bpf::captured`), its BTF among them if it
    /// came with it.
    Recorded {
        /// Program id.
        id: u32,
        /// The records.
        #[serde(with = "bytes")]
        records: Vec<u8>,
    },
}

/// A `Vec<u8>` as one MessagePack `bin`, read back from a `bin` or from
/// the array of integers older files hold.
mod bytes {
    use serde::de::{Deserializer, SeqAccess, Visitor};
    use serde::Serializer;

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        deserializer.deserialize_byte_buf(BytesVisitor)
    }

    struct BytesVisitor;

    impl<'de> Visitor<'de> for BytesVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("bytes")
        }

        fn visit_bytes<E>(self, bytes: &[u8]) -> Result<Vec<u8>, E> {
            Ok(bytes.to_vec())
        }

        fn visit_byte_buf<E>(self, bytes: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(bytes)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
            while let Some(byte) = seq.next_element()? {
                bytes.push(byte);
            }
            Ok(bytes)
        }
    }
}

/// Appends one entry.
pub fn append(out: &mut impl Write, entry: &BpfEntry) -> std::io::Result<()> {
    // The length goes first, in room kept for it: one buffer, no copy.
    let mut framed = vec![0; 4];
    rmp_serde::encode::write(&mut framed, entry).map_err(std::io::Error::other)?;
    let len = u32::try_from(framed.len() - 4).map_err(std::io::Error::other)?;
    framed[..4].copy_from_slice(&len.to_le_bytes());
    out.write_all(&framed)
}

/// Every whole entry of a `bpf` file's bytes, and the number of bytes after
/// the last whole one (a cut-short tail, or damage).
pub fn read(bytes: &[u8]) -> (Vec<BpfEntry>, usize) {
    let mut entries = Vec::new();
    let mut rest = bytes;
    while rest.len() >= 4 {
        let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
        let Some(body) = rest.get(4..4 + len) else {
            break;
        };
        let Ok(entry) = rmp_serde::from_slice(body) else {
            break;
        };
        entries.push(entry);
        rest = &rest[4 + len..];
    }
    (entries, rest.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_one_bin_and_arrays_of_integers_still_read() {
        let entry = BpfEntry::Btf {
            id: 3,
            data: vec![0xff; 1000],
        };
        let encoded = rmp_serde::to_vec(&entry).unwrap();
        assert!(encoded.len() < 1020, "{} bytes", encoded.len());
        #[derive(Serialize)]
        enum Old {
            Btf { id: u32, data: Vec<u8> },
        }
        let old = rmp_serde::to_vec(&Old::Btf {
            id: 3,
            data: vec![0xff; 1000],
        })
        .unwrap();
        assert!(old.len() > 1900);
        assert_eq!(rmp_serde::from_slice::<BpfEntry>(&old).unwrap(), entry);
    }

    #[test]
    fn entries_round_trip_and_a_torn_tail_is_left_over() {
        let program = BpfEntry::Program {
            id: 7,
            bpil: vec![1, 2, 3],
            btf_id: 9,
        };
        let btf = BpfEntry::Btf {
            id: 9,
            data: vec![0x9f, 0xeb],
        };
        let mut file = Vec::new();
        append(&mut file, &program).unwrap();
        append(&mut file, &btf).unwrap();
        let whole = file.len();
        append(&mut file, &program).unwrap();
        file.truncate(whole + 5);
        let (entries, left) = read(&file);
        assert_eq!(entries, [program, btf]);
        assert_eq!(left, 5);
    }
}
