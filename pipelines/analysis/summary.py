"""Results summarised where they are made, merged exactly (issue 19).

A Spark task that joins one partition summarises its combinations in tables
whose size does not grow with the results (:func:`summarise`); the driver adds
the tasks' tables (:func:`merge`) and reads ``report.json``'s numbers off the
sum -- the same numbers as :mod:`.metrics` and :mod:`.tuning` compute from
every combination on one machine:

=====================  ==========================================  ===========================
report.json            per task                                    merged
=====================  ==========================================  ===========================
truth, emitted         two counts                                  sums
periods                :func:`.metrics.period_code_counts`         sum (one array per period)
latency_us             value counts of the emitted latencies       :func:`latency_summary`
latency_histogram      (the same value counts)                     report/build.py
tuning curve           value counts of the required slacks         :class:`CountedCurve`
duplicates             duplicates among the task's own results     sum (see below)
=====================  ==========================================  ===========================

Value counts are exact: a percentile is the nearest-rank value
(:func:`~streamjoin.pipelines.base.percentiles.nearest_rank`), read off the cumulative counts; the mean is
the exact integer sum over the count, equal to numpy's float mean while the
sum stays below 2**53.  Their size is the number of *distinct* values (the
symmetric family: one latency, 0).

``duplicates`` counts the combinations a task emitted more than once.  Two
tasks emitting the same combination is what ownership (theorems A and C)
rules out; the merged count does not see it (the tests compare the written
results with the local engine's as a set, which does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..base.percentiles import kth_of_counts, rank
from .metrics import period_code_counts
from .tuning import Curve, grid_index, needed_count


@dataclass
class ResultSummary:
    """One task's (or the merged) summary of its combinations."""

    truth: int
    emitted: int
    duplicates: int
    periods: np.ndarray            # period_code_counts: [2u] not emitted, [2u + 1] emitted
    latency: tuple[np.ndarray, np.ndarray]    # emitted latencies: distinct values, counts
    need: tuple[np.ndarray, np.ndarray]       # required slack of every combination: values, counts


def value_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v, c = np.unique(np.asarray(values, dtype=np.int64), return_counts=True)
    return v, c.astype(np.int64)


def summarise(rows: Sequence[np.ndarray], sizes: Sequence[int], emitted: np.ndarray, last: np.ndarray,
              latency: np.ndarray, need: np.ndarray, upper: np.ndarray) -> ResultSummary:
    """The summary of one task's combinations: members' ``rows`` (in the streams,
    of ``sizes`` rows), ``emitted``, the last member's arrival index ``last``,
    ``latency`` (read where emitted), required slack ``need``; ``upper``: the
    occupied periods' bounds (:func:`.metrics.occupied_periods`)."""
    from ..replay.duplicates import count_duplicates   # a Spark task's (a local run's report never imports it)

    emitted = np.asarray(emitted, dtype=bool)
    m = len(emitted)
    return ResultSummary(
        truth=int(m), emitted=int(np.count_nonzero(emitted)),
        duplicates=count_duplicates(list(rows), list(sizes), emitted) if m else 0,
        periods=period_code_counts(np.asarray(last), emitted, upper),
        latency=value_counts(np.asarray(latency)[emitted]),
        need=value_counts(need))


def _merge_counts(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    values = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, np.int64)
    counts = np.concatenate([p[1] for p in parts]) if parts else np.empty(0, np.int64)
    v, inv = np.unique(values, return_inverse=True)
    return v, np.bincount(inv, weights=None if not len(counts) else counts, minlength=len(v)).astype(np.int64) \
        if len(v) else np.empty(0, np.int64)


def merge(parts: Sequence[ResultSummary], periods: int) -> ResultSummary:
    """The sum of the tasks' summaries (``periods``: how many occupied periods)."""
    both = np.zeros(2 * periods, np.int64)
    for p in parts:
        both += p.periods
    return ResultSummary(
        truth=sum(p.truth for p in parts), emitted=sum(p.emitted for p in parts),
        duplicates=sum(p.duplicates for p in parts), periods=both,
        latency=_merge_counts([p.latency for p in parts]), need=_merge_counts([p.need for p in parts]))


def nearest_rank_of_counts(values: np.ndarray, cum: np.ndarray, q: float) -> int | None:
    """:func:`~streamjoin.pipelines.base.percentiles.nearest_rank` of the data ``values`` repeated by counts (``cum``: their cumulative sum)."""
    n = int(cum[-1]) if len(cum) else 0
    if n == 0:
        return None
    return kth_of_counts(cum, [rank(q, n)], values)[0]


#: :func:`exact_dot`'s slice when the int64 products could overflow
DOT_CHUNK = 1 << 16


def exact_dot(values: np.ndarray, counts: np.ndarray, n: int | None = None) -> int:
    """``sum(values * counts)`` as an exact integer, in memory independent of the
    number of values: int64 arithmetic when no partial sum can overflow (the largest
    ``|value|`` times the total count below 2**63), else Python integers over slices of
    :data:`DOT_CHUNK` values (the whole arrays as Python integers cost ~140 bytes per
    distinct value on the driver: ~275 MB at 2M latency values). ``n``: the total
    count (``counts.sum()``) when the caller has it; summed here otherwise."""
    values = np.asarray(values, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    if not len(values):
        return 0
    if n is None:
        n = sum(int(c) for c in np.add.reduceat(counts, np.arange(0, len(counts), DOT_CHUNK)).tolist())
    if max(abs(int(values.max())), abs(int(values.min()))) * n < 2 ** 63:
        return int(np.dot(values, counts))
    return sum(sum(int(v) * int(c) for v, c in zip(values[i:i + DOT_CHUNK].tolist(), counts[i:i + DOT_CHUNK].tolist()))
               for i in range(0, len(values), DOT_CHUNK))


def latency_summary(values: np.ndarray, counts: np.ndarray) -> dict[str, float | int | None]:
    """:func:`.metrics.latency_summary` of the latencies given as value counts."""
    cum = np.cumsum(counts)
    n = int(cum[-1]) if len(cum) else 0
    total = exact_dot(values, counts, n)
    out: dict[str, float | int | None] = {"mean": (total / n) if n else None}
    for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0)):
        out[name] = nearest_rank_of_counts(values, cum, q)
    return out


class CountedCurve(Curve):
    """:class:`Curve` from value counts (``values`` ascending and distinct, ``counts``
    how many combinations require each): the same answers as ``Curve(np.repeat(values,
    counts), g)`` without the array of every combination (the Spark engine's tasks
    count their combinations' required slacks, here)."""

    def __init__(self, values: np.ndarray, counts: np.ndarray, g: int):
        self.g = int(g)
        self.values = np.asarray(values, dtype=np.int64)
        self.cum = np.cumsum(np.asarray(counts, dtype=np.int64))
        self.C = int(self.cum[-1]) if len(self.cum) else 0
        self.top = int(grid_index(self.values[-1:], g)[0]) if len(self.values) else 0

    def count(self, steps) -> np.ndarray:
        at = np.searchsorted(self.values, np.asarray(steps, dtype=np.int64) * self.g, side="right")
        return np.where(at > 0, self.cum[np.maximum(at - 1, 0)] if len(self.cum) else 0, 0)

    def reaches(self, q: float) -> bool:
        return needed_count(self.C, q) <= self.C

    def value_for(self, q: float) -> int:
        m = needed_count(self.C, q)
        return int(self.values[np.searchsorted(self.cum, m, side="left")]) if m else 0
