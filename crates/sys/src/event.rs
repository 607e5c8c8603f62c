//! An open perf event and the ioctls shardrec issues on it.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use perf_event_open_sys as sys;

use crate::Attr;

/// What an event watches: a task (or every task, `pid = -1`) on a CPU (or
/// every CPU, `cpu = -1`), as `perf_event_open(2)` takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// Task id, or -1 for every task.
    pub pid: i32,
    /// CPU number, or -1 for every CPU.
    pub cpu: i32,
}

impl Target {
    /// Every task on `cpu`.
    pub fn cpu(cpu: u32) -> Target {
        Target {
            pid: -1,
            cpu: cpu as i32,
        }
    }

    /// Task `pid` while it runs on `cpu`.
    pub fn task_on_cpu(pid: i32, cpu: u32) -> Target {
        Target {
            pid,
            cpu: cpu as i32,
        }
    }
}

/// An open perf event. Closing it (drop) ends the event once no ring
/// mapping or io_uring request still holds it.
#[derive(Debug)]
pub struct PerfEvent {
    fd: OwnedFd,
}

impl PerfEvent {
    /// Opens an event, close-on-exec so a workload never inherits it.
    pub fn open(attr: &Attr, target: Target) -> io::Result<PerfEvent> {
        PerfEvent::open_in_group(attr, target, None)
    }

    /// Opens an event as a member of `leader`'s group (scheduled on the
    /// PMU together), or alone when `leader` is None.
    pub fn open_in_group(
        attr: &Attr,
        target: Target,
        leader: Option<&PerfEvent>,
    ) -> io::Result<PerfEvent> {
        PerfEvent::open_raw(attr, target.pid, target.cpu, leader, 0)
    }

    /// Opens an event that counts only the tasks of a cgroup (`cgroup`, an
    /// open cgroup directory) on `cpu`, as perf's `-G`.
    pub fn open_in_cgroup(
        attr: &Attr,
        cgroup: BorrowedFd<'_>,
        cpu: u32,
        leader: Option<&PerfEvent>,
    ) -> io::Result<PerfEvent> {
        let flag = sys::bindings::PERF_FLAG_PID_CGROUP as libc::c_ulong;
        PerfEvent::open_raw(attr, cgroup.as_raw_fd(), cpu as i32, leader, flag)
    }

    fn open_raw(
        attr: &Attr,
        pid: i32,
        cpu: i32,
        leader: Option<&PerfEvent>,
        flags: libc::c_ulong,
    ) -> io::Result<PerfEvent> {
        let mut raw = *attr.raw();
        let group_fd = leader.map_or(-1, |l| l.fd.as_raw_fd());
        let flags = flags | sys::bindings::PERF_FLAG_FD_CLOEXEC as libc::c_ulong;
        // SAFETY: `raw` is a fully initialised perf_event_attr whose `size`
        // (ATTR_SIZE) is within the struct; the kernel reads at most `size`
        // bytes of it and writes back at most `size` on E2BIG. `group_fd` is
        // -1 or a perf event fd that `leader` keeps open for the call, and
        // `pid` is a task id or, with PERF_FLAG_PID_CGROUP, an open cgroup
        // directory the caller borrows for the call.
        let fd = unsafe { sys::perf_event_open(&mut raw, pid, cpu, group_fd, flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the syscall just returned this descriptor and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(PerfEvent { fd })
    }

    /// Starts counting and sampling.
    pub fn enable(&self) -> io::Result<()> {
        // SAFETY: ENABLE takes an integer argument; the fd is a perf event we own.
        check(unsafe { sys::ioctls::ENABLE(self.raw(), 0) })
    }

    /// Stops counting and sampling; records already in the ring stay.
    pub fn disable(&self) -> io::Result<()> {
        // SAFETY: DISABLE takes an integer argument; the fd is a perf event we own.
        check(unsafe { sys::ioctls::DISABLE(self.raw(), 0) })
    }

    /// Pauses (or resumes) writing into this event's ring, which the
    /// kernel then counts as lost instead: a reader of an overwrite ring
    /// copies it out meanwhile (through [`crate::ring::PausedRing`]).
    pub(crate) fn pause_output(&self, paused: bool) -> io::Result<()> {
        // SAFETY: PAUSE_OUTPUT takes an integer argument; the fd is a perf
        // event we own.
        check(unsafe { sys::ioctls::PAUSE_OUTPUT(self.raw(), u32::from(paused)) })
    }

    /// The kernel's id of this event, as found in samples and trailers.
    pub fn id(&self) -> io::Result<u64> {
        let mut id = 0u64;
        // SAFETY: ID writes one u64 through the pointer, which points at `id`.
        check(unsafe { sys::ioctls::ID(self.raw(), &mut id) })?;
        Ok(id)
    }

    /// Sends this event's records into `ring_owner`'s ring (same CPU).
    pub fn set_output(&self, ring_owner: &PerfEvent) -> io::Result<()> {
        // SAFETY: SET_OUTPUT takes another perf fd, which `ring_owner` keeps open.
        check(unsafe { sys::ioctls::SET_OUTPUT(self.raw(), ring_owner.raw()) })
    }

    /// Sets a tracepoint filter (ftrace filter syntax).
    pub fn set_filter(&self, filter: &str) -> io::Result<()> {
        let filter = CString::new(filter).map_err(io::Error::other)?;
        // SAFETY: the kernel copies the NUL-terminated string and does not
        // keep or modify the pointer, which stays valid for the call.
        check(unsafe { sys::ioctls::SET_FILTER(self.raw(), filter.as_ptr() as *mut _) })
    }

    /// Runs BPF program `prog` (a tracepoint or perf-event program) on
    /// every hit of this event.
    pub fn set_bpf(&self, prog: BorrowedFd<'_>) -> io::Result<()> {
        // SAFETY: SET_BPF takes a program fd by value; the kernel takes its
        // own reference, and `prog` is open for the call.
        check(unsafe { sys::ioctls::SET_BPF(self.raw(), prog.as_raw_fd() as u32) })
    }

    /// The event's `read()` values: `value`, then one u64 per
    /// `PERF_FORMAT_*` bit of its attr's `read_format`, in the kernel's order
    /// (`TOTAL_TIME_ENABLED`, `TOTAL_TIME_RUNNING`, `ID`, `LOST`).
    pub fn read_values(&self) -> io::Result<Vec<u64>> {
        let mut buf = [0u8; 40];
        let read = nix::unistd::read(&self.fd, &mut buf)?;
        Ok(buf[..read]
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }

    fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for PerfEvent {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
