//! perf's answer to EINVAL from an older kernel (or a PMU that refuses a
//! field): go down the attr features in the order they were added to the
//! kernel and, at the first one the event uses, switch it off (for every
//! later event too) and try again, or give up, as perf 6.1 does for each
//! (`evsel__detect_missing_features`, as Debian's 6.1.187 has it).

use crate::say;
use shardrec_sys::{abi, Attr, Flag};

/// What perf does once it reaches a feature the refused attr uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    /// Switches it off for this event and every later one.
    SwitchOff,
    /// Switches it off for this event only: perf 6.1.187 remembers a
    /// missing guest/host exclusion per PMU, and finds an event's PMU only
    /// once that event was refused, so every later event tries it again.
    ThisEvent,
    /// Takes the refusal as final.
    GiveUp,
}

/// A feature perf switches off, with its check, its removal and perf's words.
struct Feature {
    /// What `-vv` says (perf's words).
    message: &'static str,
    /// Whether the attr uses it.
    used: fn(&Attr) -> bool,
    /// Takes it out of an attr.
    remove: fn(&mut Attr),
    answer: Answer,
    /// perf's words for the final refusal once this feature is off (it
    /// refuses even an event the kernel then accepts without the clock).
    refusal: Option<&'static str>,
    /// The merge cannot do without it.
    needed: bool,
}

impl Feature {
    const fn switch_off(
        message: &'static str,
        used: fn(&Attr) -> bool,
        remove: fn(&mut Attr),
    ) -> Feature {
        Feature {
            message,
            used,
            remove,
            answer: Answer::SwitchOff,
            refusal: None,
            needed: false,
        }
    }

