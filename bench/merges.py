"""The merge's thread scaling: one DWARF recording kept as shards
(`shardrec record --no-merge`), then `shardrec merge --threads N` over them
for N = 1, 2 and the online CPU count, plain and with `-z`, several times.

Before each merge the previous output is deleted, the page cache dropped
and the shards read back: the input is in the page cache, as it is for the
merge at the end of a recording, and the output goes into pages the guest
has not used lately, as it does there. On a VM, writing into such pages
costs 3-5 times rewriting pages just freed (the host must back them
again), so without the drop every merge but the first would look cheaper
than a real one."""

import contextlib
import json
import os
import re
import resource
import shutil
import subprocess
import time

import budget
import measure
import runner
import workloads

ONLY = "merge-scaling"  # its name for --only


def thread_counts():
    """1, 2 and one per online CPU, each once (2 CPUs: 1 and 2)."""
    cpus = os.cpu_count() or 1
    return list(dict.fromkeys(n for n in (1, 2, cpus) if n <= cpus))


def run(out, workload, reps, log, limits):
    """Records `workload` once into shards within `limits` (budget.Budget
    of the workload under shardrec), merges them `reps` times per thread
    count and compression (in rotating order, as the main loop); each
    merge's result goes to `log` (JSON lines) and to the list returned. A
    failed recording is one failed result. A merge may take
    budget.HANG times as long as the recording took, launch to exit."""
    tmp = os.path.join(out, "tmp", "merge")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        shards, failure, recorded_s = record(tmp, workload, limits)
        if failure:
            log.write(json.dumps(failure) + "\n")
            return [failure]
        input_bytes = sum(os.path.getsize(p) for p in files(shards))
        configs = [(z, n) for z in (False, True) for n in thread_counts()]
        results = []
        for rep in range(reps):
            k = rep % len(configs)
            for compress, threads in configs[k:] + configs[:k]:
                timeout = max(budget.MIN_S, budget.HANG * recorded_s)
                result = merge(shards, os.path.join(tmp, "perf.data"), threads, compress, timeout)
                result.update(rep=rep, input_bytes=input_bytes)
                results.append(result)
                log.write(json.dumps(result) + "\n")
                log.flush()
                print(summary(result), flush=True)
        return results
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def record(tmp, workload, limits):
    """`shardrec record --no-merge` of `workload`: the shard directory, or
    None and the failed run's result; and the seconds it took."""
    output = os.path.join(tmp, "recording.data")
    report, log = os.path.join(tmp, "load.report"), os.path.join(tmp, "stderr.log")
    argv = workloads.command([workloads.SHARDREC, "record", "--no-merge"], workload, output, report)
    result = runner.run(argv, report, log, limits)
    shards = output + ".shards"
    if result["status"] == "ok" and result["left_behind"]:
        result["status"] = "left processes behind"
    if result["status"] == "ok" and os.path.isdir(shards):
        print(f"[merge] recorded {workload.name} into {sum(map(os.path.getsize, files(shards))) / 1e9:.2f} GB"
              " of shards", flush=True)
        return shards, None, result["total_s"]
    with open(log, errors="replace") as f:
        result.update(status=result["status"] if result["status"] != "ok" else "no shards",
                      stderr=f.read()[-2000:])
    result.update(threads=0, compress=False, recording=True)
    return None, result, result["total_s"]


def merge(shards, output, threads, compress, timeout):
    """One timed `shardrec merge --threads N [-z]` after the page cache is
    made as the merge at the end of a recording finds it (module doc)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(output)
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    for path in files(shards):
        read_through(path)
    argv = [workloads.SHARDREC, "merge", "--threads", str(threads)]
    argv += ["-z"] if compress else []
    argv += [shards, "-o", output]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        status = "ok" if done.returncode == 0 else f"exit status {done.returncode}"
        stderr = done.stderr
    except subprocess.TimeoutExpired as e:
        status, stderr = f"timeout after {timeout:.0f} s", (e.stderr or b"").decode(errors="replace")
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = {"threads": threads, "compress": compress, "status": status, "wall_s": wall}
    result["cpu_s"] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    result.update(parse_summary(stderr))
    if os.path.exists(output):
        result["output_bytes"] = os.path.getsize(output)
        os.unlink(output)
    if status != "ok":
        result["stderr"] = stderr[-2000:]
    return result


def parse_summary(stderr):
    """The merge's own time (as measure.py reads it from any shardrec
    summary) and how it split the work: `merged in N time slices by M
    threads`."""
    found = {k: v for k, v in measure.shardrec_summary(stderr).items() if k == "merge_s"}
    split = re.search(r"merged in (\d+) time slices? by (\d+) threads?", stderr)
    if split:
        found["slices"], found["threads_used"] = int(split.group(1)), int(split.group(2))
    return found


def files(directory):
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory))
            if os.path.isfile(os.path.join(directory, n))]


def read_through(path):
    """Reads `path` once, so its pages are in the page cache."""
    buf = bytearray(1 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def summary(r):
    line = f"[{r['rep']}] merge --threads {r['threads']}{' -z' if r['compress'] else ''}: {r['status']}"
    if r["status"] == "ok":
        line += f"  wall {r['wall_s']:.2f} s  CPU {r['cpu_s']:.2f} s"
        if "output_bytes" in r:
            line += f"  out {r['output_bytes'] / 1e6:.0f} MB"
    return line


def load(out):
    """The merge results kept in `out`, if any."""
    path = os.path.join(out, "merges.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
