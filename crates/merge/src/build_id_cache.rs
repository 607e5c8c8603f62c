//! The build-id cache, as perf keeps it (`~/.debug`; perf's helper
//! scripts get it as `$PERF_BUILDID_DIR`): for each binary with a build id, a copy (a hard
//! link where it can) at `DIR/<its absolute path>/<id>/elf`, the kernel's
//! symbols at `DIR/[kernel.kallsyms]/<id>/kallsyms`, and a link
//! `DIR/.build-id/<first two hex digits>/<the rest>` to `../../<path>/<id>`.
//! `perf report`, `perf buildid-list` and `perf archive` find binaries
//! there by build id, after the files themselves are gone or replaced.
//!
//! A binary's debug info goes beside it as `debug`, as perf caches it:
//! the host's `/usr/lib/debug/.build-id/` file where there is one, else,
//! with `--debuginfod`, the one a debuginfod server has. `perf report`
//! reads a stripped binary's functions from it.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use shardrec_perfdata::build_id::{read_build_id, BuildIdEntry, KERNEL_NAME, VDSO_NAME};
use shardrec_sys::debuginfod::Debuginfod;

/// A build-id cache to add a merge's binaries to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildIdCache {
    /// Its root (perf's `~/.debug`).
    pub dir: PathBuf,
    /// `--debuginfod`: ask the servers in `$DEBUGINFOD_URLS` for the
    /// debug info the host lacks.
    pub debuginfod: bool,
}

/// What [`add`] did.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Cached {
    /// Binaries in the cache now.
    pub binaries: usize,
    /// Of which with their debug info beside them.
    pub debug_info: usize,
    /// Why the others could not be added, or their debug info fetched.
    pub failures: Vec<String>,
}

/// Where the host keeps debug info by build id (Debian's `-dbgsym`
/// packages install there).
const HOST_DEBUG_DIR: &str = "/usr/lib/debug/.build-id";

/// The cache perf uses: `$HOME/.debug`, or `$PERF_BUILDID_DIR` where perf
/// has set it for the commands it runs.
pub fn default_dir() -> Option<PathBuf> {
    match std::env::var_os("PERF_BUILDID_DIR") {
        Some(dir) => Some(PathBuf::from(dir)),
        None => Some(PathBuf::from(std::env::var_os("HOME")?).join(".debug")),
    }
}

/// Adds every entry to `cache`, each binary with its debug info where
/// it can be found.
pub fn add(cache: &BuildIdCache, entries: &[BuildIdEntry]) -> Cached {
    let mut cached = Cached::default();
    let mut debug_info = DebugInfoSource::new(cache.debuginfod, &mut cached.failures);
    for entry in entries {
        match add_one(&cache.dir, entry) {
            Ok(Some(dir)) => {
                cached.binaries += 1;
                match debug_info.add(&dir, entry) {
                    Ok(added) => cached.debug_info += usize::from(added),
                    Err(error) => cached
                        .failures
                        .push(format!("{}: debug info: {error}", entry.filename)),
                }
            }
            Ok(None) => {}
            Err(error) => cached.failures.push(format!("{}: {error}", entry.filename)),
        }
    }
    cached
}

/// Where a binary's debug info comes from.
struct DebugInfoSource {
    /// With `--debuginfod`, the client (`None` once it has said that no
    /// server is set).
    debuginfod: Option<Debuginfod>,
}

impl DebugInfoSource {
    /// The host's debug directory, and debuginfod when `debuginfod`; why
    /// that cannot be asked goes into `failures`.
    fn new(debuginfod: bool, failures: &mut Vec<String>) -> DebugInfoSource {
        let debuginfod = debuginfod.then(Debuginfod::open).and_then(|opened| {
            opened
                .map_err(|e| failures.push(format!("--debuginfod: {e}")))
                .ok()
        });
        DebugInfoSource { debuginfod }
    }

    /// Puts the debug info of `entry`, cached in `dir`, beside it as
    /// `debug`; false where none is found.
    fn add(&mut self, dir: &Path, entry: &BuildIdEntry) -> std::io::Result<bool> {
        // perf keeps no debug info for the kernel and its modules: it
        // reads them from the kernel's own files.
        if entry.filename == KERNEL_NAME || entry.filename.ends_with(".ko") {
            return Ok(false);
        }
        let target = dir.join("debug");
        if target.exists() {
            return Ok(true);
        }
        let Some(found) = self.find(&entry.build_id)? else {
            return Ok(false);
        };
        link_or_copy(&found, &target)?;
        Ok(true)
    }

    /// The debug info of the binary with `build_id`: the host's, else a
    /// debuginfod server's.
    fn find(&mut self, build_id: &[u8]) -> std::io::Result<Option<PathBuf>> {
        let hex = hex(build_id);
        let host = Path::new(HOST_DEBUG_DIR)
            .join(&hex[..2])
            .join(format!("{}.debug", &hex[2..]));
        if host.is_file() {
            return Ok(Some(host));
        }
        let Some(client) = &mut self.debuginfod else {
            return Ok(None);
        };
        match client.find_debuginfo(build_id) {
            Ok(path) => Ok(Some(path)),
            // No server has it: as for a binary without debug info.
            Err(error) if error.kind() == ErrorKind::NotFound => Ok(None),
            Err(error) if error.raw_os_error() == Some(nix::libc::ENOSYS) => {
                self.debuginfod = None;
                Err(std::io::Error::other(
                    "no debuginfod server is set (--debuginfod=URLS, or DEBUGINFOD_URLS)",
                ))
            }
            Err(error) => Err(error),
        }
    }
}

/// `build_id` in hex, as perf names it.
fn hex(build_id: &[u8]) -> String {
    build_id.iter().map(|b| format!("{b:02x}")).collect()
}

/// A hard link to `source` at `target`, which costs nothing and is the
/// file itself; a copy across file systems and from /proc.
fn link_or_copy(source: &Path, target: &Path) -> std::io::Result<()> {
    if std::fs::hard_link(source, target).is_err() {
        std::fs::copy(source, target)?;
    }
    Ok(())
}

/// Adds one entry; returns its directory in the cache, or `None` for one
/// the cache does not hold (the vDSO, whose image lives in no file).
fn add_one(root: &Path, entry: &BuildIdEntry) -> std::io::Result<Option<PathBuf>> {
    let id = hex(&entry.build_id);
    let (name, file, source) = match entry.filename.as_str() {
        // The vDSO's image, and a module whose .ko was not found, live in
        // no file.
        name if name == VDSO_NAME || name.starts_with('[') && name != KERNEL_NAME => {
            return Ok(None)
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
        link_or_copy(source, &target)?;
    }
    let link = root.join(".build-id").join(&id[..2]).join(&id[2..]);
    if std::fs::symlink_metadata(&link).is_err() {
        std::fs::create_dir_all(link.parent().expect("a parent"))?;
        let relative = format!("../../{}/{id}", name.trim_start_matches('/'));
        std::os::unix::fs::symlink(relative, &link)?;
    }
    Ok(Some(dir))
}
