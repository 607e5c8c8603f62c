//! `shardrec record` against the real kernel: shards per CPU, exact counts,
//! wrap-around, self-exclusion, stopping.

mod common;

use common::*;
use shardrec_format::header::{RecordHeader, RecordType};
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
            .filter(|loss| tracepoint.ids.iter().any(|&(_, tp)| tp == loss.id))
            .map(|loss| loss.lost)
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

/// The frequency `interrupt` samples at.
const INTERRUPT_HZ: f64 = 10_000.0;

/// Starts a system-wide recording beside a spinner on every CPU, lets it
/// run a second once it has started, and interrupts it with `signals`
/// SIGINTs in a row: its exit status and how long it recorded at least.
fn interrupt(scratch: &Scratch, signals: usize) -> (std::process::ExitStatus, f64) {
    let (_spinner, _) = spinning(std::process::Command::new(load()), "600");
    let child = shardrec()
        .args(["record", "-q", "--no-merge", "-a", "-e", "cpu-clock", "-F"])
        .arg(INTERRUPT_HZ.to_string())
        .arg("-o")
        .arg(scratch.output())
        .spawn()
        .unwrap();
    let child = Reaped(child);
    let started = wait_for_start(&scratch.shards());
    std::thread::sleep(std::time::Duration::from_secs(1));
    let recorded = started.elapsed().as_secs_f64();
    let pid = nix::unistd::Pid::from_raw(child.0.id() as i32);
    for _ in 0..signals {
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    }
    let mut child = child;
    (child.0.wait().unwrap(), recorded)
}

/// Checks the recording stopped by SIGINT, its helpers gone, with at least
/// half the samples `recorded` seconds of busy CPUs make at
/// `INTERRUPT_HZ` (half: a loaded host delays the timers, not by half).
fn assert_stopped_cleanly(scratch: &Scratch, recorded: f64) {
    let recording = Recording::read(&scratch.shards());
    let stats = recording.meta.stats.as_ref().expect("a final meta");
    assert_eq!(stats.stopped_by, StopReason::Signal("SIGINT".into()));
    let cpus = recording.meta.cpus.len() as f64;
    let expected = recorded * INTERRUPT_HZ * cpus;
    let samples = recording.samples().count();
    assert!(
        samples as f64 > expected / 2.0,
        "{samples} samples in {recorded:.2} s on {cpus} CPUs at {INTERRUPT_HZ} Hz"
    );
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
    let (status, recorded) = interrupt(&scratch, 1);
    assert!(status.success());
    assert_stopped_cleanly(&scratch, recorded);
}

#[test]
fn a_second_sigint_still_leaves_whole_shards() {
    let Some((_serial, scratch)) = recording_test("sigint2") else {
        return;
    };
    let (status, recorded) = interrupt(&scratch, 2);
    assert!(status.success());
    assert_stopped_cleanly(&scratch, recorded);
}

/// Starts `spin SECONDS` (a busy thread per CPU beside a waiting main
/// thread) through `command`, and waits until its busy threads exist, so a
/// recording of its threads taken now finds them: the child (killed when
/// dropped) and the ids of its busy threads. The wait is long: a loaded
/// host may take seconds to start them, and a spinner that never starts
/// still fails.
fn spinning(mut command: std::process::Command, seconds: &str) -> (Reaped, Vec<u32>) {
    let child = Reaped(command.args(["spin", seconds]).spawn().unwrap());
    let pid = child.0.id();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
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
    panic!("spin did not start its {cpus} threads in 30 s");
}

