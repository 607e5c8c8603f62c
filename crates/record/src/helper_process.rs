//! The writers and the VIP as the coordinator drives them: control's
//! [`Helper`] with [`Command`]s down and [`Report`]s up (`Ready`,
//! `Started`, then `Done` or `Failed`).

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;

use nix::sys::resource::{getrlimit, Resource};
use nix::unistd::Pid;
use shardrec_control::{Command, Framed, Helper, HelperEnds, Outcome, Report};

use crate::RecordError;

/// The coordinator's handle on a writer or the VIP: control's [`Helper`]
/// with its name, for messages.
pub struct HelperProcess {
    /// What it is, for messages ("writer of CPU 3", "VIP").
    pub name: String,
    /// Its pid.
    pub pid: Pid,
    helper: Helper<Command, Report>,
}

impl HelperProcess {
    /// Forks a helper running `body(control, report)`; its return value is
    /// the exit code. The pipes are close-on-exec and the child keeps only
    /// its own ends.
    pub fn spawn(
        name: String,
        body: impl FnOnce(OwnedFd, File) -> i32,
    ) -> Result<HelperProcess, RecordError> {
        let helper = Helper::spawn(|ends: HelperEnds<Command, Report>| {
            body(OwnedFd::from(ends.orders), ends.reports)
        })
        .map_err(|e| spawn_error(&name, e))?;
        Ok(HelperProcess {
            name,
            pid: helper.pid,
            helper,
        })
    }

    /// Notes that the process has been reaped: it is not waited for again.
    pub fn mark_exited(&mut self) {
        self.helper.mark_reaped();
    }

    /// Whether the process has been reaped.
    pub fn has_exited(&self) -> bool {
        self.helper.reaped()
    }

    /// Waits for `Ready` and returns the records it carries, and whether
    /// (a VIP's) capture program runs.
    pub fn wait_ready(&mut self) -> Result<(Vec<u8>, bool), RecordError> {
        match self.next_report("ready")? {
            Report::Ready { records, capturing } => Ok((records, capturing)),
            other => Err(self.unexpected(&other, "ready")),
        }
    }

    /// Waits for `Started`.
    pub fn wait_started(&mut self) -> Result<(), RecordError> {
        match self.next_report("started")? {
            Report::Started => Ok(()),
            other => Err(self.unexpected(&other, "started")),
        }
    }

    /// Waits for `Switched`: the ring position where the helper's new
    /// shard begins, and the records it made for the new window.
    pub fn wait_switched(&mut self) -> Result<(u64, Vec<u8>), RecordError> {
        match self.next_report("switched")? {
            Report::Switched { base, records } => Ok((base, records)),
            other => Err(self.unexpected(&other, "switched")),
        }
    }

    /// Reads the final report: what the helper accomplished.
    pub fn read_outcome(&mut self) -> Result<Outcome, RecordError> {
        match self.next_report("done")? {
            Report::Done(outcome) => Ok(outcome),
            other => Err(self.unexpected(&other, "done")),
        }
    }

    /// Sends a command; a helper already gone is not an error.
    pub fn send(&mut self, command: Command) {
        self.helper.send(&command);
    }

    /// The next report, expected to be `awaited`; a helper that failed or
    /// went away says so as the error.
    fn next_report(&mut self, awaited: &str) -> Result<Report, RecordError> {
        let report = self
            .helper
            .next_report()
            .map_err(RecordError::system(format!(
                "reading from the {}",
                self.name
            )))?;
        match report {
            Some(Report::Failed(message)) => Err(self.failure(&message)),
            Some(report) => Ok(report),
            None => Err(self.failure(&format!("exited before it was {awaited}"))),
        }
    }

    fn unexpected(&self, report: &Report, awaited: &str) -> RecordError {
        self.failure(&format!("said {report:?} when it should be {awaited}"))
    }

    /// The error for what the helper said (or that it said nothing).
    pub fn failure(&self, message: &str) -> RecordError {
        RecordError::Helper {
            name: self.name.clone(),
            message: message.to_string(),
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

/// In a helper: sends the final report for `outcome` and returns the exit
/// code.
pub fn finish(report: &mut File, outcome: io::Result<Outcome>) -> i32 {
    let failed = outcome.is_err();
    let last = match outcome {
        Ok(outcome) => Report::Done(outcome),
        Err(e) => Report::Failed(e.to_string()),
    };
    let _ = last.write_to(report);
    i32::from(failed)
}
