//! The kernel image's map and the modules' maps, as perf synthesizes them in
//! `perf_event__synthesize_kernel_mmap` and `perf_event__synthesize_modules`.

use crate::Emitter;
use shardrec_format::header::MISC_KERNEL;
use shardrec_format::records::{mmap, Mapping};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};

/// The pid perf gives the host kernel's records (`HOST_KERNEL_ID`, -1).
const KERNEL_PID: u32 = u32::MAX;

/// The symbols perf relocates the kernel map by, in the order it tries them
/// (`ref_reloc_sym_names` in perf's `machine.c`).
const REF_RELOC_SYMS: [&[u8]; 2] = [b"_text", b"_stext"];

pub(crate) fn synthesize(emitter: &mut Emitter) {
    kernel_map(emitter);
    module_maps(emitter);
}

/// Without `_text` or `_stext` perf writes no kernel map (it warns that it
/// could not record the reference relocation symbol); we count it skipped.
fn kernel_map(emitter: &mut Emitter) {
    let found = File::open("/proc/kallsyms")
        .ok()
        .and_then(|file| kernel_text(BufReader::with_capacity(64 * 1024, file)));
    let Some(KernelText { symbol, start, end }) = found else {
        emitter.stats.skipped += 1;
        return;
    };
    let mut filename = b"[kernel.kallsyms]".to_vec();
    filename.extend_from_slice(symbol);
    let map = Mapping {
        start,
        len: end - start,
        pgoff: start,
        filename: &filename,
        ..Default::default()
    };
    let record = mmap(KERNEL_PID, 0, &map, MISC_KERNEL);
    if emitter.push(record, KERNEL_PID, 0) {
        emitter.stats.maps += 1;
    }
}

/// The kernel text as perf maps it (`machine__get_running_kernel_start`).
#[derive(Debug, PartialEq, Eq)]
struct KernelText {
    /// The first of [`REF_RELOC_SYMS`] that `kallsyms` holds as a function.
    symbol: &'static [u8],
    /// Its address.
    start: u64,
    /// `_etext`, or ~0 where `kallsyms` lacks it (as perf leaves it).
    end: u64,
}

/// Reads `kallsyms` up to `_etext`, which ends the core kernel's text
/// symbols (about nine tenths of the file).
fn kernel_text(mut kallsyms: impl BufRead) -> Option<KernelText> {
    let mut line = Vec::with_capacity(256);
    let mut start: [Option<u64>; 2] = [None; 2];
    let mut end = u64::MAX;
    loop {
        line.clear();
        match kallsyms.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let Some((address, name)) = function_symbol(&line) else {
            continue;
        };
        if name == b"_etext" {
            end = address;
            break;
        }
        if let Some(i) = REF_RELOC_SYMS.iter().position(|&s| s == name) {
            start[i].get_or_insert(address);
        }
    }
    let (i, start) = start
        .iter()
        .enumerate()
        .find_map(|(i, a)| Some((i, (*a)?)))?;
    Some(KernelText {
        symbol: REF_RELOC_SYMS[i],
        start,
        end: end.max(start),
    })
}

/// `address type name[\t[module]]` for text symbols (types `T t W w`, as
/// perf's `kallsyms__is_function`).
fn function_symbol(line: &[u8]) -> Option<(u64, &[u8])> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let mut fields = line.splitn(3, |&b| b == b' ');
    let address = parse_hex(fields.next()?)?;
    let &[kind] = fields.next()? else {
        return None;
    };
    if !matches!(kind, b'T' | b't' | b'W' | b'w') {
        return None;
    }
    Some((address, fields.next()?))
}

fn parse_hex(text: &[u8]) -> Option<u64> {
    let text = text.strip_prefix(b"0x").unwrap_or(text);
    u64::from_str_radix(std::str::from_utf8(text).ok()?, 16).ok()
}

/// A loaded module, from a line of `/proc/modules`.
#[derive(Debug, PartialEq, Eq)]
struct Module<'a> {
    name: &'a [u8],
    size: u64,
    address: u64,
}

/// `name size refcount deps state address [taints]`.
fn parse_module(line: &[u8]) -> Option<Module<'_>> {
    let mut fields = line.split(|&b| b == b' ');
    let name = fields.next().filter(|name| !name.is_empty())?;
    let size = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
    let address = parse_hex(fields.nth(3)?)?;
    Some(Module {
        name,
        size,
        address,
    })
}

