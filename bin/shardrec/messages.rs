//! Every line shardrec prints about its work, in one place: the recording's
//! and the merge's summaries, perf's status lines, warnings and errors, on
//! standard error (standard output may be the recording itself), and `-q`
//! silences all but what went wrong.

use std::sync::atomic::{AtomicBool, Ordering};

use shardrec_merge::MergeReport;
use shardrec_record::{RecordReport, Reporter};

/// `-q`: only warnings and errors. Set once the command line is read,
/// before anything is said about it.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Says only what went wrong from here on, if `quiet`.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// A line about the work, unless `-q`.
pub fn note(line: &str) {
    if !quiet() {
        eprintln!("{line}");
    }
}

/// Something the user should know, even under `-q`.
pub fn warning(message: &str) {
    eprintln!("shardrec: warning: {message}");
}

/// What stopped a command, even under `-q`.
pub fn error(message: &str) {
    eprintln!("shardrec: {message}");
}

/// Lines perf prints on standard error as a command's whole answer
/// (`perf mem record -e list`), even under `-q`.
pub fn listing(lines: &str) {
    eprint!("{lines}");
}

/// A command's result for the user to act on, on standard output (perf
/// archive's advice).
pub fn result(text: &str) {
    println!("{text}");
}

/// Standard error, as `-q` leaves it.
pub struct Messages;

impl Reporter for Messages {
    fn recorded(&mut self, report: &RecordReport) {
        if !quiet() {
            eprint!("{}", crate::record_summary::render(report));
        }
    }

    fn merged(&mut self, report: &MergeReport) {
        print_damage(report);
        if !quiet() {
            eprint!("{report}");
        }
    }

    fn note(&mut self, line: &str) {
        note(line);
    }

    fn warning(&mut self, message: &str) {
        warning(message);
    }

    fn error(&mut self, message: &str) {
        error(message);
    }

    fn detail(&mut self, line: &str) {
        eprintln!("{line}");
    }
}

/// What a merge found damaged (a torn shard, a lost meta), said even
/// under `-q`: the output lacks it.
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
    if report.bpf_broken > 0 {
        eprintln!(
            "shardrec: warning: the bpf file holds {} programs whose capture does not add up: their info is not in perf.data",
            report.bpf_broken
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
