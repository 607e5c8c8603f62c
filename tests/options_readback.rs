//! Options that change what is recorded, each recorded against the real
//! kernel and read back with perf script or perf report.

mod common;

use std::process::Command;

use common::{load, perf, record_and_merge, recording_test, Reaped, Scratch, TestCgroup};

/// `perf script -F FIELDS` of the scratch recording, as text.
fn script(scratch: &Scratch, extra: &[&str]) -> String {
    let mut args = vec!["script"];
    args.extend_from_slice(extra);
    let output = perf(&args, &scratch.output());
    assert!(output.status.success(), "perf script failed: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn a_tracepoint_filter_keeps_only_matching_records() {
    let Some((_serial, scratch)) = recording_test("filter") else {
        return;
    };
    // getppid is syscall 110 on x86-64; the workload makes 1,000 of them
    // among its other calls (mmap, exit_group, ...).
    record_and_merge(
        &scratch,
        &["-e", "raw_syscalls:sys_enter", "--filter", "id == 110"]
            .into_iter()
            .chain(["--", load(), "syscalls", "1000"])
            .collect::<Vec<_>>(),
    );
    let text = script(&scratch, &["-F", "trace"]);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1000, "one record per getppid: {text:.400}");
    assert!(lines.iter().all(|l| l.contains("NR 110")), "{text:.400}");
}

#[test]
fn a_cgroup_recording_has_only_that_cgroups_tasks() {
    let Some((_serial, scratch)) = recording_test("cgroup") else {
        return;
    };
    let cgroup = TestCgroup::new("shardrec-test-cgroup");
    // Long enough to outlast the recording on any host; killed and reaped
    // at the end (or on a failure, by dropping them).
    let inside = Reaped(cgroup.spin("600"));
    let outside = Reaped(Command::new(load()).args(["spin", "600"]).spawn().unwrap());
    std::thread::sleep(std::time::Duration::from_millis(300));
    record_and_merge(
        &scratch,
        &[
            "-a",
            "-e",
            "cpu-clock",
            "-G",
            "shardrec-test-cgroup",
            "--",
            "sleep",
            "1",
        ],
    );
    let inside_pid = inside.0.id().to_string();
    let text = script(&scratch, &["-F", "pid"]);
    let pids: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    drop((outside, inside));
    assert!(pids.len() > 100, "{} samples", pids.len());
    assert!(
        pids.iter().all(|&p| p == inside_pid),
        "samples outside the cgroup: {:?}",
        pids.iter()
            .filter(|&&p| p != inside_pid)
            .take(5)
            .collect::<Vec<_>>()
    );
}

#[test]
fn per_thread_counts_for_perf_report_t() {
    let Some((_serial, scratch)) = recording_test("stat") else {
        return;
    };
    let work = format!("{0} spin 0.3 & {0} spin 0.3; wait", load());
    record_and_merge(
        &scratch,
        &["-s", "-e", "task-clock", "--", "sh", "-c", &work],
    );
    let output = perf(&["report", "-T", "--stdio"], &scratch.output());
    let text = String::from_utf8_lossy(&output.stdout);
    // perf report -T ends with a table of each thread's count.
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("PID") || !l.contains("TID"))
        .skip(1)
        .filter(|l| l.trim_start().starts_with(char::is_numeric))
        .collect();
    assert!(table.len() >= 2, "no per-thread counts in:\n{text}");
}

#[test]
fn switch_namespace_and_cgroup_records_reach_perf_script() {
    let Some((_serial, scratch)) = recording_test("side-band-options") else {
        return;
    };
    let work = ["--", load(), "spin", "0.2"];
    let args: Vec<&str> = [
        "--switch-events",
        "--namespaces",
        "--all-cgroups",
        "-d",
        "-e",
        "cpu-clock",
    ]
    .into_iter()
    .chain(work)
    .collect();
    record_and_merge(&scratch, &args);
    let text = script(
        &scratch,
        &[
            "--show-switch-events",
            "--show-namespace-events",
            "--show-cgroup-events",
        ],
    );
    for kind in ["PERF_RECORD_SWITCH", "PERF_RECORD_NAMESPACES"] {
        assert!(text.contains(kind), "no {kind} in:\n{text:.2000}");
    }
    let addresses = script(&scratch, &["-F", "addr"]);
    assert!(!addresses.trim().is_empty(), "-d samples carry an address");
}

/// A `perf probe` uprobe, deleted when the test ends.
struct Probe(&'static str);

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = Command::new("perf")
            .args(["probe", "-q", "-d", self.0])
            .output();
    }
}

#[test]
fn probes_made_by_perf_probe_are_tracepoints() {
    let Some((_serial, scratch)) = recording_test("probe") else {
        return;
    };
    let libc = std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|path| path.contains("/libc.so"))
        .expect("libc is mapped")
        .to_string();
    let probe = Probe("probe_libc:getppid");
    let made = Command::new("perf")
        .args(["probe", "-q", "-x", &libc, "-a", "getppid"])
        .output()
        .unwrap();
    assert!(made.status.success(), "perf probe: {made:?}");
    record_and_merge(&scratch, &["-e", probe.0, "--", load(), "syscalls", "100"]);
    let text = script(&scratch, &["-F", "event"]);
    let hits = text
        .lines()
        .filter(|l| l.contains("probe_libc:getppid"))
        .count();
    assert_eq!(hits, 100, "one hit per getppid call:\n{text:.400}");
}

#[test]
fn groups_reach_perf_report_as_groups() {
    let Some((_serial, scratch)) = recording_test("groups") else {
        return;
    };
    record_and_merge(
        &scratch,
        &["-e", "{cpu-clock,task-clock}", "--", load(), "spin", "0.2"],
    );
    let header = perf(&["report", "--header-only"], &scratch.output());
    let header = String::from_utf8_lossy(&header.stdout);
    assert!(
        header.contains("# group: {cpu-clock,task-clock}"),
        "{header}"
    );
    let report = perf(&["report", "--group", "--stdio"], &scratch.output());
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.contains("of events 'anon group { cpu-clock, task-clock }'"),
        "{report:.1500}"
    );
}
