//! The kernel's settings under `/proc/sys/kernel` that decide what a
//! recorder may do.

/// `kernel.perf_event_paranoid`, which may be negative (-1: no limits).
pub fn perf_event_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Reads a number from `/proc/sys/kernel/NAME`.
pub fn read_sysctl(name: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}
