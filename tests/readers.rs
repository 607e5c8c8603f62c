//! shardrec's perf.data beside perf record's own, for the same program:
//! perf, hotspot's perfparser and samply must treat both alike.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// `tests/programs/deep.c`, built into the scratch directory: main →
/// level1 → level2 → level3 → leaf_a / leaf_b, for ARGV[1] seconds.
fn deep_program(scratch: &Scratch) -> PathBuf {
    build_program(scratch, "deep")
}

/// `tests/programs/NAME.c`, built into the scratch directory.
fn build_program(scratch: &Scratch, name: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
    let program = scratch.0.join(name);
    let output = Command::new("gcc")
        .args(["-O2", "-g", "-o"])
        .arg(&program)
        .arg(&source)
        .output()
        .expect("gcc is installed (.ci/setup)");
    assert!(
        output.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    program
}

/// `perf record -q -o perf.perf.data ARGS`, checked, into the scratch directory.
fn perf_record(scratch: &Scratch, args: &[&str]) -> PathBuf {
    let file = scratch.0.join("perf.perf.data");
    let mut command = Command::new("perf");
    command.args(["record", "-q", "-o"]).arg(&file).args(args);
    let output = run(command);
    assert!(
        output.status.success(),
        "perf record {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    file
}

/// Both recorders, with `options`, of `deep` running `seconds`: (perf's
/// file, shardrec's).
fn record_deep(scratch: &Scratch, options: &[&str], seconds: &str) -> (PathBuf, PathBuf) {
    let program = deep_program(scratch);
    let command = [program.to_str().unwrap(), seconds];
    record_both(scratch, &[options, &["--"], &command].concat())
}

/// Both recorders on the same command line: (perf's file, shardrec's).
fn record_both(scratch: &Scratch, args: &[&str]) -> (PathBuf, PathBuf) {
    let perfs = perf_record(scratch, args);
    record_and_merge(scratch, args);
    (perfs, scratch.output())
}

/// Each sample of `comm` as its frames' symbols, leaf first (`perf script`).
fn callchains(perf: &Perf, file: &Path, comm: &str, who: &str) -> Vec<Vec<String>> {
    let script = perf.run(&["script", "-F", "comm,ip,sym,dso", "--no-inline"], file);
    assert_no_complaint(&script, &format!("{} script of {who}'s file", perf.name));
    String::from_utf8_lossy(&script.stdout)
        .split("\n\n")
        .filter_map(|sample| {
            let mut lines = sample.lines().filter(|l| !l.trim().is_empty());
            (lines.next()?.trim() == comm).then(|| {
                lines
                    .map(|frame| {
                        let mut words = frame.split_whitespace().skip(1);
                        let symbol = words.next().unwrap_or_default().to_string();
                        let in_kernel = frame.contains("[kernel.kallsyms]");
                        if in_kernel {
                            format!("[k] {symbol}")
                        } else {
                            symbol
                        }
                    })
                    .collect()
            })
        })
        .collect()
}

/// (user samples, those whose chain reaches `_start`). A sample in the
/// dynamic loader before it calls `_start` (under `_dl_start_user`, once
/// in 2,000 on a CI host) is not one that could.
fn reaching_start(chains: &[Vec<String>]) -> (usize, usize) {
    let before_start = |c: &&Vec<String>| c.iter().any(|f| f.starts_with("_dl_start"));
    let user: Vec<_> = chains
        .iter()
        .filter(|c| c.first().is_some_and(|f| !f.starts_with("[k]")))
        .filter(|c| !before_start(c))
        .collect();
    let reached = user
        .iter()
        .filter(|c| c.iter().any(|f| f == "_start"))
        .count();
    (user.len(), reached)
}

#[test]
fn dwarf_chains_reach_start_as_in_perfs_own_recording() {
    let Some((_serial, scratch)) = recording_test("readers-dwarf") else {
        return;
    };
    // 1 kHz: 8 KiB stack copies at 4 kHz fill perf's 512 KiB rings fast
    // enough that a vCPU stolen by the host for a moment loses a chunk,
    // and a loss is not what this test is about.
    let options = ["--call-graph", "dwarf", "-e", "cpu-clock", "-F", "1000"];
    let (perfs, ours) = record_deep(&scratch, &options, "2");
    let readers = common::perfs();
    let files = [(&perfs, "perf record"), (&ours, "shardrec")];
    for (reader, (file, who)) in readers.iter().flat_map(|r| files.map(|f| (r, f))) {
        let who = &format!("{who}'s file read by {}", reader.name);
        let report = reader.run(&["report", "--stdio", "--no-children"], file);
        assert_no_complaint(&report, &format!("report of {who}"));
        let report = String::from_utf8_lossy(&report.stdout);
        assert!(report.contains("leaf_a"), "{who}: no leaf_a in\n{report}");
        let chains = callchains(reader, file, "deep", who);
        let (user, reached) = reaching_start(&chains);
        assert!(user > 1000, "{who}: only {user} user samples");
        let lost: Vec<_> = chains
            .iter()
            .filter(|c| !c.iter().any(|f| f == "_start"))
            .take(3)
            .collect();
        assert_eq!(
            reached, user,
            "{who}: chains that do not reach _start, e.g. {lost:?}"
        );
        // The known depth, below each leaf.
        let expected = ["level3", "level2", "level1", "main"];
        let in_leaves = chains
            .iter()
            .filter(|c| c[0] == "leaf_a" || c[0] == "leaf_b");
        let mut leaves = 0;
        for chain in in_leaves {
            assert_eq!(chain[1..5], expected, "{who}: {chain:?}");
            leaves += 1;
        }
        assert!(leaves > user / 2, "{who}: {leaves} of {user} in the leaves");
    }
}

/// The lines of `perf report --header-only -I`.
fn header_lines(perf: &Perf, file: &Path) -> Vec<String> {
    let header = perf.run(&["report", "--header-only", "-I"], file);
    assert_no_complaint(&header, &format!("{} report --header-only", perf.name));
    String::from_utf8_lossy(&header.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The lines that may differ between perf's header and shardrec's for the
/// same command, by their start, and why.
const MAY_DIFFER: &[(&str, &str)] = &[
    ("# captured on", "the time of each recording"),
    (
        "# data offset",
        "shardrec's attrs section holds one more event",
    ),
    ("# data size", "a different recording"),
    ("# feat offset", "follows the data size"),
    (
        "# perf version",
        "names shardrec after the perf format version",
    ),
    ("# cmdline", "shardrec's own command line"),
    ("# node0 meminfo", "free memory when each recording started"),
    ("# time of first sample", "a different recording"),
    ("# time of last sample", "a different recording"),
    ("# sample duration", "a different recording"),
];

/// An event line with what shardrec sets on purpose taken out: the ids
/// (each recording's own), IDENTIFIER and CPU in every sample (the merge
/// orders and attributes records from many shards), the wakeup watermark
/// (writers wake at a quarter ring instead of at every half), KSYMBOL
/// and BPF_EVENT, which the VIP's own dummy event reports instead, and
/// build_id (set by either only with `--buildid-mmap`).
fn event_essentials(line: &str) -> String {
    let mut line = line.to_string();
    if let (Some(start), Some(end)) = (line.find(", id = {"), line.find('}')) {
        line.replace_range(start..=end, "");
    }
    for (from, to) in [
        ("|CPU|", "|"),
        ("|IDENTIFIER", ""),
        (", watermark = 1", ""),
        (", ksymbol = 1, bpf_event = 1", ""),
        (", build_id = 1", ""),
    ] {
        line = line.replace(from, to);
    }
    let wakeup = ", { wakeup_events, wakeup_watermark } = ";
    if let Some(start) = line.find(wakeup) {
        let digits = line[start + wakeup.len()..]
            .bytes()
            .take_while(u8::is_ascii_digit)
            .count();
        line.replace_range(start..start + wakeup.len() + digits, "");
    }
    line
}

#[test]
fn the_header_and_first_records_are_perfs_but_for_listed_lines() {
    let Some((_serial, scratch)) = recording_test("readers-header") else {
        return;
    };
    let (perfs, ours_file) = record_deep(&scratch, &["-g", "-e", "cpu-clock"], "0.3");
    for reader in common::perfs() {
        headers_agree(&reader, &perfs, &ours_file);
    }
}

/// What `reader` shows of the two files' headers and first records is
/// the same, but for the lines listed and what shardrec does on purpose.
fn headers_agree(reader: &Perf, perfs: &Path, ours_file: &Path) {
    let name = reader.name;
    let (theirs, ours) = (header_lines(reader, perfs), header_lines(reader, ours_file));
    let differs = |line: &String, other: &[String]| !other.contains(line);
    let listed = |line: &str| MAY_DIFFER.iter().any(|(start, _)| line.starts_with(start));
    for line in theirs.iter().filter(|l| differs(l, &ours)) {
        if line.starts_with("# event : name = cpu-clock") {
            let ours = ours
                .iter()
                .find(|l| l.starts_with("# event : name = cpu-clock"))
                .expect("shardrec's header has the cpu-clock event");
            assert_eq!(event_essentials(ours), event_essentials(line), "{name}");
            continue;
        }
        assert!(listed(line), "{name}: only perf's header has {line:?}");
    }
    for line in ours.iter().filter(|l| differs(l, &theirs)) {
        // The VIP's side-band event.
        let side_band = line.starts_with("# event : name = dummy,") && line.contains("bpf_event");
        assert!(
            listed(line) || side_band || line.starts_with("# event : name = cpu-clock"),
            "{name}: only shardrec's header has {line:?}"
        );
    }
    // The same features, the same missing ones.
    let missing = |lines: &[String]| {
        lines
            .iter()
            .find(|l| l.starts_with("# missing features"))
            .cloned()
    };
    assert_eq!(missing(&ours), missing(&theirs), "{name}");
    // Where the content is the host's and not the recording's, the bytes
    // are perf's: hostname, osrelease, arch, nrcpus, cpudesc, cpuid,
    // total_mem, cpu_topology, pmu_mappings, cache, mem_topology, the
    // empty bpf_prog_info and bpf_btf, pmu_caps.
    for bit in [3, 4, 6, 7, 8, 9, 10, 13, 16, 20, 22, 25, 26, 31] {
        assert_eq!(
            feature_section(ours_file, bit),
            feature_section(perfs, bit),
            "feature {bit}"
        );
    }
    // The records perf writes at the start, and its kernel map.
    let stats = |file: &Path| {
        let stats = reader.run(&["report", "--stats"], file);
        String::from_utf8_lossy(&stats.stdout).into_owned()
    };
    let (their_stats, our_stats) = (stats(perfs), stats(ours_file));
    for kind in ["ID_INDEX", "THREAD_MAP", "CPU_MAP", "FINISHED_INIT"] {
        let count = |stats: &str| {
            let line = stats.lines().find(|l| l.trim_start().starts_with(kind));
            line.map(|l| l.split_whitespace().nth(2).unwrap_or_default().to_string())
        };
        assert_eq!(
            count(&their_stats).as_deref(),
            Some("1"),
            "{name}, {kind}: {their_stats}"
        );
        let kind_records = format!("{name}: {kind} records");
        assert_eq!(count(&our_stats), count(&their_stats), "{kind_records}");
    }
    let kernel_map = |file: &Path| {
        let dump = reader.run(&["report", "-D"], file);
        String::from_utf8_lossy(&dump.stdout)
            .lines()
            .find_map(|l| Some(l.split_once("PERF_RECORD_MMAP -1/0: ")?.1.to_string()))
    };
    assert!(kernel_map(perfs).is_some(), "{name}");
    assert_eq!(kernel_map(ours_file), kernel_map(perfs), "{name}");
}

/// Where Debian's hotspot package puts its parser.
const PERFPARSER: &str = "/usr/lib/x86_64-linux-gnu/libexec/hotspot-perfparser";

#[test]
fn build_ids_are_perfs_vdso_included() {
    let Some((_serial, scratch)) = recording_test("readers-build-ids") else {
        return;
    };
    let program = build_program(&scratch, "clock_loop");
    let args = ["-e", "cpu-clock", "--", program.to_str().unwrap()];
    let (perfs, ours) = record_both(&scratch, &args);
    for reader in common::perfs() {
        let list = |file: &Path| {
            let output = reader.run(&["buildid-list"], file);
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        let name = reader.name;
        let (ours, perfs) = (list(&ours), list(&perfs));
        // Which other DSOs a sample fell in (the kernel, the dynamic
        // loader) is chance; the workload's own binary, where every sample
        // but a few falls, and the vDSO it calls are not.
        for certain in [program.to_str().unwrap(), "[vdso]"] {
            let line = |lines: &[String], who: &str| {
                let found = lines.iter().find(|l| l.ends_with(&format!(" {certain}")));
                found
                    .unwrap_or_else(|| panic!("{name}: no {certain} in {who}'s {lines:?}"))
                    .clone()
            };
            assert_eq!(line(&ours, "shardrec"), line(&perfs, "perf"), "{name}");
        }
        // A DSO both files name has one build id.
        for line in &ours {
            let path = line.split_once(' ').map_or("", |(_, path)| path);
            let same_path = perfs
                .iter()
                .find(|l| l.split_once(' ').is_some_and(|(_, p)| p == path));
            assert!(
                same_path.is_none_or(|l| l == line),
                "{name}: {line:?} against {same_path:?}"
            );
        }
    }
}

/// hotspot's parser's statistics: (rounds, largest reorder buffer).
fn perfparser_stats(file: &Path) -> (u64, u64) {
    let output = Command::new(PERFPARSER)
        .args(["--print-stats", "--input"])
        .arg(file)
        .output()
        .expect("hotspot-perfparser is installed (.ci/setup: hotspot)");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stat = |name: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name:?} in {stdout}"))
    };
    (stat("rounds:"), stat("max buffer size:"))
}

#[test]
fn hotspots_reorder_buffer_stays_as_small_as_with_perfs_file() {
    let Some((_serial, scratch)) = recording_test("readers-hotspot") else {
        return;
    };
    if !shardrec_testkit::require(Path::new(PERFPARSER).exists(), "hotspot's perfparser") {
        return;
    }
    let (perfs, ours) = record_deep(
        &scratch,
        &["--call-graph", "dwarf", "-e", "cpu-clock"],
        "10",
    );
    let (perf_rounds, perf_buffer) = perfparser_stats(&perfs);
    let (rounds, buffer) = perfparser_stats(&ours);
    eprintln!(
        "hotspot: {rounds} rounds, buffer {buffer} B; perf's file: {perf_rounds}, {perf_buffer} B"
    );
    // Rounds are paced as perf's passes are, by how much the rings grew, so
    // their count differs from perf's by chance; what must not happen is a
    // file whose reader sees few rounds and buffers it nearly whole.
    assert!(
        2 * rounds >= perf_rounds,
        "{rounds} rounds, perf's file {perf_rounds}"
    );
    assert!(
        buffer <= 2 * perf_buffer,
        "hotspot buffered {buffer} bytes, {perf_buffer} with perf's file"
    );
}

/// samply's profile of a file: its name and each thread's (name, samples).
fn samply_profile(file: &Path) -> (String, Vec<(String, usize)>) {
    let json = file.with_extension("json");
    let output = Command::new(samply())
        .args(["import", "--save-only", "-o"])
        .arg(&json)
        .arg(file)
        .output()
        .expect("samply runs");
    assert!(output.status.success(), "{output:?}");
    let profile: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let name = profile["meta"]["product"].as_str().unwrap().to_string();
    let threads = profile["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let name = t["name"].as_str().unwrap_or_default().to_string();
            let samples = t["samples"]["stack"].as_array().map_or(0, Vec::len);
            (name, samples)
        })
        .collect();
    (name, threads)
}

/// samply: `$SAMPLY`, else where `.ci/setup` builds it, else on the PATH.
fn samply() -> PathBuf {
    let env = |name: &str| std::env::var_os(name).map(PathBuf::from);
    let cache = env("XDG_CACHE_HOME").or_else(|| Some(env("HOME")?.join(".cache")));
    let built = cache.map(|c| c.join("shardrec-tools/samply-0.13.1/bin/samply"));
    [env("SAMPLY"), built]
        .into_iter()
        .flatten()
        .find(|path| path.is_file())
        .unwrap_or_else(|| PathBuf::from("samply"))
}

#[test]
fn samply_shows_the_workloads_threads_and_name() {
    let Some((_serial, scratch)) = recording_test("readers-samply") else {
        return;
    };
    let found = Command::new(samply()).arg("--version").output().is_ok();
    if !shardrec_testkit::require(found, "samply (.ci/setup builds it)") {
        return;
    }
    let (perfs, ours) = record_deep(&scratch, &["-g", "-e", "cpu-clock"], "0.3");
    let (their_name, their_threads) = samply_profile(&perfs);
    let (name, threads) = samply_profile(&ours);
    assert!(name.starts_with("deep on "), "{name}");
    assert_eq!(
        name.split(" (perf version").next(),
        their_name.split(" (perf version").next()
    );
    let names = |threads: &[(String, usize)]| -> Vec<String> {
        threads.iter().map(|(n, _)| n.clone()).collect()
    };
    assert_eq!(names(&threads), names(&their_threads));
    let with_samples = threads.iter().filter(|(_, n)| *n > 0).count();
    assert_eq!(with_samples, 1, "{threads:?}");
}

#[test]
fn samply_shows_each_off_cpu_wait_with_its_stack() {
    let Some((_serial, scratch)) = recording_test("readers-samply-off-cpu") else {
        return;
    };
    let found = Command::new(samply()).arg("--version").output().is_ok();
    if !shardrec_testkit::require(found, "samply (.ci/setup builds it)") {
        return;
    }
    let load = load();
    let args = [
        "-e",
        "dummy",
        "--off-cpu",
        "--",
        load,
        "waits",
        "100",
        "100",
    ];
    record_and_merge(&scratch, &args);
    let json = scratch.0.join("profile.json");
    let output = Command::new(samply())
        .args(["import", "--save-only", "-o"])
        .arg(&json)
        .arg(scratch.output())
        .output()
        .expect("samply runs");
    assert!(output.status.success(), "{output:?}");
    let profile: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    // samply makes the samples of an event other than the one it
    // profiles (cpu-clock, cycles) markers of their thread, with a stack.
    let threads = profile["threads"].as_array().unwrap();
    let main = threads.iter().find(|t| t["name"] == "shardrec-load");
    let markers = main.unwrap_or_else(|| panic!("{threads:?}"))["markers"]["data"]
        .as_array()
        .unwrap();
    let with_stack = markers
        .iter()
        .filter(|m| m["cause"]["stack"].is_u64())
        .count();
    assert!(with_stack >= 2, "{markers:?}");
    let strings = profile.to_string();
    assert!(
        strings.contains("\"offcpu-time\""),
        "no offcpu-time in {strings}"
    );
}
