//! What shardrec says when the kernel cannot give it what it needs. In its
//! own test binary: it changes a machine-wide sysctl for a moment.

mod common;

use common::*;

/// Sets a sysctl and puts the old value back on drop.
struct Sysctl {
    path: &'static str,
    old: String,
}

impl Sysctl {
    fn set(path: &'static str, value: &str) -> Option<Sysctl> {
        let old = std::fs::read_to_string(path).ok()?;
        std::fs::write(path, value).ok()?;
        Some(Sysctl { path, old })
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path, self.old.trim());
    }
}

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
