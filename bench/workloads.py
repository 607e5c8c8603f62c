"""The workloads of issue 5 and the recorders they run under.

Every recorder gets a workload's options unchanged, plus the same ring size
(`-m 1024`: 1024 pages = 4 MiB per CPU, shardrec's default as root; perf's
own default is 512 KiB, which would make the comparison about defaults),
except in `dwarf-small`, which gives all of them 256 KiB.

`shardrec-filter` runs only in `filter`, where one of 16 busy processes
is of interest: `--filter 'comm == crowd-target'` drops the others'
samples in the kernel (perf 6.1 has no such filter, so perf records them
all).

`perf-rt` is `perf record -r 1`: perf at SCHED_FIFO priority 1, as
shardrec's writers run. `perf-z` and `shardrec-z` add `-z` (zstd level 1)
and run only where a workload lists them (`extra`): on the DWARF
workloads, whose output is mostly bytes of stack.
"""

import os
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The release build's binaries; SHARDREC_BENCH_BUILD=debug runs the debug
# build's (bench/smoke, which measures nothing, in CI).
BUILD = os.environ.get("SHARDREC_BENCH_BUILD", "release")
SHARDREC = os.path.join(ROOT, "target", BUILD, "shardrec")
LOAD = os.path.join(ROOT, "target", BUILD, "shardrec-load")
RING = ["-m", "1024"]

RECORDERS = {
    "none": None,
    "perf": ["perf", "record"],
    "perf-threads": ["perf", "record", "--threads=cpu"],
    "perf-aio": ["perf", "record", "--aio"],
    "perf-rt": ["perf", "record", "-r", "1"],
    "shardrec": [SHARDREC, "record"],
    "perf-z": ["perf", "record", "-z"],
    "shardrec-z": [SHARDREC, "record", "-z"],
    "shardrec-filter": [SHARDREC, "record"],
    # The off-CPU workload's: where and how long tasks wait, as perf 6.1
    # users record it without a BPF-built perf (every context switch with
    # its callchain), and as shardrec records it (one sample per wait).
    "perf-sched-switch": ["perf", "record", "-e", "sched:sched_switch", "-g"],
    "shardrec-sched-switch": [SHARDREC, "record", "-e", "sched:sched_switch", "-g"],
    "shardrec-off-cpu": [SHARDREC, "record", "-e", "dummy", "--off-cpu"],
}
# Options a recorder adds after the workload's (which end with the -e its
# --filter follows): shardrec keeps the crowd's target in the kernel.
TRAILING = {"shardrec-filter": ["--filter", "comm == crowd-target"]}
# The recorders every workload runs under; a workload adds its `extra`.
EVERY_WORKLOAD = ["none", "perf", "perf-threads", "perf-aio", "perf-rt", "shardrec"]


@dataclass
class Workload:
    name: str
    about: str
    options: list  # recorder options, shared by every recorder
    load: list  # shardrec-load's words
    idle: int = 0  # idle processes present during the run
    ring: list = None  # ring size options, when not RING
    extra: tuple = ()  # recorders run for this workload only
    only: tuple = ()  # the recorders of a workload that runs no other

    def recorders(self):
        if self.only:
            return ["none"] + list(self.only)
        return EVERY_WORKLOAD + list(self.extra)


