//! When the live merger writes a round.
//!
//! A stream's reader waits for each round, so a stream's rounds come as
//! data flows. A file is read by no one until the recording stops, so
//! unless a storm fills the rings, its rounds come as perf record's passes
//! do: when a ring needs draining.
//! perf reads its rings at their watermark (half of each), and writes
//! nothing while a 3 s workload at 1,000 samples a second runs on 16 CPUs;
//! the merger wrote a round a second there, and those rounds were most of
//! shardrec's cost above perf's (bench/README.md, the tenth step).

use std::time::{Duration, Instant};

use shardrec_merge::live::round_aim;

/// How often a stream's round is written while data flows.
/// What a round leaves behind is what the stop still has to merge:
/// in alternating runs on a 2-vCPU VM, 50 ms rounds against 100 ms took
/// the syscall storm's last round from 0.07 s to 0.03-0.04 s and the
/// DWARF storm's from 0.13-0.16 s to 0.06-0.09 s, for the same CPU.
const STREAM_ROUND: Duration = Duration::from_millis(50);

/// The longest wait between two looks at the rings' heads (a look reads
/// their control pages, nothing more).
const LONGEST_LOOK: Duration = Duration::from_millis(1000);

const SHORTEST_WAIT: Duration = Duration::from_millis(2);

/// Rings that have not grown for this long are quiet: not ones a look
/// soon after another (a checkpoint's) sees still. A file's rings holding
/// something are looked at at least this often, so what a workload wrote
/// last is in the output (and its checkpoint) within about a second of
/// its end.
const QUIET_AFTER: Duration = Duration::from_millis(500);

/// Rings that reach a round's aim within this long of the last round
/// are written at the aim, into a file too.
const FAST: Duration = Duration::from_secs(1);

/// A file's round comes once a ring holds this share of itself past the
/// last round: well short of half, where its writer spills what the
/// merger did not take (perf reads at half, and loses what comes past the
/// whole). A stream's round comes before any ring holds it.
const RING_FILL_SHARE: u64 = 4;

/// What to do at a look at the rings.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Look {
    /// Whether to write a round now.
    pub(super) round: bool,
    /// How long to wait for the next look.
    pub(super) wait: Duration,
}

/// When rounds come, from the rings' heads at each look.
///
/// - A stream's: after every wait, which lasts until the rings have about
///   a round's aim more ([`round_aim`]: more with more busy rings), or one
///   of them may hold [`RING_FILL_SHARE`] of itself, at the rate they grew
///   since the last look, and at most [`STREAM_ROUND`].
/// - A file's: once the rings hold the aim, if they reached it within
///   [`FAST`] of the last round (a storm); slower, once a ring holds [`RING_FILL_SHARE`] of itself past
///   the last round, or once they all went quiet holding something. A
///   recording killed whole loses at most what its rings held (perf's
///   file holds nothing readable then), and a workload's last records are
///   in the output a look after it ended.
///
/// Rings gone quiet are looked at less and less often: a pause in the
/// workload (an exec between two parts of it) ends soon after it did.
pub(super) struct Pace {
    /// Each ring's data bytes.
    sizes: Vec<u64>,
    stream: bool,
    /// The rings' heads at the last look (none before the first), and
    /// when that was.
    heads: Option<Vec<u64>>,
    looked: Instant,
    wait: Duration,
    /// The rings' heads at the last round, and when that was.
    rounded: Vec<u64>,
    rounded_at: Instant,
    /// When a ring last grew.
    grew: Instant,
}

impl Pace {
    /// Rounds for rings of `sizes` bytes, into a stream or a file.
    pub(super) fn new(sizes: Vec<u64>, stream: bool) -> Pace {
        Pace {
            sizes,
            stream,
            heads: None,
            looked: Instant::now(),
            wait: SHORTEST_WAIT,
            rounded: Vec::new(),
            rounded_at: Instant::now(),
            grew: Instant::now(),
        }
    }

    /// What to do, the rings' heads now being `heads`.
    pub(super) fn look(&mut self, heads: Vec<u64>) -> Look {
        let took = self.looked.elapsed();
        let now = Instant::now();
        let Some(before) = self.heads.replace(heads.clone()) else {
            (self.rounded, self.rounded_at, self.grew) = (heads, now, now);
            (self.looked, self.wait) = (now, SHORTEST_WAIT);
            return Look {
                round: false,
                wait: self.wait,
            };
        };
        let grown = differences(&heads, &before);
        let quiet = grown.iter().all(|&g| g == 0);
        if !quiet {
            self.grew = now;
        }
        let pending = self.pending(&heads);
        self.wait = match (quiet, self.stream) {
            (true, _) => (self.wait * 2).min(LONGEST_LOOK),
            (false, true) => next_round(&grown, &self.sizes, took, STREAM_ROUND),
            (false, false) => next_round(&grown, &self.sizes, took, LONGEST_LOOK)
                .min(until_filled(&grown, &pending, &self.sizes, took)),
        };
        let fast = self.reached_aim_fast(&pending, now);
        let round = self.stream || fast || self.needs_draining(&pending, now);
        if round {
            (self.rounded, self.rounded_at) = (heads, now);
        } else if !self.stream && pending.iter().any(|&p| p > 0) {
            // The next look comes by the time the rings may have been
            // still long enough: a workload's last records are in the
            // output soon after it ends.
            let until_quiet = QUIET_AFTER.saturating_sub(now - self.grew);
            self.wait = self.wait.min(until_quiet.max(SHORTEST_WAIT));
        }
        self.looked = now;
        Look {
            round,
            wait: self.wait,
        }
    }

