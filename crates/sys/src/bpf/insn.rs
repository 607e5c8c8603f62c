//! BPF instructions as u64s (`struct bpf_insn`: opcode, dst and src
//! registers in one byte, 16-bit offset, 32-bit immediate), enough to write
//! small programs by hand. Jump and call offsets count instructions from the
//! one after the jump.

/// `BPF_ALU64 | BPF_MOV | BPF_K`
const MOV64_IMM: u8 = 0xb7;
/// `BPF_ALU64 | BPF_MOV | BPF_X`
const MOV64_REG: u8 = 0xbf;
/// `BPF_ALU64 | BPF_ADD | BPF_K`
const ADD64_IMM: u8 = 0x07;
/// `BPF_ALU64 | BPF_ADD | BPF_X`
const ADD64_REG: u8 = 0x0f;
/// `BPF_JMP | BPF_JLT | BPF_K`
const JLT_IMM: u8 = 0xa5;
/// `BPF_JMP | BPF_CALL`
const CALL: u8 = 0x85;
/// `BPF_JMP | BPF_EXIT`
const EXIT: u8 = 0x95;
/// `BPF_PSEUDO_CALL`: a call's src_reg for a call to a sub-program.
const PSEUDO_CALL: u8 = 1;

/// A register, `r0` (return value) to `r10` (frame pointer).
pub type Reg = u8;

/// One instruction. The two 4-bit register fields share a byte whose
/// nibble order follows the target's bit-field order.
pub const fn encode(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> u64 {
    let regs = if cfg!(target_endian = "little") {
        (src << 4) | (dst & 0xf)
    } else {
        (dst << 4) | (src & 0xf)
    };
    let off = off.to_ne_bytes();
    let imm = imm.to_ne_bytes();
    u64::from_ne_bytes([code, regs, off[0], off[1], imm[0], imm[1], imm[2], imm[3]])
}

/// `dst = imm`
pub const fn mov64_imm(dst: Reg, imm: i32) -> u64 {
    encode(MOV64_IMM, dst, 0, 0, imm)
}

/// `dst = src`
pub const fn mov64_reg(dst: Reg, src: Reg) -> u64 {
    encode(MOV64_REG, dst, src, 0, 0)
}

/// `dst += imm`
pub const fn add64_imm(dst: Reg, imm: i32) -> u64 {
    encode(ADD64_IMM, dst, 0, 0, imm)
}

/// `dst += src`
pub const fn add64_reg(dst: Reg, src: Reg) -> u64 {
    encode(ADD64_REG, dst, src, 0, 0)
}

/// `if dst < imm (unsigned) goto +off`
pub const fn jlt_imm(dst: Reg, imm: i32, off: i16) -> u64 {
    encode(JLT_IMM, dst, 0, off, imm)
}

/// Call the sub-program that starts `off` instructions after this one's
/// successor (a bpf-to-bpf call; arguments in r1-r5, result in r0).
pub const fn call_local(off: i32) -> u64 {
    encode(CALL, 0, PSEUDO_CALL, 0, off)
}

/// `return r0`
pub const fn exit() -> u64 {
    encode(EXIT, 0, 0, 0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_endian = "little")]
    fn matches_known_encodings() {
        // As llvm-objdump prints them: b7 00 00 00 00 00 00 00 = r0 = 0.
        assert_eq!(mov64_imm(0, 0).to_le_bytes(), [0xb7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(exit().to_le_bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            mov64_reg(0, 1).to_le_bytes(),
            [0xbf, 0x10, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            jlt_imm(1, 10_000, -3).to_le_bytes(),
            [0xa5, 0x01, 0xfd, 0xff, 0x10, 0x27, 0, 0]
        );
        assert_eq!(call_local(2).to_le_bytes(), [0x85, 0x10, 0, 0, 2, 0, 0, 0]);
    }
}
