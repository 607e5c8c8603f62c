//! `HEADER_BPF_PROG_INFO` and `HEADER_BPF_BTF`: what perf stores about the
//! BPF programs of a recording, so `perf report` and `perf annotate` can
//! name and disassemble them after they are gone.
//!
//! A program is stored as a `struct perf_bpil` (tools/perf/util/bpf-utils.h),
//! written by `write_bpf_prog_info` in tools/perf/util/header.c:
//!
//! ```text
//! u32 info_len      sizeof(struct bpf_prog_info) of the writer: 232
//! u32 data_len      bytes of data
//! u64 arrays        bit n set: array PERF_BPIL_n is in data
//! u8  info[info_len]  struct bpf_prog_info; each included array's pointer
//!                     replaced by its offset in data (bpil_addr_to_offs)
//! u8  data[data_len]  the included arrays in bit order, each padded to 8
//!                     bytes (get_bpf_prog_info_linear)
//! ```
//!
//! perf 6.1's reader (`process_bpf_prog_info`) refuses a block whose
//! `info_len` is larger than its own `sizeof(struct bpf_prog_info)`, 232
//! bytes, and stops reading the feature there; so blocks are written at
//! exactly that size, whatever size the kernel filled.
//!
//! ```
//! use shardrec_perfdata::bpf_info::{self, bpil_array};
//! let info = vec![0u8; 232]; // as the kernel filled it
//! let ksyms = 0xffff_ffff_c000_0000u64.to_ne_bytes();
//! let block = bpf_info::bpil(&info, &[(bpil_array::JITED_KSYMS, &ksyms[..])]);
//! assert_eq!(block.len(), 16 + 232 + 8);
//! let (feature, content) = bpf_info::bpf_prog_info_feature(&[block]);
//! assert_eq!(feature, shardrec_perfdata::feature::Feature::BpfProgInfo);
//! # let _ = content;
//! ```

use crate::feature::{Feature, FeatureBuf};

/// `sizeof(struct bpf_prog_info)` in perf 6.1 (its tools/include/uapi copy
/// of linux/bpf.h ends at `attach_btf_id` plus 4 bytes of padding): the
/// largest `info_len` its reader takes, and the one written.
pub const INFO_LEN: usize = 232;

/// Offset of the program id in `struct bpf_prog_info`.
const ID_OFFSET: usize = 4;
/// Bytes before the info in a block: info_len, data_len, arrays.
const BLOCK_HEADER: usize = 16;

/// The `PERF_BPIL_*` array numbers (`enum perf_bpil_array_types`).
pub mod bpil_array {
    /// `jited_prog_insns`
    pub const JITED_INSNS: u32 = 0;
    /// `xlated_prog_insns`
    pub const XLATED_INSNS: u32 = 1;
    /// `map_ids`
    pub const MAP_IDS: u32 = 2;
    /// `jited_ksyms`
    pub const JITED_KSYMS: u32 = 3;
    /// `jited_func_lens`
    pub const JITED_FUNC_LENS: u32 = 4;
    /// `func_info`
    pub const FUNC_INFO: u32 = 5;
    /// `line_info`
    pub const LINE_INFO: u32 = 6;
    /// `jited_line_info`
    pub const JITED_LINE_INFO: u32 = 7;
    /// `prog_tags`
    pub const PROG_TAGS: u32 = 8;
    /// `PERF_BPIL_LAST_ARRAY`: numbers are below this.
    pub const LAST: u32 = 9;
}

