//! The mapped ring buffer of a perf event.
//!
//! Layout (see `struct perf_event_mmap_page` in `include/uapi/linux/perf_event.h`):
//! one metadata page, then `2^n` data pages that the kernel fills as a
//! circular buffer. The kernel advances `data_head` after writing whole
//! records; the reader advances `data_tail` after consuming them. The
//! orderings follow the comment above `perf_output_put_handle()` in
//! `kernel/events/ring_buffer.c`: load head with acquire before reading
//! data, store tail with release after the data is no longer needed.
//!
//! A CPU's ring may have two readers, each in its own process: its
//! writer, and the live merger when it reads the rings first. Each moves
//! the tail forward only (`fetch_max`), past bytes it has put somewhere
//! safe; the merger takes a copy and keeps it only if the writer did not
//! move the tail past it meanwhile ([`RingBuffer::peek_unread`]).

use std::io;
use std::mem::offset_of;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use std::os::fd::{AsFd, AsRawFd};

use memmap2::{Advice, MmapOptions, MmapRaw};

use shardrec_format::header::{RecordHeader, HEADER_SIZE};

use crate::abi::perf_event_mmap_page;
use crate::PerfEvent;

/// One event's ring, mapped read-write so the reader can publish
/// `data_tail`; or read-only, which makes it an overwrite ring (see
/// [`RingBuffer::map_overwrite`]).
pub struct RingBuffer {
    map: MmapRaw,
    data_offset: usize,
    data_size: usize,
    /// Mapped read-only: the kernel writes backward over the oldest
    /// records and keeps no tail.
    overwrite: bool,
    /// Which of the data area's pages this mapping has faulted in.
    mapped: MappedPages,
}

/// The data area's pages, each faulted in the first time a read reaches
/// it (`MADV_POPULATE_READ`, one call for the pages a read finds new).
/// Linux before 6.14 maps a ring's pages one fault at a time as they are
/// first read; mapping them all at `mmap` made a 64-vCPU start 8 s slower
/// (4 MiB rings, mapped by the writer and the merger), though a ring that
/// receives little is never read whole. Faulting in a sixty-fourth of the
/// ring ahead of the reads (16 pages of a 4 MiB ring) cost a 16-vCPU
/// guest's merger 256 faults in its first round, where the rings held a
/// page each: a fault there costs about 0.1 ms.
struct MappedPages {
    page: usize,
    /// One bit a page, set once it is faulted in.
    done: Vec<AtomicU64>,
    /// Pages not faulted in yet: none left, a read asks nothing.
    left: AtomicUsize,
}

