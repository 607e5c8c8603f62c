//! `shardrec-load`: workloads of known shape for the tests and benchmarks.
//!
//! - `syscalls N`: exactly N `getppid` system calls, then exit;
//! - `spin SECONDS`: one busy thread pinned to each online CPU;
//! - `hot SECONDS`: one thread in `hot_loop`, called from `hot_caller`, for
//!   tests that look for a known symbol and its caller;
//! - `bpf-churn N`: loads and unloads N BPF programs, each alive about 2 ms;
//! - `bpf-hold SECONDS`: keeps two BPF programs loaded (one with a
//!   subprogram), printing their ids;
//! - `bpf-hot SECONDS`: a BPF program with a busy loop runs on every
//!   `getppid` of a syscall loop, so BPF code takes the CPU time.

use std::process::ExitCode;
use std::time::{Duration, Instant};

mod bpf;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match words.as_slice() {
        ["syscalls", n] => n
            .parse()
            .map(syscalls)
            .map_err(|_| format!("bad count '{n}'")),
        ["spin", secs] => secs
            .parse()
            .map(spin)
            .map_err(|_| format!("bad seconds '{secs}'")),
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
            Ok(secs) => bpf::hot(Duration::from_secs_f64(secs)),
            Err(_) => Err(format!("bad seconds '{secs}'")),
        },
        _ => Err(
            "usage: shardrec-load syscalls N | spin SECONDS | hot SECONDS | bpf-churn N | bpf-hold SECONDS | bpf-hot SECONDS"
                .to_string(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("shardrec-load: {message}");
            ExitCode::from(2)
        }
    }
}

/// Makes exactly `n` getppid calls: glibc never caches getppid, so each one
/// is one `syscalls:sys_enter_getppid` hit.
fn syscalls(n: u64) {
    for _ in 0..n {
        std::hint::black_box(nix::unistd::getppid());
    }
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
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for cpu in 0..cpus {
            scope.spawn(move || {
                let mut set = nix::sched::CpuSet::new();
                if set.set(cpu).is_ok() {
                    let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
                }
                let mut x = 1u64;
                while Instant::now() < until {
                    for _ in 0..10_000 {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                }
            });
        }
    });
}
