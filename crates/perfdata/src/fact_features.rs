//! Encoders of the features whose content is plain facts, in the layouts
//! `tools/perf/util/header.c` writes (`write_nrcpus`, `write_event_desc`,
//! `write_cpu_topology`, ...).

use crate::feature::{Feature, FeatureBuf};

/// A feature that is one string (hostname, osrelease, version, arch,
/// cpudesc, cpuid).
pub fn string(feature: Feature, text: &str) -> (Feature, Vec<u8>) {
    let mut buf = FeatureBuf::new();
    buf.string(text);
    (feature, buf.into_bytes())
}

/// `HEADER_NRCPUS`: CPUs available (highest present + 1), then online.
pub fn nr_cpus(available: u32, online: u32) -> (Feature, Vec<u8>) {
    let mut buf = FeatureBuf::new();
    buf.u32(available).u32(online);
    (Feature::NrCpus, buf.into_bytes())
}

/// `HEADER_TOTAL_MEM`: memory in kB.
pub fn total_mem(kb: u64) -> (Feature, Vec<u8>) {
    let mut buf = FeatureBuf::new();
    buf.u64(kb);
    (Feature::TotalMem, buf.into_bytes())
}

/// `HEADER_CMDLINE`: the recorder's path, then its arguments.
pub fn cmdline(argv: &[String]) -> (Feature, Vec<u8>) {
    let mut buf = FeatureBuf::new();
    buf.string_list(argv);
    (Feature::Cmdline, buf.into_bytes())
}

/// `HEADER_GROUP_DESC`: the groups of more than one event, each as its
/// name (perf's `{anon_group}` for an unnamed one), its leader's index
/// among the events and its size.
pub fn group_desc(groups: &[(usize, usize)]) -> (Feature, Vec<u8>) {
    let mut buf = FeatureBuf::new();
    buf.u32(groups.len() as u32);
    for &(leader, members) in groups {
        buf.string("{anon_group}");
        buf.u32(leader as u32).u32(members as u32);
    }
    (Feature::GroupDesc, buf.into_bytes())
}

/// One event of `HEADER_EVENT_DESC`.
pub struct EventDesc<'a> {
    /// The attr bytes.
    pub attr: &'a [u8],
    /// The name as given on the command line.
    pub name: &'a str,
    /// Its ids.
    pub ids: &'a [u64],
}

/// `HEADER_EVENT_DESC`: count, attr size, then per event its attr, id
/// count, name and ids.
pub fn event_desc(events: &[EventDesc]) -> (Feature, Vec<u8>) {
    let mut buf = FeatureBuf::new();
    buf.u32(events.len() as u32);
    buf.u32(events.first().map_or(0, |e| e.attr.len()) as u32);
    for event in events {
        buf.bytes(event.attr);
        buf.u32(event.ids.len() as u32);
        buf.string(event.name);
        for id in event.ids {
            buf.u64(*id);
        }
    }
    (Feature::EventDesc, buf.into_bytes())
}

/// Where one CPU sits.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuPlace {
    /// `topology/core_id`
    pub core_id: u32,
    /// `topology/physical_package_id`
    pub socket_id: u32,
    /// `topology/die_id`
    pub die_id: u32,
}

/// The CPU topology as perf records it.
#[derive(Clone, Debug, Default)]
pub struct CpuTopology<'a> {
    /// Distinct `package_cpus_list`s.
    pub package_cpus: &'a [String],
    /// Distinct `core_cpus_list`s (thread siblings).
    pub core_cpus: &'a [String],
    /// Distinct `die_cpus_list`s; empty on kernels without dies.
    pub die_cpus: &'a [String],
    /// Every available CPU in order (absent ones as zeros).
    pub cpus: &'a [CpuPlace],
}

/// `HEADER_CPU_TOPOLOGY`: sibling lists, per-CPU core and socket ids, then
/// (when the kernel knows dies) die lists and per-CPU die ids.
pub fn cpu_topology(topology: &CpuTopology) -> (Feature, Vec<u8>) {
    let mut buf = FeatureBuf::new();
    buf.string_list(topology.package_cpus);
    buf.string_list(topology.core_cpus);
    for cpu in topology.cpus {
        buf.u32(cpu.core_id).u32(cpu.socket_id);
    }
    if !topology.die_cpus.is_empty() {
        buf.string_list(topology.die_cpus);
        for cpu in topology.cpus {
            buf.u32(cpu.die_id);
        }
    }
    (Feature::CpuTopology, buf.into_bytes())
}

/// `HEADER_SAMPLE_TIME`: first and last sample time.
pub fn sample_time(first: u64, last: u64) -> (Feature, Vec<u8>) {
    let mut buf = FeatureBuf::new();
    buf.u64(first).u64(last);
    (Feature::SampleTime, buf.into_bytes())
}

/// `HEADER_CLOCKID`: the clock's resolution in ns.
pub fn clock_id(resolution_ns: u64) -> (Feature, Vec<u8>) {
    let mut buf = FeatureBuf::new();
    buf.u64(resolution_ns);
    (Feature::ClockId, buf.into_bytes())
}

/// `HEADER_CLOCK_DATA`: version 1, the clock id, and one instant read on
/// both the wall clock and that clock.
pub fn clock_data(clock_id: u32, tod_ns: u64, clock_ns: u64) -> (Feature, Vec<u8>) {
    let mut buf = FeatureBuf::new();
    buf.u32(1).u32(clock_id).u64(tod_ns).u64(clock_ns);
    (Feature::ClockData, buf.into_bytes())
}
