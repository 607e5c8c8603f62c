//! The event names perf knows without asking the machine: hardware and
//! software events, and hardware cache events (`L1-dcache-load-misses`).

use shardrec_sys::abi;

/// perf's software event names.
pub const SOFTWARE: &[(&str, u32)] = &[
    ("cpu-clock", abi::PERF_COUNT_SW_CPU_CLOCK),
    ("task-clock", abi::PERF_COUNT_SW_TASK_CLOCK),
    ("page-faults", abi::PERF_COUNT_SW_PAGE_FAULTS),
    ("faults", abi::PERF_COUNT_SW_PAGE_FAULTS),
    ("minor-faults", abi::PERF_COUNT_SW_PAGE_FAULTS_MIN),
    ("major-faults", abi::PERF_COUNT_SW_PAGE_FAULTS_MAJ),
    ("context-switches", abi::PERF_COUNT_SW_CONTEXT_SWITCHES),
    ("cs", abi::PERF_COUNT_SW_CONTEXT_SWITCHES),
    ("cpu-migrations", abi::PERF_COUNT_SW_CPU_MIGRATIONS),
    ("migrations", abi::PERF_COUNT_SW_CPU_MIGRATIONS),
    ("alignment-faults", abi::PERF_COUNT_SW_ALIGNMENT_FAULTS),
    ("emulation-faults", abi::PERF_COUNT_SW_EMULATION_FAULTS),
    ("dummy", abi::PERF_COUNT_SW_DUMMY),
    ("bpf-output", abi::PERF_COUNT_SW_BPF_OUTPUT),
    ("cgroup-switches", abi::PERF_COUNT_SW_CGROUP_SWITCHES),
];

/// perf's hardware event names.
pub const HARDWARE: &[(&str, u32)] = &[
    ("cycles", abi::PERF_COUNT_HW_CPU_CYCLES),
    ("cpu-cycles", abi::PERF_COUNT_HW_CPU_CYCLES),
    ("instructions", abi::PERF_COUNT_HW_INSTRUCTIONS),
    ("cache-references", abi::PERF_COUNT_HW_CACHE_REFERENCES),
    ("cache-misses", abi::PERF_COUNT_HW_CACHE_MISSES),
    ("branches", abi::PERF_COUNT_HW_BRANCH_INSTRUCTIONS),
    (
        "branch-instructions",
        abi::PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
    ),
    ("branch-misses", abi::PERF_COUNT_HW_BRANCH_MISSES),
    ("bus-cycles", abi::PERF_COUNT_HW_BUS_CYCLES),
    (
        "stalled-cycles-frontend",
        abi::PERF_COUNT_HW_STALLED_CYCLES_FRONTEND,
    ),
    (
        "idle-cycles-frontend",
        abi::PERF_COUNT_HW_STALLED_CYCLES_FRONTEND,
    ),
    (
        "stalled-cycles-backend",
        abi::PERF_COUNT_HW_STALLED_CYCLES_BACKEND,
    ),
    (
        "idle-cycles-backend",
        abi::PERF_COUNT_HW_STALLED_CYCLES_BACKEND,
    ),
    ("ref-cycles", abi::PERF_COUNT_HW_REF_CPU_CYCLES),
];

/// Looks `name` up in a table.
pub fn lookup(table: &[(&str, u32)], name: &str) -> Option<u64> {
    table
        .iter()
        .find(|(known, _)| *known == name)
        .map(|&(_, config)| config as u64)
}

/// Cache spellings, in `PERF_COUNT_HW_CACHE_*` order, and which operations
/// each can count (bit per op: load, store, prefetch), as perf allows them.
const CACHES: &[(&[&str], u8)] = &[
    (&["L1-dcache", "l1-d", "l1d", "L1-data"], 0b111),
    (&["L1-icache", "l1-i", "l1i", "L1-instruction"], 0b101),
    (&["LLC", "L2"], 0b111),
    (&["dTLB", "d-tlb", "Data-TLB"], 0b111),
    (&["iTLB", "i-tlb", "Instruction-TLB"], 0b001),
    (&["branch", "branches", "bpu", "btb", "bpc"], 0b001),
    (&["node"], 0b111),
];

