"""ATR -- aligned tuple routing (seed 000, Figs. 7, 11, 14; theorems A, B).

The master stream ``A`` (the fastest) is cut by event time into disjoint
segments ``[t_j, t_{j+1})``, each placed on the least-loaded partition
(LLF).  Every slave stream ``i`` sends ``[t_j - W_i, t_{j+1} + W_A)`` to the
same partition, so the partition of segment ``j`` holds every member of
every combination whose master member falls in ``j``::

    master A   |--- seg 0 (p1) ---|--- seg 1 (p0) ---|--- seg 2 (p1) ---|
    slave i  [----- to p1 ------------)
                            [-W_i ----- to p0 -----------+W_A)
                     overlap = W_i + W_A per boundary  ->  theorem B:
                     extra tuples/s = sum_{i != A} r_i (W_i + W_A) / T

Ownership (no duplicates, no loss -- theorem A): a combination is produced
only by the partition owning the segment of its master member.  With role
switches (the master may change at a segment end, when another stream has
become faster, and ``T`` may change there too) the rule generalises to

    owner(c) = min { j : ts of c's member from stream A_j  <  t_{j+1} }

which is the segment of the master member while the master does not change,
and picks exactly one segment across a switch.  The partition of ``j`` must
then receive, from stream ``k``, ``[L_j - W_k, t_{j+1} + W_{A_j})`` (slaves)
and ``[L_j, t_{j+1})`` (the master), where ``L_j = t_j`` if ``A_j`` was also
the master of ``j - 1`` and ``t_j - W_{A_j}`` right after a switch (the
seed's transition phase).

Worked example (the seed's Fig. 7): ``r = 1/s``, ``T = 5``, ``W = (2, 2, 3)``,
master ``S1`` with segments ``[0,5)``, ``[5,10)``, ``[10,15)`` on ``v1, v2,
v3``: ``S2`` sends ``[-2, 7)`` to ``v1``, ``[3, 12)`` to ``v2``; ``S3`` sends
``[-3, 7)`` to ``v1``, ``[2, 12)`` to ``v2`` -- tuples of ``S2`` in
``[3, 7)`` go to both (``W_2 + W_1 = 4`` per boundary).  A pair
``(s1 @ 6, s2 @ 5)`` is owned by segment 1 (``6 < 10``), produced on ``v2``
only, although ``s2 @ 5`` is on ``v1`` too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from . import BIG, DEFAULT_COSTS, Capacity, Histogram, Loads, place, probe_pairs, probe_pairs_columns, theorem_b


#: another stream must be this much faster (over the segment just finished) to
#: become the master: with similar rates, sampling noise would otherwise flip the
#: roles at every segment end, and each switch replicates a transition range
ROLE_SWITCH_MARGIN = 1.2


@dataclass
class AtrPlan:
    """Segments of the master stream(s): ``start[j]`` .. ``end[j]`` (event time, us)."""

    start: np.ndarray          # start[0] = -BIG
    end: np.ndarray            # end[-1] = +BIG
    master: np.ndarray
    part: np.ndarray
    windows: np.ndarray
    partitions: int
    lengths: list[int] = field(default_factory=list)     # T used for each segment
    switches: int = 0
    adaptations: list[tuple[int, int]] = field(default_factory=list)   # (segment, new T)
    estimated: Loads | None = None

    @property
    def n(self) -> int:
        return len(self.windows)

    def ranges(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Half-open event-time range each segment receives from stream ``k``."""
        W = self.windows
        J = len(self.start)
        prev = np.concatenate([[-1], self.master[:-1]])
        L = np.where((prev == self.master) | (np.arange(J) == 0), self.start, self.start - W[self.master])
        L[0] = -BIG
        is_master = self.master == k
        lo = np.where(is_master, L, L - W[k])
        hi = np.where(is_master, self.end, self.end + W[self.master])
        lo[0], hi[-1] = -BIG, BIG
        return lo, hi

    def to_dict(self) -> dict:
        return {"segments": int(len(self.start)), "segment_us_mean": float(np.mean(self.lengths)) if self.lengths else None,
                "role_switches": self.switches, "adaptations": len(self.adaptations),
                "masters": sorted({int(m) for m in self.master}),
                "segment_partitions": [int(p) for p in self.part]}


