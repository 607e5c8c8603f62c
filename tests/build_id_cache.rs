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

    // --buildid-all: every mapped binary, hit or not (libraries the
    // workload mapped but spent no sample in).
    let count = |options: &[&str]| {
        record_binary(&scratch, &other, &binary, options);
        perf_in(&other, &["buildid-list"], &scratch.output())
            .lines()
            .count()
    };
    let hit = count(&["-N"]);
    let all = count(&["-N", "--buildid-all"]);
    assert!(all > hit, "--buildid-all: {all} build ids, {hit} without");
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
    let mut archive = shardrec();
    archive
        .env("HOME", &home)
        .env_remove("PERF_BUILDID_DIR")
        .arg("archive")
        .arg(scratch.output());
    let output = run(archive);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout.contains("tar xvf"), "{stdout}");
    // "Another host": the binary and the recording host's cache gone, the
    // archive unpacked into a fresh ~/.debug, as perf archive says.
    std::fs::remove_file(&binary).unwrap();
    std::fs::remove_dir_all(&home).unwrap();
    let debug = elsewhere.join(".debug");
    std::fs::create_dir_all(&debug).unwrap();
    let mut tarball = scratch.output().into_os_string();
    tarball.push(".tar.bz2");
    let untar = Command::new("tar")
        .arg("xf")
        .arg(&tarball)
        .arg("-C")
        .arg(&debug)
        .status()
        .unwrap();
    assert!(untar.success());
    let report = perf_in(
        &elsewhere,
        &["report", "--stdio", "--sort", "sym"],
        &scratch.output(),
    );
    assert!(
        report.contains("hot_loop"),
        "not resolved from the archive:\n{report}"
    );
}