    const fn give_up(
        message: &'static str,
        used: fn(&Attr) -> bool,
        refusal: Option<&'static str>,
    ) -> Feature {
        Feature {
            message,
            used,
            remove: |_| {},
            answer: Answer::GiveUp,
            refusal,
            needed: false,
        }
    }
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

/// In perf 6.1's order, without those shardrec's attrs never have
/// (`aux_output`; `ksymbol` and `bpf_event`, which only the VIP's side-band
/// event asks for) or that are not attr fields (`cloexec`): a try that
/// switches one of them off changes nothing in the attr.
const FEATURES: &[Feature] = &[
    Feature::switch_off(
        "switching off PERF_FORMAT_LOST support",
        |a| a.read_format() & LOST != 0,
        |a| a.set_read_format(a.read_format() & !LOST),
    ),
    Feature::switch_off(
        "switching off weight struct support",
        |a| has_sample(a, WEIGHT_STRUCT),
        |a| {
            drop_sample(a, WEIGHT_STRUCT);
            a.set_sample_type(a.sample_type() | sample_bit(abi::PERF_SAMPLE_WEIGHT));
        },
    ),
    Feature::give_up(
        "Kernel has no PERF_SAMPLE_CODE_PAGE_SIZE support, bailing out",
        |a| has_sample(a, CODE_PAGE),
        Some("Asking for the code page size isn't supported by this kernel."),
    ),
    Feature::give_up(
        "Kernel has no PERF_SAMPLE_DATA_PAGE_SIZE support, bailing out",
        |a| has_sample(a, DATA_PAGE),
        Some("Asking for the data page size isn't supported by this kernel."),
    ),
    Feature::give_up(
        "Kernel has no cgroup sampling support, bailing out",
        |a| a.flag(Flag::Cgroup),
        None,
    ),
    Feature::switch_off(
        "switching off branch HW index support",
        |a| a.branch_sample_type() & HW_INDEX != 0,
        |a| a.set_branch_sample_type(a.branch_sample_type() & !HW_INDEX),
    ),
    Feature::give_up(
        "switching off write_backward",
        |a| a.flag(Flag::WriteBackward),
        Some("Reading from overwrite event is not supported by this kernel."),
    ),
    // The clock asked for first gives way to CLOCK_MONOTONIC, then the
    // clock goes; either way perf refuses the recording after the try.
    Feature {
        refusal: Some("wrong clockid: this kernel does not know the clock given to -k."),
        ..Feature::switch_off(
            "switching off clockid",
            |a| a.flag(Flag::UseClockid),
            |a| a.set_clock(libc::CLOCK_MONOTONIC),
        )
    },
    Feature {
        refusal: Some("clockid feature not supported."),
        ..Feature::switch_off(
            "switching off use_clockid",
            |a| a.flag(Flag::UseClockid),
            Attr::clear_clock,
        )
    },
    Feature::switch_off(
        "switching off mmap2",
        |a| a.flag(Flag::Mmap2),
        // Build ids come in MMAP2 records only.
        |a| {
            a.set_flag(Flag::Mmap2, false);
            a.set_flag(Flag::BuildId, false);
        },
    ),
    Feature {
        answer: Answer::ThisEvent,
        ..Feature::switch_off(
            "switching off exclude_guest, exclude_host",
            |a| a.flag(Flag::ExcludeGuest) || a.flag(Flag::ExcludeHost),
            |a| {
                a.set_flag(Flag::ExcludeGuest, false);
                a.set_flag(Flag::ExcludeHost, false);
            },
        )
    },
    Feature {
        needed: true,
        ..Feature::switch_off(
            "switching off sample_id_all",
            |a| a.flag(Flag::SampleIdAll),
            |a| a.set_flag(Flag::SampleIdAll, false),
        )
    },
    Feature::switch_off(
        "switching off branch sample type no (cycles/flags)",
        |a| a.branch_sample_type() & LBR_FLAGS != 0,
        |a| a.set_branch_sample_type(a.branch_sample_type() & !LBR_FLAGS),
    ),
];

/// perf's words when the user's own `:G`/`:H` is what the PMU refuses.
const GUEST_OR_HOST_ASKED: &str = "PMU has no exclude_host/guest support, bailing out";

/// The features switched off so far in this recording.
#[derive(Default)]
pub struct MissingFeatures {
    off: Vec<usize>,
    /// Those switched off for one event only whose message was said.
    said: Vec<usize>,
    /// The feature perf gave up at, if it did.
    gave_up: Option<usize>,
}

impl MissingFeatures {
    /// Takes out of `attr` what was switched off for earlier events.
    pub fn apply(&self, attr: &mut Attr) {
        for &i in &self.off {
            (FEATURES[i].remove)(attr);
        }
    }

    /// Switches off the next feature `attr` uses; false when none is left
    /// or perf gives up there. `guest_or_host` says the user chose the
    /// event's guest and host exclusions (`:G`, `:H`): perf never drops them.
    pub fn switch_off_next(&mut self, attr: &mut Attr, guest_or_host: bool, verbose: u8) -> bool {
        let next = FEATURES
            .iter()
            .enumerate()
            .find(|(i, f)| !self.off.contains(i) && (f.used)(attr));
        let Some((i, feature)) = next else {
            return false;
        };
        let say = |message: &str| {
            if verbose >= 2 {
                say::detail(message);
            }
        };
        match feature.answer {
            Answer::GiveUp => {
                say(feature.message);
                self.gave_up = Some(i);
                return false;
            }
            Answer::ThisEvent if guest_or_host => {
                say(GUEST_OR_HOST_ASKED);
                return false;
            }
            Answer::ThisEvent if !self.said.contains(&i) => {
                say(feature.message);
                self.said.push(i);
            }
            Answer::ThisEvent => {}
            Answer::SwitchOff => {
                say(feature.message);
                self.off.push(i);
            }
        }
        (feature.remove)(attr);
        true
    }

    /// perf's words for a refusal after what was switched off or given up
    /// at, if perf has some: the last such feature's.
    pub fn refusal(&self) -> Option<&'static str> {
        self.off
            .iter()
            .chain(&self.gave_up)
            .rev()
            .find_map(|&i| FEATURES[i].refusal)
    }

