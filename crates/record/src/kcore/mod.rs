//! `--kcore`, as perf records it: the output becomes a directory,
//! `OUTPUT/data` the perf.data file and `OUTPUT/kcore_dir/` a copy of the
//! kernel's text at the start (`kcore`, an ELF core file of the kernel's
//! and the modules' text read from `/proc/kcore`) with the `kallsyms` and
//! `modules` that describe it. perf report, script and annotate find it
//! there and read kernel code from it; with the TEXT_POKE records of the
//! recording, the text at any later moment follows.

mod elf;

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::Path;

use shardrec_shard::output::Output;

use crate::RecordError;

/// Bytes copied from `/proc/kcore` per read.
const CHUNK: usize = 1 << 20;

/// Makes `output` the directory perf's `--kcore` writes, with its
/// `kcore_dir`; an earlier output of that name is kept as `NAME.old`, as
/// perf keeps it. Returns what was copied, in bytes.
pub fn copy_to(output: &Path, target: &Output) -> Result<u64, RecordError> {
    let fail = |what: String| RecordError::system(format!("--kcore: {what}"));
    // perf's rule for what is at the path (shardrec_shard::output): a
    // device, FIFO or standard output cannot become a directory, and is
    // never moved aside.
    if !matches!(target, Output::File { .. }) {
        return Err(RecordError::Usage(format!(
            "--kcore makes the output a directory, and {} is {}: give a new path",
            output.display(),
            target.kind()
        )));
    }
    let kcore = File::open("/proc/kcore").map_err(fail(
        "/proc/kcore is not readable (the kernel needs CONFIG_PROC_KCORE; reading it needs CAP_SYS_RAWIO)".into(),
    ))?;
    target.move_aside()?;
    let dir = output.join("kcore_dir");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&dir)
        .map_err(fail(format!("creating {}", dir.display())))?;
    // A module loaded or unloaded during the copy changes kallsyms: the
    // copy is made again, as it must describe the text it holds.
    for _ in 0..3 {
        let kallsyms = read_proc("kallsyms")?;
        let modules = read_proc("modules")?;
        let bytes = write_copy(&dir, &kcore, &kallsyms, &modules).map_err(fail(format!(
            "copying the kernel's text into {}",
            dir.display()
        )))?;
        if read_proc("kallsyms")? == kallsyms {
            return Ok(bytes);
        }
        for name in ["kallsyms", "modules", "kcore"] {
            let _ = std::fs::remove_file(dir.join(name));
        }
    }
    Err(RecordError::KcoreUnsteady)
}

fn read_proc(name: &str) -> Result<String, RecordError> {
    std::fs::read_to_string(Path::new("/proc").join(name)).map_err(RecordError::system(format!(
        "--kcore: reading /proc/{name}"
    )))
}

