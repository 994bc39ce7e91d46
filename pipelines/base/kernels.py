"""Compiled passes of the join's two hot loops (issue 21), with their numpy twins.

* :func:`band_pairs` -- the fill of truth enumeration's band join: for
  queries in ascending order of their band start, where each band falls in
  the sorted stored side and every ``(query, stored row)`` pair in order.
  numpy does it as two blocked binary searches, ``np.repeat`` and a blocked
  gather (:func:`~streamjoin.pipelines.base.sorting.band_ranges`,
  :func:`~streamjoin.pipelines.base.sorting.gather_ranges`); the kernel walks
  both pointers forward once and writes the pairs in the same pass.
* :func:`replay_facts` -- the progress pass after the replay order's sort:
  stream, event time and arrival index of every position, each stream's
  running maximum ``M_i``, the frontier ``T = min_i M_i`` and the delay
  ``M_own - ts``.  numpy does it one stream at a time over whole columns
  (:func:`~streamjoin.pipelines.replay.progress.build_replay`); the kernel is
  one pass with ``n`` running maxima in registers.
* :func:`key_order` -- the stable order by ``(key, ts)`` of a stream whose
  event times already ascend within each key (rows written in time order, as
  most inputs are): a counting sort by key, ``O(rows + keys)``, instead of
  the packed value sort of :func:`~streamjoin.pipelines.base.sorting.stable_order`
  (``None`` when some key's times go back: the caller sorts).
* :func:`bands` and :func:`count_walk` -- a two-stream run without results: the band join's
  pairs counted, not built (:mod:`~streamjoin.pipelines.replay.counting`
  calls it and says what it counts; the materialising path is its twin).
  Given per-band sampling countdowns it walks any runs of bands in any order --
  a Spark task's router-owned pieces (``engines/spark/counted``) -- and reports
  each one's emitted pairs.
  :func:`plan_bands` gives :func:`bands` of a plan whose two streams
  :func:`key_order` ordered, from their keys and times in one call: the packed
  codes exist only inside it (issue 21, eighth pass; its numpy twin is the
  packed plan and ``searchsorted``).
* :func:`first_above` -- the expiry index's search (the first arrival index at
  which a tuple's horizon has passed it), galloping from the previous answer.
* :func:`last_order` -- the results order of two-stream combinations emitted on
  their last member's arrival (:func:`~streamjoin.pipelines.replay.emit.emission_order`):
  a stable counting sort by the last arrival index, then each bucket by
  ``r0 + r1``, instead of polars' sort of the packed key ``last * M + r0 + r1``
  (issue 21, ninth pass).

The kernels are built ahead of time once per machine by
:func:`~streamjoin.pipelines.base.jit.prebuilt` (``numba.pycc``; numba is
never imported by a run that loads them).  Where no module can be built, or
``$STREAMJOIN_KERNELS=numpy``, the callers keep their numpy paths; both give
the same arrays, element for element (``tests/base/test_kernels.py``;
:func:`last_order`: ``tests/replay/test_results_order.py``).
The kernels take int32 row indexes (below ``2**31`` rows); larger inputs take
the numpy paths, and so do inputs below :data:`MIN_ROWS` rows -- the join's
input rows, not the band join's partial combinations (loading a kernel
costs a few ms of CPU, more than it saves there, and a small run never
waits for a first build).  A compiled call releases the GIL while it runs
(:func:`~streamjoin.pipelines.base.jit.prebuilt` builds the exports with
``release_gil``, as numba's ``nogil=True``), so the engine's other thread
keeps going -- the candidates and progress chains overlap on two cores
(docs/performance.md, issue 21 fourth pass).
"""

from __future__ import annotations

import sys

import numpy as np

from . import jit
from .timeunits import NEG_INF

