//! Options for long recordings. `shardrec merge --time`: a window of a
//! recording, merged at a cost that follows the window (each shard's
//! index, written at stop, says where to read), keeps exactly the samples
//! `perf script --time` keeps of the whole merge, each resolved as in the
//! whole. `--max-size` stops cleanly at a size; `--timestamp-filename`
//! names the output by the time, as perf does.

mod common;

use std::os::fd::AsRawFd;
use std::path::Path;

use common::*;

/// `perf script` lines of the samples (cpu, time, ip, symbol), optionally
/// of a `--time` window only.
fn sample_lines(file: &Path, time: Option<&str>) -> Vec<String> {
    let mut args = vec!["script", "-F", "cpu,time,ip,sym"];
    if let Some(time) = time {
        args.extend(["--time", time]);
    }
    let output = perf(&args, file);
    let text = String::from_utf8_lossy(&output.stdout);
    // Samples of two CPUs at the same time may come in either order: the
    // live merge writes them in perf's rounds, and perf keeps a tie in
    // the order it read it, where the window's merge puts the first CPU
    // first. So ties go in the order of their text, on both sides.
    let mut samples: Vec<&str> = text
        .split("\n\n")
        .filter(|s| !s.trim().is_empty())
        .collect();
    let time = |sample: &str| -> Option<f64> {
        let header = sample.trim_start().lines().next()?;
        header
            .split_whitespace()
            .nth(1)?
            .trim_end_matches(':')
            .parse()
            .ok()
    };
    samples.sort_by(|a, b| time(a).partial_cmp(&time(b)).unwrap().then(a.cmp(b)));
    samples
        .iter()
        .flat_map(|sample| sample.lines().chain([""]))
        .map(str::to_string)
        .collect()
}

/// The shards written to disk and dropped from the page cache, so what a
/// merge reads of them is read from storage (and counted).
fn evict(shards: &Path) {
    for entry in std::fs::read_dir(shards).unwrap() {
        let file = std::fs::File::open(entry.unwrap().path()).unwrap();
        file.sync_all().unwrap();
        // SAFETY: an advice on an open descriptor's whole range.
        let ret = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(ret, 0);
    }
}

/// Runs `shardrec merge ARGS` under `shardrec-load rusage` and returns
/// its stderr and the bytes it read from storage.
fn merge_counting_reads(scratch: &Scratch, args: &[&str]) -> (String, u64) {
    let usage = scratch.0.join("usage");
    let mut command = std::process::Command::new(load());
    command
        .arg("rusage")
        .arg(&usage)
        .arg(env!("CARGO_BIN_EXE_shardrec"))
        .arg("merge")
        .args(args);
    let output = run(command);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "merge {args:?}: {stderr}");
    let usage = std::fs::read_to_string(&usage).unwrap();
    let read = usage
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("read_bytes="))
        .unwrap()
        .parse()
        .unwrap();
    (stderr, read)
}

#[test]
fn a_window_reads_a_fraction_of_the_shards_and_keeps_what_perf_keeps() {
    let Some((_serial, scratch)) = recording_test("window") else {
        return;
    };
    // Three seconds by the clock, whatever the host's speed: cpu-clock
    // samples with call chains at 20 kHz on every CPU come to ~6 MB a
    // second, so the recording is over twice the size the test needs.
    record_and_merge(
        &scratch,
        &[
            "-a",
            "-g",
            "-e",
            "cpu-clock",
            "-F",
            "20000",
            "--",
            load(),
            "burn-for",
            "3",
        ],
    );
    let whole = scratch.output();
    let shards = scratch.shards();
    let total: u64 = (0..2)
        .map(|cpu| {
            std::fs::metadata(shards.join(format!("cpu{cpu:03}.shard")))
                .unwrap()
                .len()
        })
        .sum();
    assert!(
        total > 8 << 20,
        "a recording large enough to tell: {total} bytes"
    );
    let window = scratch.0.join("window.data");
    let window_arg = window.to_str().unwrap();
    let shards_arg = shards.to_str().unwrap();
    for spec in ["10%/5", "0%-10%,30%-40%"] {
        evict(&shards);
        // -N: the build-id cache would copy the binaries samples fell in,
        // which are whatever else ran meanwhile, not the shards.
        let args = ["-N", "--time", spec, shards_arg, "-o", window_arg];
        let (stderr, read) = merge_counting_reads(&scratch, &args);
        let want = sample_lines(&whole, Some(spec));
        let got = sample_lines(&window, None);
        assert!(
            want.len() > 1000,
            "{spec}: {} samples in the window",
            want.len()
        );
        assert_same_lines(
            &got,
            &want,
            &format!("{spec}: the window's samples against perf's --time"),
        );
        let fraction = read as f64 / total as f64;
        eprintln!("{spec}: read {read} of {total} bytes from storage; {stderr}");
        // 10% and 20% of the recording, and about as much of its bytes
        // (read-ahead is off for a window: the index says what to read).
        let share = if spec == "10%/5" { 0.15 } else { 0.27 };
        assert!(
            fraction < share,
            "{spec}: read {read} of {total} bytes: {stderr}"
        );
        assert!(stderr.contains("window: read "), "{stderr}");
        let report = perf(&["report", "--stdio"], &window);
        assert_no_complaint_but_kernel_losses(&report, &window, "perf report");
    }
    // Without the index files the window is the same, walking each shard.
    for cpu in 0..2 {
        std::fs::remove_file(shards.join(format!("cpu{cpu:03}.index"))).unwrap();
    }
    let (stderr, _) =
        merge_counting_reads(&scratch, &["--time", "10%/5", shards_arg, "-o", window_arg]);
    assert!(
        stderr.contains("without an index, walked whole: CPU 0, 1"),
        "{stderr}"
    );
    let what = "10%/5 without the index";
    assert_same_lines(
        &sample_lines(&window, None),
        &sample_lines(&whole, Some("10%/5")),
        what,
    );
}

