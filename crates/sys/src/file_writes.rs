//! Whether a file system takes a buffered write without blocking, which
//! decides how a writer's writes are best made (see `shardrec_writer`).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Whether `file`'s file system takes a buffered write without blocking:
/// one byte written at offset 0 with `pwritev2(RWF_NOWAIT)` (give it a new
/// scratch file). io_uring completes a buffered write in the submitting
/// call only on such a file system (XFS, for one); elsewhere (ext4, and
/// tmpfs before Linux 6.6) it hands every write to a kernel worker thread,
/// as this call refuses with `EOPNOTSUPP` or `EAGAIN` there. A kernel
/// without the flag (before 4.14) refuses with `EINVAL`: the same answer.
pub fn takes_nonblocking_writes(file: &File) -> io::Result<bool> {
    let byte = [0u8; 1];
    let iov = libc::iovec {
        iov_base: byte.as_ptr() as *mut libc::c_void,
        iov_len: byte.len(),
    };
    // SAFETY: the one iovec points at `byte`, which outlives the call; the
    // kernel only reads through it.
    let written = unsafe { libc::pwritev2(file.as_raw_fd(), &iov, 1, 0, libc::RWF_NOWAIT) };
    if written >= 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EOPNOTSUPP | libc::EAGAIN | libc::EINVAL) => Ok(false),
        _ => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ext4_or_tmpfs_scratch_files_answer_without_error() {
        let dir = std::env::temp_dir().join(format!("shardrec-nowait-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("probe");
        let file = File::options()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let answer = takes_nonblocking_writes(&file).unwrap();
        let len = file.metadata().unwrap().len();
        // A yes wrote the byte; a no wrote nothing.
        assert_eq!(len, u64::from(answer));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
