//! Whether this kernel can run a writer, checked before anything starts.

use io_uring::opcode::{AsyncCancel, PollAdd, Timeout, Writev};
use io_uring::{register::Probe, IoUring};

/// Why this kernel cannot run a writer.
#[derive(Debug, thiserror::Error)]
pub enum IoUringUnavailable {
    /// No io_uring at all.
    #[error("this kernel has no io_uring (it needs Linux 5.4 or later)")]
    Missing(#[source] std::io::Error),
    /// `kernel.io_uring_disabled` forbids it.
    #[error("io_uring is disabled here (kernel.io_uring_disabled = {setting}); set it to 0, or 1 and run as root")]
    Disabled {
        /// The sysctl's value.
        setting: String,
        /// The kernel's refusal.
        source: std::io::Error,
    },
    /// Setting a ring up failed otherwise.
    #[error("cannot set up io_uring")]
    Setup(#[source] std::io::Error),
    /// An operation the writer uses is missing (`IORING_OP_` and this).
    #[error("this kernel's io_uring lacks IORING_OP_{0}")]
    Lacks(&'static str),
}

/// Checks that io_uring is there, allowed, and has every operation the
/// writer uses; the error says which is missing and why.
pub fn check() -> Result<(), IoUringUnavailable> {
    let ring = IoUring::new(2).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOSYS) => IoUringUnavailable::Missing(e),
        Some(libc::EPERM) => IoUringUnavailable::Disabled {
            setting: std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
                .map_or_else(|_| "?".into(), |v| v.trim().to_string()),
            source: e,
        },
        _ => IoUringUnavailable::Setup(e),
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
        Some((_, name)) => Err(IoUringUnavailable::Lacks(name)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_kernel_runs_a_writer_and_a_refusal_keeps_its_errno() {
        check().expect("io_uring with every operation the writer uses");
        let refused = IoUringUnavailable::Setup(std::io::Error::from_raw_os_error(libc::ENOMEM));
        let cause = std::error::Error::source(&refused).map(|e| e.to_string());
        assert_eq!(
            cause.as_deref(),
            Some("Cannot allocate memory (os error 12)")
        );
    }
}
