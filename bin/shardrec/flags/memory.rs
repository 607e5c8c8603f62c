//! `perf mem record` and `perf c2c record`: the memory-sampling events
//! perf 6.1 chooses (`arch/x86/util/mem-events.c`), found as perf finds
//! them, in sysfs under `/sys/devices`:
//!
//! - on AMD, IBS's `ibs_op//`, which samples loads and stores together;
//! - on Intel, `cpu/mem-loads,ldlat=N/P` and `cpu/mem-stores/P` (a group
//!   led by `mem-loads-aux` where the PMU has it), one per PMU of a
//!   hybrid CPU (`cpu_core`, `cpu_atom`).
//!
//! Where none is there, perf says "failed: memory events not supported"
//! and so does shardrec.

use std::path::{Path, PathBuf};

/// Which memory operations to sample (`perf mem -t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operations {
    pub loads: bool,
    pub stores: bool,
}

impl Operations {
    /// Both, perf's default.
    pub const ALL: Operations = Operations {
        loads: true,
        stores: true,
    };

    /// Neither, before any is named.
    const NONE: Operations = Operations {
        loads: false,
        stores: false,
    };

    /// These and `other`'s.
    fn and(self, other: Operations) -> Operations {
        Operations {
            loads: self.loads || other.loads,
            stores: self.stores || other.stores,
        }
    }
}

/// `-t`'s list: `load`, `store`, comma-separated, any case (perf's
/// `parse_mem_ops`).
pub fn operations(text: &str) -> Result<Operations, String> {
    let mut ops = Operations::NONE;
    for word in text.split(',') {
        ops = ops.and(match word.to_ascii_lowercase().as_str() {
            "load" => LOADS_ONLY,
            "store" => STORES_ONLY,
            _ => return Err(format!("unknown sampling op {word} (load, store)")),
        });
    }
    Ok(ops)
}

/// Loads alone.
const LOADS_ONLY: Operations = Operations {
    loads: true,
    stores: false,
};

/// Stores alone.
const STORES_ONLY: Operations = Operations {
    loads: false,
    stores: true,
};

/// perf's message where no PMU has memory events.
pub const NOT_SUPPORTED: &str = "failed: memory events not supported";

/// The memory events this machine has, as sysfs shows them.
pub struct MemoryEvents {
    devices: PathBuf,
    amd: bool,
}

impl MemoryEvents {
    /// This machine's (`/sys/devices`, the CPU's vendor).
    pub fn here() -> MemoryEvents {
        let vendor = shardrec_shard::host::cpu_vendor();
        MemoryEvents::at(Path::new("/sys/devices"), vendor == "AuthenticAMD")
    }

    /// Those under `devices`, on an AMD CPU or not.
    pub fn at(devices: &Path, amd: bool) -> MemoryEvents {
        MemoryEvents {
            devices: devices.to_path_buf(),
            amd,
        }
    }

    /// The events `perf mem`/`perf c2c` sample `ops` with, at load
    /// latency `ldlat`; or perf's refusal.
    pub fn sampled(&self, ops: Operations, ldlat: u32) -> Result<Sampled, String> {
        if !self.supported() {
            return Err(NOT_SUPPORTED.into());
        }
        if self.amd {
            if !(ops.loads && ops.stores) {
                return Err("failed: event '' not supported (AMD's IBS samples loads and stores together: -t load,store)".into());
            }
            return Ok(Sampled {
                weight: true,
                events: vec!["ibs_op//".into()],
            });
        }
        let pmus = self.core_pmus();
        let mut events = Vec::new();
        for (op, event) in [(ops.loads, "mem-loads"), (ops.stores, "mem-stores")] {
            if !op {
                continue;
            }
            let on: Vec<&String> = pmus.iter().filter(|p| self.has(p, event)).collect();
            if on.is_empty() {
                return Err(format!("failed: event '{event}' not supported"));
            }
            events.extend(on.into_iter().map(|pmu| match event {
                "mem-loads" if self.has(pmu, "mem-loads-aux") => {
                    format!("{{{pmu}/mem-loads-aux/,{pmu}/mem-loads,ldlat={ldlat}/}}:P")
                }
                "mem-loads" => format!("{pmu}/mem-loads,ldlat={ldlat}/P"),
                _ => format!("{pmu}/mem-stores/P"),
            }));
        }
        Ok(Sampled {
            weight: ops.loads,
            events,
        })
    }