/// `/proc/modules` is absent on kernels without module support, and its
/// addresses read 0 when `kptr_restrict` hides them: both leave no maps.
fn module_maps(emitter: &mut Emitter) {
    let Ok(text) = std::fs::read("/proc/modules") else {
        return;
    };
    let modules: Vec<Module> = text
        .split(|&b| b == b'\n')
        .filter_map(parse_module)
        .filter(|module| module.address != 0)
        .collect();
    if modules.is_empty() {
        return;
    }
    let paths = module_paths();
    for module in modules {
        let filename = match paths.get(&normalize(module.name)) {
            Some(path) => path.clone(),
            None => [b"[", module.name, b"]"].concat(),
        };
        let map = Mapping {
            start: module.address,
            len: module.size,
            filename: &filename,
            ..Default::default()
        };
        if emitter.push(mmap(KERNEL_PID, 0, &map, MISC_KERNEL), KERNEL_PID, 0) {
            emitter.stats.maps += 1;
        }
    }
}

/// Module names with `-` as `_`, the way the kernel names loaded modules.
fn normalize(name: &[u8]) -> Vec<u8> {
    name.iter()
        .map(|&b| if b == b'-' { b'_' } else { b })
        .collect()
}

/// Full `.ko` paths of the running kernel's modules by normalized name.
fn module_paths() -> HashMap<Vec<u8>, Vec<u8>> {
    let release = std::fs::read("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut dir = b"/lib/modules/".to_vec();
    dir.extend_from_slice(release.trim_ascii());
    dir.push(b'/');
    let mut dep_path = dir.clone();
    dep_path.extend_from_slice(b"modules.dep");
    let dep_path = String::from_utf8_lossy(&dep_path).into_owned();
    let modules_dep = std::fs::read(dep_path).unwrap_or_default();
    parse_modules_dep(&modules_dep, &dir)
}

/// `relative/path/name.ko[.xz|.zst|.gz]: deps...` lines, paths made absolute
/// under `dir`.
fn parse_modules_dep(text: &[u8], dir: &[u8]) -> HashMap<Vec<u8>, Vec<u8>> {
    let mut paths = HashMap::new();
    for line in text.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let path = &line[..colon];
        let file = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        let Some(dot) = file.windows(3).position(|w| w == b".ko") else {
            continue;
        };
        let full = if path.starts_with(b"/") {
            path.to_vec()
        } else {
            [dir, path].concat()
        };
        paths.entry(normalize(&file[..dot])).or_insert(full);
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_text_before_stext_fallback_and_the_end_of_text() {
        let kallsyms = b"0000000000000000 A fixed_percpu_data\n\
            ffffffff81000000 T _stext\n\
            ffffffff81000000 T _text\n\
            ffffffff82209988 T _etext\n\
            ffffffffc0001000 t helper\t[nf_tables]\n";
        let text = |symbol: &'static [u8], start, end| Some(KernelText { symbol, start, end });
        assert_eq!(
            kernel_text(&kallsyms[..]),
            text(b"_text", 0xffffffff81000000, 0xffffffff82209988)
        );
        let only_stext = b"ffffffff81000000 D _text_data\nffffffff81001000 T _stext\n";
        assert_eq!(
            kernel_text(&only_stext[..]),
            text(b"_stext", 0xffffffff81001000, u64::MAX)
        );
        assert_eq!(kernel_text(&b"ffffffff81000000 D _text\n"[..]), None);
    }

    #[test]
    fn parses_proc_modules_lines() {
        let line = b"nf_tables 364544 0 - Live 0xffffffffc0a00000 (E)";
        let module = parse_module(line).unwrap();
        assert_eq!(module.name, b"nf_tables");
        assert_eq!((module.size, module.address), (364544, 0xffffffffc0a00000));
        let hidden = parse_module(b"snd 106496 1 snd_hda, Live 0x0000000000000000").unwrap();
        assert_eq!(hidden.address, 0);
        assert_eq!(parse_module(b""), None);
    }

    #[test]
    fn maps_module_names_to_paths() {
        let dep = b"kernel/fs/fat/vfat.ko.zst: kernel/fs/fat/fat.ko.zst\n\
            kernel/drivers/hid/hid-generic.ko:\n\
            /abs/extra/my_mod.ko.xz:\n";
        let paths = parse_modules_dep(dep, b"/lib/modules/6.1.0/");
        assert_eq!(
            paths[&b"vfat".to_vec()],
            b"/lib/modules/6.1.0/kernel/fs/fat/vfat.ko.zst"
        );
        assert_eq!(
            paths[&normalize(b"hid_generic")],
            b"/lib/modules/6.1.0/kernel/drivers/hid/hid-generic.ko"
        );
        assert_eq!(paths[&b"my_mod".to_vec()], b"/abs/extra/my_mod.ko.xz");
        assert_eq!(paths.len(), 3);
    }
}
