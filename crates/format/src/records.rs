//! Encoders for the records shardrec synthesizes, byte-compatible with the
//! kernel's (`struct perf_event_*` layouts in `include/uapi/linux/perf_event.h`).

use crate::header::{RecordHeader, RecordType, HEADER_SIZE};
use crate::sample_id::{SampleId, SampleIdLayout};

/// Builds one record: fields in order, then the `sample_id_all` trailer.
pub struct RecordBuilder {
    bytes: Vec<u8>,
}

impl RecordBuilder {
    /// Starts a record of `type_` with `misc` bits.
    pub fn new(type_: RecordType, misc: u16) -> Self {
        let mut bytes = Vec::with_capacity(128);
        RecordHeader {
            type_,
            misc,
            size: 0,
        }
        .write_to(&mut bytes);
        RecordBuilder { bytes }
    }

    /// Appends a u32.
    pub fn u32(mut self, value: u32) -> Self {
        self.bytes.extend_from_slice(&value.to_ne_bytes());
        self
    }

    /// Appends a u64.
    pub fn u64(mut self, value: u64) -> Self {
        self.bytes.extend_from_slice(&value.to_ne_bytes());
        self
    }

    /// Appends a NUL-terminated string padded with NULs to 8 bytes, as the
    /// kernel pads COMM and MMAP names.
    pub fn string(mut self, text: &[u8]) -> Self {
        self.bytes.extend_from_slice(text);
        self.bytes.push(0);
        while self.bytes.len() % 8 != 0 {
            self.bytes.push(0);
        }
        self
    }

    /// Appends bytes as they are.
    pub fn bytes(mut self, bytes: &[u8]) -> Self {
        self.bytes.extend_from_slice(bytes);
        self
    }

    /// Appends a u16.
    pub fn u16(mut self, value: u16) -> Self {
        self.bytes.extend_from_slice(&value.to_ne_bytes());
        self
    }

    /// Appends zeros up to a multiple of 8 bytes.
    pub fn pad(mut self) -> Self {
        self.bytes.resize(self.bytes.len().next_multiple_of(8), 0);
        self
    }

    /// Fills in the size of a record without a trailer: perf's own records
    /// (types 64 and up), which carry no `sample_id`.
    pub fn finish_untrailed(mut self) -> Option<Vec<u8>> {
        let size = u16::try_from(self.bytes.len()).ok()?;
        self.bytes[6..HEADER_SIZE].copy_from_slice(&size.to_ne_bytes());
        Some(self.bytes)
    }

    /// Appends the trailer and fills in the size. Records longer than
    /// 64 KiB cannot be framed and are refused.
    pub fn finish(mut self, layout: &SampleIdLayout, id: &SampleId) -> Option<Vec<u8>> {
        layout.write_trailer(id, &mut self.bytes);
        self.finish_untrailed()
    }
}

/// `PERF_RECORD_COMM`: a thread's name.
pub fn comm(pid: u32, tid: u32, name: &[u8], misc: u16) -> RecordBuilder {
    RecordBuilder::new(RecordType::COMM, misc)
        .u32(pid)
        .u32(tid)
        .string(name)
}

/// `PERF_RECORD_FORK`: `tid` of process `pid` was created by `ptid` of `ppid`.
pub fn fork(pid: u32, ppid: u32, tid: u32, ptid: u32, time: u64) -> RecordBuilder {
    RecordBuilder::new(RecordType::FORK, 0)
        .u32(pid)
        .u32(ppid)
        .u32(tid)
        .u32(ptid)
        .u64(time)
}

/// A mapping of a file into an address space.
#[derive(Clone, Debug, Default)]
pub struct Mapping<'a> {
    /// Start address.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// Device major number.
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// Inode number.
    pub inode: u64,
    /// `PROT_*` bits.
    pub prot: u32,
    /// `MAP_*` bits.
    pub flags: u32,
    /// The mapped file's path (or a name such as `[vdso]`).
    pub filename: &'a [u8],
    /// The file's build id (up to 20 bytes), written instead of the
    /// device and inode where known: the caller adds
    /// [`MISC_MMAP_BUILD_ID`](crate::header::MISC_MMAP_BUILD_ID).
    pub build_id: Option<&'a [u8]>,
}

