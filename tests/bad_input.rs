//! Every bad input gets one clear line naming the problem, a non-zero exit
//! before anything is enabled, and no half-created recording.

mod common;

use std::process::{Command, Output};

use common::*;
use shardrec_testkit::{with_empty_bpffs, Nobody, Sysctl};

fn run(scratch: &Scratch, args: &[&str]) -> Output {
    run_as(shardrec(), scratch, args)
}

fn run_as(mut command: Command, scratch: &Scratch, args: &[&str]) -> Output {
    command
        .arg("record")
        .arg("-o")
        .arg(scratch.output())
        .args(args)
        .output()
        .unwrap()
}

/// The run failed with exactly one line of stderr containing `message`,
/// and left no shard directory.
fn assert_refused(output: &Output, scratch: &Scratch, message: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "succeeded; stderr: {stderr}");
    assert!(
        stderr.contains(message),
        "stderr lacks {message:?}: {stderr}"
    );
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "more than one line: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        !scratch.shards().exists(),
        "a shard directory was left behind"
    );
}

#[test]
fn unknown_event() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new("bad-event");
    let output = run(&scratch, &["-a", "-e", "cyles", "--", "true"]);
    assert_refused(
        &output,
        &scratch,
        "event 'cyles' not found (did you mean 'cycles'?)",
    );
    let output = run(&scratch, &["-e", "nosuchsys:nosuchevent", "--", "true"]);
    assert_refused(&output, &scratch, "event 'nosuchsys:nosuchevent' not found");
}

#[test]
fn hardware_event_without_a_pmu() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new("bad-hw");
    let output = run(&scratch, &["-a", "-e", "instructions", "--", "true"]);
    // On a machine with a PMU this records; without one it must say why.
    if !output.status.success() {
        assert_refused(
            &output,
            &scratch,
            "The instructions event is not supported on this machine",
        );
    }
}

#[test]
fn offline_or_absent_cpu() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new("bad-cpu");
    let output = run(&scratch, &["-C", "4095", "--", "true"]);
    assert_refused(&output, &scratch, "CPU 4095 is not online (online: 0-");
    let output = run(&scratch, &["-C", "1-x", "--", "true"]);
    assert_refused(&output, &scratch, "-C 1-x:");
}

#[test]
fn missing_pid() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new("bad-pid");
    // pid_max is at most 2^22, so this pid cannot exist.
    let output = run(&scratch, &["-p", "8388607"]);
    assert_refused(&output, &scratch, "process 8388607 not found");
    let output = run(&scratch, &["-t", "8388607"]);
    assert_refused(&output, &scratch, "thread 8388607 not found");
    let output = run(&scratch, &["-t", "x1"]);
    assert_refused(&output, &scratch, "-t: 'x1' is not a thread id");
}

#[test]
fn unwritable_output() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new("bad-out");
    let output = shardrec()
        .args([
            "record",
            "-a",
            "-o",
            "/proc/no-such-dir/perf.data",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains(
            "cannot write the output /proc/no-such-dir/perf.data: cannot create files in /proc/no-such-dir: No such file or directory"
        ),
        "{stderr}"
    );
    drop(scratch);
}

#[test]
fn bad_ring_size_and_options() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new("bad-opts");
    let output = run(&scratch, &["-m", "3", "--", "true"]);
    assert_refused(&output, &scratch, "power-of-two number of data pages");
    let output = run(&scratch, &["--call-graph", "xyz", "--", "true"]);
    assert_refused(&output, &scratch, "'xyz' is not a call-graph mode");
    let output = run(&scratch, &["--", "/no/such/program"]);
    assert_refused(&output, &scratch, "cannot run '/no/such/program'");
    let output = run(&scratch, &["--threads=0", "--", "true"]);
    assert_refused(&output, &scratch, "--threads: '0' is not a thread count");
    let output = run(&scratch, &["--threads=fast", "--", "true"]);
    assert_refused(&output, &scratch, "'fast' is neither a thread count");
    let output = run(&scratch, &["--switch-output=100", "--", "true"]);
    assert_refused(
        &output,
        &scratch,
        "--switch-output=100: expected signal, a time",
    );
    let output = run(
        &scratch,
        &["--switch-output", "--switch-max-files=0", "--", "true"],
    );
    assert_refused(
        &output,
        &scratch,
        "--switch-max-files=0: expected a number of files",
    );
    let output = run(
        &scratch,
        &["--switch-output=1s", "--no-merge", "--", "true"],
    );
    assert_refused(
        &output,
        &scratch,
        "--switch-output cannot be used with --no-merge",
    );
    let output = run(&scratch, &["--keep-last=1s", "--overwrite", "--", "true"]);
    assert_refused(
        &output,
        &scratch,
        "--keep-last keeps what the writers stream",
    );
    let output = run(&scratch, &["--keep-last=100", "--", "true"]);
    assert_refused(&output, &scratch, "--keep-last=100: expected a time");
}

