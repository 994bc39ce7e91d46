"""Counting instead of materialising (replay/counting.py): every report number
of a counted two-stream join equals the materialising path's (the oracle),
on random inputs -- keyed and unkeyed, every fixed policy and the recall-target
ones, any windows, periods and tuning sample."""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.strategies import fixed_policy

from streamjoin.pipelines.base import jit, kernels
from streamjoin.pipelines.analysis.metrics import occupied_periods, period_code_counts
from streamjoin.pipelines.analysis.tuning import required_slacks
from streamjoin.pipelines.config.settings import RunConfig, StreamConfig
from streamjoin.pipelines.engines import local
from streamjoin.pipelines.engines.local import CountRequest, join
from streamjoin.pipelines.io.load import load_all
from streamjoin.pipelines.jobs import run as run_module
from streamjoin.pipelines.jobs.run import build_report, run_job
from streamjoin.pipelines.policies import SYMMETRIC, PolicySpec, RecallTarget
from streamjoin.pipelines.replay import counting
from streamjoin.pipelines.replay.candidates import enumerate_sorted, key_ids
from streamjoin.pipelines.report import build as report_build

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True, scope="module")
def counted_at_any_size():
    """The counting kernel built, and used on inputs of any size (a run counts
    from ``MIN_ROWS`` input rows)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(counting, "MIN_ROWS", 0)
        assert jit.prebuilt(kernels._count_walk, kernels.COUNT_SIGNATURE) is not None
        yield


@st.composite
def problems(draw):
    keyed = draw(st.booleans())
    tables = []
    for _ in range(2):
        size = draw(st.integers(0, 40))
        ts = draw(st.lists(st.integers(0, 200), min_size=size, max_size=size))
        delay = draw(st.lists(st.one_of(st.integers(0, 5), st.integers(0, 120)), min_size=size, max_size=size))
        cols = {"ts": ts, "arrival": [t + d for t, d in zip(ts, delay)]}
        if keyed:
            cols["key"] = draw(st.lists(st.integers(0, 3), min_size=size, max_size=size))
        frame = pl.DataFrame(cols, schema={c: pl.Int64 for c in cols})
        layout = draw(st.sampled_from(["as drawn", "ts order", "arrival order"]))
        if layout != "as drawn":
            frame = frame.sort(layout.split()[0])
        tables.append(frame)
    windows = (draw(st.integers(0, 30)), draw(st.integers(0, 30)))
    kind = draw(st.sampled_from(["fixed", "qjoin", "qkslack"]))
    period = draw(st.integers(1, 100))
    if kind == "fixed":
        policy, target = fixed_policy(draw, 2, 60), None
    else:
        target = draw(st.sampled_from([0.5, 0.9, 0.99]))
        policy = PolicySpec(kind, target=RecallTarget(target, period_us=period))
    return tables, windows, policy, keyed, period, target, draw(st.integers(1, 12))


def _config(tmp: Path, tables, windows, policy, keyed, period, target) -> RunConfig:
    streams = []
    for i, (frame, w) in enumerate(zip(tables, windows)):
        path = tmp / f"s{i}.parquet"
        pq.write_table(frame.to_arrow(), path)
        streams.append(StreamConfig(name=f"s{i}", path=str(path), ts="ts", arrival="arrival", unit="us",
                                    window_us=w, keys=("key",) if keyed else ()))
    return RunConfig(streams=tuple(streams), policy=policy, out=tmp / "out", engine="local", period_us=period,
                     recall_target=target, write_results=False)


def _report(cfg, streams, outcome):
    report = build_report(cfg, "t", streams, outcome)
    keys, _ = report_build.extras(cfg, outcome)
    report.update(keys)
    return report


@given(problems())
@SETTINGS
def test_counted_report_equals_the_materialised_one(problem):
    tables, windows, policy, keyed, period, target, sample = problem
    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as m:
        m.setattr(report_build, "TUNING_SAMPLE", sample)   # the materialising path's sample, the same for both
        cfg = _config(Path(d), tables, windows, policy, keyed, period, target)
        streams = load_all(list(cfg.streams), 1.0)
        args = ([s.ts for s in streams], [s.arrival for s in streams],
                [s.keys if s.keys.width else None for s in streams], cfg.windows, cfg.policy)
        want_outcome = join(*args)
        got_outcome = join(*args, count=CountRequest(period_us=period, sample=sample))
        want, got = _report(cfg, streams, want_outcome), _report(cfg, streams, got_outcome)
    cnt = got_outcome.counted
    # both streams non-empty: counted (an empty stream has no band join to count)
    assert (cnt is not None) == all(s.rows for s in streams)
    assert got_outcome.combos is None if cnt is not None else got_outcome.combos is not None
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
    assert got == want
    if cnt is None:
        return
    # the counted facts themselves, against the materialised columns
    em, replay = want_outcome.emission, want_outcome.replay
    _, upper = occupied_periods(replay.arrival, int(replay.arrival[0]), period)
    assert np.array_equal(cnt.codes, period_code_counts(em.last, em.emitted, upper))
    total = len(want_outcome.combos)
    every = -(-total // sample) if total > sample else 1
    assert cnt.every == every
    pick = np.arange(0, total, every)
    policy_name = "static" if want_outcome.decisions.family == SYMMETRIC else "kslack"
    members = ([np.asarray(em.a[k])[pick] for k in range(2)], em.last[pick])
    need = required_slacks(replay, want_outcome.combos.filter(pick), cfg.windows, policy_name, members)
    assert np.array_equal(cnt.need, need)
    if want_outcome.decisions.family == SYMMETRIC:
        assert cnt.latency is None and not np.asarray(em.latency_us).any()
    else:
        assert np.array_equal(cnt.latency, em.latency_us[em.emitted])
    assert want_outcome.probe_order.to_dict(["s0", "s1"]) == got_outcome.probe_order.to_dict(["s0", "s1"])


def test_a_repeated_row_is_left_to_the_materialising_path():
    """Pairs are distinct iff no query row and no stored row repeats: a plan with
    a query row twice is not counted (the duplicate check then sees the pairs)."""
    rng = np.random.default_rng(3)
    ts = [np.sort(rng.integers(0, 1000, n)).astype(np.int64) for n in (50, 80)]
    arrival = [t + rng.integers(0, 20, len(t)) for t in ts]
    policy = PolicySpec("static", retention=(5, 5))
    outcome = join(ts, arrival, [None, None], (10, 10), policy, count=CountRequest(period_us=100, sample=1000))
    assert outcome.counted is not None
    plan = enumerate_sorted(ts, key_ids([None, None]), [10, 10], None, [0, 1], plan=True)
    ok = counting.count_pairs(plan, outcome.replay, np.array([10, 10]), outcome.decisions,
                              local.expiry(outcome.replay, np.array([10, 10]), outcome.decisions),
                              np.zeros(outcome.replay.N, np.int32), np.zeros(1, np.int64), 1000)
    assert ok is not None and ok.truth == outcome.counted.truth
    plan.query_rows = plan.query_rows.copy()
    plan.query_rows[1] = plan.query_rows[0]
    assert counting.count_pairs(plan, outcome.replay, np.array([10, 10]), outcome.decisions,
                                local.expiry(outcome.replay, np.array([10, 10]), outcome.decisions),
                                np.zeros(outcome.replay.N, np.int32), np.zeros(1, np.int64), 1000) is None


@pytest.mark.parametrize("policy, target", [(PolicySpec("static", retention=(20, 20)), None),
                                            (PolicySpec("mpkslack"), None),
                                            (PolicySpec("qjoin", target=RecallTarget(0.9, period_us=500)), 0.9)])
def test_run_without_results_counts_and_writes_the_same_report(tmp_path, monkeypatch, policy, target):
    """``run --no-results``: report.json (timings aside) is the same counted or
    materialised; a qjoin run with a target (its ``hindsight`` reads every
    combination) materialises."""
    rng = np.random.default_rng(7)
    tables = []
    for n in (400, 300):
        ts = np.sort(rng.integers(0, 20_000, n))
        tables.append(pl.DataFrame({"ts": ts, "arrival": ts + rng.integers(0, 300, n),
                                    "key": rng.integers(0, 4, n)}))
    reports = []
    for counted in (True, False):
        if not counted:
            monkeypatch.setattr(run_module, "count_request", lambda *args, **kwargs: None)
        cfg = _config(tmp_path, tables, (50, 80), policy, True, 500, target)
        cfg = replace(cfg, out=tmp_path / f"out-{counted}")
        report = run_job(cfg)
        assert ("join.count" in report["timings_s"]) == (counted and target is None)
        reports.append(json.loads((cfg.out / "report.json").read_text()))
    for r in reports:
        for key in ("timings_s", "outputs", "input_tuples_per_s", "config"):
            r.pop(key)
    assert reports[0] == reports[1]
    assert reports[0]["truth_results"] > 0 and reports[0]["tuning"]["sample_every"] == 1


def _two_streams(seed=5, sizes=(300, 200)):
    rng = np.random.default_rng(seed)
    ts = [np.sort(rng.integers(0, 5000, n)).astype(np.int64) for n in sizes]
    return ts, [t + rng.integers(0, 200, len(t)) for t in ts]


def test_without_the_kernel_the_plan_is_not_built_for_nothing(monkeypatch):
    """No counting kernel (``$STREAMJOIN_KERNELS=numpy``, or none can be built):
    the run materialises from the start -- no band plan built and thrown away,
    no ``count`` stage in its timings -- and gives the materialised outcome."""
    ts, arrival = _two_streams()
    policy = PolicySpec("static", retention=(30, 30))
    want = join(ts, arrival, [None, None], (40, 60), policy)
    plans = []

    def spy(*args, **kwargs):
        plans.append(kwargs.get("plan"))
        return enumerate_sorted(*args, **kwargs)

    monkeypatch.setattr(counting, "enumerate_sorted", spy)   # where a counted join builds its plan (count_plan)
    monkeypatch.setenv("STREAMJOIN_KERNELS", "numpy")
    got = join(ts, arrival, [None, None], (40, 60), policy, count=CountRequest(period_us=100, sample=50))
    assert got.counted is None and got.combos is not None
    assert "count" not in got.timings_s and plans == []
    assert len(got.combos) == len(want.combos) > 0
    assert np.array_equal(got.emission.emitted, want.emission.emitted)


def test_a_bucket_join_is_not_counted():
    """``candidates_method="bucket"`` orders the combinations otherwise than the
    sorted plan: counting it would sample other combinations' required slacks."""
    ts, arrival = _two_streams(sizes=(400, 300))
    policy = PolicySpec("kslack", k=(20, 20))
    got = join(ts, arrival, [None, None], (40, 60), policy, candidates_method="bucket",
               count=CountRequest(period_us=100, sample=50))
    assert got.counted is None and got.combos is not None


