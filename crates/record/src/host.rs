//! Facts about this host for perf.data's header features.

use shardrec_shard::Host;
use shardrec_sys::cpu;

/// Reads the host's facts; a fact that cannot be read is left empty.
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
    Host {
        hostname: field(|u| u.nodename()),
        os_release: field(|u| u.release()),
        kernel_version: field(|u| u.version()),
        arch: field(|u| u.machine()),
        cpus_online: cpu::online().map_or(0, |c| c.len() as u32),
        cpus_available: cpu::possible().map_or(0, |c| c.len() as u32),
        cpu_desc: info("model name"),
        // perf's x86 cpuid string: vendor,family,model,stepping
        cpuid: format!(
            "{},{},{},{}",
            info("vendor_id"),
            info("cpu family"),
            info("model"),
            info("stepping")
        ),
        total_mem_kb: meminfo_total_kb().unwrap_or(0),
    }
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
