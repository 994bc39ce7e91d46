"""Routing a multi-way window join over partitions (seed 000, SPEC §6).

Two routers spread the join; both must produce every valid combination
exactly once (theorems A and C), which the Spark engine checks against the
local engine in the tests.

* :mod:`.atr` -- *aligned* tuple routing: the fastest stream is the master,
  cut into disjoint segments; slave tuples are replicated to every segment
  whose window they can meet.  One hop; a combination is produced where its
  master member's segment lives.
* :mod:`.ctr` -- *constrained* tuple routing: every stream is cut into
  segments stored once (least load); each segment's probes go, hop by hop
  along the probe order, to a weighted minimum set cover of the hosts
  holding the partner segments; intermediate results hop on.

This module holds what both share: the load model (LLF), the greedy weighted
set cover, the rate histogram the planners read (a summary, never the
tuples) and the overhead formulas of theorems B and D used by ``auto``.

Load of a partition (seed 000, LLF)::

    w_p = w1 * cpu_p / mean(cpu) + w2 * mem_p / mean(mem) + w3 * net_p / mean(net)

where cpu counts tuples probed plus candidates produced, mem tuples stored,
net tuples shipped to the partition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

ROUTER_NAMES = ("none", "atr", "ctr", "auto")
BIG = 2**62


@dataclass
class Loads:
    """Running per-partition resource use and the LLF choice."""

    partitions: int
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    cpu: np.ndarray = field(default=None)
    mem: np.ndarray = field(default=None)
    net: np.ndarray = field(default=None)

    def __post_init__(self):
        P = self.partitions
        self.cpu = np.zeros(P) if self.cpu is None else self.cpu
        self.mem = np.zeros(P) if self.mem is None else self.mem
        self.net = np.zeros(P) if self.net is None else self.net

    def w(self) -> np.ndarray:
        def share(x):
            m = x.mean()
            return x / m if m > 0 else np.zeros_like(x)
        w1, w2, w3 = self.weights
        return w1 * share(self.cpu) + w2 * share(self.mem) + w3 * share(self.net)

    def least(self, candidates: Sequence[int] | None = None) -> int:
        w = self.w()
        cand = range(self.partitions) if candidates is None else candidates
        return min(cand, key=lambda p: (w[p], self.cpu[p] + self.mem[p] + self.net[p], p))

    def add(self, p: int, cpu: float = 0.0, mem: float = 0.0, net: float = 0.0) -> None:
        self.cpu[p] += cpu
        self.mem[p] += mem
        self.net[p] += net


def imbalance(load: np.ndarray) -> float:
    """max / mean of per-partition load (1.0 = perfect)."""
    load = np.asarray(load, dtype=float)
    m = load.mean() if len(load) else 0.0
    return float(load.max() / m) if m > 0 else 1.0


def greedy_set_cover(ground: Sequence, subsets: dict[int, set], weights: dict[int, float]) -> list[int]:
    """Greedy weighted minimum set cover (seed 000, Fig. 15): repeatedly take
    the subset minimising ``w_j / |A_j \\ covered|``; ties by host id.

    Raises ``ValueError`` if the subsets cannot cover ``ground``.
    """
    need = set(ground)
    chosen: list[int] = []
    while need:
        best, key = None, None
        for h, s in subsets.items():
            gain = len(s & need)
            if gain == 0 or h in chosen:
                continue
            k = ((weights.get(h, 0.0) + 1e-9) / gain, h)
            if key is None or k < key:
                best, key = h, k
        if best is None:
            raise ValueError("segments cannot be covered")
        chosen.append(best)
        need -= subsets[best]
    return sorted(chosen)


@dataclass
class Histogram:
    """Tuples per stream per time bucket (event time): the planners' only input about the data."""

    t0: int
    bucket: int
    counts: np.ndarray        # (n, B)

    @property
    def cum(self) -> np.ndarray:
        return np.concatenate([np.zeros((self.counts.shape[0], 1)), np.cumsum(self.counts, axis=1)], axis=1)

    def count(self, k: int, lo, hi) -> np.ndarray:
        """Estimated tuples of stream ``k`` with ``lo <= ts < hi`` (bucket resolution)."""
        B = self.counts.shape[1]
        cum = self.cum[k]
        def pos(t):
            x = (np.asarray(t, dtype=float) - self.t0) / self.bucket
            x = np.clip(x, 0, B)
            i = np.floor(x).astype(int)
            frac = x - i
            i1 = np.minimum(i + 1, B)
            return cum[i] + (cum[i1] - cum[i]) * frac
        return np.maximum(pos(hi) - pos(lo), 0.0)

    @property
    def t_end(self) -> int:
        return self.t0 + self.bucket * self.counts.shape[1]

    def rates(self) -> np.ndarray:
        span = max(self.bucket * self.counts.shape[1], 1)
        return self.counts.sum(axis=1) / (span / 1e6)


def histogram(ts: Sequence[np.ndarray], buckets: int = 4096) -> Histogram:
    """Per-stream bucket counts of event times (what a Spark ``groupBy`` would return)."""
    nonempty = [t for t in ts if len(t)]
    if not nonempty:
        return Histogram(0, 1, np.zeros((len(ts), 1)))
    t0 = min(int(t.min()) for t in nonempty)
    t1 = max(int(t.max()) for t in nonempty) + 1
    bucket = max(1, -(-(t1 - t0) // buckets))
    B = -(-(t1 - t0) // bucket)
    counts = np.zeros((len(ts), B))
    for k, t in enumerate(ts):
        if len(t):
            counts[k] = np.bincount((np.asarray(t) - t0) // bucket, minlength=B)[:B]
    return Histogram(t0, bucket, counts)


def theorem_b(rates: Sequence[float], windows_us: Sequence[int], master: int, T_us: float) -> float:
    """ATR overhead, extra tuples per second: ``sum_{i != A} r_i (W_i + W_A) / T``."""
    WA = windows_us[master]
    return float(sum(r * (w + WA) / T_us for i, (r, w) in enumerate(zip(rates, windows_us)) if i != master))


def theorem_d(rates: Sequence[float], windows_us: Sequence[int], M: Sequence[float], orders: Sequence[Sequence[int]],
              selectivity: dict[tuple[int, int], float], M_inter: Sequence[Sequence[float]]) -> tuple[float, float]:
    """CTR overheads, extra tuples per second: ``(O_CTR, O*_CTR)``.

    ``O_CTR = sum_i (M_i - 1) r_i``: replicas of the original tuples.
    ``O*_CTR = sum_i sum_k M_ik * X_ik``: intermediate results shipped, with
    ``X_i1 = r_i * sigma(i, i1) * r_i1 W_i1`` and
    ``X_ik = X_i(k-1) * sigma(i(k-1), ik) * r_ik W_ik`` (rates per second,
    windows in seconds).
    """
    o = float(sum((m - 1.0) * r for m, r in zip(M, rates)))
    o_star = 0.0
    n = len(rates)

    def sig(a, b):
        return selectivity.get((min(a, b), max(a, b)), 1.0)

    for i in range(n):
        x = rates[i]
        prev = i
        for k, s in enumerate(orders[i][:-1]):
            x = x * sig(prev, s) * rates[s] * windows_us[s] / 1e6
            o_star += M_inter[i][k] * x
            prev = s
    return o, o_star
