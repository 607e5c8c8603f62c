"""Runs one command under its time limits (budget.py) and accounts for it:
wall and CPU time (wait4), memory, the host's other CPU use, and the
workload's own report. Everything the command started is killed before
this returns. Also holds the idle processes of the startup workload."""

import contextlib
import os
import select
import signal
import subprocess
import threading
import time

from workloads import LOAD


def run(argv, report, log, budget, sync=True):
    """Runs `argv` in its own session under `shardrec-load rusage`, which
    wait4s for it; returns the run's measurements. The workload in it
    writes `report` (see bin/load/report.rs) as it ends; `budget` says how
    long the run may take until then, and after (budget.Budget)."""
    usage_file = report + ".rusage"
    for path in (report, usage_file):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    if sync:
        os.sync()
    busy_before = host_busy_s()
    with open(log, "wb") as err:
        launch_ns = time.time_ns()
        proc = subprocess.Popen(
            [LOAD, "rusage", usage_file] + argv,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    sampler = PssSampler(proc.pid)
    try:
        finished, why = wait_within(proc.pid, report, budget)
        end_ns = time.time_ns()
        if not finished:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
    finally:
        sampler.stop()
        if proc.returncode is None:
            proc.kill()
            proc.wait()
        left_behind = kill_group(proc.pid)
    run = {
        "exit": proc.returncode,
        "status": "ok" if finished else f"timeout after {(end_ns - launch_ns) / 1e9:.0f} s: {why}",
        "left_behind": left_behind,
        "launch_unix_ns": launch_ns,
        "total_s": (end_ns - launch_ns) / 1e9,
        "pss_peak_kb": sampler.peak_kb,
        "host_busy_s": host_busy_s() - busy_before,
    }
    if finished and proc.returncode != 0:
        run["status"] = f"exit status {proc.returncode}"
    usage, load = read_report(usage_file), read_report(report)
    if usage is None or load is None:
        run["status"] = run["status"] if run["status"] != "ok" else "no workload report"
        return run
    run.update(
        pid=usage["pid"],
        tree_cpu_s=(usage["user_us"] + usage["sys_us"]) / 1e6,
        maxrss_kb=usage["maxrss_kb"],
    )
    load_end_ns = load["start_unix_ns"] + load["elapsed_ns"]
    load_cpu = (load["user_us"] + load["sys_us"]) / 1e6
    run.update(
        workload_pid=load["pid"],
        wall_s=load["elapsed_ns"] / 1e9,
        workload_cpu_s=load_cpu,
        startup_s=(load["start_unix_ns"] - launch_ns) / 1e9,
        tail_s=(end_ns - load_end_ns) / 1e9,
        recorder_cpu_s=max(0.0, run["tree_cpu_s"] - load_cpu),
        other_cpu_s=max(0.0, run["host_busy_s"] - run["tree_cpu_s"]),
    )
    if "work" in load:
        run["work"] = load["work"]
    return run


def read_report(path):
    """The workload's `key=value` line, or None if it did not finish (or
    is still writing it: the line ends with a newline)."""
    try:
        with open(path) as f:
            text = f.read()
        if not text.endswith("\n"):
            return None
        return {k: int(v) for k, v in (w.split("=") for w in text.split())}
    except (OSError, ValueError):
        return None


# How often the wait looks for the workload's report; also the most that
# one wakeup counts towards a run's limits.
POLL_S = 0.2


def wait_within(pid, report, budget):
    """Waits for `pid` to exit (without reaping it) within `budget`: until
    the workload's `report` appears, then the recorder's time after it.
    (True, None) if it exited, else (False, what ran out).

    The limits are counted in this harness's own wakeups, each at most
    POLL_S: where the host is too starved to wake it on time (a storm of
    sampling interrupts, a recorder at SCHED_FIFO on every CPU), the run
    is starved as much and the limits stretch with it; on a host that
    wakes it on time they are plain seconds."""
    fd = os.pidfd_open(pid)
    limit = budget.until_workload_ends()
    why = f"the workload did not end within {limit:.0f} s"
    counted, last, ended = 0.0, time.monotonic(), False
    try:
        while True:
            if counted >= limit:
                return False, f"{why} (counted {counted:.0f} s)"
            ready = select.select([fd], [], [], min(POLL_S, limit - counted))[0]
            now = time.monotonic()
            counted, last = counted + min(now - last, POLL_S), now
            if ready:
                return True, None
            load = None if ended else read_report(report)
            if load is not None:
                ended = True
                after = budget.after_workload(load)
                limit = max(limit, counted + after)
                why = f"the recorder did not finish within {after:.0f} s of its workload"
    finally:
        os.close(fd)


@contextlib.contextmanager
def idle_processes(n):
    """`n` idle processes for the duration of the block. They belong to one
    `shardrec-load idle` process and die with it, even if this harness is
    killed (they use PR_SET_PDEATHSIG; the holder exits after 10 minutes)."""
    if n == 0:
        yield
        return
    holder = subprocess.Popen(
        [LOAD, "idle", str(n), "600"], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        if holder.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"shardrec-load idle {n} did not start")
        yield
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
        # The 5,000 take a few seconds to be gone; the next run waits.
        kill_group(holder.pid)


def kill_group(pgid):
    """Kills what is left of the process group `pgid` (a run's session,
    whose leader is reaped); True if anything was left."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    for _ in range(100):
        time.sleep(0.1)
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            break
    return True


def host_busy_s():
    """CPU seconds the whole host has been busy since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


class PssSampler:
    """The peak of the summed PSS of a recorder's processes, read every
    50 ms: the descendants of `root` (the rusage launcher), except the
    workload (any process running shardrec-load) and what it started. PSS,
    not RSS, so pages shared between shardrec's processes count once."""

    def __init__(self, root):
        self.root, self.peak_kb = root, 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def stop(self):
        self.done.set()
        self.thread.join()

    def _loop(self):
        while not self.done.wait(0.05):
            self.peak_kb = max(self.peak_kb, self._total_kb())

    def _total_kb(self):
        total, todo = 0, children(self.root)
        while todo:
            pid = todo.pop()
            try:
                if os.readlink(f"/proc/{pid}/exe") == LOAD:
                    continue
                with open(f"/proc/{pid}/smaps_rollup") as f:
                    total += next(int(l.split()[1]) for l in f if l.startswith("Pss:"))
            except (OSError, StopIteration, ValueError):
                continue
            todo.extend(children(pid))
        return total


def children(pid):
    """The child processes of every thread of `pid`."""
    found = []
    with contextlib.suppress(OSError, ValueError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.extend(map(int, f.read().split()))
    return found
