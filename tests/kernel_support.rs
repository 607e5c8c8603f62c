//! What shardrec says when the kernel cannot give it what it needs. In its
//! own test binary: it changes a machine-wide sysctl for a moment.

mod common;

use common::*;
use shardrec_testkit::Sysctl;

#[test]
fn disabled_io_uring_is_named_before_anything_starts() {
    if !require_root() {
        return;
    }
    // kernel.io_uring_disabled exists from 6.6 on.
    let Some(_disabled) = Sysctl::set("/proc/sys/kernel/io_uring_disabled", "2") else {
        eprintln!("this kernel cannot disable io_uring: nothing to check");
        return;
    };
    let scratch = Scratch::new("no-uring");
    let output = shardrec()
        .args(["record", "-a", "-o"])
        .arg(scratch.output())
        .args(["--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("io_uring is disabled here (kernel.io_uring_disabled = 2)"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(!scratch.shards().exists());
}
