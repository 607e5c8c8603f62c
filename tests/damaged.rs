//! Merging what a crash, a kill or a bad disk leaves: every whole record
//! before the damage, a clear report of what was dropped, never a panic.

mod common;

use common::*;

fn recorded(name: &str) -> (Scratch, Recording) {
    let scratch = Scratch::new(name);
    record(
        &scratch,
        &["-a", "-e", "cpu-clock", "--", load(), "spin", "0.5"],
    );
    let recording = Recording::read(&scratch.shards());
    (scratch, recording)
}

#[test]
fn a_shard_cut_mid_record_merges_what_came_before() {
    if !require_root() {
        return;
    }
    let _serial = serial();
    let (scratch, recording) = recorded("torn");
    let shard = scratch.shards().join("cpu000.shard");
    let len = std::fs::metadata(&shard).unwrap().len();
    let last = recording.shards[0].1.last().unwrap().bytes.len() as u64;
    // Cut the last record in half, as a kill in the middle of a write would.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(len - last / 2 - 4)
        .unwrap();
    let output = merge(&scratch);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let cut_at = len - last;
    assert!(
        stderr.contains(&format!(
            "shard cpu000.shard is cut at byte {cut_at}: {} bytes dropped",
            last - last / 2 - 4
        )),
        "{stderr}"
    );
    let expected = recording.samples().count() as u64
        - u64::from(
            recording.shards[0].1.last().unwrap().type_
                == shardrec_format::header::RecordType::SAMPLE,
        );
    let script = perf(&["script", "-F", "time"], &scratch.output());
    assert_eq!(
        String::from_utf8_lossy(&script.stdout).lines().count() as u64,
        expected
    );
    assert!(!stderr.contains("panicked"));
}

