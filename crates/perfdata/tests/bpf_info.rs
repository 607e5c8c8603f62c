//! HEADER_BPF_PROG_INFO and HEADER_BPF_BTF against the real writer and
//! reader: the block perf 6.1's `perf record` writes for a program loaded
//! here must be the block [`bpf::bpil`] builds from our capture of it, and
//! Debian's `perf report --header-only -I` must read ours without a word.
//!
//! Needs root (loading BPF programs, system-wide perf record). Skips when
//! not root, unless `CI` is set, where that is a failure.

use std::fs;
use std::io::Cursor;
use std::ops::Range;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::process::Command;

use shardrec_perfdata::bpf_info;
use shardrec_perfdata::feature::Feature;
use shardrec_perfdata::{AttrEntry, PerfDataWriter};
use shardrec_sys::bpf::{self as sys_bpf, test_programs, ProgInfo};

const PERF: &str = "/usr/bin/perf";
/// Bytes of `struct perf_bpil` before the info: info_len, data_len, arrays.
const BLOCK_HEADER: usize = 16;

/// Fields of `struct bpf_prog_info` that may change between two reads of
/// the same program: run_time_ns, run_cnt and recursion_misses.
const RUN_STATS: Range<usize> = 192..216;

/// Loads `spec` and captures it.
fn load(spec: &sys_bpf::ProgramSpec<'_>) -> (OwnedFd, ProgInfo) {
    let fd = sys_bpf::load_program(spec).unwrap_or_else(|err| panic!("{err}"));
    let id = sys_bpf::prog_id(fd.as_fd()).expect("prog id");
    (
        fd,
        sys_bpf::capture_prog(id).expect("capture").expect("loaded"),
    )
}

/// Our block for a captured program.
fn our_block(prog: &ProgInfo) -> Vec<u8> {
    let arrays: Vec<(u32, &[u8])> = prog
        .arrays
        .iter()
        .map(|(array, bytes)| (array.bit(), &bytes[..]))
        .collect();
    bpf_info::bpil(&prog.info, &arrays)
}

/// The content of feature `feature` in a perf.data file: the feature index
/// follows the data section, one section per set bit in bit order.
fn feature_section(file: &[u8], feature: Feature) -> &[u8] {
    let u64_at = |at: usize| u64::from_ne_bytes(file[at..at + 8].try_into().unwrap());
    assert_eq!(&file[..8], b"PERFILE2");
    let bit = feature as u32;
    let word = u64_at(72 + 8 * (bit as usize / 64));
    assert!(word & (1 << (bit % 64)) != 0, "no feature {feature:?}");
    let below: u32 = (0..4)
        .map(|w| u64_at(72 + 8 * w))
        .enumerate()
        .map(|(w, bits)| {
            let lower = bit.saturating_sub(64 * w as u32).min(64);
            (bits
                & if lower == 64 {
                    u64::MAX
                } else {
                    (1u64 << lower) - 1
                })
            .count_ones()
        })
        .sum();
    let entry = (u64_at(40) + u64_at(48)) as usize + 16 * below as usize;
    let (offset, size) = (u64_at(entry) as usize, u64_at(entry + 8) as usize);
    &file[offset..offset + size]
}

/// The block of program `id` in a HEADER_BPF_PROG_INFO content.
fn find_block(content: &[u8], id: u32) -> Option<&[u8]> {
    let u32_at = |at: usize| u32::from_ne_bytes(content[at..at + 4].try_into().unwrap());
    let mut at = 4;
    for _ in 0..u32_at(0) {
        let len = BLOCK_HEADER + u32_at(at) as usize + u32_at(at + 4) as usize;
        let block = &content[at..at + len];
        if bpf_info::bpil_prog_id(block) == Some(id) {
            return Some(block);
        }
        at += len;
    }
    None
}

/// Bytes of the data part that are padding (perf leaves them as malloc
/// gave them), given our block's array offsets and lengths.
fn padding(prog: &ProgInfo) -> Vec<usize> {
    let mut pads = Vec::new();
    let mut at = 0;
    for (_, bytes) in &prog.arrays {
        let end = bytes.len().next_multiple_of(8);
        pads.extend(at + bytes.len()..at + end);
        at += end;
    }
    let data = BLOCK_HEADER + bpf_info::INFO_LEN;
    pads.into_iter().map(|offset| data + offset).collect()
}

