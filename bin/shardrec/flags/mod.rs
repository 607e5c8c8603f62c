//! The command line, with perf record's option names and help in its words.
//! Parsing is two steps: clap checks the words, `into_config` turns every
//! value into a typed one (`values`), so the recorder is
//! given only typed configuration.

mod memory;
mod perf_only;
mod record;
mod samples;
mod synthesis;
mod tools;
mod values;

pub use record::RecordArgs;
pub use tools::{Tool, ToolAction};

use std::path::PathBuf;

use clap::error::{ContextKind, ErrorKind};
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

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
    ///
    /// Takes perf record's options, event syntax and defaults, and writes the perf.data that perf report, perf script, hotspot and samply read as perf record's own (or perf's pipe format, with -o -). Unlike perf record, one writer process per CPU streams that CPU's ring into its own shard (FILE.shards/) with io_uring, a live merger makes the shards one perf.data while the recording goes on, and a process of its own captures each BPF program the moment it is loaded. perf record's options that shardrec does not take yet are refused before anything runs; those its design makes moot are accepted with a one-line note.
    ///
    /// Exit status: the command's own (as perf), 0 for a recording without one, 1 when it was cut (a full disk: what was written merges), 2 for a usage error, 255 for any other failure (one line on stderr says which).
    Record(Box<RecordArgs>),
    /// perf's tools that record: `shardrec sched|lock|kmem|kwork|trace|timechart record`.
    #[command(flatten)]
    Tool(ToolAction),
    /// Merge a recording's shards (DIR, e.g. perf.data.shards) into one perf.data.
    Merge(MergeArgs),
    /// As perf archive: FILE.tar.bz2 with the build-id cache's files of FILE's build ids, to unpack into ~/.debug where the profile is read.
    Archive(ArchiveArgs),
    /// Writes the man pages into DIR, or a shell's completions to standard output (packaging/build-deb installs them).
    #[command(hide = true)]
    Generate(GenerateArgs),
}

#[derive(Args)]
pub struct GenerateArgs {
    /// What to write.
    #[arg(value_enum)]
    pub what: Generated,
    /// Where the man pages go.
    #[arg(value_name = "DIR", required_if_eq("what", "man"))]
    pub dir: Option<PathBuf>,
}

/// What `shardrec generate` writes.
#[derive(Clone, Copy, ValueEnum)]
pub enum Generated {
    /// shardrec.1, shardrec-record.1, shardrec-merge.1, shardrec-archive.1
    Man,
    Bash,
    Zsh,
    Fish,
}

#[derive(Args)]
pub struct ArchiveArgs {
    /// The perf.data (or a --kcore output directory).
    #[arg(value_name = "FILE", default_value = "perf.data")]
    pub file: PathBuf,
}

#[derive(Args)]
pub struct MergeArgs {
    /// The shard directory of a recording.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Output file name ('-': standard output, in perf's pipe format).
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
    #[command(flatten)]
    pub compression: record::CompressionArg,
    #[command(flatten)]
    pub build_ids: record::BuildIdArgs,
    /// Threads to merge with (default: one per online CPU); the output is the same whatever the number.
    #[arg(long = "threads", value_name = "N", value_parser = record::merge_thread_count)]
    pub threads: Option<usize>,
    /// Record bytes per time slice, the unit of work of each thread (default: 32M, more with many shards); smaller slices spread a small recording over more threads.
    #[arg(long = "slice-size", value_name = "SIZE", value_parser = slice_size)]
    pub slice_size: Option<u64>,
    /// Free each shard's bytes once they are merged, so the merge needs no more disk than the recording (the recorder's own merge does this; the shards are spent after). An interrupted merge is completed by merging DIR again. Not with -z, --time, or a damaged shard (then the shards stay whole)
    #[arg(long = "consume")]
    pub consume: bool,
    /// Merge only this time window, as perf report --time reads it (START,END in seconds; 10%/2; 0%-10%,30%-40%): the samples in it, and the state before it
    #[arg(long = "time", value_name = "TIME")]
    pub time: Option<String>,
}

/// `--slice-size`: a size (B/K/M/G) of at least 4K.
fn slice_size(text: &str) -> Result<u64, String> {
    let size = values::parse_size(text)?;
    match size >= 4096 {
        true => Ok(size),
        false => Err(format!("--slice-size {text}: a slice needs at least 4K")),
    }
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
    let args: Vec<String> = args.into_iter().collect();
    if let Some(refused) = tools::other_than_record(&args) {
        return Parsed::Refused(refused);
    }
    let matches = match command().try_get_matches_from(args) {
        Ok(matches) => matches,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            return Parsed::Print(e)
        }
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            return Parsed::Print(e)
        }
        Err(e) => return Parsed::Refused(one_line(&e)),
    };
    let quiet = matches.subcommand().is_some_and(|(_, m)| {
        m.try_get_one::<bool>("quiet")
            .ok()
            .flatten()
            .copied()
            .unwrap_or(false)
    });
    crate::messages::set_quiet(quiet);
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
                args.events.filter_targets = filter_targets(record);
                args.events.cgroup_positions = events_before(record, "cgroup");
            }
            Parsed::Run(Box::new(cli))
        }
        Err(e) => Parsed::Refused(one_line(&e)),
    }
}

/// The whole command line: shardrec's options, and the rest of perf
/// record's, each refused or noted. An option given twice takes the
/// last value, as perf's parser does (`shardrec sched record -m 256`
/// after the tool's own `-m 1024`).
pub fn command() -> clap::Command {
    let record = |c: clap::Command| {
        c.args(perf_only::OPTIONS.iter().map(|o| o.arg()))
            .args_override_self(true)
    };
    Cli::command().mut_subcommand("record", record)
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
            perf_only::Support::Moot(why) => crate::messages::note(&format!(
                "shardrec: note: {} is not needed: {why}",
                option.spelling()
            )),
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
        (ErrorKind::MissingRequiredArgument, Some(arg)) => format!("{arg} is required"),
        _ => {
            let text = error.to_string();
            let first = text.lines().next().unwrap_or_default();
            first.strip_prefix("error: ").unwrap_or(first).to_string()
        }
    }
}
