"""Load: Parquet streams -> normalised columns + quarantine (SPEC §1, §8).

Each stream becomes a :class:`LoadedStream`:

* ``ts`` and ``arrival`` as int64 microseconds (Parquet timestamps of any
  unit, or integers in the declared ``unit``; without an arrival column,
  ``arrival = ts``);
* key columns copied into a frame of their own as ``__key0, __key1, ...`` and
  cast to one dtype shared by every stream that keeps every value (or the
  mix is refused: io/keys.py), so streams whose key columns have different
  names and types still join, exactly;
* every column but ``ts`` and ``arrival`` kept as payload, whatever its name
  (the working columns never mix with the user's); :func:`load_all` first
  refuses inputs whose output columns would collide (io/columns.py).  A run
  whose outputs read no payload (``payload=False``, :func:`payload_needed`:
  no results, no ``--where``; either engine) reads only the configured columns where it can
  (:func:`unread_columns`); its payload is then the key (and ``--distance``
  vector) columns.

Rows with a null ``ts``, ``arrival`` or key (or a time outside the engine's
range) are *quarantined*: kept aside with a ``reason`` column, counted, and
written out -- never silently dropped.  ``row`` is the 0-based index among
the rows that remain, in sorted-file order.

Guards against input that would load "successfully" into nonsense
(docs/semantics.md, "Bad input"):

* every file of a stream must have the configured columns with the same kind
  of type (:func:`check_file_schemas`) -- a renamed column in one file is an
  error, not a file of quarantined rows;
* integer times that are not plausible dates under the declared unit but are
  under another one are an error naming that unit (:func:`likely_epoch_unit`);
* a stream with every row, or more than ``max_quarantine`` of its rows,
  quarantined is an error (:func:`check_quarantine`);
* a declared unit on a Parquet timestamp column (which carries its own unit)
  is ignored with a one-line warning.
"""

from __future__ import annotations

import glob as globmod
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from ..config.settings import MAX_QUARANTINE, StreamConfig
from ..policies import PolicySpec
from ..policies.spark_ss import file_arrivals
from ..base.errors import InputError, warn_once
from ..base.timeunits import MAX_ABS_TS, TS_UNITS, UNIT_US, in_calendar_range
from .columns import QUARANTINE_REASON, check_output_columns, payload_columns
from .keys import cast_keys, common_key_types, key_facts

if TYPE_CHECKING:  # imported where used: pyarrow.dataset imports pandas (~0.25 s of start-up)
    import pyarrow.dataset as ds

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
    row_bytes: float          # Arrow bytes per row read (memory estimates; column_bits)
    vectors: np.ndarray | None = None  # (rows, d) float64 for the distance predicate
    kept: np.ndarray | None = None     # rows read that were kept (not quarantined); None: all

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def rows(self) -> int:
        return int(self.ts.shape[0])


def resolve_files(path: str, stream: str) -> list[Path]:
    """A file, a glob or a directory (hive partitions allowed), sorted.

    A 0-byte file among them is refused by name (:func:`check_not_empty`)."""
    if any(ch in path for ch in "*?["):
        files = sorted(Path(p) for p in globmod.glob(path, recursive=True) if Path(p).is_file())
        if not files:
            raise InputError(f"{path}: no files match (stream {stream!r})")
        return check_not_empty(files, stream)
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith((".", "_")))
        if not files:
            raise InputError(f"{path}: directory has no data files (stream {stream!r})")
        return check_not_empty(files, stream)
    if not p.exists():
        raise InputError(f"{path}: no such file or directory (stream {stream!r})")
    return check_not_empty([p], stream)


def check_not_empty(files: list[Path], stream: str) -> list[Path]:
    """Refuse a 0-byte file: never Parquet (a writer that died before its first
    byte), and Arrow's own error about it escaped as an internal failure."""
    for f in files:
        if f.stat().st_size == 0:
            raise InputError(f"{f}: empty file (0 bytes), not Parquet (stream {stream!r}); "
                             f"remove it or let its writer finish")
    return files


def single_file(path: str, files: list[Path]) -> Path | None:
    """The one file of a stream given as a file path (no directory, so no hive
    partition columns): read with ``pq.ParquetFile``, never ``pyarrow.dataset``."""
    return files[0] if len(files) == 1 and not Path(path).is_dir() else None


