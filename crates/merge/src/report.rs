//! What a merge did, as the summary printed at its end.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use shardrec_format::header::{RecordHeader, RecordType};
use shardrec_format::layouts::{FieldReader, Layouts};

use shardrec_shard::scan::Damage;

use crate::data_out::RecordSink;

/// One CPU's part of the merge.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct CpuSummary {
    /// The CPU.
    pub cpu: u32,
    /// Samples from its shard.
    pub samples: u64,
    /// Records the kernel dropped on it.
    pub lost: u64,
}

/// How far a live merge's output fell behind the recording, at most.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Lag {
    /// Bytes in the shards not yet written out.
    pub bytes: u64,
    /// From a look at the rings to the round that covered it.
    pub time: std::time::Duration,
}

/// The outcome of a merge.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct MergeReport {
    /// The perf.data written.
    #[serde(with = "shardrec_control::frame::path_bytes")]
    pub output: PathBuf,
    /// Records written, by `PERF_RECORD_*` type.
    pub by_type: BTreeMap<RecordType, u64>,
    /// Per recorded CPU.
    pub cpus: Vec<CpuSummary>,
    /// LOST_SAMPLES records added from the kernel's per-event counts.
    pub lost_samples_added: u64,
    /// First and last record time (ns).
    pub time_span: (u64, u64),
    /// Bytes of shard data read.
    pub input_bytes: u64,
    /// Bytes of the perf.data.
    pub output_bytes: u64,
    /// Shards that end in, or hold, something that is not whole records.
    pub damage: Vec<(String, Damage)>,
    /// Build ids written.
    pub build_ids: usize,
    /// What went into the build-id cache (or was there already), and why
    /// the rest did not.
    pub cached: crate::build_id_cache::Cached,
    /// BPF programs whose info went into the header.
    pub bpf_programs: usize,
    /// Bytes after the last whole entry of the `bpf` file.
    pub bpf_torn_bytes: usize,
    /// Programs of the `bpf` file whose capture records made no program.
    pub bpf_broken: usize,
    /// Time taken.
    pub elapsed: Duration,
    /// Threads that merged.
    pub threads: usize,
    /// Time slices the records were merged in.
    pub slices: usize,
    /// Why `meta` could not be read, when the merge worked from
    /// `meta.start` instead.
    pub meta_damage: Option<String>,
    /// Bytes of data taken from an interrupted merge's `merged.partial`.
    pub resumed_bytes: u64,
    /// Header features a merge into perf's pipe format left out, each too
    /// large for a record (64 KiB).
    pub left_out_of_pipe: Vec<String>,
    /// A live merge's records earlier than perf's round rule allows
    /// (perf counts each as an out-of-order event).
    pub late_records: u64,
    /// A live merge's rounds (0 for a merge after the fact).
    pub rounds: u64,
    /// How far a live merge's output fell behind the recording, at most.
    pub lag: Option<Lag>,
}

impl MergeReport {
    /// Records written.
    pub fn records(&self) -> u64 {
        self.by_type.values().sum()
    }

    /// Samples written.
    pub fn samples(&self) -> u64 {
        self.by_type.get(&RecordType::SAMPLE).copied().unwrap_or(0)
    }

    /// Adds what an interrupted merge wrote (`resumed`, the first
    /// `bytes` of the data) to the counts of the rest.
    pub fn add_resumed(&mut self, bytes: u64, resumed: &ResumedTally) {
        self.resumed_bytes = bytes;
        for (&type_, &n) in &resumed.by_type {
            *self.by_type.entry(type_).or_default() += n;
        }
        for cpu in &mut self.cpus {
            cpu.samples += resumed.samples_by_cpu.get(&cpu.cpu).copied().unwrap_or(0);
        }
    }

    /// Shards in which not one record could be read: not shards at all.
    pub fn unreadable(&self) -> impl Iterator<Item = &(String, Damage)> {
        self.damage.iter().filter(|(_, d)| d.offset == 0)
    }
}

