//! The `bpf` file: what the VIP captured of each BPF program, appended as
//! it goes and readable as a prefix (a recording cut short keeps every
//! whole entry).
//!
//! Framing: a u32 length, then that many bytes of one MessagePack-encoded
//! [`BpfEntry`].

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
        bpil: Vec<u8>,
        /// Its BTF object id (0: none).
        btf_id: u32,
    },
    /// A BTF object, for HEADER_BPF_BTF.
    Btf {
        /// BTF object id.
        id: u32,
        /// The raw BTF.
        data: Vec<u8>,
    },
}

/// Appends one entry.
pub fn append(out: &mut impl Write, entry: &BpfEntry) -> std::io::Result<()> {
    let bytes = rmp_serde::to_vec(entry).map_err(std::io::Error::other)?;
    let len = u32::try_from(bytes.len()).map_err(std::io::Error::other)?;
    let mut framed = Vec::with_capacity(4 + bytes.len());
    framed.extend_from_slice(&len.to_le_bytes());
    framed.extend_from_slice(&bytes);
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
