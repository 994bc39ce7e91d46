"""An outer join's null-padded rows on the bounded engine (``spark-ss`` in
:mod:`.bounded_emulation`, ``flink-sql`` in :mod:`.bounded_sql`): the bookkeeping
both share (:class:`OuterRows`: the padded streams, which replay indexes are in an
emitted pair, the unmatched rows the compaction dropped that still wait for their
padded row, the padded rows' results frame and the results columns' types), and
their count and latency for the report (:class:`OuterTally`).  Each engine says
only *when* a row is padded (its own ``due`` and ``pending`` masks)."""

from __future__ import annotations

import numpy as np
import polars as pl

from ..base.tally import Tally
from ..replay.results import member_columns, with_emission
from .bounded import Slab


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


class OuterRows:
    """A bounded run's outer-join bookkeeping: the padded streams ``sides`` (empty: an
    inner join, and every method a no-op), ``matched`` per replay index (in an emitted
    pair), ``pads`` per padded stream (the unmatched rows the compaction dropped from the
    join state while the engine still holds them) and the :class:`OuterTally`."""

    def __init__(self, sides, N: int, n: int, names):
        self.sides = tuple(sides)
        self.names = names
        self.matched = np.zeros(N, bool) if self.sides else None
        self.pads: dict[int, Slab | None] = {s: None for s in self.sides}
        self.tally = OuterTally(n)

    def match(self, a: list[np.ndarray], emitted: np.ndarray) -> None:
        """Mark the members (replay indexes ``a[k]``) of the ``emitted`` pairs matched."""
        if self.matched is not None:
            for members in a:
                self.matched[members[emitted]] = True

    def due(self, side: int, window: Slab, now, keep) -> Slab:
        """Stream ``side``'s rows padded now: those of the join state ``window`` and of the
        pending pads for which ``now(rows)`` holds and that are in no emitted pair; the
        pending pads keep the rows for which ``keep(pad)`` holds (not decided yet)."""
        pad = self.pads[side]
        rows = Slab.concat(window, pad) if pad is not None else window
        padded = now(rows) & ~self.matched[rows.a]
        if pad is not None:
            self.pads[side] = pad.take(keep(pad))
        return rows.take(padded)

    def frame(self, side: int, out: Slab, emit_us: np.ndarray, sink) -> pl.DataFrame:
        """Count the padded rows ``out`` of stream ``side`` emitted at ``emit_us`` and return
        their results rows (an empty frame without a ``sink``)."""
        latency = emit_us - out.arrival
        self.tally.add(side, latency)
        if sink is None:
            return pl.DataFrame()
        return with_emission(member_columns(self.names[side], out.row, out.ts, out.arrival, out.payload),
                             emit_us, latency, out.a)

    def compact(self, engine, windows: list[Slab], bound: int | None, pending) -> None:
        """The end of a chunk on the bounded engine: the join state compacted by ``bound``
        (``L_{j+1}``; ``None``: the last chunk), and the padded streams' rows it drops that
        ``pending(side, rows)`` says still wait for their padded row kept in ``pads``; the
        state's peak counts both (the engine holds them)."""
        keep = [w.ts + engine.W[i] >= bound if bound is not None else np.zeros(len(w), bool)
                for i, w in enumerate(windows)]
        for side in self.sides:
            gone = windows[side].take(~keep[side])
            more = gone.take(pending(side, gone))
            pad = self.pads[side]
            self.pads[side] = Slab.concat(pad, more) if pad is not None else more
        engine.state = [w.take(k) if bound is not None else None for w, k in zip(windows, keep)]
        held = sum(len(s) for s in engine.state if s is not None) + sum(len(p) for p in self.pads.values()
                                                                        if p is not None)
        engine.acc.state_peak = max(engine.acc.state_peak, held)

    def settled(self) -> bool:
        """Every pending pad was padded (the end of the input)."""
        return all(p is None or not len(p) for p in self.pads.values())

    def types(self, frame: pl.DataFrame) -> pl.DataFrame:
        """The row columns of the padded streams as the in-memory engine writes them (Int64:
        its padded rows carry the replay's int64 row numbers)."""
        if not self.sides:
            return frame
        return frame.with_columns([pl.col(f"{self.names[s]}_row").cast(pl.Int64) for s in self.sides])

    def report(self, join: str) -> tuple[dict, list[int]] | None:
        """``report.json``'s ``outer_join`` section and each stream's ``outer_rows``
        (:meth:`OuterTally.report`), or ``None`` for an inner join."""
        return self.tally.report(join, self.names, self.sides)