def plan(hist: Histogram, windows: Sequence[int], T: int, partitions: int, weights=(1.0, 1.0, 1.0),
         adapt: bool = False, delta: int | None = None, capacity: Capacity | None = None,
         costs=DEFAULT_COSTS, selectivity: dict | None = None) -> AtrPlan:
    """Cut the master stream(s) into segments and place them by LLF (seed Fig. 14).

    The cut does not depend on the placement: segments first, each with its
    estimated use (:func:`segment_use`), then LLF places them in order.  With a
    fixed ``T`` the cut is columnar (:func:`fixed_cut`: every segment's counts
    at once, the role switches a scan over them); ``adapt`` (``T`` changes as
    it goes) steps segment by segment (:func:`stepwise_cut`).  Both give the
    same segments, masters and uses."""
    W = np.asarray(windows, dtype=np.int64)
    T = max(int(T), 1)
    if adapt:
        starts, ends, masters, lengths, adaptations, use, switches = stepwise_cut(
            hist, W, T, partitions, delta, costs, selectivity)
    else:
        starts, ends, masters, use, switches = fixed_cut(hist, W, T, costs, selectivity)
        lengths, adaptations = [T] * len(starts), []
    t_end = hist.t_end
    span = max(t_end - hist.t0, 1)
    parts, loads = place(np.asarray(use) / np.array([span / 1e6, span, span / 1e6]), partitions, weights, capacity)
    start = np.asarray(starts, dtype=np.int64)
    start[0] = -BIG
    end = np.asarray(ends, dtype=np.int64)
    end[-1] = BIG
    return AtrPlan(start=start, end=end, master=np.asarray(masters, dtype=np.int64), part=parts,
                   windows=W, partitions=partitions, lengths=lengths, switches=switches, adaptations=adaptations,
                   estimated=loads)


def _sum_rows(x: np.ndarray) -> np.ndarray:
    """Column sums of ``(n, J)`` added in order, ``(x[0] + x[1]) + ...`` -- the order
    numpy's 1-D ``sum`` adds fewer than 8 numbers in (so each column's sum is the
    one :func:`segment_use` gets, to the last bit; 8 streams or more: per column)."""
    n = x.shape[0]
    if n == 0 or n >= 8:
        return np.array([float(c.sum()) for c in x.T]) if n else np.zeros(x.shape[1])
    total = x[0].copy()
    for k in range(1, n):
        total = total + x[k]
    return total


