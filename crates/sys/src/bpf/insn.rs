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
/// `BPF_LD | BPF_IMM | BPF_DW`: a 64-bit constant over two instructions.
const LD_IMM64: u8 = 0x18;
/// `BPF_PSEUDO_MAP_VALUE`: an `LD_IMM64` whose first immediate is a map
/// fd and second an offset into its (one) value.
const PSEUDO_MAP_VALUE: u8 = 2;
/// `BPF_LDX | BPF_MEM | BPF_DW`
const LDX_DW: u8 = 0x79;
/// `BPF_LDX | BPF_MEM | BPF_W`
const LDX_W: u8 = 0x61;
/// `BPF_STX | BPF_MEM | BPF_DW`
const STX_DW: u8 = 0x7b;
/// `BPF_PSEUDO_MAP_FD`: an `LD_IMM64` whose immediate is a map fd, the
/// register then pointing at the map.
const PSEUDO_MAP_FD: u8 = 1;
/// `BPF_PSEUDO_KFUNC_CALL`: a call's src_reg for a kernel function, whose
/// BTF id is the immediate.
const PSEUDO_KFUNC_CALL: u8 = 2;
/// `BPF_ST | BPF_MEM | BPF_DW`
const ST_DW: u8 = 0x7a;
/// `BPF_ALU | BPF_MOV | BPF_X`: 32-bit move, zeroing the upper half.
const MOV32_REG: u8 = 0xbc;
/// `BPF_JMP | BPF_JA`
const JA: u8 = 0x05;
/// `BPF_STX | BPF_DW | BPF_ATOMIC`, with `BPF_ADD` (0) as the immediate.
const ATOMIC_ADD_DW: u8 = 0xdb;

/// A 64-bit ALU operation (`BPF_ALU64 | op`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alu {
    /// `&=`
    And = 0x50,
    /// `|=`
    Or = 0x40,
    /// `^=`
    Xor = 0xa0,
    /// `<<=`
    Lsh = 0x60,
    /// `>>=` (logical)
    Rsh = 0x70,
}

/// A jump's condition (`BPF_JMP | op`), unsigned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cond {
    /// `==`
    Eq = 0x10,
    /// `!=`
    Ne = 0x50,
    /// `>`
    Gt = 0x20,
    /// `>=`
    Ge = 0x30,
    /// `<`
    Lt = 0xa0,
    /// `<=`
    Le = 0xb0,
    /// `&` is not zero
    Set = 0x40,
}

/// `BPF_K`, `BPF_X`: the operand is the immediate, or the source register.
const K: u8 = 0x00;
const X: u8 = 0x08;
/// `BPF_ALU64`, `BPF_JMP`
const ALU64: u8 = 0x07;
const JMP: u8 = 0x05;

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

/// `dst = value`: two instructions.
pub const fn ld_imm64(dst: Reg, value: u64) -> [u64; 2] {
    [
        encode(LD_IMM64, dst, 0, 0, value as u32 as i32),
        encode(0, 0, 0, 0, (value >> 32) as u32 as i32),
    ]
}

/// `dst = &value_of(map)[offset]` for a single-entry array map whose fd
/// the loader puts into the first immediate (see
/// [`super::ProgramSpec::map_values`]): two instructions.
pub const fn ld_map_value(dst: Reg, offset: u32) -> [u64; 2] {
    [
        encode(LD_IMM64, dst, PSEUDO_MAP_VALUE, 0, 0),
        encode(0, 0, 0, 0, offset as i32),
    ]
}

/// `dst = map` for the map whose fd the loader puts into the first
/// immediate (a map argument of a helper): two instructions.
pub const fn ld_map_fd(dst: Reg, fd: i32) -> [u64; 2] {
    [
        encode(LD_IMM64, dst, PSEUDO_MAP_FD, 0, fd),
        encode(0, 0, 0, 0, 0),
    ]
}

/// Call the kernel function whose id in the kernel's BTF is `btf_id` (a
/// kfunc): arguments and result as a helper's.
pub const fn call_kfunc(btf_id: u32) -> u64 {
    encode(CALL, 0, PSEUDO_KFUNC_CALL, 0, btf_id as i32)
}

/// The instruction `insn` with its immediate replaced.
pub const fn with_imm(insn: u64, imm: i32) -> u64 {
    let mut bytes = insn.to_ne_bytes();
    let imm = imm.to_ne_bytes();
    bytes[4] = imm[0];
    bytes[5] = imm[1];
    bytes[6] = imm[2];
    bytes[7] = imm[3];
    u64::from_ne_bytes(bytes)
}

