"""Progress: replay order, frontier and the per-tuple facts every policy needs.

This is the *coordination clock* of the replay (seed 004): one pass over the
tuples in arrival order that turns raw ``(ts, arrival)`` columns into the
facts a join operator needs to decide locally what an online system would
have done.  Everything here is whole-column numpy; no per-tuple Python.  The
pass after the replay order's sort is also compiled
(:func:`~streamjoin.pipelines.base.kernels.replay_facts`, used where it is
built: the same arrays), and so is the expiry index's search
(:func:`~streamjoin.pipelines.base.kernels.first_above`: the same integers).

Definitions (SPEC §2)::

    replay order   sort all tuples by (arrival, stream, row); position = a
    M_i(a)         max ts of stream i among indexes <= a        (-inf if none)
    T(a)           min_i M_i(a)           the frontier; never decreases
    delta(x)       M_{s(x)}(a_x) - x.ts   how far x trails its own stream

Worked example, two streams, ``(stream, ts)`` in arrival order::

    a      0      1      2      3      4
    x    (0,10) (1,12) (0,15) (0,11) (1,20)
    M_0    10     10     15     15     15
    M_1   -inf    12     12     12     20
    T     -inf    10     12     12     15
    delta   0      0      0      4      0

Minus infinity is the sentinel :data:`~streamjoin.pipelines.base.timeunits.NEG_INF`;
arithmetic that could move it is clamped so it stays exactly ``NEG_INF``.

Policy decisions built on top of these facts:

* sorting family -- ``R(a) = max_{a'<=a} min_i (M_i(a') - K_i(a'))``; ``x``
  dropped iff ``x.ts < R(a_x - 1)``; released at the first ``a >= a_x`` with
  ``R(a) >= x.ts`` (``N`` = flushed at end of input).
* symmetric family -- ``H_i(a) = max_{a'<=a} (T(a') - d_i(a'))``; ``x``
  expired on arrival iff ``x.ts + W_i < H_i(a_x)``.
* micro-batch family (``spark-ss``) -- batches, watermarks, late drops and
  state removals per tuple: :mod:`~streamjoin.pipelines.replay.microbatch`.
* interval-join family (``flink``) -- operator watermarks, late drops and
  buffer stays per tuple: :mod:`~streamjoin.pipelines.replay.interval_join`.
* SQL interval-join family (``flink-sql``) -- caches, probes and cache stays
  per tuple: :mod:`~streamjoin.pipelines.replay.sql_interval_join`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..policies import (INTERVAL_JOIN, MICROBATCH, SORTING, SQL_INTERVAL_JOIN, SYMMETRIC, PolicySpec, Rows,
                        adaptive_schedule, slack_rows, retention_matrix)
from . import interval_join, microbatch, sql_interval_join
from ..base import kernels
from ..base.sorting import search_sorted_queries, stable_order
from ..base.timeunits import NEG_INF


@dataclass
class Replay:
    """The replay order and its progress facts.

    Attributes (all indexed by arrival index ``a`` unless said otherwise):
        stream: stream of the tuple at ``a`` (int32).
        ts, arrival: event and arrival time (int64 us).
        index_of: per stream, the arrival index of each of its rows.
        T: the frontier ``T(a)``.
        delay: ``delta`` of the tuple at ``a``.
        M: shape ``(n, N)``; ``M[i, a] = M_i(a)`` (kept by :func:`build_replay`
            when asked, otherwise computed on first use: the symmetric
            policies only need ``T`` and ``delay``).
        row: row of the tuple at ``a`` within its stream (int64; computed on
            first use -- the engines work with ``index_of``).
        ts_of: per stream, ``ts`` in row order.
    """

    n: int
    stream: np.ndarray
    ts: np.ndarray
    arrival: np.ndarray
    index_of: list[np.ndarray]
    T: np.ndarray
    delay: np.ndarray

    @property
    def N(self) -> int:
        return int(self.ts.shape[0])

    @cached_property
    def M(self) -> np.ndarray:
        M = np.empty((self.n, self.N), dtype=np.int64)
        for i in range(self.n):
            stream_running_max(self.stream, self.ts, i, out=M[i])
        return M

    def drop_running_max(self) -> None:
        """Free ``M`` (``n`` int64 columns) once the policy has decided; it is
        computed again if something reads it later."""
        self.__dict__.pop("M", None)

    @cached_property
    def ts_of(self) -> list[np.ndarray]:
        """Per stream, event times in row order (``ts[index_of[i]]``; the
        input columns themselves when :func:`build_replay` made the replay)."""
        return [self.ts[pos] for pos in self.index_of]

    @cached_property
    def row(self) -> np.ndarray:
        row = np.empty(self.N, dtype=np.int64)
        for pos in self.index_of:
            row[pos] = np.arange(len(pos), dtype=np.int64)
        return row


@dataclass
class Decisions:
    """What a policy decided for every tuple (indexed by arrival index).

    Sorting family: ``R``, ``dropped``, ``release`` (``N`` = flushed).
    Symmetric family: ``H`` (shape ``(n, N)``), ``expired``.  With a fixed
    retention (``static``) the horizons are the frontier shifted,
    ``H_i = T - d_i``: then ``frontier`` and ``retention`` (shape ``(n,)``)
    describe them and ``H`` is only built if something reads it.
    Recall-target policies (``qjoin``, ``qkslack``) also keep the values
    they decided (``d`` or ``K``, shape ``(n, N)``) and ``policy_log``, one
    entry per decision (time, reason, values).
    Micro-batch family (``spark-ss``): ``dropped`` (late) and ``batches``
    (:class:`~streamjoin.pipelines.replay.microbatch.MicroBatches`).
    Interval-join family (``flink``): ``dropped`` (late) and ``watermarks``
    (:class:`~streamjoin.pipelines.replay.interval_join.Watermarks`).
    SQL interval-join family (``flink-sql``): ``dropped`` (all False: no late
    drop), ``sql`` (:class:`~streamjoin.pipelines.replay.sql_interval_join.SqlJoinState`)
    and ``padded_sides`` (the outer join's padded streams).
    """

    family: str
    R: np.ndarray | None = None
    dropped: np.ndarray | None = None
    release: np.ndarray | None = None
    expired: np.ndarray | None = None
    frontier: np.ndarray | None = field(default=None, repr=False)
    retention: np.ndarray | None = field(default=None, repr=False)
    K: np.ndarray | None = field(default=None, repr=False)
    d: np.ndarray | None = field(default=None, repr=False)
    policy_log: list | None = field(default=None, repr=False)
    policy_settings: dict | None = field(default=None, repr=False)   # the controller's resolved settings
    batches: microbatch.MicroBatches | None = field(default=None, repr=False)
    watermarks: interval_join.Watermarks | None = field(default=None, repr=False)
    sql: sql_interval_join.SqlJoinState | None = field(default=None, repr=False)
    padded_sides: tuple[int, ...] = ()

    @cached_property
    def H(self) -> np.ndarray | None:
        """``H_i(a)``, shape ``(n, N)`` (symmetric family; ``None`` otherwise)."""
        if self.family != SYMMETRIC or self.frontier is None:
            return None
        return _horizons(self.frontier, self.retention.reshape(-1, 1), len(self.retention))

    def horizon_at(self, i: int, a: np.ndarray) -> np.ndarray:
        """``H_i`` at arrival indexes ``a`` (symmetric family), without building
        ``H`` when it is the shifted frontier."""
        if self.frontier is None or "H" in vars(self):
            return self.H[i][a]
        t = self.frontier[a]
        h = t - self.retention[i]
        h[t == NEG_INF] = NEG_INF   # the frontier before every stream has arrived
        return h


def running_max(values: np.ndarray, carry=None) -> np.ndarray:
    """The running maximum along the last axis, a new array; with ``carry``
    (the maximum carried in from earlier input: a previous chunk, a previous
    Spark block), never below it.  Guarantees: never decreases."""
    out = np.maximum.accumulate(values, axis=-1)
    if carry is not None:
        np.maximum(out, carry, out=out)
    return out


def _own(stream: np.ndarray, per_stream: np.ndarray) -> np.ndarray:
    """``per_stream[stream[a], a]`` for every ``a`` (one value per arrival index)."""
    if per_stream.shape[0] <= 32:
        out = np.empty(per_stream.shape[1], dtype=per_stream.dtype)
        for i in range(per_stream.shape[0]):
            np.copyto(out, per_stream[i], where=stream == i)
        return out
    return per_stream[stream, np.arange(per_stream.shape[1])]


def stream_running_max(stream: np.ndarray, ts: np.ndarray, i: int, *, out: np.ndarray,
                       mine: np.ndarray | None = None, carry=None) -> np.ndarray:
    """``M_i``: the running max of stream ``i``'s ``ts`` (``NEG_INF`` before its
    first tuple), into ``out``.  ``mine``: ``stream == i`` as 0/1 integers
    (any width), if already at hand.  ``carry``: ``M_i`` at the end of the
    earlier input (a previous chunk, a previous Spark block), if any.

    The stream's values are selected without a branch: ``(ts - NEG_INF) *
    mine + NEG_INF`` is ``ts`` where ``mine`` and ``NEG_INF`` elsewhere
    (int64 arithmetic wraps, so this is exact for any ``ts``).  On a random
    mask a masked copy mispredicts and costs about three times as much."""
    if mine is None:
        mine = (stream == i).view(np.int8)
    np.subtract(ts, NEG_INF, out=out)
    out *= mine
    out += NEG_INF
    np.maximum.accumulate(out, out=out)
    if carry is not None:
        np.maximum(out, carry, out=out)
    return out


def build_replay(ts_by_stream: list[np.ndarray], arrival_by_stream: list[np.ndarray], *,
                 keep_running_max: bool = True) -> Replay:
    """Put the tuples of all streams in replay order and compute M, T, delays.

    Args:
        ts_by_stream: per stream, event times in row order (int64 us).
        arrival_by_stream: per stream, arrival times in row order (int64 us).
        keep_running_max: keep ``M`` (``n`` columns of int64) for the policies
            that read it (the sorting family, the recall-target controllers);
            without it ``T`` and ``delay`` are built one stream at a time in a
            single scratch column.
    Guarantees: ``T`` never decreases; ``delay >= 0``.
    """
    n = len(ts_by_stream)
    sizes = [len(t) for t in ts_by_stream]
    offsets = np.cumsum([0, *sizes], dtype=np.int64)
    ts_all = np.concatenate([np.asarray(t, dtype=np.int64) for t in ts_by_stream]) if n else np.empty(0, np.int64)
    arrival_all = (np.concatenate([np.asarray(t, dtype=np.int64) for t in arrival_by_stream]) if n
                   else np.empty(0, np.int64))
    # The concatenation is in (stream, row) order, so the *stable* order by
    # arrival alone is the replay order (arrival, stream, row).
    N = arrival_all.shape[0]
    idx = np.int32 if N < 2**31 else np.int64  # half the memory traffic when it fits
    order, arrival = stable_order(arrival_all, idx, overwrite=True)  # our own copy: sorted in place
    del arrival_all
    facts = kernels.replay_facts(order, offsets, ts_all, keep_running_max=keep_running_max)
    if facts is not None:   # the compiled pass: the same arrays as the numpy one below
        del order, ts_all
        stream, ts, positions, T, delay, M = facts
        return _replay(n, stream, ts, arrival, [positions[offsets[i]:offsets[i + 1]] for i in range(n)], T, delay,
                       M, ts_by_stream)
    # stream of each position follows from the position in the concatenation
    if n <= 8:
        stream = np.zeros(N, dtype=np.int32)
        for off in offsets[1:-1]:
            stream += order >= off
    else:
        stream = (np.searchsorted(offsets, order, side="right") - 1).astype(np.int32)
    ts = ts_all[order]
    del ts_all
    index_of = []
    positions = np.empty(N, dtype=idx)
    positions[order] = np.arange(N, dtype=idx)
    del order
    for i in range(n):
        index_of.append(positions[offsets[i]:offsets[i + 1]])
    # M_i one stream at a time: T is their minimum, and a tuple's own M gives
    # its delay, M_own - ts = sum_i (M_i - ts) * [stream == i] (branch-free, as
    # in stream_running_max; a wrapped term is multiplied by 0)
    M = np.empty((n, N), dtype=np.int64) if keep_running_max else None
    scratch = np.empty(N, dtype=np.int64) if n else None
    mine = np.empty(N, dtype=np.int8) if n else None   # 0/1: the narrowest multiplier is the fastest
    T = np.empty(N, dtype=np.int64)
    delay = np.zeros(N, dtype=np.int64)
    for i in range(n):
        np.equal(stream, i, out=mine.view(bool))
        Mi = stream_running_max(stream, ts, i, out=M[i] if M is not None else scratch, mine=mine)
        if i == 0:
            np.copyto(T, Mi)
        else:
            np.minimum(T, Mi, out=T)
        term = np.subtract(Mi, ts, out=scratch)  # Mi itself when it is the scratch
        term *= mine
        delay += term
    del scratch, mine
    return _replay(n, stream, ts, arrival, index_of, T, delay, M, ts_by_stream)


def _replay(n, stream, ts, arrival, index_of, T, delay, M, ts_by_stream) -> Replay:
    replay = Replay(n=n, stream=stream, ts=ts, arrival=arrival, index_of=index_of, T=T, delay=delay)
    replay.ts_of = [np.asarray(t, dtype=np.int64) for t in ts_by_stream]  # ts[index_of[i]], as given
    if M is not None:
        replay.M = M  # the cached property's value
    return replay


def minus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a - b`` where ``a == NEG_INF`` stays ``NEG_INF``: a frontier not yet
    seen (minus infinity) less a delay is still minus infinity, not a wrap."""
    return np.where(a == NEG_INF, NEG_INF, a - b)


