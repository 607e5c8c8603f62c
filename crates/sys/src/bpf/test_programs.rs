//! Ready-made programs of known shape for tests and workloads. Each is
//! named by BTF, so its kernel symbols read `bpf_prog_<tag>_<function>`.

use super::insn::{add64_imm, add64_reg, call_local, exit, jlt_imm, mov64_imm, mov64_reg};
use super::load::{prog_type, ProgramSpec};

/// Iterations of [`hot_loop`]'s loop per run.
pub const HOT_LOOP_ITERATIONS: i32 = 10_000;

/// A program's tag hashes its instructions only, and libbpf's own feature
/// probe is `r0 = 0; exit`: the first move makes this program's tag ours
/// alone, so tests can tell it apart by tag.
static RETURN_ZERO: [u64; 3] = [mov64_imm(0, 0x5eed), mov64_imm(0, 0), exit()];

/// `shardrec_zero`: a socket filter that returns 0, one function, with a
/// tag no other program shares.
pub fn return_zero() -> ProgramSpec<'static> {
    ProgramSpec {
        prog_type: prog_type::SOCKET_FILTER,
        name: "shardrec_zero",
        insns: &RETURN_ZERO,
        license: "GPL",
        func_names: &[(0, "shardrec_zero")],
    }
}

static WITH_SUBPROGRAM: [u64; 6] = [
    mov64_imm(1, 1),
    call_local(2), // to instruction 4
    mov64_imm(0, 0),
    exit(),
    mov64_reg(0, 1), // the sub-program returns its argument
    exit(),
];

/// `shardrec_call`: a socket filter whose main function
/// (`shardrec_call`) calls a sub-program (`shardrec_callee`), so it has two
/// JITed images, two kernel symbols and two tags.
pub fn with_subprogram() -> ProgramSpec<'static> {
    ProgramSpec {
        prog_type: prog_type::SOCKET_FILTER,
        name: "shardrec_call",
        insns: &WITH_SUBPROGRAM,
        license: "GPL",
        func_names: &[(0, "shardrec_call"), (4, "shardrec_callee")],
    }
}

static HOT_LOOP: [u64; 7] = [
    mov64_imm(1, 0), // i
    mov64_imm(0, 0), // sum
    add64_reg(0, 1),
    add64_imm(1, 1),
    jlt_imm(1, HOT_LOOP_ITERATIONS, -3), // back to the add while i < N
    mov64_imm(0, 0),                     // 0: the tracepoint event is not recorded
    exit(),
];

/// `shardrec_hot`: a tracepoint program (GPL) that spends its time in a
/// bounded loop of [`HOT_LOOP_ITERATIONS`] iterations, then returns 0 (the
/// event is dropped). Attach it to a tracepoint perf event with
/// `PERF_EVENT_IOC_SET_BPF` ([`crate::PerfEvent::set_bpf`]) to put BPF code
/// on a known code path, e.g. a syscall's entry.
pub fn hot_loop() -> ProgramSpec<'static> {
    ProgramSpec {
        prog_type: prog_type::TRACEPOINT,
        name: "shardrec_hot",
        insns: &HOT_LOOP,
        license: "GPL",
        func_names: &[(0, "shardrec_hot")],
    }
}

/// The instructions and function names of a socket filter whose main
/// function calls `functions` sub-programs, each returning its number:
/// more sub-programs than one info call makes room for, so a capture
/// takes its second call. Build a [`ProgramSpec`] from them.
pub fn many_functions(functions: usize) -> (Vec<u64>, Vec<(u32, String)>) {
    let first = functions + 2;
    let mut insns: Vec<u64> = (0..functions)
        .map(|i| call_local((first + 2 * i - i - 1) as i32))
        .collect();
    insns.extend([mov64_imm(0, 0), exit()]);
    let mut names = vec![(0, "shardrec_many".to_string())];
    for i in 0..functions {
        names.push((insns.len() as u32, format!("shardrec_f{i}")));
        insns.extend([mov64_imm(0, i as i32), exit()]);
    }
    (insns, names)
}
