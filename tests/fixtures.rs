//! Recordings checked in under `tests/fixtures/`, damaged as a crash or a
//! bad disk leaves them, merged without root. Both come from one
//! recording, `shardrec record --no-merge -e cpu-clock -F 200 --
//! shardrec-load spin 0.1` on two CPUs (19 samples in each shard), then:
//!
//! - `torn`: `cpu001.shard` cut in the middle of its last record (an EXIT);
//! - `garbled`: the third record of `cpu000.shard` given a size that is
//!   not a multiple of 8.

mod common;

use std::path::Path;

use common::*;
use shardrec_shard::RecordingDir;

/// Merges `tests/fixtures/NAME` and returns its stderr and the samples
/// perf script finds in the output.
fn merge_fixture(name: &str) -> (String, usize) {
    let scratch = Scratch::new(&format!("fixture-{name}"));
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let mut command = shardrec();
    command
        .args(["merge", "-q"])
        .arg(&dir)
        .arg("-o")
        .arg(scratch.output());
    let output = run(command);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    let script = perf(&["script", "-F", "time"], &scratch.output());
    (
        stderr,
        String::from_utf8_lossy(&script.stdout).lines().count(),
    )
}

#[test]
fn a_torn_tail_loses_only_the_cut_record() {
    let (stderr, samples) = merge_fixture("torn");
    assert_eq!(
        stderr.trim_end(),
        "shardrec: warning: shard cpu001.shard is cut at byte 2016: 32 bytes dropped (record runs past the end)"
    );
    assert_eq!(samples, 38);
}

#[test]
fn a_garbled_header_ends_its_shard_and_the_rest_merges() {
    let (stderr, samples) = merge_fixture("garbled");
    assert_eq!(
        stderr.trim_end(),
        "shardrec: warning: shard cpu000.shard is cut at byte 112: 1016 bytes dropped (record size not a multiple of 8)"
    );
    assert_eq!(samples, 2 + 19);
}

/// The fixtures' `meta` predates the stop reason's code (it holds only
/// "workload exited", as shardrec wrote it then): it still reads as that
/// reason, with the stop's figures beside it.
#[test]
fn a_meta_written_before_stop_codes_still_reads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torn");
    let meta = RecordingDir::open(&dir)
        .read_meta()
        .expect("the fixture's meta");
    let stats = meta.stats.expect("the stop's figures");
    assert_eq!(stats.stopped_by, shardrec_shard::StopReason::WorkloadExited);
    assert_eq!(stats.cpus.len(), 2);
}
