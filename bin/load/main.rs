//! `shardrec-load`: workloads of known shape for the tests and benchmarks.
//!
//! - `syscalls N`: exactly N `getppid` system calls, then exit;
//! - `syscalls-for SECONDS`: `getppid` calls for SECONDS by the clock;
//!   `--report` adds how many were made (`work=`);
//! - `syscalls-paced N SECONDS`: exactly N `getppid` calls spread evenly
//!   over SECONDS, sleeping between them (a known count at a known rate);
//! - `syscalls-busy N`: the same N calls from a thread pinned to one CPU
//!   while a pinned spinner keeps every other CPU busy; only the calls are
//!   timed;
//! - `spin SECONDS`: one busy thread pinned to each online CPU;
//! - `burn MILLIONS`: the same fixed work (MILLIONS million steps) in one
//!   thread pinned to each online CPU;
//! - `burn-for SECONDS`: the same work for SECONDS by the clock, whatever
//!   the host's speed; `--report` adds the work done (`work=`, rounds of
//!   10,000 steps over all CPUs), so what a recorder takes from it shows
//!   as work lost, not as time;
//! - `crowd N MILLIONS`: N processes, each MILLIONS million steps of
//!   `hot_loop`, the first named `crowd-target` (for `--filter`);
//! - `hot SECONDS`: one thread in `hot_loop`, called from `hot_caller`, for
//!   tests that look for a known symbol and its caller;
//! - `bpf-churn N`: loads and unloads N BPF programs, each alive about 2 ms;
//! - `bpf-hold SECONDS`: keeps two BPF programs loaded (one with a
//!   subprogram), printing their ids;
//! - `bpf-hot SECONDS [LOAD_CPU RUN_CPU]`: a BPF program with a busy
//!   loop runs on every `getppid` of a syscall loop, so BPF code takes
//!   the CPU time; loaded on one CPU and run on another when given;
//! - `forks N`: runs `/bin/true` N times, one spawning thread per CPU;
//! - `idle N SECONDS`: keeps N idle child processes for at most SECONDS,
//!   printing `ready` once they exist; they die with it;
//! - `waits SLEEP_MS READ_MS [SPIN_MS]`: the main thread runs, sleeps in
//!   `sleep_wait`, then waits on a pipe in `pipe_wait` (see `waits.rs`;
//!   `--report` adds how long each wait took);
//! - `run CMD ARGS...`: runs CMD and waits for it (so `--report` times a
//!   workload of another program, `perf bench sched messaging` say);
//! - `rusage FILE CMD ARGS...`: runs CMD and writes its wait4 usage to FILE
//!   (see `rusage.rs`), exiting with its status.
//!
//! `--report FILE` before the workload writes its start time, wall time
//! and CPU to FILE on success (see `report.rs`): the whole run's times, or
//! those of its measured part where a workload says so.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

mod bpf;
mod procs;
mod report;
mod rusage;
mod waits;

fn main() -> ExitCode {
    let mut start = report::Start::now();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut words: Vec<&str> = args.iter().map(String::as_str).collect();
    if let ["rusage", file, command @ ..] = words.as_slice() {
        return match rusage::run(file, command) {
            Ok(code) => ExitCode::from(code),
            Err(message) => {
                eprintln!("shardrec-load: {message}");
                ExitCode::from(127)
            }
        };
    }
    let report_to = match words.as_slice() {
        ["--report", file, ..] => {
            let file = *file;
            words.drain(..2);
            Some(file)
        }
        _ => None,
    };
    let result = run(&words, &mut start).and_then(|()| match report_to {
        Some(file) => start.write(file),
        None => Ok(()),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("shardrec-load: {message}");
            ExitCode::from(2)
        }
    }
}