#[test]
fn pid_targets_are_recorded_until_they_exit() {
    let Some((_serial, scratch)) = recording_test("pid") else {
        return;
    };
    let (mut target, _) = spinning(std::process::Command::new(load()), "1");
    let pid = target.0.id().to_string();
    // The recording must end by itself when the target does.
    record(&scratch, &["-e", "cpu-clock", "-p", &pid]);
    target.0.wait().unwrap();
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
    // A target that outlives the command by far: the recording must end
    // with the command, long before the target would.
    let (mut target, _) = spinning(std::process::Command::new(load()), "60");
    let pid = target.0.id().to_string();
    let started = std::time::Instant::now();
    // As `perf record -p PID -- sleep 0.5`: PID for half a second. -a is
    // overridden by -p, as perf warns.
    let output = record(
        &scratch,
        &["-e", "cpu-clock", "-a", "-p", &pid, "--", "sleep", "0.5"],
    );
    let elapsed = started.elapsed();
    let still_running = target.0.try_wait().unwrap().is_none();
    drop(target);
    assert!(still_running, "the target was ended with the recording");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("PID/TID switch overriding SYSTEM"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Half the target's life: the command, not the target, ended it.
    assert!(elapsed.as_secs_f64() < 30.0, "recorded for {elapsed:?}");
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
    // Killed once recorded: long enough for any host.
    let (target, tids) = spinning(std::process::Command::new(load()), "600");
    let chosen = tids[0].to_string();
    record(
        &scratch,
        &["-e", "cpu-clock", "-t", &chosen, "--", "sleep", "0.5"],
    );
    drop(target);
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
    let cpumode = |r: &Rec| RecordHeader::parse(&r.bytes).unwrap().misc & 7;
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
    // getppid in a loop for half a second: much of the time is in the
    // kernel, the rest in user space.
    let work = ["-e", "cpu-clock", "--", load(), "syscalls-for", "0.5"];
    let kernel = 1;
    let before = samples_of(&scratch, &work);
    assert!(
        before.iter().any(|&(_, mode)| mode == kernel),
        "no kernel samples to begin with"
    );
    let user = before.iter().filter(|&&(_, mode)| mode != kernel).count();
    assert!(user > 0, "no user samples to begin with");
    // The same half second with --all-user keeps about the user samples
    // (at least half of them: the share in user space varies run to run).
    let after = samples_of(&scratch, &[&["--all-user"][..], &work].concat());
    assert!(
        after.len() * 2 > user,
        "only {} samples, {user} in user space without --all-user",
        after.len()
    );
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
    let load = std::path::Path::new(load());
    let as_nobody = shardrec_testkit::Nobody::new(&scratch.0, &[load]).command(load);
    // Killed once recorded: long enough for any host.
    let (nobodys, _) = spinning(as_nobody, "600");
    let (roots, _) = spinning(std::process::Command::new(load), "600");
    let (nobodys_pid, roots_pid) = (nobodys.0.id(), roots.0.id());
    record(
        &scratch,
        &["-e", "cpu-clock", "-u", "nobody", "--", "sleep", "0.5"],
    );
    drop((nobodys, roots));
    let recording = Recording::read(&scratch.shards());
    let samples: Vec<_> = recording.samples().collect();
    assert!(samples.len() > 200, "only {} samples", samples.len());
    // setpriv execs the spinner: nobody's process keeps setpriv's pid.
    assert!(
        samples.iter().all(|s| s.id.pid == nobodys_pid),
        "samples of processes not nobody's (root's spinner is {roots_pid})"
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
    // Killed after the recordings: long enough for any host.
    let target = std::process::Command::new(load())
        .args(["threads", "600"])
        .spawn()
        .unwrap();
    let target = Reaped(target);
    let pid = target.0.id().to_string();
    for _ in 0..5 {
        let _ = std::fs::remove_dir_all(scratch.shards());
        record(
            &scratch,
            &["-p", &pid, "-e", "cpu-clock", "--", "sleep", "0.2"],
        );
    }
    drop(target);
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
    // It sleeps far longer than the test and is ended by SIGINT.
    let mut command = shardrec();
    command
        .args(["record", "-q", "-e", "cpu-clock", "-o"])
        .arg(scratch.output())
        .args(["--", "sleep", "600"]);
    let mut recorder = Reaped(command.spawn().unwrap());
    // Once the recording runs, its writers are up; a moment more lets
    // them settle past their start.
    wait_for_start(&scratch.shards());
    std::thread::sleep(std::time::Duration::from_millis(300));
    let helpers = helpers_of(recorder.0.id());
    // The writers are forked first, one per CPU; the VIP after them.
    let cpus = shardrec_sys::cpu::online().unwrap().len();
    assert!(helpers.len() >= cpus, "helpers {helpers:?} for {cpus} CPUs");
    let writers = &helpers[..cpus];
    let before: Vec<u64> = writers.iter().map(|&p| wakeups(p)).collect();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let after: Vec<u64> = writers.iter().map(|&p| wakeups(p)).collect();
    let pid = nix::unistd::Pid::from_raw(recorder.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    // As perf: the workload still running is ended with SIGTERM, and its
    // status is the recorder's.
    let status = recorder.0.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 15), "{status}");
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!(
            a - b <= 2,
            "writer {i} woke {} times in a second with an empty ring",
            a - b
        );
    }
}

