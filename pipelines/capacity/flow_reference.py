"""The per-tuple reference of seed 001's flow control (the oracle :mod:`.flow` is tested against).

Written to be read, not to be fast: one control interval at a time, every
unit's state in plain Python numbers, and the source walking its waiting
tuples one by one in replay order ``(arrival, stream, row)``, handing each to
its stream's unit while that unit has credit.  ``max-flow`` skips a tuple
whose unit is out of credit (the others go on, seed Fig. 11); ``min-flow``
stops there (one FIFO, paced by the slowest unit).  Each unit's admitted rate
is :func:`control_law`, seed equation 8 as written.  Rules:
docs/semantics.md, "Flow control (seed 001)".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..config.flow_control import FlowControl


def control_law(rho_now: float, b_hist: Sequence[float], r_hist: Sequence[float], rho_hist: Sequence[float],
                b0: float, lambdas: Sequence[float], mus: Sequence[float]) -> float:
    """Seed 001 equation 8: ``r_max,j(n) = [ρ_j(n) - Σ_k λ_k (b_j(n-k) - b0) - Σ_l μ_l (r_max,j(n-l) - ρ_j(n-l))]^+``.

    ``b_hist[k]`` = ``b_j(n-k)`` for ``k = 0..K``; ``r_hist[l-1]`` / ``rho_hist[l-1]`` =
    ``r_max,j(n-l)`` / ``ρ_j(n-l)`` for the ``l = 1..L`` intervals that exist (before the
    first interval the rate error is 0, so missing terms add nothing).
    """
    r = rho_now
    for lam, b in zip(lambdas, b_hist):
        r -= lam * (b - b0)
    for mu, rm, rh in zip(mus, r_hist, rho_hist):
        r -= mu * (rm - rh)
    return r if r > 0.0 else 0.0


def reference_flow(arrivals: Sequence[Sequence[int]], fc: FlowControl,
                   shares: Sequence[float] | None = None) -> dict:
    """``{"arrival": per stream list (row order), "occupancy": [[b_j(m)]...] (m = 0..M),
    "rate": [[r_max,j(m)]...], "processing": [[ρ_j(m)]...], "admitted": [[in_j(m)]...]}``."""
    n = len(arrivals)
    sizes = [len(a) for a in arrivals]
    total = sum(sizes)
    if shares is None:
        shares = [1.0 / n] * n if total == 0 else [s / total for s in sizes]
    delayed = [[None] * s for s in sizes]
    waiting = sorted((int(t), j, i) for j, a in enumerate(arrivals) for i, t in enumerate(a))
    occupancy = [[0.0] * n]
    if not waiting:
        return {"arrival": [list(a) for a in arrivals], "occupancy": occupancy, "rate": [], "processing": [],
                "admitted": []}
    t0 = waiting[0][0]
    dt = fc.for_span(waiting[-1][0] - t0).interval_us   # the given Δt, or the default for this span
    per_interval = fc.rate * dt / 1e6
    B, b0 = float(fc.buffer), float(fc.b0)
    bucket_cap = [fc.bucket * (s * per_interval) for s in shares]
    tokens = list(bucket_cap)
    carry = [0.0] * n
    b = [0.0] * n
    past_b = [[] for _ in range(n)]      # past_b[j][m] = b_j(m)
    past_r = [[] for _ in range(n)]      # r_max,j(m)
    past_rho = [[] for _ in range(n)]    # ρ_j(m)
    rate, processing, admitted = [], [], []
    last_out = {}   # per FIFO: when its last tuple left
    m = 0
    while waiting:
        start, end = t0 + m * dt, t0 + (m + 1) * dt
        congested = sum(1 for j in range(n) if b[j] > b0)
        rho_m, r_m, credit = [], [], []
        for j in range(n):
            # CPU control (seed Fig. 12): a fixed share, plus the surge share if above b0; tokens bound it
            want = (1.0 - fc.surge) * shares[j] * per_interval
            if b[j] > b0:
                want += fc.surge * per_interval / congested
            rho = min(want, tokens[j])
            # equation 8 over the history (b before the first interval: 0; no rate error before it)
            past_b[j].append(b[j])
            back = range(1, min(m, len(fc.mus)) + 1)
            r = control_law(rho, [past_b[j][m - k] if m - k >= 0 else 0.0 for k in range(len(fc.lambdas))],
                            [past_r[j][m - l] for l in back], [past_rho[j][m - l] for l in back], b0,
                            fc.lambdas, fc.mus)
            rho_m.append(rho)
            r_m.append(r)
            credit.append(math.floor(min(r + carry[j], B - b[j] + rho)))
        got = [0] * n
        still = []
        blocked = False
        passed = []   # admitted this interval, in FIFO order
        for t, j, i in waiting:
            if t >= end or blocked:
                still.append((t, j, i))
                continue
            if got[j] < credit[j]:
                got[j] += 1
                passed.append((t, j, i))
            else:
                still.append((t, j, i))
                if fc.policy == "min-flow":
                    blocked = True   # head of line: nothing behind it moves this interval
        waiting = still
        # pacing: the k-th tuple of a FIFO admitted this interval, if it waited, leaves at
        # start + k*dt // (admitted by that FIFO); none overtakes the one before it in its FIFO
        fifo_of = (lambda j: 0) if fc.policy == "min-flow" else (lambda j: j)
        count = {}
        for t, j, i in passed:
            count[fifo_of(j)] = count.get(fifo_of(j), 0) + 1
        seen = {}
        for t, j, i in passed:
            f = fifo_of(j)
            k = seen.get(f, 0)
            seen[f] = k + 1
            when = start + k * dt // count[f] if t < start else t
            when = max(when, last_out.get(f, when))
            last_out[f] = when
            delayed[j][i] = when
        for j in range(n):
            before = b[j] + got[j]
            done = min(rho_m[j], before)
            b[j] = before - done
            tokens[j] = min(bucket_cap[j], tokens[j] - done + shares[j] * per_interval)
            carry[j] = (r_m[j] + carry[j]) - math.floor(r_m[j] + carry[j])
            past_r[j].append(r_m[j])
            past_rho[j].append(rho_m[j])
        occupancy.append(list(b))
        rate.append(r_m)
        processing.append(rho_m)
        admitted.append(got)
        m += 1
    return {"arrival": delayed, "occupancy": occupancy, "rate": rate, "processing": processing,
            "admitted": admitted}
