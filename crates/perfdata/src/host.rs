//! What the header says about the recording host beyond `uname`: NUMA
//! nodes, PMUs, CPU caches and memory blocks, as perf 6.1 reads them from
//! sysfs and encodes them (`write_numa_topology`, `write_pmu_mappings`,
//! `write_cache`, `write_mem_topology`, `write_pmu_caps` and
//! `write_cpu_pmu_caps` in `tools/perf/util/header.c`).
//!
//! The types are plain facts, kept in a recording's `meta` between record
//! and merge; reading them from sysfs is the recorder's job.

use serde::{Deserialize, Serialize};

use crate::feature::{Feature, FeatureBuf};

/// One NUMA node (`/sys/devices/system/node/nodeN`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaNode {
    /// The node's number.
    pub node: u32,
    /// `MemTotal` of its `meminfo`, in kB.
    pub mem_total_kb: u64,
    /// `MemFree` of its `meminfo`, in kB, when it was read.
    pub mem_free_kb: u64,
    /// Its `cpulist`.
    pub cpus: String,
}

/// A PMU (`/sys/bus/event_source/devices/NAME`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pmu {
    /// The `type` to put in a `perf_event_attr`.
    pub type_: u32,
    /// Its directory's name.
    pub name: String,
    /// Its `caps/` files, as (name, content), in directory order.
    pub caps: Vec<(String, String)>,
}

/// One CPU cache (`/sys/devices/system/cpu/cpuN/cache/indexM`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheLevel {
    /// `level`
    pub level: u32,
    /// `coherency_line_size`
    pub line_size: u32,
    /// `number_of_sets`
    pub sets: u32,
    /// `ways_of_associativity`
    pub ways: u32,
    /// `type` (Data, Instruction, Unified)
    pub kind: String,
    /// `size`, as sysfs writes it (`48K`)
    pub size: String,
    /// `shared_cpu_list`
    pub cpus: String,
}

/// The memory blocks of each node (`/sys/devices/system/memory`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryTopology {
    /// `block_size_bytes`
    pub block_size: u64,
    /// Each node with the indexes of its `memoryN` blocks, by node.
    pub nodes: Vec<(u64, Vec<u64>)>,
}

/// `HEADER_NUMA_TOPOLOGY`: count, then per node its number, total and free
/// memory and CPU list.
pub fn numa_topology(nodes: &[NumaNode]) -> (Feature, Vec<u8>) {
    let mut buf = FeatureBuf::new();
    buf.u32(nodes.len() as u32);
    for node in nodes {
        buf.u32(node.node)
            .u64(node.mem_total_kb)
            .u64(node.mem_free_kb)
            .string(&node.cpus);
    }
    (Feature::NumaTopology, buf.into_bytes())
}

/// `HEADER_PMU_MAPPINGS`: count, then per PMU its type and name.
pub fn pmu_mappings(pmus: &[Pmu]) -> (Feature, Vec<u8>) {
    let mut buf = FeatureBuf::new();
    buf.u32(pmus.len() as u32);
    for pmu in pmus {
        buf.u32(pmu.type_).string(&pmu.name);
    }
    (Feature::PmuMappings, buf.into_bytes())
}

/// `HEADER_PMU_CAPS`: the PMUs other than `cpu` that have capabilities,
/// each as its capabilities then its name.
pub fn pmu_caps(pmus: &[Pmu]) -> (Feature, Vec<u8>) {
    let with_caps: Vec<&Pmu> = pmus
        .iter()
        .filter(|p| p.name != "cpu" && !p.caps.is_empty())
        .collect();
    let mut buf = FeatureBuf::new();
    buf.u32(with_caps.len() as u32);
    for pmu in with_caps {
        caps(&mut buf, pmu);
        buf.string(&pmu.name);
    }
    (Feature::PmuCaps, buf.into_bytes())
}