def open_dataset(path: str, stream: str) -> tuple[ds.Dataset, list[Path]]:
    """The stream's Parquet dataset (files in sorted path order, hive partitions allowed)."""
    import pyarrow.dataset as ds

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


def count_rows(cfg: StreamConfig) -> int:
    """Rows of the stream, from the Parquet footers (an unreadable file is
    bad input naming it, as when the data is read)."""
    files = resolve_files(cfg.path, cfg.name)
    try:
        one = single_file(cfg.path, files)
        if one is not None:
            return pq.ParquetFile(one).metadata.num_rows
        return open_dataset(cfg.path, cfg.name)[0].count_rows()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise unreadable_error(cfg.path, cfg.name, exc) from None


def unreadable_error(path: str, stream: str, exc: Exception) -> InputError:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return InputError(f"{path}: not a readable Parquet dataset (stream {stream!r}): {first}")


def _type_kind(t: pa.DataType) -> str:
    """What matters of a column's type when files of one stream are read together."""
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t):
        return "string"
    return str(t)


def configured_columns(cfg: StreamConfig) -> list[str]:
    """The columns a stream's config names: time, arrival, keys, vectors."""
    return list(dict.fromkeys([cfg.ts] + ([cfg.arrival] if cfg.arrival else []) + list(cfg.keys) + list(cfg.vectors)))


def check_file_schemas(cfg: StreamConfig, files: list[Path]) -> None:
    """Every file of a stream has the configured columns, with the same kind of
    type (integer, timestamp, ...), as the first file that has them.

    A column no file has is left to :func:`normalise` (it reports it missing,
    or it is a hive partition column that lives in directory names).
    Schema drift across files is bad input (SPEC §8): without this check a
    file whose time column is renamed would load as all-null times.
    """
    if len(files) < 2:
        return
    wanted = configured_columns(cfg)
    first: dict[str, tuple[Path, pa.DataType]] = {}
    schemas = []
    for f in files:
        try:
            schema = pq.read_schema(f)
        except (pa.ArrowInvalid, OSError) as exc:
            raise unreadable_error(str(f), cfg.name, exc) from None
        schemas.append((f, schema))
        for c in wanted:
            if c in schema.names and c not in first:
                first[c] = (f, schema.field(c).type)
    for f, schema in schemas:
        for c, (ref, ref_type) in first.items():
            if c not in schema.names:
                raise InputError(f"{f} (stream {cfg.name!r}): missing column {c!r} (has: {', '.join(schema.names)}); "
                                 f"{ref} has it: every file of a stream needs the same columns")
            t = schema.field(c).type
            if _type_kind(t) != _type_kind(ref_type):
                raise InputError(f"{f} (stream {cfg.name!r}): column {c!r} is {t}, but {ref_type} in {ref}; "
                                 f"every file of a stream needs the same column types")


def read_table(cfg: StreamConfig, columns: list[str] | None = None) -> tuple[pa.Table, list[Path]]:
    """The whole stream as one table (after :func:`check_file_schemas`);
    ``columns``: only these (a single file; :func:`unread_columns`).

    Not memory-mapped: a file cut short while it is read (rewritten in place)
    would kill the process with SIGBUS instead of this one-line error, and
    the map saved no measurable CPU (docs/performance.md, issue 21)."""
    path = cfg.path
    files = resolve_files(path, cfg.name)
    one = single_file(path, files)
    if one is None:
        dataset, files = open_dataset(path, cfg.name)
        check_file_schemas(cfg, files)
    try:
        table = (pq.ParquetFile(one).read(columns=columns) if one is not None
                 else dataset.to_table())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise unreadable_error(path, cfg.name, exc) from None
    return table, files


def unread_columns(cfg: StreamConfig) -> tuple[list[str], int, pa.Schema] | None:
    """For a stream whose payload no requested output reads (``load_stream(...,
    payload=False)``): the configured columns to read instead of the whole file,
    the :func:`column_bits` per row of the columns left unread -- computed
    from the schema, so ``row_bytes`` is the whole file's -- and the file's
    schema (an empty quarantine's columns).  ``None``: read
    everything (not a single file, nothing to leave out, a column the config
    names missing -- :func:`normalise` names it -- or an unread column whose
    bits depend on its data: strings, binaries, dictionaries, nested types)."""
    schema = single_file_schema(cfg)
    if schema is None:
        return None
    wanted = configured_columns(cfg)
    if any(c not in schema.names for c in wanted) or len(set(schema.names)) != len(schema.names):
        return None
    bits = 0
    for f in schema:
        if f.name in wanted:
            continue
        if pa.types.is_dictionary(f.type) or pa.types.is_nested(f.type):
            return None
        try:
            bits += 1 + f.type.bit_width
        except ValueError:   # not fixed width: its bits need its data
            return None
    if bits == 0:
        return None
    return [n for n in schema.names if n in wanted], bits, schema


_UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds", "ps": "picoseconds"}


def _plausible(lo: int, hi: int, unit: str) -> bool:
    """Integer times ``lo .. hi`` in ``unit`` are calendar dates (base/timeunits.py)."""
    return in_calendar_range(lo * UNIT_US[unit], hi * UNIT_US[unit])


def likely_epoch_unit(lo: int, hi: int, unit: str) -> str | None:
    """The unit under which integer times ``lo .. hi`` are plausible epoch dates,
    when they are not under the declared ``unit``; ``None`` otherwise.

    Times plausible under no unit (a relative clock: seconds since a game's
    kick-off, picoseconds since a sensor's boot) are left alone.  Units are
    1000x apart and the plausible range spans a factor of 6.5, so at most one
    unit fits.
    """
    if _plausible(lo, hi, unit):
        return None
    return next((u for u in TS_UNITS if _plausible(lo, hi, u)), None)


def _years(lo: int, hi: int, unit: str) -> str:
    per_year = 31_556_952 * 1_000_000 / UNIT_US[unit]
    return f"{1970 + lo / per_year:.0f}..{1970 + hi / per_year:.0f}"


def _check_unit(values: pl.Series, column: str, unit: str, where: str) -> None:
    check_unit_range(values.min(), values.max(), column, unit, where)


def check_unit_range(lo: int | None, hi: int | None, column: str, unit: str, where: str) -> None:
    """Refuse integer times ``lo .. hi`` (the column's least and greatest value;
    ``None``: no value) that the declared unit puts in an implausible year
    while another unit would put them in 1990..2100 (:func:`likely_epoch_unit`)."""
    if lo is None:
        return
    likely = likely_epoch_unit(lo, hi, unit)
    if likely is not None:
        raise InputError(
            f"{where}: column {column!r} read in {unit} gives the years {_years(lo, hi, unit)}, in {likely} "
            f"{_years(lo, hi, likely)}: looks like epoch {_UNIT_NAMES[likely]}: pass --unit {likely}")


def _int64_series(col: pa.ChunkedArray, column: str, where: str) -> pl.Series:
    """A timestamp (its raw count in its own unit) or integer column as an Int64
    series, without ``pyarrow.compute``: importing it costs ~0.1 s CPU of every
    run (docs/performance.md, issue 21), and polars imports it for any Arrow
    array it converts on its own -- a table it converts does not.  Timestamps
    are reinterpreted (``Array.view``: the same 8 bytes, nulls kept); narrower
    integers widen exactly; an unsigned value past int64 is bad input."""
    if pa.types.is_timestamp(col.type):
        col = pa.chunked_array([c.view(pa.int64()) for c in col.chunks], type=pa.int64())
    s = pl.from_arrow(pa.table({column: col}))[column]
    try:
        return s.cast(pl.Int64).alias("")
    except pl.exceptions.InvalidOperationError:
        raise int64_range_error(column, col.type, where) from None


def int64_range_error(column: str, t: pa.DataType, where: str) -> InputError:
    """An integer time column (Arrow type ``t``) with a value past the int64 range."""
    return InputError(f"{where}: column {column!r} ({t}) has values beyond the int64 range")


INT64_MAX = 2**63 - 1


def integer_time_ranges(table: pa.Table, cfg: StreamConfig) -> dict[str, tuple[int | None, int | None]]:
    """The least and greatest raw value of each integer time column of ``table``
    (``None``: no value), for :func:`check_time_ranges` over a whole stream
    read piece by piece.  An unsigned value past int64 is kept as it is: the
    check refuses it, column by column in the loader's order (ts, then arrival)."""
    out = {}
    for c in dict.fromkeys([cfg.ts] + ([cfg.arrival] if cfg.arrival else [])):
        col = table.column(c)
        if pa.types.is_integer(col.type):
            s = pl.from_arrow(pa.table({c: col}))[c]
            lo, hi = s.min(), s.max()
            out[c] = (None if lo is None else int(lo), None if hi is None else int(hi))
    return out


