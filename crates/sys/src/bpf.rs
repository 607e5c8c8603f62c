//! BPF programs as perf records them: walking the loaded programs, capturing
//! one program's `bpf_prog_info` with the arrays perf stores, and its BTF —
//! fast, because a program can be unloaded at any moment — plus a small
//! loader for tests and workloads.
//!
//! The capture follows perf's `get_bpf_prog_info_linear`
//! (tools/perf/util/bpf-utils.c): a first `BPF_OBJ_GET_INFO_BY_FD` for the
//! counts, a second with buffers for the arrays of [`BpilArray::CAPTURED`],
//! so the info bytes are the ones perf would write into perf.data.
//!
//! ```no_run
//! use shardrec_sys::bpf;
//! let prog = bpf::load_program(&bpf::test_programs::return_zero())?;
//! let mut id = 0;
//! while let Some(next) = bpf::next_prog_id(id)? {
//!     id = next;
//!     if let Some(info) = bpf::capture_prog(id)? {
//!         println!("{} {}: {:?}", info.id, info.name, info.ksym_names());
//!     }
//! }
//! # drop(prog);
//! # Ok::<(), std::io::Error>(())
//! ```

mod btf;
pub mod captured;
mod hash_map;
mod info;
pub mod insn;
mod load;
mod loaded;
mod mapped_array;
mod syscall;
pub mod test_programs;

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

pub use btf::KernelBtf;
pub use hash_map::{mount_bpffs, pin, pinned, HashMap, BPFFS};
pub use info::BpilArray;
pub use load::{load_program, prog_type, LoadError, ProgramSpec};
pub use loaded::{LoadedFunction, LoadedProg};
pub use mapped_array::MappedArray;

use info::{field, InfoBuf};

use crate::bytes::{field_u32, field_u64};

/// `KSYM_NAME_LEN` (Linux 6.1 and later): kernel symbol names are cut to
/// one byte less.
const KSYM_NAME_LEN: usize = 512;

/// One program's info as captured while it was loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgInfo {
    /// `struct bpf_prog_info` as the kernel filled it (its `info_len`
    /// bytes), from the second pass: the array pointers are the addresses of
    /// this process's buffers at the time, meaningless after.
    pub info: Vec<u8>,
    /// The arrays of [`BpilArray::CAPTURED`], in that (perf's) order, each
    /// exactly count × record size bytes; empty ones included.
    pub arrays: Vec<(BpilArray, Vec<u8>)>,
    /// Program id.
    pub id: u32,
    /// `BPF_PROG_TYPE_*`.
    pub prog_type: u32,
    /// The program's tag (a hash of its instructions).
    pub tag: [u8; 8],
    /// The name given at load (at most 15 bytes).
    pub name: String,
    /// Id of the program's BTF object; 0 for none.
    pub btf_id: u32,
    /// The BTF object `btf_id`, read while the program held it.
    pub btf: Option<Vec<u8>>,
    /// Start address of each sub-program's image.
    pub jited_ksyms: Vec<u64>,
    /// Length of each sub-program's image.
    pub jited_func_lens: Vec<u32>,
    /// Tag of each sub-program.
    pub prog_tags: Vec<[u8; 8]>,
    /// Time spent in the program while run-time statistics were on.
    pub run_time_ns: u64,
    /// Runs counted while run-time statistics were on.
    pub run_cnt: u64,
}

impl ProgInfo {
    /// Each sub-program's kernel symbol name, as `/proc/kallsyms` and
    /// `PERF_RECORD_KSYMBOL` show it (`bpf_prog_ksym_set_name`): read from
    /// the BTF when asked, which the VIP's capture of a program being
    /// loaded never needs.
    pub fn ksym_names(&self) -> io::Result<Vec<String>> {
        ksym_names(self)
    }

    /// The bytes of one captured array (empty if it was not captured).
    pub fn array(&self, which: BpilArray) -> &[u8] {
        self.arrays
            .iter()
            .find(|(array, _)| *array == which)
            .map_or(&[], |(_, bytes)| bytes)
    }

