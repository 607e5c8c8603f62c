//! Paths and files of a recording directory.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::{Error, Meta};

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

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The shard of `cpu`'s ring.
    pub fn shard_path(&self, cpu: u32) -> PathBuf {
        self.path.join(format!("cpu{cpu:03}.shard"))
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

    /// Writes `meta` atomically: a temporary file, synced, renamed over it.
    pub fn write_meta(&self, meta: &Meta) -> Result<(), Error> {
        let tmp = self.path.join("meta.tmp");
        let _ = std::fs::remove_file(&tmp);
        let bytes = rmp_serde::to_vec_named(meta).map_err(|e| Error::Io {
            path: tmp.clone(),
            source: std::io::Error::other(e),
        })?;
        let mut file = self.create_file(&tmp)?;
        file.write_all(&bytes).map_err(Error::io(&tmp))?;
        file.sync_all().map_err(Error::io(&tmp))?;
        let path = self.meta_path();
        std::fs::rename(&tmp, &path).map_err(Error::io(&path))
    }

    /// Reads `meta`.
    pub fn read_meta(&self) -> Result<Meta, Error> {
        let path = self.meta_path();
        let bytes = std::fs::read(&path).map_err(Error::io(&path))?;
        let meta: Meta = rmp_serde::from_slice(&bytes).map_err(|e| Error::BadMeta {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if meta.version != crate::META_VERSION {
            return Err(Error::BadMeta {
                path,
                reason: format!(
                    "format version {}, this shardrec reads {}",
                    meta.version,
                    crate::META_VERSION
                ),
            });
        }
        Ok(meta)
    }
}
