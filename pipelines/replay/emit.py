"""Emission: which valid combinations an online operator outputs, and when.

The per-arrival replay (``reference.py``) walks buffers tuple by tuple; this
module gets the same answer from the SPEC's closed forms, one column
operation per condition.  For a valid combination ``c`` let ``y`` be its
last-arriving member (largest arrival index ``a_y``):

* **symmetric family** (SPEC §4.1) -- ``c`` is emitted at ``arrival[a_y]``
  with latency 0 iff every *other* member ``x`` was still buffered when ``y``
  arrived::

      x.ts + W_{s(x)} >= H_{s(x)}(a_y)

  (an ``x`` expired on arrival fails this too, as ``H`` never decreases).

* **sorting family** (SPEC §4.2) -- ``c`` is emitted iff no member was
  dropped as late; it leaves the in-order join when its last member is
  released::

      emit_time = arrival[max_members rel]     (rel = N -> last arrival)
      latency   = emit_time - arrival[a_y]

* **micro-batch family** (``spark-ss``, two streams) -- emitted iff neither
  member was dropped as late and the earlier one was still in the join state
  when the later one probed it, at the end of the later member's batch
  (:mod:`~streamjoin.pipelines.replay.microbatch`)::

      emit_time = end of batch max(b_0, b_1)
      latency   = emit_time - arrival[a_y]

  and, in an outer join, the outer side's unmatched rows null-padded at the
  end of the batch that evicts them (``Emission.outer``);

* **interval-join family** (``flink``, two streams) -- emitted iff neither
  member was dropped as late and the earlier one was still buffered when the
  later one arrived (:mod:`~streamjoin.pipelines.replay.interval_join`)::

      emit_time = arrival[a_y],  latency = 0

* **SQL interval-join family** (``flink-sql``, two streams) -- emitted iff the
  earlier member was cached, the later one probed, and the earlier one was
  still cached then (:mod:`~streamjoin.pipelines.replay.sql_interval_join`),
  at ``arrival[a_y]`` with latency 0; an outer join's unmatched rows
  null-padded when they leave the cache (``Emission.outer``).

Worked example (sorting, K = 0): ``x = (S0, ts 10)`` arrives at ``a = 0``,
``y = (S1, ts 12)`` at ``a = 1``; ``R(1) = min(10, 12) = 10`` releases ``x``
at 1, ``y`` waits for ``S0`` to pass 12, say at ``a = 5``: the pair is
emitted at ``arrival[5]`` with latency ``arrival[5] - arrival[1]``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import polars as pl

from ..base import kernels
from .candidates import Combos
from ..policies import INTERVAL_JOIN, MICROBATCH, SQL_INTERVAL_JOIN, SYMMETRIC
from . import interval_join, microbatch, sql_interval_join
from .progress import Decisions, Replay


class MemberIndexes(Sequence):
    """``a[k]``: the arrival index of member ``k`` of every combination,
    ``replay.index_of[k][combos.rows[k]]``, gathered when first read.

    Emission only needs each combination's *last* index; the per-member
    columns are read by few consumers (the sorting family's per-day
    emission, Spark's driver), and the HTML report's sample gathers its own
    rows.  Keeping them lazy saves ``n`` combination-sized columns per run.
    """

    def __init__(self, combos: Combos, replay: Replay):
        self._combos, self._replay = combos, replay
        self._cache: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return self._replay.n

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        if not -len(self) <= k < len(self):
            raise IndexError(k)
        k %= len(self)
        if k not in self._cache:
            self._cache[k] = self._replay.index_of[k][self._combos.rows[k]]
        return self._cache[k]


@dataclass
class Emission:
    """Per valid combination (parallel to :class:`~streamjoin.pipelines.replay.candidates.Combos`).

    ``a[k]``: arrival index of member ``k`` (a list, or a :class:`MemberIndexes`
    that gathers it on first use); ``last``: the last-arriving member's
    index; ``emitted``: the mask; ``emit_us`` / ``latency_us``: meaningful
    only where ``emitted`` (computed for all rows to avoid copies;
    ``latency_us`` is a read-only broadcast 0 for the symmetric family).
    ``batch``: the micro-batch that emits each combination (micro-batch
    family only, else ``None``).  ``outer``: an outer join's null-padded rows,
    one :class:`~streamjoin.pipelines.replay.microbatch.OuterRows` per padded
    stream (``spark-ss``, ``flink-sql --join left|right|full``; else ``None``).
    ``on_arrival``: every combination's ``emit_us`` is ``arrival[last]``
    (symmetric and interval-join families), which lets the results order sort
    by ``last`` (:func:`emission_order`).
    """

    a: Sequence[np.ndarray]
    last: np.ndarray
    emitted: np.ndarray
    emit_us: np.ndarray
    latency_us: np.ndarray
    batch: np.ndarray | None = None
    outer: list[microbatch.OuterRows] | None = None
    on_arrival: bool = False


class EmittedOnArrival(Emission):
    """The symmetric family's :class:`Emission`: every combination is emitted
    (if at all) the moment its last member arrives, so ``emit_us`` is
    ``arrival[last]`` -- gathered on first read.  Only the results table reads
    it; a run without results skips a random gather per combination and a
    combination-sized int64 column."""

    on_arrival = True

    def __init__(self, a, last: np.ndarray, emitted: np.ndarray, latency_us: np.ndarray, arrival: np.ndarray,
                 outer: list[microbatch.OuterRows] | None = None):
        self.a, self.last, self.emitted, self.latency_us = a, last, emitted, latency_us
        self._arrival = arrival
        self.batch, self.outer = None, outer

    @cached_property
    def emit_us(self) -> np.ndarray:
        out = np.empty(len(self.last), dtype=self._arrival.dtype)
        _run_blocks(len(out), lambda sl, _: np.take(self._arrival, self.last[sl], out=out[sl], mode="clip"))
        return out


def emission(combos: Combos, replay: Replay, windows: Sequence[int], decisions: Decisions, *,
             expiry_index: list[np.ndarray] | None = None,
             arrivals: LastArrivals | None = None) -> Emission:
    """Apply the closed forms to every valid combination.

    ``expiry_index``: :func:`~streamjoin.pipelines.replay.progress.expiry` if already
    computed (symmetric family).  ``arrivals``: :func:`last_arrivals` of the
    same combinations, if already computed -- it needs only the replay order,
    so the engine computes it while the policy's facts are still being built.
    """
    W = np.asarray(windows, dtype=np.int64)
    if not len(combos) and decisions.family in (MICROBATCH, INTERVAL_JOIN, SQL_INTERVAL_JOIN):
        empty = np.empty(0, np.int64)
        outer = (_outer_rows(replay, decisions, [empty, empty]) if decisions.family == MICROBATCH
                 else _sql_padded(replay, decisions, [empty, empty]) if decisions.family == SQL_INTERVAL_JOIN else None)
        return Emission(a=[empty] * replay.n, last=empty, emitted=np.empty(0, bool), emit_us=empty,
                        latency_us=empty, batch=empty if decisions.family == MICROBATCH else None, outer=outer)
    if not len(combos):
        return _emission_columns(combos, replay, W, decisions)
    # a fixed retention's horizons are the (never decreasing) frontier shifted
    if (decisions.family == SYMMETRIC and expiry_index is None and decisions.frontier is None
            and not _never_decreasing(decisions.H)):
        return _emission_columns(combos, replay, W, decisions)
    if arrivals is None or (decisions.family != SYMMETRIC and arrivals.arrival_us is None):
        arrivals = last_arrivals(combos, replay, with_arrival=decisions.family != SYMMETRIC)
    if decisions.family == SYMMETRIC:
        return _emission_symmetric(combos, replay, W, decisions, expiry_index, arrivals)
    if decisions.family == MICROBATCH:
        return _emission_microbatch(combos, replay, decisions, arrivals)
    if decisions.family == INTERVAL_JOIN:
        a = MemberIndexes(combos, replay)
        emitted = interval_join.emitted_pairs(decisions.watermarks, decisions.dropped, a[0], a[1])
        return EmittedOnArrival(a, arrivals.last, emitted, np.broadcast_to(np.int64(0), emitted.shape),
                                replay.arrival)
    if decisions.family == SQL_INTERVAL_JOIN:
        a = MemberIndexes(combos, replay)
        emitted = sql_interval_join.emitted_pairs(decisions.sql, a[0], a[1])
        outer = _sql_padded(replay, decisions, [a[0][emitted], a[1][emitted]]) if decisions.padded_sides else None
        return EmittedOnArrival(a, arrivals.last, emitted, np.broadcast_to(np.int64(0), emitted.shape),
                                replay.arrival, outer)
    return _emission_sorting(combos, replay, decisions, arrivals)


@dataclass
class LastArrivals:
    """Per combination: ``last``, the arrival index of its last-arriving
    member, and ``arrival_us``, that member's arrival time (``None`` if not
    asked for)."""

    last: np.ndarray
    arrival_us: np.ndarray | None


def last_arrivals(combos: Combos, replay: Replay, *, with_arrival: bool = True) -> LastArrivals:
    """The part of emission that needs only the replay order (no policy
    decision): one gather per member for ``last``, one for its arrival time
    (``with_arrival``: the sorting family's latency needs it; the symmetric
    family's emission time is gathered only if read)."""
    C = len(combos)
    last = np.empty(C, dtype=replay.index_of[0].dtype)
    arrival_us = np.empty(C, dtype=replay.arrival.dtype) if with_arrival else None
    scratch = [np.empty(min(C, BLOCK), dtype=last.dtype) for _ in range(WORKERS)]

    def work(sl: slice, worker: int) -> None:
        tmp = scratch[worker][:sl.stop - sl.start]
        for k in range(replay.n):
            r = combos.rows[k][sl]
            np.take(replay.index_of[k], r, out=last[sl] if k == 0 else tmp, mode="clip")
            if k:
                np.maximum(last[sl], tmp, out=last[sl])
        if arrival_us is not None:
            np.take(replay.arrival, last[sl], out=arrival_us[sl], mode="clip")

    _run_blocks(C, work)
    return LastArrivals(last=last, arrival_us=arrival_us)


def emission_order(emit_us: np.ndarray, last: np.ndarray, rows: Sequence[np.ndarray], *,
                   by_last: bool = False) -> np.ndarray:
    """Positions of the given combinations in results order: emission time,
    then the arrival index of the last member, then the members' rows.

    The rows make the key unique, so the order is total and the same whatever
    order the combinations came in (the local engine's, either Spark router's,
    a backfill day's).  In general one polars multi-column sort rather than
    ``np.lexsort``, which makes one stable pass per key (7.9M combinations in
    random order: 1.6 s against 9.4 s).

    ``by_last``: the caller knows ``emit_us`` is a non-decreasing function of
    ``last`` (:attr:`Emission.on_arrival`: ``emit_us = arrival[last]``).
    Then the order is that of ``(last, rows)``, and with two streams that of
    ``(last, r0 + r1)``: given ``last`` one member's row is fixed, so
    ``r0 + r1`` orders the other one, and the pair is unique.  The compiled
    :func:`~streamjoin.pipelines.base.kernels.last_order` sorts it (a counting
    sort by ``last``, then each small bucket by ``r0 + r1``); without the kernel
    polars sorts the int64 key ``last * M + r0 + r1`` (``M > r0 + r1``), the
    same positions.  The result is checked (``emit_us`` non-decreasing along
    it) and the general sort used if the promise does not hold, so a wrong hint
    costs time, never the order (docs/performance.md, issue 21).
    """
    if not len(emit_us):
        return np.empty(0, np.int64)
    if by_last:
        order = _order_by_last(last, rows)
        if order is not None and _non_decreasing(emit_us, order):
            return order
    return _arg_sort({"emit_us": emit_us, "last": last, **{f"r{k}": r for k, r in enumerate(rows)}})


def _arg_sort(keys: dict[str, np.ndarray]) -> np.ndarray:
    """Positions in lexicographic order of ``keys`` (first key first)."""
    return pl.DataFrame(keys).select(pl.arg_sort_by(list(keys))).to_series().to_numpy()


def _order_by_last(last: np.ndarray, rows: Sequence[np.ndarray]) -> np.ndarray | None:
    """The order of ``(last, rows)`` (:func:`emission_order`): with two streams
    the compiled counting sort, else (no kernel, small or non-int32 input)
    polars' sort of the packed key; ``None`` if that key would not fit int64."""
    if len(rows) != 2:
        return _arg_sort({"last": last, **{f"r{k}": r for k, r in enumerate(rows)}})
    order = kernels.last_order(last, rows[0], rows[1])
    if order is not None:
        return order
    M = int(rows[0].max()) + int(rows[1].max()) + 1
    if int(last.max()) >= (2**63 - 1) // M - 1:
        return None
    key = last.astype(np.int64)
    np.multiply(key, M, out=key)
    key += rows[0]
    key += rows[1]
    # polars' sort: multi-threaded, and as fast on combinations in random order
    # (a Spark router's) as on the local engine's nearly sorted ones
    return pl.Series(key).arg_sort().to_numpy()


def _non_decreasing(values: np.ndarray, order: np.ndarray) -> bool:
    """Whether ``values[order]`` never decreases (checked a block at a time)."""
    prev = None
    for c0 in range(0, len(order), BLOCK):
        v = values[order[c0:c0 + BLOCK]]
        if (prev is not None and v[0] < prev) or not (v[1:] >= v[:-1]).all():
            return False
        prev = v[-1]
    return True


def _never_decreasing(H: np.ndarray) -> bool:
    return bool(H.shape[1] < 2 or (H[:, 1:] >= H[:, :-1]).all())


#: combinations per block of the fused emission passes
BLOCK = 1 << 20


#: threads sharing the blocks (numpy's gathers and ufuncs release the GIL)
WORKERS = min(2, os.cpu_count() or 1)


def _run_blocks(total: int, work: Callable[[slice, int], None]) -> None:
    """``work(block, worker)`` for consecutive blocks of ``total`` combinations,
    spread over :data:`WORKERS` threads (blocks write disjoint slices)."""
    blocks = [slice(c0, min(c0 + BLOCK, total)) for c0 in range(0, total, BLOCK)]
    workers = min(WORKERS, len(blocks))
    if workers <= 1:
        for sl in blocks:
            work(sl, 0)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda j: [work(sl, j) for sl in blocks[j::workers]], range(workers)))


