//! `--off-cpu`: what the VIP's off-CPU program is told, from the plan and
//! the events opened (each recorded CPU's output event, perf's
//! `offcpu-time`).

use std::os::fd::AsFd;

use shardrec_events::CallGraph;
use shardrec_vip::off_cpu::{OffCpuSetup, Settings};

use crate::open::CpuEvents;
use crate::plan::{Plan, Scope};
use crate::RecordError;

/// The program's setup for a recording of `plan` with these CPUs'
/// events: the tasks the plan follows (`workload`, when it runs one), or
/// every task but the `recorder`'s processes. `None` without `--off-cpu`.
pub fn setup(
    plan: &Plan,
    cpus: &[&CpuEvents],
    recorder: &[i32],
    workload: Option<i32>,
) -> Result<Option<OffCpuSetup>, RecordError> {
    let Some(spec) = plan.off_cpu() else {
        return Ok(None);
    };
    let outputs = cpus
        .iter()
        .flat_map(|cpu| {
            let output = cpu.events.iter().filter(|e| e.spec == spec);
            output.map(|e| (cpu.cpu, e.event.as_fd().try_clone_to_owned()))
        })
        .map(|(cpu, fd)| fd.map(|fd| (cpu, fd)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(RecordError::system("keeping the off-CPU output events"))?;
    let follow = match &plan.scope {
        Scope::SystemWide => Vec::new(),
        Scope::Workload => workload.into_iter().collect(),
        Scope::Threads(_) if plan.pids_are_processes => plan.pids.clone(),
        Scope::Threads(tids) => tids.clone(),
    };
    let as_u32 = |pids: Vec<i32>| pids.into_iter().map(|p| p as u32).collect();
    // The sums are written as the first recorded CPU's output event's.
    let summed_into = cpus
        .iter()
        .find_map(|cpu| {
            let output = cpu.events.iter().find(|e| e.spec == spec)?;
            Some((cpu.cpu, output.id))
        })
        .unwrap_or_default();
    Ok(Some(OffCpuSetup {
        settings: Settings {
            follow_all: plan.scope == Scope::SystemWide,
            follow_children: plan.inherit,
            follow_threads: matches!(plan.scope, Scope::Threads(_)) && !plan.pids_are_processes,
            threshold_ns: plan.off_cpu_threshold_ms * 1_000_000,
            // As much as the event's attr says (`shardrec_events::attrs`).
            user_stack_bytes: match plan.call_graph {
                CallGraph::Dwarf(stack) => shardrec_format::records::off_cpu_user_stack(stack),
                _ => 0,
            },
        },
        outputs,
        follow: as_u32(follow),
        ignore: as_u32(recorder.to_vec()),
        summed_into,
        clockid: plan.clockid,
    }))
}
