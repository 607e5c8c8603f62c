//! The low watermark: the time before which no ring can still hand over a
//! record, known without reading a ring's records or waking its writer.
//!
//! A ring's `data_head` is where the kernel has published whole records up
//! to; a record's time is taken just before it is published. So once the
//! merger has read every record it could (its latest time `M`) and then
//! reads each ring's head, every record published later carries a time of
//! at least `M` (less the moment between taking a time and publishing,
//! which the margin covers). Once the merger has read each ring's bytes up
//! to the heads of that snapshot, nothing earlier than `M` is left to come:
//! that `M` is the watermark. A quiet ring's head never moves, so it is
//! always read up to it and never holds the watermark back.
//!
//! Each ring bounds the watermark on its own: by the latest snapshot whose
//! head it has been read past, and, for a CPU's ring, whose records come
//! in time order but for their lateness, also by the time it has been
//! read to. So a busy ring the merger is still reading (the kernel
//! publishing faster than the merger reads, as when every CPU is busy)
//! does not hold the watermark at a snapshot it may never catch up with:
//! the watermark follows the ring read least far.

use std::collections::VecDeque;
use std::time::Instant;

/// One look at the rings: the latest time read before it, and each ring's
/// head.
struct Snapshot {
    read_up_to: u64,
    heads: Vec<u64>,
    /// When it was taken.
    at: Instant,
}

/// Snapshots not yet covered by what has been read, oldest first.
#[derive(Default)]
pub struct Watermark {
    snapshots: VecDeque<Snapshot>,
    reached: Option<u64>,
    /// When the snapshot of `reached` was taken.
    reached_at: Option<Instant>,
    /// The watermark given last: it never goes back.
    mark: Option<u64>,
}

impl Watermark {
    /// Notes a look at the rings: `heads`, read after every record read so
    /// far, whose latest time is `read_up_to`.
    pub fn note(&mut self, read_up_to: u64, heads: Vec<u64>) {
        let at = Instant::now();
        self.snapshots.push_back(Snapshot {
            read_up_to,
            heads,
            at,
        });
    }

    /// The watermark, now that each ring has been read up to `read` (ring
    /// positions, in the order of the heads noted) and the first rings,
    /// whose records come in time order, up to `read_times` (0: no bound
    /// yet): the earliest of the rings' bounds, each the later of the
    /// latest snapshot whose head it has been read past and the time it
    /// has been read to. `None` until every ring has a bound.
    pub fn advance(&mut self, read: &[u64], read_times: &[u64]) -> Option<u64> {
        let covered = |s: &Snapshot| s.heads.iter().zip(read).all(|(head, read)| head <= read);
        while let Some(snapshot) = self.snapshots.front().filter(|s| covered(s)) {
            (self.reached, self.reached_at) = (Some(snapshot.read_up_to), Some(snapshot.at));
            self.snapshots.pop_front();
        }
        let ring_bound = |(i, &read): (usize, &u64)| {
            let passed = self.snapshots.iter().rev().find(|s| s.heads[i] <= read);
            let passed = passed.map(|s| s.read_up_to).max(self.reached);
            let time = read_times.get(i).copied().filter(|&t| t > 0);
            passed.max(time)
        };
        let bound = read.iter().enumerate().map(ring_bound).min().flatten();
        self.mark = self.mark.max(bound);
        self.mark
    }

    /// How long ago the rings were as the watermark says: how far behind
    /// the recording a round written up to it is.
    pub fn delay(&self) -> Option<std::time::Duration> {
        self.reached_at.map(|at| at.elapsed())
    }

    /// Snapshots waiting: how far behind the rings the merger reads.
    pub fn behind(&self) -> usize {
        self.snapshots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::Watermark;

    #[test]
    fn none_until_a_snapshot_is_read_past() {
        let mut watermark = Watermark::default();
        assert_eq!(watermark.advance(&[0, 0], &[]), None);
        watermark.note(100, vec![64, 0]);
        assert_eq!(
            watermark.advance(&[32, 0], &[]),
            None,
            "ring 0 not read to 64"
        );
        assert_eq!(watermark.advance(&[64, 0], &[]), Some(100));
    }

    #[test]
    fn a_quiet_ring_does_not_hold_it_back() {
        let mut watermark = Watermark::default();
        // Ring 1 never moves: its head is always read.
        for (time, head) in [(100, 64), (200, 128), (300, 4096)] {
            watermark.note(time, vec![head, 8]);
        }
        assert_eq!(watermark.advance(&[128, 8], &[]), Some(200));
        assert_eq!(watermark.advance(&[4096, 8], &[]), Some(300));
        assert_eq!(watermark.behind(), 0);
    }

    #[test]
    fn a_lagging_ring_holds_it_at_its_last_covered_snapshot() {
        let mut watermark = Watermark::default();
        watermark.note(100, vec![64, 64]);
        watermark.note(200, vec![128, 128]);
        watermark.note(300, vec![192, 192]);
        assert_eq!(
            watermark.advance(&[192, 100], &[]),
            Some(100),
            "ring 1 is read to 100 only"
        );
        assert_eq!(watermark.behind(), 2);
        assert_eq!(watermark.advance(&[192, 192], &[]), Some(300));
    }

    #[test]
    fn a_busy_ring_read_behind_its_snapshots_bounds_it_by_its_read_time() {
        let mut watermark = Watermark::default();
        // Ring 0 publishes faster than it is read: its snapshot heads stay
        // ahead of what was read; ring 1 (quiet) is always read.
        watermark.note(100, vec![1000, 8]);
        watermark.note(200, vec![2000, 8]);
        assert_eq!(watermark.advance(&[500, 8], &[0]), None, "ring 0 unbounded");
        assert_eq!(watermark.advance(&[900, 8], &[150]), Some(150));
        assert_eq!(watermark.advance(&[1500, 8], &[180]), Some(180));
        // Read past the first snapshot's head: its time if later.
        assert_eq!(
            watermark.advance(&[1600, 8], &[90]),
            Some(180),
            "never back"
        );
        assert_eq!(watermark.advance(&[2000, 8], &[190]), Some(200));
    }

    #[test]
    fn a_ring_read_to_a_later_time_waits_for_the_ring_read_least_far() {
        let mut watermark = Watermark::default();
        watermark.note(100, vec![1000, 1000]);
        assert_eq!(watermark.advance(&[600, 300], &[90, 40]), Some(40));
        assert_eq!(watermark.advance(&[600, 1000], &[90, 60]), Some(90));
    }

    #[test]
    fn it_never_goes_back() {
        let mut watermark = Watermark::default();
        watermark.note(100, vec![64]);
        assert_eq!(watermark.advance(&[64], &[]), Some(100));
        assert_eq!(watermark.advance(&[0], &[]), Some(100));
    }
}
