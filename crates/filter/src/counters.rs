//! The counters a filter program keeps: one single-entry array map whose
//! value holds a slot per possible CPU, each on its own cache line, with
//! the samples kept and dropped on that CPU. One value (not one per CPU)
//! so the map can be mapped and read without a bpf(2) call.

/// Bytes of one CPU's slot: a cache line, so CPUs never share one.
pub const SLOT_BYTES: u32 = 64;
/// Offset of the kept count in a slot.
pub const KEPT: u32 = 0;
/// Offset of the dropped count in a slot.
pub const DROPPED: u32 = 8;

/// The map's value size for `slots` CPUs.
pub const fn value_size(slots: u32) -> u32 {
    slots * SLOT_BYTES
}

/// What a filter kept and dropped on one CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Samples the program let through.
    pub kept: u64,
    /// Samples it dropped.
    pub dropped: u64,
}

/// Reads slot `cpu` from the map's value bytes (read with `load`, which
/// must read a u64 the kernel may be updating).
pub fn read_slot(cpu: u32, load: impl Fn(usize) -> u64) -> Counts {
    let base = (cpu * SLOT_BYTES) as usize;
    Counts {
        kept: load(base + KEPT as usize),
        dropped: load(base + DROPPED as usize),
    }
}
