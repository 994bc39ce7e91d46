"""Interval-join replay (``flink``): watermarks, late drops and buffer cleanup, on columns.

The rules and their Flink sources are in :mod:`streamjoin.pipelines.policies.flink`;
this module computes them for every record at once.  ``G`` is the join
operator's watermark (µs, whole ms; :data:`~streamjoin.pipelines.base.timeunits.NEG_INF`
before both inputs have emitted one).  Per record (arrival index ``a``):

* ``before[a]`` -- ``G`` when record ``a`` is processed: ``min_i (M_i(c) - D_i
  - 1 ms)`` over the records ``<= c`` that the generators had seen at their last
  emission (``c = a - 1`` with a watermark after every record; with
  ``--watermark-interval I``, the records that arrived before the latest tick
  ``first + k I <= arrival[a]``);
* ``after[a]`` -- ``G`` once record ``a`` and what follows it at the same
  instant are processed (``c = a`` per record; ``before[a]`` with ticks, since
  the next tick comes later);
* ``dropped[a]`` -- late: ``ts < before[a]``;
* ``threshold[a]`` -- ``max(ts + W_s, before[a] + 1)``: the buffered record is
  cleaned up by the first advance of ``G`` to at least its timer ``ts + W_s``
  (and an advance must happen after it was buffered).

A valid pair with earlier member ``x`` and later member ``y`` (arrival
indexes) is emitted iff neither is late and ``x`` is still buffered when ``y``
probes::

    before[y] < threshold[x]

at ``arrival[y]`` (latency 0).  ``G`` never decreases, so a record's stay in
the buffer is one binary search in ``after``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..base.errors import InputError
from ..base.timeunits import NEG_INF
from ..policies.flink import MS, check_windows


@dataclass
class Watermarks:
    """The interval-join facts of a replay (arrays indexed by arrival index).

    Attributes:
        before: operator watermark when each record is processed.
        after: operator watermark right after each record (before the next one).
        threshold: the value of the watermark that cleans each record up.
        held_until: first arrival index after which the record is no longer
            buffered (its own index if it was dropped as late; ``N`` if it is
            still buffered after the last record).
        interval_us: the watermark interval (0 = per record).
    """

    before: np.ndarray
    after: np.ndarray
    threshold: np.ndarray
    held_until: np.ndarray
    interval_us: int


def operator_watermark(M_at: np.ndarray, delays) -> np.ndarray:
    """``min_i (M_i - D_i - 1 ms)`` for running maxima ``M_at`` of shape ``(n, C)``;
    ``NEG_INF`` where a stream has no record yet (rules 2-3)."""
    out = np.full(M_at.shape[1], np.iinfo(np.int64).max, dtype=np.int64)
    for i, d in enumerate(delays):
        m = M_at[i]
        np.minimum(out, np.where(m > NEG_INF, m - int(d) - MS, NEG_INF), out=out)
    return out


def _operator_watermark(M: np.ndarray, counted: np.ndarray, delays) -> np.ndarray:
    """:func:`operator_watermark` of the records ``<= counted``; ``NEG_INF`` where ``counted < 0``."""
    seen = counted >= 0
    at = np.where(seen, counted, 0)
    M_at = M[:, at]
    M_at[:, ~seen] = NEG_INF
    return operator_watermark(M_at, delays)


def ticks(arrival: np.ndarray, first: int, interval: int) -> np.ndarray:
    """The latest watermark tick ``first + k I <= arrival`` of each record (rule 2, periodic)."""
    return first + (arrival - first) // interval * interval


def record_facts(ts: np.ndarray, stream: np.ndarray, before: np.ndarray, windows) -> tuple[np.ndarray, np.ndarray]:
    """``dropped`` (rule 4) and ``threshold`` (rule 6) of records given the watermark
    ``before`` each is processed."""
    W = np.asarray(windows, dtype=np.int64)
    return ts < before, np.maximum(ts + W[stream], before + 1)


def sub_ms_error(stream: int, row: int, ts: int, count: int) -> InputError:
    """The one-line error for event times that are not whole milliseconds (the first in
    replay order, and how many)."""
    return InputError(f"policy flink: stream {stream} row {row} has ts {ts}us, not a whole millisecond "
                      f"({count} such rows); Flink's record timestamps are milliseconds")


def watermarks(replay, windows, policy) -> tuple[Watermarks, np.ndarray]:
    """Operator watermarks, late drops and buffer stays of a replay.

    ``replay``: a :class:`~streamjoin.pipelines.replay.progress.Replay` (its
    ``M`` is read).  Returns the :class:`Watermarks` and the ``dropped`` mask."""
    N = replay.N
    interval = int(policy.watermark_interval_us)
    W = np.asarray(windows, dtype=np.int64)
    check_windows(W)
    odd = np.flatnonzero(replay.ts % MS)
    if len(odd):
        a = int(odd[0])
        raise sub_ms_error(int(replay.stream[a]), int(replay.row[a]), int(replay.ts[a]), len(odd))
    idx = np.arange(N, dtype=np.int64)
    if N == 0:
        empty = np.empty(0, np.int64)
        return Watermarks(empty, empty, empty, empty, interval), np.zeros(0, bool)
    M = replay.M
    if interval == 0:   # rule 2: a watermark after every record
        before = _operator_watermark(M, idx - 1, policy.watermark)
        after = _operator_watermark(M, idx, policy.watermark)
    else:               # ticks at first + k I: the records that arrived before the latest tick
        tick = ticks(replay.arrival, int(replay.arrival[0]), interval)
        counted = np.searchsorted(replay.arrival, tick, side="left") - 1
        before = _operator_watermark(M, counted, policy.watermark)
        after = before
    dropped, threshold = record_facts(replay.ts, replay.stream, before, W)   # rules 4, 6
    held_until = np.searchsorted(after, threshold, side="left")   # first a with after[a] >= threshold
    held_until = np.where(dropped, idx, np.maximum(held_until, idx))
    return Watermarks(before=before, after=after, threshold=threshold, held_until=held_until,
                      interval_us=interval), dropped


def emitted_pairs(wm: Watermarks, dropped: np.ndarray, a0: np.ndarray, a1: np.ndarray) -> np.ndarray:
    """For pairs given by their members' arrival indexes: the emitted mask."""
    earlier, later = np.minimum(a0, a1), np.maximum(a0, a1)
    return ~dropped[a0] & ~dropped[a1] & (wm.before[later] < wm.threshold[earlier])