def _horizons(T: np.ndarray, d: np.ndarray, n: int) -> np.ndarray:
    """``H = running_max(minus(T, d))`` per stream, one row at a time (no ``(n, N)`` temporaries)."""
    N = T.shape[0]
    H = np.empty((n, N), dtype=np.int64)
    if N == 0:
        return H
    unseen = T == NEG_INF
    d = np.asarray(d)
    for i in range(n):
        np.subtract(T, d[i], out=H[i])
        np.copyto(H[i], NEG_INF, where=unseen)
        np.maximum.accumulate(H[i], out=H[i])
    return H


def _release_horizon(M, K) -> np.ndarray:
    """``R = running_max(min_i minus(M_i, K_i))``, one stream at a time; ``M``
    and ``K``: ``(n, N)`` / ``(n, 1)`` matrices or :class:`~streamjoin.pipelines.policies.Rows`."""
    R = None
    for i in range(len(M)):
        Mi, Ki = M[i], K[i]
        v = np.subtract(Mi, Ki)
        np.copyto(v, NEG_INF, where=Mi == NEG_INF)
        del Mi, Ki
        R = v if R is None else np.minimum(R, v, out=R)
    np.maximum.accumulate(R, out=R)
    return R


def decide(replay: Replay, windows: np.ndarray, policy: PolicySpec, bad_arrivals=None, keys=None) -> Decisions:
    """Apply ``policy`` to the replay: horizons, drops, releases, expiries.

    ``bad_arrivals``: per stream, arrival times (us) of quarantined rows; the
    recall-target policies re-decide early on a burst of them (seed 003).
    ``keys``: per stream, key ids in row order (equality joins): the
    recall-target policies count partners per key, as a keyed operator's
    state does; ``flink-sql`` keeps its caches and timers per key.
    """
    N = replay.N
    W = np.asarray(windows, dtype=np.int64)
    if policy.family == MICROBATCH:
        mb, dropped = microbatch.micro_batches(replay.stream, replay.ts, replay.arrival, replay.n, W, policy)
        return Decisions(family=MICROBATCH, dropped=dropped, batches=mb,
                         policy_settings=microbatch.settings_report(mb, dropped, replay.stream, replay.n, policy))
    if policy.family == INTERVAL_JOIN:
        wm, dropped = interval_join.watermarks(replay, W, policy)
        return Decisions(family=INTERVAL_JOIN, dropped=dropped, watermarks=wm,
                         policy_settings=interval_join.settings_report(wm, dropped, policy))
    if policy.family == SQL_INTERVAL_JOIN:   # keys: the caches and timers are per key
        st = sql_interval_join.sql_state(replay, W, policy, keys, min_cleanup_us=policy.min_cleanup_us)
        return Decisions(family=SQL_INTERVAL_JOIN, dropped=np.zeros(N, bool), sql=st,
                         padded_sides=policy.padded_sides,
                         policy_settings=sql_interval_join.settings_report(st, replay.stream, replay.n, policy))
    schedule = adaptive_schedule(replay, W, policy, bad_arrivals, keys) if policy.adaptive else None
    log = schedule.log if schedule is not None else None
    settings = schedule.settings if schedule is not None else None
    if policy.family == SORTING:
        # (n, N) or (n, 1); a fixed policy's rows one at a time, and M's too unless kept
        K = schedule.values if schedule is not None else slack_rows(replay, policy)
        M = replay.__dict__.get("M")   # kept by build_replay, or computed already
        if M is None:
            M = Rows(replay.n, lambda i: stream_running_max(replay.stream, replay.ts, i, out=np.empty(N, np.int64)))
        R = _release_horizon(M, K if isinstance(K, Rows) else np.asarray(K)) if N else np.empty(0, np.int64)
        del M
        K = None if isinstance(K, Rows) else K   # mpkslack's slack is not kept: R is what it decided
        R_before = np.concatenate([[NEG_INF], R[:-1]]) if N else R
        dropped = replay.ts < R_before
        # R never decreases, so the first a with R(a) >= ts is a binary search;
        # a tuple cannot be released before it arrives.
        release = np.maximum(np.searchsorted(R, replay.ts, side="left"), np.arange(N))
        release[dropped] = N  # never released (no effect: dropped tuples emit nothing)
        return Decisions(family=SORTING, R=R, dropped=dropped, release=release, K=K, policy_log=log, policy_settings=settings)
    if policy.family == SYMMETRIC:
        d = schedule.values if schedule is not None else retention_matrix(replay, policy)  # (n, N) or (n, 1)
        if schedule is None:  # fixed retention: H_i = T - d_i, never materialised here
            retention = np.asarray(d, dtype=np.int64).reshape(replay.n)
            # expired iff ts + W_i < T - d_i  <=>  ts + W_i + d_i < T  (T = NEG_INF: never)
            limit = (W + retention)[replay.stream]
            limit += replay.ts
            expired = limit < replay.T
            return Decisions(family=SYMMETRIC, expired=expired, frontier=replay.T, retention=retention)
        limit = W[replay.stream]
        limit += replay.ts
        H = _horizons(replay.T, d, replay.n) if N else np.empty((replay.n, 0), np.int64)
        horizon_own = _own(replay.stream, H) if N else np.empty(0, np.int64)
        expired = limit < horizon_own
        dec = Decisions(family=SYMMETRIC, expired=expired, d=d, policy_log=log, policy_settings=settings)
        dec.H = H  # the cached property's value
        return dec
    raise AssertionError(policy.family)


