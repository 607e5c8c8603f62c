//! `shardrec`: parse the command line, dispatch, and turn errors into one
//! line and an exit code.

mod flags;
mod pipe_mode;

use std::path::Path;
use std::process::ExitCode;

use flags::{Action, MergeArgs, Parsed, RecordArgs};
use shardrec_merge::{MergeError, MergeReport};
use shardrec_record::live_merger::Outcome;
use shardrec_record::RecordError;
use shardrec_shard::scan::ScannedShard;

/// Whatever ends a command before its work is done.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Merge(#[from] MergeError),
    #[error("cannot archive the build ids of {}", .path.display())]
    Archive {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot rename {} with a timestamp", .path.display())]
    Rename {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot remove {}", .path.display())]
    RemoveShards {
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
            eprintln!("shardrec: {message}");
            return ExitCode::from(USAGE);
        }
    };
    let result = match cli.action {
        Action::Record(args) => record(*args, &command_line),
        Action::Merge(args) => merge(&args),
        Action::Archive(args) => archive(&args),
    };
    match result {
        Ok(code) => code,
        Err(error) if pipe_mode::reader_left(&error) => pipe_mode::die_of_sigpipe(),
        Err(error) => {
            eprintln!("shardrec: {}", shardrec_shard::with_causes(&error));
            match error {
                Error::Record(RecordError::Usage(_) | RecordError::UnknownEvent { .. })
                | Error::Merge(MergeError::BadTime(_)) => ExitCode::from(USAGE),
                _ => ExitCode::from(255),
            }
        }
    }
}

/// Records, then merges unless told not to; exits with the workload's status.
fn record(args: RecordArgs, command_line: &[String]) -> Result<ExitCode, Error> {
    let (quiet, keep_shards) = (args.run.quiet, args.output.keep_shards);
    let timestamp_filename = args.output.timestamp_filename;
    let dry_run = args.run.dry_run;
    let compression = args
        .output
        .compression
        .level()
        .map_err(RecordError::Usage)?;
    let threads = args.output.merge_threads().map_err(RecordError::Usage)?;
    let (build_ids, build_id_cache) =
        (args.output.build_ids.which(), args.output.build_ids.cache());
    let options = shardrec_merge::MergeOptions {
        progress: !quiet,
        compression_level: compression,
        threads,
        slice_bytes: None,
        build_ids,
        build_id_cache,
        // The shards go once merged: free them as the merge goes.
        consume: !keep_shards,
    };
    let mut config = args.into_config().map_err(RecordError::Usage)?;
    config.live_merge = Some(options.clone());
    if let Some(switch) = config.switch_output.as_mut() {
        switch.merge = options.clone();
        switch.quiet = quiet;
    }
    if timestamp_filename {
        refuse_to_rename(&config.output)?;
    }
    if dry_run {
        // perf's --dry-run: the options are read and checked, nothing more.
        return Ok(ExitCode::SUCCESS);
    }
    // Merged while recording unless the shards are the product (pipe
    // mode refuses the options that write several outputs).
    let streamed = !config.no_merge;
    let pipe = pipe_mode::PipeMode::begin(&config.output, streamed)?;
    if let Some(pipe) = pipe.as_ref().filter(|_| streamed) {
        // The live merger streams into it as the recording goes.
        config.output_stream = Some(
            pipe.stream()
                .map_err(RecordError::system("standard output"))?,
        );
    }
    let recorded = shardrec_record::record(&config, command_line);
    if let Some(pipe) = pipe {
        pipe.end()?;
    }
    let mut report = recorded?;
    if !quiet {
        eprint!("{report}");
    }
    let code = ExitCode::from(report.exit_code.clamp(0, 255) as u8);
    if let shardrec_shard::StopReason::ShardCut(what) = &report.stopped_by {
        // The disk that is full holds the shards: merging there would
        // fail too, and the shards are what the recording leaves.
        let dir = report.dir.display();
        eprintln!(
            "shardrec: the recording was cut: {what}. Every record written before that is in {dir}; merge them onto a disk with room: shardrec merge {dir} -o OTHER"
        );
        return Ok(ExitCode::from(1));
    }
    if config.no_merge {
        return Ok(code);
    }
    let scanned = std::mem::take(&mut report.scanned);
    let output = match &report.switched {
        // The last window, named as the others.
        Some(switched) if !switched.last_unstamped => timestamped(&config.output)?,
        _ => config.merge_output(),
    };
    let merged = match report.live.take() {
        Some(Outcome::Merged { report, .. }) => show_merge(&report, quiet),
        Some(Outcome::ReaderLeft) => {
            if !keep_shards {
                let _ = std::fs::remove_dir_all(&report.dir);
            }
            pipe_mode::die_of_sigpipe()
        }
        Some(Outcome::Failed(why)) if config.output_stream.is_some() => {
            // What went down the stream cannot be sent again.
            return Err(Error::Record(RecordError::Kernel(format!(
                "the stream stopped ({why}); the recording is kept in {}: shardrec merge {} -o FILE",
                report.dir.display(),
                report.dir.display()
            ))));
        }
        Some(Outcome::Failed(why)) => {
            // The merge after the stop completes it from where it stopped.
            let merged = merge_and_report(&report.dir, &output, quiet, &options, scanned)?;
            eprintln!("shardrec: warning: the live merge stopped ({why}): perf.data was completed after the stop");
            merged
        }
        None => merge_and_report(&report.dir, &output, quiet, &options, scanned)
            .inspect_err(|e| pipe_mode::drop_if_reader_left(e, &report.dir, keep_shards))?,
    };
    // A shard the merge could not read at all is a failure, even when the
    // workload succeeded (its status wins when it failed).
    let code = if merged || report.exit_code != 0 {
        code
    } else {
        ExitCode::from(1)
    };
    if merged && !keep_shards {
        std::fs::remove_dir_all(&report.dir).map_err(|source| Error::RemoveShards {
            path: report.dir.clone(),
            source,
        })?;
    }
    match report.switched {
        Some(switched) => {
            Ok(last_window_done(switched, output, merged, quiet, keep_shards).unwrap_or(code))
        }
        None if timestamp_filename => {
            let named = timestamped(&config.output)?;
            std::fs::rename(&config.output, &named).map_err(|source| Error::Rename {
                path: config.output.clone(),
                source,
            })?;
            eprintln!("[ shardrec record: Dump {} ]", named.display());
            Ok(code)
        }
        None => Ok(code),
    }
}

