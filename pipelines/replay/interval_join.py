"""Interval-join replay (``flink``): watermarks, late drops and buffer cleanup, on columns.

The rules and their Flink sources are in :mod:`streamjoin.pipelines.policies.flink`;
this module computes them for every record at once.  ``G`` is the join
operator's watermark (µs, whole ms; :data:`~streamjoin.pipelines.base.timeunits.NEG_INF`
before both inputs have emitted one).  Per record (arrival index ``a``):

* ``before[a]`` -- ``G`` when record ``a`` is processed: ``min_i (M_i(c) - D_i
  - 1 ms)`` over the records ``<= c`` that the generators had seen at their last
  emission (``c = a - 1`` with a watermark after every record; with
  ``--watermark-interval I``, the records that arrived before the latest tick
  ``first + k I <= arrival[a]``); with ``--idleness`` (rule 8) the running
  maximum, over the ticks at which an input's status or watermark changes, of
  the minimum over the inputs not idle;
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


def watermark_of_maxima(M_at: np.ndarray, delays) -> np.ndarray:
    """``min_i (M_i - D_i - 1 ms)`` for running maxima ``M_at`` of shape ``(n, C)``;
    ``NEG_INF`` where a stream has no record yet (rules 2-3)."""
    out = np.full(M_at.shape[1], np.iinfo(np.int64).max, dtype=np.int64)
    for i, d in enumerate(delays):
        m = M_at[i]
        np.minimum(out, np.where(m > NEG_INF, m - int(d) - MS, NEG_INF), out=out)
    return out


def maxima_at(M: np.ndarray, counted: np.ndarray) -> np.ndarray:
    """The running maxima ``M`` (shape ``(n, N)``) of the records ``<= counted`` (what the
    generators had seen); ``NEG_INF`` where ``counted < 0``."""
    seen = counted >= 0
    M_at = M[:, np.where(seen, counted, 0)]
    M_at[:, ~seen] = NEG_INF
    return M_at


def _operator_watermark(M: np.ndarray, counted: np.ndarray, delays) -> np.ndarray:
    """:func:`watermark_of_maxima` of the records ``<= counted``; ``NEG_INF`` where ``counted < 0``."""
    return watermark_of_maxima(maxima_at(M, counted), delays)


def ticks(arrival: np.ndarray, first: int, interval: int) -> np.ndarray:
    """The latest watermark tick ``first + k I <= arrival`` of each record (rule 2, periodic)."""
    return first + (arrival - first) // interval * interval


def seen_at_tick(arrival: np.ndarray, first: int, interval: int) -> np.ndarray:
    """Per record of the sorted ``arrival``: the last index of ``arrival`` that arrived before
    the record's latest tick (:func:`ticks`), ``-1``: none in ``arrival``."""
    return np.searchsorted(arrival, ticks(arrival, first, interval), side="left") - 1


def record_facts(ts: np.ndarray, stream: np.ndarray, before: np.ndarray, windows) -> tuple[np.ndarray, np.ndarray]:
    """``dropped`` (rule 4) and ``threshold`` (rule 6) of records given the watermark
    ``before`` each is processed."""
    W = np.asarray(windows, dtype=np.int64)
    return ts < before, np.maximum(ts + W[stream], before + 1)


def sub_ms_error(stream: int, row: int, ts: int, count: int, policy: str = "flink") -> InputError:
    """The one-line error for event times that are not whole milliseconds (the first in
    replay order, and how many)."""
    return InputError(f"policy {policy}: stream {stream} row {row} has ts {ts}us, not a whole millisecond "
                      f"({count} such rows); Flink's record timestamps are milliseconds")


def check_times(replay, W: np.ndarray, policy: str = "flink") -> None:
    """The windows (:func:`check_windows`) and the event times, whole milliseconds
    (:func:`sub_ms_error` names the first that is not)."""
    check_windows(W)
    odd = np.flatnonzero(replay.ts % MS)
    if len(odd):
        a = int(odd[0])
        raise sub_ms_error(int(replay.stream[a]), int(replay.row[a]), int(replay.ts[a]), len(odd), policy)


def counted(replay, interval_us: int) -> tuple[np.ndarray, np.ndarray]:
    """Per arrival index, the last arrival index whose record the generators had
    seen at their latest emission when the record is processed, and once it
    (and what follows it at the same instant) is processed (rule 2; ``-1``: none).
    Depends on the arrivals and the interval only, not on the delays."""
    idx = np.arange(replay.N, dtype=np.int64)
    if interval_us == 0:   # a watermark after every record
        return idx - 1, idx
    c = seen_at_tick(replay.arrival, int(replay.arrival[0]), interval_us)   # ticks at first + k I
    return c, c


def _input_status(replay, i: int, tick_of: np.ndarray, last_tick: int, delay: int, per_idle: int):
    """Input ``i`` under ``withIdleness`` (rule 8): its activity ticks with the watermark
    emitted there, the ticks at which it is marked idle, and those at which a rising
    watermark marks it active again."""
    mine = np.flatnonzero(replay.stream == i)
    seen_at = tick_of[mine] + 1                       # the first tick that counts each record
    ends = np.flatnonzero(np.diff(seen_at, append=np.iinfo(np.int64).max))
    act = seen_at[ends]
    val = replay.M[i][mine[ends]] - delay - MS        # the generator's watermark at that tick
    keep = act <= last_tick                           # ticks after the last record are never reached
    act, val = act[keep], val[keep]
    rises = val > np.concatenate([[NEG_INF], val[:-1]])
    since = np.concatenate([[0], act])                # inactive from the tick after since + 1 ...
    until = np.concatenate([act, [np.iinfo(np.int64).max]])
    idle_at = since + per_idle                        # ... idle once that is > idleness ago
    return act, val, idle_at[(idle_at < until) & (idle_at <= last_tick)], act[rises]


