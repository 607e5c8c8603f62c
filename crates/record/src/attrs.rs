//! The `perf_event_attr` of each event, built as perf record builds it
//! (`evsel__config`) so that a perf user gets the events they know, with
//! the few differences shardrec's design needs (each listed in the README
//! and in the attr parity test): every sample carries IDENTIFIER, CPU and
//! TIME; rings wake their writer at a watermark; KSYMBOL and BPF_EVENT
//! come from the VIP's side-band event.

use shardrec_sys::{abi, process::user_regs_mask, Attr, Flag};

use crate::config::{AddressSpace, CallGraph, Sampling};
use crate::events::EventSpec;
use crate::plan::{Plan, Scope, FORMAT_ID, FORMAT_LOST};

/// perf record's default frequency.
const DEFAULT_HZ: u64 = 4000;

/// What every shardrec sample carries, so the merge can order and attribute
/// it without knowing its event first, and a per-CPU shard's samples still
/// say their CPU.
pub const BASE_SAMPLE_TYPE: u64 = (abi::PERF_SAMPLE_IDENTIFIER
    | abi::PERF_SAMPLE_IP
    | abi::PERF_SAMPLE_TID
    | abi::PERF_SAMPLE_TIME
    | abi::PERF_SAMPLE_CPU) as u64;

/// `PERF_FORMAT_TOTAL_TIME_ENABLED | _RUNNING`, for `-s`.
const FORMAT_TIMES: u64 =
    (abi::PERF_FORMAT_TOTAL_TIME_ENABLED | abi::PERF_FORMAT_TOTAL_TIME_RUNNING) as u64;

/// The last branch records of `--call-graph lbr`, as perf asks for them.
const LBR_BRANCHES: u64 = (abi::PERF_SAMPLE_BRANCH_USER
    | abi::PERF_SAMPLE_BRANCH_CALL_STACK
    | abi::PERF_SAMPLE_BRANCH_NO_CYCLES
    | abi::PERF_SAMPLE_BRANCH_NO_FLAGS
    | abi::PERF_SAMPLE_BRANCH_HW_INDEX) as u64;

/// The attr of each event in the plan, in order. The plan's tracking event
/// (the first, or perf's dummy when system-wide) carries the side-band
/// (mmap, comm, task), as in perf.
pub fn build(plan: &Plan) -> Vec<Attr> {
    let ring_bytes = plan.ring_pages * shardrec_sys::ring::page_size();
    (0..plan.events.len())
        .map(|i| build_one(plan, i, ring_bytes))
        .collect()
}

fn build_one(plan: &Plan, index: usize, ring_bytes: usize) -> Attr {
    let spec = &plan.events[index];
    let mut attr = Attr::new(spec.type_, spec.config());
    attr.set_configs(spec.configs.config1, spec.configs.config2);
    attr.set_bp_type(spec.bp_type);
    set_modifiers(&mut attr, plan, spec);
    attr.set_flag(Flag::Inherit, spec.terms.inherit.unwrap_or(plan.inherit));
    let mut sample_type = BASE_SAMPLE_TYPE | sample_bits(plan, spec);
    set_sample_contents(&mut attr, plan);
    sample_type = set_read_format(&mut attr, plan, index, sample_type);
    sample_type = set_sampling(&mut attr, plan, spec, sample_type);
    sample_type = set_call_graph(&mut attr, plan, spec, sample_type);
    attr.set_sample_type(sample_type);
    attr.set_sample_id_all();
    if let Some(clockid) = plan.clockid {
        attr.set_clock(clockid);
    }
    if index == plan.tracking {
        set_tracking(&mut attr, plan);
    }
    set_enabling(&mut attr, plan, spec);
    match plan.overwrite {
        // Never read as it fills: no wakeups, as perf's.
        true => attr.set_flag(Flag::WriteBackward, true),
        false => attr.set_wakeup_watermark(wakeup_watermark(ring_bytes)),
    }
    attr
}

/// The events in the group of event `index` (1 for an event alone).
fn group_size(plan: &Plan, index: usize) -> usize {
    let leader = plan.events[index].leader.unwrap_or(index);
    1 + plan
        .events
        .iter()
        .filter(|e| e.leader == Some(leader))
        .count()
}

/// What `read()` (and a sample's READ) returns: ids, the lost count where
/// the kernel keeps one, a whole group for `:S`, times for `-s` and
/// `--running-time`.
fn set_read_format(attr: &mut Attr, plan: &Plan, index: usize, mut sample_type: u64) -> u64 {
    let mut read_format = FORMAT_ID;
    if plan.lost_counts {
        read_format |= FORMAT_LOST;
    }
    if plan.events[index].modifiers.sample_read {
        sample_type |= (abi::PERF_SAMPLE_READ | abi::PERF_SAMPLE_ID) as u64;
        // perf 6.1 reads a group in each sample only without inherit (the
        // kernel refused both together before 6.12).
        if group_size(plan, index) > 1 {
            read_format |= abi::PERF_FORMAT_GROUP as u64;
            attr.set_flag(Flag::Inherit, false);
        }
    }
    if plan.sample.per_thread_stat {
        read_format |= FORMAT_TIMES;
        attr.set_flag(Flag::InheritStat, true);
    }
    if plan.sample.running_time {
        read_format |= FORMAT_TIMES;
    }
    attr.set_read_format(read_format);
    sample_type
}

