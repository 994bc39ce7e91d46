"""Hand-computed cases of the capacity model (docs/semantics.md, "Capacity
(issue 20)"): the queue's finish times, drop-new against replace-oldest on
one input, the state cap's evict-oldest with its probe-before-evict order,
and the Lindley closed form against the recursion as written."""

from __future__ import annotations

import numpy as np
import pytest

from streamjoin.pipelines.capacity import queueing
from streamjoin.pipelines.capacity.reference import simulate
from streamjoin.pipelines.capacity.spec import CapacitySpec
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple

from test_model_vs_reference import compare, fast


def test_queue_by_hand_drop_new_and_replace_oldest():
    """One stream, arrivals at 0, 1, 2, 3 us, 2.5 us of service each, queue=2.

    drop-new: a0 serves [0, 2.5); a1 waits; a2 finds {a0 in service, a1} = 2 -> dropped;
    at 3 a0 has left, a1 serves [2.5, 5), a3 is admitted and serves [5, 7.5).
    replace-oldest: a2 replaces a1 (a0 is in service, so not replaceable), then serves
    [2.5, 5); a3 serves [5, 7.5).
    """
    arrival = np.array([0, 1000, 2000, 3000], np.int64)
    service = np.full(4, 2500, np.int64)
    stream = np.zeros(4, np.int64)
    finish, cause, leave = queueing.bounded_queue(arrival, stream, service, 1, 2, False)
    assert finish.tolist() == [2500, 5000, -1, 7500]
    assert cause.tolist() == [0, 0, queueing.DROPPED_NEW, 0]
    finish, cause, leave = queueing.bounded_queue(arrival, stream, service, 1, 2, True)
    assert finish.tolist() == [2500, -1, 5000, 7500]
    assert cause.tolist() == [0, queueing.REPLACED, 0, 0]
    assert leave[1] == 2   # replaced by the arrival at index 2


def test_lindley_closed_form_is_the_recursion():
    rng = np.random.default_rng(3)
    arrival = np.sort(rng.integers(0, 10_000, 500))
    service = rng.integers(0, 60, 500)
    expected, prev = [], -(2**62)
    for t, s in zip(arrival.tolist(), service.tolist()):
        prev = max(t, prev) + s
        expected.append(prev)
    assert queueing.lindley(arrival, service).tolist() == expected


# L: l0 (ts 0, arrives 0); R: r0 (ts 0, arrives 1 us), r1 (ts 3, arrives 2 us); windows 10 us.
# Truth: (l0, r0) and (l0, r1).  5 us per tuple, one tuple per stream queue: l0 serves
# [0, 5); r0 waits; r1 finds R's queue full.
SHED_STREAMS = [[RefTuple(0, 0, ts=0, arrival=0)],
                [RefTuple(1, 0, ts=0, arrival=1), RefTuple(1, 1, ts=3, arrival=2)]]
STATIC = PolicySpec("static", retention=(100, 100))


@pytest.mark.parametrize("shed, emitted", [
    # drop-new: r1 is shed; r0 serves [5, 10): (l0, r0) at 10 us, latency 10 - 1
    ("drop-new", {(0, 0): (10, 9)}),
    # replace-oldest: r0 is shed; r1 serves [5, 10): (l0, r1) at 10 us, latency 10 - 2
    ("replace-oldest", {(0, 1): (10, 8)}),
])
def test_drop_new_against_replace_oldest_by_hand(shed, emitted):
    spec = CapacitySpec(tuple_ns=5000, queue=1, shed=shed)
    ref = simulate(SHED_STREAMS, (10, 10), STATIC, spec)
    assert ref.emitted == emitted
    compare(SHED_STREAMS, (10, 10), STATIC, spec)
    out, cap = fast(SHED_STREAMS, (10, 10), STATIC, spec)
    assert int(np.count_nonzero(cap.plain_emitted)) == 2    # the infinite machine emits both
    assert int(np.count_nonzero(cap.emission.emitted)) == 1


def test_state_cap_evicts_the_oldest_after_the_probe():
    """L: l0 (ts 0, arr 0), l1 (ts 2, arr 2); R: r0 (ts 1, arr 1), r1 (ts 3, arr 3); state=1.

    a=0 L={l0}; a=1 r0 probes {l0}: (l0,r0), R={r0}; a=2 l1 probes {r0}: (l1,r0), then
    L={l0,l1} > 1 evicts l0; a=3 r1 probes L={l1}: (l1,r1), R={r0,r1} evicts r0.
    (l0, r1) is lost to the state cap; memory after each step 1, 2, 2, 2.
    """
    streams = [[RefTuple(0, 0, ts=0, arrival=0), RefTuple(0, 1, ts=2, arrival=2)],
               [RefTuple(1, 0, ts=1, arrival=1), RefTuple(1, 1, ts=3, arrival=3)]]
    spec = CapacitySpec(tuple_ns=0, state=1)
    compare(streams, (10, 10), STATIC, spec)
    out, cap = fast(streams, (10, 10), STATIC, spec)
    got = {tuple(int(out.combos.rows[k][c]) for k in range(2)) for c in np.flatnonzero(cap.emission.emitted)}
    assert got == {(0, 0), (1, 0), (1, 1)}
    assert [e.tolist() for e in cap.evicted] == [[True, False], [True, False]]
    assert cap.memory.sum(axis=0).tolist() == [1, 2, 2, 2]
    assert cap.uncapped_emitted.all()          # without the cap the same survivors emit all four
