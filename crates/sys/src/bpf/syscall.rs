//! Every bpf(2) call, through libbpf's thin wrappers (`bpf.h`): the only
//! `unsafe` of the bpf module. The wrappers return `-errno` on failure.

use std::ffi::CStr;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use libbpf_rs::libbpf_sys as sys;

use super::info::{BpilArray, InfoBuf, INFO_SIZE};

/// A libbpf return value as a result.
fn check(ret: i32) -> io::Result<i32> {
    if ret < 0 {
        Err(io::Error::from_raw_os_error(-ret))
    } else {
        Ok(ret)
    }
}

/// `ENOENT` (no such id, or no next id) as `None`.
fn unless_gone<T>(result: io::Result<T>) -> io::Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(err) if err.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(err) => Err(err),
    }
}

/// A descriptor a wrapper just returned.
fn owned(ret: i32) -> io::Result<OwnedFd> {
    let fd = check(ret)?;
    // SAFETY: libbpf just created this descriptor for us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `BPF_PROG_GET_NEXT_ID`.
pub(super) fn prog_next_id(after: u32) -> io::Result<Option<u32>> {
    let mut next = 0u32;
    // SAFETY: `next` is a live u32 the call writes the id into.
    let ret = unsafe { sys::bpf_prog_get_next_id(after, &mut next) };
    Ok(unless_gone(check(ret))?.map(|_| next))
}

/// `BPF_PROG_GET_FD_BY_ID`.
pub(super) fn prog_fd(id: u32) -> io::Result<Option<OwnedFd>> {
    // SAFETY: takes an integer and returns a new descriptor or -errno.
    unless_gone(owned(unsafe { sys::bpf_prog_get_fd_by_id(id) }))
}

/// `BPF_BTF_GET_FD_BY_ID`.
pub(super) fn btf_fd(id: u32) -> io::Result<Option<OwnedFd>> {
    // SAFETY: takes an integer and returns a new descriptor or -errno.
    unless_gone(owned(unsafe { sys::bpf_btf_get_fd_by_id(id) }))
}

/// `BPF_OBJ_GET_INFO_BY_FD` on a program, with `info` as the request; returns
/// the info length the kernel filled. Every array pointer of the info is set
/// here: to the buffer `arrays` gives for it, after checking the buffer holds
/// what the request's count asks for, or to null with a zero count. So the
/// kernel can only write into memory this function borrows.
pub(super) fn prog_info(
    fd: BorrowedFd<'_>,
    info: &mut InfoBuf,
    arrays: &mut [(BpilArray, Vec<u64>)],
) -> io::Result<u32> {
    for array in BpilArray::ALL {
        let pointer = match arrays.iter_mut().find(|(a, _)| *a == array) {
            Some((_, buf)) if info.array_len(array) <= buf.len() * 8 => buf.as_mut_ptr() as u64,
            Some(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("bpf_prog_info {array:?}: buffer smaller than its count"),
                ))
            }
            None => {
                info.set_u32(array.count_offset(), 0);
                0
            }
        };
        info.set_u64(array.pointer_offset(), pointer);
    }
    let mut len = INFO_SIZE as u32;
    // SAFETY: `info` is INFO_SIZE writable bytes; each array pointer in it is
    // null with a zero count or points at a buffer of at least count × record
    // size bytes (checked above), which is all the kernel writes through it.
    let ret = unsafe {
        sys::bpf_obj_get_info_by_fd(fd.as_raw_fd(), info.0.as_mut_ptr().cast(), &mut len)
    };
    check(ret)?;
    Ok(len)
}

