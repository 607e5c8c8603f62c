//! `shardrec record` against the real kernel: shards per CPU, exact counts,
//! wrap-around, self-exclusion, stopping.

mod common;

use common::*;
use shardrec_format::header::RecordType;
use shardrec_shard::StopReason;

#[test]
fn every_cpu_gets_its_own_shard() {
    let Some((_serial, scratch)) = recording_test("per-cpu") else {
        return;
    };
    record(
        &scratch,
        &["-a", "-e", "cpu-clock", "--", load(), "spin", "1"],
    );
    let recording = Recording::read(&scratch.shards());
    let online = std::thread::available_parallelism().unwrap().get();
    assert_eq!(recording.shards.len(), online);
    for (cpu, records) in &recording.shards {
        let samples: Vec<_> = records
            .iter()
            .filter(|r| r.type_ == RecordType::SAMPLE)
            .collect();
        assert!(
            samples.len() > 100,
            "CPU {cpu}: only {} samples",
            samples.len()
        );
        assert!(
            samples.iter().all(|s| s.id.cpu == *cpu),
            "CPU {cpu}'s shard holds a sample from another CPU"
        );
    }
    let stats = recording.meta.stats.expect("meta rewritten at stop");
    assert_eq!(stats.stopped_by, StopReason::WorkloadExited);
    for (cpu_stats, (cpu, records)) in stats.cpus.iter().zip(&recording.shards) {
        assert_eq!(cpu_stats.cpu, *cpu);
        assert_eq!(cpu_stats.records, records.len() as u64);
        assert!(cpu_stats.first_time > 0 && cpu_stats.first_time <= cpu_stats.last_time);
    }
}

/// N getppid calls through their tracepoint with `-c 1`: exactly N samples
/// of that pid, less the samples the kernel counted as lost for that event.
/// The side-band tracking goes on a leading dummy event (as perf's tracking
/// dummy), so the tracepoint's own loss count is of its samples alone.
fn exact_count(name: &str, extra: &[&str]) -> (u64, u64) {
    const N: u64 = 100_000;
    let scratch = Scratch::new(name);
    let n = N.to_string();
    let mut args = vec!["-e", "dummy,syscalls:sys_enter_getppid", "-c", "1"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", load(), "syscalls", &n]);
    record(&scratch, &args);
    let recording = Recording::read(&scratch.shards());
    let pid = recording.meta.workload_pid.unwrap() as u32;
    let tracepoint = &recording.meta.events[1];
    let samples = recording
        .samples()
        .filter(|s| s.id.pid == pid && tracepoint.ids.iter().any(|(_, id)| *id == s.id.id))
        .count() as u64;
    let stats = recording.meta.stats.as_ref().unwrap();
    let lost_records: u64 = stats.cpus.iter().map(|c| c.lost).sum();
    assert_eq!(lost_records, recording.lost_records());
    let lost = if stats.lost_by_event.is_empty() {
        lost_records // a kernel without per-event counts
    } else {
        stats
            .lost_by_event
            .iter()
            .filter(|(_, id, _)| tracepoint.ids.iter().any(|(_, tp)| tp == id))
            .map(|(_, _, lost)| lost)
            .sum()
    };
    assert_eq!(
        samples + lost,
        N,
        "{samples} samples + {lost} lost != {N} calls"
    );
    (samples, lost)
}

#[test]
fn every_syscall_is_recorded_or_counted_lost() {
    if !require_root() {
        return;
    }
    let _serial = serial();
    exact_count("exact", &[]);
}

#[test]
fn a_one_page_ring_wraps_and_accounts_for_every_record() {
    if !require_root() {
        return;
    }
    let _serial = serial();
    let (samples, lost) = exact_count("wrap", &["-m", "1"]);
    // 100,000 samples of 80 bytes went through a 4 KiB ring: it wrapped
    // thousands of times whatever the split between written and lost.
    assert!(
        samples * 80 > 64 * 4096,
        "only {samples} samples written ({lost} lost)"
    );
}

#[test]
fn the_recorder_does_not_record_itself() {
    let Some((_serial, scratch)) = recording_test("self") else {
        return;
    };
    let args = [
        "-a",
        "-e",
        "raw_syscalls:sys_enter",
        "-c",
        "1",
        "--",
        load(),
        "syscalls",
        "200000",
    ];
    record(&scratch, &args);
    let recording = Recording::read(&scratch.shards());
    let recorder = &recording.meta.recorder_pids;
    // The coordinator, a writer per CPU, and the VIP.
    assert_eq!(recorder.len(), 1 + recording.meta.cpus.len() + 1);
    let workload = recording.meta.workload_pid.unwrap() as u32;
    let mut theirs = 0;
    for sample in recording.samples() {
        assert!(
            !recorder.contains(&(sample.id.pid as i32)),
            "a sample of recorder process {}",
            sample.id.pid
        );
        if sample.id.pid == workload {
            theirs += 1;
        }
    }
    assert!(
        theirs >= 200_000 - recording.lost(),
        "the workload's syscalls are missing"
    );
}

/// Starts a system-wide recording, lets it run, and interrupts it with
/// `signals` SIGINTs in a row.
fn interrupt(scratch: &Scratch, signals: usize) -> std::process::ExitStatus {
    let mut child = shardrec()
        .args([
            "record",
            "-q",
            "--no-merge",
            "-a",
            "-e",
            "cpu-clock",
            "-F",
            "10000",
            "-o",
        ])
        .arg(scratch.output())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    for _ in 0..signals {
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    }
    child.wait().unwrap()
}

fn assert_stopped_cleanly(scratch: &Scratch) {
    let recording = Recording::read(&scratch.shards());
    let stats = recording.meta.stats.as_ref().expect("a final meta");
    assert_eq!(stats.stopped_by, StopReason::Signal("SIGINT".into()));
    assert!(recording.samples().count() > 1000);
    for pid in &recording.meta.recorder_pids {
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), None).is_ok();
        assert!(!alive, "recorder process {pid} outlived the recording");
    }
}

