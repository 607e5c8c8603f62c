//! perf's tools that record: `perf sched record` runs perf record with
//! its own words before the user's, as perf's builtin passes them on, so
//! `shardrec sched record ARGS` is `shardrec record WORDS ARGS`, read by
//! the one parser of record's options. Only what a tool records is
//! shardrec's: perf's own `perf sched latency` (and the others) read the
//! file.

use clap::{Args, Subcommand};
use shardrec_sys::tracefs;

/// A perf tool whose `record` shardrec takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// `perf sched record`.
    Sched,
}

/// `shardrec TOOL ...`: the tool's one subcommand shardrec takes.
#[derive(Args)]
pub struct ToolArgs {
    #[command(subcommand)]
    pub command: ToolCommand,
}

/// What a tool is asked to do.
#[derive(Subcommand)]
pub enum ToolCommand {
    /// Record as perf's tool records: its events and options, then perf record's options and the command given here (shardrec record -h lists them). perf's tool reads the file.
    #[command(disable_help_flag = true)]
    Record {
        /// perf record's options and the command, as shardrec record takes them
        #[arg(
            value_name = "RECORD OPTIONS",
            trailing_var_arg = true,
            allow_hyphen_values = true
        )]
        args: Vec<String>,
    },
}

impl Tool {
    /// The tool's name, as typed.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Sched => "sched",
        }
    }

    /// The words `perf TOOL record` puts before the user's (perf 6.1's
    /// `builtin-*.c`), with the events this kernel has.
    pub fn record_words(self) -> Vec<String> {
        let exists = Tracepoints::read();
        let words: Vec<&str> = match self {
            Tool::Sched => sched_words(&exists),
        };
        words.into_iter().map(String::from).collect()
    }

    /// The command line that records as the tool does: `shardrec record`,
    /// the tool's words, then `args`.
    pub fn record_command_line(self, program: &str, args: &[String]) -> Vec<String> {
        let head = [program.to_string(), "record".to_string()];
        let words = self.record_words();
        head.into_iter()
            .chain(words)
            .chain(args.iter().cloned())
            .collect()
    }
}

/// `shardrec TOOL COMMAND` with a command of perf's tool other than
/// `record` (`perf sched latency` reads a file: shardrec only records
/// it): the one line that says so.
pub fn other_than_record(args: &[String]) -> Option<String> {
    let [_, tool, command, ..] = args else {
        return None;
    };
    let tool = [Tool::Sched].into_iter().find(|t| t.name() == tool)?;
    if command.starts_with('-') || ["record", "help"].contains(&command.as_str()) {
        return None;
    }
    Some(format!(
        "{tool} takes only 'record' here: '{command}' is perf's, to read what it records (perf {tool} {command} -i FILE)",
        tool = tool.name()
    ))
}

/// Which tracepoints the kernel has, for the tools that choose by them
/// as perf does (`trace_event__tp_format`).
struct Tracepoints(Option<std::path::PathBuf>);

impl Tracepoints {
    /// tracefs, mounted if it is not; where it cannot be, no tracepoint
    /// is found (and recording them says why).
    fn read() -> Tracepoints {
        Tracepoints(tracefs::root().ok())
    }

    fn has(&self, system: &str, name: &str) -> bool {
        let dir = self
            .0
            .as_ref()
            .map(|root| tracefs::event_dir(root, system, name));
        dir.is_some_and(|dir| dir.join("format").is_file())
    }
}

/// `perf sched record`: every CPU, raw samples, 4 MiB rings (1024
/// pages), every event counted; `sched_waking` where the kernel has it,
/// else `sched_wakeup`; the schedstat events only where the kernel
/// exposes them (`CONFIG_SCHEDSTATS`).
fn sched_words(tracepoints: &Tracepoints) -> Vec<&'static str> {
    let mut words = vec![
        "-a",
        "-R",
        "-m",
        "1024",
        "-c",
        "1",
        "-e",
        "sched:sched_switch",
        "-e",
        "sched:sched_stat_runtime",
        "-e",
        "sched:sched_process_fork",
        "-e",
        "sched:sched_wakeup_new",
        "-e",
        "sched:sched_migrate_task",
        "-e",
    ];
    words.push(match tracepoints.has("sched", "sched_waking") {
        true => "sched:sched_waking",
        false => "sched:sched_wakeup",
    });
    if tracepoints.has("sched", "sched_stat_wait") {
        words.extend([
            "-e",
            "sched:sched_stat_wait",
            "-e",
            "sched:sched_stat_sleep",
            "-e",
            "sched:sched_stat_iowait",
        ]);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sched_takes_waking_and_the_schedstat_events_where_they_exist() {
        let none = Tracepoints(None);
        let words = sched_words(&none);
        assert_eq!(words.last(), Some(&"sched:sched_wakeup"));
        assert_eq!(words.iter().filter(|w| **w == "-e").count(), 6);
        let dir = std::env::temp_dir().join(format!("shardrec-tools-{}", std::process::id()));
        for name in ["sched_waking", "sched_stat_wait"] {
            let event = dir.join("events/sched").join(name);
            std::fs::create_dir_all(&event).unwrap();
            std::fs::write(event.join("format"), "").unwrap();
        }
        let words = sched_words(&Tracepoints(Some(dir.clone())));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(words.contains(&"sched:sched_waking"));
        assert!(words.ends_with(&["-e", "sched:sched_stat_iowait"]));
    }
}
