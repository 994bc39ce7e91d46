"""Spark options that must work or be refused, never be ignored (issue 19): checked
when the configuration is resolved, before Spark starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.config.options import results_mode
from streamjoin.pipelines.config.settings import Flags, resolve

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples/soccer/soccer.toml"


def _resolve(tmp_path, **kw):
    return resolve(SAMPLE, Flags(out=str(tmp_path / "o"), policy="none", **kw))


def test_chunk_rows_with_the_spark_engine_chosen_is_refused(tmp_path):
    with pytest.raises(InputError, match="bounded memory runs on --engine local"):
        _resolve(tmp_path, engine="spark", chunk_rows=1000)


def test_chunk_rows_with_a_router_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMJOIN_ENGINE", "spark")
    with pytest.raises(InputError, match="bounded memory runs on --engine local"):
        _resolve(tmp_path, router="atr", chunk_rows=1000)


def test_chunk_rows_without_a_chosen_engine_runs_bounded_on_the_local_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMJOIN_ENGINE", "spark")   # the default engine, not the user's choice
    cfg = _resolve(tmp_path, chunk_rows=1000)
    assert (cfg.engine, cfg.chunk_rows) == ("local", 1000)
    cfg = _resolve(tmp_path, engine="spark", chunk_rows=0)   # 0: all in memory, what Spark does
    assert cfg.engine == "spark"


def test_files_handoff_on_a_cluster_master_is_refused(tmp_path):
    with pytest.raises(InputError, match="files needs a local master"):
        _resolve(tmp_path, engine="spark", master="spark://host:7077",
                 spark_conf=["spark.streamjoin.handoff=files"])
    cfg = _resolve(tmp_path, engine="spark", master="local-cluster[2,1,1024]",
                   spark_conf=["spark.streamjoin.handoff=files"])
    assert cfg.master == "local-cluster[2,1,1024]"


def test_results_mode_defaults_and_bad_value(tmp_path):
    assert results_mode("local[2]", ()) == "driver"
    assert results_mode("local-cluster[2,1,1024]", ()) == "driver"
    assert results_mode("yarn", ()) == "executors"
    assert results_mode("local[2]", [("spark.streamjoin.results", "executors")]) == "executors"
    assert results_mode("yarn", [("spark.streamjoin.results", "driver")]) == "driver"
    with pytest.raises(InputError, match="expected auto, driver or executors"):
        _resolve(tmp_path, engine="spark", spark_conf=["spark.streamjoin.results=tasks"])


@pytest.mark.parametrize("master,expected", [("local[2]", "python"), ("spark://host:7077", None)])
def test_pyspark_python_is_set_only_for_local_masters(monkeypatch, master, expected):
    import sys

    from streamjoin.pipelines.engines.spark import session

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)

    class Stop(Exception):
        pass

    import pyspark.sql

    class Builder:   # stops before a JVM starts: only the environment is under test
        def __getattr__(self, name):
            raise Stop

    monkeypatch.setattr(pyspark.sql.SparkSession, "getActiveSession", classmethod(lambda cls: None))
    monkeypatch.setattr(pyspark.sql.SparkSession, "builder", Builder())
    with pytest.raises(Stop):
        with session.spark_session(master):
            pass
    import os

    assert os.environ.get("PYSPARK_PYTHON") == (sys.executable if expected else None)



def test_capacity_keeps_results_on_the_driver_or_refuses_explicit_executors(tmp_path):
    """--capacity runs on --engine spark on the driver (it reworks every combination's
    emission): ``auto`` keeps the results there, an explicit ``executors`` is refused."""
    from dataclasses import replace

    from streamjoin.pipelines.engines.spark.engine import results_path

    cfg = replace(_resolve(tmp_path, engine="spark", master="spark://host:7077"), capacity="tuple=4ms")
    assert results_path(cfg) == "driver"
    cfg = replace(cfg, spark_conf=(("spark.streamjoin.results", "executors"),))
    with pytest.raises(InputError, match="results=executors: not with --flow-control or --capacity"):
        results_path(cfg)
