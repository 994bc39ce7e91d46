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

    w_p = w1 * Phi_cpu + w2 * Phi_mem + w3 * Phi_net,   Phi_R = U_R / C_R,   w1 + w2 + w3 = 1

with three different uses (:func:`resource_use`, docs/semantics.md "Load of
a partition"): ``cpu`` = work per second (``tuple_cost`` x tuples processed
+ ``result_cost`` x candidate combinations), ``mem`` = mean tuples held
(each stored tuple of stream ``k`` is held ``W_k``: the time-integral of the
state over the span), ``net`` = tuples shipped to the partition per second
(replicas and CTR's intermediate results included).  ``C_R`` is
``--partition-capacity`` or, where not given, the fair share (total / P).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

ROUTER_NAMES = ("none", "atr", "ctr", "auto")
BIG = 2**62


#: what a unit of work costs by default (the ``--capacity`` grammar's defaults, issue 20):
#: a tuple processed 1, a candidate combination 0
DEFAULT_COSTS = (1.0, 0.0)
RESOURCES = ("cpu", "mem", "net")
#: what each resource's use is measured in (report.json routing.resource_units)
RESOURCE_UNITS = {"cpu": "work units per second (tuple_cost x tuples + result_cost x candidates)",
                  "mem": "tuples held, mean over the span (each stored tuple of stream k held W_k)",
                  "net": "tuples and intermediate results received per second"}


@dataclass(frozen=True)
class Capacity:
    """Per-partition capacity of each resource (equal for all partitions);
    ``None``: the fair share, total use / partitions (then Phi = 1 is a
    perfectly balanced partition)."""

    cpu: float | None = None     # work units per second (default costs: tuples/s)
    mem: float | None = None     # tuples held
    net: float | None = None     # tuples received per second

    def of(self, fair_share: Sequence[float]) -> np.ndarray:
        """``(3,)`` capacities: the given ones, ``fair_share`` (cpu, mem, net) for the others."""
        return np.asarray([float(getattr(self, r)) if getattr(self, r) is not None else float(f)
                           for r, f in zip(RESOURCES, fair_share)], dtype=float)

    def to_dict(self) -> dict:
        return {r: getattr(self, r) for r in RESOURCES}


def normalised(weights) -> tuple[float, float, float]:
    """Seed 000: ``0 <= w_i <= 1`` and ``sum w_i = 1``."""
    w = np.asarray(weights, dtype=float)
    s = w.sum()
    return tuple(float(x) for x in (w / s if s > 0 else np.full(3, 1 / 3)))


@dataclass
class Loads:
    """Running per-partition resource use (cpu, mem, net) and the LLF choice.

    ``cap``: ``(3,)`` capacity per partition of cpu, mem, net (the planners
    pass the fair share of their estimated totals where the user gave none)."""

    partitions: int
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    cap: np.ndarray = field(default=None)
    cpu: np.ndarray = field(default=None)
    mem: np.ndarray = field(default=None)
    net: np.ndarray = field(default=None)

    def __post_init__(self):
        P = self.partitions
        self.weights = normalised(self.weights)
        self.cap = np.ones(3) if self.cap is None else np.asarray(self.cap, dtype=float)
        self.cpu = np.zeros(P) if self.cpu is None else np.asarray(self.cpu, dtype=float)
        self.mem = np.zeros(P) if self.mem is None else np.asarray(self.mem, dtype=float)
        self.net = np.zeros(P) if self.net is None else np.asarray(self.net, dtype=float)

    def phi(self) -> np.ndarray:
        """``(3, P)``: use / capacity of cpu, mem, net (0 where a capacity is 0)."""
        use = np.vstack([self.cpu, self.mem, self.net])
        cap = self.cap.reshape(3, 1)
        return np.divide(use, cap, out=np.zeros_like(use), where=cap > 0)

    def w(self) -> np.ndarray:
        return np.asarray(self.weights) @ self.phi()

    def least(self, candidates: Sequence[int] | None = None) -> int:
        phi = self.phi()
        w = (np.asarray(self.weights) @ phi).tolist()
        total = phi.sum(axis=0).tolist()
        cand = range(self.partitions) if candidates is None else candidates
        return min(cand, key=lambda p: (w[p], total[p], p))

    def add(self, p: int, cpu: float = 0.0, mem: float = 0.0, net: float = 0.0) -> None:
        self.cpu[p] += cpu
        self.mem[p] += mem
        self.net[p] += net

    def table(self) -> list[dict]:
        """Per partition: use and Phi of each resource, and the load ``w``."""
        phi, w = self.phi(), self.w()
        return [{"partition": p, "cpu": float(self.cpu[p]), "mem": float(self.mem[p]), "net": float(self.net[p]),
                 "phi_cpu": float(phi[0, p]), "phi_mem": float(phi[1, p]), "phi_net": float(phi[2, p]),
                 "load": float(w[p])} for p in range(self.partitions)]


def place(use: np.ndarray, partitions: int, weights, capacity: Capacity | None = None) -> tuple[np.ndarray, Loads]:
    """LLF over pieces in order: ``use`` is ``(pieces, 3)`` (cpu, mem, net of each
    piece); each goes to the partition of least load ``w`` at that moment."""
    use = np.asarray(use, dtype=float).reshape(-1, 3)
    cap = (capacity or Capacity()).of(use.sum(axis=0) / max(partitions, 1))
    loads = Loads(partitions, tuple(weights), cap)
    part = np.empty(len(use), dtype=np.int64)
    for j, (c, m, n) in enumerate(use.tolist()):
        p = loads.least()
        loads.add(p, c, m, n)
        part[j] = p
    return part, loads


def probe_pairs(hist: "Histogram", counts: Sequence[float], lo, hi, windows: Sequence[int],
                selectivity: dict | None = None) -> float:
    """Estimated candidate pairs of the ``counts[i]`` tuples of each stream ``i``
    in ``[lo, hi)``: each probes every other stream's window,
    ``sum_i counts_i sum_{k != i} sigma(i, k) r_k W_k`` with ``r_k`` the rate of
    ``k`` over ``[lo - W_k, hi)`` (seed 000: a join probe per tuple pair)."""
    sel = selectivity or {}
    total = 0.0
    for i, c in enumerate(counts):
        if not c:
            continue
        for k, w in enumerate(windows):
            if k == i or w <= 0:
                continue
            r = float(hist.count(k, lo - w, hi)) / max(hi - lo + w, 1)
            total += c * sel.get((min(i, k), max(i, k)), 1.0) * r * w
    return total


def probe_pairs_columns(hist: Histogram, counts: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                         windows: Sequence[int], selectivity: dict | None) -> np.ndarray:
    """:func:`probe_pairs` of every column of ``counts`` (``(n, J)``) over ``[lo, hi)``,
    the same terms added in the same order."""
    sel = selectivity or {}
    total = np.zeros(counts.shape[1])
    for i in range(counts.shape[0]):
        c = counts[i]
        for k, w in enumerate(windows):
            if k == i or w <= 0:
                continue
            r = hist.count(k, lo - w, hi) / np.maximum(hi - lo + w, 1)
            total = np.where(c != 0, total + c * sel.get((min(i, k), max(i, k)), 1.0) * r * w, total)
    return total


def resource_use(tuples_in: np.ndarray, stored: np.ndarray, received: np.ndarray, candidates: np.ndarray,
                 windows: Sequence[int], span_us: float, costs=DEFAULT_COSTS) -> np.ndarray:
    """``(3, P)`` per-partition use of cpu, mem, net (the same rule the planners estimate with).

    ``tuples_in`` (P): original tuples processed there (copies included);
    ``stored`` (n, P): tuples of each stream held in its state; ``received``
    (P): tuples and intermediate results shipped to it; ``candidates`` (P):
    candidate combinations its join produced.  ``cpu = (tuple_cost x tuples_in
    + result_cost x candidates) / span_s``; ``mem = sum_k W_k x stored_k /
    span`` (mean tuples held); ``net = received / span_s``.
    """
    span = max(float(span_us), 1.0)
    tc, rc = costs
    W = np.asarray(windows, dtype=float).reshape(-1, 1)
    cpu = (tc * np.asarray(tuples_in, float) + rc * np.asarray(candidates, float)) / (span / 1e6)
    mem = (W * np.asarray(stored, float)).sum(axis=0) / span
    net = np.asarray(received, float) / (span / 1e6)
    return np.vstack([cpu, mem, net])


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
    _cum: tuple | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def cum(self) -> np.ndarray:
        """``(n, B + 1)`` cumulative counts, computed once per ``counts`` array (the
        planners call :meth:`count` once per segment or with arrays of bounds)."""
        if self._cum is None or self._cum[0] is not self.counts:
            cum = np.concatenate([np.zeros((self.counts.shape[0], 1)), np.cumsum(self.counts, axis=1)], axis=1)
            self._cum = (self.counts, cum)
        return self._cum[1]

    def count(self, k: int, lo, hi) -> np.ndarray:
        """Estimated tuples of stream ``k`` with ``lo <= ts < hi`` (bucket resolution);
        ``lo`` and ``hi`` may be arrays (element by element the same numbers)."""
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
