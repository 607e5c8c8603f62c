//! perf's answer to EINVAL from an older kernel (or a PMU that refuses a
//! field): switch off, one at a time and for every later event too, the
//! newest attr features the event uses, and try again.

use shardrec_sys::{abi, Attr, Flag};

/// A feature perf switches off, with its check, its removal and perf's words.
struct Feature {
    /// What `-vv` says (perf's words).
    message: &'static str,
    /// Whether the attr uses it.
    used: fn(&Attr) -> bool,
    /// Takes it out of an attr.
    remove: fn(&mut Attr),
    /// The merge cannot do without it.
    needed: bool,
}

const fn sample_bit(bit: u32) -> u64 {
    bit as u64
}

fn has_sample(attr: &Attr, bit: u64) -> bool {
    attr.sample_type() & bit != 0
}

fn drop_sample(attr: &mut Attr, bit: u64) {
    attr.set_sample_type(attr.sample_type() & !bit);
}

const LOST: u64 = abi::PERF_FORMAT_LOST as u64;
const WEIGHT_STRUCT: u64 = sample_bit(abi::PERF_SAMPLE_WEIGHT_STRUCT);
const CODE_PAGE: u64 = sample_bit(abi::PERF_SAMPLE_CODE_PAGE_SIZE);
const DATA_PAGE: u64 = sample_bit(abi::PERF_SAMPLE_DATA_PAGE_SIZE);
const HW_INDEX: u64 = abi::PERF_SAMPLE_BRANCH_HW_INDEX as u64;
const LBR_FLAGS: u64 =
    (abi::PERF_SAMPLE_BRANCH_NO_CYCLES | abi::PERF_SAMPLE_BRANCH_NO_FLAGS) as u64;

/// In perf 6.1's order (`evsel__detect_missing_features`).
const FEATURES: &[Feature] = &[
    Feature {
        message: "switching off PERF_FORMAT_LOST support",
        used: |a| a.read_format() & LOST != 0,
        remove: |a| a.set_read_format(a.read_format() & !LOST),
        needed: false,
    },
    Feature {
        message: "switching off weight struct support",
        used: |a| has_sample(a, WEIGHT_STRUCT),
        remove: |a| {
            drop_sample(a, WEIGHT_STRUCT);
            a.set_sample_type(a.sample_type() | sample_bit(abi::PERF_SAMPLE_WEIGHT));
        },
        needed: false,
    },
    Feature {
        message: "switching off code page size support",
        used: |a| has_sample(a, CODE_PAGE),
        remove: |a| drop_sample(a, CODE_PAGE),
        needed: false,
    },
    Feature {
        message: "switching off data page size support",
        used: |a| has_sample(a, DATA_PAGE),
        remove: |a| drop_sample(a, DATA_PAGE),
        needed: false,
    },
    Feature {
        message: "switching off cgroup sampling",
        used: |a| a.flag(Flag::Cgroup),
        remove: |a| a.set_flag(Flag::Cgroup, false),
        needed: false,
    },
    Feature {
        message: "switching off branch HW index support",
        used: |a| a.branch_sample_type() & HW_INDEX != 0,
        remove: |a| a.set_branch_sample_type(a.branch_sample_type() & !HW_INDEX),
        needed: false,
    },
    Feature {
        message: "switching off use_clockid",
        used: |a| a.flag(Flag::UseClockid),
        remove: Attr::clear_clock,
        needed: false,
    },
    Feature {
        message: "switching off mmap2",
        used: |a| a.flag(Flag::Mmap2),
        // Build ids come in MMAP2 records only.
        remove: |a| {
            a.set_flag(Flag::Mmap2, false);
            a.set_flag(Flag::BuildId, false);
        },
        needed: false,
    },
    Feature {
        message: "switching off exclude_guest, exclude_host",
        used: |a| a.flag(Flag::ExcludeGuest) || a.flag(Flag::ExcludeHost),
        remove: |a| {
            a.set_flag(Flag::ExcludeGuest, false);
            a.set_flag(Flag::ExcludeHost, false);
        },
        needed: false,
    },
    Feature {
        message: "switching off sample_id_all",
        used: |a| a.flag(Flag::SampleIdAll),
        remove: |a| a.set_flag(Flag::SampleIdAll, false),
        needed: true,
    },
    Feature {
        message: "switching off branch sample type no (cycles/flags)",
        used: |a| a.branch_sample_type() & LBR_FLAGS != 0,
        remove: |a| a.set_branch_sample_type(a.branch_sample_type() & !LBR_FLAGS),
        needed: false,
    },
];

/// The features switched off so far in this recording.
#[derive(Default)]
pub struct MissingFeatures {
    off: Vec<usize>,
}

impl MissingFeatures {
    /// Takes out of `attr` what was switched off for earlier events.
    pub fn apply(&self, attr: &mut Attr) {
        for &i in &self.off {
            (FEATURES[i].remove)(attr);
        }
    }

    /// Switches off the next feature `attr` uses; false when none is left.
    pub fn switch_off_next(&mut self, attr: &mut Attr, verbose: u8) -> bool {
        let next = FEATURES
            .iter()
            .enumerate()
            .find(|(i, f)| !self.off.contains(i) && (f.used)(attr));
        let Some((i, feature)) = next else {
            return false;
        };
        if verbose >= 2 {
            eprintln!("{}", feature.message);
        }
        self.off.push(i);
        (feature.remove)(attr);
        true
    }

    /// Whether something the merge needs (every record's sample_id
    /// trailer) was switched off.
    pub fn lost_what_the_merge_needs(&self) -> bool {
        self.off.iter().any(|&i| FEATURES[i].needed)
    }
}