#[test]
fn sigint_stops_with_whole_shards_and_a_final_meta() {
    let Some((_serial, scratch)) = recording_test("sigint") else {
        return;
    };
    assert!(interrupt(&scratch, 1).success());
    assert_stopped_cleanly(&scratch);
}

#[test]
fn a_second_sigint_still_leaves_whole_shards() {
    let Some((_serial, scratch)) = recording_test("sigint2") else {
        return;
    };
    assert!(interrupt(&scratch, 2).success());
    assert_stopped_cleanly(&scratch);
}

/// Starts `spin SECONDS` (a busy thread per CPU beside a waiting main
/// thread) through `command`, and waits until its busy threads exist, so a
/// recording of its threads taken now finds them: the child and the ids
/// of its busy threads.
fn spinning(mut command: std::process::Command, seconds: &str) -> (std::process::Child, Vec<u32>) {
    let mut child = command.args(["spin", seconds]).spawn().unwrap();
    let pid = child.id();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for _ in 0..200 {
        let busy: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|dir| {
                dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                    .filter(|&tid| tid != pid)
                    .collect()
            })
            .unwrap_or_default();
        if busy.len() >= cpus {
            return (child, busy);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("spin did not start its {cpus} threads");
}

#[test]
fn pid_targets_are_recorded_until_they_exit() {
    let Some((_serial, scratch)) = recording_test("pid") else {
        return;
    };
    let (mut target, _) = spinning(std::process::Command::new(load()), "1");
    let pid = target.id().to_string();
    // The recording must end by itself when the target does.
    record(&scratch, &["-e", "cpu-clock", "-p", &pid]);
    target.wait().unwrap();
    let recording = Recording::read(&scratch.shards());
    assert_eq!(
        recording.meta.stats.as_ref().unwrap().stopped_by,
        StopReason::TargetsExited
    );
    let ours = recording
        .samples()
        .filter(|s| s.id.pid.to_string() == pid)
        .count();
    assert!(ours > 100, "only {ours} samples of the target");
    assert_eq!(
        ours,
        recording.samples().count(),
        "samples of other processes"
    );
}

#[test]
fn a_command_bounds_a_pid_recording_and_is_not_recorded() {
    let Some((_serial, scratch)) = recording_test("pid-command") else {
        return;
    };
    let (mut target, _) = spinning(std::process::Command::new(load()), "5");
    let pid = target.id().to_string();
    let started = std::time::Instant::now();
    // As `perf record -p PID -- sleep 0.5`: PID for half a second. -a is
    // overridden by -p, as perf warns.
    let output = record(
        &scratch,
        &["-e", "cpu-clock", "-a", "-p", &pid, "--", "sleep", "0.5"],
    );
    let elapsed = started.elapsed();
    let still_running = target.try_wait().unwrap().is_none();
    let _ = target.kill();
    let _ = target.wait();
    assert!(still_running, "the target was ended with the recording");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("PID/TID switch overriding SYSTEM"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(elapsed.as_secs_f64() < 4.0, "recorded for {elapsed:?}");
    let recording = Recording::read(&scratch.shards());
    let stats = recording.meta.stats.as_ref().unwrap();
    assert_eq!(stats.stopped_by, StopReason::WorkloadExited);
    let samples: Vec<_> = recording.samples().collect();
    assert!(samples.len() > 200, "only {} samples", samples.len());
    assert!(
        samples.iter().all(|s| s.id.pid.to_string() == pid),
        "samples of processes other than {pid} (sleep?)"
    );
}

#[test]
fn tid_targets_record_only_those_threads() {
    let Some((_serial, scratch)) = recording_test("tid") else {
        return;
    };
    let (mut target, tids) = spinning(std::process::Command::new(load()), "3");
    let chosen = tids[0].to_string();
    record(
        &scratch,
        &["-e", "cpu-clock", "-t", &chosen, "--", "sleep", "0.5"],
    );
    let _ = target.kill();
    let _ = target.wait();
    let recording = Recording::read(&scratch.shards());
    let samples: Vec<_> = recording.samples().collect();
    assert!(samples.len() > 200, "only {} samples", samples.len());
    assert!(
        samples.iter().all(|s| s.id.tid.to_string() == chosen),
        "samples of threads other than {chosen}"
    );
}

/// Samples of `args`' recording, as (pid, cpumode).
fn samples_of(scratch: &Scratch, args: &[&str]) -> Vec<(u32, u16)> {
    let _ = std::fs::remove_dir_all(scratch.shards());
    record(scratch, args);
    let recording = Recording::read(&scratch.shards());
    let cpumode = |r: &Rec| u16::from_ne_bytes([r.bytes[4], r.bytes[5]]) & 7;
    recording
        .samples()
        .map(|s| (s.id.pid, cpumode(s)))
        .collect()
}

#[test]
fn all_user_keeps_every_event_in_user_space() {
    let Some((_serial, scratch)) = recording_test("all-user") else {
        return;
    };
    // getppid in a loop: much of the time is in the kernel.
    let work = ["-e", "cpu-clock", "--", load(), "syscalls", "2000000"];
    let kernel = 1;
    let before = samples_of(&scratch, &work);
    assert!(
        before.iter().any(|&(_, mode)| mode == kernel),
        "no kernel samples to begin with"
    );
    let after = samples_of(&scratch, &[&["--all-user"][..], &work].concat());
    assert!(after.len() > 50, "only {} samples", after.len());
    assert!(
        after.iter().all(|&(_, mode)| mode != kernel),
        "kernel samples with --all-user"
    );
}

#[test]
fn no_inherit_leaves_the_children_out() {
    let Some((_serial, scratch)) = recording_test("no-inherit") else {
        return;
    };
    // The shell forks the busy child and waits for it (`; true` keeps it
    // from exec'ing the child in its place).
    let script = format!("{} spin 0.3; true", load());
    let work = ["-e", "cpu-clock", "--", "sh", "-c", &script];
    let pids = |samples: &[(u32, u16)]| {
        let mut pids: Vec<u32> = samples.iter().map(|&(pid, _)| pid).collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    };
    let inherited = samples_of(&scratch, &work);
    assert!(
        inherited.len() > 100,
        "only {} samples of the child",
        inherited.len()
    );
    let meta = Recording::read(&scratch.shards()).meta;
    assert!(pids(&inherited)
        .iter()
        .any(|&p| Some(p as i32) != meta.workload_pid));
    let alone = samples_of(&scratch, &[&["-i"][..], &work].concat());
    let meta = Recording::read(&scratch.shards()).meta;
    let shell = meta.workload_pid.unwrap() as u32;
    assert!(
        pids(&alone).iter().all(|&p| p == shell),
        "samples of {:?}, the shell is {shell}",
        pids(&alone)
    );
}

#[test]
fn a_users_processes_and_no_others() {
    let Some((_serial, scratch)) = recording_test("uid") else {
        return;
    };
    let mut as_nobody = std::process::Command::new("setpriv");
    as_nobody.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--",
        load(),
    ]);
    let (mut nobodys, _) = spinning(as_nobody, "3");
    let (mut roots, _) = spinning(std::process::Command::new(load()), "3");
    record(
        &scratch,
        &["-e", "cpu-clock", "-u", "nobody", "--", "sleep", "0.5"],
    );
    for child in [&mut nobodys, &mut roots] {
        let _ = child.kill();
        let _ = child.wait();
    }
    let recording = Recording::read(&scratch.shards());
    let samples: Vec<_> = recording.samples().collect();
    assert!(samples.len() > 200, "only {} samples", samples.len());
    // setpriv execs the spinner: nobody's process keeps setpriv's pid.
    assert!(
        samples.iter().all(|s| s.id.pid == nobodys.id()),
        "samples of processes not nobody's (root's spinner is {})",
        roots.id()
    );
}

