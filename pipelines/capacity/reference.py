"""The capacity model, one arrival at a time: the readable check of :mod:`.model`.

Written to be verified by reading, not to be fast (tiny inputs only).  It
shares nothing with the fast path but the SPEC's replay order and validity
test (:mod:`~streamjoin.pipelines.replay.reference`):

* the join is its own loop with explicit buffers -- symmetric (``static``,
  SPEC §4.1, plus seed 002 step 3: a buffer over ``state`` tuples drops its
  oldest) and sorting (``none`` / ``kslack`` / ``mpkslack``, SPEC §4.2) --
  and records, for every result, the step whose processing emits it;
* the queue is seed 000's Fig. 13 as written: one queue ``Q_i`` per stream;
  the operator serves the oldest head over all queues; a full ``Q_i`` drops
  the new tuple or replaces its oldest tuple not yet in service.

:func:`simulate` runs the plain join (the infinite machine) to learn each
step's results, turns them into service times, runs the queue, and joins
the survivors again, with the state cap; a result is emitted when the
processing of the tuple that emits it finishes.  :func:`simulate_with_flow`
puts seed 001's flow control (:mod:`.flow_reference`) in front of it: the
operator sees the arrivals the units let through.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..policies import SYMMETRIC, PolicySpec
from ..replay.reference import RefTuple, brute_force_truth, is_valid, replay_order
from .spec import CapacitySpec

NEG_INF = float("-inf")


@dataclass
class JoinSteps:
    """``emitted``: combination (rows) -> the step (position in the order) that emits it;
    ``memory``: tuples held after each step; ``evicted``: ``(stream, row)`` the state cap evicted."""

    emitted: dict[tuple[int, ...], int] = field(default_factory=dict)
    memory: list[int] = field(default_factory=list)
    evicted: set[tuple[int, int]] = field(default_factory=set)


@dataclass
class CapacityReference:
    """``finish_ns`` / ``cause`` per ``(stream, row)`` (cause ``"processed"``,
    ``"dropped-new"`` or ``"replaced"``; finish only when processed);
    ``occupancy``: queued tuples per stream after each arrival index;
    ``emitted``: combination -> ``(emission time us, latency us)``;
    ``memory``: state after each arrival index (a shed arrival repeats the one before);
    ``evicted``: ``(stream, row)`` evicted by the state cap."""

    finish_ns: dict[tuple[int, int], int]
    cause: dict[tuple[int, int], str]
    occupancy: list[list[int]]
    emitted: dict[tuple[int, ...], tuple[int, int]]
    memory: list[int]
    evicted: set[tuple[int, int]]
    truth: set[tuple[int, ...]]


def join_steps(order: Sequence[RefTuple], n: int, windows: Sequence[int], policy: PolicySpec,
               state: int | None = None) -> JoinSteps:
    """The join over ``order``; which step emits each result."""
    if policy.family == SYMMETRIC:
        return _symmetric(order, n, windows, policy, state)
    return _sorting(order, n, windows, policy)


def _symmetric(order, n, windows, policy, state) -> JoinSteps:
    M, H = [NEG_INF] * n, [NEG_INF] * n
    buffers: list[list[RefTuple]] = [[] for _ in range(n)]
    out = JoinSteps()
    for a, y in enumerate(order):
        s = y.stream
        M[s] = max(M[s], y.ts)
        for i in range(n):
            H[i] = max(H[i], min(M) - policy.retention[i])
        for i in range(n):   # purge what the horizon passed
            buffers[i] = [x for x in buffers[i] if x.ts + windows[i] >= H[i]]
        for members in itertools.product(*[[y] if i == s else buffers[i] for i in range(n)]):
            if is_valid(members, windows):
                out.emitted[tuple(m.row for m in members)] = a
        if y.ts + windows[s] >= H[s]:   # not expired on arrival: kept for later arrivals
            buffers[s].append(y)
            if state is not None and len(buffers[s]) > state:
                oldest = buffers[s].pop(0)
                out.evicted.add((oldest.stream, oldest.row))
        out.memory.append(sum(len(b) for b in buffers))
    return out


def _sorting(order, n, windows, policy) -> JoinSteps:
    M = [NEG_INF] * n
    K = list(policy.k) if policy.name == "kslack" else [0] * n
    R = NEG_INF
    waiting: list[RefTuple] = []
    released: dict[tuple[int, int], int] = {}
    dropped: set[tuple[int, int]] = set()
    state: list[RefTuple] = []
    out = JoinSteps()
    for a, y in enumerate(order):
        late = y.ts < R
        M[y.stream] = max(M[y.stream], y.ts)
        if policy.name == "mpkslack":
            K[y.stream] = max(K[y.stream], M[y.stream] - y.ts)
        R = max(R, min(M[i] - K[i] for i in range(n)))
        if late:
            dropped.add((y.stream, y.row))
        else:
            waiting.append(y)
        for x in [x for x in waiting if x.ts <= R]:
            released[(x.stream, x.row)] = a
            state.append(x)
        waiting = [x for x in waiting if x.ts > R]
        state = [x for x in state if x.ts + windows[x.stream] >= R]
        out.memory.append(len(waiting) + len(state))
    for x in waiting:   # flushed at the end of input: by the last step
        released[(x.stream, x.row)] = len(order) - 1
    streams = [[x for x in order if x.stream == i] for i in range(n)]
    for members in itertools.product(*streams):
        if is_valid(members, windows) and not any((m.stream, m.row) in dropped for m in members):
            out.emitted[tuple(m.row for m in members)] = max(released[(m.stream, m.row)] for m in members)
    return out


def queue_steps(order: Sequence[RefTuple], service: Sequence[int], spec: CapacitySpec, n: int):
    """Seed 000's per-stream queues: ``(finish_ns, cause, occupancy)`` per arrival index."""
    origin = order[0].arrival if order else 0
    t_of = [(x.arrival - origin) * 1000 for x in order]
    Q: list[list[int]] = [[] for _ in range(n)]
    finish: dict[int, int] = {}
    cause = ["processed"] * len(order)
    occupancy = []
    busy = None
    free = NEG_INF

    def serve_until(t):
        nonlocal busy, free
        while True:
            if busy is not None:
                if finish[busy] > t:
                    return
                Q[order[busy].stream].remove(busy)
                busy = None
            heads = [q[0] for q in Q if q]
            if not heads:
                return
            busy = min(heads)          # processed in time order over all queues
            finish[busy] = max(free, t_of[busy]) + service[busy]
            free = finish[busy]

    for a, x in enumerate(order):
        serve_until(t_of[a])
        q = Q[x.stream]
        if spec.queue is not None and len(q) >= spec.queue:
            waiting = [b for b in q if b != busy]
            if spec.shed == "replace-oldest" and waiting:
                q.remove(waiting[0])
                cause[waiting[0]] = "replaced"
            else:
                cause[a] = "dropped-new"
        if cause[a] == "processed":
            q.append(a)
        occupancy.append([len(Q[i]) for i in range(n)])
    serve_until(math.inf)
    return finish, cause, occupancy


