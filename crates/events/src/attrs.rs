//! The `perf_event_attr` of each event, built as perf record builds it
//! (`evsel__config`) so that a perf user gets the events they know, with
//! the few differences shardrec's design needs (each listed in docs/record-options.md
//! and in the attr parity test): every sample carries IDENTIFIER, CPU and
//! TIME; rings wake their writer at a watermark; KSYMBOL and BPF_EVENT
//! come from the VIP's side-band event.

use shardrec_sys::{abi, process::user_regs_mask, ring, Attr, Flag};

use crate::{AddressSpace, CallGraph, EventSpec, SampleOptions, Sampling};

/// Which tasks a recording follows, as its attrs see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrScope {
    /// `-a`, `-C`: every task on the CPUs.
    SystemWide,
    /// `-p`, `-t`: tasks that already run.
    Threads,
    /// `-- cmd`: the workload, from its exec.
    Workload,
}

/// What each event's attr takes from the recording: its events, and the
/// options that shape every attr, as the recording's plan resolved them.
#[derive(Clone, Debug)]
pub struct AttrPlan<'a> {
    /// The events, in order.
    pub events: &'a [EventSpec],
    /// The event that carries the side band (mmap, comm, task).
    pub tracking: usize,
    /// Which tasks are followed.
    pub scope: AttrScope,
    /// `-D`: the events start later, enabled by the recorder.
    pub delayed: bool,
    /// Each CPU's ring, in pages.
    pub ring_pages: usize,
    /// `-F`, `-c`.
    pub sampling: Sampling,
    /// `--call-graph`.
    pub call_graph: CallGraph,
    /// `-k`.
    pub clockid: Option<i32>,
    /// Children are followed (not `-i`).
    pub inherit: bool,
    /// `--all-user`, `--all-kernel`.
    pub all_in: Option<AddressSpace>,
    /// The kernel counts lost samples per event (`PERF_FORMAT_LOST`, 6.0+).
    pub lost_counts: bool,
    /// What each sample carries beyond its event's own.
    pub sample: SampleOptions,
    /// `--overwrite`.
    pub overwrite: bool,
    /// `--buildid-mmap`.
    pub build_id_mmap: bool,
    /// The side band's own tracking event carries the task records.
    pub side_band_tracking: bool,
}

/// `PERF_FORMAT_LOST`, read_format bit 4.
pub const FORMAT_LOST: u64 = 1 << 4;
/// `PERF_FORMAT_ID`, read_format bit 2.
pub const FORMAT_ID: u64 = 1 << 2;

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
pub fn build(plan: &AttrPlan) -> Vec<Attr> {
    let ring_bytes = plan.ring_pages * shardrec_sys::ring::page_size();
    let mut attrs: Vec<Attr> = (0..plan.events.len())
        .map(|i| build_one(plan, i, ring_bytes))
        .collect();
    for index in 0..attrs.len() {
        follow_group_sampler(plan, &mut attrs, index);
    }
    attrs
}

/// perf's leader sampling (`evsel__config_leader_sampling`): in a group
/// whose leader has `:S`, one event samples, the leader or, after a leader
/// that is only read (Intel's topdown `slots`), the next member. The
/// others only count, unless their own terms give them a period, and take
/// the sampler's and the leader's sample layout.
fn follow_group_sampler(plan: &AttrPlan, attrs: &mut [Attr], index: usize) {
    let leader = plan.events[index].leader.unwrap_or(index);
    if !plan.events[leader].modifiers.sample_read {
        return;
    }
    let first_member =
        (leader + 1..plan.events.len()).find(|&i| plan.events[i].leader == Some(leader));
    let sampler = match first_member {
        Some(member) if plan.events[leader].lends_sampling() => member,
        _ => leader,
    };
    if index == sampler {
        return;
    }
    let terms = &plan.events[index].terms;
    if terms.period.is_none() && terms.freq.is_none() {
        attrs[index].set_period(0);
    }
    let layout = attrs[sampler].sample_type() | attrs[leader].sample_type();
    attrs[index].set_sample_type(layout);
}

