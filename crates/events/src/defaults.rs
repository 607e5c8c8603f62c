//! perf's default event and the changes perf makes to an event the kernel
//! refused for good (`evsel__new_cycles`, `evsel__fallback`), with the
//! names perf gives them.

use shardrec_sys::{abi, Attr};

use super::{modifiers, EventSpec};

/// `CAP_SYS_ADMIN` and `CAP_PERFMON`, either of which lets perf profile
/// the kernel whatever `perf_event_paranoid` says.
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;

impl EventSpec {
    /// perf's default event on this machine: see [`EventSpec::default_cycles`].
    pub fn default_event(cpu_vendor: &str) -> EventSpec {
        EventSpec::default_cycles(cpu_vendor, can_profile_kernel())
    }

    /// perf 6.1's default event (`evsel__new_cycles`): cycles at the highest
    /// precise level the PMU has, named `cycles` (its precise level is not
    /// in the name), falling back to cpu-clock without a PMU. A user who
    /// may not profile the kernel gets user space only from the start
    /// (`cycles:u`, `exclude_kernel` without `exclude_hv`). Like every event
    /// it leaves guests out, except on AMD (`cpu_vendor` as cpuid names
    /// it), where precise cycles are sampled through IBS, which cannot
    /// filter guests: perf's x86 `arch_evsel__fixup_new_cycles` clears
    /// `exclude_guest` there, and the cpu-clock fallback keeps it.
    pub fn default_cycles(cpu_vendor: &str, kernel: bool) -> EventSpec {
        let name = if kernel { "cycles" } else { "cycles:u" };
        let mut spec = EventSpec::new(
            name.into(),
            abi::PERF_TYPE_HARDWARE,
            abi::PERF_COUNT_HW_CPU_CYCLES as u64,
        );
        spec.modifiers.exclude_kernel = !kernel;
        spec.modifiers.exclude_guest = cpu_vendor != "AuthenticAMD";
        spec.modifiers.precise_max = true;
        spec
    }

    /// perf's fallback for a user whom `perf_event_paranoid` (above 1)
    /// keeps out of the kernel: an event that counted the kernel counts
    /// user space only, renamed as perf renames it (`cpu-clock:u`; a name
    /// that already has a `:` or `/` just gets `u`).
    pub fn fall_back_to_user_space(&mut self) {
        self.changing("perf_event_paranoid keeps the kernel out, so user space only, as in perf");
        self.modifiers.exclude_kernel = true;
        self.modifiers.exclude_hv = true;
        let separator = if self.name.contains([':', '/']) {
            ""
        } else {
            ":"
        };
        self.name = format!("{}{separator}u", self.name);
    }

    /// perf's fallback for cycles on a machine without a PMU: cpu-clock,
    /// with the same attr otherwise (a precise level too, which cpu-clock
    /// ignores unless it also asks for a branch stack). perf drops the
    /// name, and makes the new one from the attr: `cpu-clock:pppH` for the
    /// default event, but `cpu-clock:ppp` on AMD, which counts in guests.
    pub fn fall_back_to_cpu_clock(&mut self, attr: &Attr) -> bool {
        let cycles = self.type_ == abi::PERF_TYPE_HARDWARE
            && self.config() == abi::PERF_COUNT_HW_CPU_CYCLES as u64;
        if cycles {
            self.changing("no hardware PMU here, so cpu-clock, as perf falls back");
            self.type_ = abi::PERF_TYPE_SOFTWARE;
            self.configs.config = abi::PERF_COUNT_SW_CPU_CLOCK as u64;
            self.name = format!("cpu-clock{}", modifiers::suffix_of(attr));
        }
        cycles
    }
}

/// perf's `perf_event_can_profile_kernel`: `CAP_SYS_ADMIN` or `CAP_PERFMON`
/// in the effective set, or `perf_event_paranoid` at most 1 (an unreadable
/// setting counts as the strictest).
fn can_profile_kernel() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let capable = effective_caps(&status)
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN | 1 << CAP_PERFMON) != 0);
    capable || shardrec_sys::sysctl::perf_event_paranoid().is_some_and(|level| level <= 1)
}

/// The `CapEff:` mask of a `/proc/PID/status`.
fn effective_caps(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(line.trim(), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardrec_sys::Flag;

    #[test]
    fn default_event_leaves_guests_out_except_on_amd() {
        let intel = EventSpec::default_cycles("GenuineIntel", true);
        assert!(intel.modifiers.exclude_guest && intel.modifiers.precise_max);
        let amd = EventSpec::default_cycles("AuthenticAMD", true);
        assert!(!amd.modifiers.exclude_guest && amd.modifiers.precise_max);
        assert!(EventSpec::default_cycles("", true).modifiers.exclude_guest);
        assert_eq!(intel.name, "cycles");
        assert!(!intel.modifiers.exclude_kernel);
    }

    #[test]
    fn default_event_without_the_kernel_counts_user_space() {
        let user = EventSpec::default_cycles("GenuineIntel", false);
        assert_eq!(user.name, "cycles:u");
        let m = user.modifiers;
        assert!(m.exclude_kernel && !m.exclude_hv && !m.exclude_user);
    }

    /// The default event's attr as the precise tries leave it (level 3).
    fn tried(spec: &EventSpec) -> Attr {
        let mut attr = Attr::new(spec.type_, spec.config());
        attr.set_flag(Flag::ExcludeGuest, spec.modifiers.exclude_guest);
        attr.set_flag(Flag::ExcludeKernel, spec.modifiers.exclude_kernel);
        attr.set_precise_ip(3);
        attr
    }

    #[test]
    fn cpu_clock_fallback_is_named_from_the_attr() {
        let mut intel = EventSpec::default_cycles("GenuineIntel", true);
        assert!(intel.fall_back_to_cpu_clock(&tried(&intel)));
        assert_eq!(intel.name, "cpu-clock:pppH");
        assert_eq!(intel.config(), abi::PERF_COUNT_SW_CPU_CLOCK as u64);
        let mut amd = EventSpec::default_cycles("AuthenticAMD", true);
        assert!(amd.fall_back_to_cpu_clock(&tried(&amd)));
        assert_eq!(amd.name, "cpu-clock:ppp");
        let mut user = EventSpec::default_cycles("GenuineIntel", false);
        let attr = tried(&user);
        assert!(user.fall_back_to_cpu_clock(&attr));
        assert_eq!(user.name, "cpu-clock:uhpppH");
        assert!(!user.fall_back_to_cpu_clock(&attr));
    }

    #[test]
    fn capabilities_come_from_the_effective_set() {
        let status = "Name:\tx\nCapPrm:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(effective_caps(status), Some(0x1ff_ffff_ffff));
        assert_eq!(effective_caps("Name:\tx\n"), None);
    }
}
