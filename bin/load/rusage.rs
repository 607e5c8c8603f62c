//! `rusage FILE CMD ARGS...`: runs a command and writes what wait4 says it
//! used, it and every descendant it waited for: `pid exit user_us sys_us
//! maxrss_kb read_bytes` (read_bytes: from storage, not the page cache). A harness in Python cannot measure this itself: a child's
//! peak RSS starts at its parent's size when it execs, and this process
//! is small.

use std::process::Command;

pub fn run(file: &str, command: &[&str]) -> Result<u8, String> {
    let (program, args) = command.split_first().ok_or("rusage: no command")?;
    let child = Command::new(program)
        .args(args)
        .spawn()
        .map_err(|e| format!("running {program}: {e}"))?;
    let pid = child.id() as i32;
    let usage = shardrec_sys::process::wait_with_usage(pid).map_err(|e| format!("wait4: {e}"))?;
    let code = usage.code;
    let line = format!(
        "pid={pid} exit={code} user_us={} sys_us={} maxrss_kb={} read_bytes={}\n",
        usage.user_us, usage.sys_us, usage.max_rss_kb, usage.read_bytes,
    );
    std::fs::write(file, line).map_err(|e| format!("writing {file}: {e}"))?;
    Ok(code as u8)
}
