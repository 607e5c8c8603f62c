//! A BPF hash map with fixed key and value sizes, and pinning: a map or
//! program named by a path on a bpf file system outlives its loader, and
//! whoever may open the path gets a descriptor of it.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::syscall;

/// A hash map's descriptor and sizes.
pub struct HashMap {
    fd: OwnedFd,
    key_size: usize,
    value_size: usize,
}

impl HashMap {
    /// Creates one of at most `max_entries` entries, allocated as they
    /// are added.
    pub fn create(
        name: &str,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
    ) -> io::Result<HashMap> {
        let name = CString::new(name).map_err(io::Error::other)?;
        Ok(HashMap {
            fd: syscall::hash_map(&name, key_size, value_size, max_entries)?,
            key_size: key_size as usize,
            value_size: value_size as usize,
        })
    }

    /// The map pinned at `path`, whose sizes the caller knows.
    pub fn pinned(path: &Path, key_size: u32, value_size: u32) -> io::Result<HashMap> {
        Ok(HashMap {
            fd: pinned(path)?,
            key_size: key_size as usize,
            value_size: value_size as usize,
        })
    }

    /// Its descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn check(&self, key: &[u8], value: usize) -> io::Result<()> {
        match key.len() == self.key_size && value == self.value_size {
            true => Ok(()),
            false => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a key or value of the wrong size for the map",
            )),
        }
    }

    /// Sets `key` to `value`.
    pub fn update(&self, key: &[u8], value: &[u8]) -> io::Result<()> {
        self.check(key, value.len())?;
        syscall::map_update(self.fd(), key, value)
    }

    /// The value of `key`, if it is there.
    pub fn lookup(&self, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        self.check(key, self.value_size)?;
        let mut value = vec![0; self.value_size];
        Ok(syscall::map_lookup(self.fd(), key, &mut value)?.map(|()| value))
    }

    /// Removes `key` (absent is fine).
    pub fn delete(&self, key: &[u8]) -> io::Result<()> {
        self.check(key, self.value_size)?;
        syscall::map_delete(self.fd(), key)
    }
}

/// `BPF_FS_MAGIC`: `statfs`'s type of a bpf file system.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Where bpf file systems are mounted by convention.
pub const BPFFS: &str = "/sys/fs/bpf";

/// Mounts a bpf file system on [`BPFFS`] where none is; true when it
/// mounted one.
pub fn mount_bpffs() -> io::Result<bool> {
    // f_type's width is the architecture's (i64 here, u32 on some).
    #[allow(clippy::unnecessary_cast)]
    let mounted = nix::sys::statfs::statfs(BPFFS)
        .is_ok_and(|fs| fs.filesystem_type().0 as i64 == BPF_FS_MAGIC);
    if mounted {
        return Ok(false);
    }
    nix::mount::mount(
        Some("bpf"),
        BPFFS,
        Some("bpf"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("mounting a bpf file system on {BPFFS}: {e}"),
        )
    })?;
    Ok(true)
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)
}

/// Pins `object` (a program or a map) at `path`.
pub fn pin(object: BorrowedFd<'_>, path: &Path) -> io::Result<()> {
    syscall::obj_pin(object, &c_path(path)?)
}

/// A descriptor of what is pinned at `path`.
pub fn pinned(path: &Path) -> io::Result<OwnedFd> {
    syscall::obj_get(&c_path(path)?)
}