def fixed_cut(hist: Histogram, W: np.ndarray, T: int, costs=DEFAULT_COSTS, selectivity: dict | None = None):
    """The segments of a fixed ``T``: ``(starts, ends, masters, use (J, 3), switches)``,
    columnar -- what :func:`stepwise_cut` gives without ``adapt``, to the last bit."""
    n = len(W)
    t0, t_end = hist.t0, hist.t_end
    J = max(1, -(-(t_end - t0) // T))
    starts = t0 + T * np.arange(J, dtype=np.int64)
    ends = starts + T
    rates = hist.rates()
    master0 = int(np.argmax(rates)) if len(rates) else 0
    seen = np.vstack([hist.count(k, starts, ends) for k in range(n)]) if n else np.zeros((0, J))
    # role switches: only at a segment end, to the fastest stream of the segment just finished
    masters = np.empty(J, dtype=np.int64)
    masters[0] = master0
    switches = 0
    if J > 1 and n:
        fastest = np.argmax(seen, axis=0).tolist()
        top = seen.max(axis=0).tolist()
        rows = seen.tolist()
        m = master0
        for j in range(J - 1):
            if top[j] > ROLE_SWITCH_MARGIN * rows[m][j]:
                m = fastest[j]
                switches += 1
            masters[j + 1] = m
    prev = np.concatenate([[-1], masters[:-1]])
    L = np.where((np.arange(J) == 0) | (prev == masters), starts, starts - W[masters])
    got = np.vstack([hist.count(k, np.where(masters == k, L, L - W[k]), np.where(masters == k, ends, ends + W[masters]))
                     for k in range(n)]) if n else np.zeros((0, J))
    tc, rc = costs
    total = _sum_rows(got)
    work = tc * total
    if rc:
        work = work + rc * probe_pairs_columns(hist, seen, starts, ends, W.tolist(), selectivity)
    held = _sum_rows(got * W.reshape(-1, 1))
    use = np.column_stack([work, held, total]) if J else np.zeros((0, 3))
    return starts.tolist(), ends.tolist(), masters.tolist(), use, switches


def stepwise_cut(hist: Histogram, W: np.ndarray, T: int, partitions: int, delta: int | None = None,
                 costs=DEFAULT_COSTS, selectivity: dict | None = None, adapt: bool = True):
    """The segments one at a time (``--adapt-segment``: ``T`` may change at each end):
    ``(starts, ends, masters, lengths, adaptations, use, switches)``.  ``T`` never
    goes below a quarter of the ``T`` given (so the segments stay within about
    four times the checked count).  Without ``adapt`` this loop is the reference
    :func:`fixed_cut` is tested against."""
    n = len(W)
    starts, ends, masters, lengths, adaptations, use = [], [], [], [], [], []
    rates = hist.rates()
    master = int(np.argmax(rates)) if len(rates) else 0
    t = hist.t0
    t_end = hist.t_end
    switches = 0
    delta = delta or max(T // 4, 1)
    floor = max(T // 4, 1)   # adapt never goes below a quarter of the checked T (docs/semantics.md)
    while True:
        end = t + T
        j = len(starts)
        prev_master = masters[-1] if masters else master
        L = t if (j == 0 or prev_master == master) else t - int(W[master])
        use.append(segment_use(hist, W, master, L, t, end, costs, selectivity))
        starts.append(t)
        ends.append(end)
        masters.append(master)
        lengths.append(T)
        if end >= t_end:
            break
        # only at a segment end: role switch to the fastest stream of the segment just finished
        seen = np.array([float(hist.count(k, t, end)) for k in range(n)])
        fastest = int(np.argmax(seen))
        if seen[fastest] > ROLE_SWITCH_MARGIN * seen[master]:
            master = fastest
            switches += 1
        if not adapt:
            t = end
            continue
        # try T - dT and T + dT on the sample just seen (seed: sampling-based profiling)
        span = max(end - hist.t0, T)
        r = np.array([float(hist.count(k, max(hist.t0, end - 8 * T), end)) for k in range(n)]) / (min(span, 8 * T) / 1e6)
        horizon = max(t_end - hist.t0, 1) / max(partitions, 1)

        def cost(x):
            over = theorem_b(r, W.tolist(), master, x) / max(r.sum(), 1e-12)
            return over + x / horizon   # replication per tuple + load-balance granularity
        best = min((T - delta, T, T + delta), key=lambda x: (cost(x), x) if x >= floor else (float("inf"), x))
        if best != T:
            T = best
            adaptations.append((j + 1, T))
        t = end
    return starts, ends, masters, lengths, adaptations, use, switches


def segment_use(hist: Histogram, W: np.ndarray, master: int, L: int, t: int, end: int, costs=DEFAULT_COSTS,
                selectivity: dict | None = None) -> tuple[float, float, float]:
    """Estimated (work, tuple-us held, tuples shipped) of one segment: every
    stream's receive range (``[L, end)`` for the master, ``[L - W_k, end + W_A)``
    for a slave) is shipped to and processed by its partition; each received
    tuple of stream ``k`` is held ``W_k``; the tuples the segment owns
    (``[t, end)``) probe the others' windows (:func:`~.probe_pairs`)."""
    n = len(W)
    got = np.array([float(hist.count(k, L, end)) if k == master else float(hist.count(k, L - W[k], end + W[master]))
                    for k in range(n)])
    tc, rc = costs
    work = tc * got.sum()
    if rc:
        own = [float(hist.count(k, t, end)) for k in range(n)]
        work += rc * probe_pairs(hist, own, t, end, W.tolist(), selectivity)
    return work, float((got * W).sum()), float(got.sum())


def copies_per_partition(plan: AtrPlan, ts: Sequence[np.ndarray]) -> np.ndarray:
    """``(n, P)``: tuples of each stream each partition receives (and holds)."""
    out = np.zeros((len(ts), plan.partitions), dtype=np.int64)
    for k, t in enumerate(ts):
        _, p = assign(plan, k, t)
        out[k] = np.bincount(p, minlength=plan.partitions)
    return out


def assign(plan: AtrPlan, k: int, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Copies of stream ``k``'s tuples: ``(tuple index, partition)``, one per partition:
    a tuple sent to a partition serves every segment placed there (the
    partition runs one local join and keeps the combinations it owns)."""
    idx, seg = assign_segments(plan, k, ts)
    if not len(idx):
        return idx, idx
    # np.unique without its hash table: the keys are sorted by tuple already, so a
    # stable sort only merges short runs (several times faster on millions of tuples)
    key = np.sort(idx * plan.partitions + plan.part[seg], kind="stable")
    key = key[np.concatenate([[True], key[1:] != key[:-1]])]
    return key // plan.partitions, key % plan.partitions


def received(plan: AtrPlan, k: int, ts: np.ndarray, p: int) -> np.ndarray:
    """Which of stream ``k``'s tuples partition ``p`` receives (a mask): the same rows as
    :func:`assign`'s copies to ``p``, from the union of the receive ranges of ``p``'s
    segments -- a tuple is in it iff, among the ranges starting at or before it,
    the furthest-reaching one ends after it (one ``searchsorted``, no tuple x
    segment expansion)."""
    lo, hi = plan.ranges(k)
    mine = plan.part == p
    lo, hi = lo[mine], hi[mine]
    order = np.argsort(lo, kind="stable")
    lo, reach = lo[order], np.maximum.accumulate(hi[order])
    ts = np.asarray(ts, dtype=np.int64)
    if not len(lo):
        return np.zeros(len(ts), bool)
    i = np.searchsorted(lo, ts, side="right") - 1
    return (i >= 0) & (reach[np.maximum(i, 0)] > ts)


def assign_segments(plan: AtrPlan, k: int, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (tuple, segment) with the tuple inside the segment's receive range."""
    lo, hi = plan.ranges(k)
    ts = np.asarray(ts, dtype=np.int64)
    # segments are sorted by start; a range is at most max(T) + 2 max(W) long
    reach = int(max(plan.lengths, default=1) + 2 * int(plan.windows.max()) + 1)
    first = np.maximum(np.searchsorted(plan.start, ts - reach, side="left") - 1, 0)
    last = np.searchsorted(plan.start, ts + reach, side="right")
    counts = last - first
    idx = np.repeat(np.arange(len(ts), dtype=np.int64), counts)
    seg = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(first, counts)
    ok = (lo[seg] <= ts[idx]) & (ts[idx] < hi[seg])
    return idx[ok], seg[ok]


def owner_term(plan: AtrPlan, k: int, ts: np.ndarray) -> np.ndarray:
    """Stream ``k``'s term of :func:`owner_segment` for members at ``ts``: the first
    segment ``j >= seg(ts)`` whose master is ``k`` (``J`` where there is none).  It
    never decreases as ``ts`` grows (the Spark engine's counted run splits a band
    where the stored member's term changes, ``engines/spark/counted``)."""
    J = len(plan.start)
    pos = np.flatnonzero(plan.master == k)
    ts = np.asarray(ts, dtype=np.int64)
    if not len(pos):
        return np.full(len(ts), J, dtype=np.int64)
    seg = np.maximum(np.searchsorted(plan.start, ts, side="right") - 1, 0)
    i = np.searchsorted(pos, seg)
    return np.where(i < len(pos), pos[np.minimum(i, len(pos) - 1)], J).astype(np.int64)


def owner_segment(plan: AtrPlan, member_ts: Sequence[np.ndarray]) -> np.ndarray:
    """``min{j : ts of the member from stream A_j < end_j}`` for every combination:
    the smallest of the members' :func:`owner_term`."""
    J = len(plan.start)
    m = len(member_ts[0]) if member_ts else 0
    best = np.full(m, J, dtype=np.int64)
    for k, t in enumerate(member_ts):
        best = np.minimum(best, owner_term(plan, k, t))
    return best


def owner_partition(plan: AtrPlan, member_ts: Sequence[np.ndarray]) -> np.ndarray:
    return plan.part[owner_segment(plan, member_ts)]
