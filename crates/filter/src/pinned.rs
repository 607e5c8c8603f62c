//! The sample filter a regular user can attach (`--setup-filter pin`).
//!
//! Loading a `BPF_PROG_TYPE_PERF_EVENT` program takes `CAP_BPF` and
//! `CAP_PERFMON`, but attaching one takes only the event's descriptor and
//! the program's. So root loads one program that reads its filters from a
//! map, and pins both on the bpf file system; a user's recording writes
//! its filter, as data, into the map under the id of each event it
//! opened, and attaches the pinned program to them.
//!
//! The program finds the filter of the event that overflowed by the
//! event's id, or its parent's for an event a child task inherited, read
//! through `bpf_cast_to_kern_ctx` (Linux 6.2) at offsets the kernel's BTF
//! gives when the program is built. An event with no filter in the map
//! keeps every sample. Each entry counts what its filter kept and
//! dropped.
//!
//! An entry holds up to [`MAX_TERMS`] slots, each a term or the start or
//! end of an `||` group, so a filter is a list of terms and groups of
//! terms (perf's pinned filter takes the same), not nested groups.

use std::io;

use std::os::fd::{AsRawFd, OwnedFd};

use shardrec_sys::bpf::insn::{self, Alu, Cond};
use shardrec_sys::bpf::{self, prog_type, HashMap, KernelBtf, ProgramSpec};

use crate::asm::{Asm, Label};
use crate::compile::{comm_words, helper, load_comm, load_field, CTX, FP, R0, R1, R2};
use crate::counters::Counts;
use crate::parse::{Expr, Field, Op, Term, Value};

/// Slots of an entry.
pub const MAX_TERMS: usize = 16;
/// The map's key: an event id.
pub const KEY_SIZE: u32 = 8;
/// Bytes of a slot: kind, op (u32 each), then four u64: the constant (or
/// for `comm` the name's two words, then the mask's).
const SLOT_BYTES: usize = 40;
/// Where the slots start: after kept, dropped (u64) and the count (u32,
/// padded).
const SLOTS_AT: usize = 24;
/// The map's value size.
pub const VALUE_SIZE: u32 = (SLOTS_AT + MAX_TERMS * SLOT_BYTES) as u32;
/// Offsets in an entry.
const KEPT: i16 = 0;
const DROPPED: i16 = 8;
const COUNT: i16 = 16;

/// A slot's kind: a field's index in [`FIELDS`], or a group's bounds.
const GROUP_BEGIN: u32 = 100;
const GROUP_END: u32 = 101;

/// The fields by their code in an entry.
const FIELDS: [Field; 12] = [
    Field::Ip,
    Field::User,
    Field::Kernel,
    Field::Pid,
    Field::Tid,
    Field::Cpu,
    Field::Uid,
    Field::Gid,
    Field::Cgroup,
    Field::Period,
    Field::Addr,
    Field::Comm,
];

/// The comparisons by their code, each with the jump taken when it holds
/// (`&` is tested apart).
const OPS: [(Op, Cond); 7] = [
    (Op::Eq, Cond::Eq),
    (Op::Ne, Cond::Ne),
    (Op::Lt, Cond::Lt),
    (Op::Le, Cond::Le),
    (Op::Gt, Cond::Gt),
    (Op::Ge, Cond::Ge),
    (Op::And, Cond::Set),
];

/// Registers kept across helper calls.
const ENTRY: u8 = 7;
const COUNT_REG: u8 = 8;
const HOLDS: u8 = 9;
/// Stack: the comm buffer at -16, whether in a group, whether the group
/// holds so far, the lookup key.
const IN_GROUP: i16 = -24;
const GROUP_HOLDS: i16 = -32;
const KEY: i16 = -40;

/// Where the program reads the event's id: the kernel's layout, from its
/// BTF.
#[derive(Clone, Copy, Debug)]
pub struct KernelLayout {
    /// BTF id of `bpf_cast_to_kern_ctx`.
    cast_to_kern_ctx: u32,
    /// `struct bpf_perf_event_data_kern.event`.
    event: i16,
    /// `struct perf_event.parent`.
    parent: i16,
    /// `struct perf_event.id`.
    id: i16,
}