/// Runs the workload `words` name. `timed` is what `--report` reports: the
/// whole run, unless the workload narrows it to its measured part.
fn run(words: &[&str], timed: &mut report::Start) -> Result<(), String> {
    match words {
        ["syscalls", n] => n
            .parse()
            .map(syscalls)
            .map_err(|_| format!("bad count '{n}'")),
        ["syscalls-for", secs] => match seconds(secs) {
            Some(time) => {
                timed.set_work(syscalls_for(time));
                Ok(())
            }
            None => Err(format!("bad seconds '{secs}'")),
        },
        ["syscalls-paced", n, secs] => match (n.parse(), seconds(secs)) {
            (Ok(n), Some(time)) => {
                syscalls_paced(n, time);
                Ok(())
            }
            _ => Err(format!("bad count '{n}' or seconds '{secs}'")),
        },
        ["syscalls-busy", n] => match n.parse() {
            Ok(n) => syscalls_busy(n, timed),
            Err(_) => Err(format!("bad count '{n}'")),
        },
        ["spin", secs] => secs
            .parse()
            .map(spin)
            .map_err(|_| format!("bad seconds '{secs}'")),
        ["burn", millions] => millions
            .parse()
            .map(burn)
            .map_err(|_| format!("bad count '{millions}'")),
        ["burn-for", secs] => match seconds(secs) {
            Some(time) => {
                timed.set_work(burn_for(time));
                Ok(())
            }
            None => Err(format!("bad seconds '{secs}'")),
        },
        ["hot", secs] => secs
            .parse()
            .map(|s| {
                std::hint::black_box(hot_caller(Duration::from_secs_f64(s)));
            })
            .map_err(|_| format!("bad seconds '{secs}'")),
        ["bpf-churn", n] => match n.parse() {
            Ok(n) => bpf::churn(n),
            Err(_) => Err(format!("bad count '{n}'")),
        },
        ["bpf-hold", secs] => match secs.parse() {
            Ok(secs) => bpf::hold(Duration::from_secs_f64(secs)),
            Err(_) => Err(format!("bad seconds '{secs}'")),
        },
        ["bpf-hot", secs] => match secs.parse() {
            Ok(secs) => bpf::hot(Duration::from_secs_f64(secs), None),
            Err(_) => Err(format!("bad seconds '{secs}'")),
        },
        ["bpf-hot", secs, load_on, run_on] => {
            match (secs.parse(), load_on.parse(), run_on.parse()) {
                (Ok(secs), Ok(load_on), Ok(run_on)) => {
                    bpf::hot(Duration::from_secs_f64(secs), Some((load_on, run_on)))
                }
                _ => Err(format!("bad seconds '{secs}' or CPUs '{load_on}' '{run_on}'")),
            }
        }
        ["forks", n] => match n.parse() {
            Ok(n) => procs::forks(n),
            Err(_) => Err(format!("bad count '{n}'")),
        },
        ["threads", secs] => match secs.parse() {
            Ok(secs) => procs::thread_churn(Duration::from_secs_f64(secs)),
            Err(_) => Err(format!("bad seconds '{secs}'")),
        },
        ["crowd", n, millions] => match (n.parse(), millions.parse::<u64>()) {
            (Ok(n), Ok(millions)) => procs::crowd(n, |_| {
                let mut x = 1;
                for _ in 0..millions {
                    x = hot_loop(x);
                }
                std::hint::black_box(x);
            }),
            _ => Err(format!("bad count '{n}' or work '{millions}'")),
        },
        ["idle", n, secs] => match (n.parse(), secs.parse()) {
            (Ok(n), Ok(secs)) => procs::idle(n, Duration::from_secs_f64(secs)),
            _ => Err(format!("bad count '{n}' or seconds '{secs}'")),
        },
        ["run", command @ ..] if !command.is_empty() => {
            let status = std::process::Command::new(command[0])
                .args(&command[1..])
                .status()
                .map_err(|e| format!("running {}: {e}", command[0]))?;
            match status.success() {
                true => Ok(()),
                false => Err(format!("{} ended with {status}", command[0])),
            }
        }
        ["waits", times @ ..] if (2..=3).contains(&times.len()) => {
            let ms: Vec<u64> = times.iter().filter_map(|t| t.parse().ok()).collect();
            let [sleep, read] = match ms[..] {
                [sleep, read] => waits::run(Duration::ZERO, millis(sleep), millis(read))?,
                [sleep, read, spin] => waits::run(millis(spin), millis(sleep), millis(read))?,
                _ => return Err(format!("bad milliseconds in {times:?}")),
            };
            timed.add("sleep_ns", sleep.as_nanos() as u64);
            timed.add("read_ns", read.as_nanos() as u64);
            Ok(())
        }
        ["glibc-waits", sleep, read] => {
            let ms = |t: &str| t.parse().map(millis).map_err(|_| format!("bad milliseconds: {t}"));
            let [sleep, read] = waits::through_glibc(ms(sleep)?, ms(read)?)?;
            timed.add("sleep_ns", sleep.as_nanos() as u64);
            timed.add("read_ns", read.as_nanos() as u64);
            Ok(())
        }
        _ => Err(concat!(
            "usage: shardrec-load [--report FILE] syscalls N | syscalls-for SECONDS | syscalls-paced N SECONDS | syscalls-busy N | spin SECONDS",
            " | burn MILLIONS | burn-for SECONDS | hot SECONDS | bpf-churn N | bpf-hold SECONDS | bpf-hot SECONDS [LOAD_CPU RUN_CPU]",
            " | forks N | crowd N MILLIONS | idle N SECONDS | threads SECONDS | waits SLEEP_MS READ_MS [SPIN_MS]",
            " | glibc-waits SLEEP_MS READ_MS | run CMD ARGS...",
            " | rusage FILE CMD ARGS..."
        )
        .to_string()),
    }
}

fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// A duration in seconds, as the workloads of fixed time take it.
fn seconds(word: &str) -> Option<Duration> {
    Duration::try_from_secs_f64(word.parse().ok()?).ok()
}

