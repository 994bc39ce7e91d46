"""Issue 19: ``--router ctr`` on the native Spark path (pipelines/engines/spark/native_route.py):
hops as successive shuffles, equal to the local engine (results as a set, report.json's
numbers exactly), and a routing section equal to the current Spark path's for the same plan --
the plan, the predicted overheads, the copies and intermediate results shipped, and each
partition's counts (``n_in``, ``n_cand``, ``n_out``, ``n_inter_in``), which the native join
tasks now return (ATR too).
"""

from __future__ import annotations

import pytest
from helpers.spark_runs import assert_same_run as assert_same
from helpers.spark_runs import cli_local_and_spark, run, write_inputs

from streamjoin.pipelines.config.settings import Flags, resolve
from streamjoin.pipelines.engines.spark.native import native_path
from streamjoin.pipelines.engines.spark.session import spark_session

NATIVE = "spark.streamjoin.native=true"
CURRENT = "spark.streamjoin.native=false"

#: routing keys whose values are how the run was made (or timings), not what the routing did
HOW = {"progress_pass", "handoff", "results", "native", "stage_s", "master", "per_partition",
       "spark_partitions"}   # how the native path chose P and the heap (engines/spark/sizing.py)


@pytest.fixture(scope="module")
def spark():
    with spark_session("local[2]", 3, [("spark.sql.shuffle.partitions", "3"), ("spark.driver.memory", "1g")]) as s:
        yield s


POLICIES = {"static": {"policy": "static", "retention": ["15ms"]}, "kslack": {"policy": "kslack", "k": ["20ms"]},
            "mpkslack": {"policy": "mpkslack"}, "none": {"policy": "none"}}

CASES = [(n, name, "ctr", p, False) for n, p in ((2, 3), (3, 3)) for name in POLICIES] + [
    (3, "mpkslack", "atr", 3, False),    # ATR's per-partition counts from the native tasks
    (3, "kslack", "auto", 2, False),     # auto: the same choice as the current path (least predicted overhead)
    # --no-results: each last-hop task's summary (value counts) instead of result rows, both families
    (2, "static", "ctr", 3, True), (3, "mpkslack", "ctr", 4, True),
]


def assert_same_routing(cur: dict, nat: dict) -> None:
    """The routing sections agree on every number but timings; each partition's counts equal."""
    assert {k: v for k, v in cur.items() if k not in HOW} == {k: v for k, v in nat.items() if k not in HOW}
    assert len(cur["per_partition"]) == len(nat["per_partition"])
    for c, b in zip(cur["per_partition"], nat["per_partition"]):
        assert {k: v for k, v in c.items() if k != "t_us"} == {k: v for k, v in b.items() if k != "t_us"}
        assert (b["t_us"] > 0) == (b["n_in"] > 0)   # measured in the task that joined there


@pytest.mark.parametrize("n,policy,router,partitions,no_results", CASES)
def test_native_ctr_equals_local_and_current_routing(spark, tmp_path, n, policy, router, partitions, no_results):
    cfg = write_inputs(tmp_path, n, seed=n * 7 + len(policy))
    flags = {**POLICIES[policy], "no_results": no_results}
    local = run(cfg, tmp_path / "local", engine="local", **flags)
    # an explicit results=executors is taken with CTR here (the current path's refuses it)
    conf = [NATIVE] + (["spark.streamjoin.results=executors"] if n == 3 else [])
    nat = run(cfg, tmp_path / "nat", engine="spark", master="local[2]", router=router, partitions=partitions,
              spark_conf=conf, **flags)
    cur = run(cfg, tmp_path / "cur", engine="spark", master="local[2]", router=router, partitions=partitions,
              spark_conf=[CURRENT], **flags)
    assert nat["routing"]["native"] is True and cur["routing"].get("native") is not True
    assert local["emitted_results"] > 0
    assert (tmp_path / "nat" / "results.parquet").exists() is not no_results
    assert_same(tmp_path / "local", tmp_path / "nat", local, nat, bytes_mean_exact=False)
    assert nat["routing"]["router"] == cur["routing"]["router"]
    if router == "ctr":
        r = nat["routing"]
        assert r["replication_factor"] > 1 and (n == 2 or r["shipped_intermediate"] > 0)
        assert sum(p["n_out"] for p in r["per_partition"]) == local["truth_results"]
    assert_same_routing(cur["routing"], nat["routing"])


def test_native_ctr_chosen_on_a_cluster_master(tmp_path):
    cfg = write_inputs(tmp_path, 2, seed=3)
    for conf in ([], [NATIVE]):   # auto on a cluster master, and true on a local one
        master = "local[2]" if conf else "spark://h:7077"
        assert native_path(resolve(cfg, Flags(out=str(tmp_path / "o"), engine="spark", master=master,
                                              policy="none", router="ctr", spark_conf=conf)))


def test_cli_native_ctr_on_local_cluster_equals_local_engine(tmp_path):
    """`streamjoin run --engine spark --router ctr --master local-cluster[2,1,1024]` on the
    native path, three streams (an intermediate hop between executors)."""
    cfg = write_inputs(tmp_path, 3, seed=41)
    ra, rb = cli_local_and_spark(tmp_path, cfg, ["--policy", "kslack", "--k", "20ms"],
                                 ["--router", "ctr", "--partitions", "3", "--master", "local-cluster[2,1,1024]",
                                  "--spark-conf", NATIVE], "nat")
    assert rb["routing"]["native"] is True and rb["routing"]["router"] == "ctr"
    assert rb["routing"]["shipped_intermediate"] > 0
    assert_same(tmp_path / "local", tmp_path / "nat", ra, rb, bytes_mean_exact=False)


