//! Whether this kernel can run a writer, checked before anything starts.

use io_uring::opcode::{AsyncCancel, PollAdd, Timeout, Writev};
use io_uring::{register::Probe, IoUring};

/// Checks that io_uring is there, allowed, and has every operation the
/// writer uses; the error says which is missing and why.
pub fn check() -> Result<(), String> {
    let ring = IoUring::new(2).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOSYS) => "this kernel has no io_uring (it needs Linux 5.4 or later)".to_string(),
        Some(libc::EPERM) => format!(
            "io_uring is disabled here (kernel.io_uring_disabled = {}); set it to 0, or 1 and run as root",
            std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
                .map_or_else(|_| "?".into(), |v| v.trim().to_string())
        ),
        _ => format!("cannot set up io_uring: {e}"),
    })?;
    let mut probe = Probe::new();
    // Kernels before 5.6 cannot be probed; their io_uring has all four
    // operations from 5.5 on, and the writer finds out soon enough before.
    if ring.submitter().register_probe(&mut probe).is_err() {
        return Ok(());
    }
    let needed = [
        (Writev::CODE, "WRITEV"),
        (PollAdd::CODE, "POLL_ADD"),
        (Timeout::CODE, "TIMEOUT"),
        (AsyncCancel::CODE, "ASYNC_CANCEL"),
    ];
    match needed.iter().find(|(code, _)| !probe.is_supported(*code)) {
        Some((_, name)) => Err(format!("this kernel's io_uring lacks IORING_OP_{name}")),
        None => Ok(()),
    }
}
