//! `struct bpf_prog_info` as bytes: where its fields are, and perf's list of
//! the arrays it points to (`PERF_BPIL_*` in tools/perf/util/bpf-utils.h).
//!
//! The info is kept as the bytes the kernel wrote rather than as the
//! bindings' struct, because those bytes are what perf.data stores.

use std::mem::{offset_of, size_of};

use libbpf_rs::libbpf_sys::bpf_prog_info as Info;

/// Bytes of `struct bpf_prog_info` in the bindings (232 since Linux 5.17,
/// the same as perf 6.1's). The kernel fills at most this much.
pub(crate) const INFO_SIZE: usize = size_of::<Info>();

/// An array that `struct bpf_prog_info` points to, numbered as perf's
/// `enum perf_bpil_array_types`: the bit of `perf_bpil.arrays` that says the
/// array is in the data that follows the info.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum BpilArray {
    /// `jited_prog_insns`: the JITed image, all sub-programs back to back.
    JitedInsns = 0,
    /// `xlated_prog_insns`: the instructions after the verifier.
    XlatedInsns = 1,
    /// `map_ids`: ids of the maps the program uses.
    MapIds = 2,
    /// `jited_ksyms`: start address of each sub-program (u64 each).
    JitedKsyms = 3,
    /// `jited_func_lens`: length of each sub-program's image (u32 each).
    JitedFuncLens = 4,
    /// `func_info`: `struct bpf_func_info` (insn_off, BTF type id) per function.
    FuncInfo = 5,
    /// `line_info`: `struct bpf_line_info` records.
    LineInfo = 6,
    /// `jited_line_info`: the image address of each line_info record (u64 each).
    JitedLineInfo = 7,
    /// `prog_tags`: each sub-program's tag (8 bytes each).
    ProgTags = 8,
}

/// How big one element of an array is.
#[derive(Clone, Copy)]
enum RecSize {
    /// Always this many bytes.
    Fixed(u32),
    /// As the u32 at this offset of the info says (`*_rec_size`).
    Field(usize),
}

impl BpilArray {
    /// Every `PERF_BPIL_*` array, in bit order.
    pub const ALL: [BpilArray; 9] = [
        BpilArray::JitedInsns,
        BpilArray::XlatedInsns,
        BpilArray::MapIds,
        BpilArray::JitedKsyms,
        BpilArray::JitedFuncLens,
        BpilArray::FuncInfo,
        BpilArray::LineInfo,
        BpilArray::JitedLineInfo,
        BpilArray::ProgTags,
    ];

    /// The arrays perf asks for when it synthesizes a program
    /// (`perf_event__synthesize_one_bpf_prog`, and `perf_env__add_bpf_info`
    /// for programs loaded while recording), in bit order.
    pub const CAPTURED: [BpilArray; 7] = [
        BpilArray::JitedInsns,
        BpilArray::JitedKsyms,
        BpilArray::JitedFuncLens,
        BpilArray::FuncInfo,
        BpilArray::LineInfo,
        BpilArray::JitedLineInfo,
        BpilArray::ProgTags,
    ];

    /// The `PERF_BPIL_*` number: the bit in `perf_bpil.arrays`.
    pub fn bit(self) -> u32 {
        self as u32
    }

    /// Offsets in the info of the array's pointer (a u64) and of its
    /// element count (a u32; for the two instruction arrays, a length in
    /// bytes), kept side by side so the pairs cannot drift apart.
    fn fields(self) -> (usize, usize) {
        match self {
            BpilArray::JitedInsns => (
                offset_of!(Info, jited_prog_insns),
                offset_of!(Info, jited_prog_len),
            ),
            BpilArray::XlatedInsns => (
                offset_of!(Info, xlated_prog_insns),
                offset_of!(Info, xlated_prog_len),
            ),
            BpilArray::MapIds => (offset_of!(Info, map_ids), offset_of!(Info, nr_map_ids)),
            BpilArray::JitedKsyms => (
                offset_of!(Info, jited_ksyms),
                offset_of!(Info, nr_jited_ksyms),
            ),
            BpilArray::JitedFuncLens => (
                offset_of!(Info, jited_func_lens),
                offset_of!(Info, nr_jited_func_lens),
            ),
            BpilArray::FuncInfo => (offset_of!(Info, func_info), offset_of!(Info, nr_func_info)),
            BpilArray::LineInfo => (offset_of!(Info, line_info), offset_of!(Info, nr_line_info)),
            BpilArray::JitedLineInfo => (
                offset_of!(Info, jited_line_info),
                offset_of!(Info, nr_jited_line_info),
            ),
            BpilArray::ProgTags => (offset_of!(Info, prog_tags), offset_of!(Info, nr_prog_tags)),
        }
    }

    /// Offset in the info of the array's pointer (a u64).
    pub(crate) fn pointer_offset(self) -> usize {
        self.fields().0
    }

    /// Offset in the info of the array's element count.
    pub(crate) fn count_offset(self) -> usize {
        self.fields().1
    }

    /// The record size the kernel checks a request's `*_rec_size` against:
    /// `struct bpf_func_info` (8), `struct bpf_line_info` (16), a u64 (8).
    fn abi_rec_size(self) -> u32 {
        match self.rec_size() {
            RecSize::Fixed(size) => size,
            RecSize::Field(_) if self == BpilArray::LineInfo => 16,
            RecSize::Field(_) => 8,
        }
    }

