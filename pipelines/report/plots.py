"""SVG plots for the HTML reports, returned as ``data:`` URIs (self-contained HTML).

Drawn with :mod:`.svg` (a small chart writer: no matplotlib, so a run's report
costs milliseconds, not ~0.6 s of imports and PNG encoding; issue 21).  Every
function takes plain JSON-ready data (what ``report.json`` / ``tune.json``
hold), so a report can be re-rendered from its JSON alone.

Each plot is built in two steps that tests can look at without pixels:
``*_figure`` returns the :class:`~.svg.Figure` (axis scales, labels, tick
labels, the marks and legend), and for recall per period
:func:`recall_plot_data` gives the numbers it draws (which periods fail, the
groups drawn, the x-axis kind).

Time axes: when ``time_origin`` is given (report.json's key: replay times are
microseconds since the Unix epoch, see
:func:`~streamjoin.pipelines.report.json.calendar_origin`) they show UTC
dates and times (x positions are then epoch microseconds); otherwise the time
since the first period with results (or the first arrival).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..base.timeunits import format_duration
from .svg import Axes, Figure

ACCENT, TARGET, MUTED, SECOND = "#2563eb", "#dc2626", "#94a3b8", "#059669"
#: failing periods: red downward triangles, on top of everything else
FAIL_MARKER = "v"


def _uri(fig: Figure) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(fig.svg().encode("utf-8")).decode("ascii")


def _unit_of(top_us: float) -> tuple[float, str]:
    """``(microseconds per unit, unit)`` people read for values up to ``top_us``."""
    top = abs(top_us)
    for div, unit in ((86_400e6, "d"), (3_600e6, "h"), (60e6, "min")):
        if top >= 2 * div:
            return div, unit
    for div, unit in ((1e6, "s"), (1e3, "ms")):
        if top >= div:
            return div, unit
    return 1.0, "us"


def _time_axis(us: Sequence[float]) -> tuple[list[float], str]:
    """Microseconds -> a unit people read (d, h, min, s, ms or us)."""
    div, unit = _unit_of(max((abs(v) for v in us), default=0))
    return [v / div for v in us], unit


def _instant_axis(us: Sequence[float], origin: str | None, span_us: float, what: str, since: str) -> dict[str, Any]:
    """x positions for instants ``us``: epoch microseconds on a UTC date axis when ``origin``
    says they are epoch times, else in a unit of the span after ``us[0]`` (``since`` names that
    instant in the label).  ``{"kind", "x", "label"}``."""
    if origin is not None:
        return {"kind": "date", "x": [float(v) for v in us], "label": f"{what} (UTC)"}
    first = us[0] if len(us) else 0
    div, unit = _unit_of(span_us)
    return {"kind": "relative", "x": [(v - first) / div for v in us], "label": f"{what} ({unit} after {since})"}


def _compact(v: float) -> str:
    """``25k``, ``1.2M``: short tick labels for counts."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{suffix}"
    return f"{v:g}"


#: groups drawn at most by :func:`recall_per_period` (consecutive periods are grouped beyond this)
MAX_BARS = 200


