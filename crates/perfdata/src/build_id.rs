//! The build-id table (HEADER_BUILD_ID) and build ids read from ELF files.
//!
//! The table is a run of `struct perf_record_header_build_id` entries, laid
//! out exactly as perf 6.1's `write_buildid` (tools/perf/util/build-id.c)
//! writes them and `perf_header__read_build_ids` (util/header.c) reads them:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | `header.type`: 0 (perf zeroes the struct and never sets it) |
//! | 4..6 | `header.misc`: `PERF_RECORD_MISC_KERNEL` (1) or `_USER` (2), ored with `PERF_RECORD_MISC_BUILD_ID_SIZE` (1 << 15) |
//! | 6..8 | `header.size`: the whole entry, 36 + the padded name |
//! | 8..12 | `pid`: the machine's pid, `HOST_KERNEL_ID` (-1) for the host |
//! | 12..32 | the build id, zero-padded to 20 bytes (`BUILD_ID_SIZE`) |
//! | 32 | its length (read because of the misc flag) |
//! | 33..36 | zero |
//! | 36.. | the file name, NUL-terminated, zero-padded to a multiple of 64 |
//!
//! Entries follow each other with no further padding, so after an entry
//! the next one starts 4 bytes off 8-byte alignment: perf 6.1 does the same
//! and reads the table with `read()`, not through aligned structs.
//!
//! ```
//! use shardrec_perfdata::build_id::{encode, BuildIdEntry};
//! let table = encode(&[BuildIdEntry::kernel(vec![0xab; 20])]);
//! assert_eq!(table.len(), 36 + 64);
//! assert_eq!(&table[36..54], b"[kernel.kallsyms]\0");
//! ```

mod elf;
#[cfg(test)]
mod elf_tests;
mod notes;

use std::fs::File;
use std::io;
use std::path::Path;

pub use elf::{elf_build_id, read_build_id};

/// The pid perf writes for every host binary: `machine->pid` of the host
/// machine, `HOST_KERNEL_ID` in tools/perf/util/machine.h.
pub const HOST_PID: i32 = -1;

/// The name of the kernel image in the table (`machine->mmap_name` of the
/// host), which `perf report` matches against kernel samples.
pub const KERNEL_NAME: &str = "[kernel.kallsyms]";

/// `PERF_RECORD_MISC_KERNEL`
const MISC_KERNEL: u16 = 1;
/// `PERF_RECORD_MISC_USER`
const MISC_USER: u16 = 2;
/// `PERF_RECORD_MISC_BUILD_ID_SIZE`: byte 20 of the id field is its length.
/// Without it, perf 6.1 takes every id to be 20 bytes long.
const MISC_BUILD_ID_SIZE: u16 = 1 << 15;
/// `sizeof(struct perf_record_header_build_id)`: header, pid, 24-byte id.
const ENTRY_HEADER: usize = 36;
/// `BUILD_ID_SIZE`: the id bytes the entry holds.
const ID_BYTES: usize = 20;
/// `NAME_ALIGN`
const NAME_ALIGN: usize = 64;
/// perf 6.1 reads each padded name into a `char[PATH_MAX]` without checking
/// its length, so longer names must never be written.
const PATH_MAX: usize = 4096;

/// One binary in the build-id table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildIdEntry {
    /// The machine: [`HOST_PID`] for everything on the recording host.
    pub pid: i32,
    /// The kernel image or a kernel module (misc `PERF_RECORD_MISC_KERNEL`).
    pub kernel: bool,
    /// The raw id: 20 bytes for SHA-1 ids, fewer for others; perf holds 20
    /// at most, so longer ids are cut to 20 as perf itself does.
    pub build_id: Vec<u8>,
    /// [`KERNEL_NAME`], a module's `.ko` path, or a binary's absolute path.
    pub filename: String,
}

impl BuildIdEntry {
    /// The running kernel's image.
    pub fn kernel(build_id: Vec<u8>) -> Self {
        BuildIdEntry {
            pid: HOST_PID,
            kernel: true,
            build_id,
            filename: KERNEL_NAME.to_string(),
        }
    }

    /// A kernel module, named by the path of its `.ko` file (perf writes the
    /// dso's long name, which `machine__set_modules_path` sets to the path
    /// under /lib/modules; readers recognise it as a module by the `.ko`).
    pub fn module(build_id: Vec<u8>, ko_path: &str) -> Self {
        BuildIdEntry {
            pid: HOST_PID,
            kernel: true,
            build_id,
            filename: ko_path.to_string(),
        }
    }

    /// A user-space binary or library, by the path its mapping names.
    pub fn user(build_id: Vec<u8>, path: &str) -> Self {
        BuildIdEntry {
            pid: HOST_PID,
            kernel: false,
            build_id,
            filename: path.to_string(),
        }
    }