    /// Every captured array with its bit in `perf_bpil`'s `arrays` mask,
    /// as perf.data's HEADER_BPF_PROG_INFO takes them.
    pub fn arrays_by_bit(&self) -> Vec<(u32, &[u8])> {
        let arrays = self.arrays.iter();
        arrays
            .map(|(array, bytes)| (array.bit(), &bytes[..]))
            .collect()
    }
}

/// The id of the first loaded program after `after` (`BPF_PROG_GET_NEXT_ID`);
/// `None` past the last. Start from 0.
pub fn next_prog_id(after: u32) -> io::Result<Option<u32>> {
    syscall::prog_next_id(after).map_err(|err| context(err, "listing BPF programs"))
}

/// The id of a loaded program (one counts-only info call on its fd).
pub fn prog_id(prog: BorrowedFd<'_>) -> io::Result<u32> {
    let mut info = InfoBuf::zeroed();
    syscall::prog_info(prog, &mut info, &mut [])
        .map_err(|err| context(err, "reading a BPF program's id"))?;
    Ok(info.u32_at(field::ID))
}

/// A program held open by a fd from `BPF_PROG_GET_FD_BY_ID`: it cannot
/// unload, nor its BTF go, until this is dropped.
pub struct HeldProg {
    id: u32,
    fd: OwnedFd,
}

/// Takes a fd on program `id`; `Ok(None)` if it is already gone
/// (`ENOENT`). Taking it is one cheap call; [`HeldProg::capture`] then
/// reads at leisure.
pub fn hold_prog(id: u32) -> io::Result<Option<HeldProg>> {
    let fd =
        syscall::prog_fd(id).map_err(|err| context(err, &format!("reading BPF program {id}")))?;
    Ok(fd.map(|fd| HeldProg { id, fd }))
}

impl HeldProg {
    /// The program's info, captured with one `BPF_OBJ_GET_INFO_BY_FD` call
    /// (two for a large program), and its BTF; the fd is closed after.
    pub fn capture(self) -> io::Result<ProgInfo> {
        self.capture_with(&mut CaptureScratch::default())
    }

    /// [`HeldProg::capture`] into buffers kept from one program to the
    /// next.
    pub fn capture_with(self, scratch: &mut CaptureScratch) -> io::Result<ProgInfo> {
        let what = || format!("reading BPF program {}", self.id);
        let (info, arrays) =
            read_info(&self.fd, &mut scratch.arrays).map_err(|err| context(err, &what()))?;
        let btf_id = field_u32(&info, field::BTF_ID);
        // The program holds its BTF, so while `fd` is open the BTF is there.
        let btf = match btf_id {
            0 => None,
            _ => read_btf(btf_id, &mut scratch.btf)?,
        };
        drop(self.fd);
        decode(info, arrays, btf)
    }
}

/// The buffers the kernel fills with a program's arrays and BTF, kept
/// from one capture to the next: zeroed once, then only overwritten, as
/// the kernel says how much of each it wrote. Under the many-CPU guest,
/// zeroing and faulting in some 100 KiB per program was a visible part
/// of the VIP's time.
pub struct CaptureScratch {
    arrays: Buffers,
    btf: Vec<u8>,
}

impl Default for CaptureScratch {
    fn default() -> Self {
        CaptureScratch {
            arrays: BpilArray::CAPTURED
                .iter()
                .map(|&a| (a, Vec::new()))
                .collect(),
            btf: Vec::new(),
        }
    }
}

/// Program `id` held and captured at once; `Ok(None)` if already gone.
pub fn capture_prog(id: u32) -> io::Result<Option<ProgInfo>> {
    hold_prog(id)?.map(HeldProg::capture).transpose()
}

/// Captured arrays, as in [`ProgInfo::arrays`].
type Arrays = Vec<(BpilArray, Vec<u8>)>;

/// Each array's buffer, in u64 words (the alignment the kernel's arrays
/// of u64 need).
type Buffers = Vec<(BpilArray, Vec<u64>)>;

