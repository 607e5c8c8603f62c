//! The claim the live merger holds on a CPU ring's bytes while it reads
//! them in place, against the ring's other reader, the CPU's writer.
//!
//! Both may move the ring's tail. The writer moves it past what it has
//! put into its shard (its *kept* position); the merger, reading the
//! ring straight into its output, must keep the kernel off the bytes it
//! reads until its output has them. So, per ring, two words in memory
//! every process of the recording shares:
//!
//! - the merger stores its **claim** (the first byte it reads), then
//!   loads the writer's kept position: if the writer has kept past the
//!   claim, the shard has those bytes and the merger reads them there;
//! - the writer stores its kept position, then loads the claim, and moves
//!   the tail no further than the claim;
//! - the merger, done, stores no claim, then loads the kept position and
//!   moves the tail up to it, for the writer.
//!
//! Each stores before it loads the other's word, both sequentially
//! consistent (Dekker's pairing), so at least one sees the other: the
//! writer never frees bytes the merger is reading, and a kept position
//! held back by a claim is applied by whichever of the two comes last.
//! A merger that dies holding a claim leaves it for the coordinator to
//! drop (`RingBuffer::unclaim` through its own mapping of the ring).
//!
//! A claim lasts a round, milliseconds. One that has lasted
//! `CLAIM_PATIENCE` and holds the ring half full (a merger stopped
//! mid-round) is **broken** by the writer, which then frees what it
//! kept: the ring does not wait on a stalled merger. A merger that is
//! only slow keeps its claims, and the kernel drops what the ring cannot
//! hold, as perf's ring does when its thread is slow. A broken claim
//! costs the merger nothing unless the kernel comes round to the claimed
//! bytes before the merger is done with them: as it drops the claim, the
//! merger learns whether it could have (`RingBuffer::unclaim`), and must
//! not trust what it read in place if so.

use std::num::NonZeroUsize;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use nix::sys::mman::{MapFlags, ProtFlags};

/// No claim: the writer may free everything it kept.
const UNCLAIMED: u64 = u64::MAX;

/// Set in a claim the writer broke: it holds nothing back any more (ring
/// positions never reach this bit), and still says where it began.
const BROKEN: u64 = 1 << 63;

/// One ring's words, on a cache line of its own: rings of different
/// CPUs share no line.
#[repr(C, align(64))]
pub(crate) struct Slot {
    claim: AtomicU64,
    kept: AtomicU64,
    /// When the claim was made ([`monotonic_ns`]).
    claimed_at: AtomicU64,
}

/// A claim as it was dropped.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dropped {
    /// The first byte claimed.
    pub(crate) from: u64,
    /// The tail while the claim still held: past `from` if the writer
    /// broke the claim.
    pub(crate) tail: u64,
}

