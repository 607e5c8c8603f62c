//! What shardrec's tests share. The kernel is the fixture, so most tests
//! need root; without it they skip with a note, but under CI (the `CI`
//! environment variable set) a skip would pass silently, so it fails.
//!
//! ```
//! if !shardrec_testkit::require_root() {
//!     return;
//! }
//! ```

/// Whether a test that needs `what` may run: true when `available`; else a
/// skip with a note, or a failure under CI.
pub fn require(available: bool, what: &str) -> bool {
    if available {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but this test needs {what}: it must run, not skip"
    );
    eprintln!("skipped: needs {what}");
    false
}

/// Whether the test may use perf events, tracefs and BPF: runs as root.
pub fn require_root() -> bool {
    require(is_root(), "root (perf events on every CPU, tracefs)")
}

/// Whether the effective uid is 0 (`/proc/self/status`: real, effective, ...).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let ids = status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))?
                .to_string();
            Some(ids.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// xorshift64*: deterministic noise for fuzzing tests, without a
/// dependency; the same seed gives the same sequence.
pub struct Noise(pub u64);

impl Noise {
    /// The next 64 bits (the seed must not be 0).
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

mod host;
pub mod records;

pub use host::{with_empty_bpffs, Nobody, Sysctl};
