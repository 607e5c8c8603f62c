//! Shared helpers of the integration tests: the binaries, scratch
//! directories, and reading a recording back record by record.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

use shardrec_format::header::{RecordHeader, RecordType};
use shardrec_format::layouts::Layouts;
use shardrec_format::views::lost_count;
use shardrec_format::walk::{End, RecordWalker};
use shardrec_format::SampleId;
use shardrec_shard::{scan::ShardBytes, Meta, RecordingDir};

pub use shardrec_testkit::require_root;

/// Recordings share two CPUs: run one at a time so counts stay exact.
/// While a recording runs, the host's sysctls are what its checks assume,
/// whatever the host had (put back after it):
/// - `perf_event_max_sample_rate` at least the kernel's default (100000):
///   the kernel lowers it by itself when sampling interrupts run long (a
///   busy VM, an earlier storm), and perf and shardrec then refuse `-F`
///   above it;
/// - `kptr_restrict` 0: the kernel's addresses readable, so samples in the
///   kernel are named (2 hides them even from root).
pub struct Serial {
    _sysctls: Vec<shardrec_testkit::Sysctl>,
    _lock: MutexGuard<'static, ()>,
}

pub fn serial() -> Serial {
    static LOCK: Mutex<()> = Mutex::new(());
    let lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let rate = "/proc/sys/kernel/perf_event_max_sample_rate";
    let low = std::fs::read_to_string(rate)
        .ok()
        .and_then(|r| r.trim().parse::<u32>().ok())
        .is_some_and(|r| r < 100_000);
    let mut sysctls = Vec::new();
    sysctls.extend(
        low.then(|| shardrec_testkit::Sysctl::set(rate, "100000"))
            .flatten(),
    );
    sysctls.extend(shardrec_testkit::Sysctl::set(
        "/proc/sys/kernel/kptr_restrict",
        "0",
    ));
    Serial {
        _sysctls: sysctls,
        _lock: lock,
    }
}

/// What a test that records needs: root (without it, `None`, after
/// `require_root` has said why or failed the test under CI), the lock that
/// runs recordings one at a time, and a scratch directory.
pub fn recording_test(name: &str) -> Option<(Serial, Scratch)> {
    if !require_root() {
        return None;
    }
    let serial = serial();
    Some((serial, Scratch::new(name)))
}

/// shardrec, with its build-id cache under `target/` (as perf, it adds
/// the binaries samples fell in to `~/.debug` otherwise).
pub fn shardrec() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_shardrec"));
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("build-id-cache");
    command.env("PERF_BUILDID_DIR", cache);
    command
}

pub fn load() -> &'static str {
    env!("CARGO_BIN_EXE_shardrec-load")
}

/// Runs a command to its end, or kills it (and its process group) and
/// fails after two minutes, so a hang fails the test instead of stalling CI.
pub fn run(command: Command) -> Output {
    run_with_stdout(command, std::process::Stdio::piped())
}

/// [`run`], with standard output `stdout` (a file, say) instead of a pipe
/// whose bytes are returned.
pub fn run_with_stdout(mut command: Command, stdout: std::process::Stdio) -> Output {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let child = command
        .process_group(0)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let group = nix::unistd::Pid::from_raw(child.id() as i32);
    let (done, timeout) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if timeout
            .recv_timeout(std::time::Duration::from_secs(120))
            .is_err()
        {
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            return true;
        }
        false
    });
    let output = child.wait_with_output().unwrap();
    let _ = done.send(());
    assert!(
        !watchdog.join().unwrap(),
        "{command:?} ran for two minutes and was killed"
    );
    output
}