def past_int64(ranges: dict[str, tuple[int | None, int | None]]) -> bool:
    """Whether :func:`integer_time_ranges` found a value past int64 (refused by
    :func:`check_time_ranges`)."""
    return any(hi is not None and hi > INT64_MAX for _, hi in ranges.values())


def merge_time_ranges(a: dict[str, tuple[int | None, int | None]] | None,
                      b: dict[str, tuple[int | None, int | None]]) -> dict[str, tuple[int | None, int | None]]:
    """:func:`integer_time_ranges` of two pieces as those of both."""
    if a is None:
        return dict(b)
    out = dict(a)
    for c, (lo, hi) in b.items():
        if lo is None:
            continue
        old = out.get(c, (None, None))
        out[c] = (lo, hi) if old[0] is None else (min(old[0], lo), max(old[1], hi))
    return out


def check_time_ranges(ranges: dict[str, tuple[int | None, int | None]], cfg: StreamConfig) -> None:
    """The whole-column unit check (:func:`check_unit_range`) of a stream's
    integer time columns, from their :func:`integer_time_ranges`, column by
    column as the loader checks them: a value past int64 (only uint64 has
    one), then the unit."""
    for c, (lo, hi) in ranges.items():
        if hi is not None and hi > INT64_MAX:
            raise int64_range_error(c, pa.uint64(), stream_where(cfg))
        check_unit_range(lo, hi, c, cfg.unit, stream_where(cfg))


def time_unit(t: pa.DataType, column: str, unit: str | None, where: str) -> str:
    """The unit a time column of Arrow type ``t`` is read in: a timestamp's own
    (a declared ``unit`` that differs is ignored with a warning), the declared
    one for an integer; any other type is bad input."""
    if pa.types.is_timestamp(t):
        if unit is not None and unit != t.unit:
            warn_once(f"{where}: column {column!r} is a Parquet {t}, which carries its own unit; --unit {unit} is ignored")
        return t.unit
    if pa.types.is_integer(t):
        if unit is None:
            raise InputError(f"{where}: column {column!r} is an integer ({t}); give its unit with --unit s|ms|us|ns|ps")
        return unit
    raise InputError(f"{where}: column {column!r} has type {t}; expected a timestamp or an integer with --unit")


def to_micros(col: pa.ChunkedArray, column: str, unit: str | None, where: str, check_unit: bool = True) -> pl.Series:
    """Timestamp (any unit) or integer-with-unit column -> int64 microseconds (an Int64 series).
    ``check_unit=False``: no unit plausibility check (the caller checks the whole column)."""
    unit = time_unit(col.type, column, unit, where)
    s = _int64_series(col, column, where)
    if check_unit and not pa.types.is_timestamp(col.type):
        _check_unit(s, column, unit, where)
    mul, div = _TS_DIV[unit]
    # in polars: pyarrow imports pandas (~0.25 s) the first time it converts a
    # Python or numpy value, as pa.scalar would here
    if mul != 1:
        # guard before multiplying: an overflow would wrap silently
        limit = MAX_ABS_TS // mul
        s = pl.select(pl.when((s > limit) | (s < -limit)).then(None).otherwise(s * mul)).to_series()
    if div != 1:
        # floor division (towards -inf), so ordering of times is preserved
        s = s // div
    return s.alias("")


@dataclass
class Normalised:
    """One table of a stream after validation (see :func:`normalise`)."""

    ts: np.ndarray
    arrival: np.ndarray
    keys: pl.DataFrame
    payload: pl.DataFrame
    quarantine: pl.DataFrame
    vectors: np.ndarray | None
    kept: np.ndarray | None = None    # the rows kept, of the rows read (None: all)


def stream_where(cfg: StreamConfig) -> str:
    """How error messages name a stream."""
    return f"{cfg.path} (stream {cfg.name!r})"


def check_columns(names: list[str], cfg: StreamConfig) -> None:
    """The table (``names``: its columns) has every column the config names."""
    for c in configured_columns(cfg):
        if c not in names:
            raise InputError(f"{stream_where(cfg)}: missing column {c!r} (has: {', '.join(names)})")