/// Where each array's pointer and count sit in `struct bpf_prog_info`, and
/// the offset of its record-size field (0: fixed size), by array number;
/// perf's `bpil_array_desc`.
const ARRAY_FIELDS: [(usize, usize, usize); bpil_array::LAST as usize] = [
    (24, 16, 0),     // jited_prog_insns, jited_prog_len
    (32, 20, 0),     // xlated_prog_insns, xlated_prog_len
    (56, 52, 0),     // map_ids, nr_map_ids
    (112, 104, 0),   // jited_ksyms, nr_jited_ksyms
    (120, 108, 0),   // jited_func_lens, nr_jited_func_lens
    (136, 144, 132), // func_info, nr_func_info, func_info_rec_size
    (152, 148, 172), // line_info, nr_line_info, line_info_rec_size
    (160, 168, 176), // jited_line_info, nr_jited_line_info, jited_line_info_rec_size
    (184, 180, 0),   // prog_tags, nr_prog_tags
];

/// The `perf_bpil` block for one program: `info` is `struct bpf_prog_info`
/// as the kernel filled it (any length; cut or zero-filled to
/// [`INFO_LEN`]), `arrays` the arrays the info's counts describe, by
/// `PERF_BPIL_*` number, each exactly count × record size bytes.
///
/// As perf does, an array whose fields lie beyond what the kernel filled is
/// left out; empty arrays stay in (their bit set, their offset where they
/// would start).
///
/// # Panics
///
/// If an array number is not below [`bpil_array::LAST`] or appears twice.
pub fn bpil(info: &[u8], arrays: &[(u32, &[u8])]) -> Vec<u8> {
    let filled = info.len().min(INFO_LEN);
    let mut sorted: Vec<(u32, &[u8])> = arrays.to_vec();
    sorted.sort_by_key(|&(bit, _)| bit);
    for pair in sorted.windows(2) {
        assert_ne!(
            pair[0].0, pair[1].0,
            "PERF_BPIL array {} given twice",
            pair[0].0
        );
    }
    let mut fixed = [0u8; INFO_LEN];
    fixed[..filled].copy_from_slice(&info[..filled]);
    let (mut mask, mut data) = (0u64, Vec::new());
    for (bit, bytes) in sorted {
        assert!(bit < bpil_array::LAST, "{bit} is not a PERF_BPIL array");
        let (pointer, count, size) = ARRAY_FIELDS[bit as usize];
        // get_bpf_prog_info_linear: "kernel is too old to support this field"
        if filled < pointer + 4 || filled < count + 4 || filled < size {
            continue;
        }
        mask |= 1 << bit;
        fixed[pointer..pointer + 8].copy_from_slice(&(data.len() as u64).to_ne_bytes());
        data.extend_from_slice(bytes);
        data.resize(data.len().next_multiple_of(8), 0);
    }
    let mut block = Vec::with_capacity(BLOCK_HEADER + INFO_LEN + data.len());
    block.extend_from_slice(&(INFO_LEN as u32).to_ne_bytes());
    block.extend_from_slice(&(data.len() as u32).to_ne_bytes());
    block.extend_from_slice(&mask.to_ne_bytes());
    block.extend_from_slice(&fixed);
    block.extend_from_slice(&data);
    block
}

/// The program id of a [`bpil`] block.
pub fn bpil_prog_id(block: &[u8]) -> Option<u32> {
    let at = BLOCK_HEADER + ID_OFFSET;
    shardrec_format::u32_at(block, at)
}

/// `HEADER_BPF_PROG_INFO`: u32 count, then the [`bpil`] blocks. Written by
/// program id, as perf's tree of them is, keeping the first block of an id
/// given twice (perf's reader would drop the second).
pub fn bpf_prog_info_feature(bpils: &[Vec<u8>]) -> (Feature, Vec<u8>) {
    let content = counted(&prog_info_entries(bpils), usize::MAX).remove(0);
    (Feature::BpfProgInfo, content)
}

/// [`bpf_prog_info_feature`] cut into pieces of at most `max_len` bytes,
/// for perf's pipe format, where a feature is one record and a record holds
/// at most 64 KiB: perf's reader (`process_bpf_prog_info`) adds the
/// programs of each piece to those it has. A program larger than a piece
/// can hold is a piece of its own, over `max_len`.
pub fn bpf_prog_info_pieces(bpils: &[Vec<u8>], max_len: usize) -> Vec<(Feature, Vec<u8>)> {
    counted(&prog_info_entries(bpils), max_len)
        .into_iter()
        .map(|content| (Feature::BpfProgInfo, content))
        .collect()
}

