//! Where the merge writes, and how the finished perf.data reaches the
//! user's output ([`shardrec_shard::output::Output`]).
//!
//! A regular output is written beside its final name (`NAME.tmp`, or the
//! recording's `merged.partial` for a merge that frees the shards) and
//! renamed into place once whole, so a failed merge leaves any earlier file
//! untouched. A character device or FIFO cannot be renamed over, nor
//! written at offsets: the merge writes an unnamed file in `$TMPDIR`, and
//! the finished perf.data is then written into the device in order. The
//! device or FIFO itself is never replaced, renamed or removed.

use std::fs::File;
use std::io::{self, Seek};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use shardrec_shard::output::Output;

/// The merge's file until it is published.
pub struct Destination {
    target: Output,
    /// The named file beside a regular output; `None` for a stream's
    /// unnamed file.
    tmp: Option<PathBuf>,
}

impl Destination {
    /// Creates the file the merge writes into (0600): for a regular output
    /// at `tmp`, by default `NAME.tmp`.
    pub fn create(target: Output, tmp: Option<PathBuf>) -> io::Result<(Destination, File)> {
        if target == Output::Pipe {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "standard output takes perf's pipe format, written in order, not a perf.data file",
            ));
        }
        let Output::File { path, .. } = &target else {
            let file = unnamed_file(&std::env::temp_dir())?;
            return Ok((Destination { target, tmp: None }, file));
        };
        let tmp = tmp.unwrap_or_else(|| {
            let mut tmp = path.as_os_str().to_owned();
            tmp.push(".tmp");
            PathBuf::from(tmp)
        });
        let _ = std::fs::remove_file(&tmp);
        let file = create_new(&tmp)?;
        target.drop_old();
        let tmp = Some(tmp);
        Ok((Destination { target, tmp }, file))
    }

    /// Opens the file an earlier merge of `target` was writing at `tmp`
    /// (interrupted after it freed shards), to go on with it.
    pub fn reopen(target: Output, tmp: PathBuf) -> io::Result<(Destination, File)> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&tmp)?;
        let tmp = Some(tmp);
        Ok((Destination { target, tmp }, file))
    }

    /// The named file being written, if there is one.
    pub fn tmp(&self) -> Option<&Path> {
        self.tmp.as_deref()
    }

    /// Removes the file of a merge that failed.
    pub fn discard(&self) {
        if let Some(tmp) = &self.tmp {
            let _ = std::fs::remove_file(tmp);
        }
    }

    /// Puts the finished perf.data (`file`) where the user asked: renamed
    /// into place (an existing output moved to `NAME.old` as perf moves
    /// it), or written into the device or FIFO from its start.
    pub fn publish(&self, mut file: File) -> io::Result<()> {
        match (&self.target, &self.tmp) {
            (Output::File { path, .. }, Some(tmp)) => {
                self.target.move_aside().map_err(io::Error::other)?;
                std::fs::rename(tmp, path)
            }
            (target, _) => {
                file.rewind()?;
                // Opened as perf opens it, without creating anything: a
                // FIFO waits here for its reader.
                let mut stream = std::fs::OpenOptions::new()
                    .write(true)
                    .open(target.path())?;
                io::copy(&mut file, &mut stream).map(drop)
            }
        }
    }
}

/// A file with no name in `dir` (gone when closed), or where the file
/// system cannot make one, a named file unlinked at once.
fn unnamed_file(dir: &Path) -> io::Result<File> {
    let unnamed = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_TMPFILE.bits())
        .open(dir);
    match unnamed {
        Ok(file) => Ok(file),
        Err(_) => {
            let path = dir.join(format!("shardrec-merge-{}.tmp", std::process::id()));
            let file = create_new(&path)?;
            std::fs::remove_file(&path)?;
            Ok(file)
        }
    }
}

/// A new file (never an existing one, nor through a link), 0600.
fn create_new(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}
