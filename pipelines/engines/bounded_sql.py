"""The bounded-memory engine for ``flink-sql`` (Flink SQL's row-time interval join).

Flink SQL's caches are per key with expiration times shared by all keys and
cleanup timers that chain from row to row
(:mod:`~streamjoin.pipelines.replay.sql_interval_join`): whether a row is
cached, whether it probes and when it leaves its cache are not running maxima
that a chunk can carry in a few numbers, as ``spark-ss``'s and ``flink``'s
facts are (:mod:`.bounded_emulation`).  So a first pass reads the time and key
columns of the whole input (never the payload), replays it in order and keeps
each row's facts -- cached, probes, first index that no longer finds it, the
index at which it leaves its cache, and the rows held per stream after every
index: about 37 bytes per row held through the join (the
``visible_until``, ``left_at``, ``held_until`` columns, two flags, the rows
held per stream, the outer join's matched flags), and about twice that while
the first pass builds them (docs/semantics.md, "flink-sql", "Engines").  The
join itself stays chunked, as for every policy
(:class:`~streamjoin.pipelines.engines.bounded.BoundedReplay`: one chunk per
combination's last member, the state compacted by ``L_{j+1}``), and a pair is
emitted on its later member's arrival iff the closed form of
:func:`~streamjoin.pipelines.replay.sql_interval_join.emitted_pairs` holds on
its members' facts.

Outer joins (``--join left|right|full``): a row's null-padded row is emitted at
``left_at``, the index at which it leaves its cache, if it is in no emitted
pair.  Every pair that holds it is emitted at an index ``<= left_at`` (its
later member probes before it leaves), so the chunk of ``left_at`` knows.  A
row that the compaction drops from the join state before then (it can join
nothing more, but Flink still caches it) waits in a small *pending pads* slab
of the padded stream -- rows Flink itself holds -- until that chunk.  Its
results row is written in that chunk with emission time ``arrival[left_at]``:
the results file has the in-memory engine's order, row for row.
"""

from __future__ import annotations

import time

import numpy as np
import polars as pl

from ..io.chunks import read_chunks
from ..replay import sql_interval_join
from ..replay.candidates import key_ids
from ..replay.progress import build_replay, decide
from ..replay.results import with_emission
from .bounded import BoundedReplay, Slab
from .bounded_outer import OuterRows


def sql_first_pass(cfg, sv):
    """Pass 1 of a bounded ``flink-sql`` run: the whole input's times and keys, in row
    order per stream, replayed as the in-memory engine does: ``(replay, decisions)``."""
    n = len(sv.streams)
    rows, ts, arrival, keys = ([[] for _ in range(n)] for _ in range(4))
    dtypes = sv.key_dtypes
    for chunk in read_chunks(sv, payload=False):
        for i, b in enumerate(chunk.batches):
            if len(b):
                rows[i].append(b.row)
                ts[i].append(b.ts)
                arrival[i].append(b.arrival)
                keys[i].append(b.keys)
    cols = []
    for i in range(n):
        r = np.concatenate(rows[i]) if rows[i] else np.empty(0, np.int64)
        order = np.argsort(r, kind="stable")
        if len(r) and not np.array_equal(r[order], np.arange(len(r))):
            raise AssertionError("flink-sql bounded pass: every row of a stream exactly once")
        k = pl.concat(keys[i], how="vertical") if keys[i] else None
        if k is not None and k.width and dtypes:
            k = k.with_columns([pl.col(f"__key{c}").cast(dt) for c, dt in enumerate(dtypes)])
        cols.append((np.concatenate(ts[i])[order] if ts[i] else np.empty(0, np.int64),
                     np.concatenate(arrival[i])[order] if arrival[i] else np.empty(0, np.int64),
                     k[order] if k is not None and k.width else None))
    replay = build_replay([c[0] for c in cols], [c[1] for c in cols], keep_running_max=False)
    frames = [c[2] for c in cols]
    ids = key_ids(frames) if all(f is not None for f in frames) else None
    dec = decide(replay, np.asarray(cfg.windows, dtype=np.int64), cfg.policy, keys=ids)
    return replay, dec


