//! What the output path a user gave (`-o`) is, decided as perf decides it,
//! and where a recording's shards can live beside it.
//!
//! The path is the user's, not ours: perf moves an existing output aside to
//! `NAME.old` only when `stat` (which follows symlinks) gives it a size
//! other than zero (a non-empty file, a symlink to one, a directory); an
//! empty file or a link to one is written over where it is; a character
//! device or a FIFO is opened and written. shardrec does the same and never
//! renames, replaces or removes a device node, a FIFO or a socket. It goes
//! past perf where perf would harm the host or lose the recording:
//!
//! - a block device or a socket is refused, and so is a dangling symlink
//!   (perf would write over a disk, fail at the end, or create a file
//!   wherever the link points);
//! - a symlink that lives in `/dev` or `/proc` (`/dev/stdout`,
//!   `/proc/self/fd/1`) is followed to what it names, so nothing there is
//!   ever moved aside;
//! - the directory of a regular output must take files (not a read-only
//!   file system), which is checked before anything is recorded.
//!
//! `-` is perf's: standard output, whatever it is, in perf's pipe format;
//! and `perf record` without `-o` writes that format too when standard
//! output is a FIFO (perf's `check_pipe`): [`Output::record_default`].
//!
//! ```no_run
//! use shardrec_shard::output::Output;
//! let output = Output::resolve("perf.data".as_ref())?;
//! println!("{} ({})", output.path().display(), output.kind());
//! # Ok::<(), shardrec_shard::Error>(())
//! ```

use std::fs::Metadata;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::Error;

/// Where the merged perf.data goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// A regular file, new or replaced: the merge writes it beside its final
    /// name and renames it into place.
    File {
        /// The file (a symlink to an empty file is followed to it).
        path: PathBuf,
        /// Whether an existing `path` is moved to `NAME.old` first.
        move_aside: bool,
    },
    /// `-`: standard output, in perf's pipe format (`perf record -o -`),
    /// whatever it is (a pipe, a file, a terminal).
    Pipe,
    /// A character device or a FIFO: the finished perf.data is written into
    /// it from the start, in order; the path itself is never touched.
    Stream {
        /// The device or FIFO (as given, or what a `/dev` link names).
        path: PathBuf,
        /// Which of the two.
        kind: StreamKind,
    },
}

/// What kind of node a [`Output::Stream`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// `/dev/null`, a terminal, ...
    CharDevice,
    /// A named pipe.
    Fifo,
}

/// The name perf gives standard output in its pipe format.
pub const STDOUT: &str = "-";

impl Output {
    /// What `perf record` writes into without `-o`: standard output in
    /// the pipe format when it is a FIFO (a pipe or a named pipe, as perf
    /// 6.1's `check_pipe` decides), else `perf.data`.
    pub fn record_default() -> PathBuf {
        let stdout = nix::sys::stat::fstat(std::io::stdout());
        let fifo = stdout.is_ok_and(|s| {
            nix::sys::stat::SFlag::from_bits_truncate(s.st_mode) & nix::sys::stat::SFlag::S_IFMT
                == nix::sys::stat::SFlag::S_IFIFO
        });
        PathBuf::from(if fifo { STDOUT } else { "perf.data" })
    }