/// `HEADER_BPF_BTF`: u32 count, then per BTF object u32 id, u32 size and
/// its raw data (unpadded). Written by id, first of an id given twice.
pub fn bpf_btf_feature(btfs: &[(u32, Vec<u8>)]) -> (Feature, Vec<u8>) {
    (
        Feature::BpfBtf,
        counted(&btf_entries(btfs), usize::MAX).remove(0),
    )
}

/// [`bpf_btf_feature`] cut into pieces of at most `max_len` bytes, as
/// [`bpf_prog_info_pieces`] (perf's `process_bpf_btf` adds each piece's
/// objects to those it has).
pub fn bpf_btf_pieces(btfs: &[(u32, Vec<u8>)], max_len: usize) -> Vec<(Feature, Vec<u8>)> {
    counted(&btf_entries(btfs), max_len)
        .into_iter()
        .map(|content| (Feature::BpfBtf, content))
        .collect()
}

/// The blocks by program id, the first of an id given twice.
fn prog_info_entries(bpils: &[Vec<u8>]) -> Vec<&[u8]> {
    let mut sorted: Vec<&Vec<u8>> = bpils.iter().collect();
    sorted.sort_by_key(|block| bpil_prog_id(block));
    sorted.dedup_by_key(|block| bpil_prog_id(block));
    sorted.into_iter().map(Vec::as_slice).collect()
}

/// Each BTF object as id, size and data, by id, the first of an id given
/// twice.
fn btf_entries(btfs: &[(u32, Vec<u8>)]) -> Vec<Vec<u8>> {
    let mut sorted: Vec<&(u32, Vec<u8>)> = btfs.iter().collect();
    sorted.sort_by_key(|(id, _)| *id);
    sorted.dedup_by_key(|(id, _)| *id);
    sorted
        .into_iter()
        .map(|(id, data)| {
            let mut buf = FeatureBuf::new();
            buf.u32(*id).u32(data.len() as u32).bytes(data);
            buf.into_bytes()
        })
        .collect()
}