    /// Whether perf refuses even an event the kernel accepted: it does once
    /// the clock asked for (`-k`) was switched off, as the recording would
    /// not be timed by it.
    pub fn refuses_success(&self) -> bool {
        self.off.iter().any(|&i| FEATURES[i].refusal.is_some())
    }

    /// Whether something the merge needs (every record's sample_id
    /// trailer) was switched off.
    pub fn lost_what_the_merge_needs(&self) -> bool {
        self.off.iter().any(|&i| FEATURES[i].needed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu_clock() -> Attr {
        let mut attr = Attr::software(abi::PERF_COUNT_SW_CPU_CLOCK as u64);
        attr.set_read_format(LOST);
        attr.set_flag(Flag::ExcludeGuest, true);
        attr.set_sample_id_all();
        attr
    }

    #[test]
    fn guest_exclusion_goes_for_the_refused_event_only() {
        let mut missing = MissingFeatures::default();
        let mut first = cpu_clock();
        assert!(missing.switch_off_next(&mut first, false, 0));
        assert_eq!(first.read_format(), 0);
        assert!(missing.switch_off_next(&mut first, false, 0));
        assert!(!first.flag(Flag::ExcludeGuest));
        let mut later = cpu_clock();
        missing.apply(&mut later);
        assert!(later.flag(Flag::ExcludeGuest) && later.read_format() == 0);
        assert!(missing.switch_off_next(&mut later, false, 0));
        assert!(!later.flag(Flag::ExcludeGuest));
    }

    #[test]
    fn an_asked_guest_exclusion_is_never_dropped() {
        let mut missing = MissingFeatures::default();
        let mut attr = cpu_clock();
        attr.set_read_format(0);
        assert!(!missing.switch_off_next(&mut attr, true, 0));
        assert!(attr.flag(Flag::ExcludeGuest));
    }

    #[test]
    fn page_sizes_and_overwrite_are_given_up_at() {
        let mut missing = MissingFeatures::default();
        let mut attr = cpu_clock();
        attr.set_read_format(0);
        attr.set_sample_type(CODE_PAGE);
        assert!(!missing.switch_off_next(&mut attr, false, 0));
        assert_eq!(attr.sample_type(), CODE_PAGE);
        assert_eq!(
            missing.refusal(),
            Some("Asking for the code page size isn't supported by this kernel.")
        );
        let mut missing = MissingFeatures::default();
        let mut attr = cpu_clock();
        attr.set_read_format(0);
        attr.set_flag(Flag::WriteBackward, true);
        assert!(!missing.switch_off_next(&mut attr, false, 0));
        assert!(!missing.refuses_success());
    }

    #[test]
    fn the_clock_goes_to_monotonic_then_away_and_the_event_is_refused() {
        let mut missing = MissingFeatures::default();
        let mut attr = cpu_clock();
        attr.set_read_format(0);
        attr.set_clock(libc::CLOCK_BOOTTIME);
        assert!(missing.switch_off_next(&mut attr, false, 0));
        assert!(attr.flag(Flag::UseClockid) && missing.refuses_success());
        assert_eq!(attr.clockid(), libc::CLOCK_MONOTONIC);
        assert!(missing.switch_off_next(&mut attr, false, 0));
        assert!(!attr.flag(Flag::UseClockid));
        assert_eq!(missing.refusal(), Some("clockid feature not supported."));
    }

    #[test]
    fn sample_id_all_is_what_the_merge_needs() {
        let mut missing = MissingFeatures::default();
        let mut attr = Attr::software(0);
        attr.set_sample_id_all();
        assert!(missing.switch_off_next(&mut attr, false, 0));
        assert!(missing.lost_what_the_merge_needs());
        assert!(!missing.switch_off_next(&mut attr, false, 0));
    }
}