impl fmt::Display for MergeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let span = self.time_span.1.saturating_sub(self.time_span.0) as f64 / 1e9;
        writeln!(
            f,
            "[ shardrec merge: {} records ({} samples) over {:.3} s into {} ({:.3} MB) in {:.2} s ]",
            self.records(),
            self.samples(),
            span,
            self.output.display(),
            self.output_bytes as f64 / 1e6,
            self.elapsed.as_secs_f64()
        )?;
        let threads = match self.threads {
            1 => "1 thread".to_string(),
            n => format!("{n} threads"),
        };
        match self.rounds {
            0 => writeln!(f, "  merged in {} time slices by {threads}", self.slices)?,
            rounds => writeln!(
                f,
                "  merged while recording, in {rounds} rounds; the last one and the header took {:.2} s after the stop{}",
                self.elapsed.as_secs_f64(),
                match self.late_records {
                    0 => String::new(),
                    late => format!(" ({late} records came later than perf's rounds allow: perf will say they are out of order)"),
                }
            )?,
        }
        if let Some(lag) = self.lag.filter(|_| self.rounds > 0) {
            writeln!(
                f,
                "  the output was at most {:.3} MB and {:.2} s behind the recording",
                lag.bytes as f64 / 1e6,
                lag.time.as_secs_f64()
            )?;
        }
        let types: Vec<String> = self
            .by_type
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect();
        writeln!(f, "  records: {}", types.join(", "))?;
        if self.resumed_bytes > 0 {
            writeln!(
                f,
                "  resumed: the first {} bytes of data are those an interrupted merge wrote into merged.partial",
                self.resumed_bytes
            )?;
        }
        if self.bpf_programs > 0 {
            writeln!(
                f,
                "  BPF programs with info in the header: {}",
                self.bpf_programs
            )?;
        }
        if self.build_ids > 0 {
            writeln!(
                f,
                "  build ids: {} in the header, {} in the build-id cache ({} with debug info)",
                self.build_ids, self.cached.binaries, self.cached.debug_info
            )?;
        }
        for failure in &self.cached.failures {
            writeln!(f, "  build-id cache: {failure}")?;
        }
        if !self.left_out_of_pipe.is_empty() {
            writeln!(
                f,
                "  left out of the pipe, each too large for a record (64 KiB; a file holds them): {}",
                self.left_out_of_pipe.join(", ")
            )?;
        }
        for cpu in self.cpus.iter().filter(|c| c.lost > 0) {
            let total = cpu.samples + cpu.lost;
            let percent = cpu.lost as f64 * 100.0 / total.max(1) as f64;
            writeln!(
                f,
                "  CPU {}: {} lost of {} ({percent:.2}%)",
                cpu.cpu, cpu.lost, total
            )?;
            if percent > 5.0 {
                writeln!(
                    f,
                    "  Lost {percent:.1}% of CPU {}'s records: check I/O and CPU load, or use a larger -m",
                    cpu.cpu
                )?;
            }
        }
        Ok(())
    }
}

/// The records an interrupted merge wrote, counted as a merge counts the
/// records it writes: by type, and samples by CPU.
pub struct ResumedTally<'a> {
    fields: FieldReader<'a>,
    by_type: BTreeMap<RecordType, u64>,
    samples_by_cpu: BTreeMap<u32, u64>,
}

impl<'a> ResumedTally<'a> {
    /// Nothing counted yet, of a recording with these `layouts`.
    pub fn new(layouts: &'a Layouts) -> Self {
        ResumedTally {
            fields: FieldReader::new(layouts),
            by_type: BTreeMap::new(),
            samples_by_cpu: BTreeMap::new(),
        }
    }
}

impl RecordSink for ResumedTally<'_> {
    fn put(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        while let Some(header) = RecordHeader::parse(bytes) {
            let len = usize::from(header.size).clamp(8, bytes.len());
            let record = &bytes[..len];
            bytes = &bytes[len..];
            // The records a merge counts are the kernel's (and their
            // synthesized likes), not its own markers and tables.
            if !header.type_.is_kernels() {
                continue;
            }
            *self.by_type.entry(header.type_).or_default() += 1;
            if header.type_ == RecordType::SAMPLE {
                let cpu = self.fields.sample_id(record, header.type_).map(|id| id.cpu);
                *self.samples_by_cpu.entry(cpu.unwrap_or(0)).or_default() += 1;
            }
        }
        Ok(())
    }
}
