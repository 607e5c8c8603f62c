//! The checked plan of a recording: which events, CPUs, tasks and ring
//! size. Every user mistake is caught here, before anything is opened.

mod resolve;

use shardrec_events::{AttrPlan, AttrScope, EventSpec};
use shardrec_sys::{abi, Attr};

use crate::config::{AddressSpace, CallGraph, Delay, SampleOptions, Sampling};
use crate::RecordError;

/// Whose activity is recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Everything on the recorded CPUs (`-a`, `-C`, or the default).
    SystemWide,
    /// These threads and their future children (`-p`, expanded to threads).
    Threads(Vec<i32>),
    /// The workload from `-- CMD` and its children.
    Workload,
}

/// A recording, resolved and checked.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The events, in command-line order.
    pub events: Vec<EventSpec>,
    /// One ring and one writer per CPU.
    pub cpus: Vec<u32>,
    /// Whose activity.
    pub scope: Scope,
    /// The processes named by `-p` (or a user's, `-u`), or the threads by `-t`.
    pub pids: Vec<i32>,
    /// Whether `pids` are processes, whose new threads are followed.
    pub pids_are_processes: bool,
    /// Data pages per ring.
    pub ring_pages: usize,
    /// Sampling, with `max` resolved and over-limit rates lowered.
    pub sampling: Sampling,
    /// Callchains.
    pub call_graph: CallGraph,
    /// `-k`: the clock for timestamps.
    pub clockid: Option<i32>,
    /// Follow the tasks a followed task creates (not `-i`).
    pub inherit: bool,
    /// `--all-user` / `--all-kernel`.
    pub all_in: Option<AddressSpace>,
    /// Whether the kernel counts lost samples per event (`PERF_FORMAT_LOST`, 6.0+).
    pub lost_counts: bool,
    /// What samples carry besides the basics.
    pub sample: SampleOptions,
    /// Each event's attr, as tried on the first CPU (after perf's fallbacks).
    pub attrs: Vec<Attr>,
    /// The event that carries the side-band (mmap, comm, task records).
    pub tracking: usize,
    /// `--switch-output-event`: opened beside the recorded events, not
    /// recorded ([`crate::switch_output::event_trigger`]).
    pub switch_events: Vec<EventSpec>,
    /// `-D`: the events start counting late, or when told.
    pub delay: Option<Delay>,
    /// `--overwrite`: rings written backward, read only at snapshots.
    pub overwrite: bool,
    /// `-r`: the writers' SCHED_FIFO priority.
    pub realtime: Option<i32>,
    /// What is synthesized of the tasks before recording, and when.
    pub synthesis: crate::config::Synthesis,
    /// MMAP2 records carry build ids (`attr.build_id`).
    pub build_id_mmap: bool,
    /// The tasks' records (MMAP, COMM, FORK, EXIT) go to the VIP's
    /// side-band events, which are streamed, instead of the sampling
    /// rings: with `--overwrite`, whose rings would lose them with the
    /// oldest samples (a task's exec, say, while its samples are kept).
    pub side_band_tracking: bool,
    /// `--off-cpu-thresh`: off-CPU waits shorter than this (ms) are
    /// summed in the kernel and written at the end (0: none).
    pub off_cpu_threshold_ms: u64,
    /// Things the user should know that do not stop the recording.
    pub warnings: Vec<String>,
}

/// Descriptors the coordinator holds besides its events: shard files,
/// pipes to each helper, the signalfd, tracefs and /proc reads, std streams.
const FIXED_FDS: u64 = 64;

