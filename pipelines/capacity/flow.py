"""Flow control (seed 001, issue 20 item 3): back-pressure delays arrivals instead of dropping them.

The pipeline, as seed 001 draws it (Figs. 4, 8, 9)::

    source (the input, in arrival order)  --forwarding policy-->  unit_j (one per stream:
        input buffer B, target b0, a share of the node's service rate)  -->  the join

Time is cut into control intervals ``[t_m, t_m + Δt)``, ``t_m = t_0 + m·Δt``
(``t_0`` = the first arrival).  At ``t_m`` every unit ``j``

1. gets its processing capacity ``ρ_j(m)`` from the CPU control (token bucket;
   a fixed share ``(1 - surge)`` in the ratio of the long-term targets ``c_j``,
   plus ``surge`` split evenly among units above ``b0``; seed Fig. 12),
2. computes the rate it admits, ``r_max,j(m)``, with the control law (seed
   equation 8; :func:`.flow_reference.control_law`) and feeds it back upstream,
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
it.  The interval loop (over intervals, not tuples; machine code built once per
machine, :mod:`.jit`, in the float operations' order of the reference) counts admissions;
which tuple gets which interval and slot is then a ``repeat`` and a
running maximum per FIFO.  :mod:`.flow_reference` is the independent
per-tuple replay the tests compare this with.  Rules and sources:
docs/semantics.md, "Flow control (seed 001)".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base.errors import InputError
from ..base.percentiles import distribution
from ..config.flow_control import MAX_DEFAULT_INTERVALS, FlowControl
from ..base import jit

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
    arrived = [np.searchsorted(f, bounds, side="left") for f in fifo]   # arrived before t_{m+1}
    min_flow = fc.policy == "min-flow"
    if min_flow:   # the one FIFO: replay order (arrival, stream, row); pos[j] = where stream j's tuples sit in it
        stream = np.concatenate([np.full(s, j, dtype=np.int64) for j, s in enumerate(sizes)])
        times = np.concatenate(fifo)
        glob = np.lexsort((stream, times))   # stable: rows keep their FIFO order within a stream
        where = np.empty(N, dtype=np.int64)
        where[glob] = np.arange(N)
        offsets = np.cumsum([0, *sizes])
        pos = [where[offsets[j]:offsets[j + 1]] for j in range(n)]
        arrived_all = np.sum(arrived, axis=0).astype(np.int64)
    C = fc.rate * D / 1e6                 # service capacity of the node per interval (tuples)
    share = np.array([float(x) * C for x in c])     # tokens a unit accrues per interval
    cap = fc.bucket * share
    empty = np.zeros(0, np.int64)
    occ, rates, procs, admitted, m = interval_kernel()(
        np.asarray(sizes, dtype=np.int64), np.asarray(arrived, dtype=np.int64).reshape(n, -1) if not min_flow
        else np.zeros((n, 0), np.int64), min_flow, np.concatenate(pos) if min_flow else empty,
        offsets.astype(np.int64) if min_flow else empty, arrived_all if min_flow else empty,
        c.astype(np.float64), share, cap, float(C), float(fc.buffer), float(fc.b0), float(fc.surge),
        np.asarray(fc.lambdas, dtype=np.float64), np.asarray(fc.mus, dtype=np.float64), MAX_INTERVALS)
    if m < 0:
        raise InputError(f"--flow-control: more than {MAX_INTERVALS:,} control intervals of "
                         f"{D} us; give a larger interval=")
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
    return FlowOutcome(out, t0, D, occ, rates, procs, admitted, c)


def interval_kernel():
    """The interval loop (:func:`_interval_loop`) as machine code, built once per machine (:mod:`.jit`)."""
    return jit.compiled(_interval_loop, "Tuple((f8[:, :], f8[:, :], f8[:, :], i8[:, :], i8))(i8[:], i8[:, :], b1, "
                                        "i8[:], i8[:], i8[:], f8[:], f8[:], f8[:], f8, f8, f8, f8, f8[:], f8[:], i8)")


def _interval_loop(sizes, arrived, min_flow, pos, offsets, arrived_all, c, share, cap, C, B, b0, surge,
                   lambdas, mus, max_intervals):
    """Steps 1-4 of the module docstring, one control interval at a time, until every tuple is
    admitted.  ``arrived[j, m]`` (max-flow) / ``arrived_all[m]`` (min-flow): tuples arrived
    before ``t_{m+1}``; ``pos[offsets[j]:offsets[j+1]]``: where unit ``j``'s tuples sit in the
    one FIFO (min-flow).  Returns ``(occupancy, rate, processing, admitted, M)``; ``M = -1``
    past ``max_intervals``.  The arithmetic is written in the order of equation 8 and
    :mod:`.flow_reference`, so the floats are the reference's."""
    n = sizes.shape[0]
    N = sizes.sum()
    span = arrived.shape[1] if not min_flow else arrived_all.shape[0]
    K = lambdas.shape[0]
    L = mus.shape[0]
    room = span + 16
    occ = np.zeros((room + 1, n))
    rates = np.zeros((room, n))
    procs = np.zeros((room, n))
    ins = np.zeros((room, n), np.int64)
    b = np.zeros(n)
    tokens = cap.copy()
    kappa = np.zeros(n)
    admitted_n = np.zeros(n, np.int64)
    b_hist = np.zeros((n, K))        # b_j(m), b_j(m-1), ...; 0 before the first interval
    r_hist = np.zeros((n, L))        # r_max,j(m-1), r_max,j(m-2), ...
    rho_hist = np.zeros((n, L))
    rho = np.zeros(n)
    r = np.zeros(n)
    credit = np.zeros(n, np.int64)
    got = np.zeros(n, np.int64)
    total = 0
    m = 0
    while total < N:
        if m >= max_intervals:
            return occ[:1], rates[:0], procs[:0], ins[:0], -1
        if m == room:                 # past the last arrival: the buffers drain
            room *= 2
            occ2 = np.zeros((room + 1, n))
            occ2[:m + 1] = occ[:m + 1]
            occ = occ2
            rates2 = np.zeros((room, n))
            rates2[:m] = rates[:m]
            rates = rates2
            procs2 = np.zeros((room, n))
            procs2[:m] = procs[:m]
            procs = procs2
            ins2 = np.zeros((room, n), np.int64)
            ins2[:m] = ins[:m]
            ins = ins2
        hot = 0
        for j in range(n):
            if b[j] > b0:
                hot += 1
        for j in range(n):
            want = (1.0 - surge) * c[j] * C + (surge * C / hot if b[j] > b0 else 0.0)
            rho[j] = want if want <= tokens[j] else tokens[j]
            for k in range(K - 1, 0, -1):
                b_hist[j, k] = b_hist[j, k - 1]
            if K:
                b_hist[j, 0] = b[j]
            rj = rho[j]                            # equation 8
            for k in range(K):
                rj -= lambdas[k] * (b_hist[j, k] - b0)
            for l in range(min(m, L)):
                rj -= mus[l] * (r_hist[j, l] - rho_hist[j, l])
            r[j] = rj if rj > 0.0 else 0.0
            x = r[j] + kappa[j]
            y = B - b[j] + rho[j]
            credit[j] = np.int64(np.floor(x if x <= y else y))
        if min_flow:
            end = arrived_all[m] if m < span else N
            for j in range(n):
                nxt = admitted_n[j] + credit[j]
                if nxt < sizes[j]:
                    at = pos[offsets[j] + nxt]
                    if at < end:
                        end = at
            for j in range(n):
                got[j] = np.searchsorted(pos[offsets[j]:offsets[j + 1]], end) - admitted_n[j]
        else:
            for j in range(n):
                avail = (arrived[j, m] if m < span else sizes[j]) - admitted_n[j]
                got[j] = credit[j] if credit[j] <= avail else avail
        for j in range(n):
            tot = b[j] + got[j]
            p = rho[j] if rho[j] <= tot else tot
            b[j] = tot - p
            t = tokens[j] - p + share[j]
            tokens[j] = cap[j] if cap[j] <= t else t
            kappa[j] = (r[j] + kappa[j]) - np.floor(r[j] + kappa[j])
            admitted_n[j] += got[j]
            total += got[j]
            for l in range(L - 1, 0, -1):
                r_hist[j, l] = r_hist[j, l - 1]
                rho_hist[j, l] = rho_hist[j, l - 1]
            if L:
                r_hist[j, 0] = r[j]
                rho_hist[j, 0] = rho[j]
            occ[m + 1, j] = b[j]
            rates[m, j] = r[j]
            procs[m, j] = rho[j]
            ins[m, j] = got[j]
        m += 1
    return occ[:m + 1].copy(), rates[:m].copy(), procs[:m].copy(), ins[:m].copy(), m


