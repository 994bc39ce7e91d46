"""The Spark defaults chosen from the input's size (engines/spark/sizing.py, issue 19):
the native path's partitions and a local master's driver heap (and when the footers are read).  No Spark."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, strategies as st

from streamjoin.pipelines.engines.spark.sizing import (HEAP_MIN_GB, TUPLES_PER_TASK, WARN_FACTOR, driver_memory,
                                                       footer_rows, local_heap, native_partitions)


def reference_partitions(rows: int, cores: int) -> int:
    """The rule spelled out: the smallest multiple of cores whose tasks hold <= the bound."""
    P = cores
    while rows / P > TUPLES_PER_TASK:
        P += cores
    return P


def test_partitions_from_the_measured_sizes():
    # local[2]: 3M keeps the old default 2, 12M 8, 48M 32 (the run that finished at 48M)
    assert native_partitions(3_000_000, 2)[0] == 2
    assert native_partitions(12_000_000, 2)[0] == 8
    assert native_partitions(48_000_000, 2)[0] == 32
    assert native_partitions(0, 2)[0] == 2
    assert native_partitions(10, 8)[0] == 8       # never fewer than the master's cores
    P, kind, line = native_partitions(12_000_000, 2)
    assert kind == "note" and "8" in line and "12,000,000" in line


@given(rows=st.integers(0, 10**10), cores=st.integers(1, 256))
def test_chosen_partitions_bound_every_task(rows, cores):
    P, _, _ = native_partitions(rows, cores)
    assert P == reference_partitions(rows, cores)
    assert P % cores == 0 and math.ceil(rows / P) <= TUPLES_PER_TASK


def test_given_partitions_are_honoured_and_warned_about_when_far_beyond_the_bound():
    assert native_partitions(48_000_000, 2, given=32) == (32, "note", None)
    assert native_partitions(48_000_000, 2, given=9)[2] is None            # 5.3M per task: within 4x
    P, kind, line = native_partitions(48_000_000, 2, given=2)
    assert (P, kind) == (2, "warning")
    assert line.startswith("--partitions / [run] partitions 2 ") and "24,000,000" in line and "32" in line \
        and "\n" not in line   # a TOML's [run] partitions is named too: the user may not have typed the flag
    edge = WARN_FACTOR * TUPLES_PER_TASK
    assert native_partitions(edge, 2, given=1)[2] is None
    assert native_partitions(edge + 1, 2, given=1)[2] is not None


def test_driver_memory_between_the_minimum_and_half_the_machine():
    gb = 2**30
    assert driver_memory(3_000_000, 23 * gb) == "4g"      # 1.5 x (2.2 GB + 80 B x 3M) = 3.7 GB
    assert driver_memory(12_000_000, 23 * gb) == "5g"
    assert driver_memory(48_000_000, 23 * gb) == "9g"     # 48M used 5.85 GB at its peak of a 10g heap
    assert driver_memory(200_000_000, 23 * gb) == "11g"   # half of 23 GB
    assert driver_memory(None, 23 * gb) == f"{HEAP_MIN_GB}g"
    assert driver_memory(10**9, 4 * gb) == f"{HEAP_MIN_GB}g"   # a small machine: never below the old 4g


def test_heap_sized_only_where_the_tasks_share_it():
    big = 48_000_000
    assert local_heap("local[2]", big) == driver_memory(big)
    assert local_heap("local", big) == driver_memory(big)
    assert local_heap("local-cluster[2,1,1024]", big) == f"{HEAP_MIN_GB}g"
    assert local_heap("spark://h:7077", big) == f"{HEAP_MIN_GB}g"


def test_footer_rows_sums_files_globs_and_directories(tmp_path):
    def write(path, n):
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"ts": np.arange(n)}), path, row_group_size=7)

    write(tmp_path / "a.parquet", 30)
    write(tmp_path / "d" / "day=1" / "x.parquet", 11)
    write(tmp_path / "d" / "day=2" / "y.parquet", 5)
    assert footer_rows([(str(tmp_path / "a.parquet"), "a"), (str(tmp_path / "d"), "b")]) == 46
    assert footer_rows([(str(tmp_path / "d" / "*" / "*.parquet"), "b")]) == 16
    assert footer_rows([(str(tmp_path / "missing.parquet"), "a")]) is None
    assert footer_rows([("s3a://bucket/x.parquet", "a")]) is None
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    assert footer_rows([(str(tmp_path / "bad.parquet"), "a")]) is None


def test_the_heap_fits_a_containers_memory_limit(tmp_path, monkeypatch):
    """A driver in a container (cgroup limit 8 GB) on a large machine: half the limit caps
    the heap, not half the machine (24M rows want 6g; an 8 GB pod keeps the minimum 4g);
    an unlimited cgroup ("max", v2) or none leaves the machine's memory."""
    from streamjoin.pipelines.engines.spark import sizing

    gb = 2**30
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    monkeypatch.setattr(sizing, "CGROUP_LIMITS", (str(v2), str(v1)), raising=False)
    monkeypatch.setattr(sizing.os, "sysconf", lambda name: {"SC_PAGE_SIZE": 4096,
                                                             "SC_PHYS_PAGES": 64 * gb // 4096}[name])
    assert sizing.physical_memory() == 64 * gb and driver_memory(24_000_000) == "6g"   # no cgroup files
    v2.write_text(f"{8 * gb}\n")
    assert sizing.physical_memory() == 8 * gb and driver_memory(24_000_000) == f"{HEAP_MIN_GB}g"
    v2.write_text("max\n")
    assert sizing.physical_memory() == 64 * gb
    v2.unlink()
    v1.write_text(f"{10 * gb}\n")   # cgroup v1
    assert sizing.physical_memory() == 10 * gb and driver_memory(24_000_000) == "5g"
    v1.write_text("9223372036854771712\n")   # v1's "unlimited"
    assert sizing.physical_memory() == 64 * gb


class _Builder:
    """SparkSession.builder's chain, recording the confs (no JVM)."""

    def __init__(self):
        self.conf = {}

    def appName(self, _):
        return self

    def master(self, _):
        return self

    def config(self, k, v):
        self.conf[k] = v
        return self

    def getOrCreate(self):
        from types import SimpleNamespace
        return SimpleNamespace(sparkContext=SimpleNamespace(setLogLevel=lambda _: None), stop=lambda: None)


@pytest.mark.parametrize("heap_set", [None, "conf", "active", "spark-submit"])
def test_footers_read_only_when_the_heap_is_sized_from_them(tmp_path, monkeypatch, heap_set):
    """engine.open_session: the inputs' footers (their rows) are read only inside
    spark_session when it sizes a local master's heap; with the heap already set
    (--spark-conf spark.driver.memory, a running session, spark-submit) none is read."""
    from contextlib import contextmanager, nullcontext
    from types import SimpleNamespace

    from pyspark.sql import SparkSession

    from streamjoin.pipelines.engines.spark import session
    from streamjoin.pipelines.engines.spark.engine import open_session

    pq.write_table(pa.table({"ts": np.arange(7, dtype=np.int64)}), tmp_path / "a.parquet")
    opened = []
    real = pq.ParquetFile
    monkeypatch.setattr(pq, "ParquetFile", lambda *a, **k: opened.append(a[0]) or real(*a, **k))
    builder = _Builder()
    monkeypatch.setattr(SparkSession, "builder", builder)
    active = SimpleNamespace() if heap_set == "active" else None
    monkeypatch.setattr(SparkSession, "getActiveSession", staticmethod(lambda: active))
    monkeypatch.setattr(session, "ship", lambda *a: None)
    monkeypatch.setattr(session, "spark_log", contextmanager(lambda: (yield tmp_path / "log")))
    monkeypatch.setattr(session, "output_to", lambda _: nullcontext())
    if heap_set == "spark-submit":
        monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")
    else:
        monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    conf = [("spark.driver.memory", "3g")] if heap_set == "conf" else []
    cfg = SimpleNamespace(master="local[2]", partitions=2, spark_conf=conf,
                          streams=[SimpleNamespace(path=str(tmp_path / "a.parquet"), name="a")])
    stack, spark, _ = open_session(cfg)
    stack.close()
    if heap_set is None:
        assert len(opened) == 1 and builder.conf["spark.driver.memory"] == driver_memory(7)
    else:
        assert opened == []
        assert builder.conf.get("spark.driver.memory") == ("3g" if heap_set == "conf" else None)


def test_a_uri_outputs_session_sizes_the_heap_from_the_input(tmp_path, monkeypatch):
    """run --out URI opens the run's session in hadoop_out.open_uri_output, before the
    join's open_session (which then reuses it): on a local master that session's heap
    is the one sized from the inputs' footers, not the 4g of an unknown input."""
    from contextlib import ExitStack, contextmanager, nullcontext
    from types import SimpleNamespace

    from pyspark.sql import SparkSession

    from streamjoin.pipelines.engines.spark import hadoop_out, session

    # 10M rows in the footer (all null: a small, quick file), above the minimum heap's rows
    pq.write_table(pa.table({"ts": pa.nulls(10_000_000, pa.int64())}), tmp_path / "a.parquet")
    builder = _Builder()
    monkeypatch.setattr(SparkSession, "builder", builder)
    monkeypatch.setattr(SparkSession, "getActiveSession", staticmethod(lambda: None))
    monkeypatch.setattr(session, "ship", lambda *a: None)
    monkeypatch.setattr(session, "spark_log", contextmanager(lambda: (yield tmp_path / "log")))
    monkeypatch.setattr(session, "output_to", lambda _: nullcontext())
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setattr(hadoop_out, "HadoopOutput", lambda spark, out: nullcontext(tmp_path / "staging"))
    cfg = SimpleNamespace(master="local[2]", partitions=2, spark_conf=(), out="file:///nowhere/out",
                          streams=[SimpleNamespace(path=str(tmp_path / "a.parquet"), name="a")])
    with ExitStack() as publish:
        hadoop_out.open_uri_output(publish, cfg, executors=False, native=False)
    assert driver_memory(10_000_000) != driver_memory(None)
    assert builder.conf["spark.driver.memory"] == driver_memory(10_000_000)
