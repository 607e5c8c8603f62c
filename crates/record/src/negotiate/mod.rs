//! Each event is tried once on the first CPU before the recording opens it
//! everywhere, and changed as perf changes it when the kernel refuses it:
//! a lower precise level for `:P`, cpu-clock for cycles without a PMU,
//! user space only under `perf_event_paranoid` 2. The attrs are printed
//! before each try with `-vv`, and the fallbacks said with `-v`, in perf's
//! words, so a perf user reads the same story.

mod missing;

use std::io;

use shardrec_sys::{abi, Attr, Flag, PerfEvent, Target};

use crate::plan::{Plan, Scope};
use crate::say;
use crate::RecordError;
use missing::MissingFeatures;
use shardrec_events::EventSpec;

/// Tries every event of the plan in order (members with their leader),
/// falling back as perf does; `attrs` and the plan's events are changed
/// in place. The tries are closed before returning.
pub fn negotiate(plan: &mut Plan, attrs: &mut [Attr], verbose: u8) -> Result<(), RecordError> {
    let target = probe_target(plan);
    let mut tries = Tries {
        target,
        verbose,
        missing: MissingFeatures::default(),
    };
    let mut opened: Vec<PerfEvent> = Vec::with_capacity(attrs.len());
    for (spec, attr) in plan.events.iter_mut().zip(attrs.iter_mut()) {
        let leader = spec.leader.map(|l| &opened[l]);
        let event = tries
            .open(spec, attr, leader)
            .map_err(|e| refusal(spec, attr, target, &tries.missing, e))?;
        check_filter(spec, &event)?;
        opened.push(event);
    }
    if tries.missing.lost_what_the_merge_needs() {
        return Err(RecordError::KernelLacks(
            "this kernel has no sample_id_all, which shardrec's merge needs".into(),
        ));
    }
    Ok(())
}

/// The kernel's last word on an event, with perf's explanation where perf
/// has one for it (`evsel__open_strerror`, in its order).
fn refusal(
    spec: &EventSpec,
    attr: &Attr,
    target: Target,
    missing: &MissingFeatures,
    error: io::Error,
) -> RecordError {
    let errno = error.raw_os_error();
    if let (Some(libc::EINVAL), Some(words)) = (errno, missing.refusal()) {
        return RecordError::KernelLacks(format!("{}: {words}", spec.name));
    }
    let reason = match errno {
        Some(libc::EOPNOTSUPP) => unsupported(attr),
        Some(libc::EINVAL) if target.pid != -1 => {
            Some("invalid in per-thread mode (a task recording), enable system wide with '-a'")
        }
        Some(libc::EINVAL) => amd_ibs_refusal(&shardrec_shard::host::cpu_vendor(), spec, attr),
        // Intel's load latency events where the PMU wants `mem-loads-aux`
        // first (Sapphire Rapids, hybrid cores).
        Some(libc::ENODATA) => Some(
            "Cannot collect data source with the load latency event alone. \
             Please add an auxiliary event in front of the load latency event.",
        ),
        _ => None,
    };
    match reason {
        Some(reason) => RecordError::Unsupported {
            name: spec.name.clone(),
            reason: reason.into(),
        },
        None => open_error(spec, target, error),
    }
}

/// What a PMU's EOPNOTSUPP means, by what the attr asks of it.
fn unsupported(attr: &Attr) -> Option<&'static str> {
    let branches = attr.sample_type() & abi::PERF_SAMPLE_BRANCH_STACK as u64 != 0;
    if branches {
        Some("PMU Hardware or event type doesn't support branch stack sampling")
    } else if attr.samples() {
        Some("PMU Hardware doesn't support sampling/overflow-interrupts. Try 'perf stat'")
    } else if attr.precise_ip() > 0 {
        Some("'precise' request may not be supported. Try removing 'p' modifier.")
    } else if cfg!(target_arch = "x86_64") && attr.type_() == abi::PERF_TYPE_HARDWARE {
        Some("No hardware sampling interrupt available.")
    } else {
        None
    }
}

