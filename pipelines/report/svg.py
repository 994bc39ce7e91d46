"""A small SVG chart writer for the HTML reports: axes, lines, bars, markers, legends.

Why not matplotlib: a report's three or four plots cost ~0.6 s of a run's
whole-process time with matplotlib (0.3 s to import it, 0.1 s to draw and
encode each PNG) where the job itself takes ~1-2 s (issue 21).  This module
draws the same kinds of plots as vector SVG in milliseconds, with no
dependency, and the text stays crisp at any zoom.

The model mirrors the part of matplotlib's object API the reports use, so a
test can look at what a plot holds without pixels: a :class:`Figure` has
``axes`` (stacked panels sharing the x-axis, plus a twin y-axis when asked),
each :class:`Axes` holds its :class:`Mark` list, scales (``linear``, ``log``,
``symlog``; x also ``date``: epoch microseconds shown as UTC), labels, explicit
ticks, and says what its legend and tick labels read.  ``Figure.svg()`` draws
it; nothing is drawn before that.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from html import escape
from typing import Any

#: pixels (the page's content width is 910 px)
WIDTH = 910
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
GRID, AXIS, TEXT = "#e5e7eb", "#64748b", "#0f172a"
DASHES = {"-": None, "--": "6 4", ":": "1.5 3", "-.": "7 3 1.5 3"}


@dataclass
class Mark:
    """One drawn thing: ``kind`` is ``line``, ``step`` (steps-post), ``fill_step`` (area
    under a steps-post line), ``segments`` (horizontal ``x``..``x_end`` at ``y``),
    ``bars`` (left edges ``x``, ``widths``, heights ``y``), ``hline``/``vline`` (one
    value across the panel), ``points`` or ``text``."""

    kind: str
    x: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)
    x_end: list[float] = field(default_factory=list)
    color: str = TEXT
    width: float = 1.5
    style: str = "-"
    marker: str | None = None  # "o" circle, "v" triangle down
    marker_size: float = 3.0
    edge: str | None = None
    alpha: float = 1.0
    label: str | None = None
    text: str = ""


@dataclass
class Axes:
    """One panel: its marks, scales and labels.  A twin (``Figure.twinx``) shares the x-axis."""

    xscale: str = "linear"
    yscale: str = "linear"
    xlabel: str = ""
    ylabel: str = ""
    xticks: list[float] | None = None
    xticklabels: list[str] | None = None
    ylim: tuple[float, float] | None = None
    ytick_count: int = 6
    ytick_format: Callable[[float], str] | None = None
    integer_y: bool = False
    marks: list[Mark] = field(default_factory=list)
    twin: Axes | None = None
    legend: bool = False
    legend_order: list[Mark] | None = None

    # -- matplotlib-like builders ------------------------------------------------------
    def add(self, kind: str, **kw: Any) -> Mark:
        m = Mark(kind, **kw)
        self.marks.append(m)
        return m

    def plot(self, x, y, **kw: Any) -> Mark:
        return self.add("line", x=list(x), y=list(y), **kw)

    def step(self, x, y, **kw: Any) -> Mark:
        return self.add("step", x=list(x), y=list(y), **kw)

    def points(self, x, y, **kw: Any) -> Mark:
        return self.add("points", x=list(x), y=list(y), **kw)

    def axhline(self, y: float, **kw: Any) -> Mark:
        return self.add("hline", y=[y], **kw)

    def axvline(self, x: float, **kw: Any) -> Mark:
        return self.add("vline", x=[x], **kw)

    # -- what a reader sees, without pixels -------------------------------------------
    def legend_labels(self) -> list[str]:
        return [m.label for m in self.legend_marks()]

    def legend_marks(self) -> list[Mark]:
        if self.legend_order is not None:
            return self.legend_order
        own = [m for m in self.marks if m.label]
        return own + ([m for m in self.twin.marks if m.label] if self.twin else [])

    def x_limits(self) -> tuple[float, float]:
        return _limits(self, "x")

    def y_limits(self) -> tuple[float, float]:
        return self.ylim if self.ylim is not None else _limits(self, "y")

    def x_ticks(self, lims: tuple[float, float] | None = None) -> list[tuple[float, str]]:
        lo, hi = lims or self.x_limits()
        if self.xticks is not None:
            labels = self.xticklabels or [_num(v) for v in self.xticks]
            return [(v, s) for v, s in zip(self.xticks, labels) if lo <= v <= hi]
        if self.xscale == "date":
            return date_ticks(lo, hi)
        if self.xscale == "log":
            return [(v, _num(v)) for v in log_ticks(lo, hi)]
        return [(v, _num(v)) for v in nice_ticks(lo, hi, 8)]

    def y_ticks(self) -> list[tuple[float, str]]:
        lo, hi = self.y_limits()
        fmt = self.ytick_format or _num
        if self.yscale == "symlog":
            vals = [0.0] + [10.0 ** k for k in range(0, int(math.floor(math.log10(max(hi, 1)))) + 1)]
        elif self.yscale == "log":
            vals = log_ticks(lo, hi)
        else:
            vals = nice_ticks(lo, hi, self.ytick_count, integer=self.integer_y)
        return [(v, fmt(v)) for v in vals if lo - 1e-12 <= v <= hi + 1e-12]

    def xtick_labels(self) -> list[str]:
        return [s for _, s in self.x_ticks()]


@dataclass
class Figure:
    """Stacked panels sharing the x-axis (height ``ratios``), a title, a legend above."""

    rows: int = 1
    ratios: Sequence[int] | None = None
    title: str = ""
    panel_height: int = 250
    axes: list[Axes] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.axes:
            self.axes = [Axes() for _ in range(self.rows)]
        self._panels = list(self.axes)

    def twinx(self, ax: Axes) -> Axes:
        twin = Axes()
        ax.twin = twin
        self.axes.append(twin)  # as in matplotlib: the twin is listed after the panels
        return twin

    def svg(self) -> str:
        return _render(self)


# -- scales and ticks -------------------------------------------------------------------

def nice_ticks(lo: float, hi: float, most: int = 6, *, integer: bool = False) -> list[float]:
    """Round values (1, 2, 2.5, 5 times a power of ten) covering ``lo .. hi``, at most ``most``."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, most - 1)
    mag = 10 ** math.floor(math.log10(raw))
    for f in (1, 2, 2.5, 5, 10):
        step = f * mag
        if integer and step < 1:
            continue
        if (hi - lo) / step <= most - 1 + 1e-9:
            break
    first = math.ceil(lo / step - 1e-9) * step
    out, v = [], first
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


