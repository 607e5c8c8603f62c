//! Records that describe what already exists when recording starts, as
//! `perf record` synthesizes them (`tools/perf/util/synthetic-events.c`):
//!
//! - [`Synthesizer::kernel`]: one `PERF_RECORD_MMAP` for the kernel image
//!   (`[kernel.kallsyms]_text`) and one per loaded module;
//! - [`Synthesizer::tasks`]: per process, a `PERF_RECORD_FORK` and a
//!   `PERF_RECORD_COMM` for each thread, then a `PERF_RECORD_MMAP2` for each
//!   executable mapping; a workload held before its exec gets only a
//!   `perf-exec` COMM ([`Synthesizer::with_held_workload`]).
//!
//! Every record carries the `sample_id_all` trailer of the attr it is
//! attributed to, with time 0 so that it sorts before anything recorded.
//! Tasks that exit while `/proc` is being walked are skipped and counted,
//! never reported as errors; only the output writer's errors are.
//!
//! ```no_run
//! use shardrec_synth::{Synthesizer, Tasks};
//! let sample_type = 1 << 16; // PERF_SAMPLE_IDENTIFIER
//! let synth = Synthesizer::new(sample_type, 42);
//! let mut shard = std::io::BufWriter::new(std::fs::File::create("synth.shard")?);
//! let mut stats = synth.kernel(&mut shard)?;
//! stats += synth.tasks(&Tasks::All, &mut shard)?;
//! println!("{} records for {} processes", stats.records, stats.processes);
//! # Ok::<(), std::io::Error>(())
//! ```

mod kernel;
mod parallel;
mod proc_maps;
mod scan;
mod tasks;

pub use tasks::process_tree;

use shardrec_format::records::{self, RecordBuilder};
use shardrec_format::{SampleId, SampleIdLayout};
use std::io::Write;
use std::ops::AddAssign;

/// Which tasks to describe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tasks {
    /// Every process in `/proc`, with all its threads.
    All,
    /// These processes (thread group ids; a thread id stands for its
    /// process), with all their threads.
    Processes(Vec<i32>),
}

/// What a synthesis wrote and what it had to leave out.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynthStats {
    /// Processes described.
    pub processes: u64,
    /// Threads described (a FORK and a COMM each).
    pub threads: u64,
    /// Mappings described (MMAP or MMAP2 records).
    pub maps: u64,
    /// Records written.
    pub records: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Tasks that vanished or could not be read while walking `/proc`, and
    /// records too large to frame (over 64 KiB).
    pub skipped: u64,
    /// Processes whose maps took longer to read than the timeout, so that
    /// the rest of them were left out.
    pub map_timeouts: u64,
}

impl SynthStats {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &SynthStats) {
        self.processes += other.processes;
        self.threads += other.threads;
        self.maps += other.maps;
        self.records += other.records;
        self.bytes += other.bytes;
        self.skipped += other.skipped;
        self.map_timeouts += other.map_timeouts;
    }
}

impl AddAssign for SynthStats {
    fn add_assign(&mut self, other: SynthStats) {
        self.add(&other);
    }
}

/// Synthesizes records attributed to one event, with that event's
/// `sample_id_all` trailer.
#[derive(Clone, Debug)]
pub struct Synthesizer {
    layout: SampleIdLayout,
    event_id: u64,
    threads: usize,
    data_maps: bool,
    build_ids: bool,
    held_workload: Option<i32>,
    maps: bool,
    map_timeout: Option<std::time::Duration>,
}

/// The name perf record gives its forked workload until the exec. Readers
/// know it: samply does not name a profile after a process so called.
pub const HELD_WORKLOAD_COMM: &std::ffi::CStr = c"perf-exec";

impl Synthesizer {
    /// Records for an attr with this `sample_type` (which sets the trailer's
    /// fields), attributed to the event with kernel id `event_id`.
    pub fn new(sample_type: u64, event_id: u64) -> Self {
        Synthesizer {
            layout: SampleIdLayout::new(sample_type),
            event_id,
            threads: 0,
            data_maps: false,
            build_ids: false,
            held_workload: None,
            maps: true,
            map_timeout: None,
        }
    }

    /// Describes the tasks' mappings too (the default), or only their
    /// threads (perf's `--synth=task`).
    pub fn with_maps(mut self, maps: bool) -> Self {
        self.maps = maps;
        self
    }

    /// Leaves out the rest of a process's maps once reading them took
    /// longer than `timeout`, marking the last one described with
    /// `PERF_RECORD_MISC_PROC_MAP_PARSE_TIMEOUT`, as perf's
    /// `--proc-map-timeout` does (perf report then says how many).
    pub fn with_map_timeout(mut self, timeout: Option<std::time::Duration>) -> Self {
        self.map_timeout = timeout;
        self
    }

