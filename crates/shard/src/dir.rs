//! Paths and files of a recording directory.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::merged_prefix::MergedPrefix;
use crate::{with_causes, Error, Meta};
use shardrec_control::fault::Site;

/// A recording directory: `meta`, `cpuNNN.shard`, `synth.shard`, ...
#[derive(Clone, Debug)]
pub struct RecordingDir {
    path: PathBuf,
}

impl RecordingDir {
    /// The directory that belongs to output file `output` (`perf.data` →
    /// `perf.data.shards`).
    pub fn for_output(output: &Path) -> PathBuf {
        let mut name = output.as_os_str().to_owned();
        name.push(".shards");
        PathBuf::from(name)
    }

    /// An existing directory.
    pub fn open(path: impl Into<PathBuf>) -> RecordingDir {
        RecordingDir { path: path.into() }
    }

    /// Creates the directory (mode 0700). An existing one is kept as
    /// `NAME.old`, replacing any older `.old`, as perf keeps `perf.data.old`.
    pub fn create(path: impl Into<PathBuf>) -> Result<RecordingDir, Error> {
        let path = path.into();
        if path.symlink_metadata().is_ok() {
            let mut old = path.as_os_str().to_owned();
            old.push(".old");
            let old = PathBuf::from(old);
            if old.is_dir() && !old.is_symlink() {
                std::fs::remove_dir_all(&old).map_err(Error::io(&old))?;
            }
            std::fs::rename(&path, &old).map_err(Error::io(&path))?;
        }
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(Error::io(&path))?;
        Ok(RecordingDir { path })
    }

    /// Creates a private directory (mode 0700, a name no one else has) in
    /// `base`, for shards that cannot live beside their output.
    pub fn create_private(base: &Path) -> Result<RecordingDir, Error> {
        let template = base.join("shardrec-XXXXXX");
        let path = nix::unistd::mkdtemp(&template)
            .map_err(|errno| Error::io(base)(std::io::Error::from(errno)))?;
        Ok(RecordingDir { path })
    }

    /// Window `n` of a `--switch-output` recording: a recording directory
    /// of its own inside this one, merged alone into its own perf.data.
    pub fn window(&self, n: u32) -> RecordingDir {
        RecordingDir {
            path: self.path.join(format!("window{n:06}")),
        }
    }

