//! A program's info put together from what the kernel held when the
//! program loaded (shardrec's in-kernel capture), in the layout
//! `BPF_OBJ_GET_INFO_BY_FD` gives it: the same [`ProgInfo`] as the
//! syscall path's, so perf.data cannot tell the two apart.

use std::io;

use super::info::{field, BpilArray, InfoBuf};
use super::{decode, ProgInfo};

/// One function of a loaded program.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadedFunction {
    /// Where its image is (its kernel symbol's address).
    pub address: u64,
    /// Its JITed image.
    pub image: Vec<u8>,
    /// Its tag (the program's, for the main function).
    pub tag: [u8; 8],
}

/// A program as the kernel held it when it loaded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadedProg {
    /// Its id.
    pub id: u32,
    /// `BPF_PROG_TYPE_*`.
    pub prog_type: u32,
    /// Its tag.
    pub tag: [u8; 8],
    /// Its name (at most 15 bytes).
    pub name: String,
    /// Whether its license is GPL-compatible.
    pub gpl_compatible: bool,
    /// When it loaded (ns since boot).
    pub load_time: u64,
    /// Who loaded it.
    pub created_by_uid: u32,
    /// Maps it uses.
    pub nr_map_ids: u32,
    /// Instructions the verifier went through.
    pub verified_insns: u32,
    /// Bytes of its instructions after the verifier.
    pub xlated_len: u32,
    /// Its BTF object, 0 without.
    pub btf_id: u32,
    /// The BTF object and type it attaches to (tracing programs).
    pub attach_btf_obj_id: u32,
    /// See `attach_btf_obj_id`.
    pub attach_btf_id: u32,
    /// Its functions, the main one first.
    pub functions: Vec<LoadedFunction>,
    /// `struct bpf_func_info` records (8 bytes each).
    pub func_info: Vec<u8>,
    /// `struct bpf_line_info` records (16 bytes each).
    pub line_info: Vec<u8>,
    /// The image address of each line info record (8 bytes each).
    pub jited_line_info: Vec<u8>,
    /// Its BTF object's raw BTF, when it came with the program.
    pub btf: Option<Vec<u8>>,
}

/// `struct bpf_func_info`, `struct bpf_line_info` and a JITed line's bytes.
const FUNC_INFO_REC: u32 = 8;
const LINE_INFO_REC: u32 = 16;
const JITED_LINE_REC: u32 = 8;

impl ProgInfo {
    /// The info the kernel would give of `prog` (run-time statistics
    /// zero: a program being loaded has not run).
    pub fn from_loaded(mut prog: LoadedProg) -> io::Result<ProgInfo> {
        let functions = prog.functions.len() as u32;
        let mut info = InfoBuf::zeroed();
        info.set_u32(field::TYPE, prog.prog_type);
        info.set_u32(field::ID, prog.id);
        info.0[field::TAG..field::TAG + 8].copy_from_slice(&prog.tag);
        let name = prog.name.as_bytes();
        let name = &name[..name.len().min(15)];
        info.0[field::NAME..field::NAME + name.len()].copy_from_slice(name);
        info.set_u32(field::FLAGS, u32::from(prog.gpl_compatible));
        let jited: usize = prog.functions.iter().map(|f| f.image.len()).sum();
        info.set_u32(field::JITED_PROG_LEN, jited as u32);
        info.set_u32(field::XLATED_PROG_LEN, prog.xlated_len);
        info.set_u64(field::LOAD_TIME, prog.load_time);
        info.set_u32(field::CREATED_BY_UID, prog.created_by_uid);
        info.set_u32(field::NR_MAP_IDS, prog.nr_map_ids);
        info.set_u32(field::BTF_ID, prog.btf_id);
        info.set_u32(field::VERIFIED_INSNS, prog.verified_insns);
        info.set_u32(field::ATTACH_BTF_OBJ_ID, prog.attach_btf_obj_id);
        info.set_u32(field::ATTACH_BTF_ID, prog.attach_btf_id);
        let records = |bytes: &[u8], size: u32| bytes.len() as u32 / size;
        for (array, count, rec_size) in [
            (BpilArray::JitedKsyms, functions, None),
            (BpilArray::JitedFuncLens, functions, None),
            (BpilArray::ProgTags, functions, None),
            (
                BpilArray::FuncInfo,
                records(&prog.func_info, FUNC_INFO_REC),
                Some(FUNC_INFO_REC),
            ),
            (
                BpilArray::LineInfo,
                records(&prog.line_info, LINE_INFO_REC),
                Some(LINE_INFO_REC),
            ),
            (
                BpilArray::JitedLineInfo,
                records(&prog.jited_line_info, JITED_LINE_REC),
                Some(JITED_LINE_REC),
            ),
        ] {
            info.set_u32(array.count_offset(), count);
            if let Some(size) = rec_size {
                info.set_rec_size(array, size);
            }
        }
        let arrays = arrays(&mut prog);
        decode(info.0.to_vec(), arrays, prog.btf)
    }
}

/// The arrays of [`BpilArray::CAPTURED`], in that order, as the kernel
/// fills them, moved out of `prog` where they are whole. Bytes are
/// appended a slice at a time: where they were collected byte by byte,
/// this function had 37 of the VIP's 452 samples in a 16-vCPU guest
/// loading 50 programs.
fn arrays(prog: &mut LoadedProg) -> Vec<(BpilArray, Vec<u8>)> {
    let functions = &mut prog.functions;
    let mut ksyms = Vec::with_capacity(functions.len() * 8);
    let mut lens = Vec::with_capacity(functions.len() * 4);
    let mut tags = Vec::with_capacity(functions.len() * 8);
    for function in functions.iter() {
        ksyms.extend_from_slice(&function.address.to_ne_bytes());
        lens.extend_from_slice(&(function.image.len() as u32).to_ne_bytes());
        tags.extend_from_slice(&function.tag);
    }
    let mut images = match functions.as_mut_slice() {
        [only] => std::mem::take(&mut only.image),
        all => all
            .iter()
            .map(|f| f.image.as_slice())
            .collect::<Vec<_>>()
            .concat(),
    };
    BpilArray::CAPTURED
        .iter()
        .map(|&array| {
            let bytes = match array {
                BpilArray::JitedInsns => std::mem::take(&mut images),
                BpilArray::JitedKsyms => std::mem::take(&mut ksyms),
                BpilArray::JitedFuncLens => std::mem::take(&mut lens),
                BpilArray::ProgTags => std::mem::take(&mut tags),
                BpilArray::FuncInfo => std::mem::take(&mut prog.func_info),
                BpilArray::LineInfo => std::mem::take(&mut prog.line_info),
                BpilArray::JitedLineInfo => std::mem::take(&mut prog.jited_line_info),
                BpilArray::XlatedInsns | BpilArray::MapIds => Vec::new(),
            };
            (array, bytes)
        })
        .collect()
}