    fn rec_size(self) -> RecSize {
        match self {
            BpilArray::JitedInsns | BpilArray::XlatedInsns => RecSize::Fixed(1),
            BpilArray::MapIds | BpilArray::JitedFuncLens => RecSize::Fixed(4),
            BpilArray::JitedKsyms | BpilArray::ProgTags => RecSize::Fixed(8),
            BpilArray::FuncInfo => RecSize::Field(offset_of!(Info, func_info_rec_size)),
            BpilArray::LineInfo => RecSize::Field(offset_of!(Info, line_info_rec_size)),
            BpilArray::JitedLineInfo => RecSize::Field(offset_of!(Info, jited_line_info_rec_size)),
        }
    }
}

/// A `struct bpf_prog_info`, 8-byte aligned as the kernel's is.
#[derive(Clone)]
#[repr(C, align(8))]
pub(crate) struct InfoBuf(pub(crate) [u8; INFO_SIZE]);

impl InfoBuf {
    /// All zero: the request of a first pass (counts only).
    pub(crate) fn zeroed() -> InfoBuf {
        InfoBuf([0; INFO_SIZE])
    }

    pub(crate) fn u32_at(&self, offset: usize) -> u32 {
        crate::bytes::field_u32(&self.0, offset)
    }

    pub(crate) fn set_u32(&mut self, offset: usize, value: u32) {
        self.0[offset..offset + 4].copy_from_slice(&value.to_ne_bytes());
    }

    pub(crate) fn set_u64(&mut self, offset: usize, value: u64) {
        self.0[offset..offset + 8].copy_from_slice(&value.to_ne_bytes());
    }

    /// Sets the record size of an array that has one (`*_rec_size`).
    pub(crate) fn set_rec_size(&mut self, array: BpilArray, size: u32) {
        if let RecSize::Field(offset) = array.rec_size() {
            self.set_u32(offset, size);
        }
    }

    /// Elements of `array` the info announces.
    pub(crate) fn count(&self, array: BpilArray) -> u32 {
        self.u32_at(array.count_offset())
    }

    /// Bytes of one element of `array`.
    pub(crate) fn rec_size(&self, array: BpilArray) -> u32 {
        match array.rec_size() {
            RecSize::Fixed(size) => size,
            RecSize::Field(offset) => self.u32_at(offset),
        }
    }

    /// Bytes the kernel writes for `array` given this info as the request.
    pub(crate) fn array_len(&self, array: BpilArray) -> usize {
        self.count(array) as usize * self.rec_size(array) as usize
    }

    /// A request that asks for `arrays` at room for `capacity(array)`
    /// elements each, with the record sizes the kernel's ABI fixes: one
    /// call then reads most programs whole.
    pub(crate) fn guess(arrays: &[BpilArray], capacity: impl Fn(BpilArray) -> u32) -> InfoBuf {
        let mut request = InfoBuf::zeroed();
        for &array in arrays {
            request.set_u32(array.count_offset(), capacity(array));
            if let RecSize::Field(offset) = array.rec_size() {
                request.set_u32(offset, array.abi_rec_size());
            }
        }
        request
    }

    /// The request of a second pass: counts and record sizes of `arrays`
    /// taken from a first pass, everything else zero (as perf's
    /// `get_bpf_prog_info_linear` asks, so the kernel's answer is the same).
    pub(crate) fn request(first: &InfoBuf, arrays: &[BpilArray]) -> InfoBuf {
        let mut request = InfoBuf::zeroed();
        for &array in arrays {
            request.set_u32(array.count_offset(), first.count(array));
            if let RecSize::Field(offset) = array.rec_size() {
                request.set_u32(offset, first.u32_at(offset));
            }
        }
        request
    }
}

/// Named fields the capture decodes, and the in-kernel capture fills.
pub(crate) mod field {
    use super::{offset_of, Info};

    pub(crate) const JITED_PROG_LEN: usize = offset_of!(Info, jited_prog_len);
    pub(crate) const XLATED_PROG_LEN: usize = offset_of!(Info, xlated_prog_len);
    pub(crate) const LOAD_TIME: usize = offset_of!(Info, load_time);
    pub(crate) const CREATED_BY_UID: usize = offset_of!(Info, created_by_uid);
    pub(crate) const NR_MAP_IDS: usize = offset_of!(Info, nr_map_ids);
    /// The unit whose first bit is `gpl_compatible`.
    pub(crate) const FLAGS: usize = offset_of!(Info, _bitfield_1);
    pub(crate) const VERIFIED_INSNS: usize = offset_of!(Info, verified_insns);
    pub(crate) const ATTACH_BTF_OBJ_ID: usize = offset_of!(Info, attach_btf_obj_id);
    pub(crate) const ATTACH_BTF_ID: usize = offset_of!(Info, attach_btf_id);

    pub(crate) const TYPE: usize = offset_of!(Info, type_);
    pub(crate) const ID: usize = offset_of!(Info, id);
    pub(crate) const TAG: usize = offset_of!(Info, tag);
    pub(crate) const NAME: usize = offset_of!(Info, name);
    pub(crate) const BTF_ID: usize = offset_of!(Info, btf_id);
    pub(crate) const FUNC_INFO_REC_SIZE: usize = offset_of!(Info, func_info_rec_size);
    pub(crate) const RUN_TIME_NS: usize = offset_of!(Info, run_time_ns);
    pub(crate) const RUN_CNT: usize = offset_of!(Info, run_cnt);
}