    /// Creates window `n`'s directory (mode 0700, never an existing one).
    pub fn create_window(&self, n: u32) -> Result<RecordingDir, Error> {
        let window = self.window(n);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&window.path)
            .map_err(Error::io(&window.path))?;
        Ok(window)
    }

    /// Makes this (new, empty) directory one recording of consecutive
    /// `windows` of a recording (oldest first): each CPU's shard, the VIP's
    /// and the `bpf` stream are the windows' concatenated in order (a
    /// window begins where the one before ended, in every ring); the state
    /// synthesized is the oldest's (the windows after it hold what changed
    /// since); `meta` is the newest's, without statistics (a merge walks
    /// the shards for them).
    pub fn join_windows(&self, windows: &[RecordingDir]) -> Result<(), Error> {
        let (Some(oldest), Some(newest)) = (windows.first(), windows.last()) else {
            return Ok(());
        };
        let mut meta = newest.read_surviving_meta()?.0;
        meta.stats = None;
        let mut names: Vec<PathBuf> = meta.cpus.iter().map(|&c| self.shard_path(c)).collect();
        names.extend([self.vip_path(), self.bpf_path()]);
        for joined in names {
            let name = joined.file_name().expect("a file name");
            let mut out = self.create_file(&joined)?;
            for window in windows {
                let part = window.path.join(name);
                match File::open(&part) {
                    Ok(mut part) => std::io::copy(&mut part, &mut out).map(drop),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(e),
                }
                .map_err(Error::io(&part))?;
            }
        }
        std::fs::copy(oldest.synth_path(), self.synth_path())
            .map_err(Error::io(&oldest.synth_path()))?;
        self.write_start_meta(&meta)
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The shard of `cpu`'s ring.
    pub fn shard_path(&self, cpu: u32) -> PathBuf {
        self.path.join(format!("cpu{cpu:03}.shard"))
    }

    /// The index of `cpu`'s shard, written at stop.
    pub fn index_path(&self, cpu: u32) -> PathBuf {
        self.path.join(format!("cpu{cpu:03}.index"))
    }

    /// Writes the index of `cpu`'s shard.
    pub fn write_index(
        &self,
        cpu: u32,
        index: &crate::shard_index::ShardIndex,
    ) -> Result<(), Error> {
        use std::io::Write;
        let path = self.index_path(cpu);
        let _ = std::fs::remove_file(&path);
        self.create_file(&path)?
            .write_all(&index.to_bytes())
            .map_err(Error::io(&path))
    }

    /// The shard of synthesized records.
    pub fn synth_path(&self) -> PathBuf {
        self.path.join("synth.shard")
    }

    /// The side-band shard the VIP writes.
    pub fn vip_path(&self) -> PathBuf {
        self.path.join("vip.shard")
    }

    /// The VIP's captured BPF program info.
    pub fn bpf_path(&self) -> PathBuf {
        self.path.join("bpf")
    }

    /// The `meta` file.
    pub fn meta_path(&self) -> PathBuf {
        self.path.join("meta")
    }

    /// The copy of `meta` written at start and never rewritten.
    pub fn start_meta_path(&self) -> PathBuf {
        self.path.join("meta.start")
    }

    /// A merge that freed the shards as it went wrote `output`: the
    /// shards hold nothing more, and a later merge says so.
    pub fn mark_spent(&self, output: &Path) {
        let _ = std::fs::write(self.spent_path(), output.as_os_str().as_encoded_bytes());
        let _ = std::fs::remove_file(self.merged_prefix_path());
    }

    /// The output of a merge that frees the shards as it goes, until it is
    /// renamed into place ([`crate::merged_prefix`]).
    pub fn partial_output_path(&self) -> PathBuf {
        self.path.join("merged.partial")
    }

    /// A `--switch-output` window's perf.data as the live merger writes
    /// it, until the window closes and it takes its timestamped name.
    pub fn window_output_path(&self) -> PathBuf {
        self.path.join("merged.data")
    }

    /// Written by a merge that freed the shards as it went, once done: the
    /// output it wrote, as the shards hold nothing more.
    pub fn spent_path(&self) -> PathBuf {
        self.path.join("merged.done")
    }

    /// How far `merged.partial` holds the recording.
    pub fn merged_prefix_path(&self) -> PathBuf {
        self.path.join("merged.prefix")
    }

    /// Writes how far `merged.partial` holds the recording: a temporary
    /// file renamed over the last, so a reader finds one whole.
    pub fn write_merged_prefix(&self, prefix: &MergedPrefix) -> Result<(), Error> {
        let path = self.merged_prefix_path();
        let bytes = rmp_serde::to_vec_named(prefix)
            .map_err(|e| Error::io(&path)(std::io::Error::other(e)))?;
        // Not synced: the shards it describes are not either (a crash of
        // the host loses both alike; a killed merge loses neither).
        self.replace_file(&path, &bytes, Durability::PageCache)
    }

    /// How far an interrupted merge got, if one did.
    pub fn read_merged_prefix(&self) -> Result<Option<MergedPrefix>, Error> {
        let path = self.merged_prefix_path();
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(&path)(e)),
        };
        crate::merged_prefix::decode(&bytes)
            .map(Some)
            .map_err(|reason| Error::BadMergedPrefix {
                path: path.clone(),
                reason,
            })
    }

    /// Creates a new file in the directory: 0600, failing if it exists or is
    /// a symlink, close-on-exec.
    pub fn create_file(&self, path: &Path) -> Result<File, Error> {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(Error::io(path))
    }

    /// Opens an existing file of the directory for writing (never through
    /// a symlink, close-on-exec): a dead writer's shard, for its
    /// replacement.
    pub fn reopen_file(&self, path: &Path) -> Result<File, Error> {
        OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(Error::io(path))
    }

    /// Writes `meta` atomically: a temporary file, synced, renamed over it.
    pub fn write_meta(&self, meta: &Meta) -> Result<(), Error> {
        self.write_meta_file(meta, &self.meta_path())
    }

    /// Writes `meta` as it is at start twice: as `meta`, which the stop
    /// rewrites, and as `meta.start`, which nothing rewrites, so that one
    /// damaged copy cannot cost the recording (everything the merge needs
    /// is known at start; the stop adds statistics).
    pub fn write_start_meta(&self, meta: &Meta) -> Result<(), Error> {
        self.write_meta_file(meta, &self.start_meta_path())?;
        self.write_meta(meta)
    }

    /// Keeps room for rewriting `meta` at stop (`meta.reserve`, twice its
    /// size now and 64 KiB more, in written blocks), so that a disk the
    /// shards filled cannot cost the recording its meta.
    pub fn reserve_meta_room(&self, meta: &Meta) -> Result<(), Error> {
        let path = self.path.join("meta.reserve");
        let len = crate::meta_file::encode(meta)
            .map_err(Error::io(&path))?
            .len();
        let mut file = self.create_file(&path)?;
        file.write_all(&vec![0; 2 * len + (64 << 10)])
            .map_err(Error::io(&path))?;
        file.sync_all().map_err(Error::io(&path))
    }

    /// Gives back the room [`RecordingDir::reserve_meta_room`] kept.
    pub fn release_meta_room(&self) {
        let _ = std::fs::remove_file(self.path.join("meta.reserve"));
    }

    fn write_meta_file(&self, meta: &Meta, path: &Path) -> Result<(), Error> {
        let bytes = crate::meta_file::encode(meta).map_err(Error::io(path))?;
        self.replace_file(path, &bytes, Durability::Synced(Site::MetaWrite))
    }

    /// Replaces `path` with `bytes` atomically: `PATH.tmp` written (and
    /// synced, if asked), then renamed over it.
    fn replace_file(&self, path: &Path, bytes: &[u8], durability: Durability) -> Result<(), Error> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let _ = std::fs::remove_file(&tmp);
        let mut file = self.create_file(&tmp)?;
        if let Durability::Synced(site) = durability {
            if let Some(error) = shardrec_control::fault::inject(site)
                .and_then(shardrec_control::fault::Fault::error)
            {
                return Err(Error::io(&tmp)(error));
            }
        }
        file.write_all(bytes).map_err(Error::io(&tmp))?;
        if let Durability::Synced(_) = durability {
            file.sync_all().map_err(Error::io(&tmp))?;
        }
        std::fs::rename(&tmp, path).map_err(Error::io(path))
    }

    /// Reads `meta`.
    pub fn read_meta(&self) -> Result<Meta, Error> {
        read_meta_file(&self.meta_path())
    }

    /// Reads `meta`, or where it is damaged or missing, `meta.start`: the
    /// meta and, when it came from `meta.start`, why `meta` could not be
    /// read. Both unreadable is an error that names both.
    pub fn read_surviving_meta(&self) -> Result<(Meta, Option<Error>), Error> {
        let damaged = match self.read_meta() {
            Ok(meta) => return Ok((meta, None)),
            Err(error) => error,
        };
        match read_meta_file(&self.start_meta_path()) {
            Ok(meta) => Ok((meta, Some(damaged))),
            Err(start) => Err(Error::MetaLost {
                meta: with_causes(&damaged),
                start: with_causes(&start),
            }),
        }
    }
}

/// How far [`RecordingDir::replace_file`] takes a file.
#[derive(Clone, Copy)]
enum Durability {
    /// To the disk, the write named by this fault site for the tests.
    Synced(Site),
    /// Into the page cache.
    PageCache,
}

fn read_meta_file(path: &Path) -> Result<Meta, Error> {
    let bytes = std::fs::read(path).map_err(Error::io(path))?;
    crate::meta_file::decode(&bytes).map_err(|source| Error::BadMeta {
        path: path.to_path_buf(),
        source,
    })
}

/// Which window of a `--switch-output` recording a helper writes: the
/// recording's directory and the window's number. Every helper moves to
/// the next window at each Switch, as the coordinator does.
#[derive(Clone, Debug)]
pub struct WindowCursor {
    root: RecordingDir,
    current: u32,
}

impl WindowCursor {
    /// Window `current` of the recording in `root`.
    pub fn new(root: RecordingDir, current: u32) -> WindowCursor {
        WindowCursor { root, current }
    }

    /// Moves to the next window, and returns its directory.
    pub fn advance(&mut self) -> RecordingDir {
        self.current += 1;
        self.root.window(self.current)
    }
}