impl KernelLayout {
    /// Reads it from the running kernel's BTF.
    pub fn read(btf: &KernelBtf) -> io::Result<KernelLayout> {
        let offset = |name, member| {
            let at = btf.member_offset(name, member)?;
            i16::try_from(at).map_err(io::Error::other)
        };
        Ok(KernelLayout {
            cast_to_kern_ctx: btf.func_id("bpf_cast_to_kern_ctx")?,
            event: offset("bpf_perf_event_data_kern", "event")?,
            parent: offset("perf_event", "parent")?,
            id: offset("perf_event", "id")?,
        })
    }
}

/// The program, with the index of the `ld_imm64` whose immediate must be
/// the filters map's fd.
pub fn program(layout: &KernelLayout) -> (Vec<u64>, usize) {
    let mut asm = Asm::default();
    let map_ref = find_entry(&mut asm, layout);
    let (keep, drop) = (asm.label(), asm.label());
    for slot in 0..MAX_TERMS {
        run_slot(&mut asm, slot, keep, drop);
    }
    asm.place(keep);
    asm.push(&[insn::mov64_imm(HOLDS, 1)]);
    let count = asm.label();
    asm.goto(count);
    asm.place(drop);
    asm.push(&[insn::mov64_imm(HOLDS, 0)]);
    asm.place(count);
    // The entry's kept or dropped count, atomically: CPUs share it.
    let add = asm.label();
    asm.push(&[insn::mov64_reg(R1, ENTRY)]);
    asm.jump_imm(Cond::Ne, HOLDS, 0, add);
    asm.push(&[insn::add64_imm(R1, (DROPPED - KEPT) as i32)]);
    asm.place(add);
    asm.push(&[
        insn::mov64_imm(R2, 1),
        insn::atomic_add64(R1, R2, KEPT),
        insn::mov64_reg(R0, HOLDS),
        insn::exit(),
    ]);
    (asm.finish(), map_ref)
}

/// Loads the program with `map` (made with [`KEY_SIZE`] and
/// [`VALUE_SIZE`]) as its filters.
pub fn load(layout: &KernelLayout, map: &HashMap) -> io::Result<OwnedFd> {
    let (mut insns, map_ref) = program(layout);
    insns[map_ref] = insn::with_imm(insns[map_ref], map.fd().as_raw_fd());
    bpf::load_program(&ProgramSpec {
        prog_type: prog_type::PERF_EVENT,
        name: "shardrec_pinned",
        insns: &insns,
        // bpf_cast_to_kern_ctx, like every kfunc, is for GPL programs.
        license: "GPL",
        func_names: &[],
    })
}

/// Looks up the entry of the event (or its parent) into r7, its slot
/// count into r8; returns 1 (keep) where there is none.
fn find_entry(asm: &mut Asm, layout: &KernelLayout) -> usize {
    let own = asm.label();
    asm.push(&[
        insn::mov64_reg(CTX, R1),
        insn::call_kfunc(layout.cast_to_kern_ctx),
        insn::ldx64(R1, R0, layout.event),
        insn::ldx64(R2, R1, layout.parent),
    ]);
    asm.jump_imm(Cond::Eq, R2, 0, own);
    asm.push(&[insn::mov64_reg(R1, R2)]);
    asm.place(own);
    asm.push(&[insn::ldx64(R1, R1, layout.id), insn::stx64(FP, KEY, R1)]);
    let map_ref = asm.insns.len();
    asm.push(&insn::ld_map_fd(R1, 0));
    let found = asm.label();
    asm.push(&[
        insn::mov64_reg(R2, FP),
        insn::add64_imm(R2, KEY as i32),
        insn::call_helper(helper::MAP_LOOKUP_ELEM),
    ]);
    asm.jump_imm(Cond::Ne, R0, 0, found);
    asm.push(&[insn::mov64_imm(R0, 1), insn::exit()]);
    asm.place(found);
    asm.push(&[
        insn::mov64_reg(ENTRY, R0),
        insn::ldx32(COUNT_REG, ENTRY, COUNT),
        insn::st64_imm(FP, IN_GROUP, 0),
        insn::st64_imm(FP, GROUP_HOLDS, 0),
    ]);
    map_ref
}