/// Group members follow their leader: only the leader is disabled and
/// enabled (at the workload's exec, unless -D delays it). The tracking
/// dummy runs at once system-wide, else from the exec even with -D.
fn set_enabling(attr: &mut Attr, plan: &Plan, spec: &EventSpec) {
    let leads = spec.leader.is_none();
    let dummy = spec.is_tracking_dummy();
    let immediate = dummy && plan.scope == Scope::SystemWide;
    let at_exec = plan.scope == Scope::Workload && (plan.delay.is_none() || dummy);
    attr.set_flag(Flag::Disabled, leads && !immediate);
    attr.set_flag(Flag::EnableOnExec, leads && !immediate && at_exec);
}

/// The modifiers' exclusions and constraints, with `--all-user` and
/// `--all-kernel` winning over them as in perf.
fn set_modifiers(attr: &mut Attr, plan: &Plan, spec: &EventSpec) {
    let m = &spec.modifiers;
    let (exclude_user, exclude_kernel) = match plan.all_in {
        Some(AddressSpace::User) => (false, true),
        Some(AddressSpace::Kernel) => (true, false),
        None => (m.exclude_user, m.exclude_kernel),
    };
    attr.set_exclude(exclude_user, exclude_kernel);
    for (flag, on) in [
        (Flag::ExcludeHv, m.exclude_hv),
        (Flag::ExcludeGuest, m.exclude_guest),
        (Flag::ExcludeHost, m.exclude_host),
        (Flag::ExcludeIdle, m.exclude_idle),
        (Flag::Pinned, m.pinned),
        (Flag::Exclusive, m.exclusive),
    ] {
        attr.set_flag(flag, on);
    }
    attr.set_precise_ip(if m.precise_max { 3 } else { m.precise_ip });
}

