"""Read and validate the input streams on Spark's executors (SPEC §1, §8).

:func:`read_streams` gives the same tuples as ``io.load.load_all`` -- same
``row`` numbers, times, keys (cast to the common dtype of io/keys.py),
payload and quarantine -- as one Spark DataFrame, while the driver holds only
O(files + splits) facts.  Stage by stage, what the driver reads or receives:

1. **Driver, before any job** (one-line :class:`InputError`, the local
   loader's text): the files (``load.resolve_files``: file, glob, directory
   with hive partitions; 0-byte files refused), every file's schema
   (``load.check_file_schemas``), the dataset's schema (``load.open_dataset``
   reads footers only), output column collisions (io/columns.py), missing
   configured columns, time column types and units, vector column types.
2. **Integer time columns, whole**: one aggregation job per such stream;
   the driver receives each column's min and max and refuses a ``uint64``
   beyond int64 and an implausible unit (``load.check_unit_range``) -- facts
   of the whole column, which no batch of it can check.
3. **The read** (executors): ``spark.read.parquet`` on the resolved files with
   an explicit schema -- every timestamp column read as its raw int64 count
   (Spark has no nanosecond type), hive partition columns as strings -- plus
   ``_metadata.file_path`` and ``_metadata.row_index``.  ``mapInArrow`` turns
   each batch back into the local loader's Arrow types and runs
   ``load.normalise`` on it (without the unit check: stage 2's): the same
   time conversions, range checks and null checks; should an executor still
   raise an :class:`InputError`, the driver re-raises its one line
   (:func:`executor_input_error`), not Spark's multi-line traceback.  Each row leaves with its reason (null: kept), its time in us, its
   file's index and its rank among the kept rows of its file in its task.
   The result is persisted on the executors.
4. **Facts** (executors -> driver, one aggregation per stream, the job
   that fills stage 3's cache): per (file, task, reason) -- reason null for
   the kept rows -- the least and greatest row index, the rows, the least and
   greatest ``ts`` and ``arrival`` and the sum of the batches'
   ``load.column_bits`` (each batch's on its first row: stage 3 counts them in
   the read's own pass, no second read of the input), and per key column its
   least and greatest value and its first inexact float (least (file, row
   index)).  The driver sums the groups per (file, task) (rows read and kept)
   and per reason (rows quarantined) and merges the kept groups' key facts.
   ``StreamFacts.row_bytes`` is ``load.row_bytes_of`` those bits and the
   rows read: the local loader's ``LoadedStream.row_bytes`` (the memory
   estimate's bytes per row), which ``column_bits`` makes independent of
   how a reader chunks the columns.
   The driver applies ``load.check_quarantine`` and ``keys.common_key_types``
   to them, and turns the per-(file, task) counts into each task's first
   ``row`` (a prefix count in sorted-file order; a file's chunks must be
   disjoint row ranges, else an internal error): ``row`` is the 0-based index
   among the rows kept, in sorted-file order, as in the local loader.
5. **Quarantine** (executors): each stream's quarantined rows, whole plus
   ``reason``, written by Spark's writer (its commit protocol) as
   ``<quarantine_dir>/<stream>.parquet/`` part files (a ``file://`` URI for
   a local path; ``_SUCCESS`` checked there, Hadoop's ``.crc`` files
   removed), only for a stream that has some.  ``streamjoin run``'s native
   path passes its staging directory's ``quarantine/``, so the quarantine
   is published atomically with the rest.
6. **The frame** (lazy): kept rows with ``stream`` (index in ``configs``),
   ``row``, ``ts``, ``arrival`` (int64 us), ``__key0..`` in the common key
   types, and every payload column as ``<stream>_<column>`` (the results'
   names, which io/columns.py keeps distinct; null on other streams' rows).
7. **Bad arrivals** (``qjoin`` / ``qkslack``, on request:
   :meth:`SparkInput.bad_arrivals`): the quarantined rows' arrival (or ``ts``)
   filtered by reason and converted to us on the executors; the driver
   receives one number per such row -- ``io.load.bad_arrivals_of``'s arrays.

Differences from the local loader, by design: a schema error in any stream
is reported before a quarantine share error in an earlier one (stage 1 runs
for every stream first); in the quarantine the ``ts`` and ``arrival``
columns hold their raw int64 count in the column's own unit (a quarantined
time may lie outside Spark's range), and so does a nanosecond timestamp
column anywhere (Spark has none); other ms / us timestamps are Spark
timestamps (``timestamp_ntz`` without a time zone); unsigned integers are
the next wider signed type (``uint64``: ``decimal(20,0)``), dictionary
columns their values.  :attr:`StreamFacts.arrow_types` keeps each column's
Arrow type.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from ...base.errors import InputError
from ...config.options import is_uri
from ...config.settings import MAX_QUARANTINE, StreamConfig
from ...io.columns import QUARANTINE_REASON, check_output_columns, payload_columns
from ...io.keys import SIGNIFICAND_BITS, KeyFacts, common_key_types
from ...io.load import (check_columns, check_file_schemas, check_quarantine, check_unit_range, check_vector_types,
                        column_bits, input_columns, int64_range_error, normalise, open_dataset, pl_to_numpy,
                        resolve_files, row_bytes_of, single_file, stream_where, time_unit, to_micros,
                        unreadable_error)
from .hadoop_out import check_written, file_uri
from .ship import executor_imports

#: the working columns of the read's intermediate frame (input columns may not start with ``__sj_``)
FILE, FILE_ROW, TASK, RANK, REASON, TS, ARRIVAL, BITS = (
    "__sj_file", "__sj_file_row", "__sj_task", "__sj_rank", "__sj_reason", "__sj_ts", "__sj_arrival", "__sj_bits")


@dataclass
class StreamFacts:
    """What the driver knows of one stream after :func:`read_streams` (no rows)."""

    config: StreamConfig
    files: list[Path]
    read: int                       # rows read, kept and quarantined
    rows: int                       # rows kept
    reasons: dict[str, int]         # quarantined rows per reason
    ts_range: tuple[int, int] | None       # least and greatest kept ts (us); None: no rows
    arrival_range: tuple[int, int] | None
    payload: dict[str, str]         # input column -> frame column (``<stream>_<column>``)
    arrow_types: dict[str, pa.DataType]    # every input column's Arrow type (as the local loader reads it)
    quarantine: Path | None = None  # the part-file directory, when rows were quarantined
    row_bytes: float = 0.0          # the local loader's Arrow bytes per row read (``LoadedStream.row_bytes``)

    @property
    def quarantined(self) -> int:
        return sum(self.reasons.values())

    @property
    def name(self) -> str:
        return self.config.name


@dataclass
class SparkInput:
    """The streams as one DataFrame on the executors plus small per-stream facts."""

    frame: object                   # pyspark DataFrame (see the module docstring, stage 6)
    streams: list[StreamFacts]
    key_dtypes: list[pl.DataType]
    _cached: list = field(default_factory=list, repr=False)
    _quarantined: list = field(default_factory=list, repr=False)   # per stream: (the read's frame, its _Plan)

    def arrival_span(self) -> tuple[int | None, int | None]:
        """First and last kept arrival over the streams (``jobs.run.arrival_span``'s)."""
        spans = [s.arrival_range for s in self.streams if s.arrival_range is not None]
        if not spans:
            return None, None
        return min(lo for lo, _ in spans), max(hi for _, hi in spans)

    def bad_arrivals(self, reason: str | None = None) -> list[np.ndarray]:
        """``io.load.bad_arrivals_of`` of the streams, from the executors' quarantined rows:
        per stream the sorted arrival times (us; ``ts`` without an arrival column) of its
        quarantined rows (only those quarantined for ``reason``, when given: the
        ``bad_rows_reason`` trigger), rows whose time is null or out of range left out.
        The executors filter the rows by reason and convert the column as ``bad_arrivals_of``
        does (``load.to_micros`` of its Arrow type and unit, no unit check: the read checked
        the whole column); the driver receives one (stream, time) pair per such row, O(quarantined
        rows), in one job (none when no stream quarantined a row for ``reason``)."""
        from pyspark.sql import functions as F

        out = [np.empty(0, np.int64) for _ in self.streams]
        parts = []
        for i, (fact, (inter, plan)) in enumerate(zip(self.streams, self._quarantined)):
            if not (fact.reasons.get(reason) if reason is not None else fact.reasons):
                continue
            bad = F.col(REASON) == reason if reason is not None else F.col(REASON).isNotNull()
            column = plan.cfg.arrival or plan.cfg.ts
            parts.append(inter.filter(bad).select(F.col(f"`{column}`"))
                         .mapInArrow(_bad_micros(i, plan, column), "stream int, t bigint"))
        if not parts:
            return out
        frame = parts[0]
        for part in parts[1:]:
            frame = frame.union(part)
        table = frame.toArrow()
        stream = np.asarray(table.column("stream").to_numpy(), np.int32)
        t = np.asarray(table.column("t").to_numpy(), np.int64)
        for i in np.unique(stream):
            out[int(i)] = np.sort(t[stream == i])
        return out

    def release(self) -> None:
        """Drop the executors' cached copy of the read (the frame is recomputed if used again)."""
        for df in self._cached:
            df.unpersist()
        self._cached.clear()


# ---------------------------------------------------------------------------
# Arrow <-> Spark types
# ---------------------------------------------------------------------------

_INTS = {8: "tinyint", 16: "smallint", 32: "int", 64: "bigint"}


def spark_read_type(t: pa.DataType, where: str, column: str) -> tuple[str, pa.DataType]:
    """The Spark type a column of Arrow type ``t`` is read as, and the Arrow type
    Spark hands it over in (``mapInArrow``); an unsupported type is bad input."""
    if pa.types.is_timestamp(t):
        return "bigint", pa.int64()   # the raw count in the column's unit
    if pa.types.is_signed_integer(t):
        return _INTS[t.bit_width], t
    if pa.types.is_unsigned_integer(t):
        if t.bit_width == 64:
            return "decimal(20,0)", pa.decimal128(20, 0)
        wider = {8: pa.int16(), 16: pa.int32(), 32: pa.int64()}[t.bit_width]
        return _INTS[wider.bit_width], wider
    if pa.types.is_dictionary(t):
        return spark_read_type(t.value_type, where, column)
    simple = {pa.float32(): "float", pa.float64(): "double", pa.bool_(): "boolean", pa.string(): "string",
              pa.large_string(): "string", pa.date32(): "date", pa.binary(): "binary", pa.large_binary(): "binary"}
    if t in simple:
        back = {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}.get(t, t)
        return simple[t], back
    if pa.types.is_decimal128(t):
        return f"decimal({t.precision},{t.scale})", t
    raise InputError(f"{where}: column {column!r} has type {t}, which the Spark reader does not support; "
                     f"use --engine local or store it as a number, string, boolean, date or timestamp")


def _spark_key_type(dtype: pl.DataType) -> str:
    """The Spark type of a key position's common polars dtype (io/keys.py)."""
    if dtype == pl.String or isinstance(dtype, pl.Categorical):
        return "string"
    names = {pl.Int8: "tinyint", pl.Int16: "smallint", pl.Int32: "int", pl.Int64: "bigint", pl.UInt8: "smallint",
             pl.UInt16: "int", pl.UInt32: "bigint", pl.UInt64: "decimal(20,0)", pl.Float32: "float",
             pl.Float64: "double", pl.Boolean: "boolean", pl.Date: "date"}
    for k, v in names.items():
        if dtype == k:
            return v
    raise InputError(f"key columns of type {dtype} are not supported by the Spark reader; use --engine local")


# ---------------------------------------------------------------------------
# stage 1: the driver's checks
# ---------------------------------------------------------------------------


@dataclass
class _Plan:
    """One stream's read, as planned on the driver."""

    cfg: StreamConfig
    files: list[Path]
    schema: pa.Schema            # the dataset's Arrow schema (hive partition columns last)
    partition_columns: list[str]
    base: str | None             # Spark's basePath for hive partitions
    units: dict[str, str]        # time column -> unit


def _plan(cfg: StreamConfig) -> _Plan:
    """``load.read_table``'s checks, on footers only."""
    files = resolve_files(cfg.path, cfg.name)
    one = single_file(cfg.path, files)
    if one is not None:
        try:
            schema = pq.ParquetFile(one).schema_arrow
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
            raise unreadable_error(cfg.path, cfg.name, exc) from None
        partition_columns: list[str] = []
        base = None
    else:
        dataset, files = open_dataset(cfg.path, cfg.name)
        check_file_schemas(cfg, files)
        schema = dataset.schema
        try:
            in_file = set(pq.read_schema(files[0]).names)
        except (pa.ArrowInvalid, OSError) as exc:
            raise unreadable_error(str(files[0]), cfg.name, exc) from None
        partition_columns = [c for c in schema.names if c not in in_file]
        base = cfg.path if Path(cfg.path).is_dir() else ("/" if partition_columns else None)
    where = stream_where(cfg)
    check_columns(schema.names, cfg)
    units = {}
    for c in [cfg.ts] + ([cfg.arrival] if cfg.arrival else []):
        units[c] = time_unit(schema.field(c).type, c, cfg.unit, where)
    check_vector_types(pl.from_arrow(schema.empty_table()).schema, cfg)
    for c in schema.names:
        spark_read_type(schema.field(c).type, where, c)
        if c.startswith("__sj_"):
            raise InputError(f"{where}: column {c!r}: names starting with '__sj_' are streamjoin's own on Spark; "
                             f"rename the column")
    return _Plan(cfg, files, schema, partition_columns, base, units)


def _spark_schema(plan: _Plan) -> str:
    parts = []
    for f in plan.schema:
        t = "string" if f.name in plan.partition_columns else spark_read_type(f.type, "", f.name)[0]
        parts.append(f"`{f.name}` {t}")
    return ", ".join(parts)


def _scan(spark, plan: _Plan):
    from pyspark.sql import functions as F

    reader = spark.read.schema(_spark_schema(plan))
    if plan.base is not None:
        reader = reader.option("basePath", file_uri(plan.base))
    # file:// URIs: a scheme-less path resolves against fs.defaultFS (hdfs:// on YARN)
    df = reader.parquet(*[file_uri(f) for f in plan.files])
    return df.select("*", F.col("_metadata.file_path").alias(FILE), F.col("_metadata.row_index").alias(FILE_ROW))


def _check_units(plan: _Plan, scan) -> None:
    """Stage 2: integer times within int64 (a ``uint64`` may not be) and
    plausible under the declared unit, from their min and max only: facts of
    the whole column, which the executors' batches cannot check."""
    from pyspark.sql import functions as F

    ints = [c for c in plan.units if not pa.types.is_timestamp(plan.schema.field(c).type)]
    if not ints:
        return
    row = scan.agg(*[F.min(c).alias(f"lo{i}") for i, c in enumerate(ints)],
                   *[F.max(c).alias(f"hi{i}") for i, c in enumerate(ints)]).first()
    for i, c in enumerate(ints):
        lo, hi = row[f"lo{i}"], row[f"hi{i}"]
        if hi is not None and int(hi) > np.iinfo(np.int64).max:
            raise int64_range_error(c, plan.schema.field(c).type, stream_where(plan.cfg))
        check_unit_range(None if lo is None else int(lo), None if hi is None else int(hi), c, plan.units[c],
                         stream_where(plan.cfg))


# ---------------------------------------------------------------------------
# stage 3: normalisation on the executors
# ---------------------------------------------------------------------------


def _local_path(uri: str) -> str:
    return unquote(urlparse(uri).path)


def _original(schema: pa.Schema, name: str, arr: pa.Array) -> pa.Array:
    """A column as Spark hands it over (:func:`spark_read_type`) back in its Arrow type."""
    t = schema.field(name).type
    if pa.types.is_timestamp(t):
        return arr.view(t)
    return arr if arr.type == t else arr.cast(t)


def _normaliser(plan: _Plan):
    """The ``mapInArrow`` function of one stream (see the module docstring, stage 3)."""
    cfg, schema, parts = plan.cfg, plan.schema, set(plan.partition_columns)
    file_index = {os.path.abspath(f): i for i, f in enumerate(plan.files)}
    out_types = {f.name: t for f, (_, t) in zip(schema, _out_types(plan))}
    convert = parts | {f.name for f in schema if out_types[f.name] != spark_read_type(f.type, "", f.name)[1]}

    def original(name: str, arr: pa.Array) -> pa.Array:
        return _original(schema, name, arr)

    def run(batches):
        from pyspark import TaskContext

        task = TaskContext.get().partitionId()
        seen: dict[int, tuple[int, int]] = {}   # file -> (last row index, kept so far)
        for batch in batches:
            paths = batch.column(FILE).dictionary_encode()
            idx = [file_index.get(os.path.abspath(_local_path(p)), -1) for p in paths.dictionary.to_pylist()]
            if -1 in idx:
                raise RuntimeError(f"streamjoin: Spark read a file the driver did not list: {paths.dictionary}")
            files = pa.array(idx, pa.int32()).take(paths.indices).to_numpy()
            rows = batch.column(FILE_ROW).to_numpy()
            table = pa.table({c: original(c, batch.column(c)) for c in schema.names})
            part = normalise(table, cfg, check_units=False)   # stage 2 checked the whole column
            n = batch.num_rows
            # the batch's column_bits (the same whatever the chunking), on its first row: summed in stage 4
            bits = np.zeros(n, np.int64)
            if n:
                bits[0] = sum(column_bits(col) for col in table.columns)
            kept = part.kept if part.kept is not None else np.ones(n, bool)
            bad = ~kept
            reason = np.full(n, None, object)
            reason[bad] = part.quarantine[QUARANTINE_REASON].to_list()
            ts, arrival = np.zeros(n, np.int64), np.zeros(n, np.int64)
            ts[kept], arrival[kept] = part.ts, part.arrival
            rank = pa.array(_ranks(files, rows, kept, seen), mask=bad)
            cols = {FILE: pa.array(files, pa.int32()), FILE_ROW: batch.column(FILE_ROW),
                    TASK: pa.array(np.full(n, task, np.int32)), RANK: rank, REASON: pa.array(reason, pa.string()),
                    TS: pa.array(ts, mask=bad), ARRIVAL: pa.array(arrival, mask=bad), BITS: pa.array(bits)}
            for c in schema.names:
                arr = batch.column(c)
                if c in convert:   # hive partition columns, payload timestamps
                    arr = original(c, arr).cast(out_types[c])
                cols[c] = arr
            yield pa.RecordBatch.from_pydict(cols)

    return run


def _bad_micros(stream: int, plan: _Plan, column: str):
    """The ``mapInArrow`` function of :meth:`SparkInput.bad_arrivals`: the quarantined rows'
    ``column`` in us as ``load.bad_arrivals_of`` converts it (nulls dropped), tagged ``stream``."""
    cfg, schema = plan.cfg, plan.schema

    def run(batches):
        for batch in batches:
            arr = _original(schema, column, batch.column(0))
            us = pl_to_numpy(to_micros(pa.chunked_array([arr], type=arr.type), column, cfg.unit, cfg.path,
                                       check_unit=False))
            yield pa.RecordBatch.from_pydict({"stream": pa.array(np.full(len(us), stream, np.int32)),
                                              "t": pa.array(us, pa.int64())})

    return run


def _ranks(files: np.ndarray, rows: np.ndarray, kept: np.ndarray, seen: dict) -> np.ndarray:
    """Per row, the kept rows of its file before it in this task (``seen``
    carries each file's last row index and count across batches); rows out of
    order are an internal error, never a wrong ``row``."""
    out = np.zeros(len(files), np.int64)
    for f in np.unique(files):
        at = np.flatnonzero(files == f)
        r = rows[at]
        last, count = seen.get(int(f), (-1, 0))
        if len(r) and (r[0] <= last or (len(r) > 1 and (np.diff(r) <= 0).any())):
            raise RuntimeError("streamjoin: a Spark task read a file's rows out of order; cannot number them")
        k = kept[at].astype(np.int64)
        out[at] = count + np.cumsum(k) - k
        seen[int(f)] = (int(r[-1]), count + int(k.sum()))
    return out


def _out_types(plan: _Plan) -> list[tuple[str, pa.DataType]]:
    """Each input column's Spark type (DDL) and Arrow type in the read's output:
    the type it is read as, but a timestamp column other than ``ts`` and
    ``arrival`` in ms or us is a Spark timestamp (``timestamp_ntz`` when the
    Parquet one has no time zone) -- the time columns keep their raw count: a
    quarantined row's time may lie outside Spark's range."""
    times = {plan.cfg.ts, plan.cfg.arrival}
    out = []
    for f in plan.schema:
        t = f.type
        if pa.types.is_timestamp(t) and t.unit in ("ms", "us") and f.name not in times:
            out.append(("timestamp" if t.tz else "timestamp_ntz", pa.timestamp("us", t.tz)))
        else:
            out.append(spark_read_type(t, "", f.name))
    return out


def _out_schema(plan: _Plan) -> str:
    working = (f"{FILE} int, {FILE_ROW} bigint, {TASK} int, {RANK} bigint, {REASON} string, "
               f"{TS} bigint, {ARRIVAL} bigint, {BITS} bigint")
    return ", ".join([working] + [f"`{f.name}` {ddl}" for f, (ddl, _) in zip(plan.schema, _out_types(plan))])


# ---------------------------------------------------------------------------
# stage 4: facts
# ---------------------------------------------------------------------------


def _offsets(chunks: list) -> tuple[list[tuple[int, int, int]], int, int]:
    """Each (file, task) chunk's first ``row``: the kept rows of every chunk
    before it in (file, least row index) order.  ``chunks``: rows of
    (file, task, least row index, greatest row index, kept, read).  Returns
    (file, task, offset) triples, the rows kept and the rows read.

    Within a file the chunks must be disjoint row ranges (each chunk's
    greatest row index below the next one's least): a task that read, say,
    a file's splits 0 and 2 while another read split 1 would interleave,
    and a prefix count would number rows wrongly -- an internal error instead."""
    offsets, kept, read = [], 0, 0
    last: tuple[int, int] | None = None    # (file, greatest row index) of the chunk before
    for f, t, lo, hi, k, n in sorted(chunks, key=lambda c: (c[0], c[2])):
        if last is not None and last[0] == f and lo <= last[1]:
            raise RuntimeError("streamjoin: Spark tasks read interleaved row ranges of one file; "
                               "cannot number its rows")
        last = (f, hi)
        offsets.append((f, t, kept))
        kept += k
        read += n
    return offsets, kept, read


def _key_aggs(plan: _Plan) -> tuple[list, list[int]]:
    """The aggregations of :func:`_stream_facts` that give ``KeyFacts`` per group: each
    numeric key column's least and greatest value and, for a float column, the least
    ``(file, row index, value)`` of its inexact values (``KeyFacts.of``'s "first inexact":
    a whole number below 2^53 (2^24) in magnitude is exact); the float keys' positions."""
    from pyspark.sql import functions as F

    dtypes = pl.from_arrow(plan.schema.empty_table()).schema
    aggs, floats = [], []
    for i, k in enumerate(plan.cfg.keys):
        d = dtypes[k]
        if not d.is_numeric():
            continue
        aggs += [F.min(F.col(f"`{k}`")).alias(f"lo{i}"), F.max(F.col(f"`{k}`")).alias(f"hi{i}")]
        if d in SIGNIFICAND_BITS:
            limit = 2.0 ** SIGNIFICAND_BITS[d]
            v = F.col(f"`{k}`").cast("double")
            exact = F.when(F.abs(v) < limit, v == F.floor(v)).otherwise(F.lit(False))
            aggs.append(F.min(F.when(~exact, F.struct(F.col(FILE), F.col(FILE_ROW), v))).alias(f"bad{i}"))
            floats.append(i)
    return aggs, floats


def _spark_order(x):
    """Spark's ordering of a min / max result in Python: NaN above every number."""
    return (isinstance(x, float) and x != x, x)


def _key_facts(plan: _Plan, groups: list, floats: list[int]) -> list[KeyFacts]:
    """``KeyFacts.of`` each key column's kept values from the kept groups' aggregates
    (:func:`_key_aggs`), merged on the driver in Spark's order."""
    dtypes = pl.from_arrow(plan.schema.empty_table()).schema
    out = []
    for i, k in enumerate(plan.cfg.keys):
        d = dtypes[k]
        los = [g[f"lo{i}"] for g in groups if d.is_numeric() and g[f"lo{i}"] is not None]
        if not los:
            out.append(KeyFacts(d))
            continue
        cast = float if d.is_float() else int
        lo = min(los, key=_spark_order)
        hi = max((g[f"hi{i}"] for g in groups if g[f"hi{i}"] is not None), key=_spark_order)
        bads = [g[f"bad{i}"] for g in groups if i in floats and g[f"bad{i}"] is not None]
        bad = min(bads, key=lambda b: (b[0], b[1]))[2] if bads else None
        out.append(KeyFacts(d, cast(lo), cast(hi), None if bad is None else float(bad)))
    return out


def _stream_facts(plan: _Plan, inter, max_quarantine: float
                  ) -> tuple[StreamFacts, list[tuple[int, int, int]], list[KeyFacts]]:
    """One stream's facts from one aggregation over the read, grouped by (file, task,
    reason): per group the least and greatest row index, the rows, time ranges, the
    columns' bits and the key columns' facts (:func:`_key_aggs`); the driver sums the
    groups per (file, task) (rows read; the kept group's rows are the rows kept) and per
    reason (the rows quarantined), refuses them by ``load.check_quarantine`` as the local
    loader would, and merges the kept groups' key facts.  Returns the facts, each chunk's
    first ``row`` and the key columns' ``KeyFacts``."""
    from pyspark.sql import functions as F

    key_aggs, floats = _key_aggs(plan)
    groups = (inter.groupBy(FILE, TASK, REASON)
              .agg(F.min(FILE_ROW).alias("rlo"), F.max(FILE_ROW).alias("rhi"), F.count(F.lit(1)).alias("n"),
                   F.min(TS).alias("tlo"), F.max(TS).alias("thi"), F.min(ARRIVAL).alias("alo"),
                   F.max(ARRIVAL).alias("ahi"), F.sum(BITS).alias("bits"), *key_aggs)
              .collect())
    chunks: dict[tuple[int, int], list[int]] = {}
    reasons: dict[str, int] = {}
    for g in groups:
        c = chunks.setdefault((int(g[FILE]), int(g[TASK])), [int(g["rlo"]), int(g["rhi"]), 0, 0])
        c[0], c[1], c[3] = min(c[0], int(g["rlo"])), max(c[1], int(g["rhi"])), c[3] + int(g["n"])
        if g[REASON] is None:
            c[2] += int(g["n"])
        else:
            reasons[g[REASON]] = reasons.get(g[REASON], 0) + int(g["n"])
    offsets, rows, read = _offsets([(f, t, *c) for (f, t), c in chunks.items()])
    check_quarantine(plan.cfg, read, reasons, max_quarantine)
    kept = [g for g in groups if g[REASON] is None]

    def span(lo: str, hi: str) -> tuple[int, int] | None:
        los = [g[lo] for g in kept if g[lo] is not None]
        return (int(min(los)), int(max(g[hi] for g in kept if g[hi] is not None))) if los else None

    return (StreamFacts(config=plan.cfg, files=plan.files, read=read, rows=rows, reasons=reasons,
                        ts_range=span("tlo", "thi"), arrival_range=span("alo", "ahi"),
                        payload={c: f"{plan.cfg.name}_{c}" for c in payload_columns(plan.cfg, plan.schema.names)},
                        arrow_types={f.name: f.type for f in plan.schema},
                        row_bytes=row_bytes_of(sum(int(g["bits"] or 0) for g in groups), read)),
            offsets, _key_facts(plan, kept, floats))


# ---------------------------------------------------------------------------
# the entry point
# ---------------------------------------------------------------------------


def executor_input_error(exc: BaseException) -> str | None:
    """The one-line message of an :class:`InputError` raised on an executor
    (Spark hands it to the driver as a ``PythonException`` holding the worker's
    whole traceback); ``None`` for any other exception."""
    from pyspark.errors import PythonException

    if not isinstance(exc, PythonException):
        return None
    lines = [ln for ln in str(exc).splitlines() if "InputError: " in ln]
    return lines[-1].split("InputError: ", 1)[1].strip() if lines else None


def read_streams(spark, configs: list[StreamConfig], *, max_quarantine: float = MAX_QUARANTINE,
                 quarantine_dir: Path) -> SparkInput:
    """Read, validate and normalise every stream on the executors (see the module docstring)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    check_output_columns([(c, input_columns(c)) for c in configs])
    plans = [_plan(c) for c in configs]
    # the read is the native path's first job: a worker that cannot import streamjoin fails here
    with executor_imports(spark):
        scans = [_scan(spark, p) for p in plans]
        for plan, scan in zip(plans, scans):
            _check_units(plan, scan)
        inters: list = []
        try:
            facts, chunk_offsets, keys = [], [], []
            for plan, scan in zip(plans, scans):
                inter = scan.mapInArrow(_normaliser(plan), _out_schema(plan)).persist(StorageLevel.MEMORY_AND_DISK)
                inters.append(inter)
                fact, offsets, key_facts = _stream_facts(plan, inter, max_quarantine)
                facts.append(fact)
                chunk_offsets.append(offsets)
                keys.append(key_facts)
            dtypes = common_key_types([(p.cfg, k) for p, k in zip(plans, keys)])
            key_types = [_spark_key_type(d) for d in dtypes]
            for plan, inter, fact in zip(plans, inters, facts):
                if fact.reasons:
                    base = quarantine_dir if is_uri(quarantine_dir) else Path(quarantine_dir)
                    fact.quarantine = base / f"{plan.cfg.name}.parquet"
                    # a file:// URI: a scheme-less path resolves against fs.defaultFS (hdfs:// on YARN)
                    (inter.filter(F.col(REASON).isNotNull())
                     .select(*[F.col(f"`{c}`") for c in plan.schema.names], F.col(REASON).alias(QUARANTINE_REASON))
                     .write.mode("overwrite").parquet(file_uri(fact.quarantine)))
                    check_written(spark, fact.quarantine)   # a Hadoop URI's staging too (.hadoop_out)
        except BaseException as exc:
            for inter in inters:
                inter.unpersist()
            line = executor_input_error(exc)
            if line is not None:
                raise InputError(line) from None
            raise
    frames = []
    for i, (plan, inter, fact, offsets) in enumerate(zip(plans, inters, facts, chunk_offsets)):
        starts = spark.createDataFrame(offsets or [(0, 0, 0)], f"{FILE} int, {TASK} int, __sj_offset bigint")
        kept = inter.filter(F.col(REASON).isNull()).join(F.broadcast(starts), [FILE, TASK])
        cols = [F.lit(i).cast("int").alias("stream"), (F.col("__sj_offset") + F.col(RANK)).alias("row"),
                F.col(TS).alias("ts"), F.col(ARRIVAL).alias("arrival")]
        cols += [F.col(f"`{k}`").cast(t).alias(f"__key{j}") for j, (k, t) in enumerate(zip(plan.cfg.keys, key_types))]
        cols += [F.col(f"`{c}`").alias(name) for c, name in fact.payload.items()]
        frames.append(kept.select(*cols))
    frame = frames[0]
    for f in frames[1:]:
        frame = frame.unionByName(f, allowMissingColumns=True)
    return SparkInput(frame=frame, streams=facts, key_dtypes=dtypes, _cached=inters,
                      _quarantined=list(zip(inters, plans)))

