//! Opening every event, one ring per CPU, before anything is enabled.

use std::io;

use shardrec_sys::{abi, cpu, Attr, PerfEvent, RingBuffer, Target};

use crate::negotiate::open_error;
use crate::plan::{Plan, Scope};
use crate::RecordError;
use shardrec_sys::sysctl::read_sysctl;

/// One open event.
pub struct OpenEvent {
    /// Index of its spec in the plan.
    pub spec: usize,
    /// The event.
    pub event: PerfEvent,
    /// The kernel's id, as found in its records.
    pub id: u64,
}

/// Everything recorded on one CPU: its events share the first one's ring
/// through `PERF_EVENT_IOC_SET_OUTPUT`.
pub struct CpuEvents {
    /// The CPU.
    pub cpu: u32,
    /// Its events; `events[0]` owns the ring.
    pub events: Vec<OpenEvent>,
    /// The coordinator's mapping of the ring. Writers map it again after
    /// fork (perf mappings are not inherited), sharing the same buffer.
    pub ring: RingBuffer,
}

impl CpuEvents {
    /// The event whose fd the ring belongs to.
    pub fn ring_owner(&self) -> &PerfEvent {
        &self.events[0].event
    }
}

/// The side-band events: a dummy per CPU that reports KSYMBOL and
/// BPF_EVENT records and wakes its reader for each one.
pub struct SideBandEvents {
    /// Their attr.
    pub attr: Attr,
    /// Their sample type (for the trailer layout).
    pub sample_type: u64,
    /// `(cpu, event, id)` per CPU.
    pub events: Vec<(u32, PerfEvent, u64)>,
    /// Each event's ring, mapped by the coordinator too: the kernel drops
    /// a ring when its last mapping goes, so without this one the records
    /// waiting in a ring would go with a VIP that dies.
    _rings: Vec<RingBuffer>,
}

impl SideBandEvents {
    /// The side-band event of `cpu`.
    pub fn on_cpu(&self, cpu: u32) -> Option<&PerfEvent> {
        self.events
            .iter()
            .find(|(c, _, _)| *c == cpu)
            .map(|(_, event, _)| event)
    }
}

/// Data pages of each side-band ring: records are few and the VIP wakes
/// for each one.
pub const SIDE_BAND_RING_PAGES: usize = 16;

