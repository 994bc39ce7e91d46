"""The needs a recall-target controller (:mod:`.controller`) remembers of completed
periods (SPEC §4.3; the controller's module docstring, "Three horizons"): per
period the latest-P solution at its end and its expected results, and which
periods a stream stalled in -- O(``memory_periods`` x n) numbers, whatever the
run's length (older periods are forgotten: no decision reads them).
"""

from __future__ import annotations

import numpy as np

from .recall_target import MEMORY_QUANTILE


class RememberedNeeds:
    """Per period, ``(need per stream, expected results)``; the stalled periods."""

    def __init__(self, memory_periods: int, recall: float):
        self.memory_periods = memory_periods
        self.recall = float(recall)
        self.need: dict[int, tuple[np.ndarray, float]] = {}   # per period: the latest-P solution at its end
        self.stalled: set[int] = set()                        # periods with a stalled stream (and the next)
        self._memo: tuple[int, np.ndarray | None] | None = None   # (period, of(period))

    def forget_before(self, period: int) -> None:
        """Forget the periods no decision at ``period`` or later reads."""
        for p in [p for p in self.need if p < period - self.memory_periods]:
            del self.need[p]
        self.stalled.difference_update([p for p in self.stalled if p < period - self.memory_periods])

    def of(self, period: int) -> np.ndarray | None:
        """Per stream, what the last ``memory_periods`` completed periods needed for
        ``Q`` (qkslack: for ``Q`` + margin; the latest-P solution at each
        period's end): the larger of their 95th percentile and their
        ``(1 + Q) / 2`` quantile weighted by each period's expected results.

        Purged state cannot come back, so a lag that recurs (a daily upload, a
        weekly batch) must be covered before it arrives, not after.  The plain
        percentile keeps ``Q`` in 95 % of periods; the weighted one keeps the
        overall recall when the rare periods hold many results (a nightly
        batch of late clicks: 3 % of periods, a fifth of the results), leaving
        them half of the overall loss budget ``1 - Q``.  Periods in which a
        stream stalled (and the next, where its burst lands) count in the plain
        percentile only: the backlog model foresees a stall when it happens,
        and one huge burst must not hold an hour of state for a week; stalls
        that recur (a feed that stalls every few minutes) still show in the
        plain percentile.

        Needs of completed periods are final, so the answer changes only when a
        period ends: it is computed once per period (cached)."""
        if self._memo is not None and self._memo[0] == period:
            return self._memo[1]
        self._memo = (period, self._compute(period))
        return self._memo[1]

    def _compute(self, period: int) -> np.ndarray | None:
        recent = [p for p in self.need if period - self.memory_periods <= p < period]
        if not recent:
            return None
        values = np.stack([self.need[p][0] for p in recent])
        # a stall's burst weighs nothing here: its period counts once, like any other
        weights = np.array([0.0 if p in self.stalled else self.need[p][1] for p in recent])
        out = np.quantile(values, MEMORY_QUANTILE, axis=0, method="higher").astype(np.int64)
        level = (1.0 + self.recall) / 2   # half the overall loss budget left to rare periods
        if weights.sum() > 0:
            for i in range(values.shape[1]):
                order = np.argsort(values[:, i], kind="stable")
                cum = np.cumsum(weights[order])
                k = int(np.searchsorted(cum, level * cum[-1], side="left"))
                out[i] = max(out[i], int(values[order[min(k, len(order) - 1)], i]))
        return out