#[test]
fn bad_merge_threads_and_slices() {
    let scratch = Scratch::new("bad-merge-opts");
    for (args, message) in [
        (&["--threads", "0"][..], "'0' is not a thread count"),
        (&["--slice-size", "100"], "a slice needs at least 4K"),
        (&["--slice-size", "3Q"], "'3Q' has an unknown size unit"),
    ] {
        let mut merge = shardrec();
        merge
            .arg("merge")
            .args(args)
            .arg(scratch.shards())
            .arg("-o")
            .arg(scratch.output());
        let output = merge.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(!scratch.output().exists());
    }
}

/// What a test run as an unprivileged user has: a scratch directory
/// nobody may write to, nobody's copies of shardrec and the load, the
/// lock that runs the tests as nobody one at a time (the process-limit
/// test counts nobody's tasks), and `perf_event_paranoid` at Debian's
/// default for as long as it lives, whatever the host had (put back on
/// drop).
struct Unprivileged {
    scratch: Scratch,
    nobody: Nobody,
    _paranoid: Sysctl,
    _lock: std::sync::MutexGuard<'static, ()>,
}

impl Unprivileged {
    fn new(name: &str) -> Unprivileged {
        static NOBODY: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let lock = NOBODY.lock().unwrap_or_else(|e| e.into_inner());
        let scratch = Scratch::new(name);
        let programs = [env!("CARGO_BIN_EXE_shardrec"), load()].map(std::path::Path::new);
        let nobody = Nobody::new(&scratch.0, &programs);
        let paranoid = Sysctl::set("/proc/sys/kernel/perf_event_paranoid", "2")
            .expect("perf_event_paranoid can be set");
        Unprivileged {
            scratch,
            nobody,
            _paranoid: paranoid,
            _lock: lock,
        }
    }

    /// shardrec as nobody, under `limits` (prlimit options; util-linux),
    /// in a mount namespace whose `/sys/fs/bpf` is empty: a filter the
    /// host has pinned is not seen.
    fn shardrec(&self, limits: &[&str]) -> Command {
        self.running(env!("CARGO_BIN_EXE_shardrec"), limits)
    }

    /// `program` (a system one, or one nobody has a copy of) as nobody.
    fn running(&self, program: &str, limits: &[&str]) -> Command {
        let program = std::path::Path::new(program);
        let mut command = Command::new("prlimit");
        command.args(limits);
        match program.is_absolute() {
            true => command.args(self.nobody.argv(program)),
            false => command.args(Nobody::SETPRIV).arg(program),
        };
        with_empty_bpffs(&command)
    }

    /// nobody's copy of the load.
    fn load(&self) -> String {
        self.nobody.copy_of(load().as_ref()).display().to_string()
    }
}

#[test]
fn no_permission_for_cpu_wide_events() {
    if !require_root() {
        return;
    }
    let user = Unprivileged::new("bad-perm");
    let scratch = &user.scratch;
    let output = run_as(
        user.shardrec(&[]),
        scratch,
        &["-a", "-e", "cpu-clock", "--", "true"],
    );
    assert_refused(&output, scratch, "no permission to record CPU-wide events");
}

#[test]
fn a_filter_without_permission_for_bpf_records_nothing() {
    if !require_root() {
        return;
    }
    // Whether or not the host has a filter pinned: nobody's namespace
    // has none.
    let user = Unprivileged::new("bad-filter-perm");
    let scratch = &user.scratch;
    let output = run_as(
        user.shardrec(&[]),
        scratch,
        &["-e", "cpu-clock:u", "--filter", "pid == 1", "--", "true"],
    );
    assert_refused(
        &output,
        scratch,
        "--filter on a sampling event needs BPF (root, or CAP_BPF with CAP_PERFMON)",
    );
    assert!(!scratch.output().exists());
}

#[test]
fn a_filter_the_verifier_refuses_records_nothing() {
    let Some((_serial, scratch)) = recording_test("bad-filter-verifier") else {
        return;
    };
    let mut command = shardrec();
    command.env("SHARDREC_FAULTS", "filter.load=EIO");
    let output = run_as(
        command,
        &scratch,
        &[
            "-a",
            "-e",
            "cpu-clock",
            "--filter",
            "pid == 1",
            "--",
            "true",
        ],
    );
    assert_refused(
        &output,
        &scratch,
        "the kernel's verifier refused the --filter program",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("its log ends: R0 !read_ok"), "{stderr}");
    assert!(!scratch.output().exists());
}

