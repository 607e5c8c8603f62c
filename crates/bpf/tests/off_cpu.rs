//! The off-CPU program against the kernel: a shell that waits on a pipe
//! and then for `sleep 0.3`, followed with its children; each wait read
//! back from the CPUs' BPF output events as the program wrote it.

use std::io::Write;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::time::Duration;

use shardrec_bpf::off_cpu::{OffCpu, Settings};
use shardrec_format::header::RecordType;
use shardrec_format::sample_id::{CPU, RAW, TID, TIME};
use shardrec_format::views::{sample_raw, OffCpuWait};
use shardrec_format::walk::RecordWalker;
use shardrec_sys::abi::PERF_COUNT_SW_BPF_OUTPUT;
use shardrec_sys::{Attr, PerfEvent, RingBuffer, Target};

const SAMPLE_TYPE: u64 = TID | TIME | CPU | RAW;

/// A BPF output event and its ring on every online CPU.
fn output_events() -> Vec<(u32, PerfEvent, RingBuffer)> {
    let mut attr = Attr::software(PERF_COUNT_SW_BPF_OUTPUT as u64);
    attr.set_sample_type(SAMPLE_TYPE);
    attr.set_period(1);
    shardrec_sys::cpu::online()
        .unwrap()
        .into_iter()
        .map(|cpu| {
            let event = PerfEvent::open(&attr, Target::cpu(cpu)).expect("a BPF output event");
            let ring = RingBuffer::map(&event, 64).unwrap();
            event.enable().unwrap();
            (cpu, event, ring)
        })
        .collect()
}

/// (pid, tid, period, kernel frames, user frames) of each wait written.
fn waits(rings: &[(u32, PerfEvent, RingBuffer)]) -> Vec<(u32, u32, u64, usize, usize)> {
    let mut found = Vec::new();
    for (_, _, ring) in rings {
        let bytes = ring.consume(|[first, second]| [first, second].concat());
        for record in RecordWalker::new(&bytes) {
            if record.header.type_ != RecordType::SAMPLE {
                continue;
            }
            let raw = sample_raw(SAMPLE_TYPE, record.bytes).expect("raw data");
            let wait = OffCpuWait::parse(raw).expect("a wait");
            found.push((
                wait.pid,
                wait.tid,
                wait.period,
                wait.kernel_frames().count(),
                wait.user_frames().count(),
            ));
        }
    }
    found
}

#[test]
fn each_wait_is_written_as_it_ends_with_its_stacks() {
    if !shardrec_testkit::require_root() {
        return;
    }
    let rings = output_events();
    let mut storage = MaybeUninit::uninit();
    let settings = Settings {
        follow_all: false,
        follow_children: true,
        follow_threads: false,
        threshold_ns: 0,
        user_stack_bytes: 0,
    };
    let mut off_cpu = OffCpu::load(&mut storage, &settings).unwrap_or_else(|e| panic!("{e}"));
    for (cpu, event, _) in &rings {
        off_cpu.write_to(*cpu, event.as_fd()).unwrap();
    }
    off_cpu.attach().unwrap();
    // The first line lets the shell on once it is followed; it then waits
    // 200 ms for the second, and 300 ms for sleep (a child it starts).
    let mut shell = Command::new("sh")
        .args(["-c", "read x; read y; sleep 0.3"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let sh = shell.id();
    off_cpu.follow(sh).unwrap();
    let mut stdin = shell.stdin.take().unwrap();
    stdin.write_all(b"1\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    stdin.write_all(b"2\n").unwrap();
    assert!(shell.wait().unwrap().success());
    let found = waits(&rings);
    let ms = |ns: u64| ns / 1_000_000;
    let read = found
        .iter()
        .find(|w| w.0 == sh && (180..1000).contains(&ms(w.2)));
    let (_, _, _, kernel, user) = read.unwrap_or_else(|| panic!("no 200 ms read in {found:?}"));
    assert!(*kernel > 2 && *user > 0, "the read's stacks: {found:?}");
    let sleep = found
        .iter()
        .find(|w| w.0 != sh && (295..600).contains(&ms(w.2)));
    assert!(sleep.is_some(), "no 300 ms sleep of the child in {found:?}");
    // Every wait written was read: none lost, none refused.
    let counts = off_cpu.counts().unwrap();
    assert_eq!(counts.written, found.len() as u64, "{counts:?}");
    assert_eq!(counts.failed, 0, "{counts:?}");
}
