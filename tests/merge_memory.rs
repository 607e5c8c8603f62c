//! The merge streams: a 2 GB recording merges within 256 MB of resident
//! memory. In its own test binary, so the children's peak RSS that
//! getrusage reports is this test's alone.

mod common;

use common::*;
use nix::sys::resource::{getrusage, UsageWho};

#[test]
fn a_two_gigabyte_recording_merges_in_bounded_memory() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new("merge-memory");
    // DWARF stack copies at 20 kHz on every CPU (100-160 MB/s per CPU
    // here) until the recording holds 2.1 GB: --max-size stops it there,
    // however long the host takes, as long as the spin outlasts it (the
    // run's watchdog is two minutes).
    let mut command = shardrec();
    command
        .args(["record", "-q", "--no-merge", "-o"])
        .arg(scratch.output())
        .args(["-a", "-F", "20000", "--call-graph", "dwarf"])
        .args(["--max-size", "2100M", "--", load(), "spin", "100"]);
    let output = run(command);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // As perf: the workload still running is ended with SIGTERM, and its
    // status is the recorder's.
    assert_eq!(output.status.code(), Some(128 + 15), "{stderr}");
    let meta = shardrec_shard::RecordingDir::open(scratch.shards())
        .read_meta()
        .unwrap();
    let stats = meta.stats.unwrap();
    assert_eq!(
        stats.stopped_by,
        shardrec_shard::StopReason::SizeLimit(2100 << 20),
        "{stderr}"
    );
    let bytes: u64 = stats.cpus.iter().map(|c| c.bytes).sum();
    assert!(
        bytes >= 2_000_000_000,
        "recorded only {bytes} bytes; the test needs 2 GB"
    );
    let samples: u64 = stats.cpus.iter().map(|c| c.samples).sum();

    let output = merge(&scratch);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("({samples} samples)")), "{stderr}");
    let peak_kb = getrusage(UsageWho::RUSAGE_CHILDREN).unwrap().max_rss();
    eprintln!(
        "merged {bytes} bytes with a peak RSS of {} MB",
        peak_kb / 1024
    );
    assert!(peak_kb < 256 * 1024, "peak RSS {} MB", peak_kb / 1024);
}
