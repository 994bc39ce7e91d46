"""PNG plots for the HTML reports, returned as ``data:`` URIs (self-contained HTML).

matplotlib's object API (``Figure`` + the Agg canvas) is used, never
``pyplot``: no global state, no GUI backend, no display needed (cron).
Every function takes plain JSON-ready data (what ``report.json`` /
``tune.json`` hold), so a report can be re-rendered from its JSON alone.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any

from ..base.timeunits import format_duration

WIDTH, HEIGHT, DPI = 8.0, 3.2, 100
ACCENT, TARGET, MUTED, SECOND = "#2563eb", "#dc2626", "#94a3b8", "#059669"


def _figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH, HEIGHT), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.grid(True, color="#e5e7eb", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig, ax


def _legend(ax, handles=None, labels=None) -> None:
    """Above the plot, never over the data."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="lower left", bbox_to_anchor=(0.0, 1.01), ncol=len(handles), frameon=False,
                  fontsize=8, borderaxespad=0.0)


def _uri(fig) -> str:
    # fixed margins: tight_layout would draw every figure twice
    fig.subplots_adjust(left=0.09, right=0.9, bottom=0.15, top=0.88)
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


#: bars drawn at most by :func:`recall_per_period` (consecutive periods are grouped beyond this)
MAX_BARS = 200


def period_groups(periods: list[dict[str, Any]], max_bars: int = MAX_BARS) -> dict[str, Any]:
    """Consecutive periods in groups of ``k``, so that at most ``max_bars`` groups cover the
    listed periods' span: per group its first period's start, recall = sum emitted / sum
    truth, and the worst single period's recall.  ``periods`` is report.json's sparse list
    (only periods with truth), so the work is O(listed periods), never O(span / P)."""
    if not periods:
        return {"k": 1, "span_periods": 0, "start_us": [], "recall": [], "worst": [], "below": []}
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
        "recall": [groups[g][1] / groups[g][0] if groups[g][0] else 1.0 for g in keys],
        "worst": [groups[g][2] for g in keys],
    }


def recall_per_period(periods: list[dict[str, Any]], target: float | None, *, period_us: int | None = None,
                      total: int | None = None) -> str:
    """Recall per period as bars, at most :data:`MAX_BARS` of them: beyond that, groups
    of ``k`` consecutive periods (recall of the group; a dot at its worst single period),
    and the title says so.  ``total``: periods in the span (report.json ``periods_total``)."""
    fig, ax = _figure()
    P = period_us or (periods[0]["end_us"] - periods[0]["start_us"] if periods else None)
    name = f"{format_duration(P)} " if P else ""
    if periods:
        g = period_groups(periods)
        k, first = g["k"], periods[0]["start_us"]
        total = total if total is not None else g["span_periods"]
        div, unit = _unit_of(g["span_periods"] * g["period_us"])
        xs = [(s - first) / div for s in g["start_us"]]
        width = k * g["period_us"] / div * 0.85
        low_of = [r if k == 1 else w for r, w in zip(g["recall"], g["worst"])]
        colours = [TARGET if (target is not None and r < target) else ACCENT for r in g["recall"]]
        label = "recall" if k == 1 else f"recall of each group of {k:,}"
        ax.bar(xs, g["recall"], width=width, align="edge", color=colours, label=label)
        if k > 1:
            ax.plot([x + width / 2 for x in xs], g["worst"], "o", color="#0f172a", markersize=2.5,
                    label="worst single period")
        if target is not None:
            ax.axhline(target, color=TARGET, linestyle="--", linewidth=1.2, label=f"target {target:g}")
        low = min(low_of)
        ax.set_ylim(max(0.0, min(low, target or 1.0) - 0.05), 1.005)
        _legend(ax)
        listed = len(periods)
        shown = (f"shown in {len(xs):,} groups of {k:,}" if k > 1 else "one bar each")
        title = f"recall per {name}period ({total:,} periods, {listed:,} with results, {shown})"
        ax.set_xlabel(f"period start ({unit} of replay time)")
    else:
        title = f"recall per {name}period (no results)"
        ax.set_xlabel("period start")
    # above the legend row (_legend puts the legend just above the axes)
    fig.suptitle(title, fontsize=9, x=0.09, y=0.985, ha="left", va="top")
    ax.set_ylabel("recall")
    return _uri(fig)