/// perf record -a, with our programs loaded: perf synthesizes every loaded
/// program's info into the header at start.
fn perf_record() -> (std::path::PathBuf, Vec<u8>) {
    let path = std::env::temp_dir().join(format!("shardrec-bpf-{}.data", std::process::id()));
    let out = Command::new(PERF)
        .args(["record", "-q", "-a", "-e", "cpu-clock", "-o"])
        .arg(&path)
        .args(["--", "sleep", "0.1"])
        .output()
        .unwrap_or_else(|e| panic!("running {PERF}: {e}"));
    assert!(
        out.status.success(),
        "perf record: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = fs::read(&path).unwrap();
    (path, file)
}

#[test]
fn same_block_as_perf_record() {
    if !shardrec_testkit::require_root() {
        return;
    }
    let loaded = [
        load(&test_programs::return_zero()),
        load(&test_programs::with_subprogram()),
    ];
    let (path, file) = perf_record();
    let content = feature_section(&file, Feature::BpfProgInfo);
    for (_, prog) in &loaded {
        let theirs = find_block(content, prog.id)
            .unwrap_or_else(|| panic!("perf has no block for {}", prog.id));
        let ours = our_block(prog);
        assert_eq!(ours.len(), theirs.len(), "program {}", prog.id);
        assert_eq!(
            &theirs[..4],
            &(bpf_info::INFO_LEN as u32).to_ne_bytes(),
            "perf 6.1 info_len"
        );
        let pads = padding(prog);
        let differ: Vec<usize> = (0..ours.len()).filter(|&i| ours[i] != theirs[i]).collect();
        let unexplained: Vec<usize> = differ
            .iter()
            .copied()
            .filter(|&i| !pads.contains(&i) && !RUN_STATS.contains(&(i.wrapping_sub(BLOCK_HEADER))))
            .collect();
        assert!(
            unexplained.is_empty(),
            "program {}: bytes {unexplained:?} differ; perf's file is {}",
            prog.id,
            path.display()
        );
    }
    fs::remove_file(&path).unwrap();
}

/// A 128-byte `perf_event_attr` of cpu-clock sampling IP, TID and TIME.
fn cpu_clock_attr() -> Vec<u8> {
    let mut attr = vec![0u8; 128];
    attr[0..4].copy_from_slice(&1u32.to_ne_bytes()); // PERF_TYPE_SOFTWARE
    attr[4..8].copy_from_slice(&128u32.to_ne_bytes());
    // config 0: PERF_COUNT_SW_CPU_CLOCK
    attr[16..24].copy_from_slice(&4000u64.to_ne_bytes()); // sample_freq
    attr[24..32].copy_from_slice(&0b111u64.to_ne_bytes()); // IP | TID | TIME
    attr[40..48].copy_from_slice(&(1u64 << 10).to_ne_bytes()); // freq
    attr
}

/// PERF_RECORD_COMM for this process (no sample_id_all trailer).
fn comm_record(name: &str) -> Vec<u8> {
    let pid = std::process::id();
    let mut name = name.as_bytes().to_vec();
    name.resize((name.len() + 1).next_multiple_of(8), 0);
    let size = (8 + 8 + name.len()) as u16;
    let mut record = Vec::new();
    record.extend_from_slice(&3u32.to_ne_bytes()); // PERF_RECORD_COMM
    record.extend_from_slice(&0u16.to_ne_bytes());
    record.extend_from_slice(&size.to_ne_bytes());
    record.extend_from_slice(&pid.to_ne_bytes());
    record.extend_from_slice(&pid.to_ne_bytes());
    record.extend_from_slice(&name);
    record
}

/// A perf.data holding `progs`' info and BTF, written by our writer.
fn write_file(path: &Path, progs: &[&ProgInfo]) {
    let entry = AttrEntry {
        attr: cpu_clock_attr(),
        ids: vec![1],
    };
    let mut writer = PerfDataWriter::create(Cursor::new(Vec::new()), &[entry]).unwrap();
    writer.write_record(&comm_record("shardrec-bpf")).unwrap();
    let blocks: Vec<Vec<u8>> = progs.iter().map(|prog| our_block(prog)).collect();
    let btfs: Vec<(u32, Vec<u8>)> = progs
        .iter()
        .map(|prog| (prog.btf_id, prog.btf.clone().expect("programs with BTF")))
        .collect();
    let features = [
        bpf_info::bpf_prog_info_feature(&blocks),
        bpf_info::bpf_btf_feature(&btfs),
    ];
    fs::write(path, writer.finish(&features).unwrap().into_inner()).unwrap();
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn perf_report_reads_our_features() {
    if !shardrec_testkit::require_root() {
        return;
    }
    let (_zero_fd, zero) = load(&test_programs::return_zero());
    let (_call_fd, call) = load(&test_programs::with_subprogram());
    let path = std::env::temp_dir().join(format!("shardrec-bpf-ours-{}.data", std::process::id()));
    write_file(&path, &[&call, &zero]);
    let out = Command::new(PERF)
        .args(["report", "--header-only", "-I", "--force", "-i"])
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("running {PERF}: {e}"));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "perf report: {stderr}");
    for word in ["invalid", "error", "warning"] {
        assert!(
            !stderr.to_lowercase().contains(word),
            "perf report says: {stderr}"
        );
    }
    // perf names a single-function program after its tag and BTF function.
    let line = format!(
        "# bpf_prog_info {}: bpf_prog_{}_shardrec_zero addr {:#x} size {}",
        zero.id,
        hex(&zero.tag),
        zero.jited_ksyms[0],
        zero.jited_func_lens[0]
    );
    assert!(stdout.contains(&line), "no {line:?} in:\n{stdout}");
    // Sub-programs under the program's id, each named by perf after its own
    // tag (the kernel names the first after the program's tag instead).
    assert!(
        stdout.contains(&format!("# bpf_prog_info {}:\n", call.id)),
        "{stdout}"
    );
    for (index, func) in ["shardrec_call", "shardrec_callee"].iter().enumerate() {
        let line = format!(
            "# \tsub_prog {index}: bpf_prog_{}_{func} addr {:#x} size {}",
            hex(&call.prog_tags[index]),
            call.jited_ksyms[index],
            call.jited_func_lens[index]
        );
        assert!(stdout.contains(&line), "no {line:?} in:\n{stdout}");
    }
    for prog in [&zero, &call] {
        let line = format!("# btf info of id {}\n", prog.btf_id);
        assert!(stdout.contains(&line), "no {line:?} in:\n{stdout}");
    }
    fs::remove_file(&path).unwrap();
}