#[test]
fn a_fault_plan_with_a_mistake_is_refused_before_anything_runs() {
    let Some((_serial, scratch)) = recording_test("bad-fault-plan") else {
        return;
    };
    // A typo in a site or a fault would make a fault test pass without
    // injecting anything: each is refused with what is known, exit 2.
    let plans = [
        (
            "writer.wrte=EIO",
            "unknown site 'writer.wrte' (the sites: writer.write,",
        ),
        (
            "vip.write=ENOENT",
            "unknown fault 'ENOENT' (the faults: ENOSPC, EIO,",
        ),
        (
            "merge.round=crash@x",
            "'x' in 'merge.round=crash@x' is not a call's number",
        ),
    ];
    for (plan, message) in plans {
        let mut command = shardrec();
        command.env("SHARDREC_FAULTS", plan);
        let output = run_as(command, &scratch, &["-e", "cpu-clock", "--", "true"]);
        assert_refused(&output, &scratch, message);
        assert_eq!(output.status.code(), Some(2), "{plan}");
        assert!(!scratch.output().exists(), "{plan}");
    }
}

#[test]
fn kcore_where_the_kernel_has_none() {
    let Some((_serial, scratch)) = recording_test("bad-kcore") else {
        return;
    };
    if std::path::Path::new("/proc/kcore").exists() {
        eprintln!("this kernel has /proc/kcore: the manycore guest checks --kcore");
        return;
    }
    let output = run(
        &scratch,
        &["-a", "--kcore", "-e", "cpu-clock", "--", "true"],
    );
    assert_refused(&output, &scratch, "--kcore: /proc/kcore is not readable");
    assert!(!scratch.output().exists());
}

/// `-r` where the user may not take a real-time priority: one line and
/// perf's exit status (255: perf says "Could not set realtime priority"),
/// before anything is recorded.
#[test]
fn a_realtime_priority_the_user_may_not_take_is_one_line() {
    if !require_root() {
        return;
    }
    let user = Unprivileged::new("bad-realtime");
    let scratch = &user.scratch;
    let ran = scratch.0.join("ran");
    let touch = ["--", "touch", ran.to_str().unwrap()];
    let output = run_as(
        user.shardrec(&["--rtprio=0"]),
        scratch,
        // --no-bpf-event: without it, nobody is first warned that BPF
        // programs will not be captured.
        &[
            &["-q", "--no-bpf-event", "-r", "5", "-e", "cpu-clock:u"][..],
            &touch,
        ]
        .concat(),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(255), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("cannot run at SCHED_FIFO priority 5 (-r): Operation not permitted"),
        "{stderr}"
    );
    assert!(!ran.exists(), "the command ran");
    assert!(!scratch.output().exists() && !scratch.shards().exists());
}

#[test]
fn locked_memory_limit() {
    if !require_root() {
        return;
    }
    let user = Unprivileged::new("bad-memlock");
    let scratch = &user.scratch;
    // A user-only event on our own workload is allowed unprivileged; a 64 MiB
    // ring per CPU is far over perf_event_mlock_kb and RLIMIT_MEMLOCK, both
    // at their defaults whatever the host has.
    let _mlock = Sysctl::set("/proc/sys/kernel/perf_event_mlock_kb", "516")
        .expect("perf_event_mlock_kb can be set");
    let output = run_as(
        user.shardrec(&["--memlock=8388608"]),
        scratch,
        &["-e", "cpu-clock:u", "-m", "16384", "--", "true"],
    );
    assert_refused(&output, scratch, "over the locked-memory limit");
}

/// Tasks (processes and threads) of user `uid` now: RLIMIT_NPROC counts
/// them all.
fn tasks_of(uid: u32) -> usize {
    let tasks = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .flat_map(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/task"))
                .into_iter()
                .flatten()
        })
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("status")).ok());
    let uid_line = format!("Uid:\t{uid}\t");
    tasks.filter(|status| status.contains(&uid_line)).count()
}