def period_groups(periods: list[dict[str, Any]], max_bars: int = MAX_BARS) -> dict[str, Any]:
    """Consecutive periods in groups of ``k``, so that at most ``max_bars`` groups cover the
    listed periods' span: per group its first period's start, recall = sum emitted / sum
    truth, the results (truth) and the worst single period's recall.  ``periods`` is
    report.json's sparse list (only periods with truth), so the work is O(listed periods),
    never O(span / P); a group without listed periods is not there at all."""
    if not periods:
        return {"k": 1, "span_periods": 0, "start_us": [], "recall": [], "worst": [], "truth": []}
    start = periods[0]["start_us"]
    P = periods[0]["end_us"] - start
    index = [(p["start_us"] - start) // P for p in periods]
    span = index[-1] + 1
    k = max(1, -(-span // max_bars))
    groups: dict[int, list[float]] = {}
    for i, p in zip(index, periods):
        g = groups.setdefault(i // k, [0, 0, 1.0])
        g[0] += p["truth"]
        g[1] += p["emitted"]
        g[2] = min(g[2], p["recall"])
    keys = sorted(groups)
    return {
        "k": k, "span_periods": span, "period_us": P,
        "start_us": [start + g * k * P for g in keys],
        "recall": [groups[g][1] / groups[g][0] for g in keys],
        "worst": [groups[g][2] for g in keys],
        "truth": [groups[g][0] for g in keys],
    }


def recall_plot_data(periods: list[dict[str, Any]], target: float | None, *, period_us: int | None = None,
                     total: int | None = None, time_origin: str | None = None) -> dict[str, Any]:
    """What :func:`recall_per_period` draws, from report.json's ``periods`` (only periods
    with results: empty periods are gaps, never drawn).

    ``groups``: :func:`period_groups` plus ``x`` / ``x_end`` (each group a short line at
    its recall, and a bar of its result count below); ``failing``: every single period
    whose recall is below ``target`` (``start_us``, ``recall``, ``truth``, ``x`` its
    middle), drawn one by one as red triangles whatever the grouping; ``x_kind``:
    ``"date"`` (UTC) when ``time_origin`` is set, else ``"relative"``; ``xlabel``,
    ``title``, ``ylim``."""
    P = period_us or (periods[0]["end_us"] - periods[0]["start_us"] if periods else None)
    name = f"{format_duration(P)} " if P else ""
    g = period_groups(periods)
    if not periods:
        return {"empty": True, "title": f"recall per {name}period (no results)", "xlabel": "period start",
                "x_kind": "relative", "groups": g, "failing": {"start_us": [], "recall": [], "truth": [], "x": []}}
    k, n = g["k"], len(g["start_us"])
    total = total if total is not None else g["span_periods"]
    fail = [p for p in periods if target is not None and p["recall"] < target]
    m = len(fail)
    # every instant on one axis (relative ones count from the first group's start)
    instants = (g["start_us"] + [s + k * g["period_us"] for s in g["start_us"]]
                + [p["start_us"] for p in fail] + [p["end_us"] for p in fail])
    axis = _instant_axis(instants, time_origin, g["span_periods"] * g["period_us"], "period start",
                         "the first period with results")
    x = axis["x"]
    g["x"], g["x_end"] = x[:n], x[n:2 * n]
    lows = [p["recall"] for p in fail] + g["recall"] + ([target] if target is not None else [])
    below = "" if target is None else f", {m:,} below the target"
    return {
        "empty": False,
        "title": f"recall per {name}period: {len(periods):,} of {total:,} periods have results{below}",
        "xlabel": axis["label"], "x_kind": axis["kind"], "groups": g,
        "failing": {"start_us": [p["start_us"] for p in fail], "recall": [p["recall"] for p in fail],
                    "truth": [p["truth"] for p in fail],
                    "x": [(a + b) / 2 for a, b in zip(x[2 * n:2 * n + m], x[2 * n + m:])]},
        "ylim": (max(0.0, min(lows) - 0.03), 1.01),
    }


def recall_figure(periods: list[dict[str, Any]], target: float | None, *, period_us: int | None = None,
                  total: int | None = None, time_origin: str | None = None) -> Figure:
    """Recall per period (top) and results per period (bottom), from :func:`recall_plot_data`."""
    d = recall_plot_data(periods, target, period_us=period_us, total=total, time_origin=time_origin)
    fig = Figure(2, ratios=[3, 1], title=d["title"])
    ax, counts = fig.axes
    if not d["empty"]:
        g, f = d["groups"], d["failing"]
        label = "recall" if g["k"] == 1 else f"recall of each group of {g['k']:,} periods"
        ax.add("segments", x=g["x"], x_end=g["x_end"], y=g["recall"], color=ACCENT, width=2.2, label=label)
        if target is not None:
            ax.axhline(target, color=TARGET, style="--", width=1.0, label=f"target {target:g}")
            if f["x"]:
                size = 5 if len(f["x"]) <= 50 else 4 if len(f["x"]) <= 300 else 3  # many: smaller, still red
                ax.points(f["x"], f["recall"], marker=FAIL_MARKER, color=TARGET, marker_size=size, edge="#7f1d1d",
                          label=f"below target ({len(f['x']):,} periods)")
        elif g["k"] > 1:
            ax.points([(a + b) / 2 for a, b in zip(g["x"], g["x_end"])], g["worst"], marker="o", color="#0f172a",
                      marker_size=2.5, label="worst single period")
        ax.ylim = d["ylim"]
        ax.legend = True
        widths = [b - a for a, b in zip(g["x"], g["x_end"])]
        counts.add("bars", x=g["x"], x_end=widths, y=g["truth"], color=MUTED)
    counts.ylabel = "results"
    counts.ytick_count, counts.integer_y, counts.ytick_format = 3, True, _compact
    counts.xlabel = d["xlabel"]
    counts.xscale = ax.xscale = "date" if d["x_kind"] == "date" else "linear"
    ax.ylabel = "recall"
    return fig


def recall_per_period(periods: list[dict[str, Any]], target: float | None, *, period_us: int | None = None,
                      total: int | None = None, time_origin: str | None = None) -> str:
    """:func:`recall_figure` as a ``data:`` URI.  ``total``: report.json ``periods_total``."""
    return _uri(recall_figure(periods, target, period_us=period_us, total=total, time_origin=time_origin))


def _instant_series_axis(ax: Axes, us: Sequence[float], origin: str | None, what: str, since: str) -> list[float]:
    """x positions of instants ``us`` (see :func:`_instant_axis`); sets the label and the scale."""
    axis = _instant_axis(us, origin, (us[-1] - us[0]) if len(us) else 0, what, since)
    ax.xlabel = axis["label"]
    ax.xscale = "date" if axis["kind"] == "date" else "linear"
    return axis["x"]


def memory_figure(series: dict[str, Any], time_origin: str | None = None) -> Figure:
    fig = Figure()
    ax = fig.axes[0]
    t = series.get("arrival_us") or []  # at most MAX_SERIES_POINTS buckets (report/html.py)
    xs = _instant_series_axis(ax, t, time_origin, "arrival time", "the first arrival")
    if t:
        ax.add("fill_step", x=xs, y=series["peak"], color=ACCENT, alpha=0.25, label="most held at once")
        ax.step(xs, series["mean"], color=ACCENT, width=1.0, label="average held")
        ax.legend = True
    ax.ylabel = "tuples held"
    ax.ytick_format = _compact
    return fig


def memory_over_time(series: dict[str, Any], time_origin: str | None = None) -> str:
    return _uri(memory_figure(series, time_origin))


def latency_figure_of(hist: dict[str, Any], summary: dict[str, Any]) -> Figure:
    """The latency histogram (log-like y when a few bins dwarf the rest), mean and p95 marked."""
    fig = Figure()
    ax = fig.axes[0]
    edges, counts = hist.get("edges_us") or [], hist.get("counts") or []
    if counts and sum(counts) and edges[-1] <= 1 and counts[0] == sum(counts) and not summary.get("max"):
        ax.add("text", text=f"all {sum(counts):,} results were emitted the moment their last member arrived "
                            f"(latency 0)", color="#334155")
        ax.y_ticks = lambda: []  # type: ignore[method-assign]
        ax.x_ticks = lambda lims=None: []  # type: ignore[method-assign]
    elif counts and sum(counts):
        xs, unit = _time_axis(edges)
        widths = [b - a for a, b in zip(xs[:-1], xs[1:])]
        ax.add("bars", x=xs[:-1], x_end=widths, y=counts, color=ACCENT, edge="white")
        for name, colour in (("mean", SECOND), ("p95", TARGET)):
            v = summary.get(name)
            if v is not None:
                scaled = _time_axis([v, edges[-1]])[0][0] if unit != "us" else float(v)
                ax.axvline(scaled, color=colour, style="--", width=1.2, label=f"{name} {format_duration(v)}")
        ax.legend = True
        ax.xlabel = f"latency of a result ({unit})"
        if max(counts) > 50 * max(1, sorted(counts)[len(counts) // 2]):
            ax.yscale = "symlog"
        ax.ytick_format = _compact
    else:
        ax.add("text", text="no emitted results", color=MUTED)
        ax.xlabel = "latency"
    ax.ylabel = "results"
    return fig


def latency_distribution(hist: dict[str, Any], summary: dict[str, Any]) -> str:
    return _uri(latency_figure_of(hist, summary))


#: a setting axis is logarithmic when its positive settings span at least this ratio
LOG_RATIO = 20
_S, _MIN, _H, _D = 1_000_000, 60_000_000, 3_600_000_000, 86_400_000_000
#: round durations for log-axis ticks: powers of ten within each unit, then 2s, 5s, 30s ...
_TICKS_US = (
    (1, 10, 100, 1_000, 10_000, 100_000, _S, 10 * _S, _MIN, 10 * _MIN, _H, 10 * _H, _D, 10 * _D, 100 * _D),
    (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000,
     _S, 2 * _S, 5 * _S, 10 * _S, 20 * _S, 30 * _S, _MIN, 2 * _MIN, 5 * _MIN, 10 * _MIN, 20 * _MIN, 30 * _MIN,
     _H, 2 * _H, 6 * _H, 12 * _H, _D, 2 * _D, 7 * _D, 30 * _D, 100 * _D),
)


def duration_ticks(lo_us: float, hi_us: float, most: int = 8) -> list[int]:
    """Round durations between ``lo_us`` and ``hi_us`` (1ms, 10ms, 100ms, 1s, 10s, 1min,
    10min, 1h ...; with 2s, 5s, 30s ... added when that gives fewer than 3), at most
    ``most`` of them: log-axis ticks whose labels people read."""
    for ladder in _TICKS_US:
        ticks = [t for t in ladder if lo_us <= t <= hi_us]
        if len(ticks) >= 3:
            break
    step = -(-len(ticks) // most) if ticks else 1
    return ticks[::step]


def _setting_axis(ax: Axes, settings_us: Sequence[float], label: str):
    """Sets up the x-axis of a setting (K or retention): logarithmic with duration tick
    labels when the settings span :data:`LOG_RATIO` or more (the useful range is
    then near 0), else linear in one unit.  Returns ``us -> x`` (``None``: not drawable)."""
    pos = [s for s in settings_us if s > 0]
    if len(pos) >= 2 and max(pos) / min(pos) >= LOG_RATIO:
        ax.xscale = "log"
        ticks = duration_ticks(min(pos), max(pos))
        ax.xticks, ax.xticklabels = [float(t) for t in ticks], [format_duration(t) for t in ticks]
        ax.xlabel = f"{label} (log scale)"
        return lambda us: float(us) if us and us > 0 else None
    div, unit = _unit_of(max((abs(v) for v in settings_us), default=0))
    ax.xlabel = f"{label} ({unit})"
    return lambda us: us / div


def _points(to_x, xs_us, ys):
    pts = [(to_x(x), y) for x, y in zip(xs_us, ys) if y is not None and to_x(x) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def tuning_figure(curve: dict[str, Any], *, target: float | None, label: str, marks: dict[str, float] | None = None,
                  candidates: list[dict[str, Any]] | None = None) -> Figure:
    """Recall against the setting; optional memory (mean tuples) of replayed candidates on a second axis."""
    fig = Figure()
    ax = fig.axes[0]
    s, r = curve.get("setting_us") or [], curve.get("recall") or []
    to_x = _setting_axis(ax, s, label)
    xs, ys = _points(to_x, s, r)
    at_zero = [y for x, y in zip(s, r) if x == 0]
    name = "recall" + (f" ({at_zero[0]:.4f} at {label} = 0)" if at_zero and ax.xscale == "log" else "")
    ax.step(xs, ys, color=ACCENT, width=1.8, label=name)
    if target is not None:
        ax.axhline(target, color=TARGET, style="--", width=1.0, label=f"target {target:g}")
    styles = [(SECOND, ":"), ("#7c3aed", "-.")]
    for i, (mark, v) in enumerate((marks or {}).items()):
        if v is not None and to_x(v) is not None:
            colour, style = styles[i % len(styles)]
            ax.axvline(to_x(v), color=colour, style=style, width=1.4, label=f"{mark} {format_duration(v)}")
    ax.ylabel = "recall"
    if candidates:
        ax2 = fig.twinx(ax)
        cx, cy = _points(to_x, [c["setting_us"] for c in candidates], [c["memory_tuples"]["mean"] for c in candidates])
        ax2.plot(cx, cy, marker="o", color=MUTED, marker_size=3, width=1.0, label="memory (mean tuples)")
        ax2.ylabel = "memory (mean tuples held)"
        ax2.ytick_format = _compact
    ax.legend = True
    return fig


def tuning_curve(curve: dict[str, Any], *, target: float | None, label: str, marks: dict[str, float] | None = None,
                 candidates: list[dict[str, Any]] | None = None) -> str:
    return _uri(tuning_figure(curve, target=target, label=label, marks=marks, candidates=candidates))


def latency_figure(candidates: list[dict[str, Any]], label: str) -> Figure:
    """Latency (mean and p95) of the replayed settings, against the setting."""
    fig = Figure()
    ax = fig.axes[0]
    settings = [c["setting_us"] for c in candidates]
    to_x = _setting_axis(ax, settings, label)
    top = max((c["latency_us"][name] or 0 for c in candidates for name in ("mean", "p95")), default=0)
    ydiv, yunit = _unit_of(top) if top >= 1e3 else (1e3, "ms")
    for name, colour in (("mean", ACCENT), ("p95", TARGET)):
        xs, ys = _points(to_x, settings, [c["latency_us"][name] for c in candidates])
        ax.plot(xs, [y / ydiv for y in ys], marker="o", color=colour, marker_size=3, label=f"latency {name}")
    ax.ylabel = f"result latency ({yunit})"
    ax.legend = True
    return fig


def latency_curve(candidates: list[dict[str, Any]], label: str) -> str:
    return _uri(latency_figure(candidates, label))


#: groups of periods drawn at most by :func:`compare_recall` (consecutive periods are grouped beyond this)
MAX_COMPARE_GROUPS = 300
#: line colours of the compared policies, in order
POLICY_COLOURS = (ACCENT, "#ea580c", SECOND, "#7c3aed", "#0891b2", "#be185d", "#4d7c0f", "#475569")


def compare_plot_data(c: dict[str, Any], max_groups: int = MAX_COMPARE_GROUPS) -> dict[str, Any]:
    """What :func:`compare_recall` draws, from compare.json: consecutive periods in groups
    of ``k`` (at most ``max_groups`` over the span of the periods with results), per
    policy recall = sum emitted / sum truth of each group; ``x`` its start, ``x_end`` its end."""
    starts, truth = c["periods"]["start_us"], c["periods"]["truth"]
    P = c["period_us"]
    if not starts:
        return {"empty": True, "k": 1, "x": [], "x_end": [], "recall": {}, "xlabel": "period start", "x_kind": "relative"}
    index = np.array([(s - starts[0]) // P for s in starts], np.int64)
    k = max(1, -(-(int(index[-1]) + 1) // max_groups))
    group = index // k
    keys, inverse = np.unique(group, return_inverse=True)
    t = np.bincount(inverse, weights=np.asarray(truth, np.float64))
    recall = {p["label"]: (np.bincount(inverse, weights=np.asarray(p["period_emitted"], np.float64)) / t).tolist()
              for p in c["policies"]}
    g_start = [starts[0] + int(g) * k * P for g in keys]
    axis = _instant_axis(g_start + [s + k * P for s in g_start], c.get("time_origin"),
                         (int(index[-1]) + 1) * P, "period start", "the first period with results")
    n = len(g_start)
    return {"empty": False, "k": k, "x": axis["x"][:n], "x_end": axis["x"][n:], "recall": recall,
            "xlabel": axis["label"], "x_kind": axis["kind"]}


#: legend labels longer than this are cut (the side-by-side table has them whole)
LEGEND_LABEL = 34


def compare_figure(c: dict[str, Any]) -> Figure:
    """Recall per period (or group of periods) of every compared policy, and the target.

    Each group is a short horizontal line at its recall (no line across a gap without
    results); the first policy's lines are the thickest and drawn first, so where
    policies agree every colour still shows."""
    d = compare_plot_data(c)
    P = format_duration(c["period_us"])
    per = f"{P} period" if d["k"] == 1 else f"group of {d['k']:,} {P} periods"
    fig = Figure(title=f"recall per {per}")
    ax = fig.axes[0]
    lows = [c["recall_target"]]
    count = len(d["recall"])
    for i, (label, values) in enumerate(d["recall"].items()):
        short = label if len(label) <= LEGEND_LABEL else label[:LEGEND_LABEL - 1] + "\u2026"
        ax.add("segments", x=d["x"], x_end=d["x_end"], y=values, color=POLICY_COLOURS[i % len(POLICY_COLOURS)],
               width=2.0 + 1.4 * (count - 1 - i), label=short)
        lows += values
    ax.axhline(c["recall_target"], color=TARGET, style="--", width=1.0, label=f"target {c['recall_target']:g}")
    ax.ylim = (max(0.0, min(lows) - 0.03), 1.01)
    ax.legend = True
    ax.ylabel = "recall"
    ax.xlabel = d["xlabel"]
    ax.xscale = "date" if d["x_kind"] == "date" else "linear"
    return fig


def compare_recall(c: dict[str, Any]) -> str:
    """:func:`compare_figure` as a ``data:`` URI."""
    return _uri(compare_figure(c))


#: one colour per unit in the flow-control plot (cycled)
UNIT_COLOURS = (ACCENT, SECOND, "#d97706", "#7c3aed", "#db2777", "#0891b2")


def flow_figure(section: dict[str, Any], time_origin: str | None = None) -> Figure:
    """Flow control (seed 001; report.json ``flow_control``): each unit's input-buffer
    occupancy (top: mean line, peak shaded, target ``b0`` and size ``B`` marked) and the
    rate the control law admits, ``r_max`` (bottom), over the control intervals."""
    s = section["series"]
    fig = Figure(rows=2, ratios=[3, 2])
    occ, rate = fig.axes[0], fig.axes[1]
    t = s.get("time_us") or []
    xs = _instant_series_axis(rate, t, time_origin, "time", "the first arrival")
    for i, name in enumerate(s.get("occupancy_mean", {})):
        colour = UNIT_COLOURS[i % len(UNIT_COLOURS)]
        occ.add("fill_step", x=xs, y=s["occupancy_peak"][name], color=colour, alpha=0.2)
        occ.step(xs, s["occupancy_mean"][name], color=colour, width=1.2, label=f"{name}")
        rate.step(xs, s["rate_per_s"][name], color=colour, width=1.2)
    settings = section["settings"]
    occ.axhline(settings["target"], color=TARGET, style="--", width=1.0, label=f"target b0 = {settings['target']:g}")
    occ.axhline(settings["buffer"], color=MUTED, style="--", width=1.0, label=f"buffer B = {settings['buffer']:,}")
    occ.legend = True
    occ.ylabel = "tuples in buffer"
    occ.ytick_format = _compact
    rate.ylabel = "r_max (tuples/s)"
    rate.ytick_format = _compact
    return fig


def flow_over_time(section: dict[str, Any], time_origin: str | None = None) -> str:
    return _uri(flow_figure(section, time_origin))