def simulate(streams: Sequence[Sequence[RefTuple]], windows: Sequence[int], policy: PolicySpec,
             spec: CapacitySpec) -> CapacityReference:
    """The capacity model over tiny inputs (see the module docstring)."""
    n = len(streams)
    order = replay_order(streams)
    plain = join_steps(order, n, windows, policy)
    per_step = [0] * len(order)
    for step in plain.emitted.values():
        per_step[step] += 1
    service = [math.ceil((spec.tuple_ns + spec.result_ns * r) / spec.cpu) if spec.cpu != 1.0
               else spec.tuple_ns + spec.result_ns * r for r in per_step]
    finish, cause, occupancy = queue_steps(order, service, spec, n)
    survivors = [a for a in range(len(order)) if cause[a] == "processed"]
    capped = join_steps([order[a] for a in survivors], n, windows, policy,
                        spec.state if policy.family == SYMMETRIC else None)
    origin = order[0].arrival if order else 0
    emitted = {}
    for combo, step in capped.emitted.items():
        at = origin + -(-finish[survivors[step]] // 1000)    # rounded up to the microsecond
        emitted[combo] = (at, at - max(streams[i][r].arrival for i, r in enumerate(combo)))
    memory, last = [], 0
    position = {a: j for j, a in enumerate(survivors)}
    for a in range(len(order)):
        if a in position:
            last = capped.memory[position[a]]
        memory.append(last)
    key = [(x.stream, x.row) for x in order]
    return CapacityReference(
        finish_ns={key[a]: f for a, f in finish.items() if cause[a] == "processed"},
        cause={key[a]: c for a, c in enumerate(cause)}, occupancy=occupancy, emitted=emitted,
        memory=memory, evicted=capped.evicted, truth=brute_force_truth(streams, windows))


@dataclass
class CombinedReference:
    """``--flow-control`` with ``--capacity``: ``flow`` is :func:`~.flow_reference.reference_flow`'s
    answer (``flow["arrival"]``: when each tuple reaches the operator's queue), ``capacity`` the
    capacity model over those arrivals with ``emitted`` latencies counted from each member's
    **own** arrival (the input's), and ``plain_latency``: combination -> the same, for the
    infinite operator (emitted at the arrival at the join of the step that emits it)."""

    flow: dict
    capacity: CapacityReference
    plain_latency: dict[tuple[int, ...], int]


def simulate_with_flow(streams: Sequence[Sequence[RefTuple]], windows: Sequence[int], policy: PolicySpec,
                       spec: CapacitySpec, fc) -> CombinedReference:
    """Seed 001 first, then the operator (docs/semantics.md, "Capacity with flow control"):
    the source's tuples pass the units, which delay them; the operator's queue, shedding,
    state cap and service then run on the delayed arrivals exactly as :func:`simulate`;
    latency is emission minus the newest member's own arrival."""
    from .flow_reference import reference_flow

    n = len(streams)
    flow = reference_flow([[x.arrival for x in s] for s in streams], fc)
    delayed = [[RefTuple(x.stream, x.row, ts=x.ts, arrival=flow["arrival"][i][x.row], key=x.key, vec=x.vec)
                for x in s] for i, s in enumerate(streams)]
    ref = simulate(delayed, windows, policy, spec)

    def newest(combo):
        return max(streams[i][r].arrival for i, r in enumerate(combo))

    ref.emitted = {combo: (at, at - newest(combo)) for combo, (at, _) in ref.emitted.items()}
    order = replay_order(delayed)
    plain = join_steps(order, n, windows, policy)
    return CombinedReference(flow=flow, capacity=ref,
                             plain_latency={c: order[step].arrival - newest(c) for c, step in plain.emitted.items()})