/// Room one call leaves for each array: a program larger than this (in
/// image bytes, or in sub-programs, functions or lines) takes a second call.
fn capacity(array: BpilArray) -> u32 {
    match array {
        BpilArray::JitedInsns => 16 << 10,
        BpilArray::LineInfo | BpilArray::JitedLineInfo => 1024,
        _ => 64,
    }
}

/// The info bytes and the arrays: one call with room for most programs;
/// for a larger one, a second with the counts the first returned (as
/// perf's `get_bpf_prog_info_linear` asks: the kernel's answer is the
/// same). Under the many-CPU guest, each bpf(2) call the VIP saves per
/// program is a measurable share of its time.
fn read_info(fd: &OwnedFd, buffers: &mut Buffers) -> io::Result<(Vec<u8>, Arrays)> {
    let mut request = InfoBuf::guess(&BpilArray::CAPTURED, capacity);
    let (mut info, mut len) = info_pass(fd, &request, buffers)?;
    let fits = |info: &InfoBuf, a: &BpilArray| info.count(*a) <= capacity(*a);
    if !BpilArray::CAPTURED.iter().all(|a| fits(&info, a)) {
        request = InfoBuf::request(&info, &BpilArray::CAPTURED);
        (info, len) = info_pass(fd, &request, buffers)?;
    }
    let arrays = buffers
        .iter()
        .map(|(array, words)| {
            // Counts never change once a program is loaded; were one to
            // grow, the kernel filled only what the request asked for.
            let len = info.array_len(*array).min(request.array_len(*array));
            let mut bytes = Vec::with_capacity(len.next_multiple_of(8));
            for word in &words[..len.div_ceil(8)] {
                bytes.extend_from_slice(&word.to_ne_bytes());
            }
            bytes.truncate(len);
            (*array, bytes)
        })
        .collect();
    Ok((info.0[..len as usize].to_vec(), arrays))
}

/// One `BPF_OBJ_GET_INFO_BY_FD` with `request`'s counts into `buffers`
/// (grown to them where needed): the info as the kernel wrote it back and
/// its length.
fn info_pass(fd: &OwnedFd, request: &InfoBuf, buffers: &mut Buffers) -> io::Result<(InfoBuf, u32)> {
    for (array, words) in buffers.iter_mut() {
        let needed = request.array_len(*array).div_ceil(8);
        if words.len() < needed {
            words.resize(needed, 0);
        }
    }
    let mut info = request.clone();
    let len = syscall::prog_info(fd.as_fd(), &mut info, buffers)?;
    Ok((info, len))
}

/// The raw BTF of BTF object `btf_id` (`BPF_BTF_GET_FD_BY_ID`, then its
/// info). `Ok(None)` if the object is gone.
pub fn btf_data(btf_id: u32) -> io::Result<Option<Vec<u8>>> {
    read_btf(btf_id, &mut Vec::new())
}

/// [`btf_data`], read into `buf` (kept from one call to the next) and
/// copied out at its size.
fn read_btf(btf_id: u32, buf: &mut Vec<u8>) -> io::Result<Option<Vec<u8>>> {
    let what = || format!("reading BTF object {btf_id}");
    let Some(fd) = syscall::btf_fd(btf_id).map_err(|err| context(err, &what()))? else {
        return Ok(None);
    };
    // One call with room for most programs' BTF, a second for a larger
    // one (the kernel copies what fits and says the whole size).
    if buf.len() < 64 << 10 {
        buf.resize(64 << 10, 0);
    }
    let size = syscall::btf_info(fd.as_fd(), buf).map_err(|err| context(err, &what()))?;
    if size as usize > buf.len() {
        buf.resize(size as usize, 0);
        let full = syscall::btf_info(fd.as_fd(), buf).map_err(|err| context(err, &what()))?;
        if full != size {
            // BTF objects are immutable: a change means something else is wrong.
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: size changed from {size} to {full}", what()),
            ));
        }
    }
    Ok(Some(buf[..size as usize].to_vec()))
}

