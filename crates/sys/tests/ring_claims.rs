//! `RingBuffer::take_unread` and the claim a ring's two readers share,
//! against the kernel: the merger's mapping reads the writer's unread
//! bytes in place, and while it holds its claim neither the writer's
//! release nor the kernel touches them, until the claim has held the ring
//! half full too long and the writer breaks it (the merger is told whether the kernel
//! may have come round to them since); bytes that wrap around the ring's end
//! are read in place up to it, or copied where only a record or so lies
//! before it.
//!
//! Needs root. Skips when not root, unless `CI` is set, where that fails.

use shardrec_sys::ring::{RingClaims, CLAIM_PATIENCE};
use shardrec_sys::{abi, Attr, PerfEvent, RingBuffer, Target};

/// 512 KiB: room for more than a record's longest (64 KiB) before the
/// end and past it, a quarter of the ring.
const PAGES: usize = 128;

/// A COMM record on the event for each of `n` renames of this thread.
fn renames(n: usize) {
    for i in 0..n {
        let name = std::ffi::CString::new(format!("claim-{i}")).unwrap();
        // SAFETY: PR_SET_NAME reads a NUL-terminated string that lives
        // through the call.
        unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
    }
}

/// An event of this thread's renames, its writer's mapping and the
/// merger's, sharing a claim slot.
fn rings() -> Option<(PerfEvent, RingBuffer, RingBuffer)> {
    rings_of(PAGES)
}

fn rings_of(pages: usize) -> Option<(PerfEvent, RingBuffer, RingBuffer)> {
    if !shardrec_testkit::require_root() {
        return None;
    }
    let mut attr = Attr::software(abi::PERF_COUNT_SW_DUMMY as u64);
    attr.set_tracking();
    let event = PerfEvent::open(&attr, Target { pid: 0, cpu: -1 }).unwrap();
    let claims = RingClaims::new(1).unwrap();
    let mut writer = RingBuffer::map(&event, pages).unwrap();
    let mut merger = RingBuffer::map(&event, pages).unwrap();
    writer.share_claim(claims.slot(0));
    merger.share_claim(claims.slot(0));
    event.enable().unwrap();
    Some((event, writer, merger))
}

/// The writer keeps everything unread (as if written into its shard).
fn keep_all(writer: &RingBuffer) {
    // SAFETY: nothing of the writer's mapping is borrowed.
    unsafe { writer.release(writer.head()) };
}

#[test]
fn bytes_read_in_place_stay_until_the_claim_is_dropped() {
    let Some((event, writer, mut merger)) = rings() else {
        return;
    };
    let size = writer.data_size() as u64;
    renames(100);
    let (from, head) = (writer.kept(), writer.head());
    let unread: Vec<u8> = writer.segments(from, head).concat();
    let mut copies = Vec::new();
    let taken = merger.take_unread(from, size, &mut copies).expect("taken");
    let in_place = taken.in_place.expect("read in place");
    assert_eq!(in_place, unread);
    assert_eq!(taken.copied.end(), head);
    assert!(!taken.left);
    assert!(copies.is_empty());
    // The writer keeps them, and more: the tail stays at the claim.
    keep_all(&writer);
    renames(50);
    keep_all(&writer);
    assert_eq!(writer.tail(), from, "the writer freed claimed bytes");
    assert_eq!(writer.kept(), writer.head());
    // The kernel fills the ring many times over: it drops what it cannot
    // write rather than write over the claim (the writer releasing
    // nothing meanwhile, so not breaking it).
    renames(4 * size as usize / 32);
    assert_eq!(in_place, unread, "claimed bytes written over");
    let kept = writer.kept();
    merger.unclaim();
    assert_eq!(
        writer.tail(),
        kept,
        "dropping the claim frees what was kept"
    );
    // Unclaimed, the writer frees at once.
    renames(10);
    keep_all(&writer);
    assert_eq!(writer.tail(), writer.head());
    event.disable().unwrap();
}

#[test]
fn bytes_the_writer_kept_are_not_taken() {
    let Some((event, writer, merger)) = rings() else {
        return;
    };
    let size = writer.data_size() as u64;
    renames(20);
    let from = writer.kept();
    keep_all(&writer);
    let mut copies = Vec::new();
    assert!(merger.take_unread(from, size, &mut copies).is_none());
    // Nothing was left claimed: the writer's next release frees it all.
    renames(20);
    keep_all(&writer);
    assert_eq!(writer.tail(), writer.head());
    event.disable().unwrap();
}

