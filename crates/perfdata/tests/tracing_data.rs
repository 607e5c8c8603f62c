//! HEADER_TRACING_DATA against the real reader: a perf.data holding one
//! `sched:sched_switch` event, its tracing data taken from this machine's
//! tracefs and a few hand-built samples, printed by Debian's `perf script`.
//!
//! Needs root (tracefs is root-only, and may need mounting). Skips when not
//! root, unless `CI` is set, where that is a failure.

use std::fs;
use std::io::{Cursor, Read};
use std::path::{Path, PathBuf};
use std::process::Command;

use shardrec_format::header::{RecordHeader, RecordType};
use shardrec_perfdata::fact_features::{self, EventDesc};
use shardrec_perfdata::feature::Feature;
use shardrec_perfdata::tracing_data::{self, TracingFiles};
use shardrec_perfdata::{AttrEntry, PerfDataWriter};

const TRACEFS: &str = "/sys/kernel/tracing";
const PERF: &str = "/usr/bin/perf";

const PERF_TYPE_TRACEPOINT: u32 = 2;
const SAMPLE_IP: u64 = 1 << 0;
const SAMPLE_TID: u64 = 1 << 1;
const SAMPLE_TIME: u64 = 1 << 2;
const SAMPLE_CPU: u64 = 1 << 7;
const SAMPLE_PERIOD: u64 = 1 << 8;
const SAMPLE_RAW: u64 = 1 << 10;
const SAMPLE_IDENTIFIER: u64 = 1 << 16;
const SAMPLE_ID_ALL: u64 = 1 << 18;

const MISC_KERNEL: u16 = 1;

const ID: u64 = 42;
const CPU: u32 = 1;
const PREV_PID: u32 = 4242;
const PREV_COMM: &str = "shardrec-prev";
const NEXT_PID: u32 = 4343;
const NEXT_COMM: &str = "shardrec-next";

/// The tracefs root, mounting it when `events/` is missing.
fn tracefs() -> PathBuf {
    let root = PathBuf::from(TRACEFS);
    if !root.join("events").is_dir() {
        let status = Command::new("mount")
            .args(["-t", "tracefs", "nodev", TRACEFS])
            .status()
            .expect("running mount");
        assert!(status.success(), "mounting tracefs on {TRACEFS} failed");
    }
    root
}

