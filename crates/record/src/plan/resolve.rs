//! Making the plan: the options checked against this machine, the
//! events resolved, their attrs built and tried on the kernel, with
//! perf's fallbacks.

use shardrec_sys::cpu::{self, CpuList};
use shardrec_sys::sysctl::read_sysctl;
use shardrec_sys::{abi, Attr, PerfEvent, Target};

use super::{threads_of, Plan, Scope, FORMAT_ID, FORMAT_LOST};
use crate::config::{RecordConfig, Sampling};
use crate::RecordError;
use shardrec_events::{self as events, EventSpec};

impl Plan {
    /// Checks `config` against this machine.
    pub fn resolve(config: &RecordConfig) -> Result<Plan, RecordError> {
        shardrec_writer::check_kernel()?;
        let mut warnings = Vec::new();
        let mut events = resolve_events(config)?;
        if config.group {
            // perf's --group: every event in the first one's group.
            events.iter_mut().skip(1).for_each(|e| e.leader = Some(0));
        }
        let switch_events = resolve_switch_events(config)?;
        let (scope, pids) = resolve_scope(config, &mut warnings)?;
        if scope != Scope::SystemWide && events.iter().any(|e| e.cgroup.is_some()) {
            return Err(RecordError::Usage(
                "cgroup monitoring only available in system-wide mode (-a or -C)".into(),
            ));
        }
        // As perf: system-wide or with -D, a dummy event tracks the side-band
        // (from the moment it is opened, or from the workload's exec).
        let tracking = match scope == Scope::SystemWide || config.delay.is_some() {
            true => {
                events.push(EventSpec::tracking_dummy());
                events.len() - 1
            }
            false => 0,
        };
        check_off_cpu(config)?;
        if config.off_cpu {
            // Last, as perf adds it.
            events.push(EventSpec::off_cpu());
        }
        let cpus = resolve_cpus(config, &scope)?;
        let sampling = resolve_sampling(config, &mut warnings)?;
        let ring_pages = config.ring_pages.unwrap_or_else(default_ring_pages);
        let mut plan = Plan {
            events,
            cpus,
            scope,
            pids_are_processes: config.pids.is_some()
                || (config.tids.is_none() && config.uid.is_some()),
            pids,
            ring_pages,
            sampling,
            call_graph: config.call_graph,
            clockid: config.clockid,
            // perf: threads named by -t are recorded without their children.
            inherit: config.inherit && (config.pids.is_some() || config.tids.is_none()),
            all_in: config.all_in,
            lost_counts: kernel_counts_lost(),
            sample: config.sample.clone(),
            attrs: Vec::new(),
            tracking,
            switch_events,
            delay: config.delay,
            overwrite: config.overwrite,
            realtime: config.realtime,
            synthesis: config.synthesis.clone(),
            build_id_mmap: build_id_mmap(config.sample.build_id_mmap, &mut warnings),
            side_band_tracking: config.overwrite && !config.no_bpf_event,
            off_cpu_threshold_ms: config.off_cpu_thresh_ms.unwrap_or(0),
            warnings,
        };
        let mut attrs = shardrec_events::attrs::build(&plan.attr_plan());
        crate::negotiate::negotiate(&mut plan, &mut attrs, config.verbose)?;
        plan.attrs = attrs;
        plan.check_sample_filters()?;
        Ok(plan)
    }
}

/// `--off-cpu` needs the VIP, which loads its program, and the kernel's
/// BTF, where the program finds the fields it reads.
fn check_off_cpu(config: &RecordConfig) -> Result<(), RecordError> {
    if !config.off_cpu {
        return match config.off_cpu_thresh_ms {
            Some(_) => Err(RecordError::Usage(
                "--off-cpu-thresh needs --off-cpu".into(),
            )),
            None => Ok(()),
        };
    }
    if config.no_bpf_event {
        return Err(RecordError::Usage(
            "--off-cpu's program is loaded by the VIP, which --no-bpf-event turns off".into(),
        ));
    }
    if !std::path::Path::new(KERNEL_BTF).exists() {
        return Err(RecordError::KernelLacks(format!(
            "--off-cpu needs the kernel's BTF ({KERNEL_BTF}: a kernel built with CONFIG_DEBUG_INFO_BTF)"
        )));
    }
    Ok(())
}

