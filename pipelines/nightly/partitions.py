"""Daily input partitions: which files make up day D, and the replay a daily run sees.

A *partitioned* stream's ``path`` is either

* a template with ``{date}``: ``path = "data/ball/date={date}/"`` (a
  directory, a file or a glob once ``{date}`` is filled in), or
* a hive root: ``path = "data/ball"`` holding ``date=YYYY-MM-DD/``
  directories.

**The day of a tuple is the UTC date of its partition**, and partitions must
be cut by *arrival* time: every tuple of partition D has ``arrival`` in
``[D 00:00, D+1 00:00)`` UTC (integer times count from the Unix epoch).  This
is what an ingesting system writes ("what landed on day D") and it is what
makes daily runs exact: the replay order of days D-1 and D together is the
replay order of D-1 followed by that of D, so a decision made at an index of
day D (which, SPEC §4, only uses indexes before it) needs only history.
:func:`load_day` checks the rule and refuses a partition that breaks it
(:class:`~streamjoin.pipelines.base.errors.InputError`, exit 2).

A stream declared ``optional`` (``optional = true`` in its ``[[stream]]``,
``--optional-stream NAME``) may have no partition for a day: that day
replays it empty (its columns taken from any other day's partition).  Any
other stream without a partition for the day stops the day (exit 2).

The replay of a daily run for day D is the **lookback** (tuples of the days
before D with ``arrival >= D - lookback``, in their partitions' order) followed
by all of day D.  Rows keep their identity across runs: ``(day, row in that
day's partition)``, numbered after quarantine, in sorted-file order.
"""

from __future__ import annotations

import datetime as dt
import glob as globmod
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from ..io.chunks import filter_rows, take_rows
from ..io.columns import NIGHTLY_RESULT_FIELDS, check_output_columns
from ..config.settings import MAX_QUARANTINE, StreamConfig
from ..base.errors import InputError
from ..io.load import LoadedStream, common_key_dtypes, input_columns, load_stream, normalise
from .options import day_range, parse_day  # noqa: F401  (defined there: the CLI's options read them without the loader)

DAY_US = 86_400_000_000
_EPOCH = dt.date(1970, 1, 1)
_HIVE_RE = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")


# ----------------------------------------------------------------------------
# days
# ----------------------------------------------------------------------------


def day_start_us(day: dt.date) -> int:
    """Microseconds since the Unix epoch at 00:00 UTC of ``day``."""
    return (day - _EPOCH).days * DAY_US


def day_number(day: dt.date) -> int:
    """Days since the Unix epoch (Arrow's ``date32``)."""
    return (day - _EPOCH).days


def lookback_days(day: dt.date, lookback_us: int) -> list[dt.date]:
    """The days before ``day`` that ``[D - lookback, D)`` touches, oldest first."""
    if lookback_us <= 0:
        return []
    n = -(-lookback_us // DAY_US)  # ceil
    return [day - dt.timedelta(days=i) for i in range(n, 0, -1)]


# ----------------------------------------------------------------------------
# paths
# ----------------------------------------------------------------------------


def partition_path(stream_path: str, day: dt.date) -> str:
    """Where ``day``'s partition of a stream lives (see the module docstring)."""
    if "{date}" in stream_path:
        return stream_path.replace("{date}", day.isoformat())
    return str(Path(stream_path) / f"date={day.isoformat()}")


def partition_files(stream: StreamConfig, day: dt.date) -> list[Path] | None:
    """The data files of ``day``'s partition, sorted; ``None`` if there is none.

    Hidden and ``_``-prefixed files (``_SUCCESS``, ``.crc``) are not data.
    """
    path = partition_path(stream.path, day)
    if any(ch in path for ch in "*?["):
        files = sorted(Path(p) for p in globmod.glob(path, recursive=True) if Path(p).is_file())
        return files or None
    p = Path(path)
    if p.is_dir():
        return sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith((".", "_")))
    if p.is_file():
        return [p]
    return None


def available_days(stream: StreamConfig) -> list[dt.date]:
    """Days for which the stream has a partition (for ``validate`` and ``backfill``)."""
    path = stream.path
    days: set[dt.date] = set()
    if "{date}" in path:
        pattern = re.compile(re.escape(path).replace(re.escape("{date}"), r"(\d{4}-\d{2}-\d{2})"))
        for p in globmod.glob(path.replace("{date}", "*")):
            m = pattern.match(p) or pattern.match(p.rstrip("/") + ("/" if path.endswith("/") else ""))
            if m:
                try:
                    days.add(dt.date.fromisoformat(m.group(1)))
                except ValueError:
                    pass
    else:
        root = Path(path)
        if root.is_dir():
            for child in root.iterdir():
                m = _HIVE_RE.match(child.name)
                if m and child.is_dir():
                    try:
                        days.add(dt.date.fromisoformat(m.group(1)))
                    except ValueError:
                        pass
    return sorted(days)


def is_partitioned(stream: StreamConfig) -> bool:
    return "{date}" in stream.path or bool(available_days(stream))


