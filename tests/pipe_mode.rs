//! perf's pipe format on standard output: `shardrec record -o -`, the same
//! without `-o` when standard output is a FIFO, and `shardrec merge DIR
//! -o -`, read live by perf 6.1 (`perf report -i -`, `perf script -i -`,
//! `perf inject -b -i -`); a reader that leaves early, and a recorder
//! killed with SIGKILL, as perf would have them end.

mod common;

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use shardrec_format::header::{RecordHeader, RecordType};

/// What the recorder says when it starts, before the place of its shards.
const SHARDS_GO_TO: &str = "the shards go to ";

/// perf's pipe header: `PERFILE2`, then its size, 16.
fn assert_pipe_header(stream: &[u8], what: &str) {
    assert!(stream.len() > 16, "{what}: {} bytes", stream.len());
    assert_eq!(&stream[..8], b"PERFILE2", "{what}");
    assert_eq!(
        &stream[8..16],
        &16u64.to_ne_bytes(),
        "{what}: not the pipe header"
    );
}

/// `shardrec ARGS` with its private directories in the test's own
/// (`TMPDIR`), in a process group of its own.
fn shardrec_in(scratch: &Scratch, args: &[&str]) -> Command {
    let mut command = shardrec();
    command
        .env("TMPDIR", &scratch.0)
        .args(args)
        .process_group(0);
    command
}

/// `perf ARGS -i -`, reading standard input.
fn perf_reading_stdin(args: &[&str]) -> Command {
    let mut command = Command::new("perf");
    command.args(args).args(["-i", "-"]);
    command
}

/// `recorder`'s standard output piped into `reader`: the recorder's
/// status and standard error, and the reader's output.
fn pipeline(
    scratch: &Scratch,
    recorder: Command,
    mut reader: Command,
) -> (ExitStatus, String, Output) {
    let (recorder, stream) = Streaming::start(scratch, recorder);
    // `run` drops the reader's Command, and with it this process's copy of
    // the pipe's reading end, once the reader has ended: the recorder's
    // next write then finds no reader.
    reader.stdin(Stdio::from(stream));
    let read = run(reader);
    let (status, stderr) = recorder.end();
    (status, stderr, read)
}

/// A recorder writing into a pipe, its standard error into a file.
struct Streaming {
    recorder: Reaped,
    /// What the recorder leaves running (perf's workload, when perf dies
    /// of SIGPIPE) goes with its group.
    _group: Group,
    errors: PathBuf,
}

impl Streaming {
    /// Starts `recorder`; the pipe's reading end.
    fn start(scratch: &Scratch, mut recorder: Command) -> (Streaming, std::process::ChildStdout) {
        let errors = scratch.0.join("recorder.stderr");
        recorder
            .stdout(Stdio::piped())
            .stderr(File::create(&errors).unwrap());
        let mut recorder = Reaped(recorder.spawn().unwrap());
        let group = Group(nix::unistd::Pid::from_raw(recorder.0.id() as i32));
        let stream = recorder.0.stdout.take().unwrap();
        let streaming = Streaming {
            recorder,
            _group: group,
            errors,
        };
        (streaming, stream)
    }

    /// Waits for the recorder: its status and standard error.
    fn end(mut self) -> (ExitStatus, String) {
        let status = wait_bounded(&mut self.recorder.0);
        (status, std::fs::read_to_string(&self.errors).unwrap())
    }
}

/// The directory the recorder said its shards go to.
fn shards_named_in(stderr: &str) -> PathBuf {
    let line = stderr
        .lines()
        .find(|l| l.contains(SHARDS_GO_TO))
        .unwrap_or_else(|| panic!("no '{SHARDS_GO_TO}' line in: {stderr}"));
    PathBuf::from(line.split(SHARDS_GO_TO).nth(1).unwrap().trim())
}