#: below this many rows (the join's input rows, arrivals, a stream's rows) the numpy paths run
MIN_ROWS = 1 << 16
BAND_SIGNATURE = "Tuple((i4[:], i4[:]))(i8[:], i4[:], i8[:], i8[:], i4[:])"
KEY_ORDER_SIGNATURE = "i4[:](i4[:], i8[:], i8)"
REPLAY_SIGNATURE = "i8(i4[:], i8[:], i8[:], i4[:], i8[:], i4[:], i8[:], i8[:], i8[:, :], b1, i8)"
COUNT_SIGNATURE = ("Tuple((i8[:], i8[:], i8[:], i8[:]))(i4[:], i4[:], i4[:], i4[:], i4[:], i4[:], i4[:], i4[:], "
                   "i8[:], i8[:], i8, i8, b1[:], i8[:], i8[:], i8[:], i4[:], i8[:], i8, i8, i8, i8, i8, i8, i8, i8, i8, "
                   "i8, i8, i8[:], i8[:])")
BANDS_SIGNATURE = "Tuple((i8[:], i8[:], i8))(i8[:], i8[:], i8[:])"
FIRST_ABOVE_SIGNATURE = "i8(i8[:], i8[:], i8, i4[:])"
PLAN_BANDS_SIGNATURE = "Tuple((i4[:], i4[:], i8))(i4[:], i8[:], i4[:], i4[:], i8[:], i4[:], i8, i8, i8, i8)"
LAST_ORDER_SIGNATURE = "i8[:](i4[:], i4[:], i4[:])"
#: buckets of at most this many combinations are put in order by insertion sort, larger ones by a merge sort
SMALL_BUCKET = 16


@jit.helper
def _first_greater(values, y, a, b):   # pragma: no cover - compiled
    """The first index in ``[a, b)`` whose value (``values`` ascending there) exceeds
    ``y``, ``b`` if none: a binary search (the band search's way back, the expiry
    search's last step)."""
    while a < b:
        mid = (a + b) >> 1
        if values[mid] > y:
            b = mid
        else:
            a = mid + 1
    return a


@jit.helper
def _bands(sorted_values, lo, hi):   # pragma: no cover - compiled
    """Where each band ``[lo[q], hi[q]]`` (``lo`` ascending) falls in ``sorted_values``:
    ``(start, end, total)`` -- one forward pass of both pointers (a band ending
    before the previous one's end searches back).  Compiled into :func:`_band_fill`'s
    module (:func:`~streamjoin.pipelines.base.jit.helper`) and exported on its own
    as :func:`bands`, whose ``(start, end)`` :func:`_count_walk` walks."""
    nq = lo.shape[0]
    start = np.empty(nq, np.int64)
    end = np.empty(nq, np.int64)
    return start, end, _bands_into(sorted_values, lo, hi, start, end)


@jit.helper
def _bands_into(sorted_values, lo, hi, start, end):   # pragma: no cover - compiled
    """:func:`_bands` into given ``start`` / ``end`` arrays (any integer type that
    holds ``len(sorted_values)``); returns ``total``."""
    nq = lo.shape[0]
    m = sorted_values.shape[0]
    s = 0
    e = 0
    total = 0
    for q in range(nq):
        x = lo[q]
        while s < m and sorted_values[s] < x:   # lo ascending: s only moves forward
            s += 1
        y = hi[q]
        if e < s:
            e = s
        if e > s and sorted_values[e - 1] > y:   # a band ending before the last one: search back
            e = _first_greater(sorted_values, y, s, e)
        while e < m and sorted_values[e] <= y:
            e += 1
        start[q] = s
        end[q] = e
        total += e - s
    return total


