//! `--switch-output`: the recording goes on without a gap while each
//! window becomes its own perf.data, merged in the background; each reads
//! alone, and together they hold every sample the windows' shards held.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use shardrec_shard::RecordingDir;

/// Records `shardrec record -o perf.data ARGS` (merging) and returns its
/// stderr and the timestamped outputs, oldest first.
fn record_switching(scratch: &Scratch, args: &[&str]) -> (String, Vec<PathBuf>) {
    let mut command = shardrec();
    command
        .arg("record")
        .arg("-o")
        .arg(scratch.output())
        .args(args);
    let output = run(command);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{args:?}: {stderr}");
    let mut outputs: Vec<PathBuf> = std::fs::read_dir(&scratch.0)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.strip_prefix("perf.data.")
                .is_some_and(|stamp| stamp.len() == 16 && stamp.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    outputs.sort();
    for output in &outputs {
        let dump = format!("[ shardrec record: Dump {} ]", output.display());
        assert!(stderr.contains(&dump), "no '{dump}' in {stderr}");
    }
    (stderr, outputs)
}

/// Each sample's time (ns) by CPU, as perf script prints them.
fn times_by_cpu(file: &Path) -> BTreeMap<u32, Vec<u64>> {
    let script = perf(&["script", "-F", "cpu,time"], file);
    let mut times: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&script.stdout).lines() {
        let mut words = line.split_whitespace();
        let (Some(cpu), Some(time)) = (words.next(), words.next()) else {
            continue;
        };
        let cpu = cpu.trim_matches(['[', ']']).parse().unwrap();
        let (secs, micros) = time.trim_end_matches(':').split_once('.').unwrap();
        let ns =
            secs.parse::<u64>().unwrap() * 1_000_000_000 + micros.parse::<u64>().unwrap() * 1000;
        times.entry(cpu).or_default().push(ns);
    }
    times
}

/// perf record of every CPU's cpu-clock every millisecond, running across
/// a shardrec recording: one continuous recording of the same run by
/// another recorder, whose timers fire on the same CPUs.
struct ContinuousPerf {
    child: std::process::Child,
    file: PathBuf,
}

