//! What the user asked for, as typed values: the command line's words are
//! parsed at the edge (the binary's flags), and the plan checks these
//! against the machine before anything is opened.

use std::path::PathBuf;

pub use shardrec_events::{AddressSpace, CallGraph, SampleOptions, Sampling};
use shardrec_events::{CgroupArg, EventArg};
use shardrec_shard::output::Output;

/// `--switch-output`: what ends a window of the recording, which is then
/// merged into a perf.data of its own while recording goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchTrigger {
    /// `--switch-output` or `=signal`: SIGUSR2 (or `snapshot` on
    /// `--control`).
    Signal,
    /// `=TIME` (s, m, h, d): every so long.
    Every(std::time::Duration),
    /// `=SIZE` (B, K, M, G): once the window's rings have produced this
    /// many bytes.
    Bytes(u64),
}

/// `--switch-output` and what goes with it.
#[derive(Clone, Debug)]
pub struct SwitchOutput {
    /// What ends a window.
    pub trigger: SwitchTrigger,
    /// `--switch-max-files=N`: keep only the newest N outputs.
    pub max_files: Option<usize>,
    /// How each window is merged (in the background, at low priority).
    pub merge: shardrec_merge::MergeOptions,
    /// `--keep-shards`: keep each window's directory after its merge.
    pub keep_shards: bool,
    /// `-q`: no "Dump" line for each output.
    pub quiet: bool,
    /// The last window's output is the output itself, not timestamped
    /// (`--overwrite` without `--switch-output`, as perf writes it, and
    /// `--keep-last`).
    pub last_unstamped: bool,
    /// `--keep-last=TIME`: windows are kept, not merged, while they hold
    /// the last TIME of the recording; a snapshot merges them together.
    pub keep_last: Option<std::time::Duration>,
}

/// When the events start counting (`-D`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delay {
    /// `-D MSECS`: this long after the workload starts (or the recording).
    Millis(u64),
    /// `-D -1`: not until `--control` says `enable`.
    UntilEnabled,
}

/// Where `--control` commands come from and acknowledgements go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlSpec {
    /// `fifo:CTL[,ACK]`: named pipes, opened by the recorder.
    Fifo(PathBuf, Option<PathBuf>),
    /// `fd:CTL[,ACK]`: descriptors the recorder inherited.
    Fd(i32, Option<i32>),
}

/// `shardrec record`'s options, with perf record's names and defaults.
#[derive(Clone, Debug)]
pub struct RecordConfig {
    /// `-e`, in order, each with its `--filter`; empty means the default event.
    pub events: Vec<EventArg>,
    /// `-a`
    pub all_cpus: bool,
    /// `-C LIST`: these CPUs only.
    pub cpus: Option<Vec<u32>>,
    /// `-p PID[,PID...]`: these processes.
    pub pids: Option<Vec<i32>>,
    /// `-t TID[,TID...]`: these threads (ignored with `-p`, as in perf).
    pub tids: Option<Vec<i32>>,
    /// `-u USER`: every process of this user (ignored with `-p`/`-t`).
    pub uid: Option<u32>,
    /// Follow the tasks a followed task creates (`-i` turns it off).
    pub inherit: bool,
    /// `--all-user` / `--all-kernel`.
    pub all_in: Option<AddressSpace>,
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
    /// How the shards become perf.data: by the live merger as the
    /// recording goes ([`shardrec_live_merger`]), or after the stop where a
    /// live merge does not apply (`--switch-output`, `--overwrite`).
    pub merge: shardrec_merge::MergeOptions,
    /// `--keep-shards`: keep the shard directory once merged.
    pub keep_shards: bool,
    /// `--timestamp-filename`: the output renamed with the time at the end.
    pub timestamp_filename: bool,
    /// `--dry-run`: check the options, record nothing.
    pub dry_run: bool,
    /// `--shards-dir`: where a private shard directory is made when the
    /// shards cannot live beside the output (default `$TMPDIR`).
    pub shards_dir: Option<PathBuf>,
    /// `--kcore`: the output is a directory with a copy of the kernel's
    /// text taken at the start.
    pub kcore: bool,
    /// `--max-size`: stop cleanly once the recording holds this many
    /// bytes.
    pub max_size: Option<u64>,
    /// `--switch-output`: a perf.data per window of the recording.
    pub switch_output: Option<SwitchOutput>,
    /// `--switch-output-event`: events, not recorded, each hit of which
    /// switches the output as SIGUSR2 does.
    pub switch_output_events: Vec<EventArg>,
    /// `--overwrite`: a flight recorder. The rings are written backward by
    /// the kernel over their oldest records and not read while recording;
    /// a snapshot (SIGUSR2, `snapshot` on `--control`, and the stop) copies
    /// each ring's newest records out into a window of their own.
    pub overwrite: bool,
    /// What each sample carries besides the basics.
    pub sample: SampleOptions,
    /// What is synthesized of the tasks before recording, and when.
    pub synthesis: Synthesis,
    /// `-v` given this many times: 2 prints each attr before opening it.
    pub verbose: u8,
    /// `--group`: all events in one group.
    pub group: bool,
    /// `--strict-freq`: refuse a frequency above the kernel's limit.
    pub strict_freq: bool,
    /// `--no-bpf-event`: no capture of BPF programs.
    pub no_bpf_event: bool,
    /// `--off-cpu`: the waits of the recorded tasks, as perf's
    /// `offcpu-time` event.
    pub off_cpu: bool,
    /// `--off-cpu-thresh MS`: waits shorter are summed in the kernel and
    /// written at the end, as perf 6.16 does.
    pub off_cpu_thresh_ms: Option<u64>,
    /// `-G`: cgroups for the events given before each.
    pub cgroups: Vec<CgroupArg>,
    /// `-q`: no messages but errors.
    pub quiet: bool,
    /// `-D`: start counting late, or when told.
    pub delay: Option<Delay>,
    /// `--control`: commands (enable, disable, stop, ping) while recording.
    pub control: Option<ControlSpec>,
    /// `-- CMD ARGS...`
    pub command: Vec<String>,
    /// `-k CLOCK`: timestamp with this `CLOCK_*` id instead of perf's clock.
    pub clockid: Option<i32>,
    /// `-r PRIO`: the writers run at SCHED_FIFO priority PRIO, as perf's
    /// reading thread does; at normal priority without it, as perf's.
    pub realtime: Option<i32>,
}

