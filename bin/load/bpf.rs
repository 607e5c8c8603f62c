//! BPF workloads: programs that come and go, stay, or run hot.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use shardrec_sys::bpf::{self, load_program, test_programs};
use shardrec_sys::{abi, tracefs, Attr, PerfEvent, Target};

/// Loads and unloads `n` programs, each alive about 2 ms (at most 5).
pub fn churn(n: u32) -> Result<(), String> {
    for i in 0..n {
        let spec = if i % 2 == 0 {
            test_programs::return_zero()
        } else {
            test_programs::with_subprogram()
        };
        let prog = load_program(&spec).map_err(|e| format!("loading program {i}: {e}"))?;
        std::thread::sleep(Duration::from_millis(2));
        drop(prog);
        // Unloading is RCU-deferred; a short gap keeps loads distinct.
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Keeps two programs loaded for `time`, and prints their ids.
pub fn hold(time: Duration) -> Result<(), String> {
    let load = |spec| load_program(&spec).map_err(|e| format!("loading: {e}"));
    let zero = load(test_programs::return_zero())?;
    let call = load(test_programs::with_subprogram())?;
    for prog in [&zero, &call] {
        let id = bpf::prog_id(prog.as_fd()).map_err(|e| e.to_string())?;
        println!("{id}");
    }
    std::thread::sleep(time);
    Ok(())
}

/// Runs a looping tracepoint program on each of our own `getppid` calls
/// for `time`; with `cpus`, loads it on the first CPU and runs it on the
/// second (its KSYMBOL and BPF_EVENT land in the first one's ring).
pub fn hot(time: Duration, cpus: Option<(u32, u32)>) -> Result<(), String> {
    let pin = |cpu| shardrec_sys::cpu::pin_to(cpu).map_err(|e| format!("pinning to {cpu}: {e}"));
    if let Some((load_on, _)) = cpus {
        pin(load_on)?;
    }
    let prog = load_program(&test_programs::hot_loop()).map_err(|e| format!("loading: {e}"))?;
    if let Some((_, run_on)) = cpus {
        pin(run_on)?;
    }
    let root = tracefs::root().map_err(|e| e.to_string())?;
    let id = tracefs::tracepoint_id(&root, "syscalls", "sys_enter_getppid")
        .map_err(|e| e.to_string())?;
    let mut attr = Attr::new(abi::PERF_TYPE_TRACEPOINT, id);
    attr.set_period(1);
    let event = PerfEvent::open(&attr, Target { pid: 0, cpu: -1 })
        .map_err(|e| format!("tracepoint: {e}"))?;
    event
        .set_bpf(prog.as_fd())
        .map_err(|e| format!("attaching: {e}"))?;
    event.enable().map_err(|e| e.to_string())?;
    let until = Instant::now() + time;
    while Instant::now() < until {
        std::hint::black_box(nix::unistd::getppid());
    }
    Ok(())
}