/// `entries` as u32-counted lists of at most `max_len` bytes each (an
/// entry too large for one alone is a list of its own); at least one list,
/// with count 0 when there is nothing.
fn counted<E: AsRef<[u8]>>(entries: &[E], max_len: usize) -> Vec<Vec<u8>> {
    let mut lists: Vec<(u32, Vec<u8>)> = vec![(0, Vec::new())];
    for entry in entries.iter().map(AsRef::as_ref) {
        let (count, bytes) = lists.last_mut().expect("one list at least");
        if *count > 0 && 4 + bytes.len() + entry.len() > max_len {
            lists.push((1, entry.to_vec()));
            continue;
        }
        *count += 1;
        bytes.extend_from_slice(entry);
    }
    lists
        .into_iter()
        .map(|(count, bytes)| {
            let mut buf = FeatureBuf::new();
            buf.u32(count).bytes(&bytes);
            buf.into_bytes()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u64_at(bytes: &[u8], at: usize) -> u64 {
        shardrec_format::u64_at(bytes, at).unwrap()
    }

    #[test]
    fn arrays_are_laid_out_in_bit_order_and_padded() {
        let mut info = vec![0u8; 240]; // a newer kernel's longer info
        info[ID_OFFSET] = 7;
        info[239] = 0xff;
        let tags = [1u8; 8];
        let lens = 5u32.to_ne_bytes();
        let image = [0x90u8; 3];
        let block = bpil(
            &info,
            &[
                (bpil_array::PROG_TAGS, &tags),
                (bpil_array::JITED_FUNC_LENS, &lens),
                (0, &image),
                (5, &[]),
            ],
        );
        let info_at = |field| BLOCK_HEADER + field;
        assert_eq!(&block[..4], &232u32.to_ne_bytes());
        assert_eq!(&block[4..8], &24u32.to_ne_bytes());
        assert_eq!(u64_at(&block, 8), 1 | 1 << 4 | 1 << 5 | 1 << 8);
        assert_eq!(u64_at(&block, info_at(24)), 0);
        assert_eq!(u64_at(&block, info_at(120)), 8);
        assert_eq!(
            u64_at(&block, info_at(136)),
            16,
            "an empty array sits where it would start"
        );
        assert_eq!(u64_at(&block, info_at(184)), 16);
        let data = &block[BLOCK_HEADER + INFO_LEN..];
        assert_eq!(data, [&image[..], &[0; 5], &lens, &[0; 4], &tags].concat());
        assert_eq!(bpil_prog_id(&block), Some(7));
    }

    #[test]
    fn arrays_past_a_short_info_are_left_out() {
        let block = bpil(
            &[0u8; 128],
            &[
                (bpil_array::JITED_KSYMS, &[0; 8]),
                (bpil_array::FUNC_INFO, &[0; 8]),
            ],
        );
        assert_eq!(u64_at(&block, 8), 1 << 3);
        assert_eq!(block.len(), BLOCK_HEADER + INFO_LEN + 8);
    }

    #[test]
    fn features_are_sorted_and_deduplicated() {
        let block = |id: u8| {
            let mut info = [0u8; INFO_LEN];
            info[ID_OFFSET] = id;
            bpil(&info, &[])
        };
        let (_, content) = bpf_prog_info_feature(&[block(9), block(3), block(9)]);
        assert_eq!(&content[..4], &2u32.to_ne_bytes());
        assert_eq!(bpil_prog_id(&content[4..]), Some(3));
        let (feature, btf) = bpf_btf_feature(&[(5, vec![1, 2, 3]), (2, vec![4])]);
        assert_eq!(feature, Feature::BpfBtf);
        let words: Vec<u32> = [2, 2, 1].to_vec();
        let mut expected: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        expected.push(4);
        expected.extend([5u32, 3].iter().flat_map(|w| w.to_ne_bytes()));
        expected.extend([1, 2, 3]);
        assert_eq!(btf, expected);
    }

    #[test]
    fn pieces_hold_every_entry_once_within_the_bound() {
        let block = |id: u8, extra: usize| {
            let mut info = [0u8; INFO_LEN];
            info[ID_OFFSET] = id;
            let image = vec![0x90u8; extra];
            bpil(&info, &[(bpil_array::JITED_INSNS, &image)])
        };
        // 264 bytes each but the third, 1,032 (over a 600-byte piece).
        let blocks = vec![block(1, 8), block(2, 8), block(3, 784), block(4, 8)];
        let pieces = bpf_prog_info_pieces(&blocks, 600);
        let count = |content: &[u8]| u32::from_ne_bytes(content[..4].try_into().unwrap());
        let counts: Vec<u32> = pieces.iter().map(|(_, c)| count(c)).collect();
        assert_eq!(counts, [2, 1, 1]);
        assert!(pieces[0].1.len() <= 600 && pieces[2].1.len() <= 600);
        assert_eq!(pieces[1].1.len(), 4 + blocks[2].len(), "too large: alone");
        let whole = bpf_prog_info_feature(&blocks).1;
        let rejoined: Vec<u8> = pieces.iter().flat_map(|(_, c)| c[4..].to_vec()).collect();
        assert_eq!(&whole[4..], &rejoined[..]);
        assert_eq!(bpf_prog_info_pieces(&[], 600), [bpf_prog_info_feature(&[])]);
        let btfs = [(1, vec![7; 100]), (2, vec![8; 100])];
        let btf = bpf_btf_pieces(&btfs, 150);
        assert_eq!(btf.len(), 2);
        assert!(btf
            .iter()
            .all(|(f, c)| *f == Feature::BpfBtf && count(c) == 1));
    }
}
