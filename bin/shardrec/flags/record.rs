//! `shardrec record`'s options, grouped as a perf user looks for them, with
//! perf record's names and help words, and their conversion into the
//! recorder's typed configuration.

use std::path::PathBuf;

use clap::Args;
use shardrec_record::{AddressSpace, CallGraph, CgroupArg, RecordConfig, Sampling};

use super::values as options;

use super::samples::SampleArgs;
use super::synthesis::SynthesisArgs;

#[derive(Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub events: EventArgs,
    #[command(flatten)]
    targets: TargetArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    sample: SampleArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    synthesis: SynthesisArgs,
    #[command(flatten)]
    pub run: RunArgs,
    /// The command to run and record: the first word that is not an option
    /// or its value, or everything after `--`.
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<String>,
}

#[derive(Args)]
#[command(next_help_heading = "Events")]
pub struct EventArgs {
    /// event selector (perf's syntax: cpu-clock, cycles:u, L1-dcache-load-misses, r003c, msr/tsc/, mem:ADDR:w, sched:sched_switch, {a,b}:S, cpu-clock/period=10000/)
    #[arg(short = 'e', long = "event", value_name = "event")]
    events: Vec<String>,
    /// event filter (an ftrace filter for the tracepoints of the -e before it)
    #[arg(long = "filter", value_name = "filter")]
    filter: Vec<String>,
    /// put the counters into a counter group
    #[arg(long = "group")]
    group: bool,
    /// Configure all used events to run in user space
    #[arg(long = "all-user", conflicts_with = "all_kernel")]
    all_user: bool,
    /// Configure all used events to run in kernel space
    #[arg(long = "all-kernel")]
    all_kernel: bool,
    /// monitor event in cgroup name only (system-wide; names go to the -e before it, in order)
    #[arg(short = 'G', long = "cgroup", value_name = "name")]
    cgroup: Vec<String>,
    /// The `-e` each `--filter` follows (index into `events`), set by `parse`.
    #[arg(skip)]
    pub filter_targets: Vec<Option<usize>>,
    /// The number of `-e` given before each `-G`, set by `parse`.
    #[arg(skip)]
    pub cgroup_positions: Vec<usize>,
}

#[derive(Args)]
#[command(next_help_heading = "Targets")]
struct TargetArgs {
    /// system-wide collection from all CPUs
    #[arg(short = 'a', long = "all-cpus")]
    all_cpus: bool,
    /// list of cpus to monitor (e.g. 0,2-3)
    #[arg(short = 'C', long = "cpu", value_name = "cpu")]
    cpu: Option<String>,
    /// record events on existing process id (comma separated)
    #[arg(short = 'p', long = "pid", value_name = "pid")]
    pid: Option<String>,
    /// record events on existing thread id (comma separated)
    #[arg(short = 't', long = "tid", value_name = "tid")]
    tid: Option<String>,
    /// user to profile
    #[arg(short = 'u', long = "uid", value_name = "user")]
    uid: Option<String>,
    /// child tasks do not inherit counters
    #[arg(short = 'i', long = "no-inherit")]
    no_inherit: bool,
    /// use per-thread mmaps (shardrec keeps one ring per CPU; as in perf, children are not followed)
    #[arg(long = "per-thread")]
    per_thread: bool,
}

#[derive(Args)]
#[command(next_help_heading = "Sampling")]
struct SamplingArgs {
    /// profile at this frequency ("max" for the kernel's limit)
    #[arg(
        short = 'F',
        long = "freq",
        value_name = "freq or 'max'",
        conflicts_with = "count"
    )]
    freq: Option<String>,
    /// event period to sample
    #[arg(short = 'c', long = "count", value_name = "n")]
    count: Option<u64>,
    /// Fail if the specified frequency can't be used
    #[arg(long = "strict-freq")]
    strict_freq: bool,
    /// enables call-graph recording (frame pointers)
    #[arg(short = 'g')]
    g: bool,
    /// setup and enables call graph (stack chain/backtrace): fp, dwarf[,SIZE], lbr
    #[arg(long = "call-graph", value_name = "record_mode[,record_size]")]
    call_graph: Option<String>,
    /// clockid to use for events, see clock_gettime() (monotonic, monotonic_raw, realtime, boottime, tai)
    #[arg(short = 'k', long = "clockid", value_name = "clockid")]
    clockid: Option<String>,
    /// do not record bpf events
    #[arg(long = "no-bpf-event")]
    no_bpf_event: bool,
    /// Enable off-cpu analysis: where and how long tasks wait, as the offcpu-time event, each wait written as it ends (needs BPF with BTF); with --call-graph dwarf, each wait's user stack is unwound with DWARF
    #[arg(long = "off-cpu")]
    off_cpu: bool,
    /// Dump off-cpu samples if off-cpu time exceeds this threshold (in milliseconds); shorter waits are summed by thread and stack in the kernel and written at the end, as perf 6.16 does (default: every wait written as it ends)
    #[arg(long = "off-cpu-thresh", value_name = "ms")]
    off_cpu_thresh: Option<u64>,
}

