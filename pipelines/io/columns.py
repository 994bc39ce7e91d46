"""The columns streamjoin writes, and input columns that would collide with them.

``results.parquet`` has, per stream ``s`` in join order, the columns
``s_<field>`` for each of :data:`RESULT_FIELDS` (a nightly partition:
:data:`NIGHTLY_RESULT_FIELDS`, with the row's day first), then ``s_<column>``
for every payload column (every input column but the ``ts`` and ``arrival``
ones), and last :data:`RUN_COLUMNS`.  ``quarantine/<s>.parquet`` holds the
stream's rows whole plus :data:`QUARANTINE_REASON`.

:func:`check_output_columns` refuses, from the input's schema alone (before
any data is read), every input that would make two of those columns share a
name: a payload column named like a field (``row`` -> ``s_row`` twice), an
input column named ``reason``, or two streams whose prefixed names meet
(stream ``a``'s ``b_x`` and stream ``a_b``'s ``x`` are both ``a_b_x``; stream
``emit``'s ``us`` is ``emit_us``).  Names are compared ignoring case, as
stream names are: Spark (``spark.sql.caseSensitive=false``, its default),
Hive and DuckDB read ``a_B_x`` and ``a_b_x`` as one column, and the Spark
engine's native path failed on them after the whole join.  Without the check
such a run crashed after the whole join or dropped a column silently.
streamjoin's working columns while loading (times, keys, reasons) live in
frames of their own, never among the user's columns, so no other name is
reserved (spark-ss's ``batch`` results column has no ``_``, so no
``<stream>_<column>`` meets it).  The same check runs for every engine and
path, from the schemas: ``io.load.load_all`` (in memory, local and Spark
alike), ``io.chunks.survey`` (bounded memory) and the nightly partitions.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..base.errors import InputError
from ..config.settings import StreamConfig

#: per stream ``s``, results columns ``s_row``, ``s_ts_us``, ``s_arrival_us``
RESULT_FIELDS = ("row", "ts_us", "arrival_us")
#: a nightly partition's results also carry each member's day: ``s_date`` first
NIGHTLY_RESULT_FIELDS = ("date", *RESULT_FIELDS)
#: results columns of the run itself, after every stream's
RUN_COLUMNS = ("emit_us", "latency_us")
#: the column a quarantine file adds to the stream's own
QUARANTINE_REASON = "reason"

_WHAT = {"row": "row number", "ts_us": "event time", "arrival_us": "arrival time", "date": "day",
         "emit_us": "emission time", "latency_us": "latency"}


def payload_columns(cfg: StreamConfig, columns: Sequence[str]) -> list[str]:
    """The input columns that reach the results as ``<stream>_<column>``: all but ``ts`` and ``arrival``."""
    times = {cfg.ts, cfg.arrival}
    return [c for c in columns if c not in times]


def reserved_text(fields: Sequence[str] = RESULT_FIELDS) -> str:
    """How an error message lists the input column names streamjoin reserves."""
    return f"input columns may not be named {', '.join(fields)} (results) or {QUARANTINE_REASON} (quarantine)"


def check_output_columns(streams: Sequence[tuple[StreamConfig, Sequence[str]]], *,
                         fields: Sequence[str] = RESULT_FIELDS) -> None:
    """Refuse inputs whose results or quarantine columns would share a name.

    Args:
        streams: per stream, its config and its input column names (the
            Parquet schema, hive partition columns included).
        fields: the per-stream generated results fields
            (:data:`NIGHTLY_RESULT_FIELDS` for a nightly run).
    """
    rule = reserved_text(fields)
    for cfg, columns in streams:
        where = f"{cfg.path} (stream {cfg.name!r})"
        clash = next((c for c in columns if c.lower() == QUARANTINE_REASON), None)
        if clash is not None:
            raise InputError(f"{where}: column {clash!r} would clash with the {QUARANTINE_REASON!r} "
                             f"column streamjoin adds to quarantine/{cfg.name}.parquet; {rule}: rename the column")
        for c in payload_columns(cfg, columns):
            if c in fields:
                written = f"{cfg.name}_{c}"
                raise InputError(f"{where}: column {c!r} would be written as {written!r}, which streamjoin "
                                 f"writes itself (the {_WHAT[c]}); {rule}: rename the column")
    owner: dict[str, tuple[str, str]] = {}   # lower-cased results column -> (its name, what fills it)

    def claim(column: str, origin: str) -> None:
        # every claim is a distinct (column, origin): a second claim on a name is a collision
        first = owner.setdefault(column.lower(), (column, origin))
        if first == (column, origin):
            return
        name, held = first
        if name == column:
            raise InputError(f"results column {column!r} would hold both {held} and {origin}; "
                             f"rename a stream or the column")
        raise InputError(f"results columns {name!r} ({held}) and {column!r} ({origin}) differ only in case, "
                         f"and Spark, Hive and DuckDB read column names ignoring case; rename a stream or the column")

    for cfg, columns in streams:
        for f in fields:
            claim(f"{cfg.name}_{f}", f"stream {cfg.name!r}'s {_WHAT[f]}")
        for c in payload_columns(cfg, columns):
            claim(f"{cfg.name}_{c}", f"column {c!r} of stream {cfg.name!r} ({cfg.path})")
    for c in RUN_COLUMNS:
        claim(c, f"streamjoin's {_WHAT[c]}")


__all__ = ["NIGHTLY_RESULT_FIELDS", "QUARANTINE_REASON", "RESULT_FIELDS", "RUN_COLUMNS", "check_output_columns",
           "payload_columns", "reserved_text"]
