//! The output path is the user's: every kind of path `-o` can name, for
//! `record`, `merge` and `archive`, leaves the path as it was unless it is
//! the recording's own file, follows perf's `.old` rule, and never
//! renames, replaces or removes a device node, FIFO or socket. After every
//! case `/dev/null` must still be the null device (1:3).

mod common;

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

/// Fails the test unless `/dev/null` is the character device 1:3 and
/// nothing was left beside it; a broken one is made again first, so a
/// failing test does not leave the host without its null device.
fn assert_dev_null_intact(case: &str) {
    let meta = std::fs::symlink_metadata("/dev/null").unwrap();
    let dev = meta.rdev();
    let intact = meta.file_type().is_char_device()
        && (nix::sys::stat::major(dev), nix::sys::stat::minor(dev)) == (1, 3);
    let leftovers: Vec<&str> = ["/dev/null.old", "/dev/null.shards", "/dev/null.tmp"]
        .into_iter()
        .filter(|path| std::fs::symlink_metadata(path).is_ok())
        .collect();
    if !intact {
        let _ = std::fs::remove_file("/dev/null");
        let _ = Command::new("mknod")
            .args(["-m", "666", "/dev/null", "c", "1", "3"])
            .status();
    }
    for leftover in &leftovers {
        let _ = std::fs::remove_dir_all(leftover).or_else(|_| std::fs::remove_file(leftover));
    }
    assert!(
        intact,
        "{case}: /dev/null is no longer the null device (1:3)"
    );
    assert!(leftovers.is_empty(), "{case}: {leftovers:?} made");
}

/// Fails the test unless `/dev/stdout` is still the link to
/// `/proc/self/fd/1`, making it again first where it is not.
fn assert_dev_stdout_intact() {
    let intact = std::fs::read_link("/dev/stdout").ok() == Some("/proc/self/fd/1".into());
    let old = std::fs::symlink_metadata("/dev/stdout.old").is_ok();
    if !intact {
        let _ = std::fs::remove_file("/dev/stdout");
        let _ = std::os::unix::fs::symlink("/proc/self/fd/1", "/dev/stdout");
    }
    if old {
        let _ = std::fs::remove_file("/dev/stdout.old");
    }
    assert!(
        intact,
        "/dev/stdout is no longer the link to /proc/self/fd/1"
    );
    assert!(!old, "/dev/stdout.old was made");
}

/// A scratch directory with its own `$TMPDIR`, so a private shard
/// directory can be seen to go.
struct Place {
    scratch: Scratch,
}

impl Place {
    fn new(name: &str) -> Place {
        let scratch = Scratch::new(&format!("out-{name}"));
        std::fs::create_dir(scratch.0.join("tmp")).unwrap();
        Place { scratch }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.scratch.0.join(name)
    }

    fn tmp(&self) -> PathBuf {
        self.path("tmp")
    }

    /// shardrec with `$TMPDIR` in the scratch directory.
    fn shardrec(&self) -> Command {
        let mut command = shardrec();
        command.env("TMPDIR", self.tmp());
        command
    }

    fn record_into(&self, output: &Path) -> Command {
        self.record_with(output, &[])
    }

    fn record_with(&self, output: &Path, options: &[&str]) -> Command {
        let mut command = self.shardrec();
        command
            .args(["record", "-q", "-e", "cpu-clock", "-o"])
            .arg(output)
            .args(options)
            .args(["--", load(), "spin", "0.05"]);
        command
    }

    /// Whatever a recording left in `$TMPDIR` (nothing, once it is done).
    fn left_in_tmp(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.tmp())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    }

    /// A recording of its own, left as shards, for the merge cases.
    fn shards(&self) -> PathBuf {
        let output = self.path("source.data");
        let command = self.record_with(&output, &["--no-merge"]);
        succeeded(run(command), "record --no-merge");
        shardrec_shard::RecordingDir::for_output(&output)
    }
}