def check_vector_types(schema: pl.Schema, cfg: StreamConfig) -> None:
    """The distance predicate's columns are numbers (``schema``: the stream's polars schema)."""
    for v in cfg.vectors:
        if not schema[v].is_numeric():
            raise InputError(f"{stream_where(cfg)}: column {v!r} has type {schema[v]}; "
                             f"the distance predicate needs numbers")


def normalise(table: pa.Table, cfg: StreamConfig, check_units: bool = True) -> Normalised:
    """Validate and normalise one table of a stream: the whole stream, or one
    row group of it (the bounded-memory engine reads a stream piece by piece).

    ``check_units=False`` for a piece: the unit plausibility check
    (:func:`check_unit_range`) is a fact of the whole column -- one piece
    without a stream's small values can look like another unit -- so the
    caller checks the whole column's range itself (:func:`check_time_ranges`,
    or the Spark reader's min/max aggregation).

    The working columns (times in us, keys, quarantine reasons) are built in
    frames of their own, never among the user's columns: a payload column
    may have any name (io/columns.py lists the few the outputs reserve).
    """
    where = stream_where(cfg)
    check_columns(table.column_names, cfg)
    ts = to_micros(table.column(cfg.ts), cfg.ts, cfg.unit, where, check_units)
    arrival = to_micros(table.column(cfg.arrival), cfg.arrival, cfg.unit, where, check_units) if cfg.arrival else ts
    original = pl.from_arrow(table)
    if not isinstance(original, pl.DataFrame):  # a single column comes back as a Series
        original = original.to_frame()
    t, a = pl.lit(ts), pl.lit(arrival)  # evaluated beside the user's columns, not added to them
    def time_checks(col: str, us: pl.Expr) -> list:   # null as read, or out of range in microseconds
        return [(pl.col(col).is_null(), f"null {col}"), (us.is_null() | (us > MAX_ABS_TS) | (us < -MAX_ABS_TS), f"{col} out of range")]
    # (condition, reason): a row's reason is its first condition that holds; the reasons' text only if one does
    checks = time_checks(cfg.ts, t) + (time_checks(cfg.arrival, a) if cfg.arrival else [])
    checks += [(pl.col(k).is_null(), f"null key {k}") for k in cfg.keys]
    check_vector_types(original.schema, cfg)
    checks += [(pl.col(v).is_null() | pl.col(v).cast(pl.Float64).is_nan(), f"null {v}") for v in cfg.vectors]
    bad_mask = original.select(pl.any_horizontal([c.fill_null(False) for c, _ in checks]).alias("bad")).to_series()
    keys = original.select([pl.col(k).alias(f"__key{i}") for i, k in enumerate(cfg.keys)])
    frame = original
    if bad_mask.any():
        reason = pl.when(checks[0][0]).then(pl.lit(checks[0][1]))
        for condition, text in checks[1:]:
            reason = reason.when(condition).then(pl.lit(text))
        reasons = original.select(reason.otherwise(None).cast(pl.String).alias("reason")).to_series()
        quarantine = original.filter(bad_mask).with_columns(reasons.filter(bad_mask).alias(QUARANTINE_REASON))
        keep = ~bad_mask
        frame, ts, arrival = original.filter(keep), ts.filter(keep), arrival.filter(keep)
        keys = keys.filter(keep) if keys.width else keys
    else:
        quarantine = original.head(0).with_columns(pl.lit(None, dtype=pl.String).alias(QUARANTINE_REASON))
    vectors = (frame.select([pl.col(v).cast(pl.Float64) for v in cfg.vectors]).to_numpy()
               if cfg.vectors else None)
    payload = frame.select(payload_columns(cfg, frame.columns))
    return Normalised(ts=ts.to_numpy(), arrival=arrival.to_numpy(), keys=keys,
                      payload=payload, quarantine=quarantine, vectors=vectors,
                      kept=(~bad_mask).to_numpy() if quarantine.height else None)


def reason_counts(quarantine: pl.DataFrame) -> dict[str, int]:
    """Quarantined rows per ``reason``."""
    if not quarantine.height:
        return {}
    counts = quarantine["reason"].value_counts()
    return dict(zip(counts["reason"].to_list(), counts["count"].to_list()))


