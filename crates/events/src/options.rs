//! perf record's options that shape every event's attr: how often to
//! sample, where `--all-user` or `--all-kernel` puts the events, and what
//! each sample carries beyond its event's own.

/// How often to sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampling {
    /// perf's default: 4000 Hz, or every event for tracepoints.
    Default,
    /// `-F HZ`
    Frequency(u64),
    /// `-F max`: the kernel's `perf_event_max_sample_rate`.
    MaxFrequency,
    /// `-c PERIOD`
    Period(u64),
}

/// Where `--all-user` or `--all-kernel` puts every event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressSpace {
    /// `--all-user`: user space only, whatever each event's modifiers say.
    User,
    /// `--all-kernel`: the kernel only.
    Kernel,
}

/// perf record's options that add to each sample or to the side-band.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SampleOptions {
    /// `-d`: the data address of each sample (and data mappings).
    pub data_addr: bool,
    /// `--phys-data`: its physical address.
    pub phys_addr: bool,
    /// `--data-page-size`: the page size of the data address.
    pub data_page_size: bool,
    /// `--code-page-size`: the page size of the code address.
    pub code_page_size: bool,
    /// `-W`: the sample's weight (latency).
    pub weight: bool,
    /// `-R`: raw sample data.
    pub raw: bool,
    /// `-P`: the period in each sample, as asked (perf adds it for
    /// frequency sampling anyway).
    pub period: bool,
    /// `--user-regs`: user registers (a `PERF_REG_*` mask).
    pub user_regs: u64,
    /// `-I`: registers at the interrupt (a `PERF_REG_*` mask).
    pub intr_regs: u64,
    /// `-b` / `-j`: the branch stack, with these `PERF_SAMPLE_BRANCH_*` bits.
    pub branch: u64,
    /// `-s`: per-thread counts (`inherit_stat`).
    pub per_thread_stat: bool,
    /// `--switch-events`: context switch records.
    pub switch_events: bool,
    /// `--namespaces`: namespace records.
    pub namespaces: bool,
    /// `--all-cgroups`: cgroup records and each sample's cgroup.
    pub cgroups: bool,
    /// `--transaction`: transaction flags (special events only).
    pub transaction: bool,
    /// `--running-time`: enabled and running times in what is read.
    pub running_time: bool,
    /// `--kernel-callchains` / `--user-callchains`: only that side.
    pub callchain_side: Option<AddressSpace>,
    /// `--call-graph fp,FRAMES`: at most FRAMES in each callchain
    /// (`sample_max_stack`), for the events that take the global call
    /// graph.
    pub max_stack: Option<u16>,
    /// `-n`: count only, no samples.
    pub no_samples: bool,
    /// `--buildid-mmap` (`Some(true)`), `--no-buildid-mmap` (`Some(false)`):
    /// whether MMAP2 records carry the files' build ids. By default they do
    /// not, as in perf (see `shardrec_sys::build_id_probe` for why).
    pub build_id_mmap: Option<bool>,
}