def test_hop_copies_are_the_plans_destinations():
    """``native_route.copies`` (one dest() lookup per segment, exploded on columns) gives
    each tuple exactly the hop-1 hosts of ``route.ctr.probe_copies`` (per tuple, per
    segment), for three streams over four partitions."""
    import numpy as np

    from streamjoin.pipelines.engines.spark.native_route import copies
    from streamjoin.pipelines.route import ctr, histogram

    rng = np.random.default_rng(8)
    ts = [np.sort(rng.integers(0, 1_000_000, m)) for m in (400, 250, 300)]
    plan = ctr.plan(histogram(ts), [30_000, 50_000, 20_000], 40_000, 4, [2, 0, 1])
    stream = np.concatenate([np.full(len(t), k) for k, t in enumerate(ts)])
    row = np.concatenate([np.arange(len(t)) for t in ts])
    allts = np.concatenate(ts)
    slot = plan.slot(allts)
    idx, dest = copies(plan, 1, stream, slot, plan.host[stream, slot])
    got = sorted(zip(stream[idx].tolist(), row[idx].tolist(), dest.tolist()))
    want = sorted((k, int(i), int(d)) for k, t in enumerate(ts) for i, d in zip(*ctr.probe_copies(plan, k, t)))
    assert got == want and len(got) > len(allts)   # some tuples probe on more than one host


def test_native_ctr_with_a_stream_without_tuples_equals_local(spark, tmp_path):
    """A middle stream with no tuples: the streams after it reach the native path too
    (stream facts, memory, periods equal the local engine's; PySpark's createDataFrame
    of a table with an empty chunk dropped every later row)."""
    import polars as pl

    cfg = write_inputs(tmp_path, 3, seed=17)
    b = pl.read_parquet(tmp_path / "b.parquet")
    b.head(0).write_parquet(tmp_path / "b.parquet")
    local = run(cfg, tmp_path / "local", engine="local", policy="none")
    nat = run(cfg, tmp_path / "nat", engine="spark", master="local[2]", router="ctr", partitions=3,
              spark_conf=[NATIVE], policy="none")
    assert local["streams"][2]["rate_per_s"] is not None and local["memory_tuples"]["peak"] > 300
    assert_same(tmp_path / "local", tmp_path / "nat", local, nat, bytes_mean_exact=False)


def test_native_ctr_summary_reaches_the_driver_summed(spark, tmp_path, monkeypatch):
    """CTR --no-results: the last-hop tasks' value counts are summed per (kind, value) before
    the driver reads them (one row per distinct value and one statistics row per partition;
    each task's own rows were up to P times as many), and the numbers are the local engine's."""
    import numpy as np

    from streamjoin.pipelines.engines.spark import native_route as nr

    DataFrame = type(spark.range(1))   # the classic DataFrame (pyspark.sql.DataFrame is its base)
    seen = []
    to_arrow = DataFrame.toArrow

    def spy(self):
        t = to_arrow(self)
        if nr.KIND in t.column_names:
            seen.append(t)
        return t

    monkeypatch.setattr(DataFrame, "toArrow", spy)
    cfg = write_inputs(tmp_path, 3, seed=29)
    local = run(cfg, tmp_path / "local", engine="local", policy="mpkslack", no_results=True)
    nat = run(cfg, tmp_path / "nat", engine="spark", master="local[2]", router="ctr", partitions=4,
              spark_conf=[NATIVE], policy="mpkslack", no_results=True)
    assert_same(tmp_path / "local", tmp_path / "nat", local, nat, bytes_mean_exact=False)
    (t,) = seen
    stat = t.column(nr.STAT_Q).is_valid().to_numpy(zero_copy_only=False)
    kv = list(zip(t.column(nr.KIND).to_numpy(zero_copy_only=False)[~stat].tolist(),
                  t.column(nr.VALUE).to_numpy(zero_copy_only=False)[~stat].tolist()))
    q = t.column(nr.STAT_Q).to_numpy(zero_copy_only=False)[stat]
    assert len(kv) == len(set(kv)) and len(q) == len(np.unique(q)) <= 4 and local["emitted_results"] > 0


def test_native_ctr_results_rows_by_name_not_position(spark, tmp_path, monkeypatch):
    """CTR's results rows fill the combination's facts (emission time, latency, emitted,
    required slack, period) by name: native_metrics' results schema listing them in another
    order gives the same results and numbers (they were filled by position, the schema's last five)."""
    from streamjoin.pipelines.engines.spark import native_metrics as nm
    from streamjoin.pipelines.engines.spark.native_route import COMBINATION_COLS

    schema_of = nm._results_schema

    def reordered(*args):
        from pyspark.sql.types import StructType

        s = schema_of(*args)   # the internal columns (dropped before writing) first, reversed
        inner = [f for f in s.fields if f.name in COMBINATION_COLS and f.name.startswith("__")]
        return StructType(inner[::-1] + [f for f in s.fields if f not in inner])

    monkeypatch.setattr(nm, "_results_schema", reordered)
    cfg = write_inputs(tmp_path, 3, seed=31)
    local = run(cfg, tmp_path / "local", engine="local", policy="kslack", k=["20ms"])
    nat = run(cfg, tmp_path / "nat", engine="spark", master="local[2]", router="ctr", partitions=3,
              spark_conf=[NATIVE], policy="kslack", k=["20ms"])
    assert local["emitted_results"] > 0 and nat["routing"]["router"] == "ctr"
    assert_same(tmp_path / "local", tmp_path / "nat", local, nat, bytes_mean_exact=False)
