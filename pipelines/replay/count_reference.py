"""The per-arrival reference for count windows ``S_i[N]`` (policy ``static``).

An independent check of :mod:`~streamjoin.pipelines.replay.count_window` and
the local engine, written to be verified by reading: plain Python lists,
one arrival at a time, tiny inputs only (truth is a brute force over every
combination).  docs/semantics.md, "Count windows", is the rule it follows:

* replay order: every tuple sorted by ``(arrival, stream, row)``;
* a count-window stream's buffer is its last ``N`` arrivals (a deque of
  length ``N``): a new tuple pushes the oldest out; the horizon never
  purges it and it never expires on arrival;
* a duration-window stream's buffer is SPEC §4.1's: purged when
  ``x.ts + W < H(a)``, ``H = running max of (T - d)``, ``T = min_i M_i``
  over every stream (count streams included);
* each arrival ``y`` is joined with the buffers of the other streams *before*
  it is inserted, emitted at its arrival time with latency 0, if the
  combination is valid;
* valid: keys equal, the optional predicate, and for every duration member
  ``max_ts - t_k.ts <= W_k``, for every count member: still among the last
  ``N_k`` arrivals of its stream when the last member arrives.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

NEG_INF = float("-inf")


@dataclass(frozen=True)
class Tup:
    """One input tuple: its stream, row, event time, arrival time and key."""

    stream: int
    row: int
    ts: int
    arrival: int
    key: object = None


@dataclass
class CountReference:
    """``truth``: the valid combinations (tuples of rows, one per stream);
    ``emitted``: combination -> emission time (latency is 0 for all);
    ``memory``: tuples held after each arrival index, per stream."""

    truth: set[tuple[int, ...]]
    emitted: dict[tuple[int, ...], int]
    memory: list[list[int]] = field(default_factory=list)
    expired: list[int] = field(default_factory=list)   # per stream: duration tuples expired on arrival


def order_of(streams: Sequence[Sequence[Tup]]) -> list[Tup]:
    return sorted((t for s in streams for t in s), key=lambda t: (t.arrival, t.stream, t.row))


def _in_last(member: Tup, count: int, order: list[Tup], last_index: int) -> bool:
    """``member`` is among the last ``count`` tuples of its stream in ``order[:last_index + 1]``."""
    seen = [t for t in order[:last_index + 1] if t.stream == member.stream]
    return member in seen[-count:]


def valid(members: Sequence[Tup], windows: Sequence[int], counts: Sequence[int | None], order: list[Tup],
          predicate: Callable[[Sequence[Tup]], bool] | None = None) -> bool:
    """The definition, member by member (docs/semantics.md, "Count windows")."""
    if len({m.key for m in members}) != 1:
        return False
    if predicate is not None and not predicate(members):
        return False
    newest = max(m.ts for m in members)
    last = max(order.index(m) for m in members)
    for k, m in enumerate(members):
        if counts[k] is None:
            if newest - m.ts > windows[k]:
                return False
        elif not _in_last(m, counts[k], order, last):
            return False
    return True


def replay_counted(streams: Sequence[Sequence[Tup]], windows: Sequence[int], counts: Sequence[int | None],
                   retention: Sequence[int], predicate: Callable[[Sequence[Tup]], bool] | None = None
                   ) -> CountReference:
    """Brute-force truth and the arrival-by-arrival symmetric replay."""
    n = len(streams)
    order = order_of(streams)
    truth = {tuple(m.row for m in c) for c in itertools.product(*streams)
             if valid(c, windows, counts, order, predicate)}
    buffers: list = [deque(maxlen=counts[i]) if counts[i] is not None else [] for i in range(n)]
    M = [NEG_INF] * n
    H = [NEG_INF] * n
    emitted: dict[tuple[int, ...], int] = {}
    memory: list[list[int]] = []
    expired = [0] * n
    for a, y in enumerate(order):
        M[y.stream] = max(M[y.stream], y.ts)
        T = min(M)
        for i in range(n):
            if counts[i] is None:
                if T != NEG_INF:
                    H[i] = max(H[i], T - retention[i])
                buffers[i] = [x for x in buffers[i] if x.ts + windows[i] >= H[i]]
        probes = [[y] if i == y.stream else list(buffers[i]) for i in range(n)]
        for members in itertools.product(*probes):
            if valid(members, windows, counts, order, predicate):
                emitted[tuple(m.row for m in members)] = y.arrival
        if counts[y.stream] is not None:
            buffers[y.stream].append(y)          # the deque drops the oldest beyond N
        elif y.ts + windows[y.stream] >= H[y.stream]:
            buffers[y.stream].append(y)
        else:
            expired[y.stream] += 1
        memory.append([len(b) for b in buffers])
    return CountReference(truth=truth, emitted=emitted, memory=memory, expired=expired)
