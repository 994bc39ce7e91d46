"""Defaults from the input's size for ``--engine spark`` (issue 19): the native
path's number of partitions (:func:`native_partitions`) and a local master's
driver heap (:func:`driver_memory`).

Each range partition of the native progress scans and each ATR / CTR join
group is one Python task holding its tuples, so a task's memory is O(N / P);
the master's default parallelism (2 on ``local[2]``) gave a 48M-tuple run
24M tuples per task and a Python worker the kernel killed at 6.5 GB.  With
1.5M tuples per task the largest worker was 1.09 GB at 3M and 1.13 GB at 48M
(docs/performance.md, "3M, 12M and 48M again"): :data:`TUPLES_PER_TASK`.

On a ``local`` master every task's JVM side runs in the driver's JVM, whose
heap Spark fixes when the JVM starts: peak heap in use 2.42 GB at 3M and
5.85 GB at 48M (32 partitions), about 2.2 GB + 76 B per input tuple; 4 GB
failed at 48M, 10 GB finished.  :func:`driver_memory` gives 1.5x that line,
between 4 GB and half the machine's (or its cgroup's) memory, from the input's row count in
the Parquet footers (:func:`footer_rows`, read on the driver before the JVM
starts).  Pure functions, no Spark.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable

#: tuples one Python task holds at most when the partitions are the engine's choice
TUPLES_PER_TASK = 1_500_000
#: an explicit ``--partitions`` giving tasks more than this many times the bound is warned about
WARN_FACTOR = 4
#: the driver heap on a local master: HEAP_SLACK x (HEAP_BASE + HEAP_PER_TUPLE x rows), in [HEAP_MIN, memory / 2]
HEAP_BASE = 2.2 * 2**30
HEAP_PER_TUPLE = 80
HEAP_SLACK = 1.5
HEAP_MIN_GB = 4


def native_partitions(rows: int, parallelism: int, given: int | None = None) -> tuple[int, str, str | None]:
    """The native path's one number of partitions ``P`` (the progress scans' range
    partitions, the controller's, the ATR / CTR plan's and ``spark.sql.shuffle.partitions``)
    with the kind (``note`` / ``warning``) and text of the line to print about it (None:
    nothing to say).  ``given`` (``--partitions`` / ``run.partitions``) is
    honoured, with a warning when its tasks hold more than :data:`WARN_FACTOR` x
    :data:`TUPLES_PER_TASK` tuples; else the smallest multiple of ``parallelism`` (the
    master's default parallelism, every core busy in each wave) whose tasks hold at
    most :data:`TUPLES_PER_TASK` tuples, and at least ``parallelism``."""
    rows, cores = max(int(rows), 0), max(int(parallelism), 1)
    need = max(1, math.ceil(rows / TUPLES_PER_TASK))
    if given is not None:
        P = max(int(given), 1)
        per = math.ceil(rows / P)
        if per > WARN_FACTOR * TUPLES_PER_TASK:
            # given by the flag or the TOML's [run] key (this does not know which): name both
            return P, "warning", (f"--partitions / [run] partitions {P} gives Spark tasks of about {per:,} "
                       f"tuples each (a Python worker held 1.1 GB at {TUPLES_PER_TASK:,} tuples); leave it "
                       f"unset or give at least {need} (the engine's choice: {_rounded(need, cores)})")
        return P, "note", None
    P = _rounded(need, cores)
    return P, "note", (f"Spark partitions: {P} (from {rows:,} input tuples, at most {TUPLES_PER_TASK:,} "
               f"per task, a multiple of the master's {cores} cores; --partitions to choose)")


def _rounded(need: int, cores: int) -> int:
    return cores * max(1, math.ceil(need / cores))


def driver_memory(rows: int | None, physical: int | None = None) -> str:
    """``spark.driver.memory`` for a ``local`` master whose JVM this process starts:
    :data:`HEAP_SLACK` x (:data:`HEAP_BASE` + :data:`HEAP_PER_TUPLE` x ``rows``) in
    whole GB, at least :data:`HEAP_MIN_GB` and at most half of ``physical`` bytes
    (this machine's memory by default).  ``rows`` None (unknown): the minimum."""
    if physical is None:
        physical = physical_memory()
    cap = max(HEAP_MIN_GB, int(physical // 2 // 2**30)) if physical else HEAP_MIN_GB
    want = HEAP_MIN_GB if rows is None else math.ceil(HEAP_SLACK * (HEAP_BASE + HEAP_PER_TUPLE * rows) / 2**30)
    return f"{min(max(want, HEAP_MIN_GB), cap)}g"


def local_heap(master: str, rows: int | None) -> str:
    """The session's ``spark.driver.memory`` (a user's ``--spark-conf`` replaces it):
    :func:`driver_memory` on a ``local`` master, whose tasks share the driver's heap;
    :data:`HEAP_MIN_GB` elsewhere (``local-cluster`` and cluster masters run the tasks
    in executor JVMs, sized by the master or ``spark.executor.memory``)."""
    if is_local(master):
        return driver_memory(rows)
    return f"{HEAP_MIN_GB}g"


#: a ``local`` / ``local[n]`` / ``local[*]`` / ``local[n, f]`` master; group 1: its cores
LOCAL_MASTER = re.compile(r"local(?:\[\s*([0-9]+|\*)\s*(?:,\s*[0-9]+\s*)?\])?")


def is_local(master: str) -> bool:
    """A ``local`` / ``local[n]`` / ``local[n, f]`` master (:data:`LOCAL_MASTER`, the one
    parser, which ``session.local_slots`` reads too): the tasks run in the driver's JVM."""
    return LOCAL_MASTER.fullmatch(master) is not None


#: a container's memory limit (cgroup v2, then v1): "max" or a huge number when unlimited
CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def physical_memory() -> int | None:
    """The memory this process may use in bytes: the machine's (``sysconf``), or its
    container's cgroup limit where that is smaller (a driver pod on a large node: the
    JVM heap must fit the pod, not the node); None where ``sysconf`` cannot tell."""
    try:
        total = int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        total = None
    for path in CGROUP_LIMITS:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            limit = int(text)
            total = limit if total is None else min(total, limit)
        break
    return total


def footer_rows(paths: Iterable[tuple[str, str]]) -> int | None:
    """The rows of the local Parquet inputs (``(path, stream name)`` pairs: a file,
    glob or directory, ``io.load.resolve_files``), summed from their footers; None
    when any is not a local path or cannot be read (the read itself says why)."""
    import pyarrow.parquet as pq

    from ...io.load import resolve_files

    total = 0
    try:
        for path, name in paths:
            if "://" in str(path):
                return None
            for f in resolve_files(str(path), name):
                total += pq.ParquetFile(f).metadata.num_rows
    except Exception:   # noqa: BLE001 -- a bad input is the read's to report, in one line
        return None
    return total


def input_rows_of(streams) -> Callable[[], int | None]:
    """The run's ``input_rows`` for ``session.spark_session``: :func:`footer_rows` of its
    streams (``StreamConfig``), read only when called (when the session sizes a local
    master's heap).  Every session a run opens first (``engine.open_session``,
    ``hadoop_out.open_uri_output``: the join reuses it) takes it."""
    return lambda: footer_rows((s.path, s.name) for s in streams)
