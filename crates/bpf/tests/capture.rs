//! The capture program against the kernel: programs loaded and unloaded
//! at once are all captured, and programs that stay are captured as the
//! syscall path reads them, to the byte of what perf.data keeps.
//!
//! It attaches with fentry or a kprobe, which some kernels refuse (the CI
//! host's takes no fentry program and has no kprobes): there the test
//! checks that starting fails with the kernel's reasons, which is when the
//! VIP's bpf(2) path captures alone. The many-CPU rig runs this test in
//! its Debian 6.1 guest, which has kprobes, with
//! `SHARDREC_CAPTURE_MUST_ATTACH=1`: there it must attach.

use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::time::Duration;

use shardrec_bpf::capture::{Capture, Hook};
use shardrec_bpf::off_cpu::{OffCpu, Settings};
use shardrec_perfdata::bpf_info::bpil;
use shardrec_sys::bpf::captured::RecordedProgram;
use shardrec_sys::bpf::{self, test_programs, BpilArray, ProgInfo};

/// What perf.data keeps of a program: its `perf_bpil` block and its BTF.
fn as_perf_keeps(info: &ProgInfo) -> (Vec<u8>, Option<Vec<u8>>) {
    (bpil(&info.info, &info.arrays_by_bit()), info.btf.clone())
}

#[test]
fn programs_unloaded_the_moment_they_load_are_all_captured() {
    if !shardrec_testkit::require_root() {
        return;
    }
    let (mut fentry, mut kprobe) = (MaybeUninit::uninit(), MaybeUninit::uninit());
    let must_attach = std::env::var_os("SHARDREC_CAPTURE_MUST_ATTACH").is_some();
    let mut capture = match Capture::start(&mut fentry, &mut kprobe) {
        Ok(capture) => capture,
        Err(refused) => {
            let kprobes = std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists();
            assert!(
                !must_attach && !kprobes,
                "a kernel with kprobes refused the capture program: {refused}"
            );
            for error in [&refused.fentry, &refused.kprobe] {
                let message = error.to_string();
                assert!(
                    message.starts_with("loading the capture program")
                        || message.starts_with("attaching the capture program"),
                    "{message}"
                );
            }
            return;
        }
    };
    eprintln!("the capture program hooks with {:?}", capture.hook());
    check(&mut capture);
}

/// Where the kernel takes fentry, the kprobe is the fallback: it must
/// capture as well (the guest's kernel takes both).
#[test]
fn the_kprobe_captures_as_fentry_does() {
    if !shardrec_testkit::require_root() {
        return;
    }
    let mut storage = MaybeUninit::uninit();
    let must_attach = std::env::var_os("SHARDREC_CAPTURE_MUST_ATTACH").is_some();
    let attached = Capture::load(&mut storage, Hook::Kprobe).and_then(|mut capture| {
        capture.attach()?;
        Ok(capture)
    });
    match attached {
        Ok(mut capture) => check(&mut capture),
        Err(error) => {
            let kprobes = std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists();
            assert!(!must_attach && !kprobes, "{error}");
        }
    }
}

/// 100 programs, each closed (and so unloaded) as soon as it is loaded,
/// all captured whole; programs that stay captured as bpf(2) reads them.
fn check(capture: &mut Capture<'_>) {
    // Half of one function, half of two.
    let mut ids = Vec::new();
    for i in 0..100 {
        let spec = match i % 2 {
            0 => test_programs::return_zero(),
            _ => test_programs::with_subprogram(),
        };
        let prog = bpf::load_program(&spec).unwrap();
        ids.push((bpf::prog_id(prog.as_fd()).unwrap(), spec.name, i % 2 + 1));
    }
    // Programs that stay, to compare with what bpf(2) gives: one of two
    // functions, and the off-CPU program's, which clang built with line
    // info.
    let kept = bpf::load_program(&test_programs::with_subprogram()).unwrap();
    let kept_id = bpf::prog_id(kept.as_fd()).unwrap();
    let mut storage = MaybeUninit::uninit();
    let settings = Settings {
        follow_all: false,
        follow_children: false,
        follow_threads: false,
        threshold_ns: 0,
        user_stack_bytes: 0,
    };
    let off_cpu = OffCpu::load(&mut storage, &settings).unwrap();
    capture.drain(Duration::from_millis(100)).unwrap();
    let captured = capture.captured();
    for (id, name, functions) in &ids {
        let recorded = captured
            .programs
            .get(id)
            .unwrap_or_else(|| panic!("program {id} ({name}) was not captured"));
        let program = &recorded.program;
        assert_eq!(program.loaded.name, *name);
        assert_eq!(program.loaded.functions.len(), *functions, "{program:?}");
        assert!(program.is_whole(), "{program:?}");
        assert!(program.loaded.btf_id > 0, "{name} is loaded with BTF");
    }
    assert_eq!(capture.lost(), 0);
    let switch = captured
        .programs
        .values()
        .find(|p| p.program.loaded.name == "off_cpu_switch")
        .expect("the off-CPU program captured");
    let switch_id = switch.program.loaded.id;
    for id in [kept_id, switch_id] {
        // Put together from the records as they came, as the merge does.
        let records = &captured.programs[&id].records;
        let program = RecordedProgram::assemble(records).expect("whole records");
        let syscall = bpf::capture_prog(id).unwrap().expect("a kept program");
        let name = program.loaded.name.clone();
        let image = program.image();
        let loaded = (program.clone().into_loaded()).unwrap_or_else(|| panic!("{program:?}"));
        let mut in_kernel = ProgInfo::from_loaded(loaded).unwrap();
        assert_eq!(image, syscall.array(BpilArray::JitedInsns));
        if id == switch_id {
            assert!(!syscall.array(BpilArray::LineInfo).is_empty(), "line info");
        }
        // A BTF object comes once, with the first program that has it.
        if in_kernel.btf.is_none() {
            in_kernel.btf = syscall.btf.clone();
        }
        assert_eq!(
            as_perf_keeps(&in_kernel),
            as_perf_keeps(&syscall),
            "program {id} ({name}): in the kernel {in_kernel:?}, by bpf(2) {syscall:?}"
        );
    }
    drop(off_cpu);
}
