"""Nearest-rank percentiles: the one percentile rule of every report.

The ``q``-quantile of ``n`` values is the smallest value with at least ``q``
of the data at or below it -- the ``ceil(q·n)``-th smallest (1-based) -- so
every reported latency and delay is a value that actually occurred, and
every engine (and the capacity model below the metrics) reports the same
integers.  Several at once come from one sort of the values, or -- for
integers whose range is below their number, as latencies and delays in us
usually are -- from a count of each value (the same integers, without the
sort).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .sorting import sort_values


def rank(q: float, n: int) -> int:
    """The 0-based position of the nearest-rank ``q``-quantile among ``n`` sorted values:
    ``ceil(q·n) - 1``, at least 0."""
    return max(1, math.ceil(q * n)) - 1


def kth_of_counts(cum: np.ndarray, ks, values: np.ndarray | None = None) -> list[int]:
    """The ``k``-th smallest (0-based) for each of ``ks`` of data given as distinct
    ascending ``values`` with cumulative counts ``cum``: the first value with more than
    ``k`` of the data at or below it (``values`` None: the values are ``0..len(cum)-1``,
    a bincount's).  Every ``k`` must be below ``cum[-1]``."""
    at = np.searchsorted(cum, np.asarray(ks, dtype=np.int64) + 1, side="left")
    return (at if values is None else np.asarray(values)[at]).tolist()


def nearest_rank(values: np.ndarray, q: float) -> int | None:
    """The nearest-rank ``q``-quantile (``0 < q <= 1``) of ``values``; None if empty."""
    n = len(values)
    if n == 0:
        return None
    k = rank(q, n)
    return int(np.partition(values, k)[k])


def distribution(values: np.ndarray, qs: Sequence[tuple[str, float]]) -> dict[str, int | None]:
    """``{name: nearest_rank(values, q)}`` for each ``(name, q)`` of ``qs`` (None each if empty)."""
    values = np.asarray(values)
    if len(values) == 0:
        return {name: None for name, _ in qs}
    at = {name: rank(q, len(values)) for name, q in qs}   # 0-based, as nearest_rank's k
    ks = sorted(set(at.values()))
    counted = _by_counts(values, ks)
    if counted is not None:
        return {name: counted[at[name]] for name, _ in qs}
    # several order statistics: a (vectorised) full sort beats repeated selection
    if len(ks) > 1:
        part = values.copy()
        sort_values(part)
    else:
        part = np.partition(values, ks)
    return {name: int(part[at[name]]) for name, _ in qs}


#: from this many values :func:`distribution` counts integers of a small range instead of sorting
COUNT_FROM = 1 << 16


def _by_counts(values: np.ndarray, ks: list[int]) -> dict[int, int] | None:
    """The ``k``-th smallest (0-based) of ``values`` for each of ``ks``, from a
    count of every value -- ``O(n + range)`` instead of a sort -- where the values
    are integers, at least :data:`COUNT_FROM` of them, and their range is at most
    their number (the counts are then no larger than the values); else ``None``.
    Latencies and delays in us are (the core benchmark's 8.1M emitted latencies
    span 259k distinct values): docs/performance.md, issue 21 sixth pass."""
    n = len(values)
    if n < COUNT_FROM or values.ndim != 1 or not (values.dtype.kind == "i" or (values.dtype.kind == "u" and values.dtype.itemsize <= 4)):
        return None
    lo, hi = int(values.min()), int(values.max())
    if hi - lo >= n:
        return None
    shifted = values if lo == 0 and values.dtype == np.int64 else (values.astype(np.int64) - lo)
    cum = np.cumsum(np.bincount(shifted, minlength=hi - lo + 1))
    return {k: v + lo for k, v in zip(ks, kth_of_counts(cum, ks))}

