"""Metrics of a replay (SPEC §5): recall, latency, memory, per-stream facts.

Percentiles are *nearest-rank* (the smallest value with at least ``q`` of the
data at or below it; :mod:`~streamjoin.pipelines.base.percentiles`), so every
reported latency and delay is a value that actually occurred, and every engine
reports the same integers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..policies import SYMMETRIC
from ..base.percentiles import distribution

#: results per block of the per-period count
BLOCK = 1 << 20


def latency_summary(latency: np.ndarray) -> dict[str, float | int | None]:
    d: dict[str, Any] = {"mean": float(latency.mean()) if len(latency) else None}
    d.update(distribution(latency, [("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0)]))
    return d


def latency_summary_of(latency: np.ndarray, mask: np.ndarray) -> dict[str, float | int | None]:
    """``latency_summary(latency[mask])``; without the copy when every latency
    is 0 (the symmetric family emits the moment the last member arrives)."""
    if len(latency) and not latency.any():
        return zero_latency_summary(int(np.count_nonzero(mask)))
    return latency_summary(latency[mask])


def zero_latency_summary(count: int) -> dict[str, float | int | None]:
    """:func:`latency_summary` of ``count`` latencies that are all 0."""
    zero = 0 if count else None
    return {"mean": 0.0 if count else None, "p50": zero, "p95": zero, "p99": zero, "max": zero}


def outer_join_summary(outer, join: str, names: Sequence[str]) -> dict[str, Any]:
    """``report.json`` ``outer_join`` of an outer join (``spark-ss --join left|right|full``,
    ``flink-sql --join left|right|full``): the null-padded rows (``outer``: one
    :class:`~streamjoin.pipelines.replay.microbatch.OuterRows` per padded stream), how
    many and their latency (emission when the engine evicts the row, minus its
    arrival); ``stream`` names the padded stream(s), ``" and "``-joined for a full join.
    They are not results of the truth (the inner pairs), so recall,
    ``emitted_results`` and ``latency_us`` leave them out."""
    return {"join": join, "stream": " and ".join(names[p.stream] for p in outer),
            "rows": int(sum(len(p.index) for p in outer)),
            "latency_us": latency_summary(np.concatenate([p.latency_us for p in outer]))}


def recall_of(emitted: int, truth: int) -> float:
    return 1.0 if truth == 0 else emitted / truth


def periods(last: np.ndarray, emitted_mask: np.ndarray, arrival: np.ndarray, period_us: int,
            target: float | None) -> list[dict[str, Any]]:
    """Recall per period of replay time (period of a result = arrival of its last member).

    Periods are ``[start + i*P, start + (i+1)*P)`` from the first arrival.
    Only periods with truth are listed (a period without results has no
    recall; :func:`period_counts` says how many the span has): the list is
    bounded by the input, never by ``span / P`` (docs/semantics.md, "Periods").
    """
    if len(arrival) == 0 or len(last) == 0:
        return []
    start = int(arrival[0])
    ids, upper = occupied_periods(arrival, start, period_us)
    # arrival is sorted, so occupied period u holds the arrival indexes
    # [upper[u-1], upper[u]): a result's (dense) period is the number of
    # upper bounds at or below the index of its last member.  One binary
    # search per result over the occupied periods' bounds, then one count of
    # (period, emitted) codes -- no table the size of the input or the span.
    return periods_of_codes(start, period_us, ids, period_code_counts(last, emitted_mask, upper), target)


def periods_of_codes(start: int, period_us: int, ids: np.ndarray, both: np.ndarray,
                     target: float | None) -> list[dict[str, Any]]:
    """:func:`period_entries` from :func:`period_code_counts`' array ``both``."""
    emitted = both[1::2]
    truth = both[0::2] + emitted
    return period_entries(start, period_us, ids, truth, emitted, target)


