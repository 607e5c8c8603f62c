//! Forking the recorder's helper processes.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow};
use nix::unistd::{ForkResult, Pid};

/// Runs `body` in a new child process, which exits with its return value.
/// The parent gets the child's pid and drops `body` (closing whatever it owns
/// on the parent's side).
///
/// Refuses (`EBUSY`) when the calling process has more than one thread: a
/// fork then copies only the calling thread and can leave locks held forever.
pub fn spawn(body: impl FnOnce() -> i32) -> io::Result<Pid> {
    if !wait_single_threaded()? {
        return Err(io::Error::new(
            io::ErrorKind::ResourceBusy,
            "cannot fork a helper process while other threads run",
        ));
    }
    // SAFETY: the process has a single thread (checked above), so the child
    // is a complete copy and may run arbitrary code; it leaves through
    // `_exit` and never returns into the caller's frames.
    match unsafe { nix::unistd::fork() }? {
        ForkResult::Parent { child } => Ok(child),
        ForkResult::Child => {
            let code = body();
            exit_now(code)
        }
    }
}

/// Ends the process by `signal`'s default action, as if it had never been
/// ignored or blocked, so that its parent sees it killed by the signal (a
/// shell reports 128 + its number): how a program whose standard output
/// lost its reader ends (SIGPIPE). Failing that, exits with that code.
pub fn die_of(signal: nix::sys::signal::Signal) -> ! {
    use nix::sys::signal::SigHandler;
    // SAFETY: SIG_DFL installs no handler: nothing of ours runs when the
    // signal comes, only the kernel's default action.
    let _ = unsafe { nix::sys::signal::signal(signal, SigHandler::SigDfl) };
    let mut set = SigSet::empty();
    set.add(signal);
    let _ = sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&set), None);
    let _ = nix::sys::signal::raise(signal);
    exit_now(128 + signal as i32)
}

/// Ends the process at once, without running destructors or atexit
/// handlers that belong to the parent's state.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions and does not return.
    unsafe { libc::_exit(code) }
}

/// Whether this process is down to one thread. A thread that was just
/// joined can stay listed for a moment (the join wakes before the kernel
/// releases the task), so this waits up to 2 s for it to go: after
/// [`crate::cpu::on_each`] on a large host, hundreds of threads are leaving.
fn wait_single_threaded() -> io::Result<bool> {
    for _ in 0..2000 {
        if std::fs::read_dir("/proc/self/task")?.count() == 1 {
            return Ok(true);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Ok(false)
}

/// Closes every descriptor of this process except `keep` (and 0, 1, 2).
/// For a child that must not hold its siblings' pipes and events.
///
/// # Safety
///
/// The descriptors closed may be owned by live values (`OwnedFd`, `File`,
/// a `PerfEvent`) that the caller copied from its parent in the fork. None
/// of them may be used or dropped afterwards: their numbers may by then
/// name other files. A child run by [`spawn`] keeps this promise when it
/// uses only the descriptors in `keep`, since it leaves through
/// [`exit_now`] without dropping its parent's frames.
pub unsafe fn close_fds_except(keep: &[RawFd]) -> io::Result<()> {
    // SAFETY: the caller's promise, passed on.
    if unsafe { close_ranges_except(keep) } {
        return Ok(());
    }
    let fds: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in fds {
        if fd > 2 && !keep.contains(&fd) {
            // SAFETY: the caller vouches that no live value uses `fd` again.
            unsafe { libc::close(fd) };
        }
    }
    Ok(())
}

/// [`close_fds_except`] with `close_range(2)` (Linux 5.9) over the gaps
/// between the kept descriptors: a few calls, where reading `/proc/self/fd`
/// and closing one by one the hundreds of descriptors a writer inherits
/// at 64 CPUs was a fifteenth of the writers' start in a 64-vCPU guest.
/// False where the kernel has no such call.
///
/// # Safety
///
/// As for [`close_fds_except`].
unsafe fn close_ranges_except(keep: &[RawFd]) -> bool {
    let mut kept: Vec<u32> = keep
        .iter()
        .filter_map(|&fd| u32::try_from(fd).ok())
        .collect();
    kept.retain(|&fd| fd > 2);
    kept.sort_unstable();
    kept.dedup();
    let mut from = 3u32;
    for next in kept.into_iter().map(Some).chain([None]) {
        let to = next.map_or(u32::MAX, |fd| fd - 1);
        if from <= to {
            // SAFETY: the caller vouches that no live value uses these
            // descriptors again; close_range touches no memory.
            let closed = unsafe { libc::syscall(libc::SYS_close_range, from, to, 0) };
            if closed != 0 {
                // No such call (ENOSYS): the slow way closes the rest.
                return false;
            }
        }
        from = next.map_or(u32::MAX, |fd| fd + 1);
    }
    true
}

/// Blocks `signals` in this process, returning the previous mask.
pub fn block_signals(signals: &SigSet) -> io::Result<SigSet> {
    let mut old = SigSet::empty();
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(signals), Some(&mut old))?;
    Ok(old)
}

/// Unblocks every signal (for a child about to exec a workload).
pub fn unblock_all_signals() -> io::Result<()> {
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    Ok(())
}

/// Names this thread (`PR_SET_NAME`, what `comm` shows); the kernel keeps
/// the first 15 bytes. Allocates nothing, so a child may call it between
/// fork and exec.
pub fn set_name(name: &std::ffi::CStr) -> io::Result<()> {
    nix::sys::prctl::set_name(name)?;
    Ok(())
}

/// The local time now as perf's `fetch_current_timestamp` writes it for
/// `--timestamp-filename`: `YYYYMMDDhhmmss` and two digits of hundredths.
pub fn local_timestamp() -> io::Result<String> {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME)?;
    let seconds: libc::time_t = now.tv_sec();
    // SAFETY: an all-zero `tm` is a valid value for localtime_r to fill.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live values of the right types for the
    // call; localtime_r is the reentrant form.
    if unsafe { libc::localtime_r(&seconds, &mut tm) }.is_null() {
        return Err(io::Error::last_os_error());
    }
    Ok(format!(
        "{:04}{:02}{:02}{:02}{:02}{:02}{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        now.tv_nsec() / 10_000_000
    ))
}

