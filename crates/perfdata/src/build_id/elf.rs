//! Finding the GNU build-id note of an ELF image (ELF32 and ELF64, either
//! byte order), in memory or in a file read by ranges.
//!
//! The program headers come first: a `PT_NOTE` segment is what the loader
//! maps and what perf's minimal reader looks at. Section headers are the
//! fallback for objects without program headers (relocatable `.ko` files,
//! separate debug files). Every offset and size comes from the file, so all
//! arithmetic is checked and every read is bounded.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::notes::{self, Endian};

/// `PT_NOTE`
const PT_NOTE: u32 = 4;
/// `SHT_NOTE`
const SHT_NOTE: u32 = 7;
/// `PN_XNUM`: the program header count is in section 0's `sh_info`.
const PN_XNUM: u64 = 0xffff;
/// The most bytes read for one header table or note range. Real ones are a
/// few KiB; a corrupt size must not allocate gigabytes.
const MAX_READ: u64 = 16 << 20;

/// Random access to the image's bytes.
trait Source {
    /// The `len` bytes at `offset`, or `None` when they are not all there.
    fn read(&self, offset: u64, len: u64) -> io::Result<Option<Vec<u8>>>;
}

impl Source for [u8] {
    fn read(&self, offset: u64, len: u64) -> io::Result<Option<Vec<u8>>> {
        let start = usize::try_from(offset).ok();
        let end = start
            .zip(usize::try_from(len).ok())
            .and_then(|(s, l)| s.checked_add(l));
        Ok(start
            .zip(end)
            .and_then(|(s, e)| self.get(s..e))
            .map(<[u8]>::to_vec))
    }
}

/// A file and its length, read with `pread` so only the asked ranges move.
struct FileSource {
    file: File,
    len: u64,
}

impl Source for FileSource {
    fn read(&self, offset: u64, len: u64) -> io::Result<Option<Vec<u8>>> {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Ok(None);
        }
        let mut buf = vec![0; len as usize]; // len <= MAX_READ, see read()
        match self.file.read_exact_at(&mut buf, offset) {
            Ok(()) => Ok(Some(buf)),
            // The file shrank under us: as good as truncated.
            Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
            Err(err) => Err(err),
        }
    }
}

/// Bounded read: a range larger than [`MAX_READ`] counts as absent.
fn read<S: Source + ?Sized>(src: &S, offset: u64, len: u64) -> io::Result<Option<Vec<u8>>> {
    if len > MAX_READ {
        return Ok(None);
    }
    src.read(offset, len)
}

/// The two header tables that can point at notes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Table {
    Program,
    Section,
}

/// Where the ELF header says the tables are.
struct Layout {
    is64: bool,
    endian: Endian,
    phoff: u64,
    phentsize: u64,
    phnum: u64,
    shoff: u64,
    shentsize: u64,
    shnum: u64,
}

impl Layout {
    /// Parses `e_ident` and the rest of the header (52 or 64 bytes).
    fn parse(header: &[u8]) -> Option<Layout> {
        if header.get(..4)? != b"\x7fELF" {
            return None;
        }
        let is64 = match header.get(4)? {
            1 => false,
            2 => true,
            _ => return None,
        };
        let endian = match header.get(5)? {
            1 => Endian::Little,
            2 => Endian::Big,
            _ => return None,
        };
        let mut layout = Layout {
            is64,
            endian,
            phoff: 0,
            phentsize: 0,
            phnum: 0,
            shoff: 0,
            shentsize: 0,
            shnum: 0,
        };
        let half = |at32, at64| endian.u16(header, if is64 { at64 } else { at32 });
        layout.phoff = layout.word(header, 28, 32)?;
        layout.shoff = layout.word(header, 32, 40)?;
        layout.phentsize = half(42, 54)?.into();
        layout.phnum = half(44, 56)?.into();
        layout.shentsize = half(46, 58)?.into();
        layout.shnum = half(48, 60)?.into();
        Some(layout)
    }

    /// An address, offset or size: a u32 at `at32` in ELF32, a u64 at
    /// `at64` in ELF64.
    fn word(&self, bytes: &[u8], at32: usize, at64: usize) -> Option<u64> {
        match self.is64 {
            true => self.endian.u64(bytes, at64),
            false => self.endian.u32(bytes, at32).map(u64::from),
        }
    }

    /// A table's (offset, entry size, count, smallest valid entry size).
    fn table(&self, table: Table) -> (u64, u64, u64, u64) {
        match (table, self.is64) {
            (Table::Program, is64) => (
                self.phoff,
                self.phentsize,
                self.phnum,
                if is64 { 56 } else { 32 },
            ),
            (Table::Section, is64) => (
                self.shoff,
                self.shentsize,
                self.shnum,
                if is64 { 64 } else { 40 },
            ),
        }
    }

