"""CTR -- constrained tuple routing (seed 000, Figs. 8, 12, 15; theorems C, D).

Every stream is cut into segments of length ``T`` by event time
(``slot = floor((ts - base) / T)``); each segment is *stored* on one
partition, chosen by least load (LLF; among partitions within
``LOCALITY_SLACK`` of the least load, the one already storing most of the
segment's probe partners -- SPEC §6: storing only where the partners live
would collapse everything onto one host).  The routing table maps
``(stream, slot) -> partition`` and forgets a slot once no future tuple can
meet it (``slot end + max W`` behind the current time).

A combination is produced by its *prober*: the member with the largest
``(ts, stream)``.  The prober meets the other streams one hop at a time in
its stream's probe order ``i -> i1 -> i2 ...``; hop ``h`` needs the segments
of ``i_h`` overlapping ``[t_j - W_{i_h}, t_{j+1})`` (``j`` = the prober's
slot)::

    stream i   segment j = [t_j, t_j+T) stored on p2
    stream i1  |  s  |  s  |  s  |   segments overlapping [t_j - W_i1, t_j + T)
                 p0    p2    p3      -> cover {p0, p3} (+ p2 where the probe already is)
    hop 1: the prober's copies go to p0, p3 (p2 holds it already) and join the
           i1 tuples *stored* there  -> partial results (y, x1)
    hop 2: each partial on host v goes to v itself plus the cover of the i2
           segments not stored on v, and joins the i2 tuples stored there

The host set of a hop is a greedy weighted minimum set cover (weights = LLF
load) of the needed segments; every partial joins only the tuples *stored*
on the host it is at (the route annotation "probe ``eta`` at ``v`` only"),
and every segment is stored exactly once, so each extension happens at one
host -- by induction on the hops each combination is produced exactly once
(theorem C).  Replication of original tuples is ``M_i`` copies (1 stored +
probe copies); intermediate results are shipped too (theorem D's ``O*``).

Worked example: ``T = 10``, ``W = (5, 5)``, ``S0`` slot 1 (``[10, 20)``) on
p1, ``S1`` slot 0 on p0 and slot 1 on p1.  A prober ``y = (S0, ts 12)``
needs ``S1`` in ``[5, 20)`` = slots 0 and 1 -> hosts {p1 (own), p0}: one
probe copy to p0.  ``(y, x = (S1, 8))`` is produced on p0, where ``x`` is
stored; ``(y, (S1, 11))`` on p1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from . import DEFAULT_COSTS, Capacity, Histogram, Loads, greedy_set_cover, probe_pairs_columns

LOCALITY_SLACK = 0.10


@dataclass
class CtrPlan:
    base: int
    T: int
    host: np.ndarray            # (n, slots): storage partition of each segment
    windows: np.ndarray
    orders: list[list[int]]     # per prober stream: the other streams in probe order
    partitions: int
    weights: np.ndarray         # final load per partition (set-cover weights)
    table_peak: int = 0
    estimated: Loads | None = None
    _dest_cache: dict = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        return len(self.windows)

    @property
    def slots(self) -> int:
        return self.host.shape[1]

    def slot(self, ts: np.ndarray) -> np.ndarray:
        return np.clip((np.asarray(ts, dtype=np.int64) - self.base) // self.T, 0, self.slots - 1)

    def needed(self, i: int, j: int, k: int) -> range:
        """Slots of stream ``k`` overlapping ``[t_j - W_k, t_{j+1})`` (the prober segment's window)."""
        lo = self.base + j * self.T - int(self.windows[k])
        first = max(0, (lo - self.base) // self.T) if j > 0 or lo >= self.base else 0
        return range(int(first), j + 1)

    def dest(self, i: int, j: int, hop: int, at: int) -> tuple[int, ...]:
        """Hosts a partial of prober segment ``(i, j)`` at host ``at`` visits for hop ``hop`` (1-based).

        ``at`` itself (local join with what is stored there) plus a greedy
        weighted set cover of the partner segments not stored on ``at``.
        """
        key = (i, j, hop, at)
        got = self._dest_cache.get(key)
        if got is not None:
            return got
        k = self.orders[i][hop - 1]
        segs = [s for s in self.needed(i, j, k)]
        remote = {s for s in segs if self.host[k, s] != at}
        subsets: dict[int, set] = {}
        for s in remote:
            subsets.setdefault(int(self.host[k, s]), set()).add(s)
        cover = greedy_set_cover(remote, subsets, {h: float(self.weights[h]) for h in subsets}) if remote else []
        got = tuple(sorted({at, *cover}))
        self._dest_cache[key] = got
        return got

    def to_dict(self) -> dict:
        return {"segment_us": int(self.T), "segments_per_stream": int(self.slots), "routing_table_peak": int(self.table_peak),
                "probe_orders": [list(map(int, o)) for o in self.orders],
                "segment_hosts": [list(map(int, h)) for h in self.host]}


def plan(hist: Histogram, windows: Sequence[int], T: int, partitions: int, order: Sequence[int],
         weights=(1.0, 1.0, 1.0), capacity: Capacity | None = None, costs=DEFAULT_COSTS,
         selectivity: dict | None = None) -> CtrPlan:
    """Store every segment by LLF (with co-location among near-least hosts) and fix probe orders.

    A segment's estimated use (its storage host's): work ``tuple_cost x c +
    result_cost x`` its probes' candidate pairs, ``c`` tuples held ``W_k``
    each, ``c`` tuples shipped (``c``: its tuples, from the histogram)."""
    W = np.asarray(windows, dtype=np.int64)
    n = len(W)
    T = max(int(T), 1)
    base = hist.t0
    slots = max(1, -(-(hist.t_end - base) // T))
    cnt, use = segment_use(hist, W, T, slots, costs, selectivity)
    loads = Loads(partitions, tuple(weights), (capacity or Capacity()).of(use.sum(axis=(0, 1)) / max(partitions, 1)))
    wmax = int(W.max()) if n else 0
    back = -(-wmax // T) + 1
    host, peak = store(loads, cnt, use, partitions, back)
    full = list(order)
    orders = [[k for k in full if k != i] for i in range(n)]
    plan_ = CtrPlan(base=base, T=T, host=host, windows=W, orders=orders, partitions=partitions,
                    weights=loads.w(), table_peak=peak, estimated=loads)
    return plan_


def segment_use(hist: Histogram, W: np.ndarray, T: int, slots: int, costs=DEFAULT_COSTS,
                selectivity: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(n, slots)`` tuples of every segment and ``(n, slots, 3)`` their estimated
    use (per second / mean held, as :func:`plan` places them), columnar."""
    n = len(W)
    base = hist.t0
    span = max(hist.t_end - base, 1)
    tc, rc = costs
    lo = base + T * np.arange(slots, dtype=np.int64)
    cnt = np.vstack([hist.count(k, lo, lo + T) for k in range(n)]).reshape(n, slots)
    use = np.zeros((n, slots, 3))
    use[:, :, 0] = tc * cnt / (span / 1e6)
    if rc:
        for k in range(n):
            one = np.zeros((n, slots))
            one[k] = cnt[k]
            use[k, :, 0] += rc * probe_pairs_columns(hist, one, lo, lo + T, W.tolist(), selectivity) / (span / 1e6)
    use[:, :, 1] = cnt * W.reshape(-1, 1) / span
    use[:, :, 2] = cnt / (span / 1e6)
    return cnt, use


def store(loads: Loads, cnt: np.ndarray, use: np.ndarray, partitions: int, back: int) -> tuple[np.ndarray, int]:
    """Each segment's storage host, slot by slot, stream by stream (LLF, co-location
    among the near-least hosts); the sequential part of :func:`plan`, over plain
    floats (the same additions in the same order as numpy scalars would make).
    Returns the hosts and the routing table's peak."""
    n, slots = cnt.shape
    hosts = [[0] * slots for _ in range(n)]
    c = cnt.tolist()
    u = use.tolist()
    for j in range(slots):
        lo = max(0, j - back)
        for k in range(n):
            w = loads.w()
            floor = w.min()
            w = w.tolist()
            near = [p for p in range(partitions) if w[p] <= floor * (1 + LOCALITY_SLACK) + 1e-9]
            if len(near) > 1:
                # co-location score: partner segments (other streams, slots in reach) already on p
                score = dict.fromkeys(near, 0.0)
                for m in range(n):
                    if m == k:
                        continue
                    hm, cm = hosts[m], c[m]
                    for jj in range(lo, j + 1 if m < k else j):
                        q = hm[jj]
                        if q in score:
                            score[q] += cm[jj]
                p = min(near, key=lambda p: (-score[p], w[p], p))
            else:
                p = near[0]
            hosts[k][j] = p
            loads.add(p, *u[k][j])
    # routing table: slots still reachable by a future tuple -- at most back + 1 per stream,
    # the most once that many slots have been stored
    peak = min(slots, back + 1) * n
    return np.asarray(hosts, dtype=np.int64).reshape(n, slots), peak


def storage(plan: CtrPlan, k: int, ts: np.ndarray) -> np.ndarray:
    """Storage partition of each tuple of stream ``k``."""
    return plan.host[k, plan.slot(ts)]


def stored_per_partition(plan: CtrPlan, ts: Sequence[np.ndarray]) -> np.ndarray:
    """``(n, P)``: tuples of each stream stored (and held) on each partition."""
    return np.vstack([np.bincount(storage(plan, k, t), minlength=plan.partitions) for k, t in enumerate(ts)]
                     ) if len(ts) else np.zeros((0, plan.partitions), dtype=np.int64)


def copies_moved_in(plan: CtrPlan, ts: Sequence[np.ndarray]) -> np.ndarray:
    """``(P,)``: hop-1 probe copies each partition receives from another one -- the
    copies :func:`probe_copies` sends away from the storage host, counted per
    segment (every tuple of segment ``(i, j)`` goes to the same hosts), never per tuple."""
    got = np.zeros(plan.partitions, dtype=np.int64)
    for i, t in enumerate(ts):
        per_slot = np.bincount(plan.slot(t), minlength=plan.slots) if len(t) else np.zeros(0, np.int64)
        for j in np.flatnonzero(per_slot).tolist():
            at = int(plan.host[i, j])
            for d in plan.dest(i, j, 1, at):
                if d != at:
                    got[d] += per_slot[j]
    return got


def probe_copies(plan: CtrPlan, i: int, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hop-1 copies of stream ``i``'s tuples: ``(tuple index, partition)`` (includes the storage host)."""
    slots = plan.slot(ts)
    idx_out, part_out = [], []
    for j in np.unique(slots):
        sel = np.flatnonzero(slots == j)
        at = int(plan.host[i, j])
        for d in plan.dest(i, int(j), 1, at):
            idx_out.append(sel)
            part_out.append(np.full(len(sel), d, dtype=np.int64))
    if not idx_out:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(idx_out), np.concatenate(part_out)