    /// The events perf names by tag (`-e`), each with the operations it
    /// samples and whether this machine has it.
    fn tagged(&self) -> Vec<(&'static str, Operations, bool)> {
        if self.amd {
            let ibs = self.devices.join("ibs_op").exists();
            return vec![("mem-ldst", Operations::ALL, ibs)];
        }
        let pmus = self.core_pmus();
        let has = |event: &str| pmus.iter().any(|pmu| self.has(pmu, event));
        vec![
            ("ldlat-loads", LOADS_ONLY, has("mem-loads")),
            ("ldlat-stores", STORES_ONLY, has("mem-stores")),
        ]
    }

    /// `-e list`: each event's tag, and whether it is available, as perf
    /// lists them; perf's refusal where none is.
    pub fn listing(&self) -> Result<String, String> {
        if !self.supported() {
            return Err(NOT_SUPPORTED.into());
        }
        let line = |(tag, _, here): (&str, Operations, bool)| {
            format!("{tag:<13}{}\n", if here { ": available" } else { "" })
        };
        Ok(self.tagged().into_iter().map(line).collect())
    }

    /// Whether this machine has any of the events (perf's
    /// `perf_mem_events__init`).
    fn supported(&self) -> bool {
        self.tagged().iter().any(|(_, _, here)| *here)
    }

    /// `-e TAGS`: the operations the events tagged so sample (a tag
    /// given in part names every event it is part of, as perf's
    /// `strstr`).
    pub fn operations_of(&self, tags: &str) -> Result<Operations, String> {
        let mut ops = Operations::NONE;
        for word in tags.split(',') {
            let named: Vec<Operations> = (self.tagged().into_iter())
                .filter(|(tag, _, _)| !word.is_empty() && tag.contains(word))
                .map(|(_, ops, _)| ops)
                .collect();
            if named.is_empty() {
                return Err(format!(
                    "failed: event '{word}' not found, use '-e list' to get list of available events"
                ));
            }
            ops = named.into_iter().fold(ops, Operations::and);
        }
        Ok(ops)
    }

    /// Whether PMU `pmu` has `event` among its `events/`.
    fn has(&self, pmu: &str, event: &str) -> bool {
        self.devices.join(pmu).join("events").join(event).exists()
    }

    /// The core PMUs: `cpu`, or a hybrid CPU's `cpu_core` and `cpu_atom`.
    fn core_pmus(&self) -> Vec<String> {
        match self.devices.join("cpu").exists() {
            true => vec!["cpu".into()],
            false => ["cpu_core", "cpu_atom"]
                .into_iter()
                .filter(|p| self.devices.join(p).exists())
                .map(String::from)
                .collect(),
        }
    }
}

/// The events that sample memory operations.
#[derive(Debug, PartialEq, Eq)]
pub struct Sampled {
    /// Whether they weigh each sample (`-W`: loads' latency).
    pub weight: bool,
    /// The events, as `-e` takes them.
    pub events: Vec<String>,
}

impl Sampled {
    /// `-e EVENT` for each.
    pub fn event_words(&self) -> impl Iterator<Item = String> + '_ {
        self.events
            .iter()
            .flat_map(|e| ["-e".to_string(), e.clone()])
    }
}

