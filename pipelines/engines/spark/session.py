"""The run's SparkSession (:func:`spark_session`), the warm-up job that starts
the Python workers and imports the kernels in them (:func:`warm_up`), and
numpy <-> Arrow helpers for DataFrames.

On a master whose executors are on other hosts the session ships the
package to them (:mod:`.ship`, ``spark.streamjoin.ship``); ``PYSPARK_PYTHON``
is set to this interpreter only for ``local*`` masters (the executors there
run on this host), a cluster's executors run the Python the cluster names.

Spark's own output never reaches the user's terminal or cron mail
(:func:`spark_log`): the JVM that PySpark starts inherits the process's
stdout and stderr, so while the session starts both point at a log file, and
the JVM -- and every Python worker it forks -- keeps writing there (log4j's
start-up banner, "hostname resolves to a loopback address", the native-hadoop
warning, shutdown noise after Ctrl-C).  py4j's and PySpark's Python-side
logging (tracebacks logged when Ctrl-C interrupts a call into the JVM) goes to
the same file while the session is open.  The file is
``$STREAMJOIN_SPARK_LOG`` when set (appended to, kept); otherwise a
temporary file that is removed when the session ends cleanly and kept, with
its path added to the exception as a note, when it does not.  PySpark starts
the JVM ignoring SIGINT (``java_gateway.launch_gateway``), so Ctrl-C reaches
only this process: PySpark's handler cancels the running jobs and raises
``KeyboardInterrupt``, which the command turns into one line.
"""

from __future__ import annotations

import logging
import os
import importlib
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ...base.jit import KERNELS_ENV, executor_mode
from ...config.options import same_host
from . import kernels  # noqa: F401 -- imported with this module in a worker: warm_up loads the kernels there
from .ship import executor_imports, ship
from .sizing import LOCAL_MASTER, is_local, local_heap


#: where Spark's own output goes (a path; appended to and kept); unset: a temporary file
SPARK_LOG_ENV = "STREAMJOIN_SPARK_LOG"


@contextmanager
def spark_log() -> Iterator[Path]:
    """The file that takes Spark's output for one session (see the module docstring):
    ``$STREAMJOIN_SPARK_LOG``, or a temporary file removed on a clean exit and kept,
    named in a note on the exception, otherwise.  Python-side logging (py4j,
    PySpark) goes there too while the block runs."""
    given = os.environ.get(SPARK_LOG_ENV)
    if given:
        path = Path(given)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    else:
        fd, name = tempfile.mkstemp(prefix="streamjoin-spark-", suffix=".log")
        os.close(fd)
        path = Path(name)
    root = logging.getLogger()
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)  # also keeps logging.error() from configuring a stderr handler
    try:
        yield path
    except BaseException as exc:
        exc.add_note(f"Spark's log: {path}")
        raise
    else:
        if not given:
            path.unlink(missing_ok=True)
    finally:
        root.removeHandler(handler)
        handler.close()