/// Writes `kallsyms`, `modules` and `kcore` into `dir`; returns the bytes
/// of text copied.
fn write_copy(dir: &Path, kcore: &File, kallsyms: &str, modules: &str) -> io::Result<u64> {
    let page = shardrec_sys::ring::page_size() as u64;
    let ranges = text_ranges(kallsyms, modules, page)?;
    let mut head = vec![0u8; elf::EHDR_SIZE];
    kcore.read_exact_at(&mut head, 0)?;
    let header = elf::Header::parse(&head)?;
    let (phoff, len) = header.program_headers();
    let mut phdrs = vec![0u8; len];
    kcore.read_exact_at(&mut phdrs, phoff)?;
    let executable: Vec<elf::Segment> = header
        .segments(&phdrs)
        .into_iter()
        .filter(|s| s.p_type == elf::PT_LOAD && s.flags & elf::PF_X != 0)
        .collect();
    // Each range from the one executable segment holding its start.
    let mut pieces = Vec::new();
    for (start, end) in ranges {
        let segment = executable
            .iter()
            .find(|s| s.vaddr <= start && start < s.vaddr + s.filesz)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("no executable segment of /proc/kcore holds {start:#x}"),
                )
            })?;
        let end = end.min(segment.vaddr + segment.filesz);
        pieces.push((start, end - start, start - segment.vaddr + segment.offset));
    }
    write_file(&dir.join("kallsyms"), kallsyms.as_bytes())?;
    write_file(&dir.join("modules"), modules.as_bytes())?;
    let segments: Vec<(u64, u64)> = pieces.iter().map(|&(a, l, _)| (a, l)).collect();
    let headers_end = (elf::EHDR_SIZE + segments.len() * elf::PHDR_SIZE) as u64;
    let data_start = headers_end.div_ceil(page) * page;
    let mut out = create_read_only(&dir.join("kcore"))?;
    out.write_all(&header.core_file(&segments, data_start, page))?;
    let mut at = data_start;
    let mut buf = vec![0u8; CHUNK];
    for &(_, len, from) in &pieces {
        let mut done = 0;
        while done < len {
            let n = CHUNK.min((len - done) as usize);
            kcore.read_exact_at(&mut buf[..n], from + done)?;
            out.write_all_at(&buf[..n], at + done)?;
            done += n as u64;
        }
        at += len;
    }
    out.sync_data()?;
    Ok(at - data_start)
}

/// The kernel's text, `_stext` to `_etext` out to whole pages, and the
/// modules' (from the lowest module address to a page past the highest
/// module function), as perf's `kcore_copy__calc_maps` chooses them.
fn text_ranges(kallsyms: &str, modules: &str, page: u64) -> io::Result<Vec<(u64, u64)>> {
    let missing = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("/proc/kallsyms has no {what} (kernel.kptr_restrict hides addresses?)"),
        )
    };
    let (mut stext, mut etext) = (0, 0);
    let (mut module_low, mut module_high) = (u64::MAX, 0);
    for line in kallsyms.lines() {
        let mut fields = line.split_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        match (name, fields.next()) {
            ("_stext", None) => stext = addr,
            ("_etext", None) => etext = addr,
            (_, Some(_)) if addr != 0 && matches!(kind, "t" | "T" | "w" | "W") => {
                module_low = module_low.min(addr);
                module_high = module_high.max(addr);
            }
            _ => {}
        }
    }
    if stext == 0 || etext == 0 {
        return Err(missing("_stext and _etext"));
    }
    let mut ranges = vec![(stext / page * page, etext.div_ceil(page) * page)];
    if module_high > 0 {
        // /proc/modules: name size refs deps state address.
        let loaded = modules
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .filter_map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
            .filter(|&a| a != 0)
            .min()
            .unwrap_or(u64::MAX);
        let low = loaded.min(module_low);
        ranges.push((low / page * page, module_high.div_ceil(page) * page + page));
    }
    Ok(ranges)
}

fn create_read_only(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o400)
        .open(path)
}

fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    create_read_only(path)?.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_the_text_and_the_modules() {
        let kallsyms = "\
ffffffff81000000 T _text
ffffffff81001000 T _stext
ffffffff81001200 T do_one
ffffffff82400123 T _etext
ffffffffc0001010 t virtio_probe\t[virtio]
ffffffffc0003000 d some_data\t[virtio]
ffffffffc0002040 T virtio_remove\t[virtio]
";
        let modules = "virtio 16384 1 virtio_pci, Live 0xffffffffc0000000\n";
        let ranges = text_ranges(kallsyms, modules, 4096).unwrap();
        assert_eq!(
            ranges,
            vec![
                (0xffff_ffff_8100_1000, 0xffff_ffff_8240_1000),
                (0xffff_ffff_c000_0000, 0xffff_ffff_c000_4000)
            ]
        );
        // kernel.kptr_restrict shows every address as zeros.
        let hidden: String = kallsyms
            .lines()
            .map(|l| format!("{:016x}{}\n", 0, &l[16..]))
            .collect();
        assert!(text_ranges(&hidden, "", 4096).is_err());
    }
}