def _gather_members(combos: Combos, sl: slice, per_row: list[np.ndarray], combine,
                    acc: np.ndarray, tmp: np.ndarray) -> None:
    """One block ``sl`` of the policy phase: ``acc`` = ``combine`` (a ufunc)
    of the members' per-row values ``per_row[k][row]``.  ``acc`` / ``tmp``:
    the worker's scratch, ``sl``'s length."""
    for k, per in enumerate(per_row):
        np.take(per, combos.rows[k][sl], out=acc if k == 0 else tmp, mode="clip")
        if k:
            combine(acc, tmp, out=acc)


def _emission_symmetric(combos: Combos, replay: Replay, W: np.ndarray, decisions: Decisions,
                        expiry_index: list[np.ndarray] | None, arrivals: LastArrivals) -> Emission:
    """Symmetric family, one gather per member for the condition (``last``
    comes from :func:`last_arrivals`).

    ``H_i`` never decreases, so member ``x`` is still buffered when the last
    member arrives (``x.ts + W_i >= H_i(a_y)``) iff ``a_y < e_x`` with ``e_x``
    the tuple's expiry index (:func:`~streamjoin.pipelines.replay.progress.expiry`).
    With ``b_x = max(e_x, a_x + 1)`` the last member itself passes too, so::

        emitted  <=>  last < min_k b_k

    Computed a block of combinations at a time, so the per-member columns are
    still in cache when they are combined.
    """
    from .progress import expiry

    ends = expiry(replay, W, decisions) if expiry_index is None else expiry_index
    idx = replay.index_of[0].dtype
    bound = []
    for k in range(replay.n):
        # per row of stream k: b = max(e, a + 1) <= N, so it fits the index
        # dtype (int32 is only chosen for N < 2**31)
        b = np.add(replay.index_of[k], 1, dtype=idx)
        np.maximum(b, ends[k], out=b, casting="same_kind")
        bound.append(b)
    C = len(combos)
    last = arrivals.last
    emitted = np.empty(C, dtype=bool)
    scratch = [[np.empty(min(C, BLOCK), dtype=idx) for _ in range(2)] for _ in range(WORKERS)]

    def work(sl: slice, worker: int) -> None:
        m = sl.stop - sl.start
        lb, ob = (x[:m] for x in scratch[worker])
        _gather_members(combos, sl, bound, np.minimum, lb, ob)   # lb = min_k b_k
        np.less(last[sl], lb, out=emitted[sl])

    _run_blocks(C, work)
    # emitted the moment the last member arrives: latency 0 for all (read-only)
    latency = np.broadcast_to(np.zeros(1, dtype=np.int64), (C,))
    if arrivals.arrival_us is not None:
        return Emission(a=MemberIndexes(combos, replay), last=last, emitted=emitted, emit_us=arrivals.arrival_us,
                        latency_us=latency, on_arrival=True)
    return EmittedOnArrival(MemberIndexes(combos, replay), last, emitted, latency, replay.arrival)


