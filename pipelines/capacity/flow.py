"""Flow control (seed 001, issue 20 item 3): back-pressure delays arrivals instead of dropping them.

The pipeline, as seed 001 draws it (Figs. 4, 8, 9)::

    source (the input, in arrival order)  --forwarding policy-->  unit_j (one per stream:
        input buffer B, target b0, a share of the node's service rate)  -->  the join

Time is cut into control intervals ``[t_m, t_m + Δt)``, ``t_m = t_0 + m·Δt``
(``t_0`` = the first arrival).  At ``t_m`` every unit ``j``

1. gets its processing capacity ``ρ_j(m)`` from the CPU control (token bucket;
   a fixed share ``(1 - surge)`` in the ratio of the long-term targets ``c_j``,
   plus ``surge`` split evenly among units above ``b0``; seed Fig. 12),
2. computes the rate it admits, ``r_max,j(m)``, with the control law
   (:func:`control_law`, seed equation 8) and feeds it back upstream,
3. admits ``in_j(m) <= floor(min(r_max,j(m) + κ_j, B - b_j(m) + ρ_j(m)))`` tuples
   (``κ_j``: the fractional credit carried over; the second bound keeps the
   buffer from overflowing, so nothing is ever lost), forwarded in FIFO order:
   ``max-flow`` per unit (seed equation 21, Fig. 11), ``min-flow`` as one FIFO
   that stops at the first tuple whose unit has no credit,
4. processes ``p_j(m) = min(ρ_j(m), b_j(m) + in_j(m))`` and moves its buffer by
   seed equation 7: ``b_j(m+1) = b_j(m) + in_j(m) - p_j(m)`` (in ``[0, B]``).

A tuple that finds credit on arrival reaches the join unchanged; one that
waited leaves paced over the interval that admits it, in FIFO order
(:func:`paced`): never earlier than it came, never before the tuple ahead of
it.  The interval loop (a loop over intervals, not tuples) counts admissions;
which tuple gets which interval and slot is then a ``searchsorted`` and a
running maximum per FIFO.  :mod:`.flow_reference` is the independent
per-tuple replay the tests compare this with.  Rules and sources:
docs/semantics.md, "Flow control (seed 001)".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base.errors import InputError
from ..config.flow_control import MAX_DEFAULT_INTERVALS, FlowControl

#: the interval loop refuses to run longer than this (choose a larger interval=)
MAX_INTERVALS = 5_000_000
#: series points kept in report.json (intervals are downsampled, like the memory series)
SERIES_POINTS = 2_000


@dataclass
class FlowOutcome:
    """What flow control did.  ``arrival``: per stream, in row order, when each tuple
    reaches the join; the rest per control interval ``m`` (rows) and unit (columns):
    ``occupancy`` ``b_j(m)`` at ``t_m`` (``M + 1`` rows: the last is after the last
    interval), ``rate`` ``r_max,j(m)`` and ``processing`` ``ρ_j(m)`` in tuples per
    interval, ``admitted`` ``in_j(m)``."""

    arrival: list[np.ndarray]
    start_us: int
    interval_us: int
    occupancy: np.ndarray
    rate: np.ndarray
    processing: np.ndarray
    admitted: np.ndarray
    shares: np.ndarray


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


def default_shares(sizes: Sequence[int]) -> np.ndarray:
    """The long-term CPU targets ``c_j``: each stream's time-averaged input rate over the
    replay, normalised (seed: the meta-scheduler's targets follow the expected
    time-averaged input rates); all equal when the input is empty."""
    total = sum(sizes)
    n = len(sizes)
    return np.full(n, 1.0 / n) if total == 0 else np.asarray(sizes, dtype=np.float64) / total


def delay_arrivals(arrivals: Sequence[np.ndarray], fc: FlowControl, shares: Sequence[float] | None = None) -> FlowOutcome:
    """Run the flow-control model over per-stream arrivals (int64 µs, row order)."""
    n = len(arrivals)
    sizes = [len(a) for a in arrivals]
    N = sum(sizes)
    c = default_shares(sizes) if shares is None else np.asarray(shares, dtype=np.float64)
    if N == 0:
        empty = np.zeros((0, n))
        return FlowOutcome([np.asarray(a, dtype=np.int64).copy() for a in arrivals], 0,
                           int(fc.for_span(0).interval_us), np.zeros((1, n)), empty, empty, empty.astype(np.int64), c)
    order = [np.argsort(a, kind="stable") for a in arrivals]       # each unit's FIFO: (arrival, row)
    fifo = [np.asarray(a, dtype=np.int64)[o] for a, o in zip(arrivals, order)]
    t0 = min(int(f[0]) for f in fifo if len(f))
    last = max(int(f[-1]) for f in fifo if len(f))
    fc = fc.for_span(last - t0)           # the given Δt, or the default for the arrivals' span
    D = int(fc.interval_us)
    span = (last - t0) // D + 1           # intervals in which tuples arrive
    if span > MAX_INTERVALS:
        raise InputError(f"--flow-control interval={D}us: the arrivals span {span:,} control intervals, more than "
                         f"{MAX_INTERVALS:,}; give interval= of at least {-(-(last - t0) // MAX_INTERVALS)}us")
    bounds = t0 + D * np.arange(1, span + 1, dtype=np.int64)
    arrived = [np.searchsorted(f, bounds, side="left").tolist() for f in fifo]   # arrived before t_{m+1}
    min_flow = fc.policy == "min-flow"
    if min_flow:   # the one FIFO: replay order (arrival, stream, row); pos[j] = where stream j's tuples sit in it
        stream = np.concatenate([np.full(s, j, dtype=np.int64) for j, s in enumerate(sizes)])
        times = np.concatenate(fifo)
        glob = np.lexsort((stream, times))   # stable: rows keep their FIFO order within a stream
        where = np.empty(N, dtype=np.int64)
        where[glob] = np.arange(N)
        offsets = np.cumsum([0, *sizes])
        pos = [where[offsets[j]:offsets[j + 1]] for j in range(n)]
        arrived_all = np.sum(arrived, axis=0).tolist()
    C = fc.rate * D / 1e6                 # service capacity of the node per interval (tuples)
    share = [float(x) * C for x in c]     # tokens a unit accrues per interval
    cap = [fc.bucket * s for s in share]
    B, b0, surge = float(fc.buffer), float(fc.b0), float(fc.surge)
    lambdas, mus = tuple(fc.lambdas), tuple(fc.mus)
    K, L = len(lambdas), len(mus)
    b = [0.0] * n
    tokens = list(cap)
    kappa = [0.0] * n
    admitted_n = [0] * n
    b_hist = [[0.0] * K for _ in range(n)]     # b_j(m), b_j(m-1), ...; 0 before the first interval
    r_hist = [[] for _ in range(n)]            # r_max,j(m-1), r_max,j(m-2), ...
    rho_hist = [[] for _ in range(n)]
    occ, rates, procs, ins = [list(b)], [], [], []
    m = 0
    while sum(admitted_n) < N:
        if m >= MAX_INTERVALS:
            raise InputError(f"--flow-control: more than {MAX_INTERVALS:,} control intervals of "
                             f"{D} us; give a larger interval=")
        hot = [j for j in range(n) if b[j] > b0]
        rho = [min((1.0 - surge) * float(c[j]) * C + (surge * C / len(hot) if b[j] > b0 else 0.0), tokens[j])
               for j in range(n)]
        r = []
        credit = []
        for j in range(n):
            bh = b_hist[j]
            bh.insert(0, b[j])
            del bh[K:]
            rj = control_law(rho[j], bh, r_hist[j], rho_hist[j], b0, lambdas, mus)
            r.append(rj)
            credit.append(math.floor(min(rj + kappa[j], B - b[j] + rho[j])))
        if min_flow:
            end = arrived_all[m] if m < span else N
            for j in range(n):
                nxt = admitted_n[j] + credit[j]
                if nxt < sizes[j]:
                    end = min(end, int(pos[j][nxt]))
            got = [int(np.searchsorted(pos[j], end)) - admitted_n[j] for j in range(n)]
        else:
            got = [min(credit[j], (arrived[j][m] if m < span else sizes[j]) - admitted_n[j]) for j in range(n)]
        for j in range(n):
            tot = b[j] + got[j]
            p = min(rho[j], tot)
            b[j] = tot - p
            tokens[j] = min(cap[j], tokens[j] - p + share[j])
            kappa[j] = (r[j] + kappa[j]) - math.floor(r[j] + kappa[j])
            admitted_n[j] += got[j]
            if L:
                r_hist[j].insert(0, r[j])
                rho_hist[j].insert(0, rho[j])
                del r_hist[j][L:], rho_hist[j][L:]
        occ.append(list(b))
        rates.append(r)
        procs.append(rho)
        ins.append(got)
        m += 1
    admitted = np.asarray(ins, dtype=np.int64).reshape(m, n)
    out = [np.empty(s, dtype=np.int64) for s in sizes]
    if min_flow:   # one FIFO: paced over the interval by all the units' admissions
        late = paced(times[glob], admitted.sum(axis=1), t0, D)
        placed = np.empty(N, dtype=np.int64)
        placed[glob] = late
        for j in range(n):
            out[j][order[j]] = placed[offsets[j]:offsets[j + 1]]
    else:          # a FIFO per unit
        for j in range(n):
            out[j][order[j]] = paced(fifo[j], admitted[:, j], t0, D)
    return FlowOutcome(out, t0, D, np.asarray(occ, dtype=np.float64).reshape(m + 1, n),
                       np.asarray(rates, dtype=np.float64).reshape(m, n),
                       np.asarray(procs, dtype=np.float64).reshape(m, n), admitted, c)


def paced(arrival: np.ndarray, admitted: np.ndarray, t0: int, D: int) -> np.ndarray:
    """When each tuple of a FIFO (``arrival`` in FIFO order) reaches the join, given how many it
    admits per interval: the ``i``-th tuple admitted in interval ``m`` (0-based, of ``a_m``) that
    waited (arrived before ``t_m``) leaves at ``t_m + floor(i·Δt / a_m)``, one that did not at its
    arrival, and no tuple overtakes the one before it (running maximum)."""
    if len(arrival) == 0:
        return arrival.astype(np.int64)
    cum = np.cumsum(admitted)
    when = np.searchsorted(cum, np.arange(len(arrival)), side="right")   # the interval admitting each
    start = t0 + D * when.astype(np.int64)
    rank = np.arange(len(arrival), dtype=np.int64) - (cum[when] - admitted[when])
    slot = start + rank * D // admitted[when]
    return np.maximum.accumulate(np.where(arrival < start, slot, arrival))


def end_to_end_latency(emit_us: np.ndarray, rows: Sequence[np.ndarray], original: Sequence[np.ndarray]) -> np.ndarray:
    """Latency of each combination from its members' own arrival (the input's column, SPEC §1:
    when the tuple reached the system): emission time minus the largest member arrival, so the
    wait upstream counts."""
    newest = np.zeros(len(emit_us), dtype=np.int64)
    for k, r in enumerate(rows):
        newest = original[k][r] if k == 0 else np.maximum(newest, original[k][r])
    return np.asarray(emit_us, dtype=np.int64) - newest


def _quantiles(x: np.ndarray) -> dict[str, Any]:
    if len(x) == 0:
        return {"mean": None, "p50": None, "p99": None, "max": None, "delayed": 0}
    return {"mean": float(x.mean()), "p50": int(np.quantile(x, 0.5, method="lower")),
            "p99": int(np.quantile(x, 0.99, method="lower")), "max": int(x.max()),
            "delayed": int(np.count_nonzero(x))}


def series(flow: FlowOutcome, names: Sequence[str], points: int = SERIES_POINTS) -> dict[str, Any]:
    """Buffer occupancy and control-law rate per unit over the control intervals, in
    ``<= points`` equal-count buckets (peak and mean occupancy, mean rate in tuples/s)."""
    M = flow.rate.shape[0]
    if M == 0:
        return {"time_us": [], "occupancy_peak": {}, "occupancy_mean": {}, "rate_per_s": {}, "points": 0,
                "intervals_per_point": 0}
    starts = np.unique(np.linspace(0, M, min(points, M), endpoint=False).astype(np.int64))
    sizes = np.diff(np.append(starts, M))
    occ = flow.occupancy[1:]       # after each interval
    per_s = 1e6 / flow.interval_us
    return {
        "time_us": (flow.start_us + flow.interval_us * starts).tolist(),
        "occupancy_peak": {nm: np.maximum.reduceat(occ[:, j], starts).round(3).tolist() for j, nm in enumerate(names)},
        "occupancy_mean": {nm: (np.add.reduceat(occ[:, j], starts) / sizes).round(3).tolist()
                           for j, nm in enumerate(names)},
        "rate_per_s": {nm: (np.add.reduceat(flow.rate[:, j], starts) / sizes * per_s).round(3).tolist()
                       for j, nm in enumerate(names)},
        "points": int(len(starts)),
        "intervals_per_point": float(M / len(starts)),
    }


def flow_report(flow: FlowOutcome, fc: FlowControl, names: Sequence[str], original: Sequence[np.ndarray],
                operator_latency: dict[str, Any] | None = None) -> dict[str, Any]:
    """``report.json``'s ``flow_control`` section: settings, added delay per stream and
    overall, buffer occupancy and the control law's rate (summaries and series)."""
    added = [d - o for d, o in zip(flow.arrival, original)]
    M = flow.rate.shape[0]
    occ = flow.occupancy
    settings = fc.to_dict()
    settings["interval_us"] = flow.interval_us
    return {
        "settings": settings,
        "interval_source": "given" if fc.interval_us is not None else
                           f"default: at most {MAX_DEFAULT_INTERVALS:,} intervals over the arrivals' span",
        "shares": {nm: float(s) for nm, s in zip(names, flow.shares)},
        "start_us": flow.start_us,
        "interval_us": flow.interval_us,
        "intervals": int(M),
        "drained_us": flow.start_us + flow.interval_us * M,
        "added_delay_us": {"all": _quantiles(np.concatenate(added) if added else np.zeros(0, np.int64)),
                           "streams": {nm: _quantiles(a) for nm, a in zip(names, added)}},
        "occupancy": {nm: {"peak": float(occ[:, j].max()), "mean": float(occ[1:, j].mean()) if M else 0.0}
                      for j, nm in enumerate(names)},
        "rate_per_s": {nm: {"min": float(flow.rate[:, j].min() * 1e6 / flow.interval_us) if M else None,
                            "mean": float(flow.rate[:, j].mean() * 1e6 / flow.interval_us) if M else None}
                       for j, nm in enumerate(names)},
        "latency_at_join_us": operator_latency,
        "series": series(flow, names),
    }
