//! Callchains, which `--call-graph` sets for every event and a `-e`
//! term (`call-graph=dwarf`) for one.

/// Callchain recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallGraph {
    /// No callchains.
    None,
    /// `-g` / `--call-graph fp`: kernel-walked frame pointers.
    FramePointer,
    /// `--call-graph dwarf[,SIZE]`: user registers and SIZE bytes of stack.
    Dwarf(u32),
    /// `--call-graph lbr`: the hardware's last branch records (Intel).
    Lbr,
}

/// The default `--call-graph dwarf` stack copy, as perf's.
pub const DEFAULT_DWARF_STACK: u32 = 8192;
