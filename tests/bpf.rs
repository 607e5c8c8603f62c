//! The VIP against real BPF programs: each one caught as it loads, named
//! in profiles, its info in the header exactly as the kernel reports it.

mod common;

use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;

use common::*;
use shardrec_format::header::RecordType;
use shardrec_format::records::{parse_bpf_event, BPF_EVENT_PROG_LOAD, BPF_EVENT_PROG_UNLOAD};
use shardrec_format::views::Ksymbol;
use shardrec_sys::bpf::{self, load_program, test_programs, BpilArray};

/// The tags of the programs `shardrec-load bpf-churn` loads.
fn churn_tags() -> Vec<[u8; 8]> {
    [
        test_programs::return_zero(),
        test_programs::with_subprogram(),
    ]
    .iter()
    .map(|spec| {
        let prog = load_program(spec).unwrap();
        let id = bpf::prog_id(prog.as_fd()).unwrap();
        bpf::capture_prog(id).unwrap().unwrap().tag
    })
    .collect()
}

/// Waits (at most a minute) until `perf`'s workload has exec'd `comm`:
/// perf opens and enables its events before it lets the workload exec.
fn wait_for_workload_exec(perf: u32, comm: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let children = format!("/proc/{perf}/task/{perf}/children");
    let execd = || {
        let list = std::fs::read_to_string(&children).unwrap_or_default();
        list.split_whitespace().any(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
        })
    };
    while !execd() {
        assert!(
            std::time::Instant::now() < deadline,
            "perf's workload was not {comm} in a minute"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The number just before `label` in the recorder's summary on `stderr`.
fn summary_number(stderr: &str, label: &str) -> u64 {
    let before = &stderr[..stderr.find(label).expect(label)];
    let digits = before.rsplit(' ').next().unwrap();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("'{digits}' before '{label}'"))
}

/// The name of a KSYMBOL record, and whether it unregisters the symbol.
fn ksymbol(record: &[u8]) -> (String, bool) {
    let symbol = Ksymbol::parse(record).unwrap();
    let name = String::from_utf8_lossy(symbol.name).into_owned();
    (name, symbol.unregisters())
}

#[test]
fn a_hundred_short_lived_programs_are_all_caught() {
    let Some((_serial, scratch)) = recording_test("bpf-churn") else {
        return;
    };
    let tags = churn_tags();
    let stderr = record_and_merge(
        &scratch,
        &["-a", "-e", "cpu-clock", "--", load(), "bpf-churn", "100"],
    );
    let records = data_records(&scratch.output());
    let (mut loads, mut unloads) = (0, 0);
    let mut ids = std::collections::BTreeSet::new();
    for event in records.iter().filter(|r| of_type(r, RecordType::BPF_EVENT)) {
        let (type_, id, tag) = parse_bpf_event(event).unwrap();
        if tags.contains(&tag) {
            match type_ {
                BPF_EVENT_PROG_LOAD => {
                    loads += 1;
                    ids.insert(id);
                }
                BPF_EVENT_PROG_UNLOAD => unloads += 1,
                _ => {}
            }
        }
    }
    assert_eq!(
        (loads, unloads),
        (100, 100),
        "PROG_LOAD and PROG_UNLOAD of our programs"
    );
    let ours: Vec<(String, bool)> = records
        .iter()
        .filter(|r| of_type(r, RecordType::KSYMBOL))
        .map(|r| ksymbol(r))
        // The churn's functions only: a program of an earlier test (the
        // hot loop, held by its perf event until the kernel frees that)
        // can still be there, and described, when this recording starts.
        .filter(|(name, _)| {
            ["_shardrec_zero", "_shardrec_call", "_shardrec_callee"]
                .iter()
                .any(|f| name.ends_with(f))
        })
        .collect();
    // 50 programs of one function and 50 of two: 150 symbols, each
    // registered and unregistered.
    assert_eq!(ours.iter().filter(|(_, gone)| !gone).count(), 150);
    assert_eq!(ours.iter().filter(|(_, gone)| *gone).count(), 150);

    let header = perf(&["report", "--header-only", "-I"], &scratch.output());
    assert_no_complaint(&header, "perf report --header-only");
    let text = String::from_utf8_lossy(&header.stdout);
    // Each program lives about 2 ms, and one the VIP reaches too late is
    // counted as missed: how many are reached depends on the host's load,
    // but every one of the 100 must be either in the header (once) or
    // counted as missed, and nearly all captured.
    let in_header: Vec<_> = text
        .lines()
        .filter_map(|l| {
            l.strip_prefix("# bpf_prog_info ")?
                .split(':')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    let captured = in_header.iter().filter(|id| ids.contains(id)).count();
    let missed = ids.iter().filter(|id| !in_header.contains(id)).count();
    assert_eq!(captured + missed, 100, "ours in the header:\n{text}");
    assert!(
        captured >= 90,
        "only {captured} programs' info in the header:\n{text}"
    );
    let said_missed = summary_number(&stderr, " missed (gone before capture)");
    assert!(said_missed >= missed as u64, "{missed} missed: {stderr}");
    assert!(
        text.contains("# btf info of id"),
        "no BTF in the header:\n{text}"
    );
    assert!(
        stderr.contains("BPF programs: ") && stderr.contains(" captured ("),
        "{stderr}"
    );
    // Where the kernel takes the capture program, it reads every program
    // as it loads: none is missed.
    if stderr.contains("by a fentry in the kernel") || stderr.contains("by a kprobe in the kernel")
    {
        assert_eq!((captured, missed), (100, 0), "{stderr}");
    }
}

#[test]
fn a_hot_bpf_program_is_named_in_the_profile() {
    let Some((_serial, scratch)) = recording_test("bpf-hot") else {
        return;
    };
    record_and_merge(
        &scratch,
        &["-a", "-e", "cpu-clock", "--", load(), "bpf-hot", "1"],
    );
    let percent = hot_program_share(&scratch.output());
    assert!(
        percent > 10.0,
        "the hot BPF program has only {percent}% of the samples"
    );
}

/// The share of `perf report`'s samples in the hot BPF program, checking
/// its line names it as the kernel does.
fn hot_program_share(file: &std::path::Path) -> f64 {
    let report = perf(
        &["report", "--stdio", "--no-children", "--sort", "sym"],
        file,
    );
    assert_no_complaint(&report, "perf report");
    let stdout = String::from_utf8_lossy(&report.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("_shardrec_hot"))
        .unwrap_or_else(|| panic!("no sample in the BPF program:\n{stdout}"));
    assert!(line.contains("[k] bpf_prog_"), "{line}");
    line.trim()
        .split('%')
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_program_loaded_on_an_unrecorded_cpu_is_named_where_it_runs() {
    let Some((_serial, scratch)) = recording_test("bpf-other-cpu") else {
        return;
    };
    // Loaded on CPU 1, so its KSYMBOL and BPF_EVENT land in CPU 1's
    // side-band ring; run and sampled on CPU 0, the one recorded.
    record_and_merge(
        &scratch,
        &[
            "-C",
            "0",
            "-e",
            "cpu-clock",
            "--",
            load(),
            "bpf-hot",
            "1",
            "1",
            "0",
        ],
    );
    let percent = hot_program_share(&scratch.output());
    assert!(
        percent > 10.0,
        "the hot program has {percent}% of CPU 0's samples"
    );
    let header = perf(&["report", "--header-only"], &scratch.output());
    let header = String::from_utf8_lossy(&header.stdout);
    assert!(
        header
            .lines()
            .any(|l| l.starts_with("# bpf_prog_info ") && l.contains("_shardrec_hot addr 0x")),
        "no info of the program in the header:\n{header}"
    );
}

/// The JITed image a perf_bpil block holds: `jited_prog_len` at byte 16 of
/// `bpf_prog_info`, its data offset at byte 24 (bpil_addr_to_offs).
fn jited_image(bpil: &[u8]) -> &[u8] {
    let info_len = u32::from_ne_bytes(bpil[0..4].try_into().unwrap()) as usize;
    let info = &bpil[16..16 + info_len];
    let data = &bpil[16 + info_len..];
    let len = u32::from_ne_bytes(info[16..20].try_into().unwrap()) as usize;
    let offset = u64::from_ne_bytes(info[24..32].try_into().unwrap()) as usize;
    &data[offset..offset + len]
}

/// The perf_bpil block of program `id` in a BPF_PROG_INFO feature.
fn bpil_of(feature: &[u8], id: u32) -> Option<&[u8]> {
    let count = u32::from_ne_bytes(feature[0..4].try_into().unwrap());
    let mut rest = &feature[4..];
    for _ in 0..count {
        let info_len = u32::from_ne_bytes(rest[0..4].try_into().unwrap()) as usize;
        let data_len = u32::from_ne_bytes(rest[4..8].try_into().unwrap()) as usize;
        let (block, tail) = rest.split_at(16 + info_len + data_len);
        if shardrec_perfdata::bpf_info::bpil_prog_id(block) == Some(id) {
            return Some(block);
        }
        rest = tail;
    }
    None
}

#[test]
fn programs_loaded_before_recording_are_named_and_their_image_is_exact() {
    let Some((_serial, scratch)) = recording_test("bpf-before") else {
        return;
    };
    let prog = load_program(&test_programs::with_subprogram()).unwrap();
    let id = bpf::prog_id(prog.as_fd()).unwrap();
    record_and_merge(&scratch, &["-a", "-e", "cpu-clock", "--", "sleep", "0.2"]);

    // Synthesized KSYMBOLs name both functions as the kernel does.
    let names: Vec<String> = data_records(&scratch.output())
        .iter()
        .filter(|r| of_type(r, RecordType::KSYMBOL))
        .map(|r| ksymbol(r).0)
        .collect();
    let kernel = bpf::capture_prog(id).unwrap().unwrap();
    for name in &kernel.ksym_names().unwrap() {
        assert!(names.contains(name), "no KSYMBOL {name} in {names:?}");
    }
    let header = perf(&["report", "--header-only", "-I"], &scratch.output());
    let text = String::from_utf8_lossy(&header.stdout);
    assert!(text.contains(&format!("# bpf_prog_info {id}:")), "{text}");
    assert!(text.contains("_shardrec_callee"), "{text}");

    // The image in the header is the one the kernel reports now.
    let feature = feature_section(&scratch.output(), 25).expect("a BPF_PROG_INFO feature");
    let block = bpil_of(&feature, id).expect("our program in BPF_PROG_INFO");
    assert_eq!(jited_image(block), kernel.array(BpilArray::JitedInsns));
    assert!(!kernel.array(BpilArray::JitedInsns).is_empty());
    drop(prog);
}

#[test]
fn a_second_recorder_does_not_cost_the_bpf_side_band() {
    let Some((_serial, scratch)) = recording_test("bpf-two") else {
        return;
    };
    let tags = churn_tags();
    // With a second recorder watching BPF events, the kernel pads these
    // records after their trailer (it sizes them once per recorder).
    // perf records until told to stop, so it outlasts shardrec whatever
    // the host's speed; shardrec starts only once perf records.
    let mut other = Reaped(
        std::process::Command::new("perf")
            .args(["record", "-q", "-a", "-e", "dummy", "-o"])
            .arg(scratch.0.join("other.data"))
            .args(["sleep", "600"])
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    wait_for_workload_exec(other.0.id(), "sleep");
    let stderr = record_and_merge(
        &scratch,
        &["-a", "-e", "cpu-clock", "--", load(), "bpf-churn", "20"],
    );
    assert!(
        other.0.try_wait().unwrap().is_none(),
        "perf stopped before shardrec ended"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(other.0.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    // perf's status tells how its workload ended (here, by its signal).
    other.0.wait().unwrap();
    assert!(
        !stderr.contains("shardrec: error") && !stderr.contains("warning"),
        "{stderr}"
    );
    let loads = data_records(&scratch.output())
        .iter()
        .filter(|r| of_type(r, RecordType::BPF_EVENT))
        .filter_map(|r| parse_bpf_event(r))
        .filter(|(type_, _, tag)| *type_ == BPF_EVENT_PROG_LOAD && tags.contains(tag))
        .count();
    assert_eq!(loads, 20);
    let script = perf(&["script", "--show-bpf-events"], &scratch.output());
    assert_no_complaint(&script, "perf script");
}
