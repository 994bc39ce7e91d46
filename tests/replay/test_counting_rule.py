"""The one rule "count instead of materialise" (replay/counting.counts): each of its
conditions alone turns counting off, and the job (run.count_request), the engine
(local.join) and the walk (counting.count_pairs) all follow it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.config.options import DistanceSpec
from streamjoin.pipelines.config.settings import RunConfig, StreamConfig
from streamjoin.pipelines.engines.local import CountRequest, join
from streamjoin.pipelines.jobs.run import count_request
from streamjoin.pipelines.policies import SORTING, SQL_INTERVAL_JOIN, SYMMETRIC, PolicySpec, RecallTarget
from streamjoin.pipelines.replay import counting

BIG = counting.MIN_ROWS


def test_every_condition_alone_turns_counting_off():
    assert counting.kernel_built()
    assert counting.counts(SYMMETRIC, streams=2, rows=BIG) and counting.counts(SORTING, rows=2**31 - 1)
    assert counting.counts(SYMMETRIC)   # a fact left out is another caller's to check
    for off in ({"reads_each": True}, {"filtered": True}, {"given_order": True}, {"count_windows": True},
                {"bucket": True}, {"streams": 3}, {"rows": BIG - 1}, {"rows": 2**31}):
        assert not counting.counts(SYMMETRIC, **off), off
    assert not counting.counts(SQL_INTERVAL_JOIN, rows=BIG)


def test_without_the_kernel_nothing_counts(monkeypatch):
    monkeypatch.setattr(counting, "kernel_built", lambda: False)
    assert not counting.counts(SYMMETRIC, rows=BIG)


def _cfg(tmp_path, **kw) -> RunConfig:
    streams = tuple(StreamConfig(name=f"s{i}", path=str(tmp_path / f"s{i}.parquet"), window_us=10) for i in range(2))
    return replace(RunConfig(streams=streams, policy=PolicySpec("static", retention=(5, 5)), out=tmp_path / "out",
                             write_results=False, period_us=100), **kw)


def test_the_job_asks_for_counts_only_where_the_rule_says(tmp_path):
    cfg = _cfg(tmp_path)
    got = count_request(cfg, None)
    assert got is not None and got.period_us == 100
    third = replace(cfg.streams[0], name="s2")
    for off in (replace(cfg, write_results=True), replace(cfg, where="s0_ts > 0"),
                replace(cfg, distance=DistanceSpec(columns=("v",), threshold=1.0)),
                replace(cfg, streams=(*cfg.streams, third)),
                replace(cfg, streams=(replace(cfg.streams[0], window_count=3, window_us=0), cfg.streams[1])),
                replace(cfg, policy=PolicySpec("qjoin", target=RecallTarget(0.9, period_us=100)), recall_target=0.9)):
        assert count_request(off, None) is None, off
    assert count_request(cfg, object()) is None   # --capacity


@pytest.mark.parametrize("kw", [{"order": [1, 0]}, {"candidates_method": "bucket"}, {"counts": [3, None]}])
def test_the_engine_materialises_where_the_rule_says_no(monkeypatch, kw):
    monkeypatch.setattr(counting, "MIN_ROWS", 0)
    rng = np.random.default_rng(2)
    ts = [np.sort(rng.integers(0, 3000, n)).astype(np.int64) for n in (200, 150)]
    arrival = [t + rng.integers(0, 50, len(t)) for t in ts]
    request = CountRequest(period_us=100, sample=50)
    assert join(ts, arrival, [None, None], (40, 60), PolicySpec("static", retention=(5, 5)),
                count=request).counted is not None
    got = join(ts, arrival, [None, None], (40, 60), PolicySpec("static", retention=(5, 5)), count=request, **kw)
    assert got.counted is None and got.combos is not None


@given(seed=st.integers(0, 2**32 - 1), sizes=st.tuples(st.integers(0, 300), st.integers(0, 300)),
       sample=st.integers(1, 40), family=st.sampled_from(["static", "kslack", "mpkslack"]), keyed=st.booleans())
@settings(max_examples=60, deadline=None)
def test_two_range_walks_count_what_one_walk_counts(seed, sizes, sample, family, keyed):
    """The walk split between two threads at any query (counting.SPLIT_QUERIES) gives the
    single walk's Counted: the same totals, period codes, sampled required slacks (the
    second walk's countdown continues the first's) and latencies in combination order."""
    rng = np.random.default_rng(seed)
    ts = [np.sort(rng.integers(0, 2000, n)).astype(np.int64) for n in sizes]
    arrival = [t + rng.integers(0, 80, len(t)) for t in ts]
    keys = [pl.DataFrame({"__key0": rng.integers(0, 3, n)}) for n in sizes] if keyed else [None, None]
    policy = {"static": PolicySpec("static", retention=(15, 15)), "kslack": PolicySpec("kslack", k=(20, 20)),
              "mpkslack": PolicySpec("mpkslack")}[family]
    got = []
    with pytest.MonkeyPatch.context() as m:
        m.setattr(counting, "MIN_ROWS", 0)
        for split in (10**9, 0):
            m.setattr(counting, "SPLIT_QUERIES", split)
            out = join(ts, arrival, keys, (30, 50), policy, count=CountRequest(period_us=97, sample=sample))
            got.append(out.counted)
    one, two = got
    if one is None:   # an empty stream: neither counts
        assert two is None
        return
    assert (one.truth, one.emitted, one.every) == (two.truth, two.emitted, two.every)
    assert np.array_equal(one.codes, two.codes) and np.array_equal(one.need, two.need)
    assert (one.latency is None) == (two.latency is None)
    if one.latency is not None:
        assert np.array_equal(one.latency, two.latency)


@given(seed=st.integers(0, 2**32 - 1), sizes=st.tuples(st.integers(1, 300), st.integers(1, 300)),
       sample=st.integers(1, 40), family=st.sampled_from(["static", "kslack", "mpkslack"]), keyed=st.booleans())
@settings(max_examples=40, deadline=None)
def test_two_range_walks_over_the_fused_plan_count_what_one_walk_counts(seed, sizes, sample, family, keyed):
    """The property above with the kernels at any size, so the streams (in time order) are
    planned by ``plan_bands`` (BandBounds: int32 starts and ends) -- the split walk's path
    the test above never reaches below the kernels' MIN_ROWS: one walk, two walks and the
    packed plan's one walk give the same Counted."""
    from streamjoin.pipelines.base import kernels

    rng = np.random.default_rng(seed)
    ts = [np.sort(rng.integers(-1000, 2000, n)).astype(np.int64) for n in sizes]
    arrival = [t + rng.integers(0, 80, len(t)) for t in ts]
    keys = [pl.DataFrame({"__key0": rng.integers(0, 3, n)}) for n in sizes] if keyed else [None, None]
    policy = {"static": PolicySpec("static", retention=(15, 15)), "kslack": PolicySpec("kslack", k=(20, 20)),
              "mpkslack": PolicySpec("mpkslack")}[family]
    real, calls = kernels.plan_bands, []
    got = []
    with pytest.MonkeyPatch.context() as m:
        m.setattr(counting, "MIN_ROWS", 0)
        m.setattr(kernels, "MIN_ROWS", 0)
        for split, fused in ((10**9, True), (0, True), (10**9, False)):
            m.setattr(counting, "SPLIT_QUERIES", split)
            m.setattr(kernels, "plan_bands", (lambda *a: (calls.append(1), real(*a))[1]) if fused else (lambda *a: None))
            got.append(join(ts, arrival, keys, (30, 50), policy, count=CountRequest(period_us=97, sample=sample)).counted)
    assert len(calls) == 2 and all(c is not None for c in got)
    one = got[-1]
    for two in got[:2]:
        assert (one.truth, one.emitted, one.every) == (two.truth, two.emitted, two.every)
        assert np.array_equal(one.codes, two.codes) and np.array_equal(one.need, two.need)
        assert (one.latency is None) == (two.latency is None)
        if one.latency is not None:
            assert np.array_equal(one.latency, two.latency)