def log_ticks(lo: float, hi: float) -> list[float]:
    lo, hi = max(lo, 1e-300), max(hi, 1e-300)
    return [10.0 ** k for k in range(math.ceil(math.log10(lo) - 1e-9), math.floor(math.log10(hi) + 1e-9) + 1)]


_US = 1_000_000
#: calendar steps for a UTC date axis (seconds): the smallest giving at most 9 ticks is used
_DATE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600,
               86400, 2 * 86400, 7 * 86400, 14 * 86400)
_MONTH_STEPS = (1, 2, 3, 6, 12, 24, 60, 120)


def _utc(us: float) -> datetime:
    return datetime.fromtimestamp(us / _US, tz=timezone.utc)


def date_ticks(lo_us: float, hi_us: float, most: int = 9) -> list[tuple[float, str]]:
    """Ticks at round UTC instants between epoch microseconds ``lo_us`` and ``hi_us``,
    labelled concisely (``HH:MM`` within a day, the date where a day starts, ``Mar 04``
    for daily steps, ``Mar 2024`` for monthly), as matplotlib's ConciseDateFormatter does."""
    if not (hi_us > lo_us):
        return [(lo_us, _utc(lo_us).strftime("%Y-%m-%d %H:%M"))]
    span_s = (hi_us - lo_us) / _US
    for step in _DATE_STEPS:
        if span_s / step <= most - 1:
            first = math.ceil(lo_us / _US / step) * step
            if step >= 7 * 86400:  # weeks start on Mondays
                monday = 4 * 86400  # 1970-01-05 was a Monday
                first = math.ceil((lo_us / _US - monday) / step) * step + monday
            vals = [first + i * step for i in range(int((hi_us / _US - first) // step) + 1)]
            return [(v * _US, _date_label(v, step, i == 0)) for i, v in enumerate(vals)]
    lo, hi = _utc(lo_us), _utc(hi_us)
    months = (hi.year - lo.year) * 12 + hi.month - lo.month
    step = next((m for m in _MONTH_STEPS if months / m <= most - 1), _MONTH_STEPS[-1])
    out, y, m = [], lo.year, lo.month
    m0 = (y * 12 + m - 1)
    m0 = -(-m0 // step) * step
    while True:
        y, mo = divmod(m0, 12)
        t = datetime(y, mo + 1, 1, tzinfo=timezone.utc).timestamp() * _US
        if t > hi_us:
            break
        if t >= lo_us:
            out.append((t, datetime(y, mo + 1, 1).strftime("%Y" if step >= 12 else "%b %Y")))
        m0 += step
    return out


def _date_label(s: float, step: float, first: bool) -> str:
    t = _utc(s * _US)
    if step >= 86400:
        return t.strftime("%b %d")
    if t.hour == 0 and t.minute == 0 and t.second == 0 or first:
        return t.strftime("%b %d") if step >= 3600 and not first else t.strftime("%b %d %H:%M")
    return t.strftime("%H:%M:%S" if step < 60 else "%H:%M")


def _num(v: float) -> str:
    return f"{v:g}"


def _finite(vals):
    return [v for v in vals if v is not None and isinstance(v, (int, float)) and math.isfinite(v)]


def _limits(ax: Axes, which: str) -> tuple[float, float]:
    vals: list[float] = []
    zero = False
    for m in ax.marks:
        if which == "x":
            if m.kind == "hline" or m.kind == "text":
                continue
            vals += _finite(m.x)
            if m.kind == "segments":
                vals += _finite(m.x_end)
            if m.kind == "bars":
                vals += _finite([a + w for a, w in zip(m.x, m.x_end)])
        else:
            if m.kind in ("vline", "text"):
                continue
            vals += _finite(m.y)
            zero = zero or m.kind in ("bars", "fill_step")
    if which == "x" and ax.twin is not None:
        vals += [v for v in _limits(ax.twin, "x") if ax.twin.marks]
    scale = ax.xscale if which == "x" else ax.yscale
    if scale == "log":
        vals = [v for v in vals if v > 0]
    if zero:
        vals.append(0.0)
    if not vals:
        return (0.0, 1.0) if scale != "log" else (1.0, 10.0)
    lo, hi = min(vals), max(vals)
    if scale == "log":
        return (lo / 1.3, hi * 1.3) if hi > lo else (lo / 2, hi * 2)
    if hi == lo:
        pad = abs(lo) * 0.05 or 1.0
        return lo - pad, hi + pad
    pad = (hi - lo) * 0.04
    return (lo if (zero and lo == 0) or which == "x" and ax.xscale == "date" else lo - pad), hi + pad


# -- rendering --------------------------------------------------------------------------

def _scale(kind: str, lo: float, hi: float, a: float, b: float) -> Callable[[float], float]:
    """Data value -> pixel, ``lo``..``hi`` onto ``a``..``b``."""
    if kind == "log":
        f = math.log10
        lo, hi = f(max(lo, 1e-300)), f(max(hi, 1e-300))
        return lambda v: a + (f(v) - lo) / (hi - lo or 1) * (b - a) if v > 0 else math.nan
    if kind == "symlog":
        def f(v: float) -> float:
            return math.copysign(math.log10(1 + abs(v)), v)
        lo, hi = f(lo), f(hi)
        return lambda v: a + (f(v) - lo) / (hi - lo or 1) * (b - a)
    return lambda v: a + (v - lo) / (hi - lo or 1) * (b - a)


def _text(x: float, y: float, s: str, *, size: float = 12, anchor: str = "middle", color: str = TEXT,
          rotate: bool = False, weight: str = "normal", baseline: str = "auto") -> str:
    rot = f' transform="rotate(-90 {x:.1f} {y:.1f})"' if rotate else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{color}" '
            f'font-weight="{weight}" dominant-baseline="{baseline}"{rot}>{escape(s)}</text>')


def _stroke(m: Mark) -> str:
    dash = DASHES.get(m.style)
    return (f'stroke="{m.color}" stroke-width="{m.width}" fill="none"'
            + (f' stroke-dasharray="{dash}"' if dash else "")
            + (f' stroke-opacity="{m.alpha}"' if m.alpha < 1 else ""))


def _marker(m: Mark, x: float, y: float) -> str:
    r = m.marker_size
    edge = f' stroke="{m.edge}" stroke-width="0.6"' if m.edge else ""
    if m.marker == "v":
        return (f'<path d="M{x - r:.1f},{y - r * 0.8:.1f}L{x + r:.1f},{y - r * 0.8:.1f}L{x:.1f},{y + r:.1f}Z" '
                f'fill="{m.color}"{edge}/>')
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r * 0.7:.1f}" fill="{m.color}"{edge}/>'


def _path(pts: list[tuple[float, float]]) -> str:
    out, pen = [], False
    for x, y in pts:
        if math.isnan(x) or math.isnan(y):
            pen = False
            continue
        out.append(f"{'L' if pen else 'M'}{x:.1f},{y:.1f}")
        pen = True
    return "".join(out)


def _draw_marks(ax: Axes, sx, sy, box: tuple[float, float, float, float]) -> list[str]:
    x0, y0, x1, y1 = box
    out: list[str] = []
    order = {"fill_step": 0, "bars": 1, "segments": 2, "step": 3, "line": 3, "hline": 4, "vline": 4, "points": 5}
    for m in sorted(ax.marks, key=lambda m: order.get(m.kind, 6)):
        if m.kind == "bars":
            for a, w, h in zip(m.x, m.x_end, m.y):
                xa, xb, yt, yb = sx(a), sx(a + w), sy(h), sy(0)
                if any(map(math.isnan, (xa, xb, yt, yb))):
                    continue
                out.append(f'<rect x="{xa:.1f}" y="{min(yt, yb):.1f}" width="{max(xb - xa, 0.6):.1f}" '
                           f'height="{abs(yb - yt):.1f}" fill="{m.color}"'
                           + (f' stroke="{m.edge}" stroke-width="0.3"' if m.edge else "") + "/>")
        elif m.kind == "fill_step":
            pts = []
            for i, (x, y) in enumerate(zip(m.x, m.y)):
                pts.append((sx(x), sy(y)))
                nx = m.x[i + 1] if i + 1 < len(m.x) else x
                pts.append((sx(nx), sy(y)))
            if pts:
                poly = [(pts[0][0], sy(0))] + pts + [(pts[-1][0], sy(0))]
                out.append(f'<path d="{_path(poly)}Z" fill="{m.color}" fill-opacity="{m.alpha}"/>')
        elif m.kind == "segments":
            d = "".join(f"M{sx(a):.1f},{sy(y):.1f}L{sx(b):.1f},{sy(y):.1f}" for a, b, y in zip(m.x, m.x_end, m.y))
            out.append(f'<path d="{d}" {_stroke(m)}/>')
        elif m.kind in ("line", "step"):
            pts: list[tuple[float, float]] = []
            for i, (x, y) in enumerate(zip(m.x, m.y)):
                pts.append((sx(x), sy(y)))
                if m.kind == "step" and i + 1 < len(m.x):
                    pts.append((sx(m.x[i + 1]), sy(y)))
            if m.style is not None and m.width > 0:
                out.append(f'<path d="{_path(pts)}" {_stroke(m)} stroke-linejoin="round"/>')
            if m.marker:
                out += [_marker(m, sx(x), sy(y)) for x, y in zip(m.x, m.y) if not math.isnan(sx(x) + sy(y))]
        elif m.kind == "points":
            out += [_marker(m, sx(x), sy(y)) for x, y in zip(m.x, m.y) if not math.isnan(sx(x) + sy(y))]
        elif m.kind == "hline":
            y = sy(m.y[0])
            if y0 - 0.5 <= y <= y1 + 0.5:
                out.append(f'<path d="M{x0:.1f},{y:.1f}L{x1:.1f},{y:.1f}" {_stroke(m)}/>')
        elif m.kind == "vline":
            x = sx(m.x[0])
            if x0 - 0.5 <= x <= x1 + 0.5:
                out.append(f'<path d="M{x:.1f},{y0:.1f}L{x:.1f},{y1:.1f}" {_stroke(m)}/>')
        elif m.kind == "text":
            out.append(_text((x0 + x1) / 2, (y0 + y1) / 2, m.text, size=15, color=m.color, baseline="middle"))
    return out


def _legend(marks: list[Mark], left: float, top: float) -> tuple[list[str], int]:
    """One row of up to 3 entries, two rows beyond; returns the SVG and the row count."""
    if not marks:
        return [], 0
    per_row = len(marks) if len(marks) <= 3 else -(-len(marks) // 2)
    out, x, row = [], left, 0
    for i, m in enumerate(marks):
        if i and i % per_row == 0:
            row, x = row + 1, left
        y = top + row * 20
        if m.kind in ("bars", "fill_step"):
            out.append(f'<rect x="{x:.1f}" y="{y - 5:.1f}" width="18" height="10" fill="{m.color}" '
                       f'fill-opacity="{m.alpha}"/>')
        elif m.kind == "points":
            out.append(_marker(m, x + 9, y))
        else:
            out.append(f'<path d="M{x:.1f},{y:.1f}L{x + 18:.1f},{y:.1f}" {_stroke(m)}/>')
            if m.marker:
                out.append(_marker(m, x + 9, y))
        label = m.label or ""
        out.append(_text(x + 24, y, label, size=13, anchor="start", baseline="middle"))
        x += 24 + 7.4 * len(label) + 22
    return out, row + 1


def _render(fig: Figure) -> str:
    panels = fig._panels
    ratios = list(fig.ratios or [1] * len(panels))
    twin = any(p.twin is not None for p in panels)
    left, right = 84, (WIDTH - 90 if twin else WIDTH - 24)
    legend_rows = max((_legend(p.legend_marks(), 0, 0)[1] for p in panels if p.legend), default=0)
    top = (34 if fig.title else 12) + legend_rows * 20 + (6 if legend_rows else 0)
    plot_h = fig.panel_height * (1.3 if len(panels) > 1 else 1.0)
    gap = 14
    bottom_pad = 60
    height = int(top + plot_h + gap * (len(panels) - 1) + bottom_pad)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="{FONT}">',
           f'<rect width="{WIDTH}" height="{height}" fill="white"/>']
    if fig.title:
        out.append(_text(left, 20, fig.title, size=15, anchor="start", weight="600"))
    xlo, xhi = _shared_x(panels)
    xkind = next((p.xscale for p in panels if p.xscale == "log"), "linear")  # date: linear in epoch us
    y = top
    for i, ax in enumerate(panels):
        h = plot_h * ratios[i] / sum(ratios)
        box = (left, y, right, y + h)
        sx = _scale(xkind, xlo, xhi, left, right)
        ylo, yhi = ax.y_limits()
        sy = _scale(ax.yscale, ylo, yhi, y + h, y)
        out.append(f'<g class="panel">')
        for v, s in ax.y_ticks():  # grid and y labels
            py = sy(v)
            out.append(f'<path d="M{left},{py:.1f}L{right},{py:.1f}" stroke="{GRID}" stroke-width="0.8"/>')
            out.append(_text(left - 6, py, s, size=13, anchor="end", baseline="middle"))
        xt = panels[-1].x_ticks((xlo, xhi))
        for v, _ in xt:
            px = sx(v)
            if not math.isnan(px):
                out.append(f'<path d="M{px:.1f},{y:.1f}L{px:.1f},{y + h:.1f}" stroke="{GRID}" stroke-width="0.8"/>')
        out.append(f'<svg x="{left}" y="{y:.1f}" width="{right - left}" height="{h:.1f}" '
                   f'viewBox="{left} {y:.1f} {right - left} {h:.1f}" overflow="hidden">')
        out += _draw_marks(ax, sx, sy, box)
        out.append("</svg>")
        if ax.twin is not None:
            tlo, thi = ax.twin.y_limits()
            ty = _scale(ax.twin.yscale, tlo, thi, y + h, y)
            out.append(f'<svg x="{left}" y="{y:.1f}" width="{right - left}" height="{h:.1f}" '
                       f'viewBox="{left} {y:.1f} {right - left} {h:.1f}" overflow="hidden">')
            out += _draw_marks(ax.twin, sx, ty, box)
            out.append("</svg>")
            for v, s in ax.twin.y_ticks():
                out.append(_text(right + 6, ty(v), s, size=13, anchor="start", baseline="middle"))
            out.append(f'<path d="M{right},{y:.1f}L{right},{y + h:.1f}" stroke="{AXIS}"/>')
            out.append(_text(WIDTH - 14, y + h / 2, ax.twin.ylabel, size=13, rotate=True))
        out.append(f'<path d="M{left},{y:.1f}L{left},{y + h:.1f}L{right},{y + h:.1f}" stroke="{AXIS}" fill="none"/>')
        out.append(_text(18, y + h / 2, ax.ylabel, size=14 if h > 100 else 13, rotate=True))
        if ax.legend:
            out += _legend(ax.legend_marks(), left, top - legend_rows * 20 + 3)[0]
        out.append("</g>")
        last = i == len(panels) - 1
        if last:
            for v, s in xt:
                px = sx(v)
                if not math.isnan(px):
                    out.append(f'<path d="M{px:.1f},{y + h:.1f}L{px:.1f},{y + h + 4:.1f}" stroke="{AXIS}"/>')
                    out.append(_text(px, y + h + 20, s, size=13))
            out.append(_text((left + right) / 2, y + h + 46, ax.xlabel, size=14))
        y += h + gap
    out.append("</svg>")
    return "".join(out)


def _shared_x(panels: list[Axes]) -> tuple[float, float]:
    lims = [p.x_limits() for p in panels if p.marks or (p.twin and p.twin.marks)]
    if not lims:
        return panels[-1].x_limits()
    return min(a for a, _ in lims), max(b for _, b in lims)
