//! The Debian package (`packaging/build-deb`), built from the binary under
//! test and installed with `apt-get install ./shardrec_*.deb` into a Debian
//! 12 root of the test's own (an overlay on the minimal one `.ci/setup`
//! makes, in a mount namespace that ends with the test), where the
//! installed shardrec records a profile, `man shardrec-record` shows its
//! page, and bash completes its options; zsh and fish complete them from
//! the scripts the package installs.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// The minimal Debian 12 root `.ci/setup` makes with debootstrap.
fn debian_root() -> PathBuf {
    let env = |name: &str| std::env::var_os(name).map(PathBuf::from);
    let cache = env("XDG_CACHE_HOME").or_else(|| Some(env("HOME")?.join(".cache")));
    cache
        .expect("HOME or XDG_CACHE_HOME")
        .join("shardrec-tools/bookworm-minbase")
}

/// Builds the package from the binary under test; returns its path.
fn build_package(out: &Path) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_shardrec")).parent().unwrap();
    let mut build = Command::new("bash");
    build
        .arg(repo.join("packaging/build-deb"))
        .arg("--bin-dir")
        .arg(bin_dir)
        .arg("--out")
        .arg(out);
    let built = run(build);
    let stdout = String::from_utf8_lossy(&built.stdout);
    assert!(
        built.status.success(),
        "build-deb: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    PathBuf::from(stdout.lines().last().expect("the package's path"))
}

/// What the test runs in its own mount namespace: the overlay root, the
/// package installed into it, a recording, the man page, the completion.
const IN_THE_ROOT: &str = r#"
set -eu
m=$SCRATCH/merged
mkdir -p "$SCRATCH/upper" "$SCRATCH/work" "$m"
mount -t overlay overlay -o "lowerdir=$ROOT,upperdir=$SCRATCH/upper,workdir=$SCRATCH/work" "$m"
mount -t proc proc "$m/proc"
mount -t sysfs sysfs "$m/sys"
cp "$DEB" "$m/tmp/"
in_root() { chroot "$m" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }
in_root apt-get install -y --no-install-recommends "/tmp/$(basename "$DEB")" >"$SCRATCH/apt.txt" 2>&1
status=0
in_root shardrec record -e cpu-clock -F 1999 -o /tmp/perf.data -- \
  timeout -s INT 0.5 sh -c 'while :; do :; done' >"$SCRATCH/record.txt" 2>&1 || status=$?
echo "$status" >"$SCRATCH/record-status.txt"
in_root env MANPAGER=cat MANWIDTH=100 man shardrec-record >"$SCRATCH/man.txt" 2>&1
in_root bash -c '. /usr/share/bash-completion/completions/shardrec && complete -p shardrec' \
  >"$SCRATCH/complete.txt" 2>&1
"#;

