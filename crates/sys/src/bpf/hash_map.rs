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
    /// Creates one of `max_entries` entries.
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
