//! Processes, threads and executable maps from `/proc`, as perf's
//! `__event__synthesize_thread` describes them.
//!
//! The walk reuses its buffers across processes, and for the common case of
//! a single-threaded process reads only two files: `status` (which holds the
//! thread group, the parent, the thread count and the main thread's name)
//! and `maps`.

use crate::proc_maps;
use crate::{Emitter, SynthStats, FLUSH_AT};
use shardrec_format::header::{
    MISC_MMAP_BUILD_ID, MISC_MMAP_DATA, MISC_PROC_MAP_PARSE_TIMEOUT, MISC_USER,
};
use shardrec_format::records::{comm, fork, mmap2};
use shardrec_perfdata::build_id::read_build_id;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The pids in `/proc`: one per process, as `/proc` lists thread group
/// leaders only.
pub(crate) fn list_processes() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Process `root` and every process descended from it that still runs
/// (by each process's parent in `/proc`), `root` first.
pub fn process_tree(root: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = list_processes()
        .into_iter()
        .filter_map(|pid| {
            let status = std::fs::read(format!("/proc/{pid}/status")).ok()?;
            Some((pid, Status::parse(&status)?.ppid))
        })
        .collect();
    let mut tree = vec![root];
    let mut next = 0;
    while let Some(&parent) = tree.get(next) {
        tree.extend(parents.iter().filter(|p| p.1 == parent).map(|p| p.0));
        next += 1;
    }
    tree
}

/// Describes `pids` into `out`, writing whole processes at a time.
pub(crate) fn synthesize(
    emitter: &mut Emitter,
    pids: &[i32],
    out: &mut impl Write,
) -> io::Result<SynthStats> {
    let mut walker = Walker::default();
    for &pid in pids {
        walker.process(emitter, pid);
        if emitter.buf.len() >= FLUSH_AT {
            out.write_all(&emitter.buf)?;
            emitter.buf.clear();
        }
    }
    out.write_all(&emitter.buf)?;
    emitter.buf.clear();
    Ok(emitter.stats)
}

/// What perf reads from `/proc/PID/status`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Status<'a> {
    pub tgid: i32,
    pub ppid: i32,
    pub threads: u32,
    /// The leader has exited (`State: Z`): other threads may live on.
    pub zombie: bool,
    /// The name as `status` shows it: escaped, unlike `comm`.
    pub name: &'a [u8],
}

impl<'a> Status<'a> {
    /// `None` without a `Tgid` line (an empty read: the task is gone).
    pub fn parse(text: &'a [u8]) -> Option<Self> {
        let mut status = Status::default();
        let mut has_tgid = false;
        for line in crate::scan::lines(text) {
            let Some(tab) = line.iter().position(|&b| b == b'\t') else {
                continue;
            };
            let value = &line[tab + 1..];
            match &line[..tab] {
                b"Name:" => status.name = value,
                b"State:" => status.zombie = value.first() == Some(&b'Z'),
                b"Tgid:" => (status.tgid, has_tgid) = (decimal(value)?, true),
                b"PPid:" => status.ppid = decimal(value)?,
                b"Threads:" => {
                    status.threads = decimal(value)?;
                    break; // the last field perf or we need
                }
                _ => {}
            }
        }
        has_tgid.then_some(status)
    }

    /// Whether the leader is the only thread, so `/proc/PID/task` need not
    /// be listed.
    fn leader_alone(&self) -> bool {
        self.threads == 1 && !self.zombie
    }

    /// The main thread's name, if `status` did not have to escape it (an
    /// escape always writes a backslash; `comm` has it raw).
    fn raw_name(&self) -> Option<&'a [u8]> {
        (!self.name.contains(&b'\\')).then_some(self.name)
    }
}

