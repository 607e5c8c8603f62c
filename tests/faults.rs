//! Faults during a recording lose nothing: a writer killed while recording
//! is replaced and its CPU keeps its samples.

mod common;

use std::time::Duration;

use common::*;
use nix::sys::signal::{kill, Signal};
use nix::time::{clock_gettime, ClockId};
use nix::unistd::Pid;

/// The writer of CPU `cpu` among `coordinator`'s children: the
/// `shardrec` process pinned to that CPU alone.
fn writer_of(coordinator: u32, cpu: u32) -> Option<i32> {
    let pinned = format!("{cpu}");
    helpers_of(coordinator)
        .into_iter()
        .find(|pid| cpus_allowed(*pid).is_some_and(|list| list == pinned))
}

/// The CPUs a process may run on, as /proc lists them (`0`, `0-1`).
fn cpus_allowed(pid: i32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list:"))?;
    Some(line.split_whitespace().nth(1)?.to_string())
}

fn monotonic_s() -> f64 {
    let now = clock_gettime(ClockId::CLOCK_MONOTONIC).unwrap();
    now.tv_sec() as f64 + now.tv_nsec() as f64 / 1e9
}

#[test]
fn a_writer_killed_twice_is_replaced_and_its_cpu_keeps_its_samples() {
    let Some((_serial, scratch)) = recording_test("faults-writer") else {
        return;
    };
    let mut record = shardrec();
    record
        .args([
            "record",
            "-a",
            "-k",
            "monotonic",
            "-e",
            "cpu-clock",
            "-F",
            "1000",
            "-o",
        ])
        .arg(scratch.output())
        .args(["--", load(), "spin", "3"])
        .stderr(std::process::Stdio::piped());
    let child = record.spawn().unwrap();
    let coordinator = child.id();
    let mut kills = Vec::new();
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(1000));
        let writer = writer_of(coordinator, 0).expect("the writer of CPU 0");
        kills.push(monotonic_s());
        kill(Pid::from_raw(writer), Signal::SIGKILL).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("the writer of CPU 0 died and was replaced at"),
        "{stderr}"
    );
    assert_eq!(
        processes_naming(&scratch.0),
        0,
        "a process of the recording still runs"
    );
    let script = perf(&["script", "-F", "cpu,time"], &scratch.output());
    assert_no_complaint(&script, "perf script");
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for line in String::from_utf8_lossy(&script.stdout).lines() {
        let mut fields = line.split_whitespace();
        let cpu: usize = fields
            .next()
            .unwrap()
            .trim_matches(['[', ']'])
            .parse()
            .unwrap();
        let time: f64 = fields
            .next()
            .unwrap()
            .trim_end_matches(':')
            .parse()
            .unwrap();
        if cpu < 2 {
            times[cpu].push(time);
        }
    }
    for kill in &kills {
        assert!(
            times[0].iter().any(|t| t > kill && *t <= kill + 0.1),
            "no sample of CPU 0 within 100 ms after the kill at {kill}"
        );
    }
    // CPU 1's writer was left alone: CPU 0 has as many samples, within 5%.
    let (killed, undisturbed) = (times[0].len() as f64, times[1].len() as f64);
    assert!(
        (killed - undisturbed).abs() <= undisturbed * 0.05,
        "CPU 0 {killed} samples, CPU 1 {undisturbed}"
    );
}

#[test]
fn a_writer_that_keeps_dying_is_given_up_on_and_the_rest_records_on() {
    let Some((_serial, scratch)) = recording_test("faults-given-up") else {
        return;
    };
    let mut record = shardrec();
    record
        .args(["record", "-a", "-e", "cpu-clock", "-F", "1000", "-o"])
        .arg(scratch.output())
        .args(["--", load(), "spin", "3"])
        .stderr(std::process::Stdio::piped());
    let child = record.spawn().unwrap();
    let coordinator = child.id();
    let mut killed = 0;
    while killed < 4 {
        std::thread::sleep(Duration::from_millis(300));
        if let Some(writer) = writer_of(coordinator, 0) {
            kill(Pid::from_raw(writer), Signal::SIGKILL).unwrap();
            killed += 1;
        }
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("the writer of CPU 0 died 4 times and is not replaced again"),
        "{stderr}"
    );
    assert!(
        stderr.contains("then died again and was given up on"),
        "{stderr}"
    );
    assert_eq!(
        processes_naming(&scratch.0),
        0,
        "a process of the recording still runs"
    );
    // The ring, which the kernel kept filling, was written at the stop:
    // CPU 0 has as many samples as CPU 1, within 5%.
    let script = perf(&["script", "-F", "cpu"], &scratch.output());
    assert_no_complaint(&script, "perf script");
    let on = |cpu: &str| {
        String::from_utf8_lossy(&script.stdout)
            .lines()
            .filter(|l| l.trim() == cpu)
            .count() as f64
    };
    let (given_up, undisturbed) = (on("[000]"), on("[001]"));
    assert!(undisturbed > 2500.0, "CPU 1: {undisturbed} samples");
    assert!(
        (given_up - undisturbed).abs() <= undisturbed * 0.05,
        "CPU 0 {given_up} samples, CPU 1 {undisturbed}"
    );
}

