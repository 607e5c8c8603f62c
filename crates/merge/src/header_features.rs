//! The header features of the merged file, from `meta` and what the merge
//! saw.

use std::os::unix::fs::MetadataExt;

use shardrec_perfdata::build_id::{self, BuildIdEntry};
use shardrec_perfdata::fact_features::{self as feat, CpuPlace, CpuTopology, EventDesc};
use shardrec_perfdata::feature::Feature;
use shardrec_perfdata::host;
use shardrec_shard::Meta;

use crate::dso::{DsoHits, MappedFile};
use crate::BuildIds;

/// HEADER_VERSION. Readers read perf's version here and change how they
/// read the file by it: hotspot's perfparser trusts FINISHED_ROUND from
/// its first round only in a file of perf 3.17 or later (a version it
/// cannot parse counts as older), and samply puts it in the profile's
/// name. So it is the perf version whose file format shardrec writes (the
/// attr size, features and records of perf 6.1), then shardrec's name.
pub const HEADER_VERSION: &str = concat!("6.1.0 (shardrec ", env!("CARGO_PKG_VERSION"), ")");

/// Every feature perf record writes that applies to this recording.
pub fn all(
    meta: &Meta,
    sample_times: (u64, u64),
    build_ids: &[BuildIdEntry],
) -> Vec<(Feature, Vec<u8>)> {
    let host = &meta.host;
    let mut features = vec![
        feat::string(Feature::Hostname, &host.hostname),
        feat::string(Feature::OsRelease, &host.os_release),
        feat::string(Feature::Version, HEADER_VERSION),
        feat::string(Feature::Arch, &host.arch),
        feat::nr_cpus(host.cpus_available, host.cpus_online),
        feat::string(Feature::CpuDesc, &host.cpu_desc),
        feat::total_mem(host.total_mem_kb),
        feat::cmdline(&meta.command_line),
        event_desc(meta),
        feat::sample_time(sample_times.0, sample_times.1),
        (Feature::BuildId, build_id::encode(build_ids)),
        host::pmu_mappings(&host.pmus),
        host::pmu_caps(&host.pmus),
    ];
    // What the recorder reads of the host at its stop: a recording
    // killed before (merged after `kill -9`) has none of it.
    if !host.topology.cpus.is_empty() {
        features.push(topology(meta));
    }
    if !host.numa_nodes.is_empty() {
        features.push(host::numa_topology(&host.numa_nodes));
    }
    features.extend(host::cpu_pmu_caps(&host.pmus));
    if !host.caches.is_empty() {
        features.push(host::cache(&host.caches));
    }
    if let Some(memory) = &host.memory {
        features.push(host::mem_topology(memory));
    }
    if !host.cpuid.starts_with(',') {
        features.push(feat::string(Feature::CpuId, &host.cpuid));
    }
    if let Some(clock) = meta.clock {
        features.push(feat::clock_id(clock.resolution_ns));
        features.push(feat::clock_data(
            clock.clockid as u32,
            clock.tod_ns,
            clock.clock_ns,
        ));
    }
    if !meta.tracing_data.is_empty() {
        features.push((Feature::TracingData, meta.tracing_data.clone()));
    }
    let groups = groups(meta);
    if !groups.is_empty() {
        features.push(feat::group_desc(&groups));
    }
    features
}

/// Each group of more than one event: its leader's index and its size.
fn groups(meta: &Meta) -> Vec<(usize, usize)> {
    (0..meta.events.len())
        .filter_map(|leader| {
            let members = meta
                .events
                .iter()
                .filter(|e| e.leader == Some(leader))
                .count();
            (members > 0).then_some((leader, members + 1))
        })
        .collect()
}

fn event_desc(meta: &Meta) -> (Feature, Vec<u8>) {
    let ids: Vec<Vec<u64>> = meta
        .events
        .iter()
        .map(|e| e.ids.iter().map(|&(_, id)| id).collect())
        .collect();
    let attrs: Vec<_> = meta.events.iter().map(|e| e.header_attr()).collect();
    let events: Vec<EventDesc> = meta
        .events
        .iter()
        .zip(&ids)
        .zip(&attrs)
        .map(|((e, ids), attr)| EventDesc {
            attr,
            name: &e.name,
            ids,
        })
        .collect();
    feat::event_desc(&events)
}

fn topology(meta: &Meta) -> (Feature, Vec<u8>) {
    let t = &meta.host.topology;
    let cpus: Vec<CpuPlace> = t
        .cpus
        .iter()
        .map(|&(core_id, socket_id, die_id)| CpuPlace {
            core_id,
            socket_id,
            die_id,
        })
        .collect();
    feat::cpu_topology(&CpuTopology {
        package_cpus: &t.package_cpus,
        core_cpus: &t.core_cpus,
        die_cpus: &t.die_cpus,
        cpus: &cpus,
    })
}