    /// Whether perf can read this entry back: a non-empty id and a name
    /// with no NUL that fits perf's `PATH_MAX` buffer.
    pub fn is_encodable(&self) -> bool {
        !self.build_id.is_empty() && !self.filename.contains('\0') && self.filename.len() < PATH_MAX
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        let name_len = (self.filename.len() + 1).next_multiple_of(NAME_ALIGN);
        // At most 36 + 4096: header.size is a u16.
        let size = (ENTRY_HEADER + name_len) as u16;
        let mode = if self.kernel { MISC_KERNEL } else { MISC_USER };
        out.extend_from_slice(&0u32.to_ne_bytes());
        out.extend_from_slice(&(mode | MISC_BUILD_ID_SIZE).to_ne_bytes());
        out.extend_from_slice(&size.to_ne_bytes());
        out.extend_from_slice(&self.pid.to_ne_bytes());
        let id = &self.build_id[..self.build_id.len().min(ID_BYTES)];
        let mut field = [0u8; 24];
        field[..id.len()].copy_from_slice(id);
        field[ID_BYTES] = id.len() as u8;
        out.extend_from_slice(&field);
        out.extend_from_slice(self.filename.as_bytes());
        out.resize(out.len() + name_len - self.filename.len(), 0);
    }
}

/// The HEADER_BUILD_ID feature content: one `perf_record_header_build_id`
/// per entry, in the given order (perf puts the kernel first). Entries that
/// are not [encodable](BuildIdEntry::is_encodable) are left out.
pub fn encode(entries: &[BuildIdEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in entries.iter().filter(|entry| entry.is_encodable()) {
        entry.encode_into(&mut out);
    }
    out
}

/// The entries of a HEADER_BUILD_ID feature, as [`encode`] writes them
/// (and perf, which sets the id's length in its 21st byte under
/// `MISC_BUILD_ID_SIZE`; older files hold 20-byte ids). A cut entry ends
/// the list.
pub fn decode(table: &[u8]) -> Vec<BuildIdEntry> {
    let mut entries = Vec::new();
    let mut at = 0;
    while at + ENTRY_HEADER <= table.len() {
        // Each entry begins with a record's header: its misc and size.
        let Some(header) = shardrec_format::RecordHeader::parse(&table[at..]) else {
            break;
        };
        let (misc, size) = (header.misc, usize::from(header.size));
        if size < ENTRY_HEADER || at + size > table.len() {
            break;
        }
        let entry = &table[at..at + size];
        let pid = shardrec_format::u32_at(entry, 8).unwrap_or(0) as i32;
        let len = match misc & MISC_BUILD_ID_SIZE {
            0 => ID_BYTES,
            _ => (entry[12 + ID_BYTES] as usize).min(ID_BYTES),
        };
        let name = &entry[ENTRY_HEADER..];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        entries.push(BuildIdEntry {
            pid,
            kernel: misc & 7 == MISC_KERNEL,
            build_id: entry[12..12 + len].to_vec(),
            filename: String::from_utf8_lossy(name).into_owned(),
        });
        at += size;
    }
    entries
}

/// The running kernel's build id, from /sys/kernel/notes (the kernel's own
/// notes, in its byte order, 4-byte aligned). `Ok(None)` if it has none.
pub fn kernel_build_id() -> io::Result<Option<Vec<u8>>> {
    sysfs_build_id(Path::new("/sys/kernel/notes"))
}

/// The name perf gives the vDSO's mapping and its build-id entry.
pub const VDSO_NAME: &str = "[vdso]";

/// The build id of the vDSO the kernel maps into every 64-bit process,
/// read from this process's own (perf reads its own too). `Ok(None)` where
/// there is no vDSO or it has no build id.
pub fn vdso_build_id() -> io::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::FileExt;
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let range = maps
        .lines()
        .find(|line| line.ends_with(VDSO_NAME))
        .and_then(|line| {
            let (start, end) = line.split_whitespace().next()?.split_once('-')?;
            let start = u64::from_str_radix(start, 16).ok()?;
            Some((
                start,
                u64::from_str_radix(end, 16).ok()?.checked_sub(start)?,
            ))
        });
    let Some((start, len)) = range else {
        return Ok(None);
    };
    let mut image = vec![0; len as usize];
    File::open("/proc/self/mem")?.read_exact_at(&mut image, start)?;
    Ok(elf_build_id(&image))
}

