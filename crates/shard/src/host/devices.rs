//! PMUs and CPU caches, as perf 6.1 lists them (`pmu_read_sysfs`,
//! `perf_pmu__caps_parse`, `build_caches`).

use shardrec_perfdata::host::{CacheLevel, Pmu};

const PMUS: &str = "/sys/bus/event_source/devices";

/// perf reads at most this many cache levels per CPU (`MAX_CACHE_LVL`).
const MAX_CACHE_LEVELS: u32 = 4;

/// Every PMU, in directory order, with its capabilities.
pub fn pmus() -> Vec<Pmu> {
    let Ok(entries) = std::fs::read_dir(PMUS) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let type_ = read_trimmed(&format!("{PMUS}/{name}/type"))?.parse().ok()?;
            let caps = pmu_caps(&name);
            Some(Pmu { type_, name, caps })
        })
        .collect()
}

fn pmu_caps(pmu: &str) -> Vec<(String, String)> {
    let dir = format!("{PMUS}/{pmu}/caps");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let value = read_trimmed(&format!("{dir}/{name}"))?;
            Some((name, value))
        })
        .collect()
}

/// The distinct caches of every possible CPU, by level (a stable sort, as
/// glibc's qsort is for these sizes); empty if one cannot be read, where
/// perf writes no CACHE feature.
pub fn caches() -> Vec<CacheLevel> {
    let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let cpus = shardrec_sys::cpu::parse_list(possible.trim()).unwrap_or_default();
    let mut caches: Vec<CacheLevel> = Vec::new();
    for cpu in 0..cpus.last().map_or(0, |&last| last + 1) {
        for index in 0..MAX_CACHE_LEVELS {
            let dir = format!("/sys/devices/system/cpu/cpu{cpu}/cache/index{index}");
            if std::fs::metadata(&dir).is_err() {
                break;
            }
            let Some(cache) = cache(&dir) else {
                return Vec::new();
            };
            if !caches.contains(&cache) {
                caches.push(cache);
            }
        }
    }
    caches.sort_by_key(|c| c.level);
    caches
}

fn cache(dir: &str) -> Option<CacheLevel> {
    let text = |name: &str| read_trimmed(&format!("{dir}/{name}"));
    let number = |name: &str| text(name)?.parse().ok();
    Some(CacheLevel {
        level: number("level")?,
        line_size: number("coherency_line_size")?,
        sets: number("number_of_sets")?,
        ways: number("ways_of_associativity")?,
        kind: text("type")?,
        size: text("size")?,
        cpus: text("shared_cpu_list")?,
    })
}

fn read_trimmed(path: &str) -> Option<String> {
    Some(std::fs::read_to_string(path).ok()?.trim().to_string())
}
