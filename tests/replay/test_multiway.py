"""Issue 3: n-way joins with key, distance and expression predicates.

The fast engine (both enumeration methods, any probe order) must equal the
per-arrival reference replay for n = 3 and 4 streams under every policy,
with the predicate evaluated independently in Python for the reference.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.adapters import key_frames, local_engine
from helpers.strategies import fixed_policy, ref_streams

from streamjoin.pipelines.replay.candidates import Space, enumerate_truth
from streamjoin.pipelines.replay.probe_order import probe_order
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.config.options import parse_distance
from streamjoin.pipelines.replay.reference import RefTuple, brute_force_truth, replay
from streamjoin.pipelines.base.errors import InputError

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: SQL expressions and the same predicate written in Python for the reference
WHERES = {
    "s0_v0 + s1_v0 >= 3": lambda m: m[0].vec[0] + m[1].vec[0] >= 3,
    "s1_v1 <> s2_v1": lambda m: m[1].vec[1] != m[2].vec[1],
    "ABS(s0_ts_us - s2_ts_us) <= 4 OR s2_row = 0": lambda m: abs(m[0].ts - m[2].ts) <= 4 or m[2].row == 0,
    "s2_arrival_us - s0_arrival_us > -5": lambda m: m[2].arrival - m[0].arrival > -5,
}


def within(threshold):
    def pred(members):
        return all(
            sum((a - b) ** 2 for a, b in zip(x.vec, y.vec)) <= threshold * threshold
            for i, x in enumerate(members) for y in members[i + 1:]
        )
    return pred


@st.composite
def multiway(draw, n_streams=st.integers(3, 4), max_rows=6):
    n = draw(n_streams)
    keyed = draw(st.booleans())
    streams = ref_streams(draw, n, max_rows, ts_max=30, small_delay=2, keys=2, keyed=keyed, vectors=True)
    windows = tuple(draw(st.integers(0, 10)) for _ in range(n))
    policy = fixed_policy(draw, n, 20)
    # integral thresholds make points exactly on the threshold common (3-4-5)
    distance = draw(st.one_of(st.none(), st.sampled_from([0.0, 1.0, 2.0, 2.5, 5.0])))
    where = draw(st.one_of(st.none(), st.sampled_from(sorted(WHERES))))
    order = draw(st.permutations(list(range(n))))
    return streams, windows, policy, distance, where, order


def reference_predicate(distance, where):
    preds = []
    if distance is not None:
        preds.append(within(distance))
    if where is not None:
        preds.append(WHERES[where])
    if not preds:
        return None
    return lambda members: all(p(members) for p in preds)


def _same(fast, ref):
    assert fast.truth == ref.truth
    assert fast.emitted == ref.emitted
    assert fast.memory == ref.memory
    assert fast.dropped == ref.dropped
    assert fast.expired == ref.expired


@SETTINGS
@given(multiway())
def test_multiway_engine_equals_reference(problem):
    streams, windows, policy, distance, where, order = problem
    ref = replay(streams, windows, policy, predicate=reference_predicate(distance, where))
    _same(local_engine(streams, windows, policy, distance=distance, where=where, order=order), ref)


@SETTINGS
@given(multiway())
def test_multiway_bucket_fallback_and_planned_order(problem):
    streams, windows, policy, distance, where, _ = problem
    ref = replay(streams, windows, policy, predicate=reference_predicate(distance, where))
    _same(local_engine(streams, windows, policy, method="bucket", distance=distance, where=where), ref)
    _same(local_engine(streams, windows, policy, distance=distance, where=where, order=None), ref)


@SETTINGS
@given(multiway(n_streams=st.integers(2, 4), max_rows=8))
def test_distance_truth_equals_brute_force(problem):
    streams, windows, _, distance, _, order = problem
    distance = 5.0 if distance is None else distance
    expected = brute_force_truth(streams, windows, predicate=within(distance))
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    vectors = [np.array([t.vec for t in s], dtype=np.float64).reshape(len(s), 2) for s in streams]
    keys = key_frames(streams)
    combos = enumerate_truth(ts, keys, windows, space=Space(vectors, distance), order=order)
    listed = list(zip(*[r.tolist() for r in combos.rows]))
    assert len(listed) == len(set(listed)) and set(listed) == expected


def test_float_coordinates_on_the_threshold_edge():
    """Points exactly `threshold` apart along a diagonal must join (grid rounding)."""
    rng = np.random.default_rng(3)
    a = rng.uniform(-1e6, 1e6, size=(2000, 2))
    angle = rng.uniform(0, 2 * math.pi, 2000)
    thr = 1000.0
    b = a + np.c_[np.cos(angle), np.sin(angle)] * thr * 0.999999
    ts = [np.arange(2000, dtype=np.int64), np.arange(2000, dtype=np.int64)]
    combos = enumerate_truth(ts, [None, None], [0, 0], space=Space([a, b], thr))
    assert set(zip(*[r.tolist() for r in combos.rows])) >= {(i, i) for i in range(2000)}


def test_probe_order_puts_the_most_selective_pair_first():
    rng = np.random.default_rng(0)
    n = 3000
    ts = [np.sort(rng.integers(0, 10_000_000, n)) for _ in range(3)]
    # stream 2 rarely matches anything: its keys are mostly unique
    import polars as pl
    keys = [pl.DataFrame({"__key0": rng.integers(0, 5, n)}), pl.DataFrame({"__key0": rng.integers(0, 5, n)}),
            pl.DataFrame({"__key0": rng.integers(0, 5000, n)})]
    plan = probe_order(ts, keys, [50_000, 50_000, 50_000])
    assert plan.order[:2] in ([0, 2], [2, 0], [1, 2], [2, 1])
    assert plan.selectivity[(0, 1)] > plan.selectivity[(0, 2)]


@pytest.mark.parametrize("sizes", [(300, 120), (80, 200), (50, 50)])
def test_two_stream_order_is_smaller_first_with_the_exact_selectivity(sizes):
    """Two streams: the local engine's probe order comes from the join itself."""
    import polars as pl

    from streamjoin.pipelines.engines.local import join

    rng = np.random.default_rng(sum(sizes))
    ts = [np.sort(rng.integers(0, 1_000_000, m)) for m in sizes]
    arrival = [t + rng.integers(0, 5_000, len(t)) for t in ts]
    keys = [pl.DataFrame({"__key0": rng.integers(0, 4, m)}) for m in sizes]
    out = join(ts, arrival, keys, [20_000, 20_000], PolicySpec(name="static", retention=(0, 0)))
    truth = len(brute_force_truth(
        [[RefTuple(k, r, int(t), int(a), (int(key),)) for r, (t, a, key) in enumerate(zip(ts[k], arrival[k], keys[k]["__key0"]))]
         for k in range(2)], [20_000, 20_000]))
    assert len(out.combos) == truth
    first = 0 if sizes[0] <= sizes[1] else 1
    assert out.probe_order.order == [first, 1 - first]
    assert out.probe_order.selectivity[(0, 1)] == truth / (sizes[0] * sizes[1])
    assert out.probe_order.estimated_sizes == [float(sizes[first]), float(truth)]


@pytest.mark.parametrize("text, cols, thr", [("x,y<=5000", ("x", "y"), 5000.0), (" pos_x , pos_y<= 1.5 ", ("pos_x", "pos_y"), 1.5),
                                             ("d<=0", ("d",), 0.0)])
def test_parse_distance(text, cols, thr):
    spec = parse_distance(text)
    assert spec.columns == cols and spec.threshold == thr


@pytest.mark.parametrize("text", ["x,y<5000", "x,y", "<=5", "x,x<=1", "x<=-1", "x<=abc"])
def test_parse_distance_rejects(text):
    with pytest.raises(InputError):
        parse_distance(text)
