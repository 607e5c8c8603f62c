//! `shardrec_sys::bpf` against the kernel: programs loaded here, captured,
//! and checked against what the kernel shows elsewhere (`/proc/kallsyms`,
//! and libbpf-rs's own info query; Debian's bpftool is built without
//! libbfd and cannot dump JITed images).
//!
//! Needs root. Skips when not root, unless `CI` is set, where that fails.

use std::collections::BTreeSet;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use libbpf_rs::query::{ProgInfoIter, ProgInfoQueryOptions, ProgramInfo};
use shardrec_sys::bpf::{self, prog_type, test_programs, BpilArray, ProgInfo, ProgramSpec};
use shardrec_sys::{tracefs, Attr, PerfEvent, Target};

const PERF_TYPE_TRACEPOINT: u32 = 2;

/// Loads `spec` and captures it: the fd (keep it to keep the program) and info.
fn load(spec: &ProgramSpec<'_>) -> (OwnedFd, ProgInfo) {
    let fd = bpf::load_program(spec).unwrap_or_else(|err| panic!("{err}"));
    let id = bpf::prog_id(fd.as_fd()).expect("prog id");
    let info = bpf::capture_prog(id).expect("capture").expect("loaded");
    (fd, info)
}

/// The names `/proc/kallsyms` gives BPF symbols at `addr`.
fn kallsyms_names(kallsyms: &str, addr: u64) -> BTreeSet<String> {
    kallsyms
        .lines()
        .filter(|line| line.ends_with("\t[bpf]"))
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let at = u64::from_str_radix(fields.next()?, 16).ok()?;
            let name = fields.nth(1)?;
            (at == addr).then(|| name.to_string())
        })
        .collect()
}