/// A loaded module's build id, from
/// /sys/module/`name`/notes/.note.gnu.build-id, as perf reads it for modules.
/// `name` is the module's name as /proc/modules shows it.
pub fn module_build_id(name: &str) -> io::Result<Option<Vec<u8>>> {
    let path = format!("/sys/module/{name}/notes/.note.gnu.build-id");
    sysfs_build_id(Path::new(&path))
}

/// The build ids of the running kernel (named `""`) and of every loaded
/// module that has one, by name.
pub fn kernel_and_module_build_ids() -> Vec<(String, Vec<u8>)> {
    let mut ids: Vec<(String, Vec<u8>)> = Vec::new();
    if let Ok(Some(id)) = kernel_build_id() {
        ids.push((String::new(), id));
    }
    let modules = std::fs::read_dir("/sys/module").into_iter().flatten();
    for name in modules.filter_map(|m| m.ok()?.file_name().into_string().ok()) {
        if let Ok(Some(id)) = module_build_id(&name) {
            ids.push((name, id));
        }
    }
    ids
}

fn sysfs_build_id(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let bytes = std::fs::read(path)?;
    Ok(notes::gnu_build_id(&bytes, notes::Endian::native(), 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u16_at(bytes: &[u8], at: usize) -> u16 {
        shardrec_format::u16_at(bytes, at).unwrap()
    }

    #[test]
    fn decode_reads_what_encode_writes() {
        let entries = vec![
            BuildIdEntry::kernel((1..=20).collect()),
            BuildIdEntry::module(vec![7; 20], "[virtio_ring]"),
            BuildIdEntry::user(
                vec![9; 8],
                "/usr/bin/a-rather-long-name-to-pad-past-one-alignment-step",
            ),
        ];
        assert_eq!(decode(&encode(&entries)), entries);
        let table = encode(&entries);
        assert_eq!(
            decode(&table[..table.len() - 1]).len(),
            2,
            "a cut entry ends the list"
        );
    }

    #[test]
    fn entry_layout() {
        let id: Vec<u8> = (1..=20).collect();
        let table = encode(&[BuildIdEntry::kernel(id.clone())]);
        assert_eq!(table.len(), 100);
        assert_eq!(&table[0..4], &[0; 4]);
        assert_eq!(u16_at(&table, 4), 0x8001);
        assert_eq!(u16_at(&table, 6), 100);
        assert_eq!(i32::from_ne_bytes(table[8..12].try_into().unwrap()), -1);
        assert_eq!(&table[12..32], &id[..]);
        assert_eq!(&table[32..36], &[20, 0, 0, 0]);
        assert_eq!(&table[36..53], KERNEL_NAME.as_bytes());
        assert!(table[53..].iter().all(|&b| b == 0));
    }

    #[test]
    fn names_pad_to_64_with_their_nul() {
        let sizes: Vec<u16> = [1, 63, 64, 127, 128]
            .iter()
            .map(|&len| {
                u16_at(
                    &encode(&[BuildIdEntry::user(vec![1; 20], &"a".repeat(len))]),
                    6,
                )
            })
            .collect();
        assert_eq!(sizes, [36 + 64, 36 + 64, 36 + 128, 36 + 128, 36 + 192]);
    }

    #[test]
    fn user_entries_and_short_ids() {
        let entries = [
            BuildIdEntry::kernel(vec![0xaa; 20]),
            BuildIdEntry::user(vec![0x11; 16], "/usr/bin/ls"),
        ];
        let table = encode(&entries);
        assert_eq!(table.len(), 200);
        let user = &table[100..];
        assert_eq!(u16_at(user, 4), 0x8002);
        assert_eq!(&user[12..28], &[0x11; 16]);
        assert_eq!(&user[28..36], &[0, 0, 0, 0, 16, 0, 0, 0]);
        assert_eq!(&user[36..48], b"/usr/bin/ls\0");
    }

    #[test]
    fn long_ids_are_cut_and_unreadable_entries_left_out() {
        let long = encode(&[BuildIdEntry::module(
            vec![3; 32],
            "/lib/modules/x/kernel/fs/xfs.ko",
        )]);
        assert_eq!(u16_at(&long, 4), 0x8001);
        assert_eq!(
            &long[12..36],
            &[&[3u8; 20][..], &[20, 0, 0, 0]].concat()[..]
        );
        let bad = [
            BuildIdEntry::user(Vec::new(), "/bin/true"),
            BuildIdEntry::user(vec![1; 20], "/bin/\0true"),
            BuildIdEntry::user(vec![1; 20], &"a".repeat(PATH_MAX)),
        ];
        assert!(encode(&bad).is_empty());
        let longest = encode(&[BuildIdEntry::user(vec![1; 20], &"a".repeat(PATH_MAX - 1))]);
        assert_eq!(longest.len(), ENTRY_HEADER + PATH_MAX);
    }
}
