//! The command line, with perf record's option names and help in its words.
//! Parsing is two steps: clap checks the words, `into_config` turns every
//! value into a typed one (`shardrec_record::options`), so the recorder is
//! given only typed configuration.

mod perf_only;

use std::path::PathBuf;

use clap::error::{ContextKind, ErrorKind};
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use shardrec_record::{
    options, AddressSpace, CallGraph, CgroupArg, RecordConfig, SampleOptions, Sampling,
};

/// A perf record for many-CPU hosts.
#[derive(Parser)]
#[command(name = "shardrec", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(Subcommand)]
pub enum Action {
    /// Run a command and record its profile, or record the whole system.
    Record(Box<RecordArgs>),
    /// Merge a recording's shards (DIR, e.g. perf.data.shards) into one perf.data.
    Merge(MergeArgs),
}

#[derive(Args)]
pub struct MergeArgs {
    /// The shard directory of a recording.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Output file name.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        default_value = "perf.data"
    )]
    pub output: PathBuf,
    /// Don't print any message.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
}

#[derive(Args)]
pub struct RecordArgs {
    /// Event selector: a software event (cpu-clock, task-clock, page-faults,
    /// context-switches, ...), a hardware event (cycles, instructions, ...)
    /// or a tracepoint subsys:name (globs allowed), each with optional :u/:k.
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    events: Vec<String>,
    /// System-wide collection from all CPUs.
    #[arg(short = 'a', long = "all-cpus")]
    all_cpus: bool,
    /// List of CPUs to monitor (e.g. 0,2-3).
    #[arg(short = 'C', long = "cpu", value_name = "CPU")]
    cpu: Option<String>,
    /// Record events on existing process ids (comma separated).
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pid: Option<String>,
    /// child tasks do not inherit counters
    #[arg(short = 'i', long = "no-inherit")]
    no_inherit: bool,
    /// use per-thread mmaps (shardrec keeps one ring per CPU; as in perf, children are not followed)
    #[arg(long = "per-thread")]
    per_thread: bool,
    /// Configure all used events to run in user space.
    #[arg(long = "all-user", conflicts_with = "all_kernel")]
    all_user: bool,
    /// Configure all used events to run in kernel space.
    #[arg(long = "all-kernel")]
    all_kernel: bool,
    /// user to profile
    #[arg(short = 'u', long = "uid", value_name = "user")]
    uid: Option<String>,
    /// Parse options then exit
    #[arg(long = "dry-run")]
    pub dry_run: bool,
    /// Record events on existing thread ids (comma separated).
    #[arg(short = 't', long = "tid", value_name = "TID")]
    tid: Option<String>,
    /// Profile at this frequency ("max" for the kernel's limit).
    #[arg(
        short = 'F',
        long = "freq",
        value_name = "FREQ",
        conflicts_with = "count"
    )]
    freq: Option<String>,
    /// Event period to sample.
    #[arg(short = 'c', long = "count", value_name = "N")]
    count: Option<u64>,
    /// Enables call-graph recording (frame pointers).
    #[arg(short = 'g')]
    g: bool,
    /// Setup and enable call-graph recording: fp, dwarf[,SIZE].
    #[arg(long = "call-graph", value_name = "MODE")]
    call_graph: Option<String>,
    /// Number of mmap data pages per CPU ring (a power of two), or a size with B/K/M/G.
    #[arg(short = 'm', long = "mmap-pages", value_name = "PAGES")]
    mmap_pages: Option<String>,
    /// Output file name; shards are written to FILE.shards/ while recording.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        default_value = "perf.data"
    )]
    output: PathBuf,
    /// Stop after writing the shards; do not merge them.
    #[arg(long = "no-merge")]
    no_merge: bool,
    /// Keep the shard directory after merging it.
    #[arg(long = "keep-shards")]
    pub keep_shards: bool,
    /// Don't print any message.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
    /// Clock to use for sample times: monotonic, monotonic_raw, realtime, boottime, tai, or a number.
    #[arg(short = 'k', long = "clockid", value_name = "CLOCK")]
    clockid: Option<String>,
    /// event filter (an ftrace filter for the tracepoints of the -e before it)
    #[arg(long = "filter", value_name = "filter")]
    filter: Vec<String>,
    /// put the counters into a counter group
    #[arg(long = "group")]
    group: bool,
    /// Fail if the specified frequency can't be used
    #[arg(long = "strict-freq")]
    strict_freq: bool,
    /// do not record bpf events
    #[arg(long = "no-bpf-event")]
    no_bpf_event: bool,
    /// monitor event in cgroup name only (system-wide; names go to the -e before it, in order)
    #[arg(short = 'G', long = "cgroup", value_name = "name")]
    cgroup: Vec<String>,
    /// The number of `-e` given before each `-G`, set by [`parse`].
    #[arg(skip)]
    cgroup_positions: Vec<usize>,
    /// ms to wait before starting measurement after program start (-1: start with events disabled)
    #[arg(
        short = 'D',
        long = "delay",
        value_name = "ms",
        allow_negative_numbers = true
    )]
    delay: Option<String>,
    /// Listen on ctl-fd descriptor for command to control measurement ('enable': enable events, 'disable': disable events, 'stop': stop the recording, 'ping': ping). fifo:ctl-fifo[,ack-fifo] opens FIFOs.
    #[arg(
        long = "control",
        value_name = "fd:ctl-fd[,ack-fd] or fifo:ctl-fifo[,ack-fifo]"
    )]
    control: Option<String>,
    /// be more verbose (-v: fallbacks; -vv: every attr before it is opened)
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(flatten)]
    sample: SampleArgs,
    /// The `-e` each `--filter` follows (index into `events`), set by [`parse`].
    #[arg(skip)]
    filter_targets: Vec<Option<usize>>,
    /// The command to run and record: the first word that is not an option
    /// or its value, or everything after `--`.
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// perf record's options that choose what each sample carries.
#[derive(Args)]
#[command(next_help_heading = "Sample contents")]
struct SampleArgs {
    /// Record the sample addresses
    #[arg(short = 'd', long = "data")]
    data: bool,
    /// Record the sample physical addresses
    #[arg(long = "phys-data")]
    phys_data: bool,
    /// Record the sampled data address data page size
    #[arg(long = "data-page-size")]
    data_page_size: bool,
    /// Record the sampled code address (ip) page size
    #[arg(long = "code-page-size")]
    code_page_size: bool,
    /// sample by weight (on special events only)
    #[arg(short = 'W', long = "weight")]
    weight: bool,
    /// collect raw sample records from all opened counters
    #[arg(short = 'R', long = "raw-samples")]
    raw: bool,
    /// Record the sample period
    #[arg(short = 'P', long = "period")]
    period: bool,
    /// sample selected machine registers in user space (--user-regs=? lists them)
    #[arg(long = "user-regs", value_name = "any register", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    user_regs: Option<String>,
    /// sample selected machine registers on interrupt (-I? lists them)
    #[arg(short = 'I', long = "intr-regs", value_name = "any register", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    intr_regs: Option<String>,
    /// sample any taken branches
    #[arg(short = 'b', long = "branch-any")]
    branch_any: bool,
    /// branch stack filter modes (any, any_call, any_ret, ind_call, call, cond, stack, u, k, hv, ...)
    #[arg(short = 'j', long = "branch-filter", value_name = "branch filter mask")]
    branch_filter: Option<String>,
    /// per thread counts
    #[arg(short = 's', long = "stat")]
    stat: bool,
    /// Record context switch events
    #[arg(long = "switch-events")]
    switch_events: bool,
    /// Record namespaces events
    #[arg(long = "namespaces")]
    namespaces: bool,
    /// Record cgroup events
    #[arg(long = "all-cgroups")]
    all_cgroups: bool,
    /// sample transaction flags (special events only)
    #[arg(long = "transaction")]
    transaction: bool,
    /// Record running/enabled time of read (:S) events
    #[arg(long = "running-time")]
    running_time: bool,
    /// collect kernel callchains
    #[arg(long = "kernel-callchains", conflicts_with = "user_callchains")]
    kernel_callchains: bool,
    /// collect user callchains
    #[arg(long = "user-callchains")]
    user_callchains: bool,
    /// don't sample
    #[arg(short = 'n', long = "no-samples")]
    no_samples: bool,
}

