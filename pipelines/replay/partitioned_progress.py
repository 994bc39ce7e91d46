"""The global progress pass, partition by partition (SPEC §2, §4; seed 004).

:mod:`~streamjoin.pipelines.replay.progress` computes the coordination clock of the
replay with whole-column numpy on one machine.  This module computes the
*same* facts when the tuples live in ``P`` partitions of a Spark DataFrame,
without ever collecting the tuples to the driver: every quantity is a
running maximum (or a running minimum of running maxima) over the replay
order, and a running maximum splits into a per-partition scan plus a
*carried-in prefix* -- the maximum over all earlier partitions, which is one
small number per partition and stream::

    replay order (sorted by (arrival, stream, row), range-partitioned)
    | partition 0      | partition 1        | partition 2     |
      scan locally       scan locally         scan locally
      summary s0         summary s1           summary s2       -> driver
                         carry = f(s0)        carry = f(s0, s1) <- driver
      finish locally     finish locally       finish locally

Stages (each one Spark action; the driver sees O(P x n) numbers):

1. ``summary1``: rows and the largest ``ts`` per stream  ->  exclusive prefix
   counts (the arrival index ``a`` of each partition's first tuple) and
   carried-in ``M_i``.
2. ``summary2`` (``mpkslack`` only): the largest delay per stream, with the
   carried ``M``  ->  carried-in ``K_i`` (MP-K-slack's K is a running max).
3. ``summary3``: the largest local release candidate ``min_i(M_i - K_i)``
   (sorting family) or ``T - d_k`` per stream (symmetric family)  ->
   carried-in ``R`` / ``H_k``.
4. ``facts``: every tuple gets ``a``, ``M``, ``T``, ``delay``, ``R(a)``,
   ``R(a-1)``, ``dropped``, ``H_k(a)`` for every ``k``, ``expired``.
5. releases (sorting family): ``rel(x)`` = first ``a >= a_x`` with
   ``R(a) >= x.ts``.  ``R`` never decreases, so the first index where it
   reaches ``ts`` is one of its *change points* ``(R(a), a)`` with
   ``R(a) > R(a-1)``; change points and queries ``(x.ts, a_x)`` are sorted
   together by value (queries first on ties) and each query takes the next
   change point after it -- a backward scan with a carried-in "next change
   point" from later partitions.  ``rel = max(a_x, a_cp)`` and, as arrival is
   non-decreasing in ``a``, ``arrival[rel] = max(x.arrival, arrival_cp)``.

Worked example (two partitions, ``none`` policy, two streams)::

    a          0      1      2   |  3      4
    (s, ts)  (0,10) (1,12) (0,15)| (0,11) (1,20)
    summary1: p0 -> count 3, max ts (15, 12);   p1 -> carry M = (15, 12)
    R         -inf    10     12  |  12     15      (p1 carries R = 12)
    dropped   .       .      .   |  yes    .       (11 < R(2) = 12)
    change points (R, a): (10, 1) (12, 2) (15, 4)
    query ts 12 of a=1 -> next change point with R >= 12 is a = 2 -> rel 2

The recall-target policies (``qjoin``, ``qkslack``) decide with an online
controller that walks the whole replay.  The current Spark path computes
their progress on the driver (:func:`driver_facts`); the native path runs
the controller once and hands the scans its decision table (``schedule``:
each decision's time and per-stream values): :func:`scheduled` gives every
tuple the values in force at its arrival -- MP-K-slack's bound before the
first decision, carried in through ``summary2`` like ``mpkslack``'s -- and
stages 3 and 4 use them in place of a fixed ``K`` / ``d`` (documented in
``docs/semantics.md``).

The chunk functions below are pure numpy so that the same code runs inside
Spark's ``mapInArrow`` and in :func:`progress_chunks`, a plain-Python
driver used by the tests with arbitrary chunkings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..policies import SORTING, SYMMETRIC, PolicySpec
from ..policies.recall_target import in_force
from .progress import Decisions, Replay, build_replay, decide, minus, running_max, stream_running_max
from ..base.timeunits import NEG_INF

INT = np.int64


def fact_columns(n: int) -> list[str]:
    """Columns of the per-tuple facts table, in order."""
    return (["a", "stream", "row", "ts", "arrival"] + [f"M{i}" for i in range(n)]
            + ["T", "delay", "R", "R_prev", "dropped"] + [f"H{k}" for k in range(n)] + ["expired"])


def _local_M(stream, ts, n, Mcarry):
    M = np.empty((n, len(ts)), dtype=INT)
    for i in range(n):
        stream_running_max(stream, ts, i, out=M[i], carry=Mcarry[i])
    return M


def _delay(stream, ts, M):
    m = len(ts)
    return M[stream, np.arange(m)] - ts if m else np.empty(0, INT)


def _local_K(stream, delay, n, policy: PolicySpec, Kcarry):
    m = len(stream)
    if policy.name == "none":
        return np.zeros((n, 1), INT)
    if policy.name == "kslack":
        return np.asarray(policy.k, dtype=INT).reshape(n, 1)
    if policy.name == "mpkslack":
        K = np.empty((n, m), dtype=INT)
        for i in range(n):
            K[i] = running_max(np.where(stream == i, delay, 0), Kcarry[i])
        return K
    raise AssertionError(policy.name)


def _retention(n, policy: PolicySpec):
    return np.asarray(policy.retention, dtype=INT).reshape(n)


def scheduled(c: dict, delay, n: int, policy: PolicySpec, Kcarry, schedule) -> np.ndarray:
    """``qkslack``'s ``K_i(a)`` / ``qjoin``'s ``d_i(a)`` of a chunk, ``(n, m)``: the values of
    the last decision made before each tuple's arrival (``schedule``: the decision times and
    their ``(n, D)`` values, :func:`~streamjoin.pipelines.policies.recall_target.in_force`), before
    the first one MP-K-slack's bound -- per stream (qkslack) or the largest delay of any stream
    (qjoin) -- with ``Kcarry`` the largest delays per stream of the earlier chunks."""
    stream = c["stream"]
    own = np.empty((n, len(stream)), dtype=INT)
    for i in range(n):
        own[i] = running_max(np.where(stream == i, delay, 0), Kcarry[i])
    initial = own if policy.family == SORTING else np.broadcast_to(own.max(axis=0, initial=0), own.shape)
    times, values = schedule
    return in_force(times, values, c["arrival"], initial)


def summary1(c: dict, n: int) -> np.ndarray:
    """``[count, max ts of stream 0..n-1]``."""
    out = np.full(n + 1, NEG_INF, dtype=INT)
    out[0] = len(c["ts"])
    for i in range(n):
        sel = c["ts"][c["stream"] == i]
        if len(sel):
            out[1 + i] = sel.max()
    return out


def summary2(c: dict, n: int, Mcarry) -> np.ndarray:
    """Largest delay per stream (0 if none): MP-K-slack's carried K."""
    M = _local_M(c["stream"], c["ts"], n, Mcarry)
    d = _delay(c["stream"], c["ts"], M)
    out = np.zeros(n, dtype=INT)
    for i in range(n):
        sel = d[c["stream"] == i]
        if len(sel):
            out[i] = sel.max()
    return out


