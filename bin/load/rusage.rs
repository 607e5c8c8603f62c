//! `rusage FILE CMD ARGS...`: runs a command and writes what wait4 says it
//! used, it and every descendant it waited for: `pid exit user_us sys_us
//! maxrss_kb`. A harness in Python cannot measure this itself: a child's
//! peak RSS starts at its parent's size when it execs, and this process
//! is small.

use std::process::Command;

pub fn run(file: &str, command: &[&str]) -> Result<u8, String> {
    let (program, args) = command.split_first().ok_or("rusage: no command")?;
    let child = Command::new(program)
        .args(args)
        .spawn()
        .map_err(|e| format!("running {program}: {e}"))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `status` and `usage` are valid for writes for the call; the
    // child is ours and not waited for anywhere else.
    if unsafe { libc::wait4(pid, &mut status, 0, &mut usage) } != pid {
        return Err(format!("wait4: {}", std::io::Error::last_os_error()));
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    let micros = |t: libc::timeval| t.tv_sec * 1_000_000 + t.tv_usec;
    let line = format!(
        "pid={pid} exit={code} user_us={} sys_us={} maxrss_kb={}\n",
        micros(usage.ru_utime),
        micros(usage.ru_stime),
        usage.ru_maxrss,
    );
    std::fs::write(file, line).map_err(|e| format!("writing {file}: {e}"))?;
    Ok(code as u8)
}