impl Slot {
    /// The writer has the bytes before `to` in its shard: the tail moves
    /// up to there, or to the claim if one holds the tail back, unless
    /// `overdue` says, from when the claim was made, that it has held
    /// the tail back too long: then the writer breaks it, and frees
    /// everything it kept.
    pub(crate) fn keep(&self, tail: &AtomicU64, to: u64, overdue: impl FnOnce(u64) -> bool) {
        self.kept.fetch_max(to, Ordering::SeqCst);
        let claim = self.claim.load(Ordering::SeqCst);
        let broken = claim < to
            && overdue(self.claimed_at.load(Ordering::Relaxed))
            && (self.claim)
                .compare_exchange(claim, claim | BROKEN, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok();
        let to = if broken { to } else { to.min(claim) };
        tail.fetch_max(to, Ordering::SeqCst);
    }

    /// Where the writer has kept the ring up to (0 before it kept any).
    pub(crate) fn kept(&self) -> u64 {
        self.kept.load(Ordering::Acquire)
    }

    /// When the claim that holds the tail back was made, if one does.
    pub(crate) fn holding_since(&self, tail: u64) -> Option<u64> {
        let claim = self.claim.load(Ordering::SeqCst);
        (claim <= tail).then(|| self.claimed_at.load(Ordering::Relaxed))
    }

    /// The merger claims the bytes from `from`, `now`
    /// ([`monotonic_ns`]): true if neither the writer has kept past them
    /// nor the tail has passed them, so nothing frees them until
    /// [`unclaim`](Self::unclaim) (unless the writer breaks the claim);
    /// otherwise no claim is left.
    pub(crate) fn claim(&self, tail: &AtomicU64, from: u64, now: u64) -> bool {
        // Seen by a writer that sees the claim, stored after it.
        self.claimed_at.store(now, Ordering::Relaxed);
        self.claim.store(from, Ordering::SeqCst);
        let kept = self.kept.load(Ordering::SeqCst);
        if kept > from || tail.load(Ordering::SeqCst) > from {
            self.unclaim(tail);
            return false;
        }
        true
    }

    /// No claim any more: the tail moves up to what the writer kept
    /// meanwhile. Returns the claim dropped, if there was one.
    pub(crate) fn unclaim(&self, tail: &AtomicU64) -> Option<Dropped> {
        // Once the merger is done reading (its loads stay before the
        // fence), while the claim holds: a tail not past it then kept the
        // kernel off the claimed bytes all along.
        std::sync::atomic::fence(Ordering::SeqCst);
        let held_at = tail.load(Ordering::SeqCst);
        let claim = self.claim.swap(UNCLAIMED, Ordering::SeqCst);
        let kept = self.kept.load(Ordering::SeqCst);
        tail.fetch_max(kept, Ordering::SeqCst);
        (claim != UNCLAIMED).then_some(Dropped {
            from: claim & !BROKEN,
            tail: held_at,
        })
    }
}

/// Now, as claims are timed: `CLOCK_MONOTONIC` in nanoseconds.
pub(crate) fn monotonic_ns() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC);
    now.map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

/// One slot per CPU ring, in a shared anonymous mapping made before the
/// writers and the merger are forked, so every one of them (and every
/// replacement, forked later from the same coordinator) sees the same
/// words.
pub struct RingClaims {
    slots: Arc<SharedSlots>,
}

impl RingClaims {
    /// Slots for `rings` rings, none claimed.
    pub fn new(rings: usize) -> std::io::Result<RingClaims> {
        let slots = SharedSlots::new(rings.max(1))?;
        for index in 0..rings {
            slots.get(index).claim.store(UNCLAIMED, Ordering::Relaxed);
        }
        Ok(RingClaims {
            slots: Arc::new(slots),
        })
    }

    /// Ring `index`'s slot, to give both its readers' mappings of it
    /// ([`RingBuffer::share_claim`](super::RingBuffer::share_claim)).
    /// Panics if there is no such slot.
    pub fn slot(&self, index: usize) -> ClaimSlot {
        assert!(index < self.slots.len, "no claim slot {index}");
        ClaimSlot {
            slots: Arc::clone(&self.slots),
            index,
        }
    }
}

/// One ring's slot of a [`RingClaims`].
#[derive(Clone)]
pub struct ClaimSlot {
    slots: Arc<SharedSlots>,
    index: usize,
}

impl ClaimSlot {
    pub(crate) fn words(&self) -> &Slot {
        self.slots.get(self.index)
    }
}

impl std::fmt::Debug for ClaimSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClaimSlot({})", self.index)
    }
}

/// The mapping itself.
struct SharedSlots {
    base: NonNull<Slot>,
    len: usize,
}

// SAFETY: the slots are atomics, shared on purpose; the mapping lives
// until the last handle drops.
unsafe impl Send for SharedSlots {}
// SAFETY: as above: only atomic accesses are made through `base`.
unsafe impl Sync for SharedSlots {}