impl SampleArgs {
    fn into_options(self) -> Result<SampleOptions, String> {
        // perf: `--user-regs` and `-I` without a value take the default set.
        let registers = |option, text: Option<String>| match text.as_deref() {
            None => Ok(0),
            Some("") => options::parse_registers(option, None),
            Some(list) => options::parse_registers(option, Some(list)),
        };
        let branch = match (&self.branch_filter, self.branch_any) {
            (Some(filter), _) => options::parse_branch_filter(filter)?,
            (None, true) => options::parse_branch_filter("any")?,
            (None, false) => 0,
        };
        Ok(SampleOptions {
            data_addr: self.data,
            phys_addr: self.phys_data,
            data_page_size: self.data_page_size,
            code_page_size: self.code_page_size,
            weight: self.weight,
            raw: self.raw,
            period: self.period,
            user_regs: registers("--user-regs", self.user_regs)?,
            intr_regs: registers("-I", self.intr_regs)?,
            branch,
            per_thread_stat: self.stat,
            switch_events: self.switch_events,
            namespaces: self.namespaces,
            cgroups: self.all_cgroups,
            transaction: self.transaction,
            running_time: self.running_time,
            callchain_side: match (self.kernel_callchains, self.user_callchains) {
                (true, _) => Some(AddressSpace::Kernel),
                (_, true) => Some(AddressSpace::User),
                _ => None,
            },
            no_samples: self.no_samples,
        })
    }
}

