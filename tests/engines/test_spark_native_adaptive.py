"""Issue 19: the recall-target policies (qjoin, qkslack) on the native Spark path
(pipelines/engines/spark/native_adaptive.py) equal the local engine -- decisions, policy
log, per-period recall, latency, memory and results (as a set) -- on real Spark.

The controller's bad-rows trigger there reads the quarantined rows' arrivals from the
executors (``read.SparkInput.bad_arrivals``), checked against the local loader's
``io.load.bad_arrivals_of``.

The chunked scans with a decision table (replay/partitioned_progress.scheduled) are first
checked without Spark against the local engine's own ``decide`` on random inputs and
chunkings; then one quiet ``local[2]`` session for the in-process runs and one CLI run on
``local-cluster[2,1,1024]``.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.spark_runs import assert_same_run, cli_local_and_spark, run, write_inputs

from streamjoin.pipelines.config.settings import StreamConfig
from streamjoin.pipelines.engines.spark.read import read_streams
from streamjoin.pipelines.engines.spark.session import spark_session
from streamjoin.pipelines.io.load import bad_arrivals_of, load_all
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.policies.recall_target import RecallTarget, decision_table
from streamjoin.pipelines.replay.partitioned_progress import progress_chunks
from streamjoin.pipelines.replay.progress import build_replay, decide

NATIVE = "spark.streamjoin.native=true"
#: the hindsight comparison needs every combination on the driver: with the results on the
#: executors it is "not computed" on every Spark path (run.py), so it is compared apart
APART = {"hindsight"}


def _inputs(rng, n: int, m: int):
    ts, arrival = [], []
    for _ in range(n):
        t = np.sort(rng.integers(0, 2_000_000, m))
        late = rng.random(m) < 0.15
        ts.append(t)
        arrival.append(t + rng.integers(0, 20_000, m) + late * rng.integers(0, 200_000, m))
    return ts, arrival


@settings(max_examples=12, deadline=None)
@given(n=st.integers(2, 3), name=st.sampled_from(["qjoin", "qkslack"]), q=st.sampled_from([0.8, 0.97]),
       pieces=st.integers(1, 5), seed=st.integers(0, 10**6))
def test_scheduled_chunks_equal_the_local_decisions(n, name, q, pieces, seed):
    """The decision table applied chunk by chunk (carried-in MP-K-slack bound, horizons,
    releases) gives the local engine's R, drops and releases (qkslack) or horizons and
    expiries (qjoin) exactly."""
    rng = np.random.default_rng(seed)
    ts, arrival = _inputs(rng, n, 150)
    W = np.array([40_000, 30_000, 50_000][:n])
    policy = PolicySpec(name, target=RecallTarget(q, period_us=200_000, interval_us=50_000))
    replay = build_replay(ts, arrival, keep_running_max=True)
    dec = decide(replay, W, policy)
    assert dec.policy_log, "the controller decided nothing: the test would check the initial bound only"
    cuts = np.sort(rng.integers(0, replay.N + 1, pieces - 1))
    chunks = [{"stream": s, "row": r, "ts": t, "arrival": a} for s, r, t, a in
              zip(*(np.split(x, cuts) for x in (replay.stream, replay.row, replay.ts, replay.arrival)))]
    f = progress_chunks(chunks, n, W, policy, schedule=decision_table(dec.policy_log, n))
    if policy.family == "sorting":
        assert np.array_equal(f["R"], dec.R) and np.array_equal(f["dropped"], dec.dropped)
        kept = ~dec.dropped
        assert np.array_equal(np.maximum(f["rel"], np.arange(replay.N))[kept], dec.release[kept])
    else:
        assert np.array_equal(np.vstack([f[f"H{k}"] for k in range(n)]), dec.H)
        assert np.array_equal(f["expired"], dec.expired)


@pytest.fixture(scope="module")
def spark():
    with spark_session("local[2]", 3, [("spark.sql.shuffle.partitions", "3"), ("spark.driver.memory", "1g")]) as s:
        yield s


def _same(a, b, ra, rb):
    """assert_same_run, the hindsight apart: the local engine computes it, the native path
    says why not (its results stay on the executors)."""
    assert rb["hindsight"]["computed"] is False and ra["hindsight"]["computed"] is True
    ra, rb = ({k: v for k, v in r.items() if k not in APART} for r in (ra, rb))
    assert_same_run(a, b, ra, rb, bytes_mean_exact=False)


CASES = [
    # n, policy, recall, router, partitions
    (2, "qjoin", 0.8, "atr", 3),
    (3, "qjoin", 0.97, "none", 2),
    (2, "qkslack", 0.97, "atr", 2),
    (3, "qkslack", 0.8, "atr", 3),
    (3, "qjoin", 0.8, "ctr", 3),      # CTR's hops carry the decided horizons H_k
]


@pytest.mark.parametrize("n,policy,recall,router,partitions", CASES)
def test_native_adaptive_equals_the_local_engine(spark, tmp_path, n, policy, recall, router, partitions):
    cfg = write_inputs(tmp_path, n, seed=n * 7 + partitions)
    flags = {"policy": policy, "recall": recall, "interval": "50ms"}
    local = run(cfg, tmp_path / "local", engine="local", **flags)
    nat = run(cfg, tmp_path / "nat", engine="spark", master="local[2]", router=router, partitions=partitions,
              spark_conf=[NATIVE], **flags)
    assert nat["routing"]["native"] is True
    assert len(local["policy_decisions"]) >= 10 and local["emitted_results"] > 0
    # the decisions move the values: a run whose controller changed nothing would prove little
    key = "retention_us" if policy == "qjoin" else "k_us"
    assert len({tuple(d[key].values()) for d in local["policy_decisions"]}) > 1
    _same(tmp_path / "local", tmp_path / "nat", local, nat)


def test_decides_frame_is_released_when_progress_fails(spark, tmp_path, monkeypatch):
    """native_join: the decide step's persisted frame (progress_frame's ``ordered``) is
    unpersisted even when the progress step raises."""
    from pyspark import StorageLevel

    from streamjoin.pipelines.engines.spark import native

    held = []

    def boom(*a, ordered=None, **k):
        assert ordered is not None and ordered.is_cached and ordered.storageLevel != StorageLevel.NONE
        held.append(ordered)
        raise RuntimeError("progress failed")

    monkeypatch.setattr(native, "progress_frame", boom)
    cfg = write_inputs(tmp_path, 2, seed=5)
    with pytest.raises(RuntimeError, match="progress failed"):
        run(cfg, tmp_path / "nat", engine="spark", master="local[2]", partitions=2, spark_conf=[NATIVE],
            policy="qjoin", recall=0.9, interval="50ms")
    assert len(held) == 1 and not held[0].is_cached and held[0].storageLevel == StorageLevel.NONE


@pytest.mark.parametrize("fails", ["progress_frame", "memory_stats"])
def test_a_failed_native_join_leaves_nothing_cached(spark, tmp_path, monkeypatch, fails):
    """native_join: when the progress step fails, the read's cached copy is released too;
    when a later step fails, the progress frame's cached frames are -- nothing stays
    cached in a reused session."""
    from streamjoin.pipelines.engines.spark import native, read

    released, progs = [], []
    real_release, real_progress = read.SparkInput.release, native.progress_frame

    def release(self):
        released.append(True)
        real_release(self)

    def progress(*a, **k):
        if fails == "progress_frame":
            raise RuntimeError("step failed")
        progs.append(real_progress(*a, **k))
        return progs[-1]

    def stats(*a, **k):
        raise RuntimeError("step failed")

    monkeypatch.setattr(read.SparkInput, "release", release)
    monkeypatch.setattr(native, "progress_frame", progress)
    monkeypatch.setattr(native, "memory_stats", stats)
    cfg = write_inputs(tmp_path, 2, seed=6)
    with pytest.raises(RuntimeError, match="step failed"):
        run(cfg, tmp_path / "nat", engine="spark", master="local[2]", partitions=2, spark_conf=[NATIVE],
            policy="qjoin", recall=0.9, interval="50ms")
    assert released == [True]
    if fails == "memory_stats":
        assert len(progs) == 1 and progs[0].cached and not any(df.is_cached for df in progs[0].cached)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(2, 3), policy=st.sampled_from(["qjoin", "qkslack"]), recall=st.sampled_from([0.7, 0.9, 0.99]),
       router=st.sampled_from(["none", "atr"]), partitions=st.integers(1, 4), seed=st.integers(0, 10**6))
def test_native_adaptive_equals_the_local_engine_on_random_inputs(spark, tmp_path_factory, n, policy, recall,
                                                                   router, partitions, seed):
    tmp = tmp_path_factory.mktemp("prop")
    cfg = write_inputs(tmp, n, seed=seed, sizes=(120, 90, 70, 60))
    flags = {"policy": policy, "recall": recall, "interval": "100ms"}
    local = run(cfg, tmp / "local", engine="local", **flags)
    nat = run(cfg, tmp / "nat", engine="spark", master="local[2]", router=router, partitions=partitions,
              spark_conf=[NATIVE], **flags)
    _same(tmp / "local", tmp / "nat", local, nat)


def test_cli_native_adaptive_on_local_cluster_equals_local_engine(tmp_path):
    """`streamjoin run --engine spark --master local-cluster[2,1,1024]` with qkslack: separate
    executor JVMs and Python workers apply the driver's decision table."""
    cfg = write_inputs(tmp_path, 3, seed=41)
    ra, rb = cli_local_and_spark(tmp_path, cfg, ["--policy", "qkslack", "--recall", "0.9", "--interval", "50ms"],
                                 ["--router", "atr", "--partitions", "3", "--master", "local-cluster[2,1,1024]",
                                  "--spark-conf", NATIVE], "nat")
    assert rb["routing"]["native"] is True and rb["routing"]["master"] == "local-cluster[2,1,1024]"
    assert len(ra["policy_decisions"]) >= 10
    _same(tmp_path / "local", tmp_path / "nat", ra, rb)