fn decimal<T: std::str::FromStr>(text: &[u8]) -> Option<T> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Buffers reused from one process to the next.
#[derive(Default)]
pub(crate) struct Walker {
    path: String,
    status: FileBuf,
    comm: FileBuf,
    maps: FileBuf,
    main_name: Vec<u8>,
    tids: Vec<i32>,
    /// Build ids by the mapped file's device and inode (`None`: it has
    /// none, or is not an ELF file).
    build_ids: HashMap<(u32, u32, u64), Option<Vec<u8>>>,
}

impl Walker {
    /// Describes the process of `pid` into `emitter`'s buffer.
    pub(crate) fn process(&mut self, emitter: &mut Emitter, pid: i32) {
        let Some((tgid, ppid, alone)) = self.read_status(pid) else {
            emitter.stats.skipped += 1;
            return;
        };
        if !self.list_threads(tgid, alone) {
            emitter.stats.skipped += 1;
            return;
        }
        let mut described = 0;
        for i in 0..self.tids.len() {
            let tid = self.tids[i];
            if self.thread(emitter, tgid, ppid, tid) {
                described += 1;
            } else {
                emitter.stats.skipped += 1;
            }
        }
        if described == 0 {
            return;
        }
        emitter.stats.processes += 1;
        emitter.stats.threads += described;
        if emitter.maps {
            self.maps(emitter, tgid);
        }
    }

    /// Reads the status of `pid`'s process: tgid, ppid, whether the leader
    /// is alone, and keeps the leader's raw name in `main_name` (empty when
    /// escaped).
    fn read_status(&mut self, pid: i32) -> Option<(i32, i32, bool)> {
        let mut pid = pid;
        // A thread id stands for its process: read the leader's status.
        for _ in 0..2 {
            self.set_path(format_args!("/proc/{pid}/status"));
            let text = self.status.read_single(&self.path).ok()?;
            let status = Status::parse(text)?;
            if status.tgid == pid {
                self.main_name.clear();
                self.main_name
                    .extend_from_slice(status.raw_name().unwrap_or_default());
                return Some((status.tgid, status.ppid, status.leader_alone()));
            }
            pid = status.tgid;
        }
        None
    }

    /// Fills `tids`: just the leader when it is `alone`, else the entries
    /// of `/proc/TGID/task` (leader first, as listed).
    fn list_threads(&mut self, tgid: i32, alone: bool) -> bool {
        self.tids.clear();
        if alone {
            self.tids.push(tgid);
            return true;
        }
        self.set_path(format_args!("/proc/{tgid}/task"));
        let Ok(dir) = std::fs::read_dir(&self.path) else {
            return false;
        };
        let tids = dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok());
        self.tids.extend(tids);
        !self.tids.is_empty()
    }

    /// FORK and COMM for one thread; false if it is gone.
    fn thread(&mut self, emitter: &mut Emitter, tgid: i32, ppid: i32, tid: i32) -> bool {
        let name = if tid == tgid && !self.main_name.is_empty() {
            &self.main_name[..]
        } else {
            self.set_path(format_args!("/proc/{tgid}/task/{tid}/comm"));
            match self.comm.read_single(&self.path) {
                Ok(text) if !text.is_empty() => text.strip_suffix(b"\n").unwrap_or(text),
                _ => return false,
            }
        };
        let (pid, tid) = (tgid as u32, tid as u32);
        // perf assumes the main thread started every other thread.
        let parent = if tid == pid { ppid as u32 } else { pid };
        emitter.push(fork(pid, parent, tid, parent, 0), pid, tid);
        emitter.push(comm(pid, tid, name, 0), pid, tid);
        true
    }

    /// One MMAP2 per executable mapping. A kernel thread's or a zombie's
    /// maps read empty; unreadable maps are counted as skipped.
    fn maps(&mut self, emitter: &mut Emitter, tgid: i32) {
        let started = std::time::Instant::now();
        self.set_path(format_args!("/proc/{tgid}/maps"));
        let Ok(text) = self.maps.read_all(&self.path) else {
            emitter.stats.skipped += 1;
            return;
        };
        let pid = tgid as u32;
        for line in proc_maps::described_lines(text, emitter.data_maps) {
            let mut misc = if line.is_exec() {
                MISC_USER
            } else {
                MISC_USER | MISC_MMAP_DATA
            };
            let mut mapping = line.mapping();
            if emitter.build_ids && line.inode != 0 {
                let key = (line.major, line.minor, line.inode);
                let id = self.build_ids.entry(key).or_insert_with(|| {
                    // The mapped file itself, even if its path now names
                    // another; the path where map_files is closed to us.
                    let mapped = format!("/proc/{tgid}/map_files/{:x}-{:x}", line.start, line.end);
                    let path = std::ffi::OsStr::from_bytes(line.path);
                    read_build_id(Path::new(&mapped))
                        .or_else(|_| read_build_id(Path::new(path)))
                        .ok()
                        .flatten()
                });
                if let Some(id) = id {
                    mapping.build_id = Some(id);
                    misc |= MISC_MMAP_BUILD_ID;
                }
            }
            // As perf: the map at hand when the time is up is the last.
            let timed_out = emitter.map_timeout.is_some_and(|t| started.elapsed() > t);
            if timed_out {
                misc |= MISC_PROC_MAP_PARSE_TIMEOUT;
            }
            if emitter.push(mmap2(pid, pid, &mapping, misc), pid, pid) {
                emitter.stats.maps += 1;
            }
            if timed_out {
                emitter.stats.map_timeouts += 1;
                break;
            }
        }
    }

    fn set_path(&mut self, args: std::fmt::Arguments) {
        self.path.clear();
        let _ = self.path.write_fmt(args);
    }
}

