//! `--filter` on sampling events, as the coordinator handles it: the
//! programs compiled from the plan, loaded by the VIP (which makes every
//! bpf(2) call) and handed back; attached here to every sampling event of
//! every CPU before anything is enabled; their counters read at stop.

use std::os::fd::{AsFd, OwnedFd};

use shardrec_filter::{counters, FilterProgram};
use shardrec_shard::{FilterCount, FilterStats};
use shardrec_sys::bpf::MappedArray;

use crate::open::CpuEvents;
use crate::plan::Plan;
use crate::RecordError;

/// One event's filter, attached.
pub struct ActiveFilter {
    /// The event's index in the plan.
    pub spec: usize,
    /// The program; the events hold it too.
    _prog: OwnedFd,
    counters: MappedArray,
    /// The CPUs the counters have a slot for.
    slots: u32,
}

/// The plan's filters compiled, in [`Plan::sample_filters`] order, each
/// counting on every possible CPU.
pub fn programs(plan: &Plan) -> Result<Vec<FilterProgram>, RecordError> {
    if plan.sample_filters().next().is_none() {
        return Ok(Vec::new());
    }
    let possible =
        shardrec_sys::cpu::possible().map_err(RecordError::system("reading the possible CPUs"))?;
    let slots = possible.iter().max().map_or(1, |&max| max + 1);
    Ok(plan
        .sample_filters()
        .map(|(_, filter)| filter.compile(slots))
        .collect())
}

/// Attaches each loaded program (`fds`: program, counters map, per
/// filter, as the VIP sent them) to its event on every CPU.
pub fn attach(
    plan: &Plan,
    cpus: &[&CpuEvents],
    programs: &[FilterProgram],
    fds: Vec<OwnedFd>,
) -> Result<Vec<ActiveFilter>, RecordError> {
    let mut fds = fds.into_iter();
    let mut active = Vec::new();
    for ((spec, filter), program) in plan.sample_filters().zip(programs) {
        let (Some(prog), Some(map)) = (fds.next(), fds.next()) else {
            return Err(RecordError::Kernel(
                "the VIP handed over fewer --filter programs than it was given".into(),
            ));
        };
        let value_size = counters::value_size(program.slots);
        let counters = MappedArray::map(map, value_size)
            .map_err(RecordError::system("mapping a --filter's counters"))?;
        for event in cpus
            .iter()
            .flat_map(|c| &c.events)
            .filter(|e| e.spec == spec)
        {
            event.event.set_bpf(prog.as_fd()).map_err(|e| {
                RecordError::Kernel(format!(
                    "attaching --filter '{}' to {}: {e}",
                    filter.text, plan.events[spec].name
                ))
            })?;
        }
        active.push(ActiveFilter {
            spec,
            _prog: prog,
            counters,
            slots: program.slots,
        });
    }
    Ok(active)
}

impl ActiveFilter {
    /// What the filter kept and dropped on each CPU that ran it.
    pub fn stats(&self, plan: &Plan) -> FilterStats {
        let spec = &plan.events[self.spec];
        let per_cpu = (0..self.slots)
            .map(|cpu| (cpu, counters::read_slot(cpu, |at| self.counters.u64_at(at))))
            .filter(|(_, c)| c.kept + c.dropped > 0)
            .map(|(cpu, c)| FilterCount {
                cpu,
                kept: c.kept,
                dropped: c.dropped,
            })
            .collect();
        FilterStats {
            event: spec.name.clone(),
            filter: spec
                .sample_filter
                .as_ref()
                .map_or_else(String::new, |f| f.text.clone()),
            per_cpu,
        }
    }
}
