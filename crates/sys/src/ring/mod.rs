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
//! safe. The merger reads the bytes in place under a claim the writer
//! respects ([`RingBuffer::take_unread`], see [`RingClaims`]), or takes a
//! copy and keeps it only if the writer did not move the tail past it
//! meanwhile ([`RingBuffer::peek_unread`]).

use std::io;
use std::mem::offset_of;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::os::fd::{AsFd, AsRawFd};

use memmap2::{Advice, MmapOptions, MmapRaw};

use shardrec_format::header::{RecordHeader, HEADER_SIZE};

use crate::abi::perf_event_mmap_page;
use crate::PerfEvent;

mod claims;
mod pages;

pub use claims::{ClaimSlot, RingClaims};
use pages::MappedPages;

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
    /// The claim its two readers share, where the live merger reads it
    /// in place.
    claim: Option<ClaimSlot>,
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

/// The longest a record can be: its header's size is 16 bits.
const LONGEST_RECORD: usize = 1 << 16;

/// What the kernel may be writing into a ring past the head it has
/// published: a record of each context that can interrupt another on
/// the ring's CPU (task, softirq, hardirq, NMI), each at most a record's
/// longest.
const KERNEL_IN_FLIGHT: usize = 4 * LONGEST_RECORD;

/// How long a claim may hold a ring half full before its writer breaks
/// it: longer than a round (1 to 24 ms in a DWARF storm on a slow page
/// cache, 37 to 81 ms in a debug build's rounds of `perf kmem record`'s
/// small records), so that a merger that is only slow keeps its claims,
/// and the kernel drops what its rings cannot hold, as perf's would; a
/// merger stopped mid-round loses them. Broken at half full alone, the
/// claims of a merger that fell behind in such a storm were broken, the
/// kernel came round to them, and the merger that took its place read
/// back what the writers had spilled meanwhile, falling further behind:
/// 5,000 to 19,000 samples were lost where perf lost 0 to 1,200. At
/// 50 ms, the debug build's `kmem record` in `tests/tools.rs` was
/// overtaken so in 2 of 3 runs.
pub const CLAIM_PATIENCE: Duration = Duration::from_millis(100);

/// The smallest ring worth reading in place under a claim: once the
/// writer breaks a claim at half full, the merger still has the other
/// half, less what the kernel may be writing unpublished, to finish its
/// round before the kernel may come round to what it claimed (1.75 MiB
/// here). In a small ring a broken claim would cost the merger its round
/// often.
pub const READ_IN_PLACE_FROM: usize = 16 * KERNEL_IN_FLIGHT;

