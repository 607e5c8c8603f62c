//! Typed, borrowed views of the records the merge and the recorder read
//! back, in the layouts `records` writes them in: the one place besides
//! the writers that knows where each field lies. A view is `None` where
//! the record is too short for its fields (a damaged shard is walked, not
//! trusted).

use crate::header::{RecordHeader, RecordType, MISC_MMAP_BUILD_ID};
use crate::sample_id as sample_bit;
use crate::{u32_at, u64_at};

/// Where the fields after the 8-byte header begin.
const BODY: usize = 8;

/// `PERF_RECORD_MMAP` or `PERF_RECORD_MMAP2`: a mapping of a file (or of
/// the kernel's text) into a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mmap<'a> {
    /// The process.
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// The mapping's first address.
    pub start: u64,
    /// Its length.
    pub len: u64,
    /// The file offset it maps from.
    pub pgoff: u64,
    /// What MMAP2 says of the file.
    pub file: MappedIdentity<'a>,
    /// The file's name, up to its NUL.
    pub filename: &'a [u8],
}

/// What a mapping record says of its file besides the name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MappedIdentity<'a> {
    /// Nothing (MMAP).
    Unknown,
    /// MMAP2: the device and inode.
    Inode {
        /// The device's major number.
        major: u32,
        /// Its minor number.
        minor: u32,
        /// The inode.
        inode: u64,
    },
    /// MMAP2 with `MISC_MMAP_BUILD_ID`: the file's build id.
    BuildId(&'a [u8]),
}

impl<'a> Mmap<'a> {
    /// The mapping in `record` (of `header`'s type), if it is one.
    pub fn parse(header: RecordHeader, record: &'a [u8]) -> Option<Mmap<'a>> {
        let (file, name_at) = match header.type_ {
            RecordType::MMAP => (MappedIdentity::Unknown, BODY + 32),
            // A size byte, three reserved, then the id (room for 20).
            RecordType::MMAP2 if header.misc & MISC_MMAP_BUILD_ID != 0 => {
                let size = usize::from(*record.get(BODY + 32)?).min(20);
                let id = record.get(BODY + 36..BODY + 36 + size)?;
                (MappedIdentity::BuildId(id), BODY + 64)
            }
            RecordType::MMAP2 => {
                let identity = MappedIdentity::Inode {
                    major: u32_at(record, BODY + 32)?,
                    minor: u32_at(record, BODY + 36)?,
                    inode: u64_at(record, BODY + 40)?,
                };
                (identity, BODY + 64)
            }
            _ => return None,
        };
        Some(Mmap {
            pid: u32_at(record, BODY)?,
            tid: u32_at(record, BODY + 4)?,
            start: u64_at(record, BODY + 8)?,
            len: u64_at(record, BODY + 16)?,
            pgoff: u64_at(record, BODY + 24)?,
            file,
            filename: c_string(record.get(name_at..)?)?,
        })
    }
}

/// `PERF_RECORD_COMM`: a thread's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Comm<'a> {
    /// The process.
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// The name, up to its NUL.
    pub comm: &'a [u8],
}

impl<'a> Comm<'a> {
    /// The name in `record`, a COMM record.
    pub fn parse(record: &'a [u8]) -> Option<Comm<'a>> {
        Some(Comm {
            pid: u32_at(record, BODY)?,
            tid: u32_at(record, BODY + 4)?,
            comm: c_string(record.get(BODY + 8..)?)?,
        })
    }
}

/// `PERF_RECORD_FORK` or `PERF_RECORD_EXIT`: a task and its parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Task {
    /// The process.
    pub pid: u32,
    /// Its parent process.
    pub ppid: u32,
    /// The thread.
    pub tid: u32,
    /// Its parent thread.
    pub ptid: u32,
    /// When.
    pub time: u64,
}

impl Task {
    /// The task in `record`, a FORK or EXIT record.
    pub fn parse(record: &[u8]) -> Option<Task> {
        Some(Task {
            pid: u32_at(record, BODY)?,
            ppid: u32_at(record, BODY + 4)?,
            tid: u32_at(record, BODY + 8)?,
            ptid: u32_at(record, BODY + 12)?,
            time: u64_at(record, BODY + 16)?,
        })
    }
}

