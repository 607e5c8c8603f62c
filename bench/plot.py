"""bench/plot.svg: lost records and recorder CPU against the event rate,
one point per run; bench/plot-to-perfdata.svg: the time from the
workload's exit to a finished perf.data, per workload and recorder. Both
drawn as plain SVG."""

import math
import statistics
from html import escape

COLORS = {
    "perf": "#1f77b4",
    "perf-threads": "#ff7f0e",
    "perf-aio": "#2ca02c",
    "perf-rt": "#9467bd",
    "shardrec": "#d62728",
    "perf-z": "#17becf",
    "shardrec-z": "#8c564b",
    "shardrec-filter": "#e377c2",
}
SHAPES = ["circle", "square", "up", "diamond", "down", "cross"]
# Startup runs a trivial workload: its rate and CPU per second mean nothing.
SKIP = {"startup"}
W, H, PANEL_W, PANEL_H, LEFT, TOP = 980, 470, 380, 280, 80, 60


def points(runs):
    """(workload, recorder, events/s, lost %, recorder CPU %) of each run:
    every run, not medians, since losses come and go between repetitions."""
    found = []
    for r in runs:
        measured = r["status"] == "ok" and "lost" in r and r["wall_s"] > 0
        if measured and r["workload"] not in SKIP:
            offered = r["samples"] + r["lost"]
            found.append(
                (
                    r["workload"],
                    r["recorder"],
                    offered / r["wall_s"],
                    100 * r["lost"] / max(offered, 1),
                    100 * r["recorder_cpu_s"] / r["wall_s"],
                )
            )
    return found


def svg(runs, host):
    pts = points(runs)
    workloads = list(dict.fromkeys(p[0] for p in pts))
    shape = {w: SHAPES[i % len(SHAPES)] for i, w in enumerate(workloads)}
    rates = [p[2] for p in pts if p[2] > 0] or [1]
    lo, hi = math.floor(math.log10(min(rates))), math.ceil(math.log10(max(rates)))
    hi = max(hi, lo + 1)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}"'
        ' font-family="sans-serif" font-size="12">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        text(W / 2, 22, "Lost records and recorder CPU against event rate", 15, "middle"),
        text(W / 2, 40, f"{host['cpus']} × {host['cpu']}, Linux {host['kernel']}, {host['date']}; "
             "one point per run; -m 1024 for every recorder", 11, "middle"),
    ]
    panels = [("lost records (% of offered)", 3), ("recorder CPU (% of one CPU)", 4)]
    for i, (title, col) in enumerate(panels):
        x0 = LEFT + i * (PANEL_W + 110)
        ymax = nice_max(max([p[col] for p in pts] + [1]))
        out += axes(x0, lo, hi, ymax, title)
        for w, rec, rate, *ys in pts:
            px = x0 + PANEL_W * (math.log10(max(rate, 10**lo)) - lo) / (hi - lo)
            py = TOP + PANEL_H * (1 - ys[col - 3] / ymax)
            out.append(marker(shape[w], px, py, COLORS.get(rec, "black"), f"{w}, {rec}"))
    out += legend(workloads, shape)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def tail_svg(runs, host):
    """Per workload, for each recorder, the median time from the workload's
    exit to the recorder's exit (a finished perf.data) as a dot, and a line
    from the fastest run to the slowest; log scale, as the times span
    milliseconds to seconds."""
    tails = {}
    for r in runs:
        if r["status"] == "ok" and r["recorder"] != "none" and r.get("tail_s") is not None:
            tails.setdefault(r["workload"], {}).setdefault(r["recorder"], []).append(max(r["tail_s"], 1e-4))
    ran = {rec for group in tails.values() for rec in group}
    recorders = [rec for rec in COLORS if rec in ran] + sorted(ran - set(COLORS))
    every = [t for group in tails.values() for v in group.values() for t in v] or [0.01, 1]
    lo, hi = math.floor(math.log10(min(every))), math.ceil(math.log10(max(every)))
    hi = max(hi, lo + 1)
    step, gap, height = 16, 30, 300
    widths = {w: step * len(group) + gap for w, group in tails.items()}
    width = max(LEFT + sum(widths.values()) + 20, 640)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{TOP + height + 110}"'
        ' font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{TOP + height + 110}" fill="white"/>',
        text(width / 2, 22, "From the workload's exit to a finished perf.data", 15, "middle"),
        text(width / 2, 40, f"{host['cpus']} × {host['cpu']}, Linux {host['kernel']}, {host['date']}; "
             "median (dot) and min–max (line) per recorder", 11, "middle"),
    ]

    def y(v):
        return TOP + height * (hi - math.log10(v)) / (hi - lo)

    right = LEFT + sum(widths.values())
    for d in range(lo, hi + 1):
        for m in (1, 2, 5):
            v = m * 10**d
            if v > 10**hi:
                break
            color = "#ccc" if m == 1 else "#eee"
            out.append(f'<line x1="{LEFT}" y1="{y(v):.1f}" x2="{right}" y2="{y(v):.1f}" stroke="{color}"/>')
            if m == 1 or hi - lo <= 2:
                out.append(text(LEFT - 6, y(v) + 4, f"{v:g} s", 11, "end"))
    frame = f'x="{LEFT}" y="{TOP}" width="{right - LEFT}" height="{height}"'
    out.append(f'<rect {frame} fill="none" stroke="#444"/>')
    x = LEFT + gap / 2
    for w, group in tails.items():
        out.append(text(x + step * len(group) / 2 - step / 2, TOP + height + 16, w, 11, "middle"))
        for rec in (r for r in recorders if r in group):
            v, color = group[rec], COLORS.get(rec, "black")
            out.append(f'<line x1="{x:.1f}" y1="{y(max(v)):.1f}" x2="{x:.1f}" y2="{y(min(v)):.1f}"'
                       f' stroke="{color}" stroke-width="2"/>')
            label = f"{w}, {rec}: median {statistics.median(v):.3g} s ({min(v):.3g}–{max(v):.3g})"
            out.append(marker("circle", x, y(statistics.median(v)), color, label))
            x += step
        x += gap
    lx, ly = LEFT, TOP + height + 50
    for rec in recorders:
        color = COLORS.get(rec, "black")
        out += [marker("circle", lx, ly, color, rec), text(lx + 10, ly + 4, rec, 12)]
        lx += 40 + 8 * len(rec)
    out.append(text(LEFT, ly + 30, "time from the workload's exit to the recorder's exit, log scale", 11))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def axes(x0, lo, hi, ymax, title):
    y1 = TOP + PANEL_H
    out = [f'<rect x="{x0}" y="{TOP}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#444"/>']
    for d in range(lo, hi + 1):
        x = x0 + PANEL_W * (d - lo) / (hi - lo)
        out.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{y1}" stroke="#ddd"/>')
        out.append(text(x, y1 + 16, si(10**d), 11, "middle"))
    step = ymax / 5
    for k in range(6):
        y = y1 - PANEL_H * k / 5
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + PANEL_W}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(text(x0 - 6, y + 4, f"{k * step:g}", 11, "end"))
    label = "offered events per second of workload (samples + lost, log)"
    out.append(text(x0 + PANEL_W / 2, y1 + 36, label, 11, "middle"))
    out.append(text(x0 + PANEL_W / 2, TOP - 6, title, 13, "middle"))
    return out