def workloads(scale, smoke):
    """The workloads at `scale` (1 = a few seconds each on a 2-CPU VM);
    `smoke` shrinks them to a fraction of a second.

    The sampling workloads run for a fixed time (`burn-for`), not a fixed
    amount of work: how much a sampling interrupt costs depends on the
    host, not only on the recorder (at `-F max -g` the same fixed work ran
    15-28 times as long on one VM and over 200 times on another), so fixed
    work made their length, their output and the time to stop each
    recorder a matter of the VM. What a recorder takes from them shows as
    work not done (the `work=` of their report). The others do a fixed
    count of what they measure (calls, forks, programs), so what a
    recorder takes shows as wall time."""

    def size(full, tiny):
        return tiny if smoke else max(1, round(full * scale))

    def seconds(full, tiny):
        return f"{tiny if smoke else full * scale:g}"

    def dwarf(name, about, ring=None):
        options = ["-e", "cpu-clock", "-F", "20000", "--call-graph", "dwarf", "-a"]
        load = ["burn-for", seconds(3, 0.1)]
        # Output made of bytes, not records: where -z has something to save.
        extra = ("perf-z", "shardrec-z")
        return Workload(name, about, options, load, ring=ring, extra=extra)

    syscalls = ["-e", "raw_syscalls:sys_enter", "-c", "1", "-a"]

    return [
        Workload(
            "syscalls",
            "raw_syscalls:sys_enter on every hit while one thread makes getppid calls",
            syscalls,
            ["syscalls", str(size(1_000_000, 20_000))],
        ),
        Workload(
            "syscalls-busy",
            "the syscall storm while a pinned spinner keeps every other CPU busy",
            syscalls,
            # Only the calls are timed; the spinners start before them.
            ["syscalls-busy", str(size(1_000_000, 20_000))],
        ),
        Workload(
            "max-rate",
            "cpu-clock at the kernel's maximum rate with -g, the same work on every CPU for a fixed time",
            # The smoke (CI) samples at 10 kHz: at the maximum, perf once
            # behind drained for up to 5 minutes after the smoke's tenth
            # of a second (perf-aio 305 s, perf -r 1 148 s in one CI run,
            # 59 s for the whole smoke in the run before), which is perf's
            # cost, not the scripts' that the smoke checks.
            ["-e", "cpu-clock", "-F", "10000" if smoke else "max", "-g", "-a"],
            # A sample every 10 us per CPU: 15-28 fold slower work on one
            # VM, 100-200 fold on another (no PMU, dear timer interrupts),
            # where perf, once behind, can drain for minutes after even a
            # tenth of a second (budget.py's limits allow for it).
            ["burn-for", seconds(3, 0.1)],
        ),
        dwarf("dwarf", "cpu-clock -F 20000 with 8 KiB user stacks, the same work on every CPU for a fixed time"),
        dwarf(
            "dwarf-small",
            "the dwarf workload with 256 KiB rings, where perf loses samples",
            ring=["-m", "64"],
        ),
        Workload(
            "side-band",
            "short-lived processes (clone, exec, mmap, exit), one spawner per CPU",
            ["-e", "cpu-clock", "-a"],
            ["forks", str(size(8_000, 100))],
        ),
        Workload(
            "bpf-churn",
            "BPF programs loaded and unloaded, each alive about 2 ms",
            ["-e", "cpu-clock", "-a"],
            ["bpf-churn", str(size(1_000, 20))],
        ),
        Workload(
            "filter",
            "16 busy processes, -g at 10 kHz; shardrec-filter keeps one of them",
            ["-a", "-g", "-F", "10000", "-e", "cpu-clock"],
            ["crowd", "16", str(size(200, 10))],
            extra=("shardrec-filter",),
        ),
        Workload(
            "off-cpu",
            "a context-switch storm: perf bench sched messaging -g 10 (400 processes), its waits recorded",
            ["-a"],
            ["run", "perf", "bench", "sched", "messaging", "-g", "10", "-l", str(size(200, 20))],
            only=("perf-sched-switch", "shardrec-sched-switch", "shardrec-off-cpu"),
        ),
        Workload(
            "startup",
            "launch until the workload runs, with idle processes present",
            ["-e", "cpu-clock", "-a"],
            ["syscalls", "1000"],
            idle=size(5_000, 200),
        ),
    ]


# What each recorder costs with nearly nothing to record: its start and
# stop on this host, the unit of its run's time limit (see budget.py).
TRIVIAL = Workload("trivial", "one getppid call", ["-e", "cpu-clock", "-a"], ["syscalls", "1"])


def argv(recorder, workload, output, report):
    """The command line of one run: the recorder's, then the workload's."""
    trailing = TRAILING.get(recorder, [])
    return command(RECORDERS[recorder], workload, output, report, trailing)


def command(recorder, workload, output, report, trailing=()):
    """The command line of `workload` under the recorder command `recorder`
    (a list of words, or None for the workload alone), with `trailing`
    after the workload's options."""
    load = [LOAD, "--report", report] + workload.load
    if recorder is None:
        return load
    ring = workload.ring or RING
    options = workload.options + list(trailing)
    return recorder + ["-o", output] + ring + options + ["--"] + load