impl ContinuousPerf {
    fn start(scratch: &Scratch) -> ContinuousPerf {
        let file = scratch.0.join("continuous.data");
        let child = std::process::Command::new("perf")
            .args([
                "record",
                "-q",
                "-a",
                "-e",
                "cpu-clock",
                "-c",
                "1000000",
                "-o",
            ])
            .arg(&file)
            .spawn()
            .expect("perf (linux-perf) is installed");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !file.metadata().is_ok_and(|m| m.len() > 0) {
            assert!(
                std::time::Instant::now() < deadline,
                "perf record did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // Its events are enabled once its header is out.
        std::thread::sleep(std::time::Duration::from_millis(200));
        ContinuousPerf { child, file }
    }

    /// Stops it as Ctrl-C does (perf record then ends by the same
    /// signal, its file whole); each sample's time by CPU.
    fn stop(mut self) -> BTreeMap<u32, Vec<u64>> {
        use std::os::unix::process::ExitStatusExt;
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
        let status = wait_bounded(&mut self.child);
        assert!(
            status.success() || status.signal() == Some(nix::libc::SIGINT),
            "perf record: {status}"
        );
        times_by_cpu(&self.file)
    }
}

impl Drop for ContinuousPerf {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Samples of `cpu` in `continuous` strictly between `from` and `to`.
fn taken_between(continuous: &BTreeMap<u32, Vec<u64>>, cpu: u32, from: u64, to: u64) -> usize {
    let times = continuous.get(&cpu).map_or(&[][..], Vec::as_slice);
    times.iter().filter(|&&t| from < t && t < to).count()
}

#[test]
fn every_second_becomes_a_perf_data_and_no_sample_falls_between() {
    let Some((_serial, scratch)) = recording_test("switch-time") else {
        return;
    };
    // Every CPU busy, so each takes a sample every millisecond (an idle
    // CPU's cpu-clock timer sleeps with it).
    let spin = "timeout 3.5 sh -c 'while :; do :; done'";
    let busy = format!("{spin} & {spin} & wait");
    let args = [
        "-a",
        "-e",
        "cpu-clock",
        "-c",
        "1000000",
        "--switch-output=1s",
        "--keep-shards",
    ];
    let args = [&args[..], &["--", "sh", "-c", &busy]].concat();
    let continuous = ContinuousPerf::start(&scratch);
    let (_, outputs) = record_switching(&scratch, &args);
    let continuous = continuous.stop();
    assert!(outputs.len() >= 3, "{outputs:?}");
    let mut total = 0;
    let mut last: BTreeMap<u32, u64> = BTreeMap::new();
    let mut first: BTreeMap<u32, u64> = BTreeMap::new();
    for output in &outputs {
        let report = perf(&["report", "--stdio", "--sort", "comm"], output);
        assert_no_complaint(&report, &output.display().to_string());
        let times = times_by_cpu(output);
        let in_perf: usize = times.values().map(Vec::len).sum();
        assert_eq!(
            samples_by_linux_perf_data(output),
            in_perf as u64,
            "linux-perf-data reads {}",
            output.display()
        );
        for (cpu, times) in &times {
            assert!(
                times.windows(2).all(|w| w[0] <= w[1]),
                "CPU {cpu} out of order"
            );
            // The first sample of a window follows the previous window's
            // last within about one period (one millisecond), as samples
            // follow each other inside a window: no gap. A longer one is
            // the CPU's (a busy host held it: its vCPU ran nothing), not
            // the switch's, only if perf's continuous recording took no
            // more than one sample there either (its timer fires at
            // another moment of the millisecond); samples that fell
            // between two outputs would be in perf's, one a millisecond.
            let inside = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
            if let Some(&previous) = last.get(cpu) {
                let gap = times[0].saturating_sub(previous);
                if gap > inside.max(2_500_000) {
                    let theirs = taken_between(&continuous, *cpu, previous, times[0]);
                    assert!(
                        theirs <= 1,
                        "CPU {cpu}: {gap} ns between {} and the previous output ({inside} ns at most inside it), \
                         where perf's continuous recording took {theirs} samples: they fell between",
                        output.display()
                    );
                    eprintln!(
                        "CPU {cpu}: {gap} ns without a sample before {}, and perf's continuous \
                         recording took {theirs} there: the CPU took none",
                        output.display()
                    );
                }
            }
            first.entry(*cpu).or_insert(times[0]);
            last.insert(*cpu, *times.last().unwrap());
            total += times.len() as u64;
        }
    }
    // Every window's shards, kept, counted: the outputs hold all of their
    // samples, and the recording's whole span is covered at the rate asked.
    let root = RecordingDir::open(scratch.shards());
    let mut in_shards = 0;
    for window in 0..outputs.len() as u32 {
        let meta = root.window(window).read_meta().unwrap();
        let stats = meta.stats.expect("each window's meta has its statistics");
        in_shards += stats.cpus.iter().map(|c| c.samples).sum::<u64>();
        assert_eq!(stats.cpus.iter().map(|c| c.dropped()).sum::<u64>(), 0);
    }
    assert_eq!(
        total, in_shards,
        "samples merged = samples the windows' shards hold"
    );
    // The same recording merged whole: its windows joined into one
    // recording (as --keep-last joins them) and merged at once.
    let windows: Vec<RecordingDir> = (0..outputs.len() as u32).map(|w| root.window(w)).collect();
    let whole = RecordingDir::create(scratch.0.join("whole.shards")).unwrap();
    whole.join_windows(&windows).unwrap();
    let whole_data = scratch.0.join("whole.data");
    let mut merge = shardrec();
    merge
        .args(["merge", "-q", "-N"])
        .arg(whole.path())
        .arg("-o")
        .arg(&whole_data);
    assert!(run(merge).status.success());
    let whole_samples: usize = times_by_cpu(&whole_data).values().map(Vec::len).sum();
    assert_eq!(
        total, whole_samples as u64,
        "the outputs' samples = the whole recording's"
    );
    // The directory of windows is not one recording: the merge says so.
    let mut merge = shardrec();
    merge
        .arg("merge")
        .arg(scratch.shards())
        .arg("-o")
        .arg(&whole_data);
    let refused = run(merge);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("holds the windows of a --switch-output recording"),
        "{stderr}"
    );
    // As many samples as perf's continuous recording took over the same
    // span on the same CPUs (how many a CPU takes depends on how busy the
    // host is, the same for both).
    let expected: u64 = first
        .iter()
        .map(|(&cpu, &from)| taken_between(&continuous, cpu, from - 1, last[&cpu] + 1) as u64)
        .sum();
    eprintln!("{total} samples; perf's continuous recording took {expected} over the same span");
    assert!(
        total * 100 >= expected * 99 && total * 100 <= expected * 101,
        "{total} samples, perf's continuous recording took {expected} over the same span"
    );
}

#[test]
fn sigusr2_switches_each_output_reads_alone_and_the_oldest_go() {
    let Some((_serial, scratch)) = recording_test("switch-signal") else {
        return;
    };
    // A workload that starts a new busy process for each window, then
    // asks its recorder (its parent) to switch.
    let script = "for i in 1 2 3 4; do timeout 0.4 sh -c 'while :; do :; done'; \
                  kill -USR2 $PPID; sleep 0.2; done";
    let (stderr, outputs) = record_switching(
        &scratch,
        &[
            "-F",
            "999",
            "-g",
            "--switch-output",
            "--switch-max-files=3",
            "--",
            "sh",
            "-c",
            script,
        ],
    );
    let dumps = stderr.matches("[ shardrec record: Dump ").count();
    assert_eq!(dumps, 5, "four switches and the end: {stderr}");
    assert_eq!(
        outputs.len(),
        3,
        "--switch-max-files=3 keeps the newest three"
    );
    assert!(
        !scratch.shards().exists(),
        "the windows' shards are removed"
    );
    for output in &outputs[..2] {
        // Each window's busy loop resolves to the shell's binary and libc:
        // the window carries the tasks' maps as they were at its start.
        let report = perf(
            &["report", "--stdio", "--no-children", "--sort", "comm,dso"],
            output,
        );
        assert_no_complaint(&report, &output.display().to_string());
        let text = String::from_utf8_lossy(&report.stdout);
        let resolved: f64 = text
            .lines()
            .filter(|l| l.contains(" sh ") && (l.contains("dash") || l.contains("libc")))
            .filter_map(|l| {
                l.split_whitespace()
                    .next()?
                    .trim_end_matches('%')
                    .parse::<f64>()
                    .ok()
            })
            .sum();
        assert!(resolved > 90.0, "{}: {text}", output.display());
    }
}

#[test]
fn the_background_merges_are_not_in_the_syscall_tracepoints() {
    let Some((_serial, scratch)) = recording_test("switch-tracepoint") else {
        return;
    };
    let (_, outputs) = record_switching(
        &scratch,
        &[
            "-a",
            "-e",
            "syscalls:sys_enter_write",
            "--switch-output=250ms",
            "--",
            "sh",
            "-c",
            "for i in $(seq 40); do echo $i > /dev/null; sleep 0.03; done",
        ],
    );
    assert!(outputs.len() >= 3, "{outputs:?}");
    let mut writes = 0;
    for output in &outputs {
        for sample in samples(output) {
            assert!(
                !sample.comm.starts_with("shardrec"),
                "{} records the recorder's own write: {sample:?}",
                output.display()
            );
            writes += 1;
        }
    }
    assert!(writes >= 40, "the workload's 40 writes, at least: {writes}");
}

#[test]
fn each_switch_output_event_hit_switches_and_each_output_reads_alone() {
    let Some((_serial, scratch)) = recording_test("switch-event") else {
        return;
    };
    // Each window a new busy process; then a `sleep`, whose one
    // clock_nanosleep is a hit (timeout waits without one).
    // Each sleep (0.5 s, more than a switch takes on a busy host) is a hit.
    let script = "for i in 1 2 3; do timeout 0.3 sh -c 'while :; do :; done'; sleep 0.5; done";
    let (stderr, outputs) = record_switching(
        &scratch,
        &[
            "-F",
            "999",
            "--switch-output-event",
            "syscalls:sys_enter_clock_nanosleep",
            "--",
            "sh",
            "-c",
            script,
        ],
    );
    let dumps = stderr.matches("[ shardrec record: Dump ").count();
    assert_eq!(dumps, 4, "three hits and the end: {stderr}");
    // It selects --switch-output=signal, as in perf: every output, the
    // last too, is named with its time.
    assert_eq!(outputs.len(), 4, "{outputs:?}");
    assert!(
        !scratch.output().exists(),
        "perf.data itself is not written"
    );
    // The first three windows each hold one busy loop of 0.3 s; the last
    // only the last sleep (no sample, which perf report refuses to show).
    for output in &outputs[..3] {
        let report = perf(&["report", "--stdio", "--sort", "comm"], output);
        assert_no_complaint(&report, &output.display().to_string());
        let busy = samples(output).iter().filter(|s| s.comm == "sh").count();
        assert!(busy > 100, "{}: {busy} samples of sh", output.display());
    }
    let last = &outputs[3];
    assert_no_complaint(&perf(&["script"], last), &last.display().to_string());
    samples_by_linux_perf_data(last);
}

#[test]
fn the_switch_output_event_is_not_recorded() {
    let Some((_serial, scratch)) = recording_test("switch-event-unrecorded") else {
        return;
    };
    let (_, outputs) = record_switching(
        &scratch,
        &[
            "-e",
            "syscalls:sys_enter_write",
            "--switch-output-event=syscalls:sys_enter_clock_nanosleep",
            "--",
            "sh",
            "-c",
            // Hits 0.5 s apart, the end 0.5 s after the last: more than a
            // switch takes on a busy host, so each hit is a switch of its
            // own and the end comes after them.
            "for i in 1 2; do echo $i > /dev/null; sleep 0.5; done",
        ],
    );
    assert_eq!(outputs.len(), 3, "two hits and the end: {outputs:?}");
    let mut writes = 0;
    for output in &outputs {
        let evlist = perf(&["evlist"], output);
        let events = String::from_utf8_lossy(&evlist.stdout);
        assert!(
            events.contains("sys_enter_write") && !events.contains("nanosleep"),
            "{}: {events}",
            output.display()
        );
        for sample in samples(output) {
            assert_eq!(sample.event, "syscalls:sys_enter_write", "{sample:?}");
            writes += 1;
        }
    }
    assert_eq!(writes, 2, "the workload's two writes");
}

#[test]
fn the_recorders_own_activity_does_not_switch() {
    let Some((_serial, scratch)) = recording_test("switch-event-own") else {
        return;
    };
    // Each switch renames the window's finished output (rename(2)): were
    // the recorder's own renames hits, the workload's one rename would
    // switch again and again (about eight times a second).
    let from = scratch.0.join("from");
    std::fs::write(&from, b"").unwrap();
    let rename = format!(
        "perl -e 'rename \"{0}\", \"{0}.renamed\"'; sleep 1.5",
        from.display()
    );
    let (stderr, _) = record_switching(
        &scratch,
        &[
            "-a",
            "-e",
            "cpu-clock",
            "--switch-output-event",
            "syscalls:sys_enter_rename",
            "--",
            "sh",
            "-c",
            &rename,
        ],
    );
    let dumps = stderr.matches("[ shardrec record: Dump ").count();
    // The workload's hit and the end; a rename elsewhere on the host
    // meanwhile (system-wide) may add one or two.
    assert!((2..=4).contains(&dumps), "{dumps} outputs: {stderr}");
}