# ----------------------------------------------------------------------------
# loading a day with its lookback
# ----------------------------------------------------------------------------


@dataclass
class InputFile:
    """One file a daily run reads (recorded in the manifest)."""

    stream: str
    day: dt.date
    role: str  # "day" | "lookback"
    path: Path


@dataclass
class DayStreams:
    """The replay input of a run over ``days`` (one or more consecutive days).

    ``streams[k]`` holds the lookback rows then the rows of each day, in order;
    ``day_of_row[k]`` (days since the epoch) and ``row_in_day[k]`` give every
    row its stable identity.  ``streams[k].quarantine`` holds only the
    quarantined rows of the run's own days (the lookback's belong to their own
    day), as read; ``quarantine_day[k]`` gives each one's day (kept apart, so
    an input column named ``date`` is written back untouched).
    """

    days: list[dt.date]
    lookback_us: int
    streams: list[LoadedStream]
    day_of_row: list[np.ndarray]
    row_in_day: list[np.ndarray]
    lookback_rows: list[int]
    files: list[InputFile]
    missing_lookback: list[str]
    quarantine_day: list[np.ndarray]

    def quarantine_of(self, k: int, day: dt.date) -> pl.DataFrame:
        """The quarantined rows of stream ``k``'s partition of ``day``."""
        return filter_rows(self.streams[k].quarantine, self.quarantine_day[k] == day_number(day))

    @property
    def start_us(self) -> int:
        return day_start_us(self.days[0])

    @property
    def lookback_start_us(self) -> int:
        return self.start_us - self.lookback_us


def inputs_of_days(streams: list[StreamConfig], days: list[dt.date], lookback_us: int) -> tuple[list[InputFile], list[str], list[str]]:
    """Files a run over ``days`` would read, without reading them.

    Returns ``(files, missing_days, missing_lookback)``: a stream with no
    partition for one of ``days`` is listed in ``missing_days`` (the run
    cannot go ahead) unless it is ``optional`` (replayed empty); a missing
    lookback partition only weakens exactness (the first day of a data set
    has none).
    """
    files: list[InputFile] = []
    missing: list[str] = []
    missing_lb: list[str] = []
    for s in streams:
        for d in lookback_days(days[0], lookback_us):
            found = partition_files(s, d)
            if found is None:
                missing_lb.append(f"{s.name}:{d}")
            else:
                files += [InputFile(s.name, d, "lookback", f) for f in found]
        for d in days:
            found = partition_files(s, d)
            if not found and not s.optional:
                missing.append(f"stream {s.name!r}: {partition_path(s.path, d)}")
            elif not found:
                continue
            else:
                files += [InputFile(s.name, d, "day", f) for f in found]
    return files, missing, missing_lb


def missing_partition(days: str, missing: str) -> InputError:
    """A day a stream has no partition for: say how to declare a stream that may be empty."""
    return InputError(f"no input partition for {days}: {missing}; a stream that may have no data on some days "
                      f"can be declared optional (optional = true in its [[stream]], or --optional-stream NAME)")


def check_day_columns(configs: list[StreamConfig], days: list[dt.date]) -> None:
    """The output-column check of a nightly run (io/columns.py: results carry
    ``<stream>_date``), from the schemas of the partitions of ``days`` that
    exist: each partition on its own (the error names it), then the streams
    together."""
    streams = []
    for cfg in configs:
        columns: dict[str, None] = {}
        for d in days:
            if partition_files(cfg, d):
                part = replace(cfg, path=partition_path(cfg.path, d))
                names = input_columns(part)
                check_output_columns([(part, names)], fields=NIGHTLY_RESULT_FIELDS)
                columns.update(dict.fromkeys(names))
        streams.append((cfg, list(columns)))
    check_output_columns(streams, fields=NIGHTLY_RESULT_FIELDS)


def _load_partition(cfg: StreamConfig, day: dt.date, max_quarantine: float) -> LoadedStream:
    path = partition_path(cfg.path, day)
    loaded = load_stream(replace(cfg, path=path), max_quarantine)
    start = day_start_us(day)
    outside = (loaded.arrival < start) | (loaded.arrival >= start + DAY_US)
    if outside.any():
        first = int(np.flatnonzero(outside)[0])
        what = cfg.arrival or cfg.ts
        raise InputError(
            f"{path} (stream {cfg.name!r}): {int(outside.sum())} rows have {what} outside {day} UTC "
            f"(first: row {first}, {what} = {int(loaded.arrival[first])} us since the epoch); "
            f"daily partitions must be cut by arrival time"
        )
    return loaded