/// A process group killed when dropped, whether or not its leader is
/// still there: a recorder killed with SIGKILL leaves its workload running
/// (as perf's), in the group it led.
struct Group(nix::unistd::Pid);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(self.0, nix::sys::signal::Signal::SIGKILL);
    }
}

/// The private shard directories left in the test's directory.
fn private_dirs(scratch: &Scratch) -> Vec<PathBuf> {
    std::fs::read_dir(&scratch.0)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect()
}

/// The records of a pipe stream after its header part (ATTR, FEATURE,
/// TRACING_DATA with the formats after it, EVENT_UPDATE): the data
/// section, as a file holds it.
fn pipe_data_records(stream: &[u8]) -> Vec<Vec<u8>> {
    let header_part = [
        RecordType::ATTR,
        RecordType::FEATURE,
        RecordType::TRACING_DATA,
        RecordType::EVENT_UPDATE,
    ];
    let mut at = 16;
    let mut records = Vec::new();
    while at < stream.len() {
        let header = RecordHeader::parse(&stream[at..]).expect("a whole record header");
        let mut len = usize::from(header.size);
        assert!(len >= 8 && at + len <= stream.len(), "a cut record at {at}");
        if header.type_ == RecordType::TRACING_DATA {
            len += shardrec_format::views::tracing_data_len(&stream[at..]).unwrap() as usize;
        }
        if !header_part.contains(&header.type_) || !records.is_empty() {
            records.push(stream[at..at + len].to_vec());
        }
        at += len;
    }
    records
}

