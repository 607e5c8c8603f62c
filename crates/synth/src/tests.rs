//! Tests against the real `/proc` and `/proc/kallsyms`.

use crate::{SynthStats, Synthesizer, Tasks};
use shardrec_format::header::{RecordType, MISC_KERNEL, MISC_USER};
use shardrec_format::sample_id::{CPU, ID, IDENTIFIER, TID, TIME};
use shardrec_format::views::{Comm, Mmap, Task};
use shardrec_format::walk::{End, Record, RecordWalker};
use shardrec_format::SampleIdLayout;
use std::io::{self, Write};

const SAMPLE_TYPE: u64 = IDENTIFIER | TID | TIME | ID | CPU;
const EVENT_ID: u64 = 77;

fn own_pid() -> u32 {
    std::process::id()
}

fn synthesize(synth: &Synthesizer, tasks: &Tasks) -> (Vec<u8>, SynthStats) {
    let mut out = Vec::new();
    let stats = synth.tasks(tasks, &mut out).unwrap();
    (out, stats)
}

/// Every record, checking the walk ends clean and the counts match.
fn records<'a>(bytes: &'a [u8], stats: &SynthStats) -> Vec<Record<'a>> {
    let mut walker = RecordWalker::new(bytes);
    let records: Vec<_> = walker.by_ref().collect();
    assert_eq!(walker.end(), End::Clean);
    assert_eq!(records.len() as u64, stats.records);
    assert_eq!(bytes.len() as u64, stats.bytes);
    records
}

fn own_records() -> (Vec<u8>, SynthStats) {
    let synth = Synthesizer::new(SAMPLE_TYPE, EVENT_ID);
    synthesize(&synth, &Tasks::Processes(vec![own_pid() as i32]))
}

#[test]
fn describes_our_own_process() {
    let (bytes, stats) = own_records();
    let records = records(&bytes, &stats);
    let layout = SampleIdLayout::new(SAMPLE_TYPE);
    let pid = own_pid();
    for record in &records {
        let id = layout.parse(record.bytes, record.header.type_).unwrap();
        assert_eq!((id.pid, id.id, id.time), (pid, EVENT_ID, 0));
    }
    let fork = records
        .iter()
        .filter(|r| r.header.type_ == RecordType::FORK)
        .filter_map(|r| Task::parse(r.bytes))
        .find(|task| task.tid == pid)
        .expect("a FORK for our main thread");
    assert_eq!(fork.pid, pid);
    let comm = std::fs::read(format!("/proc/{pid}/comm")).unwrap();
    assert!(records
        .iter()
        .filter(|r| r.header.type_ == RecordType::COMM)
        .filter_map(|r| Comm::parse(r.bytes))
        .any(|c| c.tid == pid && c.comm == comm.trim_ascii_end()));
    let exe = std::env::current_exe().unwrap();
    let exe = exe.as_os_str().as_encoded_bytes();
    let exe_map = records
        .iter()
        .find(|r| Mmap::parse(r.header, r.bytes).is_some_and(|m| m.filename == exe))
        .expect("an MMAP2 of our executable");
    assert_eq!(exe_map.header.type_, RecordType::MMAP2);
    assert_eq!(exe_map.header.misc, MISC_USER);
    // Other tests' threads may exit mid-walk and be skipped, nothing else.
    assert_eq!(stats.processes, 1);
}

#[test]
fn other_threads_descend_from_the_main_thread() {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        ready_tx
            .send(nix::unistd::gettid().as_raw() as u32)
            .unwrap();
        let _ = done_rx.recv();
    });
    let tid = ready_rx.recv().unwrap();
    let (bytes, stats) = own_records();
    done_tx.send(()).unwrap();
    thread.join().unwrap();
    let pid = own_pid();
    let forks: Vec<[u32; 4]> = records(&bytes, &stats)
        .iter()
        .filter(|r| r.header.type_ == RecordType::FORK)
        .filter_map(|r| Task::parse(r.bytes))
        .map(|t| [t.pid, t.ppid, t.tid, t.ptid])
        .collect();
    assert!(forks.contains(&[pid, pid, tid, pid]), "{forks:?}");
    assert!(stats.threads >= 2);
}

