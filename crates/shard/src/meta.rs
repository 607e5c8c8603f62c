//! `meta`: what the coordinator knows about a recording.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use shardrec_format::layouts::Layouts;
use shardrec_format::views::AttrBytes;
use shardrec_format::SampleIdLayout;

use shardrec_control::VipStats;

use crate::scan::ShardSummary;
use crate::StopReason;
use shardrec_perfdata::host::{CacheLevel, MemoryTopology, NumaNode, Pmu};

/// The `meta` format version this build writes and reads.
pub const META_VERSION: u32 = 1;

/// Everything the merge needs besides the shards themselves.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Meta {
    /// [`META_VERSION`] of the writer.
    pub version: u32,
    /// The recorded events, in command-line order.
    pub events: Vec<EventMeta>,
    /// The recorded CPUs: one `cpuNNN.shard` each.
    pub cpus: Vec<u32>,
    /// Data pages of each ring.
    pub ring_pages: usize,
    /// The shardrec command line.
    pub command_line: Vec<String>,
    /// Facts about the host, for perf.data's header features.
    pub host: Host,
    /// Wall-clock start (ns since the Unix epoch).
    pub start_unix_ns: u64,
    /// Every process of the recorder (coordinator, writers), excluded from
    /// tracepoint events.
    pub recorder_pids: Vec<i32>,
    /// The workload started with `-- CMD`, if any.
    pub workload_pid: Option<i32>,
    /// The clock chosen with `-k`, if any.
    pub clock: Option<ClockRef>,
    /// The HEADER_TRACING_DATA content (tracepoint formats read from
    /// tracefs at record time); empty without tracepoints.
    pub tracing_data: Vec<u8>,
    /// Filled in at stop; `None` in a recording that was never stopped
    /// cleanly (its shards are still a valid prefix).
    pub stats: Option<Stats>,
}

/// One recorded event.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EventMeta {
    /// The name as given (`cpu-clock`, `sched:sched_switch:u`).
    pub name: String,
    /// The `perf_event_attr` bytes passed to the kernel.
    pub attr: Vec<u8>,
    /// The kernel's id of this event on each CPU (several per CPU when
    /// several tasks are followed), as `(cpu, id)`.
    pub ids: Vec<(u32, u64)>,
    /// The threads it follows on each CPU, in the order of that CPU's ids;
    /// `[-1]` (or empty, in older recordings) for every thread.
    #[serde(default)]
    pub threads: Vec<i32>,
    /// The index of its group's leader in `events`, when it is a member
    /// of a group (`{a,b}`).
    #[serde(default)]
    pub leader: Option<usize>,
    /// shardrec's off-CPU output events (`--off-cpu`): the kernel's samples
    /// are raw waits, which perf.data has as perf's `offcpu-time` samples
    /// ([`EventMeta::header_attr`]).
    #[serde(default)]
    pub off_cpu: bool,
}

impl EventMeta {
    /// Each id with its CPU and the thread it follows (-1: every thread).
    pub fn ids_with_threads(&self) -> Vec<(u32, i32, u64)> {
        let mut seen_on: HashMap<u32, usize> = HashMap::new();
        self.ids
            .iter()
            .map(|&(cpu, id)| {
                let n = seen_on.entry(cpu).or_default();
                let tid = match self.threads.len() {
                    0 => -1,
                    len => self.threads[*n % len],
                };
                *n += 1;
                (cpu, tid, id)
            })
            .collect()
    }

    /// The attr perf.data's header gives the event: the one the kernel
    /// was given, but for the off-CPU event, whose samples the merge
    /// writes as perf's.
    pub fn header_attr(&self) -> std::borrow::Cow<'_, [u8]> {
        match self.off_cpu {
            true => shardrec_format::records::off_cpu_attr(&self.attr).into(),
            false => self.attr.as_slice().into(),
        }
    }

    /// The attr's `sample_type`, as the kernel writes the samples.
    pub fn sample_type(&self) -> u64 {
        AttrBytes(&self.attr).sample_type()
    }

    /// Whether the attr asks for build ids in MMAP2 records.
    pub fn build_id_mmap(&self) -> bool {
        AttrBytes(&self.attr).build_id_mmap()
    }
}