#[test]
fn a_bad_time_is_a_usage_error() {
    let Some((_serial, scratch)) = recording_test("window-bad") else {
        return;
    };
    record(&scratch, &["-a", "-e", "cpu-clock", "--", "true"]);
    let mut merge = shardrec();
    merge
        .args(["merge", "--time", "2,1"])
        .arg(scratch.shards())
        .arg("-o")
        .arg(scratch.output());
    let output = run(merge);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--time '2,1': invalid time string"),
        "{stderr}"
    );
    assert!(!scratch.output().exists());
}

#[test]
fn max_size_stops_the_recording_cleanly_near_the_size() {
    let Some((_serial, scratch)) = recording_test("max-size") else {
        return;
    };
    // A workload far longer than the recording: the size, not the
    // workload, must end it.
    const SPIN_SECONDS: u64 = 60;
    let started = std::time::Instant::now();
    let mut record = shardrec();
    record
        .args(["record", "--keep-shards", "-o"])
        .arg(scratch.output())
        .args([
            "-a",
            "-e",
            "cpu-clock",
            "-F",
            "20000",
            "-g",
            "--max-size",
            "2M",
        ])
        .args(["--", load(), "spin", &SPIN_SECONDS.to_string()]);
    let output = run(record);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        started.elapsed().as_secs() < SPIN_SECONDS / 2,
        "it ran {:?}, near the workload's {SPIN_SECONDS} s",
        started.elapsed()
    );
    // As perf: the workload still running is ended with SIGTERM, and its
    // status is the recorder's.
    assert_eq!(output.status.code(), Some(128 + 15), "{stderr}");
    assert!(
        stderr.contains("[ shardrec record: size limit reached (2048 KB), stopping ]"),
        "{stderr}"
    );
    assert!(
        stderr.contains("stopped by size limit (--max-size 2097152 bytes)"),
        "{stderr}"
    );
    let shards: u64 = std::fs::read_dir(scratch.shards())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".shard"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    // It checks every 20 ms; allow it 250 ms of data past the limit (a
    // loaded host is slow to react), at the rate this run recorded.
    let rate = byte_rate(&scratch.shards(), shards);
    let overshoot = (rate * 0.25) as u64;
    assert!(
        (2 << 20..(2 << 20) + overshoot).contains(&shards),
        "{shards} bytes in the shards, recorded at {rate:.0} bytes/s"
    );
    assert_no_complaint(
        &perf(&["report", "--stdio"], &scratch.output()),
        "perf report",
    );
}

/// The bytes a second the recording in `shards` wrote: its `bytes` over
/// the time from its first sample to its last.
fn byte_rate(shards: &Path, bytes: u64) -> f64 {
    let recording = Recording::read(shards);
    let times = recording.samples().map(|s| s.id.time);
    let (first, last) = times.fold((u64::MAX, 0), |(lo, hi), t| (lo.min(t), hi.max(t)));
    assert!(last > first, "no time between the samples");
    bytes as f64 * 1e9 / (last - first) as f64
}

#[test]
fn timestamp_filename_renames_the_output_as_perf_does() {
    let Some((_serial, scratch)) = recording_test("timestamp-filename") else {
        return;
    };
    let stderr = record_and_merge(
        &scratch,
        &[
            "-a",
            "-e",
            "cpu-clock",
            "--timestamp-filename",
            "--",
            "sleep",
            "0.2",
        ],
    );
    assert!(
        !scratch.output().exists(),
        "perf.data stays under its own name"
    );
    let named: Vec<String> = std::fs::read_dir(&scratch.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("perf.data.") && !n.ends_with(".shards"))
        .collect();
    let [name] = &named[..] else {
        panic!("one timestamped output expected: {named:?}");
    };
    let stamp = name.strip_prefix("perf.data.").unwrap();
    assert!(
        stamp.len() == 16 && stamp.bytes().all(|b| b.is_ascii_digit()),
        "{name}"
    );
    assert!(
        stderr.contains(&format!(
            "[ shardrec record: Dump {}",
            scratch.0.join(name).display()
        )),
        "{stderr}"
    );
    assert_no_complaint(
        &perf(&["report", "--stdio"], &scratch.0.join(name)),
        "perf report",
    );
}