#[derive(Args)]
#[command(next_help_heading = "Output")]
pub struct OutputArgs {
    /// output file name; the shards are written to FILE.shards/ while recording. '-' is standard output in perf's pipe format; the default is perf.data, or '-' when standard output is a FIFO (a pipe), as in perf
    #[arg(short = 'o', long = "output", value_name = "file")]
    file: Option<PathBuf>,
    /// number of mmap data pages per CPU ring (a power of two, or a size with B/K/M/G)
    #[arg(short = 'm', long = "mmap-pages", value_name = "pages[,pages]")]
    mmap_pages: Option<String>,
    /// stop after writing the shards; do not merge them
    #[arg(long = "no-merge")]
    no_merge: bool,
    /// where to write the shards when they cannot go beside the output (a device, a FIFO, /dev, /proc, a read-only file system): a private directory in DIR (default: $TMPDIR, else /tmp)
    #[arg(long = "shards-dir", value_name = "dir")]
    shards_dir: Option<PathBuf>,
    /// append timestamp to output filename (FILE.YYYYMMDDhhmmsscc, at the end)
    #[arg(long = "timestamp-filename")]
    pub timestamp_filename: bool,
    /// copy /proc/kcore: the output becomes a directory (FILE/data, FILE/kcore_dir)
    #[arg(long = "kcore")]
    kcore: bool,
    /// stop cleanly once the recording holds this much (B/K/M/G)
    #[arg(long = "max-size", value_name = "size")]
    max_size: Option<String>,
    /// Switch output when receiving SIGUSR2 (signal) or cross a size or time threshold: each window becomes FILE.TIMESTAMP, merged in the background
    #[arg(long = "switch-output", value_name = "signal or size[BKMG] or time[smhd]", num_args = 0..=1, require_equals = true, default_missing_value = "signal")]
    switch_output: Option<String>,
    /// switch output event selector (-e's syntax; not recorded): each hit switches the output as SIGUSR2 does, auto-selecting --switch-output=signal when --switch-output is not given
    #[arg(long = "switch-output-event", value_name = "switch output event")]
    switch_output_event: Vec<String>,
    /// use overwrite mode: a flight recorder; each SIGUSR2 (or `snapshot` on --control) writes the rings' newest records to FILE.TIMESTAMP, the stop to FILE
    #[arg(long = "overwrite")]
    overwrite: bool,
    /// keep only the last TIME of the recording on disk, in rotating shard windows; each SIGUSR2 (or `snapshot` on --control) merges them into FILE.TIMESTAMP, the stop into FILE
    #[arg(long = "keep-last", value_name = "time[smhd]")]
    keep_last: Option<String>,
    /// Limit number of switch output generated files (the oldest are removed)
    #[arg(long = "switch-max-files", value_name = "n")]
    switch_max_files: Option<String>,
    /// keep the shard directory after merging it
    #[arg(long = "keep-shards")]
    pub keep_shards: bool,
    #[command(flatten)]
    pub compression: CompressionArg,
    #[command(flatten)]
    pub build_ids: BuildIdArgs,
    /// threads for the merge at the end (default: one per online CPU); perf's --threads=SPEC (cpu, core, package, numa, masks) is accepted: shardrec already writes one file per CPU
    #[arg(long = "threads", value_name = "n|spec", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    threads: Option<String>,
}