/// `BPF_OBJ_GET_INFO_BY_FD` on a BTF object, its data copied into `buf` (up
/// to its length); returns the full size of the data.
pub(super) fn btf_info(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<u32> {
    let mut info = sys::bpf_btf_info {
        btf: buf.as_mut_ptr() as u64,
        btf_size: buf.len() as u32,
        id: 0,
        name: 0,
        name_len: 0,
        kernel_btf: 0,
    };
    let mut len = size_of::<sys::bpf_btf_info>() as u32;
    // SAFETY: `info` is a live bpf_btf_info of `len` bytes; its data pointer
    // covers `buf` (btf_size = its length) and its name pointer is null with
    // name_len 0, so the kernel writes only into `info` and `buf`.
    let ret =
        unsafe { sys::bpf_obj_get_info_by_fd(fd.as_raw_fd(), (&raw mut info).cast(), &mut len) };
    check(ret)?;
    Ok(info.btf_size)
}

/// `BPF_BTF_LOAD`. On failure libbpf loads again with the log on, into `log`.
pub(super) fn btf_load(data: &[u8], log: &mut [u8]) -> io::Result<OwnedFd> {
    let mut opts = sys::bpf_btf_load_opts {
        sz: size_of::<sys::bpf_btf_load_opts>() as _,
        log_buf: log.as_mut_ptr().cast(),
        log_size: log.len() as u32,
        ..Default::default()
    };
    // SAFETY: `data` is readable for its length; the log pointer covers `log`
    // (log_size = its length); `opts.sz` is the struct's size.
    owned(unsafe { sys::bpf_btf_load(data.as_ptr().cast(), data.len() as _, &mut opts) })
}

/// `BPF_MAP_CREATE`: an array map of one `value_size`-byte entry,
/// `BPF_F_MMAPABLE`.
pub(super) fn mappable_array(name: &CStr, value_size: u32) -> io::Result<OwnedFd> {
    let opts = sys::bpf_map_create_opts {
        sz: size_of::<sys::bpf_map_create_opts>() as _,
        map_flags: sys::BPF_F_MMAPABLE,
        ..Default::default()
    };
    // SAFETY: the name is NUL-terminated and `opts.sz` is its struct's size;
    // returns a new descriptor or -errno.
    owned(unsafe {
        sys::bpf_map_create(
            sys::BPF_MAP_TYPE_ARRAY,
            name.as_ptr(),
            4,
            value_size,
            1,
            &opts,
        )
    })
}

/// What `BPF_PROG_LOAD` takes.
pub(super) struct ProgLoad<'a> {
    pub prog_type: u32,
    pub name: &'a CStr,
    pub license: &'a CStr,
    pub insns: &'a [u64],
    pub btf: Option<BorrowedFd<'a>>,
    /// `struct bpf_func_info` records, 8 bytes each.
    pub func_info: &'a [u8],
    /// `struct bpf_line_info` records, 16 bytes each.
    pub line_info: &'a [u8],
}

/// `BPF_PROG_LOAD`. On failure libbpf loads again with the verifier log on,
/// into `log`.
pub(super) fn prog_load(load: &ProgLoad<'_>, log: &mut [u8]) -> io::Result<OwnedFd> {
    let mut opts = sys::bpf_prog_load_opts {
        sz: size_of::<sys::bpf_prog_load_opts>() as _,
        prog_btf_fd: load.btf.map_or(0, |fd| fd.as_raw_fd() as u32),
        func_info: load.func_info.as_ptr().cast(),
        func_info_cnt: (load.func_info.len() / 8) as u32,
        func_info_rec_size: if load.func_info.is_empty() { 0 } else { 8 },
        line_info: load.line_info.as_ptr().cast(),
        line_info_cnt: (load.line_info.len() / 16) as u32,
        line_info_rec_size: if load.line_info.is_empty() { 0 } else { 16 },
        log_buf: log.as_mut_ptr().cast(),
        log_size: log.len() as u32,
        ..Default::default()
    };
    // SAFETY: the name and license are NUL-terminated; `insns` holds
    // insns.len() 8-byte `struct bpf_insn`s (a u64 has the same size and
    // stricter alignment); func_info and line_info are readable for count ×
    // record size bytes; the log pointer covers `log`; `opts.sz` is its size.
    let ret = unsafe {
        sys::bpf_prog_load(
            load.prog_type,
            load.name.as_ptr(),
            load.license.as_ptr(),
            load.insns.as_ptr().cast(),
            load.insns.len() as _,
            &mut opts,
        )
    };
    owned(ret)
}