    /// Decides what `given` is, changing nothing.
    pub fn resolve(given: &Path) -> Result<Output, Error> {
        if given == Path::new(STDOUT) {
            return Ok(Output::Pipe);
        }
        let refuse = |why: &str| Error::Output {
            path: given.to_path_buf(),
            why: why.to_string(),
        };
        let is_link = given.symlink_metadata().is_ok_and(|m| m.is_symlink());
        let target = match std::fs::metadata(given) {
            Ok(target) => target,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && is_link => {
                let to = std::fs::read_link(given).unwrap_or_default();
                return Err(refuse(&format!(
                    "a symlink to {}, which does not exist (shardrec does not create files through a dangling link)",
                    to.display()
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Output::File {
                    path: given.to_path_buf(),
                    move_aside: false,
                })
            }
            Err(e) => return Err(Error::io(given)(e)),
        };
        let file_type = target.file_type();
        // A node is opened through the path as given: `/dev/stdout` opens
        // whatever standard output is, a terminal or a pipe.
        let stream = |kind| {
            Ok(Output::Stream {
                path: given.to_path_buf(),
                kind,
            })
        };
        if file_type.is_char_device() {
            return stream(StreamKind::CharDevice);
        }
        if file_type.is_fifo() {
            return stream(StreamKind::Fifo);
        }
        if file_type.is_block_device() {
            return Err(refuse(
                "a block device: shardrec does not write a recording over a disk",
            ));
        }
        if file_type.is_socket() {
            return Err(refuse("a socket, which cannot be opened as a file"));
        }
        file_output(given, is_link, &target)
    }

    /// The path written (or replaced).
    pub fn path(&self) -> &Path {
        match self {
            Output::File { path, .. } | Output::Stream { path, .. } => path,
            Output::Pipe => Path::new(STDOUT),
        }
    }

    /// What the output is, in a few words.
    pub fn kind(&self) -> &'static str {
        match self {
            Output::File { .. } => "a file",
            Output::Pipe => "standard output, in perf's pipe format",
            Output::Stream {
                kind: StreamKind::CharDevice,
                ..
            } => "a character device",
            Output::Stream {
                kind: StreamKind::Fifo,
                ..
            } => "a FIFO",
        }
    }

    /// Checks, before anything is recorded, that the output can be made:
    /// a regular file's directory must exist and take new files.
    pub fn check_writable(&self) -> Result<(), Error> {
        let Output::File { path, .. } = self else {
            return Ok(());
        };
        let dir = parent(path);
        let refuse = |why: String| Error::Output {
            path: path.clone(),
            why,
        };
        match nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK) {
            Ok(()) => Ok(()),
            Err(nix::errno::Errno::EROFS) => Err(refuse(format!(
                "{} is on a read-only file system",
                dir.display()
            ))),
            Err(errno) => Err(refuse(format!(
                "cannot create files in {}: {}",
                dir.display(),
                std::io::Error::from(errno)
            ))),
        }
    }

    /// Where the recording's shards go while it records: `NAME.shards`
    /// beside a regular output whose directory is fit for them; `None`
    /// where they need a private directory instead (a device or FIFO
    /// output, or a directory in `/dev`, `/proc` or the like).
    pub fn shards_beside(&self) -> Option<PathBuf> {
        match self {
            Output::File { path, .. } if !in_pseudo_file_system(parent(path)) => {
                Some(crate::RecordingDir::for_output(path))
            }
            _ => None,
        }
    }

    /// Removes the regular file `NAME.old` that [`move_aside`] would
    /// replace: perf record replaces it at its start, and freeing a large
    /// file's blocks takes a while (0.15 s for a 1 GB one here), which the
    /// rename into place at the end then does not wait for.
    ///
    /// [`move_aside`]: Output::move_aside
    pub fn drop_old(&self) {
        let Output::File {
            path,
            move_aside: true,
        } = self
        else {
            return;
        };
        let old = old_path(path);
        if old.symlink_metadata().is_ok_and(|m| m.is_file()) {
            let _ = std::fs::remove_file(&old);
        }
    }

    /// Moves an existing output aside to `NAME.old` if perf would (its
    /// `stat` size is not zero), replacing an older `.old`.
    pub fn move_aside(&self) -> Result<(), Error> {
        let Output::File {
            path,
            move_aside: true,
        } = self
        else {
            return Ok(());
        };
        let old = old_path(path);
        remove_old(&old)?;
        std::fs::rename(path, &old).map_err(Error::io(path))
    }
}

/// A regular file or a directory at `given` (`target` is what `stat`
/// says). A link to an empty file is followed, so the file is written over
/// as perf writes it through the link; so is any link in `/dev` or
/// `/proc`, which is never moved aside.
fn file_output(given: &Path, is_link: bool, target: &Metadata) -> Result<Output, Error> {
    let move_aside = target.size() > 0;
    let path = match is_link && (!move_aside || in_pseudo_file_system(given)) {
        true => std::fs::canonicalize(given).map_err(Error::io(given))?,
        false => given.to_path_buf(),
    };
    if target.is_dir() && !move_aside {
        return Err(Error::Output {
            path,
            why: "an empty directory, which perf.data cannot replace".into(),
        });
    }
    Ok(Output::File { path, move_aside })
}

/// Clears the way for `NAME.old`: a file or link there goes (the rename
/// would replace it anyway); an empty directory too; a directory perf
/// wrote (its `data`, `data.*`, `kcore_dir`) loses those; anything else in
/// a directory stays, and the rename then says the directory is not empty.
/// Where perf moves an output aside: `NAME.old`.
fn old_path(path: &Path) -> PathBuf {
    let mut old = path.as_os_str().to_owned();
    old.push(".old");
    PathBuf::from(old)
}

