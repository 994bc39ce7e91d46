"""Flink SQL's row-time interval join (``flink-sql``) on columns: caches, probes, expiry.

The rules and their Flink sources are in :mod:`streamjoin.pipelines.policies.flink_sql`;
the per-event oracle is :mod:`.sql_reference`.  ``G`` is the operator watermark of
``--policy flink`` (:func:`.interval_join.operator_watermark`), ``OT = max(G, 0)``,
``W_s`` the window of side ``s`` (``W_0`` = ``leftRelativeSize``), ``o = 1 - s``.
Nothing here loops over records; the two sequential parts are *chains* -- each
step a function of the previous step only -- whose orbits are marked by pointer
doubling (``log2`` rounds of whole-array gathers):

1. **Advances.**  ``G`` moves only between records: after a record (a watermark
   per record), or at a tick before one -- twice when both inputs' watermarks
   rise at one tick (the left generator runs first) -- and to ``Long.MAX_VALUE``
   after the last record (a bounded input ends).  Timers fire only there.
2. **Cached** rows: ``OT(a) < ts + W_s`` when processed (column).
3. **Cleanup timers** of a (key, side) cache: the row that registers a timer
   at ``t + W_s + minCleanUp + 1 ms`` fires it at the first advance with ``G``
   at least that (``G`` is below it when the row is cached); the fire removes
   rows ``<= OT - W_s - 1 ms`` and hands the timer to the earliest cached row
   left, or, if none, to the next row cached.  Which rows are left depends on
   the fire alone (an earlier removal, by a fire or a probe, only ever took
   rows at or below a lower bound), so "next owner" is a function of the owner:
   a chain per cache, walked from the cache's first row.
4. **Expiration times** (one per side, shared by all keys, initially 0): set to
   ``OT - W_s - 1 ms`` by a fire of a side-``s`` timer and by a side-``o`` row
   that probes; a side-``o`` row at ``t`` probes iff the expiration time is
   ``< t + W_o``.  Every update sets the value of its moment, and those never
   decrease, so "the next update after an update" is again a function of the
   update: a chain over the fires and the side-``o`` rows.
5. A cached row leaves at the first of: a fire of its cache with ``OT - W_s -
   1 ms >= ts`` (before the record after the advance), or a probe by a row of
   the same key and the other side with ``OT >= ts + W_s + 1 ms`` (after that
   row joined it).

A valid pair with earlier member ``e`` and later member ``l`` is emitted, on
the arrival of ``l`` (latency 0), iff ``e`` was cached, ``l`` probes and ``e``
is still cached when ``l`` probes.  An outer join pads a row in no emitted pair
when it leaves (the record being processed, or the last record before the
advance whose timer removed it), or at once if it was never cached.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..base.errors import InputError
from ..base.sorting import stable_order
from ..base.timeunits import NEG_INF
from ..policies.flink import MS, check_windows
from . import interval_join

#: ``Long.MAX_VALUE``: the watermark a bounded input ends with (every timer fires)
END = np.iinfo(np.int64).max
_TOP = np.iinfo(np.int64).max
_BOTTOM = np.iinfo(np.int64).min


@dataclass
class SqlJoinState:
    """The facts of a ``flink-sql`` replay (arrays indexed by arrival index).

    Attributes:
        cached: the record was put into its side's cache.
        probes: the record walked the other side's cache (joined what it found there).
        visible_until: first arrival index whose probe no longer finds the row in
            its cache (its own index if never cached).
        left_at: arrival index at which the row left its cache: the record that
            removed it while probing, or the last record before the advance whose
            timer removed it (``N - 1`` at the end of input); its own index if never
            cached -- when an outer join emits its null-padded row.
        held_until: first arrival index after which the row is no longer cached
            (``memory``); ``N`` if still cached after the last record.
        last_watermark: ``G`` after the last record (before the end of input).
        interval_us: the watermark interval (0 = per record).
    """

    cached: np.ndarray
    probes: np.ndarray
    visible_until: np.ndarray
    left_at: np.ndarray
    held_until: np.ndarray
    last_watermark: int
    interval_us: int


# ---------------------------------------------------------------- helpers


def first_above(q: np.ndarray, start: np.ndarray, v: np.ndarray) -> np.ndarray:
    """For each query: the first index ``i >= start`` with ``q[i] > v``, else ``len(q)``.

    A sparse table of range maxima (level ``k``: the maximum over ``[i, i + 2^k)``,
    cut at the end; ``q`` ranked to int32 where it fits) and a descent from a
    level that spans the whole array: ``O((len(q) + queries) log len(q))``."""
    M = len(q)
    start = np.asarray(start, dtype=np.int64)
    if M == 0 or len(start) == 0:
        return np.full(len(start), M, np.int64)
    values = _distinct(q)
    rank = _search(values, q).astype(np.int32 if len(values) < 2**31 else np.int64)
    rv = _search(values, v, side="right")     # q > v  <=>  rank >= rv
    levels = [rank]
    span = 1
    while span < M:
        prev = levels[-1]
        nxt = prev.copy()
        np.maximum(prev[:M - span], prev[span:], out=nxt[:M - span])
        levels.append(nxt)
        span *= 2
    pos = start.copy()
    for k in range(len(levels) - 1, -1, -1):
        inside = np.flatnonzero(pos < M)
        skip = inside[levels[k][pos[inside]] < rv[inside]]
        pos[skip] += 1 << k
    return np.minimum(pos, M)


def orbit(nxt: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Nodes reached from ``starts`` by following ``nxt`` (``nxt[i] > i``; the last
    node, ``len(nxt) - 1``, is a sentinel mapped to itself): a mask, by doubling --
    after round ``k`` the first ``2^k`` steps of every walk are marked."""
    on = np.zeros(len(nxt), bool)
    on[starts] = True
    ptr = nxt.copy()
    steps = 1
    while steps < len(nxt):
        idx = np.flatnonzero(on)
        on[ptr[idx]] = True
        ptr = ptr[ptr]
        steps *= 2
    on[-1] = False
    return on


