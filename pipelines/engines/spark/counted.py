"""Counting in the Spark tasks: a run without results counts its pairs where the
router produces them (issue 21, ninth pass; the tasks split the plan since the tenth).

The local engine counts a two-stream run's pairs in one compiled walk
(:func:`~streamjoin.pipelines.replay.counting.count_pairs`); the materialising
Spark plane builds them in its tasks and the driver counts them again.  Here
each task counts exactly the pairs its partition owns, and the driver merges
the parts into the local engine's :class:`~streamjoin.pipelines.replay.counting.Counted`.

**Global order.** The local walk visits the band plan's queries in order and,
per query ``q``, the stored positions ``j`` in ``[start[q], end[q])``; a pair's
index in that order is its position.  Codes, truth and emitted are sums; the
required slack of every ``every``-th position and the emitted latencies
(sorting family) follow that order.

**Pieces** (:func:`pieces`): each query's band split into maximal runs of ``j``
with one owner partition, ``(q, j0, j1, pos0)``::

    query q, band [start, end):   j = 10 11 12 | 13 14 15 16
    ATR owner segment:                  3  3  3 |  4  4  4  4
    partition of the segment:          p0 p0 p0 | p1 p1 p1 p1
    pieces:  (q, 10, 13, pos0) on p0,  (q, 13, 17, pos0 + 3) on p1

ATR (``route/atr.owner_segment``, two streams): the owner is
``min(term_q(ts_q), term_s(ts_s[j]))`` with each term the stream's next master
segment (:func:`~streamjoin.pipelines.route.atr.owner_term`); the query's term is
constant over its band and the stored one never decreases along it (one key,
times ascending), so a band is split only where its first and last stored
members' terms differ -- rare (a band rarely crosses a segment), and only
the positions of those bands' union are looked at, each once (wide bands
overlap: band by band would be once per pair): pieces are about the rows.
``none``: one partition, one piece per non-empty band -- the identity split,
so its one task does not split at all: it walks the plan's own bands as the
local engine does (:func:`~streamjoin.pipelines.replay.counting.walk_counted`:
two halves on two threads, no query row gathered, no countdowns) and its
:class:`~streamjoin.pipelines.replay.counting.Counted` is the merge (eleventh
pass).  Each ATR task finds its own pieces (:func:`partition_task`): those of
the queries its partition receives (the owner of a pair receives both its
members), kept where it owns them -- the driver does not split the plan.

CTR (``route/ctr``, two streams: one hop): a pair is produced by its newer
member (the larger ``(ts, stream)``, the prober) on the host where the *older*
one is stored, ``host[stream, slot(ts)]`` (the prober visits every host storing
a segment its window needs and joins only the tuples stored there, each
segment stored once).  Along a band, ``ts`` ascends, so the stored members
older than the query come first: up to the query's own position (found for
all bands at once by :func:`first_at_least`, ties by stream) the owner is the
stored member's host, changing only where that host changes in sorted order;
after it, the query's own storage host::

    query q = (S0, ts 12): slot 1, stored on p1;  S1 slots 0 | 1 stored on p0 | p2
    band j:          10  11  12  13  14  15
    stored S1 ts:     5   8  11  12  14  17      (S1 @ 12 is newer: stream 1 > 0)
    owner:           p0  p0  p2  p1  p1  p1      older: its host; newer: q's host
    pieces: (q, 10, 12) on p0, (q, 12, 13) on p2, (q, 13, 16) on p1

The partition's routing numbers come from the columns: rows stored per stream
(:func:`~streamjoin.pipelines.route.ctr.stored_per_partition`), the hop-1 probe
copies it receives (:func:`~streamjoin.pipelines.route.ctr.copies_moved_in`,
per segment), candidates = pairs owned (its one hop's extensions); no
intermediate results with two streams (docs/semantics.md).  The CTR pieces are
split on the driver, each partition's handed to its task as its own record: a
CTR partition owns the pairs whose older member it stores, so its pieces are
not simply those of the queries it receives (nor of those stored there).

**Walk** (:func:`count_part`): the counting kernel over a partition's pieces
(``count_walk`` given each piece as a band, its query row, and a sampling
countdown restarted at ``1 + (-pos0) % every``), which also returns each
piece's emitted pairs.  **Candidates** (:func:`band_candidates`): the routing
report's ``n_cand`` of an ATR partition, the band join of the rows it receives,
counted from the global plan's bands with one prefix sum of the received
stored rows (no band plan per partition).  **Merge** (:func:`merge`): codes,
truth and emitted add (the pieces must hold every pair once); the slacks and
latencies are put back in global piece order (by ``pos0``; a piece holds
``ceil((pos0 + len) / every) - ceil(pos0 / every)`` samples).  The duplicate
check runs once on the driver over the plan's rows (:func:`distinct_rows`: no
query row and no stored row twice) -- a split query occurs in several pieces,
legitimately.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ...base.allocator import reuse_freed_memory
from ...policies import SYMMETRIC
from ...replay.counting import Counted, Walk, count_plan, walk_counted, walk_inputs
from ...replay.progress import expiry
from ..local import arrival_periods
from .handoff import Handoff
from ...route import atr as atr_mod
from ...route import ctr as ctr_mod


#: :func:`first_at_least` searches one int64 code below this, else bisects
CODE_LIMIT = 2**62


@dataclass
class Pieces:
    """Runs of bands with one owner partition, in global order (``pos0`` ascending):
    ``q`` the query (index into the plan's queries), ``[j0, j1)`` its stored positions
    (int32), ``pos0`` the global position of its first pair, ``part`` its owner."""

    q: np.ndarray
    j0: np.ndarray
    j1: np.ndarray
    pos0: np.ndarray
    part: np.ndarray

    def of(self, p: int) -> "Pieces":
        sel = np.flatnonzero(self.part == p)
        return Pieces(self.q[sel], self.j0[sel], self.j1[sel], self.pos0[sel], self.part[sel])


def driver_plan(ts, ids, windows):
    """The band plan the local engine counts (:func:`~streamjoin.pipelines.replay.counting.count_plan`:
    the same stable orders, its walk order), or ``None`` where it would not count
    (not two non-empty streams, a plan that does not pack).  It does not read the
    replay: the engine builds it on a thread beside the progress pass, as the local
    engine builds it beside the replay.  ``ids``:
    :func:`~streamjoin.pipelines.replay.candidates.key_ids` of the keys, or ``None``."""
    if len(ts) != 2 or not all(len(t) for t in ts):
        return None
    return count_plan(ts, ids, [int(w) for w in windows])


def driver_walk(ts, ids, windows, replay, decisions, period_us: int, sample: int, plan=None):
    """The driver's part before the tasks: the band plan (``plan``, :func:`driver_plan`'s;
    ``None``: built here), the symmetric family's expiry index and the
    :class:`~streamjoin.pipelines.replay.counting.Walk`; ``(walk, expiry_index)``,
    or ``None`` where the local engine would not count either (an empty stream, a
    plan that does not pack, a repeated row: the caller materialises)."""
    if plan is None:
        plan = driver_plan(ts, ids, windows)
    if plan is None or not len(replay.arrival):
        return None
    W = [int(w) for w in windows]
    exp = expiry(replay, np.asarray(W, dtype=np.int64), decisions)
    period_of, period_ids = arrival_periods(replay.arrival, period_us)
    walk = walk_inputs(plan, replay, W, decisions, exp, period_of, period_ids, sample)
    if walk is None or not distinct_rows(walk):
        return None
    return walk, exp


def pieces(walk: Walk, router: str, plan=None, queries: np.ndarray | None = None) -> Pieces:
    """The pieces of ``walk``'s bands under ``router``: ``none``, ``atr`` with ``plan``
    an :class:`~streamjoin.pipelines.route.atr.AtrPlan`, or ``ctr`` (two streams) with
    ``plan`` a :class:`~streamjoin.pipelines.route.ctr.CtrPlan`; ``queries``: only
    the bands of the queries this mask (over the plan's queries) holds -- a task's
    received ones -- each piece as it is among all the pieces."""
    start, end = walk.start.astype(np.int64), walk.end.astype(np.int64)
    before = np.cumsum(end - start) - (end - start)   # pairs of the queries before each
    qi = np.flatnonzero(end > start if queries is None else (end > start) & queries)
    s0, e0 = start[qi], end[qi]
    if router == "none" or not len(qi):   # one owner, or no pair to own
        return Pieces(qi, s0.astype(np.int32), e0.astype(np.int32), before[qi], np.zeros(len(qi), np.int64))
    stored_rows, query_rows = walk.facts[0], walk.facts[1]
    ts_q, ts_s = walk.facts[6], walk.facts[7]
    if router == "atr":
        c = atr_mod.owner_term(plan, walk.query_stream, ts_q[query_rows[qi]])
        # a band's stored times ascend (one key), so its stored term does not decrease:
        # it changes inside the band iff its first and last members' terms differ (rare)
        t_first = atr_mod.owner_term(plan, walk.stored_stream, ts_s[stored_rows[s0]])
        cross = np.flatnonzero(t_first != atr_mod.owner_term(plan, walk.stored_stream, ts_s[stored_rows[e0 - 1]]))
        cs, ce = s0[cross], e0[cross]
        # the term looked at once per position of the crossing bands' union (bands overlap:
        # their positions one band at a time would be one per pair where bands are wide)
        order = np.argsort(cs, kind="stable")
        reach = np.maximum.accumulate(ce[order])
        new = np.ones(len(cross), bool)
        new[1:] = cs[order][1:] > reach[:-1]
        ub = cs[order][new]
        n_at = reach[np.append(np.flatnonzero(new)[1:], len(cross)) - 1] - ub if len(cross) else ub
        at = np.repeat(ub, n_at) + np.arange(int(n_at.sum())) - np.repeat(np.cumsum(n_at) - n_at, n_at)
        t = atr_mod.owner_term(plan, walk.stored_stream, ts_s[stored_rows[at]])
        step = np.flatnonzero((t[1:] != t[:-1]) & (at[1:] == at[:-1] + 1)) + 1
        change, t_change = at[step], t[step]                # where the term changes, in sorted order
        lo = np.searchsorted(change, cs, side="right")
        n_in = np.searchsorted(change, ce, side="left") - lo   # changes strictly inside each crossing band
        reps = np.ones(len(qi), np.int64)                   # 1 + changes strictly inside the band
        reps[cross] += n_in
        q = np.repeat(qi, reps)
        first = np.cumsum(reps) - reps
        j0, t0 = np.repeat(s0, reps), np.repeat(t_first, reps)
        inner = np.ones(len(q), bool)
        inner[first] = False
        k = np.repeat(lo, n_in) + np.arange(int(n_in.sum())) - np.repeat(np.cumsum(n_in) - n_in, n_in)
        j0[inner], t0[inner] = change[k], t_change[k]       # the changes, in band and position order
        j1 = np.empty_like(j0)
        j1[:-1] = j0[1:]
        j1[first + reps - 1] = e0
        part = plan.part[np.minimum(np.repeat(c, reps), t0)]
    elif router == "ctr":
        qs, ss = walk.query_stream, walk.stored_stream
        tq = ts_q[query_rows[qi]]
        sorted_ts = ts_s[stored_rows]
        # the stored members older than the query by (ts, stream) come first in its band
        split = first_at_least(sorted_ts, s0, e0, tq + (1 if ss < qs else 0))
        home = plan.host[ss, plan.slot(sorted_ts)]          # ctr.storage of each stored position
        del sorted_ts
        change = np.flatnonzero(home[1:] != home[:-1]) + 1  # where the stored member's host changes
        mine = plan.host[qs, plan.slot(tq)]                 # the query's host: its newer members' owner
        # a cut at the query's position only where the owner changes there
        upto = np.where((split > s0) & (split < e0) & (home[np.maximum(split - 1, 0)] == mine), e0, split)
        band, j0, j1 = _cut(s0, e0, change, split, upto)
        part = np.where(j0 < split[band], home[j0], mine[band])
        q = qi[band]   # maximal runs already: every cut changes the owner
        return Pieces(q, j0.astype(np.int32), j1.astype(np.int32), before[q] + (j0 - start[q]),
                      part.astype(np.int64))
    else:
        raise ValueError(f"pieces: router {router}")
    # maximal runs: a piece continues the previous one of its query on the same partition
    keep = np.ones(len(q), bool)
    keep[1:] = (q[1:] != q[:-1]) | (part[1:] != part[:-1])
    kept = np.flatnonzero(keep)
    last = np.append(kept[1:], len(q)) - 1
    q, j0, j1, part = q[kept], j0[kept], j1[last], part[kept]
    return Pieces(q, j0.astype(np.int32), j1.astype(np.int32), before[q] + (j0 - start[q]), part.astype(np.int64))


def _cut(s0: np.ndarray, e0: np.ndarray, change: np.ndarray, older: np.ndarray, upto: np.ndarray):
    """Bands ``[s0, e0)`` cut at the positions of ``change`` (ascending) strictly inside
    ``(s0, older)``, and at ``upto`` where it is strictly inside the band:
    ``(band, j0, j1)`` per piece, in band order, ``band`` indexing ``s0``."""
    lo = np.searchsorted(change, s0, side="right")
    inner = np.maximum(np.searchsorted(change, older, side="left") - lo, 0)
    reps = 1 + inner + ((upto > s0) & (upto < e0))
    band = np.repeat(np.arange(len(s0)), reps)
    first = np.cumsum(reps) - reps
    k = np.arange(len(band)) - first[band]
    j0 = s0[band]
    at_change = np.flatnonzero((k > 0) & (k <= inner[band]))
    j0[at_change] = change[lo[band[at_change]] + k[at_change] - 1]
    at_upto = np.flatnonzero(k > inner[band])
    j0[at_upto] = upto[band[at_upto]]
    j1 = np.empty_like(j0)
    j1[:-1] = j0[1:]
    j1[first + reps - 1] = e0
    return band, j0, j1


def first_at_least(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Per band ``[lo, hi)`` of ``values`` (ascending within each band): the first position
    whose value is ``>= bound``, else ``hi``.  One ``searchsorted`` over a code that
    ascends everywhere -- ``values`` plus, per position, the descents before it times
    their span (a band has no descent inside it) -- clipped to the band; a binary search
    of all bands at once where that code would not fit in int64."""
    if not len(lo):
        return lo.copy()
    v0 = int(values.min())
    span = int(values.max()) - v0 + 1
    runs = np.cumsum(np.concatenate(([0], values[1:] < values[:-1])))
    if (int(runs[-1]) + 2) * span < CODE_LIMIT:
        code = runs * span + (values - v0)
        b = np.clip(bound - v0, -1, span)   # outside the values' range: before or after a run's codes
        got = np.searchsorted(code, runs[np.minimum(lo, len(values) - 1)] * span + b, side="left")
        return np.clip(got, lo, hi)
    lo, hi = lo.copy(), hi.copy()
    while True:
        a = np.flatnonzero(lo < hi)
        if not len(a):
            return lo
        mid = (lo[a] + hi[a]) // 2
        below = values[mid] < bound[a]
        lo[a[below]] = mid[below] + 1
        hi[a[~below]] = mid[~below]


def count_part(walk: Walk, own: Pieces) -> dict:
    """One partition's pieces counted: ``pairs``, ``emitted``, ``codes``, ``need`` and
    ``latency`` in the pieces' order, ``emitted_of`` per piece (sorting family; the
    merge places its latencies), and ``pos0`` / ``length`` of the pieces; ``None``
    where the counting kernel does not load (an executor with no module built:
    its other kernels have numpy paths, this one has none)."""
    m = len(own.q)
    every = walk.every
    firsts = np.ascontiguousarray(1 + (-own.pos0) % every, dtype=np.int64)
    emitted_of = np.zeros(m if walk.family != SYMMETRIC else 0, np.int64)
    rows = np.ascontiguousarray(walk.facts[1][own.q])

    got = walk.call(0, m, 1, 0, start=own.j0, end=own.j1, query_rows=rows, firsts=firsts, emitted_of=emitted_of)
    if got is None:   # no counting kernel in this worker: the caller materialises
        return None
    return {"pairs": int(got[0][0]), "emitted": int(got[0][1]), "codes": got[1], "need": got[2],
            "latency": got[3], "emitted_of": emitted_of, "pos0": own.pos0,
            "length": (own.j1 - own.j0).astype(np.int64)}


def distinct_rows(walk: Walk) -> bool:
    """The duplicate check of the whole plan (no query row and no stored row twice),
    without walking a pair: the kernel's own check over an empty range of queries."""
    got = walk.call(0, 0, 1, 3)
    return got is not None and bool(got[0][3])


def merge(walk: Walk, parts: list[dict]) -> Counted:
    """The partitions' counts as the one walk's :class:`Counted` (every field).  Each
    task found its own pieces: together they must hold every pair of the plan once
    (a pair no task owned would be a count short, so that is an error, not a result)."""
    if sum(int(p["length"].sum()) for p in parts) != walk.total:
        raise RuntimeError("counted: the tasks' pieces do not tile the band plan's pairs")
    every = walk.every
    codes = np.zeros(2 * len(walk.period_ids), np.int64)
    for p in parts:
        codes += p["codes"]
    pos0 = [p["pos0"] for p in parts]
    samples = [-(-(x + n) // every) - (-(-x // every)) for x, n in ((p["pos0"], p["length"]) for p in parts)]
    need = _interleave([p["need"] for p in parts], samples, pos0)
    latency = None
    if walk.family != SYMMETRIC:
        latency = _interleave([p["latency"] for p in parts], [p["emitted_of"] for p in parts], pos0)
    return Counted(truth=sum(p["pairs"] for p in parts), emitted=sum(p["emitted"] for p in parts), codes=codes,
                   period_ids=walk.period_ids, latency=latency, need=need, every=every)


def _interleave(values: list[np.ndarray], counts: list[np.ndarray], pos0: list[np.ndarray]) -> np.ndarray:
    """The parts' values (each part's in its pieces' order, ``counts`` per piece) in the
    global order of the pieces (``pos0`` ascending)."""
    c = np.concatenate(counts).astype(np.int64) if counts else np.empty(0, np.int64)
    order = np.argsort(np.concatenate(pos0), kind="stable") if pos0 else np.empty(0, np.int64)
    offs = np.empty(len(c), np.int64)
    offs[order] = np.cumsum(c[order]) - c[order]       # each piece's first slot in the global output
    total = int(c.sum())
    dest = np.repeat(offs, c) + np.arange(total) - np.repeat(np.cumsum(c) - c, c)
    out = np.empty(total, np.int64)
    out[dest] = np.concatenate(values) if values else np.empty(0, np.int64)
    return out


def band_candidates(walk: Walk, queries: np.ndarray, stored: np.ndarray) -> int:
    """How many pairs of ``walk``'s plan have their query in ``queries`` (a mask over
    the plan's queries) and their stored row in ``stored`` (a mask over the stored
    stream's rows): the band join of those rows alone, what the materialising task
    of a partition receiving them reports as ``n_cand``.  Each band holds exactly
    its query's partners (the walk counts every pair in it as one), so that is, per
    query, the stored rows inside its band -- a difference of one prefix sum over
    the plan's sorted stored order (no sort, no pair)."""
    inside = np.zeros(len(walk.facts[0]) + 1, np.int32)   # < 2**31 rows (counting.counts)
    np.cumsum(stored[walk.facts[0]], out=inside[1:])
    sel = np.flatnonzero(queries)
    return int((inside[walk.end[sel]] - inside[walk.start[sel]]).sum(dtype=np.int64))


def partition_task(walk: Walk, router: str, plan, p: int, own: Pieces | None = None
                   ) -> tuple[dict | Counted, dict, list[int]] | None:
    """What task ``p`` does: its own pieces (ATR: :func:`pieces` of the queries
    it receives: a pair's owner receives both its members, route/atr.py's theorem A;
    CTR: ``own``, split on the driver), counted (:func:`count_part`; ``none``: the
    whole plan, :func:`~streamjoin.pipelines.replay.counting.walk_counted`, its
    :class:`Counted` the merge), and the routing
    report's numbers for its partition -- the rows of each stream it holds (ATR:
    :func:`~streamjoin.pipelines.route.atr.received`, the rows the materialising task
    receives; CTR: the rows stored there, its ``n_in`` adding the probe copies it
    receives), its local join's candidates (ATR: :func:`band_candidates` of those
    rows; CTR: the pairs it owns, as its one hop extends) and the pairs it owns.
    ``None`` where :func:`count_part` is."""
    t0 = time.perf_counter()
    qs, ss = walk.query_stream, walk.stored_stream
    ts_q, ts_s = walk.facts[6], walk.facts[7]
    if router == "none":   # one task, one part: the plan's own bands, as the local engine walks them
        whole = walk_counted(walk)
        if whole is None:
            return None
        stats = {"n_in": len(ts_q) + len(ts_s), "n_cand": whole.truth, "n_out": whole.truth,
                 "t_us": (time.perf_counter() - t0) * 1e6}
        return whole, stats, [len(ts_q), len(ts_s)] if qs == 0 else [len(ts_s), len(ts_q)]
    if router == "atr":
        got_q, got_s = atr_mod.received(plan, qs, ts_q, p), atr_mod.received(plan, ss, ts_s, p)
        queries = got_q[walk.facts[1]]
        own = pieces(walk, router, plan, queries=queries).of(p)
    elif router == "ctr":
        own = pieces(walk, router, plan).of(p) if own is None else own
    else:
        raise ValueError(f"partition_task: router {router}")
    part = count_part(walk, own)
    if part is None:
        return None
    moved_in = 0
    if router == "atr":
        held = {qs: int(got_q.sum()), ss: int(got_s.sum())}
        cand = band_candidates(walk, queries, got_s)
    else:   # CTR: its stored rows, and the probers copied in from elsewhere
        by_stream = [ts_q, ts_s] if qs == 0 else [ts_s, ts_q]
        held = dict(enumerate(ctr_mod.stored_per_partition(plan, by_stream)[:, p].tolist()))
        moved_in = int(ctr_mod.copies_moved_in(plan, by_stream)[p])
        cand = part["pairs"]   # two streams: one hop, every candidate a pair of the partition
    stored = [held[0], held[1]]
    stats = {"n_in": int(sum(stored)) + moved_in, "n_cand": int(cand), "n_out": part["pairs"],
             "t_us": (time.perf_counter() - t0) * 1e6}
    return part, stats, stored


def spark_count(spark, walk: Walk, partitions: int, router: str, plan, handoff: Handoff,
                alongside=None) -> tuple[Counted, dict[int, dict], np.ndarray] | None:
    """One Spark job, one task per partition (:func:`partition_task`: each finds and
    counts its own pieces; CTR: the driver splits the plan, each partition's pieces
    its own record; none: one task walks the whole plan): the walk's columns go
    through ``handoff`` once (as files on a local master, every task maps the same
    pages), the router's plan with the task's code.  Returns the merged :class:`Counted`, each partition's statistics
    and the rows of each stream each partition holds (``(n, P)``,
    :attr:`.plane.PlaneResult.stored`), or ``None`` where a task could not load the
    counting kernel (executors with no module built): the caller then materialises,
    as the local engine does without it.  ``alongside``: called once the records are
    handed off, before the job runs."""
    sc = spark.sparkContext
    shared = handoff.put(walk)
    split = pieces(walk, router, plan) if router == "ctr" else None   # CTR: owned by the older member's host
    records = [(p, shared, None if split is None else handoff.put(split.of(p))) for p in range(partitions)]
    del split
    if alongside is not None:
        alongside()

    def task(index, recs):
        reuse_freed_memory()
        for p, shared_token, own_token in recs:
            w = handoff.get(shared_token)
            done = partition_task(w, router, plan, p, None if own_token is None else handoff.get(own_token))
            del w
            if done is None:
                yield p, None, None
                continue
            part, stats, stored = done
            stats["_stored"] = stored
            yield p, stats, handoff.put(part)

    got = sc.parallelize(records, partitions).mapPartitionsWithIndex(task).collect()
    if any(g[1] is None for g in got):
        for g in got:   # the other tasks' counts, unread (close removes any left)
            if g[2] is not None:
                handoff.get(g[2], consume=True)
        return None
    got.sort(key=lambda g: g[0])
    stored = np.array([g[1].pop("_stored") for g in got], dtype=np.int64).T.reshape(2, partitions)
    parts = [handoff.get(g[2], consume=True) for g in got]
    merged = parts[0] if router == "none" else merge(walk, parts)   # none: the one walk's own Counted
    return merged, {int(g[0]): g[1] for g in got}, stored
