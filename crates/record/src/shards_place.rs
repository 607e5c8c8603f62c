//! Where a recording's shards go while it records: `NAME.shards` beside a
//! regular output, or a private directory in `--shards-dir` (else
//! `$TMPDIR`) when the output is a device or FIFO, standard output (perf's
//! pipe format), or its directory is no place for them (`/dev`, `/proc`);
//! see `shardrec_shard::output`.

use shardrec_shard::output::Output;
use shardrec_shard::RecordingDir;

use crate::say;
use crate::{RecordConfig, RecordError};

/// Checks the output before anything is recorded and creates the
/// recording's directory.
pub(crate) fn create_dir(
    config: &RecordConfig,
    output: &Output,
) -> Result<RecordingDir, RecordError> {
    if config.kcore {
        // The output is a directory of perf's own layout, made at the start.
        return Ok(RecordingDir::create(RecordingDir::for_output(
            &config.output,
        ))?);
    }
    output.check_writable()?;
    if config.switch_output.is_some() && !matches!(output, Output::File { .. }) {
        return Err(RecordError::Usage(format!(
            "--switch-output names a file for each window after the output, and {} is {}: give a file",
            config.output.display(),
            output.kind()
        )));
    }
    let base = match (&config.shards_dir, output.shards_beside()) {
        (Some(base), _) => base.clone(),
        (None, Some(beside)) => return Ok(RecordingDir::create(beside)?),
        (None, None) => std::env::temp_dir(),
    };
    let dir = RecordingDir::create_private(&base)?;
    // Said at the start: a recording killed later leaves its shards there.
    if !config.quiet {
        let why = match (&config.shards_dir, output) {
            (_, Output::Pipe) => {
                "perf's pipe format goes to standard output as the recording goes; ".into()
            }
            (Some(_), _) => String::new(),
            (None, _) => format!("{} is {}: ", config.output.display(), output.kind()),
        };
        say::note(&format!(
            "shardrec: {why}the shards go to {}",
            dir.path().display()
        ));
    }
    Ok(dir)
}
