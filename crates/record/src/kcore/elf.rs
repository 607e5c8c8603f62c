//! The little of ELF64 a kcore copy needs: reading `/proc/kcore`'s header
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
    big_endian: bool,
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
        let big_endian = bytes[5] == 2;
        let r = Reader { bytes, big_endian };
        Ok(Header {
            ident: bytes[..16].try_into().expect("16 bytes"),
            e_type: r.u16(16),
            machine: r.u16(18),
            version: r.u32(20),
            phoff: r.u64(32),
            flags: r.u32(48),
            phnum: r.u16(56),
            big_endian,
        })
    }

    /// Where the program headers are, and how many bytes they take.
    pub fn program_headers(&self) -> (u64, usize) {
        (self.phoff, self.phnum as usize * PHDR_SIZE)
    }

    /// Reads the program headers from their bytes.
    pub fn segments(&self, bytes: &[u8]) -> Vec<Segment> {
        let r = Reader {
            bytes,
            big_endian: self.big_endian,
        };
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
        let mut w = Writer {
            out: Vec::new(),
            big_endian: self.big_endian,
        };
        w.out.extend_from_slice(&self.ident);
        w.u16(self.e_type);
        w.u16(self.machine);
        w.u32(self.version);
        w.u64(0); // e_entry
        w.u64(EHDR_SIZE as u64); // e_phoff
        w.u64(0); // e_shoff
        w.u32(self.flags);
        w.u16(EHDR_SIZE as u16);
        w.u16(PHDR_SIZE as u16);
        w.u16(segments.len() as u16);
        w.u16(0); // e_shentsize
        w.u16(0); // e_shnum
        w.u16(0); // e_shstrndx
        let mut offset = data_start;
        for &(vaddr, len) in segments {
            w.u32(PT_LOAD);
            w.u32(PF_RWX);
            w.u64(offset);
            w.u64(vaddr);
            w.u64(0); // p_paddr
            w.u64(len);
            w.u64(len);
            w.u64(page);
            offset += len;
        }
        w.out
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("/proc/kcore: {what}"))
}

struct Reader<'a> {
    bytes: &'a [u8],
    big_endian: bool,
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
        let b = self.take(at);
        if self.big_endian {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        }
    }
    fn u32(&self, at: usize) -> u32 {
        let b = self.take(at);
        if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }
    fn u64(&self, at: usize) -> u64 {
        let b = self.take(at);
        if self.big_endian {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        }
    }
}

struct Writer {
    out: Vec<u8>,
    big_endian: bool,
}

impl Writer {
    fn u16(&mut self, v: u16) {
        let b = if self.big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.out.extend_from_slice(&b);
    }
    fn u32(&mut self, v: u32) {
        let b = if self.big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.out.extend_from_slice(&b);
    }
    fn u64(&mut self, v: u64) {
        let b = if self.big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.out.extend_from_slice(&b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_core_file_reads_back() {
        let mut source = vec![0u8; EHDR_SIZE];
        source[..6].copy_from_slice(b"\x7fELF\x02\x01");
        source[16] = 4; // ET_CORE
        source[18] = 62; // EM_X86_64
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