/// The user-register mask perf asks for in DWARF mode on this architecture
/// (all general registers; on x86-64 without the segment registers).
pub fn user_regs_mask() -> u64 {
    if cfg!(target_arch = "x86_64") {
        // AX..R15 are bits 0..23; DS, ES, FS, GS (12..15) are not sampled.
        0xff_ffff & !0xf000
    } else if cfg!(target_arch = "aarch64") {
        (1 << 33) - 1
    } else {
        0
    }
}

/// Lets this process preempt ordinary work the moment it wakes: real-time
/// FIFO priority 1 where allowed (root, CAP_SYS_NICE), else the highest nice
/// level allowed. For a process that sleeps nearly always and must act
/// within a millisecond of waking: the VIP, and the writers, whose ring
/// would otherwise fill while a busy task on their CPU finishes its slice
/// (perf offers the same as `-r`). Returns what it got.
pub fn prefer_wakeups() -> &'static str {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: sched_setscheduler reads the sched_param through the pointer
    // for the call only; pid 0 is this process.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0 {
        return "SCHED_FIFO 1";
    }
    // SAFETY: setpriority has no memory-safety preconditions.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -20) } == 0 {
        return "nice -20";
    }
    "unchanged"
}

/// Gives this process `steps` nice levels more weight than it inherited
/// (as `nice -n -STEPS` would), where it may (root, CAP_SYS_NICE): at
/// the same policy, a larger share of a CPU it contends for, and no more
/// work. Returns the nice level it then runs at.
pub fn raise_weight(steps: i32) -> std::io::Result<i32> {
    // getpriority may return -1 as a value: only errno tells a failure.
    nix::errno::Errno::clear();
    // SAFETY: getpriority has no memory-safety preconditions.
    let inherited = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    if inherited == -1 && nix::errno::Errno::last_raw() != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let wanted = (inherited - steps).max(-20);
    // SAFETY: setpriority has no memory-safety preconditions.
    match unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, wanted) } {
        0 => Ok(wanted),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// The time slice a helper that sleeps nearly always asks for
/// ([`short_time_slices`]): shorter than Linux's default at any CPU
/// count (0.7 ms times one more than log2 of the CPUs, up to 8: 1.4 ms
/// on 2 vCPUs), and longer than most of a writer's wakeups or a
/// merger's rounds.
pub const SHORT_SLICE: Duration = Duration::from_micros(300);

/// Asks for [`SHORT_SLICE`] time slices, at the same policy and nice
/// level (so the same share of a CPU): from Linux 6.12, a fair task
/// with a shorter slice than the running one's runs as soon as it wakes
/// (`PREEMPT_SHORT`), where at the default slice it waited for the
/// scheduler's tick behind a busy task, 2 to 4 ms a wakeup. Earlier
/// kernels keep their own slices. Returns whether the kernel took it.
pub fn short_time_slices() -> bool {
    let Some(mut attr) = sched_attr().filter(|a| a.sched_policy == libc::SCHED_OTHER as u32) else {
        return false;
    };
    attr.size = std::mem::size_of::<libc::sched_attr>() as u32;
    attr.sched_runtime = SHORT_SLICE.as_nanos() as u64;
    // SAFETY: sched_setattr reads `attr` for the call only; pid 0 is this
    // thread.
    unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr, 0) == 0 }
}

/// This thread's scheduling attributes (`sched_getattr`), if the kernel
/// gives them.
fn sched_attr() -> Option<libc::sched_attr> {
    let size = std::mem::size_of::<libc::sched_attr>() as u32;
    // SAFETY: sched_attr is plain integers; all zeros is a valid value.
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getattr writes at most `size` bytes into `attr`, which
    // has them; pid 0 is this thread.
    let got = unsafe { libc::syscall(libc::SYS_sched_getattr, 0, &mut attr, size, 0) };
    (got == 0).then_some(attr)
}

