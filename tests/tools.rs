//! perf's tools that record: `shardrec sched|lock|kmem|kwork|trace|
//! timechart record` against perf's own over the same workload, read
//! back with the tools' own reports by perf 6.1 and 6.12. The attrs are compared field by field with perf's in
//! tests/attr_parity.rs (its `TOOL record` lines).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::{perf, perfs, recording_test, run, shardrec, Perf, Scratch};

/// The scheduler storm of perf's own benchmark, small: 2 groups of 20
/// senders and 20 receivers, 20 messages each (81 tasks with the parent).
const MESSAGING: &[&str] = &["perf", "bench", "sched", "messaging", "-g", "2", "-l", "20"];

/// The task the workload runs as, in `perf sched latency`.
const TASK: &str = "sched-messaging";

/// Records the workload with perf's `tool` (its words up to `record`)
/// into `perf.data` and with shardrec's into `shardrec.data`.
fn record_both(scratch: &Scratch, tool: &[&str]) -> (std::path::PathBuf, std::path::PathBuf) {
    let (theirs, ours) = (scratch.0.join("perf.data"), scratch.0.join("shardrec.data"));
    let mut perf_tool = Command::new("perf");
    perf_tool
        .args(tool)
        .arg("-o")
        .arg(&theirs)
        .arg("--")
        .args(MESSAGING);
    let output = run(perf_tool);
    assert!(output.status.success(), "perf {tool:?}: {output:?}");
    let mut shardrec_tool = shardrec();
    shardrec_tool
        .args(tool)
        .arg("-o")
        .arg(&ours)
        .arg("--")
        .args(MESSAGING);
    let output = run(shardrec_tool);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "shardrec {tool:?}: {stderr}");
    assert!(!stderr.contains("shardrec:"), "{stderr}");
    assert_eq!(event_names(&ours, true), event_names(&theirs, false));
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

/// `perf sched latency`'s rows (by Debian's perf): each task name with
/// its task count, and the INFO lines.
fn latency(file: &Path) -> (BTreeMap<String, u64>, Vec<String>) {
    latency_by(&Perf::debian(), file)
}