/// Facts about the recording host.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Host {
    /// `uname -n`
    pub hostname: String,
    /// `uname -r`
    pub os_release: String,
    /// `uname -v`
    pub kernel_version: String,
    /// `uname -m`
    pub arch: String,
    /// CPUs online.
    pub cpus_online: u32,
    /// CPUs present (highest present CPU + 1), as perf's nrcpus counts them.
    pub cpus_available: u32,
    /// The CPU's model name.
    pub cpu_desc: String,
    /// perf's cpuid string (vendor,family,model,stepping).
    pub cpuid: String,
    /// Memory in kB.
    pub total_mem_kb: u64,
    /// How the CPUs are arranged.
    pub topology: Topology,
    /// NUMA nodes.
    #[serde(default)]
    pub numa_nodes: Vec<NumaNode>,
    /// PMUs, in sysfs directory order (as perf 6.1 lists them).
    #[serde(default)]
    pub pmus: Vec<Pmu>,
    /// Distinct CPU caches, by level.
    #[serde(default)]
    pub caches: Vec<CacheLevel>,
    /// Memory blocks per node, where sysfs has them.
    #[serde(default)]
    pub memory: Option<MemoryTopology>,
    /// The kernel's build id and each loaded module's (by the module's
    /// name as /proc/modules gives it; the kernel as `""`), read at start
    /// and again at stop, so that a merge on another host still names
    /// them.
    #[serde(default)]
    pub kernel_build_ids: Vec<(String, Vec<u8>)>,
}

impl Host {
    /// The build id of the kernel (`""`) or of module `name`, as recorded.
    pub fn kernel_build_id(&self, name: &str) -> Option<&[u8]> {
        self.kernel_build_ids
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, id)| &id[..])
    }
}

/// CPU topology from `/sys/devices/system/cpu/cpuN/topology`, as perf
/// records it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Topology {
    /// Distinct package sibling lists.
    pub package_cpus: Vec<String>,
    /// Distinct core sibling (SMT thread) lists.
    pub core_cpus: Vec<String>,
    /// Distinct die sibling lists (empty where the kernel has none).
    pub die_cpus: Vec<String>,
    /// Per CPU up to `cpus_available`: (core id, socket id, die id).
    pub cpus: Vec<(u32, u32, u32)>,
}

/// A clock chosen for timestamps, and one instant read on it and on the
/// wall clock, so readers can convert (HEADER_CLOCKID, HEADER_CLOCK_DATA).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct ClockRef {
    /// The `CLOCK_*` id.
    pub clockid: i32,
    /// Its resolution (ns).
    pub resolution_ns: u64,
    /// Wall-clock time of the reference instant (ns since the epoch).
    pub tod_ns: u64,
    /// The chosen clock's time at the same instant (ns).
    pub clock_ns: u64,
}

/// The outcome of a recording, written at stop.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stats {
    /// One entry per recorded CPU.
    pub cpus: Vec<CpuStats>,
    /// Bytes in `synth.shard`.
    pub synth_bytes: u64,
    /// Each event's `PERF_FORMAT_LOST` count where it is not zero: the
    /// merge turns them into `PERF_RECORD_LOST_SAMPLES` as perf record
    /// does at its end.
    pub lost_by_event: Vec<EventLoss>,
    /// What the VIP saw of BPF programs, when it ran.
    pub bpf: Option<VipStats>,
    /// What each `--filter` on a sampling event kept and dropped.
    #[serde(default)]
    pub filters: Vec<FilterStats>,
    /// Why recording stopped.
    pub stopped_by: StopReason,
    /// Wall-clock stop (ns since the Unix epoch).
    pub stop_unix_ns: u64,
}

/// Samples of one event the kernel counted as dropped on one CPU
/// (`PERF_FORMAT_LOST`). Recordings made before the fields were named
/// kept it as the array `[cpu, id, lost]`, which reads the same.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventLoss {
    /// The CPU.
    pub cpu: u32,
    /// The event's id.
    pub id: u64,
    /// Samples dropped.
    pub lost: u64,
}

/// What a sample filter kept and dropped on one CPU. Recordings made
/// before the fields were named kept it as `[cpu, kept, dropped]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterCount {
    /// The CPU.
    pub cpu: u32,
    /// Samples it kept.
    pub kept: u64,
    /// Samples it dropped in the kernel.
    pub dropped: u64,
}

/// What one event's sample filter did: samples it dropped in the kernel
/// are not lost (they were never wanted).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterStats {
    /// The event's name.
    pub event: String,
    /// The filter as given.
    pub filter: String,
    /// What it kept and dropped on each CPU that ran it.
    pub per_cpu: Vec<FilterCount>,
}

impl FilterStats {
    /// Samples kept, over all CPUs.
    pub fn kept(&self) -> u64 {
        self.per_cpu.iter().map(|c| c.kept).sum()
    }

    /// Samples dropped, over all CPUs.
    pub fn dropped(&self) -> u64 {
        self.per_cpu.iter().map(|c| c.dropped).sum()
    }
}

