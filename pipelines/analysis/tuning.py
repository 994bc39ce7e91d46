"""``tune-buffer``: the exact offline buffer recommendation (SPEC §7).

Every valid combination ``c`` has a *required slack*: the smallest setting of
a fixed policy at which ``c`` is emitted.  Recall as a function of the
setting is then the (empirical) distribution function of those values, so
the smallest setting meeting a recall target ``Q`` is a quantile -- computed
once, exactly, with no replay per candidate setting.

Derivations (notation of SPEC §2; ``y`` = last-arriving member of ``c``,
``a_x`` = arrival index of member ``x``, ``W_k`` = window of stream ``k``)
--------------------------------------------------------------------------

**static** (symmetric family, SPEC §4.1).  With a constant retention ``d_k``
the state horizon is ``H_k(a) = max_{a'<=a} (T(a') - d_k) = T(a) - d_k``
because the frontier ``T`` never decreases.  The closed form says ``c`` is
emitted iff every other member ``x`` (of stream ``k``) has
``x.ts + W_k >= H_k(a_y) = T(a_y) - d_k``, i.e.::

    d_k >= r_k(c) := max(0, T(a_y) - x_k.ts - W_k)       for k != s(y)
    r_{s(y)}(c) := 0                                      (y needs no buffer)

(``T(a_y)`` is finite: every stream has a member at or before ``a_y``.)  The
conditions are *per stream*: ``c`` is emitted under ``d = (d_0..d_{n-1})``
iff ``r(c) <= d`` componentwise, so

    recall(d) = #{c : r(c) <= d} / |truth|      (a multivariate CDF)

and with one common value ``d`` for every stream the required slack is
``r(c) = max_k r_k(c)``.

Memory of the static policy is *separable*: a tuple of stream ``k`` is held
from its arrival until ``T(a) - d_k > ts + W_k``, which involves ``d_k``
alone, so ``mean memory(d) = sum_k m_k(d_k)`` with every ``m_k``
non-decreasing.  Minimising memory subject to ``recall(d) >= Q`` is therefore
exactly solvable on the granularity grid for **two streams**: for every
``d_0`` the least feasible ``d_1`` is read off a 2-D cumulative histogram of
``(ceil(r_0/g), ceil(r_1/g))``, and the pair with the least memory (ties:
the smaller sum) wins -- it is Pareto-minimal (lowering either value by one
step misses ``Q``).  For three or more streams the search is a greedy descent
from the common value: each stream, largest memory first, is lowered as far
as the target allows.  The result is Pareto-minimal but not necessarily the
least memory; the output says which method was used.

**kslack** (sorting family, SPEC §4.2) with **one** ``K`` for every stream:
``R(a) = max_{a'<=a} min_i (M_i(a') - K) = max_{a'<=a} T(a') - K = T(a) - K``.
A tuple ``x`` is dropped iff ``x.ts < R(a_x - 1) = T(a_x - 1) - K``, so it
survives iff::

    K >= k(x) := max(0, T(a_x - 1) - x.ts)      (T(-1) = -inf -> k(x) = 0)

and ``c`` is emitted iff no member is dropped: ``K >= k(c) := max_x k(x)``.
Per-stream ``K_i`` do not separate (``R`` is a minimum over all streams'
``M_i - K_i``), so kslack is tuned with one ``K``.

Worked example (two streams, ``W = (2, 2)``; ``(stream, ts)`` in arrival
order, the table of :mod:`~streamjoin.pipelines.replay.progress`)::

    a      0      1      2      3      4
    x    (0,10) (1,12) (0,15) (0,11) (1,20)
    T     -inf    10     12     12     15

    valid pairs (|dts| <= 2): (a0, a1) ts 10/12; (a3, a1) ts 11/12
    static, pair (a0,a1): y = a1, x = a0: r_0 = T(1) - 10 - 2 = -2 -> 0
    static, pair (a3,a1): y = a3 (stream 0), x = a1 (stream 1):
                          r_1 = T(3) - 12 - 2 = -2 -> 0      both need d = 0
    kslack: k(a0) = 0 (T(-1) = -inf), k(a1) = max(0, T(0) - 12) = 0,
            k(a3) = max(0, T(2) - 11) = 1  ->  pair (a3,a1) needs K = 1:
            with K = 0, R(2) = 12 > 11 drops a3; with K = 1, R(2) = 11 keeps it.

Quantile: with ``C`` valid combinations and ``m`` the least count with
``m / C >= Q`` (the same float comparison the report's recall makes), the
exact minimal setting is the ``m``-th smallest required slack; on a grid of
step ``g`` it is that value rounded up to a multiple of ``g``, and one step
less emits fewer than ``m`` combinations.  The property tests replay random
inputs with the engine at each combination's required slack (emitted) and
1 us less (not emitted), and replay recommendations through ``run``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..replay.candidates import Combos
from ..replay.emit import emission
from .metrics import fmt_recall, latency_summary, memory_summary
from .quantiles import exact_quantile, group_needs, needed_count, needed_counts, period_groups  # noqa: F401 (tuning's API)
from ..policies import SYMMETRIC, PolicySpec
from ..replay.progress import Replay, decide, memory_per_stream
from ..base.timeunits import GRID_STEPS_PER_RANGE, NEG_INF, default_granularity, format_duration, format_durations

TUNE_POLICIES = ("static", "kslack", "spark-ss", "flink")
#: run's policies -> the fixed policy of the same family, whose setting tune-buffer tunes (SPEC §4.1, §4.2;
#: spark-ss's withWatermark delay and flink's out-of-orderness: :mod:`.watermark_tuning`)
FIXED_POLICY_OF = {"static": "static", "qjoin": "static",
                   "none": "kslack", "kslack": "kslack", "mpkslack": "kslack", "qkslack": "kslack",
                   "spark-ss": "spark-ss", "flink": "flink"}
#: grid cells above which the exact two-stream search is skipped
MAX_GRID_CELLS = 40_000_000
#: grid values per stream above which the exact search is skipped (memory per value costs a pass)
MAX_GRID_STEPS = 4_000
#: candidate settings at which memory and latency are replayed
MAX_CANDIDATES = 16
#: recall-curve points kept in tune.json / report.json
MAX_CURVE_POINTS = 2_000


# ---------------------------------------------------------------------------
# required slack
# ---------------------------------------------------------------------------


def member_indexes(replay: Replay, combos: Combos) -> tuple[list[np.ndarray], np.ndarray]:
    """Arrival index of every member, and of the last-arriving member."""
    a = [replay.index_of[k][combos.rows[k]].astype(np.int64) for k in range(replay.n)]
    last = np.maximum.reduce(a) if len(combos) else np.empty(0, np.int64)
    return a, last


def required_static(replay: Replay, combos: Combos, windows: Sequence[int]) -> np.ndarray:
    """Per-stream required retention ``r_k(c)``, shape ``(n, C)`` (see module doc)."""
    W = np.asarray(windows, dtype=np.int64)
    a, last = member_indexes(replay, combos)
    T_last = replay.T[last]
    out = np.empty((replay.n, len(combos)), dtype=np.int64)
    for k in range(replay.n):
        need = T_last - combos.ts(k) - W[k]
        np.maximum(need, 0, out=out[k])
        out[k][a[k] == last] = 0
    return out


def required_static_common(replay: Replay, combos: Combos, windows: Sequence[int],
                           members: tuple[list[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Required *common* retention per combination: ``max_k r_k(c)``, without the ``(n, C)`` matrix.

    ``max_k (T(a_y) - x_k.ts - W_k)`` over the non-last members is
    ``T(a_y) - min_k (x_k.ts + W_k)``, so one running minimum suffices.
    ``members`` may pass ``(a, last)`` already known (the engine's emission).  """
    a, last = members if members is not None else member_indexes(replay, combos)
    ts = [combos.ts(k) for k in range(replay.n)]
    return static_need(ts, a, last, replay.T[last], windows) if len(combos) else np.empty(0, np.int64)


