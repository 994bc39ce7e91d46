"""Count windows ``S_i[N]`` (seed 000: "the last 1000 frames") in a run's settings.

A stream's window is a duration (``250ms``) or a tuple count: ``--window
1000tuples``, ``window = "1000 tuples"`` (``1 tuple``), the stream's last
``N`` arrivals (docs/semantics.md, "Count windows").  Count windows run on
``streamjoin run --engine local --policy static`` in memory; a run with one
and neither ``--engine`` nor ``--router`` (nor the config's ``run`` table)
choosing Spark runs on the local engine; everything else (Spark, a router,
another policy or command, bounded memory, capacity, flow control) is
refused here in one line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from ..base.errors import InputError
from ..base.timeunits import format_duration
from .choice import spark_choice

#: a count window, ``1000 tuples`` / ``1000tuples`` / ``1 tuple``
COUNT_WINDOW = re.compile(r"\s*(\d+)\s*tuples?\s*", re.IGNORECASE)
#: the largest ``N`` of a count window: arrival indexes are int64 (no input has
#: 2**62 tuples, so any ``N`` this large would mean "the whole stream" anyway)
MAX_COUNT = 2**62


def window_fields(value: Any, what: str, duration: Callable[[Any, str], int]) -> dict[str, Any]:
    """A window from a flag or the TOML as ``StreamConfig`` fields: ``window_us``
    (``duration(value, what)``; 0 for a count) and ``window_count`` (``1 <= N <= 2**62``, or None)."""
    m = COUNT_WINDOW.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        try:
            return {"window_us": duration(value, what), "window_count": None}
        except InputError as exc:   # say the other kind too
            raise InputError(f"{exc}; or a count window, e.g. 1000tuples") from None
    if int(m.group(1)) < 1:
        raise InputError(f"bad {what} {value!r}: a count window holds at least 1 tuple")
    if int(m.group(1)) > MAX_COUNT:
        raise InputError(f"bad {what} {value!r}: a count window holds at most 2**62 tuples "
                         f"(a count at least the stream's size keeps the whole stream)")
    return {"window_us": 0, "window_count": int(m.group(1))}


def window_counts(streams: Sequence[Any]) -> tuple[int | None, ...] | None:
    """``N_i`` of every stream with a count window (``None`` for a duration
    window); ``None`` when no stream has one."""
    counts = tuple(s.window_count for s in streams)
    return counts if any(c is not None for c in counts) else None


def window_text(stream: Any) -> str:
    """A stream's window as a user writes it: ``"1000 tuples"`` or a duration (``"250ms"``)."""
    if stream.window_count is not None:
        return f"{stream.window_count} tuple{'s' if stream.window_count != 1 else ''}"
    return format_duration(stream.window_us)


def static_retention(streams: Sequence[Any]) -> tuple[int | None, ...]:
    """Policy ``static``'s retention per stream: a count window is no event-time
    window, so retention does not apply to it (0 unless given)."""
    return tuple(0 if s.window_count is not None and s.retention_us is None else s.retention_us for s in streams)


def count_windows_engine(streams: Sequence[Any], policy: str, engine: str, flags: Any, run: dict[str, Any],
                         output_kind: str, check_out: bool, chunk_rows: int | None, capacity: Any, flow: Any,
                         router: str = "none") -> str:
    """The engine of a run (the local one for count windows unless ``flags``, the
    config's ``run`` table or ``router`` chose one: config/choice.py); a
    one-line error for whatever count windows do not run with (``check_out=False``:
    a nightly run, settings.resolve)."""
    counted = [s for s in streams if s.window_count is not None]
    if not counted:
        return engine
    nightly = not check_out
    chosen = spark_choice(flags, run, router)
    if engine == "spark" and chosen is None:
        engine = "local"   # the default for count windows, not the user's choice
    s = counted[0]
    refusal = ("a nightly run (--date, backfill)" if nightly else
               f"`streamjoin {output_kind}`" if output_kind != "run" else
               f"--policy {policy}" if policy != "static" else
               f"--router {router}" if router != "none" else
               (chosen or f"--engine {engine}") if engine != "local" else
               f"--chunk-rows {chunk_rows}" if chunk_rows else
               "--capacity" if capacity is not None else
               "--flow-control" if flow is not None else None)
    if refusal is not None:
        raise InputError(f"--window {s.window_count}tuples (stream {s.name!r}): count windows run with "
                         f"`streamjoin run --engine local --policy static` (in memory) only, not {refusal}")
    return engine
