//! Records that perf record writes into perf.data itself, before the
//! kernel's (`perf_event__synthesize_id_index`, `..._thread_map2` and
//! `..._cpu_map` in `tools/perf/util/synthetic-events.c`). They carry no
//! `sample_id` trailer.

use crate::header::RecordType;
use crate::records::RecordBuilder;

/// Where one event id's records come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdIndexEntry {
    /// The kernel's id of the event.
    pub id: u64,
    /// The index of the ring its records go to.
    pub ring: u64,
    /// Its CPU.
    pub cpu: u64,
    /// The thread it follows; -1 for every thread on the CPU.
    pub tid: i64,
}

/// `PERF_RECORD_ID_INDEX`: count, then (id, ring index, cpu, tid) per id.
/// `None` past the 64 KiB a record can hold (about 2,000 ids; perf then
/// splits it, and readers lose nothing without it).
pub fn id_index(entries: &[IdIndexEntry]) -> Option<Vec<u8>> {
    let mut record = RecordBuilder::new(RecordType::ID_INDEX, 0).u64(entries.len() as u64);
    for e in entries {
        record = record.u64(e.id).u64(e.ring).u64(e.cpu).u64(e.tid as u64);
    }
    record.finish_untrailed()
}

/// `PERF_RECORD_THREAD_MAP`: count, then per thread its id and a 16-byte
/// name (empty, as perf leaves it).
pub fn thread_map(tids: &[i32]) -> Option<Vec<u8>> {
    let mut record = RecordBuilder::new(RecordType::THREAD_MAP, 0).u64(tids.len() as u64);
    for &tid in tids {
        record = record.u64(i64::from(tid) as u64).u64(0).u64(0);
    }
    record.finish_untrailed()
}

/// `PERF_RECORD_CPU_MAP`: a consecutive run of CPUs as a range (type 2:
/// any-CPU flag, start and end), any other list as the CPUs themselves
/// (type 0: count, then each CPU), padded to 8 bytes.
pub fn cpu_map(cpus: &[u32]) -> Option<Vec<u8>> {
    const CPUS: u16 = 0;
    const RANGE: u16 = 2;
    let record = RecordBuilder::new(RecordType::CPU_MAP, 0);
    let consecutive = cpus.windows(2).all(|w| w[1] == w[0] + 1);
    let record = match (cpus.first(), cpus.last()) {
        (Some(&first), Some(&last)) if consecutive => record
            .u16(RANGE)
            .u16(0) // any_cpu = 0, padding
            .u16(u16::try_from(first).ok()?)
            .u16(u16::try_from(last).ok()?),
        _ => {
            let mut record = record.u16(CPUS).u16(u16::try_from(cpus.len()).ok()?);
            for &cpu in cpus {
                record = record.u16(u16::try_from(cpu).ok()?);
            }
            record
        }
    };
    record.pad().finish_untrailed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_maps_are_encoded_as_perf_writes_them() {
        // perf 6.1 for CPUs 0-1: type 2, any_cpu 0, 0..1.
        assert_eq!(
            cpu_map(&[0, 1]).unwrap(),
            [74, 0, 0, 0, 0, 0, 16, 0, 2, 0, 0, 0, 0, 0, 1, 0]
        );
        assert_eq!(
            cpu_map(&[0, 2]).unwrap(),
            [74, 0, 0, 0, 0, 0, 16, 0, 0, 0, 2, 0, 0, 0, 2, 0]
        );
        assert_eq!(cpu_map(&[0, 2, 3]).unwrap().len(), 24);
    }

    #[test]
    fn thread_maps_and_id_indexes_have_perfs_sizes() {
        let threads = thread_map(&[-1]).unwrap();
        assert_eq!(threads.len(), 40);
        assert_eq!(&threads[16..24], &u64::MAX.to_ne_bytes());
        let entry = IdIndexEntry {
            id: 112,
            ring: 1,
            cpu: 1,
            tid: -1,
        };
        let index = id_index(&[entry, entry]).unwrap();
        assert_eq!(index.len(), 8 + 8 + 2 * 32);
        assert_eq!(index[..8], [69, 0, 0, 0, 0, 0, 80, 0]);
    }
}
