//! `--off-cpu`: the VIP loads the off-CPU program (`shardrec_bpf`), points
//! it at each recorded CPU's output event, tells it whose waits to write
//! and whose never (the recorder's), and attaches it.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};

use shardrec_bpf::off_cpu::OffCpu;
pub use shardrec_bpf::off_cpu::Settings;
use shardrec_bpf::OpenObject;
use shardrec_control::OffCpuStats;
use shardrec_format::records::{self, WaitParts};

/// What the program is given.
#[derive(Debug)]
pub struct OffCpuSetup {
    /// Whose waits, and which.
    pub settings: Settings,
    /// Each recorded CPU's output event, into whose ring the waits that
    /// end on that CPU go.
    pub outputs: Vec<(u32, OwnedFd)>,
    /// The processes followed (threads, with `settings.follow_threads`);
    /// none when it follows every task.
    pub follow: Vec<u32>,
    /// The recorder's processes, whose waits are never written (nor
    /// those of the processes they start).
    pub ignore: Vec<u32>,
    /// The output event (its CPU and id) the waits summed under the
    /// threshold are written as, at the end.
    pub summed_into: (u32, u64),
    /// The recording's clock (`-k`), when not perf's.
    pub clockid: Option<i32>,
}

/// Loads the program in `storage`, as `setup` says, and attaches it:
/// the waits that end from now on are written. The VIP leaves itself
/// out too.
pub fn start<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    setup: &OffCpuSetup,
) -> io::Result<OffCpu<'obj>> {
    let mut off_cpu = OffCpu::load(storage, &setup.settings)?;
    for (cpu, event) in &setup.outputs {
        off_cpu.write_to(*cpu, event.as_fd())?;
    }
    for &pid in &setup.follow {
        off_cpu.follow(pid)?;
    }
    for &pid in setup.ignore.iter().chain([&std::process::id()]) {
        off_cpu.ignore(pid)?;
    }
    off_cpu.attach()?;
    Ok(off_cpu)
}

/// The waits summed under the threshold, as samples of the output event
/// `setup.summed_into` stamped now: the records the VIP appends to its
/// shard at the end, which the merge writes as `offcpu-time` samples like
/// any wait (perf 6.16 writes its sums at the end too).
pub fn summed_records(off_cpu: &OffCpu<'_>, setup: &OffCpuSetup) -> io::Result<Vec<u8>> {
    let summed = off_cpu.summed()?;
    if summed.is_empty() {
        return Ok(Vec::new());
    }
    let time = crate::clock::now(setup.clockid)?;
    let (cpu, id) = setup.summed_into;
    let mut records = Vec::new();
    for waits in &summed {
        let raw = records::off_cpu_wait(&WaitParts {
            pid: waits.pid,
            tid: waits.tid,
            period: waits.total_ns,
            cgroup: waits.cgroup,
            state: waits.state,
            kernel_skip: waits.kernel_skip,
            kernel: &waits.kernel,
            user: &waits.user,
        });
        records.extend(records::off_cpu_output_sample(&raw, id, time, cpu).unwrap_or_default());
    }
    Ok(records)
}

/// What the program did, for the VIP's report.
pub fn stats(off_cpu: &OffCpu<'_>) -> io::Result<OffCpuStats> {
    let counts = off_cpu.counts()?;
    Ok(OffCpuStats {
        written: counts.written,
        short: counts.short,
        failed: counts.failed,
        unrecorded: counts.unrecorded,
        unsummed: counts.unsummed,
    })
}
