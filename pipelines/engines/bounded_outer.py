"""An outer join's null-padded rows on the bounded engine (``spark-ss`` in
:mod:`.bounded_emulation`, ``flink-sql`` in :mod:`.bounded_sql`): the compaction
that keeps the unmatched rows still waiting for their padded row
(:func:`compact_with_pads`), their count and latency for the report
(:class:`OuterTally`), and the results columns' types (:func:`padded_row_types`)."""

from __future__ import annotations

import numpy as np
import polars as pl

from ..base.tally import Tally
from .bounded import Slab


def compact_with_pads(engine, windows: list[Slab], bound: int | None, pending) -> None:
    """The end of a chunk of an outer join on the bounded engine: the join state compacted
    by ``bound`` (``L_{j+1}``; ``None``: the last chunk), and the padded streams' rows it
    drops that ``pending(side, rows)`` says still wait for their padded row kept in
    ``engine.pads``; the state's peak counts both (the engine holds them)."""
    keep = [w.ts + engine.W[i] >= bound if bound is not None else np.zeros(len(w), bool)
            for i, w in enumerate(windows)]
    for side in engine.sides:
        gone = windows[side].take(~keep[side])
        more = gone.take(pending(side, gone))
        pad = engine.pads[side]
        engine.pads[side] = Slab.concat(pad, more) if pad is not None else more
    engine.state = [w.take(k) if bound is not None else None for w, k in zip(windows, keep)]
    held = sum(len(s) for s in engine.state if s is not None) + sum(len(p) for p in engine.pads.values()
                                                                    if p is not None)
    engine.acc.state_peak = max(engine.acc.state_peak, held)


def padded_row_types(frame: pl.DataFrame, names, sides) -> pl.DataFrame:
    """The row columns of an outer join's padded streams as the in-memory engine writes
    them (Int64: its padded rows carry the replay's int64 row numbers)."""
    return frame.with_columns([pl.col(f"{names[s]}_row").cast(pl.Int64) for s in sides]) if sides else frame


class OuterTally:
    """An outer join's null-padded rows as a bounded run counts them: per stream how
    many, and their latencies (a :class:`~streamjoin.pipelines.base.tally.Tally`)."""

    def __init__(self, n: int):
        self.rows = [0] * n
        self.latency = Tally()

    def add(self, side: int, latency: np.ndarray) -> None:
        self.rows[side] += len(latency)
        self.latency.add(latency)

    def report(self, join: str, names, sides) -> tuple[dict, list[int]] | None:
        """``report.json``'s ``outer_join`` section (as
        :func:`~streamjoin.pipelines.analysis.metrics.outer_join_summary`) and each stream's
        ``outer_rows``; ``None`` for an inner join."""
        if not sides:
            return None
        latency = {"mean": self.latency.mean()}
        latency.update(self.latency.quantiles([("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0)]))
        return ({"join": join, "stream": " and ".join(names[s] for s in sides), "rows": int(sum(self.rows)),
                 "latency_us": latency}, list(self.rows))