/// perf's word on an event AMD's IBS refused (precise events are sampled
/// through it): it cannot leave the kernel out.
fn amd_ibs_refusal(cpu_vendor: &str, spec: &EventSpec, attr: &Attr) -> Option<&'static str> {
    let ibs = attr.precise_ip() > 0 || spec.is_on_amd_ibs();
    (cpu_vendor == "AuthenticAMD" && ibs && attr.flag(Flag::ExcludeKernel))
        .then_some("AMD IBS can't exclude kernel events.  Try running at a higher privilege level.")
}

/// A `--filter` is given to the kernel on the try, so a bad expression is
/// refused before anything is recorded.
fn check_filter(spec: &EventSpec, event: &PerfEvent) -> Result<(), RecordError> {
    match &spec.filter {
        Some(filter) => Ok(event
            .set_filter(filter)
            .map_err(|e| spec.filter_refused(e))?),
        None => Ok(()),
    }
}

/// The state of the tries: where, how loud, and what perf would have
/// switched off for every later event.
struct Tries {
    target: Target,
    verbose: u8,
    missing: MissingFeatures,
}

/// Opens one event on `target`, in its cgroup when it has one (`-G`, which
/// is system-wide: the target's CPU is used).
pub fn open_one(
    spec: &EventSpec,
    attr: &Attr,
    target: Target,
    leader: Option<&PerfEvent>,
) -> io::Result<PerfEvent> {
    match &spec.cgroup {
        Some(cgroup) => PerfEvent::open_in_cgroup(attr, cgroup.fd(), target.cpu as u32, leader),
        None => PerfEvent::open_in_group(attr, target, leader),
    }
}

/// Where the tries are made: the first CPU, for every task (system-wide),
/// the first followed thread, or this process (standing in for the
/// workload, which does not exist yet).
fn probe_target(plan: &Plan) -> Target {
    let cpu = plan.cpus[0] as i32;
    match &plan.scope {
        Scope::SystemWide => Target { pid: -1, cpu },
        // A followed process's main thread lives as long as it does; any
        // other of its threads may end before the probe (the lowest tid
        // is not the main thread once pids wrap).
        Scope::Threads(tids) => {
            let main = plan.pids.first().filter(|_| plan.pids_are_processes);
            Target {
                pid: *main.unwrap_or(&tids[0]),
                cpu,
            }
        }
        Scope::Workload => Target { pid: 0, cpu },
    }
}

impl Tries {
    fn open(
        &mut self,
        spec: &mut EventSpec,
        attr: &mut Attr,
        leader: Option<&PerfEvent>,
    ) -> io::Result<PerfEvent> {
        self.missing.apply(attr);
        let original_precise = attr.precise_ip();
        loop {
            if self.verbose >= 2 {
                say::detail(&attr.to_string());
            }
            let error = match open_one(spec, attr, self.target, leader) {
                // Without the clock asked for, perf refuses what opens.
                Ok(_) if self.missing.refuses_success() => {
                    return Err(io::Error::from_raw_os_error(libc::EINVAL))
                }
                Ok(event) => return Ok(event),
                Err(error) => error,
            };
            let errno = error.raw_os_error().unwrap_or(0);
            if self.verbose >= 2 {
                say::detail(&format!("sys_perf_event_open failed, error -{errno}"));
            }
            // `:P` asks for the best level the PMU has: each one down to 0,
            // then the original level again for the other fallbacks.
            if spec.modifiers.precise_max {
                if attr.precise_ip() > 0 {
                    attr.set_precise_ip(attr.precise_ip() - 1);
                    if self.verbose >= 2 {
                        say::detail(&format!(
                            "decreasing precise_ip by one ({})",
                            attr.precise_ip()
                        ));
                    }
                    continue;
                }
                attr.set_precise_ip(original_precise);
            }
            let guest_or_host = spec.modifiers.guest_or_host();
            if errno == libc::EINVAL
                && self
                    .missing
                    .switch_off_next(attr, guest_or_host, self.verbose)
            {
                continue;
            }
            if !fall_back(spec, attr, errno, self.verbose) {
                return Err(error);
            }
        }
    }
}