def _bad_bursts(path, seed: int) -> None:
    """Add to a ``write_inputs`` file two bursts of 12 quarantined rows: ``null ts`` ones
    arriving at 720-723 ms (between the 50 ms decisions), ``null key key`` ones at 1400-1403 ms."""
    df = pl.read_parquet(path)
    rng = np.random.default_rng(seed)

    def burst(at: int, null_ts: bool, null_key: bool) -> pl.DataFrame:
        a = np.sort(at + rng.integers(0, 3_000, 12))
        return pl.DataFrame({"ts": None if null_ts else a - 5_000, "arrival": a,
                             "key": None if null_key else rng.integers(0, 4, 12), "val": rng.normal(size=12),
                             "tag": ["bad"] * 12}, schema=df.schema)

    pl.concat([df, burst(720_000, True, False), burst(1_400_000, False, True)]).sort("arrival").write_parquet(path)


def test_bad_arrivals_from_the_executors_equal_the_local_loaders(spark, tmp_path):
    """``SparkInput.bad_arrivals`` gives ``bad_arrivals_of``'s arrays for every reason filter:
    streams with an arrival column (int us) and without one (``ts`` a millisecond timestamp:
    the unit conversion), quarantined for two reasons."""
    write_inputs(tmp_path, 2, seed=3)
    _bad_bursts(tmp_path / "a.parquet", 1)
    _bad_bursts(tmp_path / "b.parquet", 2)
    rng = np.random.default_rng(4)
    ms = np.sort(rng.integers(0, 2_000, 80))
    null_ts, null_key = rng.random(80) < 0.1, rng.random(80) < 0.1
    pq.write_table(pa.table({"t": pa.array(np.where(null_ts, 0, ms), pa.timestamp("ms"), mask=null_ts),
                             "key": pa.array(rng.integers(0, 4, 80), mask=null_key)}), tmp_path / "c.parquet")
    cfgs = [StreamConfig(s, str(tmp_path / f"{s}.parquet"), arrival="arrival", unit="us", keys=("key",))
            for s in "ab"] + [StreamConfig("c", str(tmp_path / "c.parquet"), ts="t", keys=("key",))]
    local = load_all(cfgs)
    inp = read_streams(spark, cfgs, quarantine_dir=tmp_path / "q")
    try:
        for reason in (None, "null ts", "null key key", "null t", "no such reason"):
            want, got = bad_arrivals_of(local, reason), inp.bad_arrivals(reason)
            assert len(got) == 3 and all(g.dtype == np.int64 for g in got)
            assert all(np.array_equal(w, g) for w, g in zip(want, got)), reason
        every, null_ts_only = inp.bad_arrivals(), inp.bad_arrivals("null ts")
        # the filter and the conversion do something: 24 bad rows in a and b, 12 of them null ts;
        # c (no arrival column) keeps only its null-key rows, at their ts in us
        assert [len(x) for x in every[:2]] == [24, 24] and [len(x) for x in null_ts_only[:2]] == [12, 12]
        assert np.array_equal(every[2], np.sort(ms[null_key & ~null_ts]) * 1000) and len(every[2])
        assert len(null_ts_only[2]) == 0
    finally:
        inp.release()


