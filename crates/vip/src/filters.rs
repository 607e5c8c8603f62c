//! Loading the `--filter` programs: each gets its counters map, then the
//! coordinator gets both descriptors to attach the program to the
//! sampling events and read the counters at stop.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use shardrec_control::fault;
use shardrec_filter::{counters, FilterProgram};
use shardrec_sys::bpf::{self, insn, prog_type, LoadError, MappedArray, ProgramSpec};

/// The name the programs are loaded under (`bpf_prog_<tag>_shardrec_filt`
/// in a profile).
const NAME: &str = "shardrec_filter";

/// A loaded filter: the program and its counters.
pub struct LoadedFilter {
    /// The program, for `PERF_EVENT_IOC_SET_BPF`.
    pub prog: OwnedFd,
    /// Its counters.
    pub counters: MappedArray,
}

impl LoadedFilter {
    /// The program's and the map's descriptors, in that order.
    pub fn fds(&self) -> [BorrowedFd<'_>; 2] {
        [self.prog.as_fd(), self.counters.fd()]
    }
}

/// Loads `program` with a new counters map. The error is one line: what
/// failed, and the last line of the verifier's log when it refused.
pub fn load(program: &FilterProgram) -> io::Result<LoadedFilter> {
    let counters = MappedArray::create("shardrec_counts", counters::value_size(program.slots))
        .map_err(explain)?;
    let mut insns = program.insns.clone();
    for &at in &program.counter_refs {
        insns[at] = insn::with_imm(insns[at], counters.fd().as_raw_fd());
    }
    if fault::inject(fault::Site::FilterLoad).is_some() {
        // A program the verifier must refuse: r0 read before it is set.
        insns.insert(0, insn::mov64_reg(6, 0));
    }
    let spec = ProgramSpec {
        prog_type: prog_type::PERF_EVENT,
        name: NAME,
        insns: &insns,
        license: "Dual MIT/GPL",
        func_names: &[],
    };
    let prog = bpf::load_program(&spec).map_err(explain)?;
    Ok(LoadedFilter { prog, counters })
}

/// The error in one line, with the cause a perf user can act on.
fn explain(err: io::Error) -> io::Error {
    // Kinds, not errnos: they survive the context the loaders add.
    let message = match (LoadError::of(&err), err.kind()) {
        (Some(LoadError {
            what,
            source,
            reason: Some(reason),
        }), _) => format!(
            "the kernel's verifier refused the --filter program: {what}: {source}; its log ends: {reason}"
        ),
        (_, io::ErrorKind::PermissionDenied) => {
            format!("{err} (a --filter program needs root, or CAP_BPF with CAP_PERFMON)")
        }
        (_, io::ErrorKind::Unsupported) => {
            format!("{err} (this kernel has no bpf(2): CONFIG_BPF_SYSCALL is off)")
        }
        _ => err.to_string(),
    };
    io::Error::new(err.kind(), message)
}
