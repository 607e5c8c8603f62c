//! The rest of `perf record`'s options (perf 6.1), so that a perf command
//! line is read as perf reads it: each option with its value, then the
//! command. Each is either not supported yet (a clear error, never taken
//! for the command) or made moot by shardrec's design (accepted, with one
//! line saying why).

use clap::{Arg, ArgAction, ArgMatches};

/// Whether an option takes a value.
#[derive(Clone, Copy)]
enum Value {
    /// `--flag`
    None,
    /// `--option VALUE`
    Required(&'static str),
    /// `--option[=VALUE]`
    Optional(&'static str),
}

/// What shardrec does with the option.
#[derive(Clone, Copy)]
pub enum Support {
    /// Not yet: the recording is refused.
    Later,
    /// Not needed: accepted, and this says why.
    Moot(&'static str),
}

/// One of perf record's options.
pub struct PerfOption {
    short: Option<char>,
    long: &'static str,
    value: Value,
    /// perf's help line.
    help: &'static str,
    /// What shardrec does with it.
    pub support: Support,
}

use Support::{Later, Moot};
use Value::{None as Flag, Optional, Required};

const fn opt(
    short: Option<char>,
    long: &'static str,
    value: Value,
    help: &'static str,
    support: Support,
) -> PerfOption {
    PerfOption {
        short,
        long,
        value,
        help,
        support,
    }
}

const IO_URING: &str = "shardrec's writers already stream each ring with io_uring";
const PER_CPU: &str = "shardrec already runs one writer process per CPU, pinned to it";
const NO_SCRIPTLETS: &str =
    "BPF scriptlets (-e prog.c), which newer perfs dropped, are not events in shardrec (its --filter compiles its own BPF)";
const ALWAYS: &str =
    "shardrec's samples always carry their time and CPU (the merge orders by them)";

/// perf record's options that shardrec does not implement, in perf's
/// order and words.
#[rustfmt::skip]
pub const OPTIONS: &[PerfOption] = &[
    opt(Some('S'), "snapshot", Optional("opts"), "AUX area tracing Snapshot Mode", Later),
    opt(Some('T'), "timestamp", Flag, "Record the sample timestamps", Moot(ALWAYS)),
    opt(None, "affinity", Required("node|cpu"), "Set affinity mask of trace reading thread", Moot(PER_CPU)),
    opt(None, "aio", Optional("n"), "Use <n> control blocks in asynchronous trace writing mode", Moot(IO_URING)),
    opt(None, "aux-sample", Optional("opts"), "sample AUX area", Later),
    opt(None, "clang-opt", Required("clang options"), "options passed to clang when compiling BPF scriptlets", Moot(NO_SCRIPTLETS)),
    opt(None, "clang-path", Required("clang path"), "clang binary to use for compiling BPF scriptlets", Moot(NO_SCRIPTLETS)),
    opt(None, "exclude-perf", Flag, "don't record events from perf itself", Moot("shardrec never records its own processes")),
    opt(None, "mmap-flush", Required("number"), "Minimal number of bytes that is extracted from mmap data pages", Moot("shardrec's writers wake at a quarter ring and write whatever is there")),
    opt(None, "no-buffering", Flag, "collect data without buffering", Moot("shardrec writes a ring's data below the watermark within 1.25 s")),
    opt(None, "num-thread-synthesize", Required("n"), "number of threads to run for event synthesis", Moot("shardrec picks the synthesis threads from the CPUs and processes")),
    opt(None, "sample-cpu", Flag, "Record the sample cpu", Moot(ALWAYS)),
    opt(None, "sample-identifier", Flag, "Record the sample identifier", Moot("shardrec's samples always carry their identifier")),
    opt(None, "timestamp-boundary", Flag, "Record timestamp boundary (time of first/last samples)", Moot("shardrec always records the times of the first and last samples, even with -B (the merge reads every sample's time)")),
    opt(None, "vmlinux", Required("file"), "vmlinux pathname", Moot("perf record reads it only for the prologues of BPF scriptlets, which newer perfs dropped; give it to perf report (-k/--vmlinux) for the kernel's symbols")),
];

impl PerfOption {
    /// The option as clap reads it: perf's names and arity, in a help
    /// section of its own.
    pub fn arg(&self) -> Arg {
        let heading = match self.support {
            Later => "perf record options not supported yet",
            Moot(_) => "perf record options shardrec does not need (accepted)",
        };
        let mut arg = Arg::new(self.long)
            .long(self.long)
            .help(self.help)
            .help_heading(heading);
        if let Some(short) = self.short {
            arg = arg.short(short);
        }
        match self.value {
            Flag => arg.action(ArgAction::SetTrue),
            Required(name) => arg.value_name(name).action(ArgAction::Set),
            Optional(name) => arg
                .value_name(name)
                .num_args(0..=1)
                .require_equals(true)
                .default_missing_value("")
                .action(ArgAction::Set),
        }
    }

    /// How the user wrote it: `-z/--compression-level` or `--aio`.
    pub fn spelling(&self) -> String {
        match self.short {
            Some(short) => format!("-{short}/--{}", self.long),
            None => format!("--{}", self.long),
        }
    }

    /// Whether `matches` holds it.
    pub fn given(&self, matches: &ArgMatches) -> bool {
        matches.value_source(self.long) == Some(clap::parser::ValueSource::CommandLine)
    }
}
