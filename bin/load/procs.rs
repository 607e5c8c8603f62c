//! Process workloads: many short-lived processes, or many idle ones.

use std::io::Write;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::{getppid, Pid};

/// Runs `/bin/true` `n` times, spread over one thread per online CPU: each
/// run is a clone, an exec (COMM, MMAP2 of the program, its loader and
/// libc) and an exit, the side-band records a busy build host produces.
pub fn forks(n: u64) -> Result<(), String> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let share = n / threads + u64::from(t < n % threads);
                scope.spawn(move || -> Result<(), String> {
                    for _ in 0..share {
                        std::process::Command::new("/bin/true")
                            .status()
                            .map_err(|e| format!("running /bin/true: {e}"))?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().unwrap_or_else(|_| Err("a thread panicked".into())))
    })
}

/// Keeps `n` idle child processes for at most `time`, printing `ready` once
/// they all exist. The children die with this process (PR_SET_PDEATHSIG),
/// so killing it, even with SIGKILL, leaves nothing behind.
pub fn idle(n: u32, time: Duration) -> Result<(), String> {
    let parent = Pid::this();
    let mut children = Vec::with_capacity(n as usize);
    for i in 0..n {
        match shardrec_sys::process::spawn(|| idle_child(parent)) {
            Ok(child) => children.push(child),
            Err(e) => {
                reap(&children);
                return Err(format!("fork {i} of {n}: {e}"));
            }
        }
    }
    println!("ready");
    let _ = std::io::stdout().flush();
    std::thread::sleep(time);
    reap(&children);
    Ok(())
}

/// An idle child: waits for a signal, and dies with its parent.
fn idle_child(parent: Pid) -> ! {
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    // The parent may have died before the line above took effect.
    if getppid() != parent {
        shardrec_sys::process::exit_now(0);
    }
    loop {
        nix::unistd::pause();
    }
}

/// The name of the one process of a crowd that a filter picks out.
pub const CROWD_TARGET: &std::ffi::CStr = c"crowd-target";

/// Runs `n` processes, each doing the same fixed work (`work(i)`, for
/// i in 0..n), the first one named [`CROWD_TARGET`]: the many busy
/// processes of a host where one is of interest. Children die with this
/// process.
pub fn crowd(n: u32, work: impl Fn(u32) + Copy) -> Result<(), String> {
    let parent = Pid::this();
    let mut children = Vec::with_capacity(n as usize);
    for i in 0..n {
        let child = shardrec_sys::process::spawn(move || {
            let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
            if getppid() != parent {
                shardrec_sys::process::exit_now(1);
            }
            if i == 0 {
                let _ = shardrec_sys::process::set_name(CROWD_TARGET);
            }
            work(i);
            0
        });
        match child {
            Ok(child) => children.push(child),
            Err(e) => {
                reap(&children);
                return Err(format!("fork {i} of {n}: {e}"));
            }
        }
    }
    for &child in &children {
        match waitpid(child, None) {
            Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => {}
            other => return Err(format!("crowd member {child}: {other:?}")),
        }
    }
    Ok(())
}

fn reap(children: &[Pid]) {
    for &child in children {
        let _ = kill(child, Signal::SIGKILL);
    }
    for &child in children {
        let _ = waitpid(child, None);
    }
}

/// Starts short-lived threads (each lives about a millisecond) for `time`,
/// so that a recording of this process lists threads that end, and misses
/// threads that start, while its events are being opened.
pub fn thread_churn(time: Duration) -> Result<(), String> {
    let until = std::time::Instant::now() + time;
    while std::time::Instant::now() < until {
        let threads: Vec<_> = (0..8)
            .map(|_| std::thread::spawn(|| std::thread::sleep(Duration::from_millis(1))))
            .collect();
        for thread in threads {
            thread
                .join()
                .map_err(|_| "a churn thread panicked".to_string())?;
        }
    }
    Ok(())
}
