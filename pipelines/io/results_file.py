"""results.parquet: result frames written as Parquet row groups, one per frame -- the
writer of every ``run`` whose results reach the driver (in memory, either engine,
:mod:`~streamjoin.pipelines.jobs.run`; in chunks, :mod:`~streamjoin.pipelines.jobs.chunked`).
With ``spark.streamjoin.results=executors`` the results never reach the driver:
each Spark task writes its own part file (:mod:`~streamjoin.pipelines.engines.spark.sink`).

:class:`ResultsFile` takes the frames one at a time and encodes and compresses
them on :data:`ENCODERS` threads (one by default) while the caller builds the
next one (numpy's and polars' gathers and Arrow's Parquet writer release the
GIL): each frame is encoded by its own Arrow writer into memory, and the parts
are appended to the file in order, their row groups' positions in one footer
(:mod:`~streamjoin.pipelines.io.parquet_footer`) -- the same bytes as one Arrow
writer given the frames in order, whatever the number of encoding threads
(Arrow's Parquet writer encodes the columns of a row group one after the other,
on one thread; frames on separate threads are what can use more cores).  At
most :data:`ENCODERS` frames are in flight, so a run's results are never all in
memory as one frame and building overlaps writing.
:func:`write_row_groups` feeds it from an iterator.

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

from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from . import parquet_footer
from .output import RESULTS_COMPRESSION

#: rows per row group at most (Arrow's default; ~100 MB of two streams' columns,
#: near Spark's 128 MB block): a larger frame is split
ROW_GROUP_ROWS = 1 << 20

#: frames encoded at once, each on its own thread.  1: on the shared 2-vCPU host of
#: docs/performance.md ("eighth pass: with results") two encoders cost 3-8 % more CPU
#: for no measurable wall gain; whether 2 pays on idle cores is not measured yet
#: (``benchmarks/bench_writer.py --parts`` times both).  Any value writes the same bytes.
ENCODERS = 1


class ResultsFile:
    """Appends result frames to the Parquet file ``path``, one row group each (split at
    :data:`ROW_GROUP_ROWS`), in order, encoded on :data:`ENCODERS` threads (module doc).
    ``prepare``: what an encoding thread does to each frame first (the chunked run: put it
    in results order)."""

    def __init__(self, path: Path, prepare: Callable[[pl.DataFrame], pl.DataFrame] | None = None):
        self.path = path
        self.prepare = prepare
        self.rows = 0
        self.encoders = ENCODERS
        self.pool = ThreadPoolExecutor(max_workers=self.encoders)
        self.in_flight: deque[Future] = deque()
        self.schema: Future = Future()   # the first frame's Arrow schema: every frame is cast to it
        self.submitted = 0
        self.file = None
        self.first: list | None = None   # the first part's footer (schema, key-value metadata)
        self.groups: list = []           # every row group so far, positions in this file
        self.at = 0                      # bytes written
        self.buffers: list[pa.Buffer | None] = [None] * self.encoders

    def write(self, frame: pl.DataFrame) -> None:
        """Hand ``frame`` over (once fewer than :data:`ENCODERS` frames are in flight) and return."""
        while len(self.in_flight) >= self.encoders:
            self._append(self.in_flight.popleft().result())  # a failure in an encoder surfaces here
        self.in_flight.append(self.pool.submit(self._encode, frame, self.prepare, self.submitted == 0,
                                                 self.submitted % self.encoders))
        self.submitted += 1

    def _encode(self, frame: pl.DataFrame, prepare, first: bool, slot: int) -> tuple[memoryview, list]:
        """One frame as a whole Parquet file in memory, split into (row groups' bytes, footer)."""
        try:
            table = (prepare(frame) if prepare is not None else frame).to_arrow()
        except BaseException as e:
            if first:   # the frames after it wait for its schema: fail them too
                self.schema.set_exception(e)
            raise
        if first:
            self.schema.set_result(table.schema)
        schema = self.schema.result()
        if table.schema != schema:
            table = table.cast(schema)
        # into this job's buffer, reused every ENCODERS jobs (when its bytes are in the file:
        # a job is submitted only after the one ENCODERS before it was appended); sized for
        # the table, so it never grows (and its pages are faulted in once, not per part)
        need = _bound(table)
        if self.buffers[slot] is None or self.buffers[slot].size < need:
            self.buffers[slot] = pa.allocate_buffer(need, resizable=False)
        sink = pa.FixedSizeBufferWriter(self.buffers[slot])
        try:
            _encode_into(sink, table, schema)
        except OSError:   # out of bounds (not seen; the bound is a guess): a buffer that grows
            grown = pa.BufferOutputStream()
            _encode_into(grown, table, schema)
            return parquet_footer.split(grown.getvalue())
        return parquet_footer.split(memoryview(self.buffers[slot])[:sink.tell()])

    def _append(self, part: tuple[memoryview, list]) -> None:
        body, meta = part
        if self.file is None:
            self.file = open(self.path, "wb")
            self.file.write(parquet_footer.MAGIC)
            self.at, self.first = len(parquet_footer.MAGIC), meta
        for group in parquet_footer.row_groups(meta):   # the part's bytes start at 4 in its own file
            self.groups.append(parquet_footer.moved(group, self.at - len(parquet_footer.MAGIC), len(self.groups)))
        self.file.write(body)
        self.at += len(body)
        self.rows += parquet_footer.num_rows(meta)

    def close(self, empty: pl.DataFrame | None = None) -> int:
        """Finish the file and return the rows written; if no frame came, write ``empty`` (a
        frame with the results schema, as it is) or, without one, refuse (ValueError)."""
        while self.in_flight:
            self._append(self.in_flight.popleft().result())
        if self.file is None:
            if empty is None:
                self.pool.shutdown()
                raise ValueError("ResultsFile.close: no frame to write (not even an empty one with the schema)")
            self._append(self._encode(empty, None, True, 0))
        self.file.write(parquet_footer.footer_of(self.first, self.groups, self.rows))
        self.file.close()
        self.pool.shutdown()
        return self.rows

    def abort(self) -> None:
        """Stop after a failure or Ctrl-C (the staging directory is removed by the caller)."""
        for job in self.in_flight:
            job.cancel()
        self.pool.shutdown(wait=True)   # the encoders finish what they started (the run is failing already)
        self.in_flight.clear()
        if self.file is not None:
            self.file.close()


def _bound(table: pa.Table) -> int:
    """A frame's encoded size at most, as far as known: snappy's worst case is ~1.17x the
    data, page headers, levels and statistics far less than the rest."""
    return 2 * table.nbytes + (1 << 20)


def _encode_into(sink, table: pa.Table, schema: pa.Schema) -> None:
    with pq.ParquetWriter(sink, schema, compression=RESULTS_COMPRESSION, use_dictionary=False,
                          write_statistics=True) as writer:
        writer.write_table(table, row_group_size=ROW_GROUP_ROWS)


def write_row_groups(path: Path, frames: Iterable[pl.DataFrame]) -> int:
    """Write ``frames`` (at least one, all of one schema) to ``path`` with a
    :class:`ResultsFile`, building the next frame while the current one is written;
    returns the number of rows written."""
    out = ResultsFile(path)
    try:
        for frame in frames:
            out.write(frame)
        return out.close()
    except BaseException:
        out.abort()
        raise