/// `PERF_RECORD_MMAP2`: a mapping with its file's identity.
pub fn mmap2(pid: u32, tid: u32, map: &Mapping, misc: u16) -> RecordBuilder {
    let record = RecordBuilder::new(RecordType::MMAP2, misc)
        .u32(pid)
        .u32(tid)
        .u64(map.start)
        .u64(map.len)
        .u64(map.pgoff);
    let record = match map.build_id {
        Some(id) => {
            let id = &id[..id.len().min(20)];
            let mut field = [0u8; 24];
            field[0] = id.len() as u8;
            field[4..4 + id.len()].copy_from_slice(id);
            record.bytes(&field)
        }
        None => record.u32(map.major).u32(map.minor).u64(map.inode).u64(0),
    };
    record.u32(map.prot).u32(map.flags).string(map.filename)
}

/// `PERF_RECORD_MMAP`: a mapping by name only, as perf writes the kernel's.
pub fn mmap(pid: u32, tid: u32, map: &Mapping, misc: u16) -> RecordBuilder {
    RecordBuilder::new(RecordType::MMAP, misc)
        .u32(pid)
        .u32(tid)
        .u64(map.start)
        .u64(map.len)
        .u64(map.pgoff)
        .string(map.filename)
}

/// `PERF_RECORD_KSYMBOL_TYPE_BPF`
pub const KSYMBOL_TYPE_BPF: u16 = 1;
/// `PERF_BPF_EVENT_PROG_LOAD`
pub const BPF_EVENT_PROG_LOAD: u16 = 1;
/// `PERF_BPF_EVENT_PROG_UNLOAD`
pub const BPF_EVENT_PROG_UNLOAD: u16 = 2;

/// `PERF_RECORD_KSYMBOL`: a kernel symbol (here a BPF program's JITed
/// code) registered at `addr`, `len` bytes long.
pub fn ksymbol(addr: u64, len: u32, ksym_type: u16, flags: u16, name: &str) -> RecordBuilder {
    RecordBuilder::new(RecordType::KSYMBOL, 0)
        .u64(addr)
        .u32(len)
        .u32(u32::from(ksym_type) | u32::from(flags) << 16)
        .string(name.as_bytes())
}

/// `PERF_RECORD_BPF_EVENT`: program `id` with `tag` was loaded or unloaded.
pub fn bpf_event(event_type: u16, flags: u16, id: u32, tag: [u8; 8]) -> RecordBuilder {
    RecordBuilder::new(RecordType::BPF_EVENT, 0)
        .u32(u32::from(event_type) | u32::from(flags) << 16)
        .u32(id)
        .u64(u64::from_ne_bytes(tag))
}

/// The `sample_type` of perf's `offcpu-time` event (`OFFCPU_SAMPLE_TYPES`
/// in perf's `util/off_cpu.h`): IDENTIFIER, IP, TID, TIME, ID, CPU,
/// PERIOD, CALLCHAIN, CGROUP.
pub const OFF_CPU_SAMPLE_TYPE: u64 = {
    use crate::sample_id::{CALLCHAIN, CGROUP, CPU, ID, IDENTIFIER, IP, PERIOD, TID, TIME};
    IDENTIFIER | IP | TID | TIME | ID | CPU | PERIOD | CALLCHAIN | CGROUP
};

/// The attr perf.data gives shardrec's off-CPU output event, whose
/// `kernel_attr` has the kernel write raw waits: perf's `offcpu-time`
/// event, a `PERF_COUNT_SW_BPF_OUTPUT` event (as the kernel's is) with
/// perf's sample type. Its samples' trailer fields (TID, TIME, ID, CPU,
/// IDENTIFIER) are the kernel attr's, so its LOST records read the same.
///
/// With `--call-graph dwarf`, the kernel attr holds the user registers
/// and stack size asked for (`sample_regs_user`, `sample_stack_user`,
/// which the kernel reads only with their sample_type bits): each
/// `offcpu-time` sample then carries them, for perf to unwind.
pub fn off_cpu_attr(kernel_attr: &[u8]) -> Vec<u8> {
    let attr = crate::views::AttrBytes(kernel_attr);
    attr.with_sample_type(off_cpu_sample_type(attr.sample_stack_user()))
}

