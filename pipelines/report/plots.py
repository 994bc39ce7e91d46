"""PNG plots for the HTML reports, returned as ``data:`` URIs (self-contained HTML).

matplotlib's object API (``Figure`` + the Agg canvas) is used, never
``pyplot``: no global state, no GUI backend, no display needed (cron).
Every function takes plain JSON-ready data (what ``report.json`` /
``tune.json`` hold), so a report can be re-rendered from its JSON alone.

Each plot is built in two steps that tests can look at without pixels:
``*_figure`` returns the matplotlib ``Figure`` (axis scales, labels, tick
labels), and for recall per period :func:`recall_plot_data` gives the
numbers it draws (which periods fail, the groups drawn, the x-axis kind).

Time axes: when ``time_origin`` is given (report.json's key: replay times are
microseconds since the Unix epoch, see
:func:`~streamjoin.pipelines.report.json.calendar_origin`) they show UTC
dates and times; otherwise the time since the first period with results (or
the first arrival).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..base.timeunits import format_duration

WIDTH, HEIGHT, DPI = 9.1, 3.6, 100  # 910 px: the page's content width
ACCENT, TARGET, MUTED, SECOND = "#2563eb", "#dc2626", "#94a3b8", "#059669"
#: failing periods: red downward triangles, on top of everything else
FAIL_MARKER = "v"
#: type sizes (points): readable at the page's width and at 600 px (a phone scrolls the plot sideways)
LABEL_SIZE, TICK_SIZE, LEGEND_SIZE, TITLE_SIZE = 12, 11, 10, 11


def _figure(rows: int = 1, ratios: Sequence[int] | None = None):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH, HEIGHT if rows == 1 else HEIGHT * 1.3), dpi=DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 1, sharex=True, gridspec_kw={"height_ratios": ratios} if ratios else None,
                        squeeze=False)[:, 0]
    for ax in axes:
        ax.grid(True, color="#e5e7eb", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.tick_params(labelsize=TICK_SIZE)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    return (fig, axes[0]) if rows == 1 else (fig, list(axes))


def _legend(ax, handles=None, labels=None) -> None:
    """Above the plot, never over the data: one row of up to 3 entries, two rows beyond."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if handles:
        ncol = len(handles) if len(handles) <= 3 else -(-len(handles) // 2)
        ax.legend(handles, labels, loc="lower left", bbox_to_anchor=(0.0, 1.01), ncol=ncol, frameon=False,
                  fontsize=LEGEND_SIZE, borderaxespad=0.0, handlelength=1.6, columnspacing=1.2)


def _uri(fig, *, top: float = 0.88, right: float = 0.97) -> str:
    # fixed margins: tight_layout would draw every figure twice
    fig.subplots_adjust(left=0.1, right=right, bottom=0.17, top=top)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


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
    """x positions for instants ``us``: matplotlib dates (UTC) when ``origin`` says they
    are epoch times, else in a unit of the span after ``us[0]`` (``since`` names that
    instant in the label).  ``{"kind", "x", "label"}``."""
    if origin is not None:
        from matplotlib.dates import date2num

        x = date2num(np.asarray(us, dtype=np.int64).astype("datetime64[us]")).tolist() if len(us) else []
        return {"kind": "date", "x": x, "label": f"{what} (UTC)"}
    first = us[0] if len(us) else 0
    div, unit = _unit_of(span_us)
    return {"kind": "relative", "x": [(v - first) / div for v in us], "label": f"{what} ({unit} after {since})"}


def _date_ticks(ax) -> None:
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    locator = AutoDateLocator(minticks=5, maxticks=10)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))


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
                  total: int | None = None, time_origin: str | None = None):
    """Recall per period (top) and results per period (bottom), from :func:`recall_plot_data`."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    d = recall_plot_data(periods, target, period_us=period_us, total=total, time_origin=time_origin)
    fig, (ax, counts) = _figure(2, ratios=[3, 1])
    if not d["empty"]:
        g, f = d["groups"], d["failing"]
        label = "recall" if g["k"] == 1 else f"recall of each group of {g['k']:,} periods"
        ax.hlines(g["recall"], g["x"], g["x_end"], colors=ACCENT, linewidth=2.2, label=label)
        if target is not None:
            ax.axhline(target, color=TARGET, linestyle="--", linewidth=1.0, label=f"target {target:g}")
            if f["x"]:
                size = 6 if len(f["x"]) <= 50 else 4.5 if len(f["x"]) <= 300 else 3.5  # many: smaller, still red
                ax.plot(f["x"], f["recall"], FAIL_MARKER, color=TARGET, markersize=size, markeredgecolor="#7f1d1d",
                        markeredgewidth=0.5, linestyle="none", label=f"below target ({len(f['x']):,} periods)",
                        zorder=5)
        elif g["k"] > 1:
            ax.plot([(a + b) / 2 for a, b in zip(g["x"], g["x_end"])], g["worst"], "o", color="#0f172a", markersize=2.5, label="worst single period")
        ax.set_ylim(*d["ylim"])
        widths = [b - a for a, b in zip(g["x"], g["x_end"])]
        counts.bar(g["x"], g["truth"], width=widths, align="edge", color=MUTED, linewidth=0)
        _legend(ax)
    counts.set_ylabel("results", fontsize=LABEL_SIZE - 1)
    counts.yaxis.set_major_locator(MaxNLocator(2, integer=True))
    counts.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _compact(v)))
    counts.set_xlabel(d["xlabel"], fontsize=LABEL_SIZE)
    if d["x_kind"] == "date":
        _date_ticks(counts)
    ax.set_ylabel("recall", fontsize=LABEL_SIZE)
    fig.suptitle(d["title"], fontsize=TITLE_SIZE, x=0.1, y=0.99, ha="left", va="top")
    fig.subplots_adjust(hspace=0.12)
    return fig


def recall_per_period(periods: list[dict[str, Any]], target: float | None, *, period_us: int | None = None,
                      total: int | None = None, time_origin: str | None = None) -> str:
    """:func:`recall_figure` as a ``data:`` URI.  ``total``: report.json ``periods_total``."""
    return _uri(recall_figure(periods, target, period_us=period_us, total=total, time_origin=time_origin),
                top=0.87)


def _instant_series_axis(ax, us: Sequence[float], origin: str | None, what: str, since: str) -> list[float]:
    """x positions of instants ``us`` (see :func:`_instant_axis`); sets the label and date ticks."""
    axis = _instant_axis(us, origin, (us[-1] - us[0]) if len(us) else 0, what, since)
    ax.set_xlabel(axis["label"], fontsize=LABEL_SIZE)
    if axis["kind"] == "date":
        _date_ticks(ax)
    return axis["x"]


def memory_figure(series: dict[str, Any], time_origin: str | None = None):
    fig, ax = _figure()
    t = series.get("arrival_us") or []  # at most MAX_SERIES_POINTS buckets (report/html.py)
    xs = _instant_series_axis(ax, t, time_origin, "arrival time", "the first arrival")
    if t:
        ax.fill_between(xs, series["peak"], step="post", color=ACCENT, alpha=0.25, linewidth=0,
                        label="most held at once")
        ax.plot(xs, series["mean"], drawstyle="steps-post", color=ACCENT, linewidth=1.0, label="average held")
        _legend(ax)
    ax.set_ylabel("tuples held", fontsize=LABEL_SIZE)
    return fig


def memory_over_time(series: dict[str, Any], time_origin: str | None = None) -> str:
    return _uri(memory_figure(series, time_origin))


def latency_distribution(hist: dict[str, Any], summary: dict[str, Any]) -> str:
    fig, ax = _figure()
    edges, counts = hist.get("edges_us") or [], hist.get("counts") or []
    if counts and sum(counts) and edges[-1] <= 1 and counts[0] == sum(counts) and not summary.get("max"):
        ax.text(0.5, 0.5, f"all {sum(counts):,} results were emitted the moment their last member arrived (latency 0)",
                ha="center", va="center", transform=ax.transAxes, color="#334155", fontsize=LABEL_SIZE)
        ax.set_xticks([])
        ax.set_yticks([])
    elif counts and sum(counts):
        xs, unit = _time_axis(edges)
        widths = [b - a for a, b in zip(xs[:-1], xs[1:])]
        ax.bar(xs[:-1], counts, width=widths, align="edge", color=ACCENT, edgecolor="white", linewidth=0.3)
        for name, colour in (("mean", SECOND), ("p95", TARGET)):
            v = summary.get(name)
            if v is not None:
                scaled = _time_axis([v, edges[-1]])[0][0] if unit != "us" else float(v)
                ax.axvline(scaled, color=colour, linestyle="--", linewidth=1.2, label=f"{name} {format_duration(v)}")
        _legend(ax)
        ax.set_xlabel(f"latency of a result ({unit})", fontsize=LABEL_SIZE)
        if max(counts) > 50 * max(1, sorted(counts)[len(counts) // 2]):
            ax.set_yscale("symlog", linthresh=1)
    else:
        ax.text(0.5, 0.5, "no emitted results", ha="center", va="center", transform=ax.transAxes, color=MUTED)
        ax.set_xlabel("latency", fontsize=LABEL_SIZE)
    ax.set_ylabel("results", fontsize=LABEL_SIZE)
    return _uri(fig)


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


def _setting_axis(ax, settings_us: Sequence[float], label: str):
    """Sets up the x-axis of a setting (K or retention): logarithmic with duration tick
    labels when the settings span :data:`LOG_RATIO` or more (the useful range is
    then near 0), else linear in one unit.  Returns ``us -> x`` (``None``: not drawable)."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullFormatter

    pos = [s for s in settings_us if s > 0]
    if len(pos) >= 2 and max(pos) / min(pos) >= LOG_RATIO:
        ax.set_xscale("log")
        ticks = duration_ticks(min(pos), max(pos))
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FixedFormatter([format_duration(t) for t in ticks]))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"{label} (log scale)", fontsize=LABEL_SIZE)
        return lambda us: float(us) if us and us > 0 else None
    div, unit = _unit_of(max((abs(v) for v in settings_us), default=0))
    ax.set_xlabel(f"{label} ({unit})", fontsize=LABEL_SIZE)
    return lambda us: us / div