/// What `read_files` in crates/record reads, for one tracepoint.
fn read_tracing_files(root: &Path, system: &str, name: &str) -> TracingFiles {
    let read =
        |path: PathBuf| read_whole(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let optional = |path: PathBuf| read_whole(&path).unwrap_or_default();
    TracingFiles {
        page_size: page_size(),
        header_page: read(root.join("events/header_page")),
        header_event: read(root.join("events/header_event")),
        ftrace_formats: Vec::new(),
        systems: vec![(
            system.to_string(),
            vec![read(
                root.join("events").join(system).join(name).join("format"),
            )],
        )],
        kallsyms: Vec::new(),
        printk_formats: optional(root.join("printk_formats")),
        saved_cmdlines: optional(root.join("saved_cmdlines")),
    }
}

/// A tracefs file in 64 KiB reads: `events/header_page` and
/// `events/header_event` answer only the first read of an open file, and
/// `fs::read` starts with a 32-byte one (tracefs reports size 0).
fn read_whole(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = fs::File::open(path)?;
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut chunk)? {
            0 => return Ok(out),
            n => out.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The page size, from the kernel's own report (no libc in this crate).
fn page_size() -> u32 {
    let out = Command::new("getconf")
        .arg("PAGESIZE")
        .output()
        .expect("running getconf");
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A field of a tracepoint's format: where it is and how wide.
struct Field {
    name: String,
    offset: usize,
    size: usize,
}

/// The `field:TYPE NAME; offset:N; size:M;` lines of a format file.
fn parse_fields(format: &str) -> Vec<Field> {
    let mut fields = Vec::new();
    for line in format.lines() {
        let Some(decl) = line.trim().strip_prefix("field:") else {
            continue;
        };
        let mut parts = decl.split(';').map(str::trim);
        let declaration = parts.next().unwrap();
        let name = declaration.rsplit(' ').next().unwrap();
        let name = name.split('[').next().unwrap().to_string();
        let mut value = |key: &str| -> usize {
            parts
                .next()
                .and_then(|p| p.strip_prefix(key))
                .unwrap_or_else(|| panic!("{key} missing in {line:?}"))
                .parse()
                .unwrap()
        };
        let offset = value("offset:");
        let size = value("size:");
        fields.push(Field { name, offset, size });
    }
    fields
}

/// A `sched_switch` raw record laid out by its format.
fn sched_switch_raw(fields: &[Field], id: u16) -> Vec<u8> {
    let len = fields.iter().map(|f| f.offset + f.size).max().unwrap();
    let mut raw = vec![0u8; len];
    let mut put = |name: &str, value: &[u8]| {
        let field = fields
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("sched_switch has no field {name}"));
        assert!(value.len() <= field.size, "{name} is {} bytes", field.size);
        raw[field.offset..field.offset + value.len()].copy_from_slice(value);
    };
    let int = |value: i64, size: usize| -> Vec<u8> { value.to_ne_bytes()[..size].to_vec() };
    let size_of = |name: &str| fields.iter().find(|f| f.name == name).unwrap().size;
    put("common_type", &id.to_ne_bytes());
    put("common_pid", &int(PREV_PID.into(), size_of("common_pid")));
    put("prev_comm", PREV_COMM.as_bytes());
    put("prev_pid", &int(PREV_PID.into(), size_of("prev_pid")));
    put("prev_prio", &int(120, size_of("prev_prio")));
    put("prev_state", &int(1, size_of("prev_state"))); // TASK_INTERRUPTIBLE: "S"
    put("next_comm", NEXT_COMM.as_bytes());
    put("next_pid", &int(NEXT_PID.into(), size_of("next_pid")));
    put("next_prio", &int(120, size_of("next_prio")));
    raw
}

fn header(out: &mut Vec<u8>, type_: RecordType, misc: u16) {
    // The size is set by `finish_record`.
    RecordHeader {
        type_,
        misc,
        size: 0,
    }
    .write_to(out);
}

fn finish_record(mut record: Vec<u8>) -> Vec<u8> {
    assert_eq!(record.len() % 8, 0, "records are 8-byte aligned");
    let size = u16::try_from(record.len()).unwrap();
    record[6..8].copy_from_slice(&size.to_ne_bytes());
    record
}

/// The sample_id_all trailer for TID | TIME | CPU | IDENTIFIER.
fn sample_id(out: &mut Vec<u8>, pid: u32, time: u64) {
    out.extend_from_slice(&pid.to_ne_bytes());
    out.extend_from_slice(&pid.to_ne_bytes());
    out.extend_from_slice(&time.to_ne_bytes());
    out.extend_from_slice(&CPU.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&ID.to_ne_bytes());
}

fn comm(pid: u32, name: &str, time: u64) -> Vec<u8> {
    let mut out = Vec::new();
    header(&mut out, RecordType::COMM, 0);
    out.extend_from_slice(&pid.to_ne_bytes());
    out.extend_from_slice(&pid.to_ne_bytes());
    out.extend_from_slice(name.as_bytes());
    out.resize((out.len() + 1).next_multiple_of(8), 0);
    sample_id(&mut out, pid, time);
    finish_record(out)
}

/// A sample of IDENTIFIER | IP | TID | TIME | CPU | PERIOD | RAW, the raw
/// part padded as the kernel does (u32 size + data a multiple of 8).
fn sample(raw: &[u8], time: u64) -> Vec<u8> {
    let mut out = Vec::new();
    header(&mut out, RecordType::SAMPLE, MISC_KERNEL);
    out.extend_from_slice(&ID.to_ne_bytes());
    out.extend_from_slice(&0xffff_ffff_8100_0000u64.to_ne_bytes());
    out.extend_from_slice(&PREV_PID.to_ne_bytes());
    out.extend_from_slice(&PREV_PID.to_ne_bytes());
    out.extend_from_slice(&time.to_ne_bytes());
    out.extend_from_slice(&CPU.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&1u64.to_ne_bytes());
    let raw_size = (raw.len() + 4).next_multiple_of(8) - 4;
    out.extend_from_slice(&(raw_size as u32).to_ne_bytes());
    out.extend_from_slice(raw);
    out.resize(out.len() + raw_size - raw.len(), 0);
    finish_record(out)
}

fn attr(config: u64) -> Vec<u8> {
    let mut attr = vec![0u8; 128];
    attr[0..4].copy_from_slice(&PERF_TYPE_TRACEPOINT.to_ne_bytes());
    attr[4..8].copy_from_slice(&128u32.to_ne_bytes());
    attr[8..16].copy_from_slice(&config.to_ne_bytes());
    attr[16..24].copy_from_slice(&1u64.to_ne_bytes()); // sample_period
    let sample_type = SAMPLE_IP
        | SAMPLE_TID
        | SAMPLE_TIME
        | SAMPLE_CPU
        | SAMPLE_PERIOD
        | SAMPLE_RAW
        | SAMPLE_IDENTIFIER;
    attr[24..32].copy_from_slice(&sample_type.to_ne_bytes());
    attr[40..48].copy_from_slice(&SAMPLE_ID_ALL.to_ne_bytes());
    attr
}

#[test]
fn perf_script_prints_tracepoint_fields() {
    if !shardrec_testkit::require_root() {
        return;
    }
    let root = tracefs();
    let event_dir = root.join("events/sched/sched_switch");
    let id: u64 = fs::read_to_string(event_dir.join("id"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let format = fs::read_to_string(event_dir.join("format")).unwrap();
    let raw = sched_switch_raw(&parse_fields(&format), id as u16);

    let attr = attr(id);
    let entry = AttrEntry {
        attr: attr.clone(),
        ids: vec![ID],
    };
    let mut writer = PerfDataWriter::create(Cursor::new(Vec::new()), &[entry]).unwrap();
    let t0 = 1_000_000_000u64;
    writer.write_record(&comm(PREV_PID, PREV_COMM, t0)).unwrap();
    writer
        .write_record(&comm(NEXT_PID, NEXT_COMM, t0 + 1))
        .unwrap();
    for i in 0..3 {
        writer
            .write_record(&sample(&raw, t0 + 1000 * (i + 1)))
            .unwrap();
    }
    writer.write_record(&finish_record(round())).unwrap();

    let files = read_tracing_files(&root, "sched", "sched_switch");
    let features = [
        tracing_data::feature(&files),
        fact_features::event_desc(&[EventDesc {
            attr: &attr,
            name: "sched:sched_switch",
            ids: &[ID],
        }]),
        fact_features::sample_time(t0 + 1000, t0 + 3000),
    ];
    assert_eq!(features[0].0, Feature::TracingData);
    let bytes = writer.finish(&features).unwrap().into_inner();

    let path =
        std::env::temp_dir().join(format!("shardrec-tracing-data-{}.data", std::process::id()));
    fs::write(&path, &bytes).unwrap();
    let out = Command::new(PERF)
        .arg("script")
        .arg("-i")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("running {PERF}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = format!(
        "file {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        path.display()
    );
    assert!(
        out.status.success(),
        "perf script failed: {}\n{report}",
        out.status
    );
    // perf script on perf record's own file says nothing on stderr; any
    // line there (libtraceevent's "Error: expected type ..." on a cut
    // header_page, say) is a complaint.
    assert!(stderr.trim().is_empty(), "perf script complained\n{report}");
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("sched:sched_switch"))
        .collect();
    assert_eq!(lines.len(), 3, "{report}");
    for line in &lines {
        assert!(line.contains(PREV_COMM), "{line}");
        assert!(line.contains(&format!("prev_comm={PREV_COMM}")), "{line}");
        assert!(line.contains(&format!("prev_pid={PREV_PID}")), "{line}");
        assert!(line.contains(&format!("next_comm={NEXT_COMM}")), "{line}");
        assert!(line.contains(&format!("next_pid={NEXT_PID}")), "{line}");
    }
    eprintln!("{stdout}");
    fs::remove_file(&path).unwrap();
}

fn round() -> Vec<u8> {
    let mut out = Vec::new();
    header(&mut out, RecordType::FINISHED_ROUND, 0);
    out
}

/// The tracing data perf record writes for `sched:sched_switch` on this
/// machine, and ours from the same files, are the same bytes.
#[test]
fn same_bytes_as_perf_record() {
    if !shardrec_testkit::require_root() {
        return;
    }
    let root = tracefs();
    let path =
        std::env::temp_dir().join(format!("shardrec-perf-record-{}.data", std::process::id()));
    let out = Command::new(PERF)
        .args(["record", "-q", "-e", "sched:sched_switch", "-o"])
        .arg(&path)
        .args(["--", "true"])
        .output()
        .unwrap_or_else(|e| panic!("running {PERF}: {e}"));
    assert!(
        out.status.success(),
        "perf record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = tracing_data_section(&fs::read(&path).unwrap());
    let ours = tracing_data::encode(&read_tracing_files(&root, "sched", "sched_switch"));
    if ours != theirs {
        let at = ours.iter().zip(&theirs).position(|(a, b)| a != b);
        panic!(
            "blobs differ at byte {at:?} (ours {} bytes, perf's {}); perf's file is {}",
            ours.len(),
            theirs.len(),
            path.display()
        );
    }
    fs::remove_file(&path).unwrap();
}

/// The HEADER_TRACING_DATA section of a perf.data file: feature sections
/// follow the data section in bit order, and TRACING_DATA is bit 1, the
/// lowest perf uses.
fn tracing_data_section(file: &[u8]) -> Vec<u8> {
    let u64_at = |at: usize| u64::from_ne_bytes(file[at..at + 8].try_into().unwrap()) as usize;
    assert_eq!(&file[..8], b"PERFILE2");
    let features = u64_at(72);
    assert_eq!(
        features & 0b11,
        0b10,
        "TRACING_DATA must be the first feature"
    );
    let index = u64_at(40) + u64_at(48);
    let (offset, size) = (u64_at(index), u64_at(index + 8));
    file[offset..offset + size].to_vec()
}
