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
//!
//! A live merge writes each round's CPUs one after another, so a CPU's
//! samples can come in the file before a map another CPU's ring holds
//! from earlier (a workload that execs on one CPU and runs on the other).
//! perf record marks its hits in time order (its tool's ordered events),
//! so the replay goes by time too: each map change at its time, each page
//! at the first time a sample fell on it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use shardrec_format::header::{RecordHeader, RecordType, MISC_COMM_EXEC};
use shardrec_format::layouts::FieldReader;
use shardrec_format::views::{Comm, MappedIdentity, Mmap, Task};
use shardrec_format::SampleIdLayout;

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
    /// A record that changes maps, at its time.
    Change(u64, RecordHeader, Vec<u8>),
    /// The pages of a process that samples fell on, each at the first
    /// time one did.
    Pages(PageMap<(u32, u64), u64>),
}

/// Pages hit: a set looked up at each sample whose page differs from the
/// last, in the live merger while the workload runs, so with a hash of a
/// multiply per word instead of SipHash (the keys are the recording's own
/// addresses, not an attacker's choosing).
type PageSet<K> = HashSet<K, BuildHasherDefault<PageHasher>>;
type PageMap<K, V> = HashMap<K, V, BuildHasherDefault<PageHasher>>;

/// The fields the watch reads of a record it needs: a sample's layout, or
/// the recording's layouts of every record.
pub trait HitFields {
    /// A sample's pid and ip.
    fn pid_ip(&mut self, sample: &[u8]) -> Option<(u32, u64)>;
    /// A record's time.
    fn time(&mut self, record: &[u8], type_: RecordType) -> Option<u64>;
}

impl HitFields for FieldReader<'_> {
    fn pid_ip(&mut self, sample: &[u8]) -> Option<(u32, u64)> {
        self.sample_pid_ip(sample)
    }

    fn time(&mut self, record: &[u8], type_: RecordType) -> Option<u64> {
        FieldReader::time(self, record, type_)
    }
}

impl HitFields for SampleIdLayout {
    fn pid_ip(&mut self, sample: &[u8]) -> Option<(u32, u64)> {
        self.sample_pid_ip(sample)
    }

    fn time(&mut self, record: &[u8], type_: RecordType) -> Option<u64> {
        SampleIdLayout::time(self, record, type_)
    }
}

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
    /// The last record's time that was known.
    last_time: u64,
}

impl SliceHits {
    /// Takes one record into account, reading what it needs of it with
    /// `fields` (a sample's pid, ip and time only for kernel and user
    /// samples, a record's time only when it changes maps).
    pub fn observe(&mut self, header: RecordHeader, record: &[u8], fields: &mut impl HitFields) {
        if header.type_ == RecordType::SAMPLE {
            match header.misc & CPUMODE_MASK {
                CPUMODE_KERNEL => {
                    self.kernel_hit = true;
                    if let Some((_, ip)) = fields.pid_ip(record) {
                        let page = ip & PAGE_MASK;
                        if self.last_kernel_page != Some(page) {
                            self.last_kernel_page = Some(page);
                            self.kernel_pages.insert(page);
                        }
                    }
                }
                CPUMODE_USER => {
                    let Some((pid, ip)) = fields.pid_ip(record) else {
                        return;
                    };
                    self.user_sample(pid, ip & PAGE_MASK, || {
                        fields.time(record, RecordType::SAMPLE)
                    });
                }
                _ => {}
            }
        } else if changes_maps(header) {
            let time = fields.time(record, header.type_);
            let time = self.known_time(time);
            self.steps.push(Step::Change(time, header, record.to_vec()));
        } else if is_kernel_map(header) {
            self.kernel_maps.push(record.to_vec());
        }
    }

    /// A user sample of `pid` on `page`; its `time` is read only for the
    /// first of a run on one page.
    fn user_sample(&mut self, pid: u32, page: u64, time: impl FnOnce() -> Option<u64>) {
        if !matches!(self.steps.last(), Some(Step::Pages(_))) {
            // As many pages as the last step's: growing each step's set
            // from nothing, its rehashes were a tenth of the live
            // merger's walk in a 16-vCPU guest, where forks and execs end
            // steps often.
            let pages = PageMap::with_capacity_and_hasher(self.last_pages, <_>::default());
            self.steps.push(Step::Pages(pages));
            self.last_user_page = None;
        }
        let key = (pid, page);
        if self.last_user_page == Some(key) {
            // A run on one page, from one ring: later than its first.
            return;
        }
        self.last_user_page = Some(key);
        let time = self.known_time(time());
        if let Some(Step::Pages(pages)) = self.steps.last_mut() {
            let first = pages.entry(key).or_insert(time);
            *first = (*first).min(time);
            self.last_pages = pages.len();
        }
    }