def _empty_partition(cfg: StreamConfig, day: dt.date) -> LoadedStream:
    """An optional stream's missing day: no rows, the columns of another day's partition."""
    template = next((files[0] for d in available_days(cfg) if (files := partition_files(cfg, d))), None)
    if template is None:
        raise InputError(f"stream {cfg.name!r} is optional but has no partition on any day "
                         f"({partition_path(cfg.path, day)} for {day}): nothing to take its columns from")
    try:
        schema = pq.read_schema(template)
    except (OSError, ValueError) as exc:
        raise InputError(f"{template} (stream {cfg.name!r}): not a readable Parquet file ({exc})") from None
    part = normalise(schema.empty_table(), cfg)
    return LoadedStream(config=cfg, ts=part.ts, arrival=part.arrival, keys=part.keys, payload=part.payload,
                        quarantine=part.quarantine, files=[], row_bytes=0.0, vectors=part.vectors)


def _concat(cfg: StreamConfig, parts: list[tuple[LoadedStream, np.ndarray, dt.date]]) -> tuple[LoadedStream, np.ndarray, np.ndarray]:
    """Concatenate per-day parts (each with a row mask) into one stream."""
    ts, arrival, keys, payload, files, day_no, row_no = [], [], [], [], [], [], []
    for loaded, mask, day in parts:
        idx = np.flatnonzero(mask)
        ts.append(loaded.ts[idx])
        arrival.append(loaded.arrival[idx])
        keys.append(take_rows(loaded.keys, idx))
        payload.append(take_rows(loaded.payload, idx))
        files += loaded.files
        day_no.append(np.full(idx.shape[0], day_number(day), dtype=np.int32))
        row_no.append(idx.astype(np.int64))
    try:
        key_frame = pl.concat(keys, how="vertical_relaxed") if keys[0].width else pl.DataFrame()
        payload_frame = pl.concat(payload, how="diagonal_relaxed")
    except (pl.exceptions.SchemaError, pl.exceptions.ComputeError, pl.exceptions.InvalidOperationError) as exc:
        raise InputError(f"stream {cfg.name!r}: partitions of different days have incompatible columns ({exc})") from None
    last = parts[-1][0]
    vectors = [getattr(p, "vectors", None) for p, _, _ in parts]
    extra = {}
    if any(v is not None for v in vectors):  # distance-predicate columns
        extra["vectors"] = np.concatenate([v[np.flatnonzero(m)] for v, (_, m, _) in zip(vectors, parts)])
    merged = LoadedStream(
        config=cfg,
        ts=np.concatenate(ts),
        arrival=np.concatenate(arrival),
        keys=key_frame,
        payload=payload_frame,
        quarantine=last.quarantine,
        files=files,
        row_bytes=last.row_bytes,
        **extra,
    )
    return merged, np.concatenate(day_no), np.concatenate(row_no)


def load_days(configs: list[StreamConfig], days: list[dt.date], lookback_us: int,
              max_quarantine: float = MAX_QUARANTINE) -> DayStreams:
    """Load ``days`` (consecutive) of every stream, plus the lookback before them.

    Raises :class:`InputError` if a stream has no partition for one of
    ``days``, a partition breaks the arrival-date rule, or quarantines more
    than ``max_quarantine`` of its rows (:func:`~streamjoin.pipelines.load.check_quarantine`).
    """
    files, missing, missing_lb = inputs_of_days(configs, days, lookback_us)
    if missing:
        raise missing_partition(str(days[0]) if len(days) == 1 else f"{days[0]}..{days[-1]}", missing[0])
    check_day_columns(configs, lookback_days(days[0], lookback_us) + list(days))
    start = day_start_us(days[0])
    lb_start = start - lookback_us
    streams, day_of_row, row_in_day, lb_rows, quarantine_day = [], [], [], [], []
    for cfg in configs:
        parts = []
        for d in lookback_days(days[0], lookback_us):
            if partition_files(cfg, d) is None:
                continue
            loaded = _load_partition(cfg, d, max_quarantine)
            parts.append((loaded, loaded.arrival >= lb_start, d))
        n_lb = sum(int(m.sum()) for _, m, _ in parts)
        quarantines, q_days = [], []
        for d in days:
            if cfg.optional and not partition_files(cfg, d):
                loaded = _empty_partition(cfg, d)
            else:
                loaded = _load_partition(cfg, d, max_quarantine)
            parts.append((loaded, np.ones(loaded.rows, dtype=bool), d))
            quarantines.append(loaded.quarantine)
            q_days.append(np.full(loaded.quarantine.height, day_number(d), dtype=np.int32))
        merged, day_no, row_no = _concat(cfg, parts)
        merged.quarantine = pl.concat(quarantines, how="diagonal_relaxed")
        quarantine_day.append(np.concatenate(q_days))
        streams.append(merged)
        day_of_row.append(day_no)
        row_in_day.append(row_no)
        lb_rows.append(n_lb)
    dtypes = common_key_dtypes(streams)
    for s in streams:
        if dtypes:
            s.keys = s.keys.with_columns([pl.col(f"__key{i}").cast(dt_) for i, dt_ in enumerate(dtypes)])
    return DayStreams(days=list(days), lookback_us=lookback_us, streams=streams, day_of_row=day_of_row,
                      row_in_day=row_in_day, lookback_rows=lb_rows, files=files, missing_lookback=missing_lb,
                      quarantine_day=quarantine_day)