impl OutputArgs {
    /// The merge's thread count asked for by `--threads=N`; perf's
    /// `--threads[=SPEC]` is noted and leaves the default.
    pub fn merge_threads(&self) -> Result<Option<usize>, String> {
        let Some(text) = self.threads.as_deref() else {
            return Ok(None);
        };
        if text.parse::<usize>().is_ok() {
            return merge_thread_count(text).map(Some);
        }
        let perf_spec = text.is_empty()
            || matches!(text, "cpu" | "core" | "package" | "numa")
            || text.contains('/')
            || text
                .chars()
                .all(|c| c.is_ascii_hexdigit() || ",-:xX".contains(c));
        if !perf_spec {
            return Err(format!(
                "--threads: '{text}' is neither a thread count for the merge nor one of perf's specs (cpu, core, package, numa, masks)"
            ));
        }
        crate::messages::note(&format!("shardrec: note: --threads={text} is not needed: shardrec already runs one writer process per CPU, pinned to it"));
        Ok(None)
    }
}

impl OutputArgs {
    /// `--switch-output` and `--switch-max-files`; the merge options are
    /// the caller's to fill in.
    fn switch_output(&self) -> Result<Option<shardrec_record::SwitchOutput>, String> {
        let max_files = self
            .switch_max_files
            .as_deref()
            .map(|n| match n.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!(
                    "--switch-max-files={n}: expected a number of files (1 or more)"
                )),
            })
            .transpose()?;
        let keep_last = self
            .keep_last
            .as_deref()
            .map(|time| match options::parse_switch_trigger(time) {
                Ok(shardrec_record::SwitchTrigger::Every(time)) => Ok(time),
                _ => Err(format!("--keep-last={time}: expected a time (30s, 5m, 1h)")),
            })
            .transpose()?;
        if keep_last.is_some() && self.overwrite {
            return Err("--keep-last keeps what the writers stream to disk; --overwrite streams nothing: use one".into());
        }
        // --overwrite and --keep-last snapshot on the signal, as
        // --switch-output does; --switch-output-event selects it, as in
        // perf (its events switch whatever else ends the windows).
        let event = !self.switch_output_event.is_empty();
        let trigger = match (
            self.switch_output.as_deref(),
            self.overwrite || keep_last.is_some() || event,
        ) {
            (Some(trigger), _) => options::parse_switch_trigger(trigger)?,
            (None, true) => shardrec_record::SwitchTrigger::Signal,
            (None, false) => {
                if max_files.is_some() {
                    crate::messages::warning(
                        "--switch-max-files does nothing without --switch-output",
                    );
                }
                return Ok(None);
            }
        };
        let option = match (&self.switch_output, keep_last) {
            (Some(_), _) => "--switch-output",
            (None, Some(_)) => "--keep-last",
            (None, None) if event => "--switch-output-event",
            (None, None) => "--overwrite",
        };
        if self.kcore || self.no_merge {
            let other = if self.kcore { "--kcore" } else { "--no-merge" };
            return Err(format!("{option} cannot be used with {other}"));
        }
        Ok(Some(shardrec_record::SwitchOutput {
            trigger,
            max_files,
            merge: Default::default(),
            keep_shards: self.keep_shards,
            quiet: false,
            // perf names every output of a --switch-output recording
            // (which --switch-output-event selects) with its time.
            last_unstamped: self.switch_output.is_none() && (keep_last.is_some() || !event),
            keep_last,
        }))
    }
}

impl OutputArgs {
    /// Each `--switch-output-event`, parsed as `-e` is.
    fn switch_output_events(&self) -> Result<Vec<shardrec_record::EventArg>, String> {
        self.switch_output_event
            .iter()
            .map(|e| options::parse_switch_output_event(e))
            .collect()
    }
}

/// `--threads N` of the merge: a count of at least 1.
pub fn merge_thread_count(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "--threads: '{text}' is not a thread count (1 or more)"
        )),
    }
}

/// `-B`, `-N`, `--buildid-all`, on record and on merge.
#[derive(Args)]
pub struct BuildIdArgs {
    /// do not collect buildids in perf.data
    #[arg(short = 'B', long = "no-buildid")]
    no_buildid: bool,
    /// do not update the buildid cache (~/.debug, or $PERF_BUILDID_DIR)
    #[arg(short = 'N', long = "no-buildid-cache")]
    no_buildid_cache: bool,
    /// Record build-id of all DSOs regardless of hits
    #[arg(long = "buildid-all")]
    buildid_all: bool,
    /// Enable debuginfod data retrieval: the debug info of the binaries cached goes beside them in the build-id cache, from the servers in URLs (as DEBUGINFOD_URLS: space-separated), or in $DEBUGINFOD_URLS without URLs
    #[arg(long = "debuginfod", value_name = "debuginfod urls", num_args = 0..=1, require_equals = true, default_missing_value = "system")]
    debuginfod: Option<String>,
}