/// A scratch directory removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let path =
            std::env::temp_dir().join(format!("shardrec-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Scratch(path)
    }

    pub fn output(&self) -> PathBuf {
        self.0.join("perf.data")
    }

    pub fn shards(&self) -> PathBuf {
        RecordingDir::for_output(&self.output())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `shardrec record -o OUT --no-merge ARGS...` and checks it succeeded.
pub fn record(scratch: &Scratch, args: &[&str]) -> Output {
    let mut command = shardrec();
    command
        .args(["record", "-q", "--no-merge", "-o"])
        .arg(scratch.output())
        .args(args);
    let output = run(command);
    assert!(
        output.status.success(),
        "shardrec record {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Runs `shardrec merge SHARDS -o OUT` on a scratch recording (whatever
/// its outcome: the caller checks it).
pub fn merge(scratch: &Scratch) -> Output {
    let mut command = shardrec();
    command
        .arg("merge")
        .arg(scratch.shards())
        .arg("-o")
        .arg(scratch.output());
    run(command)
}

/// One record of a shard, decoded as far as the tests need.
#[derive(Clone, Debug)]
pub struct Rec {
    pub type_: RecordType,
    pub id: SampleId,
    pub bytes: Vec<u8>,
}

/// A recording directory read back: meta and each shard's records.
pub struct Recording {
    pub meta: Meta,
    pub shards: Vec<(u32, Vec<Rec>)>,
}

impl Recording {
    pub fn read(dir: &Path) -> Recording {
        let dir = RecordingDir::open(dir);
        let meta = dir.read_meta().expect("meta reads back");
        let layouts = meta.layouts();
        let shards = meta
            .cpus
            .iter()
            .map(|&cpu| (cpu, read_shard(&dir.shard_path(cpu), &layouts)))
            .collect();
        Recording { meta, shards }
    }

    pub fn records(&self) -> impl Iterator<Item = &Rec> {
        self.shards.iter().flat_map(|(_, r)| r)
    }

    pub fn samples(&self) -> impl Iterator<Item = &Rec> {
        self.records().filter(|r| r.type_ == RecordType::SAMPLE)
    }

    /// Records the kernel reported lost in LOST records, over every shard.
    pub fn lost_records(&self) -> u64 {
        self.records()
            .filter(|r| r.type_ == RecordType::LOST)
            .map(|r| lost_count(r.type_, &r.bytes).unwrap())
            .sum()
    }

    /// Every loss the kernel counted: per-event counts read at stop where
    /// larger than what LOST records report (they miss drops after the last
    /// record that fit).
    pub fn lost(&self) -> u64 {
        let stats = self.meta.stats.as_ref().expect("a stopped recording");
        let read: u64 = stats.lost_by_event.iter().map(|loss| loss.lost).sum();
        assert!(
            read == 0 || read >= self.lost_records(),
            "per-event counts ({read}) below the LOST records ({})",
            self.lost_records()
        );
        let lost_samples = self
            .records()
            .filter(|r| r.type_ == RecordType::LOST_SAMPLES)
            .map(|r| lost_count(r.type_, &r.bytes).unwrap())
            .sum();
        shardrec_shard::dropped(self.lost_records(), read, lost_samples)
    }
}

/// Walks a shard, asserting it is a clean sequence of records whose ids
/// all belong to the recording.
pub fn read_shard(path: &Path, layouts: &Layouts) -> Vec<Rec> {
    let bytes = ShardBytes::open(path).unwrap();
    let mut walker = RecordWalker::new(bytes.bytes());
    let mut records = Vec::new();
    for record in walker.by_ref() {
        let type_ = record.header.type_;
        let raw_id = shardrec_format::sample_id::identifier(record.bytes, type_).unwrap();
        let layout = layouts.get(raw_id).unwrap_or_else(|| {
            panic!(
                "{}: record of type {type_} has unknown id {raw_id}",
                path.display()
            )
        });
        records.push(Rec {
            type_,
            id: layout.parse(record.bytes, type_).unwrap(),
            bytes: record.bytes.to_vec(),
        });
    }
    assert_eq!(
        walker.end(),
        End::Clean,
        "{} ends in a torn record",
        path.display()
    );
    records
}

/// Runs Debian's perf on a file; `--force` because the test files belong to
/// root while perf checks ownership.
pub fn perf(args: &[&str], file: &Path) -> Output {
    Perf::debian().run(args, file)
}

/// A perf that reads what the tests record.
pub struct Perf {
    pub path: PathBuf,
    /// What the tests' messages call it.
    pub name: &'static str,
}

impl Perf {
    /// Debian's perf (6.1 on Debian 12), on the PATH.
    pub fn debian() -> Perf {
        Perf {
            path: PathBuf::from("perf"),
            name: "perf",
        }
    }

    /// perf 6.12 from bookworm-backports, where `.ci/setup` unpacks it.
    pub fn backports() -> Perf {
        let env = |name: &str| std::env::var_os(name).map(PathBuf::from);
        let cache = env("XDG_CACHE_HOME").or_else(|| Some(env("HOME")?.join(".cache")));
        Perf {
            path: cache
                .expect("HOME or XDG_CACHE_HOME")
                .join("shardrec-tools/perf-6.12/bin/perf"),
            name: "perf 6.12",
        }
    }

    /// `perf ARGS -i FILE --force`, which must succeed. `script` and
    /// `report` go without inlined frames: finding them, perf 6.1 talks
    /// to an `addr2line` child through pipes, and once in a CI run of
    /// tests/consume.rs both sat reading, each waiting for the other.
    pub fn run(&self, args: &[&str], file: &Path) -> Output {
        let no_inline = matches!(args.first(), Some(&("script" | "report")));
        let output = Command::new(&self.path)
            .args(args)
            .args(no_inline.then_some("--no-inline"))
            .arg("-i")
            .arg(file)
            .arg("--force")
            .output()
            .expect("perf (linux-perf) is installed");
        assert!(
            output.status.success(),
            "{} {args:?} failed: {}",
            self.name,
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }
}

/// The perfs the reader tests read every recording with: Debian's, and
/// the newer one users of newer systems read shardrec's files with
/// (required under CI, as a skipped reader would pass silently).
pub fn perfs() -> Vec<Perf> {
    let newer = Perf::backports();
    let found = newer.path.is_file();
    let what = "perf 6.12 unpacked by .ci/setup";
    match shardrec_testkit::require(found, what) {
        true => vec![Perf::debian(), newer],
        false => vec![Perf::debian()],
    }
}

/// `perf report` by symbol, each with its callers (`-g caller`): where the
/// tests look for a hot function and the function that called it.
pub const CALLER_REPORT: [&str; 7] = [
    "report",
    "--stdio",
    "--no-children",
    "--sort",
    "sym",
    "-g",
    "caller",
];

/// [`CALLER_REPORT`] of `file`, by Debian's perf.
pub fn caller_report(file: &Path) -> Output {
    perf(&CALLER_REPORT, file)
}

/// Words in perf's stderr that mean it did not like the file.
pub const PERF_COMPLAINTS: &[&str] = &[
    "out of order",
    "non matching",
    "unsupported",
    "data size",
    "lost",
    "Lost",
    "warning",
    "Warning",
    "WARNING",
    "error",
    "Error",
    "failed",
    "Can't",
    "corrupt",
];

/// perf's stderr, after checking it holds no complaint.
pub fn assert_no_complaint(output: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    for word in PERF_COMPLAINTS {
        assert!(
            !stderr.contains(word),
            "{what}: perf said {word:?}: {stderr}"
        );
    }
}

/// perf's stderr about `file`, after checking it holds no complaint but
/// the ones about records the kernel lost (a ring full while its writer
/// was kept off its CPU, as it would be for perf: "lost N chunks" for the
/// LOST records, "lost X%" for the LOST_SAMPLES counts), and those only
/// if `file` holds LOST records.
pub fn assert_no_complaint_but_kernel_losses(output: &Output, file: &Path, what: &str) {
    let stats = perf(&["report", "--stats"], file);
    let kernel_lost = String::from_utf8_lossy(&stats.stdout)
        .lines()
        .any(|l| l.trim_start().starts_with("LOST events:"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let is_the_loss = |line: &str| {
        let lost_chunks = line.starts_with("Processed ") && line.ends_with(" chunks!");
        // The same loss as each event counted it (LOST_SAMPLES).
        let lost_samples = line.starts_with("Processed ") && line.contains(" samples and lost ");
        let said = lost_chunks || lost_samples;
        kernel_lost && (said || line == "Check IO/CPU overload!" || line == "Warning:")
    };
    let rest: Vec<&str> = stderr.lines().filter(|l| !is_the_loss(l)).collect();
    let rest = Output {
        stderr: rest.join("\n").into_bytes(),
        ..output.clone()
    };
    assert_no_complaint(&rest, what);
}

/// Two listings (perf script's lines) the same, or a failure that says
/// how many lines each has and shows the first that differ, not both
/// whole (a log keeps the end of a long message only).
pub fn assert_same_lines(got: &[String], want: &[String], what: &str) {
    if got == want {
        return;
    }
    let at = got.iter().zip(want).take_while(|(g, w)| g == w).count();
    let around =
        |lines: &[String]| lines[at.saturating_sub(2)..(at + 3).min(lines.len())].join("\n");
    panic!(
        "{what}: {} lines, {} expected; the first difference is line {at}:\n{}\n--- expected:\n{}",
        got.len(),
        want.len(),
        around(got),
        around(want)
    );
}

/// Runs `shardrec record -o OUT --keep-shards ARGS...` (merging), checks it
/// succeeded, and returns its stderr.
pub fn record_and_merge(scratch: &Scratch, args: &[&str]) -> String {
    let mut command = shardrec();
    command
        .args(["record", "--keep-shards", "-o"])
        .arg(scratch.output())
        .args(args);
    let output = run(command);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "shardrec record {args:?} failed: {stderr}"
    );
    stderr
}

/// A perf.data's data section walked raw: every record's type and time
/// (None for records without one: rounds, init).
pub fn raw_times(file: &Path, layouts: &Layouts) -> Vec<(RecordType, Option<u64>)> {
    let bytes = std::fs::read(file).unwrap();
    let mut walker = RecordWalker::new(data_section(&bytes));
    let records = walker
        .by_ref()
        .map(|r| {
            let type_ = r.header.type_;
            let time = type_.is_kernels().then(|| {
                let id = shardrec_format::sample_id::identifier(r.bytes, type_).unwrap();
                layouts.get(id).unwrap().parse(r.bytes, type_).unwrap().time
            });
            (type_, time)
        })
        .collect();
    assert_eq!(
        walker.end(),
        End::Clean,
        "the data section ends in a torn record"
    );
    records
}

/// The samples' times `perf script -F time` prints for `file`, in its
/// order, after checking perf did not complain.
pub fn perf_script_times(file: &Path) -> Vec<f64> {
    let script = perf(&["script", "-F", "time"], file);
    assert_no_complaint(&script, "perf script");
    String::from_utf8_lossy(&script.stdout)
        .lines()
        .map(|l| l.trim().trim_end_matches(':').parse().expect("a time"))
        .collect()
}

/// Checks [`raw_times`] against perf's round rule
/// (tools/perf/util/ordered-events.c): every record after FINISHED_ROUND
/// k is no earlier than the latest record before FINISHED_ROUND k-1.
/// Returns the rounds.
pub fn assert_perfs_round_rule(raw: &[(RecordType, Option<u64>)]) -> usize {
    let (mut floor, mut at_last_round, mut latest) = (0, 0, 0);
    let (mut rounds, mut broken, mut backwards) = (0, Vec::new(), 0);
    for (i, (type_, time)) in raw.iter().enumerate() {
        if *type_ == RecordType::FINISHED_ROUND {
            (floor, at_last_round) = (at_last_round, latest);
            rounds += 1;
            continue;
        }
        let Some(time) = *time else { continue };
        if time < floor {
            broken.push((i, time, floor));
        }
        backwards += u64::from(time < latest);
        latest = latest.max(time);
    }
    eprintln!("{rounds} rounds; {backwards} records earlier than one before them");
    assert_eq!(
        broken,
        [],
        "records (index, time, floor) breaking perf's round rule"
    );
    rounds
}

/// A perf.data's data section, as its header places it.
fn data_section(bytes: &[u8]) -> &[u8] {
    let (offset, size) = shardrec_perfdata::header::data_section(bytes).expect("a perf.data");
    &bytes[offset as usize..(offset + size) as usize]
}

/// Whether `record` is of type `type_`.
pub fn of_type(record: &[u8], type_: RecordType) -> bool {
    RecordHeader::parse(record).is_some_and(|h| h.type_ == type_)
}

/// Every record of a perf.data's data section, in file order.
pub fn data_records(file: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(file).unwrap();
    RecordWalker::new(data_section(&bytes))
        .map(|r| r.bytes.to_vec())
        .collect()
}

/// The content of header feature `bit` of a perf.data, if present: the
/// feature index follows the data section, one section per set bit.
pub fn feature_section(file: &Path, bit: usize) -> Option<Vec<u8>> {
    let file = std::fs::File::open(file).unwrap();
    shardrec_perfdata::header::read_feature(&file, bit).unwrap()
}

/// A cgroup made for a test in the cgroup2 hierarchy (where perf and
/// shardrec look for `-G` names without a perf_event v1 one), removed at
/// the end.
pub struct TestCgroup(pub std::path::PathBuf);

impl TestCgroup {
    pub fn new(name: &str) -> TestCgroup {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mount = info
            .lines()
            .find(|l| l.contains(" - cgroup2 "))
            .and_then(|l| l.split(' ').nth(4))
            .expect("a cgroup2 mount");
        let dir = std::path::Path::new(mount).join(name);
        let _ = std::fs::create_dir(&dir);
        TestCgroup(dir)
    }

    /// Starts `load spin SECS` inside the cgroup.
    pub fn spin(&self, seconds: &str) -> std::process::Child {
        let procs = self.0.join("cgroup.procs");
        std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {} && exec {} spin {seconds}",
                procs.display(),
                load()
            ))
            .spawn()
            .unwrap()
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Processes whose command line names `path`: what a test checks is gone.
pub fn processes_naming(path: &Path) -> usize {
    let needle = path.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|cmdline| String::from_utf8_lossy(cmdline).contains(&needle))
        .count()
}

/// The helper processes (writers, VIP) of the shardrec coordinator
/// `coordinator`: its children still named `shardrec`, in pid order (the
/// writers are forked first, one per CPU, the VIP after them).
pub fn helpers_of(coordinator: u32) -> Vec<i32> {
    let mut helpers: Vec<i32> = std::fs::read_dir(format!("/proc/{coordinator}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|pid| pid.parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "shardrec")
        })
        .collect();
    helpers.sort_unstable();
    helpers
}

/// Counts samples with linux-perf-data, parsing every record on the way.
pub fn samples_by_linux_perf_data(file: &std::path::Path) -> u64 {
    let reader = std::io::BufReader::new(std::fs::File::open(file).unwrap());
    let linux_perf_data::PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = linux_perf_data::PerfFileReader::parse_file(reader)
        .expect("linux-perf-data reads the header");
    let mut samples = 0;
    while let Some(record) = record_iter.next_record(&mut perf_file).expect("a record") {
        match record {
            linux_perf_data::PerfFileRecord::EventRecord { record, .. } => {
                record.parse().expect("linux-perf-data parses the record");
                if record.record_type.0 == RecordType::SAMPLE.0 {
                    samples += 1;
                }
            }
            linux_perf_data::PerfFileRecord::UserRecord(record) => {
                record
                    .parse()
                    .expect("linux-perf-data parses the user record");
            }
        }
    }
    samples
}

/// One sample as `perf script -F comm,pid,tid,cpu,period,event,ip,addr`
/// prints it.
#[derive(Debug)]
pub struct Sample {
    pub comm: String,
    pub pid: i32,
    pub tid: i32,
    pub cpu: u32,
    pub period: u64,
    pub event: String,
    pub ip: u64,
    pub addr: u64,
}

/// Every sample of `file`, read from the right (a comm may hold spaces).
pub fn samples(file: &Path) -> Vec<Sample> {
    samples_with(file, "comm,pid,tid,cpu,period,event,ip")
}

/// Every sample, with its fields as `fields` asks (the addr before the
/// ip, when there).
pub fn samples_with(file: &Path, fields: &str) -> Vec<Sample> {
    let with_addr = fields.contains("addr");
    // -G: a callchain would add lines.
    let output = perf(&["script", "-G", "-F", fields], file);
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut words: Vec<&str> = line.split_whitespace().collect();
            let mut take = || words.pop().unwrap_or_else(|| panic!("short line: {line}"));
            let ip = u64::from_str_radix(take(), 16).unwrap();
            let addr = match with_addr {
                true => u64::from_str_radix(take(), 16).unwrap(),
                false => 0,
            };
            let event = take().trim_end_matches(':').to_string();
            let period = take().parse().unwrap();
            let cpu = take().trim_matches(['[', ']']).parse().unwrap();
            let (pid, tid) = take().split_once('/').unwrap();
            let (pid, tid) = (pid.parse().unwrap(), tid.parse().unwrap());
            let comm = words.join(" ");
            Sample {
                comm,
                pid,
                tid,
                cpu,
                period,
                event,
                ip,
                addr,
            }
        })
        .collect()
}

/// A child killed and reaped when dropped: a test's long-lived target
/// (sized to outlast any host's slowness) is not left running when the
/// test ends early or fails part-way.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    /// A child that leads a process group of its own (spawned with
    /// `process_group(0)`) takes its group with it: perf's workload too.
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        if nix::unistd::getpgid(Some(pid)) == Ok(pid) {
            let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (at most a minute) until the recording into `shards` runs: its
/// `meta.start` is written once every writer is ready. The instant it
/// was seen, from which a test can tell how long it recorded.
pub fn wait_for_start(shards: &Path) -> std::time::Instant {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !shards.join("meta.start").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the recording into {} did not start in a minute",
            shards.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::time::Instant::now()
}

/// Waits for `child` to end, failing after two minutes as [`run`] does
/// (the [`Reaped`] holding it then kills it), so a hang fails the test
/// instead of stalling CI.
pub fn wait_bounded(child: &mut std::process::Child) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {} ran for two minutes",
            child.id()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A tmpfs mounted at a test's own path (`options` as mount(8) takes
/// them: "size=24m", "ro,size=1m"), unmounted and its directory removed
/// on drop.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    pub fn mount(at: PathBuf, options: &str) -> Tmpfs {
        std::fs::create_dir_all(&at).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(&at)
            .status()
            .unwrap();
        assert!(status.success(), "mounting a tmpfs at {}", at.display());
        Tmpfs(at)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}