/// Runs this process at real-time FIFO priority `priority` (perf record's
/// `-r`): it then preempts every ordinary task on its CPU the moment it
/// wakes, the workload included.
pub fn realtime(priority: i32) -> std::io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: sched_setscheduler reads the sched_param through the pointer
    // for the call only; pid 0 is this process.
    match unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Lowers this process to the least CPU priority (nice 19; its I/O
/// priority follows nice where none is set): for work that may wait,
/// such as a merge while recording goes on.
pub fn prefer_background() {
    // SAFETY: setpriority has no memory-safety preconditions.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
}

/// Keeps the memory this process frees mapped, up to `most` bytes, for
/// its next allocations: a process that frees and takes back large
/// buffers all the time otherwise has glibc hand them to the kernel (it
/// trims the heap and unmaps large blocks) and faults their pages in again
/// each time (in a 16-vCPU guest, 5% of the live merger's samples went
/// to faults of fresh heap pages and to `brk`). Without effect where the
/// C library is not glibc.
pub fn keep_freed_memory(most: usize) {
    #[cfg(target_env = "gnu")]
    {
        // glibc takes no block larger than 32 MiB on 64-bit from its heap.
        const MMAP_THRESHOLD_MAX: usize = 32 << 20;
        let int = |bytes: usize| libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets the allocator's tunables; it is called
        // before this process has threads.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, int(most));
            libc::mallopt(libc::M_MMAP_THRESHOLD, int(most.min(MMAP_THRESHOLD_MAX)));
        }
    }
    #[cfg(not(target_env = "gnu"))]
    let _ = most;
}

/// What a finished child and the descendants it waited for used.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// Exit code, or 128 + signal.
    pub code: i32,
    /// User CPU time (µs).
    pub user_us: i64,
    /// System CPU time (µs).
    pub sys_us: i64,
    /// Peak resident set (KiB) of the largest of them.
    pub max_rss_kb: i64,
    /// Bytes they had read from storage (`ru_inblock`, in 512-byte units:
    /// reads and page faults that missed the page cache).
    pub read_bytes: i64,
}

/// Waits for child `pid` and returns what `wait4` reports it used.
pub fn wait_with_usage(pid: i32) -> io::Result<Usage> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `status` and `usage` are valid for writes during the call.
    if unsafe { libc::wait4(pid, &mut status, 0, &mut usage) } != pid {
        return Err(io::Error::last_os_error());
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    let micros = |t: libc::timeval| t.tv_sec * 1_000_000 + t.tv_usec;
    Ok(Usage {
        code,
        user_us: micros(usage.ru_utime),
        sys_us: micros(usage.ru_stime),
        max_rss_kb: usage.ru_maxrss,
        read_bytes: usage.ru_inblock * 512,
    })
}

/// Takes ownership of descriptor `fd` inherited from the parent (perf's
/// `--control fd:N`), after checking that it is open. Nothing else in this
/// process may use or close it afterwards.
pub fn adopt_inherited_fd(fd: RawFd) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    nix::fcntl::fcntl(
        // SAFETY: F_GETFD only asks whether the number is an open descriptor.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) },
        nix::fcntl::FcntlArg::F_GETFD,
    )?;
    // SAFETY: the descriptor is open (checked above), was inherited from the
    // parent for this purpose, and no other owner exists in this process.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This thread's scheduling policy, nice level and slice.
    fn policy_nice_slice() -> (u32, i32, u64) {
        let attr = sched_attr().expect("sched_getattr");
        (attr.sched_policy, attr.sched_nice, attr.sched_runtime)
    }

    #[test]
    fn short_time_slices_keep_the_policy_and_nice_level() {
        std::thread::spawn(|| {
            // SAFETY: setpriority has no memory-safety preconditions.
            assert_eq!(unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 2) }, 0);
            let (_, _, default_slice) = policy_nice_slice();
            assert!(short_time_slices());
            let (policy, nice, slice) = policy_nice_slice();
            assert_eq!((policy, nice), (libc::SCHED_OTHER as u32, 2));
            // Kernels with custom slices (6.12 on) report a slice: this one.
            if default_slice != 0 {
                assert_eq!(slice, SHORT_SLICE.as_nanos() as u64);
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn raise_weight_takes_nice_levels_off_what_the_thread_had() {
        // Linux keeps a nice level per thread: the test's own changes.
        std::thread::spawn(|| {
            // SAFETY: setpriority has no memory-safety preconditions.
            assert_eq!(unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 3) }, 0);
            let raised = raise_weight(5);
            // SAFETY: as above.
            let now = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            match nix::unistd::geteuid().is_root() {
                true => assert_eq!((raised.unwrap(), now), (-2, -2)),
                false => assert_eq!((raised.is_err(), now), (true, 3)),
            }
        })
        .join()
        .unwrap();
    }
}
