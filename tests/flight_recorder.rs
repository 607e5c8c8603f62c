//! `--overwrite`, the flight recorder: the kernel writes each ring backward
//! over its oldest records and nothing is written to disk while recording;
//! a snapshot (SIGUSR2) writes the rings' last moments to
//! `perf.data.TIMESTAMP`, and the stop writes what came since to
//! `perf.data`.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::*;

/// The bytes of the windows under `dir` now (0 if it is gone), without
/// a snapshot's own directories until it is written: the links to the
/// windows it joins (the same bytes), and the join.
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() && snapshots_own(&e.file_name().to_string_lossy()) => 0,
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

fn snapshots_own(name: &str) -> bool {
    name.starts_with("snapshot") || name.starts_with("joined")
}

/// Runs `shardrec record ARGS -- sh -c SCRIPT` while watching how much
/// its shard directory holds; returns stderr and the most it held.
fn record_watching(scratch: &Scratch, args: &[&str], script: &str) -> (String, u64) {
    let (done, most) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let watcher = {
        let (done, most, dir) = (done.clone(), most.clone(), scratch.shards());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                most.fetch_max(bytes_under(&dir), Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    let mut command = shardrec();
    command
        .arg("record")
        .arg("-o")
        .arg(scratch.output())
        .args(args)
        .args(["--", "sh", "-c", script]);
    let output = run(command);
    done.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{args:?}: {stderr}");
    (stderr, most.load(Ordering::Relaxed))
}

/// How many samples of each of `comms` `file` holds.
fn samples_of(file: &Path, comms: &[&str]) -> Vec<usize> {
    let script = perf(&["script", "-F", "comm"], file);
    let script = String::from_utf8_lossy(&script.stdout);
    comms
        .iter()
        .map(|comm| script.lines().filter(|l| l.trim() == *comm).count())
        .collect()
}

/// The markers' names: three busy phases, each a copy of the shell under
/// a name of its own.
const MARKERS: [&str; 3] = ["early-marker", "late-marker", "after-marker"];

/// A script that runs the three phases of `MARKERS` for `secs` each and
/// asks the recorder (its parent) for a snapshot between the second and
/// the third, `pause` seconds before it.
fn phases(scratch: &Scratch, secs: [&str; 3], pause: &str) -> String {
    let spin = |(name, secs): (&str, &str)| {
        let shell = scratch.0.join(name);
        std::fs::copy("/bin/dash", &shell).unwrap();
        format!(
            "timeout {secs} {} -c 'while :; do :; done'",
            shell.display()
        )
    };
    let [early, late, after] = [0, 1, 2].map(|i| spin((MARKERS[i], secs[i])));
    format!("{early}; {late}; kill -USR2 $PPID; sleep {pause}; {after}; true")
}

/// The snapshot a recording left: its one `perf.data.TIMESTAMP`.
fn the_snapshot(scratch: &Scratch, stderr: &str) -> PathBuf {
    let snapshots: Vec<PathBuf> = std::fs::read_dir(&scratch.0)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("perf.data.2"))
        .collect();
    let [snapshot] = &snapshots[..] else {
        panic!("one snapshot expected: {snapshots:?}\n{stderr}");
    };
    for file in [snapshot.as_path(), &scratch.output()] {
        let report = perf(&["report", "--stdio", "--sort", "comm"], file);
        assert_no_complaint_but_kernel_losses(&report, file, &file.display().to_string());
        let script = perf(&["script", "-F", "comm"], file);
        let in_perf = String::from_utf8_lossy(&script.stdout).lines().count() as u64;
        assert_eq!(
            samples_by_linux_perf_data(file),
            in_perf,
            "linux-perf-data reads {}",
            file.display()
        );
    }
    snapshot.clone()
}

#[test]
fn a_snapshot_holds_the_last_moments_and_the_disk_stays_bounded() {
    let Some((_serial, scratch)) = recording_test("flight-recorder") else {
        return;
    };
    let script = phases(&scratch, ["2", "0.4", "0.3"], "0.5");
    let options = ["-e", "cpu-clock", "-F", "10000", "-g", "-m", "16"];
    // A continuous recording of the same, for how much its shards hold
    // and how many samples each phase gives on this host now.
    let (_, continuous) = record_watching(&scratch, &options, &script);
    let [_, late_all, after_all] = samples_of(&scratch.output(), &MARKERS)[..] else {
        unreachable!()
    };
    std::fs::remove_file(scratch.output()).unwrap();
    let (stderr, overwrite) = record_watching(
        &scratch,
        &[&options[..], &["--overwrite"]].concat(),
        &script,
    );
    assert!(
        overwrite * 4 < continuous,
        "the flight recorder's shards held {overwrite} bytes at most, a continuous recording's {continuous}"
    );
    let snapshot = the_snapshot(&scratch, &stderr);
    assert!(stderr.contains(&format!("[ shardrec record: Dump {} ]", snapshot.display())));
    // The snapshot: the last moments before the signal, at most a ring's
    // worth (64 KiB a CPU holds well under the 20,000 samples of the first
    // phase), and nothing after it.
    let [early, late, after] = samples_of(&snapshot, &MARKERS)[..] else {
        unreachable!()
    };
    eprintln!("shards held at most {overwrite} bytes (continuous: {continuous}); the snapshot: {early} early, {late} late, {after} after");
    assert!(
        late > 0 && late * 4 >= late_all.min(400),
        "{late} samples of the phase before the signal ({late_all} when nothing is overwritten)"
    );
    assert!(
        early < 5_000,
        "{early} samples of the first phase: not overwritten?"
    );
    assert_eq!(after, 0, "the snapshot holds samples from after it");
    // The stop: what came since the snapshot, and nothing before it.
    let [early, late, after] = samples_of(&scratch.output(), &MARKERS)[..] else {
        unreachable!()
    };
    assert!(
        after > 0 && after * 4 >= after_all.min(400),
        "{after} samples of the last phase ({after_all} when nothing is overwritten)"
    );
    assert_eq!(
        (early, late),
        (0, 0),
        "the stop's output repeats the snapshot's"
    );
}

/// `--keep-last=TIME`: the writers stream as always, into windows of a
/// quarter of TIME; windows that ended more than TIME ago are removed, so
/// the disk holds about the last TIME; a snapshot joins the windows kept.
#[test]
fn keep_last_holds_the_last_seconds_on_disk_and_a_snapshot_joins_them() {
    let Some((_serial, scratch)) = recording_test("keep-last") else {
        return;
    };
    let script = phases(&scratch, ["4", "0.3", "0.3"], "0.3");
    let options = ["-e", "cpu-clock", "-F", "10000", "-g"];
    // Its shards kept: what the recording wrote in all. (Without, the
    // live merge frees them behind its output, and what they hold at
    // most is how far it fell behind, which a busy host makes larger.)
    let whole = [&options[..], &["--keep-shards"]].concat();
    let (_, continuous) = record_watching(&scratch, &whole, &script);
    // What the phases give where nothing is removed: the bounds below are
    // shares of it, so a busy host (fewer samples of each phase) passes.
    let [_, late_all, after_all] = samples_of(&scratch.output(), &MARKERS)[..] else {
        unreachable!()
    };
    eprintln!("continuous: {late_all} late, {after_all} after");
    std::fs::remove_file(scratch.output()).unwrap();
    std::fs::remove_dir_all(scratch.shards()).unwrap();
    let keep = [&options[..], &["--keep-last=500ms"]].concat();
    let (stderr, kept) = record_watching(&scratch, &keep, &script);
    eprintln!("shards held at most {kept} bytes (a continuous recording wrote {continuous})");
    assert!(
        kept * 3 < continuous,
        "--keep-last held {kept} bytes at most, of the {continuous} a continuous recording wrote"
    );
    assert!(
        !scratch.shards().exists(),
        "the windows are removed at the end"
    );
    let snapshot = the_snapshot(&scratch, &stderr);
    // About the last half second before the signal: all of the late phase
    // (0.3 s), the end of the early one at most, nothing after.
    let [early, late, after] = samples_of(&snapshot, &MARKERS)[..] else {
        unreachable!()
    };
    eprintln!("the snapshot: {early} early, {late} late, {after} after");
    assert!(
        late > 100 && late * 2 >= late_all,
        "{late} samples of the 0.3 s before the signal ({late_all} when nothing is removed)"
    );
    assert!(
        early < 10_000,
        "{early} samples of the early phase: not removed?"
    );
    assert_eq!(after, 0);
    // The stop: the last half second, so the last phase, none of the first.
    let [early, _, after] = samples_of(&scratch.output(), &MARKERS)[..] else {
        unreachable!()
    };
    assert!(
        after > 100 && after * 2 >= after_all,
        "{after} samples of the last phase ({after_all} when nothing is removed)"
    );
    assert_eq!(
        early, 0,
        "the stop's output reaches back to the first phase"
    );
}
