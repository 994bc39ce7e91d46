"""Issue 4 on Spark: the Spark engine's answer equals the local engine's.

Spark is slow to start and every job costs seconds on a shared 2-core box,
so this module keeps one quiet ``local[2]`` session (module fixture) and a
few fixed cases that together cover every router, 2/3/4 streams, both policy
families, 1..7 partitions and the partition-wise progress pass; the full
matrix runs on the same kernels without a JVM in tests/route/test_routing.py.  One
test runs the CLI on ``local-cluster[2,1,1024]`` (separate executor JVMs and
Python workers).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers.adapters import key_frames, local_engine

from streamjoin.pipelines.engines.spark.engine import spark_join
from streamjoin.pipelines.engines.spark.routing import RouteSettings
from streamjoin.pipelines.engines.spark.session import spark_session
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spark():
    with spark_session("local[2]", 3, [("spark.sql.shuffle.partitions", "3"), ("spark.driver.memory", "1g")]) as s:
        yield s


def random_streams(seed, n, rows=(4, 14), keyed=True):
    rng = np.random.default_rng(seed)
    streams = []
    for i in range(n):
        out = []
        for r in range(int(rng.integers(*rows))):
            t = int(rng.integers(0, 60))
            d = int(rng.integers(0, 3) if rng.random() < 0.7 else rng.integers(0, 40))
            out.append(RefTuple(i, r, t, t + d, (int(rng.integers(0, 2)),) if keyed else ()))
        streams.append(out)
    W = tuple(int(x) for x in rng.integers(0, 12, n))
    return streams, W


CASES = [
    # seed, n, policy, router, partitions
    (1, 2, PolicySpec("none"), "none", 1),
    (2, 3, PolicySpec("kslack", k=(3, 0, 7)), "atr", 2),
    (3, 4, PolicySpec("mpkslack"), "ctr", 3),
    (4, 2, PolicySpec("static", retention=(4, 9)), "atr", 7),
    (5, 3, PolicySpec("static", retention=(0, 5, 2)), "ctr", 2),
    (6, 2, PolicySpec("mpkslack"), "ctr", 7),
    # two streams on CTR, symmetric family: the last hop's pair fast path (_pair_emitted)
    (7, 2, PolicySpec("static", retention=(3, 8)), "ctr", 3),
    (8, 2, PolicySpec("none"), "ctr", 2),
]


@pytest.mark.parametrize("handoff", ["files", "inline"])
@pytest.mark.parametrize("seed,n,policy,router,partitions", CASES)
def test_spark_equals_local(spark, seed, n, policy, router, partitions, handoff):
    streams, W = random_streams(seed, n)
    ref = local_engine(streams, W, policy)
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    ar = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    out = spark_join(ts, ar, key_frames(streams), W, policy, spark=spark, progress="spark",
                     settings=RouteSettings(router, partitions, 7), handoff=handoff)
    assert out.routing["progress_pass"] == "spark"
    assert out.routing["handoff"] == handoff
    rows = list(zip(*[r.tolist() for r in out.combos.rows]))
    assert len(rows) == len(set(rows))
    em = out.emission
    emitted = {c: (e, l) for c, m, e, l in zip(rows, em.emitted.tolist(), em.emit_us.tolist(), em.latency_us.tolist()) if m}
    assert set(rows) == ref.truth
    assert emitted == ref.emitted
    assert out.memory.sum(axis=0).tolist() == ref.memory
    assert {(out.replay.stream[a], out.replay.row[a]) for a in np.flatnonzero(
        out.decisions.dropped if policy.family == "sorting" else out.decisions.expired)} == (
        ref.dropped if policy.family == "sorting" else ref.expired)


def test_atr_tasks_route_themselves_as_the_driver_would(spark):
    """Files hand-off: each stream is handed off once and every ATR task picks its
    own rows from the plan; inline, the driver routes.  Same combinations (the
    reference's), same copies per partition and stream (the routing report's
    mem / net use, shipped tuples) -- with the driver's progress pass, whose
    mpkslack slack and running maxima are read one stream at a time."""
    streams, W = random_streams(12, 3, rows=(30, 60))
    policy = PolicySpec("mpkslack")
    ref = local_engine(streams, W, policy)
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    ar = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    outs = {h: spark_join(ts, ar, key_frames(streams), W, policy, spark=spark, progress="driver",
                          settings=RouteSettings("atr", 3, 7), handoff=h) for h in ("files", "inline")}
    for h, out in outs.items():
        rows = list(zip(*[r.tolist() for r in out.combos.rows]))
        assert set(rows) == ref.truth and len(rows) == len(set(rows)), h
        em = out.emission
        assert {c for c, m in zip(rows, em.emitted.tolist()) if m} == set(ref.emitted), h
        assert out.memory.sum(axis=0).tolist() == ref.memory, h
    f, i = outs["files"].routing, outs["inline"].routing
    assert f["shipped_tuples"] > sum(len(s) for s in streams)   # segments near a boundary went to both
    for key in ("shipped_tuples", "replication_factor", "overhead_measured"):
        assert f[key] == i[key], key
    drop = ("t_us",)   # the kernels' measured time
    assert ([{k: v for k, v in p.items() if k not in drop} for p in f["per_partition"]]
            == [{k: v for k, v in p.items() if k not in drop} for p in i["per_partition"]])


def _write_sample(tmp: Path) -> Path:
    rng = np.random.default_rng(11)
    for name, m in (("a", 400), ("b", 300), ("c", 200)):
        ts = np.sort(rng.integers(0, 2_000_000, m))
        pl.DataFrame({"ts": ts, "arrival": ts + rng.integers(0, 20_000, m), "key": rng.integers(0, 5, m),
                      "val": rng.normal(size=m)}).write_parquet(tmp / f"{name}.parquet")
    cfg = tmp / "j.toml"
    cfg.write_text("\n".join(
        ['[run]', 'policy = "mpkslack"'] +
        [f'[[stream]]\nname = "{s}"\npath = "{s}.parquet"\nts = "ts"\narrival = "arrival"\nunit = "us"\n'
         f'keys = ["key"]\nwindow = "50ms"' for s in "abc"]))
    return cfg


def test_python_workers_use_one_malloc_arena(spark):
    # the kernels' large temporaries must come from the main heap in the
    # workers too (pipelines/base/allocator.py); glibc's malloc_info lists one
    # <heap> per arena
    def arenas(_):
        import ctypes
        import ctypes.util
        import tempfile

        import numpy as np
        import polars  # noqa: F401  (starts threads, as the kernels' imports do)

        np.ones(1 << 22).sum()
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.fopen.restype = ctypes.c_void_p
        libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.fclose.argtypes = [ctypes.c_void_p]
        with tempfile.NamedTemporaryFile("r", suffix=".xml") as f:
            fp = libc.fopen(f.name.encode(), b"w")
            libc.malloc_info(0, fp)
            libc.fclose(fp)
            yield f.read().count("<heap nr=")

    assert spark.sparkContext.parallelize(range(2), 2).mapPartitions(arenas).collect() == [1, 1]


def test_python_workers_only_load_compiled_kernels(spark):
    # a task never builds a kernel (several at once, inside a task): the workers
    # get $STREAMJOIN_KERNELS=load (pipelines/base/jit.py), the driver builds
    def mode(_):
        import os

        yield os.environ.get("STREAMJOIN_KERNELS")

    assert spark.sparkContext.parallelize(range(2), 2).mapPartitions(mode).collect() == ["load", "load"]


def test_cli_ctr_on_local_cluster_equals_local_engine(tmp_path):
    """`streamjoin run --engine spark --router ctr --master local-cluster[2,1,1024]`:
    separate executor processes; results.parquet is the local engine's file, byte for byte."""
    cfg = _write_sample(tmp_path)
    exe = str(Path(sys.executable).with_name("streamjoin"))
    env = dict(os.environ, STREAMJOIN_ENGINE="local")
    local = subprocess.run([exe, "run", str(cfg), "--engine", "local", "--out", str(tmp_path / "local")],
                           env=env, capture_output=True, text=True)
    assert local.returncode == 0, local.stderr
    spark = subprocess.run([exe, "run", str(cfg), "--engine", "spark", "--router", "ctr", "--partitions", "3",
                            "--master", "local-cluster[2,1,1024]", "--out", str(tmp_path / "spark")],
                           env=env, capture_output=True, text=True, timeout=600)
    assert spark.returncode == 0, spark.stderr[-3000:]
    a = pl.read_parquet(tmp_path / "local" / "results.parquet")
    b = pl.read_parquet(tmp_path / "spark" / "results.parquet")
    assert a.height > 0 and a.equals(b)  # same rows, same order
    assert (tmp_path / "local" / "results.parquet").read_bytes() == (tmp_path / "spark" / "results.parquet").read_bytes()
    import json

    rep = json.loads((tmp_path / "spark" / "report.json").read_text())
    assert rep["routing"]["router"] == "ctr" and rep["routing"]["partitions"] == 3
    assert rep["duplicates"] == 0
    assert rep["outputs"]["results"].endswith("results.parquet")


