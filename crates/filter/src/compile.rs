//! A filter as a `BPF_PROG_TYPE_PERF_EVENT` program. The context is
//! `struct bpf_perf_event_data`: the interrupted registers, then the
//! sample's period and data address; the task's ids, name and cgroup come
//! from helpers. The program returns 1 to keep the sample, 0 to drop it,
//! and counts either in the CPU's counter slot.
//!
//! Registers: r6 holds the context, r7 the verdict; a term leaves its
//! value in r0 and its constant in r2 (helpers clobber r1-r5).

use shardrec_sys::bpf::insn::{self, Alu, Cond};

use crate::asm::{Asm, Label};
use crate::counters::{self, SLOT_BYTES};
use crate::parse::{Expr, Field, Op, Term, Value};

/// `BPF_FUNC_*` helpers the terms call.
pub(crate) mod helper {
    pub const MAP_LOOKUP_ELEM: i32 = 1;
    pub const GET_SMP_PROCESSOR_ID: i32 = 8;
    pub const GET_CURRENT_PID_TGID: i32 = 14;
    pub const GET_CURRENT_UID_GID: i32 = 15;
    pub const GET_CURRENT_COMM: i32 = 16;
    pub const GET_CURRENT_CGROUP_ID: i32 = 80;
}

/// Offsets in `struct bpf_perf_event_data`: `bpf_user_pt_regs_t`, then
/// `sample_period` and `addr`.
#[cfg(target_arch = "x86_64")]
mod ctx {
    /// `struct pt_regs`: ip is the 17th of its 21 registers.
    pub const IP: i16 = 16 * 8;
    pub const PERIOD: i16 = 21 * 8;
    pub const ADDR: i16 = 22 * 8;
}

#[cfg(target_arch = "aarch64")]
mod ctx {
    /// `struct user_pt_regs`: regs[31], sp, pc, pstate.
    pub const IP: i16 = 32 * 8;
    pub const PERIOD: i16 = 34 * 8;
    pub const ADDR: i16 = 35 * 8;
}

/// Kernel addresses are the upper half on x86-64 and arm64: bit 63 set.
const KERNEL_BIT: i32 = 63;

/// Registers.
pub(crate) const R0: u8 = 0;
pub(crate) const R1: u8 = 1;
pub(crate) const R2: u8 = 2;
pub(crate) const CTX: u8 = 6;
const VERDICT: u8 = 7;
pub(crate) const FP: u8 = 10;

/// A compiled filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterProgram {
    /// The instructions.
    pub insns: Vec<u64>,
    /// The `ld_map_value` instructions whose immediate must be the
    /// counters map's fd.
    pub counter_refs: Vec<usize>,
    /// Counter slots (CPUs) the map must hold.
    pub slots: u32,
}

/// Compiles `expr`, counting into `slots` CPU slots.
pub fn compile(expr: &Expr, slots: u32) -> FilterProgram {
    let mut asm = Asm::default();
    asm.push(&[insn::mov64_reg(CTX, R1)]);
    let (drop, count) = (asm.label(), asm.label());
    condition(&mut asm, expr, drop);
    asm.push(&[insn::mov64_imm(VERDICT, 1)]);
    asm.goto(count);
    asm.place(drop);
    asm.push(&[insn::mov64_imm(VERDICT, 0)]);
    asm.place(count);
    let counter_ref = count_verdict(&mut asm, slots);
    asm.push(&[insn::mov64_reg(R0, VERDICT), insn::exit()]);
    FilterProgram {
        insns: asm.finish(),
        counter_refs: vec![counter_ref],
        slots,
    }
}

/// Adds 1 to the slot of the current CPU: kept or dropped, as the verdict
/// says. Returns the index of the map reference.
fn count_verdict(asm: &mut Asm, slots: u32) -> usize {
    let (add, out) = (asm.label(), asm.label());
    asm.push(&[insn::call_helper(helper::GET_SMP_PROCESSOR_ID)]);
    asm.jump_imm(Cond::Ge, R0, slots as i32, out);
    asm.push(&[insn::alu64_imm(
        Alu::Lsh,
        R0,
        SLOT_BYTES.trailing_zeros() as i32,
    )]);
    let counter_ref = asm.insns.len();
    asm.push(&insn::ld_map_value(R1, 0));
    asm.push(&[insn::add64_reg(R1, R0)]);
    asm.jump_imm(Cond::Ne, VERDICT, 0, add);
    asm.push(&[insn::add64_imm(R1, counters::DROPPED as i32)]);
    asm.place(add);
    asm.push(&[insn::mov64_imm(R2, 1), insn::atomic_add64(R1, R2, 0)]);
    asm.place(out);
    counter_ref
}

/// Jumps to `otherwise` unless `expr` holds; falls through when it does.
fn condition(asm: &mut Asm, expr: &Expr, otherwise: Label) {
    match expr {
        Expr::Term(term) => test(asm, term, otherwise),
        Expr::All(list) => list.iter().for_each(|e| condition(asm, e, otherwise)),
        Expr::Any(alternatives) => {
            let holds = asm.label();
            let (last, first) = alternatives.split_last().expect("an alternative");
            for alternative in first {
                let next = asm.label();
                condition(asm, alternative, next);
                asm.goto(holds);
                asm.place(next);
            }
            condition(asm, last, otherwise);
            asm.place(holds);
        }
    }
}

