"""The results as Markdown: medians with min–max per workload and recorder,
the ratio shardrec / each perf mode, and the merge's thread scaling;
written between markers in bench/README.md."""

import statistics

from workloads import RECORDERS

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
PERF_MODES = ["perf", "perf-threads", "perf-aio", "perf-rt"]
# The rows of the ratio table, (ours, theirs), wherever both ran: shardrec
# against each perf mode; with -z, against perf -z and against plain perf.
RATIOS = [("shardrec", m) for m in PERF_MODES] + [("shardrec-z", "perf-z"), ("shardrec-z", "perf")]
# With --filter, against plain perf (which cannot filter) and plain shardrec.
RATIOS += [("shardrec-filter", "perf"), ("shardrec-filter", "shardrec")]

# (key, column header, unit divisor). The derived wall_ratio (the slowdown:
# of the wall time, or of the work done where a workload runs for a fixed
# time) is filled in by `with_ratios`.
COST = [
    ("wall_s", "wall s", 1),
    ("wall_ratio", "× base", 1),
    ("startup_s", "start s", 1),
    ("recorder_cpu_s", "recorder CPU s", 1),
    ("other_cpu_s", "other CPU s", 1),
    ("pss_peak_kb", "PSS MB", 1024),
    ("maxrss_kb", "max RSS MB", 1024),
]
OUTPUT = [
    ("samples", "samples", 1),
    ("lost", "lost", 1),
    ("own_samples", "own", 1),
    ("output_bytes", "out MB", 1e6),
    ("tail_s", "to perf.data s", 1),
    ("merge_s", "of which merge s", 1),
    ("report_s", "perf report s", 1),
]


def tables(runs, host, merges=()):
    """Every table; `merges` are the runs of the merge-scaling step."""
    failed = sum(r["status"] != "ok" for r in runs)
    runs = with_ratios([r for r in runs if r["status"] == "ok"])
    groups = grouped(runs)
    workloads = list(dict.fromkeys(r["workload"] for r in runs))
    ran = {r["recorder"] for r in runs}
    recorders = [r for r in RECORDERS if r in ran] + sorted(ran - set(RECORDERS))
    parts = [
        f"Measured {host['date']} on `{host['host']}`: {host['cpus']} × {host['cpu']}, "
        f"{host['memory_gb']} GB, {host['virt']} VM, Linux {host['kernel']}, {host['perf']}, "
        f"shardrec {host['shardrec']}; {host['reps']} repetitions at scale {host['scale']:g}"
        + (f", {host['duration_s'] / 60:.0f} minutes in all" if "duration_s" in host else "")
        + f"; perf_event_max_sample_rate {host['max_sample_rate']}.",
        "Each cell: median (min–max) over the repetitions.",
        "### Cost",
        table(groups, workloads, recorders, COST),
        "### Output",
        table(groups, workloads, [r for r in recorders if r != "none"], OUTPUT),
        "### shardrec ÷ perf (ratio of medians; below 1 is better for shardrec)",
        ratio_table(groups, workloads),
    ]
    parts += bpf_note(groups, recorders)
    if failed:
        parts.append(f"{failed} runs failed and are left out; see runs.jsonl.")
    parts += merge_tables(merges)
    return "\n\n".join(parts) + "\n"


def bpf_note(groups, recorders):
    """How many of the churned BPF programs each recorder described."""
    found = [
        f"{rec} {median(groups, 'bpf-churn', rec, 'bpf_programs'):g}"
        for rec in recorders
        if median(groups, "bpf-churn", rec, "bpf_programs") is not None
    ]
    if not found:
        return []
    note = "BPF churn, programs with info in perf.data's header (medians): " + ", ".join(found) + "."
    loaded = median(groups, "bpf-churn", "shardrec", "bpf_loaded")
    if loaded is not None:
        captured = median(groups, "bpf-churn", "shardrec", "bpf_captured")
        missed = median(groups, "bpf-churn", "shardrec", "bpf_missed")
        note += (
            f" shardrec's VIP saw {loaded:g} loaded, captured {captured:g}, and missed {missed:g}"
            " that were gone before it could ask for them."
        )
    return [note]