def emulation_streams(seed: int):
    """Two keyed streams on a millisecond scale with heavy disorder, and windows in ms."""
    rng = np.random.default_rng(seed)
    ms = 1000
    streams = []
    for i in range(2):
        out = []
        for r in range(int(rng.integers(20, 40))):
            t = int(rng.integers(1, 80)) * ms
            d = int(rng.integers(0, 3 * ms) if rng.random() < 0.7 else rng.integers(0, 40 * ms))
            out.append(RefTuple(i, r, t, t + d, (int(rng.integers(0, 2)),)))
        streams.append(out)
    return streams, (5 * ms, 3 * ms)


@pytest.mark.parametrize("seed,policy,router,partitions", [
    (21, PolicySpec("spark-ss", watermark=(2000, 4000), trigger_us=7000, watermark_policy="min"), "none", 1),
    (22, PolicySpec("spark-ss", watermark=(3000, 3000), trigger_us=5000, watermark_policy="max"), "atr", 3),
    (23, PolicySpec("flink", watermark=(2000, 0), watermark_interval_us=3000), "atr", 3),
])
def test_emulations_on_spark_equal_local(spark, seed, policy, router, partitions):
    """spark-ss and flink on Spark: the members' facts (spark-ss: from the watermark scan on
    Spark; flink: from the driver), the join (and each pair's emission test) in the tasks --
    the same pairs, emission times, latencies, batch ids, late drops and policy_settings as
    the local engine."""
    from helpers.flink import local_flink
    from helpers.spark_ss import local_spark_ss

    streams, W = emulation_streams(seed)
    ref = (local_spark_ss if policy.name == "spark-ss" else local_flink)(streams, W, policy)
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    ar = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    # spark-ss: the watermark scan on Spark too (per-partition batch maxima; batches cut by partitions)
    progress = "spark" if policy.name == "spark-ss" else "auto"
    out = spark_join(ts, ar, key_frames(streams), W, policy, spark=spark, settings=RouteSettings(router, partitions, 7000),
                     progress=progress)
    assert out.routing["progress_pass"] == ("spark" if policy.name == "spark-ss" else "driver")
    assert out.decisions.policy_settings == (local_engine_settings := _local_settings(streams, W, policy))
    assert local_engine_settings["watermark_us"] == list(policy.watermark)
    rows = list(zip(*[r.tolist() for r in out.combos.rows]))
    assert len(rows) == len(set(rows)) and set(rows) == ref.truth
    em = out.emission
    if policy.name == "spark-ss":
        got = {c: (b, e, l) for c, m, b, e, l in zip(rows, em.emitted.tolist(), em.batch.tolist(),
                                                      em.emit_us.tolist(), em.latency_us.tolist()) if m}
    else:
        got = {c: (e, l) for c, m, e, l in zip(rows, em.emitted.tolist(), em.emit_us.tolist(),
                                                em.latency_us.tolist()) if m}
    assert got == ref.emitted and 0 < len(got) < len(rows)
    order = list(zip(out.replay.stream.tolist(), out.replay.row.tolist()))
    assert {order[a] for a in np.flatnonzero(out.decisions.dropped)} == ref.dropped != set()
    assert out.routing["router"] == router