impl Plan {
    /// What the events' attrs take from this plan.
    pub fn attr_plan(&self) -> AttrPlan<'_> {
        AttrPlan {
            events: &self.events,
            tracking: self.tracking,
            scope: match self.scope {
                Scope::SystemWide => AttrScope::SystemWide,
                Scope::Threads(_) => AttrScope::Threads,
                Scope::Workload => AttrScope::Workload,
            },
            delayed: self.delay.is_some(),
            ring_pages: self.ring_pages,
            sampling: self.sampling,
            call_graph: self.call_graph,
            clockid: self.clockid,
            inherit: self.inherit,
            all_in: self.all_in,
            lost_counts: self.lost_counts,
            sample: self.sample.clone(),
            overwrite: self.overwrite,
            build_id_mmap: self.build_id_mmap,
            side_band_tracking: self.side_band_tracking,
        }
    }

    /// Whether the tasks are described at the end of each output (the
    /// flight recorder's records are its last moments; `--tail-synthesize`).
    pub fn synthesizes_at_end(&self) -> bool {
        self.overwrite || self.synthesis.at_end
    }

    /// The events the kernel's refusals changed from what was asked.
    pub fn changed_events(&self) -> Vec<crate::ChangedEvent> {
        let changed = self.events.iter().filter_map(|event| {
            let (asked, why) = event.changed.as_ref()?;
            Some(crate::ChangedEvent {
                asked: asked.clone(),
                recorded: event.name.clone(),
                why: why.clone(),
            })
        });
        changed.collect()
    }

    /// Perf events the coordinator opens: every event on every CPU for every
    /// followed thread, plus a side-band event per CPU.
    pub fn event_count(&self) -> u64 {
        let tasks = match &self.scope {
            Scope::Threads(tids) => tids.len(),
            _ => 1,
        };
        let events = self.events.len() + self.switch_events.len();
        (self.cpus.len() * (events * tasks + 1)) as u64
    }

    /// Makes sure the coordinator may hold all its descriptors: raises the
    /// soft RLIMIT_NOFILE as far as the hard one (as perf does on EMFILE),
    /// and refuses clearly when even that is too little.
    pub fn reserve_file_descriptors(&self) -> Result<(), RecordError> {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        // Per CPU, besides its events: a shard and two pipes' ends.
        let needed = self.event_count() + 3 * self.cpus.len() as u64 + FIXED_FDS;
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)
            .map_err(|e| RecordError::system("reading RLIMIT_NOFILE")(e.into()))?;
        if needed <= soft {
            return Ok(());
        }
        if needed > hard {
            return Err(RecordError::TooManyFiles {
                events: self.events.len(),
                cpus: self.cpus.len(),
                needed,
                hard,
            });
        }
        setrlimit(Resource::RLIMIT_NOFILE, needed.max(soft), hard)
            .map_err(|e| RecordError::system("raising RLIMIT_NOFILE")(e.into()))
    }

    /// `--off-cpu`'s event, by index.
    pub fn off_cpu(&self) -> Option<usize> {
        self.events.iter().position(EventSpec::is_off_cpu)
    }

    /// The events with a sample filter, by index.
    pub fn sample_filters(&self) -> impl Iterator<Item = (usize, &shardrec_filter::SampleFilter)> {
        self.events
            .iter()
            .enumerate()
            .filter_map(|(i, e)| Some((i, e.sample_filter.as_ref()?)))
    }

    /// A filter's `addr` is the sample's data address, there only when
    /// samples carry it (as perf's filters ask of each term's field).
    fn check_sample_filters(&self) -> Result<(), RecordError> {
        if self.sample_filters().count() > shardrec_sys::fds::MAX_FDS / 2 {
            return Err(RecordError::Usage(format!(
                "more than {} events with a --filter",
                shardrec_sys::fds::MAX_FDS / 2
            )));
        }
        for (i, filter) in self.sample_filters() {
            let has_addr = self.attrs[i].sample_type() & abi::PERF_SAMPLE_ADDR as u64 != 0;
            if filter.uses(shardrec_filter::Field::Addr) && !has_addr {
                return Err(RecordError::Usage(format!(
                    "--filter '{}': 'addr' is the sample's data address: record it with -d",
                    filter.text
                )));
            }
        }
        Ok(())
    }
}

pub use shardrec_events::attrs::{FORMAT_ID, FORMAT_LOST};

/// The threads of process `pid`, from `/proc/PID/task`.
pub(crate) fn threads_of(pid: i32) -> Result<Vec<i32>, RecordError> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|_| RecordError::NoSuchProcess(pid))?;
    let mut tids: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}