def period_code_counts(last: np.ndarray, emitted_mask: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Per occupied period ``u`` (bounds ``upper``, :func:`occupied_periods`): the
    results not emitted at ``2u`` and the emitted ones at ``2u + 1``, by the
    arrival index ``last`` of their last member.  Counts add up: a Spark task
    counts its own results, the driver sums the tasks' arrays."""
    U = len(upper)
    N = int(upper[-1]) if U else 0
    upper = upper.astype(last.dtype if last.dtype.kind == "i" and N < 2**31 else np.int64)
    both = np.zeros(2 * U, dtype=np.int64)
    # the period of every arrival index, looked up, when that table is no larger
    # than ``last`` itself (a gather is ~2.5x cheaper than a binary search per
    # result); otherwise (a Spark task's few results, a chunk of a long input)
    # the binary search, with no table the size of the input
    table = None
    if 0 < N <= len(last) and U < 2**31 and int(last.min()) >= 0 and int(last.max()) < N:
        table = np.repeat(np.arange(U, dtype=np.int32), np.diff(upper, prepend=0))
    for c0 in range(0, len(last), BLOCK):  # a block at a time: small temporaries
        if table is not None:
            code = table[last[c0:c0 + BLOCK]].astype(np.int64)
        else:
            code = np.searchsorted(upper, last[c0:c0 + BLOCK], side="right")
        code <<= 1
        code |= emitted_mask[c0:c0 + BLOCK]
        both += np.bincount(code, minlength=2 * U)[:2 * U]
    return both


def occupied_periods(arrival: np.ndarray, start: int, period_us: int) -> tuple[np.ndarray, np.ndarray]:
    """The periods (``(arrival - start) // P``) that hold an arrival, in order,
    and for each the index one past its last arrival (``arrival`` sorted)."""
    N = len(arrival)
    ids, ends = [], []
    prev = None
    for c0 in range(0, N, BLOCK):
        p = (arrival[c0:c0 + BLOCK] - start) // period_us
        change = np.flatnonzero(p[1:] != p[:-1]) + 1
        heads = np.concatenate([[0], change]) if prev is None or p[0] != prev else change
        if prev is not None and p[0] != prev:
            ends.append(np.array([c0], np.int64))
        ids.append(p[heads])
        ends.append(change + c0)
        prev = p[-1]
    ends.append(np.array([N], np.int64))
    return np.concatenate(ids).astype(np.int64), np.concatenate(ends).astype(np.int64)


def period_entries(start: int, period_us: int, ids: np.ndarray, truth: np.ndarray, emitted: np.ndarray,
                   target: float | None) -> list[dict[str, Any]]:
    """``report.json`` period entries for the periods ``ids`` that have truth (others are left out)."""
    keep = np.flatnonzero(truth > 0)
    return [
        {
            "start_us": start + i * period_us,
            "end_us": start + (i + 1) * period_us,
            "truth": t,
            "emitted": e,
            "recall": recall_of(e, t),
            "target": target,
        }
        for i, t, e in zip(ids[keep].tolist(), truth[keep].tolist(), emitted[keep].tolist())
    ]


def period_counts(first_us: int | None, last_us: int | None, period_us: int, listed: int) -> dict[str, int]:
    """``periods_total`` (periods from the first arrival to the last) and
    ``periods_empty`` (those without truth, not listed in ``periods``)."""
    total = 0 if first_us is None else (int(last_us) - int(first_us)) // period_us + 1
    return {"periods_total": total, "periods_empty": total - listed}


def stream_facts(names, rows, quarantined, ts_by_stream, replay, decisions) -> list[dict[str, Any]]:
    """Per stream: rows, quarantined, rate, delay distribution, drops, expiries."""
    out = []
    for i, name in enumerate(names):
        at = replay.index_of[i]  # the stream's arrival indexes (in row order)
        delay = replay.delay[at]
        ts = ts_by_stream[i]
        span_s = (int(ts.max()) - int(ts.min())) / 1e6 if len(ts) else 0.0
        # late drops: the sorting family's, and spark-ss's watermark filter
        dropped = int(np.count_nonzero(decisions.dropped[at])) if decisions.dropped is not None else 0
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


def fmt_recall(r: float | None, digits: int = 4) -> str:
    """Recall truncated (never rounded up): 0.94997 shows as 0.9499, not 0.9500."""
    if r is None:
        return "-"
    scale = 10 ** digits
    return f"{math.floor(r * scale + 1e-9) / scale:.{digits}f}"
