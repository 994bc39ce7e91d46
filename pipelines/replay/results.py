"""The results frame: the rows of ``results.parquet`` (and of a nightly partition).

One row per emitted combination.  Columns, per stream ``s`` in stream order:
``s_date`` (nightly partitions only), ``s_row``, ``s_ts_us``,
``s_arrival_us`` and every payload column as ``s_<col>``; then ``emit_us``
and ``latency_us``; with ``--policy spark-ss`` also ``batch``, the micro-batch
(Spark's batch id) that emitted the row.  An outer join's null-padded rows
(``--join left|right|full``) carry nulls in the other stream's columns.  Rows are in results order: emission time, then the
arrival index of the last member, then the members' rows
(:func:`~streamjoin.pipelines.replay.emit.emission_order`).

Every writer of results builds its rows here:

* :func:`results_frame` -- the rows of given combinations, put in results
  order (``streamjoin run`` in memory, either engine; a nightly day);
* :func:`emitted_frame` -- :func:`results_frame` of the emitted combinations
  of a replay's truth and emission, with an outer join's null-padded rows;
  :func:`emitted_row_groups` -- the same rows as consecutive slices, built
  one at a time (``streamjoin run`` writes each as a Parquet row group);
* :func:`frame_at` -- the rows of combinations at given positions, in that
  order (what the two above put in results order);
* :func:`member_columns` and :func:`with_emission` -- the same columns,
  unordered, for the bounded-memory engine's chunks, which
  :func:`result_order` puts in results order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np
import polars as pl

from ..io.chunks import take_rows
from ..io.results_file import ROW_GROUP_ROWS
from .candidates import Combos
from .emit import Emission, emission_order

#: the column a bounded-memory chunk's frame carries for :func:`result_order`
LAST = "__last"

#: rows per slice of :func:`emitted_row_groups` (one Parquet row group each)


class MemberSource(Protocol):
    """A stream the result rows take their members from (a loaded stream)."""

    name: str
    ts: np.ndarray
    arrival: np.ndarray
    payload: pl.DataFrame


def member_columns(name: str, row: np.ndarray, ts: np.ndarray, arrival: np.ndarray, payload: pl.DataFrame,
                   date: np.ndarray | None = None) -> pl.DataFrame:
    """One stream's columns of the results frame, for the members already
    gathered (``payload`` holds their rows, unprefixed); ``date`` (days since
    the epoch) adds ``<name>_date`` first."""
    cols: dict[str, object] = {}
    if date is not None:
        cols[f"{name}_date"] = pl.Series(date, dtype=pl.Int32).cast(pl.Date)
    cols[f"{name}_row"] = row
    cols[f"{name}_ts_us"] = ts
    cols[f"{name}_arrival_us"] = arrival
    return pl.DataFrame(cols).hstack(payload.rename({c: f"{name}_{c}" for c in payload.columns}))


def with_emission(members: pl.DataFrame, emit_us: np.ndarray, latency_us: np.ndarray,
                  last: np.ndarray | None = None) -> pl.DataFrame:
    """``members`` (the streams' columns side by side) with ``emit_us`` and
    ``latency_us``; ``last`` adds :data:`LAST` for :func:`result_order`."""
    cols = [pl.Series("emit_us", emit_us, dtype=pl.Int64), pl.Series("latency_us", latency_us, dtype=pl.Int64)]
    if last is not None:
        cols.append(pl.Series(LAST, last, dtype=pl.Int64))
    return members.with_columns(*cols)


def results_frame(streams: Sequence[MemberSource], rows: Sequence[np.ndarray], emit_us: np.ndarray,
                  last: np.ndarray, latency_us: np.ndarray, *, row_numbers: Sequence[np.ndarray] | None = None,
                  dates: Sequence[np.ndarray] | None = None, batch: np.ndarray | None = None,
                  keep_last: bool = False, by_last: bool = False) -> pl.DataFrame:
    """The results frame of the given combinations, in results order.

    ``rows[k]`` are the members' rows in ``streams[k]``; ``emit_us``,
    ``last`` (the last member's arrival index) and ``latency_us`` are per
    combination.  ``row_numbers[k]`` maps a row to the number written as
    ``<name>_row`` (default: the row itself); ``dates[k]`` gives each row's
    ``<name>_date``; ``batch`` (spark-ss) each combination's micro-batch;
    ``keep_last`` adds :data:`LAST` (for :func:`result_order`); ``by_last``:
    see :func:`~streamjoin.pipelines.replay.emit.emission_order`.
    """
    order = emission_order(emit_us, last, rows, by_last=by_last)
    return frame_at(order, streams, rows, emit_us, last, latency_us, row_numbers=row_numbers, dates=dates,
                     batch=batch, keep_last=keep_last)


def frame_at(at: np.ndarray, streams: Sequence[MemberSource], rows: Sequence[np.ndarray], emit_us: np.ndarray,
              last: np.ndarray, latency_us: np.ndarray, *, row_numbers: Sequence[np.ndarray] | None = None,
              dates: Sequence[np.ndarray] | None = None, batch: np.ndarray | None = None,
              keep_last: bool = False) -> pl.DataFrame:
    """The results frame of combinations ``at`` (positions), in that order
    (arguments as :func:`results_frame`'s)."""
    parts = []
    for k, s in enumerate(streams):
        idx = rows[k][at]
        row = idx if row_numbers is None else np.asarray(row_numbers[k][idx], dtype=np.int64)
        parts.append(member_columns(s.name, row, s.ts[idx], s.arrival[idx], take_rows(s.payload, idx),
                                    date=None if dates is None else dates[k][idx]))
    frame = with_emission(pl.concat(parts, how="horizontal"), emit_us[at], latency_us[at],
                          last[at] if keep_last else None)
    if batch is not None:   # spark-ss: the micro-batch (Spark's batch id) that emitted the row
        frame = frame.with_columns(pl.Series("batch", batch[at], dtype=pl.Int64))
    return frame


def emitted_frame(combos: Combos, em: Emission, streams: Sequence[MemberSource]) -> pl.DataFrame:
    """The results frame of a whole replay: every emitted combination of ``combos``,
    and an outer join's null-padded rows (``em.outer``), all in results order."""
    return pl.concat(list(emitted_row_groups(combos, em, streams, rows_per_group=None)), how="vertical")


def emitted_row_groups(combos: Combos, em: Emission, streams: Sequence[MemberSource], *,
                       rows_per_group: int | None = ROW_GROUP_ROWS) -> Iterator[pl.DataFrame]:
    """:func:`emitted_frame` as consecutive slices of at most ``rows_per_group``
    rows (``None``: one), each built when asked for -- so a writer can encode
    one while the next is gathered, and the whole frame never exists at once.

    The order is computed once, up front; an outer join (``em.outer``) is one
    slice (its padded rows are merged into the order by a sort of the frame).
    """
    mask = em.emitted
    outer = em.outer
    rows = [r[mask] for r in combos.rows]
    emit_us, last, latency = em.emit_us[mask], em.last[mask], em.latency_us[mask]
    batch = None if em.batch is None else em.batch[mask]
    order = emission_order(emit_us, last, rows, by_last=em.on_arrival)
    if outer is None:
        step = max(len(order), 1) if rows_per_group is None else rows_per_group
        for c0 in range(0, max(len(order), 1), step):
            yield frame_at(order[c0:c0 + step], streams, rows, emit_us, last, latency, batch=batch)
        return
    parts = [frame_at(order, streams, rows, emit_us, last, latency, batch=batch, keep_last=True)]
    for part in outer:   # one per padded stream (both: a full outer join)
        s = streams[part.stream]
        padded = with_emission(member_columns(s.name, part.row, s.ts[part.row], s.arrival[part.row],
                                              take_rows(s.payload, part.row)),
                               part.emit_us, part.latency_us, part.index)
        if part.batch is not None:
            padded = padded.with_columns(pl.Series("batch", part.batch, dtype=pl.Int64))
        parts.append(padded)
    # the other stream's columns: null, of the inner rows' types
    yield result_order(pl.concat(parts, how="diagonal_relaxed"), [x.name for x in streams])


def result_order(frame: pl.DataFrame, names: Sequence[str]) -> pl.DataFrame:
    """A bounded-memory chunk's results in results order (emission time, the
    last member's arrival index, then the members' rows); drops :data:`LAST`.

    Chunks hold disjoint, increasing emission-time ranges (every result a
    chunk emits has its emission index inside the chunk), so ordering each
    chunk orders the whole file.
    """
    return frame.sort(["emit_us", LAST, *[f"{s}_row" for s in names]]).drop(LAST)
