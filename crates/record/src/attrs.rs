//! The `perf_event_attr` of each event, as the plan asks for it.

use shardrec_sys::{abi, process::user_regs_mask, Attr};

use crate::config::{AddressSpace, CallGraph, Sampling};
use crate::events::EventSpec;
use crate::plan::{Plan, Scope, FORMAT_ID, FORMAT_LOST};

/// perf record's default frequency.
const DEFAULT_HZ: u64 = 4000;

/// Every sample carries these, so the merge can order and attribute it
/// without knowing which event it came from first.
pub const BASE_SAMPLE_TYPE: u64 = (abi::PERF_SAMPLE_IDENTIFIER
    | abi::PERF_SAMPLE_IP
    | abi::PERF_SAMPLE_TID
    | abi::PERF_SAMPLE_TIME
    | abi::PERF_SAMPLE_CPU
    | abi::PERF_SAMPLE_PERIOD) as u64;

/// The attr of each event in the plan, in order. The first event carries
/// the side-band tracking (mmap, comm, task), as in perf.
pub fn build(plan: &Plan) -> Vec<Attr> {
    let ring_bytes = plan.ring_pages * shardrec_sys::ring::page_size();
    plan.events
        .iter()
        .enumerate()
        .map(|(i, spec)| build_one(plan, spec, i == 0, ring_bytes))
        .collect()
}

fn build_one(plan: &Plan, spec: &EventSpec, first: bool, ring_bytes: usize) -> Attr {
    let mut attr = Attr::new(spec.type_, spec.config);
    let (exclude_user, exclude_kernel) = match plan.all_in {
        // perf's --all-user and --all-kernel win over an event's modifiers.
        Some(AddressSpace::User) => (false, true),
        Some(AddressSpace::Kernel) => (true, false),
        None => (spec.exclude_user, spec.exclude_kernel),
    };
    attr.set_exclude(exclude_user, exclude_kernel);
    if spec.exclude_hv {
        attr.set_exclude_hv();
    }
    attr.set_exclude_guest();
    match plan.sampling {
        // Tracepoints record every hit unless told otherwise, as in perf.
        Sampling::Default if spec.is_tracepoint() => attr.set_period(1),
        Sampling::Default => attr.set_frequency(DEFAULT_HZ),
        Sampling::Frequency(hz) => attr.set_frequency(hz),
        Sampling::MaxFrequency => unreachable!("resolved by the plan"),
        Sampling::Period(period) => attr.set_period(period),
    }
    let mut sample_type = BASE_SAMPLE_TYPE;
    if spec.is_tracepoint() {
        sample_type |= abi::PERF_SAMPLE_RAW as u64;
    }
    match plan.call_graph {
        CallGraph::None => {}
        CallGraph::FramePointer => sample_type |= abi::PERF_SAMPLE_CALLCHAIN as u64,
        CallGraph::Dwarf(stack) => {
            sample_type |= (abi::PERF_SAMPLE_CALLCHAIN
                | abi::PERF_SAMPLE_REGS_USER
                | abi::PERF_SAMPLE_STACK_USER) as u64;
            attr.set_user_stack(user_regs_mask(), stack);
            attr.set_exclude_callchain_user();
        }
    }
    attr.set_sample_type(sample_type);
    attr.set_read_format(if plan.lost_counts {
        FORMAT_ID | FORMAT_LOST
    } else {
        FORMAT_ID
    });
    attr.set_sample_id_all();
    if let Some(clockid) = plan.clockid {
        attr.set_clock(clockid);
    }
    if first {
        attr.set_tracking();
        // DWARF unwinding needs the read-only segments too (.eh_frame_hdr),
        // as perf records them for --call-graph dwarf.
        if matches!(plan.call_graph, CallGraph::Dwarf(_)) {
            attr.set_mmap_data();
        }
    }
    if plan.scope != Scope::SystemWide && plan.inherit {
        attr.set_inherit();
    }
    if plan.scope == Scope::Workload {
        attr.set_enable_on_exec();
    }
    attr.set_wakeup_watermark(wakeup_watermark(ring_bytes));
    attr
}

/// Wake the writer at a quarter full: three quarters absorb the write's
/// latency, and the writer writes in pieces of about this size.
pub fn wakeup_watermark(ring_bytes: usize) -> u32 {
    (ring_bytes / 4).max(1) as u32
}