#[test]
fn cpu_lists_record_only_those_cpus() {
    let Some((_serial, scratch)) = recording_test("cpu-list") else {
        return;
    };
    record(
        &scratch,
        &["-C", "1", "-e", "cpu-clock", "--", load(), "spin", "0.5"],
    );
    let recording = Recording::read(&scratch.shards());
    assert_eq!(recording.meta.cpus, [1]);
    assert!(!scratch.shards().join("cpu000.shard").exists());
    assert!(recording.samples().count() > 100);
    assert!(recording.samples().all(|s| s.id.cpu == 1));
}

#[test]
fn the_workloads_exit_status_is_shardrecs() {
    let Some((_serial, scratch)) = recording_test("status") else {
        return;
    };
    let status = shardrec()
        .args(["record", "-q", "--no-merge", "-o"])
        .arg(scratch.output())
        .args(["--", "sh", "-c", "exit 7"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(7));
}

#[test]
fn a_process_whose_threads_come_and_go_is_recorded() {
    let Some((_serial, scratch)) = recording_test("thread-churn") else {
        return;
    };
    // Threads that end between the listing and the open are left out, and
    // threads that start then are found by listing again (before, a thread
    // gone by the open ended the recording: "process N not found").
    let mut target = std::process::Command::new(load())
        .args(["threads", "30"])
        .spawn()
        .unwrap();
    let pid = target.id().to_string();
    for _ in 0..5 {
        let _ = std::fs::remove_dir_all(scratch.shards());
        record(
            &scratch,
            &["-p", &pid, "-e", "cpu-clock", "--", "sleep", "0.2"],
        );
    }
    target.kill().unwrap();
    target.wait().unwrap();
}

/// A process's voluntary context switches so far (each is a wakeup).
fn wakeups(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn writers_of_quiet_rings_do_not_wake() {
    let Some((_serial, scratch)) = recording_test("quiet") else {
        return;
    };
    // A workload that sleeps: no sample, no side-band, every ring empty.
    let mut command = shardrec();
    command
        .args(["record", "-q", "-e", "cpu-clock", "-o"])
        .arg(scratch.output())
        .args(["--", "sleep", "2.5"]);
    let mut recorder = command.spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(800));
    let helpers = helpers_of(recorder.id());
    // The writers are forked first, one per CPU; the VIP after them.
    let cpus = shardrec_sys::cpu::online().unwrap().len();
    let writers = &helpers[..cpus];
    let before: Vec<u64> = writers.iter().map(|&p| wakeups(p)).collect();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let after: Vec<u64> = writers.iter().map(|&p| wakeups(p)).collect();
    let status = recorder.wait().unwrap();
    assert!(status.success());
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!(
            a - b <= 2,
            "writer {i} woke {} times in a second with an empty ring",
            a - b
        );
    }
}
