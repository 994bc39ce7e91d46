"""Issue 19: results and metrics made on the executors (spark.streamjoin.results=executors,
pipelines/engines/spark/sink.py) equal the local engine's -- results as a set, report.json's
numbers exactly -- and the driver path's on the same session.

One quiet ``local[2]`` session for the in-process runs (run_job reuses it), and one CLI run
on ``local-cluster[2,1,1024]`` (separate executor JVMs and Python workers).
"""

from __future__ import annotations

import polars as pl
import pytest
from helpers.spark_runs import HOW, assert_same_run, cli_local_and_spark, run, write_inputs

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.config.settings import Flags, resolve
from streamjoin.pipelines.engines.spark.engine import results_path
from streamjoin.pipelines.engines.spark.session import spark_session

EXECUTORS = "spark.streamjoin.results=executors"


@pytest.fixture(scope="module")
def spark():
    with spark_session("local[2]", 3, [("spark.sql.shuffle.partitions", "3"), ("spark.driver.memory", "1g")]) as s:
        yield s


CASES = [
    # n, policy flags, router, partitions
    (2, {"policy": "mpkslack"}, "atr", 3),
    (3, {"policy": "kslack", "k": ["20ms"]}, "atr", 2),
    (3, {"policy": "static", "retention": ["15ms"]}, "atr", 3),
    (2, {"policy": "static", "retention": ["5ms"]}, "none", 1),
]


@pytest.mark.parametrize("n,policy,router,partitions", CASES)
def test_executors_equal_the_local_engine(spark, tmp_path, n, policy, router, partitions):
    cfg = write_inputs(tmp_path, n, seed=n * 10 + partitions)
    local = run(cfg, tmp_path / "local", engine="local", **policy)
    spark_flags = dict(engine="spark", master="local[2]", router=router, partitions=partitions, **policy)
    ex = run(cfg, tmp_path / "ex", spark_conf=[EXECUTORS], **spark_flags)
    assert ex["routing"]["results"] == "executors" and ex["routing"]["router"] == router
    assert local["emitted_results"] > 0 and local["emitted_results"] < local["truth_results"] or policy["policy"] == "static"
    assert_same_run(tmp_path / "local", tmp_path / "ex", local, ex)
    parts = sorted(p.name for p in (tmp_path / "ex" / "results.parquet").iterdir())
    assert parts == ["_SUCCESS"] + [f"part-{q:05d}.parquet" for q in range(partitions)]
    # the driver path on the same session: the same report
    dr = run(cfg, tmp_path / "dr", spark_conf=["spark.streamjoin.results=driver"], **spark_flags)
    assert dr["routing"]["results"] == "driver"
    assert_same_run(tmp_path / "dr", tmp_path / "ex", dr, ex)


def test_executors_with_inline_handoff_equal_the_local_engine(spark, tmp_path):
    """Inline hand-off (what a cluster master uses): each task's tuples, payload
    included, travel through Spark itself; the results still never come back."""
    cfg = write_inputs(tmp_path, 3, seed=41)
    policy = {"policy": "kslack", "k": ["10ms"]}
    local = run(cfg, tmp_path / "local", engine="local", **policy)
    spark.conf.set("spark.streamjoin.handoff", "inline")
    try:
        ex = run(cfg, tmp_path / "ex", engine="spark", router="atr", partitions=3, spark_conf=[EXECUTORS], **policy)
    finally:
        spark.conf.unset("spark.streamjoin.handoff")
    assert ex["routing"]["handoff"] == "inline" and ex["routing"]["results"] == "executors"
    assert_same_run(tmp_path / "local", tmp_path / "ex", local, ex)


def test_results_directory_reads_in_polars_duckdb_and_spark(spark, tmp_path):
    import duckdb

    cfg = write_inputs(tmp_path, 2, seed=5)
    rep = run(cfg, tmp_path / "ex", engine="spark", router="atr", partitions=3, policy="mpkslack",
              spark_conf=[EXECUTORS])
    d = tmp_path / "ex" / "results.parquet"
    assert rep["outputs"]["results"] == str(d) and d.is_dir()
    n = rep["emitted_results"]
    assert pl.read_parquet(d).height == n
    assert duckdb.sql(f"select count(*) from read_parquet('{d}/*.parquet')").fetchall() == [(n,)]
    assert spark.read.parquet(str(d)).count() == n


def test_no_results_leaves_no_results_directory(spark, tmp_path):
    cfg = write_inputs(tmp_path, 2, seed=6)
    rep = run(cfg, tmp_path / "ex", engine="spark", router="atr", partitions=2, policy="mpkslack",
              spark_conf=[EXECUTORS], no_results=True)
    local = run(cfg, tmp_path / "local", engine="local", policy="mpkslack", no_results=True)
    assert not (tmp_path / "ex" / "results.parquet").exists() and "results" not in rep["outputs"]
    assert {k: v for k, v in rep.items() if k not in HOW} == {k: v for k, v in local.items() if k not in HOW}


def test_explicit_executors_with_what_it_cannot_do_is_refused_and_auto_falls_back(tmp_path):
    cfg = write_inputs(tmp_path, 2, seed=7)
    with pytest.raises(InputError, match="results=executors: not with --router ctr"):
        run(cfg, tmp_path / "o", engine="spark", router="ctr", policy="mpkslack", spark_conf=[EXECUTORS])
    assert not (tmp_path / "o").exists()   # refused before anything was published
    cluster = resolve(cfg, Flags(out=str(tmp_path / "c"), engine="spark", master="spark://h:7077", policy="none",
                                 router="atr"))
    assert results_path(cluster) == "executors"
    with_where = resolve(cfg, Flags(out=str(tmp_path / "c"), engine="spark", master="spark://h:7077",
                                    policy="none", where="a_val > 0"))
    assert results_path(with_where) == "driver"   # auto: the driver evaluates --where
    assert results_path(resolve(cfg, Flags(out=str(tmp_path / "c"), engine="spark", policy="none"))) == "driver"


def test_cli_on_local_cluster_equals_local_engine(tmp_path):
    """`streamjoin run --engine spark --master local-cluster[2,1,1024]` with the results made
    by separate executor processes: the local engine's results (as a set) and report numbers."""
    cfg = write_inputs(tmp_path, 3, seed=31)
    ra, rb = cli_local_and_spark(tmp_path, cfg, ["--policy", "kslack", "--k", "10ms"],
                                 ["--router", "atr", "--partitions", "3", "--master", "local-cluster[2,1,1024]",
                                  "--spark-conf", EXECUTORS], "ex", timeout=600)
    assert rb["routing"]["results"] == "executors" and rb["routing"]["master"] == "local-cluster[2,1,1024]"
    assert_same_run(tmp_path / "local", tmp_path / "ex", ra, rb)
