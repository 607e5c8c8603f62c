"""What a recording holds and what it costs to read: perf's own view
(`perf report --stats`, and the time of a plain `perf report`) next to the
counts of perfdata.walk."""

import os
import re
import subprocess
import time

import perfdata

REPORT_TIMEOUT = 600


def output_bytes(path):
    """Size of a perf.data file, or of perf's `--threads` directory."""
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))
    return os.path.getsize(path)


def perf_stats(path):
    """`perf report --stats`: the SAMPLE count perf reads, or an error."""
    done = subprocess.run(
        ["perf", "report", "--stats", "-i", path],
        capture_output=True,
        text=True,
        timeout=REPORT_TIMEOUT,
    )
    if done.returncode != 0:
        return None, f"perf report --stats: exit status {done.returncode}: {done.stderr.strip()[-300:]}"
    aggregated = done.stdout.split("Aggregated stats:", 1)[-1]
    found = re.search(r"^\s*SAMPLE events:\s+(\d+)", aggregated, re.M)
    return (int(found.group(1)) if found else 0), None


def bpf_programs(path):
    """BPF programs whose info perf.data's header holds: each is one
    `# bpf_prog_info ID:` line (then its name, or its sub-programs)."""
    done = subprocess.run(
        ["perf", "report", "--header-only", "-i", path],
        capture_output=True,
        text=True,
        timeout=REPORT_TIMEOUT,
    )
    return len(re.findall(r"^# bpf_prog_info \d+:", done.stdout, re.M))


def perf_report_s(path):
    """Seconds a plain `perf report --stdio` takes, or None on failure.
    `--no-inline`: inline frames would be looked up by one addr2line per
    binary, whose time depends on which binaries (another user's rustc,
    say) a system-wide profile happened to catch, not on the recorder."""
    start = time.monotonic()
    try:
        done = subprocess.run(
            ["perf", "report", "--stdio", "--no-inline", "-i", path],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=REPORT_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        return None
    return time.monotonic() - start if done.returncode == 0 else None


def recording(path, recorder_pid, workload_pid, report=True):
    """Every measurement of one output. Own samples are those of the
    recorder's process and every process it forked, except the workload
    and what the workload started (perf-exec and shardrec's held child
    included: until exec they are the workload's process)."""
    result = {"output_bytes": output_bytes(path)}
    samples, error = perf_stats(path)
    if error:
        result["status"] = error
        return result
    result["samples"] = samples
    try:
        counts = perfdata.walk(path)
    except perfdata.NoZstd as e:
        # A -z output without libzstd: perf's count only, no lost or own.
        result["walk_error"] = str(e)
        return with_report(result, path, report)
    except ValueError as e:
        result["status"] = f"perfdata.py: {e}"
        return result
    own = counts.descendants(recorder_pid, exclude={workload_pid})
    result.update(
        records=counts.records,
        compressed_records=counts.compressed,
        lost=counts.lost(),
        lost_in_ring=counts.lost_in_ring,
        lost_samples=counts.lost_samples,
        own_samples=sum(counts.samples_by_pid[p] for p in own),
        own_pids=len(own),
    )
    result["bpf_programs"] = bpf_programs(path)
    if counts.samples != samples:
        result["status"] = f"perf read {samples} samples, the file holds {counts.samples}"
    return with_report(result, path, report)


def with_report(result, path, report):
    """Adds the time of a plain `perf report`, if asked."""
    if report:
        result["report_s"] = perf_report_s(path)
        if result["report_s"] is None:
            result["status"] = "perf report failed or timed out"
    return result


def shardrec_summary(stderr):
    """What shardrec's own summary adds: the merge's wall time and the BPF
    programs its VIP saw and captured. Missing lines give missing keys."""
    found = {}
    merge = re.search(r"\[ shardrec merge: .* in ([\d.]+) s \]", stderr)
    if merge:
        found["merge_s"] = float(merge.group(1))
    bpf = re.search(r"BPF programs: (\d+) loaded, (\d+) unloaded, (\d+) captured, (\d+) missed", stderr)
    if bpf:
        keys = ("bpf_loaded", "bpf_unloaded", "bpf_captured", "bpf_missed")
        found.update(zip(keys, map(int, bpf.groups())))
    return found