/// libbpf-rs's view of program `id`, read by its own code.
fn libbpf_view(id: u32) -> ProgramInfo {
    ProgInfoIter::with_query_opts(ProgInfoQueryOptions::default().include_all())
        .find(|prog| prog.id == id)
        .expect("libbpf-rs finds the program")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Name, type, tag, sub-programs and their symbols of one loaded program.
fn check_program(spec: ProgramSpec<'_>, subprograms: usize) {
    let (fd, prog) = load(&spec);
    assert_eq!(prog.name, spec.name);
    assert_eq!(prog.prog_type, spec.prog_type);
    assert_eq!(prog.jited_ksyms.len(), subprograms);
    assert_eq!(prog.jited_func_lens.len(), subprograms);
    assert_eq!(prog.prog_tags.len(), subprograms);
    assert_ne!(prog.btf_id, 0);
    let theirs = libbpf_view(prog.id);
    assert_eq!(theirs.tag.0, prog.tag);
    assert_eq!(theirs.ty as u32, prog.prog_type);
    assert_eq!(theirs.btf_id, prog.btf_id);
    let addrs: Vec<u64> = theirs.jited_ksyms.iter().map(|&p| p as u64).collect();
    assert_eq!(addrs, prog.jited_ksyms);
    assert_eq!(theirs.jited_func_lens, prog.jited_func_lens);
    let tags: Vec<[u8; 8]> = theirs.prog_tags.iter().map(|t| t.0).collect();
    assert_eq!(tags, prog.prog_tags);
    assert_eq!(theirs.jited_prog_insns, prog.array(BpilArray::JitedInsns));
    let image_len: u32 = prog.jited_func_lens.iter().sum();
    assert_eq!(prog.array(BpilArray::JitedInsns).len(), image_len as usize);
    assert_eq!(
        prog.array(BpilArray::FuncInfo).len(),
        8 * spec.func_names.len()
    );
    assert_eq!(
        prog.array(BpilArray::LineInfo).len(),
        16 * spec.func_names.len()
    );
    assert_eq!(
        prog.array(BpilArray::JitedLineInfo).len(),
        8 * spec.func_names.len()
    );
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").expect("reading /proc/kallsyms");
    for (index, (&addr, name)) in prog
        .jited_ksyms
        .iter()
        .zip(&prog.ksym_names().unwrap())
        .enumerate()
    {
        // The first symbol is the program itself, under the program's tag.
        let tag = if index == 0 {
            prog.tag
        } else {
            prog.prog_tags[index]
        };
        let expected = format!("bpf_prog_{}_{}", hex(&tag), spec.func_names[index].1);
        assert_eq!(name, &expected);
        assert_eq!(kallsyms_names(&kallsyms, addr), BTreeSet::from([expected]));
    }
    let id = prog.id;
    drop(fd);
    assert_gone(id);
}

/// Once its last fd is closed, the program is unloaded: capture says `None`.
fn assert_gone(id: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match bpf::capture_prog(id).expect("capture of an unloaded id") {
            None => return,
            Some(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Some(_) => panic!("program {id} still loaded 5 s after its fd was closed"),
        }
    }
}

#[test]
fn return_zero_is_captured() {
    if shardrec_testkit::require_root() {
        check_program(test_programs::return_zero(), 1);
    }
}

#[test]
fn subprogram_has_two_named_symbols() {
    if shardrec_testkit::require_root() {
        check_program(test_programs::with_subprogram(), 2);
    }
}

/// Runs `with` on the spec of a socket filter of 80 sub-programs
/// ([`test_programs::many_functions`]).
fn with_many_functions<R>(with: impl FnOnce(ProgramSpec<'_>) -> R) -> R {
    let (insns, names) = test_programs::many_functions(80);
    let names: Vec<(u32, &str)> = names.iter().map(|(at, n)| (*at, n.as_str())).collect();
    with(ProgramSpec {
        prog_type: prog_type::SOCKET_FILTER,
        name: "shardrec_many",
        insns: &insns,
        license: "GPL",
        func_names: &names,
    })
}

#[test]
fn a_program_of_many_functions_is_captured_whole() {
    with_many_functions(|spec| check_program(spec, 81));
}

#[test]
fn captures_through_one_scratch_equal_fresh_ones() {
    if !shardrec_testkit::require_root() {
        return;
    }
    // The large program first, so the small ones land in buffers that
    // hold its bytes beyond theirs.
    let mut scratch = bpf::CaptureScratch::default();
    with_many_functions(|many| {
        let specs = [
            many,
            test_programs::with_subprogram(),
            test_programs::return_zero(),
        ];
        specs
            .iter()
            .for_each(|spec| same_through(&mut scratch, spec));
    });
}

/// Captures `spec` loaded, both fresh and through `scratch`, and compares.
fn same_through(scratch: &mut bpf::CaptureScratch, spec: &ProgramSpec<'_>) {
    let (fd, fresh) = load(spec);
    let held = bpf::hold_prog(fresh.id).unwrap().expect("loaded");
    let reused = held.capture_with(scratch).expect("capture");
    // The info holds this process's buffer addresses: compare the rest.
    assert_eq!(reused.arrays, fresh.arrays, "{}", spec.name);
    assert_eq!(reused.btf, fresh.btf, "{}", spec.name);
    assert_eq!(reused.info.len(), fresh.info.len());
    assert_eq!(
        (reused.jited_ksyms, reused.prog_tags, reused.name),
        (fresh.jited_ksyms, fresh.prog_tags, fresh.name)
    );
    drop(fd);
}

#[test]
fn hot_loop_is_captured() {
    if shardrec_testkit::require_root() {
        check_program(test_programs::hot_loop(), 1);
    }
}

#[test]
fn walk_finds_loaded_program_and_btf_reads() {
    if !shardrec_testkit::require_root() {
        return;
    }
    let (_fd, prog) = load(&test_programs::return_zero());
    let mut ids = Vec::new();
    let mut id = 0;
    while let Some(next) = bpf::next_prog_id(id).expect("next id") {
        assert!(next > id, "ids ascend");
        ids.push(next);
        id = next;
    }
    assert!(ids.contains(&prog.id), "{} not in {ids:?}", prog.id);
    let btf = bpf::btf_data(prog.btf_id)
        .expect("btf")
        .expect("btf exists");
    assert_eq!(u16::from_ne_bytes([btf[0], btf[1]]), 0xeb9f);
    assert_eq!(prog.btf.as_ref(), Some(&btf));
    let needle = b"shardrec_zero\0";
    assert!(btf.windows(needle.len()).any(|w| w == needle));
    assert_eq!(bpf::btf_data(u32::MAX).expect("absent btf"), None);
}

#[test]
fn programs_without_btf_are_named_after_themselves() {
    if !shardrec_testkit::require_root() {
        return;
    }
    let kallsyms_of = |prog: &ProgInfo| {
        let kallsyms = std::fs::read_to_string("/proc/kallsyms").expect("reading /proc/kallsyms");
        let names = |addr| {
            kallsyms_names(&kallsyms, addr)
                .into_iter()
                .collect::<Vec<_>>()
        };
        prog.jited_ksyms
            .iter()
            .flat_map(|&addr| names(addr))
            .collect::<Vec<_>>()
    };
    let single = ProgramSpec {
        func_names: &[],
        name: "shardrec_nobtf",
        ..test_programs::return_zero()
    };
    let (_single_fd, prog) = load(&single);
    assert_eq!(prog.btf_id, 0);
    assert!(prog.array(BpilArray::FuncInfo).is_empty());
    let expected = format!("bpf_prog_{}_shardrec_nobtf", hex(&prog.tag));
    assert_eq!(prog.ksym_names().unwrap(), [expected]);
    assert_eq!(kallsyms_of(&prog), prog.ksym_names().unwrap());
    // Without BTF, sub-programs are all called "F"; the program keeps its name.
    let calls = ProgramSpec {
        func_names: &[],
        ..test_programs::with_subprogram()
    };
    let (_calls_fd, prog) = load(&calls);
    let expected = [
        format!("bpf_prog_{}_shardrec_call", hex(&prog.tag)),
        format!("bpf_prog_{}_F", hex(&prog.prog_tags[1])),
    ];
    assert_eq!(prog.ksym_names().unwrap(), expected);
    assert_eq!(kallsyms_of(&prog), prog.ksym_names().unwrap());
}

#[test]
fn refused_program_says_why() {
    if !shardrec_testkit::require_root() {
        return;
    }
    let spec = ProgramSpec {
        insns: &[bpf::insn::exit()], // r0 is never set
        func_names: &[],
        ..test_programs::return_zero()
    };
    let err = bpf::load_program(&spec).expect_err("the verifier refuses");
    let message = err.to_string();
    assert!(message.contains("shardrec_zero"), "{message}");
    assert!(message.contains("R0"), "{message}");
}

/// Attaches `spec` to the `getppid` entry tracepoint, makes `calls` calls
/// with run-time statistics on, and returns the program's runs and its
/// mean time per run in ns.
fn time_per_run(root: &std::path::Path, spec: &ProgramSpec<'_>, calls: u32) -> (u64, u64) {
    let tp = tracefs::tracepoint_id(root, "syscalls", "sys_enter_getppid").expect("tracepoint id");
    let (fd, _) = load(spec);
    let event = PerfEvent::open(
        &Attr::new(PERF_TYPE_TRACEPOINT, tp),
        Target { pid: 0, cpu: -1 },
    )
    .expect("tracepoint event");
    event.set_bpf(fd.as_fd()).expect("PERF_EVENT_IOC_SET_BPF");
    event.enable().expect("enable");
    let stats = bpf::enable_stats().expect("run-time statistics");
    for _ in 0..calls {
        // SAFETY: getppid has no arguments and cannot fail.
        unsafe { libc::getppid() };
    }
    let prog = bpf::capture_prog(bpf::prog_id(fd.as_fd()).unwrap())
        .unwrap()
        .unwrap();
    drop(stats);
    assert_eq!(prog_type::TRACEPOINT, prog.prog_type);
    (prog.run_cnt, prog.run_time_ns / prog.run_cnt.max(1))
}

#[test]
fn hot_loop_runs_long_on_a_tracepoint() {
    if !shardrec_testkit::require_root() {
        return;
    }
    let root = tracefs::root().expect("tracefs");
    let (runs, per_run) = time_per_run(&root, &test_programs::hot_loop(), 200);
    assert!(runs >= 200, "ran {runs} times");
    // What "long" means depends on the CPU, so the yardstick is a program
    // that only returns, timed the same way on the same host: the kernel's
    // own cost per run (clock reads, the call) is in both, and the hot
    // loop's 10,000 iterations should dwarf it (90 times over on the test VM).
    let trivial = ProgramSpec {
        prog_type: prog_type::TRACEPOINT,
        name: "shardrec_ret0",
        insns: &[bpf::insn::mov64_imm(0, 0), bpf::insn::exit()],
        func_names: &[],
        ..test_programs::hot_loop()
    };
    let (trivial_runs, trivial_per_run) = time_per_run(&root, &trivial, 200);
    assert!(
        trivial_runs >= 200,
        "the trivial program ran {trivial_runs} times"
    );
    eprintln!("{runs} runs, {per_run} ns each; trivial: {trivial_per_run} ns each");
    assert!(
        per_run >= 10 * trivial_per_run.max(1),
        "{per_run} ns a run against {trivial_per_run} ns for a trivial program is not a hot loop"
    );
}
