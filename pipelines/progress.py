"""Progress: replay order, frontier and the per-tuple facts every policy needs.

This is the *coordination clock* of the replay (seed 004): one pass over the
tuples in arrival order that turns raw ``(ts, arrival)`` columns into the
facts a join operator needs to decide locally what an online system would
have done.  Everything here is whole-column numpy; no per-tuple Python.

Definitions (SPEC §2)::

    replay order   sort all tuples by (arrival, stream, row); position = a
    M_i(a)         max ts of stream i among indexes <= a        (-inf if none)
    T(a)           min_i M_i(a)           the frontier; never decreases
    delta(x)       M_{s(x)}(a_x) - x.ts   how far x trails its own stream

Worked example, two streams, ``(stream, ts)`` in arrival order::

    a      0      1      2      3      4
    x    (0,10) (1,12) (0,15) (0,11) (1,20)
    M_0    10     10     15     15     15
    M_1   -inf    12     12     12     20
    T     -inf    10     12     12     15
    delta   0      0      0      4      0

Minus infinity is the sentinel :data:`~streamjoin.pipelines.timeunits.NEG_INF`;
arithmetic that could move it is clamped so it stays exactly ``NEG_INF``.

Policy decisions built on top of these facts:

* sorting family -- ``R(a) = max_{a'<=a} min_i (M_i(a') - K_i(a'))``; ``x``
  dropped iff ``x.ts < R(a_x - 1)``; released at the first ``a >= a_x`` with
  ``R(a) >= x.ts`` (``N`` = flushed at end of input).
* symmetric family -- ``H_i(a) = max_{a'<=a} (T(a') - d_i(a'))``; ``x``
  expired on arrival iff ``x.ts + W_i < H_i(a_x)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .policies import SORTING, SYMMETRIC, PolicySpec, adaptive_schedule, slack_matrix, retention_matrix
from .timeunits import NEG_INF


@dataclass
class Replay:
    """The replay order and its progress facts.

    Attributes (all indexed by arrival index ``a`` unless said otherwise):
        stream: stream of the tuple at ``a`` (int32).
        row: row of that tuple within its stream (int64).
        ts, arrival: event and arrival time (int64 us).
        index_of: per stream, the arrival index of each of its rows.
        M: shape ``(n, N)``; ``M[i, a] = M_i(a)``.
        T: the frontier ``T(a)``.
        delay: ``delta`` of the tuple at ``a``.
    """

    n: int
    stream: np.ndarray
    row: np.ndarray
    ts: np.ndarray
    arrival: np.ndarray
    index_of: list[np.ndarray]
    M: np.ndarray
    T: np.ndarray
    delay: np.ndarray

    @property
    def N(self) -> int:
        return int(self.ts.shape[0])


@dataclass
class Decisions:
    """What a policy decided for every tuple (indexed by arrival index).

    Sorting family: ``R``, ``dropped``, ``release`` (``N`` = flushed).
    Symmetric family: ``H`` (shape ``(n, N)``), ``expired``.
    Recall-target policies (``qjoin``, ``qkslack``) also keep the values
    they decided (``d`` or ``K``, shape ``(n, N)``) and ``policy_log``, one
    entry per decision (time, reason, values).
    """

    family: str
    R: np.ndarray | None = None
    dropped: np.ndarray | None = None
    release: np.ndarray | None = None
    H: np.ndarray | None = None
    expired: np.ndarray | None = None
    K: np.ndarray | None = field(default=None, repr=False)
    d: np.ndarray | None = field(default=None, repr=False)
    policy_log: list | None = field(default=None, repr=False)


def _running_max(values: np.ndarray) -> np.ndarray:
    return np.maximum.accumulate(values, axis=-1)


def build_replay(ts_by_stream: list[np.ndarray], arrival_by_stream: list[np.ndarray]) -> Replay:
    """Put the tuples of all streams in replay order and compute M, T, delays.

    Args:
        ts_by_stream: per stream, event times in row order (int64 us).
        arrival_by_stream: per stream, arrival times in row order (int64 us).
    Guarantees: ``T`` never decreases; ``delay >= 0``.
    """
    n = len(ts_by_stream)
    sizes = [len(t) for t in ts_by_stream]
    stream = np.concatenate([np.full(s, i, dtype=np.int32) for i, s in enumerate(sizes)])
    row = np.concatenate([np.arange(s, dtype=np.int64) for s in sizes])
    ts = np.concatenate([np.asarray(t, dtype=np.int64) for t in ts_by_stream])
    arrival = np.concatenate([np.asarray(t, dtype=np.int64) for t in arrival_by_stream])
    # The concatenation is already in (stream, row) order, so a *stable* sort
    # on arrival alone gives (arrival, stream, row) -- cheaper than a lexsort.
    order = np.argsort(arrival, kind="stable")
    stream, row, ts, arrival = stream[order], row[order], ts[order], arrival[order]
    N = ts.shape[0]
    index_of = []
    idx = np.int32 if N < 2**31 else np.int64  # half the memory traffic when it fits
    positions = np.empty(N, dtype=idx)
    positions[order] = np.arange(N, dtype=idx)
    offset = 0
    for s in sizes:
        index_of.append(positions[offset:offset + s])
        offset += s
    M = np.empty((n, N), dtype=np.int64)
    for i in range(n):
        M[i] = _running_max(np.where(stream == i, ts, NEG_INF))
    T = M.min(axis=0) if N else np.empty(0, dtype=np.int64)
    own_max = M[stream, np.arange(N)] if N else np.empty(0, dtype=np.int64)
    delay = own_max - ts
    return Replay(n=n, stream=stream, row=row, ts=ts, arrival=arrival,
                  index_of=index_of, M=M, T=T, delay=delay)


def _minus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a - b`` where ``a == NEG_INF`` stays ``NEG_INF`` (minus infinity)."""
    return np.where(a == NEG_INF, NEG_INF, a - b)


