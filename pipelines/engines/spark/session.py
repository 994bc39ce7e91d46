"""The run's SparkSession (:func:`spark_session`), the warm-up job that starts
the Python workers and imports the kernels in them (:func:`warm_up`), and
numpy <-> Arrow helpers for DataFrames.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from contextlib import contextmanager

import numpy as np

from . import kernels  # noqa: F401 -- imported with this module in a worker: warm_up loads the kernels there


@contextmanager
def spark_session(master: str = "local[*]", partitions: int = 4, conf: Sequence[tuple[str, str]] = ()):
    """One quiet SparkSession per run; an already active session is reused (and left running)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if "local-cluster" in master and "SPARK_HOME" not in os.environ:
        import pyspark

        os.environ["SPARK_HOME"] = os.path.dirname(pyspark.__file__)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    b = (SparkSession.builder.appName("streamjoin").master(master)
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         # a local master runs every task in the driver's JVM: Spark's default 1g heap
         # cannot hold a few million tuples in flight (applies only when this starts the JVM)
         .config("spark.driver.memory", "4g")
         # the kernels allocate large fresh numpy temporaries in short-lived Python
         # workers; numpy asks for transparent huge pages for them, and with THP
         # "defrag=madvise" each fault may compact memory first -- on the benchmark
         # VM that tripled the kernel's time (docs/performance.md, issue 7)
         .config("spark.executorEnv.NUMPY_MADVISE_HUGEPAGE", "0")
         # one malloc arena in the workers from their first allocation (glibc reads
         # this at start-up): a thread's own arena serves large blocks with fresh
         # mmaps, see pipelines/base/allocator.py -- reuse_freed_memory() in a task comes
         # too late for arenas that imports in the worker already created
         .config("spark.executorEnv.MALLOC_ARENA_MAX", "1")
         # a task's result up to this size travels with its status update instead of a
         # round trip through the block manager (below spark.rpc.message.maxSize, 128 MB)
         .config("spark.task.maxDirectResultSize", str(120 * 1024 * 1024))
         .config("spark.sql.shuffle.partitions", str(max(1, partitions)))
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .config("spark.log.level", "ERROR"))
    for k, v in conf:
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


def _import_kernels(records):
    """Runs in a Python worker, where unpickling this function has imported its
    module (numpy, polars, the kernels)."""
    yield sum(1 for _ in records)


def warm_up(spark) -> None:
    """One trivial task per executor core: starts the Python workers (reused by
    the job's tasks) and imports this module in them."""
    sc = spark.sparkContext
    tasks = max(1, int(sc.defaultParallelism))
    sc.parallelize(range(tasks), tasks).mapPartitions(_import_kernels).collect()


def arrow_table(d: dict):
    import pyarrow as pa

    return pa.table({k: pa.array(v) for k, v in d.items()})


def numpy_columns(table) -> dict:
    return {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names}


def spark_schema(d: dict) -> str:
    def t(v):
        v = np.asarray(v)
        if v.dtype == bool:
            return "boolean"
        if v.dtype.kind == "f":
            return "double"
        if v.dtype == np.int32:
            return "int"
        return "bigint"
    return ", ".join(f"{k} {t(v)}" for k, v in d.items())