/// Slot `slot`: nothing past the count (the filter holds); a group's
/// start or end; or a term, whose result ends the filter (outside a
/// group) or joins the group's.
fn run_slot(asm: &mut Asm, slot: usize, keep: Label, drop: Label) {
    let at = (SLOTS_AT + slot * SLOT_BYTES) as i16;
    let (next, term, not_begin) = (asm.label(), asm.label(), asm.label());
    asm.jump_imm(Cond::Le, COUNT_REG, slot as i32, keep);
    asm.push(&[insn::ldx32(R1, ENTRY, at)]);
    asm.jump_imm(Cond::Ne, R1, GROUP_BEGIN as i32, not_begin);
    asm.push(&[
        insn::st64_imm(FP, IN_GROUP, 1),
        insn::st64_imm(FP, GROUP_HOLDS, 0),
    ]);
    asm.goto(next);
    asm.place(not_begin);
    asm.jump_imm(Cond::Ne, R1, GROUP_END as i32, term);
    asm.push(&[insn::ldx64(R1, FP, GROUP_HOLDS)]);
    asm.jump_imm(Cond::Eq, R1, 0, drop);
    asm.push(&[insn::st64_imm(FP, IN_GROUP, 0)]);
    asm.goto(next);
    asm.place(term);
    test_slot(asm, at, drop);
    let in_group = asm.label();
    asm.push(&[insn::ldx64(R1, FP, IN_GROUP)]);
    asm.jump_imm(Cond::Ne, R1, 0, in_group);
    asm.jump_imm(Cond::Eq, HOLDS, 0, drop);
    asm.goto(next);
    asm.place(in_group);
    asm.push(&[
        insn::ldx64(R1, FP, GROUP_HOLDS),
        insn::alu64_reg(Alu::Or, R1, HOLDS),
        insn::stx64(FP, GROUP_HOLDS, R1),
    ]);
    asm.place(next);
}

/// The term in the slot at `at` (its kind in r1): whether it holds into
/// r9. An unknown kind drops the sample.
fn test_slot(asm: &mut Asm, at: i16, drop: Label) {
    let (loaded, compare) = (asm.label(), asm.label());
    for (code, &field) in FIELDS.iter().enumerate() {
        let other = asm.label();
        asm.jump_imm(Cond::Ne, R1, code as i32, other);
        match field {
            Field::Comm => {
                comm_mismatch(asm, at);
                asm.push(&[insn::mov64_imm(R2, 0)]);
                asm.goto(compare);
            }
            field => {
                load_field(asm, field);
                asm.goto(loaded);
            }
        }
        asm.place(other);
    }
    asm.goto(drop);
    asm.place(loaded);
    asm.push(&[insn::ldx64(R2, ENTRY, at + 8)]);
    asm.place(compare);
    let result = asm.label();
    asm.push(&[insn::ldx32(3, ENTRY, at + 4), insn::mov64_imm(HOLDS, 1)]);
    for (code, (_, holds)) in OPS.iter().enumerate() {
        let other = asm.label();
        asm.jump_imm(Cond::Ne, 3, code as i32, other);
        asm.jump_reg(*holds, R0, R2, result);
        asm.push(&[insn::mov64_imm(HOLDS, 0)]);
        asm.goto(result);
        asm.place(other);
    }
    asm.push(&[insn::mov64_imm(HOLDS, 0)]);
    asm.place(result);
}

/// r0 = the bits of the task's name that differ from the slot's, under
/// the slot's mask (the name's words at +8, +16; the mask's at +24, +32).
fn comm_mismatch(asm: &mut Asm, at: i16) {
    load_comm(asm);
    for (reg, word) in [(R0, 0), (R1, 8)] {
        asm.push(&[
            insn::ldx64(R2, ENTRY, at + 24 + word),
            insn::alu64_reg(Alu::And, reg, R2),
            insn::ldx64(R2, ENTRY, at + 8 + word),
            insn::alu64_reg(Alu::Xor, reg, R2),
        ]);
    }
    asm.push(&[insn::alu64_reg(Alu::Or, R0, R1)]);
}