def legend(workloads, shape):
    y = TOP + PANEL_H + 62
    out, x = [], LEFT
    for rec, color in COLORS.items():
        out += [marker("circle", x, y, color, rec), text(x + 10, y + 4, rec, 12)]
        x += 40 + 8 * len(rec)
    x = LEFT
    for w in workloads:
        out += [marker(shape[w], x, y + 24, "#555", w), text(x + 10, y + 28, w, 12)]
        x += 40 + 8 * len(w)
    return out


def marker(kind, x, y, color, title):
    """One point, its `title` shown on hover."""
    r = 5
    style = f'fill="{color}" fill-opacity="0.5" stroke="{color}"'
    if kind == "circle":
        shape = f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" {style}/>'
    elif kind == "square":
        shape = f'<rect x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r}" height="{2 * r}" {style}/>'
    elif kind == "cross":
        left, top, right, bottom = x - r, y - r, x + r, y + r
        path = f"M{left:.1f},{top:.1f}L{right:.1f},{bottom:.1f}M{left:.1f},{bottom:.1f}L{right:.1f},{top:.1f}"
        shape = f'<path d="{path}" stroke="{color}" stroke-width="2.5"/>'
    else:
        corners = {
            "up": [(0, -r - 1), (r + 1, r), (-r - 1, r)],
            "down": [(0, r + 1), (r + 1, -r), (-r - 1, -r)],
            "diamond": [(0, -r - 1), (r + 1, 0), (0, r + 1), (-r - 1, 0)],
        }[kind]
        pts = " ".join(f"{x + dx:.1f},{y + dy:.1f}" for dx, dy in corners)
        shape = f'<polygon points="{pts}" {style}/>'
    return f"<g><title>{escape(title)}</title>{shape}</g>"


def text(x, y, s, size, anchor="start"):
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}">{escape(str(s))}</text>'


def nice_max(v):
    """The smallest 1, 2 or 5 × 10^k at or above `v`."""
    e = 10 ** math.floor(math.log10(v))
    return next(m * e for m in (1, 2, 5, 10) if m * e >= v)


def si(v):
    for unit, div in (("M", 1e6), ("k", 1e3)):
        if v >= div:
            return f"{v / div:g}{unit}"
    return f"{v:g}"