#[test]
fn the_process_limit_is_named_and_nothing_is_left_behind() {
    if !require_root() {
        return;
    }
    let user = Unprivileged::new("bad-nproc");
    let scratch = &user.scratch;
    // Room for the coordinator and its held workload, not for a writer; the
    // threads that open each CPU's events cannot start either, so that
    // work falls back to the coordinator's own thread first.
    let limit = tasks_of(Nobody::UID) + 2;
    let nproc = format!("--nproc={limit}");
    let output = run_as(
        user.shardrec(&[&nproc]),
        scratch,
        &["-e", "cpu-clock:u", "--", "sleep", "30"],
    );
    // Unprivileged, the VIP is left out with a warning line first.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "succeeded; stderr: {stderr}");
    let last = stderr.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.contains("cannot start the writer of CPU 0: over the process limit (RLIMIT_NPROC"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        !scratch.shards().exists(),
        "a shard directory was left behind"
    );
    assert_eq!(
        tasks_of(Nobody::UID),
        limit - 2,
        "a process of the recording is left"
    );
}

/// shardrec under a file-descriptor limit, through prlimit (util-linux).
fn with_nofile(limit: &str) -> Command {
    let mut command = Command::new("prlimit");
    command
        .arg(format!("--nofile={limit}"))
        .arg(env!("CARGO_BIN_EXE_shardrec"));
    command
}

#[test]
fn too_few_file_descriptors_is_named() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new("bad-nofile");
    let output = run_as(with_nofile("20:20"), &scratch, &["-a", "--", "true"]);
    assert_refused(
        &output,
        &scratch,
        "file descriptors, over RLIMIT_NOFILE (hard limit 20)",
    );
}