/// A read buffer that keeps its length (zeroed once) across reads, so that
/// reading a file costs no allocation and no clearing.
#[derive(Default)]
struct FileBuf {
    bytes: Vec<u8>,
}

impl FileBuf {
    const INITIAL: usize = 16 * 1024;

    /// A file the kernel renders in one piece (`single_open`: `status`,
    /// `comm`): a read that does not fill the buffer has it all.
    fn read_single(&mut self, path: &str) -> io::Result<&[u8]> {
        let mut file = File::open(path)?;
        self.fill(&mut file, true)
    }

    /// A file rendered piece by piece (`maps`): read until end of file.
    fn read_all(&mut self, path: &str) -> io::Result<&[u8]> {
        let mut file = File::open(path)?;
        self.fill(&mut file, false)
    }

    fn fill(&mut self, file: &mut File, single: bool) -> io::Result<&[u8]> {
        if self.bytes.is_empty() {
            self.bytes.resize(Self::INITIAL, 0);
        }
        let mut len = 0;
        loop {
            if len == self.bytes.len() {
                self.bytes.resize(len * 2, 0);
            }
            let n = match file.read(&mut self.bytes[len..]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let short = len + n < self.bytes.len();
            len += n;
            if n == 0 || (single && short) {
                return Ok(&self.bytes[..len]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status() {
        let text = b"Name:\tmy prog\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t3468\n\
            Ngid:\t0\nPid:\t3470\nPPid:\t3465\nTracerPid:\t0\nThreads:\t3\nCpus_allowed:\tf\n";
        let status = Status::parse(text).unwrap();
        assert_eq!((status.tgid, status.ppid, status.threads), (3468, 3465, 3));
        assert!(!status.leader_alone());
        assert_eq!(status.raw_name(), Some(&b"my prog"[..]));
        let escaped = Status::parse(b"Name:\ta\\nb\nTgid:\t1\nPPid:\t0\n").unwrap();
        assert_eq!(escaped.raw_name(), None);
        let alone = Status::parse(b"State:\tS (sleeping)\nTgid:\t1\nThreads:\t1\n").unwrap();
        assert!(alone.leader_alone());
        let zombie = Status::parse(b"State:\tZ (zombie)\nTgid:\t1\nThreads:\t1\n").unwrap();
        assert!(!zombie.leader_alone());
        assert_eq!(Status::parse(b""), None);
    }
}