def test_native_qjoin_bad_rows_trigger_equals_the_local_engine(spark, tmp_path):
    """qjoin with ``bad_rows_reason = "null ts"`` on the native path: the ``null ts`` burst
    re-decides at once, the ``null key key`` burst does not -- as on the local engine."""
    cfg = write_inputs(tmp_path, 2, seed=5)
    _bad_bursts(tmp_path / "a.parquet", 1)
    flags = {"policy": "qjoin", "recall": 0.9, "interval": "50ms", "triggers": ["bad_rows_reason=null ts"]}
    local = run(cfg, tmp_path / "local", engine="local", **flags)
    nat = run(cfg, tmp_path / "nat", engine="spark", master="local[2]", router="atr", partitions=3,
              spark_conf=[NATIVE], **flags)
    assert nat["routing"]["native"] is True
    early = [d["time_us"] for d in local["policy_decisions"] if "bad_rows" in d["reason"]]
    assert len(early) == 1 and 720_000 < early[0] < 730_000
    _same(tmp_path / "local", tmp_path / "nat", local, nat)


@pytest.mark.parametrize("values", [["b", "a", "d", "b", "c", "a"], [5, -3, 5, 2**40, 7, -3], [9, 4, 9, 6, 4, 5]])
def test_key_ids_on_the_executors_rename_the_local_ones(spark, values):
    """The streamed controller's key ids (native_adaptive._with_key_ids): equal keys get
    equal ids, different keys different ones, and the largest id is the local engine's
    (replay/candidates.key_ids) -- what the keyed counters' packing decides on."""
    from streamjoin.pipelines.engines.spark.native_adaptive import _with_key_ids
    from streamjoin.pipelines.replay.candidates import key_ids

    pdf = pl.DataFrame({"__key0": values, "row": list(range(len(values)))})
    df = spark.createDataFrame([(v, i) for i, v in enumerate(values)],
                               "__key0 string, row long" if isinstance(values[0], str) else "__key0 long, row long")
    out, key_max, _ = _with_key_ids(df, ["__key0"])
    got = dict((r["row"], r["__kid"]) for r in out.select("row", "__kid").collect())
    ids = [got[i] for i in range(len(values))]
    want = key_ids([pdf.select("__key0")])[0]
    assert all((ids[a] == ids[b]) == (values[a] == values[b]) for a in range(len(values)) for b in range(len(values)))
    assert key_max == int(np.max(want))


