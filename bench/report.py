"""The results as Markdown: medians with min–max per workload and recorder,
and the ratio shardrec / each perf mode; written between markers in
bench/README.md."""

import statistics

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
PERF_MODES = ["perf", "perf-threads", "perf-aio", "perf-rt"]

# (key, column header, unit divisor). The derived wall_ratio is filled in
# by `with_ratios`.
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


def tables(runs, host):
    failed = sum(r["status"] != "ok" for r in runs)
    runs = with_ratios([r for r in runs if r["status"] == "ok"])
    groups = grouped(runs)
    workloads = list(dict.fromkeys(r["workload"] for r in runs))
    recorders = list(dict.fromkeys(r["recorder"] for r in runs))
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
    """Adds each run's wall time over its workload's median baseline."""
    base = {}
    for r in runs:
        if r["recorder"] == "none" and "wall_s" in r:
            base.setdefault(r["workload"], []).append(r["wall_s"])
    for r in runs:
        if r["workload"] in base and "wall_s" in r:
            r["wall_ratio"] = r["wall_s"] / statistics.median(base[r["workload"]])
    return runs


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
    head = ["workload", "vs"] + [c[1] for c in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in workloads:
        for mode in PERF_MODES:
            if (w, mode) not in groups or (w, "shardrec") not in groups:
                continue
            cells = [w, mode]
            for key, _, _ in columns:
                ours, theirs = median(groups, w, "shardrec", key), median(groups, w, mode, key)
                cells.append(ratio(ours, theirs))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio(ours, theirs):
    if ours is None or theirs is None:
        return "–"
    if theirs == 0:
        return "= (0)" if ours == 0 else "∞"
    return f"{ours / theirs:.2f}"


def replace_section(path, text):
    """Puts `text` between the markers in `path`, keeping the rest."""
    with open(path) as f:
        content = f.read()
    start, end = content.find(BEGIN), content.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{path}: markers {BEGIN} … {END} not found")
    with open(path, "w") as f:
        f.write(content[: start + len(BEGIN)] + "\n\n" + text + "\n" + content[end:])
