//! A single-entry BPF array map created mappable (`BPF_F_MMAPABLE`, 5.5+),
//! so its value is read through memory: a program's counters read by a
//! process that makes no bpf(2) call, even after the one that created the
//! map is gone.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use memmap2::{MmapOptions, MmapRaw};

use super::syscall;

/// The map and, once mapped, its value.
pub struct MappedArray {
    fd: OwnedFd,
    value: MmapRaw,
    size: usize,
}

impl MappedArray {
    /// Creates the map (`value_size` zeroed bytes) and maps it.
    pub fn create(name: &str, value_size: u32) -> io::Result<MappedArray> {
        let cname = CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a map name"))?;
        let fd = syscall::mappable_array(&cname, value_size)
            .map_err(|err| super::context(err, &format!("creating BPF map '{name}'")))?;
        MappedArray::map(fd, value_size)
    }

    /// Maps a map made by [`MappedArray::create`] elsewhere (its fd passed
    /// over), whose value is `value_size` bytes.
    pub fn map(fd: OwnedFd, value_size: u32) -> io::Result<MappedArray> {
        let size = value_size as usize;
        let value = MmapOptions::new()
            .len(size)
            .map_raw_read_only(&fd)
            .map_err(|err| super::context(err, "mapping a BPF array map"))?;
        Ok(MappedArray { fd, value, size })
    }

    /// The map, for a program's map references and for passing on.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The u64 at byte `offset` of the value, as a program last stored it;
    /// 0 past the end or unaligned.
    pub fn u64_at(&self, offset: usize) -> u64 {
        if offset % 8 != 0 || offset + 8 > self.size {
            return 0;
        }
        // SAFETY: the mapping is `size` readable bytes, page-aligned, and
        // `offset` is 8-aligned with 8 bytes left; programs update the u64
        // with atomic adds, so a volatile load reads a whole value.
        unsafe {
            self.value
                .as_ptr()
                .add(offset)
                .cast::<u64>()
                .read_volatile()
        }
    }
}