/// The event as the user spelled it: its type, config and modifiers,
/// before what a recording adds (samples, tracking, enabling).
pub fn event_attr(plan: &AttrPlan, spec: &EventSpec) -> Attr {
    let mut attr = Attr::new(spec.type_, spec.config());
    attr.set_configs(spec.configs.config1, spec.configs.config2);
    attr.set_bp_type(spec.bp_type);
    set_modifiers(&mut attr, plan, spec);
    attr
}

fn build_one(plan: &AttrPlan, index: usize, ring_bytes: usize) -> Attr {
    let spec = &plan.events[index];
    if spec.is_off_cpu() {
        return off_cpu_attr(plan, index, ring_bytes);
    }
    let mut attr = event_attr(plan, spec);
    attr.set_flag(Flag::Inherit, spec.terms.inherit.unwrap_or(plan.inherit));
    let mut sample_type = BASE_SAMPLE_TYPE | sample_bits(plan, spec);
    set_sample_contents(&mut attr, plan, spec);
    sample_type = set_read_format(&mut attr, plan, index, sample_type);
    sample_type = set_sampling(&mut attr, plan, spec, sample_type);
    sample_type = set_call_graph(&mut attr, plan, spec, sample_type);
    attr.set_sample_type(sample_type);
    set_clock_and_ring(&mut attr, plan, ring_bytes);
    if index == plan.tracking {
        set_tracking(&mut attr, plan);
    }
    set_enabling(&mut attr, plan, spec);
    attr
}

/// What every event of a CPU's ring shares: the trailer on every record,
/// the clock and the ring's direction and wakeups.
fn set_clock_and_ring(attr: &mut Attr, plan: &AttrPlan, ring_bytes: usize) {
    attr.set_sample_id_all();
    if let Some(clockid) = plan.clockid {
        attr.set_clock(clockid);
    }
    match plan.overwrite {
        // Never read as it fills: no wakeups, as perf's.
        true => attr.set_flag(Flag::WriteBackward, true),
        false => attr.set_wakeup_watermark(ring::wakeup_watermark(ring_bytes)),
    }
}

/// `--off-cpu`'s output event on a CPU: every wait the program writes is
/// a sample; it follows no task (the program picks the tasks), and is
/// enabled with the CPU's other events, into whose ring it writes.
fn off_cpu_attr(plan: &AttrPlan, index: usize, ring_bytes: usize) -> Attr {
    let mut attr = event_attr(plan, &plan.events[index]);
    attr.set_period(1);
    // The wait itself is raw data, which the merge makes perf's sample
    // (`shardrec_format::records::off_cpu_sample`).
    let raw = shardrec_format::records::OFF_CPU_OUTPUT_SAMPLE_TYPE;
    let sample_type = set_read_format(&mut attr, plan, index, raw);
    attr.set_sample_type(sample_type);
    // With --call-graph dwarf the program copies each waiting task's user
    // registers and stack: the attr says which and how much, for the
    // merge to give perf's offcpu-time event (the kernel reads these
    // fields only with their sample_type bits, which it does not get).
    if let CallGraph::Dwarf(stack) = call_graph(plan, &plan.events[index]) {
        let stack = shardrec_format::records::off_cpu_user_stack(stack);
        attr.set_user_stack(user_regs_mask(), stack);
    }
    set_clock_and_ring(&mut attr, plan, ring_bytes);
    attr.set_flag(Flag::Disabled, true);
    attr
}