@contextmanager
def output_to(path: Path) -> Iterator[None]:
    """Point this process's stdout and stderr (file descriptors 1 and 2) at
    ``path`` for the block: a child started inside it (the JVM) keeps them."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


@contextmanager
def spark_session(master: str = "local[*]", partitions: int = 4, conf: Sequence[tuple[str, str]] = (),
                  input_rows: int | Callable[[], int | None] | None = None):
    """One quiet SparkSession per run; an already active session is reused (and
    left running).  Spark's own output goes to :func:`spark_log`'s file.
    ``input_rows`` (the inputs' rows from their footers, None: unknown; or a callable
    giving them, called only when the heap is sized here) sizes the driver heap on a
    ``local`` master (:func:`.sizing.local_heap`)."""
    if same_host(master):
        # executors on this host run this interpreter (its packages); on a cluster the
        # executors' Python is the cluster's to choose (PYSPARK_PYTHON, spark.pyspark.python)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if "local-cluster" in master and "SPARK_HOME" not in os.environ:
        import pyspark

        os.environ["SPARK_HOME"] = os.path.dirname(pyspark.__file__)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        ship(active, master, conf)
        yield active
        return
    b = (SparkSession.builder.appName("streamjoin").master(master)
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
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
         # the tasks load the compiled kernels the driver built (engine.py) and never
         # build one themselves: several at once, inside a task (base/jit.py)
         .config(f"spark.executorEnv.{KERNELS_ENV}", executor_mode())
         # a task's result up to this size travels with its status update instead of a
         # round trip through the block manager (below spark.rpc.message.maxSize, 128 MB)
         .config("spark.task.maxDirectResultSize", str(120 * 1024 * 1024))
         .config("spark.sql.shuffle.partitions", str(max(1, partitions)))
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100000")   # 10,000: per-batch Python overhead (docs/performance.md, issue 19 fourth pass)
         .config("spark.log.level", "ERROR"))
    if "PYSPARK_GATEWAY_PORT" not in os.environ and "spark.driver.memory" not in dict(conf):
        # a local master runs every task in the driver's JVM: Spark's default 1g heap
        # cannot hold a few million tuples in flight; sized from the input there
        # (sizing.local_heap; --spark-conf wins).  Only when this process starts the JVM:
        # under spark-submit (its gateway port set) --driver-memory fixed the heap, and
        # setting the conf would only make it (and report.json) name another size
        rows = input_rows if not callable(input_rows) else input_rows() if is_local(master) else None
        b = b.config("spark.driver.memory", local_heap(master, rows))
    for k, v in conf:
        b = b.config(k, v)
    with spark_log() as log:
        with output_to(log):  # the JVM starts here, and keeps the log as its stdout and stderr
            spark = b.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        try:
            ship(spark, master, conf)   # the package to the executors (spark.streamjoin.ship)
            yield spark
        finally:
            spark.stop()


def _import_kernels(records, modules=()):
    """Runs in a Python worker, where unpickling this function has imported its
    module (numpy, polars, the kernels); ``modules``: what the job's tasks will
    unpickle besides (imported here, not in the job)."""
    for name in modules:
        importlib.import_module(name)
    yield sum(1 for _ in records)


def warm_up(spark, modules: Sequence[str] = ()) -> None:
    """One trivial task per executor core: starts the Python workers (reused by
    the job's tasks) and imports this module and ``modules`` in them.  On a
    ``local``/``local[n]`` master the tasks, one per slot (:func:`local_slots`), run as one barrier stage, so they run
    at once and each core's worker is started and warmed (one after the other,
    they could all land on the first worker, and the job's tasks would then
    import everything in the job).  A worker that cannot
    import streamjoin fails here, in one line (:func:`.ship.executor_imports`)."""
    sc = spark.sparkContext
    slots = local_slots(sc.master, lambda: sc._jvm.java.lang.Runtime.getRuntime().availableProcessors(),
                        int(sc.getConf().get("spark.task.cpus", "1")))
    # a barrier stage needs a slot per task at once, else Spark fails it (SPARK-24819, after
    # spark.scheduler.barrier.maxConcurrentTasksCheck.* retries: 40 x 15 s): on a local master
    # one task per slot, not spark.default.parallelism's count (--spark-conf may set it above)
    tasks = slots if slots is not None else max(1, int(sc.defaultParallelism))
    with executor_imports(spark):
        rdd = sc.parallelize(range(tasks), tasks)
        if slots is not None:   # every slot is there from the start
            rdd = rdd.barrier()
        rdd.mapPartitions(lambda records: _import_kernels(records, tuple(modules))).collect()


def local_slots(master: str, cpus: Callable[[], int], task_cpus: int = 1) -> int | None:
    """Tasks a ``local`` / ``local[n]`` / ``local[*]`` / ``local[n, f]`` master runs at once:
    its cores (``*``: ``cpus()``, the JVM's available processors, as Spark's
    ``SparkContext.localCpuCount``) divided by ``spark.task.cpus``, at least 1; None for any
    other master (its slots come and go: a barrier stage there could wait for executors)."""
    m = LOCAL_MASTER.fullmatch(master)
    if m is None:
        return None
    cores = 1 if m.group(1) is None else cpus() if m.group(1) == "*" else int(m.group(1))
    return max(1, cores // max(1, task_cpus))


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