def _plan_bands(key_s, ts_s, order_s, key_q, ts_q, order_q, span, base, w_lo, w_hi):   # pragma: no cover
    # the packed codes gathered in sorted order (independent loads, which the CPU
    # overlaps), then _bands over them with each query's band around its own code
    m = order_s.shape[0]
    nq = order_q.shape[0]
    codes = np.empty(m, np.int64)
    for j in range(m):
        r = order_s[j]
        c = key_s[r] * span if key_s.shape[0] else 0
        codes[j] = c + ts_s[r] - base
    lo = np.empty(nq, np.int64)
    hi = np.empty(nq, np.int64)
    for q in range(nq):
        r = order_q[q]
        c = key_q[r] * span if key_q.shape[0] else 0
        c = c + ts_q[r] - base
        lo[q] = c - w_lo
        hi[q] = c + w_hi
    start = np.empty(nq, np.int32)
    end = np.empty(nq, np.int32)
    total = _bands_into(codes, lo, hi, start, end)
    return start, end, total


def plan_bands(key_s, ts_s, order_s, key_q, ts_q, order_q, span: int, base: int, w_lo: int, w_hi: int):
    """A two-stream band join's bands without its packed columns, or ``None`` without
    the kernel (or from ``2**31`` rows).

    The stored side's codes ``key_s * span + ts_s - base`` in the stable order
    ``order_s``, and each query's band ``[code - w_lo, code + w_hi]`` (its own code
    ``key_q * span + ts_q - base``, queries in the stable order ``order_q``):
    :func:`bands` of those sorted codes and bands, ``(start, end, total)`` with
    ``start`` / ``end`` int32: one call, in which the codes and bands live only
    while it runs (the numpy plan builds the stored codes twice, unsorted and
    sorted, and the bands' ends three times each).
    ``key_s`` / ``key_q``: int32 key ids, or empty (one key); ``ts_*`` int64;
    ``order_*`` int32."""
    if len(order_s) >= 2**31 or len(order_q) >= 2**31:
        return None
    kernel = jit.prebuilt(_plan_bands, PLAN_BANDS_SIGNATURE)
    if kernel is None:
        return None
    c = np.ascontiguousarray
    return kernel(c(key_s, dtype=np.int32), c(ts_s, dtype=np.int64), c(order_s, dtype=np.int32),
                  c(key_q, dtype=np.int32), c(ts_q, dtype=np.int64), c(order_q, dtype=np.int32),
                  int(span), int(base), int(w_lo), int(w_hi))


def _first_above(horizon, values, shift, out):   # pragma: no cover - compiled
    # out[q] = the first a with horizon[a] > values[q] + shift, len(horizon) if none, for a
    # non-decreasing horizon: from the previous answer, back by a binary search or forward
    # by a galloping one (queries in any order cost O(log) each, in order O(1) amortised)
    N = horizon.shape[0]
    p = 0
    for q in range(values.shape[0]):
        x = values[q] + shift
        lo = 0
        hi = p
        if p == 0 or horizon[p - 1] <= x:   # forward from p
            lo = p
            step = 1
            while hi < N and horizon[hi] <= x:
                lo = hi + 1
                hi += step
                step <<= 1
            if hi > N:
                hi = N
        p = _first_greater(horizon, x, lo, hi)
        out[q] = p
    return 0


def first_above(horizon: np.ndarray, values: np.ndarray, shift: int, out: np.ndarray) -> bool:
    """``out[:] = np.searchsorted(horizon, values + shift, side="right")`` for a
    non-decreasing int64 ``horizon`` (the expiry index's search: the frontier or a
    horizon ``H_i``), without the shifted copy of ``values`` or numpy's blocks of
    binary searches: a galloping search from the previous answer, so queries that
    mostly ascend (a stream's rows in time order) cost a step or two each.  ``out``:
    int32; ``values`` int64 (the addition wraps, as numpy's).  ``False`` (``out``
    untouched) without the kernel or below :data:`MIN_ROWS` values."""
    if len(values) < MIN_ROWS or out.dtype != np.int32 or len(horizon) >= 2**31:
        return False
    kernel = jit.prebuilt(_first_above, FIRST_ABOVE_SIGNATURE)
    if kernel is None:
        return False
    kernel(np.ascontiguousarray(horizon, dtype=np.int64), np.ascontiguousarray(values, dtype=np.int64), int(shift), out)
    return True


