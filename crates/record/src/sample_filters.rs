//! `--filter` on sampling events, as the coordinator handles it: the
//! programs compiled from the plan, loaded by the VIP (which makes every
//! bpf(2) call) and handed back; attached here to every sampling event of
//! every CPU before anything is enabled; their counters read at stop.
//! A regular user's recording, which has no VIP and cannot load programs,
//! attaches the pinned filter instead ([`crate::pinned_filter`]).

use std::os::fd::{AsFd, OwnedFd};
use std::rc::Rc;

use shardrec_filter::{counters, pinned, FilterProgram};
use shardrec_shard::{FilterCount, FilterStats};
use shardrec_sys::bpf::MappedArray;

use crate::open::CpuEvents;
use crate::pinned_filter::PinnedFilter;
use crate::plan::Plan;
use crate::RecordError;

/// One event's filter, attached.
pub struct ActiveFilter {
    /// The event's index in the plan.
    pub spec: usize,
    counters: Counters,
}

/// Where a filter counts what it kept and dropped.
enum Counters {
    /// Its own program's map, a slot per CPU.
    Own {
        /// The program; the events hold it too.
        _prog: OwnedFd,
        map: MappedArray,
        /// The CPUs the map has a slot for.
        slots: u32,
    },
    /// The pinned program's entries of its events.
    Pinned(PinnedEntries),
}

/// One filter's entries in the pinned program's shared map, by event:
/// (CPU, event id). They are removed when this goes (on an error on the
/// way too), so a recording leaves no entry behind.
struct PinnedEntries {
    filter: Rc<PinnedFilter>,
    entries: Vec<(u32, u64)>,
}

impl PinnedEntries {
    /// Writes `entry` (the compiled filter) under event `id` of `cpu`.
    fn add(&mut self, cpu: u32, id: u64, entry: &[u8]) -> Result<(), RecordError> {
        self.filter
            .filters
            .update(&id.to_ne_bytes(), entry)
            .map_err(RecordError::system(
                "writing a --filter into the pinned filter's map",
            ))?;
        self.entries.push((cpu, id));
        Ok(())
    }

    /// What each entry kept and dropped, summed by CPU (a CPU has an
    /// event for each thread of `-t`).
    fn counts(&self) -> Vec<(u32, counters::Counts)> {
        let mut by_cpu: std::collections::BTreeMap<u32, counters::Counts> = Default::default();
        for (cpu, id) in &self.entries {
            if let Ok(Some(value)) = self.filter.filters.lookup(&id.to_ne_bytes()) {
                let counts = pinned::entry_counts(&value);
                let sum = by_cpu.entry(*cpu).or_default();
                sum.kept += counts.kept;
                sum.dropped += counts.dropped;
            }
        }
        by_cpu.into_iter().collect()
    }
}

impl Drop for PinnedEntries {
    fn drop(&mut self) {
        for (_, id) in &self.entries {
            let _ = self.filter.filters.delete(&id.to_ne_bytes());
        }
    }
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
    for ((spec, _), program) in plan.sample_filters().zip(programs) {
        let (Some(prog), Some(map)) = (fds.next(), fds.next()) else {
            return Err(RecordError::Helper {
                name: "VIP".into(),
                message: "it handed over fewer --filter programs than it was given".into(),
            });
        };
        let value_size = counters::value_size(program.slots);
        let map = MappedArray::map(map, value_size)
            .map_err(RecordError::system("mapping a --filter's counters"))?;
        for (_, event) in events_of(cpus, spec) {
            event
                .event
                .set_bpf(prog.as_fd())
                .map_err(attach_error(plan, spec))?;
        }
        active.push(ActiveFilter {
            spec,
            counters: Counters::Own {
                _prog: prog,
                map,
                slots: program.slots,
            },
        });
    }
    Ok(active)
}

/// Attaches the pinned program to each filtered event of every CPU, its
/// filter written under the event's id first.
pub fn attach_pinned(
    plan: &Plan,
    cpus: &[&CpuEvents],
    filter: PinnedFilter,
) -> Result<Vec<ActiveFilter>, RecordError> {
    let filter = Rc::new(filter);
    let mut active = Vec::new();
    for (spec, sample_filter) in plan.sample_filters() {
        let entry = pinned::entry(&sample_filter.expr)
            .map_err(|e| RecordError::Usage(format!("--filter '{}': {e}", sample_filter.text)))?;
        let mut entries = PinnedEntries {
            filter: filter.clone(),
            entries: Vec::new(),
        };
        for (cpu, event) in events_of(cpus, spec) {
            entries.add(cpu, event.id, &entry)?;
            event
                .event
                .set_bpf(filter.prog.as_fd())
                .map_err(attach_error(plan, spec))?;
        }
        active.push(ActiveFilter {
            spec,
            counters: Counters::Pinned(entries),
        });
    }
    Ok(active)
}

/// The events of plan event `spec` on every CPU, with their CPU.
fn events_of<'a>(
    cpus: &'a [&CpuEvents],
    spec: usize,
) -> impl Iterator<Item = (u32, &'a crate::open::OpenEvent)> {
    cpus.iter()
        .flat_map(|c| c.events.iter().map(|e| (c.cpu, e)))
        .filter(move |(_, e)| e.spec == spec)
}

fn attach_error(plan: &Plan, spec: usize) -> impl Fn(std::io::Error) -> RecordError + '_ {
    move |e| {
        let event = &plan.events[spec];
        let text = event.sample_filter.as_ref().map_or("", |f| f.text.as_str());
        RecordError::system(format!("attaching --filter '{text}' to {}", event.name))(e)
    }
}

impl ActiveFilter {
    /// What the filter kept and dropped on each CPU that ran it.
    pub fn stats(&self, plan: &Plan) -> FilterStats {
        let spec = &plan.events[self.spec];
        let per_cpu: Vec<(u32, counters::Counts)> = match &self.counters {
            Counters::Own { map, slots, .. } => (0..*slots)
                .map(|cpu| (cpu, counters::read_slot(cpu, |at| map.u64_at(at))))
                .collect(),
            Counters::Pinned(entries) => entries.counts(),
        };
        let per_cpu = per_cpu
            .into_iter()
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
