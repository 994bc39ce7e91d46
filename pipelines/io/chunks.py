"""Arrival-time chunks: reading streams piece by piece, in replay order.

The bounded-memory engine (:mod:`~streamjoin.pipelines.engines.bounded`)
never holds a whole stream.  It needs, chunk after chunk, *every* tuple whose
arrival time falls in ``[lo, hi)`` -- and a lower bound on the event times of
everything that arrives later, so it knows which old tuples can still join.

Files are rarely written in arrival order (a sensor log is in event-time
order; the arrival column carries the disorder), so the unit of reading is
the Parquet **row group** (a *piece*).  Two passes:

1. **survey** -- read only the time, key and vector columns of every piece,
   apply the same validation as the in-memory loader (the output-column
   check first, from the schemas; the unit plausibility check on each
   integer time column's whole range, not piece by piece; so quarantined
   rows are not counted), and
   keep, per piece, its valid-row count, its arrival range and small
   per-block summaries ``(max arrival, min ts)`` of its rows in
   arrival order, plus every ``stride``-th arrival time; and the range of
   every key column, for the common key type (io/keys.py).  From those:
   chunk boundaries at arrival-time quantiles (about ``chunk_rows`` tuples
   each; equal arrival times are never split, so the replay order across
   chunks is the global one), and ``future_min_ts[j]``, a lower bound on the
   event time of every tuple arriving in chunk ``j`` or later.

2. **read** -- for chunk ``[lo, hi)`` a piece is decoded (all columns) the
   first time its arrival range reaches ``hi`` and dropped once its last
   arrival is below ``hi``; the chunk takes the piece's rows with arrival in
   ``[lo, hi)``.  A file in (near) arrival or event-time order keeps a few
   pieces open at a time; a file in random order keeps all of them open --
   still exact, but no longer bounded (the report says how many were open).

Row numbers are the in-memory loader's: the index among a stream's valid rows
in file order (``first_row`` of a piece = valid rows in earlier pieces).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import pyarrow as pa

from ..config.settings import StreamConfig
from ..base.errors import InputError
from .columns import check_output_columns
from .keys import KeyFacts, common_key_types, key_facts, merge_key_facts
from .load import (MAX_QUARANTINE, LoadedStream, Normalised, unreadable_error, check_file_schemas, check_quarantine,
                   column_bits, row_bytes_of,
                   check_time_ranges, configured_columns, integer_time_ranges, merge_time_ranges, normalise,
                   open_dataset, past_int64, reason_counts)

if TYPE_CHECKING:  # only annotations here: open_dataset imports it when a bounded run starts
    import pyarrow.dataset as ds

#: rows per summary block of the survey (a block's min ts bounds its rows)
BLOCK_ROWS = 1024
#: arrival times kept by the survey to place chunk boundaries (upper bound)
SAMPLE_TARGET = 1 << 20


@dataclass
class Piece:
    """One row group of one stream."""

    fragment: ds.Fragment
    first_row: int = 0     # row number of its first valid row
    rows: int = 0          # valid rows
    lo: int = 0            # smallest arrival among valid rows
    hi: int = -1           # largest arrival among valid rows
    quarantined: int = 0   # rows set aside (such a piece is always read whole, for the quarantine file)


@dataclass
class StreamSurvey:
    config: StreamConfig
    pieces: list[Piece]
    rows: int
    quarantined: int
    ts_min: int | None
    ts_max: int | None
    schema: pa.Schema
    columns: list[str]      # what the engine needs when results are not written
    row_bytes: float        # Arrow bytes per row of the first non-empty row group (memory estimates; load.column_bits)


@dataclass
class Survey:
    """What pass 1 learnt: pieces, chunk boundaries, future event-time bounds."""

    streams: list[StreamSurvey]
    bounds: np.ndarray           # chunk j = [bounds[j], bounds[j+1]) in arrival time
    future_min_ts: np.ndarray    # per chunk j: <= every ts arriving in chunks >= j
    key_dtypes: list[pl.DataType]
    chunk_rows: int

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.streams)

    @property
    def chunks(self) -> int:
        return len(self.bounds) - 1

    def arrival_span(self) -> tuple[int | None, int | None]:
        """First and last arrival of the valid rows (``(None, None)`` if there are none)."""
        pieces = [p for s in self.streams for p in s.pieces if p.rows]
        if not pieces:
            return None, None
        return min(p.lo for p in pieces), max(p.hi for p in pieces)


def _fragments(dataset: ds.Dataset) -> list[ds.Fragment]:
    out = []
    for fragment in dataset.get_fragments():
        out.extend(fragment.split_by_row_group())
    return out


def _read(piece: Piece, schema: pa.Schema, cfg: StreamConfig, columns: list[str] | None) -> pa.Table:
    try:
        return piece.fragment.to_table(schema=schema, columns=columns)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise unreadable_error(cfg.path, cfg.name, exc) from None


def _survey_columns(cfg: StreamConfig, schema: pa.Schema) -> list[str]:
    wanted = configured_columns(cfg)
    for c in wanted:
        if c not in schema.names:
            raise InputError(f"{cfg.path} (stream {cfg.name!r}): missing column {c!r} (has: {', '.join(schema.names)})")
    return wanted


def survey(configs: Sequence[StreamConfig], chunk_rows: int, max_quarantine: float = MAX_QUARANTINE) -> Survey:
    """Pass 1 (see the module docstring).  Raises InputError on bad input
    (including the in-memory loader's file-schema and quarantine-share checks)."""
    streams: list[StreamSurvey] = []
    blocks_hi: list[np.ndarray] = []
    blocks_ts: list[np.ndarray] = []
    samples: list[np.ndarray] = []
    key_columns: list[list[KeyFacts]] = []   # per stream, the facts of its key columns over every piece
    datasets = []
    for c in configs:
        dataset, files = open_dataset(c.path, c.name)
        check_file_schemas(c, files)
        datasets.append(dataset)
    check_output_columns([(c, d.schema.names) for c, d in zip(configs, datasets)])
    total = sum(d.count_rows() for d in datasets)
    stride = max(1, -(-total // SAMPLE_TARGET))
    for cfg, dataset in zip(configs, datasets):
        schema = dataset.schema
        columns = _survey_columns(cfg, schema)
        pieces, rows, quarantined = [], 0, 0
        reasons: dict[str, int] = {}
        ts_min, ts_max = None, None
        row_bytes = 0.0
        keys: list[KeyFacts] | None = None
        times = None   # integer time columns' ranges: the unit check is one of the whole column
        for fragment in _fragments(dataset):
            piece = Piece(fragment=fragment, first_row=rows)
            table = _read(piece, schema, cfg, columns)
            ranges = integer_time_ranges(table, cfg)
            times = merge_time_ranges(times, ranges)
            if past_int64(ranges):
                continue   # refused by check_time_ranges below, after the columns before it (the loader's order)
            part = normalise(table, cfg, check_units=False)
            keys = merge_key_facts(keys, key_facts(part.keys))
            piece.quarantined = part.quarantine.height
            quarantined += piece.quarantined
            for reason, n in reason_counts(part.quarantine).items():
                reasons[reason] = reasons.get(reason, 0) + n
            piece.rows = len(part.ts)
            rows += piece.rows
            pieces.append(piece)
            if not piece.rows:
                continue
            if not row_bytes:  # the in-memory loader's estimate, from one whole row group
                whole = _read(piece, schema, cfg, None)
                row_bytes = row_bytes_of(sum(column_bits(c) for c in whole.columns), whole.num_rows)
            order = np.argsort(part.arrival, kind="stable")
            arr, ts = part.arrival[order], part.ts[order]
            piece.lo, piece.hi = int(arr[0]), int(arr[-1])
            starts = np.arange(0, len(arr), BLOCK_ROWS)
            blocks_hi.append(arr[np.minimum(starts + BLOCK_ROWS, len(arr)) - 1])
            blocks_ts.append(np.minimum.reduceat(ts, starts))
            samples.append(arr[(-piece.first_row) % stride::stride])
            lo_ts, hi_ts = int(ts.min()), int(ts.max())
            ts_min = lo_ts if ts_min is None else min(ts_min, lo_ts)
            ts_max = hi_ts if ts_max is None else max(ts_max, hi_ts)
        check_time_ranges(times or {}, cfg)
        check_quarantine(cfg, rows + quarantined, reasons, max_quarantine)
        streams.append(StreamSurvey(cfg, pieces, rows, quarantined, ts_min, ts_max, schema, columns, row_bytes))
        key_columns.append(keys if keys is not None else key_facts(empty_stream(streams[-1]).keys))
    key_dtypes = common_key_types(list(zip(configs, key_columns)))
    sample = np.sort(np.concatenate(samples)) if samples else np.empty(0, np.int64)
    step = max(1, chunk_rows // stride)
    inner = np.unique(sample[step::step])  # boundaries at arrival times: ties never split
    bounds = np.concatenate([[np.iinfo(np.int64).min], inner, [np.iinfo(np.int64).max]]).astype(np.int64)
    future = _future_min_ts(bounds, np.concatenate(blocks_hi) if blocks_hi else np.empty(0, np.int64),
                            np.concatenate(blocks_ts) if blocks_ts else np.empty(0, np.int64))
    return Survey(streams=streams, bounds=bounds, future_min_ts=future, key_dtypes=key_dtypes, chunk_rows=chunk_rows)


def _future_min_ts(bounds: np.ndarray, block_hi: np.ndarray, block_ts: np.ndarray) -> np.ndarray:
    """``out[j]`` = min ts over blocks holding an arrival >= ``bounds[j]``
    (a lower bound on every event time arriving in chunk ``j`` or later)."""
    big = np.iinfo(np.int64).max
    chunks = len(bounds) - 1
    if not len(block_hi):
        return np.full(chunks, big, np.int64)
    order = np.argsort(block_hi)
    hi, ts = block_hi[order], block_ts[order]
    suffix = np.minimum.accumulate(ts[::-1])[::-1]
    first = np.searchsorted(hi, bounds[:chunks], side="left")  # blocks with max arrival >= bound
    return np.where(first < len(hi), suffix[np.minimum(first, len(hi) - 1)], big).astype(np.int64)


def empty_stream(s: StreamSurvey) -> LoadedStream:
    part = normalise(s.schema.empty_table(), s.config)
    return LoadedStream(config=s.config, ts=part.ts, arrival=part.arrival, keys=part.keys, payload=part.payload,
                        quarantine=part.quarantine, files=[], row_bytes=0.0, vectors=part.vectors)


@dataclass
class Batch:
    """The tuples of one stream that arrive in one chunk, in row order."""

    row: np.ndarray
    ts: np.ndarray
    arrival: np.ndarray
    keys: pl.DataFrame
    payload: pl.DataFrame
    vectors: np.ndarray | None

    def __len__(self) -> int:
        return int(self.ts.shape[0])


@dataclass
class _Open:
    piece: Piece
    part: Normalised
    row: np.ndarray


@dataclass
class Chunk:
    index: int
    lo: int
    hi: int
    batches: list[Batch]
    quarantine: list[pl.DataFrame]          # per stream: rows set aside in pieces opened now
    open_pieces: int


def read_chunks(sv: Survey, payload: bool = True) -> Iterator[Chunk]:
    """Pass 2: the chunks in arrival order (see the module docstring).

    ``payload=False``: read only the columns the join needs (results are not
    written and no ``--where``), except for pieces with quarantined rows.
    """
    order = [sorted(range(len(s.pieces)), key=lambda p, s=s: s.pieces[p].lo) for s in sv.streams]
    cursor = [0] * len(sv.streams)
    opened: list[list[_Open]] = [[] for _ in sv.streams]
    for j in range(sv.chunks):
        lo, hi = int(sv.bounds[j]), int(sv.bounds[j + 1])
        batches, quarantine = [], []
        for i, s in enumerate(sv.streams):
            fresh_q = []
            while cursor[i] < len(order[i]) and s.pieces[order[i][cursor[i]]].lo < hi:
                piece = s.pieces[order[i][cursor[i]]]
                cursor[i] += 1
                columns = None if payload or piece.quarantined else s.columns
                part = normalise(_read(piece, s.schema, s.config, columns), s.config, check_units=False)  # surveyed
                if part.quarantine.height:
                    fresh_q.append(part.quarantine)
                if not payload:
                    part.payload = part.payload.select([])
                if len(part.ts) != piece.rows:  # the file changed between the passes
                    raise InputError(f"{s.config.path} (stream {s.config.name!r}): input changed while it was read")
                if piece.rows:
                    opened[i].append(_Open(piece, part, np.arange(piece.first_row, piece.first_row + piece.rows)))
            opened[i].sort(key=lambda o: o.piece.first_row)
            batches.append(_take(opened[i], lo, hi, s))
            opened[i] = [o for o in opened[i] if o.piece.hi >= hi]
            quarantine.append(pl.concat(fresh_q, how="vertical_relaxed") if fresh_q else None)
        yield Chunk(index=j, lo=lo, hi=hi, batches=batches, quarantine=quarantine,
                    open_pieces=sum(len(o) for o in opened))


def filter_rows(frame: pl.DataFrame, mask: np.ndarray) -> pl.DataFrame:
    """``frame`` rows where ``mask``; a frame without columns stays as it is
    (polars frames of width 0 have no height to filter)."""
    return frame.filter(pl.Series(mask)) if frame.width else frame


def take_rows(frame: pl.DataFrame, index: np.ndarray) -> pl.DataFrame:
    """``frame`` rows at ``index`` (see :func:`filter_rows`)."""
    return frame[index] if frame.width else frame


def _take(opened: list[_Open], lo: int, hi: int, s: StreamSurvey) -> Batch:
    rows, ts, arr, keys, payload, vec = [], [], [], [], [], []
    for o in opened:
        mask = (o.part.arrival >= lo) & (o.part.arrival < hi)
        if not mask.any():
            continue
        rows.append(o.row[mask])
        ts.append(o.part.ts[mask])
        arr.append(o.part.arrival[mask])
        keys.append(filter_rows(o.part.keys, mask))
        payload.append(filter_rows(o.part.payload, mask))
        if o.part.vectors is not None:
            vec.append(o.part.vectors[mask])
    if not rows:
        empty = empty_stream(s)
        return Batch(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64), empty.keys,
                     empty.payload, empty.vectors)
    return Batch(
        row=np.concatenate(rows), ts=np.concatenate(ts), arrival=np.concatenate(arr),
        keys=pl.concat(keys, how="vertical"), payload=pl.concat(payload, how="vertical"),
        vectors=np.concatenate(vec) if vec else None,
    )