def expiry(replay: Replay, windows: np.ndarray, decisions: Decisions) -> list[np.ndarray] | None:
    """Symmetric family: per stream, in row order, the first arrival index at
    which each tuple is no longer buffered -- the first ``a`` with
    ``H_i(a) > ts + W_i`` (``N`` if none; it may precede the tuple's own index
    when it expired on arrival).  ``None`` for the sorting family.

    ``H_i`` never decreases, so "``x`` still buffered at ``a``" (``x.ts + W_i >=
    H_i(a)``) is exactly ``a < expiry[s(x)][x.row]``: one integer per tuple that
    :func:`memory_per_stream` and :func:`~streamjoin.pipelines.replay.emit.emission`
    share.  (Row order: the binary searches walk ``H_i`` monotonically when a
    stream's rows are in time order, as they usually are.)
    """
    if decisions.family != SYMMETRIC:
        return None
    W = np.asarray(windows, dtype=np.int64)
    idx = np.int32 if replay.N < 2**31 else np.int64  # values are <= N
    implicit = decisions.frontier is not None   # H_i = T - d_i: search T, never build H
    out, searches = [], []
    for i in range(replay.n):
        # H_i(a) > ts + W_i, or with H_i = T - d_i: T(a) > ts + W_i + d_i
        shift = int(W[i] + decisions.retention[i]) if implicit else int(W[i])
        horizon = decisions.frontier if implicit else decisions.H[i]
        out.append(np.empty(len(replay.ts_of[i]), dtype=idx))
        if kernels.first_above(horizon, replay.ts_of[i], shift, out[i]):   # compiled: the same integers
            continue
        limit = replay.ts_of[i] + np.int64(shift)
        # halves of each stream's queries: two threads share the searches
        # (numpy's searchsorted releases the GIL)
        half = len(limit) // 2 if len(limit) >= PARALLEL_SEARCH else len(limit)
        for lo, hi in ((0, half), (half, len(limit))):
            if hi > lo:
                searches.append((horizon, limit[lo:hi], out[i][lo:hi]))

    def search(job) -> None:
        horizon, queries, into = job
        into[:] = search_sorted_queries(horizon, queries, "right", idx)

    if len(searches) > replay.n:
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(search, searches))
    else:
        for job in searches:
            search(job)
    return out