/// One term: its value into r0, its constant into r2, then the jump to
/// `otherwise` when the comparison fails.
fn test(asm: &mut Asm, term: &Term, otherwise: Label) {
    let constant = match &term.value {
        Value::Number(n) => {
            load_field(asm, term.field);
            *n
        }
        Value::Comm { name, prefix } => {
            // r0 is 0 exactly when the name matches.
            comm_mismatch(asm, name, *prefix);
            0
        }
    };
    asm.push(&insn::ld_imm64(R2, constant));
    let fails = match term.op {
        Op::Eq => Cond::Ne,
        Op::Ne => Cond::Eq,
        Op::Lt => Cond::Ge,
        Op::Le => Cond::Gt,
        Op::Gt => Cond::Le,
        Op::Ge => Cond::Lt,
        Op::And => {
            asm.push(&[insn::alu64_reg(Alu::And, R0, R2)]);
            asm.jump_imm(Cond::Eq, R0, 0, otherwise);
            return;
        }
    };
    asm.jump_reg(fails, R0, R2, otherwise);
}

/// The field's value into r0 (the context in r6).
pub(crate) fn load_field(asm: &mut Asm, field: Field) {
    let call = |id| insn::call_helper(id);
    let high_half = insn::alu64_imm(Alu::Rsh, R0, 32);
    let low_half = insn::mov32_reg(R0, R0);
    let ip = insn::ldx64(R0, CTX, ctx::IP);
    let kernel_bit = insn::alu64_imm(Alu::Rsh, R0, KERNEL_BIT);
    match field {
        Field::Ip => asm.push(&[ip]),
        Field::Kernel => asm.push(&[ip, kernel_bit]),
        Field::User => asm.push(&[ip, kernel_bit, insn::alu64_imm(Alu::Xor, R0, 1)]),
        Field::Period => asm.push(&[insn::ldx64(R0, CTX, ctx::PERIOD)]),
        Field::Addr => asm.push(&[insn::ldx64(R0, CTX, ctx::ADDR)]),
        Field::Pid => asm.push(&[call(helper::GET_CURRENT_PID_TGID), high_half]),
        Field::Tid => asm.push(&[call(helper::GET_CURRENT_PID_TGID), low_half]),
        Field::Uid => asm.push(&[call(helper::GET_CURRENT_UID_GID), low_half]),
        Field::Gid => asm.push(&[call(helper::GET_CURRENT_UID_GID), high_half]),
        Field::Cpu => asm.push(&[call(helper::GET_SMP_PROCESSOR_ID)]),
        Field::Cgroup => asm.push(&[call(helper::GET_CURRENT_CGROUP_ID)]),
        Field::Comm => unreachable!("comm compares names"),
    }
}

/// The task's name into a zeroed 16 bytes of stack, then r0 = the bits
/// that differ from `name` (its first `name.len()` bytes when `prefix`,
/// else all 16, the NUL padding included).
fn comm_mismatch(asm: &mut Asm, name: &[u8], prefix: bool) {
    let (want, mask) = comm_words(name, prefix);
    load_comm(asm);
    for (reg, i) in [(R0, 0), (R1, 1)] {
        asm.push(&insn::ld_imm64(R2, mask[i]));
        asm.push(&[insn::alu64_reg(Alu::And, reg, R2)]);
        asm.push(&insn::ld_imm64(R2, want[i]));
        asm.push(&[insn::alu64_reg(Alu::Xor, reg, R2)]);
    }
    asm.push(&[insn::alu64_reg(Alu::Or, R0, R1)]);
}

/// A `comm` term's name and mask as the two words each a program
/// compares the task's name with: the name NUL-padded to 16 bytes; the
/// mask all ones, or over the name's bytes only for a prefix.
pub(crate) fn comm_words(name: &[u8], prefix: bool) -> ([u64; 2], [u64; 2]) {
    let mut want = [0u8; 16];
    want[..name.len()].copy_from_slice(name);
    let mut mask = [0xffu8; 16];
    if prefix {
        mask[name.len()..].fill(0);
    }
    let words = |bytes: &[u8; 16]| {
        [0, 1].map(|i| u64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes")))
    };
    (words(&want), words(&mask))
}

/// The task's name into a zeroed 16 bytes of stack at fp-16, its two
/// words then in r0 and r1.
pub(crate) fn load_comm(asm: &mut Asm) {
    asm.push(&[
        insn::st64_imm(FP, -16, 0),
        insn::st64_imm(FP, -8, 0),
        insn::mov64_reg(R1, FP),
        insn::add64_imm(R1, -16),
        insn::mov64_imm(R2, 16),
        insn::call_helper(helper::GET_CURRENT_COMM),
        insn::ldx64(R0, FP, -16),
        insn::ldx64(R1, FP, -8),
    ]);
}
