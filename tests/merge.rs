//! `shardrec merge` read back by perf and by linux-perf-data.

mod common;

use std::collections::HashMap;

use common::*;
use linux_perf_data::{PerfFileReader, PerfFileRecord};
use shardrec_format::header::RecordType;

/// Counts samples with linux-perf-data, parsing every record on the way.
fn samples_by_linux_perf_data(file: &std::path::Path) -> u64 {
    let reader = std::io::BufReader::new(std::fs::File::open(file).unwrap());
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(reader).expect("linux-perf-data reads the header");
    let mut samples = 0;
    while let Some(record) = record_iter.next_record(&mut perf_file).expect("a record") {
        match record {
            PerfFileRecord::EventRecord { record, .. } => {
                record.parse().expect("linux-perf-data parses the record");
                if record.record_type.0 == RecordType::SAMPLE.0 {
                    samples += 1;
                }
            }
            PerfFileRecord::UserRecord(record) => {
                record
                    .parse()
                    .expect("linux-perf-data parses the user record");
            }
        }
    }
    samples
}

#[test]
fn a_cpu_clock_recording_reads_cleanly_everywhere() {
    let Some((_serial, scratch)) = recording_test("merge-cpu-clock") else {
        return;
    };
    record_and_merge(
        &scratch,
        &[
            "-a",
            "-e",
            "cpu-clock",
            "-F",
            "2000",
            "--",
            load(),
            "spin",
            "1",
        ],
    );
    let shards = Recording::read(&scratch.shards());
    let in_shards = shards.samples().count() as u64;
    let file = scratch.output();

    let report = perf(&["report", "--stdio"], &file);
    assert_no_complaint(&report, "perf report");
    let script = perf(&["script", "-F", "time"], &file);
    assert_no_complaint(&script, "perf script");
    let times: Vec<f64> = String::from_utf8_lossy(&script.stdout)
        .lines()
        .map(|l| l.trim().trim_end_matches(':').parse().expect("a time"))
        .collect();
    assert_eq!(times.len() as u64, in_shards, "perf script sample count");
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "perf script times go back"
    );

    let layouts: HashMap<_, _> = shards.meta.layouts();
    let raw = raw_times(&file, &layouts);
    let timed: Vec<u64> = raw.iter().filter_map(|(_, t)| *t).collect();
    assert!(
        timed.windows(2).all(|w| w[0] <= w[1]),
        "the data section goes back in time"
    );
    let raw_samples = raw.iter().filter(|(t, _)| *t == RecordType::SAMPLE).count() as u64;
    assert_eq!(raw_samples, in_shards);
    assert_eq!(samples_by_linux_perf_data(&file), in_shards);
}

#[test]
fn tracepoint_fields_are_printed() {
    let Some((_serial, scratch)) = recording_test("merge-sched") else {
        return;
    };
    record_and_merge(
        &scratch,
        &["-a", "-e", "sched:sched_switch", "--", "sleep", "0.3"],
    );
    let shards = Recording::read(&scratch.shards());
    let script = perf(&["script"], &scratch.output());
    assert_no_complaint(&script, "perf script");
    let stdout = String::from_utf8_lossy(&script.stdout);
    assert!(
        stdout.contains("prev_comm=") && stdout.contains("next_pid="),
        "{stdout}"
    );
    assert_eq!(stdout.lines().count(), shards.samples().count());
    assert_eq!(
        samples_by_linux_perf_data(&scratch.output()),
        shards.samples().count() as u64
    );
}

#[test]
fn the_hot_function_and_its_caller_are_found() {
    let Some((_serial, scratch)) = recording_test("merge-hot") else {
        return;
    };
    record_and_merge(
        &scratch,
        &["-g", "-e", "cpu-clock", "--", load(), "hot", "1"],
    );
    let file = scratch.output();
    let report = caller_report(&file);
    assert_no_complaint(&report, "perf report");
    let stdout = String::from_utf8_lossy(&report.stdout);
    let top = stdout
        .lines()
        .find(|l| l.contains('%') && !l.trim_start().starts_with('#'))
        .unwrap_or_default();
    assert!(
        top.contains("hot_loop"),
        "top symbol is not hot_loop: {top}\n{stdout}"
    );
    assert!(
        stdout.contains("hot_caller"),
        "the caller is not in the callchain:\n{stdout}"
    );
}