/// `PERF_RECORD_KSYMBOL`: a kernel symbol (a BPF program's function)
/// registered or unregistered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ksymbol<'a> {
    /// Its address.
    pub addr: u64,
    /// Its length.
    pub len: u32,
    /// `PERF_RECORD_KSYMBOL_TYPE_*`.
    pub ksym_type: u16,
    /// `PERF_RECORD_KSYMBOL_FLAGS_*`.
    pub flags: u16,
    /// Its name, up to its NUL.
    pub name: &'a [u8],
}

/// `PERF_RECORD_KSYMBOL_FLAGS_UNREGISTER`
pub const KSYMBOL_FLAGS_UNREGISTER: u16 = 1;

impl<'a> Ksymbol<'a> {
    /// The symbol in `record`, a KSYMBOL record.
    pub fn parse(record: &'a [u8]) -> Option<Ksymbol<'a>> {
        let type_and_flags = u32_at(record, BODY + 12)?;
        Some(Ksymbol {
            addr: u64_at(record, BODY)?,
            len: u32_at(record, BODY + 8)?,
            ksym_type: type_and_flags as u16,
            flags: (type_and_flags >> 16) as u16,
            name: c_string(record.get(BODY + 16..)?)?,
        })
    }

    /// Whether it takes the symbol away.
    pub fn unregisters(&self) -> bool {
        self.flags & KSYMBOL_FLAGS_UNREGISTER != 0
    }
}

/// `PERF_RECORD_TEXT_POKE`: kernel text at `addr` changed from `old` to
/// `new`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextPoke<'a> {
    /// Where.
    pub addr: u64,
    /// The bytes before.
    pub old: &'a [u8],
    /// The bytes after.
    pub new: &'a [u8],
}

impl<'a> TextPoke<'a> {
    /// The change in `record`, a TEXT_POKE record.
    pub fn parse(record: &'a [u8]) -> Option<TextPoke<'a>> {
        let old_len = usize::from(u16::from_ne_bytes(
            record.get(BODY + 8..BODY + 10)?.try_into().ok()?,
        ));
        let new_len = usize::from(u16::from_ne_bytes(
            record.get(BODY + 10..BODY + 12)?.try_into().ok()?,
        ));
        let bytes = record.get(BODY + 12..)?;
        Some(TextPoke {
            addr: u64_at(record, BODY)?,
            old: bytes.get(..old_len)?,
            new: bytes.get(old_len..old_len + new_len)?,
        })
    }
}

/// A `perf_event_attr` as a recording keeps it (the bytes given to the
/// kernel, as in perf.data's attrs section): the fields the merge reads.
#[derive(Clone, Copy, Debug)]
pub struct AttrBytes<'a>(pub &'a [u8]);

impl AttrBytes<'_> {
    /// The event's `type` (`PERF_TYPE_*`), if the bytes hold it.
    pub fn type_(&self) -> Option<u32> {
        u32_at(self.0, 0)
    }

    /// The event's `config`, if the bytes hold it.
    pub fn config(&self) -> Option<u64> {
        u64_at(self.0, 8)
    }

    /// Which fields each sample carries (0 for bytes too short to say).
    pub fn sample_type(&self) -> u64 {
        u64_at(self.0, 24).unwrap_or(0)
    }

    /// The same attr with another `sample_type`.
    pub fn with_sample_type(&self, sample_type: u64) -> Vec<u8> {
        let mut attr = self.0.to_vec();
        if let Some(field) = attr.get_mut(24..32) {
            field.copy_from_slice(&sample_type.to_ne_bytes());
        }
        attr
    }

    /// `sample_stack_user` (the u32 at 88): the user stack bytes a sample
    /// copies (0 where the attr is older than that field).
    pub fn sample_stack_user(&self) -> u32 {
        u32_at(self.0, 88).unwrap_or(0)
    }

    /// Whether MMAP2 records carry build ids instead of device and inode
    /// (the `build_id` bit, 34, of the flags word at 40).
    pub fn build_id_mmap(&self) -> bool {
        u64_at(self.0, 40).is_some_and(|flags| flags & 1 << 34 != 0)
    }
}