#[test]
fn bytes_around_the_end_are_taken_in_place_up_to_it_or_copied() {
    let Some((event, writer, mut merger)) = rings() else {
        return;
    };
    let size = writer.data_size() as u64;
    // 96 KiB before the end: in place up to it.
    let far = size - (96 << 10);
    fill_until(&writer, |at| at >= far && at < far + 4096);
    renames(3200);
    let (from, head) = (writer.kept(), writer.head());
    assert!(
        (from % size) + (head - from) > size,
        "the unread bytes do not wrap"
    );
    let mut copies = Vec::new();
    let taken = merger.take_unread(from, size, &mut copies).expect("taken");
    let in_place = taken.in_place.expect("read in place");
    assert_eq!(in_place, writer.segments(from, head)[0]);
    assert_eq!(taken.copied.end(), from + in_place.len() as u64);
    assert!(taken.left, "the bytes past the end not left");
    merger.unclaim();
    keep_all(&writer);
    // Near the end: a copy around it, a record's longest past it.
    fill_until(&writer, |at| at >= size - 1024);
    renames(3000);
    let (from, head) = (writer.kept(), writer.head());
    let mut copies = vec![7];
    let taken = merger.take_unread(from, size, &mut copies).expect("taken");
    assert!(taken.in_place.is_none(), "not copied");
    let around = (size - from % size) + (1 << 16);
    assert_eq!(taken.copied.end(), head.min(from + around));
    assert!(taken.left, "the bytes past the copy not left");
    let expected: Vec<u8> = writer.segments(from, taken.copied.end()).concat();
    assert_eq!(copies[1..], expected);
    keep_all(&writer);
    event.disable().unwrap();
}

/// A claim that holds a 4 MiB ring half full for `CLAIM_PATIENCE` is
/// broken, not before: the writer frees everything it kept, and is told
/// when to look again until then. The merger is told its bytes were
/// read whole while the kernel cannot have come round to them (a ring
/// past the claim, but for what it may be writing unpublished), and not
/// once it may have.
#[test]
fn a_claim_that_holds_the_ring_half_full_too_long_is_broken() {
    let Some((event, writer, mut merger)) = rings_of(1024) else {
        return;
    };
    let size = writer.data_size() as u64;
    for laps in [false, true] {
        // Half full (filled first: the renames take longer than the
        // writer's patience), under a claim younger than that patience:
        // held back, and the writer told to look again within it.
        // (More than half unread is copied, not claimed.)
        let from = writer.kept();
        fill_past(&writer, from + size / 2 - (64 << 10));
        let mut copies = Vec::new();
        let taken = merger.take_unread(from, size, &mut copies).expect("taken");
        assert!(taken.in_place.is_some());
        fill_past(&writer, from + size / 2);
        keep_all(&writer);
        assert_eq!(writer.tail(), from);
        let again = writer.free_kept().expect("told to look again");
        assert!(again <= CLAIM_PATIENCE, "{again:?}");
        // Older: broken, everything kept is freed.
        std::thread::sleep(again);
        assert_eq!(writer.free_kept(), None);
        assert_eq!(writer.tail(), writer.head());
        if laps {
            // The kernel, free to, comes within what it may be writing
            // of a ring past the claim.
            fill_past(&writer, from + size - (200 << 10));
            keep_all(&writer);
        }
        assert_eq!(merger.unclaim(), !laps, "laps: {laps}");
        keep_all(&writer);
    }
    event.disable().unwrap();
}

/// Renames until the ring's head is past `at`.
fn fill_past(writer: &RingBuffer, at: u64) {
    while writer.head() <= at {
        renames(64);
    }
}

/// Renames, the writer keeping everything, until the ring's head lies
/// where `at` (its offset in the ring) says.
fn fill_until(writer: &RingBuffer, at: impl Fn(u64) -> bool) {
    let size = writer.data_size() as u64;
    while !at(writer.head() % size) {
        renames(1);
        keep_all(writer);
    }
}