/// Build ids of the kernel and of every file samples fell in, as perf
/// writes them (pid -1: the host); the vDSO's is this process's, the same
/// on one kernel for every 64-bit process. Those the MMAP2 records carry
/// (`attr.build_id`) are taken as they are, on any host; the others are
/// read only when merging on the recording host (same hostname and
/// kernel), and only from files that are still the ones mapped (same
/// device and inode), so no build id is ever misattributed.
/// `which` says whose: those samples fell in, every mapped file, or none.
pub fn build_ids(meta: &Meta, hits: &DsoHits, which: BuildIds) -> Vec<BuildIdEntry> {
    let uname = nix::sys::utsname::uname().ok();
    let same_host = uname.is_some_and(|u| {
        u.nodename().to_string_lossy() == meta.host.hostname
            && u.release().to_string_lossy() == meta.host.os_release
    });
    if which == BuildIds::None {
        return Vec::new();
    }
    let mut entries = Vec::new();
    // The kernel's and the modules' as recorded (older recordings: as
    // read here, on the recording host only).
    let kernel_id = |name: &str| match meta.host.kernel_build_id(name) {
        Some(id) => Some(id.to_vec()),
        None if !same_host => None,
        None if name.is_empty() => build_id::kernel_build_id().ok()?,
        None => build_id::module_build_id(name).ok()?,
    };
    if hits.kernel_hit || which == BuildIds::All {
        if let Some(id) = kernel_id("") {
            entries.push(BuildIdEntry::kernel(id));
        }
    }
    entries.extend(module_build_ids(hits, which, same_host, kernel_id));
    let files: Box<dyn Iterator<Item = &MappedFile>> = match which {
        BuildIds::All => Box::new(hits.all_files()),
        _ => Box::new(hits.hit_files()),
    };
    for file in files {
        // An MMAP2's own build id holds anywhere; a file's is read only
        // where it was recorded.
        let id = match (&file.build_id, file.path.as_str()) {
            (Some(id), _) => Ok(Some(id.clone())),
            _ if !same_host => continue,
            (None, build_id::VDSO_NAME) => build_id::vdso_build_id(),
            _ if still_mapped(file) => build_id::read_build_id(file.path.as_ref()),
            _ => continue,
        };
        if let Ok(Some(id)) = id {
            entries.push(BuildIdEntry::user(id, &file.path));
        }
    }
    entries
}

/// Build ids of the kernel modules samples fell in (every module with
/// `--buildid-all`), named as their maps are (the `.ko` path, or
/// `[name]`), each by `id_of` (as recorded, or read from /sys/module as
/// perf reads them). A sample in no map is in a module loaded while
/// recording: on the recording host, /proc/modules now says which, if it
/// is still loaded.
fn module_build_ids(
    hits: &DsoHits,
    which: BuildIds,
    same_host: bool,
    id_of: impl Fn(&str) -> Option<Vec<u8>>,
) -> Vec<BuildIdEntry> {
    let (hit, unmapped) = hits.kernel_hits();
    let mut names: Vec<String> = match which {
        BuildIds::All => hits.kernel_map_names().map(str::to_string).collect(),
        _ => hit.into_iter().map(str::to_string).collect(),
    };
    if same_host {
        names.extend(loaded_modules_holding(&unmapped));
    }
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|name| !name.starts_with(build_id::KERNEL_NAME))
        .filter_map(|name| Some(BuildIdEntry::module(id_of(&module_name(&name))?, &name)))
        .collect()
}

/// A module's name from its map's: `[name]`, or a `.ko` path (its file
/// name up to the first dot, `-` read as `_`, as the kernel names it).
fn module_name(map: &str) -> String {
    let base = match map.strip_prefix('[').and_then(|m| m.strip_suffix(']')) {
        Some(name) => name,
        None => map.rsplit('/').next().unwrap_or(map),
    };
    base.split('.').next().unwrap_or(base).replace('-', "_")
}

/// `[name]` of each module in /proc/modules that holds one of `pages`.
fn loaded_modules_holding(pages: &[u64]) -> Vec<String> {
    if pages.is_empty() {
        return Vec::new();
    }
    let text = std::fs::read_to_string("/proc/modules").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            // name size refs deps state address
            let fields: Vec<&str> = line.split_whitespace().collect();
            let size: u64 = fields.get(1)?.parse().ok()?;
            let start = u64::from_str_radix(fields.get(5)?.trim_start_matches("0x"), 16).ok()?;
            let holds = pages.iter().any(|&p| p + 4096 > start && p < start + size);
            (start != 0 && holds).then(|| format!("[{}]", fields[0]))
        })
        .collect()
}

/// Whether the path still names the file that was mapped.
fn still_mapped(file: &MappedFile) -> bool {
    if !file.path.starts_with('/') {
        return false; // [vdso], //anon and the like have no file
    }
    let Ok(stat) = std::fs::metadata(&file.path) else {
        return false;
    };
    match file.identity {
        Some((major, minor, inode)) => {
            let dev = stat.dev();
            inode == stat.ino()
                && major as u64 == nix::sys::stat::major(dev)
                && minor as u64 == nix::sys::stat::minor(dev)
        }
        None => true,
    }
}