/// [`latency`] by `perf`.
fn latency_by(perf: &Perf, file: &Path) -> (BTreeMap<String, u64>, Vec<String>) {
    let output = perf.run(&["sched", "latency"], file);
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
    let (theirs, ours) = record_both(&scratch, &["sched", "record"]);
    let (their_tasks, _) = latency(&theirs);
    let (our_tasks, info) = latency(&ours);
    assert_eq!(their_tasks.get(TASK), Some(&81), "{their_tasks:?}");
    assert_eq!(our_tasks.get(TASK), their_tasks.get(TASK), "{our_tasks:?}");
    // The newer perf users read with reads it alike.
    for newer in perfs().iter().skip(1) {
        let (tasks, _) = latency_by(newer, &ours);
        assert_eq!(
            tasks.get(TASK),
            their_tasks.get(TASK),
            "{}: {tasks:?}",
            newer.name
        );
    }
    assert!(
        !info.iter().any(|l| l.contains("lost")),
        "perf sched latency: {info:?}"
    );
    // The recorder's own switches are there, as perf records its own:
    // left out, a CPU's switches would not chain (each switch after one
    // away from a recorder process a "context switch bug").
    let script = perf(&["script", "-F", "comm,event"], &ours);
    let script = String::from_utf8_lossy(&script.stdout);
    let own = script.lines().filter(|l| {
        let l = l.trim_start();
        l.starts_with("shardrec ") && l.contains("sched:sched_switch")
    });
    assert!(own.count() > 0, "no switch away from a shardrec process");
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

/// `perf kmem stat`'s allocations by `perf`: how many there were.
fn kmem_allocations(perf: &Perf, file: &Path) -> u64 {
    let output = Command::new(&perf.path)
        .args(["kmem", "-i"])
        .arg(file)
        .args(["--force", "stat"])
        .output()
        .expect("perf runs");
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Cross CPU allocations: "));
    let total = line.and_then(|l| l.split_once('/')).map(|(_, n)| n.trim());
    total
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{} kmem stat: {text}", perf.name))
}

#[test]
fn lock_kmem_and_kwork_record_as_perfs_and_their_reports_read_them() {
    let Some((_serial, scratch)) = recording_test("tools-others") else {
        return;
    };
    // perf lock: the contention events (this kernel has no lockdep),
    // read by perf lock contention.
    // Each report is read by perf 6.1 and 6.12.
    let (_, ours) = record_both(&scratch, &["lock", "record"]);
    for perf in perfs() {
        // (perf lock prints its report on standard error.)
        let contention = perf.run(&["lock", "contention"], &ours);
        let text = String::from_utf8_lossy(&contention.stderr);
        assert!(
            text.contains("contended"),
            "{} lock contention: {text}",
            perf.name
        );
    }
    // perf kmem: the slab's allocations and frees, counted by perf kmem
    // stat; --page adds the page allocator's.
    let (theirs, ours) = record_both(&scratch, &["kmem", "record"]);
    assert!(kmem_allocations(&Perf::debian(), &theirs) > 0);
    for perf in perfs() {
        assert!(kmem_allocations(&perf, &ours) > 0, "{}", perf.name);
    }
    record_both(&scratch, &["kmem", "--page", "record"]);
    // perf kwork: softirqs and interrupts in the order asked, read by
    // perf kwork report.
    let (_, ours) = record_both(&scratch, &["kwork", "-k", "softirq,irq", "record"]);
    for perf in perfs() {
        let report = perf.run(&["kwork", "report"], &ours);
        let text = String::from_utf8_lossy(&report.stdout);
        assert!(
            text.contains("Kwork Name"),
            "{} kwork report: {text}",
            perf.name
        );
    }
}

#[test]
fn trace_and_timechart_record_as_perfs_and_perf_reads_them() {
    let Some((_serial, scratch)) = recording_test("tools-trace") else {
        return;
    };
    // perf trace: every system call, replayed by perf trace -i with the
    // workload's name (perf cuts it to 15 characters).
    let (_, ours) = record_both(&scratch, &["trace", "record"]);
    // (perf 6.12's trace -i, as unpacked here, dies of a segmentation
    // fault on its own trace record's file too: perf 6.1 reads it.)
    // (perf trace prints on standard error.)
    let replay = Command::new("perf")
        .arg("trace")
        .arg("-i")
        .arg(&ours)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&replay.stderr);
    let calls = text.lines().filter(|l| l.contains("): sched-messagin/"));
    assert!(calls.count() > 100, "perf trace -i: {text}");
    // perf timechart record takes no -o: each writes perf.data where it
    // runs (standard output not a pipe, which would take perf's pipe
    // format).
    let record = |mut command: Command, dir: &str, options: &[&str]| {
        let dir = scratch.0.join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        command
            .current_dir(&dir)
            .args(["timechart", "record"])
            .args(options)
            .arg("--")
            .args(MESSAGING);
        let output = common::run_with_stdout(command, std::process::Stdio::null());
        assert!(output.status.success(), "{output:?}");
        dir.join("perf.data")
    };
    // The tasks' events with callchains, then (-I) the I/O system calls,
    // which perf timechart -I draws.
    for (options, io) in [(&["-T", "-g"][..], false), (&["-I"][..], true)] {
        let name = if io { "io" } else { "tasks" };
        let theirs = record(Command::new("perf"), &format!("perf-{name}"), options);
        let ours = record(shardrec(), &format!("shardrec-{name}"), options);
        assert_eq!(event_names(&ours, true), event_names(&theirs, false));
        for perf in perfs() {
            let svg = scratch.0.join(format!("timechart-{name}.svg"));
            let chart = Command::new(&perf.path)
                .args(["timechart", "-i"])
                .arg(&ours)
                .arg("-o")
                .arg(&svg)
                .output()
                .unwrap();
            assert!(chart.status.success(), "{} timechart: {chart:?}", perf.name);
            let svg = std::fs::read_to_string(&svg).unwrap();
            let drawn = svg.contains("sched-messaging");
            assert!(drawn, "{}: no workload in the {name} chart", perf.name);
        }
    }
}

#[test]
fn a_tools_bad_option_or_command_is_one_line() {
    let Some((_serial, scratch)) = recording_test("tools-bad") else {
        return;
    };
    let cases: [(&[&str], &str); 9] = [
        (&["sched", "record", "--bogus", "--", "true"], "'--bogus'"),
        (&["sched", "record", "-m", "nope", "--", "true"], "nope"),
        (&["sched", "latency"], "'latency'"),
        (&["lock", "report"], "perf lock report"),
        (&["kwork", "-k", "bogus", "record", "--", "true"], "'bogus'"),
        (&["kmem", "--bogus", "record", "--", "true"], "'--bogus'"),
        (&["mem", "-t", "fetch", "record", "--", "true"], "fetch"),
        // (perf 6.1 and 6.12 cannot record page faults this way either.)
        (&["trace", "--pf", "all", "record", "--", "true"], "'--pf'"),
        (&["timechart", "record", "-o", "x", "--", "true"], "'-o'"),
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