    /// Whether the rings, holding `pending` past the last round, reached a
    /// round's aim within [`FAST`] of it. A file's rounds then come at the
    /// aim, as a stream's do: in a DWARF storm, rounds at a quarter of
    /// 4 MiB rings (2 MiB, where the aim is 192 KiB) tripled the merger's
    /// CPU and lost 8k samples a run, the round's bytes no longer in the
    /// CPU's cache when they went out.
    fn reached_aim_fast(&self, pending: &[u64], now: Instant) -> bool {
        let aim = round_aim(pending.iter().filter(|&&p| p > 0).count());
        now - self.rounded_at <= FAST && pending.iter().sum::<u64>() >= aim
    }

    /// Whether a ring holding `pending` past the last round holds
    /// [`RING_FILL_SHARE`] of itself, or the rings went quiet holding
    /// something. Quiet is all of them: in a 64-vCPU guest on 2 CPUs a
    /// vCPU is often still for half a second, as an idle CPU sampling
    /// cycles is, and a round for each took as much as perf's thread.
    fn needs_draining(&self, pending: &[u64], now: Instant) -> bool {
        let mut rings = pending.iter().zip(&self.sizes);
        let filled = rings.any(|(p, size)| *p >= size / RING_FILL_SHARE);
        let quiet = now - self.grew >= QUIET_AFTER;
        filled || (quiet && pending.iter().any(|&p| p > 0))
    }

    /// What each ring holds past the last round.
    fn pending(&self, heads: &[u64]) -> Vec<u64> {
        differences(heads, &self.rounded)
    }
}

/// `now - before`, ring by ring.
fn differences(now: &[u64], before: &[u64]) -> Vec<u64> {
    now.iter().zip(before).map(|(n, b)| n - b).collect()
}

/// How long until the first ring, growing by `grown` in `took`, holds
/// [`RING_FILL_SHARE`] of itself past the last round, having `pending`
/// now: from [`SHORTEST_WAIT`] to [`LONGEST_LOOK`].
fn until_filled(grown: &[u64], pending: &[u64], sizes: &[u64], took: Duration) -> Duration {
    let rings = grown.iter().zip(pending).zip(sizes);
    rings
        .filter(|((g, _), _)| **g > 0)
        .map(|((g, p), size)| {
            let left = (size / RING_FILL_SHARE).saturating_sub(*p);
            took.mul_f64(left as f64 / *g as f64)
        })
        .fold(LONGEST_LOOK, Duration::min)
        .max(SHORTEST_WAIT)
}