#[test]
fn the_package_installs_into_a_fresh_debian_records_and_has_its_man_page() {
    let Some((_serial, scratch)) = recording_test("package") else {
        return;
    };
    let root = debian_root();
    assert!(
        root.join(".complete").exists(),
        "no Debian 12 root at {}: .ci/setup makes it",
        root.display()
    );
    let deb = build_package(&scratch.0.join("deb"));
    let contents = run({
        let mut c = Command::new("dpkg-deb");
        c.arg("-c").arg(&deb);
        c
    });
    let contents = String::from_utf8_lossy(&contents.stdout);
    for file in [
        "./usr/bin/shardrec",
        "./usr/share/man/man1/shardrec.1.gz",
        "./usr/share/man/man1/shardrec-record.1.gz",
        "./usr/share/man/man1/shardrec-sched.1.gz",
        "./usr/share/man/man1/shardrec-lock.1.gz",
        "./usr/share/man/man1/shardrec-kmem.1.gz",
        "./usr/share/man/man1/shardrec-kwork.1.gz",
        "./usr/share/man/man1/shardrec-trace.1.gz",
        "./usr/share/man/man1/shardrec-mem.1.gz",
        "./usr/share/man/man1/shardrec-c2c.1.gz",
        "./usr/share/man/man1/shardrec-timechart.1.gz",
        "./usr/share/man/man1/shardrec-merge.1.gz",
        "./usr/share/man/man1/shardrec-archive.1.gz",
        "./usr/share/bash-completion/completions/shardrec",
        "./usr/share/zsh/vendor-completions/_shardrec",
        "./usr/share/fish/vendor_completions.d/shardrec.fish",
    ] {
        assert!(
            contents.contains(file),
            "{file} not in the package:\n{contents}"
        );
    }
    let mut inside = Command::new("unshare");
    inside
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            IN_THE_ROOT,
        ])
        .env("SCRATCH", &scratch.0)
        .env("ROOT", &root)
        .env("DEB", &deb);
    let ran = run(inside);
    let read = |name: &str| std::fs::read_to_string(scratch.0.join(name)).unwrap_or_default();
    assert!(
        ran.status.success(),
        "{}\napt: {}\nrecord: {}\nman: {}",
        String::from_utf8_lossy(&ran.stderr),
        read("apt.txt"),
        read("record.txt"),
        read("man.txt")
    );
    let apt = read("apt.txt");
    assert!(
        apt.contains("1 newly installed, 0 to remove"),
        "apt-get: {apt}"
    );
    // timeout's status for a command it stopped, passed on as perf does.
    assert_eq!(
        read("record-status.txt").trim(),
        "124",
        "{}",
        read("record.txt")
    );
    let recorded = scratch.0.join("upper/tmp/perf.data");
    let report = perf(&["report", "--stdio", "--sort", "comm"], &recorded);
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.lines().any(|l| l.trim_end().ends_with(" sh")),
        "no samples of the workload:\n{report}"
    );
    let man = read("man.txt");
    assert!(
        man.contains("shardrec-record") && man.contains("--call-graph") && man.contains("SEE ALSO"),
        "man shardrec-record:\n{man}"
    );
    let complete = read("complete.txt");
    assert!(
        complete.trim_end().ends_with(" shardrec") && complete.starts_with("complete "),
        "complete -p shardrec: {complete}"
    );
}

/// `shardrec generate SHELL` into `dir`; the script's path.
fn completion_script(dir: &Path, shell: &str) -> PathBuf {
    let output = run({
        let mut generate = shardrec();
        generate.args(["generate", shell]);
        generate
    });
    assert!(output.status.success(), "{output:?}");
    let path = dir.join(format!("shardrec.{shell}"));
    std::fs::write(&path, &output.stdout).unwrap();
    path
}

/// The package's zsh and fish completions (made as build-deb makes them)
/// complete shardrec's commands and options in those shells.
#[test]
fn zsh_and_fish_complete_the_commands_and_options() {
    let scratch = Scratch::new("completions");
    let shells = ["zsh", "fish"].map(|shell| Path::new("/usr/bin").join(shell));
    let found = shells.iter().all(|s| s.exists());
    if !shardrec_testkit::require(found, "zsh and fish (installed by .ci/setup)") {
        return;
    }
    // zsh: compinit, then the script registers _shardrec for shardrec,
    // as `complete -p` shows bash's.
    let zsh = completion_script(&scratch.0, "zsh");
    let script = format!(
        "autoload -Uz compinit && compinit -u -D && source {} && print -r -- $_comps[shardrec] && whence -f _shardrec",
        zsh.display()
    );
    let output = run({
        let mut shell = Command::new("zsh");
        shell.args(["-f", "-c", &script]).env("HOME", &scratch.0);
        shell
    });
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(stdout.lines().next(), Some("_shardrec"), "{stdout}");
    assert!(stdout.contains("--switch-output"), "{stdout}");
    // fish: what it offers after `shardrec ` and `shardrec record --switch-o`.
    let fish = completion_script(&scratch.0, "fish");
    let offered = |line: &str| {
        let script = format!("source {}; complete -C '{line}'", fish.display());
        let output = run({
            let mut shell = Command::new("fish");
            shell
                .args(["--no-config", "-c", &script])
                .env("HOME", &scratch.0);
            shell
        });
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|l| l.split('\t').next().unwrap_or("").to_string())
            .collect::<Vec<_>>()
    };
    let commands = offered("shardrec ");
    for command in ["record", "merge", "archive"] {
        assert!(commands.iter().any(|c| c == command), "{commands:?}");
    }
    let options = offered("shardrec record --switch-o");
    assert!(
        options.iter().any(|o| o == "--switch-output"),
        "{options:?}"
    );
}