/// The sample bits the sample options and the event's kind add.
fn sample_bits(plan: &Plan, spec: &EventSpec) -> u64 {
    let s = &plan.sample;
    let dwarf = matches!(call_graph(plan, spec), CallGraph::Dwarf(_));
    [
        // perf samples data addresses for DWARF unwinding too.
        (
            s.data_addr || dwarf,
            abi::PERF_SAMPLE_ADDR | abi::PERF_SAMPLE_DATA_SRC,
        ),
        (s.phys_addr, abi::PERF_SAMPLE_PHYS_ADDR),
        (s.data_page_size, abi::PERF_SAMPLE_DATA_PAGE_SIZE),
        (s.code_page_size, abi::PERF_SAMPLE_CODE_PAGE_SIZE),
        (s.weight, abi::PERF_SAMPLE_WEIGHT_STRUCT),
        (s.raw || spec.is_tracepoint(), abi::PERF_SAMPLE_RAW),
        (s.intr_regs != 0, abi::PERF_SAMPLE_REGS_INTR),
        (s.user_regs != 0, abi::PERF_SAMPLE_REGS_USER),
        (s.branch != 0, abi::PERF_SAMPLE_BRANCH_STACK),
        (s.cgroups, abi::PERF_SAMPLE_CGROUP),
        (s.transaction, abi::PERF_SAMPLE_TRANSACTION),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .fold(0, |bits, (_, bit)| bits | bit as u64)
}

/// The registers and branch filter the sample options ask for.
fn set_sample_contents(attr: &mut Attr, plan: &Plan) {
    let s = &plan.sample;
    if s.intr_regs != 0 {
        attr.set_intr_regs(s.intr_regs);
    }
    if s.user_regs != 0 {
        attr.set_user_regs(s.user_regs);
    }
    if s.branch != 0 {
        attr.set_branch_sample_type(s.branch);
    }
}

/// Frequency or period, from the event's terms, the command line or the
/// event's own default (every hit, for tracepoints and breakpoints), and
/// whether samples carry their period (perf: with frequency sampling, or
/// with `-P`; a `period=` term drops it).
fn set_sampling(attr: &mut Attr, plan: &Plan, spec: &EventSpec, mut sample_type: u64) -> u64 {
    let leader_samples = spec
        .leader
        .is_some_and(|l| plan.events[l].modifiers.sample_read);
    let every_hit = spec.is_tracepoint() || spec.is_breakpoint() || spec.is_tracking_dummy();
    let sampling = match (spec.terms.period, spec.terms.freq, plan.sampling) {
        // Members of a group the leader samples (`:S`) only count.
        _ if leader_samples && spec.modifiers.sample_read => None,
        (Some(period), _, _) => Some(Sampling::Period(period)),
        (_, Some(hz), _) => Some(Sampling::Frequency(hz)),
        (_, _, Sampling::Default) if every_hit => Some(Sampling::Period(1)),
        (_, _, Sampling::Default) => Some(Sampling::Frequency(DEFAULT_HZ)),
        (_, _, other) => Some(other),
    };
    match sampling {
        Some(Sampling::Frequency(hz)) => {
            attr.set_frequency(hz);
            sample_type |= abi::PERF_SAMPLE_PERIOD as u64;
        }
        Some(Sampling::Period(period)) => attr.set_period(period),
        Some(Sampling::Default | Sampling::MaxFrequency) => unreachable!("resolved by the plan"),
        None => {
            attr.set_period(0);
            sample_type |= abi::PERF_SAMPLE_PERIOD as u64;
        }
    }
    // perf's tracepoints always carry their period.
    if plan.sample.period || spec.is_tracepoint() {
        sample_type |= abi::PERF_SAMPLE_PERIOD as u64;
    }
    // perf's -n: counting only (it keeps `freq` set, with no frequency).
    if plan.sample.no_samples && attr.flag(Flag::Freq) {
        attr.set_frequency(0);
    }
    if spec.terms.period.is_some() && !plan.sample.period {
        sample_type &= !(abi::PERF_SAMPLE_PERIOD as u64);
    }
    sample_type
}

/// The event's call graph: its `call-graph=` term, else the command line's.
fn call_graph(plan: &Plan, spec: &EventSpec) -> CallGraph {
    spec.terms.call_graph.unwrap_or(plan.call_graph)
}

fn set_call_graph(attr: &mut Attr, plan: &Plan, spec: &EventSpec, mut sample_type: u64) -> u64 {
    let callchain = abi::PERF_SAMPLE_CALLCHAIN as u64;
    match call_graph(plan, spec) {
        CallGraph::None => {}
        CallGraph::FramePointer => sample_type |= callchain,
        CallGraph::Dwarf(stack) => {
            sample_type |=
                callchain | (abi::PERF_SAMPLE_REGS_USER | abi::PERF_SAMPLE_STACK_USER) as u64;
            attr.set_user_stack(user_regs_mask() | plan.sample.user_regs, stack);
            attr.set_exclude_callchain_user();
        }
        CallGraph::Lbr => {
            sample_type |= callchain | abi::PERF_SAMPLE_BRANCH_STACK as u64;
            attr.set_branch_sample_type(LBR_BRANCHES);
        }
    }
    if let Some(frames) = spec.terms.max_stack {
        attr.set_max_stack(frames);
    }
    // --kernel-callchains leaves user frames out, --user-callchains kernel ones.
    match plan.sample.callchain_side {
        Some(AddressSpace::Kernel) => attr.set_exclude_callchain_user(),
        Some(AddressSpace::User) => attr.set_flag(Flag::ExcludeCallchainKernel, true),
        None => {}
    }
    sample_type
}

/// The side-band records perf asks of its first event. With `--overwrite`
/// the tasks' records go to the VIP's side-band events instead
/// ([`set_task_tracking`]); context switches, as many as the samples,
/// stay with them.
fn set_tracking(attr: &mut Attr, plan: &Plan) {
    if !plan.side_band_tracking {
        set_task_tracking(attr, plan);
    }
    attr.set_flag(Flag::ContextSwitch, plan.sample.switch_events);
}

/// The records that say which tasks exist and what they map: MMAP/MMAP2,
/// COMM, FORK/EXIT, namespaces, cgroups.
pub fn set_task_tracking(attr: &mut Attr, plan: &Plan) {
    attr.set_tracking();
    let s = &plan.sample;
    let dwarf = plan
        .events
        .iter()
        .any(|e| matches!(call_graph(plan, e), CallGraph::Dwarf(_)));
    // Data mappings resolve data addresses; DWARF unwinding needs the
    // read-only segments too (.eh_frame_hdr).
    attr.set_flag(Flag::MmapData, s.data_addr || dwarf);
    attr.set_flag(Flag::Namespaces, s.namespaces);
    attr.set_flag(Flag::Cgroup, s.cgroups);
    // With --buildid-mmap each MMAP2 names its file by build id: the
    // merge then needs no file, on this host or another, and a binary
    // replaced while recording keeps its own id.
    attr.set_flag(Flag::BuildId, plan.build_id_mmap);
}

/// Wake the writer at a quarter full: three quarters absorb the write's
/// latency, and the writer writes in pieces of about this size.
pub fn wakeup_watermark(ring_bytes: usize) -> u32 {
    (ring_bytes / 4).max(1) as u32
}
