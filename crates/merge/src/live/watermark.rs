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
    /// positions, in the order of the heads noted): the time of the latest
    /// snapshot whose every head has been read past. `None` until one has.
    pub fn advance(&mut self, read: &[u64]) -> Option<u64> {
        let covered = |s: &Snapshot| s.heads.iter().zip(read).all(|(head, read)| head <= read);
        while let Some(snapshot) = self.snapshots.front().filter(|s| covered(s)) {
            (self.reached, self.reached_at) = (Some(snapshot.read_up_to), Some(snapshot.at));
            self.snapshots.pop_front();
        }
        self.reached
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
        assert_eq!(watermark.advance(&[0, 0]), None);
        watermark.note(100, vec![64, 0]);
        assert_eq!(watermark.advance(&[32, 0]), None, "ring 0 not read to 64");
        assert_eq!(watermark.advance(&[64, 0]), Some(100));
    }

    #[test]
    fn a_quiet_ring_does_not_hold_it_back() {
        let mut watermark = Watermark::default();
        // Ring 1 never moves: its head is always read.
        for (time, head) in [(100, 64), (200, 128), (300, 4096)] {
            watermark.note(time, vec![head, 8]);
        }
        assert_eq!(watermark.advance(&[128, 8]), Some(200));
        assert_eq!(watermark.advance(&[4096, 8]), Some(300));
        assert_eq!(watermark.behind(), 0);
    }

    #[test]
    fn a_lagging_ring_holds_it_at_its_last_covered_snapshot() {
        let mut watermark = Watermark::default();
        watermark.note(100, vec![64, 64]);
        watermark.note(200, vec![128, 128]);
        watermark.note(300, vec![192, 192]);
        assert_eq!(
            watermark.advance(&[192, 100]),
            Some(100),
            "ring 1 is read to 100 only"
        );
        assert_eq!(watermark.behind(), 2);
        assert_eq!(watermark.advance(&[192, 192]), Some(300));
    }

    #[test]
    fn it_never_goes_back() {
        let mut watermark = Watermark::default();
        watermark.note(100, vec![64]);
        assert_eq!(watermark.advance(&[64]), Some(100));
        assert_eq!(watermark.advance(&[0]), Some(100));
    }
}