def _emission_sorting(combos: Combos, replay: Replay, decisions: Decisions, arrivals: LastArrivals) -> Emission:
    """Sorting family, one gather per member for both conditions (``last``
    and its arrival from :func:`last_arrivals`).

    Per tuple ``v = release`` (``N`` = flushed) or ``N + 1`` if dropped: a
    combination is emitted iff ``max_k v_k <= N``, and its emission index is
    ``min(max_k v_k, N - 1)`` (a dropped member never lets it be emitted).
    """
    N = replay.N
    v = np.where(decisions.dropped, N + 1, decisions.release)
    value = [v[replay.index_of[k]] for k in range(replay.n)]
    del v
    C = len(combos)
    emitted = np.empty(C, dtype=bool)
    emit_us = np.empty(C, dtype=replay.arrival.dtype)
    latency = np.empty(C, dtype=replay.arrival.dtype)
    vdt = value[0].dtype
    scratch = [(np.empty(min(C, BLOCK), dtype=vdt), np.empty(min(C, BLOCK), dtype=vdt)) for _ in range(WORKERS)]

    def work(sl: slice, worker: int) -> None:
        m = sl.stop - sl.start
        mb, ob = (x[:m] for x in scratch[worker])
        _gather_members(combos, sl, value, np.maximum, mb, ob)   # mb = max_k v_k
        np.less_equal(mb, N, out=emitted[sl])
        # rel = N means "flushed at end of input": emitted at the last arrival.
        np.minimum(mb, N - 1, out=mb)
        np.take(replay.arrival, mb, out=emit_us[sl], mode="clip")
        np.subtract(emit_us[sl], arrivals.arrival_us[sl], out=latency[sl])

    _run_blocks(C, work)
    return Emission(a=MemberIndexes(combos, replay), last=arrivals.last, emitted=emitted, emit_us=emit_us,
                    latency_us=latency)