impl RecordConfig {
    /// Defaults as perf record has them, recording into `perf.data`.
    pub fn new() -> Self {
        RecordConfig {
            events: Vec::new(),
            all_cpus: false,
            cpus: None,
            pids: None,
            tids: None,
            uid: None,
            inherit: true,
            all_in: None,
            sampling: Sampling::Default,
            call_graph: CallGraph::None,
            ring_pages: None,
            output: PathBuf::from("perf.data"),
            no_merge: false,
            merge: Default::default(),
            keep_shards: false,
            timestamp_filename: false,
            dry_run: false,
            shards_dir: None,
            kcore: false,
            max_size: None,
            switch_output: None,
            switch_output_events: Vec::new(),
            overwrite: false,
            command: Vec::new(),
            clockid: None,
            realtime: None,
            sample: SampleOptions::default(),
            synthesis: Synthesis::default(),
            verbose: 0,
            group: false,
            strict_freq: false,
            no_bpf_event: false,
            off_cpu: false,
            off_cpu_thresh_ms: None,
            cgroups: Vec::new(),
            quiet: false,
            delay: None,
            control: None,
        }
    }
}

impl Default for RecordConfig {
    fn default() -> Self {
        RecordConfig::new()
    }
}

/// `-o`, resolved once at the start ([`Output::resolve`]): what the path
/// is, and what the merge writes.
#[derive(Clone, Debug)]
pub(crate) struct OutputTarget {
    /// The output as given.
    pub given: Output,
    /// The perf.data the merge writes: the output, or with `--kcore` the
    /// `data` file of the directory it makes.
    pub merged: Output,
}

impl OutputTarget {
    /// Resolves `config`'s output.
    pub(crate) fn resolve(config: &RecordConfig) -> Result<OutputTarget, shardrec_shard::Error> {
        let given = Output::resolve(&config.output)?;
        let merged = match config.kcore {
            // New, as perf makes it: an older output was moved aside.
            true => Output::File {
                path: shardrec_shard::output::data_in(&config.output),
                move_aside: false,
            },
            false => given.clone(),
        };
        Ok(OutputTarget { given, merged })
    }
}

/// What is synthesized of the state before recording, and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Synthesis {
    /// The threads (FORK and COMM each): `--synth` with `task` or `mmap`.
    pub tasks: bool,
    /// Their mappings (MMAP2): `--synth` with `mmap`.
    pub maps: bool,
    /// At the end of the recording instead of its start
    /// (`--tail-synthesize`): the tasks of the end, as perf describes them.
    pub at_end: bool,
    /// How long reading one process's maps may take before the rest of
    /// them is left out (`--proc-map-timeout`; perf's default is 500 ms,
    /// shardrec's is no limit).
    pub map_timeout: Option<std::time::Duration>,
}

impl Default for Synthesis {
    fn default() -> Self {
        Synthesis {
            tasks: true,
            maps: true,
            at_end: false,
            map_timeout: None,
        }
    }
}
