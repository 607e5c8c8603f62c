//! What the user asked for, as the command line says it, and the checks
//! that turn it into a plan before anything is opened.

use std::path::PathBuf;

/// How often to sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampling {
    /// perf's default: 4000 Hz, or every event for tracepoints.
    Default,
    /// `-F HZ`
    Frequency(u64),
    /// `-F max`: the kernel's `perf_event_max_sample_rate`.
    MaxFrequency,
    /// `-c PERIOD`
    Period(u64),
}

/// Callchain recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallGraph {
    /// No callchains.
    None,
    /// `-g` / `--call-graph fp`: kernel-walked frame pointers.
    FramePointer,
    /// `--call-graph dwarf[,SIZE]`: user registers and SIZE bytes of stack.
    Dwarf(u32),
}

/// `shardrec record`'s options, with perf record's names and defaults.
#[derive(Clone, Debug)]
pub struct RecordConfig {
    /// `-e`, each possibly a comma list; empty means the default event.
    pub events: Vec<String>,
    /// `-a`
    pub all_cpus: bool,
    /// `-C LIST`
    pub cpu_list: Option<String>,
    /// `-p PID[,PID...]`
    pub pids: Option<String>,
    /// `-F` / `-c`
    pub sampling: Sampling,
    /// `-g` / `--call-graph`
    pub call_graph: CallGraph,
    /// `-m PAGES`: data pages per CPU ring; `None` picks a size.
    pub ring_pages: Option<usize>,
    /// `-o FILE`
    pub output: PathBuf,
    /// `--no-merge`: stop after writing the shards.
    pub no_merge: bool,
    /// `-- CMD ARGS...`
    pub command: Vec<String>,
    /// The whole command line, kept in meta.
    pub command_line: Vec<String>,
    /// `-q`: no summary.
    pub quiet: bool,
    /// `-k CLOCK`: timestamp with this `CLOCK_*` id instead of perf's clock.
    pub clockid: Option<i32>,
}

impl RecordConfig {
    /// Defaults as perf record has them, recording into `perf.data`.
    pub fn new() -> Self {
        RecordConfig {
            events: Vec::new(),
            all_cpus: false,
            cpu_list: None,
            pids: None,
            sampling: Sampling::Default,
            call_graph: CallGraph::None,
            ring_pages: None,
            output: PathBuf::from("perf.data"),
            no_merge: false,
            command: Vec::new(),
            command_line: Vec::new(),
            quiet: false,
            clockid: None,
        }
    }
}

impl Default for RecordConfig {
    fn default() -> Self {
        RecordConfig::new()
    }
}

/// The default `--call-graph dwarf` stack copy, as perf's.
pub const DEFAULT_DWARF_STACK: u32 = 8192;

/// Parses `--call-graph`'s value: `fp`, `dwarf` or `dwarf,SIZE`.
pub fn parse_call_graph(text: &str) -> Result<CallGraph, String> {
    let (mode, size) = match text.split_once(',') {
        Some((mode, size)) => (mode, Some(size)),
        None => (text, None),
    };
    match (mode, size) {
        ("fp", None) => Ok(CallGraph::FramePointer),
        ("dwarf", None) => Ok(CallGraph::Dwarf(DEFAULT_DWARF_STACK)),
        ("dwarf", Some(size)) => {
            let size: u32 = size
                .parse()
                .map_err(|_| format!("'{size}' is not a stack dump size in bytes"))?;
            // The kernel wants a multiple of 8 below 64 KiB, as perf checks.
            if size == 0 || size % 8 != 0 || size > 65528 {
                return Err(format!(
                    "dwarf stack size {size} must be a multiple of 8 between 8 and 65528"
                ));
            }
            Ok(CallGraph::Dwarf(size))
        }
        _ => Err(format!(
            "'{text}' is not a call-graph mode (fp, dwarf or dwarf,SIZE)"
        )),
    }
}

/// Parses `-k`: a clock name as perf knows them, or a number.
pub fn parse_clockid(text: &str) -> Result<i32, String> {
    const CLOCKS: &[(&str, i32)] = &[
        ("monotonic", libc::CLOCK_MONOTONIC),
        ("mono", libc::CLOCK_MONOTONIC),
        ("monotonic_raw", libc::CLOCK_MONOTONIC_RAW),
        ("raw", libc::CLOCK_MONOTONIC_RAW),
        ("realtime", libc::CLOCK_REALTIME),
        ("real", libc::CLOCK_REALTIME),
        ("boottime", libc::CLOCK_BOOTTIME),
        ("boot", libc::CLOCK_BOOTTIME),
        ("tai", libc::CLOCK_TAI),
    ];
    let name = text.to_ascii_lowercase();
    let name = name.strip_prefix("clock_").unwrap_or(&name);
    CLOCKS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, id)| id)
        .or_else(|| text.parse().ok())
        .ok_or_else(|| {
            format!("'{text}' is not a clock (monotonic, monotonic_raw, realtime, boottime, tai)")
        })
}

/// Parses `-m`: a number of pages (a power of two), or a size with a
/// B/K/M/G suffix, as perf accepts.
pub fn parse_ring_pages(text: &str, page_size: usize) -> Result<usize, String> {
    let text = text.trim();
    let unit = text.chars().last().filter(|c| c.is_ascii_alphabetic());
    let pages = match unit.map(|c| c.to_ascii_uppercase()) {
        Some(c) => {
            let shift = match c {
                'B' => 0,
                'K' => 10,
                'M' => 20,
                'G' => 30,
                _ => return Err(format!("'{text}' has an unknown size unit")),
            };
            let number: u64 = text[..text.len() - 1]
                .parse()
                .map_err(|_| format!("'{text}' is not a size"))?;
            ((number << shift) / page_size as u64) as usize
        }
        None => text
            .parse()
            .map_err(|_| format!("'{text}' is not a number of pages"))?,
    };
    if pages == 0 || !pages.is_power_of_two() {
        return Err(format!(
            "-m {text}: the ring needs a power-of-two number of data pages (got {pages})"
        ));
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_graph_modes() {
        assert_eq!(parse_call_graph("fp"), Ok(CallGraph::FramePointer));
        assert_eq!(parse_call_graph("dwarf"), Ok(CallGraph::Dwarf(8192)));
        assert_eq!(parse_call_graph("dwarf,4096"), Ok(CallGraph::Dwarf(4096)));
        assert!(parse_call_graph("dwarf,7").is_err());
        assert!(parse_call_graph("lbr").is_err());
    }

    #[test]
    fn ring_sizes() {
        assert_eq!(parse_ring_pages("16", 4096), Ok(16));
        assert_eq!(parse_ring_pages("4M", 4096), Ok(1024));
        assert!(parse_ring_pages("3", 4096).is_err());
        assert!(parse_ring_pages("0", 4096).is_err());
    }
}