class SqlReplay(BoundedReplay):
    """:class:`~streamjoin.pipelines.engines.bounded.BoundedReplay` for ``flink-sql``
    (module doc), on the facts of :func:`sql_first_pass`."""

    def __init__(self, cfg, survey, sink, row_bytes, replay, decisions, series_points: int = 2_000):
        super().__init__(cfg, survey, sink, row_bytes, series_points)
        self.sql = decisions.sql
        self.settings = decisions.policy_settings
        self.held = sql_interval_join.memory(self.sql, replay.stream, self.n)   # rows held after every index
        self.outer = OuterRows(cfg.policy.padded_sides, self.N, self.n, self.names)

    def _replay(self, batches, C: int, j: int) -> None:
        n, A0 = self.n, self.A0
        t0 = time.perf_counter()
        st, ts, arr, sel, M = self._chunk_order(batches, C)
        delay = M[st, np.arange(C)] - ts
        for i in range(n):
            self.acc.delays[i].add(delay[st == i])
        none = np.zeros(C, bool)
        new = [Slab(b.row, b.ts, b.arrival, A0 + sel[i], b.keys, b.payload, b.vectors, none[sel[i]],
                    np.zeros(len(b), np.int64)) for i, b in enumerate(batches)]
        self.M = M[:, -1].copy()
        t0 = self._timed("progress", t0)
        self._chunk_arrival = arr
        self._account_memory(self.held[:, A0:A0 + C].astype(np.int64), A0, A0 + C)
        t0 = self._timed("memory", t0)
        windows = [Slab.concat(self.state[i], new[i]) if self.state[i] is not None else new[i] for i in range(n)]
        kept = [len(self.state[i]) if self.state[i] is not None else 0 for i in range(n)]
        combos = self._truth(windows, kept)
        t0 = self._timed("candidates", t0)
        frames = [self._pairs(combos, windows, arr)]
        frames += [self._padded(side, windows[side], arr) for side in self.outer.sides]
        t0 = self._timed("emit", t0)
        if self.sink is not None and sum(f.height for f in frames):
            self.sink(self.outer.types(pl.concat(frames, how="diagonal_relaxed")))
        t0 = self._timed("results", t0)
        bound = int(self.survey.future_min_ts[j + 1]) if j + 1 < self.survey.chunks else None
        # rows dropped from the join state, still in Flink's cache, unmatched: pad them later
        self.outer.compact(self, windows, bound,
                           lambda side, gone: (self.sql.left_at[gone.a] >= A0 + C) & ~self.outer.matched[gone.a])
        self.A0 += C
        self._timed("progress", t0)

    def _pairs(self, combos, windows: list[Slab], arr: np.ndarray) -> pl.DataFrame:
        """The chunk's pairs (each with its later member in the chunk): emitted on that
        member's arrival, latency 0, iff the closed form holds."""
        A0, acc = self.A0, self.acc
        rows = combos.rows if len(combos) else [np.empty(0, np.int64)] * 2
        a = [windows[k].a[rows[k]] for k in range(2)]
        last = np.maximum(a[0], a[1])
        emitted = sql_interval_join.emitted_pairs(self.sql, a[0], a[1])
        acc.truth += len(last)
        if self.trace is not None and len(last):
            self.trace[-1]["truth"] = [windows[k].row[rows[k]] for k in range(2)]
        acc.emitted += int(emitted.sum())
        if len(last):
            self._count_periods(last - A0, emitted, arr)
            acc.duplicates += self._duplicates([r[emitted] for r in rows], [len(w) for w in windows])
        acc.latency.add(np.zeros(int(emitted.sum()), np.int64))
        self.outer.match(a, emitted)
        if self.sink is None:
            return pl.DataFrame()
        return with_emission(self._frame(windows, [r[emitted] for r in rows]), arr[last[emitted] - A0],
                             np.zeros(int(emitted.sum()), np.int64), last[emitted])

    def _padded(self, side: int, window: Slab, arr: np.ndarray) -> pl.DataFrame:
        """Stream ``side``'s null-padded rows that leave their cache in this chunk, in no
        emitted pair: from the join state and the pending pads."""
        A0, end, left_at = self.A0, self.A0 + len(arr), self.sql.left_at
        out = self.outer.due(side, window, lambda rows: (left_at[rows.a] >= A0) & (left_at[rows.a] < end),
                             lambda pad: left_at[pad.a] >= end)
        return self.outer.frame(side, out, arr[left_at[out.a] - A0], self.sink)

    def on_eof(self) -> None:
        super().on_eof()
        assert self.outer.settled(), "every pending pad left its cache"

    def empty_frame(self) -> pl.DataFrame:
        return self.outer.types(super().empty_frame())

    def policy_settings(self) -> dict:
        """``report.json`` ``policy_settings``, as the in-memory engine reports them."""
        return self.settings

    def outer_join(self) -> tuple[dict, list[int]] | None:
        """``report.json``'s ``outer_join`` section and each stream's ``outer_rows``
        (as :func:`~streamjoin.pipelines.analysis.metrics.outer_join_summary`), or ``None``
        for an inner join."""
        return self.outer.report(self.policy.join)