def _points(to_x, xs_us, ys):
    pts = [(to_x(x), y) for x, y in zip(xs_us, ys) if y is not None and to_x(x) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def tuning_figure(curve: dict[str, Any], *, target: float | None, label: str, marks: dict[str, float] | None = None,
                  candidates: list[dict[str, Any]] | None = None):
    """Recall against the setting; optional memory (mean tuples) of replayed candidates on a second axis."""
    fig, ax = _figure()
    s, r = curve.get("setting_us") or [], curve.get("recall") or []
    to_x = _setting_axis(ax, s, label)
    xs, ys = _points(to_x, s, r)
    at_zero = [y for x, y in zip(s, r) if x == 0]
    name = "recall" + (f" ({at_zero[0]:.4f} at {label} = 0)" if at_zero and ax.get_xscale() == "log" else "")
    ax.plot(xs, ys, drawstyle="steps-post", color=ACCENT, linewidth=1.8, label=name)
    if target is not None:
        ax.axhline(target, color=TARGET, linestyle="--", linewidth=1.0, label=f"target {target:g}")
    styles = [(SECOND, ":"), ("#7c3aed", "-.")]
    for i, (mark, v) in enumerate((marks or {}).items()):
        if v is not None and to_x(v) is not None:
            colour, style = styles[i % len(styles)]
            ax.axvline(to_x(v), color=colour, linestyle=style, linewidth=1.4, label=f"{mark} {format_duration(v)}")
    ax.set_ylabel("recall", fontsize=LABEL_SIZE)
    lines, names = ax.get_legend_handles_labels()
    if candidates:
        ax2 = ax.twinx()
        cx, cy = _points(to_x, [c["setting_us"] for c in candidates], [c["memory_tuples"]["mean"] for c in candidates])
        ax2.plot(cx, cy, "o-", color=MUTED, markersize=3, linewidth=1.0, label="memory (mean tuples)")
        ax2.set_ylabel("memory (mean tuples held)", fontsize=LABEL_SIZE - 1)
        ax2.tick_params(labelsize=TICK_SIZE)
        ax2.spines["top"].set_visible(False)
        l2, n2 = ax2.get_legend_handles_labels()
        lines, names = lines + l2, names + n2
    _legend(ax, lines, names)
    return fig


def tuning_curve(curve: dict[str, Any], *, target: float | None, label: str, marks: dict[str, float] | None = None,
                 candidates: list[dict[str, Any]] | None = None) -> str:
    fig = tuning_figure(curve, target=target, label=label, marks=marks, candidates=candidates)
    rows = 1 if len(fig.axes[0].get_legend().get_texts()) <= 3 else 2
    return _uri(fig, right=0.88 if candidates else 0.97, top=0.88 if rows == 1 else 0.8)


def latency_figure(candidates: list[dict[str, Any]], label: str):
    """Latency (mean and p95) of the replayed settings, against the setting."""
    fig, ax = _figure()
    settings = [c["setting_us"] for c in candidates]
    to_x = _setting_axis(ax, settings, label)
    top = max((c["latency_us"][name] or 0 for c in candidates for name in ("mean", "p95")), default=0)
    ydiv, yunit = _unit_of(top) if top >= 1e3 else (1e3, "ms")
    for name, colour in (("mean", ACCENT), ("p95", TARGET)):
        xs, ys = _points(to_x, settings, [c["latency_us"][name] for c in candidates])
        ax.plot(xs, [y / ydiv for y in ys], "o-", color=colour, markersize=3, label=f"latency {name}")
    ax.set_ylabel(f"result latency ({yunit})", fontsize=LABEL_SIZE)
    _legend(ax)
    return fig


def latency_curve(candidates: list[dict[str, Any]], label: str) -> str:
    return _uri(latency_figure(candidates, label))