def memory_over_time(series: dict[str, Any]) -> str:
    fig, ax = _figure()
    t = series.get("arrival_us") or []  # at most MAX_SERIES_POINTS buckets (report/html.py)
    unit = "s"
    if t:
        div, unit = _unit_of(t[-1] - t[0])
        xs = [(v - t[0]) / div for v in t]
        ax.fill_between(xs, series["peak"], step="post", color=ACCENT, alpha=0.25, linewidth=0, label="peak per bucket")
        ax.plot(xs, series["mean"], drawstyle="steps-post", color=ACCENT, linewidth=1.0, label="mean per bucket")
        _legend(ax)
    ax.set_xlabel(f"replay time ({unit} since first arrival)")
    ax.set_ylabel("tuples held")
    return _uri(fig)


def latency_distribution(hist: dict[str, Any], summary: dict[str, Any]) -> str:
    fig, ax = _figure()
    edges, counts = hist.get("edges_us") or [], hist.get("counts") or []
    if counts and sum(counts) and edges[-1] <= 1 and counts[0] == sum(counts) and not summary.get("max"):
        ax.text(0.5, 0.5, f"all {sum(counts):,} results were emitted the moment their last member arrived (latency 0)",
                ha="center", va="center", transform=ax.transAxes, color="#334155", fontsize=10)
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
                ax.axvline(scaled, color=colour, linestyle="--", linewidth=1.2, label=f"{name}")
        _legend(ax)
        ax.set_xlabel(f"latency ({unit})")
        if max(counts) > 50 * max(1, sorted(counts)[len(counts) // 2]):
            ax.set_yscale("symlog", linthresh=1)
    else:
        ax.text(0.5, 0.5, "no emitted results", ha="center", va="center", transform=ax.transAxes, color=MUTED)
        ax.set_xlabel("latency")
    ax.set_ylabel("results")
    return _uri(fig)


def tuning_curve(curve: dict[str, Any], *, target: float | None, label: str, marks: dict[str, float] | None = None,
                 candidates: list[dict[str, Any]] | None = None) -> str:
    """Recall against the setting; optional memory (mean tuples) of replayed candidates on a second axis."""
    fig, ax = _figure()
    s = curve.get("setting_us") or []
    xs, unit = _time_axis(s)
    ax.plot(xs, curve.get("recall") or [], drawstyle="steps-post", color=ACCENT, linewidth=1.5, label="recall")
    if target is not None:
        ax.axhline(target, color=TARGET, linestyle="--", linewidth=1.0, label=f"target {target:g}")
    div = _unit_of(max((abs(v) for v in s), default=0))[0]
    styles = [(SECOND, ":"), ("#7c3aed", "-.")]
    for i, (name, v) in enumerate((marks or {}).items()):
        if v is not None:
            colour, style = styles[i % len(styles)]
            ax.axvline(v / div, color=colour, linestyle=style, linewidth=1.2,
                       label=f"{name} {v / div:g}{unit}")
    ax.set_xlabel(f"{label} ({unit})")
    ax.set_ylabel("recall")
    lines, names = ax.get_legend_handles_labels()
    if candidates:
        ax2 = ax.twinx()
        cx = [c["setting_us"] / div for c in candidates]
        ax2.plot(cx, [c["memory_tuples"]["mean"] for c in candidates], "o-", color=MUTED, markersize=3,
                 linewidth=1.0, label="mean memory (tuples)")
        ax2.set_ylabel("mean memory (tuples)")
        ax2.spines["top"].set_visible(False)
        l2, n2 = ax2.get_legend_handles_labels()
        lines, names = lines + l2, names + n2
    _legend(ax, lines, names)
    return _uri(fig)


def latency_curve(candidates: list[dict[str, Any]], label: str) -> str:
    fig, ax = _figure()
    xs, unit = _time_axis([c["setting_us"] for c in candidates])
    top = max((c["latency_us"][name] or 0 for c in candidates for name in ("mean", "p95")), default=0)
    ydiv, yunit = _unit_of(top) if top >= 1e3 else (1e3, "ms")
    for name, colour in (("mean", ACCENT), ("p95", TARGET)):
        ys = [c["latency_us"][name] for c in candidates]
        pts = [(x, y / ydiv) for x, y in zip(xs, ys) if y is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=colour, markersize=3, label=f"latency {name}")
    ax.set_xlabel(f"{label} ({unit})")
    ax.set_ylabel(f"latency ({yunit})")
    _legend(ax)
    return _uri(fig)