def check_quarantine(cfg: StreamConfig, rows: int, reasons: dict[str, int], max_share: float) -> None:
    """Refuse a stream (or a day's partition of one) whose rows are all, or more
    than ``max_share`` of them, quarantined: such a run would "succeed" on what
    is left and hide the loss (docs/semantics.md, "Bad input").

    ``rows``: rows read, valid and quarantined.
    """
    bad = sum(reasons.values())
    if not bad or (bad < rows and bad <= max_share * rows):
        return
    why = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda item: (-item[1], item[0])))
    hint = ""
    if any(r.endswith("out of range") for r in reasons) and cfg.unit is not None:
        hint = f"; times are read in {cfg.unit}: check --unit"
    if bad == rows:
        raise InputError(f"{stream_where(cfg)}: all {rows} rows quarantined ({why}); nothing of the stream "
                         f"is left to join{hint}")
    raise InputError(f"{stream_where(cfg)}: {bad} of {rows} rows ({bad / rows:.0%}) quarantined ({why}), more than "
                     f"--max-quarantine {max_share:g}{hint}; fix the input or raise --max-quarantine")


def column_bits(arr: pa.Array | pa.ChunkedArray) -> int:
    """The Arrow bits of one column for the memory estimate (``row_bytes``), the same
    however the column is chunked -- so a reader that sees it batch by batch (the Spark
    read's ``mapInArrow``) adds up the whole column's number: per value its validity
    bit plus its fixed width (a boolean: 1 bit) or, for strings and binaries, its offset
    (32 bits; 64 for the large types) and its bytes (the offsets' span); a dictionary
    column as its values.  ``Table.nbytes`` instead depends on the chunks (a validity
    bitmap per chunk, present or not as the reader chose, a dictionary per chunk).
    Nested types: ``nbytes`` (the Spark read refuses them).  No ``pyarrow.compute``
    (its import costs every run ~0.1 s) but for dictionary columns."""
    if isinstance(arr, pa.ChunkedArray):
        return sum(column_bits(c) for c in arr.chunks)
    t = arr.type
    if pa.types.is_dictionary(t):
        arr, t = arr.dictionary_decode(), t.value_type
    n = len(arr)
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    if large or pa.types.is_string(t) or pa.types.is_binary(t):
        if not n:
            return 0
        offsets = np.frombuffer(arr.buffers()[1], np.int64 if large else np.int32)
        data = int(offsets[arr.offset + n]) - int(offsets[arr.offset])
        return n * (1 + (64 if large else 32)) + 8 * data
    try:
        width = t.bit_width
    except ValueError:   # not fixed width
        return 8 * arr.nbytes
    return n * (1 + width)


def row_bytes_of(bits: int, rows: int) -> float:
    """``LoadedStream.row_bytes`` from the columns' :func:`column_bits` and the rows read."""
    return bits / (8 * rows) if rows else 0.0


def load_stream(cfg: StreamConfig, max_quarantine: float | None = MAX_QUARANTINE,
                payload: bool = True) -> LoadedStream:
    """Read, validate and normalise one stream (see module docstring);
    ``max_quarantine=None``: no :func:`check_quarantine` (``inspect``).

    ``payload=False``: no requested output reads the payload (a run without
    results or ``--where``), so only the configured columns are read where
    :func:`unread_columns` allows it, and ``payload`` holds only the key
    and vector columns; ``row_bytes`` is the same.  If a row is quarantined the whole
    file is read after all: the quarantine keeps every column."""
    unread = None if payload else unread_columns(cfg)
    table, files = read_table(cfg, unread[0] if unread else None)
    part = normalise(table, cfg)
    if unread and part.quarantine.height:
        unread = None
        table, files = read_table(cfg)
        part = normalise(table, cfg)
    elif unread:   # no row quarantined: the empty quarantine still has every column of the file
        empty = pl.from_arrow(pa.Table.from_batches([], schema=unread[2]))   # not empty_table(): it imports pandas
        part.quarantine = empty.with_columns(pl.lit(None, dtype=pl.String).alias(QUARANTINE_REASON))
    if max_quarantine is not None:
        check_quarantine(cfg, table.num_rows, reason_counts(part.quarantine), max_quarantine)
    bits = sum(column_bits(c) for c in table.columns) + (unread[1] * table.num_rows if unread else 0)
    row_bytes = row_bytes_of(bits, table.num_rows)
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
        kept=part.kept,
    )


