"""The capacity model's fast path (Lindley closed form, compiled queue and
state kernels, closed-form emission over the survivors) equals the
per-arrival reference (pipelines/capacity/reference.py) on random inputs:
finish times, shed sets and causes, occupancy series, evictions, memory,
the emitted set, emission times and latency -- for every queue mode."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from streamjoin.pipelines.capacity import model
from streamjoin.pipelines.capacity.queueing import DROPPED_NEW, REPLACED
from streamjoin.pipelines.capacity.reference import simulate
from streamjoin.pipelines.capacity.spec import CapacitySpec
from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple
from helpers.adapters import key_frames
from helpers.strategies import fixed_policy, ref_streams

CAUSES = {0: "processed", DROPPED_NEW: "dropped-new", REPLACED: "replaced"}


def fast(streams, windows, policy, spec):
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    arrival = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    keys = key_frames(streams)
    out = join(ts, arrival, keys, windows, policy)
    cap = model.apply(spec, out.replay, out.decisions, out.combos, out.emission, out.memory, windows, policy,
                      keys=keys)
    return out, cap


def compare(streams, windows, policy, spec):
    ref = simulate(streams, windows, policy, spec)
    out, cap = fast(streams, windows, policy, spec)
    r = out.replay
    key = list(zip(r.stream.tolist(), r.row.tolist()))
    q = cap.queue
    assert {key[a]: CAUSES[int(c)] for a, c in enumerate(q.cause)} == ref.cause
    assert {key[a]: int(q.finish_ns[a]) for a in range(r.N) if q.cause[a] == 0} == ref.finish_ns
    assert cap.occupancy.T.tolist() == ref.occupancy
    em = cap.emission
    got = {}
    for c in np.flatnonzero(em.emitted):
        combo = tuple(int(out.combos.rows[k][c]) for k in range(r.n))
        got[combo] = (int(em.emit_us[c]), int(em.latency_us[c]))
    assert got == ref.emitted
    truth = {tuple(int(out.combos.rows[k][c]) for k in range(r.n)) for c in range(len(out.combos))}
    assert truth == ref.truth
    assert cap.memory.sum(axis=0).tolist() == ref.memory
    evicted = set()
    if cap.evicted is not None:
        evicted = {(k, int(row)) for k, flags in enumerate(cap.evicted) for row in np.flatnonzero(flags)}
    assert evicted == ref.evicted


@st.composite
def capacity_specs(draw, symmetric: bool):
    queue = draw(st.one_of(st.none(), st.integers(1, 3)))
    return CapacitySpec(
        tuple_ns=draw(st.integers(0, 10_000)),
        result_ns=draw(st.sampled_from([0, 0, 700, 2500])),
        cpu=draw(st.sampled_from([1.0, 1.0, 0.5, 0.3])),
        queue=queue,
        shed=draw(st.sampled_from(["drop-new", "replace-oldest"])),
        state=draw(st.one_of(st.none(), st.integers(1, 3))) if symmetric else None,
    )


@st.composite
def problems(draw):
    n = draw(st.integers(2, 3))
    streams = ref_streams(draw, n, 7, keyed=draw(st.booleans()))
    windows = tuple(draw(st.integers(0, 12)) for _ in range(n))
    policy = fixed_policy(draw, n, 25)
    return streams, windows, policy, draw(capacity_specs(policy.name == "static"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_fast_path_equals_reference(problem):
    compare(*problem)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.sampled_from(["drop-new", "replace-oldest"]))
def test_fast_path_equals_reference_under_overload(problem, shed):
    """Service far above the arrival gaps: most tuples queue, many are shed."""
    streams, windows, policy, spec = problem
    spec = CapacitySpec(tuple_ns=6000, result_ns=spec.result_ns, cpu=spec.cpu, queue=1 + len(streams[0]) % 2,
                        shed=shed, state=spec.state)
    compare(streams, windows, policy, spec)


def test_equal_arrival_times_follow_the_tie_rules():
    """Several tuples arriving at the same microsecond (replay order breaks the tie)."""
    streams = [[RefTuple(0, r, ts=t, arrival=5) for r, t in enumerate([1, 2, 3])],
               [RefTuple(1, r, ts=t, arrival=5) for r, t in enumerate([1, 3])]]
    for shed in ("drop-new", "replace-oldest"):
        compare(streams, (5, 5), PolicySpec("static", retention=(0, 0)),
                CapacitySpec(tuple_ns=1000, queue=2, shed=shed, state=1))
