//! Where the identifying fields of a record are, given its attr's `sample_type`.
//!
//! A sample starts with `IDENTIFIER, IP, TID, TIME, ADDR, ID, STREAM_ID, CPU`
//! (each present when its bit is set) before any variable-length field, so
//! these fields sit at offsets fixed by the `sample_type`. Every other record
//! type ends with the `sample_id_all` trailer: `TID, TIME, ID, STREAM_ID, CPU,
//! IDENTIFIER`, so the identifier is always its last u64. The layout is
//! computed once per attr, as `perf_evsel__calc_id_pos` does in perf.

use crate::header::{RecordType, HEADER_SIZE};
use crate::u64_at;

/// `PERF_SAMPLE_IP`
pub const IP: u64 = 1 << 0;
/// `PERF_SAMPLE_TID`
pub const TID: u64 = 1 << 1;
/// `PERF_SAMPLE_TIME`
pub const TIME: u64 = 1 << 2;
/// `PERF_SAMPLE_ADDR`
pub const ADDR: u64 = 1 << 3;
/// `PERF_SAMPLE_ID`
pub const ID: u64 = 1 << 6;
/// `PERF_SAMPLE_CPU`
pub const CPU: u64 = 1 << 7;
/// `PERF_SAMPLE_STREAM_ID`
pub const STREAM_ID: u64 = 1 << 9;
/// `PERF_SAMPLE_IDENTIFIER`
pub const IDENTIFIER: u64 = 1 << 16;
/// `PERF_SAMPLE_READ`
pub const READ: u64 = 1 << 4;
/// `PERF_SAMPLE_CALLCHAIN`
pub const CALLCHAIN: u64 = 1 << 5;
/// `PERF_SAMPLE_PERIOD`
pub const PERIOD: u64 = 1 << 8;
/// `PERF_SAMPLE_RAW`
pub const RAW: u64 = 1 << 10;
/// `PERF_SAMPLE_CGROUP`
pub const CGROUP: u64 = 1 << 21;
/// `PERF_SAMPLE_REGS_USER`.
pub const REGS_USER: u64 = 1 << 12;
/// `PERF_SAMPLE_STACK_USER`.
pub const STACK_USER: u64 = 1 << 13;

/// The fields a sample starts with, in the kernel's order (the rest of a
/// sample is not needed here).
const SAMPLE_ORDER: [u64; 8] = [IDENTIFIER, IP, TID, TIME, ADDR, ID, STREAM_ID, CPU];
/// The fields of a `sample_id_all` trailer, in the kernel's order.
const TRAILER_ORDER: [u64; 6] = [TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER];

/// The identifying fields of one record; absent fields read as 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleId {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Timestamp (perf clock, ns).
    pub time: u64,
    /// The kernel's id of the event that produced the record.
    pub id: u64,
    /// The id of the event the record's event is inherited from.
    pub stream_id: u64,
    /// CPU the record was produced on.
    pub cpu: u32,
    /// Instruction pointer (samples only).
    pub ip: u64,
}

/// Offsets of the identifying fields for one `sample_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleIdLayout {
    sample_type: u64,
    trailer_size: usize,
    /// Offset of the time in a sample, and in a trailer, if recorded.
    sample_time_at: Option<usize>,
    trailer_time_at: Option<usize>,
    /// Offsets of the ip and of the pid in a sample, if recorded.
    sample_ip_at: Option<usize>,
    sample_pid_at: Option<usize>,
}

impl SampleIdLayout {
    /// The layout of records from an attr with this `sample_type`.
    pub fn new(sample_type: u64) -> Self {
        // Bytes taken by whichever of `fields` are recorded.
        let size_of = |fields: &[u64]| {
            let present = fields.iter().filter(|&&bit| sample_type & bit != 0);
            present.count() * 8
        };
        let at = |bit: u64, before: &[u64]| {
            (sample_type & bit != 0).then(|| HEADER_SIZE + size_of(before))
        };
        SampleIdLayout {
            sample_type,
            trailer_size: size_of(&[TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER]),
            sample_time_at: at(TIME, &[IDENTIFIER, IP, TID]),
            trailer_time_at: (sample_type & TIME != 0).then(|| size_of(&[TID])),
            sample_ip_at: at(IP, &[IDENTIFIER]),
            sample_pid_at: at(TID, &[IDENTIFIER, IP]),
        }
    }

    /// The `sample_type` it lays out.
    pub fn sample_type(&self) -> u64 {
        self.sample_type
    }

