//! Looks at the rings' heads, and when what went out covers one.
//!
//! A ring's `data_head` is where the kernel has published whole records
//! up to, and a record's time is taken just before it is published. So a
//! record the output has not taken past a look's heads was published
//! after that look, later than every record read before it. A round may
//! therefore end (FINISHED_ROUND) once the output holds every ring up to
//! the heads of a look taken after the previous round ended: whatever
//! comes after is no earlier than anything before that previous end,
//! which is perf's round rule. It is perf record's own reasoning: its
//! rounds are its passes over the rings, each read up to the heads it
//! saw.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// One look at the rings.
struct Look {
    /// Its number, in the order taken.
    seq: u64,
    /// Each ring's head.
    heads: Vec<u64>,
    /// When it was taken.
    at: Instant,
}

/// The looks not yet covered by what went out, oldest first.
#[derive(Default)]
pub struct Looks {
    pending: VecDeque<Look>,
    /// Looks taken so far.
    taken: u64,
    /// The first look that may end the next round: one taken after the
    /// last round ended.
    round_from: u64,
    /// When the latest look covered was taken.
    covered_at: Option<Instant>,
    /// That look's heads.
    covered_heads: Vec<u64>,
}

impl Looks {
    /// A look at the rings: each one's head.
    pub fn look(&mut self, heads: Vec<u64>) {
        self.pending.push_back(Look {
            seq: self.taken,
            heads,
            at: Instant::now(),
        });
        self.taken += 1;
    }

    /// The output now holds each ring up to `read` (ring positions, in the
    /// order of the heads): drops the looks that covers, and if one of
    /// them may end a round, says how long ago it was taken.
    pub fn covered(&mut self, read: &[u64]) -> Option<Duration> {
        let covers = |look: &Look| look.heads.iter().zip(read).all(|(head, read)| head <= read);
        let mut newest = None;
        while self.pending.front().is_some_and(covers) {
            newest = self.pending.pop_front();
        }
        let newest = newest?;
        self.covered_at = Some(newest.at);
        self.covered_heads = newest.heads;
        (newest.seq >= self.round_from).then(|| newest.at.elapsed())
    }

    /// The heads of the latest look covered: every record published
    /// before it is out. (It may be older than the latest look taken.)
    pub fn covered_heads(&self) -> &[u64] {
        &self.covered_heads
    }

    /// A round ended: the next one needs a look taken from now on.
    pub fn round_ended(&mut self) {
        self.round_from = self.taken;
    }

    /// How long ago the rings were as the output now has them.
    pub fn delay(&self) -> Option<Duration> {
        self.covered_at.map(|at| at.elapsed())
    }

    /// The heads of the looks waiting: how many rings each has.
    pub fn rings(&self) -> Option<usize> {
        self.pending.front().map(|look| look.heads.len())
    }
}

#[cfg(test)]
mod tests {
    use super::Looks;

    #[test]
    fn a_look_is_covered_once_every_ring_is_read_past_its_head() {
        let mut looks = Looks::default();
        looks.look(vec![64, 8]);
        assert!(looks.covered(&[32, 8]).is_none(), "ring 0 not read to 64");
        assert!(looks.covered(&[64, 8]).is_some());
    }

    #[test]
    fn a_round_needs_a_look_taken_after_the_last_one_ended() {
        let mut looks = Looks::default();
        looks.look(vec![64]);
        looks.look(vec![128]);
        assert!(looks.covered(&[64]).is_some());
        looks.round_ended();
        // The look at 128 was taken before the round ended.
        assert!(looks.covered(&[128]).is_none());
        looks.look(vec![192]);
        assert!(looks.covered(&[160]).is_none());
        assert!(looks.covered(&[192]).is_some());
    }

    #[test]
    fn a_quiet_ring_never_holds_a_look_back() {
        let mut looks = Looks::default();
        for head in [64, 128, 4096] {
            looks.look(vec![head, 8]);
        }
        assert!(looks.covered(&[4096, 8]).is_some());
        assert_eq!(looks.rings(), None, "all covered");
    }
}
