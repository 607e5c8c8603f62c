"""How long a run may take before the harness stops it as hung.

No limit here is one VM's speed: each is a multiple of what this host
measured in the same invocation of the harness. `calibrate` first times
each workload alone and each recorder over a trivial workload (`TRIVIAL`:
its start and stop with nearly nothing to record, its floor). Then a run
may take

- until its workload ends: HANG × (the recorder's floor + the workload
  alone), launch to exit. A workload of fixed time ends by the clock
  however much a recorder slows it, so this holds on a slow host too;
- after that, for the recorder to finish: HANG × its floor × the slowdown
  the workload itself measured under it (work per second alone over work
  per second recorded, for a workload of fixed time; wall time recorded
  over wall time alone, for one of fixed work), at most SLOWDOWN_CAP.
  Where the sampling interrupt is dear, it slows the recorder's own drain
  and stop too: on a VM where `-F max -g` left the workload 1% of the
  CPU, perf went on draining its rings for 40 s to 3.5 minutes after a
  workload of 0.1-1 s, and finished.

Both are counted in the harness's own wakeups (runner.wait_within): a
host too starved to wake the harness on time starves the run as much, and
the limits stretch with it (perf at SCHED_FIFO, `-r 1`, under that storm
kept a workload of 0.1 s from ending for over a minute, and finished).

HANG is large because the limit only has to catch a run that will never
end; a run is never stopped sooner than MIN_S (the old fixed limit of
the smoke). Calibration runs themselves are bounded by CALIBRATION_CAP_S,
which only a broken build reaches."""

import contextlib
import os
import shutil
from dataclasses import dataclass

import runner
import workloads

HANG = 60
MIN_S = 30.0
CALIBRATION_CAP_S = 600.0
# The slowdown that stretches a recorder's stop, at most: a host that slows
# the work more than this also wakes the harness late, which stretches the
# limit further (on the VM above, the harness counted a fifth of the wall
# time while perf drained), and a stop that takes 10 × 60 floors has hung.
SLOWDOWN_CAP = 10.0


@dataclass
class Budget:
    """The time limits of one run (workload × recorder)."""

    floor_s: float  # the recorder over TRIVIAL, launch to exit (0: no recorder)
    alone_s: float  # the workload alone, launch to exit
    alone_elapsed_s: float = None  # its own report's elapsed time
    alone_rate: float = None  # its work per second, for a workload of fixed time

    def until_workload_ends(self):
        """Seconds from the launch until the workload must have ended."""
        return max(MIN_S, HANG * (self.floor_s + self.alone_s))

    def after_workload(self, load):
        """Seconds the recorder may go on after its workload ended, given
        the workload's report (`load`, as runner.read_report gives it)."""
        return max(MIN_S, HANG * self.floor_s * min(SLOWDOWN_CAP, self.slowdown(load)))

    def slowdown(self, load):
        """How many times slower the workload ran than alone (at least 1)."""
        elapsed = load.get("elapsed_ns", 0) / 1e9
        if self.alone_rate and "work" in load and elapsed > 0:
            rate = load["work"] / elapsed
            return max(1.0, self.alone_rate / rate) if rate > 0 else float(HANG)
        if self.alone_elapsed_s and elapsed > 0:
            return max(1.0, elapsed / self.alone_elapsed_s)
        return 1.0

    def describe(self):
        return {"floor_s": self.floor_s, "alone_s": self.alone_s, "alone_rate": self.alone_rate}


class Fixed:
    """A plain limit, for the calibration runs themselves."""

    def __init__(self, seconds):
        self.seconds = seconds

    def until_workload_ends(self):
        return self.seconds

    def after_workload(self, _load):
        return self.seconds


@dataclass
class Calibration:
    """What `calibrate` measured: each workload alone, each recorder's floor."""

    alone: dict  # workload name -> (launch to exit s, elapsed s, work per s or None)
    floor: dict  # recorder name -> launch to exit s over TRIVIAL

    def budget(self, workload, recorder):
        """The limits of `workload` under `recorder` (None: alone)."""
        total, elapsed, rate = self.alone.get(workload.name, (None, None, None))
        if total is None:
            # Its calibration run failed: its real runs will say why.
            total = max((t for t, _, _ in self.alone.values() if t is not None), default=MIN_S)
        floor = 0.0 if recorder in (None, "none") else self.floor.get(recorder)
        if floor is None:
            floor = max(self.floor.values(), default=MIN_S)
        return Budget(floor, total, elapsed, rate)

    def to_json(self):
        return {"alone": self.alone, "floor": self.floor}

    def summary(self):
        alone = ", ".join(f"{w} {t:.2f}" for w, (t, _, _) in self.alone.items() if t is not None)
        floor = ", ".join(f"{r} {t:.2f}" for r, t in self.floor.items())
        return f"bench: calibrated (s, launch to exit): alone {alone}; recorder floors {floor}"


def calibrate(chosen, recorders, tmp, recorder_argv=None, remove=None):
    """Runs each workload of `chosen` alone (amid its idle processes) and
    each recorder of `recorders` over TRIVIAL, once, without sync.
    `recorder_argv(recorder, workload, output, report)` gives a recorded
    run's command line (default workloads.argv), `remove(output)` deletes
    what it wrote (default remove_outputs)."""
    recorder_argv = recorder_argv or workloads.argv
    remove = remove or remove_outputs
    report, log = os.path.join(tmp, "calibrate.report"), os.path.join(tmp, "calibrate.log")
    alone = {}
    for w in chosen:
        with runner.idle_processes(w.idle):
            argv = workloads.command(None, w, None, report)
            run = runner.run(argv, report, log, Fixed(CALIBRATION_CAP_S), sync=False)
        alone[w.name] = measured(run)
    floor = {}
    output = os.path.join(tmp, "calibrate.data")
    for rec in recorders:
        if rec == "none":
            continue
        remove(output)
        argv = recorder_argv(rec, workloads.TRIVIAL, output, report)
        run = runner.run(argv, report, log, Fixed(CALIBRATION_CAP_S), sync=False)
        remove(output)
        if run["status"] == "ok":
            floor[rec] = run["total_s"]
    return Calibration(alone, floor)


def measured(run):
    """(launch to exit s, elapsed s, work per s) of a run alone, or Nones."""
    if run["status"] != "ok" or "wall_s" not in run:
        return (None, None, None)
    rate = run["work"] / run["wall_s"] if run.get("work") and run["wall_s"] > 0 else None
    return (run["total_s"], run["wall_s"], rate)


def remove_outputs(output):
    for path in (output, output + ".shards", output + ".old"):
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