def file_of_rows(stream: LoadedStream) -> np.ndarray:
    """Index in ``stream.files`` of each row's file (rows are read in file order;
    per-file row counts from the Parquet footers, quarantined rows left out)."""
    counts = []
    for f in stream.files:
        try:
            counts.append(pq.read_metadata(f).num_rows)
        except (pa.ArrowInvalid, OSError) as exc:
            raise unreadable_error(str(f), stream.name, exc) from None
    index = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    return index if stream.kept is None else index[stream.kept]


def with_file_batches(streams: list[LoadedStream], policy: PolicySpec) -> tuple[list[LoadedStream], PolicySpec]:
    """``spark-ss --trigger-files N``: every row arrives when the micro-batch that
    reads its file runs (:func:`~streamjoin.pipelines.policies.spark_ss.file_arrivals`:
    files in order of modification time, then path, N per batch); the policy gets
    the batches' times.  Returns the streams with those arrivals and the policy."""
    mtimes = [[f.stat().st_mtime_ns // 1000 for f in s.files] for s in streams]
    arrivals, times = file_arrivals([file_of_rows(s) for s in streams], mtimes,
                                    [[str(f) for f in s.files] for s in streams], policy.trigger_files)
    return ([replace(s, arrival=a) for s, a in zip(streams, arrivals)],
            replace(policy, batch_times_us=tuple(int(t) for t in times)))


def common_key_dtypes(streams: list[LoadedStream]) -> list[pl.DataType]:
    """One dtype per key position that every stream's key column casts to
    without changing a value, or :class:`InputError` (io/keys.py)."""
    return common_key_types([(s.config, key_facts(s.keys)) for s in streams])


def single_file_schema(cfg: StreamConfig) -> pa.Schema | None:
    """The Parquet schema of a stream given as one file (no data read); None: not one file."""
    one = single_file(cfg.path, resolve_files(cfg.path, cfg.name))
    if one is None:
        return None
    try:
        return pq.read_schema(one)
    except (pa.ArrowInvalid, OSError) as exc:
        raise unreadable_error(cfg.path, cfg.name, exc) from None


def input_columns(cfg: StreamConfig) -> list[str]:
    """The stream's column names, from its Parquet schema (no data read)."""
    schema = single_file_schema(cfg)
    return (schema if schema is not None else open_dataset(cfg.path, cfg.name)[0].schema).names


def payload_needed(run) -> bool:
    """Whether a run (its ``RunConfig``) reads the inputs' payload (``payload`` of :func:`load_all`,
    :func:`.chunks.read_chunks`): for the results or ``--where``, on either engine."""
    return run.write_results or run.where is not None


def load_all(configs: list[StreamConfig], max_quarantine: float = MAX_QUARANTINE,
             payload: bool = True) -> list[LoadedStream]:
    """Load every stream and align key dtypes across streams (``payload``:
    :func:`load_stream`).

    Output columns that would collide (:func:`~.columns.check_output_columns`)
    are refused from the schemas, before any data is read."""
    check_output_columns([(c, input_columns(c)) for c in configs])
    streams = [load_stream(c, max_quarantine, payload) for c in configs]
    dtypes = common_key_dtypes(streams)
    for s in streams:
        s.keys = cast_keys(s.keys, dtypes)
    return streams


# ---------------------------------------------------------------------------
# quarantined rows' arrival times (the recall-target controllers' bad-rows trigger)
# ---------------------------------------------------------------------------


def bad_arrivals_of(streams, reason: str | None = None) -> list[np.ndarray]:
    """Per loaded stream, arrival times (us) of its quarantined rows that have one
    (only those quarantined for ``reason``, when given: the ``bad_rows_reason`` trigger).

    An online operator sees a bad row when it arrives; rows whose arrival
    itself is missing (null) or out of range carry no time and are left out.
    The column's unit is the whole column's, checked by the load.
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
        # the whole column passed the load's checks (type, int64 range, unit): no unit check on
        # this subset, which could look like another unit on its own; an error here is a bug, not
        # bad input, and is not swallowed
        values = to_micros(pa.chunked_array([q[column].to_arrow()]), column, s.config.unit, s.config.path,
                           check_unit=False)
        out.append(np.sort(pl_to_numpy(values)))
    return out


def pl_to_numpy(values) -> np.ndarray:
    series = pl.Series(values) if not isinstance(values, pl.Series) else values
    return series.cast(pl.Int64).drop_nulls().to_numpy()
