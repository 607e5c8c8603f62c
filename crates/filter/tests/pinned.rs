//! The pinned filter program against the kernel: loaded with its map,
//! attached to a sampling event of this thread, run on each overflow with
//! the entry the test writes under the event's id.

use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use shardrec_filter::pinned::{self, KernelLayout};
use shardrec_filter::SampleFilter;
use shardrec_sys::abi::PERF_COUNT_SW_CPU_CLOCK;
use shardrec_sys::bpf::{self, HashMap, KernelBtf};
use shardrec_sys::{Attr, PerfEvent, Target};

/// The program loaded against a fresh map.
fn load() -> (OwnedFd, HashMap) {
    let btf = KernelBtf::load().expect("the kernel's BTF");
    let layout = KernelLayout::read(&btf).expect("the kernel's layout");
    let map = HashMap::create("shardrec_test", pinned::KEY_SIZE, pinned::VALUE_SIZE, 8).unwrap();
    let prog = pinned::load(&layout, &map).unwrap_or_else(|e| panic!("{e}"));
    (prog, map)
}

/// This thread's cpu-clock every 100 µs, with `prog` attached and
/// `filter` written under the event's id, run busy for 100 ms; returns
/// what the filter kept and dropped.
fn run(prog: &OwnedFd, map: &HashMap, filter: &str) -> shardrec_filter::counters::Counts {
    let mut attr = Attr::software(PERF_COUNT_SW_CPU_CLOCK as u64);
    attr.set_period(100_000);
    let event = PerfEvent::open(&attr, Target { pid: 0, cpu: -1 }).expect("cpu-clock");
    let key = event.id().unwrap().to_ne_bytes();
    let expr = SampleFilter::parse(filter).unwrap().expr;
    map.update(&key, &pinned::entry(&expr).unwrap()).unwrap();
    event.set_bpf(prog.as_fd()).expect("PERF_EVENT_IOC_SET_BPF");
    event.enable().unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(100) {
        std::hint::black_box(0u64);
    }
    event.disable().unwrap();
    let counts = pinned::entry_counts(&map.lookup(&key).unwrap().expect("the entry"));
    map.delete(&key).unwrap();
    counts
}

#[test]
fn each_events_entry_decides_its_samples() {
    if !shardrec_testkit::require_root() {
        return;
    }
    let (prog, map) = load();
    let tid = nix::unistd::gettid().as_raw();
    let comm = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
    let cases = [
        (format!("tid == {tid}"), true),
        (format!("tid != {tid}"), false),
        ("(user || kernel)".to_string(), true),
        (format!("(cpu > 4096 || tid == {tid})"), true),
        (format!("(cpu > 4096 || tid == {})", tid + 1), false),
        (format!("comm == {}", comm.trim()), true),
        ("comm == no-such-task".to_string(), false),
        (format!("period == 100000, tid < {}", tid + 1), true),
        ("period & 1".to_string(), false),
    ];
    for (filter, keeps) in cases {
        let counts = run(&prog, &map, &filter);
        let (kept, dropped) = match keeps {
            true => (counts.kept, counts.dropped),
            false => (counts.dropped, counts.kept),
        };
        assert!(kept > 100 && dropped == 0, "{filter}: {counts:?}");
    }
}

#[test]
fn pinned_objects_outlive_their_descriptors() {
    if !shardrec_testkit::require_root() {
        return;
    }
    // A bpf file system of the test's own.
    let dir = std::env::temp_dir().join(format!("shardrec-bpffs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mount = |args: &[&str]| {
        let status = std::process::Command::new(args[0])
            .args(&args[1..])
            .status()
            .unwrap();
        assert!(status.success(), "{args:?}");
    };
    let path = dir.to_str().unwrap();
    mount(&["mount", "-t", "bpf", "shardrec-test", path]);
    let (prog, map) = load();
    let id = bpf::prog_id(prog.as_fd()).unwrap();
    bpf::pin(prog.as_fd(), &dir.join("program")).unwrap();
    bpf::pin(map.fd(), &dir.join("filters")).unwrap();
    drop((prog, map));
    let again = bpf::pinned(&dir.join("program")).unwrap();
    assert_eq!(bpf::prog_id(again.as_fd()).unwrap(), id);
    let map = HashMap::pinned(&dir.join("filters"), pinned::KEY_SIZE, pinned::VALUE_SIZE).unwrap();
    let tid = nix::unistd::gettid().as_raw();
    let counts = run(&again, &map, &format!("tid == {tid}"));
    assert!(counts.kept > 100 && counts.dropped == 0, "{counts:?}");
    drop((again, map));
    mount(&["umount", path]);
    std::fs::remove_dir(&dir).unwrap();
}
