"""Load: Parquet streams -> normalised columns + quarantine (SPEC §1, §8).

Each stream becomes a :class:`LoadedStream`:

* ``ts`` and ``arrival`` as int64 microseconds (Parquet timestamps of any
  unit, or integers in the declared ``unit``; without an arrival column,
  ``arrival = ts``);
* key columns renamed ``__key0, __key1, ...`` and cast to one dtype shared by
  every stream, so streams whose key columns have different names still join;
* every other column kept as payload.

Rows with a null ``ts``, ``arrival`` or key (or a time outside the engine's
range) are *quarantined*: kept aside with a ``reason`` column, counted, and
written out -- never silently dropped.  ``row`` is the 0-based index among
the rows that remain, in sorted-file order.
"""

from __future__ import annotations

import glob as globmod
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..config.settings import StreamConfig
from ..base.errors import InputError
from ..base.timeunits import MAX_ABS_TS

_TS_DIV = {"s": (1_000_000, 1), "ms": (1_000, 1), "us": (1, 1), "ns": (1, 1_000), "ps": (1, 1_000_000)}


@dataclass
class LoadedStream:
    """One stream after validation."""

    config: StreamConfig
    ts: np.ndarray            # int64 us, row order
    arrival: np.ndarray       # int64 us, row order
    keys: pl.DataFrame        # __key0.. columns (possibly no columns)
    payload: pl.DataFrame     # remaining columns, row order
    quarantine: pl.DataFrame  # rejected rows with a `reason` column
    files: list[Path]
    row_bytes: float          # Arrow bytes per row (memory estimates)
    vectors: np.ndarray | None = None  # (rows, d) float64 for the distance predicate

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def rows(self) -> int:
        return int(self.ts.shape[0])


def resolve_files(path: str, stream: str) -> list[Path]:
    """A file, a glob or a directory (hive partitions allowed), sorted."""
    if any(ch in path for ch in "*?["):
        files = sorted(Path(p) for p in globmod.glob(path, recursive=True) if Path(p).is_file())
        if not files:
            raise InputError(f"{path}: no files match (stream {stream!r})")
        return files
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith((".", "_")))
        if not files:
            raise InputError(f"{path}: directory has no data files (stream {stream!r})")
        return files
    if not p.exists():
        raise InputError(f"{path}: no such file or directory (stream {stream!r})")
    return [p]


def open_dataset(path: str, stream: str) -> tuple[ds.Dataset, list[Path]]:
    """The stream's Parquet dataset (files in sorted path order, hive partitions allowed)."""
    files = resolve_files(path, stream)
    try:
        if len(files) == 1 and not Path(path).is_dir():
            dataset = ds.dataset(str(files[0]), format="parquet")
        else:
            base = path if Path(path).is_dir() else None
            dataset = ds.dataset([str(f) for f in files], format="parquet",
                                 partitioning="hive", partition_base_dir=base)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise unreadable_error(path, stream, exc) from None
    return dataset, files


def unreadable_error(path: str, stream: str, exc: Exception) -> InputError:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return InputError(f"{path}: not a readable Parquet dataset (stream {stream!r}): {first}")


def read_table(path: str, stream: str) -> tuple[pa.Table, list[Path]]:
    dataset, files = open_dataset(path, stream)
    try:
        table = dataset.to_table()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise unreadable_error(path, stream, exc) from None
    return table, files


