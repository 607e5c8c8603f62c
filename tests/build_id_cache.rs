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
