//! `shardrec merge` read back by perf and by linux-perf-data.

mod common;

use common::*;
use shardrec_format::header::{RecordHeader, RecordType};

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
    let times = perf_script_times(&file);
    assert_eq!(times.len() as u64, in_shards, "perf script sample count");
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "perf script times go back"
    );

    let layouts = shards.meta.layouts();
    let raw = raw_times(&file, &layouts);
    // Merged while recording: perf's rounds, not a sorted file.
    assert_perfs_round_rule(&raw);
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

/// Spreads a real two-CPU recording over twelve shards, as a larger host
/// would leave them: each of the first ten holds runs of one CPU's records
/// in their order, the ninth ends in a torn record, the tenth holds one
/// record, the eleventh none.
fn spread_over_many_shards(from: &std::path::Path, to: &std::path::Path) -> u64 {
    let source = shardrec_shard::RecordingDir::open(from);
    let target = shardrec_shard::RecordingDir::create(to).unwrap();
    let mut meta = source.read_meta().unwrap();
    let records: Vec<Vec<Vec<u8>>> = meta
        .cpus
        .iter()
        .map(|&cpu| {
            let bytes = std::fs::read(source.shard_path(cpu)).unwrap();
            shardrec_format::walk::RecordWalker::new(&bytes)
                .map(|r| r.bytes.to_vec())
                .collect()
        })
        .collect();
    let mut runs: Vec<Vec<&[u8]>> = vec![Vec::new(); 12];
    let mut whole = 0;
    for (source_index, records) in records.iter().enumerate() {
        for (i, record) in records.iter().enumerate() {
            runs[source_index * 5 + (i / 7) % 5].push(record);
            whole += 1;
        }
    }
    // Out of order as rings are: neighbours swapped, and one record a
    // hundred places late, so slices' edges meet late records.
    for run in runs.iter_mut().filter(|r| r.len() > 200) {
        for k in (0..run.len() - 1).step_by(6) {
            run.swap(k, k + 1);
        }
        let late = run.remove(40);
        run.insert(140, late);
    }
    let mut shards: Vec<Vec<u8>> = runs.iter().map(|run| run.concat()).collect();
    let one = shards[0][..8].to_vec();
    let size = RecordHeader::parse(&one).unwrap().size as usize;
    shards[10] = shards[0][..size].to_vec();
    whole += 1;
    let cut = shards[1][..size].to_vec();
    shards[9].extend_from_slice(&cut[..size / 2]);
    meta.cpus = (0..12).collect();
    meta.stats = None;
    for (cpu, bytes) in shards.iter().enumerate() {
        std::fs::write(target.shard_path(cpu as u32), bytes).unwrap();
    }
    for name in ["synth.shard", "vip.shard", "bpf"] {
        let _ = std::fs::copy(from.join(name), to.join(name));
    }
    target.write_meta(&meta).unwrap();
    whole
}

#[test]
fn a_parallel_merge_writes_what_one_thread_writes() {
    let Some((_serial, scratch)) = recording_test("merge-parallel") else {
        return;
    };
    record(
        &scratch,
        &[
            "-a",
            "--call-graph",
            "dwarf,4096",
            "-F",
            "1000",
            "--",
            load(),
            "spin",
            "1",
        ],
    );
    let many = scratch.0.join("many.shards");
    let whole = spread_over_many_shards(&scratch.shards(), &many);
    let merge = |threads: usize, slice_bytes: Option<u64>, z: Option<i32>| {
        let out = scratch
            .0
            .join(format!("t{threads}-{slice_bytes:?}-{z:?}.data"));
        let options = shardrec_merge::MergeOptions {
            threads: Some(threads),
            slice_bytes,
            compression_level: z,
            ..Default::default()
        };
        let target = shardrec_shard::output::Output::resolve(&out).unwrap();
        let report = shardrec_merge::merge(&many, &target, &options).unwrap();
        (std::fs::read(&out).unwrap(), report, out)
    };
    // One slice on one thread: the merge as it always was.
    let (single, report, single_path) = merge(1, None, None);
    assert_eq!(report.slices, 1);
    assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
    assert_eq!(report.damage[0].0, "cpu009.shard");
    let shard_records: u64 = report.cpus.iter().map(|c| c.samples).sum::<u64>();
    assert!(shard_records > 100, "{shard_records} samples");
    for threads in [1, 2, 5] {
        let (bytes, report, _) = merge(threads, Some(64 << 10), None);
        assert!(report.slices > 8, "{} slices", report.slices);
        assert!(bytes == single, "{threads} threads wrote other bytes");
    }
    let (packed, report, packed_path) = merge(2, Some(64 << 10), Some(1));
    assert!(report.slices > 8);
    for threads in [1, 3] {
        assert!(merge(threads, Some(64 << 10), Some(1)).0 == packed);
    }
    // Every whole record is there once, in non-decreasing time after the
    // synthesized state.
    let meta = shardrec_shard::RecordingDir::open(&many)
        .read_meta()
        .unwrap();
    let layouts = meta.layouts();
    let times = raw_times(&single_path, &layouts);
    let kernel: Vec<u64> = times.iter().filter_map(|&(_, t)| t).collect();
    let side = ["synth.shard", "vip.shard"].map(|name| {
        let bytes = std::fs::read(many.join(name)).unwrap_or_default();
        shardrec_format::walk::RecordWalker::new(&bytes).count() as u64
    });
    assert_eq!(kernel.len() as u64, whole + side[0] + side[1]);
    let after_init = &kernel[side[0] as usize..];
    assert!(after_init.windows(2).all(|w| w[0] <= w[1]));
    // -z in many frames reads back as the plain file.
    let script = |file| {
        let output = perf(&["script", "-F", "comm,tid,time,ip,sym"], file);
        assert_no_complaint(&output, "perf script");
        output.stdout
    };
    assert!(script(&packed_path) == script(&single_path));
    assert_eq!(
        samples_by_linux_perf_data(&packed_path),
        samples_by_linux_perf_data(&single_path)
    );
}
