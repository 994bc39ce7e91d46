"""Issue 4 (pure Python, no JVM): the partition-wise progress pass and the
ATR / CTR routing + ownership rules, exhaustively against the local engine.

The Spark engine runs exactly these functions inside ``mapInArrow`` /
``applyInArrow``; ``spark_join(..., plane="local")`` runs them in-process,
partition by partition, so every router x partitions x policy x streams
combination is checked here on many random inputs, and
tests/engines/test_spark_engine.py checks the Spark plumbing on fewer cases.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.adapters import key_frames, local_engine
from helpers.strategies import ref_streams

from streamjoin.pipelines.replay import partitioned_progress as sp
from streamjoin.pipelines.engines.spark import kernels as spark_kernels
from streamjoin.pipelines.engines.spark.engine import spark_join
from streamjoin.pipelines.engines.spark.routing import RouteSettings
from streamjoin.pipelines.policies import POLICY_NAMES, PolicySpec
from streamjoin.pipelines.policies.controller import RecallTarget
from streamjoin.pipelines.replay.reference import RefTuple
from streamjoin.pipelines.route import greedy_set_cover, histogram, theorem_b
from streamjoin.pipelines.route import atr, ctr

SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
POLICIES = [p for p in ("none", "kslack", "mpkslack", "static", "qjoin", "qkslack") if p in POLICY_NAMES]


def make_policy(name, n, draw_ints):
    if name == "kslack":
        return PolicySpec(name, k=tuple(draw_ints(0, 25, n)))
    if name == "static":
        return PolicySpec(name, retention=tuple(draw_ints(0, 25, n)))
    if name in ("qjoin", "qkslack"):
        return PolicySpec(name, target=RecallTarget(recall=0.9, period_us=20, interval_us=5, granularity_us=2,
                                                    basic_window_us=2))
    return PolicySpec(name)


@st.composite
def problems(draw, n_streams=st.integers(2, 4), max_rows=9):
    n = draw(n_streams)
    keyed = draw(st.booleans())
    streams = ref_streams(draw, n, max_rows, keyed=keyed)
    windows = tuple(draw(st.integers(0, 12)) for _ in range(n))
    name = draw(st.sampled_from(POLICIES))
    policy = make_policy(name, n, lambda lo, hi, m: [draw(st.integers(lo, hi)) for _ in range(m)])
    return streams, windows, policy


def columns(streams):
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    ar = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    return ts, ar


def emitted_of(out):
    rows = [r.tolist() for r in out.combos.rows]
    combos = list(zip(*rows))
    assert len(combos) == len(set(combos)), "a combination was produced twice"
    em = out.emission
    return set(combos), {c: (e, l) for c, m, e, l in zip(combos, em.emitted.tolist(), em.emit_us.tolist(),
                                                      em.latency_us.tolist()) if m}


# ---------------------------------------------------------------- progress pass

@SETTINGS
@given(problems(), st.integers(1, 8), st.integers(1, 6), st.randoms(use_true_random=False))
def test_partitionwise_progress_equals_progress_py(problem, parts, rparts, rnd):
    streams, windows, policy = problem
    if policy.adaptive:
        return  # decided on the driver (documented)
    ts, ar = columns(streams)
    ref = sp.driver_facts(ts, ar, windows, policy)
    N = len(ref["a"])
    cuts = sorted(rnd.randint(0, N) for _ in range(parts - 1))
    bounds = [0, *cuts, N]
    chunks = [{k: ref[k][a:b] for k in ("stream", "row", "ts", "arrival")} for a, b in zip(bounds, bounds[1:])]
    got = sp.progress_chunks(chunks, len(streams), windows, policy, release_chunks=rparts)
    n = len(streams)
    for col in sp.fact_columns(n) + ["rel", "rel_us"]:
        if policy.family == "symmetric" and col in ("R", "R_prev"):
            continue
        assert np.array_equal(np.asarray(got[col]), np.asarray(ref[col])), col


# ---------------------------------------------------------------- routers == local engine

@SETTINGS
@given(problems(), st.sampled_from(["none", "atr", "ctr"]), st.sampled_from([1, 2, 3, 7]), st.integers(1, 15),
       st.booleans(), st.sampled_from([1, 3, 1 << 18]))
def test_routed_plane_equals_local_engine(problem, router, partitions, segment, adapt, block):
    streams, windows, policy = problem
    ref = local_engine(streams, windows, policy)
    ts, ar = columns(streams)
    # CTR's kernel probes (and pairs) a block at a time: tiny blocks put boundaries everywhere
    saved = spark_kernels.PROBE_BLOCK, spark_kernels.PAIR_BLOCK
    spark_kernels.PROBE_BLOCK = spark_kernels.PAIR_BLOCK = block
    try:
        out = spark_join(ts, ar, key_frames(streams), windows, policy, plane="local",
                         settings=RouteSettings(router, partitions, segment, adapt=adapt))
    finally:
        spark_kernels.PROBE_BLOCK, spark_kernels.PAIR_BLOCK = saved
    truth, emitted = emitted_of(out)
    assert truth == ref.truth
    assert emitted == ref.emitted
    assert out.memory.sum(axis=0).tolist() == ref.memory


@pytest.mark.parametrize("router", ["none", "atr", "ctr"])
@pytest.mark.parametrize("partitions", [1, 2, 3, 7])
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_router_partitions_streams(policy, router, partitions, n):
    """The full matrix, on a larger fixed-seed input (disorder, keys, asymmetric windows)."""
    rng = np.random.default_rng(hash((policy, router, partitions, n)) % 2**32)
    streams = []
    for i in range(n):
        rows = []
        for r in range(int(rng.integers(10, 40))):
            t = int(rng.integers(0, 200))
            d = int(rng.integers(0, 4) if rng.random() < 0.8 else rng.integers(0, 60))
            rows.append(RefTuple(i, r, t, t + d, (int(rng.integers(0, 2)),)))
        streams.append(rows)
    windows = tuple(int(x) for x in rng.integers(0, 25, n))
    pol = make_policy(policy, n, lambda lo, hi, m: [int(x) for x in rng.integers(lo, hi + 1, m)])
    ref = local_engine(streams, windows, pol)
    ts, ar = columns(streams)
    out = spark_join(ts, ar, key_frames(streams), windows, pol, plane="local",
                     settings=RouteSettings(router, partitions, int(rng.integers(5, 40))))
    truth, emitted = emitted_of(out)
    assert truth == ref.truth and emitted == ref.emitted


# ---------------------------------------------------------------- ownership rules

def test_atr_seed_figure_7():
    """Seed 000 Fig. 7: S2 tuples in [3, 7) reach both v1 and v2; the pair is owned once."""
    hist = histogram([np.arange(0, 15), np.arange(0, 15), np.arange(0, 15)], buckets=15)
    hist.counts[0] *= 3  # S1 is the fastest: the master
    p = atr.plan(hist, [2, 2, 3], 5, 3)
    assert p.master.tolist() == [0, 0, 0]
    lo, hi = p.ranges(1)
    assert (lo[1], hi[1]) == (5 - 2, 10 + 2)
    idx, seg = atr.assign_segments(p, 1, np.array([4, 6]))
    assert sorted(zip(idx.tolist(), seg.tolist())) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert atr.owner_segment(p, [np.array([6]), np.array([5]), np.array([5])]).tolist() == [1]


def test_atr_role_switch_owns_every_combination_once():
    """Across a master switch, the owner rule picks exactly one segment."""
    hist = histogram([np.r_[np.arange(0, 50, 1), np.arange(50, 100, 5)],
                      np.r_[np.arange(0, 50, 5), np.arange(50, 100, 1)]], buckets=100)
    p = atr.plan(hist, [7, 4], 10, 3)
    assert p.switches >= 1
    rng = np.random.default_rng(0)
    t0 = rng.integers(0, 100, 3000)
    t1 = t0 + rng.integers(-4, 8, 3000)   # pairs valid with W = (7, 4): t1 - t0 in [-W_1, W_0] = [-4, 7]
    own = atr.owner_segment(p, [t0, t1])
    for k, t in ((0, t0), (1, t1)):
        idx, seg = atr.assign_segments(p, k, t)
        have = set(zip(idx.tolist(), seg.tolist()))
        assert all((c, s) in have for c, s in enumerate(own.tolist())), "owner segment lacks a member"


def test_greedy_weighted_set_cover():
    subsets = {0: {1, 2, 3}, 1: {3, 4}, 2: {4, 5}, 3: {1, 2, 3, 4, 5}}
    assert greedy_set_cover({1, 2, 3, 4, 5}, subsets, {0: 1, 1: 1, 2: 1, 3: 10}) == [0, 2]
    assert greedy_set_cover({1, 2, 3, 4, 5}, subsets, {0: 1, 1: 1, 2: 1, 3: 1}) == [3]
    with pytest.raises(ValueError):
        greedy_set_cover({9}, subsets, {})


def test_ctr_storage_spreads_and_probes_cover():
    rng = np.random.default_rng(1)
    ts = [np.sort(rng.integers(0, 10**6, 3000)) for _ in range(3)]
    p = ctr.plan(histogram(ts), [50_000] * 3, 20_000, 4, [0, 1, 2])
    counts = np.bincount(p.host.ravel(), minlength=4)
    assert counts.min() > 0   # storage never collapses onto one host
    for j in range(5, p.slots):
        for hop in (1, 2):
            k = p.orders[0][hop - 1]
            need = {int(p.host[k, s]) for s in p.needed(0, j, k)}
            assert need <= set(p.dest(0, j, hop, int(p.host[0, j])))


# ---------------------------------------------------------------- measured overheads

def stationary(n, rate_per_s, seconds, seed, keys=1000):
    """Uniform arrivals (in order) and many keys: replication does not depend on
    the keys, and they keep the result (and the test's memory) small."""
    import polars as pl

    rng = np.random.default_rng(seed)
    ts, kf = [], []
    for i in range(n):
        m = int(rate_per_s[i] * seconds)
        ts.append(np.sort(rng.integers(0, int(seconds * 1e6), m)).astype(np.int64))
        kf.append(pl.DataFrame({"__key0": rng.integers(0, keys, m)}))
    return ts, kf


def test_atr_measured_replication_within_10pct_of_theorem_b():
    ts, keys = stationary(2, [2000, 300], 20, 3)
    W = [5_000, 20_000]
    pol = PolicySpec("none")
    out = spark_join(ts, ts, keys, W, pol, plane="local", settings=RouteSettings("atr", 4, 500_000))
    g = out.routing
    assert g["atr"]["masters"] == [0]
    measured, predicted = g["overhead_measured"], g["overhead_predicted"]
    rates = [len(t) / 20 for t in ts]
    assert predicted == pytest.approx(theorem_b(rates, W, 0, 500_000), rel=0.05)
    assert abs(measured - predicted) <= 0.10 * predicted


def test_ctr_replicates_less_than_atr_with_large_windows():
    """Seed 000: three similar-rate streams and a large window favour CTR."""
    ts, keys = stationary(3, [300, 300, 300], 20, 4)
    W = [1_000_000] * 3
    pol = PolicySpec("none")
    got = {}
    for router in ("atr", "ctr"):
        out = spark_join(ts, ts, keys, W, pol, plane="local",
                         settings=RouteSettings(router, 4, 500_000))
        got[router] = out.routing
    assert got["ctr"]["replication_factor"] < got["atr"]["replication_factor"]
    auto = spark_join(ts, ts, keys, W, pol, plane="local", settings=RouteSettings("auto", 4, 500_000))
    assert auto.routing["router"] == "ctr"
    assert auto.routing["predicted"]["ctr"] < auto.routing["predicted"]["atr"]


def test_auto_prefers_atr_for_one_fast_stream_and_small_windows():
    ts, keys = stationary(2, [3000, 50], 10, 5)
    out = spark_join(ts, ts, keys, [2_000, 2_000], PolicySpec("none"), plane="local",
                     settings=RouteSettings("auto", 4, 200_000))
    assert out.routing["router"] == "atr"


def test_the_probe_order_is_timed_under_plan_alone(monkeypatch):
    """A ``--router none`` run builds its sampled probe order after the join, where the
    outcome reads it: its time goes to ``plan`` and not into ``collect`` as well (a
    stand-in clock jumps 1000 s while the probe order is built)."""
    from streamjoin.pipelines.engines.spark import engine

    jump = [0.0]

    class Clock:
        @staticmethod
        def perf_counter():
            return time.perf_counter() + jump[0]

    def probe_order(*args, **kw):
        jump[0] += 1000.0
        return real(*args, **kw)

    real = engine.probe_order
    monkeypatch.setattr(engine, "time", Clock)
    monkeypatch.setattr(engine, "probe_order", probe_order)
    ts, keys = stationary(2, [300, 200], 2, 7)
    out = spark_join(ts, ts, keys, [2_000, 2_000], PolicySpec("none"), plane="local", settings=RouteSettings("none"))
    assert jump[0] == 1000.0
    assert out.timings_s["plan"] >= 1000.0 and out.timings_s["collect"] < 1000.0, out.timings_s
