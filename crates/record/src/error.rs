//! Everything that stops a recording, worded for the person who started it.
//! A variant's message leaves its cause to `source()`: the binary prints
//! the chain, each cause after a colon.

use std::io;
use std::path::PathBuf;

/// Why `shardrec record` could not record.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A bad option value or combination.
    #[error("{0}")]
    Usage(String),
    /// `-e` names nothing known.
    #[error("event '{name}' not found{}", .suggestion.as_ref().map(|s| format!(" (did you mean '{s}'?)")).unwrap_or_default())]
    UnknownEvent {
        /// The name given.
        name: String,
        /// A close known name.
        suggestion: Option<String>,
    },
    /// The event exists but this machine cannot count it.
    #[error("The {name} event is not supported on this machine: {reason}")]
    Unsupported {
        /// The event.
        name: String,
        /// Why.
        reason: String,
    },
    /// The kernel lacks a feature the recording needs: what, in words.
    #[error("{0}")]
    KernelLacks(String),
    /// The stream's output stopped while recording; the shards keep the
    /// recording for a merge after the fact.
    #[error("the stream stopped ({why}); the recording is kept in {}: shardrec merge {} -o FILE", .dir.display(), .dir.display())]
    StreamStopped {
        /// Why the live merger stopped.
        why: String,
        /// The recording directory.
        dir: PathBuf,
    },
    /// `--kcore`: the kernel's symbols moved while its text was copied.
    #[error("--kcore: /proc/kallsyms kept changing while the kernel's text was copied (modules loading?)")]
    KcoreUnsteady,
    /// io_uring, which the writers use, is missing or refused.
    #[error(transparent)]
    IoUring(#[from] shardrec_writer::IoUringUnavailable),
    /// The side-band events something asked for could not be opened:
    /// what needs them, and why they could not be.
    #[error("{needed_by}")]
    SideBand {
        /// What needs them.
        needed_by: String,
        /// Why they could not be opened.
        source: crate::open::SideBandUnavailable,
    },
    /// tracefs could not be found or mounted.
    #[error("tracepoints need tracefs: {0}")]
    Tracefs(String),
    /// `-C` names a CPU that is not online.
    #[error("CPU {cpu} is not online (online: {online})")]
    CpuNotOnline {
        /// The CPU asked for.
        cpu: u32,
        /// The online list.
        online: String,
    },
    /// `-p` names a process that does not exist.
    #[error("process {0} not found")]
    NoSuchProcess(i32),
    /// `-t` names a thread that does not exist.
    #[error("thread {0} not found")]
    NoSuchThread(i32),
    /// The kernel refused for lack of privilege.
    #[error("no permission to record {what} (kernel.perf_event_paranoid = {paranoid}): run as root or with CAP_PERFMON, or lower /proc/sys/kernel/perf_event_paranoid")]
    NoPermission {
        /// What was refused.
        what: String,
        /// The paranoid setting.
        paranoid: i32,
    },
    /// Ring mappings exceed the locked-memory limits.
    #[error("cannot map a {ring_kb} KiB ring per CPU: over the locked-memory limit (kernel.perf_event_mlock_kb = {mlock_kb} per CPU, then RLIMIT_MEMLOCK = {rlimit_kb} KiB); use a smaller -m, raise the limits, or run with CAP_IPC_LOCK")]
    Memlock {
        /// Ring size asked for.
        ring_kb: u64,
        /// perf_event_mlock_kb.
        mlock_kb: u64,
        /// RLIMIT_MEMLOCK in KiB.
        rlimit_kb: u64,
    },
    /// The recording needs more file descriptors than the hard limit allows.
    #[error("recording {events} events on {cpus} CPUs needs {needed} file descriptors, over RLIMIT_NOFILE (hard limit {hard}); raise it (ulimit -Hn, or LimitNOFILE= for a service) or record fewer CPUs or events")]
    TooManyFiles {
        /// Events asked for (per CPU, times followed threads).
        events: usize,
        /// CPUs recorded.
        cpus: usize,
        /// Descriptors the coordinator will hold.
        needed: u64,
        /// The hard limit.
        hard: u64,
    },
    /// A helper process could not be forked for the process limit.
    #[error("cannot start the {name}: over the process limit (RLIMIT_NPROC = {limit}); shardrec runs a writer process per recorded CPU, a VIP and itself: raise it (ulimit -u) or record fewer CPUs (-C)")]
    TooManyProcesses {
        /// The helper.
        name: String,
        /// The soft limit, or "unlimited".
        limit: String,
    },
    /// perf_event_open or a ring failed for another reason.
    #[error("cannot open event '{name}' on CPU {cpu}")]
    Open {
        /// The event.
        name: String,
        /// The CPU.
        cpu: u32,
        /// The kernel's answer.
        source: io::Error,
    },
    /// The output could not be created.
    #[error("cannot write the recording to {}", .path.display())]
    Output {
        /// The path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The workload could not be started.
    #[error("cannot run '{command}'")]
    Workload {
        /// The program.
        command: String,
        /// Why.
        source: io::Error,
    },
    /// The output path is one that cannot take a recording.
    #[error(transparent)]
    OutputPath(shardrec_shard::Error),
    /// The recording directory failed otherwise than by a file's I/O.
    #[error("cannot write the recording")]
    Recording(#[source] shardrec_shard::Error),
    /// A writer or the VIP failed.
    #[error("{name} failed: {message}")]
    Helper {
        /// Which helper.
        name: String,
        /// What it said.
        message: String,
    },
    /// The merge after the stop could not write its output.
    #[error(transparent)]
    Merge(#[from] shardrec_merge::MergeError),
    /// Any other system call failed.
    #[error("{what}")]
    System {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: io::Error,
    },
}

impl RecordError {
    /// A failed system call, with what it was for.
    pub fn system(what: impl Into<String>) -> impl FnOnce(io::Error) -> RecordError {
        let what = what.into();
        move |source| RecordError::System { what, source }
    }
}

impl From<shardrec_events::EventError> for RecordError {
    /// Each kind of event error is the record error of its kind.
    fn from(error: shardrec_events::EventError) -> Self {
        use shardrec_events::EventError;
        match error {
            EventError::Usage(why) => RecordError::Usage(why),
            EventError::Unknown { name, suggestion } => {
                RecordError::UnknownEvent { name, suggestion }
            }
            EventError::Tracefs(why) => RecordError::Tracefs(why),
            EventError::Filter { event, source } => RecordError::System {
                what: format!("cannot set the filter of {event}"),
                source,
            },
        }
    }
}

impl From<shardrec_shard::Error> for RecordError {
    /// A file of the recording directory that could not be written is the
    /// output that could not be; anything else keeps its own words.
    fn from(error: shardrec_shard::Error) -> Self {
        match error {
            shardrec_shard::Error::Io { path, source } => RecordError::Output { path, source },
            output @ shardrec_shard::Error::Output { .. } => RecordError::OutputPath(output),
            other => RecordError::Recording(other),
        }
    }
}