def static_need(ts: Sequence[np.ndarray], a: Sequence[np.ndarray], last: np.ndarray, T_last: np.ndarray,
                windows: Sequence[int]) -> np.ndarray:
    """:func:`required_static_common` on columns (``T_last = T(a_y)``): a Spark task's combinations."""
    lowest = np.full(len(last), np.iinfo(np.int64).max, dtype=np.int64)
    for k in range(len(ts)):
        reach = np.asarray(ts[k], dtype=np.int64) + int(windows[k])
        reach[a[k] == last] = np.iinfo(np.int64).max  # the last member needs nothing
        np.minimum(lowest, reach, out=lowest)
    need = np.asarray(T_last, dtype=np.int64) - lowest  # overflows to negative only where every member is last (n == 1)
    return np.maximum(need, 0, out=need)


def required_k_per_tuple(replay: Replay) -> np.ndarray:
    """``k(x) = max(0, T(a_x - 1) - x.ts)`` per arrival index (0 where ``T(a_x - 1) = -inf``)."""
    if replay.N == 0:
        return np.empty(0, np.int64)
    before = np.concatenate([[NEG_INF], replay.T[:-1]])
    return np.where(before == NEG_INF, 0, np.maximum(before - replay.ts, 0))


def required_kslack(replay: Replay, combos: Combos,
                    members: tuple[list[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Required common ``K`` per combination: the largest ``k(x)`` of its members
    (``members``: ``(a, last)`` already known, as :func:`required_static_common`)."""
    if not len(combos):
        return np.empty(0, np.int64)
    per_tuple = required_k_per_tuple(replay)
    a, _ = members if members is not None else member_indexes(replay, combos)
    return np.maximum.reduce([per_tuple[ak] for ak in a])


def required_slacks(replay: Replay, combos: Combos, windows: Sequence[int], policy: str,
                    members: tuple[list[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Every combination's required slack for the fixed ``policy``: the common retention
    (``static``, :func:`required_static_common`) or ``K`` (``kslack``, :func:`required_kslack`)."""
    return (required_static_common(replay, combos, windows, members) if policy == "static"
            else required_kslack(replay, combos, members))


def grid_index(values: np.ndarray, g: int) -> np.ndarray:
    """``ceil(v / g)``: the first grid step at which a value is met."""
    return -(-np.asarray(values, dtype=np.int64) // g)


class Curve:
    """Recall as a function of the setting, on the grid of step ``g``, without a table
    per grid step: with the required slacks sorted once, the emitted count at setting
    ``s`` is ``#{v <= s}``, one binary search (the grid up to the largest required
    slack can hold millions of steps: 8 h at 10 ms is 2.9M).

    ``top`` is the last grid step that changes anything (``ceil(max / g)``).
    ``total``: the combinations recall counts, when some are met by no setting and
    left out of ``values`` (default ``len(values)``).
    """

    def __init__(self, values: np.ndarray, g: int, total: int | None = None):
        self.g = int(g)
        self.sorted = np.sort(np.asarray(values, dtype=np.int64))
        self.C = len(self.sorted) if total is None else int(total)
        self.top = int(grid_index(self.sorted[-1:], g)[0]) if len(self.sorted) else 0

    def count(self, steps) -> np.ndarray:
        """Combinations emitted at grid steps ``steps`` (``#{v <= step * g}``)."""
        return np.searchsorted(self.sorted, np.asarray(steps, dtype=np.int64) * self.g, side="right")

    def recall(self, steps) -> np.ndarray:
        return self.count(steps) / self.C if self.C else np.ones(len(np.atleast_1d(steps)))

    def reaches(self, q: float) -> bool:
        """Whether some setting gives recall >= ``q`` (not so when ``total`` counts
        combinations that no setting emits)."""
        return needed_count(self.C, q) <= len(self.sorted)

    def value_for(self, q: float) -> int:
        """The exact least setting with recall >= ``q`` (the ``m``-th smallest value)."""
        m = needed_count(self.C, q)
        return int(self.sorted[m - 1]) if m else 0

    def step_for(self, q: float) -> int:
        """The least grid step with recall >= ``q``: ``ceil(value_for(q) / g)``."""
        return -(-self.value_for(q) // self.g)

    def sampled(self, keep: Sequence[int] = (), points: int | None = None) -> tuple[list, list]:
        """The curve at every step ``0 .. top`` if that is at most ``points`` (default
        :data:`MAX_CURVE_POINTS`) steps, else at that many evenly spread steps plus ``keep``."""
        points = points or MAX_CURVE_POINTS
        if self.top + 1 <= points:
            steps = np.arange(self.top + 1, dtype=np.int64)
        else:
            steps = np.unique(np.concatenate([
                np.linspace(0, self.top, points - len(keep)).round().astype(np.int64),
                np.asarray(list(keep), dtype=np.int64)]))
        return (steps * self.g).tolist(), self.recall(steps).tolist()


def period_index(replay: Replay, last: np.ndarray, period_us: int) -> np.ndarray:
    """Period of each combination (arrival of its last member; SPEC §5, docs/semantics.md)."""
    if replay.N == 0:
        return np.empty(0, np.int64)
    return (replay.arrival[last] - replay.arrival[0]) // period_us


def per_period_settings(replay: Replay, last: np.ndarray, values: np.ndarray, period_us: int, q: float, g: int,
                        recommended_us: int) -> list[dict[str, Any]]:
    """Per period with truth (the others need nothing and are not listed): the exact least
    setting meeting ``q`` in that period, on the grid, and the period's recall at the overall
    recommendation.  One sort by (period, required slack): O(C log C), never O(span / P)."""
    if len(values) == 0:
        return []
    pv, heads, sizes, ids = period_groups(period_index(replay, last, period_us), values)
    exact = group_needs(pv, heads, sizes, q)
    met = np.add.reduceat((pv <= recommended_us).astype(np.int64), heads)
    start0 = int(replay.arrival[0])
    return [
        {"start_us": start0 + p * period_us, "end_us": start0 + (p + 1) * period_us, "truth": t, "exact_us": ex,
         "setting_us": -(-ex // g) * g, "recall_at_recommendation": k / t}
        for p, t, ex, k in zip(ids.tolist(), sizes.tolist(), exact.tolist(), met.tolist())
    ]


# ---------------------------------------------------------------------------
# replays at candidate settings (the engine's own decisions, memory, emission)
# ---------------------------------------------------------------------------


def policy_for(policy: str, n: int, setting) -> PolicySpec:
    values = tuple(int(v) for v in setting) if isinstance(setting, (tuple, list, np.ndarray)) else (int(setting),) * n
    return PolicySpec("static", retention=values) if policy == "static" else PolicySpec("kslack", k=values)


def evaluate(replay: Replay, combos: Combos, windows: Sequence[int], policy: PolicySpec,
             row_bytes: Sequence[float] | None = None, emitted: int | None = None) -> dict[str, Any]:
    """Replay one setting with the engine: recall, memory, latency.

    ``emitted`` (the count the required-slack curve predicts) skips the
    emission pass for the symmetric family, whose latency is always 0; the
    tests check the prediction against the engine.
    """
    W = np.asarray(windows, dtype=np.int64)
    decisions = decide(replay, W, policy)
    memory = memory_per_stream(replay, W, decisions)
    mem_t, mem_b = memory_summary(memory, row_bytes if row_bytes is not None else [0.0] * replay.n)
    if emitted is not None and policy.family == SYMMETRIC:
        lat = {"mean": 0.0 if emitted else None, "p95": 0 if emitted else None}
    else:
        em = emission(combos, replay, W, decisions)
        emitted = int(em.emitted.sum())
        lat = latency_summary(em.latency_us[em.emitted])
    return {
        "recall": 1.0 if len(combos) == 0 else emitted / len(combos),
        "emitted": emitted,
        "memory_tuples": mem_t,
        "memory_bytes": mem_b,
        "latency_us": {"mean": lat["mean"], "p95": lat["p95"]},
    }


def static_memory_totals(replay: Replay, windows: Sequence[int], k: int, settings_us: Sequence[int]) -> np.ndarray:
    """``sum over arrival indexes`` of stream ``k``'s held tuples, per retention setting.

    Equals ``memory_per_stream(...)[k].sum()`` of a static replay with
    retention ``d_k = setting`` (it depends on ``d_k`` alone): tuple ``x`` is
    held over ``[a_x, end)`` with ``end = #{a : T(a) <= x.ts + W_k + d_k}``.
    """
    mask = replay.stream == k
    limit = replay.ts[mask] + int(windows[k])
    start = np.flatnonzero(mask).astype(np.int64)
    order = np.argsort(limit, kind="stable")  # sorted needles: faster binary searches
    limit, start = limit[order], start[order]
    out = np.empty(len(settings_us), dtype=np.int64)
    for i, d in enumerate(settings_us):  # one pass per setting, never per tuple
        end = np.searchsorted(replay.T, limit + int(d), side="right")
        out[i] = int(np.maximum(end - start, 0).sum())
    return out


# ---------------------------------------------------------------------------
# per-stream static retention
# ---------------------------------------------------------------------------


@dataclass
class Constraint:
    """``recall >= q`` overall, or in every period that has truth."""

    groups: np.ndarray | None  # period of each combination, or None for overall
    q: float

    def needs(self, total_per_group: np.ndarray) -> np.ndarray:
        return needed_counts(total_per_group, self.q)


def _group_ids(constraint: Constraint, C: int) -> tuple[np.ndarray, int]:
    if constraint.groups is None or C == 0:
        return np.zeros(C, np.int64), 1
    uniq, inv = np.unique(constraint.groups, return_inverse=True)
    return inv.astype(np.int64), len(uniq)


def feasible_vector(jreq: np.ndarray, d: np.ndarray, gid: np.ndarray, needs: np.ndarray) -> bool:
    ok = np.all(jreq <= d[:, None], axis=0)
    got = np.bincount(gid[ok], minlength=len(needs))
    return bool(np.all(got >= needs))


def per_stream_static(replay: Replay, windows: Sequence[int], req: np.ndarray, g: int,
                      constraint: Constraint, common_j: int) -> dict[str, Any]:
    """Per-stream retention minimising mean memory subject to the constraint (see module doc).

    Returns ``{"steps": [j_k], "method": ...}`` (settings are ``j_k * g``).
    """
    n, C = req.shape
    if C == 0:
        return {"steps": [0] * n, "method": "common", "note": "no valid combinations"}
    jreq = grid_index(req, g)
    top = jreq.max(axis=1)  # beyond these a setting changes nothing
    gid, G = _group_ids(constraint, C)
    needs = constraint.needs(np.bincount(gid, minlength=G))
    if n == 2 and (top[0] + 1) * (top[1] + 1) * G <= MAX_GRID_CELLS and max(top) < MAX_GRID_STEPS:
        feasible = np.ones((top[0] + 1, top[1] + 1), dtype=bool)
        by_group = np.argsort(gid, kind="stable")   # each group's combinations, one slice each
        bounds = np.searchsorted(gid[by_group], np.arange(G + 1))
        for grp in range(G):
            sel = by_group[bounds[grp]:bounds[grp + 1]]
            hist = np.bincount(jreq[0][sel] * (top[1] + 1) + jreq[1][sel], minlength=(top[0] + 1) * (top[1] + 1))
            F = hist.reshape(top[0] + 1, top[1] + 1).cumsum(axis=0).cumsum(axis=1)
            feasible &= F >= needs[grp]
        rows = np.flatnonzero(feasible.any(axis=1))       # d_0 values with some feasible d_1
        j1 = feasible[rows].argmax(axis=1)                  # least feasible d_1 for each
        # memory grows with each value, so only the staircase's corners can be
        # optimal: the least d_0 for every distinct least d_1
        corner = np.concatenate([[True], j1[1:] < j1[:-1]])
        rows, j1 = rows[corner], j1[corner]
        m0 = static_memory_totals(replay, windows, 0, rows * g)
        uniq1, inv1 = np.unique(j1, return_inverse=True)
        m1 = static_memory_totals(replay, windows, 1, uniq1 * g)[inv1]
        cost = m0 + m1
        best = np.lexsort([rows + j1, cost])[0]
        return {"steps": [int(rows[best]), int(j1[best])], "method": "exact",
                "note": "exact least-memory pair on the grid (memory is separable per stream)"}
    # greedy descent from the common value, largest memory first
    d = np.minimum(np.full(n, common_j, dtype=np.int64), top)
    memory_at_common = [int(static_memory_totals(replay, windows, k, [d[k] * g])[0]) for k in range(n)]
    for k in np.argsort(memory_at_common, kind="stable")[::-1]:
        lo, hi = 0, int(d[k])
        while lo < hi:
            mid = (lo + hi) // 2
            trial = d.copy()
            trial[k] = mid
            if feasible_vector(jreq, trial, gid, needs):
                hi = mid
            else:
                lo = mid + 1
        d[k] = lo
    return {"steps": [int(v) for v in d], "method": "greedy",
            "note": "Pareto-minimal (each value is as low as the target allows); "
                    "not proven least memory for three or more streams"}


# ---------------------------------------------------------------------------
# the recommendation
# ---------------------------------------------------------------------------


def toml_duration(us: int) -> str:
    """A duration string that ``parse_duration`` reads back to exactly ``us``."""
    us = int(us)
    if us == 0:
        return "0"
    if us % 1_000_000 == 0:
        return f"{us // 1_000_000}s"
    if us % 1_000 == 0:
        return f"{us // 1_000}ms"
    return f"{us}us"


def candidate_steps(curve: Curve, rec_steps: Sequence[int]) -> list[int]:
    """Grid steps to replay: 0, the last, around each recommendation, the steps of
    common recall targets (those some setting reaches), evenly spread up to
    :data:`MAX_CANDIDATES`."""
    J = curve.top
    steps = {0, J}
    for s in rec_steps:
        steps.update({max(0, s - 1), s, min(J, s + 1)})
    for q in (0.5, 0.8, 0.9, 0.95, 0.99, 0.999):
        if curve.reaches(q):
            steps.add(curve.step_for(q))
    room = MAX_CANDIDATES - len(steps)
    if room > 0 and J > 0:
        steps.update(int(v) for v in np.linspace(0, J, num=min(room, J + 1)).round())
    return sorted(s for s in steps if 0 <= s <= J)


def curve_only(replay: Replay, combos: Combos, windows: Sequence[int], policy: str, g: int,
               q: float | None, targets: Sequence[float] = (),
               members: tuple[list[np.ndarray], np.ndarray] | None = None) -> dict[str, Any]:
    """The cheap part (no replays): the recall curve and the settings meeting targets.

    Used by ``run`` for its report ("what to do" and the tuning plot):
    ``setting_us`` / ``exact_us`` meet ``q``; ``setting_for_recall`` maps
    each of ``targets`` (and ``q``) to its grid setting.
    """
    return curve_summary(Curve(required_slacks(replay, combos, windows, policy, members), g), policy, q, targets)


def curve_summary(curve: Curve, policy: str, q: float | None, targets: Sequence[float] = ()) -> dict[str, Any]:
    """:func:`curve_only`'s answer for a curve: ``setting_us`` / ``exact_us`` meet ``q``,
    ``setting_for_recall`` maps each target to its grid setting (None where no
    setting reaches it, see :class:`Curve` ``total``), the sampled curve."""
    g = curve.g
    out: dict[str, Any] = {"policy": policy, "granularity_us": g, "truth_results": curve.C}
    keep: list[int] = []
    if q is not None:
        out["recall_target"] = q
        out["setting_us"] = out["exact_us"] = None
        if curve.reaches(q):
            step = curve.step_for(q)
            keep = [step, max(step - 1, 0)]
            out["setting_us"] = int(step * g)
            out["exact_us"] = curve.value_for(q)
    every = sorted(set(targets) | ({q} if q is not None else set()))
    out["setting_for_recall"] = {f"{t:g}": int(curve.step_for(t) * g) if curve.reaches(t) else None for t in every}
    s, r = curve.sampled(keep)
    out["curve"] = {"setting_us": s, "recall": r}
    return out


def recommendation(curve: Curve, q: float, names: Sequence[str], method: str) -> tuple[int, dict[str, Any]]:
    """The least grid step meeting ``q`` and ``tune.json``'s ``recommendation`` there:
    the setting, the exact minimum, recall at it and one step less, one value per stream."""
    g = curve.g
    step = curve.step_for(q)
    at_step = curve.recall([step, max(step - 1, 0)])
    return step, {
        "setting_us": int(step * g),
        "exact_us": curve.value_for(q),
        "recall": float(at_step[0]),
        "one_step_below_us": int((step - 1) * g) if step > 0 else None,
        "recall_one_step_below": float(at_step[1]) if step > 0 else None,
        "per_stream_us": {name: int(step * g) for name in names},
        "per_stream_method": method,
    }


def tune(replay: Replay, combos: Combos, windows: Sequence[int], names: Sequence[str], *, policy: str, q: float,
         g: int | None, period_us: int | None, per_period: bool, row_bytes: Sequence[float] | None = None
         ) -> dict[str, Any]:
    """Everything ``tune-buffer`` reports (the body of ``tune.json``).

    ``g`` None: the grid step follows the data (:func:`default_granularity` of
    the largest required slack).  ``period_us`` is needed with ``per_period``.
    """
    n, C = replay.n, len(combos)
    req_static = required_static(replay, combos, windows) if policy == "static" else None
    values = req_static.max(axis=0) if policy == "static" else required_kslack(replay, combos)
    _, last = member_indexes(replay, combos)
    granularity_source = "user"
    if g is None:
        largest = int(values.max()) if C else 0
        g = default_granularity(largest)
        granularity_source = (f"default: the largest 1-2-5 step <= largest required slack "
                              f"{format_duration(largest)} / {GRID_STEPS_PER_RANGE}")
    curve = Curve(values, g)
    step, rec = recommendation(curve, q, names, "common" if policy == "static" else "one K for every stream")
    # --- per period ---
    periods_out = None
    every = None
    if per_period:
        periods_out = per_period_settings(replay, last, values, period_us, q, g, rec["setting_us"])
        every_us = max((p["setting_us"] for p in periods_out), default=0)
        every = {"setting_us": every_us, "per_stream_us": {name: every_us for name in names},
                 "per_stream_method": rec["per_stream_method"],
                 "periods_meeting_target_at_recommendation": sum(
                     1 for p in periods_out if p["recall_at_recommendation"] >= q),
                 "periods_with_truth": len(periods_out)}
    # --- per-stream static ---
    if policy == "static":
        ps = per_stream_static(replay, windows, req_static, g, Constraint(None, q), step)
        rec["per_stream_us"] = {name: int(j * g) for name, j in zip(names, ps["steps"])}
        rec["per_stream_method"] = ps["method"]
        rec["per_stream_note"] = ps.get("note")
        if every is not None:
            ps_p = per_stream_static(replay, windows, req_static, g,
                                     Constraint(period_index(replay, last, period_us), q), every["setting_us"] // g)
            every["per_stream_us"] = {name: int(j * g) for name, j in zip(names, ps_p["steps"])}
            every["per_stream_method"] = ps_p["method"]
    # --- candidates: the engine's memory (and latency) at a set of settings ---
    candidates = []
    for s in candidate_steps(curve, [step] + ([every["setting_us"] // g] if every else [])):
        ev = evaluate(replay, combos, windows, policy_for(policy, n, s * g), row_bytes, emitted=int(curve.count([s])[0]))
        ev["setting_us"] = int(s * g)
        candidates.append(ev)
    at_rec = evaluate(replay, combos, windows, policy_for(policy, n, rec["setting_us"]), row_bytes,
                      emitted=int(curve.count([step])[0]))
    rec["memory_tuples"] = at_rec["memory_tuples"]
    rec["latency_us"] = at_rec["latency_us"]
    if policy == "static":
        vec = [rec["per_stream_us"][name] for name in names]
        at_vec = evaluate(replay, combos, windows, policy_for(policy, n, vec), row_bytes)
        rec["per_stream_recall"] = at_vec["recall"]
        rec["per_stream_memory_tuples"] = at_vec["memory_tuples"]
        if every is not None:
            at_every = evaluate(replay, combos, windows,
                                policy_for(policy, n, [every["per_stream_us"][nm] for nm in names]), row_bytes)
            every["per_stream_recall"] = at_every["recall"]
            every["per_stream_memory_tuples"] = at_every["memory_tuples"]
    s_list, r_list = curve.sampled([step, max(step - 1, 0)])
    out = {
        "policy": policy,
        "recall_target": q,
        "granularity_us": g,
        "granularity_source": granularity_source,
        "period_us": period_us,
        "truth_results": C,
        "streams": list(names),
        "recommendation": rec,
        "curve": {"setting_us": s_list, "recall": r_list},
        "candidates": candidates,
        "periods": periods_out,
        "every_period": every,
    }
    out["toml"] = toml_snippet(out)
    out["frameworks"] = frameworks_text(out)
    out["summary"] = summary_text(out)
    return out


# ---------------------------------------------------------------------------
# words for people
# ---------------------------------------------------------------------------


def toml_snippet(t: dict[str, Any]) -> str:
    rec = t["every_period"] if t.get("every_period") else t["recommendation"]
    scope = "in every period" if t.get("every_period") else "overall"
    q = t["recall_target"]
    if t["policy"] == "kslack":
        return (f"[run]\npolicy = \"kslack\"\nk = \"{toml_duration(rec['setting_us'])}\""
                f"          # recall >= {q} {scope}, one K for every stream\n")
    lines = [
        "[run]",
        "policy = \"static\"",
        f"retention = \"{toml_duration(rec['setting_us'])}\"   # one value for every stream: recall >= {q} {scope}",
    ]
    per = rec.get("per_stream_us") or {}
    if per and len(set(per.values())) > 1:
        lines.append(f"# less memory ({rec.get('per_stream_method')} per-stream search): put in each [[stream]] table")
        for name, us in per.items():
            lines.append(f"#   name = \"{name}\" -> retention = \"{toml_duration(us)}\"")
    return "\n".join(lines) + "\n"


def frameworks_text(t: dict[str, Any]) -> list[str]:
    rec = t["recommendation"]
    d = format_duration(rec["setting_us"])
    ms = int(math.ceil(rec["setting_us"] / 1000))
    if t["policy"] == "static":
        return [
            f"Spark Structured Streaming: withWatermark(\"ts\", \"{ms} milliseconds\") on every input of a "
            f"stream-stream join (inner join with a time-range condition) keeps each side's join state until "
            f"the global watermark -- the slowest input's largest event time minus {d} -- passes a row's ts "
            f"plus the window; that is this static retention. Results appear as soon as both rows are there "
            f"(plus the trigger interval). Spark also drops input rows already behind the watermark, which "
            f"streamjoin's static policy still joins, so Spark's recall at this delay can be a little lower; "
            f"`tune-buffer --policy kslack` gives the delay at which no needed row is late.",
            f"Flink: WatermarkStrategy.forBoundedOutOfOrderness(Duration.ofMillis({ms})) on both sources of an "
            f"interval join: state is kept until the operator's watermark (min over inputs of max ts - {ms} ms "
            f"- 1 ms) passes ts plus the bound, i.e. the same retention; rows behind the watermark are late "
            f"and dropped.",
        ]
    lat = rec.get("latency_us") or {}
    return [
        f"Flink: WatermarkStrategy.forBoundedOutOfOrderness(Duration.ofMillis({ms})) feeding an event-time "
        f"window join: an operator's watermark is the minimum over its inputs of (largest ts seen - {ms} ms - 1 ms), "
        f"elements behind it are late (dropped unless allowedLateness), and results wait for the watermark -- "
        f"this K-slack. Expect latency about mean {format_duration(lat.get('mean'))}, "
        f"p95 {format_duration(lat.get('p95'))} here.",
        f"Spark Structured Streaming: withWatermark(\"ts\", \"{ms} milliseconds\") sets the same bound: "
        f"rows more than {d} behind the slowest input's largest event time may be dropped, and "
        f"append-mode windowed results are emitted only once the watermark passes them (plus the trigger "
        f"interval; Spark advances the watermark between micro-batches, which only makes it more lenient).",
    ]


def _grid_note(t: dict[str, Any], name: str) -> str:
    source = t.get("granularity_source") or "user"
    return "" if source == "user" else (f" (a step chosen from the data: about {GRID_STEPS_PER_RANGE} steps up to "
                                        f"the largest {name} any result needs; set it with --granularity)")


#: how the per-stream values were found, in words
_PER_STREAM_SEARCH = {"exact": "exact search", "greedy": "greedy search", "common": "no search: no results"}


def summary_text(t: dict[str, Any]) -> list[str]:
    """What tune-buffer found, in sentences (terminal, cron output and tune.html).

    Durations get as many digits as it takes to tell them apart (the exact
    value 330.4ms next to the grid values 330ms and 332ms).
    """
    rec = t["recommendation"]
    q = t["recall_target"]
    name = "retention" if t["policy"] == "static" else "K"
    per = rec.get("per_stream_us") or {}
    every = t.get("every_period")
    exact, setting, below, grid, every_us, *per_text = format_durations(
        [rec["exact_us"], rec["setting_us"], rec["one_step_below_us"], t["granularity_us"],
         every["setting_us"] if every else None, *per.values()])
    lines = [
        f"The smallest {name} of {t['policy']} that reaches recall {q} is exactly {exact}; rounded up to the "
        f"{grid} grid{_grid_note(t, name)} it is {setting}, which gives recall {fmt_recall(rec['recall'], 6)}.",
    ]
    if rec["one_step_below_us"] is not None:
        lines.append(f"One grid step less, {below}, gives recall {fmt_recall(rec['recall_one_step_below'], 6)}: "
                     "below the target.")
    lines.append(f"Memory at {setting}: at most {rec['memory_tuples']['peak']:,} tuples held, "
                 f"{rec['memory_tuples']['mean']:,.1f} on average.")
    if t["policy"] == "static":
        values = ", ".join(f"{k} {v}" for k, v in zip(per, per_text))
        search = _PER_STREAM_SEARCH.get(rec["per_stream_method"], rec["per_stream_method"])
        lines.append(f"With a retention per stream ({search}): {values}; recall "
                     f"{fmt_recall(rec['per_stream_recall'], 6)}, {rec['per_stream_memory_tuples']['mean']:,.1f} "
                     "tuples held on average.")
    else:
        lat = rec["latency_us"]
        lines.append(f"At {setting} results wait {format_duration(lat['mean'])} on average, 95% of them at most "
                     f"{format_duration(lat['p95'])}. One K serves every stream: K-slack releases all streams "
                     "against one shared frontier.")
    if every:
        period = format_duration(t.get("period_us"))
        lines.append(f"To reach recall {q} in every {period} period that has results: {name} {every_us}. "
                     f"At {setting}, {every['periods_meeting_target_at_recommendation']} of "
                     f"{every['periods_with_truth']} periods reach it.")
    return lines
