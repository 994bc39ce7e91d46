"""Metrics of a replay (SPEC §5): recall, latency, memory, per-stream facts.

Percentiles are *nearest-rank* (the smallest value with at least ``q`` of the
data at or below it), so every reported latency and delay is a value that
actually occurred, and every engine reports the same integers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .policies import SORTING, SYMMETRIC
from .sorting import sort_values

#: results per block of the per-period count
BLOCK = 1 << 20


def nearest_rank(values: np.ndarray, q: float) -> int | None:
    """The nearest-rank ``q``-quantile (``0 < q <= 1``) of ``values``; None if empty."""
    n = len(values)
    if n == 0:
        return None
    k = max(1, math.ceil(q * n)) - 1
    return int(np.partition(values, k)[k])


def distribution(values: np.ndarray, qs: Sequence[tuple[str, float]]) -> dict[str, int | None]:
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


def latency_summary(latency: np.ndarray) -> dict[str, float | int | None]:
    d: dict[str, Any] = {"mean": float(latency.mean()) if len(latency) else None}
    d.update(distribution(latency, [("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0)]))
    return d


def latency_summary_of(latency: np.ndarray, mask: np.ndarray) -> dict[str, float | int | None]:
    """``latency_summary(latency[mask])``; without the copy when every latency
    is 0 (the symmetric family emits the moment the last member arrives)."""
    if len(latency) and not latency.any():
        count = int(np.count_nonzero(mask))
        zero = 0 if count else None
        return {"mean": 0.0 if count else None, "p50": zero, "p95": zero, "p99": zero, "max": zero}
    return latency_summary(latency[mask])


def recall_of(emitted: int, truth: int) -> float:
    return 1.0 if truth == 0 else emitted / truth


def periods(last: np.ndarray, emitted_mask: np.ndarray, arrival: np.ndarray, period_us: int,
            target: float | None) -> list[dict[str, Any]]:
    """Recall per period of replay time (period of a result = arrival of its last member).

    Periods are ``[start + i*P, start + (i+1)*P)`` from the first arrival.
    """
    if len(arrival) == 0:
        return []
    start = int(arrival[0])
    count = int((int(arrival[-1]) - start) // period_us) + 1
    # arrival is sorted, so period p holds the arrival indexes
    # [bounds[p], bounds[p+1]): a result's period is the number of upper
    # bounds at or below the index of its last member.  One binary search
    # per result over a handful of bounds, then one count of
    # (period, emitted) codes -- no table the size of the input.
    N = len(arrival)
    bounds = np.searchsorted(arrival, start + period_us * np.arange(count + 1, dtype=np.int64), side="left")
    upper = bounds[1:].astype(last.dtype if last.dtype.kind == "i" and N < 2**31 else np.int64)
    both = np.zeros(2 * count + 2, dtype=np.int64)
    for c0 in range(0, len(last), BLOCK):  # a block at a time: small temporaries
        code = np.searchsorted(upper, last[c0:c0 + BLOCK], side="right")
        code <<= 1
        code |= emitted_mask[c0:c0 + BLOCK]
        both += np.bincount(code, minlength=2 * count + 2)
    both = both[:2 * count]
    emitted = both[1::2]
    truth = both[0::2] + emitted
    return [
        {
            "start_us": start + i * period_us,
            "end_us": start + (i + 1) * period_us,
            "truth": int(truth[i]),
            "emitted": int(emitted[i]),
            "recall": recall_of(int(emitted[i]), int(truth[i])),
            "target": target,
        }
        for i in range(count)
    ]


def stream_facts(names, rows, quarantined, ts_by_stream, replay, decisions) -> list[dict[str, Any]]:
    """Per stream: rows, quarantined, rate, delay distribution, drops, expiries."""
    out = []
    for i, name in enumerate(names):
        at = replay.index_of[i]  # the stream's arrival indexes (in row order)
        delay = replay.delay[at]
        ts = ts_by_stream[i]
        span_s = (int(ts.max()) - int(ts.min())) / 1e6 if len(ts) else 0.0
        dropped = int(np.count_nonzero(decisions.dropped[at])) if decisions.family == SORTING else 0
        expired = int(np.count_nonzero(decisions.expired[at])) if decisions.family == SYMMETRIC else 0
        out.append({
            "name": name,
            "rows": int(rows[i]),
            "quarantined": int(quarantined[i]),
            "rate_per_s": (rows[i] / span_s) if span_s > 0 else None,
            "delay_us": distribution(delay, [("p50", 0.5), ("p95", 0.95), ("max", 1.0)]),
            "dropped_late": dropped,
            "expired_on_arrival": expired,
        })
    return out


def memory_summary(memory: np.ndarray, row_bytes: Sequence[float]) -> tuple[dict, dict]:
    """Peak and mean over arrival indexes, in tuples and estimated bytes."""
    if memory.shape[1] == 0:
        return {"peak": 0, "mean": 0.0}, {"peak": 0, "mean": 0.0}
    total = memory.sum(axis=0)
    tuples = {"peak": int(total.max()), "mean": float(total.mean())}
    weights = np.asarray(row_bytes, dtype=np.float64)
    # (memory * weights).sum(axis=0) -- the same products added in the same
    # order, element by element -- into total's buffer, a block at a time:
    # no (n, N) float temporary
    nbytes = total.view(np.float64) if total.dtype.itemsize == 8 else np.empty(total.shape, np.float64)
    N = memory.shape[1]
    for c0 in range(0, N, BLOCK):
        out = nbytes[c0:c0 + BLOCK]
        np.multiply(memory[0, c0:c0 + BLOCK], weights[0], out=out)
        for i in range(1, memory.shape[0]):
            out += memory[i, c0:c0 + BLOCK] * weights[i]
    return tuples, {"peak": int(round(float(nbytes.max()))), "mean": float(nbytes.mean())}
