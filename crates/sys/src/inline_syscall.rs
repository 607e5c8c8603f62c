//! System calls made from the caller's own code: each function here is
//! inlined, so its `syscall` instruction is in the function that calls
//! it. A stack taken in the kernel at that call (an off-CPU wait's) then
//! starts in the caller, not in libc, whose functions have no frame
//! pointers and hide their caller from a frame-pointer walk. For test
//! workloads whose waits must be found under a known function; x86-64.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// `nanosleep(time)`: sleeps, from the caller.
#[inline(always)]
pub fn nanosleep(time: Duration) -> isize {
    let request = libc::timespec {
        tv_sec: time.as_secs() as libc::time_t,
        tv_nsec: time.subsec_nanos() as libc::c_long,
    };
    let at = &request as *const libc::timespec as usize;
    // SAFETY: nanosleep reads the timespec, alive for the call, and
    // writes nothing (no remainder pointer).
    unsafe { syscall3(libc::SYS_nanosleep, at, 0, 0) }
}

/// `read(fd, buf)`: reads, from the caller.
#[inline(always)]
pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> isize {
    let (at, len) = (buf.as_mut_ptr() as usize, buf.len());
    // SAFETY: read writes at most `len` bytes into `buf`, borrowed
    // mutably for the call.
    unsafe { syscall3(libc::SYS_read, fd.as_raw_fd() as usize, at, len) }
}

/// The `syscall` instruction with three arguments.
///
/// # Safety
/// The arguments must be valid for system call `number` as the kernel
/// reads and writes them.
#[inline(always)]
unsafe fn syscall3(number: libc::c_long, a: usize, b: usize, c: usize) -> isize {
    let result: isize;
    // SAFETY: the x86-64 system call convention: number and result in
    // rax, arguments in rdi, rsi, rdx; the kernel clobbers rcx and r11
    // and touches no stack of ours. The caller vouches for the arguments.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") number as isize => result,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    result
}