/// A filter that does not fit the pinned program's entry.
#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    /// More slots than an entry has.
    #[error(
        "the pinned filter takes at most {MAX_TERMS} terms and group bounds; this one needs {0}"
    )]
    TooLong(usize),
    /// An `||` inside a group, or a group inside an `||`.
    #[error("the pinned filter takes groups of single terms ('a || b'), not nested groups")]
    Nested,
}

/// The map value of `expr`, its counts zero.
pub fn entry(expr: &Expr) -> Result<Vec<u8>, EntryError> {
    let mut slots = Vec::new();
    flatten(expr, false, &mut slots)?;
    if slots.len() > MAX_TERMS {
        return Err(EntryError::TooLong(slots.len()));
    }
    let mut value = vec![0u8; VALUE_SIZE as usize];
    value[COUNT as usize..COUNT as usize + 4].copy_from_slice(&(slots.len() as u32).to_ne_bytes());
    for (i, slot) in slots.iter().enumerate() {
        let at = SLOTS_AT + i * SLOT_BYTES;
        value[at..at + SLOT_BYTES].copy_from_slice(slot);
    }
    Ok(value)
}

/// The slots of `expr` into `slots`; `grouped` inside an `||`.
fn flatten(
    expr: &Expr,
    grouped: bool,
    slots: &mut Vec<[u8; SLOT_BYTES]>,
) -> Result<(), EntryError> {
    match expr {
        Expr::Term(term) => slots.push(term_slot(term)),
        Expr::All(list) if !grouped => {
            for expr in list {
                flatten(expr, false, slots)?;
            }
        }
        Expr::Any(alternatives) if !grouped => {
            slots.push(bound_slot(GROUP_BEGIN));
            for alternative in alternatives {
                flatten(alternative, true, slots)?;
            }
            slots.push(bound_slot(GROUP_END));
        }
        _ => return Err(EntryError::Nested),
    }
    Ok(())
}

fn bound_slot(kind: u32) -> [u8; SLOT_BYTES] {
    let mut slot = [0u8; SLOT_BYTES];
    slot[..4].copy_from_slice(&kind.to_ne_bytes());
    slot
}

fn term_slot(term: &Term) -> [u8; SLOT_BYTES] {
    let code = |found: Option<usize>| found.expect("every field and op has a code") as u32;
    let kind = code(FIELDS.iter().position(|&f| f == term.field));
    let op = code(OPS.iter().position(|&(o, _)| o == term.op));
    let mut words = [0u64; 4];
    match &term.value {
        Value::Number(n) => words[0] = *n,
        Value::Comm { name, prefix } => {
            let (want, mask) = comm_words(name, *prefix);
            words = [want[0], want[1], mask[0], mask[1]];
        }
    }
    let mut slot = [0u8; SLOT_BYTES];
    slot[..4].copy_from_slice(&kind.to_ne_bytes());
    slot[4..8].copy_from_slice(&op.to_ne_bytes());
    for (i, word) in words.iter().enumerate() {
        slot[8 + 8 * i..16 + 8 * i].copy_from_slice(&word.to_ne_bytes());
    }
    slot
}

/// What an entry's filter kept and dropped, from its value.
pub fn entry_counts(value: &[u8]) -> Counts {
    let at = |offset: i16| shardrec_sys::bytes::field_u64(value, offset as usize);
    Counts {
        kept: at(KEPT),
        dropped: at(DROPPED),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SampleFilter;

    fn slots(text: &str) -> Result<u32, EntryError> {
        let value = entry(&SampleFilter::parse(text).unwrap().expr)?;
        Ok(u32::from_ne_bytes(value[16..20].try_into().unwrap()))
    }

    #[test]
    fn terms_and_groups_fill_slots() {
        assert_eq!(slots("pid == 1").unwrap(), 1);
        assert_eq!(slots("pid == 1, (cpu == 0 || user)").unwrap(), 5);
        let long = vec!["pid != 1"; MAX_TERMS + 1].join(", ");
        assert!(matches!(slots(&long), Err(EntryError::TooLong(17))));
    }

    #[test]
    fn nested_groups_do_not_fit() {
        let nested = slots("(cpu == 0 || (pid == 1 || tid == 2))");
        assert!(matches!(nested, Err(EntryError::Nested)), "{nested:?}");
    }
}
