//! The names a window's output takes, and how it gets there.

use std::path::{Path, PathBuf};
use std::time::Duration;

use shardrec_sys::process;

/// `output` with perf's `--timestamp-filename` suffix for now
/// (`perf.data.YYYYMMDDhhmmsscc`), never the name of a file that exists:
/// two switches within a hundredth of a second get two names.
pub fn timestamped(output: &Path) -> std::io::Result<PathBuf> {
    loop {
        let mut named = output.as_os_str().to_owned();
        named.push(format!(".{}", process::local_timestamp()?));
        let named = PathBuf::from(named);
        if named.symlink_metadata().is_err() {
            return Ok(named);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