#[test]
fn kernel_map_spans_the_kernel_text() {
    let mut bytes = Vec::new();
    let synth = Synthesizer::new(SAMPLE_TYPE, EVENT_ID);
    let stats = synth.kernel(&mut bytes).unwrap();
    let records = records(&bytes, &stats);
    let kernel: Vec<_> = records
        .iter()
        .filter(|r| r.header.type_ == RecordType::MMAP)
        .filter(|r| {
            Mmap::parse(r.header, r.bytes).is_some_and(|m| m.filename == b"[kernel.kallsyms]_text")
        })
        .collect();
    assert_eq!(kernel.len(), 1);
    let record = kernel[0];
    assert_eq!(record.header.misc, MISC_KERNEL);
    let map = Mmap::parse(record.header, record.bytes).unwrap();
    assert_eq!(map.pid, u32::MAX);
    let start = map.start;
    assert_ne!(start, 0, "kallsyms hides addresses: not running as root?");
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let etext = kallsyms
        .lines()
        .find_map(|l| l.strip_suffix(" T _etext"))
        .map(|a| u64::from_str_radix(a, 16).unwrap())
        .expect("_etext in kallsyms");
    assert_eq!(map.len, etext - start);
    assert_eq!(map.pgoff, start);
    let id = SampleIdLayout::new(SAMPLE_TYPE)
        .parse(record.bytes, RecordType::MMAP)
        .unwrap();
    assert_eq!((id.pid, id.tid, id.id), (u32::MAX, 0, EVENT_ID));
}

#[test]
fn a_held_workload_is_only_a_perf_exec_comm() {
    let pid = own_pid();
    let synth = Synthesizer::new(SAMPLE_TYPE, EVENT_ID).with_held_workload(pid as i32);
    for tasks in [Tasks::All, Tasks::Processes(vec![pid as i32])] {
        let (bytes, stats) = synthesize(&synth, &tasks);
        let layout = SampleIdLayout::new(SAMPLE_TYPE);
        let ours: Vec<_> = records(&bytes, &stats)
            .into_iter()
            .filter(|r| layout.parse(r.bytes, r.header.type_).unwrap().pid == pid)
            .collect();
        assert_eq!(ours.len(), 1, "{tasks:?}");
        assert_eq!(ours[0].header.type_, RecordType::COMM);
        assert_eq!(
            Comm::parse(ours[0].bytes).unwrap().comm,
            crate::HELD_WORKLOAD_COMM.to_bytes()
        );
    }
}

#[test]
fn vanished_process_is_skipped() {
    let synth = Synthesizer::new(SAMPLE_TYPE, EVENT_ID);
    let (bytes, stats) = synthesize(&synth, &Tasks::Processes(vec![i32::MAX]));
    assert!(bytes.is_empty());
    assert_eq!((stats.skipped, stats.records), (1, 0));
}

#[test]
fn parallel_walk_keeps_processes_together() {
    let synth = Synthesizer::new(SAMPLE_TYPE, EVENT_ID).with_threads(3);
    let (bytes, stats) = synthesize(&synth, &Tasks::All);
    let layout = SampleIdLayout::new(SAMPLE_TYPE);
    let mut seen = std::collections::HashSet::new();
    let mut last = None;
    for record in records(&bytes, &stats) {
        let pid = layout.parse(record.bytes, record.header.type_).unwrap().pid;
        if last != Some(pid) {
            assert!(seen.insert(pid), "records of {pid} are split");
            last = Some(pid);
        }
    }
    assert!(seen.contains(&own_pid()));
    assert_eq!(seen.len() as u64, stats.processes);
}

struct Broken;

impl Write for Broken {
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(io::Error::other("disk full"))
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn writer_errors_are_returned() {
    for threads in [1, 2] {
        let synth = Synthesizer::new(SAMPLE_TYPE, EVENT_ID).with_threads(threads);
        let error = synth.tasks(&Tasks::All, &mut Broken).unwrap_err();
        assert_eq!(error.to_string(), "disk full");
    }
}
