//! Which binaries the samples fell in, so their build ids can be written.
//!
//! Follows the address spaces the records describe: MMAP/MMAP2 add a map to
//! a process, an exec (COMM with the exec flag) empties it, FORK links a
//! child to its parent (whose maps it shares until it maps its own).
//!
//! The address spaces depend on every record before a sample, while a
//! parallel merge writes the slices of a recording apart: each slice keeps
//! its records that change address spaces and, between them, the pages
//! its user samples fell in ([`SliceHits`]); the slices are replayed in
//! order afterwards ([`DsoHits::replay`]), which costs a lookup per
//! distinct page instead of one per sample.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use shardrec_format::header::{RecordHeader, RecordType, MISC_COMM_EXEC};
use shardrec_format::views::{Comm, MappedIdentity, Mmap, Task};

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
    /// The build id, when the MMAP2 carried it instead (`attr.build_id`):
    /// the file's as it was mapped, whatever the path holds now.
    pub build_id: Option<Vec<u8>>,
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
    /// Whether an MMAP2 that says it carries a build id does (an event of
    /// the recording asked for them).
    pub trust_build_ids: bool,
    /// The pages kernel samples fell in.
    kernel_pages: BTreeSet<u64>,
    /// The kernel's maps (the image's and each module's), by start: end
    /// and name.
    kernel_maps: BTreeMap<u64, (u64, String)>,
    last: Option<(u32, u64, u64, usize)>,
}

/// Whether `header`'s record changes which file an address of a process
/// is in.
fn changes_maps(header: RecordHeader) -> bool {
    match header.type_ {
        RecordType::MMAP | RecordType::MMAP2 => header.misc & CPUMODE_MASK == CPUMODE_USER,
        RecordType::COMM => header.misc & MISC_COMM_EXEC != 0,
        RecordType::FORK => true,
        _ => false,
    }
}

/// Whether `header`'s record maps kernel text (the image, a module):
/// MMAP records in the kernel's cpumode (perf synthesizes them so; the
/// kernel's own MMAP2 with the kernel's cpumode are for the same).
fn is_kernel_map(header: RecordHeader) -> bool {
    header.type_ == RecordType::MMAP && header.misc & CPUMODE_MASK == CPUMODE_KERNEL
}

/// Maps change on a page boundary: a sample's page says which map it is in.
const PAGE_MASK: u64 = !0xfff;

enum Step {
    Change(RecordHeader, Vec<u8>),
    Pages(PageSet<(u32, u64)>),
}

/// Pages hit: a set looked up at each sample whose page differs from the
/// last, in the live merger while the workload runs, so with a hash of a
/// multiply per word instead of SipHash (the keys are the recording's own
/// addresses, not an attacker's choosing).
type PageSet<K> = HashSet<K, BuildHasherDefault<PageHasher>>;

#[derive(Default)]
struct PageHasher(u64);