    /// Give each file mapping the file's build id, as the kernel does with
    /// `attr.build_id` (perf's `--buildid-mmap`), read from the mapped file
    /// itself (`/proc/PID/map_files`), so a binary replaced on disk since
    /// it was mapped keeps its own id.
    pub fn with_build_ids(mut self, build_ids: bool) -> Self {
        self.build_ids = build_ids;
        self
    }

    /// Also describe readable, non-executable mappings (as perf does with
    /// `mmap_data`, which DWARF unwinding needs: `.eh_frame_hdr` lives in a
    /// read-only segment).
    pub fn with_data_maps(mut self, data_maps: bool) -> Self {
        self.data_maps = data_maps;
        self
    }

    /// Describes process `pid`, forked but held before its exec, as perf
    /// record describes its workload: one COMM named [`HELD_WORKLOAD_COMM`]
    /// and nothing else, wherever [`tasks`](Self::tasks) would find it. Its
    /// mappings are still the recorder's, and a reader that kept them would
    /// unwind the workload's stacks through the recorder's libraries; the
    /// kernel reports the exec's COMM and mappings itself.
    pub fn with_held_workload(mut self, pid: i32) -> Self {
        self.held_workload = Some(pid);
        self
    }

    /// Walks `/proc` with at most `threads` threads; 0 (the default) picks a
    /// number from the CPUs available and the number of processes.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }

    /// Writes the kernel image's map and one map per loaded module.
    pub fn kernel(&self, out: &mut impl Write) -> std::io::Result<SynthStats> {
        let mut emitter = self.emitter();
        kernel::synthesize(&mut emitter);
        out.write_all(&emitter.buf)?;
        Ok(emitter.stats)
    }

    /// Writes the threads and executable maps of `tasks`. All records of one
    /// process are written together; processes come in no particular order.
    pub fn tasks(&self, tasks: &Tasks, out: &mut impl Write) -> std::io::Result<SynthStats> {
        let mut pids = match tasks {
            Tasks::All => tasks::list_processes(),
            Tasks::Processes(pids) => {
                let mut pids = pids.clone();
                pids.sort_unstable();
                pids.dedup();
                pids
            }
        };
        pids.retain(|&pid| Some(pid) != self.held_workload);
        let threads = parallel::threads_for(self.threads, pids.len());
        let mut stats = if threads <= 1 {
            tasks::synthesize(&mut self.emitter(), &pids, out)?
        } else {
            parallel::synthesize(self, &pids, threads, out)?
        };
        if let Some(pid) = self.held_workload {
            let mut emitter = self.emitter();
            let record = records::comm(pid as u32, pid as u32, HELD_WORKLOAD_COMM.to_bytes(), 0);
            if emitter.push(record, pid as u32, pid as u32) {
                emitter.stats.processes += 1;
                emitter.stats.threads += 1;
            }
            out.write_all(&emitter.buf)?;
            stats += emitter.stats;
        }
        Ok(stats)
    }

    fn emitter(&self) -> Emitter<'_> {
        Emitter {
            layout: &self.layout,
            event_id: self.event_id,
            data_maps: self.data_maps,
            build_ids: self.build_ids,
            maps: self.maps,
            map_timeout: self.map_timeout,
            stats: SynthStats::default(),
            buf: Vec::with_capacity(FLUSH_AT * 2),
        }
    }
}

/// How many bytes of whole processes to gather before writing them out.
const FLUSH_AT: usize = 64 * 1024;

/// Finishes records into a buffer and counts them.
struct Emitter<'a> {
    layout: &'a SampleIdLayout,
    event_id: u64,
    data_maps: bool,
    build_ids: bool,
    maps: bool,
    map_timeout: Option<std::time::Duration>,
    stats: SynthStats,
    buf: Vec<u8>,
}

impl Emitter<'_> {
    /// Appends `record` with the trailer of task `pid`/`tid`; false (and
    /// counted as skipped) if it is too large to frame.
    fn push(&mut self, record: RecordBuilder, pid: u32, tid: u32) -> bool {
        let id = SampleId {
            pid,
            tid,
            id: self.event_id,
            ..SampleId::default()
        };
        let Some(bytes) = record.finish(self.layout, &id) else {
            self.stats.skipped += 1;
            return false;
        };
        self.buf.extend_from_slice(&bytes);
        self.stats.records += 1;
        self.stats.bytes += bytes.len() as u64;
        true
    }
}

#[cfg(test)]
mod tests;