def paced(arrival: np.ndarray, admitted: np.ndarray, t0: int, D: int) -> np.ndarray:
    """When each tuple of a FIFO (``arrival`` in FIFO order) reaches the join, given how many it
    admits per interval: the ``i``-th tuple admitted in interval ``m`` (0-based, of ``a_m``) that
    waited (arrived before ``t_m``) leaves at ``t_m + floor(i·Δt / a_m)``, one that did not at its
    arrival, and no tuple overtakes the one before it (running maximum)."""
    if len(arrival) == 0:
        return arrival.astype(np.int64)
    m = np.flatnonzero(admitted)                 # intervals that admit, each a run of the FIFO
    a = admitted[m]
    per = np.repeat(a, a)                        # a_m of the interval admitting each tuple
    start = np.repeat(t0 + D * m.astype(np.int64), a)
    rank = np.arange(len(arrival), dtype=np.int64) - np.repeat(np.cumsum(a) - a, a)
    slot = start + rank * D // per
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
    """Mean, nearest-rank p50 / p99 (the report's one percentile rule), max and how many were delayed."""
    return {"mean": float(x.mean()) if len(x) else None,
            **distribution(x, [("p50", 0.5), ("p99", 0.99), ("max", 1.0)]), "delayed": int(np.count_nonzero(x))}


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
