//! What is described of the tasks that exist before recording, as perf's
//! `--synth`, `--tail-synthesize` and `--proc-map-timeout` ask: read back
//! from the recording's `synth.shard`, where shardrec writes it, and from
//! perf report.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use common::*;
use shardrec_format::header::{RecordHeader, RecordType, MISC_PROC_MAP_PARSE_TIMEOUT};
use shardrec_format::views::Comm;
use shardrec_format::walk::RecordWalker;
use shardrec_shard::RecordingDir;

/// The records of the recording's synth.shard, by type, with the names of
/// its COMM records and how many MMAP2 records say a timeout.
struct Synthesized {
    count: HashMap<RecordType, usize>,
    comms: Vec<String>,
    timed_out: usize,
}

fn synthesized(shards: &Path) -> Synthesized {
    let bytes = std::fs::read(RecordingDir::open(shards).synth_path()).expect("synth.shard");
    let mut found = Synthesized {
        count: HashMap::new(),
        comms: Vec::new(),
        timed_out: 0,
    };
    for record in RecordWalker::new(&bytes) {
        let header: RecordHeader = record.header;
        *found.count.entry(header.type_).or_default() += 1;
        if header.type_ == RecordType::COMM {
            let comm = Comm::parse(record.bytes).expect("a COMM");
            found
                .comms
                .push(String::from_utf8_lossy(comm.comm).into_owned());
        }
        if header.type_ == RecordType::MMAP2 && header.misc & MISC_PROC_MAP_PARSE_TIMEOUT != 0 {
            found.timed_out += 1;
        }
    }
    found
}

impl Synthesized {
    fn of(&self, type_: RecordType) -> usize {
        self.count.get(&type_).copied().unwrap_or(0)
    }
}

#[test]
fn synth_words_choose_the_tasks_and_their_maps_as_perfs_do() {
    let Some((_serial, scratch)) = recording_test("synth-words") else {
        return;
    };
    let mut seen = Vec::new();
    for words in ["no", "task", "mmap", "all", "no,cgroup"] {
        let _ = std::fs::remove_dir_all(scratch.shards());
        record(&scratch, &["-a", &format!("--synth={words}"), "--", "true"]);
        let found = synthesized(&scratch.shards());
        // The kernel's map is always there, as in perf.
        assert!(found.of(RecordType::MMAP) >= 1, "{words}");
        let (tasks, maps) = (found.of(RecordType::COMM), found.of(RecordType::MMAP2));
        seen.push((words, tasks, maps));
        let threads = found.of(RecordType::FORK);
        match words {
            "no" | "no,cgroup" => assert_eq!((tasks, threads, maps), (0, 0, 0), "{words}"),
            "task" => assert!(tasks > 10 && threads > 10 && maps == 0, "{words}: {seen:?}"),
            _ => assert!(tasks > 10 && maps > 10, "{words}: {seen:?}"),
        }
    }
}

#[test]
fn tail_synthesize_describes_the_tasks_alive_at_the_end() {
    let Some((_serial, scratch)) = recording_test("tail-synth") else {
        return;
    };
    // A process of a name of its own, started after the recording began
    // and still alive at its end.
    let probe = scratch.0.join("tail-probe");
    std::fs::copy("/bin/sleep", &probe).unwrap();
    let started_late = format!(
        "{} 30 </dev/null >/dev/null 2>&1 & sleep 0.3",
        probe.display()
    );
    let mut found = Vec::new();
    for tail in [false, true] {
        let _ = std::fs::remove_dir_all(scratch.shards());
        let mut args = vec!["-a", "--", "sh", "-c", &started_late];
        if tail {
            args.insert(0, "--tail-synthesize");
        }
        record(&scratch, &args);
        let _ = Command::new("pkill").arg("-x").arg("tail-probe").status();
        let comms = synthesized(&scratch.shards()).comms;
        found.push(comms.iter().any(|c| c == "tail-probe"));
    }
    assert_eq!(
        found,
        [false, true],
        "tail-probe in synth.shard without and with"
    );
    // The output, merged after the stop, reads as perf's.
    let merged = merge(&scratch);
    assert!(merged.status.success(), "{merged:?}");
    let report = perf(&["report", "--stdio", "--sort", "comm"], &scratch.output());
    assert_no_complaint(&report, "perf report of a --tail-synthesize recording");
}

#[test]
fn a_map_timeout_leaves_out_the_rest_of_the_maps_and_says_so() {
    let Some((_serial, scratch)) = recording_test("map-timeout") else {
        return;
    };
    let args = ["-a", "--proc-map-timeout", "0", "--", "true"];
    let stderr = record_and_merge(&scratch, &args);
    let found = synthesized(&scratch.shards());
    // Each process with maps gets its first one only, marked.
    assert!(found.timed_out > 0);
    assert_eq!(found.timed_out, found.of(RecordType::MMAP2));
    let warned = format!(
        "shardrec: warning: the maps of {} processes took longer than --proc-map-timeout",
        found.timed_out
    );
    assert!(stderr.contains(&warned), "{stderr}");
    let report = perf(&["report", "--stdio"], &scratch.output());
    let said = String::from_utf8_lossy(&report.stderr);
    let perfs_count = format!("{} map information files", found.timed_out);
    assert!(said.contains(&perfs_count), "perf report: {said}");
}