def summary3(c: dict, n: int, policy: PolicySpec, Mcarry, Kcarry, schedule=None) -> np.ndarray:
    """Largest local ``min_i(M_i - K_i)`` (sorting) or ``T - d_k`` per stream (symmetric).
    ``schedule``: the recall-target policies' decisions (:func:`scheduled`)."""
    M = _local_M(c["stream"], c["ts"], n, Mcarry)
    m = len(c["ts"])
    values = None if schedule is None else scheduled(c, _delay(c["stream"], c["ts"], M), n, policy, Kcarry, schedule)
    if policy.family == SORTING:
        K = _local_K(c["stream"], _delay(c["stream"], c["ts"], M), n, policy, Kcarry) if values is None else values
        cand = minus(M, K).min(axis=0) if m else np.empty(0, INT)
        return np.array([cand.max() if m else NEG_INF], dtype=INT)
    T = M.min(axis=0) if m else np.empty(0, INT)
    d = _retention(n, policy) if values is None else values
    return np.array([minus(T, d[k]).max() if m else NEG_INF for k in range(n)], dtype=INT)


def facts(c: dict, n: int, windows, policy: PolicySpec, offset: int, Mcarry, Kcarry, Rcarry, Hcarry,
          schedule=None) -> dict:
    """Every tuple's progress facts (columns of :func:`fact_columns`); ``schedule``: the
    recall-target policies' decisions (:func:`scheduled`)."""
    stream, ts = c["stream"], c["ts"]
    m = len(ts)
    W = np.asarray(windows, dtype=INT)
    M = _local_M(stream, ts, n, Mcarry)
    T = M.min(axis=0) if m else np.empty(0, INT)
    delay = _delay(stream, ts, M)
    out = {"a": offset + np.arange(m, dtype=INT), "stream": stream.astype(np.int32), "row": c["row"].astype(INT),
           "ts": ts, "arrival": c["arrival"]}
    for i in range(n):
        out[f"M{i}"] = M[i]
    out["T"], out["delay"] = T, delay
    zeros = np.zeros(m, dtype=INT)
    values = None if schedule is None else scheduled(c, delay, n, policy, Kcarry, schedule)
    if policy.family == SORTING:
        K = _local_K(stream, delay, n, policy, Kcarry) if values is None else values
        cand = minus(M, K).min(axis=0) if m else np.empty(0, INT)
        R = running_max(cand, Rcarry)
        R_prev = np.concatenate([[Rcarry], R[:-1]]).astype(INT) if m else R
        out["R"], out["R_prev"] = R, R_prev
        out["dropped"] = ts < R_prev
        for k in range(n):
            out[f"H{k}"] = zeros
        out["expired"] = np.zeros(m, dtype=bool)
    else:
        d = _retention(n, policy) if values is None else values
        H = np.empty((n, m), dtype=INT)
        for k in range(n):
            H[k] = running_max(minus(T, d[k]), Hcarry[k])
            out[f"H{k}"] = H[k]
        out["R"], out["R_prev"] = zeros, zeros
        out["dropped"] = np.zeros(m, dtype=bool)
        out["expired"] = ts + W[stream] < H[stream, np.arange(m)] if m else np.zeros(0, bool)
    return out