def with_ratios(runs):
    """Adds each run's slowdown over its workload's baseline (the median
    without a recorder): its wall time over the baseline's, or, for a
    workload of fixed time, which reports its work, the baseline's work
    per second over its own (how much longer the same work took)."""
    base, rate = {}, {}
    for r in runs:
        if r["recorder"] == "none" and "wall_s" in r:
            base.setdefault(r["workload"], []).append(r["wall_s"])
            if work_rate(r):
                rate.setdefault(r["workload"], []).append(work_rate(r))
    for r in runs:
        if r["workload"] in rate and work_rate(r):
            r["wall_ratio"] = statistics.median(rate[r["workload"]]) / work_rate(r)
        elif r["workload"] in base and "wall_s" in r:
            r["wall_ratio"] = r["wall_s"] / statistics.median(base[r["workload"]])
    return runs


def work_rate(r):
    """Work per second of a run whose workload reports its work, or None."""
    if r.get("work") and r.get("wall_s"):
        return r["work"] / r["wall_s"]
    return None


def grouped(runs):
    groups = {}
    for r in runs:
        groups.setdefault((r["workload"], r["recorder"]), []).append(r)
    return groups


def values(group, key):
    return [r[key] for r in group if r.get(key) is not None]


def median(groups, workload, recorder, key):
    v = values(groups.get((workload, recorder), []), key)
    return statistics.median(v) if v else None


def table(groups, workloads, recorders, columns):
    head = ["workload", "recorder"] + [c[1] for c in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in workloads:
        for rec in recorders:
            group = groups.get((w, rec), [])
            if not group:
                continue  # a recorder this workload does not run under
            cells = [w, rec] + [cell(values(group, key), div) for key, _, div in columns]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cell(v, div):
    if not v:
        return "–"
    v = [x / div for x in v]
    med = number(statistics.median(v))
    return med if min(v) == max(v) else f"{med} ({number(min(v))}–{number(max(v))})"


def number(x):
    if x == 0:
        return "0"
    if abs(x) >= 1e6:
        return f"{x / 1e6:.2f}M"
    if abs(x) >= 1e4:
        return f"{x / 1e3:.0f}k"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}"


def ratio_table(groups, workloads):
    skip = ("wall_s", "startup_s", "maxrss_kb", "merge_s")
    columns = [c for c in COST + OUTPUT if c[0] not in skip]
    columns.insert(0, ("startup_s", "start s", 1))
    head = ["workload", "recorder", "vs"] + [c[1] for c in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in workloads:
        for us, them in RATIOS:
            if (w, them) not in groups or (w, us) not in groups:
                continue
            cells = [w, us, them]
            for key, _, _ in columns:
                ours, theirs = median(groups, w, us, key), median(groups, w, them, key)
                cells.append(ratio(ours, theirs))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio(ours, theirs):
    if ours is None or theirs is None:
        return "–"
    if theirs == 0:
        return "= (0)" if ours == 0 else "∞"
    return f"{ours / theirs:.2f}"


def merge_tables(merges):
    """The merge-scaling table: one row per thread count and compression,
    from the `shardrec merge` runs over one kept DWARF recording."""
    merges = [m for m in merges if m["status"] == "ok"]
    if not merges:
        return []
    groups = {}
    for m in merges:
        groups.setdefault((m["compress"], m["threads"]), []).append(m)
    input_gb = statistics.median(m["input_bytes"] for m in merges) / 1e9
    head = ["merge", "threads", "wall s", "CPU s", "input GB/s", "× 1 thread", "out MB", "time slices"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for compress, threads in sorted(groups):
        group = groups[(compress, threads)]
        wall = statistics.median(values(group, "wall_s"))
        one = groups.get((compress, 1))
        speedup = statistics.median(values(one, "wall_s")) / wall if one else None
        used = sorted(set(values(group, "threads_used")))
        cells = [
            "`-z`" if compress else "plain",
            str(threads) + ("" if used in ([], [threads]) else f" ({'/'.join(map(str, used))} used)"),
            cell(values(group, "wall_s"), 1),
            cell(values(group, "cpu_s"), 1),
            number(input_gb / wall),
            "–" if speedup is None else f"{speedup:.2f}",
            cell(values(group, "output_bytes"), 1e6),
            cell(values(group, "slices"), 1),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    reps = max(len(g) for g in groups.values())
    return [
        "### Merge threads",
        f"`shardrec merge --threads N` over the shards of one DWARF recording ({input_gb:.2f} GB),"
        f" {reps} times each; caches dropped and the shards read back before each (see Method).",
        "\n".join(lines),
    ]


def replace_section(path, text):
    """Puts `text` between the markers in `path`, keeping the rest."""
    with open(path) as f:
        content = f.read()
    start, end = content.find(BEGIN), content.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{path}: markers {BEGIN} … {END} not found")
    with open(path, "w") as f:
        f.write(content[: start + len(BEGIN)] + "\n\n" + text + "\n" + content[end:])
