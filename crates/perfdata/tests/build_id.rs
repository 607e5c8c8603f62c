//! Build ids checked against binutils and Debian's perf 6.1: `readelf -n`,
//! `perf buildid-list -k`, and `perf buildid-list -i` on a file we wrote.
//!
//! The perf tests need root (perf reads a root-written perf.data as root
//! without `--force`, and this is how the build machines run them); without
//! root they are skipped, unless `CI` is set, where skipping is a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use shardrec_perfdata::build_id::{self, BuildIdEntry};
use shardrec_perfdata::feature::Feature;
use shardrec_perfdata::{AttrEntry, PerfDataWriter};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn run(program: &str, args: &[&str]) -> Option<Output> {
    Command::new(program).args(args).output().ok()
}

/// What `readelf -n` prints after "Build ID:", if anything.
fn readelf_build_id(path: &Path) -> Option<String> {
    let out = run("readelf", &["-n", path.to_str().unwrap()]).expect("readelf (binutils)");
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("Build ID:"));
    line.map(|id| id.trim().to_string())
}

#[test]
fn read_build_id_matches_readelf() {
    if !shardrec_testkit::require(
        run("readelf", &["--version"]).is_some(),
        "readelf (binutils)",
    ) {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    for path in [Path::new("/bin/ls"), exe.as_path()] {
        let ours = build_id::read_build_id(path).unwrap().map(|id| hex(&id));
        assert_eq!(ours, readelf_build_id(path), "{}", path.display());
    }
    assert_eq!(
        build_id::read_build_id(Path::new("/proc/self/status")).unwrap(),
        None
    );
    assert!(build_id::read_build_id(Path::new("/no/such/file")).is_err());
}

/// /sys/kernel/notes read the plain way, for hosts without perf: 4-byte
/// aligned native-endian notes, the GNU one of type 3.
fn kernel_build_id_by_hand() -> Option<String> {
    let notes = std::fs::read("/sys/kernel/notes").unwrap();
    let word = |at: usize| u32::from_ne_bytes(notes[at..at + 4].try_into().unwrap()) as usize;
    let mut pos = 0;
    while pos + 12 <= notes.len() {
        let (namesz, descsz, kind) = (word(pos), word(pos + 4), word(pos + 8));
        let desc = pos + 12 + namesz.next_multiple_of(4);
        if kind == 3 && &notes[pos + 12..pos + 12 + namesz] == b"GNU\0" {
            return Some(hex(&notes[desc..desc + descsz]));
        }
        pos = desc + descsz.next_multiple_of(4);
    }
    None
}

#[test]
fn kernel_build_id_matches_perf() {
    if !shardrec_testkit::require_root() {
        return;
    }
    let ours = build_id::kernel_build_id().unwrap().map(|id| hex(&id));
    assert!(ours.is_some(), "this kernel has a build id");
    let expected = match run("perf", &["buildid-list", "-k"]) {
        Some(out) if out.status.success() => {
            Some(String::from_utf8(out.stdout).unwrap().trim().to_string())
        }
        _ => kernel_build_id_by_hand(),
    };
    assert_eq!(ours, expected);
}

/// One software cpu-clock attr, 128 bytes as perf 6.1 reads them:
/// sample_type IP|TID|TIME|IDENTIFIER, flags with sample_id_all (bit 18).
fn cpu_clock_attr() -> Vec<u8> {
    let mut attr = vec![0u8; 128];
    attr[0..4].copy_from_slice(&1u32.to_ne_bytes()); // PERF_TYPE_SOFTWARE
    attr[4..8].copy_from_slice(&128u32.to_ne_bytes());
    attr[16..24].copy_from_slice(&4000u64.to_ne_bytes()); // sample_period
    attr[24..32].copy_from_slice(&(1u64 | 2 | 4 | 65536).to_ne_bytes());
    attr[40..48].copy_from_slice(&(1u64 << 18).to_ne_bytes());
    attr
}

/// A COMM record for pid 1 with its sample_id_all trailer (pid, tid, time,
/// identifier), so the data section is not empty.
fn comm_record() -> Vec<u8> {
    let mut record = Vec::new();
    record.extend_from_slice(&3u32.to_ne_bytes()); // PERF_RECORD_COMM
    record.extend_from_slice(&0u16.to_ne_bytes());
    record.extend_from_slice(&(8u16 + 8 + 8 + 24).to_ne_bytes());
    record.extend_from_slice(&1u32.to_ne_bytes());
    record.extend_from_slice(&1u32.to_ne_bytes());
    record.extend_from_slice(b"init\0\0\0\0");
    for field in [1u64 | 1 << 32, 1_000_000, 1] {
        record.extend_from_slice(&field.to_ne_bytes());
    }
    record
}

fn write_perf_data(path: &Path, entries: &[BuildIdEntry]) {
    let file = std::fs::File::create(path).unwrap();
    let attrs = [AttrEntry {
        attr: cpu_clock_attr(),
        ids: vec![1],
    }];
    let mut writer = PerfDataWriter::create(file, &attrs).unwrap();
    writer.write_record(&comm_record()).unwrap();
    writer
        .finish(&[(Feature::BuildId, build_id::encode(entries))])
        .unwrap();
}

#[test]
fn perf_buildid_list_reads_our_table() {
    if !shardrec_testkit::require_root()
        || !shardrec_testkit::require(run("perf", &["version"]).is_some(), "perf")
    {
        return;
    }
    let kernel = build_id::kernel_build_id()
        .unwrap()
        .expect("kernel build id");
    // perf names a binary by the path its mapping shows: /bin is a link.
    let ls = std::fs::canonicalize("/bin/ls").unwrap();
    let ls_id = build_id::read_build_id(&ls)
        .unwrap()
        .expect("/bin/ls has a build id");
    let ls_name = ls.to_str().unwrap();
    let entries = [
        BuildIdEntry::kernel(kernel.clone()),
        BuildIdEntry::user(ls_id.clone(), ls_name),
    ];
    let path: PathBuf =
        std::env::temp_dir().join(format!("shardrec-build-id-{}.data", std::process::id()));
    write_perf_data(&path, &entries);
    let out = run("perf", &["buildid-list", "-i", path.to_str().unwrap()]).unwrap();
    std::fs::remove_file(&path).unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    println!("perf buildid-list:\n{stdout}");
    assert!(out.status.success(), "perf failed: {stderr}");
    assert_eq!(stderr, "", "perf complained");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines.contains(&format!("{} [kernel.kallsyms]", hex(&kernel)).as_str()),
        "{stdout}"
    );
    assert!(
        lines.contains(&format!("{} {ls_name}", hex(&ls_id)).as_str()),
        "{stdout}"
    );
}
