//! Opening every event, one ring per CPU, before anything is enabled.

use std::io;

use shardrec_sys::{abi, cpu, Attr, PerfEvent, RingBuffer, Target};

use crate::events::EventSpec;
use crate::plan::{read_sysctl, Plan, Scope};
use crate::RecordError;

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
}

/// Opens the side-band events, or says why there are none: a kernel
/// without KSYMBOL/BPF_EVENT (before 5.1), or no permission for CPU-wide
/// events (a workload recorded unprivileged).
pub fn open_side_band(plan: &Plan) -> Result<SideBandEvents, String> {
    let mut attr = Attr::software(abi::PERF_COUNT_SW_DUMMY as u64);
    attr.set_sample_type(crate::attrs::BASE_SAMPLE_TYPE);
    attr.set_read_format(crate::plan::FORMAT_ID);
    attr.set_sample_id_all();
    attr.set_bpf_tracking();
    attr.set_wakeup_watermark(1);
    if let Some(clockid) = plan.clockid {
        attr.set_clock(clockid);
    }
    let events = cpu::on_each(
        &plan.cpus,
        |&cpu| cpu,
        |&cpu| {
            let event =
                PerfEvent::open(&attr, Target::cpu(cpu)).map_err(|e| match e.raw_os_error() {
                    Some(libc::EINVAL) => {
                        "this kernel reports no BPF events (KSYMBOL, BPF_EVENT need 5.1)"
                            .to_string()
                    }
                    Some(libc::EACCES) | Some(libc::EPERM) => {
                        "watching BPF programs needs CPU-wide events (root or CAP_PERFMON)"
                            .to_string()
                    }
                    _ => format!("opening the side-band event on CPU {cpu}: {e}"),
                })?;
            let id = event.id().map_err(|e| e.to_string())?;
            Ok((cpu, event, id))
        },
    )
    .into_iter()
    .collect::<Result<_, String>>()?;
    Ok(SideBandEvents {
        sample_type: attr.sample_type(),
        attr,
        events,
    })
}

/// Opens every event of the plan on every CPU, disabled, each CPU's from a
/// thread on that CPU. `workload` is the held child's pid when the plan
/// follows a workload.
pub fn open_all(
    plan: &Plan,
    attrs: &[Attr],
    workload: Option<i32>,
) -> Result<Vec<CpuEvents>, RecordError> {
    let pids = match &plan.scope {
        Scope::SystemWide => vec![-1],
        Scope::Threads(tids) => tids.clone(),
        Scope::Workload => vec![workload.expect("a workload pid")],
    };
    cpu::on_each(
        &plan.cpus,
        |&cpu| cpu,
        |&cpu| open_cpu(plan, attrs, &pids, cpu),
    )
    .into_iter()
    .collect()
}

fn open_cpu(plan: &Plan, attrs: &[Attr], pids: &[i32], cpu: u32) -> Result<CpuEvents, RecordError> {
    let mut events: Vec<OpenEvent> = Vec::with_capacity(pids.len() * attrs.len());
    let mut ring = None;
    for &pid in pids {
        let first = events.len();
        for (spec, attr) in attrs.iter().enumerate() {
            let target = Target::task_on_cpu(pid, cpu);
            let fail = |e| open_error(&plan.events[spec], target, e);
            // A member joins its leader opened for the same task and CPU.
            let leader = plan.events[spec].leader.map(|l| &events[first + l].event);
            let event = crate::negotiate::open_one(&plan.events[spec], attr, target, leader)
                .map_err(fail)?;
            match &ring {
                None => ring = Some(map_ring(plan, &event, spec, cpu)?),
                Some(_) => event.set_output(&events[0].event).map_err(fail)?,
            }
            let id = event.id().map_err(fail)?;
            events.push(OpenEvent { spec, event, id });
        }
    }
    Ok(CpuEvents {
        cpu,
        events,
        ring: ring.expect("at least one event per CPU"),
    })
}

fn map_ring(
    plan: &Plan,
    event: &PerfEvent,
    spec: usize,
    cpu: u32,
) -> Result<RingBuffer, RecordError> {
    RingBuffer::map(event, plan.ring_pages).map_err(|e| {
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
            paranoid: read_sysctl("perf_event_paranoid").map_or(-9, |v| v as i32),
        },
        Some(libc::ESRCH) => RecordError::NoSuchProcess(pid),
        Some(libc::E2BIG) => RecordError::Kernel(format!(
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