/// The most user stack an off-CPU wait carries: a record is at most 64
/// KiB (the program's `MAX_USER_STACK`).
const OFF_CPU_MAX_USER_STACK: u32 = 32768;

/// The user stack bytes an off-CPU wait carries for `--call-graph
/// dwarf,ASKED`: the attr says so and the program copies so much.
pub fn off_cpu_user_stack(asked: u32) -> u32 {
    asked.min(OFF_CPU_MAX_USER_STACK) & !7
}

/// The `offcpu-time` event's `sample_type`, `user_stack` bytes of user
/// stack in each sample (none: 0).
fn off_cpu_sample_type(user_stack: u32) -> u64 {
    use crate::sample_id::{REGS_USER, STACK_USER};
    match user_stack {
        0 => OFF_CPU_SAMPLE_TYPE,
        _ => OFF_CPU_SAMPLE_TYPE | REGS_USER | STACK_USER,
    }
}

/// The `offcpu-time` sample of a wait the off-CPU program wrote into an
/// output event whose samples are laid out as `layout` says (its
/// `sample_type` has TIME, CPU and RAW): `None` for a record that holds
/// no wait. `user_stack`: the event's samples carry user registers and
/// stack ([`off_cpu_attr`]).
pub fn off_cpu_sample_of_output(
    layout: &crate::SampleIdLayout,
    user_stack: bool,
    record: &[u8],
) -> Option<Vec<u8>> {
    let fields = layout.parse(record, RecordType::SAMPLE)?;
    let raw = crate::views::sample_raw(layout.sample_type(), record)?;
    let wait = crate::views::OffCpuWait::parse(raw)?;
    let place = SamplePlace {
        id: fields.id,
        time: fields.time,
        cpu: fields.cpu,
        user_stack,
    };
    off_cpu_sample(&wait, &place)
}

/// Where an `offcpu-time` sample goes: its event's id, the time and CPU
/// the wait ended on, and whether the event's samples carry user
/// registers and stack.
#[derive(Clone, Copy, Debug)]
pub struct SamplePlace {
    /// The `offcpu-time` event's id.
    pub id: u64,
    /// When the wait ended.
    pub time: u64,
    /// Where it ended.
    pub cpu: u32,
    /// Whether the event's samples carry user registers and stack.
    pub user_stack: bool,
}

/// The `sample_type` of `--off-cpu`'s output events, into which the
/// off-CPU program writes each wait as raw data: who, when and where it
/// ended, and the event's id (so a LOST record's trailer is the
/// `offcpu-time` attr's too).
pub const OFF_CPU_OUTPUT_SAMPLE_TYPE: u64 = {
    use crate::sample_id::{CPU, ID, IDENTIFIER, RAW, TID, TIME};
    IDENTIFIER | TID | TIME | ID | CPU | RAW
};

/// A wait in the off-CPU program's layout (`struct wait` of
/// `off_cpu.bpf.c`, which [`crate::views::OffCpuWait`] reads): for the
/// waits the program sums in the kernel, which the VIP writes at the end.
#[derive(Clone, Copy, Debug)]
pub struct WaitParts<'a> {
    /// The process and thread.
    pub pid: u32,
    /// See `pid`.
    pub tid: u32,
    /// Its length (ns): summed waits, their total.
    pub period: u64,
    /// The task's cgroup id.
    pub cgroup: u64,
    /// The task's state as it went to sleep.
    pub state: u16,
    /// Kernel frames above `__schedule` (the program's own).
    pub kernel_skip: u16,
    /// The kernel's frames, then the user's, innermost first.
    pub kernel: &'a [u64],
    /// See `kernel`.
    pub user: &'a [u64],
}

