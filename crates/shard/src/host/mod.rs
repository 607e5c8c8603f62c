//! Facts about this host for perf.data's header features.

mod devices;
mod nodes;

use std::collections::HashSet;

use crate::{Host, Topology};
use shardrec_sys::cpu;

/// Reads the host's facts that a recording needs from its start (a
/// merge after `kill -9` has only these); a fact that cannot be read is
/// left empty. The CPUs' arrangement, caches and memory, thousands of
/// sysfs files on a large host (28 per CPU for the caches alone), wait
/// for [`complete`], as perf record reads them at its end.
pub fn facts() -> Host {
    let uname = nix::sys::utsname::uname().ok();
    let field = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
        uname
            .as_ref()
            .map(|u| f(u).to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let info = |key: &str| cpuinfo_field(&cpuinfo, key).unwrap_or_default();
    let present = read_list("present").last().map_or(0, |&last| last + 1);
    Host {
        hostname: field(|u| u.nodename()),
        os_release: field(|u| u.release()),
        kernel_version: field(|u| u.version()),
        arch: field(|u| u.machine()),
        cpus_online: cpu::online().map_or(0, |c| c.len() as u32),
        cpus_available: present,
        // perf squashes runs of blanks in the branding string.
        cpu_desc: info("model name")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        // perf's x86 cpuid string: vendor,family,model,stepping
        cpuid: format!(
            "{},{},{},{}",
            info("vendor_id"),
            info("cpu family"),
            info("model"),
            info("stepping")
        ),
        total_mem_kb: meminfo_total_kb().unwrap_or(0),
        pmus: devices::pmus(),
        kernel_build_ids: shardrec_perfdata::build_id::kernel_and_module_build_ids(),
        ..Host::default()
    }
}

/// Adds to `host` ([`facts`]) the CPUs' arrangement, NUMA nodes, caches
/// and memory blocks, unless it has them: at the stop, at the first
/// `--switch-output` window, or at the start for a stream, whose
/// features go first.
pub fn complete(host: &mut Host) {
    if !host.topology.cpus.is_empty() {
        return;
    }
    host.topology = topology(host.cpus_available);
    host.numa_nodes = nodes::numa_nodes();
    host.caches = devices::caches();
    host.memory = nodes::memory_topology();
}

fn read_list(name: &str) -> Vec<u32> {
    std::fs::read_to_string(format!("/sys/devices/system/cpu/{name}"))
        .ok()
        .and_then(|text| cpu::parse_list(&text).ok())
        .unwrap_or_default()
}

/// Sibling lists in order of first appearance, and each CPU's ids, as
/// perf's `cpu_topology__new` collects them (absent CPUs read as zeros).
fn topology(present: u32) -> Topology {
    let mut topology = Topology::default();
    let mut seen: [HashSet<String>; 3] = Default::default();
    for cpu in 0..present {
        let dir = format!("/sys/devices/system/cpu/cpu{cpu}/topology");
        let read = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| std::fs::read_to_string(format!("{dir}/{n}")).ok())
                .map(|s| s.trim().to_string())
        };
        let id = |name: &str| read(&[name]).and_then(|s| s.parse().ok()).unwrap_or(0);
        topology
            .cpus
            .push((id("core_id"), id("physical_package_id"), id("die_id")));
        let lists = [
            (
                read(&["package_cpus_list", "core_siblings_list"]),
                &mut topology.package_cpus,
            ),
            (
                read(&["core_cpus_list", "thread_siblings_list"]),
                &mut topology.core_cpus,
            ),
            (read(&["die_cpus_list"]), &mut topology.die_cpus),
        ];
        for ((list, out), seen) in lists.into_iter().zip(&mut seen) {
            if let Some(list) = list {
                if seen.insert(list.clone()) {
                    out.push(list);
                }
            }
        }
    }
    topology
}

/// The CPU's vendor string as the `cpuid` instruction gives it
/// (`GenuineIntel`, `AuthenticAMD`), which perf's x86 code checks; empty
/// where /proc/cpuinfo has none (other architectures).
pub fn cpu_vendor() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    cpuinfo_field(&cpuinfo, "vendor_id").unwrap_or_default()
}

fn cpuinfo_field(cpuinfo: &str, key: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string())
    })
}

fn meminfo_total_kb() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