impl BuildIdArgs {
    /// Which build ids the header gets.
    pub fn which(&self) -> shardrec_merge::BuildIds {
        match (self.no_buildid, self.buildid_all) {
            (true, _) => shardrec_merge::BuildIds::None,
            (false, true) => shardrec_merge::BuildIds::All,
            (false, false) => shardrec_merge::BuildIds::Hit,
        }
    }

    /// The build-id cache to add them to, as perf: none with -N or -B.
    pub fn cache(&self) -> Option<shardrec_merge::build_id_cache::BuildIdCache> {
        match self.no_buildid || self.no_buildid_cache {
            true => None,
            false => Some(shardrec_merge::build_id_cache::BuildIdCache {
                dir: shardrec_merge::build_id_cache::default_dir()?,
                debuginfod: self.debuginfod.is_some(),
            }),
        }
    }

    /// `--debuginfod=URLS`: puts URLS in `DEBUGINFOD_URLS`, the only place
    /// libdebuginfod reads its servers from (`system`, or no URLS, keeps
    /// the variable as it is). Called while shardrec is one thread, before
    /// anything starts: the workload sees the variable too, as under perf.
    pub fn set_debuginfod_urls(&self) {
        if let Some(urls) = self.debuginfod.as_deref().filter(|u| *u != "system") {
            std::env::set_var("DEBUGINFOD_URLS", urls);
        }
    }
}

/// `-z`, on record and on merge.
#[derive(Args)]
pub struct CompressionArg {
    /// Compress records using specified level (default: 1 - fastest compression, 22 - greatest compression)
    #[arg(short = 'z', long = "compression-level", value_name = "n", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    level: Option<String>,
}

impl CompressionArg {
    /// The zstd level asked for, if any.
    pub fn level(&self) -> Result<Option<i32>, String> {
        parsed(&self.level, options::parse_compression_level)
    }
}

#[derive(Args)]
#[command(next_help_heading = "Run control")]
pub struct RunArgs {
    /// ms to wait before starting measurement after program start (-1: start with events disabled)
    #[arg(
        short = 'D',
        long = "delay",
        value_name = "ms",
        allow_negative_numbers = true
    )]
    delay: Option<String>,
    /// Listen on ctl-fd descriptor for command to control measurement ('enable', 'disable', 'stop', 'ping', 'evlist'); fifo:ctl-fifo[,ack-fifo] opens FIFOs
    #[arg(
        long = "control",
        value_name = "fd:ctl-fd[,ack-fd] or fifo:ctl-fifo[,ack-fifo]"
    )]
    control: Option<String>,
    /// don't print any message
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
    /// be more verbose (-v: fallbacks; -vv: every attr before it is tried)
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    verbose: u8,
    /// collect data with this RT SCHED_FIFO priority (shardrec's writers, one per CPU; at normal priority without it, as perf's reader)
    #[arg(short = 'r', long = "realtime", value_name = "n", value_parser = clap::value_parser!(i32).range(1..=99))]
    realtime: Option<i32>,
    /// Parse options then exit
    #[arg(long = "dry-run")]
    pub dry_run: bool,
    /// Prepare BPF filter to be used by regular users: pin (as root) loads the sample filter into /sys/fs/bpf/shardrec_filter, after which --filter works for every user; unpin removes it. Nothing is recorded
    #[arg(long = "setup-filter", value_name = "action", value_parser = ["pin", "unpin"])]
    setup_filter: Option<String>,
}

impl RunArgs {
    /// `--setup-filter`, when given.
    pub fn setup_filter(&self) -> Option<shardrec_record::SetupFilter> {
        self.setup_filter.as_deref().map(|action| match action {
            "pin" => shardrec_record::SetupFilter::Pin,
            _ => shardrec_record::SetupFilter::Unpin,
        })
    }
}