/// Makes exactly `n` getppid calls: glibc never caches getppid, so each one
/// is one `syscalls:sys_enter_getppid` hit.
fn syscalls(n: u64) {
    for _ in 0..n {
        std::hint::black_box(nix::unistd::getppid());
    }
}

/// Makes exactly `n` getppid calls, the `i`th at `i / n` of `time` from
/// the start (sleeping until then, late calls made at once).
fn syscalls_paced(n: u64, time: Duration) {
    let start = Instant::now();
    for i in 0..n {
        let due = start + time.mul_f64(i as f64 / n as f64);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        syscalls(1);
    }
}

/// Makes getppid calls for `time` by the clock, a hundred between two
/// readings of it; returns how many.
fn syscalls_for(time: Duration) -> u64 {
    let until = Instant::now() + time;
    let mut calls = 0;
    while Instant::now() < until {
        syscalls(100);
        calls += 100;
    }
    calls
}

/// `syscalls(n)` on a host with no idle CPU, the host shardrec is for: a
/// recorder can no longer copy its ring on a CPU the workload leaves idle.
/// This thread is pinned to the first allowed CPU and every other allowed
/// CPU gets a pinned spinner. Only the calls are timed: the spinners are
/// all running before they start and are stopped after they end, so the
/// wall time is comparable with `syscalls`.
fn syscalls_busy(n: u64, timed: &mut report::Start) -> Result<(), String> {
    let cpus = allowed_cpus()?;
    let (&mine, others) = cpus.split_first().ok_or("no CPU allowed")?;
    pin_to(mine)?;
    let stop = AtomicBool::new(false);
    let running = Barrier::new(others.len() + 1);
    std::thread::scope(|scope| {
        for &cpu in others {
            let (stop, running) = (&stop, &running);
            scope.spawn(move || {
                // Unpinned, a spinner still keeps some CPU busy: no error.
                let _ = pin_to(cpu);
                running.wait();
                let mut x = 1;
                while !stop.load(Ordering::Relaxed) {
                    x = steps(x);
                }
            });
        }
        running.wait();
        timed.restart();
        syscalls(n);
        timed.stop();
        stop.store(true, Ordering::Relaxed);
    });
    Ok(())
}

/// The CPUs this process may run on: the online ones, less any a cpuset
/// or the caller's affinity excludes.
fn allowed_cpus() -> Result<Vec<usize>, String> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .map_err(|e| format!("sched_getaffinity: {e}"))?;
    Ok((0..nix::sched::CpuSet::count())
        .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
        .collect())
}

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) -> Result<(), String> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(|e| format!("CPU {cpu}: {e}"))?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| format!("pinning to CPU {cpu}: {e}"))
}

/// The caller the `-g` tests expect to find above `hot_loop`.
#[inline(never)]
fn hot_caller(time: Duration) -> u64 {
    let until = Instant::now() + time;
    let mut x = 1;
    while Instant::now() < until {
        x = hot_loop(x);
    }
    x
}

/// Where the time goes: the symbol the tests expect at the top. Only
/// operators that compile inline even unoptimised (no iterator or wrapping
/// calls), so no helper function takes the samples instead.
#[inline(never)]
fn hot_loop(mut x: u64) -> u64 {
    let mut i = 0u32;
    while i < 1_000_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        i += 1;
    }
    x
}

/// Keeps every online CPU busy for `secs` seconds, one pinned thread each.
fn spin(secs: f64) {
    let until = Instant::now() + Duration::from_secs_f64(secs);
    on_every_cpu(|_| Instant::now() < until);
}

/// Gives every online CPU the same fixed work, `millions` million steps in
/// one pinned thread each, so time taken from it shows in the wall time.
fn burn(millions: u64) {
    on_every_cpu(|rounds| rounds < millions * 100);
}

/// The burn's work on every online CPU for `time` by the clock: a
/// workload whose length does not depend on how much a recorder (or a
/// slow host) takes from it. Returns the rounds done over all CPUs.
fn burn_for(time: Duration) -> u64 {
    let until = Instant::now() + time;
    on_every_cpu(|_| Instant::now() < until)
}

/// Runs one pinned thread per online CPU, each taking rounds of 10,000
/// steps while `more(rounds done)` holds; returns the rounds of all.
fn on_every_cpu(more: impl Fn(u64) -> bool + Sync) -> u64 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let more = &more;
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..cpus)
            .map(|cpu| {
                scope.spawn(move || {
                    let _ = pin_to(cpu);
                    let mut x = 1u64;
                    let mut rounds = 0;
                    while more(rounds) {
                        x = steps(x);
                        rounds += 1;
                    }
                    std::hint::black_box(x);
                    rounds
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .sum()
    })
}

/// One round of 10,000 steps of work the optimiser cannot remove.
#[inline(always)]
fn steps(mut x: u64) -> u64 {
    for _ in 0..10_000 {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    x
}