def _emission_microbatch(combos: Combos, replay: Replay, decisions: Decisions, arrivals: LastArrivals) -> Emission:
    """Micro-batch family: one gather per member, then the pair rule of
    :func:`~streamjoin.pipelines.replay.microbatch.emitted_pairs`."""
    a = MemberIndexes(combos, replay)
    mb = decisions.batches
    emitted, batch = microbatch.emitted_pairs(mb, decisions.dropped, a[0], a[1])
    emit_us = mb.end_us(batch)
    outer = _outer_rows(replay, decisions, [a[side][emitted] if side in mb.outer_sides else None for side in (0, 1)])
    return Emission(a=a, last=arrivals.last, emitted=emitted, emit_us=emit_us,
                    latency_us=emit_us - arrivals.arrival_us, batch=batch, outer=outer)


def outer_rows_of(replay: Replay, decisions: Decisions, a0: np.ndarray, a1: np.ndarray,
                  emitted: np.ndarray) -> list[microbatch.OuterRows] | None:
    """An outer join's null-padded rows (``spark-ss``, ``flink-sql``; ``None`` for an inner
    join or another family), given every valid pair's members' arrival indexes and the
    emitted mask: what :func:`emission` attaches as ``Emission.outer`` (the Spark engine
    calls it on the pairs it collected)."""
    if not padded_sides_of(decisions):   # no gathers for an inner join
        return None
    matched = [np.asarray(a0)[emitted], np.asarray(a1)[emitted]]
    if decisions.family == MICROBATCH:
        return _outer_rows(replay, decisions, matched)
    if decisions.family == SQL_INTERVAL_JOIN:
        return _sql_padded(replay, decisions, matched)
    return None


