"""The capacity model over one replay: queue, shedding, state cap, emission times.

:func:`apply` takes what the plain replay computed (the infinite machine:
replay order, policy decisions, truth, emission) and answers what one
operator with the :class:`~.spec.CapacitySpec`'s CPU and memory does with the
same arrivals (docs/semantics.md, "Capacity (issue 20)"):

1. **work** -- tuple ``a``'s service time is ``(tuple + result * r_a) / cpu``,
   ``r_a`` the results the plain replay emits while processing ``a``
   (:func:`trigger_index`: the last-arriving member for the symmetric family,
   the tuple whose processing releases the last member for the sorting
   family);
2. **queue** -- :func:`~.queueing.run_queue`: finish times, shed tuples;
3. **survivors** -- shed tuples leave the replay entirely: the policy is
   re-decided over the survivors (their replay order is the same order
   without the shed tuples), truth restricted to combinations of survivors;
4. **state cap** -- :func:`~.shedding.evict_oldest` shortens expiry indexes
   (symmetric family);
5. **emission** -- the closed forms over the survivors, then every result's
   emission time becomes the finish time of the tuple whose processing
   emits it, rounded up to the microsecond.  Latency keeps the SPEC's origin
   (the last member's arrival), so it now includes queueing and service.

Everything is column operations except the two sequential recursions (queue
cap, state cap), which run compiled.  With ``--flow-control`` the replay it
takes is the one on the units' delayed arrivals (the operator sees what the
units let through); :func:`count_from_own_arrivals` then counts latencies
from the input's own arrivals.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..policies import SORTING, SYMMETRIC, PolicySpec
from ..replay.candidates import Combos, key_ids
from ..replay.emit import Emission, emission
from ..replay.progress import Decisions, Replay, build_replay, decide, expiry, memory_per_stream
from . import queueing, shedding
from .spec import CapacitySpec

FAMILIES = (SYMMETRIC, SORTING)


@dataclass
class CapacityOutcome:
    """What the capacity model changed, over the *full* replay's indexes.

    ``emission``: per truth combination (emitted, emission time, latency);
    ``arrival_ns``: arrival times in ns from the first arrival (``origin_us``);
    ``memory``: join / sort state per stream after each arrival index (a shed
    arrival repeats the state before it); ``decisions``: the survivors'
    decisions spread over the full replay (``dropped`` / ``expired``; shed
    tuples are neither) with the survivors' policy log; ``queue`` and
    ``occupancy`` (queued tuples per stream after each arrival index);
    ``evicted``: per stream in row order, tuples the state cap evicted
    (``None`` without a cap).  ``plain_emitted`` / ``plain_latency_us``: the
    same policy without capacity.  ``uncapped_emitted``: the survivors'
    emission without the state cap, and ``uncapped_memory`` (survivor
    indexes) and ``survivor_arrival`` (only with a state cap).
    """

    spec: CapacitySpec
    origin_us: int
    arrival_ns: np.ndarray
    emission: Emission
    memory: np.ndarray
    decisions: Decisions
    queue: queueing.QueueOutcome
    occupancy: np.ndarray
    evicted: list[np.ndarray] | None
    plain_emitted: np.ndarray
    plain_latency_us: np.ndarray
    uncapped_emitted: np.ndarray | None = None
    uncapped_memory: np.ndarray | None = None
    survivor_arrival: np.ndarray | None = None


def warm_up(spec: CapacitySpec) -> threading.Thread | None:
    """Load the kernels ``spec`` needs on a background thread (about 1 ms each;
    the first time on a machine they are built, :mod:`.jit`, which then
    overlaps loading and the plain join); ``None`` when the spec needs no
    kernel (an unbounded queue, no state cap)."""
    needs = [f for f, used in ((queueing.compiled_kernel, spec.queue is not None),
                               (shedding.compiled_kernel, spec.state is not None)) if used]
    if not needs:
        return None
    thread = threading.Thread(target=lambda: [f() for f in needs], name="capacity-warm-up", daemon=True)
    thread.start()
    return thread


def trigger_index(replay: Replay, decisions: Decisions, combos: Combos, em: Emission) -> np.ndarray:
    """Per combination, the arrival index whose processing emits it: the last
    member (symmetric family), or the index that releases its last-released
    member (sorting family; ``N - 1`` when flushed at the end of input)."""
    if decisions.family == SYMMETRIC or not len(combos):
        return np.asarray(em.last, dtype=np.int64)
    rel = None
    for k in range(replay.n):
        r = decisions.release[replay.index_of[k]][combos.rows[k]]   # per row first: one combination-sized gather
        rel = r if rel is None else np.maximum(rel, r, out=rel)
    return np.minimum(rel, replay.N - 1).astype(np.int64)


def apply(spec: CapacitySpec, replay: Replay, decisions: Decisions, combos: Combos, plain: Emission,
          memory: np.ndarray, windows: Sequence[int], policy: PolicySpec, *,
          keys: Sequence | None = None, bad_arrivals=None) -> CapacityOutcome:
    """The capacity model over a plain replay (see the module docstring)."""
    if decisions.family not in FAMILIES:
        raise AssertionError(decisions.family)   # refused when the options are checked
    W = np.asarray(windows, dtype=np.int64)
    N, n = replay.N, replay.n
    origin = int(replay.arrival[0]) if N else 0
    arrival_ns = queueing.relative_ns(replay.arrival)
    # 1. work: results each tuple's processing emits on the infinite machine
    trig = trigger_index(replay, decisions, combos, plain)
    results = np.bincount(trig[plain.emitted], minlength=N) if len(combos) else np.zeros(N, np.int64)
    service = queueing.service_times(spec, results)
    # 2. queue
    q = queueing.run_queue(spec, arrival_ns, replay.stream, n, service)
    occ = queueing.occupancy(q, replay.stream, n)
    keep = q.kept
    capped = spec.state is not None and decisions.family == SYMMETRIC
    # 3. survivors
    if keep.all():
        surv, dec, sub, kept_pos, combo_keep = replay, decisions, combos, np.arange(N), None
    else:
        surv, dec, sub, kept_pos, combo_keep = _survivors(replay, combos, keep, W, policy, keys, bad_arrivals)
    # 4. state cap, 5. emission over the survivors
    evicted = uncapped = uncapped_mem = None
    if capped:
        ends = expiry(surv, W, dec)
        capped_ends, evicted_s = shedding.evict_oldest(surv.index_of, ends, spec.state)
        em_s = emission(sub, surv, W, dec, expiry_index=capped_ends)
        # memory counts after each step: an evicted tuple is gone after the step
        # that evicted it (index e - 1), though that step's probe still saw it
        held_ends = [e - ev for e, ev in zip(capped_ends, evicted_s)]
        mem_s = memory_per_stream(surv, W, dec, expiry_index=held_ends)
        uncapped = _spread(emission(sub, surv, W, dec, expiry_index=ends).emitted, combo_keep, len(combos))
        uncapped_mem = memory_per_stream(surv, W, dec, expiry_index=ends)
        evicted = _rows_back(evicted_s, replay, keep)
    elif surv is replay:
        em_s, mem_s = plain, memory
    else:
        em_s = emission(sub, surv, W, dec)
        mem_s = memory_per_stream(surv, W, dec)
    finish_s = q.finish_ns[kept_pos]
    emit_ns = finish_s[trigger_index(surv, dec, sub, em_s)] if len(sub) else np.empty(0, np.int64)
    emit_us = origin + (emit_ns + 999) // 1000
    C = len(combos)
    emitted = _spread(em_s.emitted, combo_keep, C)
    emit_full = _spread(emit_us, combo_keep, C, fill=origin)
    if not C:
        latency = np.empty(0, np.int64)
    elif decisions.family == SORTING:   # the plain latency is emit - arrival[last] for every row: no gather
        latency = emit_full - (plain.emit_us - plain.latency_us)
    else:
        latency = emit_full - replay.arrival[plain.last]
    em = Emission(a=plain.a, last=plain.last, emitted=emitted, emit_us=emit_full, latency_us=latency)
    return CapacityOutcome(
        spec=spec, origin_us=origin, arrival_ns=arrival_ns, emission=em, memory=_repeat_shed(mem_s, keep),
        decisions=_decisions_back(dec, keep, N), queue=q, occupancy=occ, evicted=evicted,
        plain_emitted=plain.emitted, plain_latency_us=plain.latency_us,
        uncapped_emitted=uncapped, uncapped_memory=uncapped_mem,
        survivor_arrival=surv.arrival if capped else None,
    )


def count_from_own_arrivals(cap: CapacityOutcome, plain: Emission, rows: Sequence[np.ndarray],
                            original: Sequence[np.ndarray]) -> None:
    """``--capacity`` with ``--flow-control``: latencies from each member's own arrival (the
    input's, before the units delayed it), under capacity and on the infinite operator
    (``plain``: the same replay's emission without the model), so the upstream wait counts
    in both (docs/semantics.md, "Capacity with flow control")."""
    from .flow import end_to_end_latency

    cap.emission.latency_us = end_to_end_latency(cap.emission.emit_us, rows, original)
    cap.plain_latency_us = end_to_end_latency(plain.emit_us, rows, original)


def _survivors(replay: Replay, combos: Combos, keep: np.ndarray, W: np.ndarray, policy: PolicySpec, keys,
               bad_arrivals):
    """The replay without the shed tuples: its order, decisions and the
    combinations of survivors (rows renumbered within each stream)."""
    kept_rows, ranks, row_keep = [], [], []
    for k in range(replay.n):
        mine = keep[replay.index_of[k]]
        row_keep.append(mine)
        kept_rows.append(np.flatnonzero(mine))
        ranks.append(np.cumsum(mine, dtype=np.int64) - 1)
    surv = build_replay([replay.ts_of[k][r] for k, r in enumerate(kept_rows)],
                        [replay.arrival[replay.index_of[k][r]] for k, r in enumerate(kept_rows)],
                        keep_running_max=policy.family == SORTING or policy.adaptive)
    ids = key_ids(list(keys)) if (policy.adaptive and keys is not None) else None
    if ids is not None:
        ids = [ids[k][r] for k, r in enumerate(kept_rows)]
    dec = decide(surv, W, policy, bad_arrivals=bad_arrivals, keys=ids)
    combo_keep = np.ones(len(combos), bool)
    for k in range(replay.n):
        combo_keep &= row_keep[k][combos.rows[k]]
    sub = Combos([ranks[k][combos.rows[k][combo_keep]] for k in range(replay.n)], surv.ts_of)
    return surv, dec, sub, np.flatnonzero(keep), combo_keep


def _spread(values: np.ndarray, mask: np.ndarray | None, size: int, fill=0) -> np.ndarray:
    """Survivor combinations' values back onto all combinations (``fill`` elsewhere)."""
    if mask is None:
        return np.asarray(values).copy()
    out = np.full(size, fill, dtype=np.asarray(values).dtype)
    out[mask] = values
    return out


def _repeat_shed(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``(n, N')`` per survivor index -> ``(n, N)``: a shed arrival repeats the
    state before it (0 before the first survivor)."""
    if keep.all():
        return values
    idx = np.cumsum(keep) - 1
    out = values[:, np.maximum(idx, 0)] if values.shape[1] else np.zeros((values.shape[0], len(keep)), values.dtype)
    out[:, idx < 0] = 0
    return out


def _decisions_back(dec: Decisions, keep: np.ndarray, N: int) -> Decisions:
    """The survivors' per-tuple decisions over the full replay's indexes."""
    def back(col):
        if col is None or keep.all():
            return col
        out = np.zeros(N, dtype=bool)
        out[keep] = col
        return out

    return Decisions(family=dec.family, dropped=back(dec.dropped), expired=back(dec.expired),
                     policy_log=dec.policy_log, policy_settings=dec.policy_settings)


def _rows_back(per_stream: list[np.ndarray], replay: Replay, keep: np.ndarray) -> list[np.ndarray]:
    """Survivor rows' flags back onto each stream's full rows (``False`` for shed rows)."""
    out = []
    for k, flags in enumerate(per_stream):
        mine = keep[replay.index_of[k]]
        full = np.zeros(len(mine), bool)
        full[mine] = flags
        out.append(full)
    return out
