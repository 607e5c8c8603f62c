//! The capture program against the kernel: programs loaded and unloaded
//! at once are all captured, and a program that stays is captured with
//! the image the syscall path reads.
//!
//! It attaches with a kprobe, which some kernels lack (the CI host's has
//! no kprobes): there the test checks that attaching fails with the
//! kernel's reason, which is when the VIP's bpf(2) path captures alone.
//! The many-CPU rig runs this test in its Debian 6.1 guest, which has
//! kprobes, with `SHARDREC_CAPTURE_MUST_ATTACH=1`: there it must attach.

use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::time::Duration;

use shardrec_bpf::capture::{Capture, Captured};
use shardrec_sys::bpf::{self, test_programs, BpilArray};

#[test]
fn programs_unloaded_the_moment_they_load_are_all_captured() {
    if !shardrec_testkit::require_root() {
        return;
    }
    let mut storage = MaybeUninit::uninit();
    let mut capture = Capture::load(&mut storage).unwrap_or_else(|e| panic!("{e}"));
    let must_attach = std::env::var_os("SHARDREC_CAPTURE_MUST_ATTACH").is_some();
    if let Err(error) = capture.attach() {
        let kprobes = std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists();
        assert!(
            !must_attach && !kprobes,
            "a kernel with kprobes refused the capture program: {error}"
        );
        let message = error.to_string();
        assert!(
            message.starts_with("attaching the capture program"),
            "{message}"
        );
        return;
    }
    // 100 programs, each closed (and so unloaded) as soon as it is loaded:
    // half of one function, half of two.
    let mut ids = Vec::new();
    for i in 0..100 {
        let spec = match i % 2 {
            0 => test_programs::return_zero(),
            _ => test_programs::with_subprogram(),
        };
        let prog = bpf::load_program(&spec).unwrap();
        ids.push((bpf::prog_id(prog.as_fd()).unwrap(), spec.name, i % 2 + 1));
    }
    // One that stays, to compare with what bpf(2) gives.
    let kept = bpf::load_program(&test_programs::with_subprogram()).unwrap();
    let kept_id = bpf::prog_id(kept.as_fd()).unwrap();
    let mut captured = Captured::default();
    capture
        .drain(&mut captured, Duration::from_millis(100))
        .unwrap();
    for (id, name, functions) in &ids {
        let program = captured
            .programs
            .get(id)
            .unwrap_or_else(|| panic!("program {id} ({name}) was not captured"));
        assert_eq!(program.name, *name);
        assert_eq!(program.functions.len(), *functions, "{program:?}");
        assert!(program.is_whole(), "{program:?}");
        assert!(program.btf_id > 0, "{name} is loaded with BTF");
    }
    assert_eq!(capture.lost(), 0);
    let info = bpf::capture_prog(kept_id)
        .unwrap()
        .expect("the kept program");
    let program = &captured.programs[&kept_id];
    assert_eq!(program.tag, info.tag);
    assert_eq!(program.image(), info.array(BpilArray::JitedInsns));
}
