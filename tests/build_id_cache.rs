//! Build ids as perf record keeps them: in the header for every binary
//! samples fell in, and in the build-id cache (`~/.debug`; each test
//! gives shardrec and perf a home of its own), so `perf report` resolves
//! a binary's symbols after the binary is gone; `-N` skips the cache, `-B`
//! the build ids altogether.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// perf with `HOME=home`, so its cache is `home/.debug` (and `--force`:
/// root's files).
fn perf_in(home: &Path, args: &[&str], file: &Path) -> String {
    let output = Command::new("perf")
        .env("HOME", home)
        .env_remove("PERF_BUILDID_DIR")
        .args(args)
        .arg("-i")
        .arg(file)
        .arg("--force")
        .output()
        .unwrap();
    assert!(output.status.success(), "perf {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Records `binary hot 1` with `options` and `HOME=home`.
fn record_binary(scratch: &Scratch, home: &Path, binary: &Path, options: &[&str]) {
    let _ = std::fs::remove_file(scratch.output());
    let mut record = shardrec();
    record
        .env("HOME", home)
        .env_remove("PERF_BUILDID_DIR")
        .args(["record", "-q", "-e", "cpu-clock", "-o"])
        .arg(scratch.output())
        .args(options)
        .arg("--")
        .arg(binary)
        .args(["hot", "1"]);
    let output = run(record);
    assert!(output.status.success(), "{output:?}");
}

#[test]
fn a_binary_samples_fell_in_is_cached_and_resolves_after_it_is_gone() {
    let Some((_serial, scratch)) = recording_test("build-id-cache") else {
        return;
    };
    let home = scratch.0.join("home");
    let cache = home.join(".debug");
    let binary = scratch.0.join("fresh-load");
    let copy = || std::fs::copy(load(), &binary).unwrap();
    copy();
    record_binary(&scratch, &home, &binary, &[]);
    let list = perf_in(&home, &["buildid-list"], &scratch.output());
    let path = binary.to_str().unwrap();
    let id = list
        .lines()
        .find_map(|l| l.strip_suffix(path).map(str::trim))
        .unwrap_or_else(|| panic!("no build id of {path} in:\n{list}"))
        .to_string();
    // The header lists exactly the binaries perf finds samples in when it
    // walks the file itself (`-H`): the live merge hops over samples as
    // it writes them and finds their binaries in its output behind it.
    let hit = perf_in(&home, &["buildid-list", "-H"], &scratch.output());
    let sorted = |list: &str| {
        let mut lines: Vec<String> = list.lines().map(str::to_string).collect();
        lines.sort();
        lines
    };
    assert_eq!(
        sorted(&list),
        sorted(&hit),
        "the header against perf's walk"
    );
    let cached = cache
        .join(path.trim_start_matches('/'))
        .join(&id)
        .join("elf");
    assert_eq!(
        std::fs::read(&cached).unwrap(),
        std::fs::read(&binary).unwrap()
    );
    let link = cache.join(".build-id").join(&id[..2]).join(&id[2..]);
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        Path::new("../..")
            .join(path.trim_start_matches('/'))
            .join(&id)
    );
    assert!(
        cache.join("[kernel.kallsyms]").exists(),
        "the kernel's symbols"
    );
    let by_symbol = ["report", "--stdio", "--sort", "sym"];
    std::fs::remove_file(&binary).unwrap();
    let report = perf_in(&home, &by_symbol, &scratch.output());
    assert!(
        report.contains("hot_loop"),
        "not resolved from the cache:\n{report}"
    );

    // -N: build ids in the header, none cached; with the binary gone,
    // perf cannot name its functions (the check above can fail).
    let other = scratch.0.join("home-n");
    copy();
    record_binary(&scratch, &other, &binary, &["-N"]);
    assert!(!other.join(".debug").exists(), "-N wrote a cache");
    assert!(perf_in(&other, &["buildid-list"], &scratch.output()).contains(path));
    std::fs::remove_file(&binary).unwrap();
    let report = perf_in(&other, &by_symbol, &scratch.output());
    assert!(
        !report.contains("hot_loop"),
        "resolved without a cache?\n{report}"
    );

    // -B: no build ids at all.
    copy();
    record_binary(&scratch, &other, &binary, &["-B"]);
    assert!(!other.join(".debug").exists(), "-B wrote a cache");
    assert_eq!(
        perf_in(&other, &["buildid-list"], &scratch.output()).trim(),
        ""
    );

    // --buildid-all: every binary the workload mapped, hit or not. Which
    // ones its samples hit varies from run to run (the clock it loops on
    // is read in the vDSO, and a sample or none may fall in the loader,
    // libc or libgcc_s), so the check is that all of them are listed.
    record_binary(&scratch, &other, &binary, &["-N", "--buildid-all"]);
    let all = perf_in(&other, &["buildid-list"], &scratch.output());
    let mapped = [
        "[kernel.kallsyms]",
        path,
        "ld-linux",
        "libc.so",
        "libgcc_s",
        "[vdso]",
    ];
    for name in mapped {
        assert!(
            all.contains(name),
            "--buildid-all leaves out {name}:\n{all}"
        );
    }
}

/// `shardrec archive` of the recording, with `HOME=home`; its stdout.
fn archive(scratch: &Scratch, home: &Path) -> String {
    let mut archive = shardrec();
    archive
        .env("HOME", home)
        .env_remove("PERF_BUILDID_DIR")
        .arg("archive")
        .arg(scratch.output());
    let output = run(archive);
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Unpacks the recording's archive into `home/.debug`, as perf archive
/// says to, and checks that `perf report` of `file` there names the
/// binary's hot function.
fn resolves_from_the_archive(scratch: &Scratch, home: &Path, file: &Path) {
    let debug = home.join(".debug");
    std::fs::create_dir_all(&debug).unwrap();
    let mut tarball = scratch.output().into_os_string();
    tarball.push(".tar.bz2");
    let untar = Command::new("tar")
        .arg("xf")
        .arg(&tarball)
        .arg("-C")
        .arg(&debug)
        .status();
    assert!(untar.unwrap().success());
    let report = perf_in(home, &["report", "--stdio", "--sort", "sym"], file);
    assert!(
        report.contains("hot_loop"),
        "not resolved from the archive:\n{report}"
    );
}

#[test]
fn an_archive_resolves_the_profile_on_another_host() {
    let Some((_serial, scratch)) = recording_test("build-id-archive") else {
        return;
    };
    let (home, elsewhere) = (scratch.0.join("home"), scratch.0.join("elsewhere"));
    let binary = scratch.0.join("archived-load");
    std::fs::copy(load(), &binary).unwrap();
    record_binary(&scratch, &home, &binary, &[]);
    let stdout = archive(&scratch, &home);
    assert!(stdout.contains("tar xvf"), "{stdout}");
    // "Another host": the binary and the recording host's cache gone, the
    // archive unpacked into a fresh ~/.debug, as perf archive says.
    std::fs::remove_file(&binary).unwrap();
    std::fs::remove_dir_all(&home).unwrap();
    resolves_from_the_archive(&scratch, &elsewhere, &scratch.output());
}

/// A file's build id in hex, as perf buildid-list prints it.
fn build_id_of(path: &Path) -> String {
    let id = shardrec_perfdata::build_id::read_build_id(path)
        .unwrap()
        .expect("a build id");
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The build id `perf buildid-list` gives `path` in `file`, if any.
fn listed_id(home: &Path, file: &Path, path: &Path) -> Option<String> {
    let list = perf_in(home, &["buildid-list"], file);
    let path = path.to_str().unwrap();
    list.lines()
        .find_map(|l| l.strip_suffix(path).map(|id| id.trim().to_string()))
}

#[test]
fn a_binary_replaced_while_recording_keeps_its_own_build_id() {
    let Some((_serial, scratch)) = recording_test("build-id-replaced") else {
        return;
    };
    let home = scratch.0.join("home");
    let binary = scratch.0.join("replaced-load");
    let other = scratch.0.join("other-binary");
    let replace = |build_id_mmap: &[&str]| {
        std::fs::copy(load(), &binary).unwrap();
        std::fs::copy(env!("CARGO_BIN_EXE_shardrec"), &other).unwrap();
        // The workload runs the binary, then renames another over it: at
        // the merge the path names a file with another build id.
        let script = format!(
            "{} hot 0.5 && mv {} {}",
            binary.display(),
            other.display(),
            binary.display()
        );
        let _ = std::fs::remove_file(scratch.output());
        let mut record = shardrec();
        record
            .env("HOME", &home)
            .env_remove("PERF_BUILDID_DIR")
            .args(["record", "-e", "cpu-clock", "-o"])
            .arg(scratch.output())
            .args(build_id_mmap)
            .args(["--", "sh", "-c", &script]);
        let output = run(record);
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let original = {
        std::fs::copy(load(), &binary).unwrap();
        build_id_of(&binary)
    };
    assert_ne!(
        original,
        build_id_of(Path::new(env!("CARGO_BIN_EXE_shardrec")))
    );
    // With --buildid-mmap the kernel's MMAP2 carries the build id of the
    // file that was mapped: the header names it, and the cache refuses the
    // file now at that path instead of filing it under the old id.
    let stderr = replace(&["--buildid-mmap"]);
    let listed = listed_id(&home, &scratch.output(), &binary);
    assert_eq!(listed.as_deref(), Some(&original[..]), "{stderr}");
    assert!(stderr.contains("replaced since it was mapped"), "{stderr}");
    let cached = home
        .join(".debug")
        .join(binary.to_str().unwrap().trim_start_matches('/'));
    assert!(!cached.exists(), "the replacement was cached");
    // Without it the merge can only read the path, whose file is another:
    // it leaves the binary out rather than name the wrong one.
    replace(&["--no-buildid-mmap"]);
    assert_eq!(listed_id(&home, &scratch.output(), &binary), None);
}

#[test]
fn a_recording_merged_where_its_binaries_are_gone_keeps_their_build_ids() {
    let Some((_serial, scratch)) = recording_test("build-id-elsewhere") else {
        return;
    };
    let (home, elsewhere) = (scratch.0.join("home"), scratch.0.join("elsewhere"));
    let binary = scratch.0.join("moved-load");
    std::fs::copy(load(), &binary).unwrap();
    let id = build_id_of(&binary);
    record_binary(
        &scratch,
        &home,
        &binary,
        &["--keep-shards", "--buildid-mmap"],
    );
    archive(&scratch, &home);
    // Another root: the binary renamed away and the recording host's cache
    // gone; the shards merged again there, under another host name (so
    // nothing is read from this host's files or /sys).
    std::fs::rename(&binary, scratch.0.join("renamed-away")).unwrap();
    std::fs::remove_dir_all(&home).unwrap();
    let shards = shardrec_shard::RecordingDir::open(scratch.shards());
    let mut meta = shards.read_meta().unwrap();
    assert!(
        !meta.host.kernel_build_ids.is_empty(),
        "the kernel's build id is in meta"
    );
    meta.host.hostname = "another-host".into();
    shards.write_meta(&meta).unwrap();
    let merged = scratch.0.join("elsewhere.data");
    let mut merge = shardrec();
    merge
        .env("HOME", &elsewhere)
        .env_remove("PERF_BUILDID_DIR")
        .args(["merge", "-q", "-N"])
        .arg(scratch.shards())
        .arg("-o")
        .arg(&merged);
    let output = run(merge);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        listed_id(&elsewhere, &merged, &binary).as_deref(),
        Some(&id[..])
    );
    let list = perf_in(&elsewhere, &["buildid-list"], &merged);
    let (_, kernel_id) = &meta.host.kernel_build_ids[0];
    let kernel_id: String = kernel_id.iter().map(|b| format!("{b:02x}")).collect();
    assert!(
        list.contains(&format!("{kernel_id} [kernel.kallsyms]")),
        "the kernel's, as recorded: {list}"
    );
    // The archive made on the recording host resolves it.
    resolves_from_the_archive(&scratch, &elsewhere, &merged);
}

/// The kernel marks other recordings' MMAP2 records as carrying a build id
/// once an event with `attr.build_id` saw the same mapping (see
/// `shardrec_sys::build_id_probe`), which makes perf 6.1 abort: shardrec's
/// default must leave a perf record running beside it unharmed.
#[test]
fn a_perf_record_beside_shardrec_reads_its_own_maps() {
    let Some((_serial, scratch)) = recording_test("beside-perf") else {
        return;
    };
    let probe = shardrec_sys::build_id_probe::probe().unwrap();
    eprintln!("this kernel's build ids in MMAP2: {probe:?}");
    // shardrec records until told to stop, and perf starts only once it
    // records: however slow the host, perf's whole run is beside it.
    let mut ours = Reaped(
        shardrec()
            .args(["record", "-q", "-a", "-e", "cpu-clock", "-o"])
            .arg(scratch.output())
            .stderr(std::fs::File::create(scratch.0.join("stderr")).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_for_start(&scratch.shards());
    let theirs = scratch.0.join("perf.perf.data");
    let perf = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-o"])
        .arg(&theirs)
        .args([
            "--",
            "sh",
            "-c",
            "for i in 1 2 3 4 5 6 7 8; do /bin/true; done",
        ])
        .output()
        .unwrap();
    assert!(
        ours.0.try_wait().unwrap().is_none(),
        "shardrec stopped before perf ended"
    );
    let pid = nix::unistd::Pid::from_raw(ours.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = wait_bounded(&mut ours.0);
    let stderr = std::fs::read_to_string(scratch.0.join("stderr")).unwrap();
    assert!(
        perf.status.success(),
        "perf record beside shardrec: {perf:?}"
    );
    assert!(status.success(), "shardrec: {status}: {stderr}");
    // perf asked for no build ids: none of its map events may say one.
    let maps = perf_in(&scratch.0, &["script", "--show-mmap-events"], &theirs);
    let marked: Vec<&str> = maps
        .lines()
        .filter(|l| l.contains("MMAP2") && l.contains('<'))
        .collect();
    assert!(
        marked.is_empty(),
        "perf's map events marked with build ids: {marked:?}"
    );
}

/// perf profiling shardrec itself sees every mapping shardrec makes: none
/// may come out marked with a build id (finding out whether the kernel
/// would mark it takes an event that asks for build ids, so shardrec only
/// asks with `--buildid-mmap`; perf 6.1 aborted on its own file when it
/// did at every start).
#[test]
fn a_perf_record_of_shardrec_itself_reads_its_own_maps() {
    let Some((_serial, scratch)) = recording_test("perf-of-shardrec") else {
        return;
    };
    let theirs = scratch.0.join("perf.perf.data");
    let perf = Command::new("perf")
        .env("HOME", &scratch.0)
        .args(["record", "-q", "-g", "-F", "999", "-e", "cpu-clock", "-o"])
        .arg(&theirs)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_shardrec"))
        .args(["record", "-q", "-N", "-a", "-e", "cpu-clock", "-o"])
        .arg(scratch.output())
        .args(["--", "sleep", "0.2"])
        .output()
        .unwrap();
    assert!(perf.status.success(), "perf record of shardrec: {perf:?}");
    let report = Command::new("perf")
        .env("HOME", &scratch.0)
        .args(["report", "--stdio", "--sort", "comm,dso", "-i"])
        .arg(&theirs)
        .output()
        .unwrap();
    assert_no_complaint(&report, "perf report of perf's recording of shardrec");
    assert!(report.status.success(), "{report:?}");
    let maps = perf_in(&scratch.0, &["script", "--show-mmap-events"], &theirs);
    assert!(!maps.lines().any(|l| l.contains("MMAP2") && l.contains('<')));
}

/// A debuginfod server on 127.0.0.1 with one binary's debug info: what
/// `DEBUGINFOD_URLS` names, and the paths asked for.
struct DebuginfodServer {
    url: String,
    asked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl DebuginfodServer {
    /// Serves `debug` as the debug info of build id `id` (hex), 404 for
    /// any other; runs until the test process ends.
    fn start(id: &str, debug: Vec<u8>) -> DebuginfodServer {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (wanted, log) = (format!("/buildid/{id}/debuginfo"), asked.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut reader = BufReader::new(&stream);
                let mut request = String::new();
                let _ = reader.read_line(&mut request);
                let path = request.split_whitespace().nth(1).unwrap_or("").to_string();
                // The headers, up to the blank line.
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let (status, body) = match path == wanted {
                    true => ("200 OK", &debug[..]),
                    false => ("404 Not Found", &b""[..]),
                };
                log.lock().unwrap().push(path);
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let mut stream = &stream;
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(body);
            }
        });
        DebuginfodServer { url, asked }
    }
}

/// `objcopy ARGS`, which must succeed.
fn objcopy(args: &[&Path]) {
    let status = Command::new("objcopy").args(args).status().unwrap();
    assert!(status.success(), "objcopy {args:?}");
}

#[test]
fn debuginfod_puts_a_stripped_binarys_debug_info_in_the_cache_as_perf_does() {
    let Some((_serial, scratch)) = recording_test("build-id-debuginfod") else {
        return;
    };
    // The load binary split as distributions ship binaries: stripped, its
    // symbols in a debug file only the server has.
    let (binary, debug) = (
        scratch.0.join("stripped-load"),
        scratch.0.join("load.debug"),
    );
    objcopy(&[Path::new("--only-keep-debug"), Path::new(load()), &debug]);
    objcopy(&[Path::new("--strip-all"), Path::new(load()), &binary]);
    let id = build_id_of(&binary);
    let server = DebuginfodServer::start(&id, std::fs::read(&debug).unwrap());
    let by_symbol = ["report", "--stdio", "--sort", "sym"];
    let cached_debug = |home: &Path| {
        home.join(".debug")
            .join(binary.to_str().unwrap().trim_start_matches('/'))
            .join(&id)
            .join("debug")
    };

    // Without --debuginfod, the stripped binary's functions have no name
    // (the check below can fail).
    let plain = scratch.0.join("home-plain");
    record_binary(&scratch, &plain, &binary, &[]);
    assert!(!cached_debug(&plain).exists());
    let report = perf_in(&plain, &by_symbol, &scratch.output());
    assert!(
        !report.contains("hot_loop"),
        "named without debug info?\n{report}"
    );

    let home = scratch.0.join("home");
    let option = format!("--debuginfod={}", server.url);
    let mut record = shardrec();
    record
        .env("HOME", &home)
        .env("DEBUGINFOD_CACHE_PATH", scratch.0.join("debuginfod-cache"))
        .env_remove("PERF_BUILDID_DIR")
        .args(["record", "-e", "cpu-clock", "-o"])
        .arg(scratch.output())
        .args([&option, "--"])
        .arg(&binary)
        .args(["hot", "1"]);
    let output = run(record);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        server
            .asked
            .lock()
            .unwrap()
            .contains(&format!("/buildid/{id}/debuginfo")),
        "the server was not asked: {:?}",
        server.asked.lock().unwrap()
    );
    assert_eq!(
        std::fs::read(cached_debug(&home)).unwrap(),
        std::fs::read(&debug).unwrap(),
        "{stderr}"
    );
    assert!(stderr.contains(" with debug info)"), "{stderr}");
    // perf report finds the functions in the cached debug info.
    let report = perf_in(&home, &by_symbol, &scratch.output());
    assert!(
        report.contains("hot_loop"),
        "not named from the debug info:\n{report}"
    );

    // perf 6.12 (built with debuginfod) caches the same file in the same
    // place.
    let newer = Perf::backports();
    if shardrec_testkit::require(newer.path.is_file(), "perf 6.12 unpacked by .ci/setup") {
        // perf makes the cache in an existing home only.
        let perf_home = scratch.0.join("home-perf");
        std::fs::create_dir(&perf_home).unwrap();
        let perf_data = scratch.0.join("perf-6.12.data");
        let output = Command::new(&newer.path)
            .env("HOME", &perf_home)
            .env(
                "DEBUGINFOD_CACHE_PATH",
                scratch.0.join("debuginfod-cache-perf"),
            )
            .env_remove("PERF_BUILDID_DIR")
            .args(["record", "-q", "-e", "cpu-clock", "-o"])
            .arg(&perf_data)
            .args([&option, "--"])
            .arg(&binary)
            .args(["hot", "1"])
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        assert_eq!(
            std::fs::read(cached_debug(&perf_home)).unwrap(),
            std::fs::read(cached_debug(&home)).unwrap()
        );
    }
}
