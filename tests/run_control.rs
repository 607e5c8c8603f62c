//! Run control as perf has it: `-D` starts counting late, and `--control`
//! enables, disables and stops a recording while it runs.

mod common;

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use common::{load, record, recording_test, shardrec, Recording};
use shardrec_format::header::RecordType;
use shardrec_shard::StopReason;

const NS: u64 = 1_000_000_000;

/// The samples' times, sorted.
fn sample_times(recording: &Recording) -> Vec<u64> {
    let mut times: Vec<u64> = recording.samples().map(|s| s.id.time).collect();
    times.sort_unstable();
    times
}

#[test]
fn a_delay_starts_counting_that_much_after_the_exec() {
    let Some((_serial, scratch)) = recording_test("delay") else {
        return;
    };
    let output = record(
        &scratch,
        &["-D", "500", "-e", "cpu-clock", "--", load(), "spin", "1.2"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let recording = Recording::read(&scratch.shards());
    // The tracking dummy records the workload's exec (its COMM) at once.
    let exec = recording
        .records()
        .filter(|r| r.type_ == RecordType::COMM && r.id.time > 0)
        .map(|r| r.id.time)
        .min()
        .expect("the exec's COMM record");
    // And its exit (the last EXIT: the spinning threads end first).
    let exit = recording
        .records()
        .filter(|r| r.type_ == RecordType::EXIT)
        .map(|r| r.id.time)
        .max()
        .expect("the workload's EXIT record");
    let times = sample_times(&recording);
    assert!(times.len() > 100, "{} samples", times.len());
    let late = times[0] - exec;
    // Counting may start later than 500 ms on a busy host, but a delay
    // honoured as asked leaves most of the workload's remaining life
    // counted: the first sample comes in the first half of what is left
    // after 500 ms (before about 850 ms with `spin 1.2`; 1 s of delay
    // would fail).
    let after_delay = (exit - exec).saturating_sub(NS / 2);
    assert!(
        (NS * 45 / 100..NS / 2 + after_delay / 2).contains(&late),
        "first sample {late} ns after the exec and {} ns before the exit, not about 500 ms after it",
        exit - exec - late
    );
    assert!(!stderr.contains("Events enabled"), "-q is quiet: {stderr}");
}

/// The recorder under test, whose process group is killed if the test
/// fails before it ends.
struct Recorder(Option<std::process::Child>);

impl Recorder {
    fn finish(mut self) -> std::process::Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let group = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
        }
    }
}

/// Makes a FIFO (mkfifo(3)).
fn fifo(path: &std::path::Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
}

#[test]
fn control_enables_disables_and_stops() {
    let Some((_serial, scratch)) = recording_test("control") else {
        return;
    };
    let (ctl, ack) = (scratch.0.join("ctl"), scratch.0.join("ack"));
    fifo(&ctl);
    fifo(&ack);
    let control = format!("fifo:{},{}", ctl.display(), ack.display());
    let mut command = shardrec();
    command
        .args(["record", "--no-merge", "-o"])
        .arg(scratch.output())
        .args(["-D", "-1", "--control", &control, "-e", "cpu-clock"])
        .args(["--", load(), "spin", "20"])
        .stderr(std::process::Stdio::piped())
        .process_group(0);
    let child = Recorder(Some(command.spawn().unwrap()));
    // Both ends block until shardrec has opened the FIFOs.
    let mut commands = OpenOptions::new().write(true).open(&ctl).unwrap();
    let mut acks = BufReader::new(OpenOptions::new().read(true).open(&ack).unwrap());
    let mut say = |word: &str| {
        writeln!(commands, "{word}").unwrap();
        let mut line = String::new();
        acks.read_line(&mut line).unwrap();
        assert_eq!(line, "ack\n", "answer to {word}");
    };
    say("ping");
    std::thread::sleep(Duration::from_millis(400));
    let enabled = Instant::now();
    say("enable");
    std::thread::sleep(Duration::from_millis(500));
    say("disable");
    let window = enabled.elapsed();
    std::thread::sleep(Duration::from_millis(400));
    say("stop");
    let output = child.finish();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("Events disabled\nEvents enabled\nEvents disabled"),
        "{stderr}"
    );
    let recording = Recording::read(&scratch.shards());
    let stats = recording.meta.stats.as_ref().expect("a final meta");
    assert_eq!(stats.stopped_by, StopReason::ControlStop);
    let times = sample_times(&recording);
    assert!(times.len() > 100, "{} samples", times.len());
    let span = times[times.len() - 1] - times[0];
    assert!(
        span <= window.as_nanos() as u64 + NS / 20,
        "samples span {span} ns, longer than the {window:?} the events were enabled"
    );
}
