//! The options that choose what each sample carries, in perf's words.

use clap::Args;
use shardrec_record::{AddressSpace, SampleOptions};

use super::values as options;

/// perf record's options that choose what each sample carries.
#[derive(Args)]
#[command(next_help_heading = "Sample contents")]
pub struct SampleArgs {
    /// Record the sample addresses
    #[arg(short = 'd', long = "data")]
    data: bool,
    /// Record the sample physical addresses
    #[arg(long = "phys-data")]
    phys_data: bool,
    /// Record the sampled data address data page size
    #[arg(long = "data-page-size")]
    data_page_size: bool,
    /// Record the sampled code address (ip) page size
    #[arg(long = "code-page-size")]
    code_page_size: bool,
    /// sample by weight (on special events only)
    #[arg(short = 'W', long = "weight")]
    weight: bool,
    /// collect raw sample records from all opened counters
    #[arg(short = 'R', long = "raw-samples")]
    raw: bool,
    /// Record the sample period
    #[arg(short = 'P', long = "period")]
    period: bool,
    /// sample selected machine registers in user space (--user-regs=? lists them)
    #[arg(long = "user-regs", value_name = "any register", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    user_regs: Option<String>,
    /// sample selected machine registers on interrupt (--intr-regs=? lists them)
    #[arg(short = 'I', long = "intr-regs", value_name = "any register", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    intr_regs: Option<String>,
    /// sample any taken branches
    #[arg(short = 'b', long = "branch-any")]
    branch_any: bool,
    /// branch stack filter modes (any, any_call, any_ret, ind_call, call, cond, stack, u, k, hv, ...)
    #[arg(short = 'j', long = "branch-filter", value_name = "branch filter mask")]
    branch_filter: Option<String>,
    /// per thread counts
    #[arg(short = 's', long = "stat")]
    stat: bool,
    /// Record context switch events
    #[arg(long = "switch-events")]
    switch_events: bool,
    /// Record namespaces events
    #[arg(long = "namespaces")]
    namespaces: bool,
    /// Record cgroup events
    #[arg(long = "all-cgroups")]
    all_cgroups: bool,
    /// sample transaction flags (special events only)
    #[arg(long = "transaction")]
    transaction: bool,
    /// Record running/enabled time of read (:S) events
    #[arg(long = "running-time")]
    running_time: bool,
    /// collect kernel callchains
    #[arg(long = "kernel-callchains", conflicts_with = "user_callchains")]
    kernel_callchains: bool,
    /// collect user callchains
    #[arg(long = "user-callchains")]
    user_callchains: bool,
    /// don't sample
    #[arg(short = 'n', long = "no-samples")]
    no_samples: bool,
    /// Record build-id in map events (off by default, as in perf: the kernels known also mark other sessions' map events, which this warns about)
    #[arg(long = "buildid-mmap", conflicts_with = "no_buildid_mmap")]
    buildid_mmap: bool,
    /// Record map events without build ids, the default (the build ids are then read from the files at the merge, on the recording host only)
    #[arg(long = "no-buildid-mmap")]
    no_buildid_mmap: bool,
}

impl SampleArgs {
    /// What each sample carries, with `--call-graph fp,FRAMES`'s
    /// `max_stack`.
    pub fn into_options(self, max_stack: Option<u16>) -> Result<SampleOptions, String> {
        // perf: `--user-regs` and `-I` without a value take the default set.
        let registers = |option, text: Option<String>| match text.as_deref() {
            None => Ok(0),
            Some("") => options::parse_registers(option, None),
            Some(list) => options::parse_registers(option, Some(list)),
        };
        let branch = match (&self.branch_filter, self.branch_any) {
            (Some(filter), _) => options::parse_branch_filter(filter)?,
            (None, true) => options::parse_branch_filter("any")?,
            (None, false) => 0,
        };
        Ok(SampleOptions {
            data_addr: self.data,
            phys_addr: self.phys_data,
            data_page_size: self.data_page_size,
            code_page_size: self.code_page_size,
            weight: self.weight,
            raw: self.raw,
            period: self.period,
            user_regs: registers("--user-regs", self.user_regs)?,
            intr_regs: registers("-I", self.intr_regs)?,
            branch,
            per_thread_stat: self.stat,
            switch_events: self.switch_events,
            namespaces: self.namespaces,
            cgroups: self.all_cgroups,
            transaction: self.transaction,
            running_time: self.running_time,
            callchain_side: match (self.kernel_callchains, self.user_callchains) {
                (true, _) => Some(AddressSpace::Kernel),
                (_, true) => Some(AddressSpace::User),
                _ => None,
            },
            no_samples: self.no_samples,
            max_stack,
            build_id_mmap: match (self.buildid_mmap, self.no_buildid_mmap) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            },
        })
    }
}