/// perf changes an event the kernel refuses (cycles without a PMU becomes
/// cpu-clock) and says so only with -v; shardrec's summary always does,
/// and only when it happened: the event perf.data names decides which.
#[test]
fn the_summary_says_when_an_event_was_recorded_otherwise_than_asked() {
    let Some((_serial, scratch)) = recording_test("changed-event") else {
        return;
    };
    let stderr = record_and_merge(&scratch, &["-e", "cycles", "--", load(), "spin", "0.1"]);
    let evlist = perf(&["evlist"], &scratch.output());
    let evlist = String::from_utf8_lossy(&evlist.stdout);
    let name = evlist.lines().next().expect("an event").trim();
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("recorded as"))
        .collect();
    match name.starts_with("cpu-clock") {
        true => assert_eq!(
            said,
            [format!(
                "  event cycles recorded as {name}: no hardware PMU here, so cpu-clock, as perf falls back"
            )],
            "{stderr}"
        ),
        false => assert!(said.is_empty(), "{name}: {stderr}"),
    }
}

/// perf's --timestamp-boundary asks for the first and last samples' times
/// in the header; shardrec always writes them (with -B too, where perf
/// 6.1 writes zeros), so the option is accepted with a note.
#[test]
fn the_timestamp_boundary_is_always_recorded() {
    let Some((_serial, scratch)) = recording_test("timestamp-boundary") else {
        return;
    };
    let args = [
        "-B",
        "--timestamp-boundary",
        "-e",
        "cpu-clock",
        "--",
        load(),
        "spin",
        "0.2",
    ];
    let stderr = record_and_merge(&scratch, &args);
    assert!(
        stderr.contains("--timestamp-boundary is not needed: shardrec always records"),
        "{stderr}"
    );
    let header = perf(&["report", "--header-only"], &scratch.output());
    let header = String::from_utf8_lossy(&header.stdout);
    let duration = header
        .lines()
        .find_map(|l| l.strip_prefix("# sample duration :"))
        .expect("a sample duration line");
    let ms: f64 = duration
        .trim()
        .trim_end_matches(" ms")
        .trim()
        .parse()
        .unwrap();
    assert!(ms > 100.0, "sample duration {ms} ms for 0.2 s of samples");
}

/// Field `n` (from 1, as proc(5) counts) of `/proc/PID/stat`.
fn stat_field(pid: i32, n: usize) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command's closing parenthesis, from the state (3rd).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    fields[n - 3].parse().unwrap()
}

/// The time slice `/proc/PID/sched` shows, on kernels with slices of a
/// task's own (6.12 on).
fn slice_of(pid: i32) -> Option<u64> {
    let sched = std::fs::read_to_string(format!("/proc/{pid}/sched")).ok()?;
    let line = sched.lines().find(|l| l.starts_with("se.slice"))?;
    line.split(':').nth(1)?.trim().parse().ok()
}

/// `/proc/PID/stat`'s scheduling policy and real-time priority.
fn policy_of(pid: i32) -> (u32, u32) {
    (stat_field(pid, 41) as u32, stat_field(pid, 40) as u32)
}