def _input_state(status, ks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Input watermark (``NEG_INF`` before its first) and idle flag after the ticks ``ks``."""
    act, val, idle_at, rise_at = status
    j = np.searchsorted(act, ks, side="right") - 1
    value = np.where(j >= 0, val[np.maximum(j, 0)] if len(val) else NEG_INF, NEG_INF)
    i = np.searchsorted(idle_at, ks, side="right") - 1
    r = np.searchsorted(rise_at, ks, side="right") - 1
    last_idle = np.where(i >= 0, idle_at[np.maximum(i, 0)] if len(idle_at) else -1, -1)
    last_rise = np.where(r >= 0, rise_at[np.maximum(r, 0)] if len(rise_at) else -1, -1)
    return value, last_idle > last_rise


def _combined(a, b) -> np.ndarray:
    """CombinedWatermarkStatus: the smaller watermark of the inputs that are not idle;
    when both are idle, the larger of the two."""
    top = np.iinfo(np.int64).max
    out = np.minimum(np.where(a[1], top, a[0]), np.where(b[1], top, b[0]))
    return np.where(a[1] & b[1], np.maximum(a[0], b[0]), out)


def _idle_operator_watermark(replay, interval: int, idleness: int, delays) -> np.ndarray:
    """``G`` when each record is processed, with idle inputs left out of the minimum (rule 8).

    Status and watermarks change only at ticks: an input's activity ticks (the
    first tick after each of its records) and its idle ticks.  At such a tick
    the left input's generator runs first, so ``G`` takes the larger of the
    minimum after the left input's changes and after both."""
    first = int(replay.arrival[0])
    tick_of = (replay.arrival - first) // interval     # the latest tick at or before each arrival (0: none)
    last_tick = int(tick_of[-1])
    per_idle = idleness // interval + 2
    status = [_input_status(replay, i, tick_of, last_tick, int(d), per_idle) for i, d in enumerate(delays)]
    ticks = np.unique(np.concatenate([np.concatenate(s[0:3:2]) for s in status]))
    left = _input_state(status[0], ticks)
    G = np.maximum(_combined(left, _input_state(status[1], ticks - 1)),
                   _combined(left, _input_state(status[1], ticks)))
    G = np.maximum.accumulate(G) if len(G) else G
    at = np.searchsorted(ticks, tick_of, side="right") - 1
    return np.where(at >= 0, G[np.maximum(at, 0)] if len(G) else NEG_INF, NEG_INF)


def operator_watermark(replay, policy, delays) -> tuple[np.ndarray, np.ndarray]:
    """``G`` when each record is processed and right after it (rules 2, 3, 8)."""
    interval = int(policy.watermark_interval_us)
    if policy.idleness_us:
        before = _idle_operator_watermark(replay, interval, int(policy.idleness_us), delays)
        return before, before
    c_before, c_after = counted(replay, interval)
    before = _operator_watermark(replay.M, c_before, delays)
    return before, (before if interval else _operator_watermark(replay.M, c_after, delays))


def frontier(replay, policy) -> np.ndarray:
    """``min_i M_i`` over the inputs that count when each record is processed: the
    operator watermark plus ``D + 1 ms`` when every stream has one delay ``D``
    (``NEG_INF`` while it is ``Long.MIN_VALUE``).  Idle flags and the records the
    generators have seen do not depend on the delays."""
    return operator_watermark(replay, policy, [-MS] * replay.n)[0]


def watermarks(replay, windows, policy) -> tuple[Watermarks, np.ndarray]:
    """Operator watermarks, late drops and buffer stays of a replay.

    ``replay``: a :class:`~streamjoin.pipelines.replay.progress.Replay` (its
    ``M`` is read).  Returns the :class:`Watermarks` and the ``dropped`` mask."""
    N = replay.N
    interval = int(policy.watermark_interval_us)
    W = np.asarray(windows, dtype=np.int64)
    check_times(replay, W)
    idx = np.arange(N, dtype=np.int64)
    if N == 0:
        empty = np.empty(0, np.int64)
        return Watermarks(empty, empty, empty, empty, interval), np.zeros(0, bool)
    before, after = operator_watermark(replay, policy, policy.watermark)
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
    return held_memory(~dropped, wm.held_until, stream, n)


def held_memory(held: np.ndarray, held_until: np.ndarray, stream: np.ndarray, n: int) -> np.ndarray:
    """Rows held after every arrival index, per stream ``(n, N)``: a row with ``held`` set
    is held from its own index up to ``held_until`` (excluded)."""
    N = len(stream)
    counts = np.int32 if N < 2**31 else np.int64
    out = np.zeros((n, N), dtype=counts)
    start = np.arange(N)
    for i in range(n):
        mine = (stream == i) & held
        delta = np.bincount(start[mine], minlength=N + 1)[:N].astype(counts)
        delta -= np.bincount(held_until[mine], minlength=N + 1)[:N].astype(counts)
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
        "idleness_us": policy.idleness_us,
        "last_watermark_us": None if last_watermark <= NEG_INF else last_watermark,
        "dropped_late": dropped_late,
    }