def to_micros(col: pa.ChunkedArray, column: str, unit: str | None, where: str) -> pa.ChunkedArray:
    """Timestamp (any unit) or integer-with-unit column -> int64 microseconds."""
    t = col.type
    if pa.types.is_timestamp(t):
        unit = t.unit
        values = pc.cast(col, pa.int64())
    elif pa.types.is_integer(t):
        if unit is None:
            raise InputError(f"{where}: column {column!r} is an integer ({t}); give its unit with --unit s|ms|us|ns|ps")
        values = pc.cast(col, pa.int64())
    else:
        raise InputError(f"{where}: column {column!r} has type {t}; expected a timestamp or an integer with --unit")
    mul, div = _TS_DIV[unit]
    if mul != 1:
        # guard before multiplying: an overflow would wrap silently
        limit = MAX_ABS_TS // mul
        bad = pc.greater(pc.abs(values), pa.scalar(limit, pa.int64()))
        values = pc.if_else(bad, pa.scalar(None, pa.int64()), values) if pc.any(bad).as_py() else values
        values = pc.multiply(values, mul)
    if div != 1:
        # floor division (towards -inf), so ordering of times is preserved
        values = (pl.from_arrow(values) // div).to_arrow()
    return values


@dataclass
class Normalised:
    """One table of a stream after validation (see :func:`normalise`)."""

    ts: np.ndarray
    arrival: np.ndarray
    keys: pl.DataFrame
    payload: pl.DataFrame
    quarantine: pl.DataFrame
    vectors: np.ndarray | None


def stream_where(cfg: StreamConfig) -> str:
    """How error messages name a stream."""
    return f"{cfg.path} (stream {cfg.name!r})"


def normalise(table: pa.Table, cfg: StreamConfig) -> Normalised:
    """Validate and normalise one table of a stream: the whole stream, or one
    row group of it (the bounded-memory engine reads a stream piece by piece)."""
    where = stream_where(cfg)
    names = table.column_names
    wanted = [cfg.ts] + ([cfg.arrival] if cfg.arrival else []) + list(cfg.keys) + list(cfg.vectors)
    for c in wanted:
        if c not in names:
            raise InputError(f"{where}: missing column {c!r} (has: {', '.join(names)})")
    ts = to_micros(table.column(cfg.ts), cfg.ts, cfg.unit, where)
    arrival = to_micros(table.column(cfg.arrival), cfg.arrival, cfg.unit, where) if cfg.arrival else ts
    original = pl.from_arrow(table)
    if not isinstance(original, pl.DataFrame):  # a single column comes back as a Series
        original = original.to_frame()
    frame = original.with_columns(
        pl.Series("__ts", ts, dtype=pl.Int64),
        pl.Series("__arrival", arrival, dtype=pl.Int64),
        *[pl.col(k).alias(f"__key{i}") for i, k in enumerate(cfg.keys)],
    )
    reason = pl.when(pl.col(cfg.ts).is_null()).then(pl.lit(f"null {cfg.ts}"))
    reason = reason.when(pl.col("__ts").is_null() | (pl.col("__ts").abs() > MAX_ABS_TS)).then(pl.lit(f"{cfg.ts} out of range"))
    if cfg.arrival:
        reason = reason.when(pl.col(cfg.arrival).is_null()).then(pl.lit(f"null {cfg.arrival}"))
        reason = reason.when(pl.col("__arrival").is_null() | (pl.col("__arrival").abs() > MAX_ABS_TS)).then(pl.lit(f"{cfg.arrival} out of range"))
    for k in cfg.keys:
        reason = reason.when(pl.col(k).is_null()).then(pl.lit(f"null key {k}"))
    for v in cfg.vectors:
        dtype = original.schema[v]
        if not dtype.is_numeric():
            raise InputError(f"{where}: column {v!r} has type {dtype}; the distance predicate needs numbers")
        reason = reason.when(pl.col(v).is_null() | pl.col(v).cast(pl.Float64).is_nan()).then(pl.lit(f"null {v}"))
    frame = frame.with_columns(reason.otherwise(None).alias("reason"))
    bad_mask = frame["reason"].is_not_null()
    if bad_mask.any():
        quarantine = original.filter(bad_mask).with_columns(frame["reason"].filter(bad_mask))
        frame = frame.filter(~bad_mask)
    else:
        quarantine = original.head(0).with_columns(pl.lit(None, dtype=pl.String).alias("reason"))
    keys = frame.select([f"__key{i}" for i in range(len(cfg.keys))])
    vectors = (frame.select([pl.col(v).cast(pl.Float64) for v in cfg.vectors]).to_numpy()
               if cfg.vectors else None)
    drop = {cfg.ts, "__ts", "__arrival", "reason"} | ({cfg.arrival} if cfg.arrival else set())
    drop |= {f"__key{i}" for i in range(len(cfg.keys))}
    payload = frame.select([c for c in frame.columns if c not in drop])
    return Normalised(ts=frame["__ts"].to_numpy(), arrival=frame["__arrival"].to_numpy(), keys=keys,
                      payload=payload, quarantine=quarantine, vectors=vectors)


def load_stream(cfg: StreamConfig) -> LoadedStream:
    """Read, validate and normalise one stream (see module docstring)."""
    table, files = read_table(cfg.path, cfg.name)
    part = normalise(table, cfg)
    row_bytes = (table.nbytes / table.num_rows) if table.num_rows else 0.0
    return LoadedStream(
        config=cfg,
        ts=part.ts,
        arrival=part.arrival,
        keys=part.keys,
        payload=part.payload,
        quarantine=part.quarantine,
        files=files,
        vectors=part.vectors,
        row_bytes=row_bytes,
    )


def common_key_dtypes(streams: list[LoadedStream]) -> list[pl.DataType]:
    """One dtype per key position that every stream's key column casts to."""
    if not streams or not streams[0].keys.width:
        return []
    out = []
    for i in range(streams[0].keys.width):
        dtypes = [s.keys[f"__key{i}"].dtype for s in streams]
        numeric = all(d.is_numeric() for d in dtypes)
        textual = all(d in (pl.String, pl.Categorical) or isinstance(d, pl.Categorical) for d in dtypes)
        if len(set(dtypes)) == 1:
            out.append(dtypes[0])
        elif numeric and all(d.is_integer() for d in dtypes):
            out.append(pl.Int64)
        elif numeric:
            out.append(pl.Float64)
        elif textual:
            out.append(pl.String)
        else:
            desc = ", ".join(f"{s.name}.{s.config.keys[i]}: {s.keys[f'__key{i}'].dtype}" for s in streams)
            raise InputError(f"key columns #{i + 1} have incompatible types ({desc}); expected the same kind of type in every stream")
    return out


def load_all(configs: list[StreamConfig]) -> list[LoadedStream]:
    """Load every stream and align key dtypes across streams."""
    streams = [load_stream(c) for c in configs]
    dtypes = common_key_dtypes(streams)
    for s in streams:
        if dtypes:
            s.keys = s.keys.with_columns([pl.col(f"__key{i}").cast(dt) for i, dt in enumerate(dtypes)])
    return streams


# ---------------------------------------------------------------------------
# quarantined rows' arrival times (the recall-target controllers' bad-rows trigger)
# ---------------------------------------------------------------------------


def bad_arrivals_of(streams, reason: str | None = None) -> list[np.ndarray]:
    """Per loaded stream, arrival times (us) of its quarantined rows that have one
    (only those quarantined for ``reason``, when given: the ``bad_rows_reason`` trigger).

    An online operator sees a bad row when it arrives; rows whose arrival
    itself is missing or unreadable carry no time and are left out.
    """
    out = []
    for s in streams:
        q = s.quarantine
        if reason is not None and q.height and "reason" in q.columns:
            q = q.filter(q["reason"] == reason)
        column = s.config.arrival or s.config.ts
        if q.height == 0 or column not in q.columns:
            out.append(np.empty(0, np.int64))
            continue
        try:
            values = to_micros(pa.chunked_array([q[column].to_arrow()]), column, s.config.unit, s.config.path)
            arr = pl_to_numpy(values)
        except Exception:  # noqa: BLE001 - a column that cannot be read gives no times
            out.append(np.empty(0, np.int64))
            continue
        out.append(np.sort(arr[~np.isnan(arr)].astype(np.int64)) if arr.dtype.kind == "f" else np.sort(arr))
    return out


def pl_to_numpy(values) -> np.ndarray:
    series = pl.Series(values) if not isinstance(values, pl.Series) else values
    return series.cast(pl.Int64).drop_nulls().to_numpy()
