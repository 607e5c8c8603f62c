//! `RingBuffer::peek_unread` against the kernel: a second mapping of a
//! ring copies what its reader has not taken, exactly, from any point
//! past the reader's tail, without moving it, and gives up before the
//! tail or past the head.
//!
//! Needs root. Skips when not root, unless `CI` is set, where that fails.

use shardrec_sys::{abi, Attr, PerfEvent, RingBuffer, Target};

/// A COMM record on `event` for each of `n` renames of this thread.
fn renames(n: usize) {
    for i in 0..n {
        let name = std::ffi::CString::new(format!("peek-{i}")).unwrap();
        // SAFETY: PR_SET_NAME reads a NUL-terminated string that lives
        // through the call.
        unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
    }
}

/// What `ring`'s reader takes, as bytes, moving its tail.
fn consumed(ring: &RingBuffer) -> Vec<u8> {
    ring.consume(|[first, second]| [first, second].concat())
}

#[test]
fn a_second_mapping_peeks_exactly_the_unread_bytes_even_where_they_wrap() {
    if !shardrec_testkit::require_root() {
        return;
    }
    let mut attr = Attr::software(abi::PERF_COUNT_SW_DUMMY as u64);
    attr.set_tracking();
    let event = PerfEvent::open(&attr, Target { pid: 0, cpu: -1 }).unwrap();
    let reader = RingBuffer::map(&event, 1).unwrap();
    let mut peeker = RingBuffer::map(&event, 1).unwrap();
    let size = reader.data_size() as u64;
    event.enable().unwrap();
    // Six times over, so that the unread bytes wrap around the ring's
    // end at least once (a COMM record of this thread is 32 bytes).
    for _ in 0..6 {
        renames(40);
        let (tail, head) = (reader.tail(), reader.head());
        let unread = head - tail;
        assert!(unread > 8, "no record");
        let mut buffer = Vec::new();
        let too_many = peeker.peek_unread(tail, unread - 1, &mut buffer);
        assert_eq!(too_many, None, "more than asked for");
        assert_eq!(
            peeker.peek_unread(head, size, &mut buffer),
            None,
            "nothing past the head"
        );
        let mut later = Vec::new();
        let _ = peeker
            .peek_unread(tail + 8, size, &mut later)
            .expect("a copy of the rest");
        // Appended to what the buffer holds.
        let mut peeked = vec![0xff; 3];
        let copied = peeker.peek_unread(tail, size, &mut peeked).expect("a copy");
        assert_eq!(copied.end(), head);
        assert_eq!(reader.tail(), tail, "the peek moved the tail");
        assert_eq!(peeked.drain(..3).collect::<Vec<u8>>(), [0xff; 3]);
        assert_eq!(later, peeked[8..]);
        assert_eq!(peeked, consumed(&reader));
        let mut held = vec![1, 2];
        let behind = peeker.peek_unread(tail, size, &mut held);
        assert_eq!(behind, None, "the tail moved past it");
        assert_eq!(held, [1, 2], "a copy dropped leaves what was there");
    }
    assert!(reader.head() > size, "the ring never wrapped");
    // The other reader's release (the live merger's) moves the tail both
    // see, and a release behind it leaves it there.
    renames(40);
    let head = reader.head();
    let mut buffer = Vec::new();
    let copied = peeker
        .peek_unread(reader.tail(), size, &mut buffer)
        .expect("a copy");
    peeker.release_copied(copied);
    assert_eq!(reader.tail(), head);
    // SAFETY: nothing of the ring is borrowed.
    unsafe { reader.release(head - 8) };
    assert_eq!(reader.tail(), head, "the tail moved back");
    event.disable().unwrap();
}
