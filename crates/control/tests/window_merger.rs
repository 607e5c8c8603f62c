//! The window merger's jobs and report through control's one `Helper`,
//! against a stand-in that answers as it does: every job sent, the
//! outputs reported when the jobs end; one killed is not replaced (the
//! restart table says so), and says nothing. A plain `main` (no test
//! harness): a helper is forked, which needs a process with one thread.

use std::path::PathBuf;

use nix::sys::signal::{kill, Signal};
use shardrec_control::restart::{self, Helper as Kind};
use shardrec_control::windows::{Job, Outputs};
use shardrec_control::{Helper, HelperEnds};

/// Plays the merger: each job's output "written", the oldest dropped past
/// two, then the outputs reported.
fn stand_in(mut ends: HelperEnds<Job, Outputs>) -> i32 {
    // As the real merger: the coordinator's ends of the pipes, inherited
    // in the fork, closed, so the jobs' pipe ends when the coordinator's
    // copy closes.
    // SAFETY: this forked child uses only its own two ends afterwards and
    // leaves through `exit_now`.
    if unsafe { shardrec_sys::process::close_fds_except(&ends.fds()) }.is_err() {
        return 1;
    }
    let mut outputs = Outputs {
        max_files: Some(2),
        ..Outputs::default()
    };
    while let Ok(Some(job)) = ends.next_order() {
        match job.windows.is_empty() {
            true => outputs.failed.push(job.output),
            false => outputs.kept.push_back(job.output),
        }
        while outputs.kept.len() > 2 {
            outputs.kept.pop_front();
        }
    }
    i32::from(ends.report(&outputs).is_err())
}

fn job(windows: &[u32], output: &str) -> Job {
    Job {
        root: PathBuf::from("/tmp/r"),
        windows: windows.to_vec(),
        output: PathBuf::from(output),
    }
}

fn main() {
    let mut merger = Helper::spawn(stand_in).expect("a helper forks");
    for (windows, output) in [(&[0][..], "a"), (&[1, 2], "b"), (&[], "c"), (&[3], "d")] {
        assert!(merger.send(&job(windows, output)));
    }
    let said = merger.finish();
    let [outputs] = &said[..] else {
        panic!("one report: {said:?}");
    };
    let kept: Vec<_> = outputs.kept.iter().map(|p| p.to_str().unwrap()).collect();
    assert_eq!(kept, ["b", "d"]);
    assert_eq!(outputs.failed, [PathBuf::from("c")]);

    assert_eq!(restart::times(Kind::WindowMerger), 0, "not replaced");
    let mut merger: Helper<Job, Outputs> = Helper::spawn(stand_in).expect("a helper forks");
    assert!(merger.send(&job(&[0], "a")));
    kill(merger.pid, Signal::SIGKILL).unwrap();
    assert!(
        merger.finish().is_empty(),
        "a killed merger reports nothing"
    );
    println!("WindowMerger: every job and its report, a death not replaced: ok");
}
