//! Which binaries the samples fell in, so their build ids can be written.
//!
//! Follows the address spaces the records describe: MMAP/MMAP2 add a map to
//! a process, an exec (COMM with the exec flag) empties it, FORK links a
//! child to its parent (whose maps it shares until it maps its own).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use shardrec_format::header::{RecordHeader, RecordType, MISC_COMM_EXEC};
use shardrec_format::{u32_at, u64_at, SampleId};

const CPUMODE_MASK: u16 = 7;
const CPUMODE_KERNEL: u16 = 1;
const CPUMODE_USER: u16 = 2;

/// A mapped file, as the MMAP2 record names it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MappedFile {
    /// Its path.
    pub path: String,
    /// Device (major, minor) and inode, when an MMAP2 gave them.
    pub identity: Option<(u32, u32, u64)>,
}

struct Map {
    end: u64,
    file: usize,
}

/// Tracks maps and marks the files that samples hit.
#[derive(Default)]
pub struct DsoHits {
    maps: HashMap<u32, BTreeMap<u64, Map>>,
    parents: HashMap<u32, u32>,
    files: Vec<MappedFile>,
    file_ids: HashMap<MappedFile, usize>,
    hit: BTreeSet<usize>,
    /// Whether any sample was in the kernel.
    pub kernel_hit: bool,
    last: Option<(u32, u64, u64, usize)>,
}

impl DsoHits {
    /// Takes one record into account; `id` gives its identifying fields,
    /// asked for only when needed.
    pub fn observe(
        &mut self,
        header: RecordHeader,
        record: &[u8],
        id: impl FnOnce() -> Option<SampleId>,
    ) {
        match header.type_ {
            RecordType::SAMPLE => self.sample(header.misc, id),
            RecordType::MMAP | RecordType::MMAP2 if header.misc & CPUMODE_MASK == CPUMODE_USER => {
                self.map(header.type_, record);
            }
            RecordType::COMM if header.misc & MISC_COMM_EXEC != 0 => {
                if let Some(pid) = u32_at(record, 8) {
                    self.maps.remove(&pid);
                    self.last = None;
                }
            }
            RecordType::FORK => {
                if let (Some(pid), Some(ppid)) = (u32_at(record, 8), u32_at(record, 12)) {
                    if pid != ppid {
                        self.parents.insert(pid, ppid);
                    }
                }
            }
            _ => {}
        }
    }

    /// The files samples fell in.
    pub fn hit_files(&self) -> impl Iterator<Item = &MappedFile> {
        self.hit.iter().map(|&i| &self.files[i])
    }

    /// `id` is read only for user samples: the merge reads every sample's
    /// time, but its pid and ip only here.
    fn sample(&mut self, misc: u16, id: impl FnOnce() -> Option<SampleId>) {
        match misc & CPUMODE_MASK {
            CPUMODE_KERNEL => self.kernel_hit = true,
            CPUMODE_USER => {
                if let Some(file) = id().and_then(|id| self.find(id.pid, id.ip)) {
                    self.hit.insert(file);
                }
            }
            _ => {}
        }
    }

    fn find(&mut self, pid: u32, ip: u64) -> Option<usize> {
        if let Some((p, start, end, file)) = self.last {
            if p == pid && (start..end).contains(&ip) {
                return Some(file);
            }
        }
        let mut owner = pid;
        for _ in 0..64 {
            if let Some((&start, map)) = self
                .maps
                .get(&owner)
                .and_then(|m| m.range(..=ip).next_back())
            {
                if ip < map.end {
                    self.last = Some((pid, start, map.end, map.file));
                    return Some(map.file);
                }
            }
            owner = *self.parents.get(&owner)?;
        }
        None
    }

    fn map(&mut self, type_: RecordType, record: &[u8]) {
        let (Some(pid), Some(start), Some(len)) =
            (u32_at(record, 8), u64_at(record, 16), u64_at(record, 24))
        else {
            return;
        };
        let (name_at, identity) = if type_ == RecordType::MMAP2 {
            let identity = (|| {
                Some((
                    u32_at(record, 40)?,
                    u32_at(record, 44)?,
                    u64_at(record, 48)?,
                ))
            })();
            (72, identity)
        } else {
            (40, None)
        };
        let Some(path) = c_string(record.get(name_at..).unwrap_or_default()) else {
            return;
        };
        let file = MappedFile { path, identity };
        let next = self.files.len();
        let index = *self.file_ids.entry(file.clone()).or_insert(next);
        if index == next {
            self.files.push(file);
        }
        self.maps.entry(pid).or_default().insert(
            start,
            Map {
                end: start.saturating_add(len),
                file: index,
            },
        );
        self.last = None;
    }
}

fn c_string(bytes: &[u8]) -> Option<String> {
    let end = bytes.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&bytes[..end]).ok().map(str::to_string)
}