def padded_sides_of(decisions: Decisions) -> tuple[int, ...]:
    """The streams whose unmatched rows an outer join pads (``()``: an inner join, or a
    family without outer joins)."""
    if decisions.family == MICROBATCH:
        return tuple(decisions.batches.outer_sides)
    if decisions.family == SQL_INTERVAL_JOIN:
        return tuple(decisions.padded_sides)
    return ()


def _outer_rows(replay: Replay, decisions: Decisions, matched: list) -> list[microbatch.OuterRows] | None:
    """An outer join's null-padded rows, one part per padded stream (``None`` for an inner
    join); ``matched[s]``: the arrival indexes of stream ``s``'s members of the emitted pairs."""
    mb = decisions.batches
    if not mb.outer_sides:
        return None
    return [microbatch.outer_rows(mb, side, decisions.dropped, replay.stream, replay.row, replay.arrival,
                                  matched[side]) for side in mb.outer_sides]


def _sql_padded(replay: Replay, decisions: Decisions, matched: list[np.ndarray]) -> list[microbatch.OuterRows] | None:
    """``flink-sql``'s null-padded rows, one part per padded stream (``None`` for an inner
    join); ``matched[s]``: arrival indexes of stream ``s``'s members of the emitted pairs.
    Each is emitted when it leaves its cache (``left_at``)."""
    if not decisions.padded_sides:
        return None
    st = decisions.sql
    parts = []
    for side in decisions.padded_sides:
        index = sql_interval_join.padded_rows(replay.stream, side, matched[side])
        emit_us = replay.arrival[st.left_at[index]]
        parts.append(microbatch.OuterRows(stream=side, index=index, row=replay.row[index], batch=None,
                                          emit_us=emit_us, latency_us=emit_us - replay.arrival[index]))
    return parts