/// `PERF_COUNT_HW_CACHE_OP_*` spellings.
const OPS: &[&[&str]] = &[
    &["load", "loads", "read"],
    &["store", "stores", "write"],
    &[
        "prefetch",
        "prefetches",
        "speculative-read",
        "speculative-load",
    ],
];

/// `PERF_COUNT_HW_CACHE_RESULT_*` spellings.
const RESULTS: &[&[&str]] = &[&["refs", "Reference", "ops", "access"], &["misses", "miss"]];

/// The `PERF_TYPE_HW_CACHE` config of a cache event name (`cache[-op][-result]`,
/// op defaulting to load and result to access), or None if it is not one
/// perf accepts.
pub fn hw_cache(name: &str) -> Option<u64> {
    let (cache, ops, rest) = CACHES.iter().enumerate().find_map(|(i, (names, ops))| {
        names
            .iter()
            .find_map(|n| strip_word(name, n))
            .map(|rest| (i as u64, *ops, rest))
    })?;
    let (op, rest) = match find_word(OPS, rest) {
        Some((op, rest)) => (Some(op), rest),
        None => (None, rest),
    };
    let (result, rest) = match find_word(RESULTS, rest) {
        Some((result, rest)) => (Some(result), rest),
        None => (None, rest),
    };
    if !rest.is_empty() {
        return None;
    }
    let op = op.unwrap_or(0);
    if ops & (1 << op) == 0 {
        return None;
    }
    Some(cache | op << 8 | result.unwrap_or(0) << 16)
}

/// `text` without the leading word `word` (case-insensitive), if the word
/// ends there or at a `-`.
fn strip_word<'a>(text: &'a str, word: &str) -> Option<&'a str> {
    let head = text.get(..word.len())?;
    if !head.eq_ignore_ascii_case(word) {
        return None;
    }
    match &text[word.len()..] {
        "" => Some(""),
        rest => rest.strip_prefix('-'),
    }
}

/// The first spelling in `table` that `text` starts with (longest first,
/// so `speculative-read` is not read as an unknown `speculative`).
fn find_word<'a>(table: &[&[&str]], text: &'a str) -> Option<(u64, &'a str)> {
    let mut best: Option<(usize, u64, &str)> = None;
    for (i, names) in table.iter().enumerate() {
        for name in names.iter() {
            if let Some(rest) = strip_word(text, name) {
                if best.is_none_or(|(len, _, _)| name.len() > len) {
                    best = Some((name.len(), i as u64, rest));
                }
            }
        }
    }
    best.map(|(_, i, rest)| (i, rest))
}

/// Every known name, for suggestions.
pub fn all_names() -> impl Iterator<Item = &'static str> {
    SOFTWARE.iter().chain(HARDWARE).map(|(n, _)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_events_as_perf_spells_them() {
        assert_eq!(hw_cache("L1-dcache-load-misses"), Some(0x10000));
        assert_eq!(hw_cache("L1-dcache-loads"), Some(0));
        assert_eq!(hw_cache("LLC-loads"), Some(2));
        assert_eq!(hw_cache("LLC-store-misses"), Some(2 | 1 << 8 | 1 << 16));
        assert_eq!(hw_cache("dTLB-load-misses"), Some(3 | 1 << 16));
        assert_eq!(hw_cache("branch-load-misses"), Some(5 | 1 << 16));
        assert_eq!(hw_cache("L1-dcache-prefetches"), Some(2 << 8));
        assert_eq!(
            hw_cache("l1d-speculative-read-miss"),
            Some(2 << 8 | 1 << 16)
        );
        assert_eq!(hw_cache("node-loads"), Some(6));
        // iTLB cannot count stores; misspelt parts are not cache events.
        assert_eq!(hw_cache("iTLB-stores"), None);
        assert_eq!(hw_cache("LLC-lods"), None);
        assert_eq!(hw_cache("cycles"), None);
    }
}
