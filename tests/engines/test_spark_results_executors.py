"""Issue 19: results and metrics made on the executors (spark.streamjoin.results=executors,
pipelines/engines/spark/sink.py) equal the local engine's -- results as a set, report.json's
numbers exactly -- and the driver path's on the same session.

One quiet ``local[2]`` session for the in-process runs (run_job reuses it), and one CLI run
on ``local-cluster[2,1,1024]`` (separate executor JVMs and Python workers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.config.settings import Flags, resolve
from streamjoin.pipelines.engines.spark.engine import results_path
from streamjoin.pipelines.engines.spark.session import spark_session
from streamjoin.pipelines.jobs.run import run_job

#: report.json keys that differ between engines by design (how the run was made, not what it found)
HOW = {"timings_s", "outputs", "routing", "config", "input_tuples_per_s", "tool_version", "command"}
EXECUTORS = "spark.streamjoin.results=executors"


@pytest.fixture(scope="module")
def spark():
    with spark_session("local[2]", 3, [("spark.sql.shuffle.partitions", "3"), ("spark.driver.memory", "1g")]) as s:
        yield s


def write_inputs(tmp: Path, n: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    for name, m in list(zip("abc", (300, 220, 150)))[:n]:
        ts = np.sort(rng.integers(0, 2_000_000, m))
        late = rng.random(m) < 0.1   # some heavy disorder: K-slack drops, symmetric expiries
        pl.DataFrame({"ts": ts, "arrival": ts + rng.integers(0, 20_000, m) + late * rng.integers(0, 300_000, m),
                      "key": rng.integers(0, 4, m), "val": rng.normal(size=m),
                      "tag": [f"t{i % 7}" for i in range(m)]}).write_parquet(tmp / f"{name}.parquet")
    cfg = tmp / "j.toml"
    cfg.write_text("\n".join(['[run]', 'period = "200ms"'] + [
        f'[[stream]]\nname = "{s}"\npath = "{s}.parquet"\nts = "ts"\narrival = "arrival"\nunit = "us"\n'
        f'keys = ["key"]\nwindow = "{w}ms"' for s, w in list(zip("abc", (50, 30, 40)))[:n]]))
    return cfg


def run(cfg: Path, out: Path, **flags) -> dict:
    return run_job(resolve(cfg, Flags(out=str(out), **flags)))


def assert_same_run(a: Path, b: Path, ra: dict, rb: dict) -> None:
    what = HOW | {"plan"}
    assert {k: v for k, v in ra.items() if k not in what} == {k: v for k, v in rb.items() if k not in what}
    # the probe order's estimates are floats the two engines sum in different orders
    # (before this change too); the order itself is the same
    assert ra["plan"]["probe_order"] == rb["plan"]["probe_order"]
    assert ra["plan"]["estimated_partial_sizes"] == pytest.approx(rb["plan"]["estimated_partial_sizes"], rel=1e-12)
    # what was written, too (the returned report is report.json)
    assert json.loads((b / "report.json").read_text())["truth_results"] == rb["truth_results"]
    fa, fb = pl.read_parquet(a / "results.parquet"), pl.read_parquet(b / "results.parquet")
    assert fa.schema == fb.schema and fa.height == fb.height == ra["emitted_results"]
    assert fa.sort(fa.columns).equals(fb.sort(fb.columns))


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
    exe = str(Path(sys.executable).with_name("streamjoin"))
    env = dict(os.environ, STREAMJOIN_ENGINE="local")
    common = ["--policy", "kslack", "--k", "10ms"]
    local = subprocess.run([exe, "run", str(cfg), "--engine", "local", "--out", str(tmp_path / "local"), *common],
                           env=env, capture_output=True, text=True)
    assert local.returncode == 0, local.stderr
    ex = subprocess.run([exe, "run", str(cfg), "--engine", "spark", "--router", "atr", "--partitions", "3",
                         "--master", "local-cluster[2,1,1024]", "--spark-conf", EXECUTORS,
                         "--out", str(tmp_path / "ex"), *common],
                        env=env, capture_output=True, text=True, timeout=600)
    assert ex.returncode == 0, ex.stderr[-3000:]
    ra = json.loads((tmp_path / "local" / "report.json").read_text())
    rb = json.loads((tmp_path / "ex" / "report.json").read_text())
    assert rb["routing"]["results"] == "executors" and rb["routing"]["master"] == "local-cluster[2,1,1024]"
    assert_same_run(tmp_path / "local", tmp_path / "ex", ra, rb)