/// The VIP among `coordinator`'s children: the `shardrec` process that
/// may run on more than one CPU (each writer is pinned to its own).
fn vip_of(coordinator: u32) -> Option<i32> {
    helpers_of(coordinator)
        .into_iter()
        .find(|pid| cpus_allowed(*pid).is_some_and(|list| list.contains(['-', ','])))
}

#[test]
fn a_vip_killed_while_programs_load_is_restarted_and_programs_are_captured() {
    let Some((_serial, scratch)) = recording_test("faults-vip") else {
        return;
    };
    let mut record = shardrec();
    record
        .args(["record", "-a", "-e", "cpu-clock", "-o"])
        .arg(scratch.output())
        .args(["--", load(), "bpf-churn", "600"])
        .stderr(std::process::Stdio::piped());
    let child = record.spawn().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let vip = vip_of(child.id()).expect("the VIP");
    kill(Pid::from_raw(vip), Signal::SIGKILL).unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("the VIP died and was restarted at"),
        "{stderr}"
    );
    assert_eq!(
        processes_naming(&scratch.0),
        0,
        "a process of the recording still runs"
    );
    // The side-band records of the whole run are there (the rings kept
    // them while no VIP ran), and nearly every program's info: only those
    // loaded and unloaded in the gap can be missing.
    let header = perf(&["report", "--header-only", "-I"], &scratch.output());
    let infos = String::from_utf8_lossy(&header.stdout)
        .lines()
        .filter(|l| l.starts_with("# bpf_prog_info "))
        .count();
    assert!(infos >= 570, "{infos} programs with info of 600");
    let stats = perf(&["report", "--stats"], &scratch.output());
    let text = String::from_utf8_lossy(&stats.stdout);
    let bpf_events: u64 = text
        .lines()
        .find(|l| l.trim_start().starts_with("BPF_EVENT events:"))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(bpf_events >= 1200, "{bpf_events} BPF_EVENT records: {text}");
}