impl MappedPages {
    fn new(data_size: usize) -> MappedPages {
        let page = page_size();
        let pages = data_size.div_ceil(page);
        MappedPages {
            page,
            done: (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            left: AtomicUsize::new(pages),
        }
    }

    fn is_done(&self, page: usize) -> bool {
        self.done[page / 64].load(Ordering::Relaxed) & (1 << (page % 64)) != 0
    }

    /// The byte range of the pages `[offset, offset + len)` touches that
    /// are not faulted in yet, from the first such page to the last.
    fn missing(&self, offset: usize, len: usize) -> Option<(usize, usize)> {
        if len == 0 || self.left.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let end = (offset + len - 1) / self.page + 1;
        let first = (offset / self.page..end).find(|&p| !self.is_done(p))?;
        let last = (first..end).rev().find(|&p| !self.is_done(p))?;
        Some((first * self.page, (last + 1 - first) * self.page))
    }

    /// Marks the pages of `[offset, offset + len)` faulted in; all of
    /// them where the kernel cannot populate (before 5.14) or need not
    /// (since 6.14 a ring is mapped whole at `mmap`, as a PFN map).
    fn mark(&self, range: Option<(usize, usize)>) {
        let Some((offset, len)) = range else {
            self.left.store(0, Ordering::Relaxed);
            return;
        };
        let pages = offset / self.page..(offset + len).div_ceil(self.page);
        for page in pages.filter(|&p| p / 64 < self.done.len()) {
            let bit = 1 << (page % 64);
            // Only the caller that sets a page's bit counts it.
            if self.done[page / 64].fetch_or(bit, Ordering::Relaxed) & bit == 0 {
                self.left.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

/// How far a [`RingBuffer::copy_unread`] or [`RingBuffer::peek_unread`]
/// copied.
#[must_use = "the copied bytes stay in the ring until released"]
#[derive(Debug, PartialEq, Eq)]
pub struct Copied {
    head: u64,
}

impl Copied {
    /// Of what was copied, only what lies before `to`: the rest was not
    /// put anywhere safe, and stays in the ring.
    pub fn up_to(self, to: u64) -> Copied {
        Copied {
            head: self.head.min(to),
        }
    }

    /// The ring position where the copy ends.
    pub fn end(&self) -> u64 {
        self.head
    }
}

/// An overwrite ring with its output paused ([`RingBuffer::pause`]).
#[must_use = "the ring stays paused until resumed or dropped"]
pub struct PausedRing<'a> {
    ring: &'a RingBuffer,
    owner: &'a PerfEvent,
    resumed: bool,
}

impl PausedRing<'_> {
    /// Appends to `into` the records the ring received since `since`
    /// (the head at the previous snapshot, 0 at first), oldest first, at
    /// most a ring's worth (the newest whole records, where it wrapped),
    /// and returns the head to pass next time. Only a paused ring gives
    /// one: were the kernel writing, a record could change while it is
    /// copied.
    pub fn snapshot(&self, since: u64, into: &mut Vec<u8>) -> u64 {
        let ring = self.ring;
        let head = ring.head();
        let mut records = Vec::new();
        let (mut at, mut taken) = (head, 0u64);
        // Backward: from the head up are the newest records first.
        while at != since {
            let offset = (at as usize) & (ring.data_size - 1);
            // A header never wraps: records are 8-byte aligned.
            let header = RecordHeader::parse(ring.data(offset, HEADER_SIZE));
            let size = header.map_or(0, |h| u64::from(h.size));
            if size < 8 || taken + size > ring.data_size as u64 {
                break;
            }
            records.push((offset, size as usize));
            at = at.wrapping_add(size);
            taken += size;
        }
        into.reserve(taken as usize);
        for &(offset, size) in records.iter().rev() {
            // A record may wrap around the ring's end.
            let first = size.min(ring.data_size - offset);
            into.extend_from_slice(ring.data(offset, first));
            into.extend_from_slice(ring.data(0, size - first));
        }
        head
    }

    /// Lets the kernel write into the ring again.
    pub fn resume(mut self) -> io::Result<()> {
        self.resumed = true;
        self.owner.pause_output(false)
    }
}

impl Drop for PausedRing<'_> {
    /// A snapshot that failed half-way still leaves the ring recording.
    fn drop(&mut self) {
        if !self.resumed {
            let _ = self.owner.pause_output(false);
        }
    }
}

impl RingBuffer {
    /// Maps `data_pages` (a power of two) data pages plus the metadata page.
    ///
    /// Fails with `EPERM` when the mapping would exceed `perf_event_mlock_kb`
    /// and `RLIMIT_MEMLOCK` without `CAP_IPC_LOCK`.
    pub fn map(event: &PerfEvent, data_pages: usize) -> io::Result<RingBuffer> {
        Self::map_as(event, data_pages, false, false)
    }

    /// [`RingBuffer::map`] for the process that reads the ring. Its data
    /// pages are faulted in a chunk at a time as reads first reach them
    /// (on a busy many-CPU guest faults one page at a time were a
    /// measurable share of the readers' time). The metadata page is
    /// written now (the tail, unchanged, or further if the ring's other
    /// reader moved it meanwhile), so the first real release does not
    /// take a write fault: that one flushes the TLB of every CPU the
    /// process ran on.
    pub fn map_reader(event: &PerfEvent, data_pages: usize) -> io::Result<RingBuffer> {
        let ring = Self::map_as(event, data_pages, false, false)?;
        let tail = ring.tail();
        ring.meta_atomic(DATA_TAIL)
            .fetch_max(tail, Ordering::Release);
        Ok(ring)
    }

    /// Maps the ring of an event opened with `write_backward` read-only:
    /// the first mapping of a ring decides, and a read-only one makes the
    /// kernel write over the oldest records instead of waiting for a
    /// reader (perf's `--overwrite`). Nothing is released from such a
    /// ring; [`snapshot`](Self::snapshot) copies its newest records out.
    /// Every later mapping of it (the writer's, `populate`d) must be too.
    pub fn map_overwrite(
        event: &PerfEvent,
        data_pages: usize,
        populate: bool,
    ) -> io::Result<RingBuffer> {
        Self::map_as(event, data_pages, populate, true)
    }

    fn map_as(
        event: &PerfEvent,
        data_pages: usize,
        populate: bool,
        overwrite: bool,
    ) -> io::Result<RingBuffer> {
        if !data_pages.is_power_of_two() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let page = page_size();
        let len = (data_pages + 1) * page;
        let mut options = MmapOptions::new();
        options.len(len);
        if populate {
            options.populate();
        }
        let fd = event.as_fd().as_raw_fd();
        let map = match overwrite {
            true => options.map_raw_read_only(fd)?,
            false => options.map_raw(fd)?,
        };
        let mut ring = RingBuffer {
            map,
            data_offset: page,
            data_size: data_pages * page,
            overwrite,
            mapped: MappedPages::new(data_pages * page),
        };
        // Kernels since 4.1 publish where the data area is; older ones leave 0.
        let (offset, size) = (ring.meta_u64(DATA_OFFSET), ring.meta_u64(DATA_SIZE));
        if offset != 0 && size != 0 {
            ring.data_offset = offset as usize;
            ring.data_size = size as usize;
            ring.mapped = MappedPages::new(ring.data_size);
        }
        if populate {
            ring.mapped.mark(None);
        }
        Ok(ring)
    }

    /// Bytes in the data area.
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// The kernel's write position (a byte count that only grows; in an
    /// overwrite ring, one that only falls, from 0 down).
    pub fn head(&self) -> u64 {
        self.meta_atomic(DATA_HEAD).load(Ordering::Acquire)
    }

    /// The reader's position: everything before it may be overwritten. An
    /// overwrite ring has none: it reads as the head, nothing unread.
    pub fn tail(&self) -> u64 {
        if self.overwrite {
            return self.head();
        }
        // Acquire: the other reader, if any, moved it once it was done
        // with the bytes before it.
        self.meta_atomic(DATA_TAIL).load(Ordering::Acquire)
    }

    /// Bytes the kernel has written into the ring since it was opened.
    pub fn produced(&self) -> u64 {
        match self.overwrite {
            true => self.head().wrapping_neg(),
            false => self.head(),
        }
    }

    /// Pauses the output of overwrite ring `self`, mapped from `owner`,
    /// so its records can be copied out whole: until the returned
    /// [`PausedRing`] is resumed or dropped, the kernel writes nothing
    /// into it and counts what it drops as lost.
    pub fn pause<'a>(&'a self, owner: &'a PerfEvent) -> io::Result<PausedRing<'a>> {
        assert!(
            self.overwrite,
            "a snapshot of a ring that is read as it fills"
        );
        owner.pause_output(true)?;
        Ok(PausedRing {
            ring: self,
            owner,
            resumed: false,
        })
    }

    /// Hands the unread bytes `[tail, head)` to `read`, as at most two
    /// slices (two where they wrap around the end of the data area), then
    /// gives them back to the kernel. The slices live only for the call, so
    /// the kernel never writes over bytes still borrowed.
    pub fn consume<R>(&self, read: impl FnOnce([&[u8]; 2]) -> R) -> R {
        let head = self.head();
        let result = read(self.segments(self.tail(), head));
        // SAFETY: the slices given to `read` cannot outlive it (its result
        // cannot name their lifetime), and `head` was read above.
        unsafe { self.release(head) };
        result
    }

    /// Appends a copy of the unread bytes to `into`, leaving them in the
    /// ring until [`release_copied`](Self::release_copied): a reader that
    /// dies before it has put its copy somewhere safe leaves them for the
    /// next one.
    pub fn copy_unread(&self, into: &mut Vec<u8>) -> Copied {
        let head = self.head();
        let [first, second] = self.segments(self.tail(), head);
        into.extend_from_slice(first);
        into.extend_from_slice(second);
        Copied { head }
    }

    /// Writes the unread bytes into `file` from `offset` (two writes where
    /// they wrap around the ring's end), leaving them in the ring; returns
    /// the head they reach, for the caller to release once nothing else
    /// reads them.
    pub fn write_unread_at(&self, file: &std::fs::File, offset: u64) -> io::Result<u64> {
        use std::os::unix::fs::FileExt;
        let head = self.head();
        let mut offset = offset;
        for segment in self.segments(self.tail(), head) {
            file.write_all_at(segment, offset)?;
            offset += segment.len() as u64;
        }
        Ok(head)
    }

    /// For another process than the ring's reader: a copy, appended to
    /// `into` (one buffer for every ring's copies of a round, kept from
    /// round to round, so that copies take no fresh pages once it has held
    /// a round), of the unread bytes from `from` (at or past the reader's tail) to the head,
    /// if there are some and at most `most`; `None` if not, or if the
    /// reader moved its tail past `from` while they were copied (the kernel may
    /// then have written over them). Nothing in the ring changes, and the
    /// reader is not woken. Releasing the [`Copied`] (once the copy is
    /// safe elsewhere) gives the bytes back to the kernel, whether or not
    /// the reader has read them too.
    pub fn peek_unread(&self, from: u64, most: u64, into: &mut Vec<u8>) -> Option<Copied> {
        // The reader stores its tail with Release once it is done with the
        // bytes before it.
        let tail = self.meta_atomic(DATA_TAIL).load(Ordering::Acquire);
        let head = self.head();
        if from < tail || head <= from || head - from > most {
            return None;
        }
        let len = (head - from) as usize;
        let start = (from as usize) & (self.data_size - 1);
        let first = len.min(self.data_size - start);
        let before = into.len();
        into.reserve(len);
        for (offset, len) in [(start, first), (0, len - first)] {
            self.fault_in(offset, len);
            let at = self.data_offset + offset;
            // SAFETY: the range lies inside the data area of a mapping that
            // lives as long as `self`. The kernel writes only from the head
            // on, into bytes the tail has passed: not into these unless the
            // reader moves the tail past `from` meanwhile, and then the
            // copy is dropped below.
            unsafe {
                let from = self.map.as_ptr().add(at);
                into.extend_from_slice(std::slice::from_raw_parts(from, len));
            }
        }
        // The copy's loads come before the tail is read again.
        std::sync::atomic::fence(Ordering::Acquire);
        let kept = self.meta_atomic(DATA_TAIL).load(Ordering::Relaxed) <= from;
        if !kept {
            into.truncate(before);
        }
        kept.then_some(Copied { head })
    }

    /// Gives back to the kernel the bytes a [`copy_unread`](Self::copy_unread)
    /// or a [`peek_unread`](Self::peek_unread) copied (the tail does not
    /// move back if the other reader moved it further).
    pub fn release_copied(&mut self, copied: Copied) {
        // SAFETY: `&mut self` means no slice of this mapping is borrowed,
        // and the bytes up to `copied.head` were copied out.
        unsafe { self.release(copied.head) }
    }

    /// The bytes in `[from, to)` as at most two slices (two when they wrap
    /// around the end of the data area). Panics unless `from..to` ends by
    /// the head and holds at most a ring. The kernel does not write them
    /// while the tail is at or before `from`, and so until
    /// [`release`](Self::release) moves it past them; where the ring's
    /// other reader moves it past them first, it has them elsewhere, and
    /// whatever is read here of them is not used.
    pub fn segments(&self, from: u64, to: u64) -> [&[u8]; 2] {
        assert!(
            from <= to && to <= self.head() && to - from <= self.data_size as u64,
            "ring range {from}..{to} outside the unread bytes"
        );
        let len = (to - from) as usize;
        let start = (from as usize) & (self.data_size - 1);
        let first = len.min(self.data_size - start);
        [self.data(start, first), self.data(0, len - first)]
    }

    /// Gives every byte before `to` back to the kernel, which may write
    /// over them at once; a tail already past `to` (moved by the ring's
    /// other reader) stays. Panics if `to` is past the head.
    ///
    /// # Safety
    ///
    /// Nothing may read those bytes any more: no slice from
    /// [`segments`](Self::segments) that covers them is alive, and no I/O
    /// submitted from them (an io_uring write) is still in flight. For
    /// reading in place, [`consume`](Self::consume) keeps this promise.
    pub unsafe fn release(&self, to: u64) {
        assert!(to <= self.head(), "releasing up to {to}, past the head");
        if !self.overwrite {
            self.meta_atomic(DATA_TAIL).fetch_max(to, Ordering::Release);
        }
    }

    /// Faults in the data pages `[offset, offset + len)` lies on that this
    /// mapping has not read yet (see [`MappedPages`]).
    fn fault_in(&self, offset: usize, len: usize) {
        let Some((from, len)) = self.mapped.missing(offset, len) else {
            return;
        };
        let advised = self
            .map
            .advise_range(Advice::PopulateRead, self.data_offset + from, len);
        self.mapped.mark(advised.ok().map(|()| (from, len)));
    }

    fn data(&self, offset: usize, len: usize) -> &[u8] {
        debug_assert!(offset + len <= self.data_size);
        self.fault_in(offset, len);
        // SAFETY: the range lies inside the data area of a mapping that lives
        // as long as `self`; the caller only asks for bytes between tail and
        // head, which the kernel does not modify until the tail passes them.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(self.data_offset + offset), len) }
    }

    fn meta_atomic(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: the offset is that of an 8-byte-aligned u64 field of the
        // metadata page at the start of the mapping, which lives as long as
        // `self`; the kernel accesses it atomically too.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(offset).cast::<u64>()) }
    }

    fn meta_u64(&self, offset: usize) -> u64 {
        self.meta_atomic(offset).load(Ordering::Relaxed)
    }
}

const DATA_HEAD: usize = offset_of!(perf_event_mmap_page, data_head);
const DATA_TAIL: usize = offset_of!(perf_event_mmap_page, data_tail);
const DATA_OFFSET: usize = offset_of!(perf_event_mmap_page, data_offset);
const DATA_SIZE: usize = offset_of!(perf_event_mmap_page, data_size);

/// Where a ring of `ring_bytes` wakes its reader: at a quarter full, so
/// three quarters absorb the write's latency, and the reader writes in
/// pieces of about this size.
pub fn wakeup_watermark(ring_bytes: usize) -> u32 {
    (ring_bytes / 4).max(1) as u32
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::MappedPages;

    #[test]
    fn a_read_faults_in_only_the_pages_it_reaches_once() {
        let page = super::page_size();
        let pages = MappedPages::new(1024 * page);
        assert_eq!(pages.missing(0, 8), Some((0, page)));
        pages.mark(pages.missing(0, 8));
        assert_eq!(pages.missing(100, page - 100), None);
        // A read over a done page into two new ones takes both at once.
        assert_eq!(pages.missing(100, 2 * page), Some((page, 2 * page)));
        pages.mark(Some((page, 2 * page)));
        // New pages on both sides of done ones: one call from the first
        // to the last.
        pages.mark(Some((5 * page, page)));
        assert_eq!(
            pages.missing(4 * page, 3 * page),
            Some((4 * page, 3 * page))
        );
        assert_eq!(pages.missing(5 * page + 8, 8), None);
        // The last page, then a kernel that cannot populate.
        assert_eq!(pages.missing(1024 * page - 8, 8), Some((1023 * page, page)));
        pages.mark(None);
        assert_eq!(pages.missing(7 * page, 40 * page), None);
    }

    #[test]
    fn a_ring_read_whole_asks_no_more() {
        let page = super::page_size();
        let pages = MappedPages::new(8 * page);
        pages.mark(Some((0, 6 * page)));
        assert_eq!(pages.missing(0, 8 * page), Some((6 * page, 2 * page)));
        pages.mark(pages.missing(0, 8 * page));
        assert_eq!(pages.left.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert_eq!(pages.missing(3 * page, 4 * page), None);
    }
}