/// perf's fallbacks once the kernel refused for good (`evsel__fallback`):
/// false when none applies.
fn fall_back(spec: &mut EventSpec, attr: &mut Attr, errno: i32, verbose: u8) -> bool {
    let warn = |message: String| {
        if verbose >= 1 {
            say::detail(&format!("Warning:\n{message}"));
        }
    };
    // Only "no such event" falls back: a PMU that has cycles but cannot
    // sample them (EOPNOTSUPP) is an error in perf 6.1, not cpu-clock.
    let no_pmu = matches!(errno, libc::ENOENT | libc::ENXIO | libc::ENODEV);
    if no_pmu && spec.fall_back_to_cpu_clock(attr) {
        attr.set_event(abi::PERF_TYPE_SOFTWARE, spec.config());
        warn("The cycles event is not supported, trying to fall back to cpu-clock-ticks".into());
        return true;
    }
    let paranoid = shardrec_sys::sysctl::perf_event_paranoid().unwrap_or(2);
    let kernel_refused = errno == libc::EACCES
        && paranoid > 1
        && !attr.flag(Flag::ExcludeKernel)
        && !attr.flag(Flag::ExcludeUser);
    if kernel_refused {
        spec.fall_back_to_user_space();
        attr.set_flag(Flag::ExcludeKernel, true);
        attr.set_flag(Flag::ExcludeHv, true);
        warn(format!(
            "kernel.perf_event_paranoid={paranoid}, trying to fall back to excluding kernel and hypervisor  samples"
        ));
        return true;
    }
    false
}

/// The kernel's refusal of `event` on `target`, in words.
pub fn open_error(event: &EventSpec, target: Target, error: io::Error) -> RecordError {
    let (pid, cpu) = (target.pid, target.cpu.max(0) as u32);
    let name = event.name.clone();
    match error.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => RecordError::NoPermission {
            what: if pid == -1 {
                "CPU-wide events".to_string()
            } else {
                format!("process {pid}")
            },
            paranoid: shardrec_sys::sysctl::perf_event_paranoid().unwrap_or(-9),
        },
        Some(libc::ESRCH) => RecordError::NoSuchProcess(pid),
        Some(libc::E2BIG) => RecordError::KernelLacks(format!(
            "this kernel's perf_event_attr is smaller than the fields '{name}' needs (E2BIG)"
        )),
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV)
            if event.type_ == abi::PERF_TYPE_HARDWARE =>
        {
            RecordError::Unsupported {
                name,
                reason: "no hardware PMU counts it here (software events such as cpu-clock work)"
                    .into(),
            }
        }
        _ => RecordError::Open {
            name,
            cpu,
            source: error,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cycles(precise: u8) -> (EventSpec, Attr) {
        let spec = EventSpec::default_cycles("AuthenticAMD", true);
        let mut attr = Attr::new(spec.type_, spec.config());
        attr.set_precise_ip(precise);
        (spec, attr)
    }

    #[test]
    fn only_a_missing_pmu_falls_back_to_cpu_clock() {
        let (mut spec, mut attr) = cycles(0);
        assert!(!fall_back(&mut spec, &mut attr, libc::EOPNOTSUPP, 0));
        assert!(fall_back(&mut spec, &mut attr, libc::ENOENT, 0));
        assert_eq!(attr.type_(), abi::PERF_TYPE_SOFTWARE);
        assert_eq!(spec.name, "cpu-clock:HG");
    }

    #[test]
    fn eopnotsupp_is_explained_by_what_the_attr_asks() {
        let (_, mut attr) = cycles(0);
        assert_eq!(
            unsupported(&attr).is_some(),
            cfg!(target_arch = "x86_64"),
            "a counting hardware event: no sampling interrupt (x86)"
        );
        attr.set_precise_ip(1);
        assert!(unsupported(&attr).unwrap().contains("'precise'"));
        attr.set_frequency(4000);
        assert!(unsupported(&attr).unwrap().contains("sampling/overflow"));
        attr.set_sample_type(abi::PERF_SAMPLE_BRANCH_STACK as u64);
        assert!(unsupported(&attr).unwrap().contains("branch stack"));
    }

    #[test]
    fn amd_ibs_cannot_leave_the_kernel_out() {
        let (spec, mut attr) = cycles(2);
        assert_eq!(amd_ibs_refusal("AuthenticAMD", &spec, &attr), None);
        attr.set_exclude(false, true);
        assert!(amd_ibs_refusal("AuthenticAMD", &spec, &attr).is_some());
        assert_eq!(amd_ibs_refusal("GenuineIntel", &spec, &attr), None);
    }
}