#: a stream's expiry searches are split over two threads from this many tuples
PARALLEL_SEARCH = 1 << 18


def memory_per_stream(replay: Replay, windows: np.ndarray, decisions: Decisions, *,
                      expiry_index: list[np.ndarray] | None = None) -> np.ndarray:
    """Tuples held after every arrival index, per stream: shape ``(n, N)``
    (int32 below ``2**31`` arrivals).

    Each tuple is held over one contiguous range of indexes ``[a_x, end)``:

    * symmetric: from arrival until its horizon passes ``ts + W``
      (``end`` = first ``a`` with ``H_i(a) > ts + W_i``; empty if expired);
    * sorting: in the sort buffer ``[a_x, rel)``, then in join state until
      ``R(a) > ts + W`` (a tuple whose window already passed at release does
      not count); dropped tuples are never held;
    * micro-batch: :func:`~streamjoin.pipelines.replay.microbatch.memory`;
    * interval join: :func:`~streamjoin.pipelines.replay.interval_join.memory`;
    * SQL interval join: :func:`~streamjoin.pipelines.replay.sql_interval_join.memory`.

    so memory is a difference array of starts and ends, summed up.
    ``expiry_index``: :func:`expiry` if already computed (symmetric family).
    """
    n, N = replay.n, replay.N
    if decisions.family == MICROBATCH:
        return microbatch.memory(decisions.batches, decisions.dropped, replay.stream, n)
    if decisions.family == INTERVAL_JOIN:
        return interval_join.memory(decisions.watermarks, decisions.dropped, replay.stream, n)
    if decisions.family == SQL_INTERVAL_JOIN:
        return sql_interval_join.memory(decisions.sql, replay.stream, n)
    W = np.asarray(windows, dtype=np.int64)
    counts = np.int32 if N < 2**31 else np.int64  # a count never exceeds N: half the memory
    out = np.zeros((n, N), dtype=counts)
    if decisions.family == SYMMETRIC:
        ends = expiry(replay, W, decisions) if expiry_index is None else expiry_index
        for i in range(n):
            # +1 at each tuple's own index (the stream's mask), -1 where it
            # leaves (never before its own index); the order of the ends is
            # irrelevant to their counts, so they stay in row order
            end = np.maximum(ends[i], replay.index_of[i])
            delta = (replay.stream == i).astype(counts)
            delta -= np.bincount(end, minlength=N + 1)[:N]  # same-kind cast into int32
            np.cumsum(delta, out=out[i], dtype=counts)
        return out
    limit = W[replay.stream]
    limit += replay.ts
    end = np.searchsorted(decisions.R, limit, side="right")   # where the window has passed
    del limit
    np.maximum(end, decisions.release, out=end)
    # a tuple is held from its own index on (the narrowest index type: fewer temporary bytes)
    np.maximum(end, np.arange(N, dtype=counts), out=end)
    held = ~decisions.dropped
    for i in range(n):
        mask = replay.stream == i
        mask &= held
        # +1 at each held tuple's own index (starts are 0..N-1, so the mask
        # itself), -1 where it leaves
        delta = mask.astype(counts)
        delta -= np.bincount(end[mask], minlength=N + 1)[:N]  # same-kind cast into int32
        np.cumsum(delta, out=out[i], dtype=counts)
    return out