/// How long to wait for the next round at the aim, the rings (of `sizes`
/// bytes) having grown by `grown` bytes each in `took`: so long that a
/// round reads about its aim and no ring fills past [`RING_FILL_SHARE`],
/// from [`SHORTEST_WAIT`] to `longest`.
fn next_round(grown: &[u64], sizes: &[u64], took: Duration, longest: Duration) -> Duration {
    let aim = round_aim(grown.iter().filter(|&&g| g > 0).count());
    let total: u64 = grown.iter().sum();
    let for_aim = took.mul_f64(aim as f64 / total.max(1) as f64);
    let for_fill = grown
        .iter()
        .zip(sizes)
        .filter(|(g, _)| **g > 0)
        .map(|(g, size)| took.mul_f64((size / RING_FILL_SHARE) as f64 / *g as f64));
    for_fill
        .fold(for_aim, Duration::min)
        .clamp(SHORTEST_WAIT, longest)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RING: u64 = 512 << 10;
    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_stream_waits_for_its_aim_up_to_its_round() {
        // 1 MiB in 100 ms in two rings: 128 KiB in 12.5 ms; 1 MiB a
        // second: 125 ms, capped.
        let grown = [512 << 10, 512 << 10, 0];
        let wait = next_round(&grown, &[RING; 3], SECOND / 10, STREAM_ROUND);
        assert_eq!(wait, Duration::from_micros(12500));
        let wait = next_round(&grown, &[RING; 3], SECOND, STREAM_ROUND);
        assert_eq!(wait, STREAM_ROUND);
    }

    #[test]
    fn no_stream_ring_fills_past_its_share() {
        // A 256 KiB ring fills a quarter of itself in 10 ms at 6.4 MB/s,
        // where the aim would wait 20 ms.
        let grown = [64 << 10, 0];
        let wait = next_round(&grown, &[256 << 10, RING], SECOND / 100, STREAM_ROUND);
        assert_eq!(wait, Duration::from_millis(10));
    }

    #[test]
    fn a_file_waits_until_its_first_ring_holds_its_share() {
        // 32 KiB a second: 128 KiB, a quarter, in 4 s, 3 s with 32 KiB
        // past the last round; a look a second at least.
        let wait = until_filled(&[32 << 10], &[32 << 10], &[RING], SECOND);
        assert_eq!(wait, LONGEST_LOOK);
        let wait = until_filled(
            &[32 << 10, 64 << 10],
            &[96 << 10, 0],
            &[RING; 2],
            SECOND / 4,
        );
        assert_eq!(wait, SECOND / 4);
    }

    /// `pace`, as if its last look and its rings' last growth were `ago`
    /// earlier.
    fn earlier(pace: &mut Pace, ago: Duration) {
        pace.looked -= ago;
        pace.rounded_at -= ago;
        pace.grew -= ago;
    }

    /// Looks a second apart at `heads`, each list one look: whether each
    /// wrote a round.
    fn rounds_a_second_apart(pace: &mut Pace, heads: &[&[u64]]) -> Vec<bool> {
        let looks = heads.iter().map(|heads| {
            earlier(pace, SECOND);
            pace.look(heads.to_vec()).round
        });
        looks.collect()
    }

    #[test]
    fn a_slow_file_is_written_only_when_a_ring_holds_its_share() {
        let mut pace = Pace::new(vec![RING; 2], false);
        let look = pace.look(vec![0, 0]);
        assert_eq!(
            look,
            Look {
                round: false,
                wait: SHORTEST_WAIT
            }
        );
        let heads: [&[u64]; 4] = [
            &[100 << 10, 4096],
            &[128 << 10, 8192],
            &[130 << 10, 12288],
            &[130 << 10, (128 << 10) + 12288],
        ];
        let rounds = rounds_a_second_apart(&mut pace, &heads);
        assert_eq!(rounds, [false, true, false, true]);
    }

    #[test]
    fn a_file_is_written_once_its_rings_go_quiet_holding_something() {
        let mut pace = Pace::new(vec![RING; 2], false);
        pace.look(vec![0, 0]);
        let heads: [&[u64]; 4] = [&[4096, 4096], &[4096, 8192], &[4096, 8192], &[4096, 8192]];
        let rounds = rounds_a_second_apart(&mut pace, &heads);
        assert_eq!(rounds, [false, false, true, false]);
        // Still, but not for long enough.
        let mut pace = Pace::new(vec![RING], false);
        pace.look(vec![0]);
        rounds_a_second_apart(&mut pace, &[&[4096]]);
        assert!(!pace.look(vec![4096]).round);
    }

    #[test]
    fn a_file_filled_fast_is_written_at_its_aim() {
        let mut pace = Pace::new(vec![RING; 2], false);
        pace.look(vec![0, 0]);
        earlier(&mut pace, SECOND / 100);
        // 128 KiB in 10 ms: the aim in a hundredth of a second.
        let look = pace.look(vec![64 << 10, 64 << 10]);
        assert!(look.round);
        assert!(look.wait <= SECOND / 50, "{look:?}");
    }

    #[test]
    fn a_stream_is_written_after_every_wait_but_the_first() {
        let mut pace = Pace::new(vec![RING], true);
        assert!(!pace.look(vec![0]).round);
        assert!(pace.look(vec![4096]).round);
        assert!(pace.look(vec![4096]).round);
    }

    #[test]
    fn rings_holding_something_are_looked_at_once_they_may_be_quiet() {
        let mut pace = Pace::new(vec![RING], false);
        pace.look(vec![0]);
        earlier(&mut pace, SECOND);
        let look = pace.look(vec![4096]);
        assert!(!look.round);
        assert!(look.wait <= QUIET_AFTER, "{look:?}");
        earlier(&mut pace, look.wait);
        assert!(pace.look(vec![4096]).round);
    }

    #[test]
    fn quiet_rings_are_looked_at_less_and_less_often() {
        let mut pace = Pace::new(vec![RING], false);
        assert_eq!(pace.look(vec![0]).wait, SHORTEST_WAIT);
        assert_eq!(pace.look(vec![0]).wait, SHORTEST_WAIT * 2);
        assert_eq!(pace.look(vec![0]).wait, SHORTEST_WAIT * 4);
    }
}