/// What a `PERF_RECORD_LOST` (records the kernel dropped, after the
/// event's id) or `PERF_RECORD_LOST_SAMPLES` (samples it dropped) counts;
/// `None` for other records.
pub fn lost_count(type_: RecordType, record: &[u8]) -> Option<u64> {
    match type_ {
        RecordType::LOST => u64_at(record, BODY + 8),
        RecordType::LOST_SAMPLES => u64_at(record, BODY),
        _ => None,
    }
}

/// How many bytes of tracing data follow a
/// `PERF_RECORD_HEADER_TRACING_DATA` record in perf's pipe format (they
/// are not counted in its size).
pub fn tracing_data_len(record: &[u8]) -> Option<u32> {
    u32_at(record, BODY)
}

/// The u64 fields a sample has before `READ`, in the kernel's order.
const FIXED_BEFORE_READ: [u64; 9] = [
    sample_bit::IDENTIFIER,
    sample_bit::IP,
    sample_bit::TID,
    sample_bit::TIME,
    sample_bit::ADDR,
    sample_bit::ID,
    sample_bit::STREAM_ID,
    sample_bit::CPU,
    sample_bit::PERIOD,
];

/// The `PERF_SAMPLE_RAW` bytes of a `PERF_RECORD_SAMPLE` whose attr has
/// `sample_type` (as the kernel pads them: to a multiple of 8 with the
/// size before them). `None` without `RAW`, with `READ` (whose size
/// `read_format` decides, which no raw-data event of shardrec's has), or
/// for a record too short.
pub fn sample_raw(sample_type: u64, record: &[u8]) -> Option<&[u8]> {
    if sample_type & sample_bit::RAW == 0 || sample_type & sample_bit::READ != 0 {
        return None;
    }
    let fixed = FIXED_BEFORE_READ
        .iter()
        .filter(|&&bit| sample_type & bit != 0)
        .count();
    let mut at = BODY + 8 * fixed;
    if sample_type & sample_bit::CALLCHAIN != 0 {
        at += 8 + 8 * usize::try_from(u64_at(record, at)?).ok()?;
    }
    let size = u32_at(record, at)? as usize;
    record.get(at + 4..at + 4 + size)
}

/// One wait as shardrec's off-CPU program writes it into a BPF output
/// event (`crates/bpf/src/bpf/off_cpu.bpf.c`, `struct wait`): who waited,
/// how long, and where, its stacks as they were when the wait began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffCpuWait<'a> {
    /// The process (tgid).
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// When it began (`bpf_ktime_get_ns`).
    pub start: u64,
    /// How long it lasted, ns.
    pub period: u64,
    /// The task's cgroup (v2) id.
    pub cgroup: u64,
    /// The task's state as it went to sleep (`TASK_INTERRUPTIBLE` 1,
    /// `TASK_UNINTERRUPTIBLE` 2).
    pub state: u16,
    kernel: &'a [u8],
    user: &'a [u8],
    /// With `--call-graph dwarf`: the task's user registers (perf's
    /// x86-64 order, [`OffCpuWait::USER_REGS`] of them) and the top of
    /// its user stack, in place of user frames.
    pub user_state: Option<(&'a [u8], &'a [u8])>,
}

impl<'a> OffCpuWait<'a> {
    /// Bytes before the frames.
    const HEADER: usize = 40;
    /// Frame slots of a wait written whole (`2 * MAX_FRAMES`).
    const FRAME_SLOTS: usize = 254;
    /// The user registers a wait with its user stack carries: perf's
    /// x86-64 `PERF_REGS_MASK` (AX..SS, R8..R15).
    pub const USER_REGS: usize = 20;
    /// In the skip count: registers and stack follow every frame slot.
    const WITH_USER_STACK: usize = 0x8000;