impl RecordArgs {
    /// The checked configuration, or a message naming the bad option.
    pub fn into_config(self) -> Result<RecordConfig, String> {
        let (events, targets, sampling) = (self.events, self.targets, self.sampling);
        let (output, run) = (self.output, self.run);
        let switch_output = output.switch_output()?;
        let switch_output_events = output.switch_output_events()?;
        let merge = shardrec_merge::MergeOptions {
            progress: !run.quiet,
            compression_level: output.compression.level()?,
            threads: output.merge_threads()?,
            slice_bytes: None,
            build_ids: output.build_ids.which(),
            build_id_cache: output.build_ids.cache(),
            // The shards go once merged: free them as the merge goes.
            consume: !output.keep_shards,
        };
        let (call_graph, max_stack) = sampling.call_graph()?;
        Ok(RecordConfig {
            events: events.parsed()?,
            cgroups: events.cgroups(),
            group: events.group,
            all_in: match (events.all_user, events.all_kernel) {
                (true, _) => Some(AddressSpace::User),
                (_, true) => Some(AddressSpace::Kernel),
                _ => None,
            },
            all_cpus: targets.all_cpus,
            cpus: parsed(&targets.cpu, options::parse_cpus)?,
            pids: parsed(&targets.pid, options::parse_pids)?,
            tids: parsed(&targets.tid, options::parse_tids)?,
            uid: parsed(&targets.uid, options::parse_uid)?,
            // perf's --per-thread follows no children; shardrec still reads
            // one ring per CPU (per-thread rings would bypass its writers).
            inherit: !targets.no_inherit && !targets.per_thread,
            sampling: sampling.sampling()?,
            call_graph,
            strict_freq: sampling.strict_freq,
            clockid: parsed(&sampling.clockid, options::parse_clockid)?,
            no_bpf_event: sampling.no_bpf_event,
            off_cpu: sampling.off_cpu,
            off_cpu_thresh_ms: sampling.off_cpu_thresh,
            sample: self.sample.into_options(max_stack)?,
            synthesis: self.synthesis.synthesis()?,
            ring_pages: output
                .mmap_pages
                .as_deref()
                .map(|m| options::parse_ring_pages(m, page_size()))
                .transpose()?,
            output: output
                .file
                .unwrap_or_else(shardrec_shard::output::Output::record_default),
            no_merge: output.no_merge,
            merge,
            keep_shards: output.keep_shards,
            timestamp_filename: output.timestamp_filename,
            dry_run: run.dry_run,
            shards_dir: output.shards_dir,
            kcore: output.kcore,
            max_size: output
                .max_size
                .as_deref()
                .map(|s| options::parse_size(s).map_err(|e| format!("--max-size {s}: {e}")))
                .transpose()?,
            switch_output,
            switch_output_events,
            overwrite: output.overwrite,
            verbose: run.verbose,
            realtime: run.realtime,
            quiet: run.quiet,
            delay: parsed(&run.delay, options::parse_delay)?,
            control: parsed(&run.control, options::parse_control)?,
            command: self.command,
        })
    }
}

impl EventArgs {
    /// Each `-e`, parsed, with the `--filter` that followed it.
    fn parsed(&self) -> Result<Vec<shardrec_record::EventArg>, String> {
        let mut events = self
            .events
            .iter()
            .map(|e| options::parse_events(e))
            .collect::<Result<Vec<_>, _>>()?;
        for (filter, target) in self.filter.iter().zip(&self.filter_targets) {
            let Some(event) = target.and_then(|i| events.get_mut(i)) else {
                return Err(format!("--filter '{filter}' should follow a -e event"));
            };
            event.filter = Some(filter.clone());
        }
        Ok(events)
    }

    /// Each `-G`, with the number of `-e` before it.
    fn cgroups(&self) -> Vec<CgroupArg> {
        self.cgroup
            .iter()
            .zip(&self.cgroup_positions)
            .map(|(names, &after_events)| CgroupArg {
                after_events,
                names: names.clone(),
            })
            .collect()
    }
}

impl SamplingArgs {
    fn sampling(&self) -> Result<Sampling, String> {
        Ok(match (self.freq.as_deref(), self.count) {
            (Some(freq), _) => options::parse_frequency(freq)?,
            (None, Some(period)) => Sampling::Period(period),
            (None, None) => Sampling::Default,
        })
    }

    /// `--call-graph` or `-g`, with `fp,FRAMES`'s most frames.
    fn call_graph(&self) -> Result<(CallGraph, Option<u16>), String> {
        Ok(match (&self.call_graph, self.g) {
            (Some(mode), _) => options::parse_call_graph(mode)?,
            (None, true) => (CallGraph::FramePointer, None),
            (None, false) => (CallGraph::None, None),
        })
    }
}

/// An option's value parsed, if the option was given.
fn parsed<T>(
    text: &Option<String>,
    parse: fn(&str) -> Result<T, String>,
) -> Result<Option<T>, String> {
    text.as_deref().map(parse).transpose()
}

fn page_size() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map_or(4096, |p| p as usize)
}