/// Opens the side-band events on every online CPU, whichever CPUs are
/// recorded: a program's records land in the ring of the CPU that ran
/// bpf(2), and it may run (and be sampled) on a recorded CPU. Or says why
/// there are none: a kernel without KSYMBOL/BPF_EVENT (before 5.1), or no
/// permission for CPU-wide events (a workload recorded unprivileged).
pub fn open_side_band(plan: &Plan) -> Result<SideBandEvents, SideBandUnavailable> {
    let mut attr = Attr::software(abi::PERF_COUNT_SW_DUMMY as u64);
    attr.set_sample_type(shardrec_events::attrs::BASE_SAMPLE_TYPE);
    // The same read_format as the recorded events: perf checks that a
    // file's events agree on it.
    attr.set_read_format(match plan.lost_counts {
        true => crate::plan::FORMAT_ID | crate::plan::FORMAT_LOST,
        false => crate::plan::FORMAT_ID,
    });
    attr.set_sample_id_all();
    attr.set_bpf_tracking();
    if plan.side_band_tracking {
        shardrec_events::attrs::set_task_tracking(&mut attr, &plan.attr_plan());
    }
    attr.set_wakeup_watermark(1);
    if let Some(clockid) = plan.clockid {
        attr.set_clock(clockid);
    }
    let online = cpu::online().map_err(SideBandUnavailable::system("reading the online CPUs"))?;
    track_text_pokes(&mut attr, online.first().copied().unwrap_or(0));
    let events = cpu::on_each(
        &online,
        |&cpu| cpu,
        |&cpu| {
            let event =
                PerfEvent::open(&attr, Target::cpu(cpu)).map_err(|e| match e.raw_os_error() {
                    Some(libc::EINVAL) => SideBandUnavailable::NoBpfEvents(e),
                    Some(libc::EACCES) | Some(libc::EPERM) => SideBandUnavailable::NotPermitted(e),
                    _ => SideBandUnavailable::system(format!(
                        "opening the side-band event on CPU {cpu}"
                    ))(e),
                })?;
            let id = event.id().map_err(SideBandUnavailable::system(format!(
                "reading the id of the side-band event on CPU {cpu}"
            )))?;
            Ok((cpu, event, id))
        },
    )
    .into_iter()
    .collect::<Result<Vec<_>, SideBandUnavailable>>()?;
    // Mapped from here, one after another (see `open_all`).
    let rings = (events.iter())
        .map(|(cpu, event, _)| {
            RingBuffer::map(event, SIDE_BAND_RING_PAGES).map_err(SideBandUnavailable::system(
                format!("mapping the side-band ring of CPU {cpu}"),
            ))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SideBandEvents {
        sample_type: attr.sample_type(),
        attr,
        events,
        _rings: rings,
    })
}

/// Why there are no side-band events.
#[derive(Debug, thiserror::Error)]
pub enum SideBandUnavailable {
    /// The kernel refuses their bits (before 5.1).
    #[error("this kernel reports no BPF events (KSYMBOL, BPF_EVENT need 5.1)")]
    NoBpfEvents(#[source] std::io::Error),
    /// CPU-wide events are not allowed to this user.
    #[error("watching BPF programs needs CPU-wide events (root or CAP_PERFMON)")]
    NotPermitted(#[source] std::io::Error),
    /// Another system call failed: what was being done.
    #[error("{what}")]
    System {
        /// What was being done.
        what: String,
        /// The kernel's answer.
        source: std::io::Error,
    },
}

impl SideBandUnavailable {
    fn system(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SideBandUnavailable {
        let what = what.into();
        move |source| SideBandUnavailable::System { what, source }
    }
}

/// Kernel text changes (static keys, ftrace, BPF trampolines) as
/// TEXT_POKE records, where the kernel has them (5.9+; an older one
/// refuses the bit with EINVAL): with them and a copy of the kernel's text
/// at the start (`--kcore`), the text at any moment can be rebuilt.
fn track_text_pokes(attr: &mut Attr, cpu: u32) {
    attr.set_flag(shardrec_sys::Flag::TextPoke, true);
    let refused = PerfEvent::open(attr, Target::cpu(cpu))
        .err()
        .is_some_and(|e| e.raw_os_error() == Some(libc::EINVAL));
    if refused {
        attr.set_flag(shardrec_sys::Flag::TextPoke, false);
    }
}

/// Opens every event of the plan on every CPU, disabled, each CPU's from a
/// thread on that CPU. `workload` is the held child's pid when the plan
/// follows a workload. Returns the CPUs' events and the tasks they follow.
pub fn open_all(
    plan: &Plan,
    attrs: &[Attr],
    workload: Option<i32>,
) -> Result<(Vec<CpuEvents>, Vec<i32>), RecordError> {
    let mut tasks = match &plan.scope {
        Scope::SystemWide => vec![-1],
        Scope::Threads(tids) => tids.clone(),
        Scope::Workload => vec![workload.expect("a workload pid")],
    };
    // Each CPU's events opened on that CPU (no IPI to install them), then
    // their rings mapped one after another from here: mapped from the
    // per-CPU threads, which share one mm, each ring's allocation held
    // the mmap_lock while the other threads spun on it (7% of the
    // coordinator's start in a 64-vCPU guest), as perf maps its rings
    // from one thread.
    let opened = cpu::on_each(
        &plan.cpus,
        |&cpu| cpu,
        |&cpu| open_cpu(plan, attrs, &tasks, cpu),
    );
    let mut cpus = (plan.cpus.iter().zip(opened))
        .map(|(&cpu, opened)| joined_on_ring(plan, cpu, opened?))
        .collect::<Result<Vec<_>, _>>()?;
    if plan.pids_are_processes {
        follow_new_threads(plan, attrs, &mut cpus, &mut tasks)?;
    }
    Ok((cpus, tasks))
}

/// A thread that a followed process started after it was listed, but before
/// the events of the thread that started it were open, inherits nothing:
/// list the threads again until no new one appears, and open the events
/// for those found.
fn follow_new_threads(
    plan: &Plan,
    attrs: &[Attr],
    cpus: &mut [CpuEvents],
    tasks: &mut Vec<i32>,
) -> Result<(), RecordError> {
    for _ in 0..16 {
        let new: Vec<i32> = plan
            .pids
            .iter()
            .flat_map(|&pid| crate::plan::threads_of(pid).unwrap_or_default())
            .filter(|tid| !tasks.contains(tid))
            .collect();
        if new.is_empty() {
            break;
        }
        for cpu in cpus.iter_mut() {
            for (spec, event, target) in open_tasks(plan, attrs, &new, cpu.cpu)? {
                let event = joined(plan, &cpu.events[0].event, spec, event, target)?;
                cpu.events.push(event);
            }
        }
        tasks.extend(new);
    }
    Ok(())
}

/// The events of `cpu`, opened (on that CPU), its ring's owner first.
fn open_cpu(
    plan: &Plan,
    attrs: &[Attr],
    tasks: &[i32],
    cpu: u32,
) -> Result<Vec<(usize, PerfEvent, Target)>, RecordError> {
    let mut opened = open_tasks(plan, attrs, tasks, cpu)?;
    // Every listed thread may have ended before its events could be opened.
    if opened.is_empty() {
        let task = tasks.first().copied().unwrap_or(-1);
        return Err(RecordError::NoSuchProcess(task));
    }
    opened.extend(open_cpu_wide(plan, attrs, cpu)?);
    Ok(opened)
}

/// `cpu`'s `opened` events, the first one's ring mapped and the others
/// writing into it.
fn joined_on_ring(
    plan: &Plan,
    cpu: u32,
    opened: Vec<(usize, PerfEvent, Target)>,
) -> Result<CpuEvents, RecordError> {
    let mut opened = opened.into_iter();
    let (spec, owner, target) = opened.next().expect("open_cpu opens one at least");
    let ring = map_ring(plan, &owner, spec, cpu)?;
    let id = owner
        .id()
        .map_err(|e| open_error(&plan.events[spec], target, e))?;
    let mut events = vec![OpenEvent {
        spec,
        event: owner,
        id,
    }];
    for (spec, event, target) in opened {
        let event = joined(plan, &events[0].event, spec, event, target)?;
        events.push(event);
    }
    Ok(CpuEvents { cpu, events, ring })
}

/// The events that follow no task but the whole CPU, whoever is
/// recorded: `--off-cpu`'s output event, which its program writes into
/// for whichever task it picks.
fn open_cpu_wide(
    plan: &Plan,
    attrs: &[Attr],
    cpu: u32,
) -> Result<Vec<(usize, PerfEvent, Target)>, RecordError> {
    let target = Target::cpu(cpu);
    plan.off_cpu()
        .map(|spec| {
            let event = crate::negotiate::open_one(&plan.events[spec], &attrs[spec], target, None)
                .map_err(|e| open_error(&plan.events[spec], target, e))?;
            Ok((spec, event, target))
        })
        .into_iter()
        .collect()
}

/// An event that writes into `owner`'s ring.
fn joined(
    plan: &Plan,
    owner: &PerfEvent,
    spec: usize,
    event: PerfEvent,
    target: Target,
) -> Result<OpenEvent, RecordError> {
    let fail = |e| open_error(&plan.events[spec], target, e);
    event.set_output(owner).map_err(fail)?;
    let id = event.id().map_err(fail)?;
    Ok(OpenEvent { spec, event, id })
}

/// The plan's events for each task on `cpu`, in order. A thread of a
/// followed process that has ended is left out, as perf leaves it.
fn open_tasks(
    plan: &Plan,
    attrs: &[Attr],
    tasks: &[i32],
    cpu: u32,
) -> Result<Vec<(usize, PerfEvent, Target)>, RecordError> {
    let mut all = Vec::with_capacity(tasks.len() * attrs.len());
    for &task in tasks {
        let target = Target::task_on_cpu(task, cpu);
        match open_task(plan, attrs, target) {
            Ok(opened) => all.extend(opened.into_iter().map(|(s, e)| (s, e, target))),
            Err((_, e)) if e.raw_os_error() == Some(libc::ESRCH) && plan.pids_are_processes => {}
            Err((spec, e)) => return Err(open_error(&plan.events[spec], target, e)),
        }
    }
    Ok(all)
}

/// Every event of the plan for one task on one CPU, members with their
/// leader; on failure, which event failed and why.
fn open_task(
    plan: &Plan,
    attrs: &[Attr],
    target: Target,
) -> Result<Vec<(usize, PerfEvent)>, (usize, io::Error)> {
    let mut opened: Vec<(usize, PerfEvent)> = Vec::with_capacity(attrs.len());
    // The off-CPU event, last of all (so no leader's index moves), is
    // the CPU's, not the task's.
    let per_task = plan.off_cpu().unwrap_or(attrs.len());
    for (spec, attr) in attrs.iter().enumerate().take(per_task) {
        let leader = plan.events[spec].leader.map(|l| &opened[l].1);
        let event = crate::negotiate::open_one(&plan.events[spec], attr, target, leader)
            .map_err(|e| (spec, e))?;
        opened.push((spec, event));
    }
    Ok(opened)
}

fn map_ring(
    plan: &Plan,
    event: &PerfEvent,
    spec: usize,
    cpu: u32,
) -> Result<RingBuffer, RecordError> {
    // The first mapping decides: a read-only one makes an overwrite ring.
    let ring = match plan.overwrite {
        true => RingBuffer::map_overwrite(event, plan.ring_pages, false),
        false => RingBuffer::map(event, plan.ring_pages),
    };
    ring.map_err(|e| {
        if e.raw_os_error() == Some(libc::EPERM) {
            memlock_error(plan.ring_pages)
        } else {
            open_error(&plan.events[spec], Target::cpu(cpu), e)
        }
    })
}

/// The error for a mapping over the locked-memory limits, with the limits.
pub fn memlock_error(ring_pages: usize) -> RecordError {
    let rlimit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK)
        .map(|(soft, _)| soft)
        .unwrap_or(0);
    RecordError::Memlock {
        ring_kb: (ring_pages * shardrec_sys::ring::page_size() / 1024) as u64,
        mlock_kb: read_sysctl("perf_event_mlock_kb").unwrap_or(0),
        rlimit_kb: rlimit / 1024,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_answer_stays_the_cause() {
        let refused =
            SideBandUnavailable::NotPermitted(std::io::Error::from_raw_os_error(libc::EACCES));
        let error = RecordError::SideBand {
            needed_by: "--filter on a sampling event needs BPF".into(),
            source: refused,
        };
        assert_eq!(
            shardrec_shard::with_causes(&error),
            "--filter on a sampling event needs BPF: watching BPF programs needs CPU-wide \
             events (root or CAP_PERFMON): Permission denied (os error 13)"
        );
    }
}
