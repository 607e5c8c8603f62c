//! `shardrec archive`, as `perf archive`: a tarball of what the build-id
//! cache holds for a perf.data's build ids (each `.build-id/XX/REST`
//! link and the directory it points to), to unpack into `~/.debug` on the
//! host where the recording is read: `perf report` there finds every
//! binary and the kernel's symbols by build id.

use std::path::{Path, PathBuf};
use std::process::Command;

use shardrec_perfdata::build_id;
use shardrec_perfdata::feature::Feature;

/// What went into an archive.
#[derive(Debug)]
pub struct Archive {
    /// The tarball written.
    pub path: PathBuf,
    /// Build ids whose cached files it holds.
    pub included: usize,
    /// Build ids of the perf.data the cache lacks (recorded with `-N`, or
    /// on another host): their names.
    pub missing: Vec<String>,
}

/// Archives, from the cache at `cache`, the entries of the build ids in
/// `data` (a perf.data file) into `DATA.tar.bz2` (with `tar -j`, as perf
/// archive).
pub fn archive(data: &Path, cache: &Path) -> std::io::Result<Archive> {
    // A device or FIFO holds no perf.data to read, and the tarball would
    // go beside it (into /dev).
    if !std::fs::metadata(data)?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file: give the perf.data file to archive",
        ));
    }
    let file = std::fs::File::open(data)?;
    let table = shardrec_perfdata::header::read_feature(&file, Feature::BuildId as usize)?;
    let entries = build_id::decode(&table.unwrap_or_default());
    let mut members = Vec::new();
    let mut missing = Vec::new();
    for entry in &entries {
        let id: String = entry.build_id.iter().map(|b| format!("{b:02x}")).collect();
        let link = format!(".build-id/{}/{}", &id[..2], &id[2..]);
        match std::fs::read_link(cache.join(&link)) {
            // The link is `../../PATH/ID`: its target from the cache's root.
            Ok(target) => {
                let inside = target
                    .strip_prefix("../..")
                    .unwrap_or(&target)
                    .to_path_buf();
                members.push(PathBuf::from(link));
                members.push(inside);
            }
            Err(_) => missing.push(entry.filename.clone()),
        }
    }
    if members.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "no build id of {} is in the build-id cache {} (recorded with -N or -B, or on another host?)",
                data.display(),
                cache.display()
            ),
        ));
    }
    let mut path = data.as_os_str().to_owned();
    path.push(".tar.bz2");
    let path = PathBuf::from(path);
    let status = Command::new("tar")
        .arg("-cjf")
        .arg(&path)
        .arg("-C")
        .arg(cache)
        .arg("--")
        .args(&members)
        .status()?;
    if !status.success() {
        return Err(std::io::Error::other(format!("tar exited with {status}")));
    }
    Ok(Archive {
        path,
        included: members.len() / 2,
        missing,
    })
}
