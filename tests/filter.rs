//! `--filter` on sampling events: a BPF program run at each overflow
//! drops the samples it does not want in the kernel. Every term and
//! operator is checked against what the kept samples show in `perf
//! script`, and the counts against an unfiltered event of the same recording.

mod common;

use std::path::Path;
use std::process::{Child, Command};

use common::*;
use shardrec_testkit::Nobody;

/// A busy process, killed when dropped.
struct Busy(Child);

impl Busy {
    fn start(command: &mut Command) -> Busy {
        Busy(command.spawn().unwrap())
    }

    fn hot() -> Busy {
        Busy::start(Command::new(load()).args(["hot", "30"]))
    }

    fn pid(&self) -> i32 {
        self.0.id() as i32
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `--filter` counts of a kept recording's meta: (kept, dropped) per
/// event.
fn filter_counts(scratch: &Scratch) -> Vec<(String, u64, u64)> {
    let meta = shardrec_shard::RecordingDir::open(scratch.shards())
        .read_meta()
        .unwrap();
    let stats = meta.stats.expect("a stopped recording has stats");
    stats
        .filters
        .iter()
        .map(|f| (f.event.clone(), f.kept(), f.dropped()))
        .collect()
}

fn within(a: u64, b: u64, percent: u64) -> bool {
    a.abs_diff(b) * 100 <= b * percent
}

#[test]
fn a_pid_filter_keeps_one_process_and_counts_what_it_drops() {
    let Some((_serial, scratch)) = recording_test("filter-pid") else {
        return;
    };
    let (a, b) = (Busy::hot(), Busy::hot());
    std::thread::sleep(std::time::Duration::from_millis(300));
    // One recording, two alike timers: `all` unfiltered, `mine` filtered,
    // so what the filter kept and dropped is compared with what the same
    // moments gave unfiltered, however busy the host is.
    let filter = format!("pid == {}", a.pid());
    let args = [
        "-a",
        "-c",
        "1000000",
        "-e",
        "cpu-clock/name=all/",
        "-e",
        "cpu-clock/name=mine/",
        "--filter",
        &filter,
        "--",
        "sleep",
        "1",
    ];
    let stderr = record_and_merge(&scratch, &args);
    let every = samples(&scratch.output());
    let (all, kept): (Vec<&Sample>, Vec<&Sample>) = every.iter().partition(|s| s.event == "all");
    assert!(kept.iter().all(|s| s.event == "mine"));
    let of = |pid| all.iter().filter(|s| s.pid == pid).count() as u64;
    let (a_all, b_all, rest_all) = (of(a.pid()), of(b.pid()), all.len() as u64 - of(a.pid()));
    assert!(a_all > 100 && b_all > 100, "A {a_all}, B {b_all} samples");
    assert!(
        kept.iter().all(|s| s.pid == a.pid()),
        "{:?}",
        kept.iter().find(|s| s.pid != a.pid())
    );
    let a_kept = kept.len() as u64;
    assert!(
        within(a_kept, a_all, 5),
        "A: {a_kept} filtered, {a_all} not"
    );
    let [(event, kept_count, dropped)] = &filter_counts(&scratch)[..] else {
        panic!("one filter expected");
    };
    let (kept_count, dropped) = (*kept_count, *dropped);
    assert_eq!(event, "mine");
    assert_eq!(kept_count, a_kept, "the counter agrees with perf script");
    assert!(
        within(dropped, rest_all, 5),
        "dropped {dropped}, others' samples unfiltered {rest_all}"
    );
    // What is dropped is B and whatever else ran on the host meanwhile
    // (a busy CI host runs more than B): the count above says it is all of
    // it, and B was sampled (over 100 times) yet never kept.
    assert!(
        stderr.contains(&format!(
            "--filter '{filter}' on mine: {a_kept} samples kept, {dropped} dropped in the kernel"
        )),
        "{stderr}"
    );
    // The side-band is whole: B's task is still described.
    let tasks = perf(
        &["script", "--show-task-events", "-F", "comm,pid"],
        &scratch.output(),
    );
    let tasks = String::from_utf8_lossy(&tasks.stdout);
    assert!(
        tasks
            .lines()
            .any(|l| l.contains(&format!("PERF_RECORD_COMM: shardrec-load:{}/", b.pid()))),
        "no COMM of B"
    );
    assert_no_complaint(
        &perf(&["report", "--stdio"], &scratch.output()),
        "perf report",
    );
    assert_eq!(
        samples_by_linux_perf_data(&scratch.output()),
        every.len() as u64
    );
}

/// What every sample an event kept must satisfy.
type Check<'a> = Box<dyn Fn(&Sample) -> bool + 'a>;

/// Runs one recording with an event per filter (`cpu-clock/name=NAME/`
/// then `--filter`), and returns its samples by event.
fn record_filters(scratch: &Scratch, extra: &[&str], filters: &[(&str, &str)]) -> Vec<Sample> {
    let mut args: Vec<String> = ["-a", "-c", "1000000"].map(String::from).to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    for (name, filter) in filters {
        args.extend([
            "-e".into(),
            format!("cpu-clock/name={name}/"),
            "--filter".into(),
            filter.to_string(),
        ]);
    }
    args.extend(["--", "sleep", "1"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    record_and_merge(scratch, &args);
    samples(&scratch.output())
}

#[test]
fn every_term_and_operator_keeps_exactly_what_it_says() {
    let Some((_serial, scratch)) = recording_test("filter-terms") else {
        return;
    };
    let cgroup = TestCgroup::new("shardrec-filter-terms");
    let in_cgroup = Busy(cgroup.spin("30"));
    let a = Busy::hot();
    // A task named "fspin", run as nobody (from a copy nobody can reach).
    let named = scratch.0.join("fspin");
    std::fs::copy(load(), &named).unwrap();
    let nobody = Busy::start(
        Nobody::new(&scratch.0, &[&named])
            .command(&named)
            .args(["hot", "30"]),
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (pid_a, kernel) = (a.pid(), |ip: u64| ip >= 1 << 63);
    let cases: Vec<(&str, String, Check)> = vec![
        (
            "f_pid",
            format!("pid == {pid_a}"),
            Box::new(|s| s.pid == pid_a),
        ),
        (
            "f_tid",
            format!("tid != {pid_a}, comm == shardrec-load"),
            Box::new(|s| s.tid != pid_a && s.comm == "shardrec-load"),
        ),
        ("f_cpu", "cpu == 1".into(), Box::new(|s| s.cpu == 1)),
        ("f_cpubit", "cpu & 1".into(), Box::new(|s| s.cpu & 1 == 1)),
        ("f_user", "user".into(), Box::new(|s| !kernel(s.ip))),
        ("f_kernel", "kernel".into(), Box::new(|s| kernel(s.ip))),
        (
            "f_ip",
            "ip >= 0x8000000000000000".into(),
            Box::new(|s| kernel(s.ip)),
        ),
        (
            "f_iplow",
            "ip < 0x8000000000000000, ip > 0".into(),
            Box::new(|s| !kernel(s.ip) && s.ip > 0),
        ),
        (
            "f_period",
            "period <= 1000000, period >= 1000000".into(),
            Box::new(|s| s.period == 1_000_000),
        ),
        ("f_none", "period > 1000000".into(), Box::new(|_| false)),
        (
            "f_uid",
            "uid == nobody".into(),
            Box::new(|s| s.pid == nobody.pid()),
        ),
        (
            "f_gid",
            "gid == 65534".into(),
            Box::new(|s| s.pid == nobody.pid()),
        ),
        (
            "f_cgroup",
            "cgroup == /shardrec-filter-terms".into(),
            Box::new(|s| s.pid == in_cgroup.pid()),
        ),
        (
            "f_comm",
            "comm == fspin".into(),
            Box::new(|s| s.comm == "fspin"),
        ),
        (
            "f_prefix",
            "comm == shardrec-lo*".into(),
            Box::new(|s| s.comm.starts_with("shardrec-lo")),
        ),
        (
            "f_or",
            format!("(pid == {pid_a} || comm == fspin)"),
            Box::new(|s| s.pid == pid_a || s.comm == "fspin"),
        ),
    ];
    let given: Vec<(&str, &str)> = cases.iter().map(|(n, f, _)| (*n, f.as_str())).collect();
    let all = record_filters(&scratch, &[], &given);
    let of = |name: &'static str| all.iter().filter(move |s| s.event == name);
    let counts = filter_counts(&scratch);
    for (name, _, holds) in &cases {
        let kept: Vec<&Sample> = of(name).collect();
        if let Some(bad) = kept.iter().find(|s| !holds(s)) {
            panic!("{name} kept {bad:?}");
        }
        let (_, kept_count, dropped) = counts.iter().find(|(e, _, _)| e == name).unwrap();
        assert_eq!(
            *kept_count,
            kept.len() as u64,
            "{name}: counter and samples"
        );
        match *name {
            "f_none" => assert!(
                kept.is_empty() && *dropped > 1000,
                "{name}: {dropped} dropped"
            ),
            "f_period" => assert_eq!(*dropped, 0, "{name}: every sample has the period"),
            _ => assert!(
                !kept.is_empty() && *dropped > 0,
                "{name}: {} kept, {dropped} dropped",
                kept.len()
            ),
        }
    }
    // The in-cgroup spinner runs on every CPU: the cgroup term kept both.
    assert!(of("f_cgroup").any(|s| s.cpu == 0) && of("f_cgroup").any(|s| s.cpu == 1));
}

#[test]
fn addr_filters_page_faults_by_their_address() {
    let Some((_serial, scratch)) = recording_test("filter-addr") else {
        return;
    };
    let limit = 0x7000_0000_0000u64;
    let filter = format!("addr < {limit:#x}, addr != 0");
    let args = [
        "-a",
        "-d",
        "-c",
        "1",
        "-e",
        "page-faults",
        "--filter",
        &filter,
    ];
    record_and_merge(
        &scratch,
        &[&args[..], &["--", load(), "forks", "50"]].concat(),
    );
    let kept = samples_with(&scratch.output(), "comm,pid,tid,cpu,period,event,addr,ip");
    assert!(kept.len() > 100, "{} page faults kept", kept.len());
    assert!(
        kept.iter().all(|s| s.addr < limit && s.addr != 0),
        "{:?}",
        kept.iter().find(|s| s.addr >= limit)
    );
    let [(_, _, dropped)] = &filter_counts(&scratch)[..] else {
        panic!("one filter");
    };
    assert!(
        *dropped > 0,
        "faults above {limit:#x} (the stack, mmaps) were dropped"
    );
}

/// `--setup-filter pin`, as root, lets a regular user's recording filter
/// in the kernel with the pinned program (its event ids as the keys,
/// inherited by the workload's children); `unpin` removes it, after which
/// the same recording is refused with what to do. All of it runs in a
/// mount namespace of the test's own, with a bpf file system of its own
/// on /sys/fs/bpf, so the host's is never touched.
#[test]
fn a_regular_user_filters_with_the_filter_root_pinned() {
    let Some((_serial, scratch)) = recording_test("filter-pinned") else {
        return;
    };
    let shardrec = Path::new(env!("CARGO_BIN_EXE_shardrec"));
    let nobody = Nobody::new(&scratch.0, &[shardrec, Path::new(load())]);
    // The workload: the load's busy loop in a child of sh, then sh's own.
    let record = format!(
        "{nobodys_shardrec} record -N -e cpu-clock:u --filter 'comm == shardrec-load' --keep-shards -o {out} -- \
         sh -c '{load} hot 0.4; i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done'",
        nobodys_shardrec = nobody.shell_words(shardrec),
        out = scratch.output().display(),
        load = nobody.copy_of(Path::new(load())).display(),
    );
    let shardrec = shardrec.display();
    let script = format!(
        "set -x; mount -t bpf bpf /sys/fs/bpf || exit 9
         {shardrec} record --setup-filter pin || exit 10
         {record} || exit 11
         chown -R root: {dir}
         {shardrec} record --setup-filter unpin || exit 12
         test ! -e /sys/fs/bpf/shardrec_filter || exit 13
         {record} -q && exit 14
         exit 0",
        dir = scratch.0.display(),
    );
    let output = run({
        let mut unshare = Command::new("unshare");
        unshare.args(["-m", "--propagation", "private", "sh", "-c", &script]);
        unshare
    });
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    assert!(
        stderr.contains("the sample filter is pinned in /sys/fs/bpf/shardrec_filter"),
        "{stderr}"
    );
    // The user's recording kept the load's samples and only those, and
    // counted what it dropped (sh's loop).
    let counts = filter_counts(&scratch);
    let kept_samples = samples(&scratch.output());
    assert!(!kept_samples.is_empty());
    assert!(kept_samples.iter().all(|s| s.comm == "shardrec-load"));
    assert_eq!(counts.len(), 1, "{counts:?}");
    let (_, kept, dropped) = &counts[0];
    assert_eq!(*kept, kept_samples.len() as u64, "{counts:?}");
    assert!(*dropped > 50, "{counts:?}");
    // After unpin: refused, saying how to pin it.
    assert!(
        stderr
            .contains("none is pinned: root can pin one with 'shardrec record --setup-filter pin'"),
        "{stderr}"
    );
}