fn succeeded(output: Output, what: &str) -> Output {
    assert!(
        output.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// A command that failed with one line on stderr that holds `words`.
fn refused(output: Output, words: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "should have failed: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(lines[0].contains(words), "{stderr}");
}

/// Whether `bytes` are a perf.data file that perf reads samples from.
fn assert_perf_data(bytes: &[u8], place: &Place, what: &str) {
    assert!(bytes.starts_with(b"PERFILE2"), "{what}: not a perf.data");
    let copy = place.path("copy.data");
    std::fs::write(&copy, bytes).unwrap();
    let script = perf(&["script", "-F", "comm"], &copy);
    assert!(!script.stdout.is_empty(), "{what}: no samples");
    std::fs::remove_file(copy).unwrap();
}

/// What each case of the matrix makes at `path` before the command runs.
#[derive(Clone, Copy, Debug)]
enum Given {
    DevNull,
    LinkToDevNull,
    Fifo,
    EmptyFile,
    NonEmptyFile,
    Directory,
    DanglingLink,
}

impl Given {
    fn make(self, place: &Place) -> PathBuf {
        let path = place.path(&format!("{self:?}"));
        match self {
            Given::DevNull => return PathBuf::from("/dev/null"),
            Given::LinkToDevNull => std::os::unix::fs::symlink("/dev/null", &path).unwrap(),
            Given::Fifo => nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap(),
            Given::EmptyFile => std::fs::write(&path, b"").unwrap(),
            Given::NonEmptyFile => std::fs::write(&path, b"an older recording").unwrap(),
            Given::Directory => {
                std::fs::create_dir(&path).unwrap();
                std::fs::write(path.join("inside"), b"kept").unwrap();
            }
            Given::DanglingLink => {
                std::os::unix::fs::symlink(place.path("nowhere"), &path).unwrap()
            }
        }
        path
    }
}

/// Runs `command` writing to `given`'s path, reading a FIFO meanwhile,
/// and checks what is at the path afterwards.
fn check_case(place: &Place, given: Given, command: impl FnOnce(&Path) -> Command, what: &str) {
    let path = given.make(place);
    let case = format!("{what} -o {given:?}");
    let reader = matches!(given, Given::Fifo).then(|| {
        let fifo = path.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    });
    let output = run(command(&path));
    match given {
        Given::DanglingLink => {
            refused(output, "which does not exist");
            assert!(path.symlink_metadata().unwrap().is_symlink(), "{case}");
            assert!(!place.path("nowhere").exists(), "{case}: created");
        }
        _ => {
            succeeded(output, &case);
        }
    }
    match given {
        Given::DevNull | Given::DanglingLink => {}
        Given::LinkToDevNull => {
            assert_eq!(std::fs::read_link(&path).unwrap(), Path::new("/dev/null"));
        }
        Given::Fifo => {
            assert!(path.metadata().unwrap().file_type().is_fifo(), "{case}");
            let bytes = reader.unwrap().join().unwrap();
            assert_perf_data(&bytes, place, &case);
        }
        Given::EmptyFile => {
            assert_perf_data(&std::fs::read(&path).unwrap(), place, &case);
            assert!(!old_of(&path).exists(), "{case}: an empty file is not kept");
        }
        Given::NonEmptyFile => {
            assert_perf_data(&std::fs::read(&path).unwrap(), place, &case);
            assert_eq!(std::fs::read(old_of(&path)).unwrap(), b"an older recording");
        }
        Given::Directory => {
            assert_perf_data(&std::fs::read(&path).unwrap(), place, &case);
            assert_eq!(
                std::fs::read(old_of(&path).join("inside")).unwrap(),
                b"kept"
            );
        }
    }
    assert_dev_null_intact(&case);
    assert_eq!(place.left_in_tmp(), Vec::<PathBuf>::new(), "{case}");
    for leftover in [".shards", ".tmp", ".window.shards"] {
        let mut name = path.as_os_str().to_owned();
        name.push(leftover);
        assert!(!Path::new(&name).exists(), "{case}: {name:?} left");
    }
}

fn old_of(path: &Path) -> PathBuf {
    let mut old = path.as_os_str().to_owned();
    old.push(".old");
    PathBuf::from(old)
}

const MATRIX: [Given; 7] = [
    Given::DevNull,
    Given::LinkToDevNull,
    Given::Fifo,
    Given::EmptyFile,
    Given::NonEmptyFile,
    Given::Directory,
    Given::DanglingLink,
];

#[test]
fn record_leaves_every_kind_of_output_path_as_perf_would() {
    let Some((_serial, _)) = recording_test("record-matrix") else {
        return;
    };
    for given in MATRIX {
        let place = Place::new("record");
        check_case(&place, given, |path| place.record_into(path), "record");
    }
}

#[test]
fn merge_leaves_every_kind_of_output_path_as_perf_would() {
    let Some((_serial, _)) = recording_test("merge-matrix") else {
        return;
    };
    for given in MATRIX {
        let place = Place::new("merge");
        let shards = place.shards();
        // A directory output of merge is perf's --kcore layout (DIR/data).
        if matches!(given, Given::Directory) {
            let dir = given.make(&place);
            let mut merge = place.shardrec();
            merge.args(["merge", "-q"]).arg(&shards).arg("-o").arg(&dir);
            succeeded(run(merge), "merge -o DIR");
            assert_perf_data(
                &std::fs::read(dir.join("data")).unwrap(),
                &place,
                "DIR/data",
            );
            assert_eq!(std::fs::read(dir.join("inside")).unwrap(), b"kept");
            continue;
        }
        let merge = |path: &Path| {
            let mut merge = place.shardrec();
            merge.args(["merge", "-q"]).arg(&shards).arg("-o").arg(path);
            merge
        };
        check_case(&place, given, merge, "merge");
        // A window of the recording too (cut into a scratch directory).
        if matches!(given, Given::DevNull) {
            let mut window = merge(Path::new("/dev/null"));
            window.args(["--time", "0%-50%"]);
            succeeded(run(window), "merge --time -o /dev/null");
            assert_dev_null_intact("merge --time");
            assert_eq!(place.left_in_tmp(), Vec::<PathBuf>::new());
        }
        assert!(shards.join("meta").exists(), "the shards are kept");
    }
}

#[test]
fn archive_refuses_what_is_not_a_perf_data_file() {
    let Some((_serial, _)) = recording_test("archive-matrix") else {
        return;
    };
    let place = Place::new("archive");
    for given in [Given::DevNull, Given::LinkToDevNull, Given::Fifo] {
        let path = given.make(&place);
        let mut archive = place.shardrec();
        archive.arg("archive").arg(&path);
        refused(run(archive), "not a regular file");
        assert_dev_null_intact(&format!("archive {given:?}"));
        let mut tarball = path.as_os_str().to_owned();
        tarball.push(".tar.bz2");
        assert!(!Path::new(&tarball).exists());
    }
}

#[test]
fn dev_stdout_writes_into_whatever_standard_output_is() {
    let Some((_serial, _)) = recording_test("stdout") else {
        return;
    };
    let place = Place::new("stdout");
    let stdout = Path::new("/dev/stdout");
    // A file (an empty one, as `> FILE` leaves it; and a non-empty one,
    // which is moved aside: never /dev/stdout itself).
    for before in [&b""[..], b"older"] {
        let file = place.path("stdout.data");
        std::fs::write(&file, before).unwrap();
        let handle = std::fs::File::options().write(true).open(&file).unwrap();
        let output = run_with_stdout(place.record_into(stdout), handle.into());
        assert_dev_stdout_intact();
        succeeded(output, "record -o /dev/stdout > FILE");
        assert_perf_data(&std::fs::read(&file).unwrap(), &place, "> FILE");
        if !before.is_empty() {
            assert_eq!(std::fs::read(old_of(&file)).unwrap(), before);
        }
        std::fs::remove_file(&file).unwrap();
        let _ = std::fs::remove_file(old_of(&file));
    }
    // A pipe: perf.data's bytes, in order.
    let piped = run(place.record_into(stdout));
    succeeded(piped.clone(), "record -o /dev/stdout | ...");
    assert_perf_data(&piped.stdout, &place, "| pipe");
    // A terminal (script(1) gives the command one).
    let mut command = place.record_into(stdout);
    let line: Vec<String> = std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut script = Command::new("script");
    script
        .args(["-q", "-e", "-c", &line.join(" "), "/dev/null"])
        .env("TMPDIR", place.tmp());
    command = script;
    let terminal = run(command);
    succeeded(terminal.clone(), "record -o /dev/stdout on a terminal");
    let shown = String::from_utf8_lossy(&terminal.stdout);
    assert!(shown.contains("PERFILE2"), "nothing reached the terminal");
    assert_dev_stdout_intact();
    assert_dev_null_intact("/dev/stdout");
    assert_eq!(place.left_in_tmp(), Vec::<PathBuf>::new());
}

#[test]
fn a_directory_that_takes_no_file_is_refused_before_recording() {
    let Some((_serial, _)) = recording_test("readonly") else {
        return;
    };
    let place = Place::new("readonly");
    // Read-only by its mode: root writes there anyway, as perf does.
    let locked = place.path("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    succeeded(
        run(place.record_into(&locked.join("perf.data"))),
        "0555 dir",
    );
    assert_perf_data(
        &std::fs::read(locked.join("perf.data")).unwrap(),
        &place,
        "0555",
    );
    // A read-only file system: one line, before anything is recorded.
    let readonly = Tmpfs::mount(place.path("ro"), "ro,size=1m");
    let output = readonly.0.join("perf.data");
    refused(
        run(place.record_into(&output)),
        "is on a read-only file system",
    );
    let mut merge = place.shardrec();
    merge
        .args(["merge", "-q"])
        .arg(place.shards())
        .arg("-o")
        .arg(&output);
    refused(run(merge), "Read-only file system");
    assert_eq!(std::fs::read_dir(&readonly.0).unwrap().count(), 0);
    // A full one: the recording cannot start there, and says why; a merge
    // onto it fails and keeps the shards.
    let full = Tmpfs::mount(place.path("full"), "size=64k");
    std::fs::write(full.0.join("filler"), vec![1u8; 64 << 10]).ok();
    let output = full.0.join("perf.data");
    let recorded = run(place.record_into(&output));
    assert!(!recorded.status.success());
    assert!(
        String::from_utf8_lossy(&recorded.stderr).contains("No space left on device"),
        "{}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    let shards = place.shards();
    let mut merge = place.shardrec();
    merge
        .args(["merge", "-q"])
        .arg(&shards)
        .arg("-o")
        .arg(&output);
    refused(run(merge), "No space left on device");
    assert!(!output.exists() && !old_of(&output).exists());
    let mut again = place.shardrec();
    again
        .args(["merge", "-q"])
        .arg(&shards)
        .arg("-o")
        .arg(place.path("ok.data"));
    succeeded(run(again), "the shards merge elsewhere");
    assert_dev_null_intact("read-only and full");
}
