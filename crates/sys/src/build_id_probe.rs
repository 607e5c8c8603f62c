//! Whether the kernel's build ids in MMAP2 records (`attr.build_id`, Linux
//! 5.12) are safe to ask for.
//!
//! `perf_event_mmap_output()` shares one record among every event that
//! sees an mmap, and for an event with `attr.build_id` it sets
//! `PERF_RECORD_MISC_MMAP_BUILD_ID` in that shared header without clearing
//! it afterwards. Every event that sees the same mmap after it, in this
//! recording or in anyone else's, then gets an MMAP2 whose misc says "build
//! id" over the device and inode fields: a reader takes the device's low
//! byte for the id's length (perf 6.1 overflows a stack buffer and aborts;
//! seen on Linux 6.18). So the probe watches its own mmap with events
//! without the bit on both sides of one with it.

use std::io;
use std::os::fd::AsRawFd;

use crate::abi;
use crate::{Attr, Flag, PerfEvent, RingBuffer, Target};
use shardrec_format::header::RecordType;

/// What the kernel does with `attr.build_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuildIdMmap {
    /// It refuses it (before 5.12).
    Missing,
    /// It marks other events' MMAP2 records as carrying a build id.
    Leaks,
    /// It gives the build id to the events that ask, and only to them.
    Works,
}

const MISC_MMAP_BUILD_ID: u16 = 1 << 14;

/// Watches an executable mapping of this process's own binary with three
/// dummy events (without, with, without `attr.build_id`) and says what the
/// two without it got.
pub fn probe() -> io::Result<BuildIdMmap> {
    let attr = |build_id| {
        let mut attr = Attr::software(abi::PERF_COUNT_SW_DUMMY as u64);
        attr.set_tracking();
        attr.set_flag(Flag::BuildId, build_id);
        attr.set_flag(Flag::ExcludeKernel, true);
        attr
    };
    let this_thread = Target { pid: 0, cpu: -1 };
    let plain = PerfEvent::open(&attr(false), this_thread)?;
    let with_id = match PerfEvent::open(&attr(true), this_thread) {
        Ok(event) => event,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(BuildIdMmap::Missing),
        Err(e) => return Err(e),
    };
    let after = PerfEvent::open(&attr(false), this_thread)?;
    let rings = [&plain, &with_id, &after]
        .map(|event| RingBuffer::map(event, 1))
        .into_iter()
        .collect::<io::Result<Vec<_>>>()?;
    for event in [&plain, &with_id, &after] {
        event.enable()?;
    }
    map_own_binary()?;
    for event in [&plain, &with_id, &after] {
        event.disable()?;
    }
    let leaked = [&rings[0], &rings[2]].iter().any(|ring| {
        ring.consume(|[first, second]| {
            let bytes = [first, second].concat();
            let mut miscs = mmap2_miscs(&bytes);
            miscs.any(|misc| misc & MISC_MMAP_BUILD_ID != 0)
        })
    });
    Ok(match leaked {
        true => BuildIdMmap::Leaks,
        false => BuildIdMmap::Works,
    })
}

/// Maps the first page of this process's binary executable, and unmaps it.
fn map_own_binary() -> io::Result<()> {
    let file = std::fs::File::open("/proc/self/exe")?;
    let len = crate::ring::page_size();
    // SAFETY: a new private mapping at an address the kernel picks, of a
    // file open for reading; nothing reads it, and it is unmapped at once.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `addr` and `len` are the mapping just made, used by nothing.
    unsafe { libc::munmap(addr, len) };
    Ok(())
}

/// The misc field of each MMAP2 record in `bytes`.
fn mmap2_miscs(bytes: &[u8]) -> impl Iterator<Item = u16> + '_ {
    let records = shardrec_format::walk::RecordWalker::new(bytes);
    let mmap2 = records.filter(|r| r.header.type_ == RecordType::MMAP2);
    mmap2.map(|r| r.header.misc)
}
