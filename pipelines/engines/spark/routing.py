"""Routing settings and plans for the Spark engine (SPEC §6).

:class:`RouteSettings` holds ``--router``, ``--partitions``, ``--segment``,
``--load-weights``, ``--partition-capacity`` (and the cost of a tuple and of a
candidate, the load model's ``costs``) and ``--adapt-segment``; :func:`make_route_plans` builds, on the
driver from a per-stream rate histogram (a summary, never the tuples), the
ATR and CTR routing plans (:mod:`~streamjoin.pipelines.route`) with their
predicted overheads (theorems B and D), which ``--router auto`` compares.
A user-given ``--segment`` is checked first (:func:`check_segment`: at most
:func:`most_segments` segments, else a one-line ``InputError``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ...base.errors import InputError
from ...base.timeunits import format_duration, parse_duration
from ...route import atr as atr_mod
from ...route import ctr as ctr_mod
from ...route import DEFAULT_COSTS, Capacity, histogram, theorem_b, theorem_d


@dataclass
class RouteSettings:
    router: str = "none"
    partitions: int = 1
    segment_us: int | None = None
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    adapt: bool = False
    capacity: Capacity = field(default_factory=Capacity)
    costs: tuple[float, float] = DEFAULT_COSTS    # (per tuple, per candidate combination)


def default_segment(ts: Sequence[np.ndarray], windows, partitions: int) -> int:
    """About 16 segments per partition, never shorter than the largest window."""
    nonempty = [t for t in ts if len(t)]
    if not nonempty:
        return 1
    return segment_for_span(max(int(t.max()) for t in nonempty) - min(int(t.min()) for t in nonempty) + 1,
                            windows, partitions)


def segment_for_span(span: int, windows, partitions: int) -> int:
    """:func:`default_segment` of an event-time span (last - first + 1 microseconds)."""
    return max(1, int(span // (16 * max(partitions, 1))), int(max(windows, default=0)))


def make_route_plans(ts, windows, settings: RouteSettings, order: Sequence[int], selectivity: dict | None = None):
    """Plan ATR and/or CTR routing (both for ``auto``) and their predicted overheads;
    ``order`` and ``selectivity``: the probe order (CTR's hops follow it)."""
    T = settings.segment_us or default_segment(ts, windows, settings.partitions)
    return route_plans_from(histogram(ts), T, windows, settings, order, selectivity)


#: a user-given ``--segment`` may always cut this many segments (the planners take
#: a fraction of a second for them), however few the tuples
SEGMENTS_ALWAYS_ALLOWED = 65_536


def most_segments(tuples: int, partitions: int) -> int:
    """The most segments a user-given ``--segment`` may cut the span into: one per
    input tuple (more segments than tuples are mostly empty, and the plans and
    report.json list every one), never fewer than :data:`SEGMENTS_ALWAYS_ALLOWED`
    nor than the default's 16 per partition."""
    return max(int(tuples), SEGMENTS_ALWAYS_ALLOWED, 16 * max(int(partitions), 1))


def check_segment(hist, T: int, partitions: int) -> None:
    """Raise :class:`InputError` when ``--segment`` ``T`` cuts the histogram's span into
    more than :func:`most_segments`: one line with the span, the count and the
    smallest ``--segment`` accepted (docs/semantics.md "Segment length")."""
    span = max(int(hist.t_end) - int(hist.t0), 1)
    T = max(int(T), 1)
    segments = -(-span // T)
    tuples = int(round(float(np.sum(hist.counts))))
    limit = most_segments(tuples, partitions)
    if segments <= limit:
        return
    need = -(-span // limit)
    digits = 3
    while parse_duration(format_duration(need, digits)) < need and digits < 17:
        digits += 1
    at_least = format_duration(need, digits)
    at_least = at_least if parse_duration(at_least) >= need else f"{need}us"
    if limit == tuples:
        why = f"more than the {tuples:,} input tuples allow (at most {limit:,})"
    elif limit == SEGMENTS_ALWAYS_ALLOWED:
        why = f"more than the {limit:,} always allowed (the {tuples:,} input tuples allow fewer)"
    else:
        why = f"more than 16 per partition allow (at most {limit:,}; {tuples:,} input tuples)"
    raise InputError(f"--segment {format_duration(T)} cuts the {format_duration(span)} span into {segments:,} "
                     f"segments, {why}; the smallest accepted is --segment {at_least}")


def route_plans_from(hist, T: int, windows, settings: RouteSettings, order: Sequence[int],
                     selectivity: dict | None = None):
    """:func:`make_route_plans` from the rate histogram (``Histogram``) and segment length ``T``
    (a user-given ``T`` is checked first: :func:`check_segment`)."""
    if settings.segment_us:
        check_segment(hist, T, settings.partitions)
    rates = hist.rates()
    out = {}
    if settings.router in ("atr", "auto"):
        p = atr_mod.plan(hist, windows, T, settings.partitions, settings.weights, adapt=settings.adapt,
                         capacity=settings.capacity, costs=settings.costs, selectivity=selectivity)
        J = len(p.start)
        pred = sum(theorem_b(rates, list(windows), int(p.master[j]), p.lengths[j]) for j in range(J)) / max(J, 1)
        out["atr"] = (p, pred)
    if settings.router in ("ctr", "auto"):
        p = ctr_mod.plan(hist, windows, T, settings.partitions, order, settings.weights, capacity=settings.capacity,
                         costs=settings.costs, selectivity=selectivity)
        M, Mint = _ctr_multiplicity(p, hist)
        o, o_star = theorem_d(rates, list(windows), M, p.orders, selectivity or {}, Mint)
        out["ctr"] = (p, o, o_star)
    return out, T, rates


def _ctr_multiplicity(p: ctr_mod.CtrPlan, hist) -> tuple[list[float], list[list[float]]]:
    """Average hosts per tuple (``M_i``: storage + hop-1 probe copies) and per
    intermediate hop (``M_ik``: copies sent elsewhere), weighted by segment sizes."""
    n = p.n
    M, Mint = [], []
    lo = p.base + p.T * np.arange(p.slots, dtype=np.int64)
    for i in range(n):
        tot, cnt = 0.0, 0.0
        inter = [0.0] * max(n - 2, 0)
        per_slot = hist.count(i, lo, lo + p.T).tolist()   # the same numbers as one count per slot
        for j in np.flatnonzero(per_slot).tolist():
            c = per_slot[j]
            at = int(p.host[i, j])
            tot += c * len(p.dest(i, j, 1, at))
            cnt += c
            for h in range(2, n):
                inter[h - 2] += c * (len(p.dest(i, j, h, at)) - 1)
        M.append(tot / cnt if cnt else 1.0)
        Mint.append([x / cnt if cnt else 0.0 for x in inter])
    return M, Mint