/// `--switch-output` and the like: the last window's `output` is written
/// (if `merged`); it joins the others, and the recording's directory goes
/// unless something in it is still wanted. An exit code when an output
/// could not be written.
fn last_window_done(
    mut switched: shardrec_record::windows::Outputs,
    output: std::path::PathBuf,
    merged: bool,
    quiet: bool,
    keep_shards: bool,
) -> Option<ExitCode> {
    if !quiet {
        eprintln!("[ shardrec record: Dump {} ]", output.display());
    }
    if merged && !switched.last_unstamped {
        switched.add(output);
    }
    for failed in &switched.failed {
        eprintln!(
            "shardrec: error: {} was not written: its window's shards are kept in {}",
            failed.display(),
            switched.root.display()
        );
    }
    if !switched.failed.is_empty() {
        return Some(ExitCode::from(1));
    }
    // What is left are the windows kept for --keep-last (or all, with
    // --keep-shards).
    if !keep_shards {
        let _ = std::fs::remove_dir_all(&switched.root);
    }
    None
}

/// `--timestamp-filename` renames the output at the end: only a file's.
fn refuse_to_rename(output: &Path) -> Result<(), Error> {
    match shardrec_shard::output::Output::resolve(output).map_err(RecordError::from)? {
        shardrec_shard::output::Output::File { .. } => Ok(()),
        other => Err(Error::Record(RecordError::Usage(format!(
            "--timestamp-filename renames the output at the end, and {} is {}: give a file",
            output.display(),
            other.kind()
        )))),
    }
}

/// `output` named with a timestamp, as perf's `--timestamp-filename`.
fn timestamped(output: &Path) -> Result<std::path::PathBuf, Error> {
    shardrec_record::windows::timestamped(output).map_err(|source| Error::Rename {
        path: output.to_path_buf(),
        source,
    })
}

