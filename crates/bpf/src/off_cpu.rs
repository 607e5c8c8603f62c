//! Off-CPU time (`--off-cpu`): `src/bpf/off_cpu.bpf.c` on the
//! `sched_switch` tracepoint notes where and when a followed task goes to
//! sleep, and when it is switched in again writes the wait, with its
//! length and both stacks, to the BPF output event of that CPU
//! (`format::views::OffCpuWait` reads it back).

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::context;
use crate::OpenObject;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};
use shardrec_sys::bytes::{u16_at, u32_at, u64_at};

use crate::skel::off_cpu::{OffCpuSkel, OffCpuSkelBuilder};

/// Whose waits are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Every task's but the ignored processes' (a CPU-wide recording),
    /// rather than the followed processes' only.
    pub follow_all: bool,
    /// A followed process's children are followed too (not with `-i`).
    pub follow_children: bool,
    /// [`OffCpu::follow`] names threads (`-t`), not processes.
    pub follow_threads: bool,
    /// Waits shorter than this (ns) are summed by thread, state, cgroup
    /// and stacks in the kernel ([`OffCpu::summed`]) rather than written
    /// as they end (`--off-cpu-thresh`; 0: every wait written).
    pub threshold_ns: u64,
    /// `--call-graph dwarf`'s user stack size: each wait written carries
    /// the task's user registers and this much of its user stack (a
    /// multiple of 8; the program copies 32 KiB at most), in place of
    /// frame-pointer user frames (0: frame pointers).
    pub user_stack_bytes: u32,
}

/// The waits of one thread, state, cgroup and pair of stacks that were
/// shorter than the threshold, summed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SummedWaits {
    /// The process and thread.
    pub pid: u32,
    /// See `pid`.
    pub tid: u32,
    /// The task's state as it went to sleep.
    pub state: u16,
    /// Kernel frames above `__schedule` (the program's own).
    pub kernel_skip: u16,
    /// The task's cgroup id.
    pub cgroup: u64,
    /// Their time, ns.
    pub total_ns: u64,
    /// The kernel's frames, innermost first (empty where the kernel kept
    /// none).
    pub kernel: Vec<u64>,
    /// The user's frames, innermost first.
    pub user: Vec<u64>,
}

/// What the program did, over every CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Waits written.
    pub written: u64,
    /// Waits shorter than the threshold, not written.
    pub short: u64,
    /// Waits the output event refused (its ring was full; the kernel
    /// counts them lost on the event too).
    pub failed: u64,
    /// Waits that ended on a CPU not recorded, or while the output events
    /// were off (before the workload's exec, after the stop).
    pub unrecorded: u64,
    /// Waits shorter than the threshold that could not be summed (the
    /// sums were full).
    pub unsummed: u64,
}

/// The program, loaded (and attached once [`OffCpu::attach`] is called).
pub struct OffCpu<'obj> {
    skel: OffCpuSkel<'obj>,
}