impl SharedSlots {
    fn new(len: usize) -> std::io::Result<SharedSlots> {
        let bytes = NonZeroUsize::new(len * size_of::<Slot>()).expect("at least one slot");
        // SAFETY: a fresh anonymous mapping at an address the kernel
        // picks aliases nothing of ours.
        let base = unsafe {
            nix::sys::mman::mmap_anonymous(
                None,
                bytes,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
            )
        }?;
        Ok(SharedSlots {
            base: base.cast(),
            len,
        })
    }

    fn get(&self, index: usize) -> &Slot {
        assert!(index < self.len);
        // SAFETY: the mapping holds `len` slots (zeroed pages are valid
        // atomics, and a page is aligned beyond a slot's 64 bytes), and
        // lives as long as `self`.
        unsafe { &*self.base.as_ptr().add(index) }
    }
}

impl Drop for SharedSlots {
    fn drop(&mut self) {
        // SAFETY: the mapping was made in `new` with this length, and no
        // slot reference outlives `self`.
        let _ = unsafe { nix::sys::mman::munmap(self.base.cast(), self.len * size_of::<Slot>()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Slot {
        fn claim_now(&self, tail: &AtomicU64, from: u64) -> bool {
            self.claim(tail, from, monotonic_ns())
        }

        /// A writer that never breaks a claim.
        fn keep_patiently(&self, tail: &AtomicU64, to: u64) {
            self.keep(tail, to, |_| false)
        }
    }

    fn slot() -> (RingClaims, ClaimSlot, AtomicU64) {
        let claims = RingClaims::new(2).unwrap();
        let slot = claims.slot(1);
        (claims, slot, AtomicU64::new(0))
    }

    #[test]
    fn a_claim_holds_the_writers_tail_back_until_it_is_dropped() {
        let (_claims, slot, tail) = slot();
        let words = slot.words();
        assert!(words.claim_now(&tail, 0));
        words.keep_patiently(&tail, 4096);
        assert_eq!(tail.load(Ordering::Relaxed), 0);
        assert_eq!(words.kept(), 4096);
        words.unclaim(&tail);
        assert_eq!(tail.load(Ordering::Relaxed), 4096);
        // Unclaimed, the writer frees what it keeps at once.
        words.keep_patiently(&tail, 8192);
        assert_eq!(tail.load(Ordering::Relaxed), 8192);
    }

    #[test]
    fn the_writer_frees_up_to_the_claim() {
        let (_claims, slot, tail) = slot();
        let words = slot.words();
        assert!(words.claim_now(&tail, 1024));
        words.keep_patiently(&tail, 4096);
        assert_eq!(tail.load(Ordering::Relaxed), 1024);
    }

    #[test]
    fn bytes_the_writer_kept_or_freed_are_not_claimed() {
        let (_claims, slot, tail) = slot();
        let words = slot.words();
        words.keep_patiently(&tail, 4096);
        assert!(!words.claim_now(&tail, 1024));
        assert!(words.claim_now(&tail, 4096));
        words.unclaim(&tail);
        // The merger's own release moved the tail on.
        tail.store(9000, Ordering::Relaxed);
        assert!(!words.claim_now(&tail, 8192));
        // A refused claim leaves none behind.
        words.keep_patiently(&tail, 12288);
        assert_eq!(tail.load(Ordering::Relaxed), 12288);
    }

    #[test]
    fn an_overdue_claim_is_broken_and_the_merger_told() {
        let (_claims, slot, tail) = slot();
        let words = slot.words();
        assert!(words.claim(&tail, 1024, 5));
        // Not overdue: held back.
        words.keep(&tail, 4096, |at| {
            assert_eq!(at, 5);
            false
        });
        assert_eq!(tail.load(Ordering::Relaxed), 1024);
        assert_eq!(words.holding_since(1024), Some(5));
        words.keep(&tail, 8192, |_| true);
        assert_eq!(tail.load(Ordering::Relaxed), 8192);
        assert_eq!(words.holding_since(8192), None);
        // Broken, it holds nothing back any more.
        words.keep(&tail, 9000, |_| panic!("asked again"));
        assert_eq!(tail.load(Ordering::Relaxed), 9000);
        let dropped = words.unclaim(&tail).expect("a claim dropped");
        assert_eq!((dropped.from, dropped.tail), (1024, 9000));
        assert!(words.unclaim(&tail).is_none());
        assert!(words.claim(&tail, 9000, 6));
        let dropped = words.unclaim(&tail).expect("a claim dropped");
        assert_eq!((dropped.from, dropped.tail), (9000, 9000));
    }

    #[test]
    fn a_forked_process_shares_the_slots() {
        let (_claims, slot, tail) = slot();
        // SAFETY: the child makes one atomic store and leaves through
        // `_exit`, which is safe after a fork of a threaded process.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                slot.words().keep_patiently(&AtomicU64::new(0), 777);
                // SAFETY: ends the child at once, running nothing of ours.
                unsafe { libc::_exit(0) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                nix::sys::wait::waitpid(child, None).unwrap();
            }
        }
        assert_eq!(slot.words().kept(), 777);
        assert!(!slot.words().claim_now(&tail, 700));
    }

    /// The kernel, the writer and the merger of one ring as three
    /// threads: the kernel writes each word's own position into a ring
    /// of words, only where the tail lets it; the writer keeps what it
    /// finds; the merger claims and reads in place, and finds every word
    /// it read under its claim still its own position.
    #[test]
    fn nothing_claimed_is_written_over() {
        use std::sync::atomic::AtomicBool;
        const WORDS: u64 = 16;
        let (_claims, slot, tail) = slot();
        let ring: Vec<AtomicU64> = (0..WORDS).map(|_| AtomicU64::new(0)).collect();
        let (head, done) = (AtomicU64::new(0), AtomicBool::new(false));
        let (torn, claimed) = std::thread::scope(|s| {
            s.spawn(|| {
                let mut at = 0;
                while !done.load(Ordering::Relaxed) {
                    if at - tail.load(Ordering::SeqCst) < WORDS {
                        ring[(at % WORDS) as usize].store(at, Ordering::Relaxed);
                        at += 1;
                        head.store(at, Ordering::Release);
                    }
                }
            });
            // The writer spills once half the ring is unread.
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    let to = head.load(Ordering::Acquire);
                    let from = slot.words().kept().max(tail.load(Ordering::Acquire));
                    if to.saturating_sub(from) >= WORDS / 2 {
                        slot.words().keep_patiently(&tail, to);
                    }
                }
            });
            let merger = s.spawn(|| {
                let (mut torn, mut claimed, mut from) = (0, 0, 0);
                let start = std::time::Instant::now();
                while start.elapsed() < std::time::Duration::from_millis(300) {
                    let to = head.load(Ordering::Acquire);
                    if to == from {
                        continue;
                    }
                    if !slot.words().claim_now(&tail, from) {
                        // The shard has them.
                        from = slot.words().kept();
                        continue;
                    }
                    claimed += 1;
                    for at in from..to {
                        // Slowly, as a write into the page cache reads.
                        (0..50).for_each(|_| std::hint::spin_loop());
                        let word = ring[(at % WORDS) as usize].load(Ordering::Relaxed);
                        torn += u64::from(word != at);
                    }
                    let dropped = slot.words().unclaim(&tail).expect("claimed");
                    assert!(dropped.tail <= dropped.from, "a claim broken");
                    // Its output holds them.
                    tail.fetch_max(to, Ordering::Release);
                    from = to;
                }
                done.store(true, Ordering::Relaxed);
                (torn, claimed)
            });
            merger.join().unwrap()
        });
        assert!(claimed > 0, "the merger never claimed");
        assert_eq!(torn, 0, "words written over under a claim");
    }
}