fn merge(args: &MergeArgs) -> Result<ExitCode, Error> {
    windows_are_merged_alone(&args.dir)?;
    let options = shardrec_merge::MergeOptions {
        progress: !args.quiet,
        compression_level: args.compression.level().map_err(RecordError::Usage)?,
        threads: args.threads,
        slice_bytes: args.slice_size,
        build_ids: args.build_ids.which(),
        build_id_cache: args.build_ids.cache(),
        consume: args.consume && args.time.is_none(),
    };
    let output = perf_data_file(&args.output);
    if let Some(spec) = &args.time {
        let (window, report) = shardrec_merge::merge_window(&args.dir, &output, &options, spec)?;
        print_damage(&report);
        if !args.quiet {
            eprint!("{report}");
            eprintln!("{}", window_line(&window));
        }
        return Ok(match report.unreadable().next() {
            None => ExitCode::SUCCESS,
            Some(_) => ExitCode::from(1),
        });
    }
    let clean = merge_and_report(&args.dir, &output, args.quiet, &options, Vec::new())?;
    Ok(if clean {
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
    Err(Error::Record(RecordError::Usage(format!(
        "{} holds the windows of a --switch-output recording ({} to {}), each a recording of its own: merge one with shardrec merge {}/WINDOW -o FILE",
        dir.display(),
        first.map_or("", String::as_str),
        last.map_or("", String::as_str),
        dir.display()
    ))))
}

/// The perf.data file `path` names: a directory output (perf's --kcore or
/// --threads layout) holds it as `data`.
fn perf_data_file(path: &Path) -> std::path::PathBuf {
    match path != Path::new(shardrec_shard::output::STDOUT) && path.is_dir() {
        true => path.join("data"),
        false => path.to_path_buf(),
    }
}

/// `shardrec archive`: the tarball, and perf archive's advice.
fn archive(args: &flags::ArchiveArgs) -> Result<ExitCode, Error> {
    let data = perf_data_file(&args.file);
    let cache = shardrec_merge::build_id_cache::default_dir().unwrap_or_default();
    let archive =
        shardrec_merge::archive::archive(&data, &cache).map_err(|source| Error::Archive {
            path: data.clone(),
            source,
        })?;
    for name in &archive.missing {
        eprintln!("shardrec: warning: {name}: its build id is not in the build-id cache");
    }
    let name = archive.path.display();
    println!(
        "Now please run:\n\n$ tar xvf {name} -C ~/.debug\n\nwherever you need to run 'perf report' on ({} build ids)."
        , archive.included
    );
    Ok(ExitCode::SUCCESS)
}

/// Merges and prints the summary and any damage. Returns false when a
/// shard held no readable record at all (the output still has the rest).
fn merge_and_report(
    dir: &Path,
    output: &Path,
    quiet: bool,
    options: &shardrec_merge::MergeOptions,
    scanned: Vec<ScannedShard>,
) -> Result<bool, Error> {
    let report = shardrec_merge::merge_scanned(dir, output, options, scanned)?;
    Ok(show_merge(&report, quiet))
}

/// Prints a merge's damage and summary; false when a shard held no
/// readable record at all.
fn show_merge(report: &MergeReport, quiet: bool) -> bool {
    print_damage(report);
    if !quiet {
        eprint!("{report}");
    }
    report.unreadable().next().is_none()
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

fn print_damage(report: &MergeReport) {
    if let Some(why) = &report.meta_damage {
        eprintln!(
            "shardrec: warning: {why}; merged from meta.start, its copy written at start, which lacks the stop's statistics: the kernel's per-event loss counts read at stop are not in perf.data (the rings' own LOST records are)"
        );
    }
    if report.bpf_torn_bytes > 0 {
        eprintln!(
            "shardrec: warning: the bpf file is cut short: {} bytes after its last whole entry dropped",
            report.bpf_torn_bytes
        );
    }
    for (name, damage) in &report.damage {
        let what = if damage.offset == 0 {
            "error"
        } else {
            "warning"
        };
        eprintln!(
            "shardrec: {what}: shard {name} is cut at byte {}: {} bytes dropped ({})",
            damage.offset, damage.dropped, damage.reason
        );
    }
}