def _last_order(last, r0, r1):   # pragma: no cover - compiled
    # a stable counting sort by last (values in [0, radix)), then each bucket by
    # r0 + r1, ties by position: insertion sort for a small bucket, numpy's
    # merge sort (stable, O(b log b)) for a large one -- one key with many pairs
    # costs no quadratic time.  Empty when last is outside [0, 4 n + 4096).
    n = last.shape[0]
    hi = -1
    for i in range(n):
        v = last[i]
        if v < 0:
            return np.empty(0, np.int64)
        if v > hi:
            hi = v
    radix = hi + 1
    if radix > 4 * n + 4096:
        return np.empty(0, np.int64)
    start = np.zeros(radix + 1, np.int64)
    for i in range(n):
        start[last[i] + 1] += 1
    for b in range(radix):
        start[b + 1] += start[b]
    fill = start[:radix].copy()
    order = np.empty(n, np.int64)
    for i in range(n):
        b = last[i]
        order[fill[b]] = i
        fill[b] += 1
    sums = np.empty(n, np.int64)
    for j in range(n):
        p = order[j]
        sums[j] = np.int64(r0[p]) + np.int64(r1[p])
    for b in range(radix):
        a = start[b]
        e = start[b + 1]
        if e - a <= 1:
            continue
        if e - a <= SMALL_BUCKET:
            for j in range(a + 1, e):
                v = sums[j]
                p = order[j]
                k = j - 1
                while k >= a and sums[k] > v:   # strict: equal sums keep their positions' order
                    sums[k + 1] = sums[k]
                    order[k + 1] = order[k]
                    k -= 1
                sums[k + 1] = v
                order[k + 1] = p
        else:
            idx = np.argsort(sums[a:e], kind="mergesort")
            moved = order[a:e][idx]
            order[a:e] = moved
    return order


def last_order(last: np.ndarray, r0: np.ndarray, r1: np.ndarray) -> np.ndarray | None:
    """``np.argsort(last * M + r0 + r1, kind="stable")`` (int64 positions) with
    ``M > r0 + r1`` -- the order of ``(last, r0 + r1)``, ties by position -- or
    ``None``: without the kernel, below :data:`MIN_ROWS` combinations, with
    arrays other than int32, or a ``last`` outside ``[0, 4 n + 4096)`` (its
    counting sort's buckets).  ``last``: arrival indexes; ``r0`` / ``r1``: rows
    (at least 0).  A bucket (combinations of one ``last``) is ordered by
    insertion sort up to :data:`SMALL_BUCKET` entries, else by a merge sort."""
    n = len(last)
    if n < max(MIN_ROWS, 1) or n >= 2**31 or not (last.dtype == r0.dtype == r1.dtype == np.int32):
        return None
    kernel = jit.prebuilt(_last_order, LAST_ORDER_SIGNATURE)
    if kernel is None:
        return None
    order = kernel(np.ascontiguousarray(last), np.ascontiguousarray(r0), np.ascontiguousarray(r1))
    return order if len(order) == n else None


def _band_fill(sorted_values, stored_rows, lo, hi, query_rows):   # pragma: no cover - compiled
    nq = lo.shape[0]
    start, end, total = _bands(sorted_values, lo, hi)
    parent = np.empty(total, np.int32)
    member = np.empty(total, np.int32)
    o = 0
    for q in range(nq):
        p = query_rows[q]
        for j in range(start[q], end[q]):
            parent[o] = p
            member[o] = stored_rows[j]
            o += 1
    return parent, member


