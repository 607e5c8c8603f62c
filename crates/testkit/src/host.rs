//! What a test needs of the host, set up by the test itself: another
//! user's view of the programs under test, and sysctls set for a moment.
//! A test must pass whatever the host holds, wherever the checkout is.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Programs run as nobody (uid and gid 65534) through util-linux's
/// `setpriv`. nobody runs copies in a directory of the test's own, since
/// the build's own directory may sit where only root may enter: a clone
/// under `/root` (0700 on Debian) or in `mktemp -d`. The binaries link
/// only system libraries (`/lib`), so a copy runs as the original does.
pub struct Nobody {
    bin: PathBuf,
}

impl Nobody {
    /// nobody's uid and gid.
    pub const UID: u32 = 65534;

    /// The words that make what follows run as nobody.
    pub const SETPRIV: [&'static str; 5] = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--",
    ];

    /// Makes `dir/bin` (anyone may enter it) with a copy of each program,
    /// under its own file name; removed with `dir`.
    pub fn new(dir: &Path, programs: &[&Path]) -> Nobody {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let anyone = |path: &Path, mode| {
            let permissions = std::os::unix::fs::PermissionsExt::from_mode(mode);
            std::fs::set_permissions(path, permissions).unwrap();
        };
        for ancestor in [dir, &bin] {
            anyone(ancestor, 0o777);
        }
        let nobody = Nobody { bin };
        for program in programs {
            let copy = nobody.copy_of(program);
            // A hard link where the file system allows it (no bytes
            // written), else a copy.
            let _ = std::fs::remove_file(&copy);
            if std::fs::hard_link(program, &copy).is_err() {
                std::fs::copy(program, &copy).unwrap();
            }
            anyone(&copy, 0o755);
        }
        assert!(
            reachable_by_anyone(&nobody.bin),
            "nobody cannot enter {}: the scratch directory's parents must be open to all",
            nobody.bin.display()
        );
        nobody
    }

    /// nobody's copy of `program`.
    pub fn copy_of(&self, program: &Path) -> PathBuf {
        self.bin
            .join(program.file_name().expect("a program's path"))
    }

    /// `setpriv ... COPY`: the words that run `program`'s copy as nobody,
    /// for a command or a shell line to start with.
    pub fn argv(&self, program: &Path) -> Vec<OsString> {
        let mut argv: Vec<OsString> = Self::SETPRIV.map(OsString::from).to_vec();
        argv.push(self.copy_of(program).into());
        argv
    }

    /// [`Nobody::argv`] as one shell line (paths hold no quotes).
    pub fn shell_words(&self, program: &Path) -> String {
        let words: Vec<String> = self
            .argv(program)
            .iter()
            .map(|word| word.to_string_lossy().into_owned())
            .collect();
        words.join(" ")
    }

    /// A command that runs `program`'s copy as nobody.
    pub fn command(&self, program: &Path) -> Command {
        let argv = self.argv(program);
        let mut command = Command::new(&argv[0]);
        command.args(&argv[1..]);
        command
    }
}

/// `command`, run in a mount namespace of its own whose `/sys/fs/bpf`
/// is a fresh, empty bpf file system: what the host has pinned there
/// (a sample filter, say) is not seen, and the host's is never touched.
pub fn with_empty_bpffs(command: &Command) -> Command {
    let mut unshare = Command::new("unshare");
    unshare.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        "mount -t bpf bpf /sys/fs/bpf && exec \"$@\"",
        "sh",
    ]);
    unshare.arg(command.get_program()).args(command.get_args());
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => unshare.env(name, value),
            None => unshare.env_remove(name),
        };
    }
    unshare
}

/// Whether every directory from `/` to `dir` lets others in (x for all).
fn reachable_by_anyone(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    dir.ancestors()
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

/// A sysctl set for as long as the value lives, put back on drop; it
/// tolerates finding the host's value either way.
pub struct Sysctl {
    path: &'static str,
    old: String,
}

impl Sysctl {
    /// Sets `path` (under `/proc/sys`) to `value`; `None` where this
    /// kernel has no such sysctl or refuses the value.
    pub fn set(path: &'static str, value: &str) -> Option<Sysctl> {
        let old = std::fs::read_to_string(path).ok()?;
        std::fs::write(path, value).ok()?;
        Some(Sysctl { path, old })
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path, self.old.trim());
    }
}