fn remove_old(old: &Path) -> Result<(), Error> {
    let Ok(meta) = old.symlink_metadata() else {
        return Ok(());
    };
    if !meta.is_dir() {
        return Ok(());
    }
    for entry in std::fs::read_dir(old).map_err(Error::io(old))?.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let path = entry.path();
        if name == "kcore_dir" && !path.is_symlink() && path.is_dir() {
            std::fs::remove_dir_all(&path).map_err(Error::io(&path))?;
        } else if name == "data" || name.starts_with("data.") {
            std::fs::remove_file(&path).map_err(Error::io(&path))?;
        }
    }
    let _ = std::fs::remove_dir(old);
    Ok(())
}

/// The directory a path is in (`.` for a bare name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Whether `path` (or, for a name not yet made, its directory) is on a
/// file system of the kernel's own nodes (`/dev`, `/proc`, `/sys`, ...),
/// where no recording's file belongs.
fn in_pseudo_file_system(path: &Path) -> bool {
    let probe = match path.symlink_metadata() {
        Ok(_) => path,
        Err(_) => parent(path),
    };
    let Ok(meta) = probe.symlink_metadata() else {
        return false;
    };
    mount_type(meta.dev()).is_some_and(|fs| PSEUDO.contains(&fs.as_str()))
}

/// File systems that hold the kernel's nodes and views, not files.
const PSEUDO: &[&str] = &[
    "devtmpfs",
    "devpts",
    "proc",
    "sysfs",
    "cgroup",
    "cgroup2",
    "debugfs",
    "tracefs",
    "securityfs",
    "configfs",
    "bpf",
    "mqueue",
    "pstore",
    "efivarfs",
    "fusectl",
    "binfmt_misc",
];

/// The type of the file system mounted as device `dev`, from
/// `/proc/self/mountinfo` (`ID PARENT MAJOR:MINOR ROOT POINT ... - TYPE ...`).
fn mount_type(dev: u64) -> Option<String> {
    let wanted = format!(
        "{}:{}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev)
    );
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|line| {
        let mut fields = line.split(' ');
        if fields.nth(2)? != wanted {
            return None;
        }
        let mut after = line.split(" - ").nth(1)?.split(' ');
        after.next().map(str::to_string)
    })
}

/// The perf.data file of a directory output (perf's `--kcore` layout,
/// which its `--threads` shares): `DIR/data`.
pub fn data_in(dir: &Path) -> PathBuf {
    dir.join("data")
}

/// The perf.data file `given` names for reading or merging: a directory
/// output holds it as `data`.
pub fn perf_data_file(given: &Path) -> PathBuf {
    match given != Path::new(STDOUT) && given.is_dir() {
        true => data_in(given),
        false => given.to_path_buf(),
    }
}

/// Moves the perf.data at `from` to `to`: renamed, or copied where `to`
/// is on another file system.
pub fn move_output(from: &Path, to: &Path) -> std::io::Result<()> {
    match std::fs::rename(from, to) {
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            std::fs::copy(from, to)?;
            std::fs::remove_file(from)
        }
        renamed => renamed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_null_is_a_character_device_written_in_place() {
        let output = Output::resolve(Path::new("/dev/null")).unwrap();
        assert_eq!(
            output,
            Output::Stream {
                path: "/dev/null".into(),
                kind: StreamKind::CharDevice
            }
        );
        assert_eq!(output.shards_beside(), None);
        assert!(output.check_writable().is_ok() && output.move_aside().is_ok());
    }

    #[test]
    fn a_dash_is_standard_output_in_the_pipe_format() {
        let output = Output::resolve(Path::new("-")).unwrap();
        assert_eq!(output, Output::Pipe);
        assert_eq!(output.path(), Path::new("-"));
        assert_eq!(output.shards_beside(), None);
        assert!(output.check_writable().is_ok() && output.move_aside().is_ok());
        // Not a file named "-" in another directory.
        assert!(matches!(
            Output::resolve(Path::new("./-")).unwrap(),
            Output::File { .. }
        ));
    }

    #[test]
    fn dev_and_proc_are_pseudo_file_systems() {
        assert!(in_pseudo_file_system(Path::new("/dev/null")));
        assert!(in_pseudo_file_system(Path::new("/dev/no-such-name")));
        assert!(in_pseudo_file_system(Path::new("/proc/self/fd/1")));
        assert!(!in_pseudo_file_system(&std::env::temp_dir()));
    }
}