def _local_settings(streams, W, policy) -> dict:
    from streamjoin.pipelines.engines.local import join

    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    ar = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    return join(ts, ar, key_frames(streams), W, policy).decisions.policy_settings


def _file_batches(seed: int, streams):
    """``spark-ss --trigger-files 2`` on ``streams``: each row put in one of 4 files per stream
    with random modification times; arrivals become the batch times (``file_arrivals``)."""
    from dataclasses import replace

    from streamjoin.pipelines.policies.spark_ss import file_arrivals

    rng = np.random.default_rng(seed)
    owner = [rng.integers(0, 4, len(s)) for s in streams]
    mtimes = [(rng.integers(0, 80, 4) * 1000).tolist() for _ in streams]
    paths = [[f"part-{k}" for k in range(4)] for _ in streams]
    arrivals, times = file_arrivals(owner, mtimes, paths, 2)
    streams = [[replace(x, arrival=int(a)) for x, a in zip(s, arr)] for s, arr in zip(streams, arrivals)]
    policy = PolicySpec("spark-ss", watermark=(2000, 3000), trigger_files=2, watermark_policy="min",
                        batch_times_us=tuple(int(t) for t in times))
    return policy, streams


def _cli_on_both_engines(tmp_path, policy_args, seed=24):
    """``streamjoin run`` on the local engine and on ``--engine spark --router auto`` (ATR for
    the emulations, 3 partitions, local[2]): results.parquet byte for byte and the report's
    numbers (drops, memory, latency, periods, policy_settings) equal; returns both reports."""
    import json

    rng = np.random.default_rng(seed)
    t0 = 1_700_000_000_000_000
    paths = []
    for name in ("left", "right"):
        n = 300
        ts = t0 + rng.integers(0, 60_000, n) * 1000
        delay = np.where(rng.random(n) < 0.2, rng.integers(0, 20_000_000, n), rng.integers(0, 1_000_000, n))
        path = tmp_path / f"{name}.parquet"
        pl.DataFrame({"ts": ts, "arrival": ts + delay, "key": rng.integers(0, 4, n)}).write_parquet(path)
        paths += ["--stream", f"{name}={path}"]
    args = paths + ["--unit", "us", "--arrival", "arrival", "--key", "key", "--window", "2s", *policy_args]
    exe = str(Path(sys.executable).with_name("streamjoin"))
    env = dict(os.environ, STREAMJOIN_ENGINE="local")
    for engine, extra in (("local", []), ("spark", ["--router", "auto", "--partitions", "3", "--master", "local[2]"])):
        proc = subprocess.run([exe, "run", *args, "--engine", engine, *extra, "--out", str(tmp_path / engine)],
                              env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = (tmp_path / "local" / "results.parquet").read_bytes(), (tmp_path / "spark" / "results.parquet").read_bytes()
    assert a == b and pl.read_parquet(tmp_path / "local" / "results.parquet").height > 0
    want, got = (json.loads((tmp_path / e / "report.json").read_text()) for e in ("local", "spark"))
    for key in ("truth_results", "emitted_results", "streams", "periods", "memory_tuples", "latency_us",
                "policy_settings", "tuning", "outer_join"):
        assert got.get(key) == want.get(key), key
    assert got["routing"]["router"] == "atr"
    return want, got


def test_cli_spark_ss_on_spark_equals_local_engine(tmp_path):
    """`streamjoin run --policy spark-ss --engine spark --router auto`: as on the local engine."""
    _, got = _cli_on_both_engines(tmp_path, ["--policy", "spark-ss", "--watermark", "1s", "--trigger", "5s"])
    assert sum(s["dropped_late"] for s in got["streams"]) > 0


def test_cli_flink_sql_full_outer_on_spark_equals_local_engine(tmp_path):
    """`streamjoin run --policy flink-sql --join full --engine spark`: the pairs and the
    null-padded rows of both sides (results.parquet byte for byte), the outer_join section,
    memory and policy_settings as on the local engine."""
    want, _ = _cli_on_both_engines(tmp_path, ["--policy", "flink-sql", "--watermark", "1s", "--join", "full"], seed=25)
    assert want["outer_join"]["rows"] > 0 and want["outer_join"]["stream"] == "left and right"


def _answer(out) -> tuple[dict, dict, dict]:
    """A join outcome as sets: emitted pairs -> (emit_us, latency_us[, batch]); null-padded
    rows (stream, row) -> (emit_us, latency_us[, batch]); policy_settings."""
    em = out.emission
    rows = list(zip(*[r.tolist() for r in out.combos.rows]))
    batch = em.batch.tolist() if em.batch is not None else [None] * len(rows)
    pairs = {c: (e, l, b) for c, m, e, l, b in zip(rows, em.emitted.tolist(), em.emit_us.tolist(),
                                                  em.latency_us.tolist(), batch) if m}
    padded = {}
    for part in em.outer or ():
        pb = part.batch.tolist() if part.batch is not None else [None] * len(part.row)
        for r, e, l, b in zip(part.row.tolist(), part.emit_us.tolist(), part.latency_us.tolist(), pb):
            padded[(part.stream, r)] = (e, l, b)
    return pairs, padded, out.decisions.policy_settings


@pytest.mark.parametrize("seed,policy,router,partitions", [
    (31, PolicySpec("flink-sql", watermark=(2000, 1000), watermark_interval_us=0), "none", 1),
    (32, PolicySpec("flink-sql", watermark=(1000, 3000), watermark_interval_us=3000, join="full",
                    min_cleanup_us=5000), "atr", 3),
    (33, PolicySpec("spark-ss", watermark=(2000, 4000), trigger_us=7000, watermark_policy="min", join="left"),
     "atr", 2),
    (34, PolicySpec("flink", watermark=(1000, 2000), watermark_interval_us=2000, idleness_us=5000), "atr", 2),
    (35, "trigger-files", "atr", 2),
])
def test_sql_join_and_outer_joins_on_spark_equal_local(spark, seed, policy, router, partitions):
    """flink-sql (caches and probes from the driver, each pair's emission test in the tasks;
    --min-cleanup-interval included), the outer joins of flink-sql and spark-ss, flink --idleness and spark-ss --trigger-files on
    Spark: the same emitted pairs with their emission times, latencies and batch ids, the same
    null-padded rows with theirs, the same memory per arrival and policy_settings as the local
    engine."""
    from streamjoin.pipelines.engines.local import join

    streams, W = emulation_streams(seed)
    if policy == "trigger-files":   # spark-ss --trigger-files: rows arrive when their file's batch runs
        policy, streams = _file_batches(seed, streams)
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    ar = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    want = join(ts, ar, key_frames(streams), W, policy)
    got = spark_join(ts, ar, key_frames(streams), W, policy, spark=spark,
                     settings=RouteSettings(router, partitions, 7000))
    assert got.routing["router"] == router
    (gp, go, gs), (wp, wo, ws) = _answer(got), _answer(want)
    assert gp == wp and gs == ws and len(gp) > 0
    if policy.name == "flink":   # idleness changes the answer here: the case tests it
        from dataclasses import replace

        assert _answer(join(ts, ar, key_frames(streams), W, replace(policy, idleness_us=None)))[0] != wp
    if policy.min_cleanup_us:   # the cleanup timers fire later: the case tests it
        from dataclasses import replace

        assert not np.array_equal(join(ts, ar, key_frames(streams), W, replace(policy, min_cleanup_us=0)).memory,
                                  want.memory)
    if policy.trigger_files:   # batches of files: the driver's pass, batch ids as in memory
        assert got.routing["progress_pass"] == "driver" and {b for _, _, b in gp.values()} != {None}
    assert go == wo and (policy.join == "inner" or len(go) > 0)
    assert np.array_equal(got.memory, want.memory)


def test_a_given_probe_order_keeps_the_counted_run_materialising(spark, monkeypatch):
    """``counting.counts``' rule on both engines: a given probe order is not counted
    (the local engine materialises and reports that order), so the Spark engine's
    tasks do not count either (engines/spark/counted.py)."""
    from streamjoin.pipelines.engines.local import CountRequest, join
    from streamjoin.pipelines.replay import counting

    monkeypatch.setattr(counting, "MIN_ROWS", 0)
    streams, W = random_streams(21, 2, rows=(30, 60))
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    ar = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    policy, count = PolicySpec("static", retention=(5, 5)), CountRequest(period_us=10, sample=7)
    local = join(ts, ar, key_frames(streams), W, policy, order=[1, 0], count=count)
    assert local.counted is None and local.probe_order.order == [1, 0]
    unordered = spark_join(ts, ar, key_frames(streams), W, policy, spark=spark,
                           settings=RouteSettings("atr", 3, 7), count=count)
    assert unordered.routing["counted_in_tasks"] is True   # the same run counts without the order
    out = spark_join(ts, ar, key_frames(streams), W, policy, spark=spark, order=[1, 0],
                     settings=RouteSettings("atr", 3, 7), count=count)
    assert out.routing["counted_in_tasks"] is False and out.counted is None
    assert out.probe_order.order == [1, 0] and len(out.combos) == len(local.combos)