/// `perf script` of samples and side band, line by line, from a file or
/// (`-`) from `stdin`.
fn script_lines(input: &Path, stdin: Option<File>) -> Vec<String> {
    let mut command = Command::new("perf");
    command.args([
        "script",
        "-F",
        "comm,tid,cpu,time,event,ip,sym",
        "--show-task-events",
        "--show-mmap-events",
        "-i",
    ]);
    command.arg(input);
    if input != Path::new("-") {
        command.arg("--force");
    }
    if let Some(file) = stdin {
        command.stdin(file);
    }
    let output = run(command);
    assert!(output.status.success(), "perf script: {:?}", output);
    assert_no_complaint(&output, "perf script");
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn record_to_stdout_is_read_live_by_perf_report_and_script() {
    let Some((_serial, scratch)) = recording_test("pipe-live") else {
        return;
    };
    let record = [
        "record",
        "-e",
        "cpu-clock",
        "-o",
        "-",
        "--",
        load(),
        "hot",
        "0.5",
    ];
    for reader in [
        perf_reading_stdin(&["report", "--stdio", "--sort", "sym"]),
        perf_reading_stdin(&["script"]),
    ] {
        let what = format!(
            "shardrec record -o - | {:?}",
            reader.get_args().collect::<Vec<_>>()
        );
        let (status, stderr, read) = pipeline(&scratch, shardrec_in(&scratch, &record), reader);
        assert!(status.success(), "{what}: {status}: {stderr}");
        assert!(read.status.success(), "{what}: {read:?}");
        assert_no_complaint(&read, &what);
        let text = String::from_utf8_lossy(&read.stdout);
        assert!(
            text.contains("hot_loop"),
            "{what}: the workload's function is missing: {text}"
        );
        // The shards went to a private directory, removed once merged.
        let dir = shards_named_in(&stderr);
        assert!(dir.starts_with(&scratch.0), "{what}: {}", dir.display());
        assert!(!dir.exists(), "{what}: {} is left", dir.display());
        assert!(!scratch.0.join("perf.data").exists() && !Path::new("-").exists());
    }
}

#[test]
fn perf_inject_adds_build_ids_to_the_stream() {
    let Some((_serial, scratch)) = recording_test("pipe-inject") else {
        return;
    };
    let injected = scratch.0.join("injected.data");
    let record = [
        "record",
        "-q",
        "-e",
        "cpu-clock",
        "-o",
        "-",
        "--",
        load(),
        "hot",
        "0.5",
    ];
    let mut inject = perf_reading_stdin(&["inject", "-b"]);
    inject.arg("-o").arg(&injected);
    let (status, stderr, read) = pipeline(&scratch, shardrec_in(&scratch, &record), inject);
    assert!(status.success(), "{status}: {stderr}");
    assert!(read.status.success(), "perf inject: {read:?}");
    assert_no_complaint(&read, "perf inject -b");
    let report = perf(&["report", "--stdio", "--sort", "sym"], &injected);
    assert_no_complaint(&report, "perf report of perf inject's output");
    assert!(String::from_utf8_lossy(&report.stdout).contains("hot_loop"));
    // shardrec sends no build ids in a pipe, as perf: inject found them.
    let ids = perf(&["buildid-list"], &injected);
    assert!(
        String::from_utf8_lossy(&ids.stdout).contains(load()),
        "{}",
        String::from_utf8_lossy(&ids.stdout)
    );
}

#[test]
fn without_o_a_fifo_stdout_gets_the_pipe_format_and_a_file_gets_perf_data() {
    let Some((_serial, scratch)) = recording_test("pipe-default") else {
        return;
    };
    // The workload's own output goes to standard error, as perf sends it:
    // only perf.data goes down the pipe. (It prints words that its command
    // line, which the stream holds, does not.)
    let workload = format!("echo from-the-$((6*7)); exec {} hot 0.3", load());
    let args = [
        "record",
        "-q",
        "-e",
        "cpu-clock",
        "--",
        "sh",
        "-c",
        &workload,
    ];
    let mut command = shardrec_in(&scratch, &args);
    command.current_dir(&scratch.0);
    let piped = run(command);
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(piped.status.success(), "{stderr}");
    assert_pipe_header(&piped.stdout, "record | ...");
    assert!(stderr.contains("from-the-42"), "{stderr}");
    let leaked = piped.stdout.windows(11).any(|w| w == b"from-the-42");
    assert!(!leaked, "the workload wrote into the stream");
    assert!(
        !scratch.0.join("perf.data").exists(),
        "perf.data written too"
    );
    let stream = scratch.0.join("stream");
    std::fs::write(&stream, &piped.stdout).unwrap();
    let lines = script_lines(Path::new("-"), Some(File::open(&stream).unwrap()));
    assert!(lines.iter().any(|l| l.contains("hot_loop")));

    // Standard output a file: not a FIFO, so perf.data, as perf decides.
    let file = scratch.0.join("stdout-file");
    let mut command = shardrec_in(&scratch, &args);
    command.current_dir(&scratch.0);
    let output = run_with_stdout(command, File::create(&file).unwrap().into());
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let data = scratch.0.join("perf.data");
    assert!(data.exists(), "no perf.data");
    let on_stdout = std::fs::read(&file).unwrap();
    assert!(
        !on_stdout.windows(8).any(|w| w == b"PERFILE2"),
        "perf.data on stdout too"
    );
    assert!(String::from_utf8_lossy(&on_stdout).contains("from-the-42"));
}

/// A recording kept whole, with side band to compare: a shell that starts
/// two programs (COMM, FORK, EXIT, MMAP2 of each).
fn kept_recording(scratch: &Scratch, extra: &[&str]) -> PathBuf {
    let workload = format!("{0} hot 0.2; {0} hot 0.2", load());
    let mut args = vec!["record", "-q", "--keep-shards", "-e", "cpu-clock"];
    args.extend_from_slice(extra);
    let output = scratch.output();
    let output = output.to_str().unwrap();
    args.extend(["-o", output, "--", "sh", "-c", &workload]);
    let recorded = run(shardrec_in(scratch, &args));
    assert!(
        recorded.status.success(),
        "{}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    scratch.shards()
}

/// `shardrec merge DIR ARGS -o -`'s stream, checked to have worked.
fn merge_to_stdout(scratch: &Scratch, dir: &Path, args: &[&str]) -> Vec<u8> {
    let mut command = shardrec_in(scratch, &["merge", "-q"]);
    command.arg(dir).args(args).args(["-o", "-"]);
    let merged = run(command);
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    assert_pipe_header(&merged.stdout, "merge -o -");
    merged.stdout
}

#[test]
fn merge_to_stdout_gives_the_file_merges_records_in_its_order() {
    let Some((_serial, scratch)) = recording_test("pipe-merge") else {
        return;
    };
    let dir = kept_recording(&scratch, &[]);
    let stream = merge_to_stdout(&scratch, &dir, &[]);
    let file = scratch.0.join("merged.data");
    let mut command = shardrec_in(&scratch, &["merge", "-q"]);
    command.arg(&dir).arg("-o").arg(&file);
    assert!(run(command).status.success());
    // The same records, byte for byte and in the same order, after the
    // stream's header part as in the file's data section.
    let from_file = data_records(&file);
    let from_stream = pipe_data_records(&stream);
    assert_eq!(from_stream.len(), from_file.len(), "records");
    assert!(from_stream == from_file, "the records differ");
    // And perf reads them alike, side band included.
    let piped = scratch.0.join("merged.stream");
    std::fs::write(&piped, &stream).unwrap();
    let from_pipe = script_lines(Path::new("-"), Some(File::open(&piped).unwrap()));
    let from_data = script_lines(&file, None);
    for kind in [
        "PERF_RECORD_COMM",
        "PERF_RECORD_FORK",
        "PERF_RECORD_EXIT",
        "PERF_RECORD_MMAP2",
        "hot_loop",
    ] {
        assert!(
            from_data.iter().any(|l| l.contains(kind)),
            "no {kind} in the file's script"
        );
    }
    assert_eq!(from_pipe.len(), from_data.len());
    for (n, (a, b)) in from_pipe.iter().zip(&from_data).enumerate() {
        assert_eq!(a, b, "line {n} of perf script");
    }
}

#[test]
fn compressed_pipes_read_as_the_uncompressed_file() {
    let Some((_serial, scratch)) = recording_test("pipe-z") else {
        return;
    };
    // Recorded with -z into a pipe, the shards kept.
    let record = [
        "record",
        "--keep-shards",
        "-z",
        "-e",
        "cpu-clock",
        "-o",
        "-",
        "--",
        load(),
        "hot",
        "0.5",
    ];
    let stream = scratch.0.join("recorded.stream");
    let mut keep = Command::new("sh");
    keep.arg("-c").arg("cat > \"$0\"").arg(&stream);
    let (status, stderr, _) = pipeline(&scratch, shardrec_in(&scratch, &record), keep);
    assert!(status.success(), "{stderr}");
    let bytes = std::fs::read(&stream).unwrap();
    assert_pipe_header(&bytes, "record -z -o -");
    let compressed = pipe_data_records(&bytes)
        .iter()
        .filter(|r| RecordHeader::parse(r).unwrap().type_ == RecordType::COMPRESSED)
        .count();
    assert!(compressed > 0, "no COMPRESSED record in the stream");
    let dir = shards_named_in(&stderr);
    let file = scratch.0.join("plain.data");
    let mut command = shardrec_in(&scratch, &["merge", "-q"]);
    command.arg(&dir).arg("-o").arg(&file);
    assert!(run(command).status.success());
    let plain = script_lines(&file, None);
    assert!(plain.iter().any(|l| l.contains("hot_loop")));
    let recorded = script_lines(Path::new("-"), Some(File::open(&stream).unwrap()));
    assert!(
        recorded == plain,
        "record -z -o - reads other than the file"
    );
    // merge -z -o - of the same shards, on several threads.
    let merged = merge_to_stdout(
        &scratch,
        &dir,
        &["-z", "--threads", "2", "--slice-size", "64K"],
    );
    std::fs::write(&stream, &merged).unwrap();
    let merged = script_lines(Path::new("-"), Some(File::open(&stream).unwrap()));
    assert!(merged == plain, "merge -z -o - reads other than the file");
}

/// perf record's own status when its reader leaves: killed by SIGPIPE.
fn perfs_status_when_the_reader_leaves(scratch: &Scratch) -> ExitStatus {
    let mut perf = Command::new("perf");
    perf.args([
        "record",
        "-q",
        "-e",
        "cpu-clock",
        "-o",
        "-",
        "--",
        load(),
        "burn-for",
        "1",
    ])
    .process_group(0);
    let mut head = Command::new("head");
    head.args(["-c", "100"]);
    let (status, _, read) = pipeline(scratch, perf, head);
    assert_eq!(read.stdout.len(), 100);
    status
}

#[test]
fn a_reader_that_takes_100_bytes_ends_the_recorder_as_it_ends_perf() {
    let Some((_serial, scratch)) = recording_test("pipe-head") else {
        return;
    };
    let perfs = perfs_status_when_the_reader_leaves(&scratch);
    assert_eq!(perfs.signal(), Some(libc::SIGPIPE), "perf: {perfs}");
    let marker = scratch.0.join("load-report");
    let marker = marker.to_str().unwrap();
    let record = [
        "record",
        "-e",
        "cpu-clock",
        "-o",
        "-",
        "--",
        load(),
        "--report",
        marker,
        "burn-for",
        "1",
    ];
    let mut head = Command::new("head");
    head.args(["-c", "100"]);
    let (status, stderr, read) = pipeline(&scratch, shardrec_in(&scratch, &record), head);
    assert_eq!(status.signal(), perfs.signal(), "{status}: {stderr}");
    assert_pipe_header(&read.stdout, "head -c 100");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        private_dirs(&scratch).is_empty(),
        "{:?} left",
        private_dirs(&scratch)
    );
    assert_eq!(
        processes_naming(&scratch.0),
        0,
        "a process of the recording is left"
    );
}

/// `shardrec record -o -` of a ten-minute workload, its stdout and stderr
/// piped: the recorder and its standard error.
fn ten_minutes_to_stdout(scratch: &Scratch) -> (Reaped, BufReader<std::process::ChildStderr>) {
    let marker = scratch.0.join("load-report");
    let marker = marker.to_str().unwrap();
    let record = [
        "record",
        "-e",
        "cpu-clock",
        "-o",
        "-",
        "--",
        load(),
        "--report",
        marker,
        "spin",
        "600",
    ];
    let mut recorder = shardrec_in(scratch, &record);
    recorder.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut recorder = Reaped(recorder.spawn().unwrap());
    let stderr = BufReader::new(recorder.0.stderr.take().unwrap());
    (recorder, stderr)
}

#[test]
fn a_reader_that_leaves_while_recording_stops_it() {
    let Some((_serial, scratch)) = recording_test("pipe-leave") else {
        return;
    };
    // A workload that would run ten minutes.
    let (mut recorder, mut stderr) = ten_minutes_to_stdout(&scratch);
    let mut sleeper = Command::new("sleep");
    sleeper
        .arg("600")
        .stdin(Stdio::from(recorder.0.stdout.take().unwrap()));
    let mut reader = Reaped(sleeper.spawn().unwrap());
    // The Command keeps its copy of the pipe's reading end until dropped.
    drop(sleeper);
    let mut said = String::new();
    while !said.contains(SHARDS_GO_TO) {
        assert!(stderr.read_line(&mut said).unwrap() > 0, "{said}");
    }
    let dir = shards_named_in(&said);
    wait_for_start(&dir);
    std::thread::sleep(Duration::from_millis(300));
    reader.0.kill().unwrap();
    reader.0.wait().unwrap();
    let left = Instant::now();
    let status = wait_bounded(&mut recorder.0);
    let stopped_in = left.elapsed();
    stderr.read_to_string(&mut said).unwrap();
    assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status}: {said}");
    // The live merger saw the reader go, as perf's write would (SIGPIPE).
    assert!(said.contains("stopped by SIGPIPE"), "{said}");
    assert!(
        stopped_in < Duration::from_secs(60),
        "stopped {stopped_in:?} after"
    );
    assert!(!said.contains("panicked"), "{said}");
    assert!(!dir.exists(), "{} left", dir.display());
    assert_eq!(
        processes_naming(&scratch.0),
        0,
        "a process of the recording is left"
    );
}

