//! Every term and operator of the filter language compiles to a program
//! the kernel's verifier accepts, with its counters map readable.

use shardrec_filter::SampleFilter;
use shardrec_vip::filters;

#[test]
fn every_term_and_operator_passes_the_verifier() {
    if !shardrec_testkit::require_root() {
        return;
    }
    let texts = [
        "ip < 0xffffffff00000000",
        "user",
        "kernel == 0",
        "pid == 1, tid != 2",
        "cpu <= 3, uid >= 0, gid > 0",
        "period < 100000, addr & 0xfff",
        "cgroup == /",
        "comm == bash, comm != kworker*",
        "(pid == 1 || cpu == 0, user || comm == sh*)",
    ];
    for text in texts {
        let filter = SampleFilter::parse(text).unwrap_or_else(|e| panic!("{e}"));
        let loaded = filters::load(&filter.compile(4)).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(loaded.counters.u64_at(0), 0);
        assert_eq!(loaded.counters.u64_at(4 * 64 - 8), 0);
    }
}