def test_a_small_job_never_asks_for_the_counting_kernel(tmp_path, monkeypatch):
    """A ``--no-results`` run below ``MIN_ROWS`` input rows never looks the count
    kernels up (a lookup builds them where they are missing: 5-10 s each, a
    line on stderr): the job passes its rows to the rule, which checks them
    before the kernel (base/kernels: "a small run never waits for a first build")."""
    import pyarrow.parquet as pq

    from streamjoin.pipelines.jobs.run import run_job

    asked = []
    monkeypatch.setattr(counting, "kernel_built", lambda: asked.append(1) or True)
    cfg = _cfg(tmp_path)
    assert count_request(cfg, None, rows=BIG - 1) is None and not asked
    assert count_request(cfg, None, rows=BIG) is not None and asked
    asked.clear()
    streams = []
    for i, s in enumerate(cfg.streams):
        ts = np.arange(100, dtype=np.int64) * 10 + 3 * i
        pq.write_table(pl.DataFrame({"ts": ts, "arrival": ts + 5}).to_arrow(), s.path)
        streams.append(replace(s, ts="ts", arrival="arrival", unit="us"))
    report = run_job(replace(cfg, streams=tuple(streams), engine="local"))
    assert report["truth_results"] > 0 and not asked


@pytest.mark.parametrize("side", ["query_rows", "stored_rows"])
@pytest.mark.parametrize("at", [0, -1])
def test_two_range_walks_see_a_repeated_row_on_either_side(monkeypatch, side, at):
    """Split between two walks, each checks one side's rows for repeats: a query
    row or a stored row twice -- at either end, so in either walk's range -- is
    still left to the materialising path (``None``)."""
    from streamjoin.pipelines.engines import local
    from streamjoin.pipelines.replay.candidates import enumerate_sorted, key_ids

    monkeypatch.setattr(counting, "MIN_ROWS", 0)
    monkeypatch.setattr(counting, "SPLIT_QUERIES", 0)
    rng = np.random.default_rng(3)
    ts = [np.sort(rng.integers(0, 1000, n)).astype(np.int64) for n in (50, 80)]
    arrival = [t + rng.integers(0, 20, len(t)) for t in ts]
    outcome = join(ts, arrival, [None, None], (10, 10), PolicySpec("static", retention=(5, 5)),
                   count=CountRequest(period_us=100, sample=1000))
    W = np.array([10, 10])

    def counted(plan):
        return counting.count_pairs(plan, outcome.replay, W, outcome.decisions,
                                    local.expiry(outcome.replay, W, outcome.decisions),
                                    np.zeros(outcome.replay.N, np.int32), np.zeros(1, np.int64), 1000)

    plan = enumerate_sorted(ts, key_ids([None, None]), [10, 10], None, [0, 1], plan=True)
    assert len(plan.lo) >= 2 and counted(plan).truth == outcome.counted.truth
    rows = getattr(plan, side).copy()
    rows[at] = rows[at + 1 if at == 0 else at - 1]
    setattr(plan, side, rows)
    assert counted(plan) is None
