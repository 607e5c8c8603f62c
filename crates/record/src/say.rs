//! The record crate's one voice, as ripgrep's `messages`: every status
//! line, warning and `-v` detail it has goes to the [`Reporter`] its
//! caller handed to [`crate::record`], installed here for the process
//! while the pipeline runs. The binary decides how each is shown and what
//! `-q` silences, and a test can capture them. The helper processes
//! forked meanwhile (the mergers print their outputs' Dump lines) inherit
//! it. Where none is installed (the crate used without the pipeline),
//! warnings and errors still reach standard error; status lines and
//! details are for a caller that asked for them.

use std::sync::{Mutex, MutexGuard};

use shardrec_merge::MergeReport;

use crate::reporter::Reporter;
use crate::summary::RecordReport;

static REPORTER: Mutex<Option<Box<dyn Reporter + Send>>> = Mutex::new(None);

/// The reporter installed by [`install`], until dropped.
pub(crate) struct Installed(());

/// Makes `reporter` the process's until the returned guard is dropped.
pub(crate) fn install(reporter: Box<dyn Reporter + Send>) -> Installed {
    *installed() = Some(reporter);
    Installed(())
}

impl Drop for Installed {
    fn drop(&mut self) {
        *installed() = None;
    }
}

fn installed() -> MutexGuard<'static, Option<Box<dyn Reporter + Send>>> {
    // A thread that panicked while saying something leaves nothing half
    // done that matters here.
    REPORTER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Says it to the installed reporter; false where there is none.
fn with(say: impl FnOnce(&mut dyn Reporter)) -> bool {
    match installed().as_mut() {
        Some(reporter) => {
            say(reporter.as_mut());
            true
        }
        None => false,
    }
}

/// One of perf record's status lines (`[ shardrec record: Dump FILE ]`),
/// which `-q` silences.
pub(crate) fn note(line: &str) {
    with(|r| r.note(line));
}

/// Something the recording survives.
pub(crate) fn warning(message: &str) {
    if !with(|r| r.warning(message)) {
        eprintln!("shardrec: warning: {message}");
    }
}

/// Something that decides the exit status.
pub(crate) fn error(message: &str) {
    if !with(|r| r.error(message)) {
        eprintln!("shardrec: {message}");
    }
}

/// What `-v` asked to see, or an answer on `--control`: shown as it is.
pub(crate) fn detail(line: &str) {
    with(|r| r.detail(line));
}

/// The recording's summary.
pub(crate) fn recorded(report: &RecordReport) {
    with(|r| r.recorded(report));
}

/// A merge's summary.
pub(crate) fn merged(report: &MergeReport) {
    with(|r| r.merged(report));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex as StdMutex};

    /// Keeps what it is told.
    struct Captured(Arc<StdMutex<Vec<String>>>);

    impl Reporter for Captured {
        fn recorded(&mut self, _: &RecordReport) {}
        fn merged(&mut self, _: &MergeReport) {}
        fn note(&mut self, line: &str) {
            self.0.lock().unwrap().push(format!("note: {line}"));
        }
        fn warning(&mut self, message: &str) {
            self.0.lock().unwrap().push(format!("warning: {message}"));
        }
        fn error(&mut self, message: &str) {
            self.0.lock().unwrap().push(format!("error: {message}"));
        }
        fn detail(&mut self, line: &str) {
            self.0.lock().unwrap().push(format!("detail: {line}"));
        }
    }

    #[test]
    fn what_is_said_reaches_the_installed_reporter_and_only_while_installed() {
        let heard = Arc::new(StdMutex::new(Vec::new()));
        {
            let _installed = install(Box::new(Captured(heard.clone())));
            note("[ shardrec record: Dump perf.data.1 ]");
            warning("the VIP was restarted");
            detail("decreasing precise_ip by one (2)");
            error("perf.data.2 was not written");
        }
        warning("after: to standard error");
        let said = [
            "note: [ shardrec record: Dump perf.data.1 ]",
            "warning: the VIP was restarted",
            "detail: decreasing precise_ip by one (2)",
            "error: perf.data.2 was not written",
        ];
        // Other tests of this crate may say things meanwhile.
        let mut heard = heard.lock().unwrap().clone();
        assert!(!heard.iter().any(|l| l.contains("after:")), "{heard:?}");
        heard.retain(|l| said.contains(&l.as_str()));
        assert_eq!(heard, said);
    }
}
