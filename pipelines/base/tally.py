"""Exact distributions of integers, chunk by chunk, in memory bounded by the
number of *distinct* values.

Latencies and delays are microsecond integers bounded by the disorder span,
so a value -> count table stays small however many results a run has, and
nearest-rank percentiles computed from it are exactly those of the whole
column (:func:`streamjoin.pipelines.base.percentiles.distribution`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .percentiles import kth_of_counts, rank


class Tally:
    """A running ``value -> count`` table of int64 values."""

    def __init__(self) -> None:
        self.values = np.empty(0, np.int64)
        self.counts = np.empty(0, np.int64)

    def add(self, values: np.ndarray) -> None:
        """Count ``values`` (any order, repeats allowed)."""
        if not len(values):
            return
        values = np.asarray(values, dtype=np.int64)
        lo, hi = int(values.min()), int(values.max())
        if hi - lo < max(len(values), 1 << 16):  # a dense range: count without sorting
            counts = np.bincount(values - lo)
            v = np.flatnonzero(counts)
            c = counts[v]
            v = v + lo
        else:
            v, c = np.unique(values, return_counts=True)
        if not len(self.values):
            self.values, self.counts = v, c.astype(np.int64)
            return
        both = np.concatenate([self.values, v])
        weights = np.concatenate([self.counts, c])
        self.values, inverse = np.unique(both, return_inverse=True)
        self.counts = np.bincount(inverse, weights=weights, minlength=len(self.values)).astype(np.int64)

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    def mean(self) -> float | None:
        n = self.n
        return float((self.values.astype(np.float64) * self.counts).sum() / n) if n else None

    def quantiles(self, qs: Sequence[tuple[str, float]]) -> dict[str, int | None]:
        """Nearest-rank quantiles, the same integers as ``percentiles.distribution`` on the raw values."""
        n = self.n
        if n == 0:
            return {name: None for name, _ in qs}
        got = kth_of_counts(np.cumsum(self.counts), [rank(q, n) for _, q in qs], self.values)
        return {name: v for (name, _), v in zip(qs, got)}

    def histogram(self, bins: int) -> dict[str, list]:
        """The same bins and counts as ``report.html.latency_histogram`` on the raw values."""
        if self.n == 0:
            return {"edges_us": [], "counts": []}
        hi = int(self.values.max())
        counts, edges = np.histogram(self.values, bins=bins if hi > 0 else 1, range=(0, max(hi, 1)),
                                     weights=self.counts)
        return {"edges_us": edges.round(1).tolist(), "counts": counts.astype(np.int64).tolist()}
