"""The columnar planners give today's plans: ATR's fixed-``T`` cut (segment counts
and uses as arrays, the role switches a scan) against its step-by-step loop
(``atr.stepwise_cut`` without ``adapt``), CTR's per-slot counts, uses and storage
and LLF ``place`` against the loops in ``helpers/plan_reference`` -- equal field by
field, floats exactly (the same IEEE operations in the same order)."""

from __future__ import annotations

import numpy as np
from helpers import plan_reference as ref
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.route import Capacity, Histogram, Loads, atr, ctr

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw):
    n = draw(st.integers(1, 3))
    B = draw(st.integers(1, 40))
    bucket = draw(st.integers(1, 50))
    # bursty counts: many empty buckets, some streams much faster for a while (role switches);
    # 3e15 / 1e16 make sums depend on the order of addition (small integers alone cannot)
    counts = np.array([[draw(st.sampled_from([0, 0, 1, 2, 3, 7, 20, 55, 3e15, 1e16])) for _ in range(B)]
                       for _ in range(n)], dtype=float)
    t0 = draw(st.integers(-1000, 1000))
    windows = [draw(st.integers(0, 300)) for _ in range(n)]
    T = draw(st.integers(1, 400))
    P = draw(st.integers(1, 4))
    weights = tuple(draw(st.sampled_from([0.0, 0.1, 1.0, 5.0])) for _ in range(3))
    cap = Capacity(*(draw(st.sampled_from([None, 0.0, 1.0, 1e3])) for _ in range(3)))
    costs = (draw(st.sampled_from([1.0, 0.5, 0.0])), draw(st.sampled_from([0.0, 0.01, 2.0])))
    sel = {(i, k): draw(st.sampled_from([1.0, 0.3, 0.0])) for i in range(n) for k in range(i + 1, n)}
    return Histogram(t0, bucket, counts), windows, T, P, weights, cap, costs, sel


def same_loads(a, b):
    for r in ("cap", "cpu", "mem", "net"):
        assert np.array_equal(getattr(a, r), getattr(b, r)), r
    assert a.weights == b.weights


@SETTINGS
@given(cases())
def test_atr_fixed_cut_equals_the_segment_loop(case):
    """Segments, masters (role switches), switches and every segment's use, to the last bit."""
    hist, W, T, P, weights, cap, costs, sel = case
    W = np.asarray(W, dtype=np.int64)
    starts, ends, masters, use, switches = atr.fixed_cut(hist, W, T, costs, sel)
    s0, e0, m0, lengths, adaptations, u0, sw0 = atr.stepwise_cut(hist, W, T, P, None, costs, sel, adapt=False)
    assert (starts, ends, masters, switches, adaptations) == (s0, e0, m0, sw0, [])
    assert np.array_equal(use, np.asarray(u0, dtype=float).reshape(-1, 3))


@SETTINGS
@given(cases(), st.booleans())
def test_atr_plan_places_the_loop_cut_as_llf_did(case, adapt):
    hist, W, T, P, weights, cap, costs, sel = case
    got = atr.plan(hist, W, T, P, weights, adapt=adapt, capacity=cap, costs=costs, selectivity=sel)
    s0, e0, m0, lengths, adaptations, u0, sw0 = atr.stepwise_cut(hist, np.asarray(W, dtype=np.int64), T, P, None,
                                                                 costs, sel, adapt=adapt)
    span = max(hist.t_end - hist.t0, 1)
    part, loads = ref.place(np.asarray(u0) / np.array([span / 1e6, span, span / 1e6]), P, weights, cap)
    assert np.array_equal(got.start[1:], s0[1:]) and np.array_equal(got.end[:-1], e0[:-1])
    assert np.array_equal(got.master, m0) and np.array_equal(got.part, part)
    assert (got.lengths, got.adaptations, got.switches) == (lengths, adaptations, sw0)
    same_loads(got.estimated, loads)


@SETTINGS
@given(cases())
def test_ctr_plan_equals_the_slot_loops(case):
    hist, W, T, P, weights, cap, costs, sel = case
    W = np.asarray(W, dtype=np.int64)
    slots = max(1, -(-(hist.t_end - hist.t0) // T))
    cnt, use = ctr.segment_use(hist, W, T, slots, costs, sel)
    c0, u0 = ref.ctr_use(hist, W, T, slots, costs, sel)
    assert np.array_equal(cnt, c0) and np.array_equal(use, u0)
    order = list(range(len(W)))[::-1]
    got = ctr.plan(hist, W, T, P, order, weights, capacity=cap, costs=costs, selectivity=sel)
    loads = Loads(P, tuple(weights), cap.of(u0.sum(axis=(0, 1)) / P))
    host, peak = ref.ctr_store(loads, c0, u0, P, -(-int(W.max()) // T) + 1)
    assert np.array_equal(got.host, host) and got.table_peak == peak
    assert np.array_equal(got.weights, loads.w())
    same_loads(got.estimated, loads)


@SETTINGS
@given(st.integers(1, 5), st.lists(st.tuples(*[st.sampled_from([0.0, 0.5, 1.0, 3.0, 1e-3])] * 3), max_size=30),
       st.tuples(*[st.sampled_from([0.0, 0.2, 1.0])] * 3))
def test_place_equals_the_reference(P, use, weights):
    got, gl = atr.place(np.asarray(use), P, weights)
    want, wl = ref.place(np.asarray(use), P, weights)
    assert np.array_equal(got, want)
    same_loads(gl, wl)


def test_histogram_counts_arrays_as_scalars():
    """``count`` with arrays of bounds: element by element what scalar calls give, and
    the cumulative sums are computed once (then recomputed for a new ``counts``)."""
    h = Histogram(5, 3, np.array([[1.0, 0.0, 4.0, 2.0]]))
    lo = np.array([-10, 5, 6, 7, 9, 20])
    hi = lo + np.array([3, 1, 5, 2, 100, 4])
    assert np.array_equal(h.count(0, lo, hi), [float(h.count(0, a, b)) for a, b in zip(lo.tolist(), hi.tolist())])
    assert h.cum is h.cum
    h.counts = np.array([[2.0, 0.0, 0.0, 0.0]])
    assert h.count(0, 0, 100) == 2.0
