//! The build-id cache, as perf keeps it (`~/.debug`; perf's helper
//! scripts get it as `$PERF_BUILDID_DIR`): for each binary with a build id, a copy (a hard
//! link where it can) at `DIR/<its absolute path>/<id>/elf`, the kernel's
//! symbols at `DIR/[kernel.kallsyms]/<id>/kallsyms`, and a link
//! `DIR/.build-id/<first two hex digits>/<the rest>` to `../../<path>/<id>`.
//! `perf report`, `perf buildid-list` and `perf archive` find binaries
//! there by build id, after the files themselves are gone or replaced.

use std::path::{Path, PathBuf};

use shardrec_perfdata::build_id::{read_build_id, BuildIdEntry, KERNEL_NAME, VDSO_NAME};

/// The cache perf uses: `$HOME/.debug`, or `$PERF_BUILDID_DIR` where perf
/// has set it for the commands it runs.
pub fn default_dir() -> Option<PathBuf> {
    match std::env::var_os("PERF_BUILDID_DIR") {
        Some(dir) => Some(PathBuf::from(dir)),
        None => Some(PathBuf::from(std::env::var_os("HOME")?).join(".debug")),
    }
}

/// Adds every entry to the cache at `root`; returns how many are there
/// now, and why the others are not.
pub fn add(root: &Path, entries: &[BuildIdEntry]) -> (usize, Vec<String>) {
    let mut cached = 0;
    let mut failed = Vec::new();
    for entry in entries {
        match add_one(root, entry) {
            Ok(true) => cached += 1,
            Ok(false) => {}
            Err(error) => failed.push(format!("{}: {error}", entry.filename)),
        }
    }
    (cached, failed)
}

/// Adds one entry; false for one the cache does not hold (the vDSO, whose
/// image lives in no file).
fn add_one(root: &Path, entry: &BuildIdEntry) -> std::io::Result<bool> {
    let id: String = entry.build_id.iter().map(|b| format!("{b:02x}")).collect();
    let (name, file, source) = match entry.filename.as_str() {
        // The vDSO's image, and a module whose .ko was not found, live in
        // no file.
        name if name == VDSO_NAME || name.starts_with('[') && name != KERNEL_NAME => {
            return Ok(false)
        }
        KERNEL_NAME => (KERNEL_NAME, "kallsyms", Path::new("/proc/kallsyms")),
        path => (path, "elf", Path::new(path)),
    };
    // A build id from an MMAP2 is the mapped file's, which the path may no
    // longer hold: only that file goes under its id.
    if file == "elf" {
        let now = read_build_id(source)?;
        if now.as_deref() != Some(&entry.build_id[..]) {
            return Err(std::io::Error::other(
                "the file was replaced since it was mapped: its build id is in perf.data, its binary is not cached",
            ));
        }
    }
    let dir = root.join(name.trim_start_matches('/')).join(&id);
    std::fs::create_dir_all(&dir)?;
    let target = dir.join(file);
    if !target.exists() {
        // A hard link costs nothing and is the file itself; /proc and
        // other file systems get a copy.
        if std::fs::hard_link(source, &target).is_err() {
            std::fs::copy(source, &target)?;
        }
    }
    let link = root.join(".build-id").join(&id[..2]).join(&id[2..]);
    if std::fs::symlink_metadata(&link).is_err() {
        std::fs::create_dir_all(link.parent().expect("a parent"))?;
        let relative = format!("../../{}/{id}", name.trim_start_matches('/'));
        std::os::unix::fs::symlink(relative, &link)?;
    }
    Ok(true)
}
