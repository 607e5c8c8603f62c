//! tracefs: where tracepoints are described, mounted on demand.

use std::io;
use std::path::{Path, PathBuf};

const MOUNT_POINT: &str = "/sys/kernel/tracing";
const LEGACY: &str = "/sys/kernel/debug/tracing";

/// The tracefs directory (one with an `events/` folder), mounting tracefs at
/// `/sys/kernel/tracing` when no mounted copy is found.
pub fn root() -> io::Result<PathBuf> {
    for dir in [MOUNT_POINT, LEGACY] {
        if Path::new(dir).join("events").is_dir() {
            return Ok(PathBuf::from(dir));
        }
    }
    nix::mount::mount(
        Some("nodev"),
        MOUNT_POINT,
        Some("tracefs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("mounting tracefs on {MOUNT_POINT}: {e}"),
        )
    })?;
    Ok(PathBuf::from(MOUNT_POINT))
}

/// The directory describing tracepoint `system:name`.
pub fn event_dir(root: &Path, system: &str, name: &str) -> PathBuf {
    root.join("events").join(system).join(name)
}

/// The kernel's numeric id of a tracepoint (its `config` for perf).
pub fn tracepoint_id(root: &Path, system: &str, name: &str) -> io::Result<u64> {
    let text = std::fs::read_to_string(event_dir(root, system, name).join("id"))?;
    text.trim()
        .parse()
        .map_err(|_| io::Error::other(format!("tracepoint {system}:{name} has a malformed id")))
}

/// Every tracepoint `(system, name)` whose parts match the globs (`*`, `?`),
/// sorted.
pub fn matching(root: &Path, system: &str, name: &str) -> io::Result<Vec<(String, String)>> {
    let mut found = Vec::new();
    for sys_entry in std::fs::read_dir(root.join("events"))? {
        let sys_entry = sys_entry?;
        let sys_name = sys_entry.file_name().to_string_lossy().into_owned();
        if !sys_entry.file_type()?.is_dir() || !glob_match(system, &sys_name) {
            continue;
        }
        for ev in std::fs::read_dir(sys_entry.path())? {
            let ev = ev?;
            let ev_name = ev.file_name().to_string_lossy().into_owned();
            if ev.file_type()?.is_dir() && glob_match(name, &ev_name) {
                found.push((sys_name.clone(), ev_name));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Shell-style matching of `*` and `?`.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("sys_enter_*", "sys_enter_getppid"));
        assert!(glob_match("*", "x"));
        assert!(glob_match("sched_sw?tch", "sched_switch"));
        assert!(!glob_match("sys_exit_*", "sys_enter_read"));
        assert!(glob_match("a*b*c", "aXXbYc"));
    }
}
