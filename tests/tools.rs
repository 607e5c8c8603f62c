//! perf's tools that record: `shardrec sched record` against `perf sched
//! record` over the same workload, read back with `perf sched`'s own
//! reports. The attrs are compared field by field with perf's in
//! tests/attr_parity.rs (its `sched record` lines).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::{perf, recording_test, run, shardrec, Scratch};

/// The scheduler storm of perf's own benchmark, small: 2 groups of 20
/// senders and 20 receivers, 20 messages each (81 tasks with the parent).
const MESSAGING: &[&str] = &["perf", "bench", "sched", "messaging", "-g", "2", "-l", "20"];

/// The task the workload runs as, in `perf sched latency`.
const TASK: &str = "sched-messaging";

/// Records the workload with `perf sched record` into `perf.data` and
/// with `shardrec sched record` into `shardrec.data`.
fn record_both(scratch: &Scratch) -> (std::path::PathBuf, std::path::PathBuf) {
    let (theirs, ours) = (scratch.0.join("perf.data"), scratch.0.join("shardrec.data"));
    let mut perf_sched = Command::new("perf");
    perf_sched
        .args(["sched", "record", "-o"])
        .arg(&theirs)
        .arg("--")
        .args(MESSAGING);
    let output = run(perf_sched);
    assert!(output.status.success(), "perf sched record: {output:?}");
    let mut shardrec_sched = shardrec();
    shardrec_sched
        .args(["sched", "record", "-o"])
        .arg(&ours)
        .arg("--")
        .args(MESSAGING);
    let output = run(shardrec_sched);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "shardrec sched record: {stderr}");
    assert!(!stderr.contains("shardrec:"), "{stderr}");
    (theirs, ours)
}

/// `perf evlist`'s event names, less the side band's own dummy event,
/// which shardrec records apart from perf's tracking dummy (its KSYMBOL and
/// BPF_EVENT records come from the VIP's event: tests/attr_parity.rs).
fn event_names(file: &Path, side_band: bool) -> Vec<String> {
    let evlist = perf(&["evlist"], file);
    let names = String::from_utf8_lossy(&evlist.stdout);
    let names = names
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty());
    let mut names: Vec<String> = names.map(String::from).collect();
    if side_band {
        let at = names.iter().rposition(|n| n == "dummy");
        names.remove(at.expect("shardrec's side-band dummy event"));
    }
    names
}

/// `perf sched latency`'s rows: each task name with its task count, and
/// the INFO lines.
fn latency(file: &Path) -> (BTreeMap<String, u64>, Vec<String>) {
    let output = perf(&["sched", "latency"], file);
    let text = String::from_utf8_lossy(&output.stdout);
    let mut tasks = BTreeMap::new();
    for line in text.lines() {
        let Some((task, _)) = line.trim().split_once('|') else {
            continue;
        };
        let task = task.trim();
        // `name:(N)` for N tasks of one name, `name:PID` for one.
        let (name, count) = match task.rsplit_once(":(") {
            Some((name, n)) => (name, n.trim_end_matches(')').parse().unwrap_or(0)),
            None => (task.rsplit_once(':').map_or(task, |(n, _)| n), 1),
        };
        *tasks.entry(name.to_string()).or_insert(0) += count;
    }
    let info = text.lines().filter(|l| l.contains("INFO:"));
    (tasks, info.map(|l| l.trim().to_string()).collect())
}

#[test]
fn sched_record_is_perfs_and_perf_sched_reads_it() {
    let Some((_serial, scratch)) = recording_test("tools-sched") else {
        return;
    };
    let (theirs, ours) = record_both(&scratch);
    assert_eq!(event_names(&ours, true), event_names(&theirs, false));
    let (their_tasks, _) = latency(&theirs);
    let (our_tasks, info) = latency(&ours);
    assert_eq!(their_tasks.get(TASK), Some(&81), "{their_tasks:?}");
    assert_eq!(our_tasks.get(TASK), their_tasks.get(TASK), "{our_tasks:?}");
    assert!(
        !info.iter().any(|l| l.contains("lost")),
        "perf sched latency: {info:?}"
    );
    // The other reports read it too, naming the workload.
    for report in [&["sched", "timehist"][..], &["sched", "map"]] {
        let output = perf(report, &ours);
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            report[1] == "map" || text.contains(TASK),
            "perf {report:?}: {text}"
        );
    }
    // The header keeps the command line as typed, as perf's does.
    let header = perf(&["report", "--header-only"], &ours);
    let header = String::from_utf8_lossy(&header.stdout);
    assert!(header.contains("sched record -o"), "{header}");
}

#[test]
fn a_tools_bad_option_or_command_is_one_line() {
    let Some((_serial, scratch)) = recording_test("tools-bad") else {
        return;
    };
    let cases: [(&[&str], &str); 3] = [
        (&["sched", "record", "--bogus", "--", "true"], "'--bogus'"),
        (&["sched", "record", "-m", "nope", "--", "true"], "nope"),
        (&["sched", "latency"], "'latency'"),
    ];
    for (args, named) in cases {
        let mut command = shardrec();
        command.current_dir(&scratch.0).args(args);
        let output = run(command);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
    assert!(!scratch.output().exists());
}
