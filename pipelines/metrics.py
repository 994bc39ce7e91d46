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
    part = np.partition(values, ks)
    return {name: int(part[max(1, math.ceil(q * len(values))) - 1]) for name, q in qs}


def latency_summary(latency: np.ndarray) -> dict[str, float | int | None]:
    d: dict[str, Any] = {"mean": float(latency.mean()) if len(latency) else None}
    d.update(distribution(latency, [("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0)]))
    return d


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
    # Count per arrival index, then sum over each period's index range
    # (arrival is sorted): two bincounts instead of a division per result.
    N = len(arrival)
    bounds = np.searchsorted(arrival, start + period_us * np.arange(count + 1, dtype=np.int64), side="left")

    def per_period(indexes: np.ndarray) -> np.ndarray:
        running = np.concatenate([[0], np.cumsum(np.bincount(indexes, minlength=N))])
        return running[bounds[1:]] - running[bounds[:-1]]

    truth = per_period(last)
    emitted = per_period(last[emitted_mask])
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
        mask = replay.stream == i
        delay = replay.delay[mask]
        ts = ts_by_stream[i]
        span_s = (int(ts.max()) - int(ts.min())) / 1e6 if len(ts) else 0.0
        dropped = int(decisions.dropped[mask].sum()) if decisions.family == SORTING else 0
        expired = int(decisions.expired[mask].sum()) if decisions.family == SYMMETRIC else 0
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
    weights = np.asarray(row_bytes, dtype=np.float64).reshape(-1, 1)
    nbytes = (memory * weights).sum(axis=0)
    return (
        {"peak": int(total.max()), "mean": float(total.mean())},
        {"peak": int(round(float(nbytes.max()))), "mean": float(nbytes.mean())},
    )