def _emission_columns(combos: Combos, replay: Replay, W: np.ndarray, decisions: Decisions) -> Emission:
    """The closed forms as written, one column operation per condition (the
    general path: empty input, or horizons that are not running maxima)."""
    n = replay.n
    N = replay.N
    a = [replay.index_of[k][combos.rows[k]] for k in range(n)]
    last = np.maximum.reduce(a) if len(combos) else np.empty(0, np.int64)
    emitted = np.ones(len(combos), dtype=bool)
    if decisions.family == SYMMETRIC:
        for k in range(n):
            still_buffered = combos.ts(k) + W[k] >= decisions.H[k][last]
            emitted &= (a[k] == last) | still_buffered
        emit_index = last
    else:
        for k in range(n):
            emitted &= ~decisions.dropped[a[k]]
        # rel = N means "flushed at end of input": emitted at the last arrival.
        emit_index = np.maximum.reduce([decisions.release[a[k]] for k in range(n)]) if len(combos) else last
        np.minimum(emit_index, N - 1, out=emit_index)
    emit_us = replay.arrival[emit_index]
    if decisions.family == SYMMETRIC:
        latency = np.zeros(len(last), dtype=np.int64)  # emitted the moment the last member arrives
    else:
        latency = emit_us - replay.arrival[last]
    return Emission(a=a, last=last, emitted=emitted, emit_us=emit_us, latency_us=latency,
                    on_arrival=decisions.family == SYMMETRIC)