    /// Reads the raw data of one sample.
    pub fn parse(raw: &'a [u8]) -> Option<OffCpuWait<'a>> {
        let count = |at| {
            Some(usize::from(u16::from_ne_bytes(
                raw.get(at..at + 2)?.try_into().ok()?,
            )))
        };
        let (skip, kernel, user) = (count(34)?, count(36)?, count(38)?);
        let frames = raw.get(Self::HEADER..Self::HEADER + 8 * (kernel + user))?;
        let user_state = match skip & Self::WITH_USER_STACK {
            0 => None,
            _ => Some(Self::user_state(raw)?),
        };
        let skip = skip & !Self::WITH_USER_STACK;
        Some(OffCpuWait {
            pid: u32_at(raw, 0)?,
            tid: u32_at(raw, 4)?,
            start: u64_at(raw, 8)?,
            period: u64_at(raw, 16)?,
            cgroup: u64_at(raw, 24)?,
            state: count(32)? as u16,
            // The frames above __schedule's are the program's own.
            kernel: &frames[8 * skip.min(kernel)..8 * kernel],
            user: &frames[8 * kernel..],
            user_state,
        })
    }

    /// The ip of the user registers the wait carries, if it carries them
    /// (perf's x86-64 IP, the ninth).
    pub fn user_ip(&self) -> Option<u64> {
        self.user_state.and_then(|(regs, _)| u64_at(regs, 8 * 8))
    }

    /// The registers and the stack after every frame slot.
    fn user_state(raw: &'a [u8]) -> Option<(&'a [u8], &'a [u8])> {
        let regs_at = Self::HEADER + 8 * Self::FRAME_SLOTS;
        let size_at = regs_at + 8 * Self::USER_REGS;
        let size = usize::try_from(u64_at(raw, size_at)?).ok()?;
        let stack = raw.get(size_at + 8..size_at + 8 + size)?;
        Some((raw.get(regs_at..size_at)?, stack))
    }

    /// The kernel's frames, innermost first.
    pub fn kernel_frames(&self) -> impl Iterator<Item = u64> + 'a {
        frames(self.kernel)
    }

    /// The user's frames, innermost first.
    pub fn user_frames(&self) -> impl Iterator<Item = u64> + 'a {
        frames(self.user)
    }
}

fn frames(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes
        .chunks_exact(8)
        .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
}

/// The bytes of `field` before its NUL.
fn c_string(field: &[u8]) -> Option<&[u8]> {
    field.get(..field.iter().position(|&b| b == 0)?)
}