/// perf's default load latency, in cycles (`perf_mem_events__loads_ldlat`).
pub const LDLAT: u32 = 30;

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/sys/devices` with `files` (paths under it) made.
    struct FakeDevices(PathBuf);

    impl FakeDevices {
        fn with(name: &str, files: &[&str]) -> FakeDevices {
            let dir =
                std::env::temp_dir().join(format!("shardrec-memory-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            for file in files {
                let path = dir.join(file);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, "").unwrap();
            }
            std::fs::create_dir_all(&dir).unwrap();
            FakeDevices(dir)
        }
    }

    impl Drop for FakeDevices {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// `-W`, if the events weigh samples, then the events.
    fn words(devices: &FakeDevices, amd: bool, ops: Operations) -> Result<String, String> {
        let sampled = MemoryEvents::at(&devices.0, amd).sampled(ops, LDLAT)?;
        let weight = sampled.weight.then(|| "-W".to_string());
        Ok(weight
            .into_iter()
            .chain(sampled.event_words())
            .collect::<Vec<_>>()
            .join(" "))
    }

    #[test]
    fn amd_samples_loads_and_stores_with_ibs_op() {
        let ibs = FakeDevices::with("amd", &["ibs_op/type"]);
        assert_eq!(
            words(&ibs, true, Operations::ALL).unwrap(),
            "-W -e ibs_op//"
        );
        assert!(words(&ibs, true, LOADS_ONLY)
            .unwrap_err()
            .contains("together"));
        let none = FakeDevices::with("amd-none", &["msr/type"]);
        assert_eq!(
            words(&none, true, Operations::ALL).unwrap_err(),
            NOT_SUPPORTED
        );
    }

    #[test]
    fn intel_samples_each_operation_with_its_event() {
        let cpu = FakeDevices::with("intel", &["cpu/events/mem-loads", "cpu/events/mem-stores"]);
        assert_eq!(
            words(&cpu, false, Operations::ALL).unwrap(),
            "-W -e cpu/mem-loads,ldlat=30/P -e cpu/mem-stores/P"
        );
        assert_eq!(
            words(&cpu, false, LOADS_ONLY).unwrap(),
            "-W -e cpu/mem-loads,ldlat=30/P"
        );
        assert_eq!(
            words(&cpu, false, STORES_ONLY).unwrap(),
            "-e cpu/mem-stores/P"
        );
        let none = FakeDevices::with("intel-none", &["cpu/type"]);
        assert_eq!(
            words(&none, false, Operations::ALL).unwrap_err(),
            NOT_SUPPORTED
        );
    }

    #[test]
    fn intel_groups_loads_with_the_aux_event_and_takes_each_hybrid_pmu() {
        let aux = FakeDevices::with(
            "intel-aux",
            &["cpu/events/mem-loads", "cpu/events/mem-loads-aux"],
        );
        assert_eq!(
            words(&aux, false, LOADS_ONLY).unwrap(),
            "-W -e {cpu/mem-loads-aux/,cpu/mem-loads,ldlat=30/}:P"
        );
        let hybrid = FakeDevices::with(
            "hybrid",
            &["cpu_core/events/mem-loads", "cpu_atom/events/mem-loads"],
        );
        assert_eq!(
            words(&hybrid, false, LOADS_ONLY).unwrap(),
            "-W -e cpu_core/mem-loads,ldlat=30/P -e cpu_atom/mem-loads,ldlat=30/P"
        );
    }

    #[test]
    fn events_are_listed_and_named_by_their_tags() {
        let ibs = FakeDevices::with("tags-amd", &["ibs_op/type"]);
        let amd = MemoryEvents::at(&ibs.0, true);
        assert_eq!(amd.listing().unwrap(), "mem-ldst     : available\n");
        assert_eq!(amd.operations_of("mem-ldst").unwrap(), Operations::ALL);
        assert!(amd
            .operations_of("ldlat-loads")
            .unwrap_err()
            .contains("'-e list'"));
        let cpu = FakeDevices::with("tags-intel", &["cpu/events/mem-loads"]);
        let intel = MemoryEvents::at(&cpu.0, false);
        assert_eq!(
            intel.listing().unwrap(),
            "ldlat-loads  : available\nldlat-stores \n"
        );
        assert_eq!(intel.operations_of("ldlat-loads").unwrap(), LOADS_ONLY);
        assert_eq!(intel.operations_of("ldlat").unwrap(), Operations::ALL);
        let none = FakeDevices::with("tags-none", &["msr/type"]);
        assert_eq!(
            MemoryEvents::at(&none.0, true).listing().unwrap_err(),
            NOT_SUPPORTED
        );
    }

    #[test]
    fn operations_read_as_perf_reads_them() {
        assert_eq!(operations("load").unwrap(), LOADS_ONLY);
        assert_eq!(operations("Store,LOAD").unwrap(), Operations::ALL);
        assert!(operations("fetch").unwrap_err().contains("fetch"));
    }
}
