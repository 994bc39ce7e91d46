"""Micro-batch replay (``spark-ss``): batches, watermarks, late drops and state, on columns.

The rules and their Spark sources are in
:mod:`streamjoin.pipelines.policies.spark_ss`; this module computes them for
every tuple at once.  Per tuple (arrival index ``a``):

* ``batch[a]`` -- its micro-batch ``j`` (0 = the first arrival's interval);
* ``dropped[a]`` -- late: ``ts <= wm[j - 1] * 1000``;
* ``removal[a]`` -- the batch at whose end it leaves the join state
  (``== batch`` when the state watermark of its own batch already reaches it;
  :data:`NEVER` if it is still held after the no-data batch that follows the
  last one).

Only batches that hold rows are materialised (``occupied``): an empty batch
changes no operator watermark, so its watermark is the next occupied batch's,
and it matters only as the batch after an occupied one (its eviction runs with
the watermark that batch produced; the late filter of the batch after it uses
that watermark).  So a run costs O(rows), whatever the span / trigger.

Emission of a valid pair ``(l, r)`` (left = stream 0) follows from these three
columns (:func:`emitted_pairs`): neither member dropped, and the earlier member
(the left one on a tie: every left row is stored before the right rows of its
batch probe) still in state when the later one probes::

    b_l <= b_r:  removal[l] >= b_r
    b_l >  b_r:  removal[r] >= b_l

emitted at the end of batch ``max(b_l, b_r)``.  Outer joins (``--join
left|right|full``, :func:`outer_rows`, per padded stream): a row of the outer side that is not dropped,
is in no emitted pair and leaves the state (``removal != NEVER``) is emitted
null-padded at the end of batch ``removal``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..policies.spark_ss import MS

#: ``removal`` of a tuple still in state after the last batch
NEVER = np.iinfo(np.int64).max


@dataclass
class MicroBatches:
    """The micro-batch facts of a replay (arrays indexed by arrival index unless said).

    Attributes:
        batch: micro-batch of each tuple (int64, 0-based from the first arrival's).
        removal: batch at whose end each tuple leaves the state (see module doc).
        origin_us: start of batch 0 (a multiple of ``trigger_us``).
        trigger_us: the micro-batch interval (``None`` with ``--trigger-files``).
        occupied: the batches that hold rows, increasing.
        watermark_ms: global watermark in force for each occupied batch (``wm[j]``).
        late_ms: watermark of its late filter (``wm[j - 1]``), per occupied batch.
        outer_sides: the outer join's padded streams (0 left, 1 right; both for a full
            outer join), ``()`` for inner.
        times_us: ``--trigger-files``: when each batch runs (the no-data batch
            after the last included); rows arrive then (:func:`batch_of`).
    """

    batch: np.ndarray
    removal: np.ndarray
    origin_us: int
    trigger_us: int | None
    occupied: np.ndarray
    watermark_ms: np.ndarray
    late_ms: np.ndarray
    outer_sides: tuple[int, ...] = ()
    times_us: np.ndarray | None = None

    def end_us(self, batch: np.ndarray) -> np.ndarray:
        """End of each given batch: when it is processed and its results emitted
        (``--trigger-files``: ``times_us``, when the batch runs)."""
        if self.times_us is not None:
            return self.times_us[np.asarray(batch, dtype=np.int64)]
        return self.origin_us + (np.asarray(batch, dtype=np.int64) + 1) * self.trigger_us

    @property
    def batches(self) -> int:
        """Micro-batches from the first arrival's to the last's, empty ones included."""
        return int(self.occupied[-1]) + 1 if len(self.occupied) else 0


def _trunc_div(x: np.ndarray, d: int) -> np.ndarray:
    """``x / d`` rounded towards zero (Scala's ``Double.toLong`` of the quotient)."""
    q = np.abs(x) // d
    return np.where(x < 0, -q, q)


def state_watermark_us(watermark_ms: np.ndarray, window_us: int) -> np.ndarray:
    """A side's state watermark in µs for global watermarks ``watermark_ms``:
    ``(trunc((wm * 1000 - W) / 1000) - 1) * 1000``; rows with ``ts`` at or below it
    are not stored and are evicted."""
    return (_trunc_div(np.asarray(watermark_ms, dtype=np.int64) * MS - window_us, MS) - 1) * MS


def batch_of(arrival: np.ndarray, policy) -> tuple[np.ndarray, int]:
    """Each tuple's micro-batch (replay order, arrival non-decreasing) and the
    trigger grid's first interval ``b0``: ``arrival // T - b0`` (rule 1); with
    ``--trigger-files`` a tuple arrives exactly when its batch runs, so its batch
    is the index of its arrival in ``batch_times_us`` (``b0 = 0``)."""
    if policy.trigger_files is not None:
        if policy.batch_times_us is None:
            raise ValueError("spark-ss --trigger-files: batch_times_us is set once the files are listed")
        times = np.asarray(policy.batch_times_us, dtype=np.int64)
        batch = np.searchsorted(times, arrival).astype(np.int64)
        if len(arrival) and not np.array_equal(times[np.minimum(batch, len(times) - 1)], arrival):
            raise ValueError("spark-ss --trigger-files: a tuple's arrival is not the time of a batch")
        return batch, 0
    T = int(policy.trigger_us)
    base = int(arrival[0]) // T if len(arrival) else 0
    return arrival // T - base, base


LOW = np.iinfo(np.int64).min


def batch_maxima(stream: np.ndarray, ts: np.ndarray, batch: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Rule 2's input, for some consecutive arrivals with their batches (:func:`batch_of`
    of the whole replay): the occupied batches and, per stream, the largest event time in
    ms of each (:data:`LOW` where the stream has no row in it), shape ``(n, K)``.  A replay
    cut into pieces gives the same as a whole after :func:`merge_maxima`."""
    starts = np.flatnonzero(np.diff(batch, prepend=-1))         # first index of each occupied batch
    ts_ms = ts // MS
    mx = np.empty((n, len(starts)), np.int64)
    for i in range(n):
        mx[i] = np.maximum.reduceat(np.where(stream == i, ts_ms, LOW), starts) if len(starts) else LOW
    return batch[starts], mx


def merge_maxima(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`batch_maxima` of consecutive pieces of a replay, as of the whole (a batch
    cut between two pieces is one batch: the larger maxima)."""
    occupied = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, np.int64)
    mx = np.concatenate([p[1] for p in parts], axis=1) if parts else np.empty((0, 0), np.int64)
    if len(occupied) < 2:
        return occupied, mx
    starts = np.flatnonzero(np.diff(occupied, prepend=-1))
    return occupied[starts], np.maximum.reduceat(mx, starts, axis=1)


