//! Parsing `/proc/PID/maps` lines by hand, without allocating.
//!
//! A line reads `start-end perms offset major:minor inode   path`, numbers in
//! hex except the inode (see `show_map_vma` in `fs/proc/task_mmu.c`). The path
//! column runs to the end of the line and may hold spaces, a ` (deleted)`
//! suffix or a name such as `[vdso]`; it is empty for anonymous memory.

use shardrec_format::records::Mapping;

/// `PROT_READ`
pub const PROT_READ: u32 = 1;
/// `PROT_WRITE`
pub const PROT_WRITE: u32 = 2;
/// `PROT_EXEC`
pub const PROT_EXEC: u32 = 4;
/// `MAP_SHARED`
pub const MAP_SHARED: u32 = 1;
/// `MAP_PRIVATE`
pub const MAP_PRIVATE: u32 = 2;

/// The name perf gives anonymous mappings.
pub const ANON: &[u8] = b"//anon";

/// One line of `/proc/PID/maps`, borrowing its path from the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapsLine<'a> {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `PROT_*` bits from the `rwx` columns.
    pub prot: u32,
    /// `MAP_PRIVATE` for `p`, `MAP_SHARED` for `s`.
    pub flags: u32,
    /// File offset of `start`.
    pub pgoff: u64,
    /// Device major number.
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// Inode number (0 for anonymous memory).
    pub inode: u64,
    /// The path column as written, empty for anonymous memory.
    pub path: &'a [u8],
}

impl<'a> MapsLine<'a> {
    /// Parses one line (without its newline); `None` if it is malformed.
    pub fn parse(line: &'a [u8]) -> Option<Self> {
        let mut cursor = Cursor { rest: line };
        let start = cursor.hex(b'-')?;
        let end = cursor.hex(b' ')?;
        let perms = cursor.field(b' ')?;
        let pgoff = cursor.hex(b' ')?;
        let major = u32::try_from(cursor.hex(b':')?).ok()?;
        let minor = u32::try_from(cursor.hex(b' ')?).ok()?;
        let inode = cursor.decimal()?;
        let (prot, flags) = perms_bits(perms)?;
        Some(MapsLine {
            start,
            end: end.max(start),
            prot,
            flags,
            pgoff,
            major,
            minor,
            inode,
            path: cursor.path(),
        })
    }

    /// Whether perf describes this mapping when not recording data maps.
    pub fn is_exec(&self) -> bool {
        self.prot & PROT_EXEC != 0
    }

    /// The mapping as the MMAP2 encoder wants it, anonymous memory named
    /// `//anon` as perf names it.
    pub fn mapping(&self) -> Mapping<'a> {
        Mapping {
            start: self.start,
            len: self.end - self.start,
            pgoff: self.pgoff,
            major: self.major,
            minor: self.minor,
            inode: self.inode,
            prot: self.prot,
            flags: self.flags,
            filename: if self.path.is_empty() {
                ANON
            } else {
                self.path
            },
            build_id: None,
        }
    }
}

/// The mappings perf describes: the executable ones and, with `data_maps`
/// (perf's `mmap_data`), the readable others too. Without data maps, most
/// lines are skipped by their `x` column before anything is parsed.
pub fn described_lines(maps: &[u8], data_maps: bool) -> impl Iterator<Item = MapsLine<'_>> {
    crate::scan::lines(maps)
        .filter(move |line| {
            let perms = line.iter().position(|&b| b == b' ').map_or(0, |at| at + 1);
            data_maps || line.get(perms + 2) == Some(&b'x')
        })
        .filter_map(MapsLine::parse)
        .filter(move |m| m.is_exec() || (data_maps && m.prot & PROT_READ != 0))
}

/// `rwxp` to `PROT_*` and `MAP_*` bits.
fn perms_bits(perms: &[u8]) -> Option<(u32, u32)> {
    let &[r, w, x, p] = perms else {
        return None;
    };
    let bit = |c: u8, on: u8, value: u32| if c == on { value } else { 0 };
    let prot = bit(r, b'r', PROT_READ) | bit(w, b'w', PROT_WRITE) | bit(x, b'x', PROT_EXEC);
    let flags = match p {
        b's' => MAP_SHARED,
        _ => MAP_PRIVATE,
    };
    Some((prot, flags))
}

struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    /// The bytes up to `stop`, consuming the stop byte too.
    fn field(&mut self, stop: u8) -> Option<&'a [u8]> {
        let at = self.rest.iter().position(|&b| b == stop)?;
        let field = &self.rest[..at];
        self.rest = &self.rest[at + 1..];
        Some(field)
    }

    fn hex(&mut self, stop: u8) -> Option<u64> {
        let field = self.field(stop)?;
        if field.is_empty() || field.len() > 16 {
            return None;
        }
        field.iter().try_fold(0u64, |acc, &c| {
            let digit = (c as char).to_digit(16)?;
            Some(acc << 4 | u64::from(digit))
        })
    }

    /// The inode, ended by a space or the end of the line.
    fn decimal(&mut self) -> Option<u64> {
        let len = self.rest.iter().take_while(|c| c.is_ascii_digit()).count();
        if len == 0 {
            return None;
        }
        let value = self.rest[..len].iter().try_fold(0u64, |acc, &c| {
            acc.checked_mul(10)?.checked_add(u64::from(c - b'0'))
        })?;
        self.rest = &self.rest[len..];
        Some(value)
    }

    /// The rest after the padding; inner and trailing spaces belong to the path.
    fn path(&self) -> &'a [u8] {
        let skip = self.rest.iter().take_while(|&&b| b == b' ').count();
        &self.rest[skip..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> MapsLine<'_> {
        MapsLine::parse(line.as_bytes()).unwrap()
    }

    #[test]
    fn file_backed_exec_map() {
        let map = parse(
            "7fc2dbd51000-7fc2dbea7000 r-xp 00026000 fe:00 326279                     \
             /usr/lib/x86_64-linux-gnu/libc.so.6",
        );
        assert_eq!(map.start, 0x7fc2dbd51000);
        assert_eq!(map.end, 0x7fc2dbea7000);
        assert_eq!(map.pgoff, 0x26000);
        assert_eq!((map.major, map.minor, map.inode), (0xfe, 0, 326279));
        assert_eq!(map.prot, PROT_READ | PROT_EXEC);
        assert_eq!(map.flags, MAP_PRIVATE);
        assert!(map.is_exec());
        assert_eq!(map.path, b"/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(map.mapping().len, 0x156000);
    }

    #[test]
    fn deleted_file_keeps_its_suffix() {
        let map = parse("00400000-00452000 r-xs 00001000 103:02 17 /tmp/old (deleted)");
        assert_eq!(map.path, b"/tmp/old (deleted)");
        assert_eq!((map.major, map.minor), (0x103, 2));
        assert_eq!(map.flags, MAP_SHARED);
    }

    #[test]
    fn anonymous_exec_map_is_anon() {
        let map = parse("7f0000000000-7f0000001000 rwxp 00000000 00:00 0 ");
        assert!(map.path.is_empty());
        assert_eq!(map.prot, PROT_READ | PROT_WRITE | PROT_EXEC);
        assert_eq!(map.mapping().filename, ANON);
        let bare = parse("7f0000000000-7f0000001000 --xp 00000000 00:00 0");
        assert_eq!(bare.prot, PROT_EXEC);
        assert_eq!(bare.mapping().filename, ANON);
    }

    #[test]
    fn special_names_are_kept() {
        let map = parse(
            "7fc2dbf1e000-7fc2dbf20000 r-xp 00000000 00:00 0                          [vdso]",
        );
        assert_eq!(map.mapping().filename, b"[vdso]");
        let heap = parse("55fc5ed23000-55fc5ed44000 rw-p 00000000 00:00 0   [heap]");
        assert!(!heap.is_exec());
    }

    #[test]
    fn path_with_spaces() {
        let map = parse("1000-2000 r-xp 00000000 08:01 42    /opt/My App/lib  x.so");
        assert_eq!(map.path, b"/opt/My App/lib  x.so");
    }

    #[test]
    fn malformed_lines_are_refused() {
        for line in [
            "",
            "1000-2000",
            "1000 2000 r-xp 0 08:01 1 /x",
            "1000-2000 r-x 0 08:01 1 /x",
            "1000-2000 r-xp 0 0801 1 /x",
            "1000-zz00 r-xp 0 08:01 1 /x",
            "1000-2000 r-xp 0 08:01 /x",
        ] {
            assert_eq!(MapsLine::parse(line.as_bytes()), None, "{line:?}");
        }
    }

    #[test]
    fn exec_lines_skips_the_rest() {
        let text = b"1000-2000 r-xp 0 08:01 1 /a\n3000-4000 r--p 0 08:01 1 /a\n\
            5000-6000 --xp 0 00:00 0 \nbad x\n7000-8000 rw-p 0 00:00 0 [x]\n";
        let starts: Vec<_> = described_lines(text, false).map(|m| m.start).collect();
        assert_eq!(starts, [0x1000, 0x5000]);
    }
}
