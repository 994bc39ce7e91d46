"""The route planners' per-segment loops as they were before the columnar cut (the
reference ``tests/route/test_plan_columnar.py`` checks the planners against):
LLF's ``place`` choosing from ``Loads.w()`` piece by piece, CTR's counts and uses
one ``Histogram.count`` per segment and its storage loop with the co-location
score recounted for every candidate host.  ATR's reference is the planner's own
step-by-step loop (``atr.stepwise_cut`` without ``adapt``)."""

from __future__ import annotations

import numpy as np

from streamjoin.pipelines.route import Capacity, Loads, probe_pairs
from streamjoin.pipelines.route.ctr import LOCALITY_SLACK


def place(use, partitions, weights, capacity=None):
    use = np.asarray(use, dtype=float).reshape(-1, 3)
    loads = Loads(partitions, tuple(weights), (capacity or Capacity()).of(use.sum(axis=0) / max(partitions, 1)))
    part = np.empty(len(use), dtype=np.int64)
    for j, (c, m, n) in enumerate(use):
        w = loads.w()
        total = loads.phi().sum(axis=0)
        p = min(range(loads.partitions), key=lambda p: (w[p], total[p], p))
        loads.add(p, c, m, n)
        part[j] = p
    return part, loads


def ctr_use(hist, W, T, slots, costs, selectivity):
    n = len(W)
    base = hist.t0
    span = max(hist.t_end - base, 1)
    tc, rc = costs
    cnt = np.array([[float(hist.count(k, base + j * T, base + (j + 1) * T)) for j in range(slots)] for k in range(n)])
    use = np.zeros((n, slots, 3))
    for k in range(n):
        for j in range(slots):
            one = [cnt[k, j] if m == k else 0.0 for m in range(n)]
            pairs = probe_pairs(hist, one, base + j * T, base + (j + 1) * T, W.tolist(), selectivity) if rc else 0.0
            use[k, j] = (tc * cnt[k, j] / (span / 1e6) + rc * pairs / (span / 1e6) if rc else tc * cnt[k, j] / (span / 1e6),
                         cnt[k, j] * W[k] / span, cnt[k, j] / (span / 1e6))
    return cnt, use


def ctr_store(loads, cnt, use, partitions, back):
    n, slots = cnt.shape
    host = np.zeros((n, slots), dtype=np.int64)
    peak = 0
    for j in range(slots):
        for k in range(n):
            w = loads.w()
            floor = w.min()
            near = [p for p in range(partitions) if w[p] <= floor * (1 + LOCALITY_SLACK) + 1e-9]

            def score(p):
                s = 0.0
                for m in range(n):
                    if m == k:
                        continue
                    for jj in range(max(0, j - back), j + 1):
                        if host[m, jj] == p and (jj < j or m < k):
                            s += cnt[m, jj]
                return s
            p = min(near, key=lambda p: (-score(p), w[p], p))
            host[k, j] = p
            loads.add(p, *use[k, j])
        peak = max(peak, min(j + 1, back + 1) * n)
    return host, peak
