//! The command line, with perf record's option names and help in its words.
//! Parsing is two steps: clap checks the words, `into_config` turns every
//! value into a typed one (`shardrec_record::options`), so the recorder is
//! given only typed configuration.

mod perf_only;

use std::path::PathBuf;

use clap::error::{ContextKind, ErrorKind};
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use shardrec_record::{options, AddressSpace, CallGraph, RecordConfig, Sampling};

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
    /// The command to run and record: the first word that is not an option
    /// or its value, or everything after `--`.
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<String>,
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
        Ok(RecordConfig {
            events: self
                .events
                .iter()
                .flat_map(|e| options::parse_events(e))
                .collect(),
            all_cpus: self.all_cpus,
            cpus: parsed(&self.cpu, options::parse_cpus)?,
            pids: parsed(&self.pid, options::parse_pids)?,
            tids: parsed(&self.tid, options::parse_tids)?,
            uid: parsed(&self.uid, options::parse_uid)?,
            inherit: !self.no_inherit,
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
        Ok(cli) => Parsed::Run(Box::new(cli)),
        Err(e) => Parsed::Refused(one_line(&e)),
    }
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
