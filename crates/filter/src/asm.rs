//! A few lines of assembler: instructions with jumps to labels, resolved
//! once every label is placed.

use shardrec_sys::bpf::insn::{self, Cond, Reg};

/// A place in the program, known before it is placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label(usize);

/// Instructions being written.
#[derive(Default)]
pub struct Asm {
    pub insns: Vec<u64>,
    /// Where each label was placed.
    placed: Vec<Option<usize>>,
    /// Jumps to patch: the instruction and its label.
    jumps: Vec<(usize, Label)>,
}

impl Asm {
    pub fn label(&mut self) -> Label {
        self.placed.push(None);
        Label(self.placed.len() - 1)
    }

    pub fn place(&mut self, label: Label) {
        self.placed[label.0] = Some(self.insns.len());
    }

    pub fn push(&mut self, insns: &[u64]) {
        self.insns.extend_from_slice(insns);
    }

    /// `if dst cond src goto label`
    pub fn jump_reg(&mut self, cond: Cond, dst: Reg, src: Reg, to: Label) {
        self.jumps.push((self.insns.len(), to));
        self.insns.push(insn::jmp_reg(cond, dst, src, 0));
    }

    /// `if dst cond imm goto label`
    pub fn jump_imm(&mut self, cond: Cond, dst: Reg, imm: i32, to: Label) {
        self.jumps.push((self.insns.len(), to));
        self.insns.push(insn::jmp_imm(cond, dst, imm, 0));
    }

    /// `goto label`
    pub fn goto(&mut self, to: Label) {
        self.jumps.push((self.insns.len(), to));
        self.insns.push(insn::ja(0));
    }

    /// The instructions, every jump pointing at its label.
    pub fn finish(mut self) -> Vec<u64> {
        for &(at, label) in &self.jumps {
            let target = self.placed[label.0].expect("every label is placed");
            let off = target as i64 - at as i64 - 1;
            let off = i16::try_from(off).expect("a filter fits in 32k instructions");
            self.insns[at] = insn::with_off(self.insns[at], off);
        }
        self.insns
    }
}
