"""The Spark driver's part of a counted run (issue 21, eleventh pass): the band plan
built on a thread beside the progress pass, the key ids computed once, and the walk
handed to the tasks the one ``driver_walk`` builds after the pass.  No Spark: the
job's entry (``spark_count``) is replaced by a recorder that stops the run there."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from streamjoin.pipelines.engines.local import CountRequest
from streamjoin.pipelines.engines.spark import counted, engine
from streamjoin.pipelines.engines.spark.routing import RouteSettings
from streamjoin.pipelines.policies import PolicySpec, RecallTarget
from streamjoin.pipelines.replay import counting
from streamjoin.pipelines.replay import partitioned_progress as sp
from streamjoin.pipelines.replay.candidates import key_ids


class Stop(Exception):
    """Raised by the recorder in place of the Spark job."""


def _problem(seed=3, sizes=(400, 300)):
    rng = np.random.default_rng(seed)
    ts = [rng.integers(0, 20_000, n).astype(np.int64) for n in sizes]
    arrival = [t + rng.integers(0, 300, len(t)) for t in ts]
    # sparse integer keys: compact_ids renumbers them, the counted plan reads them as key_ids gives them
    keys = [pl.DataFrame({"__key0": rng.integers(0, 8, len(t)) * 1009}) for t in ts]
    return ts, arrival, keys


def _signalling(done: threading.Event):
    """``driver_plan`` setting ``done`` once it has built the plan (or failed)."""
    real_plan = counted.driver_plan

    def plan_then_done(*args):
        try:
            return real_plan(*args)
        finally:
            done.set()
    return plan_then_done


@pytest.mark.parametrize("policy", [PolicySpec("static", retention=(40, 40)), PolicySpec("kslack", k=(30, 30)),
                                    PolicySpec("qkslack", target=RecallTarget(0.9, period_us=500))])
def test_the_plan_is_built_beside_the_progress_pass_from_the_one_key_ids(monkeypatch, policy):
    monkeypatch.setattr(counting, "MIN_ROWS", 0)
    ts, arrival, keys = _problem()
    windows, period, sample = (60, 90), 500, 50
    plan_started, pass_started = threading.Event(), threading.Event()
    overlapped, id_calls, walks = [], [], []
    real_plan, real_facts = counted.driver_plan, sp.driver_facts

    # each side waits until the other has started: both see it only where they run together
    # (built before the pass, or after it, one of them waits in vain)
    def plan_beside(*args):
        plan_started.set()
        overlapped.append(("plan", pass_started.wait(timeout=20)))
        return real_plan(*args)

    def facts_beside(*args, **kwargs):
        pass_started.set()
        overlapped.append(("pass", plan_started.wait(timeout=20)))
        return real_facts(*args, **kwargs)

    def ids_counted(k):
        id_calls.append(1)
        return key_ids(k)

    def record(spark, walk, partitions, router, plan, handoff, alongside=None):
        walks.append(walk)
        raise Stop

    monkeypatch.setattr(engine, "driver_plan", plan_beside)
    monkeypatch.setattr(sp, "driver_facts", facts_beside)
    monkeypatch.setattr(engine, "key_ids", ids_counted)
    monkeypatch.setattr(engine, "spark_count", record)
    spark = SimpleNamespace(sparkContext=SimpleNamespace(master="local[2]"))
    with pytest.raises(Stop):
        engine.spark_join(ts, arrival, keys, windows, policy, spark=spark, handoff="files", progress="driver",
                          settings=RouteSettings(router="none", partitions=1),
                          count=CountRequest(period_us=period, sample=sample))
    assert sorted(overlapped) == [("pass", True), ("plan", True)]
    assert len(id_calls) == 1
    # the walk handed to the tasks: the one built after the pass, from the pass's replay
    f = real_facts(ts, arrival, np.asarray(windows, np.int64), policy, keys=key_ids(keys) if policy.adaptive else None)
    replay, dec = sp.replay_from_facts(f, 2, policy, [len(t) for t in ts])
    want, _ = counted.driver_walk(ts, key_ids(keys), windows, replay, dec, period, sample)
    got = walks[0]
    assert (got.total, got.every, got.family, got.query_stream) == (want.total, want.every, want.family,
                                                                      want.query_stream)
    assert np.array_equal(got.start, want.start) and np.array_equal(got.end, want.end)
    for a, b in zip(got.facts, want.facts):
        assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b


def test_a_failing_progress_pass_leaves_no_plan_thread_behind(monkeypatch):
    """The progress pass raises (an input error, Ctrl-C's KeyboardInterrupt) while the plan
    is built beside it: the error surfaces as it is, and the pool is shut down -- its
    worker gone once the plan is built -- even while the caller still holds the
    traceback (the engine's frame, and its pool, alive)."""
    monkeypatch.setattr(counting, "MIN_ROWS", 0)
    ts, arrival, keys = _problem()
    before = set(threading.enumerate())
    plan_done = threading.Event()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(engine, "driver_plan", _signalling(plan_done))
    monkeypatch.setattr(sp, "driver_facts", interrupted)
    spark = SimpleNamespace(sparkContext=SimpleNamespace(master="local[2]"))
    with pytest.raises(KeyboardInterrupt) as raised:
        engine.spark_join(ts, arrival, keys, (60, 90), PolicySpec("static", retention=(40, 40)), spark=spark,
                          handoff="files", progress="driver", settings=RouteSettings(router="none", partitions=1),
                          count=CountRequest(period_us=500, sample=50))
    assert raised.value is not None and plan_done.wait(timeout=20)
    for t in set(threading.enumerate()) - before:   # the pool's worker: ends once the plan is built
        t.join(timeout=20)
        assert not t.is_alive(), t.name


def test_a_plan_the_walk_cannot_use_is_freed_before_the_materialising_plane(monkeypatch):
    """``driver_walk`` gives up after the pass (a repeated row): the caller materialises,
    and the plan built beside the pass is no longer held when the plane's inputs are built."""
    import gc
    import weakref

    monkeypatch.setattr(counting, "MIN_ROWS", 0)
    ts, arrival, keys = _problem()
    plans, alive = [], []
    real_plan = counted.driver_plan

    def plan_watched(*args):
        plan = real_plan(*args)
        plans.append(weakref.ref(plan.start if hasattr(plan, "start") else plan))
        return plan

    def materialising(*args, **kwargs):
        gc.collect()
        alive.append(plans[0]() is not None)
        raise Stop

    monkeypatch.setattr(engine, "driver_plan", plan_watched)
    monkeypatch.setattr(engine, "driver_walk", lambda *a, **k: None)
    monkeypatch.setattr(engine, "kernel_inputs", materialising)
    spark = SimpleNamespace(sparkContext=SimpleNamespace(master="local[2]"))
    with pytest.raises(Stop):
        engine.spark_join(ts, arrival, keys, (60, 90), PolicySpec("static", retention=(40, 40)), spark=spark,
                          handoff="files", progress="driver", settings=RouteSettings(router="none", partitions=1),
                          count=CountRequest(period_us=500, sample=50))
    assert plans and alive == [False]


@pytest.mark.parametrize("count", [None, CountRequest(period_us=500, sample=50)])
def test_the_raw_key_ids_are_not_held_through_a_pass_that_does_not_read_them(monkeypatch, count):
    """The key ids as :func:`key_ids` gives them: the tuples' columns read the compacted
    ones, so a run that neither counts (its plan reads them, on its thread) nor gives them
    to an adaptive / SQL policy's facts does not keep them through the progress pass."""
    import gc
    import weakref

    monkeypatch.setattr(counting, "MIN_ROWS", 0)
    ts, arrival, keys = _problem(sizes=(2000, 1500))   # enough rows for compact_ids to renumber
    refs, alive = [], []
    plan_done = threading.Event()

    def ids_watched(k):
        got = key_ids(k)
        refs.extend(weakref.ref(i) for i in got)
        return got

    def facts_watched(*args, **kwargs):
        if count is not None:   # the plan's thread lets go of them once the plan is built
            plan_done.wait(timeout=20)
        for _ in range(100):
            gc.collect()
            if not any(r() is not None for r in refs):
                break
            time.sleep(0.05)
        alive.append(any(r() is not None for r in refs))
        raise Stop

    monkeypatch.setattr(engine, "key_ids", ids_watched)
    monkeypatch.setattr(engine, "driver_plan", _signalling(plan_done))
    monkeypatch.setattr(sp, "driver_facts", facts_watched)
    spark = SimpleNamespace(sparkContext=SimpleNamespace(master="local[2]"))
    with pytest.raises(Stop):
        engine.spark_join(ts, arrival, keys, (60, 90), PolicySpec("static", retention=(40, 40)), spark=spark,
                          handoff="files", progress="driver", settings=RouteSettings(router="none", partitions=1),
                          count=count)
    assert refs and alive == [False]