def prefix_max(values: Sequence[np.ndarray], init) -> list[np.ndarray]:
    """Exclusive prefix maxima: entry ``p`` = max over partitions ``< p`` (``init`` for p = 0)."""
    out, cur = [], np.asarray(init, dtype=INT).copy()
    for v in values:
        out.append(cur.copy())
        cur = np.maximum(cur, v)
    return out


@dataclass
class Carries:
    offsets: list[int]
    M: list[np.ndarray]
    K: list[np.ndarray]
    R: list[int]
    H: list[np.ndarray]
    N: int
    last_arrival: int


def carries_from(s1: list[np.ndarray], n: int) -> tuple[list[int], list[np.ndarray], int]:
    counts = [int(s[0]) for s in s1]
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int).tolist() if counts else []
    M = prefix_max([s[1:] for s in s1], np.full(n, NEG_INF, INT))
    return offsets, M, int(sum(counts))


# ---------------------------------------------------------------- releases

def release_rows(f: dict) -> dict:
    """Queries (not-dropped tuples) and change points of ``R``, as one sortable table.

    ``value`` (ts of a query, R of a change point), ``kind`` (0 query, 1
    change point: queries sort first on equal values), ``a``, ``arrival``.
    """
    q = ~f["dropped"]
    cp = f["R"] > f["R_prev"]
    return {
        "value": np.concatenate([f["ts"][q], f["R"][cp]]),
        "kind": np.concatenate([np.zeros(int(q.sum()), np.int8), np.ones(int(cp.sum()), np.int8)]),
        "a": np.concatenate([f["a"][q], f["a"][cp]]),
        "arrival": np.concatenate([f["arrival"][q], f["arrival"][cp]]),
    }


def release_summary(r: dict) -> np.ndarray:
    """First change point of a sorted chunk: ``[has, a, arrival]``."""
    cps = np.flatnonzero(r["kind"] == 1)
    if len(cps):
        j = cps[0]
        return np.array([1, r["a"][j], r["arrival"][j]], dtype=INT)
    return np.array([0, 0, 0], dtype=INT)


def release_carries(summaries: list[np.ndarray]) -> list[np.ndarray]:
    """Per chunk: the first change point in any *later* chunk (``has = 0`` if none)."""
    out = [None] * len(summaries)
    nxt = np.array([0, 0, 0], dtype=INT)
    for p in range(len(summaries) - 1, -1, -1):
        out[p] = nxt.copy()
        if summaries[p][0]:
            nxt = summaries[p]
    return out


