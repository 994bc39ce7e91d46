"""What a recall-target policy (``qjoin`` / ``qkslack``, SPEC §4.3) is asked
for, and what its controller (:mod:`.controller`) returns.

:class:`RecallTarget` holds the settings; :class:`Resolved` the values a run
uses (defaults filled in from the span and windows); :class:`Schedule` the
per-arrival values and the decision log (:func:`in_force` rebuilds the values
from the log's times and values: :func:`decision_table`; the native Spark
path applies them so on the executors).  :func:`ramp_sums` and
:func:`candidates` are the model's two building blocks: the kept weight of a
set of tuples under a setting, and the candidate settings; :func:`search`
and :func:`search_product` find the cheapest candidate vector meeting a goal
(qjoin's additive kept weight, qkslack's product of survival shares).

Settings and their defaults (:class:`RecallTarget`)
---------------------------------------------------
``P`` (period): the run's period (SPEC §4.3; by default from the span).
``L`` (interval): ``max(1 s, P / 10)`` -- the SPEC's 1 s, raised for long
spans so that a run makes about ten decisions per period, not one per second
of a year.  ``b`` (basic window): ``max(W) / 10`` (at least 1 us): partner
densities are counted in tenths of the window.  ``g`` (granularity): given,
or per decision ``timeunits.default_granularity`` of the largest delay seen
so far -- the human step (1-2-5 us .. 1h) at most a hundredth of it, the same
rule as ``tune-buffer``'s grid: the values follow the delay scale of the
data, a setting is never more than ~1 % of the largest delay above the
model's need.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..base.errors import InputError
from ..base.timeunits import default_period
from .triggers import Triggers

#: candidate settings per stream and decision (quantiles of the observed breakpoints)
CANDIDATES = 256
#: quantile of the remembered periods' needs kept in force (the promise is >= Q in 95 % of periods)
MEMORY_QUANTILE = 0.95
#: qkslack's remembered needs are solved for at most ``Q + REMEMBER_BUDGET (1 - Q)``: the
#: period's margin may spend three quarters of its loss budget, never all of it (on the
#: corpus, 1/2 left clicks at Q = 0.8 one period short of 95 %; 1 held flights' K at 14 h)
REMEMBER_BUDGET = 0.75
#: default memory: a week of periods (human rhythms are daily and weekly), at least 100
WEEK_US = 7 * 86_400_000_000
#: the statistics window holds at least this many tuples per unit of (1 - Q) (10 / (1 - Q)):
#: a tail quantile needs samples beyond it (Q = 0.99: 1,000 tuples)
TAIL_SAMPLES = 10.0
#: points standing for a stalled stream's expected backlog
BACKLOG_POINTS = 16


@dataclass(frozen=True)
class RecallTarget:
    """Configuration of a recall-target controller (all durations in microseconds).

    ``None`` = automatic (module docstring, "Settings and their defaults").

    Args:
        recall: target ``Q`` in ``(0, 1]``.
        interval_us: ``L``, regular decision interval.
        granularity_us: ``g``, step the chosen values are rounded up to.
        basic_window_us: ``b``, basic window of the partner-density counters.
        period_us: ``P``, recall period (the run's period; by default from the span).
        probe_us: rate / bad-row check step (default ``L / 10``).
        history_us: the long statistics window of a decision (default ``P``).
        rate_history_us: history a probe's rate is compared with (default ``10 L``).
        margin: added to the target (default: ``_Controller._margin``, at least ``(1 - Q) / 4``).
        memory_periods: completed periods whose needs are remembered (default: a week of
            periods, at least 100; 0: none).
        triggers: thresholds of the early re-decisions (:class:`~.triggers.Triggers`).
    """

    recall: float
    interval_us: int | None = None
    granularity_us: int | None = None
    basic_window_us: int | None = None
    period_us: int | None = None
    probe_us: int | None = None
    history_us: int | None = None
    rate_history_us: int | None = None
    margin: float | None = None
    memory_periods: int | None = None
    triggers: Triggers = field(default_factory=Triggers)

    def __post_init__(self) -> None:
        if not (0.0 < float(self.recall) <= 1.0):
            raise InputError(f"--recall {self.recall}: recall target must be in (0, 1]")
        for label, v in (("--interval", self.interval_us), ("--granularity", self.granularity_us),
                         ("--basic-window", self.basic_window_us), ("--period", self.period_us),
                         ("probe", self.probe_us), ("history", self.history_us),
                         ("rate history", self.rate_history_us)):
            if v is not None and int(v) <= 0:
                raise InputError(f"{label} must be > 0")
        if self.memory_periods is not None and int(self.memory_periods) < 0:
            raise InputError("memory_periods must be >= 0")
        if self.margin is not None and not (0.0 <= self.margin < 1.0):
            raise InputError(f"margin {self.margin}: must be in [0, 1)")



@dataclass(frozen=True)
class Resolved:
    """The settings a controller ran with (automatic ones filled in), for the report."""

    period_us: int
    interval_us: int
    probe_us: int
    history_us: int
    rate_history_us: int
    basic_window_us: int
    granularity_us: int | None   # None: per decision, from the delays seen (logged per decision)
    memory_periods: int

    @classmethod
    def of(cls, target: RecallTarget, span_us: int, windows: np.ndarray) -> Resolved:
        P = int(target.period_us) if target.period_us else default_period(span_us)
        L = int(target.interval_us) if target.interval_us else max(1_000_000, P // 10)
        wmax = int(np.max(windows)) if len(windows) else 0
        return cls(
            period_us=P, interval_us=L,
            probe_us=int(target.probe_us) if target.probe_us else max(1, L // 10),
            history_us=int(target.history_us) if target.history_us else P,
            rate_history_us=int(target.rate_history_us) if target.rate_history_us else 10 * L,
            basic_window_us=int(target.basic_window_us) if target.basic_window_us else max(1, wmax // 10),
            granularity_us=int(target.granularity_us) if target.granularity_us else None,
            memory_periods=(int(target.memory_periods) if target.memory_periods is not None
                            else max(100, -(-WEEK_US // P))))


@dataclass
class Schedule:
    """What a controller decided.

    ``values``: ``(n, N)`` int64, ``d_i(a)`` or ``K_i(a)`` per arrival index.
    ``log``: one dict per decision: ``time_us``, ``reason`` (``interval``,
    ``rate``, ``bad_rows`` or a ``+``-joined mix), ``triggers`` (details),
    ``values_us`` (per stream), ``target`` (the goal aimed at),
    ``estimated_recall`` (the model's recall for the chosen values over the
    latest ``P``), ``granularity_us``, ``candidates`` (settings considered per
    stream), ``backlog`` (expected late tuples of stalled streams, if any).
    ``settings``: the resolved settings (:class:`Resolved`) as a dict.
    """

    values: np.ndarray
    log: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)


def in_force(times: np.ndarray, values: np.ndarray, arrival: np.ndarray, initial: np.ndarray) -> np.ndarray:
    """``(n, len(arrival))`` values in force at ``arrival`` times: those of the last decision
    made strictly before (a decision at ``t`` applies to arrivals ``> t``), ``initial``
    (``(n, len(arrival))``) before the first; ``times``: the decision times (sorted),
    ``values``: their ``(n, D)`` values."""
    if not len(times):
        return initial
    which = np.searchsorted(times, arrival, side="left") - 1
    chosen = values[:, np.maximum(which, 0)]
    return np.where(which >= 0, chosen, initial)


def decision_table(log: list[dict[str, Any]], n: int) -> tuple[np.ndarray, np.ndarray]:
    """The decision times and their ``(n, D)`` values from a :class:`Schedule` log: all
    :func:`in_force` needs to rebuild ``Schedule.values`` (O(decisions x n) numbers)."""
    times = np.array([e["time_us"] for e in log], dtype=np.int64)
    values = (np.array([e["values_us"] for e in log], dtype=np.int64).reshape(len(log), n).T.copy()
              if log else np.zeros((n, 0), np.int64))
    return times, values


def ceil_to(values, step: int):
    """``values`` rounded up to a multiple of ``step``."""
    return -((-values) // step) * step


def ramp_sums(start: np.ndarray, end: np.ndarray, weight: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``sum_k weight_k * clip((d - start_k) / (end_k - start_k), 0, 1)`` at every ``d``.

    Exact for ``end > start`` (entries with ``end <= start`` are steps at
    ``end``); ``O((K + len(d)) log K)`` with sorted breakpoints and prefix sums.
    """
    d = np.asarray(d, dtype=np.float64)
    width = (end - start).astype(np.float64)
    step = width <= 0
    out = np.zeros(len(d))
    if step.any():
        e = np.sort(end[step])
        cw = np.concatenate([[0.0], np.cumsum(weight[step][np.argsort(end[step], kind="stable")])])
        out += cw[np.searchsorted(e, d, side="right")]
    r = ~step
    if r.any():
        u = weight[r] / width[r]
        s, e = start[r].astype(np.float64), end[r].astype(np.float64)
        os_, oe = np.argsort(s, kind="stable"), np.argsort(e, kind="stable")
        s_sorted, e_sorted = s[os_], e[oe]
        Us = np.concatenate([[0.0], np.cumsum(u[os_])])
        USs = np.concatenate([[0.0], np.cumsum(u[os_] * s_sorted)])
        Ue = np.concatenate([[0.0], np.cumsum(u[oe])])
        UEe = np.concatenate([[0.0], np.cumsum(u[oe] * e_sorted)])
        ks = np.searchsorted(s_sorted, d, side="right")
        ke = np.searchsorted(e_sorted, d, side="right")
        out += d * (Us[ks] - Ue[ke]) - (USs[ks] - UEe[ke])
    return out


#: the quantile levels of :func:`candidates`: even, and denser in the top tail
_LEVELS = np.unique(np.concatenate([np.linspace(0.0, 1.0, CANDIDATES // 2),
                                    1.0 - np.geomspace(0.5, 1e-6, CANDIDATES // 2)]))


def candidates(points: np.ndarray, ceiling: int, g: int) -> np.ndarray:
    """Sorted candidate settings: 0, ``points`` (all when few, else quantiles denser
    in the top tail) clipped to ``[0, ceiling]``, and ``ceiling``; rounded up to ``g``."""
    p = np.clip(np.asarray(points, dtype=np.int64), 0, max(int(ceiling), 0))
    if len(p) > CANDIDATES:
        p = np.quantile(p, _LEVELS, method="higher")
    out = np.unique(ceil_to(np.concatenate([[0, max(int(ceiling), 0)], p]).astype(np.int64), g))
    return out


def search(curves: list[np.ndarray], cand: list[np.ndarray], cost: np.ndarray, total: float,
           goal: float, combine) -> tuple[np.ndarray, float]:
    """Cheapest candidate vector (cost ``sum_i cost_i * value_i``) with ``combine(idx) >= goal * total``.

    ``curves[i][k]``: the model's monotone quantity at ``cand[i][k]``;
    two streams with an additive model (``combine is None``): exact, by
    walking stream 0 and binary-searching stream 1; otherwise coordinate
    descent to a Pareto-minimal vector.
    """
    need = goal * total - 1e-9 * max(total, 1.0)
    if len(cand) == 2 and combine is None:
        # kept(k0, k1) = curves[0][k0] + curves[1][k1]; both nondecreasing
        # every k0 at once: the least feasible k1 by binary search, then the cheapest pair
        # (the first of equal costs, as a walk over k0 keeping strict improvements would)
        k1 = np.searchsorted(curves[1], need - curves[0], side="left")
        ok = np.flatnonzero(k1 < len(cand[1]))
        if not len(ok):
            k = np.array([len(cand[0]) - 1, len(cand[1]) - 1])
        else:
            c = cost[0] * cand[0][ok] + cost[1] * cand[1][k1[ok]]
            k0 = int(ok[int(np.argmin(c))])
            k = np.array([k0, int(k1[k0])])
        value = curves[0][k[0]] + curves[1][k[1]]
        return np.array([cand[i][k[i]] for i in range(2)], dtype=np.int64), value / total if total else 1.0
    k = np.array([len(c) - 1 for c in cand])
    value = combine(k)
    if value >= need:
        for _ in range(2 * len(cand)):
            moved = False
            for i in np.argsort(-cost, kind="stable"):
                lo_k, hi_k = 0, int(k[i])      # smallest feasible index for stream i, others fixed
                while lo_k < hi_k:
                    mid = (lo_k + hi_k) // 2
                    trial = k.copy()
                    trial[i] = mid
                    if combine(trial) >= need:
                        hi_k = mid
                    else:
                        lo_k = mid + 1
                if lo_k < k[i]:
                    k[i] = lo_k
                    moved = True
            if not moved:
                break
        value = combine(k)
    return np.array([cand[i][k[i]] for i in range(len(cand))], dtype=np.int64), value / total if total else 1.0


def search_product(F, cand, cost, goal):
    """Two streams, ``F_0(K_0) * F_1(K_1) >= goal`` at the least ``sum_i cost_i K_i``."""
    need = goal - 1e-12
    # every k0 at once (as in search): the least feasible k1, then the first cheapest pair
    pos = np.flatnonzero(F[0] > 0)
    k1 = np.searchsorted(F[1], need / F[0][pos], side="left")
    ok = k1 < len(cand[1])
    pos, k1 = pos[ok], k1[ok]
    if len(pos):
        best = int(np.argmin(cost[0] * cand[0][pos] + cost[1] * cand[1][k1]))
        k0, k1 = int(pos[best]), int(k1[best])
    else:
        k0, k1 = len(cand[0]) - 1, len(cand[1]) - 1
    return np.array([cand[0][k0], cand[1][k1]], dtype=np.int64), float(F[0][k0] * F[1][k1])


def runs(values: np.ndarray):
    """``(value, start, stop)`` of each run of equal values in a sorted array."""
    if not len(values):
        return []
    cut = np.flatnonzero(np.diff(values)) + 1
    starts = np.concatenate([[0], cut])
    stops = np.concatenate([cut, [len(values)]])
    return [(int(values[a]), int(a), int(z)) for a, z in zip(starts, stops)]