#[test]
fn a_stalled_vip_loses_side_band_records_counted_apart_from_samples() {
    let Some((_serial, scratch)) = recording_test("faults-vip-lost") else {
        return;
    };
    let churn = format!("sleep 0.5; {} bpf-churn 600; sleep 0.5", load());
    let mut record = shardrec();
    record
        .args(["record", "-a", "-e", "cpu-clock", "--keep-shards", "-o"])
        .arg(scratch.output())
        .args(["--", "sh", "-c", &churn])
        .stderr(std::process::Stdio::piped());
    let child = record.spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let vip = Pid::from_raw(vip_of(child.id()).expect("the VIP"));
    // Stopped while 600 programs come and go: its 64 KiB rings overflow.
    kill(vip, Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    kill(vip, Signal::SIGCONT).unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let meta = shardrec_shard::RecordingDir::open(scratch.shards())
        .read_meta()
        .unwrap();
    let stats = meta.stats.unwrap();
    let lost = stats.bpf.unwrap().lost;
    assert!(lost > 0, "no side-band record lost: {stderr}");
    assert!(
        stderr.contains(&format!(
            "side-band: {lost} records lost in the VIP's rings"
        )),
        "{stderr}"
    );
    let sample_losses: u64 = stats.cpus.iter().map(|c| c.dropped()).sum();
    assert_eq!(sample_losses, 0, "the sampling rings lost nothing");
}

/// What a recording with an injected fault must end in.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Ends {
    /// Exit 0 and a perf.data with every record of the shards.
    Clean,
    /// Exit 0, a warning naming the failure, the shards whole.
    Warned,
    /// Exit 1, "the recording was cut", the shards merge elsewhere.
    Cut,
    /// Exit 1 with this in the one error line; the shards merge.
    Failed(&'static str),
}

/// The fault-injection matrix (`SHARDREC_FAULTS`, see
/// `shardrec_control::fault`): each fault, in the process it hits, ends
/// in a readable perf.data or a clear message, leaves no process behind,
/// and loses no record written before it.
#[test]
fn every_injected_fault_ends_readable_or_clear_and_loses_nothing_written() {
    let scenarios: [(&str, &[&str], Ends); 9] = [
        ("writer.write=ENOSPC@2", &[], Ends::Cut),
        ("writer.write=EIO@2", &[], Ends::Cut),
        ("writer.write=EDQUOT@1", &[], Ends::Cut),
        ("writer.write=EINTR@1", &[], Ends::Clean),
        ("writer.write=short@1", &[], Ends::Clean),
        ("writer.sync=EIO", &["--no-merge"], Ends::Warned),
        ("vip.write=EIO@1", &[], Ends::Clean),
        (
            "meta.write=ENOSPC@3",
            &[],
            Ends::Failed("meta.tmp: No space left on device"),
        ),
        (
            "merge.write=ENOSPC@5",
            &[],
            Ends::Failed("perf.data: No space left on device"),
        ),
    ];
    for (fault, args, ends) in scenarios {
        let Some((_serial, scratch)) = recording_test("faults-matrix") else {
            return;
        };
        let mut record = shardrec();
        record
            .env("SHARDREC_FAULTS", fault)
            // Small rings (64 KiB, a write every 16 KiB), so that every
            // writer makes many writes and the Nth one is always reached.
            .args([
                "record",
                "-q",
                "--keep-shards",
                "-a",
                "-m",
                "16",
                "-F",
                "4000",
                "-g",
                "-o",
            ])
            .arg(scratch.output())
            .args(args)
            .args(["--", load(), "burn", "200"]);
        let recorded = run(record);
        let stderr = String::from_utf8_lossy(&recorded.stderr).into_owned();
        assert_eq!(
            processes_naming(&scratch.0),
            0,
            "{fault}: a process still runs"
        );
        let code = recorded.status.code();
        match ends {
            Ends::Clean => assert!(
                code == Some(0) && stderr.is_empty(),
                "{fault}: {code:?} {stderr}"
            ),
            Ends::Warned => assert!(
                code == Some(0) && stderr.contains("failed while stopping"),
                "{fault}: {code:?} {stderr}"
            ),
            Ends::Cut => assert!(
                code == Some(1)
                    && stderr.contains("the recording was cut:")
                    && stderr.contains("shardrec merge"),
                "{fault}: {code:?} {stderr}"
            ),
            Ends::Failed(message) => assert!(
                code != Some(0)
                    && stderr.trim_end().lines().count() == 1
                    && stderr.contains(message),
                "{fault}: {code:?} {stderr}"
            ),
        }
        assert!(
            !scratch.0.join("perf.data.tmp").exists(),
            "{fault}: a half-written perf.data.tmp"
        );
        // Whatever the fault, the shards merge (without it) into a
        // perf.data holding every whole record they hold.
        let mut merge = shardrec();
        merge
            .args(["merge", "-q"])
            .arg(scratch.shards())
            .arg("-o")
            .arg(scratch.output());
        let merged = run(merge);
        assert!(
            merged.status.success(),
            "{fault}: {}",
            String::from_utf8_lossy(&merged.stderr)
        );
        let in_shards = Recording::read(&scratch.shards()).samples().count();
        let script = perf(&["script", "-F", "cpu"], &scratch.output());
        let in_file = String::from_utf8_lossy(&script.stdout).lines().count();
        assert_eq!(
            in_file, in_shards,
            "{fault}: samples in perf.data against the shards"
        );
        let meta = shardrec_shard::RecordingDir::open(scratch.shards())
            .read_surviving_meta()
            .unwrap()
            .0;
        let lost: u64 = meta
            .stats
            .map_or(0, |s| s.lost_by_event.iter().map(|&(_, _, n)| n).sum());
        eprintln!("fault {fault}: {ends:?}, {in_file} samples, {lost} counted as lost");
    }
}