@dataclass
class BatchTable:
    """Per occupied batch: the watermarks (rules 2-3), and the eviction events (rule 5):
    each occupied batch, then the empty batch after it if there is one (its eviction runs
    with the watermark the occupied one produced; after the last batch, the no-data batch)."""

    occupied: np.ndarray
    current: np.ndarray      # wm[j] of each occupied batch
    before: np.ndarray       # wm[j - 1]: its late filter
    ev_batch: np.ndarray
    ev_wm: np.ndarray
    pos: np.ndarray          # event index of each occupied batch


def batch_table(occupied: np.ndarray, mx: np.ndarray, policy) -> BatchTable:
    """The watermarks and eviction events from the per-batch maxima (rules 2, 3, 5)."""
    K = len(occupied)
    choose = np.minimum if policy.watermark_policy == "min" else np.maximum
    chosen = None
    for i in range(mx.shape[0]):
        own = np.where(mx[i] != LOW, mx[i] - policy.watermark[i] // MS, LOW)
        np.maximum.accumulate(own, out=own)
        own[own == LOW] = 0                                     # no rows yet: 0
        chosen = own if chosen is None else choose(chosen, own)
    # rule 3: the global watermark starts at 0 and only moves up; after batch k -> in force for k + 1
    after = np.maximum.accumulate(np.maximum(chosen, 0)) if K else np.empty(0, np.int64)
    current = np.concatenate([[0], after[:-1]]).astype(np.int64) if K else np.empty(0, np.int64)
    # wm of the batch before: the previous occupied one's if adjacent, else an empty batch's (= current)
    before = current.copy()
    adjacent = np.flatnonzero(occupied[1:] == occupied[:-1] + 1) + 1
    before[adjacent] = current[adjacent - 1]
    # rule 5: evictions at batch ends.  Events in batch order: each occupied batch (its own
    # watermark), then the empty batch after it, if any (the watermark it produced).
    gap = np.ones(K, bool)
    gap[:-1] = occupied[1:] > occupied[:-1] + 1
    # the last batch is followed by a no-data batch with the watermark it produced (Spark runs it
    # when that watermark moved; otherwise it would evict nothing); nothing runs after it
    ev_batch = np.empty(K + int(gap.sum()), np.int64)
    ev_wm = np.empty_like(ev_batch)
    pos = (np.arange(K) + np.concatenate([[0], np.cumsum(gap)[:-1]])).astype(np.int64)   # event of occupied batch k
    ev_batch[pos], ev_wm[pos] = occupied, current
    ev_batch[pos[gap] + 1], ev_wm[pos[gap] + 1] = occupied[gap] + 1, after[gap]
    return BatchTable(occupied=occupied, current=current, before=before, ev_batch=ev_batch, ev_wm=ev_wm, pos=pos)


def tuple_facts(table: BatchTable, stream: np.ndarray, ts: np.ndarray, batch: np.ndarray, n: int,
                windows) -> tuple[np.ndarray, np.ndarray]:
    """``dropped`` (rule 4) and ``removal`` (rule 5) of any tuples of the replay whose
    batches are in ``table``."""
    W = np.asarray(windows, dtype=np.int64)
    k_of = np.searchsorted(table.occupied, batch)
    dropped = ts <= table.before[k_of] * MS
    removal = np.empty(len(ts), np.int64)
    E = len(table.ev_batch)
    for i in range(n):
        mine = stream == i
        threshold = state_watermark_us(table.ev_wm, int(W[i]))   # non-decreasing
        first = np.searchsorted(threshold, ts[mine], side="left")   # first event with ts <= threshold
        first = np.maximum(first, table.pos[k_of[mine]])
        removal[mine] = np.where(first < E, table.ev_batch[np.minimum(first, E - 1)], NEVER)
    removal[dropped] = batch[dropped]                           # never stored
    return dropped, removal


def micro_batches(stream: np.ndarray, ts: np.ndarray, arrival: np.ndarray, n: int, windows,
                  policy) -> tuple[MicroBatches, np.ndarray]:
    """Batches, watermarks, late drops and state removals of a replay.

    ``stream``, ``ts``, ``arrival``: the replay order's columns (arrival
    non-decreasing).  Returns the :class:`MicroBatches` and the ``dropped`` mask.
    A replay in pieces (the bounded engine, Spark partitions) computes the same
    from :func:`batch_maxima` of each piece, :func:`merge_maxima`,
    :func:`batch_table` and then :func:`tuple_facts` of each piece.
    """
    T = policy.trigger_us
    times = None if policy.batch_times_us is None else np.asarray(policy.batch_times_us, dtype=np.int64)
    if len(ts) == 0:
        empty = np.empty(0, np.int64)
        return MicroBatches(empty, empty, 0, T, empty, empty, empty, policy.padded_sides, times), np.zeros(0, bool)
    batch, base = batch_of(arrival, policy)
    table = batch_table(*batch_maxima(stream, ts, batch, n), policy)
    dropped, removal = tuple_facts(table, stream, ts, batch, n, windows)
    return MicroBatches(batch=batch, removal=removal, origin_us=base * T if T else 0, trigger_us=T,
                        occupied=table.occupied, watermark_ms=table.current, late_ms=table.before,
                        outer_sides=policy.padded_sides, times_us=times), dropped


def emitted_pairs(mb: MicroBatches, dropped: np.ndarray, left: np.ndarray,
                  right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For pairs given by their members' arrival indexes: (emitted mask, batch that emits them)."""
    return pair_emitted(mb.batch[left], mb.batch[right], mb.removal[left], mb.removal[right], dropped[left],
                        dropped[right])


def pair_emitted(bl: np.ndarray, br: np.ndarray, rl: np.ndarray, rr: np.ndarray, dl: np.ndarray,
                 dr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(emitted mask, emitting batch) of pairs from their members' batches, removals and
    late flags (left, right): see the module doc."""
    emitted = np.where(bl <= br, rl >= br, rr >= bl)
    emitted &= ~dl
    emitted &= ~dr
    return emitted, np.maximum(bl, br)


@dataclass
class OuterRows:
    """The null-padded rows of an outer join of one outer stream, in arrival order
    (a full outer join has one of these per stream).

    Attributes:
        stream: the outer side (0 left, 1 right).
        index: each row's arrival index.
        row: each row's row number in its stream.
        batch: the batch whose state eviction emits it (``removal``; ``spark-ss``
            only, else ``None``).
        emit_us: the end of that batch.
        latency_us: ``emit_us`` minus the row's arrival.
    """

    stream: int
    index: np.ndarray
    row: np.ndarray
    batch: np.ndarray | None
    emit_us: np.ndarray
    latency_us: np.ndarray


def outer_rows(mb: MicroBatches, side: int, dropped: np.ndarray, stream: np.ndarray, row: np.ndarray,
               arrival: np.ndarray, matched: np.ndarray) -> OuterRows:
    """The null-padded rows of stream ``side`` (one of ``mb.outer_sides``): not dropped, in no emitted pair
    (``matched``: arrival indexes of that side's members of the emitted pairs) and
    evicted by a batch (``removal != NEVER``), each emitted at the end of batch
    ``removal``."""
    side = int(side)
    out = (stream == side) & ~dropped & (mb.removal != NEVER)
    out[np.asarray(matched, dtype=np.int64)] = False
    index = np.flatnonzero(out)
    batch = mb.removal[index]
    emit_us = mb.end_us(batch)
    return OuterRows(stream=side, index=index, row=row[index], batch=batch, emit_us=emit_us,
                     latency_us=emit_us - arrival[index])


def state_rows(mb: MicroBatches, dropped: np.ndarray, stream: np.ndarray, n: int,
               batches: np.ndarray) -> np.ndarray:
    """Join state rows per stream after each of ``batches`` (Spark's ``numRowsTotal``,
    split by side): shape ``(n, len(batches))``."""
    batches = np.asarray(batches, dtype=np.int64)
    out = np.empty((n, len(batches)), np.int64)
    stored = ~dropped & (mb.removal > mb.batch)
    for i in range(n):
        mine = stored & (stream == i)
        ins = np.sort(mb.batch[mine])
        outs = np.sort(mb.removal[mine])
        # stored in a batch <= j, not yet removed at the end of a batch <= j
        out[i] = np.searchsorted(ins, batches, side="right") - np.searchsorted(outs, batches, side="right")
    return out


def memory(mb: MicroBatches, dropped: np.ndarray, stream: np.ndarray, n: int) -> np.ndarray:
    """Tuples held after every arrival index, per stream ``(n, N)``: the state after
    the previous batch plus the current batch's arrivals so far (rule 7).

    A tuple is held from its own index through the last index of batch
    ``removal`` (of its own batch if it was dropped or never stored)."""
    N = len(stream)
    counts = np.int32 if N < 2**31 else np.int64
    out = np.zeros((n, N), dtype=counts)
    held_to = np.where(dropped, mb.batch, mb.removal)
    end = np.searchsorted(mb.batch, held_to, side="right")      # first index of a later batch (N if none)
    for i in range(n):
        mine = stream == i
        delta = mine.astype(counts)
        delta -= np.bincount(end[mine], minlength=N + 1)[:N].astype(counts)
        np.cumsum(delta, out=out[i], dtype=counts)
    return out


def settings_report(mb: MicroBatches, dropped: np.ndarray, stream: np.ndarray, n: int, policy) -> dict:
    """``report.json`` ``policy_settings`` of a ``spark-ss`` run."""
    rows = state_rows(mb, dropped, stream, n, mb.occupied).sum(axis=0) if len(mb.occupied) else np.zeros(0)
    return settings_of(policy, mb.trigger_us, mb.origin_us, mb.occupied, mb.watermark_ms, rows)


def settings_of(policy, trigger_us: int, origin_us: int, occupied: np.ndarray, watermark_ms: np.ndarray,
                rows: np.ndarray) -> dict:
    """:func:`settings_report` from the batch facts and the state rows after each occupied batch."""
    return {
        "watermark_us": list(policy.watermark),
        "trigger_us": trigger_us,
        **({"trigger_files": policy.trigger_files} if policy.trigger_files is not None else {}),
        "watermark_policy": policy.watermark_policy,
        "batch_origin_us": origin_us,
        "batches": int(occupied[-1]) + 1 if len(occupied) else 0,
        "batches_with_rows": int(len(occupied)),
        "last_batch_watermark_ms": int(watermark_ms[-1]) if len(watermark_ms) else 0,
        "state_rows_peak": int(rows.max()) if len(rows) else 0,
    }
