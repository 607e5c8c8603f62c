//! The workload of `-- CMD`: forked at once, held until every event is
//! open, then released to exec.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use shardrec_sys::process;

use crate::RecordError;

/// A forked child waiting for the word to exec its command.
pub struct Workload {
    /// The child's pid (the same after exec).
    pub pid: Pid,
    command: String,
    go: Option<File>,
    exec_error: File,
}

impl Workload {
    /// Forks the child; it waits until [`start`](Self::start).
    pub fn prepare(command: &[String]) -> Result<Workload, RecordError> {
        let program = resolve(&command[0]).ok_or_else(|| RecordError::Workload {
            command: command[0].clone(),
            source: io::Error::from_raw_os_error(libc::ENOENT),
        })?;
        let cstr =
            |s: &[u8]| CString::new(s).map_err(|e| RecordError::Usage(format!("command: {e}")));
        let path = cstr(program.as_os_str().as_encoded_bytes())?;
        let args = command
            .iter()
            .map(|a| cstr(a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        let fail = || RecordError::system("starting the workload");
        let (go_read, go_write) =
            nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| fail()(e.into()))?;
        let (err_read, err_write) =
            nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| fail()(e.into()))?;
        let go_write_fd = go_write.as_raw_fd();
        let pid = process::spawn(move || child(go_write_fd, go_read, err_write, &path, &args))
            .map_err(fail())?;
        Ok(Workload {
            pid,
            command: command[0].clone(),
            go: Some(File::from(go_write)),
            exec_error: File::from(err_read),
        })
    }

    /// Lets the child exec; fails if the exec did.
    pub fn start(&mut self) -> Result<(), RecordError> {
        if let Some(mut go) = self.go.take() {
            go.write_all(b"g")
                .map_err(RecordError::system("starting the workload"))?;
        }
        let mut errno = [0u8; 4];
        // The error pipe closes on a successful exec (close-on-exec) and
        // carries the errno otherwise.
        match self.exec_error.read(&mut errno) {
            Ok(4) => Err(RecordError::Workload {
                command: self.command.clone(),
                source: io::Error::from_raw_os_error(i32::from_ne_bytes(errno)),
            }),
            _ => Ok(()),
        }
    }

    /// Ends a workload that will not be started or must not run on.
    pub fn kill(&mut self) {
        self.go = None;
        let _ = kill(self.pid, Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(self.pid, None);
    }
}

fn child(
    go_write: i32,
    go_read: OwnedFd,
    err_write: OwnedFd,
    path: &CString,
    args: &[CString],
) -> i32 {
    // Our copy of the write end must go, or a vanished coordinator never
    // reads as end-of-file here.
    let _ = nix::unistd::close(go_write);
    if process::unblock_all_signals().is_err() {
        return 127;
    }
    // Until its exec the child is not shardrec's work but the workload's,
    // and perf record names it so too (`ps` shows it while it waits).
    let _ = process::set_name(shardrec_synth::HELD_WORKLOAD_COMM);
    let mut byte = [0u8; 1];
    if !matches!(File::from(go_read).read(&mut byte), Ok(1)) {
        return 127;
    }
    let error = nix::unistd::execv(path, args).unwrap_err();
    let _ = File::from(err_write).write_all(&(error as i32).to_ne_bytes());
    127
}

/// Finds a program as execvp would: a path as given, or the first
/// executable match in `$PATH`.
fn resolve(program: &str) -> Option<PathBuf> {
    let executable =
        |p: &Path| nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok() && p.is_file();
    if program.contains('/') {
        let path = PathBuf::from(program);
        return executable(&path).then_some(path);
    }
    let paths = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&paths)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
}
