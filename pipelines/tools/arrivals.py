"""Random sources, rate profiles, event times and delays for ``streamjoin
generate`` (:mod:`.generate`): one seeded generator per (seed, dataset,
stream), rates that vary piecewise or smoothly over a time grid, Poisson or
periodic (jittered clock) event times, and arrival delays with jitter and
stalls, quantised to the output unit.
"""

from __future__ import annotations

import math

import numpy as np

#: output time units per second
UNITS_PER_S = {"ps": 10**12, "us": 10**6}


def time_grid(duration: float, step: float = 0.01) -> np.ndarray:
    n = max(2, int(math.ceil(duration / step)) + 1)
    return np.linspace(0.0, duration, n)


def piecewise_multiplier(rng, grid, *, mean_len: float, lo: float, hi: float) -> np.ndarray:
    """Piecewise-constant levels in [lo, hi], change points a Poisson process.

    Busy and quiet periods alternate: levels are drawn alternately from the
    upper and the lower part of the range, so every change is a real one.
    """
    duration = float(grid[-1])
    n = max(1, int(rng.poisson(duration / mean_len)))  # the rate changes at least once
    breaks = np.sort(rng.uniform(0.0, duration, n))
    mid, gap = (lo + hi) / 2, (hi - lo) / 10
    busy = (np.arange(n + 1) + rng.integers(0, 2)) % 2 == 1
    levels = np.where(busy, rng.uniform(mid + gap, hi, n + 1), rng.uniform(lo, mid - gap, n + 1))
    return levels[np.searchsorted(breaks, grid, side="right")]


def smooth_multiplier(rng, grid, *, periods, depths) -> np.ndarray:
    """1 + sum of slow sinusoids (random periods in the given ranges)."""
    m = np.ones_like(grid)
    for (p_lo, p_hi), depth in zip(periods, depths):
        period = rng.uniform(p_lo, p_hi)
        phase = rng.uniform(0.0, 2 * np.pi)
        m += depth * np.sin(2 * np.pi * grid / period + phase)
    return np.clip(m, 0.1, None)


def cumulative_rate(grid, mult) -> np.ndarray:
    """L(t) on the grid: integral of the multiplier (trapezoid), L(0) = 0."""
    inc = 0.5 * (mult[1:] + mult[:-1]) * np.diff(grid)
    return np.concatenate(([0.0], np.cumsum(inc)))


def poisson_times(rng, n: int, grid, cum) -> np.ndarray:
    """Exactly ``n`` sorted times of a Poisson process with intensity ∝ m(t)."""
    e = rng.exponential(size=n + 1)
    u = np.cumsum(e)[:-1] * (cum[-1] / e.sum())
    return np.interp(u, cum, grid)


def periodic_times(rng, rates, grid, cum, *, clock_jitter: float = 0.05):
    """Quasi-periodic samples for several sources sharing the multiplier.

    Source ``s`` samples at ``L^-1((k + phase_s + e) / rate_s)``, ``e`` uniform
    within ``±clock_jitter`` of a period (keeps each source's order).
    Returns ``(source index, time)``, grouped by source, time-sorted inside.
    """
    rates = np.asarray(rates, dtype=np.float64)
    total = cum[-1]
    phase = rng.uniform(0.0, 1.0, rates.size)
    counts = np.maximum(np.floor(rates * total - phase).astype(np.int64) + 1, 0)
    src = np.repeat(np.arange(rates.size), counts)
    start = np.repeat(np.cumsum(counts) - counts, counts)
    k = np.arange(src.size) - start
    u = (k + phase[src] + rng.uniform(-clock_jitter, clock_jitter, src.size)) / rates[src]
    u = np.clip(u, 0.0, total)
    return src, np.interp(u, cum, grid)


def delays(rng, t, duration, *, jitter_mean, jitter_sigma, stall_every, stall_min, stall_max):
    """Network delay (seconds) per tuple: lognormal jitter + Poisson stalls.

    Returns ``(delay, stalled)``; see the module docstring for the model.
    """
    mu = math.log(jitter_mean) - 0.5 * jitter_sigma**2
    jitter = rng.lognormal(mu, jitter_sigma, t.size)
    n = max(1, int(rng.poisson(duration / stall_every)))  # at least one stall, even in short runs
    starts = np.sort(rng.uniform(0.0, duration, n))
    ends = starts + np.exp(rng.uniform(math.log(stall_min), math.log(stall_max), n))
    release = t.copy()
    stalled = np.zeros(t.size, dtype=bool)
    if n:
        reach = np.maximum.accumulate(ends)  # furthest end among stalls started so far
        new_group = np.concatenate(([True], starts[1:] > reach[:-1]))
        group = np.cumsum(new_group) - 1
        last = np.concatenate((np.flatnonzero(new_group)[1:] - 1, [n - 1]))
        group_end = reach[last]  # end of each merged outage
        idx = np.searchsorted(starts, t, side="right") - 1
        safe = np.maximum(idx, 0)
        stalled = (idx >= 0) & (reach[safe] > t)
        release[stalled] = group_end[group[safe[stalled]]]
    return (release - t) + jitter, stalled


def quantise(t, delay, t0: int, unit: str):
    """Event time and arrival as int64 in ``unit`` (arrival >= ts always)."""
    ups = UNITS_PER_S[unit]
    ts = t0 + np.round(t * ups).astype(np.int64)
    arrival = ts + np.round(delay * ups).astype(np.int64)
    return ts, arrival