#[test]
fn the_header_carries_this_hosts_facts() {
    let Some((_serial, scratch)) = recording_test("merge-header") else {
        return;
    };
    record_and_merge(&scratch, &["-e", "cpu-clock", "--", load(), "spin", "0.2"]);
    let header = perf(&["report", "--header-only", "-I"], &scratch.output());
    assert_no_complaint(&header, "perf report --header-only");
    let text = String::from_utf8_lossy(&header.stdout);
    let uname = nix::sys::utsname::uname().unwrap();
    let expect = [
        format!("# hostname : {}", uname.nodename().to_string_lossy()),
        format!("# os release : {}", uname.release().to_string_lossy()),
        format!("# arch : {}", uname.machine().to_string_lossy()),
        format!(
            "# nrcpus online : {}",
            std::thread::available_parallelism().unwrap()
        ),
        "# cpudesc :".to_string(),
        "# total memory :".to_string(),
        "# cmdline :".to_string(),
        "# event : name = cpu-clock".to_string(),
        "# sibling threads :".to_string(),
        "# sample duration :".to_string(),
        "# perf version : 6.1.0 (shardrec".to_string(),
    ];
    for line in expect {
        assert!(text.contains(&line), "header lacks {line:?}:\n{text}");
    }
}

#[test]
fn a_chosen_clock_is_recorded_with_its_reference_time() {
    let Some((_serial, scratch)) = recording_test("merge-clock") else {
        return;
    };
    record_and_merge(
        &scratch,
        &[
            "-k",
            "monotonic",
            "-e",
            "cpu-clock",
            "--",
            load(),
            "spin",
            "0.2",
        ],
    );
    let header = perf(&["report", "--header-only"], &scratch.output());
    assert_no_complaint(&header, "perf report --header-only");
    let text = String::from_utf8_lossy(&header.stdout);
    for line in [
        "use_clockid = 1",
        "clockid = 1",
        "# clockid: monotonic (1)",
        "(monotonic)",
    ] {
        assert!(text.contains(line), "header lacks {line:?}:\n{text}");
    }
    // Sample times are CLOCK_MONOTONIC: within the span of this test's clock.
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    let script = perf(&["script", "-F", "time"], &scratch.output());
    let last: f64 = String::from_utf8_lossy(&script.stdout)
        .lines()
        .last()
        .map(|l| l.trim().trim_end_matches(':').parse().unwrap())
        .expect("samples");
    let now = now.tv_sec() as f64 + now.tv_nsec() as f64 / 1e9;
    assert!(
        last <= now && last > now - 60.0,
        "sample time {last} is not near monotonic {now}"
    );
}

#[test]
fn dwarf_callchains_unwind_to_the_caller() {
    let Some((_serial, scratch)) = recording_test("merge-dwarf") else {
        return;
    };
    // In DWARF mode the kernel gives no user frames: the caller can only
    // come from unwinding the copied stack, which needs the read-only
    // segment with .eh_frame_hdr recorded (mmap_data).
    record_and_merge(
        &scratch,
        &[
            "--call-graph",
            "dwarf",
            "-e",
            "cpu-clock",
            "--",
            load(),
            "hot",
            "0.5",
        ],
    );
    let report = caller_report(&scratch.output());
    assert_no_complaint(&report, "perf report");
    let stdout = String::from_utf8_lossy(&report.stdout);
    assert!(
        stdout.contains("hot_loop") && stdout.contains("hot_caller"),
        "{stdout}"
    );
}

#[test]
fn a_compressed_merge_reads_as_the_uncompressed_one() {
    let Some((_serial, scratch)) = recording_test("merge-z") else {
        return;
    };
    // DWARF stacks: bytes that compress, in many rounds.
    record_and_merge(
        &scratch,
        &[
            "--call-graph",
            "dwarf",
            "-e",
            "cpu-clock",
            "--",
            load(),
            "spin",
            "1",
        ],
    );
    let plain = scratch.output();
    let packed = scratch.0.join("packed.data");
    let mut merge = shardrec();
    merge
        .args(["merge", "-q", "-z"])
        .arg(scratch.shards())
        .arg("-o")
        .arg(&packed);
    assert!(run(merge).status.success());
    let (plain_len, packed_len) = (file_len(&plain), file_len(&packed));
    assert!(
        packed_len * 3 < plain_len,
        "-z wrote {packed_len} bytes for {plain_len}"
    );
    let header = perf(&["report", "--header-only"], &packed);
    let header = String::from_utf8_lossy(&header.stdout);
    assert!(
        header.contains("# compressed : Zstd, level = 1"),
        "{header}"
    );
    // perf report ends with a tip picked at random: left out.
    let text = |output: std::process::Output| -> String {
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|l| !l.starts_with("# (Tip:"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    for args in [
        &["script", "-F", "comm,tid,time,ip,sym"][..],
        &["report", "--stdio"],
    ] {
        let (a, b) = (perf(args, &plain), perf(args, &packed));
        assert_no_complaint(&b, "perf on the -z file");
        assert!(text(a) == text(b), "perf {args:?} differs");
    }
    assert_eq!(
        samples_by_linux_perf_data(&packed),
        samples_by_linux_perf_data(&plain)
    );
}

fn file_len(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}