#[test]
fn a_shard_of_random_bytes_is_an_error_not_a_panic() {
    if !require_root() {
        return;
    }
    let _serial = serial();
    let (scratch, recording) = recorded("random");
    let mut noise = vec![0u8; 1 << 16];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for byte in &mut noise {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        *byte = state as u8;
    }
    std::fs::write(scratch.shards().join("cpu001.shard"), &noise).unwrap();
    let output = merge(&scratch);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr
            .contains("shardrec: error: shard cpu001.shard is cut at byte 0: 65536 bytes dropped"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"));
    // The rest is still merged and readable.
    let script = perf(&["script", "-F", "time"], &scratch.output());
    let cpu0 = recording.shards[0]
        .1
        .iter()
        .filter(|r| r.type_ == shardrec_format::header::RecordType::SAMPLE)
        .count();
    assert_eq!(
        String::from_utf8_lossy(&script.stdout).lines().count(),
        cpu0
    );
}

/// Samples perf script finds in the merged output.
fn samples_in(scratch: &Scratch) -> usize {
    let script = perf(&["script", "-F", "cpu,time"], &scratch.output());
    assert_no_complaint(&script, "perf script");
    String::from_utf8_lossy(&script.stdout).lines().count()
}

#[test]
fn a_damaged_meta_is_survived_from_its_copy_at_start() {
    if !require_root() {
        return;
    }
    let _serial = serial();
    let (scratch, _) = recorded("meta-copy");
    let meta = scratch.shards().join("meta");
    let good = std::fs::read(&meta).unwrap();
    assert!(merge(&scratch).status.success());
    let samples = samples_in(&scratch);
    assert!(samples > 0);
    let flipped = {
        let mut bytes = good.clone();
        bytes[good.len() / 2] ^= 0x04;
        bytes
    };
    for (damage, bytes) in [
        ("a flipped byte", Some(flipped)),
        ("cut in half", Some(good[..good.len() / 2].to_vec())),
        ("deleted", None),
    ] {
        match bytes {
            Some(bytes) => std::fs::write(&meta, bytes).unwrap(),
            None => std::fs::remove_file(&meta).unwrap(),
        }
        let output = merge(&scratch);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{damage}: {stderr}");
        assert!(
            stderr.contains("merged from meta.start")
                && stderr.contains("per-event loss counts read at stop are not in perf.data"),
            "{damage}: {stderr}"
        );
        assert_eq!(samples_in(&scratch), samples, "{damage}");
    }
}

#[test]
fn a_meta_lost_with_its_copy_is_a_clear_error() {
    if !require_root() {
        return;
    }
    let _serial = serial();
    let (scratch, _) = recorded("meta");
    std::fs::write(scratch.shards().join("meta"), b"\xc1garbage").unwrap();
    std::fs::remove_file(scratch.shards().join("meta.start")).unwrap();
    let output = merge(&scratch);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("meta: not a shardrec meta file")
            && stderr.contains("its copy from the start cannot be read either")
            && stderr.contains("meta.start: No such file or directory"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    let missing = shardrec()
        .args(["merge", "/no/such/dir", "-o"])
        .arg(scratch.output())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("/no/such/dir/meta: No such file or directory"),
        "{stderr}"
    );
}

#[test]
fn a_recording_killed_with_sigkill_still_merges() {
    let Some((_serial, scratch)) = recording_test("sigkill") else {
        return;
    };
    // A spinner on every CPU beside the recording, so it has samples to
    // take whatever else runs; killed with the test.
    let _spinner = Reaped(
        std::process::Command::new(load())
            .args(["spin", "600"])
            .spawn()
            .unwrap(),
    );
    let mut coordinator = shardrec()
        .args(["record", "-q", "-a", "-e", "cpu-clock", "-F", "4000", "-o"])
        .arg(scratch.output())
        .spawn()
        .unwrap();
    let started = wait_for_start(&scratch.shards());
    std::thread::sleep(std::time::Duration::from_secs(1));
    let recorded = started.elapsed().as_secs_f64();
    coordinator.kill().unwrap();
    coordinator.wait().unwrap();
    // The writers and the VIP see their control pipe close, drain and exit.
    let meta = shardrec_shard::RecordingDir::open(scratch.shards())
        .read_meta()
        .unwrap();
    assert!(
        meta.stats.is_none(),
        "a killed recording has no final statistics"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    for &pid in &meta.recorder_pids[1..] {
        while running(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "helper {pid} outlived its coordinator"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    let output = merge(&scratch);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report = perf(&["report", "--stdio"], &scratch.output());
    assert_no_complaint(&report, "perf report");
    // At least half of what `recorded` seconds of busy CPUs give at
    // 4 kHz: the helpers drained the rings after the kill.
    let script = perf(&["script", "-F", "time"], &scratch.output());
    let samples = String::from_utf8_lossy(&script.stdout).lines().count();
    let expected = recorded * 4000.0 * meta.cpus.len() as f64;
    assert!(
        samples as f64 > expected / 2.0,
        "{samples} samples in {recorded:.2} s, {expected:.0} expected"
    );
}

/// Whether `pid` runs (a zombie, which pid 1 may not have reaped yet, does not).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(") ")
                .map(|(_, rest)| !rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

#[test]
fn a_shard_that_is_not_a_regular_file_is_named_and_not_mapped() {
    if !require_root() {
        return;
    }
    let _serial = serial();
    let (scratch, _) = recorded("not-a-file");
    let shard = scratch.shards().join("cpu000.shard");
    std::fs::remove_file(&shard).unwrap();
    nix::unistd::mkfifo(&shard, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let output = merge(&scratch);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Named, and the other CPU's shard still merged.
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("shard cpu000.shard is cut at byte 0: 0 bytes dropped (cannot be read: not a regular file)"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let script = perf(&["script", "-F", "cpu"], &scratch.output());
    assert!(!script.stdout.is_empty(), "no samples from cpu001.shard");
}

#[test]
fn a_full_disk_cuts_the_recording_cleanly_and_the_shards_merge_elsewhere() {
    if !require_root() {
        return;
    }
    let _serial = serial();
    let disk = Tmpfs::mount(
        std::env::temp_dir().join(format!("shardrec-full-{}", std::process::id())),
        "size=24m",
    );
    let output = disk.0.join("perf.data");
    let dir = disk.0.join("perf.data.shards");
    // DWARF stacks at 20 kHz on every CPU: far more than 24 MB a second.
    let mut record = shardrec();
    record
        .args([
            "record",
            "-q",
            "-a",
            "--call-graph",
            "dwarf",
            "-F",
            "20000",
            "-o",
        ])
        .arg(&output)
        // Far longer than the disk lasts: the full disk ends it (and
        // the workload with it) within a few seconds on any host.
        .args(["--", load(), "burn-for", "100"]);
    let recorded = run(record);
    let stderr = String::from_utf8_lossy(&recorded.stderr);
    assert_eq!(recorded.status.code(), Some(1), "{stderr}");
    let expected = format!(
        "No space left on device (os error 28). Every record written before that is in {}; merge them onto a disk with room: shardrec merge {} -o OTHER",
        dir.display(),
        dir.display()
    );
    assert!(
        stderr.contains("shardrec: the recording was cut: cpu"),
        "{stderr}"
    );
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(!output.exists(), "no perf.data on the full disk");
    assert_eq!(
        processes_naming(&disk.0),
        0,
        "a process of the recording still runs"
    );
    // meta was rewritten at stop (its reserved room given back), and says why.
    let meta = shardrec_shard::RecordingDir::open(&dir)
        .read_meta()
        .unwrap();
    let stats = meta.stats.expect("the stop's statistics");
    assert!(
        stats.stopped_by.to_string().starts_with("shard cut: cpu"),
        "{:?}",
        stats.stopped_by
    );
    // Merged elsewhere: whole records only, every sample still in a ring
    // at the cut counted as lost, and perf reads it (its one complaint
    // is the loss itself).
    let elsewhere = Scratch::new("full-merged");
    let mut merge = shardrec();
    merge
        .args(["merge", "-q"])
        .arg(&dir)
        .arg("-o")
        .arg(elsewhere.output());
    let merged = run(merge);
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    let stats_text = perf(&["report", "--stats"], &elsewhere.output());
    let text = String::from_utf8_lossy(&stats_text.stdout);
    let count = |what: &str| -> u64 {
        text.lines()
            .find(|l| l.trim_start().starts_with(what))
            .and_then(|l| l.split_whitespace().nth(2))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let samples = count("SAMPLE events:");
    let lost_in_meta: u64 = stats.lost_by_event.iter().map(|loss| loss.lost).sum();
    assert!(samples > 0, "{text}");
    assert!(
        lost_in_meta > 0,
        "the samples left in the rings are counted"
    );
    assert!(count("LOST_SAMPLES events:") > 0, "{text}");
    // The one complaint besides the kernel's own losses (beside busy
    // CPUs, a writer kept off its CPU, as it would be for perf's).
    let report = perf(&["report", "--stdio"], &elsewhere.output());
    let said = String::from_utf8_lossy(&report.stderr);
    let rest: Vec<&str> = said
        .lines()
        .filter(|l| *l != "Warning:" && !l.contains("samples and lost"))
        .collect();
    let rest = std::process::Output {
        stderr: rest.join("\n").into_bytes(),
        ..report
    };
    assert_no_complaint_but_kernel_losses(&rest, &elsewhere.output(), "perf report");
    drop(disk);
}