/// The raw bytes of a wait.
pub fn off_cpu_wait(wait: &WaitParts<'_>) -> Vec<u8> {
    let mut raw = Vec::with_capacity(40 + 8 * (wait.kernel.len() + wait.user.len()));
    for word in [wait.pid, wait.tid] {
        raw.extend_from_slice(&word.to_ne_bytes());
    }
    for word in [0, wait.period, wait.cgroup] {
        raw.extend_from_slice(&word.to_ne_bytes());
    }
    let counts = [wait.kernel.len(), wait.user.len()].map(|n| n as u16);
    for half in [wait.state, wait.kernel_skip, counts[0], counts[1]] {
        raw.extend_from_slice(&half.to_ne_bytes());
    }
    for frame in wait.kernel.iter().chain(wait.user) {
        raw.extend_from_slice(&frame.to_ne_bytes());
    }
    raw
}

/// A sample of an off-CPU output event holding the wait `raw`, as the
/// kernel writes it ([`OFF_CPU_OUTPUT_SAMPLE_TYPE`]; the raw data padded
/// so the sample ends on 8 bytes, the padding counted in its size).
pub fn off_cpu_output_sample(raw: &[u8], id: u64, time: u64, cpu: u32) -> Option<Vec<u8>> {
    let pid = u32::from_ne_bytes(raw.get(0..4)?.try_into().ok()?);
    let tid = u32::from_ne_bytes(raw.get(4..8)?.try_into().ok()?);
    let size = (4 + raw.len()).next_multiple_of(8) - 4;
    RecordBuilder::new(RecordType::SAMPLE, crate::header::MISC_KERNEL)
        .u64(id)
        .u32(pid)
        .u32(tid)
        .u64(time)
        .u64(id)
        .u32(cpu)
        .u32(0)
        .u32(u32::try_from(size).ok()?)
        .bytes(raw)
        .pad()
        .finish_untrailed()
}

/// `PERF_CONTEXT_KERNEL` and `PERF_CONTEXT_USER`: a callchain's markers
/// before the kernel's frames and the user's.
const CONTEXT_KERNEL: u64 = -128i64 as u64;
const CONTEXT_USER: u64 = -512i64 as u64;

/// `PERF_SAMPLE_REGS_ABI_64`.
const REGS_ABI_64: u64 = 2;

/// One off-CPU wait as a sample of perf's `offcpu-time` event, where
/// `place` says: the waiting thread, the wait's length as the period, its
/// cgroup, and the kernel's then the user's frames where it waited; or,
/// with its user registers and stack, the kernel's frames alone and
/// those, for perf to unwind the user's (as a `--call-graph dwarf`
/// sample's). The ip is the innermost user frame (perf's is too), or the
/// kernel's for a kernel thread.
pub fn off_cpu_sample(wait: &crate::views::OffCpuWait<'_>, place: &SamplePlace) -> Option<Vec<u8>> {
    let kernel: Vec<u64> = wait.kernel_frames().collect();
    let user: Vec<u64> = wait.user_frames().collect();
    let (ip, misc) = match (wait.user_ip().or(user.first().copied()), kernel.first()) {
        (Some(ip), _) => (ip, crate::header::MISC_USER),
        (None, Some(&ip)) => (ip, crate::header::MISC_KERNEL),
        (None, None) => (0, crate::header::MISC_USER),
    };
    let mut chain = Vec::with_capacity(kernel.len() + user.len() + 2);
    if !kernel.is_empty() {
        chain.push(CONTEXT_KERNEL);
        chain.extend(&kernel);
    }
    if !user.is_empty() {
        chain.push(CONTEXT_USER);
        chain.extend(&user);
    }
    let mut record = RecordBuilder::new(RecordType::SAMPLE, misc)
        .u64(place.id)
        .u64(ip)
        .u32(wait.pid)
        .u32(wait.tid)
        .u64(place.time)
        .u64(place.id)
        .u32(place.cpu)
        .u32(0)
        .u64(wait.period)
        .u64(chain.len() as u64);
    for frame in chain {
        record = record.u64(frame);
    }
    if place.user_stack {
        record = user_regs_and_stack(record, wait.user_state);
    }
    record.u64(wait.cgroup).finish_untrailed()
}

