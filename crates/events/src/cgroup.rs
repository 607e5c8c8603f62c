//! `-G NAME`: events that count only the tasks of a cgroup, found where
//! perf looks for it (the v1 hierarchy with the perf_event controller, else
//! the cgroup2 mount).

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::sync::Arc;

/// An open cgroup directory, shared by every event that counts in it.
#[derive(Clone, Debug)]
pub struct Cgroup {
    /// The name as given (relative to the mount).
    pub name: String,
    dir: Arc<File>,
}

impl PartialEq for Cgroup {
    fn eq(&self, other: &Cgroup) -> bool {
        self.name == other.name
    }
}

impl Eq for Cgroup {}

impl Cgroup {
    /// Opens cgroup `name`; the error says where it was looked for.
    pub fn open(name: &str) -> Result<Cgroup, String> {
        let mount = mount_point().ok_or("no cgroup2 or perf_event cgroup hierarchy is mounted")?;
        let path = mount.join(name.trim_start_matches('/'));
        let dir = File::open(&path)
            .map_err(|e| format!("cannot open cgroup '{name}' ({}): {e}", path.display()))?;
        Ok(Cgroup {
            name: name.to_string(),
            dir: Arc::new(dir),
        })
    }

    /// The directory, for `perf_event_open` with `PERF_FLAG_PID_CGROUP`.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }
}

/// The v1 mount with the perf_event controller, else the cgroup2 mount,
/// from `/proc/self/mountinfo` (mount point is field 5; after " - " come
/// the type and the super options).
fn mount_point() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mounts: Vec<(&str, &str, &str)> = info
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            let mut right = right.split(' ');
            let kind = right.next()?;
            let options = right.nth(1).unwrap_or_default();
            Some((point, kind, options))
        })
        .collect();
    let v1 = mounts.iter().find(|(_, kind, options)| {
        *kind == "cgroup" && options.split(',').any(|o| o == "perf_event")
    });
    let v2 = mounts.iter().find(|(_, kind, _)| *kind == "cgroup2");
    v1.or(v2).map(|(point, _, _)| PathBuf::from(point))
}

/// perf's `-G` rule: the names go, in order, to the events that have no
/// cgroup yet; a single name goes to all of them.
pub fn assign(specs: &mut [super::EventSpec], names: &str) -> Result<(), String> {
    let names: Vec<&str> = names.split(',').collect();
    let free: Vec<usize> = (0..specs.len())
        .filter(|&i| specs[i].cgroup.is_none())
        .collect();
    if names.len() == 1 {
        let cgroup = Cgroup::open(names[0])?;
        free.iter()
            .for_each(|&i| specs[i].cgroup = Some(cgroup.clone()));
        return Ok(());
    }
    for (&i, name) in free.iter().zip(&names) {
        // An empty name leaves its event in every cgroup, as in perf.
        if !name.is_empty() {
            specs[i].cgroup = Some(Cgroup::open(name)?);
        }
    }
    Ok(())
}