#[test]
fn a_recorder_killed_in_pipe_mode_leaves_mergeable_shards_where_it_said() {
    let Some((_serial, scratch)) = recording_test("pipe-kill") else {
        return;
    };
    let (mut recorder, mut stderr) = ten_minutes_to_stdout(&scratch);
    let group = Group(nix::unistd::Pid::from_raw(recorder.0.id() as i32));
    let mut stdout = recorder.0.stdout.take().unwrap();
    let mut said = String::new();
    while !said.contains(SHARDS_GO_TO) {
        assert!(stderr.read_line(&mut said).unwrap() > 0, "{said}");
    }
    let dir = shards_named_in(&said);
    assert!(dir.starts_with(&scratch.0), "{}", dir.display());
    wait_for_start(&dir);
    std::thread::sleep(Duration::from_millis(500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(recorder.0.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let status = wait_bounded(&mut recorder.0);
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    // The stream holds what the live merger sent before it went with the
    // recorder, and nothing holds it open (the workload's standard output
    // is standard error): it ends.
    let (sent, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        let _ = sent.send(bytes);
    });
    let bytes = ended
        .recv_timeout(Duration::from_secs(60))
        .expect("the stream still open a minute after the kill");
    assert!(
        bytes.is_empty() || bytes.starts_with(b"PERFILE2"),
        "{} bytes on stdout, not perf's pipe format",
        bytes.len()
    );
    let file = scratch.0.join("recovered.data");
    let mut merge = shardrec_in(&scratch, &["merge", "-q"]);
    merge.arg(&dir).arg("-o").arg(&file);
    let merged = run(merge);
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    let lines = script_lines(&file, None);
    let samples = lines.iter().filter(|l| l.contains("cpu-clock")).count();
    assert!(samples > 0, "no sample recovered");
    // The workload, still running (as perf's would be), goes with the
    // process group the recorder led.
    drop(group);
    let deadline = Instant::now() + Duration::from_secs(60);
    while processes_naming(&scratch.0) > 0 {
        assert!(Instant::now() < deadline, "the workload outlived its group");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The live merger killed while streaming is not replaced (what the
/// reader got is nowhere else): the recording stops at once, as perf's
/// does when its output fails, in one error line naming the shards; the
/// reader has every round sent before, and the shards merge.
#[test]
fn a_stream_whose_merger_is_killed_stops_and_says_where_the_shards_are() {
    let Some((_serial, scratch)) = recording_test("pipe-merger-killed") else {
        return;
    };
    let args = ["record", "-a", "-e", "cpu-clock", "-F", "1000", "-o", "-"];
    let mut recorder = shardrec_in(&scratch, &args);
    recorder
        .env("SHARDREC_FAULTS", "merge.round=crash@3")
        .args(["--", load(), "spin", "30"]);
    let started = Instant::now();
    let (status, stderr, read) = pipeline(
        &scratch,
        recorder,
        perf_reading_stdin(&["script", "-F", "event"]),
    );
    assert_eq!(status.code(), Some(255), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the recording went on without its stream: {stderr}"
    );
    let error = stderr.lines().last().unwrap_or_default();
    assert!(
        error.contains("the stream stopped") && error.contains("shardrec merge"),
        "{stderr}"
    );
    let sent = String::from_utf8_lossy(&read.stdout).lines().count();
    assert!(sent > 0, "no sample reached the reader: {stderr}");
    let file = scratch.0.join("rest.data");
    let mut merge = shardrec_in(&scratch, &["merge", "-q"]);
    merge.arg(shards_named_in(&stderr)).arg("-o").arg(&file);
    let merged = run(merge);
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    assert_eq!(processes_naming(&scratch.0), 0, "a process still runs");
}

#[test]
fn options_that_need_a_file_refuse_standard_output_in_one_line() {
    let Some((_serial, scratch)) = recording_test("pipe-refusals") else {
        return;
    };
    for option in [
        "--timestamp-filename",
        "--switch-output",
        "--kcore",
        "--overwrite",
    ] {
        let args = [
            "record",
            "-q",
            "-e",
            "cpu-clock",
            option,
            "-o",
            "-",
            "--",
            "true",
        ];
        let output = run(shardrec_in(&scratch, &args));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{option}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{option}: {stderr}");
        assert!(stderr.contains("standard output"), "{option}: {stderr}");
        assert!(output.stdout.is_empty(), "{option}: wrote to stdout");
        assert!(
            private_dirs(&scratch).is_empty(),
            "{option}: {:?}",
            private_dirs(&scratch)
        );
    }
}

/// The samples and lost records the recorder's summary gives: "[ shardrec
/// record: ... (N samples, L lost) ...".
fn recorded_counts(stderr: &str) -> (u64, u64) {
    stderr
        .split_once(" samples, ")
        .and_then(|(before, after)| {
            let samples = before.rsplit('(').next()?.parse::<u64>().ok()?;
            let lost = after.split(' ').next()?.parse::<u64>().ok()?;
            Some((samples, lost))
        })
        .unwrap_or_else(|| panic!("no counts in {stderr}"))
}

/// The cpu-clock samples `perf script` finds in the pipe-format file `out`.
/// Counted by `perf script -F event`, which reads every record but
/// resolves no symbol and unwinds no stack: with `ip,sym` a 96 MB stream
/// of DWARF samples took perf over two minutes beside two busy spinners.
fn samples_read(out: &Path) -> u64 {
    let mut command = Command::new("perf");
    command
        .args(["script", "-F", "event", "-i", "-"])
        .stdin(File::open(out).unwrap());
    let output = run(command);
    assert!(output.status.success(), "perf script: {output:?}");
    // A storm on a host busy beside it may have the kernel drop samples
    // from a full ring (LOST records, as perf's own do); what was
    // recorded must all be read, once.
    assert_no_complaint_but_kernel_losses(&output, out, "perf script");
    let script = String::from_utf8_lossy(&output.stdout);
    script.lines().filter(|l| l.contains("cpu-clock")).count() as u64
}

/// A reader that sleeps while the recording goes on costs it nothing: the
/// writers never wait for the stream (perf's pipe mode blocks its only
/// thread on the pipe and loses samples instead), the shards hold what the
/// reader has not taken, and every sample reaches it in the end.
#[test]
fn a_reader_that_sleeps_loses_nothing() {
    let Some((_serial, scratch)) = recording_test("pipe-slow") else {
        return;
    };
    let out = scratch.0.join("read.data");
    let recorder = shardrec_in(
        &scratch,
        &[
            "record",
            "-a",
            "-F",
            "10000",
            "-e",
            "cpu-clock",
            "-o",
            "-",
            "--",
            load(),
            "burn-for",
            "2",
        ],
    );
    let mut reader = Command::new("sh");
    reader
        .arg("-c")
        .arg(format!("sleep 3; cat > {}", out.display()));
    let (status, stderr, read) = pipeline(&scratch, recorder, reader);
    assert!(
        status.success() && read.status.success(),
        "{status}: {stderr}"
    );
    let counts = recorded_counts(&stderr);
    assert_eq!(counts.1, 0, "{stderr}");
    assert!(stderr.contains("behind the recording"), "{stderr}");
    let bytes = std::fs::read(&out).unwrap();
    assert_pipe_header(&bytes, "the sleeping reader's copy");
    assert_eq!(
        samples_read(&out),
        counts.0,
        "samples the reader got of those recorded"
    );
}

/// A recording streamed to a reader frees its shards behind what went
/// down the stream (every 32 MiB), and the stream still holds every
/// sample the recording took: none lost, none twice.
#[test]
fn a_streamed_recording_frees_its_shards_and_sends_every_sample_once() {
    let Some((_serial, scratch)) = recording_test("pipe-free") else {
        return;
    };
    let out = scratch.0.join("read.data");
    // DWARF stacks on every CPU: far more than 32 MiB a second.
    let recorder = shardrec_in(
        &scratch,
        &[
            "record",
            "-a",
            "--call-graph",
            "dwarf",
            "-F",
            "10000",
            "--max-size",
            "96M",
            "-e",
            "cpu-clock",
            "-o",
            "-",
            "--",
            load(),
            "burn-for",
            "30",
        ],
    );
    let mut reader = Command::new("sh");
    reader.arg("-c").arg(format!("cat > {}", out.display()));
    let (_status, stderr, read) = pipeline(&scratch, recorder, reader);
    assert!(read.status.success(), "{stderr}");
    assert!(stderr.contains("size limit reached"), "{stderr}");
    let (recorded, _) = recorded_counts(&stderr);
    assert_eq!(samples_read(&out), recorded, "{stderr}");
    assert!(
        private_dirs(&scratch).is_empty(),
        "{:?} left",
        private_dirs(&scratch)
    );
}

/// A busy thread that moves to another CPU leaves up to a quarter of the
/// ring it left unwritten (its writer is woken at a quarter full), and
/// that CPU then stays quiet: the stream goes on without waiting for it.
/// The reader gets data through the whole run, never pausing for half
/// the second CPU's part, and the summary's lag says no more.
#[test]
fn a_thread_that_moves_to_another_cpu_does_not_hold_the_stream_back() {
    let Some((_serial, scratch)) = recording_test("pipe-moved") else {
        return;
    };
    const SECOND_PART: f64 = 1.5;
    // 32 KiB stacks: each CPU's part fills its ring many times over.
    let load = load();
    let parts = format!(
        "taskset -c 1 {load} syscalls-paced 1500 0.5 && \
         taskset -c 0 {load} syscalls-paced 4500 {SECOND_PART}"
    );
    let recorder = shardrec_in(
        &scratch,
        &[
            "record",
            "-a",
            "-e",
            "syscalls:sys_enter_getppid",
            "--call-graph",
            "dwarf,32768",
            "-o",
            "-",
            "--",
            "sh",
            "-c",
            &parts,
        ],
    );
    let (recorder, mut stream) = Streaming::start(&scratch, recorder);
    // When each read came, once the samples flow (past the head and what
    // comes before the workload's first CPU fills a ring).
    let mut buf = vec![0; 1 << 20];
    let (mut bytes, mut arrivals) = (0, Vec::new());
    loop {
        let n = stream.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        bytes += n;
        if bytes > 4 << 20 {
            arrivals.push(Instant::now());
        }
    }
    let (status, stderr) = recorder.end();
    assert!(status.success(), "{status}: {stderr}");
    assert!(bytes > 150 << 20, "{bytes} bytes: {stderr}");
    let longest = arrivals
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    let most = Duration::from_secs_f64(SECOND_PART / 2.0);
    assert!(longest < most, "the stream paused {longest:?}: {stderr}");
    let lag = stderr
        .split_once(" s behind the recording")
        .and_then(|(before, _)| before.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no lag in {stderr}"));
    assert!(lag < most.as_secs_f64(), "{stderr}");
}