/// Turns on run-time statistics of every program (`BPF_ENABLE_STATS`) until
/// the returned fd is closed, so [`ProgInfo::run_cnt`] and
/// [`ProgInfo::run_time_ns`] count.
pub fn enable_stats() -> io::Result<OwnedFd> {
    syscall::enable_stats().map_err(|err| context(err, "enabling BPF run-time statistics"))
}

fn context(err: io::Error, what: &str) -> io::Error {
    io::Error::new(err.kind(), format!("{what}: {err}"))
}

/// The fields callers want, read out of the captured bytes.
fn decode(info: Vec<u8>, arrays: Arrays, btf: Option<Vec<u8>>) -> io::Result<ProgInfo> {
    let chunks = |which, size| {
        let (_, bytes) = arrays.iter().find(|(array, _)| *array == which)?;
        Some(bytes.chunks_exact(size))
    };
    let jited_ksyms = chunks(BpilArray::JitedKsyms, 8)
        .into_iter()
        .flatten()
        .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let jited_func_lens = chunks(BpilArray::JitedFuncLens, 4)
        .into_iter()
        .flatten()
        .map(|c| u32::from_ne_bytes(c.try_into().expect("4 bytes")))
        .collect();
    let prog_tags = chunks(BpilArray::ProgTags, 8)
        .into_iter()
        .flatten()
        .map(|c| c.try_into().expect("8 bytes"))
        .collect();
    let prog = ProgInfo {
        id: field_u32(&info, field::ID),
        prog_type: field_u32(&info, field::TYPE),
        tag: field_u64(&info, field::TAG).to_ne_bytes(),
        name: info
            .get(field::NAME..field::NAME + 16)
            .map_or_else(String::new, c_string),
        btf_id: field_u32(&info, field::BTF_ID),
        run_time_ns: field_u64(&info, field::RUN_TIME_NS),
        run_cnt: field_u64(&info, field::RUN_CNT),
        jited_ksyms,
        jited_func_lens,
        prog_tags,
        info,
        arrays,
        btf,
    };
    Ok(prog)
}

/// A NUL-padded C string.
fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Each sub-program's symbol as the kernel names it
/// (`bpf_prog_ksym_set_name`): `bpf_prog_<tag>`, then `_<BTF name of its
/// function>` when func_info exists, else `_<name>`, nothing for an empty
/// name. The first symbol is the program itself (the verifier's
/// `jit_subprogs` leaves it to `bpf_prog_load`), so it carries the whole
/// program's tag and name; the others are sub-programs, with their own tags
/// and the name "F" that `jit_subprogs` gives them.
fn ksym_names(prog: &ProgInfo) -> io::Result<Vec<String>> {
    let func_info = prog.array(BpilArray::FuncInfo);
    let names = match (&prog.btf, func_info.is_empty()) {
        (Some(blob), false) => Some(btf::TypeNames::parse(blob)?),
        _ => None,
    };
    let rec_size = (field_u32(&prog.info, field::FUNC_INFO_REC_SIZE) as usize).max(1);
    let mut out = Vec::with_capacity(prog.prog_tags.len());
    for (index, sub_tag) in prog.prog_tags.iter().enumerate() {
        let (tag, own_name) = match index {
            0 => (&prog.tag, prog.name.as_str()),
            _ => (sub_tag, "F"),
        };
        let mut name = String::from("bpf_prog_");
        name.extend(tag.iter().map(|b| format!("{b:02x}")));
        let type_id = func_info
            .chunks_exact(rec_size)
            .nth(index)
            .map(|rec| field_u32(rec, 4));
        let suffix = match (&names, type_id) {
            (Some(names), Some(type_id)) => names.name(type_id).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("BPF program {}: BTF has no type {type_id}", prog.id),
                )
            })?,
            _ => own_name,
        };
        if !suffix.is_empty() {
            name.push('_');
            name.push_str(suffix);
        }
        name.truncate(floor_char_boundary(&name, KSYM_NAME_LEN - 1));
        out.push(name);
    }
    Ok(out)
}

/// The largest index ≤ `max` that starts a character of `text`.
fn floor_char_boundary(text: &str, max: usize) -> usize {
    (0..=max.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}