/// `BPF_ENABLE_STATS(BPF_STATS_RUN_TIME)`: programs count their runs and run
/// time (`run_cnt`, `run_time_ns`) while the returned descriptor is open.
pub(super) fn enable_stats() -> io::Result<OwnedFd> {
    // SAFETY: takes an enum value and returns a new descriptor or -errno.
    owned(unsafe { sys::bpf_enable_stats(sys::BPF_STATS_RUN_TIME) })
}

/// `BPF_MAP_CREATE`: a hash map of at most `max_entries` entries, each
/// allocated when it is added (`BPF_F_NO_PREALLOC`).
pub(super) fn hash_map(
    name: &CStr,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
) -> io::Result<OwnedFd> {
    let opts = sys::bpf_map_create_opts {
        sz: size_of::<sys::bpf_map_create_opts>() as _,
        map_flags: sys::BPF_F_NO_PREALLOC,
        ..Default::default()
    };
    // SAFETY: the name is NUL-terminated and `opts.sz` is its struct's size;
    // returns a new descriptor or -errno.
    owned(unsafe {
        sys::bpf_map_create(
            sys::BPF_MAP_TYPE_HASH,
            name.as_ptr(),
            key_size,
            value_size,
            max_entries,
            &opts,
        )
    })
}

/// `BPF_MAP_UPDATE_ELEM`: `key` and `value` must be the map's sizes (the
/// caller checks).
pub(super) fn map_update(map: BorrowedFd<'_>, key: &[u8], value: &[u8]) -> io::Result<()> {
    // SAFETY: the map reads key_size and value_size bytes from the two
    // slices, which the caller sized so.
    let ret = unsafe {
        sys::bpf_map_update_elem(
            map.as_raw_fd(),
            key.as_ptr().cast(),
            value.as_ptr().cast(),
            sys::BPF_ANY.into(),
        )
    };
    check(ret).map(drop)
}

/// `BPF_MAP_LOOKUP_ELEM` into `value`; `None` where the key is absent.
pub(super) fn map_lookup(
    map: BorrowedFd<'_>,
    key: &[u8],
    value: &mut [u8],
) -> io::Result<Option<()>> {
    // SAFETY: as map_update; the kernel writes value_size bytes to `value`.
    let ret = unsafe {
        sys::bpf_map_lookup_elem(
            map.as_raw_fd(),
            key.as_ptr().cast(),
            value.as_mut_ptr().cast(),
        )
    };
    unless_gone(check(ret).map(drop))
}

/// `BPF_MAP_DELETE_ELEM`; an absent key is not an error.
pub(super) fn map_delete(map: BorrowedFd<'_>, key: &[u8]) -> io::Result<()> {
    // SAFETY: the kernel reads key_size bytes from `key`.
    let ret = unsafe { sys::bpf_map_delete_elem(map.as_raw_fd(), key.as_ptr().cast()) };
    unless_gone(check(ret)).map(drop)
}

/// `BPF_OBJ_PIN`: the object stays loaded, named by `path` on a bpf file
/// system, after every descriptor is closed.
pub(super) fn obj_pin(object: BorrowedFd<'_>, path: &CStr) -> io::Result<()> {
    // SAFETY: a NUL-terminated path; returns 0 or -errno.
    check(unsafe { sys::bpf_obj_pin(object.as_raw_fd(), path.as_ptr()) }).map(drop)
}

/// `BPF_OBJ_GET`: a descriptor of the object pinned at `path`.
pub(super) fn obj_get(path: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated path; returns a new descriptor or -errno.
    owned(unsafe { sys::bpf_obj_get(path.as_ptr()) })
}