    /// `time`, or where it is unknown the last known one, so the record
    /// keeps its place in the file's order.
    fn known_time(&mut self, time: Option<u64>) -> u64 {
        if let Some(time) = time {
            self.last_time = time;
        }
        self.last_time
    }
}

/// What the replay takes, in time order.
enum Replayed {
    Change(RecordHeader, Vec<u8>),
    Page(u32, u64),
}

/// `steps` by time, ties in the file's order (a stable sort: a merge
/// sorted by time, or a live merge's round of CPUs that each are nearly,
/// costs about one pass).
fn in_time_order(steps: Vec<Step>) -> impl Iterator<Item = Replayed> {
    let mut timed = Vec::new();
    for step in steps {
        match step {
            Step::Change(time, header, record) => {
                timed.push((time, Replayed::Change(header, record)));
            }
            Step::Pages(pages) => {
                let pages = pages.into_iter();
                timed.extend(pages.map(|((pid, page), time)| (time, Replayed::Page(pid, page))));
            }
        }
    }
    timed.sort_by_key(|(time, _)| *time);
    timed.into_iter().map(|(_, replayed)| replayed)
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
        for replayed in in_time_order(slice.steps) {
            match replayed {
                Replayed::Change(header, record) => self.change(header, &record),
                Replayed::Page(pid, page) => {
                    if let Some(file) = self.find(pid, page) {
                        self.hit.insert(file);
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

#[cfg(test)]
mod tests {
    use super::*;
    use shardrec_format::records::{self, Mapping};
    use shardrec_format::sample_id::{IP, TID, TIME};
    use shardrec_format::SampleId;

    const LAYOUT: u64 = IP | TID | TIME;
    const PID: u32 = 4242;

    fn sample(ip: u64, time: u64) -> Vec<u8> {
        let record = records::RecordBuilder::new(RecordType::SAMPLE, CPUMODE_USER);
        let record = record.u64(ip).u32(PID).u32(PID).u64(time);
        record.finish_untrailed().unwrap()
    }

    fn trailer(time: u64) -> SampleId {
        SampleId {
            pid: PID,
            tid: PID,
            time,
            ..SampleId::default()
        }
    }

    fn exec(time: u64) -> Vec<u8> {
        let record = records::comm(PID, PID, b"workload", MISC_COMM_EXEC);
        record
            .finish(&SampleIdLayout::new(LAYOUT), &trailer(time))
            .unwrap()
    }

    fn map(path: &[u8], start: u64, time: u64) -> Vec<u8> {
        let mapping = Mapping {
            start,
            len: 0x1000,
            filename: path,
            inode: start,
            ..Mapping::default()
        };
        let record = records::mmap2(PID, PID, &mapping, CPUMODE_USER);
        record
            .finish(&SampleIdLayout::new(LAYOUT), &trailer(time))
            .unwrap()
    }

    fn hit_paths(file_order: &[Vec<u8>]) -> Vec<String> {
        let mut slice = SliceHits::default();
        let mut fields = SampleIdLayout::new(LAYOUT);
        for record in file_order {
            let header = RecordHeader::parse(record).unwrap();
            slice.observe(header, record, &mut fields);
        }
        let mut hits = DsoHits::default();
        hits.replay(slice);
        hits.hit_files().map(|f| f.path.clone()).collect()
    }

    #[test]
    fn a_sample_written_before_its_map_but_later_hits_it() {
        // CPU 1's round first: the loop's samples; then CPU 0's: the exec
        // and its maps, earlier than all of them.
        let file_order = [
            sample(0x5000_0010, 300),
            sample(0x7000_0020, 310),
            exec(100),
            map(b"/bin/workload", 0x5000_0000, 110),
            map(b"/lib/libc.so.6", 0x7000_0000, 120),
        ];
        assert_eq!(hit_paths(&file_order), ["/bin/workload", "/lib/libc.so.6"]);
    }

    #[test]
    fn a_sample_before_an_exec_is_not_in_the_new_image() {
        // The old image's sample, written after the exec that replaced it.
        let file_order = [
            map(b"/bin/old", 0x5000_0000, 10),
            exec(100),
            map(b"/bin/new", 0x6000_0000, 110),
            sample(0x5000_0010, 50),
            sample(0x6000_0010, 200),
        ];
        assert_eq!(hit_paths(&file_order), ["/bin/old", "/bin/new"]);
    }
}