/// What one CPU's shard holds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CpuStats {
    /// The CPU.
    pub cpu: u32,
    /// Bytes the writer wrote.
    pub bytes: u64,
    /// Whole records in the shard.
    pub records: u64,
    /// Samples among them.
    pub samples: u64,
    /// Records the kernel dropped (sum of `PERF_RECORD_LOST`).
    pub lost: u64,
    /// Samples the kernel dropped (sum of `PERF_RECORD_LOST_SAMPLES`).
    pub lost_samples: u64,
    /// Samples the kernel counted as dropped for this CPU's events
    /// (`PERF_FORMAT_LOST`, read at stop; 0 where the kernel lacks it).
    /// Unlike the LOST records it includes drops after the last record that
    /// fit, which the kernel never gets to report in the ring.
    pub lost_read: u64,
    /// First and last record time seen (perf clock, ns), 0 when none.
    pub first_time: u64,
    /// See `first_time`.
    pub last_time: u64,
    /// Bytes after the last whole record (a write cut short).
    pub torn_bytes: u64,
}

impl Stats {
    /// Counts CPU `cpu`'s shard of `bytes` bytes, walked into `summary`
    /// (the stop's walk, or a live merge's), with the kernel's count of
    /// its dropped samples read at the stop.
    pub fn count_cpu(&mut self, cpu: u32, bytes: u64, summary: &ShardSummary) {
        let lost_read = self
            .lost_by_event
            .iter()
            .filter(|loss| loss.cpu == cpu)
            .map(|loss| loss.lost)
            .sum();
        self.cpus
            .push(CpuStats::new(cpu, bytes, summary, lost_read));
    }
}

impl CpuStats {
    /// CPU `cpu`'s stats from the walk of its shard of `bytes` bytes and
    /// the kernel's per-event count of its dropped samples (`lost_read`).
    pub fn new(cpu: u32, bytes: u64, summary: &ShardSummary, lost_read: u64) -> CpuStats {
        CpuStats {
            cpu,
            bytes,
            records: summary.records(),
            samples: summary.samples(),
            lost: summary.lost,
            lost_samples: summary.lost_samples,
            lost_read,
            first_time: summary.first_time,
            last_time: summary.last_time,
            torn_bytes: summary.damage.as_ref().map_or(0, |d| d.dropped as u64),
        }
    }

    /// Records dropped by the kernel on this CPU ([`dropped`]).
    pub fn dropped(&self) -> u64 {
        dropped(self.lost, self.lost_read, self.lost_samples)
    }
}

/// What the kernel dropped, from what it reports: `lost_in_ring`, the sum
/// of the LOST records in a ring; `lost_counted`, its events'
/// `PERF_FORMAT_LOST` counts read at stop (0 before kernel 6.0), which
/// also count drops after the last record that fit (never reported in the
/// ring) but miss those of events inherited by a workload's children; and
/// `lost_samples`, the samples dropped before reaching the ring (the
/// LOST_SAMPLES records). The larger of the first two, plus the third.
pub fn dropped(lost_in_ring: u64, lost_counted: u64, lost_samples: u64) -> u64 {
    lost_in_ring.max(lost_counted) + lost_samples
}

impl Meta {
    /// The sample-id layout of each kernel id, to find any record's fields.
    pub fn layouts(&self) -> Layouts {
        let mut layouts = Layouts::default();
        for event in &self.events {
            let layout = SampleIdLayout::new(event.sample_type());
            for &(_, id) in &event.ids {
                layouts.insert(id, layout);
                if event.off_cpu {
                    let attr = shardrec_format::views::AttrBytes(&event.attr);
                    layouts.mark_off_cpu(id, attr.sample_stack_user() > 0);
                }
            }
        }
        layouts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_kept_as_arrays_before_their_fields_were_named_still_read() {
        let old = rmp_serde::to_vec_named(&vec![(3u32, 17u64, 42u64)]).unwrap();
        let loss = EventLoss {
            cpu: 3,
            id: 17,
            lost: 42,
        };
        assert_eq!(
            rmp_serde::from_slice::<Vec<EventLoss>>(&old).ok(),
            Some(vec![loss])
        );
        let old = rmp_serde::to_vec_named(&vec![(1u32, 5u64, 6u64)]).unwrap();
        let count = FilterCount {
            cpu: 1,
            kept: 5,
            dropped: 6,
        };
        assert_eq!(
            rmp_serde::from_slice::<Vec<FilterCount>>(&old).ok(),
            Some(vec![count])
        );
        // Written now, by name.
        let new = rmp_serde::to_vec_named(&loss).unwrap();
        assert!(new.windows(4).any(|w| w == b"lost"));
        assert_eq!(rmp_serde::from_slice::<EventLoss>(&new).ok(), Some(loss));
    }
}
