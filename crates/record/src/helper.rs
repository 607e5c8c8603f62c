//! Helper processes (the writers, the VIP): forked by the coordinator,
//! driven over a control pipe, reporting one line at a time on a result
//! pipe ("ready ...", then "done ..." or "error ...").

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;

use nix::fcntl::OFlag;
use nix::sys::resource::{getrlimit, Resource};
use nix::unistd::Pid;
use shardrec_sys::process;
use shardrec_writer::Command;

use crate::RecordError;

/// The coordinator's handle on one helper process.
pub struct HelperProcess {
    /// What it is, for messages ("writer of CPU 3", "VIP").
    pub name: String,
    /// Its pid.
    pub pid: Pid,
    control: Option<File>,
    report: BufReader<File>,
    /// Set once the process has been reaped.
    pub exited: bool,
}

impl HelperProcess {
    /// Forks a helper running `body(control, report)`; its return value is
    /// the exit code. The pipes are close-on-exec and the child keeps only
    /// its own ends.
    pub fn spawn(
        name: String,
        body: impl FnOnce(OwnedFd, File) -> i32,
    ) -> Result<HelperProcess, RecordError> {
        let fail = |e: nix::Error| RecordError::system(format!("starting the {name}"))(e.into());
        let (control_read, control_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(fail)?;
        let (report_read, report_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(fail)?;
        let pid = process::spawn(move || body(control_read, File::from(report_write)))
            .map_err(|e| spawn_error(&name, e))?;
        Ok(HelperProcess {
            name,
            pid,
            control: Some(File::from(control_write)),
            report: BufReader::new(File::from(report_read)),
            exited: false,
        })
    }

    /// Waits for "ready [REST]" and returns REST.
    pub fn wait_ready(&mut self) -> Result<String, RecordError> {
        self.wait_for("ready")
    }

    /// Waits for the line "WORD [REST]" and returns REST; any other line
    /// is the helper's failure.
    pub fn wait_for(&mut self, word: &str) -> Result<String, RecordError> {
        match self.read_line()? {
            Some(line) if line == word => Ok(String::new()),
            Some(line) => match line.strip_prefix(word).and_then(|r| r.strip_prefix(' ')) {
                Some(rest) => Ok(rest.to_string()),
                None => Err(self.failure(&line)),
            },
            None => Err(self.failure(&format!("exited before it was {word}"))),
        }
    }

    /// Reads `len` raw bytes the helper sent after a line.
    pub fn read_bytes(&mut self, len: usize) -> Result<Vec<u8>, RecordError> {
        let mut bytes = vec![0; len];
        self.report
            .read_exact(&mut bytes)
            .map_err(RecordError::system(format!(
                "reading from the {}",
                self.name
            )))?;
        Ok(bytes)
    }

    /// Sends a command; a helper already gone is not an error.
    pub fn send(&mut self, command: Command) {
        if let Some(control) = &mut self.control {
            let _ = control.write_all(&[command.byte()]);
        }
    }

    /// Reads the final "done REST" line and returns REST.
    pub fn read_done(&mut self) -> Result<String, RecordError> {
        match self.read_line()? {
            Some(line) => match line.strip_prefix("done ") {
                Some(rest) => Ok(rest.to_string()),
                None => Err(self.failure(&line)),
            },
            None => Err(self.failure("exited without a report")),
        }
    }

    fn read_line(&mut self) -> Result<Option<String>, RecordError> {
        let mut line = String::new();
        let read = self
            .report
            .read_line(&mut line)
            .map_err(RecordError::system(format!(
                "reading from the {}",
                self.name
            )))?;
        Ok((read > 0).then(|| line.trim_end().to_string()))
    }

    /// The error for what the helper said (or that it said nothing).
    pub fn failure(&self, message: &str) -> RecordError {
        RecordError::Helper {
            name: self.name.clone(),
            message: message
                .strip_prefix("error ")
                .unwrap_or(message)
                .to_string(),
        }
    }
}

/// Why a fork failed: EAGAIN is the process limit (or the kernel's
/// `threads-max`, which the same advice covers).
fn spawn_error(name: &str, error: io::Error) -> RecordError {
    if error.raw_os_error() != Some(libc::EAGAIN) {
        return RecordError::system(format!("starting the {name}"))(error);
    }
    let limit = match getrlimit(Resource::RLIMIT_NPROC) {
        Ok((soft, _)) if soft == libc::RLIM_INFINITY => "unlimited".to_string(),
        Ok((soft, _)) => soft.to_string(),
        Err(_) => "unknown".to_string(),
    };
    RecordError::TooManyProcesses {
        name: name.to_string(),
        limit,
    }
}

/// In a helper: writes the final line for `outcome` and returns the exit code.
pub fn finish(report: &mut File, outcome: io::Result<String>) -> i32 {
    let line = match &outcome {
        Ok(done) => format!("done {done}"),
        Err(e) => format!("error {e}"),
    };
    let _ = writeln!(report, "{line}");
    i32::from(outcome.is_err())
}
