//! Loading a program from raw instructions, for tests and workloads that
//! need a real BPF program of known shape (names, sub-programs, run time).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use super::btf;
use super::syscall::{self, ProgLoad};

/// `BPF_OBJ_NAME_LEN` less the NUL: the longest program name.
const MAX_NAME: usize = 15;
/// Bytes of verifier log kept to explain a refused program.
const LOG_SIZE: usize = 64 * 1024;
/// The file name the generated line info names.
const LINE_FILE: &str = "shardrec/test_programs";

/// Program types [`ProgramSpec::prog_type`] takes (`enum bpf_prog_type`).
pub mod prog_type {
    /// `BPF_PROG_TYPE_SOCKET_FILTER`: can be loaded without attaching.
    pub const SOCKET_FILTER: u32 = 1;
    /// `BPF_PROG_TYPE_TRACEPOINT`: attached to a tracepoint perf event with
    /// `PERF_EVENT_IOC_SET_BPF`; needs a GPL-compatible license.
    pub const TRACEPOINT: u32 = 5;
    /// `BPF_PROG_TYPE_PERF_EVENT`: attached to a sampling event with
    /// `PERF_EVENT_IOC_SET_BPF`, run at each overflow; a sample it returns
    /// 0 for is not written.
    pub const PERF_EVENT: u32 = 7;
}

/// A program to load.
#[derive(Clone, Copy, Debug)]
pub struct ProgramSpec<'a> {
    /// `BPF_PROG_TYPE_*` (see [`prog_type`]).
    pub prog_type: u32,
    /// Program name, at most 15 characters of `[A-Za-z0-9_.]`.
    pub name: &'a str,
    /// The instructions, each a `struct bpf_insn` as the u64 with the same
    /// native-endian bytes (build them with [`super::insn`]).
    pub insns: &'a [u64],
    /// License string (`"GPL"` for programs that call GPL-only helpers or
    /// attach to tracepoints).
    pub license: &'a str,
    /// First instruction and BTF name of each function, in instruction
    /// order, starting at 0: the main program, then each sub-program. Empty
    /// loads without BTF, so the program has no func_info or line_info.
    pub func_names: &'a [(u32, &'a str)],
}

/// Loads a program from raw instructions, with a BTF naming its functions
/// when `func_names` is not empty (so func_info and line_info exist, and the
/// kernel names each sub-program's symbol after its function). Returns its
/// fd: closing it unloads the program unless something else holds it.
pub fn load_program(spec: &ProgramSpec<'_>) -> io::Result<OwnedFd> {
    let cstr = |what: &str, text: &str| {
        CString::new(text).map_err(|_| invalid(format!("{what} {text:?} contains a NUL")))
    };
    if spec.name.len() > MAX_NAME {
        return Err(invalid(format!(
            "program name {:?} is longer than {MAX_NAME} bytes",
            spec.name
        )));
    }
    let (name, license) = (
        cstr("program name", spec.name)?,
        cstr("license", spec.license)?,
    );
    let mut log = vec![0u8; LOG_SIZE];
    let btf = (!spec.func_names.is_empty()).then(|| btf::for_functions(spec.func_names, LINE_FILE));
    let btf_fd =
        match &btf {
            Some(btf) => Some(syscall::btf_load(&btf.blob, &mut log).map_err(|err| {
                explain(err, &format!("loading the BTF of '{}'", spec.name), &log)
            })?),
            None => None,
        };
    let load = ProgLoad {
        prog_type: spec.prog_type,
        name: &name,
        license: &license,
        insns: spec.insns,
        btf: btf_fd.as_ref().map(|fd| fd.as_fd()),
        func_info: btf.as_ref().map_or(&[][..], |btf| &btf.func_info),
        line_info: btf.as_ref().map_or(&[][..], |btf| &btf.line_info),
    };
    // The program keeps its own reference to the BTF: ours may close after.
    syscall::prog_load(&load, &mut log)
        .map_err(|err| explain(err, &format!("loading BPF program '{}'", spec.name), &log))
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// Why a program or its BTF was not loaded: what, the kernel's errno,
/// and the verifier's reason when its log gave one. It travels inside the
/// `io::Error` [`load_program`] returns (whose kind is the errno's), so a
/// caller can take it apart with [`LoadError::of`].
#[derive(Debug)]
pub struct LoadError {
    /// What was being loaded.
    pub what: String,
    /// The kernel's refusal.
    pub source: io::Error,
    /// The verifier log's last line that is not its closing statistics.
    pub reason: Option<String>,
}

impl LoadError {
    /// The load error inside `err`, if it is one.
    pub fn of(err: &io::Error) -> Option<&LoadError> {
        err.get_ref()?.downcast_ref()
    }
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.source)?;
        match &self.reason {
            Some(reason) => write!(f, "; the verifier's log ends: {reason}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for LoadError {}

/// An error with what was being loaded and the verifier's reason.
fn explain(err: io::Error, what: &str, log: &[u8]) -> io::Error {
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let text = String::from_utf8_lossy(&log[..end]);
    let reason = text
        .lines()
        .rev()
        .find(|l| {
            !l.trim().is_empty()
                && !l.starts_with("processed ")
                && !l.starts_with("verification time")
        })
        .map(str::to_string);
    let kind = err.kind();
    let error = LoadError {
        what: what.to_string(),
        source: err,
        reason,
    };
    io::Error::new(kind, error)
}
