//! `--max-size`: the recording stops cleanly once the rings have produced
//! that many bytes, as perf stops once it has written them. The rings'
//! `data_head` counters (read from their mapped control pages, no
//! syscall) count every byte the shards hold or will, so the check costs
//! nothing a writer notices; the coordinator looks every
//! [`LIMIT_TICK_MS`] while a limit is set.

use super::Recording;

/// How often the coordinator looks while a size limit is set: at most
/// this long a rate past the limit.
pub(super) const LIMIT_TICK_MS: u16 = 20;

impl Recording<'_> {
    /// Whether the recording has reached `--max-size`; says so as perf
    /// does.
    pub(super) fn size_limit_reached(&self) -> Option<u64> {
        let limit = self.max_size?;
        if self.produced() + self.synth_bytes < limit {
            return None;
        }
        self.say(&format!(
            "[ shardrec record: size limit reached ({} KB), stopping ]",
            limit / 1024
        ));
        Some(limit)
    }
}