    /// A sample's pid and ip alone, as [`SampleIdLayout::parse`] would
    /// give them (0 when not recorded), read at their fixed offsets: the
    /// merge asks this of every sample to find the binaries it hits.
    pub fn sample_pid_ip(&self, sample: &[u8]) -> Option<(u32, u64)> {
        let read = |at: Option<usize>| match at {
            Some(at) => u64_at(sample, at),
            None => Some(0),
        };
        Some((split(read(self.sample_pid_at)?).0, read(self.sample_ip_at)?))
    }

    /// The record's time alone, as [`SampleIdLayout::parse`] would give
    /// it (0 when not recorded), read at its fixed offset: the merge reads
    /// every record's time, and its whole identity only for some.
    pub fn time(&self, record: &[u8], type_: RecordType) -> Option<u64> {
        if type_ == RecordType::SAMPLE {
            return match self.sample_time_at {
                Some(at) => u64_at(record, at),
                None => self.parse_sample(record).map(|id| id.time),
            };
        }
        let start = self.trailer_start(record, type_)?;
        match self.trailer_time_at {
            Some(at) => u64_at(record, start + at),
            None => self.parse_trailer(record, type_).map(|id| id.time),
        }
    }

    /// Bytes the `sample_id_all` trailer takes at the end of a non-sample record.
    pub fn trailer_size(&self) -> usize {
        self.trailer_size
    }

    fn has(&self, bit: u64) -> bool {
        self.sample_type & bit != 0
    }

    /// The identifying fields of any record: from the fixed head of a
    /// sample, or from the trailer of anything else. `None` if the record is
    /// too short to hold them.
    pub fn parse(&self, record: &[u8], type_: RecordType) -> Option<SampleId> {
        if type_ == RecordType::SAMPLE {
            self.parse_sample(record)
        } else {
            self.parse_trailer(record, type_)
        }
    }

    /// The record's length without any padding the kernel left after its
    /// trailer (see [`body_end`]); the record's own length otherwise.
    pub fn true_len(&self, record: &[u8], type_: RecordType) -> usize {
        body_end(record, type_)
            .map(|end| end + self.trailer_size)
            .filter(|&len| len <= record.len())
            .unwrap_or(record.len())
    }

    fn parse_sample(&self, record: &[u8]) -> Option<SampleId> {
        self.read_fields(Fields::new(record, HEADER_SIZE), &SAMPLE_ORDER)
    }

    /// Where a non-sample record's trailer starts.
    fn trailer_start(&self, record: &[u8], type_: RecordType) -> Option<usize> {
        let start = match body_end(record, type_) {
            Some(end) => end,
            None => record.len().checked_sub(self.trailer_size)?,
        };
        (start >= HEADER_SIZE).then_some(start)
    }

    fn parse_trailer(&self, record: &[u8], type_: RecordType) -> Option<SampleId> {
        let start = self.trailer_start(record, type_)?;
        self.read_fields(Fields::new(record, start), &TRAILER_ORDER)
    }

    /// Reads, in `order`, each field this layout has.
    fn read_fields(&self, mut fields: Fields, order: &[u64]) -> Option<SampleId> {
        let mut id = SampleId::default();
        for &bit in order.iter().filter(|&&bit| self.has(bit)) {
            let value = fields.next()?;
            match bit {
                IDENTIFIER | ID => id.id = value,
                IP => id.ip = value,
                TID => (id.pid, id.tid) = split(value),
                TIME => id.time = value,
                STREAM_ID => id.stream_id = value,
                CPU => id.cpu = split(value).0,
                _ => {} // ADDR: passed over
            }
        }
        Some(id)
    }

    /// Appends the trailer for `id`, as the kernel would write it.
    pub fn write_trailer(&self, id: &SampleId, out: &mut Vec<u8>) {
        let mut put = |bit: u64, value: u64| {
            if self.has(bit) {
                out.extend_from_slice(&value.to_ne_bytes());
            }
        };
        put(TID, join(id.pid, id.tid));
        put(TIME, id.time);
        put(ID, id.id);
        put(STREAM_ID, id.stream_id);
        put(CPU, join(id.cpu, 0));
        put(IDENTIFIER, id.id);
    }
}

/// Where the body of a KSYMBOL or BPF_EVENT record ends and its trailer
/// begins. The kernel sizes these records once per listening recorder
/// (`perf_event_header__init_id` adds each one's id header to a shared
/// size), so with two recorders the trailer is followed by zeros and cannot
/// be found from the end. Their bodies have a known length: BPF_EVENT 16
/// bytes; KSYMBOL 16 bytes and a NUL-terminated name padded to 8.
pub fn body_end(record: &[u8], type_: RecordType) -> Option<usize> {
    match type_ {
        RecordType::BPF_EVENT => Some(HEADER_SIZE + 16).filter(|&end| end <= record.len()),
        RecordType::KSYMBOL => {
            let name = record.get(HEADER_SIZE + 16..)?;
            let nul = name.iter().position(|&b| b == 0)?;
            Some(HEADER_SIZE + 16 + (nul + 1).next_multiple_of(8))
                .filter(|&end| end <= record.len())
        }
        _ => None,
    }
}

