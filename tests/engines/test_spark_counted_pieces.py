"""Counting in the Spark tasks (engines/spark/counted.py), without a JVM: the
router-owned pieces, counted partition by partition and merged, give the local
engine's one-walk ``Counted`` in every field, and each partition counts the pairs
(and candidates, and rows) the materialising plane's task for it produces
(``run_plane`` in-process is the reference for ownership) -- under ATR and, two
streams, CTR (the older member's storage host owns a pair)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from helpers.strategies import fixed_policy

from streamjoin.pipelines.base import jit, kernels
from streamjoin.pipelines.engines.local import CountRequest, join
from streamjoin.pipelines.engines.spark import counted
from streamjoin.pipelines.engines.spark.columns import attach_facts, tuple_table
from streamjoin.pipelines.engines.spark.plane import run_plane
from streamjoin.pipelines.replay import counting
from streamjoin.pipelines.replay import partitioned_progress as sp
from streamjoin.pipelines.replay.candidates import BandBounds, compact_ids, key_ids
from streamjoin.pipelines.route import atr, ctr, histogram

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True, scope="module")
def counted_at_any_size():
    with pytest.MonkeyPatch.context() as m:
        m.setattr(counting, "MIN_ROWS", 0)
        assert jit.prebuilt(kernels._count_walk, kernels.COUNT_SIGNATURE) is not None
        yield


@st.composite
def problems(draw):
    keyed = draw(st.booleans())
    ts, arrival, keys = [], [], []
    for k in range(2):
        size = draw(st.integers(1, 60))
        t = np.array(draw(st.lists(st.integers(0, 400), min_size=size, max_size=size)), np.int64)
        d = np.array(draw(st.lists(st.one_of(st.integers(0, 5), st.integers(0, 150)), min_size=size,
                                   max_size=size)), np.int64)
        if draw(st.booleans()):   # rows in time order (the band plan's bounds path) or as drawn
            t = np.sort(t)
        ts.append(t)
        arrival.append(t + d)
        keys.append(pl.DataFrame({"__key0": draw(st.lists(st.integers(0, 2), min_size=size, max_size=size))})
                    if keyed else None)
    windows = (draw(st.integers(0, 40)), draw(st.integers(0, 40)))
    policy = fixed_policy(draw, 2, 80)
    return (ts, arrival, keys, windows, policy, draw(st.integers(1, 120)), draw(st.integers(1, 12)),
            draw(st.integers(5, 120)), draw(st.integers(1, 5)))


def _walk(ts, arrival, keys, windows, policy, period, sample):
    f = sp.driver_facts(ts, arrival, np.asarray(windows, np.int64), policy)
    replay, dec = sp.replay_from_facts(f, 2, policy, [len(t) for t in ts])
    ids = key_ids(list(keys)) if keys[0] is not None else None
    return counted.driver_walk(ts, ids, windows, replay, dec, period, sample), f, ids


def _same_counted(merged, want):
    """Every field of two :class:`~streamjoin.pipelines.replay.counting.Counted`."""
    for field in ("truth", "emitted", "every"):
        assert getattr(merged, field) == getattr(want, field), field
    for field in ("codes", "period_ids", "need"):
        assert np.array_equal(getattr(merged, field), getattr(want, field)), field
    assert (merged.latency is None) == (want.latency is None)
    if want.latency is not None:
        assert np.array_equal(merged.latency, want.latency)


@given(problems())
@SETTINGS
def test_router_owned_pieces_merge_into_the_one_walk_and_the_plane_s_partitions(problem):
    ts, arrival, keys, windows, policy, period, sample, T, P = problem
    want = join(ts, arrival, keys, windows, policy, count=CountRequest(period_us=period, sample=sample)).counted
    got, f, ids = _walk(ts, arrival, keys, windows, policy, period, sample)
    assume(want is not None)
    assert got is not None
    walk = got[0]
    plan = atr.plan(histogram(ts), list(windows), T, P)
    tab = attach_facts(tuple_table(ts, arrival, compact_ids(ids) if ids is not None else None, None)[0], f, 2)
    reference = run_plane(tab, 2, np.asarray(windows, np.int64), policy.family, "atr", plan, keyed=ids is not None)
    alone = run_plane(tab, 2, np.asarray(windows, np.int64), policy.family, "none", None, keyed=ids is not None)
    for k in range(2):   # the rows a partition receives: assign's copies, from the union of its ranges
        i, p_of = atr.assign(plan, k, ts[k])
        for p in range(plan.partitions):
            assert np.array_equal(np.flatnonzero(atr.received(plan, k, ts[k], p)), np.sort(i[p_of == p]))
    for router, p_count in (("none", 1), ("atr", plan.partitions)):
        pcs = counted.pieces(walk, router, plan)
        assert np.all(np.diff(pcs.pos0) > 0) and np.all(pcs.j1 > pcs.j0)
        # every pair in exactly one piece: the pieces tile the plan's positions
        assert int((pcs.j1 - pcs.j0).sum()) == walk.total
        parts, stats = [], []
        for p in range(p_count):   # each ATR task finds its own pieces: those of the driver's full split
            if router == "atr":
                part, st_p, stored = counted.partition_task(walk, router, plan, p)
                stats.append((st_p, stored))
            else:   # none: the identity split, walked piece by piece
                part = counted.count_part(walk, pcs.of(p))
            own = pcs.of(p)
            assert np.array_equal(part["pos0"], own.pos0) and np.array_equal(part["length"], own.j1 - own.j0)
            parts.append(part)
        _same_counted(counted.merge(walk, parts), want)
        if router == "none":   # the one task walks the plan's own bands: its Counted is the merge
            for split in (2, 1 << 40):   # two halves on two threads / one walk
                with pytest.MonkeyPatch.context() as m:
                    m.setattr(counting, "SPLIT_QUERIES", split)
                    whole, st_0, stored = counted.partition_task(walk, "none", None, 0)
                _same_counted(whole, want)
                ref = alone.stats[0]
                assert (st_0["n_out"], st_0["n_cand"], st_0["n_in"]) == (ref["n_out"], ref["n_cand"], ref["n_in"])
                assert stored == [len(ts[0]), len(ts[1])]
        if router == "atr":   # each partition: the materialising task's pairs, candidates and rows
            for p, (st_p, stored) in enumerate(stats):
                ref = reference.stats[p]
                assert (st_p["n_out"], st_p["n_cand"], st_p["n_in"]) == (ref["n_out"], ref["n_cand"], ref["n_in"])
            # the pairs a partition owns: the router's, pair by pair
            rows = reference.combos
            own = atr.owner_partition(plan, [ts[0][rows["r0"]], ts[1][rows["r1"]]])
            assert np.bincount(own, minlength=P).tolist() == [s[0]["n_out"] for s in stats]


def test_the_walk_takes_int32_bands_even_from_an_int64_plan():
    """The counting kernel is compiled for int32 bands: an int64 plan's bands (a
    BandPlan, one stream's rows out of time order) reach it as int32 through the one
    preparation (walk_inputs) and as int32 pieces -- an int64 band array read by
    the compiled call crashes the process (segfault), so Walk.call refuses one."""
    rng = np.random.default_rng(3)
    ts = [np.sort(rng.integers(0, 5000, 300)), rng.integers(0, 5000, 200)]   # stream 1 unsorted: a BandPlan
    arrival = [t + rng.integers(0, 50, len(t)) for t in ts]
    from streamjoin.pipelines.policies import PolicySpec

    policy = PolicySpec("static", retention=(10, 10))
    want = join(ts, arrival, [None, None], (30, 20), policy, count=CountRequest(period_us=100, sample=7)).counted
    got, _, _ = _walk(ts, arrival, [None, None], (30, 20), policy, 100, 7)
    walk = got[0]
    assert walk.start.dtype == np.int32 and walk.end.dtype == np.int32
    plan = atr.plan(histogram(ts), [30, 20], 400, 3)
    pcs = counted.pieces(walk, "atr", plan)
    assert pcs.j0.dtype == np.int32 and pcs.j1.dtype == np.int32 and len(pcs.q) > len(set(pcs.q.tolist()))
    merged = counted.merge(walk, [counted.count_part(walk, pcs.of(p)) for p in range(plan.partitions)])
    assert merged.truth == want.truth > 0 and np.array_equal(merged.need, want.need)
    with pytest.raises(TypeError):
        walk.call(0, len(walk.start), 1, 0, start=walk.start.astype(np.int64), end=walk.end.astype(np.int64))


def _candidates_of(ts, ids, windows) -> int:
    """The reference for a partition's candidates: the band join of its rows, built
    anew from them alone (the old per-task count: a band plan per partition)."""
    if not all(len(t) for t in ts):
        return 0
    got = counting.count_plan(ts, ids, windows)
    if isinstance(got, BandBounds):
        return int(got.total)
    assert got is not None
    return int((np.searchsorted(got.sorted_values, got.hi, side="right")
                - np.searchsorted(got.sorted_values, got.lo, side="left")).sum())


@st.composite
def ctr_plans(draw, ts, windows, T, P):
    """A CTR plan for ``ts``: the planner's (LLF with co-location), or one with drawn
    storage hosts, base and length (tuples before the first segment or past the last
    clipped into it) -- any plan must route exactly."""
    plan = ctr.plan(histogram(ts), list(windows), T, P, [0, 1])
    if draw(st.booleans()):
        slots = draw(st.integers(1, 8))
        host = np.array(draw(st.lists(st.integers(0, P - 1), min_size=2 * slots, max_size=2 * slots)),
                        np.int64).reshape(2, slots)
        weights = np.array(draw(st.lists(st.floats(0.5, 4.0), min_size=P, max_size=P)))
        plan = ctr.CtrPlan(base=draw(st.integers(-100, 300)), T=draw(st.integers(1, 150)), host=host,
                           windows=np.asarray(windows, np.int64), orders=[[1], [0]], partitions=P, weights=weights)
    return plan


@given(problems(), st.data())
@SETTINGS
def test_band_candidates_are_the_band_join_of_the_received_rows(problem, data):
    """band_candidates (a prefix sum over the global plan's bands) against the band
    join of a partition's rows built anew, for ATR's received rows on 1-5 partitions
    (some without a segment: empty) and for any subset of rows (keyed and unkeyed,
    rows in time order -- bounds -- or not -- a packed plan)."""
    ts, arrival, keys, windows, policy, period, sample, T, P = problem
    got, _, ids = _walk(ts, arrival, keys, windows, policy, period, sample)
    assume(got is not None)
    walk = got[0]
    qs, ss = walk.query_stream, walk.stored_stream
    plan = atr.plan(histogram(ts), list(windows), T, P)
    masks = [[atr.received(plan, k, ts[k], p) for k in range(2)] for p in range(P)]
    masks.append([np.array(data.draw(st.lists(st.booleans(), min_size=len(t), max_size=len(t))), bool) for t in ts])
    for held in masks:
        rows = [np.flatnonzero(m) for m in held]
        want = _candidates_of([t[r] for t, r in zip(ts, rows)], None if ids is None else [i[r] for i, r in zip(ids, rows)],
                              list(windows))
        assert counted.band_candidates(walk, held[qs][walk.facts[1]], held[ss]) == want


@given(problems(), st.data())
@SETTINGS
def test_ctr_pieces_merge_into_the_one_walk_and_the_ctr_plane_s_partitions(problem, data):
    """CTR (two streams): a pair is produced where its older member (by ``(ts, stream)``)
    is stored, so along a band the owner is the stored member's host up to the query's
    own position and the query's host after it; counted so, piece by piece, the merge
    is the one walk's ``Counted`` and each partition's pairs, candidates and rows (with
    the probe copies it receives) are the materialising CTR plane's."""
    ts, arrival, keys, windows, policy, period, sample, T, P = problem
    want = join(ts, arrival, keys, windows, policy, count=CountRequest(period_us=period, sample=sample)).counted
    got, f, ids = _walk(ts, arrival, keys, windows, policy, period, sample)
    assume(want is not None)
    walk = got[0]
    plan = data.draw(ctr_plans(ts, windows, T, P))
    tab = attach_facts(tuple_table(ts, arrival, compact_ids(ids) if ids is not None else None, None)[0], f, 2)
    reference = run_plane(tab, 2, np.asarray(windows, np.int64), policy.family, "ctr", plan, keyed=ids is not None)
    pcs = counted.pieces(walk, "ctr", plan)
    assert np.all(np.diff(pcs.pos0) > 0) and np.all(pcs.j1 > pcs.j0)
    assert int((pcs.j1 - pcs.j0).sum()) == walk.total
    done = [counted.partition_task(walk, "ctr", plan, p, pcs.of(p)) for p in range(P)]   # the driver's split
    _same_counted(counted.merge(walk, [d[0] for d in done]), want)
    alone = counted.partition_task(walk, "ctr", plan, 0)[0]   # a task given no pieces splits the plan itself
    assert np.array_equal(alone["pos0"], done[0][0]["pos0"]) and np.array_equal(alone["length"], done[0][0]["length"])
    for p in np.flatnonzero([d[1]["n_out"] for d in done]):   # merge refuses parts that do not tile the plan
        with pytest.raises(RuntimeError, match="tile"):
            counted.merge(walk, [d[0] for k, d in enumerate(done) if k != p])
    for p, (_, st_p, stored) in enumerate(done):
        ref = reference.stats[p]
        assert (st_p["n_out"], st_p["n_cand"], st_p["n_in"]) == (ref["n_out"], ref["n_cand"], ref["n_in"]), p
        assert ref.get("n_inter_in", 0) == 0
    assert np.array_equal(np.array([d[2] for d in done]).T, ctr.stored_per_partition(plan, ts))
    assert sum(d[1]["n_in"] for d in done) == reference.shipped_tuples and reference.shipped_intermediate == 0
    # the rule itself, pair by pair: the older member's storage host
    rows = reference.combos
    t0, t1 = ts[0][rows["r0"]], ts[1][rows["r1"]]
    older = np.where(t0 <= t1, 0, 1)   # equal times: stream 0 is older (the prober has the larger stream)
    own = np.where(older == 0, ctr.storage(plan, 0, t0), ctr.storage(plan, 1, t1))
    assert np.bincount(own, minlength=P).tolist() == [d[1]["n_out"] for d in done]


@given(st.lists(st.lists(st.integers(-50, 50), max_size=12), min_size=1, max_size=8), st.data(),
       st.sampled_from([counted.CODE_LIMIT, 0]))
@SETTINGS
def test_first_at_least_finds_each_band_s_split(blocks, data, limit):
    """CTR's split of a band at the query's position: per band (ascending values, the
    bands inside runs that may descend between them), the first position ``>= bound``,
    by the one-code search and by the all-bands bisection (``CODE_LIMIT = 0``)."""
    values = np.array([v for b in blocks for v in sorted(b)], np.int64)
    assume(len(values))
    edges = np.cumsum([0] + [len(b) for b in blocks])
    lo, hi, bound = [], [], []
    for r in range(len(blocks)):
        for _ in range(data.draw(st.integers(0, 3))):
            a = data.draw(st.integers(int(edges[r]), int(edges[r + 1])))
            lo.append(a)
            hi.append(data.draw(st.integers(a, int(edges[r + 1]))))
            bound.append(data.draw(st.integers(-60, 60)))
    lo, hi, bound = (np.array(x, np.int64) for x in (lo, hi, bound))
    want = [a + int(np.searchsorted(values[a:b], c, side="left")) for a, b, c in zip(lo, hi, bound)]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(counted, "CODE_LIMIT", limit)
        assert counted.first_at_least(values, lo, hi, bound).tolist() == want


def test_the_stored_term_is_looked_at_once_per_position_however_wide_the_bands(monkeypatch):
    """Bands wider than a segment (windows beside the default segment: most bands cross
    a boundary, and neighbouring bands overlap) are split with the stored term looked
    at once per stored position of their union, not once per pair: the pieces stay
    about the rows, never the pairs (the walk's own memory), and are the same pieces."""
    rng = np.random.default_rng(5)
    ts = [np.sort(rng.integers(0, 20_000, 400)), np.sort(rng.integers(0, 20_000, 500))]
    arrival = [t + rng.integers(0, 50, len(t)) for t in ts]
    from streamjoin.pipelines.policies import PolicySpec

    policy = PolicySpec("static", retention=(10, 10))
    (walk, _), _, _ = _walk(ts, arrival, [None, None], (600, 600), policy, 1000, 7)
    plan = atr.plan(histogram(ts), [600, 600], 1000, 3)
    assert walk.total > 20 * len(walk.facts[0])           # wide bands: many pairs per stored row
    seen, term = [], atr.owner_term

    def owner_term(plan_, k, t):
        if k == walk.stored_stream:
            seen.append(len(t))
        return term(plan_, k, t)

    queries = np.ones(len(walk.start), bool)
    want = counted.pieces(walk, "atr", plan, queries=queries)
    monkeypatch.setattr(counted.atr_mod, "owner_term", owner_term)
    got = counted.pieces(walk, "atr", plan, queries=queries)
    n_bands = int((walk.end > walk.start).sum())
    assert sum(seen) <= 2 * n_bands + len(walk.facts[0]), (seen, n_bands, walk.total)
    for field in ("q", "j0", "j1", "pos0", "part"):
        assert np.array_equal(getattr(got, field), getattr(want, field)), field


def test_the_merge_refuses_parts_that_miss_pairs():
    """A task whose pieces were lost (or a pair no task owned) would make every count
    short: the merge raises instead of reporting them."""
    rng = np.random.default_rng(4)
    ts = [np.sort(rng.integers(0, 5000, 300)), np.sort(rng.integers(0, 5000, 200))]
    arrival = [t + rng.integers(0, 50, len(t)) for t in ts]
    from streamjoin.pipelines.policies import PolicySpec

    (walk, _), _, _ = _walk(ts, arrival, [None, None], (30, 20), PolicySpec("static", retention=(10, 10)), 100, 7)
    plan = atr.plan(histogram(ts), [30, 20], 400, 3)
    parts = [counted.partition_task(walk, "atr", plan, p)[0] for p in range(plan.partitions)]
    assert counted.merge(walk, parts).truth == walk.total
    lost = max(range(len(parts)), key=lambda p: parts[p]["pairs"])
    with pytest.raises(RuntimeError, match="tile"):
        counted.merge(walk, parts[:lost] + parts[lost + 1:])
