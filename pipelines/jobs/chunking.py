"""Whether ``streamjoin run`` replays in bounded memory, and in chunks of how
many tuples (:func:`chunk_rows_for`; the bounded run itself is
:mod:`.chunked`).

Apart from :mod:`.chunked` so that a run in memory imports none of the
bounded engine (issue 21: start-up time).
"""

from __future__ import annotations

from ..base.errors import InputError
from ..config.settings import RunConfig
from ..config.windows import window_counts
from ..io.load import count_rows

#: inputs above this many rows run in bounded memory unless --chunk-rows says otherwise
AUTO_ROWS = 6_000_000
#: tuples per chunk when the size is chosen automatically
DEFAULT_CHUNK_ROWS = 1_000_000


def chunk_rows_for(cfg: RunConfig) -> int | None:
    """Tuples per chunk for this run, or ``None`` for the in-memory engine."""
    # --capacity and count windows: in memory
    if cfg.chunk_rows == 0 or cfg.engine != "local" or cfg.capacity is not None or window_counts(cfg.streams) is not None:
        return None
    p = cfg.policy
    if p.in_memory_only is not None:
        # the bounded engine emulates spark-ss's inner join on a trigger interval, flink without
        # idleness, flink-sql
        if cfg.chunk_rows is not None:
            raise InputError(f"--chunk-rows: {p.name} with {p.in_memory_only} runs in memory for now; "
                             "use --chunk-rows 0")
        return None
    if cfg.chunk_rows is not None:
        if cfg.policy.adaptive:
            raise InputError(f"--chunk-rows: policy {cfg.policy.name} decides from the whole replay so far and "
                             "runs in memory; use --chunk-rows 0 or a non-adaptive policy")
        return cfg.chunk_rows
    if cfg.policy.adaptive:
        return None
    rows = sum(count_rows(s) for s in cfg.streams)
    return DEFAULT_CHUNK_ROWS if rows > AUTO_ROWS else None