/// Where the running kernel describes its types.
const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Whether MMAP2 records carry build ids: only when asked. The kernels
/// known (6.1, 6.18) set the build-id flag on the MMAP2 record they share
/// between events and leave it set for every event that sees the same
/// mapping after one with `attr.build_id`, in any recording on the host
/// (perf 6.1 aborts reading its own file). Learning whether a kernel does
/// needs an event with `attr.build_id` and a mapping, which marks the
/// records of whoever watches shardrec at that moment (a `perf record` of
/// shardrec aborted on the probe's own mapping): so the probe
/// (`shardrec_sys::build_id_probe`) runs only for `--buildid-mmap`, to
/// warn or refuse.
fn build_id_mmap(asked: Option<bool>, warnings: &mut Vec<String>) -> bool {
    use shardrec_sys::build_id_probe::{probe, BuildIdMmap};
    if asked != Some(true) {
        return false;
    }
    match probe().unwrap_or(BuildIdMmap::Missing) {
        BuildIdMmap::Leaks => {
            warnings.push("--buildid-mmap: this kernel also marks the map events of every other recording of the same mappings as carrying a build id (a kernel bug): a perf record running meanwhile reads them wrong (perf 6.1 aborts)".into());
            true
        }
        BuildIdMmap::Missing => {
            warnings.push("--buildid-mmap: this kernel has no build ids in map events (Linux 5.12): build ids are read from the files at the merge".into());
            false
        }
        BuildIdMmap::Works => true,
    }
}

fn resolve_events(config: &RecordConfig) -> Result<Vec<EventSpec>, RecordError> {
    let specs = events::resolve(&config.events, &config.cgroups)?;
    match specs.is_empty() {
        // perf's default; the first try falls back to cpu-clock without a PMU.
        true => Ok(vec![EventSpec::default_event(
            &shardrec_shard::host::cpu_vendor(),
        )]),
        false => Ok(specs),
    }
}

/// `--switch-output-event`'s events, which switch a `--switch-output`
/// recording (the command line implies one).
fn resolve_switch_events(config: &RecordConfig) -> Result<Vec<EventSpec>, RecordError> {
    if config.switch_output_events.is_empty() {
        return Ok(Vec::new());
    }
    if config.switch_output.is_none() {
        return Err(RecordError::Usage(
            "--switch-output-event switches the output: it needs --switch-output".into(),
        ));
    }
    crate::switch_output::event_trigger::resolve(&config.switch_output_events)
}

/// Kernels before 6.0 refuse a read_format bit they do not know (EINVAL).
/// The probe counts user space only, which any user may.
fn kernel_counts_lost() -> bool {
    let mut attr = Attr::software(abi::PERF_COUNT_SW_DUMMY as u64);
    attr.set_exclude(false, true);
    attr.set_read_format(FORMAT_ID | FORMAT_LOST);
    PerfEvent::open(&attr, Target { pid: 0, cpu: -1 }).is_ok()
}

fn resolve_scope(
    config: &RecordConfig,
    warnings: &mut Vec<String>,
) -> Result<(Scope, Vec<i32>), RecordError> {
    let user_processes;
    let threads = match (&config.pids, &config.tids, config.uid) {
        (Some(pids), _, _) => Some((pids, true, "PID/TID")),
        (None, Some(tids), _) => Some((tids, false, "PID/TID")),
        (None, None, Some(uid)) => {
            user_processes = processes_of_user(uid)?;
            Some((&user_processes, true, "UID"))
        }
        (None, None, None) => None,
    };
    if let Some((ids, processes, switch)) = threads {
        // perf lets the processes (or threads, or a user's processes) win
        // over -a and -C, with these words. A command given too only bounds
        // the recording: it runs, unrecorded, and the recording ends when it
        // does (or when the processes do).
        if config.all_cpus {
            warnings.push(format!("{switch} switch overriding SYSTEM"));
        } else if config.cpus.is_some() {
            warnings.push(format!("{switch} switch overriding CPU"));
        }
        if switch == "PID/TID" && config.uid.is_some() {
            warnings.push("PID/TID switch overriding UID".into());
        }
        let mut threads = Vec::new();
        for &id in ids {
            match (processes, switch) {
                // A user's process may have exited since /proc was listed.
                (true, "UID") => threads.extend(threads_of(id).unwrap_or_default()),
                (true, _) => threads.extend(threads_of(id)?),
                (false, _) => threads.push(existing_thread(id)?),
            }
        }
        threads.sort_unstable();
        threads.dedup();
        return Ok((Scope::Threads(threads), ids.clone()));
    }
    let system_wide = config.all_cpus || config.cpus.is_some() || config.command.is_empty();
    let tasks = if system_wide {
        Scope::SystemWide
    } else {
        Scope::Workload
    };
    Ok((tasks, Vec::new()))
}

