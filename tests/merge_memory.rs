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
    // DWARF stack copies at 20 kHz on every CPU: 100-160 MB/s per CPU, so
    // 12 s leave a margin over 2 GB on a loaded machine.
    record(
        &scratch,
        &[
            "-a",
            "-F",
            "20000",
            "--call-graph",
            "dwarf",
            "--",
            load(),
            "spin",
            "12",
        ],
    );
    let meta = shardrec_shard::RecordingDir::open(scratch.shards())
        .read_meta()
        .unwrap();
    let stats = meta.stats.unwrap();
    let bytes: u64 = stats.cpus.iter().map(|c| c.bytes).sum();
    assert!(
        bytes >= 2_000_000_000,
        "recorded only {bytes} bytes; the test needs 2 GB"
    );
    let samples: u64 = stats.cpus.iter().map(|c| c.samples).sum();

    let mut merge = shardrec();
    merge
        .arg("merge")
        .arg(scratch.shards())
        .arg("-o")
        .arg(scratch.output());
    let output = run(merge);
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