def release_fill(r: dict, carry: np.ndarray, N: int, last_arrival: int) -> dict:
    """For each query of a sorted chunk: ``rel`` and ``arrival[rel]`` (``N`` / last arrival if never)."""
    kinds = r["kind"]
    pos = np.flatnonzero(kinds == 1)
    qs = np.flatnonzero(kinds == 0)
    j = np.searchsorted(pos, qs, side="left")  # the next change point at or after the query
    inside = j < len(pos)
    cp_a = np.where(inside, r["a"][pos[np.minimum(j, max(len(pos) - 1, 0))]] if len(pos) else 0, carry[1])
    cp_arr = np.where(inside, r["arrival"][pos[np.minimum(j, max(len(pos) - 1, 0))]] if len(pos) else 0, carry[2])
    has = inside | bool(carry[0])
    a, arr = r["a"][qs], r["arrival"][qs]
    return {
        "a": a,
        "rel": np.where(has, np.maximum(a, cp_a), N).astype(INT),
        "rel_us": np.where(has, np.maximum(arr, cp_arr), last_arrival).astype(INT),
    }


def _sort_release(r: dict) -> np.ndarray:
    return np.lexsort([r["a"], r["kind"], r["value"]])


# ---------------------------------------------------------------- drivers

def progress_chunks(chunks: list[dict], n: int, windows, policy: PolicySpec, release_chunks: int | None = None,
                    schedule=None) -> Facts:
    """The partition-wise pass on in-memory chunks (tests; the Spark driver mirrors it).

    ``chunks`` are consecutive slices of the replay order (dicts of
    ``stream, row, ts, arrival``).  Returns the concatenated facts plus
    ``rel`` and ``rel_us`` columns.  ``schedule``: a recall-target policy's
    decisions (:func:`scheduled`).
    """
    s1 = [summary1(c, n) for c in chunks]
    offsets, Mc, N = carries_from(s1, n)
    Kc = [np.zeros(n, INT)] * len(chunks)
    if policy.name == "mpkslack" or schedule is not None:
        Kc = prefix_max([summary2(c, n, m) for c, m in zip(chunks, Mc)], np.zeros(n, INT))
    s3 = [summary3(c, n, policy, m, k, schedule) for c, m, k in zip(chunks, Mc, Kc)]
    width = 1 if policy.family == SORTING else n
    carried = prefix_max(s3, np.full(width, NEG_INF, INT))
    Rc = [int(x[0]) if policy.family == SORTING else NEG_INF for x in carried]
    Hc = [x if policy.family == SYMMETRIC else np.full(n, NEG_INF, INT) for x in carried]
    parts = [facts(c, n, windows, policy, o, m, k, r, h, schedule)
             for c, o, m, k, r, h in zip(chunks, offsets, Mc, Kc, Rc, Hc)]
    f = {k: np.concatenate([p[k] for p in parts]) for k in fact_columns(n)} if parts else {}
    last_arrival = int(f["arrival"][-1]) if N else 0
    rel = np.full(N, N, dtype=INT)
    rel_us = np.full(N, last_arrival, dtype=INT)
    if policy.family == SORTING and N:
        r = release_rows(f)
        order = _sort_release(r)
        r = {k: v[order] for k, v in r.items()}
        pieces = np.array_split(np.arange(len(r["a"])), release_chunks or len(chunks))
        rc = [{k: v[p] for k, v in r.items()} for p in pieces]
        carries = release_carries([release_summary(x) for x in rc])
        for x, cy in zip(rc, carries):
            got = release_fill(x, cy, N, last_arrival)
            rel[got["a"]] = got["rel"]
            rel_us[got["a"]] = got["rel_us"]
    f["rel"], f["rel_us"] = rel, rel_us
    return Facts(columns=f)


def driver_facts(ts, arrival, windows, policy: PolicySpec, bad_arrivals=None, keys=None) -> Facts:
    """The same columns from :mod:`~streamjoin.pipelines.replay.progress`, computed on
    the driver; each column is built when first read (the Spark engine's
    planes read a few of them and mostly use :attr:`Facts.replay` /
    :attr:`Facts.decisions`)."""
    # M is kept for the recall-target controllers; a fixed sorting policy reads it one stream at a time
    replay = build_replay(list(ts), list(arrival), keep_running_max=policy.adaptive)
    dec = decide(replay, np.asarray(windows, dtype=INT), policy, bad_arrivals=bad_arrivals, keys=keys)
    return facts_from_replay(replay, dec)