def test_uint64_key_ids_on_the_executors_are_the_local_ones(spark):
    """A ``uint64`` key reaches the native frame as ``decimal(20,0)`` (read._spark_key_type);
    the local engine gives it ``value - min`` (replay/candidates.key_ids: an integer
    column over a range below 2^31), so the largest id -- which decides whether the
    keyed counters pack ``(key, ts)`` -- must be ``max - min`` here too, not the
    number of distinct keys."""
    from decimal import Decimal

    from streamjoin.pipelines.engines.spark.native_adaptive import _with_key_ids
    from streamjoin.pipelines.replay.candidates import key_ids

    values = [2**64 - 1, 2**64 - 41, 2**64 - 1, 2**64 - 7, 2**64 - 41]
    df = spark.createDataFrame([(Decimal(v), i) for i, v in enumerate(values)], "__key0 decimal(20,0), row long")
    out, key_max, _ = _with_key_ids(df, ["__key0"])
    got = dict((r["row"], r["__kid"]) for r in out.select("row", "__kid").collect())
    want = key_ids([pl.DataFrame({"__key0": pl.Series(values, dtype=pl.UInt64)})])[0]
    assert key_max == int(np.max(want)) == 40
    assert [got[i] for i in range(len(values))] == [int(v) for v in want]


def test_float_key_ids_on_the_executors_group_as_the_local_ones(spark):
    """Float keys (ranked on the executors): NaN equals NaN and -0.0 equals 0.0 in
    the executors' ids exactly when it does in the local engine's (polars), and the
    largest id is the same -- the keyed counters group tuples by these ids."""
    from streamjoin.pipelines.engines.spark.native_adaptive import _with_key_ids
    from streamjoin.pipelines.replay.candidates import key_ids

    values = [1.0, float("nan"), -0.0, 0.0, float("nan"), 2.0, 1.0, -0.0]
    df = spark.createDataFrame([(v, i) for i, v in enumerate(values)], "__key0 double, row long")
    out, key_max, _ = _with_key_ids(df, ["__key0"])
    got = dict((r["row"], r["__kid"]) for r in out.select("row", "__kid").collect())
    ids = [got[i] for i in range(len(values))]
    want = key_ids([pl.DataFrame({"__key0": values})])[0]
    assert all((ids[a] == ids[b]) == (want[a] == want[b]) for a in range(len(values)) for b in range(len(values)))
    assert key_max == int(np.max(want)) == 4