/// A sample's REGS_USER and STACK_USER: the ABI and registers, then the
/// stack's size, bytes and size again (what was copied); or no
/// registers and an empty stack, for a wait without (a sum of short
/// waits), as the kernel writes them for a kernel thread.
fn user_regs_and_stack(record: RecordBuilder, state: Option<(&[u8], &[u8])>) -> RecordBuilder {
    let Some((regs, stack)) = state.filter(|(_, stack)| !stack.is_empty()) else {
        return record.u64(0).u64(0);
    };
    let size = stack.len() as u64;
    record
        .u64(REGS_ABI_64)
        .bytes(regs)
        .u64(size)
        .bytes(stack)
        .u64(size)
}

/// The fields of a `PERF_RECORD_BPF_EVENT`: (type, id, tag).
pub fn parse_bpf_event(record: &[u8]) -> Option<(u16, u32, [u8; 8])> {
    let type_ = u16::from_ne_bytes(record.get(8..10)?.try_into().ok()?);
    let id = crate::u32_at(record, 12)?;
    let tag = record.get(16..24)?.try_into().ok()?;
    Some((type_, id, tag))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::MISC_USER;
    use crate::sample_id::{IDENTIFIER, TID, TIME};
    use crate::walk::{End, RecordWalker};

    #[test]
    fn comm_is_padded_and_framed() {
        let layout = SampleIdLayout::new(IDENTIFIER | TID | TIME);
        let id = SampleId {
            pid: 1,
            tid: 1,
            id: 9,
            ..Default::default()
        };
        let record = comm(1, 1, b"systemd", MISC_USER)
            .finish(&layout, &id)
            .unwrap();
        // header 8 + pid/tid 8 + "systemd\0" 8 + trailer 24
        assert_eq!(record.len(), 48);
        let mut walker = RecordWalker::new(&record);
        let parsed = walker.next().unwrap();
        assert_eq!(parsed.header.type_, RecordType::COMM);
        assert_eq!(&parsed.bytes[16..24], b"systemd\0");
        assert_eq!(layout.parse(parsed.bytes, RecordType::COMM), Some(id));
        assert!(walker.next().is_none());
        assert_eq!(walker.end(), End::Clean);
    }

    #[test]
    fn mmap2_matches_kernel_layout() {
        let layout = SampleIdLayout::new(IDENTIFIER);
        let map = Mapping {
            start: 0x1000,
            len: 0x2000,
            filename: b"/bin/true",
            ..Default::default()
        };
        let record = mmap2(5, 5, &map, MISC_USER)
            .finish(&layout, &SampleId::default())
            .unwrap();
        // 8 + 8 + 24 + 8 + 16 + 8 + "/bin/true\0" padded to 16 + 8
        assert_eq!(record.len(), 96);
        assert_eq!(&record[72..81], b"/bin/true");
        // With a build id: its size, 3 reserved bytes, the id padded to 20
        // bytes where the device and inode were; the rest in place.
        let id = [0xab; 20];
        let map = Mapping {
            build_id: Some(&id),
            prot: 5,
            ..map
        };
        let record = mmap2(5, 5, &map, MISC_USER)
            .finish(&layout, &SampleId::default())
            .unwrap();
        assert_eq!(record.len(), 96);
        assert_eq!(record[40], 20);
        assert_eq!(&record[44..64], &id);
        assert_eq!(crate::u32_at(&record, 64), Some(5));
        assert_eq!(&record[72..81], b"/bin/true");
    }

    #[test]
    fn bpf_records_match_the_kernel_layout() {
        let layout = SampleIdLayout::new(IDENTIFIER);
        let id = SampleId::default();
        let event = bpf_event(BPF_EVENT_PROG_LOAD, 0, 42, *b"abcdefgh")
            .finish(&layout, &id)
            .unwrap();
        assert_eq!(event.len(), 8 + 16 + 8);
        assert_eq!(
            parse_bpf_event(&event),
            Some((BPF_EVENT_PROG_LOAD, 42, *b"abcdefgh"))
        );
        let sym = ksymbol(
            0xffff_ffff_c000_0000,
            64,
            KSYMBOL_TYPE_BPF,
            0,
            "bpf_prog_0011223344556677_f",
        )
        .finish(&layout, &id)
        .unwrap();
        // header 8 + addr 8 + len/type/flags 8 + name 28+NUL padded to 32 + id 8
        assert_eq!(sym.len(), 64);
        assert_eq!(&sym[24..51], b"bpf_prog_0011223344556677_f");
    }

    #[test]
    fn a_summed_wait_reads_back_as_the_program_writes_one() {
        let wait = WaitParts {
            pid: 7,
            tid: 8,
            period: 5_000,
            cgroup: 9,
            state: 2,
            kernel_skip: 1,
            kernel: &[0xffff_ffff_c000_0000, 0xffff_ffff_8100_0010],
            user: &[0x40_1000],
        };
        let sample = off_cpu_output_sample(&off_cpu_wait(&wait), 42, 1234, 3).unwrap();
        assert_eq!(sample.len() % 8, 0);
        let layout = SampleIdLayout::new(OFF_CPU_OUTPUT_SAMPLE_TYPE);
        let fields = layout.parse(&sample, RecordType::SAMPLE).unwrap();
        assert_eq!(
            (fields.id, fields.time, fields.cpu, fields.tid),
            (42, 1234, 3, 8)
        );
        let raw = crate::views::sample_raw(OFF_CPU_OUTPUT_SAMPLE_TYPE, &sample).unwrap();
        let read = crate::views::OffCpuWait::parse(raw).unwrap();
        assert_eq!(
            (read.pid, read.tid, read.period, read.state),
            (7, 8, 5_000, 2)
        );
        assert_eq!(
            read.kernel_frames().collect::<Vec<_>>(),
            [0xffff_ffff_8100_0010]
        );
        assert_eq!(read.user_frames().collect::<Vec<_>>(), [0x40_1000]);
        let perfs = off_cpu_sample_of_output(&layout, false, &sample).unwrap();
        assert!(perfs.len() > 40);
    }

    /// Event 42, ended at 5000 on CPU 3.
    fn place(user_stack: bool) -> SamplePlace {
        SamplePlace {
            id: 42,
            time: 5000,
            cpu: 3,
            user_stack,
        }
    }

    /// `record` as native-endian u64 words.
    fn words_of(record: &[u8]) -> Vec<u64> {
        let words = record.chunks_exact(8);
        words
            .map(|w| u64::from_ne_bytes(w.try_into().unwrap()))
            .collect()
    }

    /// A wait as the program writes it with `--call-graph dwarf`: one
    /// kernel frame, every frame slot, 20 registers (the ip, 8th, is
    /// 0x40_1234) and `stack` bytes of stack.
    fn dwarf_wait(stack: usize) -> Vec<u8> {
        let mut raw = Vec::new();
        for word in [7u32, 8] {
            raw.extend_from_slice(&word.to_ne_bytes());
        }
        for word in [100u64, 250, 9] {
            raw.extend_from_slice(&word.to_ne_bytes());
        }
        for half in [1u16, 0x8001, 2, 0] {
            raw.extend_from_slice(&half.to_ne_bytes());
        }
        let mut frames = [0u64; 254];
        frames[..2].copy_from_slice(&[0xffff_ffff_8100_0000, 0xffff_ffff_8100_0010]);
        let regs: Vec<u64> = (0..20)
            .map(|r| if r == 8 { 0x40_1234 } else { r })
            .collect();
        for word in frames.iter().chain(&regs).chain([&(stack as u64)]) {
            raw.extend_from_slice(&word.to_ne_bytes());
        }
        raw.extend((0..stack).map(|i| i as u8));
        raw
    }

    #[test]
    fn a_wait_with_its_user_stack_becomes_a_sample_perf_unwinds() {
        let raw = dwarf_wait(64);
        let wait = crate::views::OffCpuWait::parse(&raw).unwrap();
        let (regs, stack) = wait.user_state.expect("registers and stack");
        assert_eq!((regs.len(), stack.len()), (160, 64));
        let record = off_cpu_sample(&wait, &place(true)).unwrap();
        let words = words_of(&record);
        let header = RecordHeader::parse(&record).unwrap();
        assert_eq!(header.misc, crate::header::MISC_USER);
        // The ip is the registers', the callchain the kernel's frames
        // only (the skip count's flag bit left out): perf unwinds the rest.
        assert_eq!(words[2], 0x40_1234);
        assert_eq!(&words[8..11], [2, CONTEXT_KERNEL, 0xffff_ffff_8100_0010]);
        // The registers' ABI and registers, the stack's size, bytes and
        // size, then the cgroup.
        assert_eq!(words[11], REGS_ABI_64);
        assert_eq!(
            &words[12..32],
            &(0..20)
                .map(|r| if r == 8 { 0x40_1234 } else { r })
                .collect::<Vec<u64>>()[..]
        );
        assert_eq!(words[32], 64);
        assert_eq!(words[33 + 8], 64);
        assert_eq!(words[34 + 8], 9);
        assert_eq!(words.len(), 35 + 8);
        // A wait without (summed short waits) has empty ones.
        let mut plain = raw[..40].to_vec();
        plain[34..36].copy_from_slice(&1u16.to_ne_bytes());
        plain[36..38].copy_from_slice(&0u16.to_ne_bytes());
        let wait = crate::views::OffCpuWait::parse(&plain).unwrap();
        let record = off_cpu_sample(&wait, &place(true)).unwrap();
        let words = words_of(&record);
        assert_eq!(&words[words.len() - 3..], [0, 0, 9]);
        // The attr says so when the kernel attr asks for a stack.
        let mut kernel_attr = vec![0u8; 128];
        kernel_attr[88..92].copy_from_slice(&8192u32.to_ne_bytes());
        let attr = off_cpu_attr(&kernel_attr);
        let sample_type = crate::views::AttrBytes(&attr).sample_type();
        let both = crate::sample_id::REGS_USER | crate::sample_id::STACK_USER;
        assert_eq!(sample_type & both, both);
        assert_eq!(
            crate::views::AttrBytes(&off_cpu_attr(&[0u8; 128])).sample_type() & both,
            0
        );
    }

    #[test]
    fn an_off_cpu_wait_becomes_perfs_offcpu_time_sample() {
        let mut raw = Vec::new();
        raw.extend_from_slice(&7u32.to_ne_bytes());
        raw.extend_from_slice(&8u32.to_ne_bytes());
        for word in [100u64, 250, 9] {
            raw.extend_from_slice(&word.to_ne_bytes());
        }
        raw.extend_from_slice(&1u32.to_ne_bytes());
        raw.extend_from_slice(&1u16.to_ne_bytes());
        raw.extend_from_slice(&2u16.to_ne_bytes());
        for frame in [0xffff_ffff_8100_0000u64, 0x40_1000, 0x40_2000] {
            raw.extend_from_slice(&frame.to_ne_bytes());
        }
        let wait = crate::views::OffCpuWait::parse(&raw).unwrap();
        let record = off_cpu_sample(&wait, &place(false)).unwrap();
        let words = words_of(&record);
        let header = RecordHeader::parse(&record).unwrap();
        assert_eq!(
            (header.type_, header.misc),
            (RecordType::SAMPLE, crate::header::MISC_USER)
        );
        assert_eq!(header.size as usize, record.len());
        // identifier, ip (the innermost user frame), pid/tid, time, id,
        // cpu, period, the callchain of 2 markers and 3 frames, cgroup.
        assert_eq!(&words[1..3], [42, 0x40_1000]);
        assert_eq!(words[3], 8 << 32 | 7);
        assert_eq!(&words[4..8], [5000, 42, 3, 250]);
        assert_eq!(words[8], 5);
        assert_eq!(
            &words[9..14],
            [
                CONTEXT_KERNEL,
                0xffff_ffff_8100_0000,
                CONTEXT_USER,
                0x40_1000,
                0x40_2000
            ]
        );
        assert_eq!(words[14], 9);
        assert_eq!(words.len(), 15);
        let layout = SampleIdLayout::new(OFF_CPU_SAMPLE_TYPE);
        let id = layout.parse(&record, RecordType::SAMPLE).unwrap();
        assert_eq!(
            (id.pid, id.tid, id.time, id.id, id.cpu),
            (7, 8, 5000, 42, 3)
        );
    }
}