/// The events in the group of event `index` (1 for an event alone).
fn group_size(plan: &AttrPlan, index: usize) -> usize {
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
fn set_read_format(attr: &mut Attr, plan: &AttrPlan, index: usize, mut sample_type: u64) -> u64 {
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
fn set_enabling(attr: &mut Attr, plan: &AttrPlan, spec: &EventSpec) {
    let leads = spec.leader.is_none();
    let dummy = spec.is_tracking_dummy();
    let immediate = dummy && plan.scope == AttrScope::SystemWide;
    let at_exec = plan.scope == AttrScope::Workload && (!plan.delayed || dummy);
    attr.set_flag(Flag::Disabled, leads && !immediate);
    attr.set_flag(Flag::EnableOnExec, leads && !immediate && at_exec);
}

/// The modifiers' exclusions and constraints, with `--all-user` and
/// `--all-kernel` winning over them as in perf.
fn set_modifiers(attr: &mut Attr, plan: &AttrPlan, spec: &EventSpec) {
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

/// Whether the event is a dummy, which perf never asks for registers.
fn is_dummy(spec: &EventSpec) -> bool {
    spec.type_ == abi::PERF_TYPE_SOFTWARE && spec.config() == abi::PERF_COUNT_SW_DUMMY as u64
}

/// The registers `-I` and `--user-regs` (with arm64's link register) add
/// to an event's samples: none to a dummy's, as in perf.
fn asked_regs(plan: &AttrPlan, spec: &EventSpec) -> (u64, u64) {
    match is_dummy(spec) {
        true => (0, 0),
        false => (plan.sample.intr_regs, user_regs(plan)),
    }
}

/// The user registers asked for: `--user-regs`, and on arm64 with
/// frame-pointer callchains the link register, which perf samples to find
/// a leaf function's caller (`arch__add_leaf_frame_record_opts`).
fn user_regs(plan: &AttrPlan) -> u64 {
    let arm64 = cfg!(target_arch = "aarch64");
    plan.sample.user_regs | leaf_frame_regs(arm64, plan.call_graph)
}

/// `PERF_REG_ARM64_LR`'s bit, where perf 6.1 asks for it.
fn leaf_frame_regs(arm64: bool, call_graph: CallGraph) -> u64 {
    match arm64 && call_graph == CallGraph::FramePointer {
        true => 1 << 30,
        false => 0,
    }
}

/// perf's `DWARF_MINIMAL_REGS` (instruction and stack pointers): all a
/// DWARF callchain adds when `--user-regs` chose the registers.
fn dwarf_minimal_regs() -> u64 {
    if cfg!(target_arch = "x86_64") {
        1 << 8 | 1 << 7
    } else if cfg!(target_arch = "aarch64") {
        1 << 32 | 1 << 31
    } else {
        0
    }
}

/// `-W`'s sample bit: x86's perf asks for the weight struct (with the
/// instruction latency), every other architecture's for the plain weight
/// (`arch_evsel__set_sample_weight`).
fn weight_bit(x86: bool) -> u32 {
    match x86 {
        true => abi::PERF_SAMPLE_WEIGHT_STRUCT,
        false => abi::PERF_SAMPLE_WEIGHT,
    }
}

/// The sample bits the sample options and the event's kind add.
fn sample_bits(plan: &AttrPlan, spec: &EventSpec) -> u64 {
    let s = &plan.sample;
    let dwarf = matches!(call_graph(plan, spec), CallGraph::Dwarf(_));
    let (intr_regs, user_regs) = asked_regs(plan, spec);
    let x86 = cfg!(any(target_arch = "x86", target_arch = "x86_64"));
    [
        // perf samples data addresses for DWARF unwinding too.
        (
            s.data_addr || dwarf,
            abi::PERF_SAMPLE_ADDR | abi::PERF_SAMPLE_DATA_SRC,
        ),
        (s.phys_addr, abi::PERF_SAMPLE_PHYS_ADDR),
        (s.data_page_size, abi::PERF_SAMPLE_DATA_PAGE_SIZE),
        (s.code_page_size, abi::PERF_SAMPLE_CODE_PAGE_SIZE),
        (s.weight, weight_bit(x86)),
        (s.raw || spec.is_tracepoint(), abi::PERF_SAMPLE_RAW),
        (intr_regs != 0, abi::PERF_SAMPLE_REGS_INTR),
        (user_regs != 0, abi::PERF_SAMPLE_REGS_USER),
        (s.branch != 0, abi::PERF_SAMPLE_BRANCH_STACK),
        (s.cgroups, abi::PERF_SAMPLE_CGROUP),
        (s.transaction, abi::PERF_SAMPLE_TRANSACTION),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .fold(0, |bits, (_, bit)| bits | bit as u64)
}

/// The registers and branch filter the sample options ask for.
fn set_sample_contents(attr: &mut Attr, plan: &AttrPlan, spec: &EventSpec) {
    let (intr_regs, user_regs) = asked_regs(plan, spec);
    if intr_regs != 0 {
        attr.set_intr_regs(intr_regs);
    }
    if user_regs != 0 {
        attr.set_user_regs(user_regs);
    }
    if plan.sample.branch != 0 {
        attr.set_branch_sample_type(plan.sample.branch);
    }
}

/// Frequency or period, from the event's terms, the command line or the
/// event's own default (every hit, for tracepoints and breakpoints), and
/// whether samples carry their period (perf: with frequency sampling, or
/// with `-P`; a `period=` term drops it).
fn set_sampling(attr: &mut Attr, plan: &AttrPlan, spec: &EventSpec, mut sample_type: u64) -> u64 {
    // A `:S` group's members are made to count by follow_group_sampler.
    let every_hit = spec.is_tracepoint() || spec.is_breakpoint() || spec.is_tracking_dummy();
    let sampling = match (spec.terms.period, spec.terms.freq, plan.sampling) {
        (Some(period), _, _) => Sampling::Period(period),
        (_, Some(hz), _) => Sampling::Frequency(hz),
        (_, _, Sampling::Default) if every_hit => Sampling::Period(1),
        (_, _, Sampling::Default) => Sampling::Frequency(DEFAULT_HZ),
        (_, _, other) => other,
    };
    match sampling {
        Sampling::Frequency(hz) => {
            attr.set_frequency(hz);
            sample_type |= abi::PERF_SAMPLE_PERIOD as u64;
        }
        Sampling::Period(period) => attr.set_period(period),
        Sampling::Default | Sampling::MaxFrequency => unreachable!("resolved by the plan"),
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
fn call_graph(plan: &AttrPlan, spec: &EventSpec) -> CallGraph {
    spec.terms.call_graph.unwrap_or(plan.call_graph)
}

fn set_call_graph(attr: &mut Attr, plan: &AttrPlan, spec: &EventSpec, mut sample_type: u64) -> u64 {
    let callchain = abi::PERF_SAMPLE_CALLCHAIN as u64;
    match call_graph(plan, spec) {
        CallGraph::None => {}
        CallGraph::FramePointer => sample_type |= callchain,
        CallGraph::Dwarf(stack) => {
            sample_type |=
                callchain | (abi::PERF_SAMPLE_REGS_USER | abi::PERF_SAMPLE_STACK_USER) as u64;
            let unwinding = match user_regs(plan) {
                0 => user_regs_mask(),
                _ => dwarf_minimal_regs(),
            };
            attr.set_user_stack(unwinding | asked_regs(plan, spec).1, stack);
            attr.set_exclude_callchain_user();
        }
        // perf walks frame pointers instead when the branch stack is taken
        // (-b, -j) or the event leaves user space out (its own modifiers).
        CallGraph::Lbr if plan.sample.branch != 0 || spec.modifiers.exclude_user => {
            sample_type |= callchain
        }
        CallGraph::Lbr => {
            sample_type |= callchain | abi::PERF_SAMPLE_BRANCH_STACK as u64;
            attr.set_branch_sample_type(LBR_BRANCHES);
        }
    }
    // A term's max-stack, else `--call-graph fp,FRAMES`'s for an event
    // that walks frame pointers as `--call-graph` says.
    let global = match (spec.terms.call_graph, plan.call_graph) {
        (None, CallGraph::FramePointer) => plan.sample.max_stack,
        _ => None,
    };
    if let Some(frames) = spec.terms.max_stack.or(global) {
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
fn set_tracking(attr: &mut Attr, plan: &AttrPlan) {
    if !plan.side_band_tracking {
        set_task_tracking(attr, plan);
    }
    attr.set_flag(Flag::ContextSwitch, plan.sample.switch_events);
}

/// The records that say which tasks exist and what they map: MMAP/MMAP2,
/// COMM, FORK/EXIT, namespaces, cgroups.
pub fn set_task_tracking(attr: &mut Attr, plan: &AttrPlan) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{resolve, EventArg};

    /// The events of `-e EVENTS` with perf's defaults, system-wide (so
    /// with perf's tracking dummy last).
    fn events(events: &str) -> Vec<EventSpec> {
        let mut events = resolve(&[EventArg::parse(events).unwrap()], &[]).unwrap();
        events.push(EventSpec::tracking_dummy());
        events
    }

    /// A plan for `events` with perf's defaults, system-wide.
    fn plan(events: &[EventSpec]) -> AttrPlan<'_> {
        AttrPlan {
            events,
            tracking: events.len() - 1,
            scope: AttrScope::SystemWide,
            delayed: false,
            ring_pages: 1,
            sampling: Sampling::Frequency(DEFAULT_HZ),
            call_graph: CallGraph::None,
            clockid: None,
            inherit: true,
            all_in: None,
            lost_counts: true,
            sample: Default::default(),
            overwrite: false,
            build_id_mmap: false,
            side_band_tracking: false,
        }
    }

    fn has(attr: &Attr, bit: u32) -> bool {
        attr.sample_type() & bit as u64 != 0
    }

    #[test]
    fn the_dummy_is_asked_for_no_registers() {
        let events = events("cpu-clock");
        let mut plan = plan(&events);
        plan.sample.intr_regs = 0xff;
        plan.sample.user_regs = 0x1;
        let attrs = build(&plan);
        assert!(has(&attrs[0], abi::PERF_SAMPLE_REGS_INTR));
        assert!(has(&attrs[0], abi::PERF_SAMPLE_REGS_USER));
        assert!(!has(&attrs[1], abi::PERF_SAMPLE_REGS_INTR));
        assert!(!has(&attrs[1], abi::PERF_SAMPLE_REGS_USER));
    }

    #[test]
    fn dwarf_with_chosen_registers_adds_only_ip_and_sp() {
        let events = events("cpu-clock");
        let mut plan = plan(&events);
        plan.call_graph = CallGraph::Dwarf(8192);
        let full = build(&plan);
        plan.sample.user_regs = 0x1;
        let chosen = build(&plan);
        assert!(has(&full[0], abi::PERF_SAMPLE_REGS_USER));
        assert_eq!(full[0].user_regs(), user_regs_mask());
        assert_eq!(chosen[0].user_regs(), dwarf_minimal_regs() | 0x1);
        // The dummy unwinds too, without the registers asked for.
        assert_eq!(chosen[1].user_regs(), dwarf_minimal_regs());
    }

    #[test]
    fn lbr_gives_way_to_a_branch_stack_and_to_kernel_only_events() {
        let events = events("cpu-clock,cpu-clock:k");
        let mut plan = plan(&events);
        plan.call_graph = CallGraph::Lbr;
        let attrs = build(&plan);
        assert_eq!(attrs[0].branch_sample_type(), LBR_BRANCHES);
        assert!(has(&attrs[1], abi::PERF_SAMPLE_CALLCHAIN));
        assert!(!has(&attrs[1], abi::PERF_SAMPLE_BRANCH_STACK));
        plan.sample.branch = abi::PERF_SAMPLE_BRANCH_ANY as u64;
        let attrs = build(&plan);
        assert_eq!(attrs[0].branch_sample_type(), plan.sample.branch);
    }

    #[test]
    fn architecture_rules() {
        assert_eq!(weight_bit(true), abi::PERF_SAMPLE_WEIGHT_STRUCT);
        assert_eq!(weight_bit(false), abi::PERF_SAMPLE_WEIGHT);
        assert_eq!(leaf_frame_regs(true, CallGraph::FramePointer), 1 << 30);
        assert_eq!(leaf_frame_regs(true, CallGraph::Dwarf(8192)), 0);
        assert_eq!(leaf_frame_regs(false, CallGraph::FramePointer), 0);
    }

    #[test]
    fn a_read_group_samples_through_its_leader() {
        let events = events("{cpu-clock:S,task-clock,cs/period=100/}");
        let plan = plan(&events);
        let attrs = build(&plan);
        assert!(attrs[0].flag(Flag::Freq) && attrs[0].samples());
        assert!(!attrs[1].flag(Flag::Freq) && !attrs[1].samples());
        assert_eq!(attrs[1].sample_type(), attrs[0].sample_type());
        // A member's own period keeps it sampling, with the leader's layout.
        assert!(attrs[2].samples() && attrs[2].sample_type() == attrs[0].sample_type());
    }

    #[test]
    fn group_members_are_not_pinned_by_the_groups_letters() {
        let attrs = build(&plan(&events("{cpu-clock,task-clock}:D")));
        assert!(attrs[0].flag(Flag::Pinned) && !attrs[1].flag(Flag::Pinned));
    }
}
