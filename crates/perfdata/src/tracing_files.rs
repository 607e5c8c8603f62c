//! The tracefs files HEADER_TRACING_DATA copies, read while recording.
//!
//! perf reads them when it writes the header, at the end of `perf record`;
//! call [`read_files`] at stop as well, so `saved_cmdlines` holds the
//! latest names. `/proc/kallsyms` is left out, as perf 6.1 does: its readers
//! skip the copy and resolve kernel symbols from the recording's own maps.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use crate::tracing_data::TracingFiles;

/// Bytes per read: far more than any one-shot tracefs file holds (perf
/// reads with BUFSIZ, 8 KiB).
const CHUNK: usize = 64 * 1024;

/// Reads what HEADER_TRACING_DATA needs for these tracepoints ("system",
/// "name") from tracefs.
pub fn read_files(tracepoints: &[(String, String)]) -> io::Result<TracingFiles> {
    let root = shardrec_sys::tracefs::root()?;
    read_files_in(&root, tracepoints)
}

/// [`read_files`] under a given tracefs root.
fn read_files_in(root: &Path, tracepoints: &[(String, String)]) -> io::Result<TracingFiles> {
    let events = root.join("events");
    let mut files = TracingFiles {
        page_size: shardrec_sys::ring::page_size() as u32,
        header_page: required(&events.join("header_page"))?,
        header_event: required(&events.join("header_event"))?,
        ..TracingFiles::default()
    };
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for (system, name) in tracepoints {
        if seen.contains(&(system.as_str(), name.as_str())) {
            continue;
        }
        seen.push((system, name));
        let format = required(&shardrec_sys::tracefs::event_dir(root, system, name).join("format"))
            .map_err(|e| io::Error::new(e.kind(), format!("tracepoint {system}:{name}: {e}")))?;
        // perf keeps the ftrace system apart: its formats come before the
        // others and carry no system name.
        if system == "ftrace" {
            files.ftrace_formats.push(format);
        } else if let Some((_, formats)) = files.systems.iter_mut().find(|(s, _)| s == system) {
            formats.push(format);
        } else {
            files.systems.push((system.clone(), vec![format]));
        }
    }
    files.printk_formats = optional(&root.join("printk_formats"))?;
    files.saved_cmdlines = optional(&root.join("saved_cmdlines"))?;
    Ok(files)
}

/// A file that must be there.
fn required(path: &Path) -> io::Result<Vec<u8>> {
    read_whole(path)
        .map_err(|e| io::Error::new(e.kind(), format!("reading {}: {e}", path.display())))
}

/// A file perf records as empty when the kernel does not have it.
fn optional(path: &Path) -> io::Result<Vec<u8>> {
    match read_whole(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        other => {
            other.map_err(|e| io::Error::new(e.kind(), format!("reading {}: {e}", path.display())))
        }
    }
}

/// Reads a tracefs file to its end in large reads. Not `fs::read`: tracefs
/// reports size 0, so that starts with a 32-byte read, and
/// `events/header_page` and `events/header_event` answer only the first
/// read of an open file (a 32-byte read gets 32 bytes, then end of file).
fn read_whole(path: &Path) -> io::Result<Vec<u8>> {
    let mut file = File::open(path)?;
    let mut out = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::PathBuf;

    /// A fake tracefs tree, removed on drop.
    struct FakeRoot(PathBuf);

    impl FakeRoot {
        fn new(tag: &str) -> FakeRoot {
            let dir =
                std::env::temp_dir().join(format!("shardrec-tracefs-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(dir.join("events")).unwrap();
            fs::write(dir.join("events/header_page"), "page").unwrap();
            fs::write(dir.join("events/header_event"), "event").unwrap();
            FakeRoot(dir)
        }
        fn event(&self, system: &str, name: &str) {
            let dir = self.0.join("events").join(system).join(name);
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("format"), format!("name: {name}\n")).unwrap();
        }
    }

    impl Drop for FakeRoot {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn tp(system: &str, name: &str) -> (String, String) {
        (system.into(), name.into())
    }

    #[test]
    fn groups_by_system_and_keeps_ftrace_apart() {
        let root = FakeRoot::new("groups");
        root.event("sched", "sched_switch");
        root.event("sched", "sched_wakeup");
        root.event("irq", "irq_handler_entry");
        root.event("ftrace", "function");
        fs::write(root.0.join("printk_formats"), "0x1 : \"x\"\n").unwrap();
        let files = read_files_in(
            &root.0,
            &[
                tp("sched", "sched_switch"),
                tp("irq", "irq_handler_entry"),
                tp("ftrace", "function"),
                tp("sched", "sched_wakeup"),
                tp("sched", "sched_switch"),
            ],
        )
        .unwrap();
        assert_eq!(files.header_page, b"page");
        assert_eq!(files.header_event, b"event");
        assert_eq!(files.ftrace_formats, vec![b"name: function\n".to_vec()]);
        assert_eq!(
            files.systems,
            vec![
                (
                    "sched".to_string(),
                    vec![
                        b"name: sched_switch\n".to_vec(),
                        b"name: sched_wakeup\n".to_vec()
                    ]
                ),
                (
                    "irq".to_string(),
                    vec![b"name: irq_handler_entry\n".to_vec()]
                ),
            ]
        );
        assert!(files.kallsyms.is_empty());
        assert_eq!(files.printk_formats, b"0x1 : \"x\"\n");
        assert!(files.saved_cmdlines.is_empty());
        assert_eq!(files.page_size as usize, shardrec_sys::ring::page_size());
    }

    #[test]
    fn a_missing_format_names_the_tracepoint() {
        let root = FakeRoot::new("missing");
        let err = read_files_in(&root.0, &[tp("sched", "nope")]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("sched:nope"), "{err}");
    }

    #[test]
    fn reads_the_real_tracefs() {
        let root = match shardrec_sys::tracefs::root() {
            Ok(root) => root,
            Err(e) => {
                eprintln!("skipped: no tracefs ({e})");
                return;
            }
        };
        let files = read_files_in(&root, &[tp("sched", "sched_switch")]).unwrap();
        assert!(files.header_page.starts_with(b"\tfield: u64 timestamp;"));
        // Whole, not the first 32 bytes: it ends with the `data` field.
        let page = String::from_utf8_lossy(&files.header_page);
        assert!(page.contains("field: char data;"), "{page}");
        assert!(String::from_utf8_lossy(&files.header_event).contains("type_len"));
        let (system, formats) = &files.systems[0];
        assert_eq!(system, "sched");
        assert!(formats[0].starts_with(b"name: sched_switch\n"));
    }
}
