//! The `meta` a recording starts with.

use std::time::{SystemTime, UNIX_EPOCH};

use shardrec_shard::{ClockRef, EventMeta, Meta, META_VERSION};
use shardrec_sys::Attr;

use crate::open::CpuEvents;
use crate::plan::Plan;
use crate::RecordConfig;
use shardrec_shard::host;

pub(crate) fn initial_meta(
    config: &RecordConfig,
    command_line: &[String],
    plan: &Plan,
    attrs: &[Attr],
    cpus: &[CpuEvents],
    threads: &[i32],
    workload_pid: Option<i32>,
) -> Meta {
    let events = plan
        .events
        .iter()
        .zip(attrs)
        .enumerate()
        .map(|(i, (spec, attr))| EventMeta {
            name: spec.name.clone(),
            attr: attr.to_bytes(),
            ids: cpus
                .iter()
                .flat_map(|c| {
                    c.events
                        .iter()
                        .filter(|e| e.spec == i)
                        .map(|e| (c.cpu, e.id))
                })
                .collect(),
            threads: match spec.is_off_cpu() {
                true => vec![-1],
                false => threads.to_vec(),
            },
            leader: spec.leader,
            off_cpu: spec.is_off_cpu(),
        })
        .collect();
    Meta {
        version: META_VERSION,
        events,
        cpus: plan.cpus.clone(),
        ring_pages: plan.ring_pages,
        command_line: command_line.to_vec(),
        host: host::facts(),
        start_unix_ns: unix_ns(),
        recorder_pids: vec![std::process::id() as i32],
        workload_pid,
        clock: config.clockid.map(clock_ref),
        tracing_data: Vec::new(),
        stats: None,
    }
}

/// One instant read on the wall clock and on `clockid`, back to back, and
/// the clock's resolution, as perf record keeps them for `-k`.
fn clock_ref(clockid: i32) -> ClockRef {
    use nix::time::{clock_getres, clock_gettime, ClockId};
    let clock = ClockId::from_raw(clockid);
    let ns = |t: nix::sys::time::TimeSpec| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64;
    let tod = clock_gettime(ClockId::CLOCK_REALTIME).map_or(0, ns);
    let now = clock_gettime(clock).map_or(0, ns);
    ClockRef {
        clockid,
        resolution_ns: clock_getres(clock).map_or(0, ns),
        tod_ns: tod,
        clock_ns: now,
    }
}

pub(crate) fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
