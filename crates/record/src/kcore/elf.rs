//! The little of ELF64 a kcore copy needs (in the host's byte order, as
//! `/proc/kcore` is): reading `/proc/kcore`'s header
//! and program headers, writing a core file of `PT_LOAD` segments (no
//! sections), as perf's `kcore_copy` writes `kcore_dir/kcore`.

use std::io;

/// `sizeof(Elf64_Ehdr)`
pub const EHDR_SIZE: usize = 64;
/// `sizeof(Elf64_Phdr)`
pub const PHDR_SIZE: usize = 56;
const ELFCLASS64: u8 = 2;
pub const PT_LOAD: u32 = 1;
pub const PF_X: u32 = 1;
const PF_RWX: u32 = 7;

/// One program header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub p_type: u32,
    pub flags: u32,
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
}

/// What is kept of the source's ELF header: its identification and the
/// fields the copy repeats.
#[derive(Clone, Debug)]
pub struct Header {
    ident: [u8; 16],
    e_type: u16,
    machine: u16,
    version: u32,
    flags: u32,
    phoff: u64,
    phnum: u16,
}

impl Header {
    /// Reads an ELF64 header.
    pub fn parse(bytes: &[u8]) -> io::Result<Header> {
        if bytes.len() < EHDR_SIZE || &bytes[..4] != b"\x7fELF" {
            return Err(invalid("not an ELF file"));
        }
        if bytes[4] != ELFCLASS64 {
            return Err(invalid("not a 64-bit ELF file"));
        }
        let r = Reader { bytes };
        Ok(Header {
            ident: bytes[..16].try_into().expect("16 bytes"),
            e_type: r.u16(16),
            machine: r.u16(18),
            version: r.u32(20),
            phoff: r.u64(32),
            flags: r.u32(48),
            phnum: r.u16(56),
        })
    }

    /// Where the program headers are, and how many bytes they take.
    pub fn program_headers(&self) -> (u64, usize) {
        (self.phoff, self.phnum as usize * PHDR_SIZE)
    }

    /// Reads the program headers from their bytes.
    pub fn segments(&self, bytes: &[u8]) -> Vec<Segment> {
        let r = Reader { bytes };
        (0..bytes.len() / PHDR_SIZE)
            .map(|i| i * PHDR_SIZE)
            .map(|at| Segment {
                p_type: r.u32(at),
                flags: r.u32(at + 4),
                offset: r.u64(at + 8),
                vaddr: r.u64(at + 16),
                filesz: r.u64(at + 32),
            })
            .collect()
    }

    /// The header and program headers of a core file whose segments
    /// (address, length) follow back to back from `data_start`, each
    /// `PF_R|PF_W|PF_X` and `page`-aligned, as perf writes them.
    pub fn core_file(&self, segments: &[(u64, u64)], data_start: u64, page: u64) -> Vec<u8> {
        let mut out = self.ident.to_vec();
        out.extend_from_slice(&self.e_type.to_ne_bytes());
        out.extend_from_slice(&self.machine.to_ne_bytes());
        out.extend_from_slice(&self.version.to_ne_bytes());
        // e_entry, e_phoff, e_shoff
        for word in [0, EHDR_SIZE as u64, 0] {
            out.extend_from_slice(&word.to_ne_bytes());
        }
        out.extend_from_slice(&self.flags.to_ne_bytes());
        // e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx
        for half in [EHDR_SIZE, PHDR_SIZE, segments.len(), 0, 0, 0] {
            out.extend_from_slice(&(half as u16).to_ne_bytes());
        }
        let mut offset = data_start;
        for &(vaddr, len) in segments {
            out.extend_from_slice(&PT_LOAD.to_ne_bytes());
            out.extend_from_slice(&PF_RWX.to_ne_bytes());
            // p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, p_align
            for word in [offset, vaddr, 0, len, len, page] {
                out.extend_from_slice(&word.to_ne_bytes());
            }
            offset += len;
        }
        out
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("/proc/kcore: {what}"))
}

/// Fields in the host's byte order: `/proc/kcore` is the running
/// kernel's, whose order is ours.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn take<const N: usize>(&self, at: usize) -> [u8; N] {
        let mut out = [0u8; N];
        if let Some(b) = self.bytes.get(at..at + N) {
            out.copy_from_slice(b);
        }
        out
    }
    fn u16(&self, at: usize) -> u16 {
        u16::from_ne_bytes(self.take(at))
    }
    fn u32(&self, at: usize) -> u32 {
        u32::from_ne_bytes(self.take(at))
    }
    fn u64(&self, at: usize) -> u64 {
        u64::from_ne_bytes(self.take(at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_core_file_reads_back() {
        let mut source = vec![0u8; EHDR_SIZE];
        source[..6].copy_from_slice(b"\x7fELF\x02\x01");
        source[16..18].copy_from_slice(&4u16.to_ne_bytes()); // ET_CORE
        source[18..20].copy_from_slice(&62u16.to_ne_bytes()); // EM_X86_64
        let header = Header::parse(&source).unwrap();
        let segments = [
            (0xffff_ffff_8100_0000, 0x2000),
            (0xffff_ffff_c000_0000, 0x1000),
        ];
        let core = header.core_file(&segments, 4096, 4096);
        assert_eq!(core.len(), EHDR_SIZE + 2 * PHDR_SIZE);
        let again = Header::parse(&core).unwrap();
        assert_eq!((again.e_type, again.machine, again.phnum), (4, 62, 2));
        let (phoff, len) = again.program_headers();
        let read = again.segments(&core[phoff as usize..phoff as usize + len]);
        assert_eq!(read[1].offset, 4096 + 0x2000);
        assert_eq!((read[1].vaddr, read[1].filesz), segments[1]);
        assert_eq!((read[0].p_type, read[0].flags), (PT_LOAD, PF_RWX));
    }
}