_KEYS = {
    # kind: (Spark schema of the key columns, hypothesis strategy of one key)
    "str": ("__key0 string", st.tuples(st.text("ab\u00e9\u4e2d", max_size=3))),
    "int": ("__key0 long", st.tuples(st.sampled_from([-(2**40), -7, 0, 3, 2**40, 2**62]))),
    "float": ("__key0 double", st.tuples(st.sampled_from([float("nan"), -0.0, 0.0, 1.5, -2.0, float("inf")]))),
    "int,str": ("__key0 long, __key1 string", st.tuples(st.integers(-3, 3), st.sampled_from(["", "a", "b"]))),
}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), kind=st.sampled_from(sorted(_KEYS)), partitions=st.integers(1, 4))
def test_distributed_key_ids_equal_the_one_task_rank_and_the_local_ids(spark, data, kind, partitions):
    """The key ids ranked in range partitions (native_adaptive._dense_key_ids: per-partition
    counts, prefix offsets) are exactly the one-task ``dense_rank().over(Window.orderBy(keys))``
    they replace, for every partition count (empty partitions included), and group tuples as
    the local engine's ids (replay/candidates.key_ids) with the same largest id; for
    strings, integers over a wide range and multi-column keys the ids are the local ones."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from streamjoin.pipelines.engines.spark.native_adaptive import _with_key_ids
    from streamjoin.pipelines.replay.candidates import key_ids

    schema, key = _KEYS[kind]
    keys = data.draw(st.lists(key, min_size=1, max_size=25))
    if kind == "int":   # a range of 2^31 or more: ranked, not value - min
        keys += [(-(2**40),), (2**40,)]
    names = [f.split()[0] for f in schema.split(", ")]
    df = spark.createDataFrame([(*k, i) for i, k in enumerate(keys)], f"{schema}, row long")
    out, key_max, cached = _with_key_ids(df, names, partitions)
    assert cached is not None, "this key is ranked: the distributed path must run"
    try:
        got = dict((r["row"], r["__kid"]) for r in out.select("row", "__kid").collect())
    finally:
        cached.unpersist()
    ids = np.array([got[i] for i in range(len(keys))])
    one = df.select(*names).distinct().withColumn("__kid", F.dense_rank().over(Window.orderBy(*names)))
    ref = dict((tuple(r[c] for c in names), r["__kid"]) for r in one.collect())
    norm = [tuple(0.0 if (isinstance(v, float) and v == 0) else v for v in k) for k in keys]   # Spark: -0.0 is 0.0
    nan_id = [v for k, v in ref.items() if isinstance(k[0], float) and k[0] != k[0]]
    want_one = [nan_id[0] if isinstance(k[0], float) and k[0] != k[0] else ref[k] for k in norm]
    assert ids.tolist() == want_one
    local = key_ids([pl.DataFrame({c: [k[j] for k in keys] for j, c in enumerate(names)})])[0]
    assert key_max == int(local.max()) == len(set(want_one))
    m = len(keys)
    assert all((ids[a] == ids[b]) == (local[a] == local[b]) for a in range(m) for b in range(m))
    if kind != "float":
        assert ids.tolist() == local.tolist()


@pytest.mark.parametrize("policy", ["qjoin", "qkslack"])
def test_native_adaptive_with_ranked_string_keys_equals_the_local_engine(spark, tmp_path, policy):
    """String keys take the ranked key ids (native_adaptive._dense_key_ids, a cached frame
    unpersisted when decide returns) and decide's replay-ordered frame -- with ``__kid``
    and the payload beside it -- is taken over by the progress scans
    (progress_frame's ``ordered``): the run equals the local engine's."""
    cfg = write_inputs(tmp_path, 2, seed=11)
    cfg.write_text(cfg.read_text().replace('keys = ["key"]', 'keys = ["tag"]'))
    flags = {"policy": policy, "recall": 0.9, "interval": "50ms"}
    local = run(cfg, tmp_path / "local", engine="local", **flags)
    nat = run(cfg, tmp_path / "nat", engine="spark", master="local[2]", router="atr", partitions=3,
              spark_conf=[NATIVE], **flags)
    assert nat["routing"]["native"] is True and local["emitted_results"] > 0
    _same(tmp_path / "local", tmp_path / "nat", local, nat)