/// The event id of a record whose attr has `PERF_SAMPLE_IDENTIFIER`, which
/// can be found without knowing the attr: first field of a sample, last u64
/// of anything else. (For KSYMBOL and BPF_EVENT records the kernel may have
/// padded, use [`padded_identifier`].)
pub fn identifier(record: &[u8], type_: RecordType) -> Option<u64> {
    if type_ == RecordType::SAMPLE {
        u64_at(record, HEADER_SIZE)
    } else {
        u64_at(record, record.len().checked_sub(8)?.max(HEADER_SIZE))
    }
}

/// The id of a KSYMBOL or BPF_EVENT record whose trailer is
/// `trailer_size` bytes, read after the body instead of from the end (see
/// [`body_end`]).
pub fn padded_identifier(record: &[u8], type_: RecordType, trailer_size: usize) -> Option<u64> {
    u64_at(
        record,
        body_end(record, type_)? + trailer_size.checked_sub(8)?,
    )
}

struct Fields<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Fields<'a> {
    fn new(bytes: &'a [u8], offset: usize) -> Self {
        Fields { bytes, offset }
    }

    fn next(&mut self) -> Option<u64> {
        let value = u64_at(self.bytes, self.offset)?;
        self.offset += 8;
        Some(value)
    }
}

/// Two u32 packed in a u64 as the kernel writes them (first at the lower address).
fn split(value: u64) -> (u32, u32) {
    let bytes = value.to_ne_bytes();
    (
        u32::from_ne_bytes(bytes[..4].try_into().unwrap()),
        u32::from_ne_bytes(bytes[4..].try_into().unwrap()),
    )
}

fn join(first: u32, second: u32) -> u64 {
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&first.to_ne_bytes());
    bytes[4..].copy_from_slice(&second.to_ne_bytes());
    u64::from_ne_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::{RecordHeader, RecordType};

    const TYPE: u64 = IDENTIFIER | IP | TID | TIME | CPU | (1 << 8);

    #[test]
    fn trailer_round_trips() {
        let layout = SampleIdLayout::new(TYPE);
        assert_eq!(layout.trailer_size(), 32);
        let id = SampleId {
            pid: 10,
            tid: 11,
            time: 12345,
            id: 77,
            stream_id: 0,
            cpu: 3,
            ip: 0,
        };
        let mut record = Vec::new();
        RecordHeader {
            type_: RecordType::COMM,
            misc: 0,
            size: 48,
        }
        .write_to(&mut record);
        record.extend_from_slice(&[0; 8]);
        layout.write_trailer(&id, &mut record);
        assert_eq!(layout.parse(&record, RecordType::COMM), Some(id));
        assert_eq!(layout.time(&record, RecordType::COMM), Some(12345));
        assert_eq!(identifier(&record, RecordType::COMM), Some(77));
    }

    #[test]
    fn sample_fields_at_fixed_offsets() {
        let layout = SampleIdLayout::new(TYPE);
        let mut record = Vec::new();
        RecordHeader {
            type_: RecordType::SAMPLE,
            misc: 0,
            size: 56,
        }
        .write_to(&mut record);
        for v in [5u64, 0xffff_ffff_8100_0000, join(7, 8), 999, join(1, 0), 1] {
            record.extend_from_slice(&v.to_ne_bytes());
        }
        let id = layout.parse(&record, RecordType::SAMPLE).unwrap();
        assert_eq!((id.id, id.pid, id.tid, id.time, id.cpu), (5, 7, 8, 999, 1));
        assert_eq!(layout.time(&record, RecordType::SAMPLE), Some(999));
        assert_eq!(identifier(&record, RecordType::SAMPLE), Some(5));
        assert_eq!(layout.parse(&record[..20], RecordType::SAMPLE), None);
        assert_eq!(
            layout.sample_pid_ip(&record),
            Some((7, 0xffff_ffff_8100_0000))
        );
        assert_eq!(layout.sample_pid_ip(&record[..20]), None);
        // Without IP and TID both read as 0, as parse gives them.
        let bare = SampleIdLayout::new(IDENTIFIER | TIME);
        assert_eq!(bare.sample_pid_ip(&record), Some((0, 0)));
    }
}