impl RecordArgs {
    /// The checked configuration, or a message naming the bad option.
    pub fn into_config(self) -> Result<RecordConfig, String> {
        let sampling = match (self.freq.as_deref(), self.count) {
            (Some(freq), _) => options::parse_frequency(freq)?,
            (None, Some(period)) => Sampling::Period(period),
            (None, None) => Sampling::Default,
        };
        let call_graph = match (&self.call_graph, self.g) {
            (Some(mode), _) => options::parse_call_graph(mode)?,
            (None, true) => CallGraph::FramePointer,
            (None, false) => CallGraph::None,
        };
        let page = shardrec_sys_page_size();
        let mut events = self
            .events
            .iter()
            .map(|e| options::parse_events(e))
            .collect::<Result<Vec<_>, _>>()?;
        for (filter, target) in self.filter.iter().zip(&self.filter_targets) {
            let Some(event) = target.and_then(|i| events.get_mut(i)) else {
                return Err(format!("--filter '{filter}' should follow a -e tracepoint"));
            };
            event.filter = Some(filter.clone());
        }
        Ok(RecordConfig {
            events,
            all_cpus: self.all_cpus,
            cpus: parsed(&self.cpu, options::parse_cpus)?,
            pids: parsed(&self.pid, options::parse_pids)?,
            tids: parsed(&self.tid, options::parse_tids)?,
            uid: parsed(&self.uid, options::parse_uid)?,
            // perf's --per-thread follows no children; shardrec still reads
            // one ring per CPU (per-thread rings would bypass its writers).
            inherit: !self.no_inherit && !self.per_thread,
            all_in: match (self.all_user, self.all_kernel) {
                (true, _) => Some(AddressSpace::User),
                (_, true) => Some(AddressSpace::Kernel),
                _ => None,
            },
            sampling,
            call_graph,
            ring_pages: self
                .mmap_pages
                .as_deref()
                .map(|m| options::parse_ring_pages(m, page))
                .transpose()?,
            output: self.output,
            no_merge: self.no_merge,
            command: self.command,
            clockid: parsed(&self.clockid, options::parse_clockid)?,
            sample: self.sample.into_options()?,
            verbose: self.verbose,
            group: self.group,
            strict_freq: self.strict_freq,
            no_bpf_event: self.no_bpf_event,
            cgroups: self
                .cgroup
                .iter()
                .zip(&self.cgroup_positions)
                .map(|(names, &after_events)| CgroupArg {
                    after_events,
                    names: names.clone(),
                })
                .collect(),
            quiet: self.quiet,
            delay: parsed(&self.delay, options::parse_delay)?,
            control: parsed(&self.control, options::parse_control)?,
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

fn shardrec_sys_page_size() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map_or(4096, |p| p as usize)
}

/// What the command line asks for, or why it cannot be done.
pub enum Parsed {
    /// Run this.
    Run(Box<Cli>),
    /// Print this (help, version) and exit with its status.
    Print(clap::Error),
    /// A usage error: this one line.
    Refused(String),
}

/// Reads the command line as perf would: every `perf record` option is
/// known (those shardrec leaves to perf are refused or noted, never taken
/// for the command); an unknown option is a usage error naming it.
pub fn parse(args: impl IntoIterator<Item = String>) -> Parsed {
    let record = |c: clap::Command| c.args(perf_only::OPTIONS.iter().map(|o| o.arg()));
    let matches = match Cli::command()
        .mut_subcommand("record", record)
        .try_get_matches_from(args)
    {
        Ok(matches) => matches,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            return Parsed::Print(e)
        }
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            return Parsed::Print(e)
        }
        Err(e) => return Parsed::Refused(one_line(&e)),
    };
    if let Some(record) = matches.subcommand_matches("record") {
        if let Some(refused) = perf_only_options(record) {
            return Parsed::Refused(refused);
        }
    }
    match Cli::from_arg_matches(&matches) {
        Ok(mut cli) => {
            if let (Action::Record(args), Some(record)) =
                (&mut cli.action, matches.subcommand_matches("record"))
            {
                args.filter_targets = filter_targets(record);
                args.cgroup_positions = events_before(record, "cgroup");
            }
            Parsed::Run(Box::new(cli))
        }
        Err(e) => Parsed::Refused(one_line(&e)),
    }
}

/// For each `id` option given, how many `-e` came before it.
fn events_before(matches: &ArgMatches, id: &str) -> Vec<usize> {
    let events: Vec<usize> = matches
        .indices_of("events")
        .map(Iterator::collect)
        .unwrap_or_default();
    matches
        .indices_of(id)
        .map(|at| {
            at.map(|at| events.iter().filter(|&&e| e < at).count())
                .collect()
        })
        .unwrap_or_default()
}

/// For each `--filter`, the `-e` given last before it (perf attaches a
/// filter to the event list that precedes it).
fn filter_targets(matches: &ArgMatches) -> Vec<Option<usize>> {
    let positions = |id| {
        matches
            .indices_of(id)
            .map(|i| i.collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let events = positions("events");
    positions("filter")
        .into_iter()
        .map(|at| events.iter().rposition(|&e| e < at))
        .collect()
}

/// Notes the moot options given; the first one not supported yet is the
/// answer.
fn perf_only_options(matches: &ArgMatches) -> Option<String> {
    let given = perf_only::OPTIONS.iter().filter(|o| o.given(matches));
    for option in given {
        match option.support {
            perf_only::Support::Moot(why) => {
                eprintln!("shardrec: note: {} is not needed: {why}", option.spelling())
            }
            perf_only::Support::Later => {
                return Some(format!(
                    "perf record's {} is not supported by shardrec yet",
                    option.spelling()
                ))
            }
        }
    }
    None
}

/// clap's error as one line: what is wrong, with the word it is about.
fn one_line(error: &clap::Error) -> String {
    let arg = error.get(ContextKind::InvalidArg).map(|a| a.to_string());
    match (error.kind(), arg) {
        (ErrorKind::UnknownArgument, Some(arg)) => {
            format!("unknown option '{arg}' (shardrec record -h lists them)")
        }
        _ => {
            let text = error.to_string();
            let first = text.lines().next().unwrap_or_default();
            first.strip_prefix("error: ").unwrap_or(first).to_string()
        }
    }
}