/// What [`RingBuffer::take_unread`] took from a ring.
#[derive(Debug)]
pub struct Taken<'a> {
    /// The bytes, in the ring's mapping, under the claim; `None` where
    /// they were copied (appended to the buffer given).
    pub in_place: Option<&'a [u8]>,
    /// What to give back once the output holds them, after the claim is
    /// dropped (which ends the borrow of the bytes).
    pub copied: Copied,
    /// Whether unread bytes were left for another read: those past the
    /// data area's end, or past what was copied around it.
    pub left: bool,
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
            claim: None,
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

    /// Writes the unread bytes (past what was kept) into `file` from `offset` (two writes where
    /// they wrap around the ring's end), leaving them in the ring; returns
    /// the head they reach, for the caller to release once nothing else
    /// reads them.
    pub fn write_unread_at(&self, file: &std::fs::File, offset: u64) -> io::Result<u64> {
        use std::os::unix::fs::FileExt;
        let head = self.head();
        let mut offset = offset;
        for segment in self.segments(self.kept(), head) {
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
        let head = self.head();
        if head <= from || head - from > most {
            return None;
        }
        self.peek(from, head, into)
    }

    /// [`peek_unread`](Self::peek_unread) of `[from, to)`, `to` at or
    /// before the head.
    fn peek(&self, from: u64, to: u64, into: &mut Vec<u8>) -> Option<Copied> {
        // The reader stores its tail with Release once it is done with the
        // bytes before it.
        if from < self.meta_atomic(DATA_TAIL).load(Ordering::Acquire) {
            return None;
        }
        let len = (to - from) as usize;
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
        kept.then_some(Copied { head: to })
    }

    /// Gives back to the kernel the bytes a [`copy_unread`](Self::copy_unread)
    /// or a [`peek_unread`](Self::peek_unread) copied (the tail does not
    /// move back if the other reader moved it further).
    pub fn release_copied(&mut self, copied: Copied) {
        // `&mut self`: no slice of this mapping is borrowed, and the bytes
        // up to `copied.head` were copied out (or written from in place,
        // under a claim since dropped). A copy is not the writer's shard:
        // its kept position stays.
        self.advance_tail(copied.head);
    }

    /// Shares `slot` with the ring's other reader: a writer's releases
    /// then stop at the merger's claim, and the merger may read in place
    /// ([`take_unread`](Self::take_unread)).
    pub fn share_claim(&mut self, slot: ClaimSlot) {
        self.claim = Some(slot);
    }

    /// The claim slot it shares, if any, for another mapping of the ring.
    pub fn claim_slot(&self) -> Option<&ClaimSlot> {
        self.claim.as_ref()
    }

    /// Where the writer has put the ring into its shard up to: the tail,
    /// or past it where a claim holds the tail back.
    pub fn kept(&self) -> u64 {
        let kept = self.claim.as_ref().map_or(0, |c| c.words().kept());
        self.tail().max(kept)
    }

    /// For the live merger, reading first: the unread bytes from `from`
    /// (where the writer kept the ring up to, or past it) to the head, if
    /// there are some, at most `most`, and the writer has not kept past
    /// `from`. They are read in place ([`Taken::in_place`]) up to the
    /// data area's end, under a claim: the kernel writes over none of
    /// them until [`unclaim`](Self::unclaim) (the writer still writes
    /// them into its shard, but frees them only then, unless the claim
    /// holds its ring half full for [`CLAIM_PATIENCE`]: it then breaks
    /// the claim, and `unclaim` says whether the kernel may have come
    /// round to them since). Where less than a record's longest lies
    /// before the end, those bytes and the next record's longest are
    /// copied into `into` instead (as [`peek_unread`](Self::peek_unread)
    /// copies them): the record that wraps around the end, so the next
    /// read begins past it. More than half a ring is copied whole.
    /// `None` without a claim slot.
    pub fn take_unread(&self, from: u64, most: u64, into: &mut Vec<u8>) -> Option<Taken<'_>> {
        let slot = self.claim.as_ref()?;
        let head = self.head();
        let len = head
            .checked_sub(from)
            .filter(|&len| len > 0 && len <= most)? as usize;
        let start = (from as usize) & (self.data_size - 1);
        let before_end = len.min(self.data_size - start);
        // Copied, not claimed: more than half the ring (a claim on it
        // could hold the ring full before its writer may break the claim,
        // [`CLAIM_PATIENCE`]), or a record that wraps around the end.
        let copy_to = match len > self.data_size / 2 {
            true => Some(head),
            false => (before_end < len && before_end < LONGEST_RECORD)
                .then(|| head.min(from + (before_end + LONGEST_RECORD) as u64)),
        };
        if let Some(to) = copy_to {
            return self.peek(from, to, into).map(|copied| Taken {
                in_place: None,
                copied,
                left: to < head,
            });
        }
        let now = claims::monotonic_ns();
        if !slot.words().claim(self.meta_atomic(DATA_TAIL), from, now) {
            return None;
        }
        Some(Taken {
            in_place: Some(self.data(start, before_end)),
            copied: Copied {
                head: from + before_end as u64,
            },
            left: before_end < len,
        })
    }

    /// Drops the merger's claim, if it holds one: the tail moves up to
    /// what the writer kept meanwhile. The coordinator drops the claim of
    /// a merger that died, through its own mapping. Returns whether what
    /// was read in place under the claim was read whole: false if the
    /// writer broke the claim and the kernel may have written over the
    /// claimed bytes since (it writes a byte over once it has written a
    /// ring past it).
    pub fn unclaim(&mut self) -> bool {
        let Some(slot) = &self.claim else {
            return true;
        };
        let Some(dropped) = slot.words().unclaim(self.meta_atomic(DATA_TAIL)) else {
            return true;
        };
        let lapping = self.head() + KERNEL_IN_FLIGHT as u64;
        dropped.tail <= dropped.from || lapping <= dropped.from + self.data_size as u64
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
    /// Where a claim is shared ([`share_claim`](Self::share_claim)),
    /// this is the writer's release: the bytes before `to` are in its
    /// shard, and the tail stops at the merger's claim, if it holds one.
    ///
    /// # Safety
    ///
    /// Nothing may read those bytes any more: no slice from
    /// [`segments`](Self::segments) that covers them is alive, and no I/O
    /// submitted from them (an io_uring write) is still in flight. For
    /// reading in place, [`consume`](Self::consume) keeps this promise.
    pub unsafe fn release(&self, to: u64) {
        assert!(to <= self.head(), "releasing up to {to}, past the head");
        match &self.claim {
            Some(slot) => self.keep(slot, to),
            None => self.advance_tail(to),
        }
    }

    /// For the writer, on each wakeup: frees what it kept that a claim
    /// held back, if the claim is gone or overdue. Returns how soon to
    /// look again, if a claim still holds the tail back and is not old
    /// enough to be broken yet: a ring that fills meanwhile wakes the
    /// writer no more. (Once old enough, the kernel's wakeups, every
    /// quarter of the ring, suffice: one finds the ring between half and
    /// three quarters full.)
    pub fn free_kept(&self) -> Option<Duration> {
        let slot = self.claim.as_ref()?;
        let kept = slot.words().kept();
        if kept <= self.tail() {
            return None;
        }
        self.keep(slot, kept);
        let claimed_at = slot.words().holding_since(self.tail())?;
        let age = claims::monotonic_ns().saturating_sub(claimed_at);
        let patience = CLAIM_PATIENCE.as_nanos() as u64;
        (age < patience).then(|| Duration::from_nanos(patience - age))
    }

    /// The writer has the bytes before `to` in its shard: the tail moves
    /// up to there, or to the merger's claim, unless that is overdue.
    fn keep(&self, slot: &ClaimSlot, to: u64) {
        let overdue = |claimed_at| self.claim_overdue(claimed_at);
        slot.words().keep(self.meta_atomic(DATA_TAIL), to, overdue);
    }

    /// Whether a claim made at `claimed_at` holds the tail back too long:
    /// for [`CLAIM_PATIENCE`], and the ring half full. Broken any fuller,
    /// the writer could find the ring full at its next wakeup (just short
    /// of three quarters full at one is nearly full at the next). A
    /// merger that is done long before the kernel has written half a ring
    /// more loses nothing by it ([`unclaim`](Self::unclaim)).
    fn claim_overdue(&self, claimed_at: u64) -> bool {
        let held = self.head() - self.tail();
        let age = claims::monotonic_ns().saturating_sub(claimed_at);
        held >= self.data_size as u64 / 2 && age >= CLAIM_PATIENCE.as_nanos() as u64
    }

    /// Moves the tail up to `to`, unless it is further already.
    fn advance_tail(&self, to: u64) {
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