/// `HEADER_CPU_PMU_CAPS`: the `cpu` PMU's capabilities; perf writes none
/// without a `cpu` PMU (a machine without a hardware PMU).
pub fn cpu_pmu_caps(pmus: &[Pmu]) -> Option<(Feature, Vec<u8>)> {
    let cpu = pmus.iter().find(|p| p.name == "cpu")?;
    let mut buf = FeatureBuf::new();
    caps(&mut buf, cpu);
    Some((Feature::CpuPmuCaps, buf.into_bytes()))
}

fn caps(buf: &mut FeatureBuf, pmu: &Pmu) {
    buf.u32(pmu.caps.len() as u32);
    for (name, value) in &pmu.caps {
        buf.string(name).string(value);
    }
}

/// `HEADER_CACHE`: version 1, count, then per cache its numbers and strings.
pub fn cache(caches: &[CacheLevel]) -> (Feature, Vec<u8>) {
    let mut buf = FeatureBuf::new();
    buf.u32(1).u32(caches.len() as u32);
    for c in caches {
        buf.u32(c.level).u32(c.line_size).u32(c.sets).u32(c.ways);
        buf.string(&c.kind).string(&c.size).string(&c.cpus);
    }
    (Feature::Cache, buf.into_bytes())
}

/// Memory block numbers from here on are no host's (2^24 blocks of the
/// smallest size, 128 MiB, are 2 PiB): a damaged `meta`, whose bitmap
/// would ask for that much memory. They are left out.
const MAX_MEMORY_BLOCK: u64 = 1 << 24;

/// `HEADER_MEM_TOPOLOGY`: version 1, block size, node count, then per node
/// its number and a bitmap of its blocks (bit count, then u64 words).
pub fn mem_topology(memory: &MemoryTopology) -> (Feature, Vec<u8>) {
    let mut buf = FeatureBuf::new();
    buf.u64(1)
        .u64(memory.block_size)
        .u64(memory.nodes.len() as u64);
    for (node, blocks) in &memory.nodes {
        let blocks: Vec<u64> = blocks
            .iter()
            .copied()
            .filter(|&b| b < MAX_MEMORY_BLOCK)
            .collect();
        let bits = blocks.iter().max().map_or(1, |&max| max + 1);
        let mut words = vec![0u64; bits.div_ceil(64) as usize];
        for block in blocks {
            words[(block / 64) as usize] |= 1 << (block % 64);
        }
        buf.u64(*node).u64(bits).u64(bits);
        for word in words {
            buf.u64(word);
        }
    }
    (Feature::MemTopology, buf.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_blocks_become_a_bitmap_one_past_the_highest() {
        let memory = MemoryTopology {
            block_size: 0x800_0000,
            nodes: vec![(0, vec![0, 1, 64])],
        };
        let (_, bytes) = mem_topology(&memory);
        let words: Vec<u64> = bytes
            .chunks(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(words, [1, 0x800_0000, 1, 0, 65, 65, 0b11, 1]);
        // A block number no host has (a damaged meta, found by the fuzzer)
        // is left out instead of asking for a bitmap of its size.
        let memory = MemoryTopology {
            nodes: vec![(0, vec![0, 1, 64, 224_433_440_327_563_672])],
            ..memory
        };
        assert_eq!(mem_topology(&memory).1, bytes);
    }

    #[test]
    fn only_pmus_with_caps_other_than_cpu_are_in_pmu_caps() {
        let pmu = |name: &str, caps: &[(&str, &str)]| Pmu {
            type_: 4,
            name: name.into(),
            caps: caps
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
        };
        let pmus = [
            pmu("cpu", &[("max_precise", "3")]),
            pmu("software", &[]),
            pmu("ibs_op", &[("zen4_ibs_extensions", "1")]),
        ];
        let (_, bytes) = pmu_caps(&pmus);
        assert_eq!(bytes[..4], 1u32.to_ne_bytes());
        // count, 1 cap (two strings of 68), then the name.
        assert_eq!(bytes.len(), 4 + 4 + 2 * 68 + 68);
        let (_, cpu) = cpu_pmu_caps(&pmus).unwrap();
        assert_eq!(cpu.len(), 4 + 2 * 68);
        assert!(cpu_pmu_caps(&pmus[1..]).is_none());
    }
}
