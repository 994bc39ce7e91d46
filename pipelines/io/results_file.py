"""results.parquet: result frames written as Parquet row groups, one per frame -- the
writer of every ``run`` whose results reach the driver (in memory, either engine,
:mod:`~streamjoin.pipelines.jobs.run`; in chunks, :mod:`~streamjoin.pipelines.jobs.chunked`).
With ``spark.streamjoin.results=executors`` the results never reach the driver:
each Spark task writes its own part file (:mod:`~streamjoin.pipelines.engines.spark.sink`).

:class:`ResultsFile` takes the frames one at a time and encodes and compresses
each on a second thread while the caller builds the next one (numpy's and
polars' gathers and Arrow's Parquet writer release the GIL); at most one frame
is in flight, so a run's results are never all in memory as one frame and
building overlaps writing.  :func:`write_row_groups` feeds it from an iterator;
:class:`BackgroundWrite` runs that on a thread of its own, so an in-memory ``run``
writes its results while its metrics and report are computed (the frames only
read the replay's arrays), and stops it -- after the row group in hand, before the
caller removes the staging directory -- when the run fails or is interrupted.

The file (docs/performance.md, "Results writer (issue 21)"): snappy
(:data:`~streamjoin.pipelines.io.output.RESULTS_COMPRESSION`), no dictionary
encoding (result columns are row numbers and times with few repeats: it
costs write time and makes the file larger), min/max statistics kept (the
file is in emission order, so readers that prune row groups -- Spark,
DuckDB, polars -- skip by ``emit_us``), row groups of at most
:data:`ROW_GROUP_ROWS` rows, each frame cast to the first frame's Arrow schema,
which the footer keeps (``ARROW:schema``, pyarrow's default).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from .output import RESULTS_COMPRESSION, act_on_held, fault_point, interrupts_held

#: rows per row group at most (Arrow's default; ~100 MB of two streams' columns,
#: near Spark's 128 MB block): a larger frame is split
ROW_GROUP_ROWS = 1 << 20


class ResultsFile:
    """Appends result frames to the Parquet file ``path``, one row group each (split at
    :data:`ROW_GROUP_ROWS`), in order, on a second thread (module doc).  ``prepare``: what
    that thread does to each frame first (the chunked run: put it in results order)."""

    def __init__(self, path: Path, prepare: Callable[[pl.DataFrame], pl.DataFrame] | None = None):
        self.path = path
        self.prepare = prepare
        self.writer: pq.ParquetWriter | None = None
        self.rows = 0
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.in_flight = None

    def write(self, frame: pl.DataFrame) -> None:
        """Hand ``frame`` over (once the previous one is written) and return."""
        self._wait()
        self.in_flight = self.pool.submit(self._write, frame, self.prepare)

    def _wait(self) -> None:
        if self.in_flight is not None:
            done, self.in_flight = self.in_flight, None
            done.result()  # a failure in the writer thread surfaces here

    def _write(self, frame: pl.DataFrame, prepare) -> None:
        table = (prepare(frame) if prepare is not None else frame).to_arrow()
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, table.schema, compression=RESULTS_COMPRESSION,
                                           use_dictionary=False, write_statistics=True)
        elif table.schema != self.writer.schema:
            table = table.cast(self.writer.schema)
        self.writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        self.rows += table.num_rows

    def close(self, empty: pl.DataFrame | None = None) -> int:
        """Finish the file and return the rows written; if no frame came, write ``empty`` (a
        frame with the results schema, as it is) or, without one, refuse (ValueError)."""
        self._wait()
        if self.writer is None:
            if empty is None:
                raise ValueError("ResultsFile.close: no frame to write (not even an empty one with the schema)")
            self._write(empty, None)
        self.writer.close()
        self.pool.shutdown()
        return self.rows

    def abort(self) -> None:
        """Stop after a failure or Ctrl-C (the staging directory is removed by the caller)."""
        try:
            self._wait()
        except Exception:  # the run is failing already; its own error is the one to report
            pass
        self.pool.shutdown()
        if self.writer is not None:
            self.writer.close()


class Stopped(Exception):
    """:class:`BackgroundWrite` was stopped before the file was complete."""


def write_row_groups(path: Path, frames: Iterable[pl.DataFrame], stop: threading.Event | None = None) -> int:
    """Write ``frames`` (at least one, all of one schema) to ``path`` with a
    :class:`ResultsFile`, building the next frame while the current one is written;
    returns the number of rows written.  ``stop``: once set, no further frame is
    taken (:class:`Stopped` is raised, the file is left incomplete): it is checked before
    each frame is built and again before it is written."""
    out = ResultsFile(path)
    try:
        it = iter(frames)
        while True:
            if stop is not None and stop.is_set():   # before the next frame's gathers
                raise Stopped(f"{path.name}: stopped before it was complete")
            frame = next(it, None)
            if frame is None:
                break
            if stop is not None:
                if stop.is_set():
                    raise Stopped(f"{path.name}: stopped before it was complete")
                fault_point("results")   # test hook (io/output.py): a failure or pause in the writer's thread
            out.write(frame)
        return out.close()
    except BaseException:
        out.abort()
        raise


class BackgroundWrite:
    """:func:`write_row_groups` of ``path`` and ``frames()`` on a thread of its own, started
    at once (``frames`` is called on that thread: the frames' order is computed there too).

    :meth:`result` waits for the file and returns its rows (the writer's own failure is
    raised there).  As a context manager, an exception (an interrupt included) leaving
    the block stops the writer after the row group in hand and waits for it, so the
    directory it writes into can be removed next; the wait holds further interrupts
    (:func:`~streamjoin.pipelines.io.output.interrupts_held`) and acts on them after.
    ``seconds``: the writer's wall time, from the start to the file closed (None until then)."""

    def __init__(self, path: Path, frames: Callable[[], Iterable[pl.DataFrame]]):
        self.stop = threading.Event()
        self.seconds: float | None = None
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="results-writer")
        self.future = self.pool.submit(self._run, path, frames)

    def _run(self, path: Path, frames: Callable[[], Iterable[pl.DataFrame]]) -> int:
        t0 = time.perf_counter()
        rows = write_row_groups(path, frames(), stop=self.stop)
        self.seconds = time.perf_counter() - t0
        return rows

    def result(self) -> int:
        """Wait for the file; its rows."""
        rows = self.future.result()
        self.pool.shutdown()
        return rows

    def __enter__(self) -> BackgroundWrite:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.result()
            return False
        with interrupts_held() as pending:   # a second Ctrl-C must not leave it writing into a removed directory
            self.stop.set()
            try:
                self.future.exception()   # its own failure: the run is failing already with the caller's
            finally:
                self.pool.shutdown()
        act_on_held(pending)
        return False