def decide(replay: Replay, windows: np.ndarray, policy: PolicySpec, bad_arrivals=None) -> Decisions:
    """Apply ``policy`` to the replay: horizons, drops, releases, expiries.

    ``bad_arrivals``: per stream, arrival times (us) of quarantined rows; the
    recall-target policies re-decide early on a burst of them (seed 003).
    """
    N = replay.N
    idx = np.arange(N)
    W = np.asarray(windows, dtype=np.int64)
    schedule = adaptive_schedule(replay, W, policy, bad_arrivals) if policy.adaptive else None
    log = schedule.log if schedule is not None else None
    if policy.family == SORTING:
        K = schedule.values if schedule is not None else slack_matrix(replay, policy)   # (n, N) or (n, 1)
        R = _running_max(_minus(replay.M, K).min(axis=0)) if N else np.empty(0, np.int64)
        R_before = np.concatenate([[NEG_INF], R[:-1]]) if N else R
        dropped = replay.ts < R_before
        # R never decreases, so the first a with R(a) >= ts is a binary search;
        # a tuple cannot be released before it arrives.
        release = np.maximum(np.searchsorted(R, replay.ts, side="left"), idx)
        release[dropped] = N  # never released (no effect: dropped tuples emit nothing)
        return Decisions(family=SORTING, R=R, dropped=dropped, release=release, K=K, policy_log=log)
    if policy.family == SYMMETRIC:
        d = schedule.values if schedule is not None else retention_matrix(replay, policy)  # (n, N) or (n, 1)
        H = _running_max(_minus(np.broadcast_to(replay.T, (replay.n, N)), d)) if N else np.empty((replay.n, 0), np.int64)
        horizon_own = H[replay.stream, idx] if N else np.empty(0, np.int64)
        expired = replay.ts + W[replay.stream] < horizon_own
        return Decisions(family=SYMMETRIC, H=H, expired=expired, d=d if schedule is not None else None, policy_log=log)
    raise AssertionError(policy.family)


def memory_per_stream(replay: Replay, windows: np.ndarray, decisions: Decisions) -> np.ndarray:
    """Tuples held after every arrival index, per stream: shape ``(n, N)``.

    Each tuple is held over one contiguous range of indexes ``[a_x, end)``:

    * symmetric: from arrival until its horizon passes ``ts + W``
      (``end`` = first ``a`` with ``H_i(a) > ts + W_i``; empty if expired);
    * sorting: in the sort buffer ``[a_x, rel)``, then in join state until
      ``R(a) > ts + W`` (a tuple whose window already passed at release does
      not count); dropped tuples are never held.

    so memory is a difference array of starts and ends, summed up.
    """
    n, N = replay.n, replay.N
    W = np.asarray(windows, dtype=np.int64)
    limit = replay.ts + W[replay.stream]
    start = np.arange(N, dtype=np.int64)  # a tuple is held from its own index on
    if decisions.family == SYMMETRIC:
        end = np.empty(N, dtype=np.int64)
        for i in range(n):
            mask = replay.stream == i
            end[mask] = np.searchsorted(decisions.H[i], limit[mask], side="right")
        end = np.maximum(end, start)
        held = np.ones(N, dtype=bool)
    else:
        window_end = np.searchsorted(decisions.R, limit, side="right")
        end = np.maximum(decisions.release, window_end)
        end = np.maximum(end, start)
        held = ~decisions.dropped
    out = np.zeros((n, N), dtype=np.int64)
    for i in range(n):
        mask = (replay.stream == i) & held
        # +1 at each held tuple's own index (starts are 0..N-1, so the mask
        # itself), -1 where it leaves
        delta = mask.astype(np.int64)
        delta -= np.bincount(end[mask], minlength=N + 1)[:N]
        np.cumsum(delta, out=out[i])
    return out
