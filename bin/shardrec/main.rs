//! `shardrec`: parse the command line, dispatch, and turn errors into one
//! line and an exit code.

mod flags;

use std::process::ExitCode;

use clap::Parser;
use flags::{Cli, Command};

fn main() -> ExitCode {
    let command_line: Vec<String> = std::env::args().collect();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Record(args) => args
            .into_config(command_line)
            .map_err(|usage| shardrec_record::RecordError::Usage(usage).to_string())
            .and_then(|config| record(&config)),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("shardrec: {message}");
            ExitCode::from(255)
        }
    }
}

fn record(config: &shardrec_record::RecordConfig) -> Result<ExitCode, String> {
    let report = shardrec_record::record(config).map_err(|e| e.to_string())?;
    if !config.quiet {
        eprint!("{report}");
        if !config.no_merge {
            eprintln!(
                "shardrec: the merge into {} is not built yet; the shards stay in {}",
                config.output.display(),
                report.dir.display()
            );
        }
    }
    Ok(ExitCode::from(report.exit_code.clamp(0, 255) as u8))
}
