//! Names in a filter resolved on this host: users, groups, cgroups.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// Where a filter's names are looked up.
pub trait Names {
    /// A user's id.
    fn user(&self, name: &str) -> Option<u32>;
    /// A group's id.
    fn group(&self, name: &str) -> Option<u32>;
    /// A cgroup's id, from its path under the cgroup2 mount.
    fn cgroup(&self, path: &str) -> Result<u64, String>;
}

/// This host's password and group databases and cgroup2 mount.
pub struct HostNames;

impl Names for HostNames {
    fn user(&self, name: &str) -> Option<u32> {
        nix::unistd::User::from_name(name)
            .ok()
            .flatten()
            .map(|u| u.uid.as_raw())
    }

    fn group(&self, name: &str) -> Option<u32> {
        nix::unistd::Group::from_name(name)
            .ok()
            .flatten()
            .map(|g| g.gid.as_raw())
    }

    /// What `bpf_get_current_cgroup_id` returns for a task in the cgroup:
    /// the id of its kernfs node, which is the directory's inode number
    /// on 64-bit hosts (as `stat -c %i` shows it).
    fn cgroup(&self, path: &str) -> Result<u64, String> {
        let mount = cgroup2_mount().ok_or("no cgroup2 hierarchy is mounted")?;
        let dir = mount.join(path.trim_start_matches('/'));
        let meta = std::fs::metadata(&dir)
            .map_err(|e| format!("no cgroup '{path}' ({}: {e})", dir.display()))?;
        if !meta.is_dir() {
            return Err(format!("'{}' is not a cgroup directory", dir.display()));
        }
        Ok(meta.ino())
    }
}

/// The cgroup2 mount point, from `/proc/self/mountinfo` (mount point is
/// field 5; after " - " comes the type).
fn cgroup2_mount() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let point = left.split(' ').nth(4)?;
        (right.split(' ').next()? == "cgroup2").then(|| PathBuf::from(point))
    })
}