def _search(a: np.ndarray, q: np.ndarray, side: str = "left") -> np.ndarray:
    """``np.searchsorted(a, q, side)`` with the queries sorted first: numpy's binary
    search starts from the previous answer when the queries rise, so a sorted batch
    stays in cache (random queries into a large array do not)."""
    q = np.asarray(q, dtype=np.int64)
    if len(q) < 4096 or not (q[1:] < q[:-1]).any():
        return np.searchsorted(a, q, side=side)
    order, sorted_q = stable_order(q)
    out = np.empty(len(q), np.int64)
    out[order] = np.searchsorted(a, sorted_q, side=side)
    return out


def _distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values (one sort; numpy's hash-based ``unique`` is slower on int64)."""
    s = np.sort(values)
    return s[np.concatenate([[True], s[1:] != s[:-1]])] if len(s) else s


def _dense(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ranks of ``values`` (0 = the smallest) and how many distinct values there are."""
    order = np.argsort(values, kind="stable")
    s = values[order]
    new = np.concatenate([[False], s[1:] != s[:-1]]) if len(s) else np.zeros(0, bool)
    rank = np.empty(len(values), np.int64)
    rank[order] = np.cumsum(new)
    return rank, (int(rank[order[-1]]) + 1 if len(s) else 0)


# ---------------------------------------------------------------- the replay


def advances(replay, policy, before: np.ndarray, after: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every advance of ``G``: ``(pos, value)``, the advance happening before record
    ``pos`` is processed (``N``: after the last one), values strictly increasing; the
    last is the end of input (:data:`END`)."""
    N = replay.N
    g = np.concatenate([before, after[-1:]])                   # G when record p is processed; p = N: after all
    p = np.flatnonzero(g[1:] > g[:-1]) + 1
    pos, val = [p], [g[p]]
    interval = int(policy.watermark_interval_us)
    if interval and N > 1:   # a tick where both inputs rise: the left one first
        c, _ = interval_join.counted(replay, interval)
        q = np.flatnonzero(c[1:] > c[:-1]) + 1
        # between the generators: the left input's watermark after the tick, the right one's before it
        mid = interval_join.watermark_of_maxima(np.concatenate([interval_join.maxima_at(replay.M[:1], c[q]),
                                                                interval_join.maxima_at(replay.M[1:2], c[q - 1])]),
                                                policy.watermark)
        keep = (mid > g[q - 1]) & (mid < g[q])
        pos.append(q[keep])
        val.append(mid[keep])
    pos = np.concatenate(pos + [[N]]).astype(np.int64)
    val = np.concatenate(val + [[END]]).astype(np.int64)
    order = np.lexsort((val, pos))
    return pos[order], val[order]


def _threshold(G: np.ndarray, w) -> np.ndarray:
    """``calExpirationTime``: ``OT - W - 1 ms``, ``Long.MAX_VALUE`` at the end of input."""
    return np.where(G == END, END, np.maximum(G, 0) - w - MS)


def _timer_fires(gid, a, y, cache_w, adv_pos, adv_G, N, min_cleanup):
    """Rule 3 on the cached rows (``gid``: cache = key and side; in arrival order):
    per row, the advance index at which its cache's timer fires that removes it."""
    C = len(a)
    A = len(adv_pos)
    fire = _search(adv_G, y + cache_w + min_cleanup + MS, side="left")   # the owner's fire
    thr = _threshold(adv_G[fire], cache_w)
    at = adv_pos[fire]
    # the earliest row left: rows of the cache by (time, arrival); first with y > thr cached before `at`
    uy = _distinct(y)
    by_y, comp_y = stable_order(gid * (len(uy) + 1) + _search(uy, y, side="left"))   # rows are in arrival order
    gy, ay = gid[by_y], a[by_y]
    p0 = _search(comp_y, gid * (len(uy) + 1) + _search(uy, thr, side="right"), side="left")
    p = first_above(-ay, p0, -at)
    in_group = p < C
    in_group[in_group] = gy[p[in_group]] == gid[in_group]
    nxt = np.full(C + 1, C, np.int64)
    nxt[:C][in_group] = by_y[p[in_group]]
    # none left: the next row cached in this cache after the fire
    by_a, sorted_a = stable_order(gid * (N + 1) + a)
    q = _search(sorted_a, gid * (N + 1) + at, side="left")
    later = ~in_group & (q < C)
    later[later] = gid[by_a[q[later]]] == gid[later]
    nxt[:C][later] = by_a[q[later]]
    nxt[:C][adv_G[fire] == END] = C
    first = by_a[np.flatnonzero(np.concatenate([[True], gid[by_a][1:] != gid[by_a][:-1]]))] if C else by_a
    owners = orbit(nxt, first)[:C]
    fires = _distinct(gid[owners] * (A + 1) + fire[owners])
    # each row leaves at its cache's first fire at or after the first advance with OT - W - 1 ms >= y
    e0 = _search(adv_G, y + cache_w + MS, side="left")
    k = _search(fires, gid * (A + 1) + e0, side="left")
    got = fires[np.minimum(k, len(fires) - 1)]
    if not len(fires) or np.any(k >= len(fires)) or np.any(got // (A + 1) != gid):
        raise AssertionError("flink-sql: a cached row outlived its cache's timers")
    return got - gid * (A + 1), fires % (A + 1), fires // (A + 1)


def sql_state(replay, windows, policy, keys=None, min_cleanup_us: int = 0) -> SqlJoinState:
    """The :class:`SqlJoinState` of a replay.

    ``replay``: a :class:`~streamjoin.pipelines.replay.progress.Replay`;
    ``keys``: per stream, key ids in row order (``None``: one key)."""
    N = replay.N
    W = np.asarray(windows, dtype=np.int64)
    interval_join.check_times(replay, W, "flink-sql")
    interval = int(policy.watermark_interval_us)
    if N == 0:
        e = np.empty(0, np.int64)
        return SqlJoinState(np.empty(0, bool), np.empty(0, bool), e, e, e, NEG_INF, interval)
    low = np.flatnonzero(replay.ts <= 0)
    if len(low):
        a = int(low[0])
        raise InputError(f"policy flink-sql: stream {int(replay.stream[a])} row {int(replay.row[a])} has ts "
                         f"{int(replay.ts[a])}us <= 0 ({len(low)} such rows); Flink SQL's cleanup takes a row "
                         "time <= 0 for 'no rows left' (TimeIntervalJoin.removeExpiredRows)")
    before, after = interval_join.operator_watermark(replay, policy, policy.watermark)
    adv_pos, adv_G = advances(replay, policy, before, after)
    A = len(adv_pos)
    stream, ts = replay.stream.astype(np.int64), replay.ts
    key = np.zeros(N, np.int64)
    if keys is not None:
        for i, pos in enumerate(replay.index_of):
            key[pos] = keys[i]
        key = _dense(key)[0]
    own_w = W[stream]
    OT = np.maximum(before, 0)
    cached = OT < ts + own_w                                                          # rule 2
    idx = np.arange(N, dtype=np.int64)

    # rule 3: the caches' timers
    c = np.flatnonzero(cached)
    gid = key[c] * 2 + stream[c]
    fire_of, fire_adv, fire_gid = _timer_fires(gid, c, ts[c], own_w[c], adv_pos, adv_G, N, int(min_cleanup_us))

    # rule 4: the expiration times, one chain per side s (probes by side o = 1 - s)
    probes = np.zeros(N, bool)
    for s in (0, 1):
        o = 1 - s
        forced = _distinct(fire_adv[fire_gid % 2 == s])
        rec = np.flatnonzero(stream == o)
        order_key = np.concatenate([2 * adv_pos[forced], 2 * rec + 1])
        sub = np.concatenate([forced, np.zeros(len(rec), np.int64)])
        q = np.concatenate([np.full(len(forced), _TOP), ts[rec] + W[o]])
        val = np.concatenate([_threshold(adv_G[forced], W[s]), OT[rec] - W[s] - MS])
        which = np.concatenate([np.full(len(forced), -1), rec])
        order = np.lexsort((sub, order_key))
        q = np.concatenate([[_BOTTOM], q[order]])          # node 0: the start, expiration time 0
        val = np.concatenate([[0], val[order]])
        which = np.concatenate([[-1], which[order]])
        M = len(q)
        nxt = np.concatenate([first_above(q, np.arange(1, M + 1), val), [M]])
        on = orbit(nxt, np.array([0]))[:M]
        mine = on & (which >= 0)
        probes[which[mine]] = True

    # rule 5: when each cached row leaves
    y, w = ts[c], own_w[c]
    timer_pos = adv_pos[fire_of]
    r0 = _search(before, y + w + MS, side="left")
    pb = np.flatnonzero(probes)
    comp = np.sort((key[pb] * 2 + stream[pb]) * (N + 1) + pb)
    target = (key[c] * 2 + (1 - stream[c])) * (N + 1)
    probe_at = np.full(len(c), N, np.int64)
    if len(comp):
        k = _search(comp, target + r0, side="left")
        found = comp[np.minimum(k, len(comp) - 1)] - target
        hit = (k < len(comp)) & (found <= N)
        probe_at[hit] = found[hit]
    by_probe = probe_at < timer_pos
    visible_until = idx.copy()
    visible_until[c] = np.where(by_probe, probe_at + 1, timer_pos)
    left_at = idx.copy()
    left_at[c] = np.where(by_probe, probe_at, timer_pos - 1)
    held_until = idx.copy()
    with_tick = (interval == 0) & (adv_G[fire_of] != END)   # a per-record advance is part of the record before it
    held_until[c] = np.where(by_probe, probe_at, np.where(with_tick, timer_pos - 1, timer_pos))
    return SqlJoinState(cached=cached, probes=probes, visible_until=visible_until,
                        left_at=left_at, held_until=held_until, last_watermark=int(after[-1]),
                        interval_us=interval)


def emitted_pairs(st: SqlJoinState, a0: np.ndarray, a1: np.ndarray) -> np.ndarray:
    """For pairs given by their members' arrival indexes: the emitted mask."""
    earlier, later = np.minimum(a0, a1), np.maximum(a0, a1)
    return st.cached[earlier] & st.probes[later] & (later < st.visible_until[earlier])


def pair_emitted(a0, a1, cached, probes, visible_until) -> np.ndarray:
    """:func:`emitted_pairs` on facts the members carry (the Spark kernel, the bounded
    engine): ``a0`` / ``a1`` the members' arrival indexes, and each fact a pair
    ``(member 0's, member 1's)``."""
    first = np.asarray(a0) < np.asarray(a1)
    cached_e = np.where(first, cached[0], cached[1])
    probes_l = np.where(first, probes[1], probes[0])
    visible_e = np.where(first, visible_until[0], visible_until[1])
    return cached_e.astype(bool) & probes_l.astype(bool) & (np.maximum(a0, a1) < visible_e)


def padded_rows(stream: np.ndarray, side: int, matched: np.ndarray) -> np.ndarray:
    """Arrival indexes of ``side``'s rows in no emitted pair (``matched``: arrival
    indexes of that side's members of the emitted pairs): the outer join pads them
    at ``left_at``."""
    out = stream == side
    out[np.asarray(matched, dtype=np.int64)] = False
    return np.flatnonzero(out)


def memory(st: SqlJoinState, stream: np.ndarray, n: int) -> np.ndarray:
    """Rows in both caches after every arrival index, per stream ``(n, N)``."""
    return interval_join.held_memory(st.cached, st.held_until, stream, n)


def settings_report(st: SqlJoinState, stream: np.ndarray, n: int, policy) -> dict:
    """``report.json`` ``policy_settings`` of a ``flink-sql`` run."""
    out = interval_join.settings_of(policy, st.interval_us, st.last_watermark, 0)
    out["not_cached"] = [int(np.count_nonzero(~st.cached & (stream == i))) for i in range(n)]
    out["probes_skipped"] = int(np.count_nonzero(~st.probes))
    out["join"] = policy.join
    out["min_cleanup_interval_us"] = int(policy.min_cleanup_us)
    return out