@given(problems())
@SETTINGS
def test_the_fused_band_plan_counts_what_the_packed_plan_counts(problem):
    """A join whose streams are in time order within each key counts from
    :class:`~streamjoin.pipelines.replay.candidates.BandBounds` (the kernels at any
    size here): every field of ``Counted`` equals the count from the packed
    :class:`~streamjoin.pipelines.replay.candidates.BandPlan` (``plan_bands``
    unavailable), which the property above holds to the materialising path."""
    tables, windows, policy, keyed, period, target, sample = problem
    with tempfile.TemporaryDirectory() as d:
        cfg = _config(Path(d), tables, windows, policy, keyed, period, target)
        streams = load_all(list(cfg.streams), 1.0)
    args = ([s.ts for s in streams], [s.arrival for s in streams],
            [s.keys if s.keys.width else None for s in streams], cfg.windows, cfg.policy)
    request = CountRequest(period_us=period, sample=sample)
    calls = []
    real = kernels.plan_bands
    with pytest.MonkeyPatch.context() as m:
        m.setattr(kernels, "MIN_ROWS", 0)
        m.setattr(kernels, "plan_bands", lambda *a: (calls.append(1), real(*a))[1])
        fused = join(*args, count=request).counted
        in_time_order = all(s.rows for s in streams) and all(_in_time_order(f, keyed) for f in tables)
        assert bool(calls) == in_time_order
        m.setattr(kernels, "plan_bands", lambda *a: None)
        packed = join(*args, count=request).counted
    assert (fused is None) == (packed is None)
    if fused is None:
        return
    for name in ("truth", "emitted", "every"):
        assert getattr(fused, name) == getattr(packed, name)
    for name in ("codes", "period_ids", "need"):
        same = getattr(fused, name), getattr(packed, name)
        assert same[0].dtype == same[1].dtype and np.array_equal(*same)
    assert (fused.latency is None) == (packed.latency is None)
    if fused.latency is not None:
        assert np.array_equal(fused.latency, packed.latency)


def _in_time_order(frame: pl.DataFrame, keyed: bool) -> bool:
    """Each key's event times ascend in row order (all rows one key when not keyed)."""
    by = frame.sort("key", maintain_order=True) if keyed else frame
    ts = by["ts"].to_numpy()
    new_key = np.diff(by["key"].to_numpy()) != 0 if keyed else np.zeros(max(len(ts) - 1, 0), bool)
    return bool(np.all((np.diff(ts) >= 0) | new_key))