def band_pairs(sorted_values: np.ndarray, stored_rows: np.ndarray, lo: np.ndarray, hi: np.ndarray,
               query_rows: np.ndarray, *, input_rows: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Every ``(query, stored row)`` pair of a band join, or ``None`` without the kernel.

    Args:
        sorted_values: the stored side's codes, ascending (int64).
        stored_rows: the row of each sorted value (int32).
        lo: band starts, ascending (int64); ``hi``: band ends, inclusive (int64;
            a band with ``hi < lo`` is empty), in the same order.
        query_rows: the query of each band (int32).
        input_rows: the join's input rows (all streams): below :data:`MIN_ROWS`
            the numpy path runs.  Not ``len(lo)``: with three streams or more
            the queries are partial combinations, many more than a small
            input's rows.
    Returns: ``(parent, member)`` (int32) -- for each band in order, its query
    repeated and the stored rows of the values in ``[lo, hi]`` in sorted
    order: ``np.repeat(query_rows, counts)`` and the concatenated
    ``stored_rows[start:start + count]`` of the numpy path.
    """
    if not (sorted_values.dtype == lo.dtype == hi.dtype == np.int64
            and stored_rows.dtype == query_rows.dtype == np.int32) or input_rows < MIN_ROWS:
        return None
    kernel = jit.prebuilt(_band_fill, BAND_SIGNATURE)
    if kernel is None:
        return None
    return kernel(*(np.ascontiguousarray(a) for a in (sorted_values, stored_rows, lo, hi, query_rows)))


def _progress_pass(order, offsets, ts_all, stream, ts, positions, T, delay, M, keep_m, neg_inf):   # pragma: no cover
    n = offsets.shape[0] - 1
    N = order.shape[0]
    running = np.full(n, neg_inf, np.int64)
    frontier = neg_inf
    for a in range(N):
        p = order[a]
        s = 0
        while p >= offsets[s + 1]:
            s += 1
        t = ts_all[p]
        stream[a] = s
        ts[a] = t
        positions[p] = a
        if t > running[s]:
            was = running[s]
            running[s] = t
            if was == frontier:   # the minimum may have moved
                frontier = running[0]
                for i in range(1, n):
                    if running[i] < frontier:
                        frontier = running[i]
        T[a] = frontier
        delay[a] = running[s] - t
        if keep_m:
            for i in range(n):
                M[i, a] = running[i]
    return 0


def replay_facts(order: np.ndarray, offsets: np.ndarray, ts_all: np.ndarray, *, keep_running_max: bool):
    """The progress facts of a replay order, or ``None`` without the kernel.

    Args:
        order: position in the concatenation of the streams (in stream, row
            order) of each arrival index (int32).
        offsets: where each stream starts in the concatenation, and its end
            (int64, ``n + 1`` values).
        ts_all: event times in the concatenation's order (int64).
        keep_running_max: also return ``M`` (shape ``(n, N)``).
    Returns: ``(stream, ts, positions, T, delay, M)``: per arrival index its
    stream (int32) and event time; per concatenated position its arrival
    index (int32); the frontier ``T``; the delay ``M_own - ts``; ``M`` or
    ``None`` -- the arrays :func:`~streamjoin.pipelines.replay.progress.build_replay`
    computes with numpy.
    """
    n = len(offsets) - 1
    if order.dtype != np.int32 or n < 1 or len(order) < MIN_ROWS:
        return None
    kernel = jit.prebuilt(_progress_pass, REPLAY_SIGNATURE)
    if kernel is None:
        return None
    N = len(order)
    stream = np.empty(N, np.int32)
    ts = np.empty(N, np.int64)
    positions = np.empty(N, np.int32)
    T = np.empty(N, np.int64)
    delay = np.empty(N, np.int64)
    M = np.empty((n, N) if keep_running_max else (n, 0), np.int64)
    kernel(np.ascontiguousarray(order), np.ascontiguousarray(offsets, dtype=np.int64),
           np.ascontiguousarray(ts_all, dtype=np.int64), stream, ts, positions, T, delay, M, keep_running_max, NEG_INF)
    return stream, ts, positions, T, delay, (M if keep_running_max else None)


def _key_order(key, ts, radix):   # pragma: no cover - compiled
    # key: int32 ids, or empty (every row one key)
    n = ts.shape[0]
    keyed = key.shape[0] > 0
    counts = np.zeros(radix + 1, np.int64)
    newest = np.full(radix, -9223372036854775807 - 1, np.int64)
    for i in range(n):
        k = key[i] if keyed else 0
        if ts[i] < newest[k]:   # this key's times go back: not a counting sort's case
            return np.empty(0, np.int32)
        newest[k] = ts[i]
        counts[k + 1] += 1
    for r in range(radix):
        counts[r + 1] += counts[r]
    order = np.empty(n, np.int32)
    for i in range(n):
        k = key[i] if keyed else 0
        order[counts[k]] = i
        counts[k] += 1
    return order


def key_order(key: np.ndarray | None, ts: np.ndarray, radix: int) -> np.ndarray | None:
    """``np.argsort(key * span + ts, kind="stable")`` (int32) when ``ts`` ascends
    within every key, else ``None`` (also without the kernel, or from ``2**31``
    rows).  ``key``: ids in ``[0, radix)``, or ``None`` (one key); ``radix`` at
    most a few times the row count (the caller's compact ids)."""
    n = len(ts)
    if n < max(MIN_ROWS, 1) or n >= 2**31 or radix > 4 * n + 4096 or radix >= 2**31:
        return None
    kernel = jit.prebuilt(_key_order, KEY_ORDER_SIGNATURE)
    if kernel is None:
        return None
    if key is not None and (int(key.min()) < 0 or int(key.max()) >= radix):   # the counts are indexed by key
        return None
    # int32 ids (the caller's compact ids are; others below 2**31 are cast), none: one key
    key = np.empty(0, np.int32) if key is None else np.ascontiguousarray(key, dtype=np.int32)
    order = kernel(key, np.ascontiguousarray(ts, dtype=np.int64), max(int(radix), 1))
    return order if len(order) == n else None


def _count_walk(start, end, stored_rows, query_rows, at_q, at_s, e_q, e_s, ts_q, ts_s, w_q, w_s,
                dropped, release, T, ts_arrival, period_of, arrival, family, N, periods, every, q_rows, s_rows,
                neg_inf, q0, q1, first, check, firsts, emitted_of):   # pragma: no cover
    # the queries q0..q1-1 of the bands (start, end) of _bands: their pairs in order, the
    # stored positions they reach [s_lo, s_hi) (neither start nor end need ascend: a
    # Spark task's pieces, router-owned runs of bands, start anywhere).  ``firsts``
    # (empty: one countdown from ``first`` over all of them): the sampling countdown
    # each query (piece) starts with, its pairs' global positions being not contiguous;
    # then ``emitted_of[q]`` (when not empty) receives the emitted pairs of each query
    stats = np.zeros(4, np.int64)   # pairs, emitted, 0, distinct (1) or not (0)
    s_lo = start[q0] if q1 > q0 else 0
    s_hi = s_lo
    total = 0
    for q in range(q0, q1):
        if start[q] < s_lo:
            s_lo = start[q]
        if end[q] > s_hi:
            s_hi = end[q]
        total += end[q] - start[q]
    stats[0] = total
    # distinct pairs iff no query row and no stored row repeats (check: 1 the stored
    # side, 2 the queries, 3 both -- two range walks split the sides between them)
    distinct = 1
    for side in range(2):
        if not (check >> side) & 1:
            continue
        rows = stored_rows if side == 0 else query_rows
        seen = np.zeros(s_rows if side == 0 else q_rows, np.uint8)
        for j in range(rows.shape[0]):
            r = rows[j]
            if seen[r]:
                distinct = 0
            seen[r] = 1
    stats[3] = distinct
    need = np.empty(total // every + 1 + (q1 - q0 if firsts.shape[0] else 0), np.int64)
    codes = np.zeros(2 * periods, np.int64)
    latency = np.empty(total if family == 1 else 0, np.int64)
    # each member's facts -- in sorted order for the stored side, in band order for
    # the queries -- gathered first (independent loads, which the CPU overlaps), so
    # the walk reads them in sequence: its arrival index, bound (symmetric) or
    # release value (sorting), period and, for the sampled slack, T or k at its
    # arrival and ts + W; with the sorting family the arrival time at which it
    # would be released.  ``arrival`` never decreases along the arrival index, so
    # the last member's arrival (and release) time is the larger of the two.
    # one pass per fact over both sides: stored positions s_lo..s_hi-1, then the queries
    m = s_hi - s_lo
    nq = q1 - q0
    both = m + nq
    fa = np.empty(both, np.int32)
    fb = np.empty(both, np.int64)
    fp = np.empty(both, np.int32)
    # symmetric: T at the arrival and ts + W are gathered for every member, though the
    # walk reads them for the sampled pairs only (every ``every``-th)
    fx = np.empty(both, np.int64)   # T at the arrival (symmetric) or k(x) (sorting)
    fy = np.empty(both, np.int64)   # ts + W (symmetric) or the release time (sorting)
    fz = np.empty(both if family == 1 else 0, np.int64)   # the arrival time (sorting)
    for side in range(2):
        rows = stored_rows[s_lo:s_hi] if side == 0 else query_rows[q0:q1]
        at = at_s if side == 0 else at_q
        ex = e_s if side == 0 else e_q
        ts = ts_s if side == 0 else ts_q
        w = w_s if side == 0 else w_q
        o = 0 if side == 0 else m
        for j in range(rows.shape[0]):
            r = rows[j]
            fa[o + j] = at[r]
            if family == 0:
                b = ex[r]
                fb[o + j] = b if b > at[r] else at[r] + 1   # max(expiry, a + 1)
                fy[o + j] = ts[r] + w
        for j in range(rows.shape[0]):
            a = fa[o + j]
            fp[o + j] = period_of[a]
            if family == 0:
                fx[o + j] = T[a]
            else:
                v = N + 1 if dropped[a] else release[a]
                fb[o + j] = v
                # k(x) = max(0, T(a - 1) - ts), 0 where T(a - 1) is -inf (tuning.required_k_per_tuple)
                before = T[a - 1] if a > 0 else neg_inf
                k = before - ts_arrival[a]
                fx[o + j] = 0 if before == neg_inf or k < 0 else k
                fy[o + j] = arrival[v if v < N - 1 else N - 1]
                fz[o + j] = arrival[a]
    sa, sb, sp = fa[:m], fb[:m], fp[:m]
    qa, qb, qp = fa[m:], fb[m:], fp[m:]
    sx, sy = fx[:m], fy[:m]
    qx, qy = fx[m:], fy[m:]
    sz = fz[:m] if family == 1 else fz
    qz = fz[m:] if family == 1 else fz
    emitted_n = 0
    countdown = first   # pairs until the next sampled one (every ``every``-th of all the bands' pairs)
    k = 0
    code = 0        # the counts of one code run up locally until the code changes
    run = 0
    pieces = firsts.shape[0] > 0
    emitted_before = 0
    for i in range(nq):
        q = q0 + i
        aq = qa[i]
        bq = qb[i]
        if pieces:
            countdown = firsts[q]
            emitted_before = emitted_n
        for jj in range(start[q], end[q]):
            j = jj - s_lo
            a_s = sa[j]
            q_last = aq > a_s
            if family == 0:
                bound = bq if bq < sb[j] else sb[j]
                ok = 1 if (aq if q_last else a_s) < bound else 0
            else:
                v = bq if bq > sb[j] else sb[j]
                ok = 1 if v <= N else 0
                if ok:
                    released = qy[i] if qy[i] > sy[j] else sy[j]
                    latency[emitted_n] = released - (qz[i] if q_last else sz[j])
            emitted_n += ok
            c = 2 * (qp[i] if q_last else sp[j]) + ok
            if c != code:
                codes[code] += run
                code = c
                run = 0
            run += 1
            countdown -= 1
            if countdown == 0:
                countdown = every
                if family == 0:
                    # the member that is not last: T(last) - (ts + W), at least 0
                    need_v = (qx[i] - sy[j]) if q_last else (sx[j] - qy[i])
                    need[k] = need_v if need_v > 0 else 0
                else:
                    need[k] = qx[i] if qx[i] > sx[j] else sx[j]
                k += 1
        if pieces and emitted_of.shape[0]:
            emitted_of[q] = emitted_n - emitted_before
    codes[code] += run
    stats[1] = emitted_n
    return stats, codes, need[:k], latency[:emitted_n]


def bands(sorted_values: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """:func:`_bands` compiled (``(start, end, total)``), or ``None`` without the kernel."""
    kernel = jit.prebuilt(_bands, BANDS_SIGNATURE)
    return None if kernel is None else kernel(sorted_values, lo, hi)


def count_walk(*arrays_and_values):
    """:func:`_count_walk` (its arguments, in its signature's types), or ``None``
    without the kernel: :func:`~streamjoin.pipelines.replay.counting.count_pairs`
    prepares the arguments, splits the queries between two threads and reads the answer."""
    kernel = jit.prebuilt(_count_walk, COUNT_SIGNATURE)
    return None if kernel is None else kernel(*arrays_and_values)


def count_walk_built() -> bool:
    """Whether :func:`count_walk` runs here (built or loaded now if it can be;
    ``False`` with ``$STREAMJOIN_KERNELS=numpy`` or where none can be built)."""
    return jit.prebuilt(_count_walk, COUNT_SIGNATURE) is not None and jit.prebuilt(_bands, BANDS_SIGNATURE) is not None


def ensure_built() -> None:
    """Build (or load) every kernel of this module now: a Spark driver calls it
    before its tasks run.  The executors' Python workers only load modules
    (``$STREAMJOIN_KERNELS=load``, set by the engine's session): on this
    machine they load these; where none is built they run the numpy paths."""
    for fn, signature in ((_band_fill, BAND_SIGNATURE), (_key_order, KEY_ORDER_SIGNATURE),
                          (_progress_pass, REPLAY_SIGNATURE), (_count_walk, COUNT_SIGNATURE),
                          (_bands, BANDS_SIGNATURE), (_plan_bands, PLAN_BANDS_SIGNATURE),
                          (_first_above, FIRST_ABOVE_SIGNATURE), (_last_order, LAST_ORDER_SIGNATURE)):
        jit.prebuilt(fn, signature)


def main(argv: list[str] | None = None) -> int:
    """``python -m streamjoin.pipelines.base.kernels --build``: build (or load) every
    kernel now -- the set-up (``.ci/bootstrap``) runs it, so a user's first run does
    not wait.  Prints one line when they cannot be built (runs then use the numpy
    paths, same results); exit 0 either way (a speed-up never fails a set-up)."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["--build"]:
        sys.stderr.write("usage: python -m streamjoin.pipelines.base.kernels --build\n")
        return 2
    why = jit.missing_toolchain()
    if why is not None:
        print(f"streamjoin: {why}: the compiled kernels are not built; runs use the numpy paths "
              "(same results, slower); install a C compiler (e.g. gcc) and re-run the set-up")
        return 0
    ensure_built()
    if not all(jit.how(fn) in ("aot", "aot-built") for fn in (_band_fill, _key_order, _progress_pass, _count_walk, _bands,
                                                             _plan_bands, _first_above, _last_order)):
        print("streamjoin: the compiled kernels could not be built now (stderr says why); "
              "runs use the numpy paths (same results) until one builds them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
