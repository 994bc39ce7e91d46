"""Nearest-rank percentiles: the one percentile rule of every report.

The ``q``-quantile of ``n`` values is the smallest value with at least ``q``
of the data at or below it -- the ``ceil(q·n)``-th smallest (1-based) -- so
every reported latency and delay is a value that actually occurred, and
every engine (and the capacity model below the metrics) reports the same
integers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .sorting import sort_values


def nearest_rank(values: np.ndarray, q: float) -> int | None:
    """The nearest-rank ``q``-quantile (``0 < q <= 1``) of ``values``; None if empty."""
    n = len(values)
    if n == 0:
        return None
    k = max(1, math.ceil(q * n)) - 1
    return int(np.partition(values, k)[k])


def distribution(values: np.ndarray, qs: Sequence[tuple[str, float]]) -> dict[str, int | None]:
    """``{name: nearest_rank(values, q)}`` for each ``(name, q)`` of ``qs`` (None each if empty)."""
    values = np.asarray(values)
    if len(values) == 0:
        return {name: None for name, _ in qs}
    ks = sorted({max(1, math.ceil(q * len(values))) - 1 for _, q in qs})
    # several order statistics: a (vectorised) full sort beats repeated selection
    if len(ks) > 1:
        part = values.copy()
        sort_values(part)
    else:
        part = np.partition(values, ks)
    return {name: int(part[max(1, math.ceil(q * len(values))) - 1]) for name, q in qs}