/// The writers run at normal priority, as perf's reading thread does: at
/// SCHED_FIFO a writer preempts the workload on its CPU at every wakeup.
/// `-r N` puts them at SCHED_FIFO N, as perf's `-r` puts its thread.
/// The live merger runs five nice levels above the recorder, either way,
/// and the writers at normal priority and the merger ask for short time
/// slices where the kernel has them.
#[test]
fn writers_run_at_normal_priority_unless_r_asks() {
    let Some((_serial, scratch)) = recording_test("realtime") else {
        return;
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (asked, policy) in [(None, (0, 0)), (Some("7"), (1, 7))] {
        let mut command = shardrec();
        command
            .args(["record", "-q", "-a", "-e", "cpu-clock", "-o"])
            .arg(scratch.output());
        if let Some(priority) = asked {
            command.args(["-r", priority]);
        }
        let mut child = Reaped(command.args(["--", "sleep", "1"]).spawn().unwrap());
        wait_for_start(&scratch.shards());
        // The writers are forked first, one per CPU.
        let helpers = helpers_of(child.0.id());
        let writers = &helpers[..cpus];
        let policies: Vec<(u32, u32)> = writers.iter().map(|&pid| policy_of(pid)).collect();
        assert_eq!(policies, vec![policy; cpus], "-r {asked:?}");
        // After the writers, the VIP (SCHED_FIFO 1) and the live merger.
        let merger: Vec<i32> = (helpers[cpus..].iter().copied())
            .filter(|&pid| policy_of(pid).0 == 0)
            .collect();
        let nice: Vec<i64> = merger.iter().map(|&pid| stat_field(pid, 19)).collect();
        let recorder = stat_field(child.0.id() as i32, 19);
        assert_eq!(nice, [(recorder - 5).max(-20)], "the merger's nice level");
        if slice_of(child.0.id() as i32).is_some() {
            let short = writers
                .iter()
                .copied()
                .filter(|_| asked.is_none())
                .chain(merger);
            for pid in short {
                assert_eq!(slice_of(pid), Some(300_000), "pid {pid}, -r {asked:?}");
            }
        }
        assert!(wait_bounded(&mut child.0).success());
    }
}

/// The live merger writes perf record's order, not a sorted one: every
/// record after FINISHED_ROUND k is no earlier than the latest record
/// before FINISHED_ROUND k-1 (tools/perf/util/ordered-events.c), and perf
/// reads the file with nothing out of order, every sample in place.
#[test]
fn a_live_perf_data_keeps_perfs_round_rule() {
    let Some((_serial, scratch)) = recording_test("live-rounds") else {
        return;
    };
    let mut command = shardrec();
    command
        .args(["record", "-a", "-e", "cpu-clock", "-F", "4000"])
        .args(["--keep-shards", "-o"])
        .arg(scratch.output())
        .args(["--", load(), "spin", "1.5"]);
    let output = run(command);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("merged while recording"), "{stderr}");
    assert!(!stderr.contains("out of order"), "{stderr}");
    let shards = Recording::read(&scratch.shards());
    let raw = raw_times(&scratch.output(), &shards.meta.layouts());
    let rounds = assert_perfs_round_rule(&raw);
    // A round comes once the two busy rings hold 128 KiB more, at least
    // once a second: half that many rounds at least, and two.
    let bytes = std::fs::metadata(scratch.output()).map_or(0, |m| m.len());
    let least = (bytes as usize / (256 << 10)).max(2);
    assert!(
        rounds >= least,
        "{rounds} rounds in {bytes} bytes, where a round aims at 128 KiB"
    );
    let in_shards = shards.samples().count();
    let raw_samples = raw.iter().filter(|(t, _)| *t == RecordType::SAMPLE);
    assert_eq!(raw_samples.count(), in_shards);
    let stats = perf(&["report", "--stats"], &scratch.output());
    assert_no_complaint(&stats, "perf report --stats");
    let times = perf_script_times(&scratch.output());
    assert_eq!(times.len(), in_shards, "perf script's samples");
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "perf script goes back"
    );
    assert_eq!(
        samples_by_linux_perf_data(&scratch.output()),
        in_shards as u64
    );
}