/// `dst = *(u64 *)(src + off)`
pub const fn ldx64(dst: Reg, src: Reg, off: i16) -> u64 {
    encode(LDX_DW, dst, src, off, 0)
}

/// `dst = *(u32 *)(src + off)`
pub const fn ldx32(dst: Reg, src: Reg, off: i16) -> u64 {
    encode(LDX_W, dst, src, off, 0)
}

/// `*(u64 *)(dst + off) = src`
pub const fn stx64(dst: Reg, off: i16, src: Reg) -> u64 {
    encode(STX_DW, dst, src, off, 0)
}

/// `*(u64 *)(dst + off) = imm`
pub const fn st64_imm(dst: Reg, off: i16, imm: i32) -> u64 {
    encode(ST_DW, dst, 0, off, imm)
}

/// `dst op= imm`
pub const fn alu64_imm(op: Alu, dst: Reg, imm: i32) -> u64 {
    encode(ALU64 | op as u8 | K, dst, 0, 0, imm)
}

/// `dst op= src`
pub const fn alu64_reg(op: Alu, dst: Reg, src: Reg) -> u64 {
    encode(ALU64 | op as u8 | X, dst, src, 0, 0)
}

/// `dst = (u32)src`
pub const fn mov32_reg(dst: Reg, src: Reg) -> u64 {
    encode(MOV32_REG, dst, src, 0, 0)
}

/// `if dst cond imm goto +off`
pub const fn jmp_imm(cond: Cond, dst: Reg, imm: i32, off: i16) -> u64 {
    encode(JMP | cond as u8 | K, dst, 0, off, imm)
}

/// `if dst cond src goto +off`
pub const fn jmp_reg(cond: Cond, dst: Reg, src: Reg, off: i16) -> u64 {
    encode(JMP | cond as u8 | X, dst, src, off, 0)
}

/// `goto +off`
pub const fn ja(off: i16) -> u64 {
    encode(JA, 0, 0, off, 0)
}

/// Call helper `id` (`BPF_FUNC_*`): arguments in r1-r5, result in r0;
/// r1-r5 are clobbered.
pub const fn call_helper(id: i32) -> u64 {
    encode(CALL, 0, 0, 0, id)
}

/// `lock *(u64 *)(dst + off) += src`
pub const fn atomic_add64(dst: Reg, src: Reg, off: i16) -> u64 {
    encode(ATOMIC_ADD_DW, dst, src, off, 0)
}

/// The jump offset field of `insn` set to `off`.
pub const fn with_off(insn: u64, off: i16) -> u64 {
    let mut bytes = insn.to_ne_bytes();
    let off = off.to_ne_bytes();
    bytes[2] = off[0];
    bytes[3] = off[1];
    u64::from_ne_bytes(bytes)
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
        // r0 = *(u64 *)(r6 + 128); if r0 > r2 goto +5; r0 >>= 32; w0 = w0
        assert_eq!(
            ldx64(0, 6, 128).to_le_bytes(),
            [0x79, 0x60, 128, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            jmp_reg(Cond::Gt, 0, 2, 5).to_le_bytes(),
            [0x2d, 0x20, 5, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            alu64_imm(Alu::Rsh, 0, 32).to_le_bytes(),
            [0x77, 0, 0, 0, 32, 0, 0, 0]
        );
        assert_eq!(mov32_reg(0, 0).to_le_bytes(), [0xbc, 0, 0, 0, 0, 0, 0, 0]);
        // lock *(u64 *)(r1 + 8) += r2
        assert_eq!(
            atomic_add64(1, 2, 8).to_le_bytes(),
            [0xdb, 0x21, 8, 0, 0, 0, 0, 0]
        );
        let [lo, hi] = ld_imm64(2, 0x1122_3344_5566_7788);
        assert_eq!(lo.to_le_bytes(), [0x18, 2, 0, 0, 0x88, 0x77, 0x66, 0x55]);
        assert_eq!(hi.to_le_bytes(), [0, 0, 0, 0, 0x44, 0x33, 0x22, 0x11]);
        assert_eq!(with_off(ja(0), -2), ja(-2));
        assert_eq!(
            with_imm(ld_map_value(1, 0)[0], 7).to_le_bytes()[..2],
            [0x18, 0x21]
        );
    }
}
