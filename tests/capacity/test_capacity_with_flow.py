"""``--capacity`` with ``--flow-control`` (docs/semantics.md, "Capacity with flow
control"): seed 001's units delay the arrivals first, the operator's queue,
shedding, state cap and service then run on what they let through, and
latency counts from each member's own arrival.

The fast path (delay_arrivals, the local join on the delayed arrivals,
model.apply, model.count_from_own_arrivals -- the composition run.py makes)
equals the per-arrival reference (reference.simulate_with_flow: the
per-tuple flow reference feeding the per-arrival capacity reference) on
random inputs, plus one case computed by hand."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from streamjoin.pipelines.capacity import model
from streamjoin.pipelines.capacity.flow import delay_arrivals
from streamjoin.pipelines.capacity.queueing import DROPPED_NEW, REPLACED
from streamjoin.pipelines.capacity.reference import simulate_with_flow
from streamjoin.pipelines.capacity.spec import CapacitySpec
from streamjoin.pipelines.config.flow_control import FlowControl
from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple
from helpers.adapters import key_frames

from test_model_vs_reference import problems as capacity_problems

CAUSES = {0: "processed", DROPPED_NEW: "dropped-new", REPLACED: "replaced"}


def fast(streams, windows, policy, spec, fc):
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    original = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    flow = delay_arrivals(original, fc)
    keys = key_frames(streams)
    out = join(ts, flow.arrival, keys, windows, policy)
    cap = model.apply(spec, out.replay, out.decisions, out.combos, out.emission, out.memory, windows, policy,
                      keys=keys)
    model.count_from_own_arrivals(cap, out.emission, out.combos.rows, original)
    return flow, out, cap


def compare(streams, windows, policy, spec, fc):
    ref = simulate_with_flow(streams, windows, policy, spec, fc)
    flow, out, cap = fast(streams, windows, policy, spec, fc)
    assert [a.tolist() for a in flow.arrival] == ref.flow["arrival"]
    r, q, rc = out.replay, cap.queue, ref.capacity
    key = list(zip(r.stream.tolist(), r.row.tolist()))
    assert {key[a]: CAUSES[int(c)] for a, c in enumerate(q.cause)} == rc.cause
    assert {key[a]: int(q.finish_ns[a]) for a in range(r.N) if q.cause[a] == 0} == rc.finish_ns
    assert cap.occupancy.T.tolist() == rc.occupancy
    combo = [tuple(int(out.combos.rows[k][c]) for k in range(r.n)) for c in range(len(out.combos))]
    em = cap.emission
    assert {combo[c]: (int(em.emit_us[c]), int(em.latency_us[c])) for c in np.flatnonzero(em.emitted)} == rc.emitted
    assert set(combo) == rc.truth
    assert {combo[c]: int(cap.plain_latency_us[c]) for c in np.flatnonzero(cap.plain_emitted)} == ref.plain_latency
    assert cap.memory.sum(axis=0).tolist() == rc.memory
    evicted = set()
    if cap.evicted is not None:
        evicted = {(k, int(row)) for k, flags in enumerate(cap.evicted) for row in np.flatnonzero(flags)}
    assert evicted == rc.evicted
    return ref, flow, out, cap


@st.composite
def flow_settings(draw):
    buffer = draw(st.integers(1, 6))
    return FlowControl(
        buffer=buffer,
        rate=draw(st.sampled_from([200.0, 1000.0, 5000.0, 1e6])),
        target=draw(st.one_of(st.none(), st.integers(0, buffer).map(float))),
        interval_us=draw(st.sampled_from([3, 5, 10, 1000])),
        policy=draw(st.sampled_from(["max-flow", "min-flow"])),
        lambdas=tuple(draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.9]), max_size=2))),
        mus=tuple(draw(st.lists(st.sampled_from([0.0, 0.3]), max_size=1))),
        surge=draw(st.sampled_from([0.0, 0.0, 0.5])),
    )


@st.composite
def problems(draw):
    """The capacity model's random problems, behind random units."""
    return (*draw(capacity_problems()), draw(flow_settings()))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_combined_fast_path_equals_reference(problem):
    compare(*problem)


def test_combined_by_hand():
    """Flow control holds l0 and r1 back to the same instant; the operator then serves them in
    turn, so r1's result waits for l0's service.

    Streams (ts = arrival): L: l0 at 0 us; R: r0 at 1 us, r1 at 2 us; windows 10 us, static with
    retention 100 us: truth (l0, r0), (l0, r1).  Flow control: buffer=1, target=0, no gains
    (r_max = rho), rate=2000/s, interval=1000 us, max-flow; shares c = (1/3, 2/3) -> rho per
    interval = (2/3, 4/3) tuples.  Interval 0: credit L = floor(min(2/3 + 0, 1 - 0 + 2/3)) = 0,
    R = floor(min(4/3, 1 + 4/3)) = 1 -> r0 passes at 1 us; l0 and r1 wait (b_R(1) = 0:
    processed min(4/3, 1) = 1; kappa_L = 2/3, kappa_R = 1/3).  Interval 1 (t_1 = 1000):
    credit L = floor(2/3 + 2/3) = 1, R = floor(4/3 + 1/3) = 1: l0 leaves at 1000, r1 at 1000.
    Arrivals at the operator: r0 1, l0 1000, r1 1000 (replay order r0, l0, r1 by (arrival, stream)).
    Capacity tuple=5us, queue=1, drop-new: r0 serves [1, 6) us; l0 [1000, 1005); r1 arrives at
    1000 while R's queue is empty (r0 has left) -> admitted, serves [1005, 1010).
    Results: (l0, r0) emitted when l0 finishes: 1005 us, latency 1005 - max(0, 1) = 1004;
    (l0, r1) when r1 finishes: 1010 us, latency 1010 - max(0, 2) = 1008.
    Infinite operator: (l0, r0) at l0's arrival at the join, 1000 -> 999; (l0, r1) at 1000 -> 998.
    Added delay: l0 1000, r0 0, r1 998; queueing delay (start - arrival at the operator):
    r0 0, l0 0, r1 5 us."""
    streams = [[RefTuple(0, 0, ts=0, arrival=0)],
               [RefTuple(1, 0, ts=1, arrival=1), RefTuple(1, 1, ts=2, arrival=2)]]
    fc = FlowControl(buffer=1, rate=2000.0, target=0.0, interval_us=1000, lambdas=())
    spec = CapacitySpec(tuple_ns=5000, queue=1)
    policy = PolicySpec("static", retention=(100, 100))
    ref, flow, out, cap = compare(streams, (10, 10), policy, spec, fc)
    assert ref.flow["arrival"] == [[1000], [1, 1000]]
    assert ref.capacity.emitted == {(0, 0): (1005, 1004), (0, 1): (1010, 1008)}
    assert ref.plain_latency == {(0, 0): 999, (0, 1): 998}
    assert ref.capacity.finish_ns == {(1, 0): 5000, (0, 0): 1_004_000, (1, 1): 1_009_000}
    from streamjoin.pipelines.analysis.capacity import queueing_delay_us
    assert sorted(queueing_delay_us(cap).tolist()) == [0, 0, 5]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.sampled_from(["drop-new", "replace-oldest"]))
def test_combined_fast_path_equals_reference_under_overload(problem, shed):
    """Service far above the gaps the units leave: the operator's queues fill and shed."""
    streams, windows, policy, spec, fc = problem
    spec = CapacitySpec(tuple_ns=20_000, result_ns=spec.result_ns, cpu=spec.cpu, queue=1 + len(streams[0]) % 2,
                        shed=shed, state=spec.state)
    compare(streams, windows, policy, spec, fc)