impl<'obj> OffCpu<'obj> {
    /// Opens and loads the program with `settings`, in `storage` (which
    /// libbpf's object lives in for as long as the program).
    pub fn load(
        storage: &'obj mut MaybeUninit<OpenObject>,
        settings: &Settings,
    ) -> io::Result<OffCpu<'obj>> {
        crate::quiet_libbpf();
        let mut open = OffCpuSkelBuilder::default()
            .open(storage)
            .map_err(context("opening the off-CPU program"))?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| io::Error::other("the off-CPU program has no settings"))?;
        rodata.follow_all = settings.follow_all;
        rodata.follow_children = settings.follow_children;
        rodata.follow_threads = settings.follow_threads;
        rodata.threshold_ns = settings.threshold_ns;
        rodata.user_stack_bytes = settings.user_stack_bytes;
        if let Some((start, end)) = text_of("__schedule") {
            rodata.schedule_start = start;
            rodata.schedule_end = end;
        }
        if settings.threshold_ns == 0 {
            // No sums, no stacks for them: not 16 MB of kernel memory.
            open.maps
                .stacks
                .set_max_entries(1)
                .map_err(context("opening the off-CPU program"))?;
        }
        let skel = open
            .load()
            .map_err(context("loading the off-CPU program"))?;
        Ok(OffCpu { skel })
    }

    /// Makes `event` (a `PERF_COUNT_SW_BPF_OUTPUT` event on `cpu`) where
    /// the waits that end on `cpu` are written.
    pub fn write_to(&self, cpu: u32, event: BorrowedFd<'_>) -> io::Result<()> {
        let fd = event.as_raw_fd();
        self.skel
            .maps
            .output
            .update(&cpu.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
            .map_err(context("setting an off-CPU output event"))
    }

    /// Follows process `pid` (and, with `follow_children`, the processes
    /// it starts from now on), or thread `pid` with `follow_threads`.
    pub fn follow(&self, pid: u32) -> io::Result<()> {
        mark(&self.skel.maps.followed, pid).map_err(context("following a process off CPU"))
    }

    /// Never writes the waits of process `pid` (the recorder's own), nor
    /// of the processes it starts from now on.
    pub fn ignore(&self, pid: u32) -> io::Result<()> {
        mark(&self.skel.maps.ignored, pid).map_err(context("leaving a process out of off-CPU time"))
    }

    /// Attaches it to `sched_switch` (and `sched_process_fork`): waits are
    /// written from now on.
    pub fn attach(&mut self) -> io::Result<()> {
        self.skel
            .attach()
            .map_err(context("attaching the off-CPU program"))
    }

    /// What it wrote and left out so far.
    pub fn counts(&self) -> io::Result<Counts> {
        let sum = |which: u32| -> io::Result<u64> {
            let per_cpu = self
                .skel
                .maps
                .counts
                .lookup_percpu(&which.to_ne_bytes(), MapFlags::ANY)
                .map_err(context("reading the off-CPU counts"))?
                .unwrap_or_default();
            Ok(per_cpu.iter().filter_map(|value| u64_at(value, 0)).sum())
        };
        Ok(Counts {
            written: sum(0)?,
            short: sum(1)?,
            failed: sum(2)?,
            unrecorded: sum(3)?,
            unsummed: sum(4)?,
        })
    }

    /// The sums of the waits shorter than the threshold, so far.
    pub fn summed(&self) -> io::Result<Vec<SummedWaits>> {
        let maps = &self.skel.maps;
        let stack = |id: u32| -> io::Result<Vec<u64>> {
            let frames = maps
                .stacks
                .lookup(&id.to_ne_bytes(), MapFlags::ANY)
                .map_err(context("reading the off-CPU stacks"))?
                .unwrap_or_default();
            let words = (0..frames.len() / 8).map_while(|i| u64_at(&frames, 8 * i));
            Ok(words.take_while(|&frame| frame != 0).collect())
        };
        let mut summed = Vec::new();
        for key in maps.sums.keys() {
            let total = maps
                .sums
                .lookup(&key, MapFlags::ANY)
                .map_err(context("reading the off-CPU sums"))?;
            let Some(mut sum) = total.as_deref().and_then(|total| sum_of(&key, total)) else {
                continue;
            };
            // A stack the kernel did not keep (its id negative) is empty.
            let ids = [u32_at(&key, 12), u32_at(&key, 16)];
            for (frames, id) in [&mut sum.kernel, &mut sum.user].into_iter().zip(ids) {
                if let Some(id) = id.filter(|&id| (id as i32) >= 0) {
                    *frames = stack(id)?;
                }
            }
            summed.push(sum);
        }
        Ok(summed)
    }
}

/// A sum's fields from its key (`struct sum_key`) and value, its stacks
/// still empty.
fn sum_of(key: &[u8], total: &[u8]) -> Option<SummedWaits> {
    Some(SummedWaits {
        pid: u32_at(key, 0)?,
        tid: u32_at(key, 4)?,
        state: u16_at(key, 8)?,
        kernel_skip: u16_at(key, 10)?,
        cgroup: u64_at(key, 24)?,
        total_ns: u64_at(total, 0)?,
        kernel: Vec::new(),
        user: Vec::new(),
    })
}
/// Puts process `pid` in one of the program's sets (a map of pids).
fn mark(set: &dyn MapCore, pid: u32) -> libbpf_rs::Result<()> {
    set.update(&pid.to_ne_bytes(), &[1], MapFlags::ANY)
}

/// Where the kernel's function `name` is, from `/proc/kallsyms`: its
/// address to the next symbol's. `None` where addresses are hidden.
fn text_of(name: &str) -> Option<(u64, u64)> {
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").ok()?;
    let symbols = kallsyms.lines().filter_map(|line| {
        let mut fields = line.split_ascii_whitespace();
        let address = u64::from_str_radix(fields.next()?, 16).ok()?;
        Some((address, fields.nth(1)?))
    });
    let mut start = None;
    let mut addresses = Vec::new();
    for (address, symbol) in symbols {
        if symbol == name {
            start = Some(address);
        }
        addresses.push(address);
    }
    let start = start.filter(|&a| a != 0)?;
    let end = addresses.into_iter().filter(|&a| a > start).min()?;
    Some((start, end))
}