    /// The (offset, size, align) of a `PT_NOTE` or `SHT_NOTE` entry, or
    /// `None` for any other kind.
    fn note_range(&self, table: Table, entry: &[u8]) -> Option<(u64, u64, u64)> {
        let e = self.endian;
        match table {
            Table::Program if e.u32(entry, 0)? == PT_NOTE => Some((
                self.word(entry, 4, 8)?,
                self.word(entry, 16, 32)?,
                self.word(entry, 28, 48)?,
            )),
            Table::Section if e.u32(entry, 4)? == SHT_NOTE => Some((
                self.word(entry, 16, 24)?,
                self.word(entry, 20, 32)?,
                self.word(entry, 32, 48)?,
            )),
            _ => None,
        }
    }

    /// Takes counts too large for the header from section 0 (see elf(5)):
    /// `sh_size` when `e_shnum` is 0, `sh_info` when `e_phnum` is `PN_XNUM`.
    fn extend_counts(&mut self, zero: &[u8]) {
        if self.shnum == 0 && self.shoff != 0 {
            self.shnum = self.word(zero, 20, 32).unwrap_or(0);
        }
        if self.phnum == PN_XNUM {
            let info = self.endian.u32(zero, if self.is64 { 44 } else { 28 });
            self.phnum = info.map_or(0, u64::from);
        }
    }
}

/// Reads the ELF header, or `None` if this is not ELF.
fn read_layout<S: Source + ?Sized>(src: &S) -> io::Result<Option<Layout>> {
    let Some(ident) = read(src, 0, 16)? else {
        return Ok(None);
    };
    let header_len = if ident.get(4) == Some(&2) { 64 } else { 52 };
    let header = read(src, 0, header_len)?;
    let Some(mut layout) = header.as_deref().and_then(Layout::parse) else {
        return Ok(None);
    };
    if layout.shnum == 0 || layout.phnum == PN_XNUM {
        let zero = read_table(src, &layout, Table::Section, 1)?;
        layout.extend_counts(&zero.unwrap_or_default());
    }
    Ok(Some(layout))
}

/// The first `count` entries of a header table, or `None` if they are not
/// all there or the entries are smaller than the class's struct.
fn read_table<S: Source + ?Sized>(
    src: &S,
    layout: &Layout,
    table: Table,
    count: u64,
) -> io::Result<Option<Vec<u8>>> {
    let (offset, entsize, _, min) = layout.table(table);
    match entsize.checked_mul(count) {
        Some(len) if entsize >= min && offset != 0 && len != 0 => read(src, offset, len),
        _ => Ok(None),
    }
}

/// The build id in the notes that one header table points at.
fn search_table<S: Source + ?Sized>(
    src: &S,
    layout: &Layout,
    table: Table,
) -> io::Result<Option<Vec<u8>>> {
    let (_, entsize, count, _) = layout.table(table);
    let Some(entries) = read_table(src, layout, table, count)? else {
        return Ok(None);
    };
    for entry in entries.chunks_exact(entsize as usize) {
        let Some((at, size, align)) = layout.note_range(table, entry) else {
            continue;
        };
        if let Some(bytes) = read(src, at, size)? {
            if let Some(id) = notes::gnu_build_id(&bytes, layout.endian, align) {
                return Ok(Some(id));
            }
        }
    }
    Ok(None)
}

fn find_build_id<S: Source + ?Sized>(src: &S) -> io::Result<Option<Vec<u8>>> {
    let Some(layout) = read_layout(src)? else {
        return Ok(None);
    };
    if let Some(id) = search_table(src, &layout, Table::Program)? {
        return Ok(Some(id));
    }
    search_table(src, &layout, Table::Section)
}

/// The GNU build id (the `NT_GNU_BUILD_ID` note named "GNU") of an ELF
/// image given as bytes; `None` if it has none or is not ELF.
///
/// ```
/// assert_eq!(shardrec_perfdata::build_id::elf_build_id(b"not an ELF file"), None);
/// ```
pub fn elf_build_id(bytes: &[u8]) -> Option<Vec<u8>> {
    // Reading from memory cannot fail, so the error arm is unreachable.
    find_build_id(bytes).ok().flatten()
}

/// Reads the build id of the ELF file at `path`, reading only the ELF
/// header, the header tables and the note ranges. `Ok(None)` if the file is
/// not ELF or has no build id; errors are the file's (open, read).
pub fn read_build_id(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    find_build_id(&FileSource { file, len })
}
