//! `waits SLEEP_MS READ_MS [SPIN_MS]`: two waits of known length under
//! two known functions, for the off-CPU tests: the main thread runs
//! SPIN_MS in `hot_caller` (if given), sleeps SLEEP_MS in `sleep_wait`,
//! then reads a pipe in `pipe_wait` until a thread named `waker` writes
//! it, READ_MS later. Each makes its system call itself
//! (`shardrec_sys::inline_syscall`), so the wait's innermost user frame is
//! the function's. `--report` adds how long each wait took, from the call
//! to its return (`sleep_ns=`, `read_ns=`): on a busy host, a woken
//! thread also waits for a CPU, and that is off-CPU time too.

use std::io::Write;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// Runs for `spin`, then the two waits; how long each took.
pub fn run(spin: Duration, sleep: Duration, read: Duration) -> Result<[Duration; 2], String> {
    std::hint::black_box(crate::hot_caller(spin));
    two_waits(sleep, read, sleep_wait, pipe_wait)
}

/// Sleeps `sleep` in `nap`, then waits in `wait` on a pipe that a thread
/// named `waker` writes `read` later; how long each took. (Generic, so
/// each is called directly: a function whose address is taken gets a
/// local symbol name perf 6.12 does not demangle.)
fn two_waits(
    sleep: Duration,
    read: Duration,
    nap: impl Fn(Duration),
    wait: impl Fn(std::os::fd::BorrowedFd<'_>),
) -> Result<[Duration; 2], String> {
    let (reader, writer) = nix::unistd::pipe().map_err(|e| format!("pipe: {e}"))?;
    let due = Instant::now() + sleep + read;
    let waker = std::thread::Builder::new()
        .name("waker".into())
        .spawn(move || {
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            std::fs::File::from(writer).write_all(b"w")
        })
        .map_err(|e| format!("thread: {e}"))?;
    let started = Instant::now();
    nap(sleep);
    let slept = Instant::now();
    wait(reader.as_fd());
    let took = [slept - started, slept.elapsed()];
    waker
        .join()
        .map_err(|_| "the waker panicked".to_string())?
        .map_err(|e| format!("writing the pipe: {e}"))?;
    Ok(took)
}

/// The sleep.
#[inline(never)]
fn sleep_wait(time: Duration) {
    std::hint::black_box(shardrec_sys::inline_syscall::nanosleep(time));
}

/// The pipe read.
#[inline(never)]
fn pipe_wait(pipe: std::os::fd::BorrowedFd<'_>) {
    let mut byte = [0u8; 1];
    std::hint::black_box(shardrec_sys::inline_syscall::read(pipe, &mut byte));
}

/// `glibc-waits SLEEP_MS READ_MS`: the same two waits, each made through
/// glibc (`nanosleep` in `nap_short`, `read` in `wait_pipe`), whose
/// system-call wrappers keep no frame pointer: walked by frame pointers,
/// a wait's user stack skips the function that waited; unwound with
/// DWARF, it has it.
pub fn through_glibc(sleep: Duration, read: Duration) -> Result<[Duration; 2], String> {
    two_waits(sleep, read, nap_short, wait_pipe)
}

/// The sleep, through glibc's `nanosleep`.
#[inline(never)]
fn nap_short(time: Duration) {
    let time = libc::timespec {
        tv_sec: time.as_secs() as libc::time_t,
        tv_nsec: time.subsec_nanos() as libc::c_long,
    };
    // SAFETY: both pointers are to a valid timespec or null, as
    // nanosleep(2) takes them.
    std::hint::black_box(unsafe { libc::nanosleep(&time, std::ptr::null_mut()) });
}

/// The pipe read, through glibc's `read`.
#[inline(never)]
fn wait_pipe(pipe: std::os::fd::BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    let mut byte = [0u8; 1];
    // SAFETY: the buffer is one writable byte, as the length says.
    std::hint::black_box(unsafe { libc::read(pipe.as_raw_fd(), byte.as_mut_ptr().cast(), 1) });
}