/// Sets the size in `record`'s header (a record cut short to `size`).
pub fn set_size(record: &mut [u8], size: u16) {
    if let Some(field) = record.get_mut(6..8) {
        field.copy_from_slice(&size.to_ne_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::MISC_USER;
    use crate::records::{comm, fork, mmap, mmap2, Mapping, RecordBuilder};

    fn mapping(build_id: Option<&[u8]>) -> Mapping<'_> {
        Mapping {
            start: 0x40_0000,
            len: 0x2000,
            pgoff: 0x1000,
            major: 8,
            minor: 1,
            inode: 1234,
            prot: 5,
            flags: 2,
            filename: b"/usr/bin/true",
            build_id,
        }
    }

    fn header(record: &[u8]) -> RecordHeader {
        RecordHeader::parse(record).unwrap()
    }

    #[test]
    fn mappings_read_back_as_written() {
        let record = mmap2(7, 8, &mapping(None), MISC_USER)
            .finish_untrailed()
            .unwrap();
        let view = Mmap::parse(header(&record), &record).unwrap();
        assert_eq!(
            (view.pid, view.tid, view.start, view.len, view.pgoff),
            (7, 8, 0x40_0000, 0x2000, 0x1000)
        );
        assert_eq!(
            view.file,
            MappedIdentity::Inode {
                major: 8,
                minor: 1,
                inode: 1234
            }
        );
        assert_eq!(view.filename, b"/usr/bin/true");
        let id = [0xab; 20];
        let misc = MISC_USER | MISC_MMAP_BUILD_ID;
        let record = mmap2(7, 8, &mapping(Some(&id)), misc)
            .finish_untrailed()
            .unwrap();
        let view = Mmap::parse(header(&record), &record).unwrap();
        assert_eq!(view.file, MappedIdentity::BuildId(&id));
        assert_eq!(view.filename, b"/usr/bin/true");
        let record = mmap(0, 0, &mapping(None), 1).finish_untrailed().unwrap();
        let view = Mmap::parse(header(&record), &record).unwrap();
        assert_eq!(
            (view.file, view.filename),
            (MappedIdentity::Unknown, &b"/usr/bin/true"[..])
        );
        assert!(Mmap::parse(header(&record), &record[..40]).is_none());
    }

    #[test]
    fn tasks_names_and_losses_read_back_as_written() {
        let record = comm(5, 6, b"worker", 0).finish_untrailed().unwrap();
        assert_eq!(
            Comm::parse(&record),
            Some(Comm {
                pid: 5,
                tid: 6,
                comm: b"worker"
            })
        );
        let record = fork(5, 1, 6, 1, 99).finish_untrailed().unwrap();
        let task = Task {
            pid: 5,
            ppid: 1,
            tid: 6,
            ptid: 1,
            time: 99,
        };
        assert_eq!(Task::parse(&record), Some(task));
        let lost = RecordBuilder::new(RecordType::LOST, 0)
            .u64(3)
            .u64(42)
            .finish_untrailed()
            .unwrap();
        assert_eq!(lost_count(RecordType::LOST, &lost), Some(42));
        let samples = RecordBuilder::new(RecordType::LOST_SAMPLES, 0)
            .u64(9)
            .finish_untrailed()
            .unwrap();
        assert_eq!(lost_count(RecordType::LOST_SAMPLES, &samples), Some(9));
        let record = crate::records::ksymbol(0xffff_0000, 64, 1, 1, "bpf_prog_x")
            .finish_untrailed()
            .unwrap();
        let symbol = Ksymbol::parse(&record).unwrap();
        assert_eq!(
            (symbol.addr, symbol.len, symbol.ksym_type),
            (0xffff_0000, 64, 1)
        );
        assert!(symbol.unregisters());
        assert_eq!(symbol.name, b"bpf_prog_x");
        let poke = RecordBuilder::new(RecordType::TEXT_POKE, 0)
            .u64(0xffff_1000)
            .u16(2)
            .u16(3)
            .bytes(&[1, 2, 7, 8, 9])
            .pad()
            .finish_untrailed()
            .unwrap();
        let poke = TextPoke::parse(&poke).unwrap();
        assert_eq!(
            (poke.addr, poke.old, poke.new),
            (0xffff_1000, &[1, 2][..], &[7, 8, 9][..])
        );
        let mut cut = samples.clone();
        set_size(&mut cut, 8);
        assert_eq!(header(&cut).size, 8);
    }

    #[test]
    fn an_off_cpu_wait_reads_back_from_a_samples_raw_data() {
        // TID, TIME, a callchain of two, then the raw data.
        let sample_type =
            sample_bit::TID | sample_bit::TIME | sample_bit::CALLCHAIN | sample_bit::RAW;
        let mut raw = Vec::new();
        for word in [7u32, 8] {
            raw.extend_from_slice(&word.to_ne_bytes());
        }
        for word in [100u64, 250, 9] {
            raw.extend_from_slice(&word.to_ne_bytes());
        }
        // State 1; the first of the two kernel frames is the program's.
        for half in [1u16, 1, 2, 1] {
            raw.extend_from_slice(&half.to_ne_bytes());
        }
        for frame in [0xffff_ffff_c000_0000u64, 0xffff_ffff_8100_0010, 0x40_1000] {
            raw.extend_from_slice(&frame.to_ne_bytes());
        }
        let sample = RecordBuilder::new(RecordType::SAMPLE, 0)
            .u32(7)
            .u32(8)
            .u64(12345)
            .u64(2)
            .u64(1)
            .u64(2)
            .u32(raw.len() as u32)
            .bytes(&raw)
            .pad()
            .finish_untrailed()
            .unwrap();
        let read = sample_raw(sample_type, &sample).unwrap();
        assert_eq!(&read[..raw.len()], &raw[..]);
        let wait = OffCpuWait::parse(read).unwrap();
        assert_eq!(
            (wait.pid, wait.tid, wait.start, wait.period),
            (7, 8, 100, 250)
        );
        assert_eq!((wait.cgroup, wait.state), (9, 1));
        let kernel: Vec<u64> = wait.kernel_frames().collect();
        assert_eq!(kernel, [0xffff_ffff_8100_0010]);
        assert_eq!(wait.user_frames().collect::<Vec<_>>(), [0x40_1000]);
        assert!(sample_raw(sample_type | sample_bit::READ, &sample).is_none());
        assert!(OffCpuWait::parse(&raw[..50]).is_none());
    }
}
