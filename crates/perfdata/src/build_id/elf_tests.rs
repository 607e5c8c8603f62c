//! `elf_build_id` on hand-built images, and on broken ones (no panics).

use super::elf_build_id;
use shardrec_testkit::Noise;

const ID: [u8; 20] = [
    0x15, 0xdf, 0xff, 0x32, 0x39, 0xaa, 0x7c, 0x3b, 0x16, 0xa7, 0x1e, 0x6b, 0x2e, 0x3b, 0x6e, 0x40,
    0x09, 0xda, 0xb9, 0x98,
];

/// Writes integers in one class and byte order.
struct Out {
    is64: bool,
    big: bool,
    bytes: Vec<u8>,
}

impl Out {
    fn int(&mut self, value: u64, len: usize) {
        let be = value.to_be_bytes();
        let field = &be[8 - len..];
        if self.big {
            self.bytes.extend_from_slice(field);
        } else {
            self.bytes.extend(field.iter().rev());
        }
    }
    fn half(&mut self, v: u64) {
        self.int(v, 2)
    }
    fn word(&mut self, v: u64) {
        self.int(v, 4)
    }
    /// An address, offset or size: 4 or 8 bytes by class.
    fn addr(&mut self, v: u64) {
        self.int(v, if self.is64 { 8 } else { 4 })
    }
}

/// An ELF image: header, one `PT_NOTE` (if `phdr`), a null section and a
/// `SHT_NOTE` section (if `shdr`), then the note itself.
fn image(is64: bool, big: bool, phdr: bool, shdr: bool) -> Vec<u8> {
    let (ehsize, phentsize, shentsize) = if is64 { (64, 56, 64) } else { (52, 32, 40) };
    let phoff = if phdr { ehsize } else { 0 };
    let shoff = ehsize + if phdr { phentsize } else { 0 };
    let note_off = shoff + if shdr { 2 * shentsize } else { 0 };
    let mut out = Out {
        is64,
        big,
        bytes: b"\x7fELF".to_vec(),
    };
    out.bytes
        .extend_from_slice(&[if is64 { 2 } else { 1 }, if big { 2 } else { 1 }, 1]);
    out.bytes.resize(16, 0);
    out.half(2); // ET_EXEC
    out.half(if is64 { 62 } else { 3 });
    out.word(1);
    out.addr(0); // e_entry
    out.addr(phoff);
    out.addr(if shdr { shoff } else { 0 });
    out.word(0); // e_flags
    for value in [
        ehsize,
        phentsize,
        phdr as u64,
        shentsize,
        if shdr { 2 } else { 0 },
        0,
    ] {
        out.half(value);
    }
    assert_eq!(out.bytes.len() as u64, ehsize);
    let note_len = 12 + 4 + ID.len() as u64;
    if phdr {
        out.word(4); // PT_NOTE
        if is64 {
            out.word(4); // p_flags sits here in ELF64
        }
        out.addr(note_off);
        out.addr(0);
        out.addr(0);
        out.addr(note_len);
        out.addr(note_len);
        if !is64 {
            out.word(4);
        }
        out.addr(4); // p_align
    }
    if shdr {
        out.bytes.resize(out.bytes.len() + shentsize as usize, 0); // SHN_UNDEF
        out.word(0);
        out.word(7); // SHT_NOTE
        for value in [2, 0, note_off, note_len] {
            out.addr(value); // sh_flags, sh_addr, sh_offset, sh_size
        }
        out.word(0);
        out.word(0);
        out.addr(4);
        out.addr(0);
    }
    assert_eq!(out.bytes.len() as u64, note_off);
    out.word(4);
    out.word(ID.len() as u64);
    out.word(3); // NT_GNU_BUILD_ID
    out.bytes.extend_from_slice(b"GNU\0");
    out.bytes.extend_from_slice(&ID);
    out.bytes
}

#[test]
fn elf64_with_one_note() {
    let elf = image(true, false, true, false);
    assert_eq!(elf.len(), 64 + 56 + 36);
    assert_eq!(elf_build_id(&elf), Some(ID.to_vec()));
}

#[test]
fn both_classes_both_byte_orders_both_tables() {
    for is64 in [false, true] {
        for big in [false, true] {
            for (phdr, shdr) in [(true, false), (false, true), (true, true)] {
                let elf = image(is64, big, phdr, shdr);
                let what = format!("is64 {is64} big {big} phdr {phdr} shdr {shdr}");
                assert_eq!(elf_build_id(&elf), Some(ID.to_vec()), "{what}");
            }
        }
    }
}

#[test]
fn no_note_or_not_elf() {
    let mut elf = image(true, false, true, false);
    let note_type = elf.len() - 24 - 4;
    elf[note_type] = 1; // NT_GNU_ABI_TAG
    assert_eq!(elf_build_id(&elf), None);
    assert_eq!(elf_build_id(b""), None);
    assert_eq!(elf_build_id(b"\x7fELF"), None);
    assert_eq!(elf_build_id(&[0; 4096]), None);
    let mut bad_class = image(true, false, true, false);
    bad_class[4] = 3;
    assert_eq!(elf_build_id(&bad_class), None);
}

#[test]
fn every_truncation_is_none() {
    for elf in [
        image(true, false, true, true),
        image(false, true, true, true),
    ] {
        for len in 0..elf.len() {
            assert_eq!(elf_build_id(&elf[..len]), None, "cut at {len}");
        }
    }
}

#[test]
fn fuzz_never_panics() {
    let mut noise = Noise(0x5eed_1234_abcd_ef01);
    let seeds: Vec<Vec<u8>> = (0..8)
        .map(|i| image(i & 1 == 1, i & 2 == 2, i & 4 == 0, true))
        .collect();
    for round in 0..20_000 {
        let mut bytes = seeds[round % seeds.len()].clone();
        match noise.below(4) {
            // Flip a few bytes: offsets, sizes and counts go wild.
            0 | 1 => {
                for _ in 0..1 + noise.below(4) {
                    let at = noise.below(bytes.len());
                    bytes[at] = noise.next_u64() as u8;
                }
            }
            // Set a whole field to an extreme value.
            2 => {
                let at = noise.below(bytes.len() - 8);
                let extreme = [u64::MAX, 0, 0xffff, 1 << 31][noise.below(4)];
                bytes[at..at + 8].copy_from_slice(&extreme.to_le_bytes());
            }
            // Random bytes behind a valid identification.
            _ => {
                let len = 16 + noise.below(300);
                bytes.truncate(16);
                bytes.extend((16..len).map(|_| noise.next_u64() as u8));
            }
        }
        bytes.truncate(noise.below(bytes.len() + 1).max(bytes.len() / 2));
        let _ = elf_build_id(&bytes);
    }
}