@dataclass
class Facts:
    """Every tuple's progress facts: the columns of :func:`fact_columns` plus
    ``rel`` and ``rel_us``, read by name (``facts["ts"]``).

    From the partition-wise pass (:func:`progress_chunks`, the Spark pass)
    every column is in ``columns``, in the order of the tuples' replay index
    ``a``.  From the driver's replay (:func:`facts_from_replay`) ``replay``
    and ``decisions`` are that replay, and each column is built from them on
    first read (``builders``): the Spark engine's planes read a few columns
    and mostly use the replay itself.
    """

    columns: dict[str, np.ndarray]
    replay: Replay | None = None
    decisions: Decisions | None = None
    builders: dict[str, Callable[[], np.ndarray]] = field(default_factory=dict, repr=False)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.columns:
            if name not in self.builders:
                raise KeyError(name)
            self.columns[name] = self.builders.pop(name)()
        return self.columns[name]


def facts_from_replay(replay: Replay, dec: Decisions) -> Facts:
    """The fact columns (:func:`fact_columns` plus ``rel``, ``rel_us``) of a
    driver-side replay, in arrival order, each built when first read."""
    n, N = replay.n, replay.N
    zeros = lambda: np.zeros(N, INT)  # noqa: E731
    b = {"a": lambda: np.arange(N, dtype=INT), "stream": lambda: replay.stream, "row": lambda: replay.row,
         "ts": lambda: replay.ts, "arrival": lambda: replay.arrival,
         "T": lambda: replay.T, "delay": lambda: replay.delay}
    for i in range(n):
        b[f"M{i}"] = lambda i=i: replay.M[i]
    if dec.family == SORTING:
        b["R"] = lambda: dec.R
        b["R_prev"] = lambda: np.concatenate([[NEG_INF], dec.R[:-1]]).astype(INT) if N else dec.R
        b["dropped"] = lambda: dec.dropped
        for k in range(n):
            b[f"H{k}"] = zeros
        b["expired"] = lambda: np.zeros(N, bool)
        b["rel"] = lambda: dec.release.astype(INT)
        b["rel_us"] = lambda: replay.arrival[np.minimum(dec.release, N - 1)] if N else zeros()
    else:
        b["R"], b["R_prev"], b["dropped"] = zeros, zeros, lambda: np.zeros(N, bool)
        for k in range(n):
            b[f"H{k}"] = lambda k=k: dec.H[k]
        b["expired"] = lambda: dec.expired
        b["rel"] = lambda: np.full(N, N, INT)
        b["rel_us"] = lambda: np.full(N, int(replay.arrival[-1]) if N else 0, INT)
    return Facts(columns={}, replay=replay, decisions=dec, builders=b)


def replay_from_facts(f: Facts, n: int, policy: PolicySpec, sizes: Sequence[int]) -> tuple[Replay, Decisions]:
    """Rebuild :class:`Replay` / :class:`Decisions` (driver-side reports) from
    collected facts (:attr:`Facts.replay` and :attr:`Facts.decisions`, when the
    driver computed them)."""
    if f.replay is not None:
        return f.replay, f.decisions
    order = np.argsort(f["a"], kind="stable")
    g = {k: np.asarray(v)[order] for k, v in f.columns.items()}
    N = len(g["a"])
    stream = g["stream"].astype(np.int32)
    row = g["row"].astype(INT)
    index_of = []
    for i in range(n):
        pos = np.empty(sizes[i], dtype=np.int32 if N < 2**31 else INT)
        sel = np.flatnonzero(stream == i)
        pos[row[sel]] = sel
        index_of.append(pos)
    M = np.vstack([g[f"M{i}"] for i in range(n)]) if N else np.empty((n, 0), INT)
    replay = Replay(n=n, stream=stream, ts=g["ts"].astype(INT), arrival=g["arrival"].astype(INT),
                    index_of=index_of, T=g["T"].astype(INT), delay=g["delay"].astype(INT))
    replay.M, replay.row = M, row  # collected already: no need to recompute them
    if policy.family == SORTING:
        release = np.where(g["dropped"], N, g["rel"]).astype(INT)
        dec = Decisions(family=SORTING, R=g["R"].astype(INT), dropped=g["dropped"].astype(bool), release=release)
    else:
        H = np.vstack([g[f"H{k}"] for k in range(n)]) if N else np.empty((n, 0), INT)
        dec = Decisions(family=SYMMETRIC, expired=g["expired"].astype(bool))
        dec.H = H.astype(INT)
    return replay, dec
