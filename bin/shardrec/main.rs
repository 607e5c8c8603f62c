//! `shardrec`: parse the command line, dispatch, and turn errors into one
//! line and an exit code.

mod flags;
mod generate;
mod messages;
mod record_summary;

use std::path::Path;
use std::process::ExitCode;

use flags::{Action, MergeArgs, Parsed, RecordArgs, Tool};
use messages::Messages;
use shardrec_merge::MergeError;
use shardrec_record::{Exit, RecordError, Reporter};
use shardrec_shard::output::Output;

/// Whatever ends a command before its work is done.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Merge(#[from] MergeError),
    /// `shardrec merge` asked for what cannot be: why, in words.
    #[error("{0}")]
    MergeUsage(String),
    #[error("cannot write {what}")]
    Generate {
        what: String,
        source: std::io::Error,
    },
    #[error("cannot archive the build ids of {}", .path.display())]
    Archive {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// Exit status of a usage error (an unknown option, a bad value), before
/// anything is opened or run.
const USAGE: u8 = 2;

fn main() -> ExitCode {
    let command_line: Vec<String> = std::env::args().collect();
    let cli = match flags::parse(command_line.clone()) {
        Parsed::Run(cli) => *cli,
        Parsed::Print(message) => {
            // Help or version asked for: 0; help for a bare `shardrec`: 2.
            let _ = message.print();
            return ExitCode::from(message.exit_code() as u8);
        }
        Parsed::Refused(message) => {
            messages::error(&message);
            return ExitCode::from(USAGE);
        }
    };
    // A test's fault plan with a mistake in it would test nothing.
    if let Err(why) = shardrec_control::fault::check_planned() {
        messages::error(&why);
        return ExitCode::from(USAGE);
    }
    let result = match cli.action {
        Action::Record(args) => record(*args, &command_line),
        Action::Tool(action) => match (action.listing(), action.tool()) {
            (Some(listing), _) => Ok(list_memory_events(listing)),
            (None, Ok((tool, args))) => tool_record(tool, &args, &command_line),
            (None, Err(why)) => {
                messages::error(&why);
                Ok(ExitCode::from(USAGE))
            }
        },
        Action::Merge(args) => merge(&args),
        Action::Archive(args) => archive(&args),
        Action::Generate(args) => generate(&args),
    };
    match result {
        Ok(code) => code,
        Err(Error::Merge(error)) if shardrec_record::reader_left(&error) => {
            shardrec_record::die_of_sigpipe()
        }
        Err(Error::Generate { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {
            shardrec_record::die_of_sigpipe()
        }
        Err(error) => {
            messages::error(&shardrec_shard::with_causes(&error));
            match error {
                Error::Record(RecordError::Usage(_) | RecordError::UnknownEvent { .. })
                | Error::MergeUsage(_)
                | Error::Merge(MergeError::BadTime(_)) => ExitCode::from(USAGE),
                _ => ExitCode::from(255),
            }
        }
    }
}

/// Records, then merges unless told not to; exits with the workload's status.
fn record(args: RecordArgs, command_line: &[String]) -> Result<ExitCode, Error> {
    let mut messages = Box::new(Messages);
    if let Some(action) = args.run.setup_filter() {
        let said = shardrec_record::setup_filter(action)?;
        messages.note(&format!("shardrec: {said}"));
        return Ok(ExitCode::SUCCESS);
    }
    args.output.build_ids.set_debuginfod_urls();
    let config = args.into_config().map_err(RecordError::Usage)?;
    match shardrec_record::record(config, command_line, messages)? {
        Exit::Status(code) => Ok(ExitCode::from(code)),
        Exit::ReaderLeft => shardrec_record::die_of_sigpipe(),
    }
}

/// `shardrec TOOL record ARGS`: `shardrec record` with the tool's words
/// before `ARGS`, read as any record command line (help, usage errors
/// and all); the header keeps the command line as typed, as perf's does.
/// `mem|c2c record -e list`: perf's lines on standard error, as perf
/// prints them; perf's refusal where the CPU has no memory events.
fn list_memory_events(listing: Result<String, String>) -> ExitCode {
    match listing {
        Ok(lines) => {
            messages::listing(&lines);
            ExitCode::SUCCESS
        }
        Err(why) => {
            messages::error(&why);
            ExitCode::from(255)
        }
    }
}

fn tool_record(tool: Tool, args: &[String], command_line: &[String]) -> Result<ExitCode, Error> {
    let program = command_line.first().map_or("shardrec", String::as_str);
    let words = match tool.record_command_line(program, args) {
        Ok(words) => words,
        Err(why) => {
            messages::error(&format!("{} record: {why}", tool.name()));
            return Ok(ExitCode::from(255));
        }
    };
    match flags::parse(words) {
        Parsed::Run(cli) => match cli.action {
            Action::Record(args) => record(*args, command_line),
            _ => unreachable!("a tool's words are a record command line"),
        },
        Parsed::Print(message) => {
            let _ = message.print();
            Ok(ExitCode::from(message.exit_code() as u8))
        }
        Parsed::Refused(message) => {
            messages::error(&format!("{} record: {message}", tool.name()));
            Ok(ExitCode::from(USAGE))
        }
    }
}

fn merge(args: &MergeArgs) -> Result<ExitCode, Error> {
    windows_are_merged_alone(&args.dir)?;
    args.build_ids.set_debuginfod_urls();
    let options = shardrec_merge::MergeOptions {
        progress: !args.quiet,
        compression_level: args.compression.level().map_err(Error::MergeUsage)?,
        threads: args.threads,
        slice_bytes: args.slice_size,
        build_ids: args.build_ids.which(),
        build_id_cache: args.build_ids.cache(),
        consume: args.consume && args.time.is_none(),
    };
    let path = shardrec_shard::output::perf_data_file(&args.output);
    let output = Output::resolve(&path).map_err(MergeError::from)?;
    if let Some(spec) = &args.time {
        let (window, report) = shardrec_merge::merge_window(&args.dir, &output, &options, spec)?;
        let mut messages = Messages;
        messages.merged(&report);
        messages.note(&window_line(&window));
        return Ok(match report.unreadable().next() {
            None => ExitCode::SUCCESS,
            Some(_) => ExitCode::from(1),
        });
    }
    let report = shardrec_merge::merge(&args.dir, &output, &options)?;
    Messages.merged(&report);
    Ok(if report.unreadable().next().is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A `--switch-output` (or `--overwrite`, `--keep-last`) recording left
/// whole (by `--keep-shards`, a kill, a failed merge) is a directory of
/// windows, each a recording of its own: say which to merge.
fn windows_are_merged_alone(dir: &Path) -> Result<(), Error> {
    let recording = shardrec_shard::RecordingDir::open(dir);
    if recording.meta_path().exists() || !recording.window(0).path().exists() {
        return Ok(());
    }
    let mut windows: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("window"))
        .collect();
    windows.sort();
    let (first, last) = (windows.first(), windows.last());
    Err(Error::MergeUsage(format!(
        "{} holds the windows of a --switch-output recording ({} to {}), each a recording of its own: merge one with shardrec merge {}/WINDOW -o FILE",
        dir.display(),
        first.map_or("", String::as_str),
        last.map_or("", String::as_str),
        dir.display()
    )))
}

/// `shardrec archive`: the tarball, and perf archive's advice.
fn archive(args: &flags::ArchiveArgs) -> Result<ExitCode, Error> {
    let data = shardrec_shard::output::perf_data_file(&args.file);
    let cache = shardrec_merge::build_id_cache::default_dir().unwrap_or_default();
    let archive =
        shardrec_merge::archive::archive(&data, &cache).map_err(|source| Error::Archive {
            path: data.clone(),
            source,
        })?;
    for name in &archive.missing {
        messages::warning(&format!(
            "{name}: its build id is not in the build-id cache"
        ));
    }
    let name = archive.path.display();
    messages::result(&format!(
        "Now please run:\n\n$ tar xvf {name} -C ~/.debug\n\nwherever you need to run 'perf report' on ({} build ids).",
        archive.included
    ));
    Ok(ExitCode::SUCCESS)
}

/// What a merge of a window read, in one line.
fn window_line(window: &shardrec_merge::window::WindowReport) -> String {
    let percent = 100.0 * window.read as f64 / window.total.max(1) as f64;
    let mut line = format!(
        "  window: read {} of the shards' {} bytes ({percent:.1}%)",
        window.read, window.total
    );
    if !window.walked.is_empty() {
        let cpus: Vec<String> = window.walked.iter().map(u32::to_string).collect();
        line += &format!("; without an index, walked whole: CPU {}", cpus.join(", "));
    }
    line
}

/// Writes the man pages or a shell's completions.
fn generate(args: &flags::GenerateArgs) -> Result<ExitCode, Error> {
    let what = match &args.dir {
        Some(dir) => format!("the man pages into {}", dir.display()),
        None => "the completions to standard output".to_string(),
    };
    generate::generate(args.what, args.dir.as_deref())
        .map(|()| ExitCode::SUCCESS)
        .map_err(|source| Error::Generate { what, source })
}