def memory(wm: Watermarks, dropped: np.ndarray, stream: np.ndarray, n: int) -> np.ndarray:
    """Records buffered after every arrival index, per stream ``(n, N)``: a record
    that was not late is held from its own index up to ``held_until`` (excluded)."""
    N = len(stream)
    counts = np.int32 if N < 2**31 else np.int64
    out = np.zeros((n, N), dtype=counts)
    start = np.arange(N)
    for i in range(n):
        mine = (stream == i) & ~dropped
        delta = np.bincount(start[mine], minlength=N + 1)[:N].astype(counts)
        delta -= np.bincount(wm.held_until[mine], minlength=N + 1)[:N].astype(counts)
        np.cumsum(delta, out=out[i], dtype=counts)
    return out


def settings_report(wm: Watermarks, dropped: np.ndarray, policy) -> dict:
    """``report.json`` ``policy_settings`` of a ``flink`` run."""
    return settings_of(policy, wm.interval_us, int(wm.after[-1]) if len(wm.after) else NEG_INF,
                       int(np.count_nonzero(dropped)))


def settings_of(policy, interval_us: int, last_watermark: int, dropped_late: int) -> dict:
    """:func:`settings_report` from the last operator watermark and the late count."""
    return {
        "watermark_us": list(policy.watermark),
        "watermark_interval_us": interval_us,
        "last_watermark_us": None if last_watermark <= NEG_INF else last_watermark,
        "dropped_late": dropped_late,
    }