#[test]
fn a_low_soft_file_limit_is_raised_to_the_hard_one() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new("soft-nofile");
    let output = run_as(
        with_nofile("20:4096"),
        &scratch,
        &["-q", "--no-merge", "-a", "--", "true"],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// perf record's own options are read as options, never as the command:
/// one it does not know, or one shardrec does not support yet, is a usage
/// error (status 2) before anything is opened or run; one shardrec makes
/// moot is accepted with a note.
#[test]
fn perf_options_are_options_not_the_command() {
    let scratch = Scratch::new("perf-opts");
    let ran = scratch.0.join("ran");
    let touch = ["--", "touch", ran.to_str().unwrap()];
    for (option, message) in [
        ("-x", "unknown option '-x'"),
        ("--bogus", "unknown option '--bogus'"),
        (
            "--aux-sample",
            "perf record's --aux-sample is not supported by shardrec yet",
        ),
        (
            "--synth=tasks",
            "--synth tasks: 'tasks' is not one of no, all, task, mmap, cgroup",
        ),
        (
            "--proc-map-timeout=soon",
            "--proc-map-timeout soon: not a number of milliseconds",
        ),
        ("-z=99", "-z: compression level '99' must be in [1, 22]"),
        (
            "--switch-output-event=cpu-clock/period=",
            "--switch-output-event cpu-clock/period=: event syntax error",
        ),
    ] {
        let output = run(&scratch, &[&[option][..], &touch].concat());
        assert_refused(&output, &scratch, message);
        assert_eq!(output.status.code(), Some(2), "{option}");
        assert!(!ran.exists(), "{option}: the command ran");
    }
    // --dry-run reads and checks the options, then stops.
    let output = run(&scratch, &[&["--dry-run"][..], &touch].concat());
    assert!(output.status.success(), "{output:?}");
    assert!(!ran.exists() && !scratch.output().exists() && !scratch.shards().exists());
    let output = run(
        &scratch,
        &[&["-u", "no-such-user-here"][..], &touch].concat(),
    );
    assert_refused(&output, &scratch, "-u: invalid user 'no-such-user-here'");
    // A value that is not a path is still the option's (--vmlinux takes
    // one), not the command; the option is noted as not needed.
    let output = run(
        &scratch,
        &[&["--dry-run", "--vmlinux", "3"][..], &touch].concat(),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("--vmlinux is not needed: perf record reads it only for the prologues of BPF scriptlets"),
        "{stderr}"
    );
    assert!(!ran.exists() && !scratch.output().exists());
    if !require_root() {
        return;
    }
    let _serial = serial();
    // An event this machine does not have, found when the plan is made
    // (tracefs needs root): refused as -e's, before the command runs.
    let output = run(
        &scratch,
        &[&["--switch-output-event=no:such_event"][..], &touch].concat(),
    );
    assert_refused(
        &output,
        &scratch,
        "--switch-output-event: event 'no:such_event' not found",
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(!ran.exists(), "--switch-output-event: the command ran");
    // A moot option gets a note, which -q silences as it does the rest.
    let note = "--aio is not needed: shardrec's writers already stream each ring with io_uring";
    for quiet in [false, true] {
        let q: &[&str] = if quiet { &["-q"] } else { &[] };
        let options = [q, &["--aio", "-e", "cpu-clock"], &touch].concat();
        let output = run(&scratch, &options);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        assert_eq!(stderr.contains(note), !quiet, "-q {quiet}: {stderr}");
    }
    assert!(ran.exists(), "the command did not run");
}

/// As perf record does for an unprivileged user under
/// `perf_event_paranoid` 2, a task recording falls back to user space
/// (`exclude_kernel`, `exclude_hv`, the event named `cpu-clock:u`) and
/// gets the user-space profile perf gets.
#[test]
fn unprivileged_recording_falls_back_to_user_space_as_perf_does() {
    if !require_root() {
        return;
    }
    let user = Unprivileged::new("user-fallback");
    let scratch = &user.scratch;
    let load = user.load();
    let work = ["-g", "-e", "cpu-clock", "--", &load, "hot", "0.5"];
    let theirs = scratch.0.join("perf.perf.data");
    let perf_run = user
        .running("perf", &[])
        .args(["record", "-q", "-o"])
        .arg(&theirs)
        .args(work)
        .output()
        .unwrap();
    assert!(perf_run.status.success(), "perf: {perf_run:?}");
    let ours = run_as(user.shardrec(&[]), scratch, &[&["-q"][..], &work].concat());
    assert!(
        ours.status.success(),
        "shardrec: {}",
        String::from_utf8_lossy(&ours.stderr)
    );
    let attrs = |file: &std::path::Path| {
        let evlist = perf(&["evlist", "-v"], file);
        String::from_utf8_lossy(&evlist.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    for (file, who) in [(&theirs, "perf"), (&scratch.output(), "shardrec")] {
        let first = attrs(file);
        assert!(first.starts_with("cpu-clock:u:"), "{who}: {first}");
        assert!(
            first.contains("exclude_kernel: 1, exclude_hv: 1"),
            "{who}: {first}"
        );
    }
    let report = caller_report(&scratch.output());
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        text.contains("hot_loop") && text.contains("hot_caller"),
        "{text}"
    );
}

#[test]
fn event_syntax_and_filter_errors_are_usage_errors() {
    if !require_root() {
        return;
    }
    let scratch = Scratch::new("bad-syntax");
    let cases: &[(&[&str], &str)] = &[
        (
            &["-e", "{cs"],
            "event syntax error: '{cs' has an unclosed '{'",
        ),
        (&["-e", "cs:uu"], "modifier 'u' is given twice"),
        (&["-e", "cycles:pppp"], "at most three 'p'"),
        (
            &["-e", "msr/bogus=1/"],
            "unknown term 'bogus' for PMU 'msr'",
        ),
        (
            &["-e", "nopmu/event=1/"],
            "event 'nopmu/event=1/' not found",
        ),
        (
            &["-e", "L1-dcache-lods"],
            "event 'L1-dcache-lods' not found",
        ),
        (
            &["-e", "cpu-clock/period=x/"],
            "term 'period' needs a number",
        ),
        (
            &["--filter", "common_pid==1", "-e", "cpu-clock"],
            "--filter 'common_pid==1' should follow a -e event",
        ),
        (
            &["-e", "cpu-clock", "--filter", "x==1"],
            "--filter 'x==1': unknown term 'x'; terms: ip user kernel pid",
        ),
        (
            &["-e", "cpu-clock", "--filter", "pid == abc"],
            "'pid' takes a number, not 'abc' (at 'abc', column 8)",
        ),
        (
            &["-e", "cpu-clock", "--filter", "pid == 1 || cpu == 0"],
            "'||' goes inside parentheses, as in perf: (A || B) (at '||', column 10)",
        ),
        (
            &["-e", "cpu-clock", "--filter", "uid == no-such-user"],
            "no user named 'no-such-user' on this host",
        ),
        (
            &["-e", "cpu-clock", "--filter", "addr > 4096"],
            "'addr' is the sample's data address: record it with -d",
        ),
        (
            &["-e", "cpu-clock", "--filter", "pid == 1", "--no-bpf-event"],
            "--filter on a sampling event is loaded by the VIP, which --no-bpf-event turns off",
        ),
        (
            &["-e", "sched:sched_switch", "--filter", "no_such_field == 1"],
            "--filter 'no_such_field == 1' is not a valid filter for sched:sched_switch",
        ),
        (
            &["-j", "sometimes"],
            "-j: unknown branch filter 'sometimes'",
        ),
        (&["--user-regs=zz"], "--user-regs: unknown register 'zz'"),
        (&["--call-graph", "lbrx"], "'lbrx' is not a call-graph mode"),
    ];
    for (args, message) in cases {
        let mut all = args.to_vec();
        all.extend(["--", "true"]);
        let output = run(&scratch, &all);
        assert_refused(&output, &scratch, message);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
    }
}