impl Hasher for PageHasher {
    /// The product's well-mixed high bits brought down: a page's low 12
    /// bits are 0, and so are the product's, where the table's index is.
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }

    fn write(&mut self, bytes: &[u8]) {
        bytes.iter().for_each(|&b| self.write_u64(u64::from(b)));
    }

    fn write_u32(&mut self, word: u32) {
        self.write_u64(u64::from(word));
    }

    fn write_u64(&mut self, word: u64) {
        // FxHash's step: rotate, mix in, multiply by an odd constant.
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// One slice's part of [`DsoHits`], kept to be replayed in order. It
/// holds copies of the few records it needs, as a merge that frees the
/// shards as it goes ([`crate::consume`]) may have freed them by then.
#[derive(Default)]
pub struct SliceHits {
    steps: Vec<Step>,
    kernel_hit: bool,
    kernel_pages: PageSet<u64>,
    /// The kernel maps (records of the kernel's cpumode), which no other
    /// record changes.
    kernel_maps: Vec<Vec<u8>>,
    /// The last page inserted, kernel and user: runs of samples on one
    /// page are the rule, and hashing each took a tenth of a merge's CPU.
    last_kernel_page: Option<u64>,
    last_user_page: Option<(u32, u64)>,
    /// The pages of the last step of pages.
    last_pages: usize,
}

impl SliceHits {
    /// Takes one record into account; `pid_ip` gives a sample's pid and
    /// ip, asked for only for kernel and user samples.
    pub fn observe(
        &mut self,
        header: RecordHeader,
        record: &[u8],
        pid_ip: impl FnOnce() -> Option<(u32, u64)>,
    ) {
        if header.type_ == RecordType::SAMPLE {
            match header.misc & CPUMODE_MASK {
                CPUMODE_KERNEL => {
                    self.kernel_hit = true;
                    if let Some((_, ip)) = pid_ip() {
                        let page = ip & PAGE_MASK;
                        if self.last_kernel_page != Some(page) {
                            self.last_kernel_page = Some(page);
                            self.kernel_pages.insert(page);
                        }
                    }
                }
                CPUMODE_USER => {
                    let Some((pid, ip)) = pid_ip() else { return };
                    if !matches!(self.steps.last(), Some(Step::Pages(_))) {
                        // As many pages as the last step's: growing each
                        // step's set from nothing, its rehashes were a
                        // tenth of the live merger's walk in a 16-vCPU
                        // guest, where forks and execs end steps often.
                        let pages =
                            PageSet::with_capacity_and_hasher(self.last_pages, <_>::default());
                        self.steps.push(Step::Pages(pages));
                        self.last_user_page = None;
                    }
                    let key = (pid, ip & PAGE_MASK);
                    if self.last_user_page == Some(key) {
                        return;
                    }
                    self.last_user_page = Some(key);
                    if let Some(Step::Pages(pages)) = self.steps.last_mut() {
                        pages.insert(key);
                        self.last_pages = pages.len();
                    }
                }
                _ => {}
            }
        } else if changes_maps(header) {
            self.steps.push(Step::Change(header, record.to_vec()));
        } else if is_kernel_map(header) {
            self.kernel_maps.push(record.to_vec());
        }
    }
}

impl DsoHits {
    /// Takes a slice's records into account, after every slice before it.
    pub fn replay(&mut self, slice: SliceHits) {
        self.kernel_hit |= slice.kernel_hit;
        self.kernel_pages.extend(slice.kernel_pages);
        for record in slice.kernel_maps {
            let Some(header) = RecordHeader::parse(&record) else {
                continue;
            };
            if let Some(map) = Mmap::parse(header, &record) {
                if let Ok(name) = std::str::from_utf8(map.filename) {
                    let end = map.start.saturating_add(map.len);
                    self.kernel_maps.insert(map.start, (end, name.to_string()));
                }
            }
        }
        for step in slice.steps {
            match step {
                Step::Change(header, record) => self.change(header, &record),
                Step::Pages(pages) => {
                    for (pid, page) in pages {
                        if let Some(file) = self.find(pid, page) {
                            self.hit.insert(file);
                        }
                    }
                }
            }
        }
    }

    fn change(&mut self, header: RecordHeader, record: &[u8]) {
        match header.type_ {
            RecordType::MMAP | RecordType::MMAP2 => self.map(header, record),
            RecordType::COMM => {
                if let Some(comm) = Comm::parse(record) {
                    self.maps.remove(&comm.pid);
                    self.last = None;
                }
            }
            RecordType::FORK => {
                if let Some(task) = Task::parse(record).filter(|t| t.pid != t.ppid) {
                    self.parents.insert(task.pid, task.ppid);
                }
            }
            _ => {}
        }
    }

    /// The files samples fell in.
    pub fn hit_files(&self) -> impl Iterator<Item = &MappedFile> {
        self.hit.iter().map(|&i| &self.files[i])
    }

    /// The kernel's maps samples fell in (the image's name included when
    /// it was hit), and the pages of kernel samples in no map (a module
    /// loaded while recording: no record announces one).
    pub fn kernel_hits(&self) -> (BTreeSet<&str>, Vec<u64>) {
        let mut names = BTreeSet::new();
        let mut unmapped = Vec::new();
        for &page in &self.kernel_pages {
            match self.kernel_maps.range(..=page).next_back() {
                Some((_, (end, name))) if page < *end => {
                    names.insert(name.as_str());
                }
                _ => unmapped.push(page),
            }
        }
        (names, unmapped)
    }

    /// Every kernel map's name.
    pub fn kernel_map_names(&self) -> impl Iterator<Item = &str> {
        self.kernel_maps.values().map(|(_, name)| name.as_str())
    }

    /// Every file a process mapped, hit or not.
    pub fn all_files(&self) -> impl Iterator<Item = &MappedFile> {
        self.files.iter()
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

    fn map(&mut self, header: RecordHeader, record: &[u8]) {
        let Some(map) = Mmap::parse(header, record) else {
            return;
        };
        let (identity, build_id) = match map.file {
            MappedIdentity::BuildId(id) if self.trust_build_ids => (None, Some(id.to_vec())),
            MappedIdentity::Inode {
                major,
                minor,
                inode,
            } => (Some((major, minor, inode)), None),
            _ => (None, None),
        };
        let Ok(path) = std::str::from_utf8(map.filename).map(str::to_string) else {
            return;
        };
        let (pid, start, len) = (map.pid, map.start, map.len);
        let file = MappedFile {
            path,
            identity,
            build_id,
        };
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