/// The processes owned by `uid` (the owner of `/proc/PID`, as perf's
/// `thread_map__new_by_uid` reads it).
fn processes_of_user(uid: u32) -> Result<Vec<i32>, RecordError> {
    use std::os::unix::fs::MetadataExt;
    let dir = std::fs::read_dir("/proc").map_err(RecordError::system("reading /proc"))?;
    let pids: Vec<i32> = dir
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let pid = entry.file_name().to_str()?.parse().ok()?;
            (entry.metadata().ok()?.uid() == uid).then_some(pid)
        })
        .collect();
    match pids.is_empty() {
        true => Err(RecordError::Usage(format!(
            "-u: user {uid} has no process to record"
        ))),
        false => Ok(pids),
    }
}

/// `tid`, if it is a thread that exists (`/proc/TID` names threads too).
fn existing_thread(tid: i32) -> Result<i32, RecordError> {
    match std::path::Path::new(&format!("/proc/{tid}/stat")).exists() {
        true => Ok(tid),
        false => Err(RecordError::NoSuchThread(tid)),
    }
}

fn resolve_cpus(config: &RecordConfig, scope: &Scope) -> Result<Vec<u32>, RecordError> {
    let online = cpu::online().map_err(RecordError::system("reading the online CPUs"))?;
    // -C limits a system-wide recording only (-p overrides it, as in perf).
    let Some(cpus) = config.cpus.as_ref().filter(|_| *scope == Scope::SystemWide) else {
        return Ok(online);
    };
    if let Some(&cpu) = cpus.iter().find(|c| !online.contains(c)) {
        return Err(RecordError::CpuNotOnline {
            cpu,
            online: CpuList(&online).to_string(),
        });
    }
    Ok(cpus.clone())
}

fn resolve_sampling(
    config: &RecordConfig,
    warnings: &mut Vec<String>,
) -> Result<Sampling, RecordError> {
    let max = read_sysctl("perf_event_max_sample_rate").unwrap_or(100_000);
    match config.sampling {
        Sampling::MaxFrequency => Ok(Sampling::Frequency(max)),
        Sampling::Frequency(0) | Sampling::Period(0) => {
            Err(RecordError::Usage("-F and -c need a value above 0".into()))
        }
        Sampling::Frequency(hz) if hz > max && config.strict_freq => Err(RecordError::Usage(
            format!("-F {hz} is above kernel.perf_event_max_sample_rate ({max}) and --strict-freq is given"),
        )),
        Sampling::Frequency(hz) if hz > max => {
            warnings.push(format!(
                "-F {hz} is above kernel.perf_event_max_sample_rate; recording at {max} Hz"
            ));
            Ok(Sampling::Frequency(max))
        }
        other => Ok(other),
    }
}

/// 4 MiB rings when locked memory is no limit (root), so a ring absorbs a
/// write's latency at hundreds of MB/s; otherwise what perf picks: the
/// largest power of two that fits `perf_event_mlock_kb` with its header page.
fn default_ring_pages() -> usize {
    let page = shardrec_sys::ring::page_size();
    if nix::unistd::geteuid().is_root() {
        return (4 << 20) / page;
    }
    let mlock_kb = read_sysctl("perf_event_mlock_kb").unwrap_or(516) as usize;
    let pages = (mlock_kb * 1024 / page).saturating_sub(1).max(1);
    1 << pages.ilog2()
}
