//! NUMA nodes and their memory blocks, as perf 6.1's `numa_topology__new`
//! and `build_mem_topology` read them.

use shardrec_perfdata::host::{MemoryTopology, NumaNode};
use shardrec_sys::cpu;

const NODES: &str = "/sys/devices/system/node";

/// The online nodes with their memory and CPUs; a node whose files cannot
/// be read ends the list there, as perf's reader fails at it.
pub fn numa_nodes() -> Vec<NumaNode> {
    let online = std::fs::read_to_string(format!("{NODES}/online")).unwrap_or_default();
    let nodes = cpu::parse_list(online.trim()).unwrap_or_default();
    nodes.into_iter().map_while(numa_node).collect()
}

fn numa_node(node: u32) -> Option<NumaNode> {
    let meminfo = std::fs::read_to_string(format!("{NODES}/node{node}/meminfo")).ok()?;
    // "Node 0 MemTotal:       5728468 kB"
    let field = |name: &str| {
        meminfo.lines().find_map(|line| {
            let mut words = line.split_whitespace().skip(2);
            (words.next()? == name).then(|| words.next()?.parse().ok())?
        })
    };
    let cpus = std::fs::read_to_string(format!("{NODES}/node{node}/cpulist")).ok()?;
    Some(NumaNode {
        node,
        mem_total_kb: field("MemTotal:")?,
        mem_free_kb: field("MemFree:")?,
        cpus: cpus.trim_end_matches('\n').to_string(),
    })
}

/// Each node's `memoryN` blocks, by node; `None` where sysfs has no
/// memory blocks (perf then writes no MEM_TOPOLOGY).
pub fn memory_topology() -> Option<MemoryTopology> {
    let size = std::fs::read_to_string("/sys/devices/system/memory/block_size_bytes").ok()?;
    let block_size = u64::from_str_radix(size.trim(), 16).ok()?;
    let mut nodes: Vec<(u64, Vec<u64>)> = numbered_entries(NODES, "node")?
        .into_iter()
        .map(|node| {
            let blocks = numbered_entries(&format!("{NODES}/node{node}"), "memory");
            Some((node, blocks?))
        })
        .collect::<Option<_>>()?;
    nodes.sort_by_key(|&(node, _)| node);
    Some(MemoryTopology { block_size, nodes })
}

/// The numbers N of the entries named `PREFIX` N in `dir`, in directory order.
fn numbered_entries(dir: &str, prefix: &str) -> Option<Vec<u64>> {
    let entries = std::fs::read_dir(dir).ok()?;
    Some(
        entries
            .filter_map(|e| {
                e.ok()?
                    .file_name()
                    .to_str()?
                    .strip_prefix(prefix)?
                    .parse()
                    .ok()
            })
            .collect(),
    )
}
