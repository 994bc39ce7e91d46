"""The bounded-memory engine for the engine emulations ``spark-ss`` and ``flink``
(``flink-sql``: :mod:`.bounded_sql`).

Both have a global watermark that is a prefix maximum over arrival order, then
state per key.  So each tuple's policy facts come from a scan, and the join
stays the chunked truth of :class:`~streamjoin.pipelines.engines.bounded.BoundedReplay`
(compaction by ``L_{j+1}``, one chunk per combination's last member):

* ``spark-ss`` -- a first pass over the input (arrival order, only the time
  columns) collects each occupied micro-batch's largest event time per stream
  (:func:`~streamjoin.pipelines.replay.microbatch.batch_maxima`, merged across
  chunks: a batch may straddle two), from which
  :func:`~streamjoin.pipelines.replay.microbatch.batch_table` gives every
  batch's watermark and the eviction events -- one row per occupied batch,
  never per tuple.  Then, per chunk, each tuple's batch, late flag and removal
  batch (:func:`~streamjoin.pipelines.replay.microbatch.tuple_facts`) are
  exact, and a pair's emission is the closed form on its members' facts.
* ``flink`` -- the operator watermark before each record is the running maxima
  carried from chunk to chunk (per record; or at the latest tick, whose maxima
  are carried when the tick falls in an earlier chunk): the late flag and the
  cleanup threshold are known when the record is replayed, and a pair is
  emitted on its later member's arrival iff the earlier one's threshold is
  above the watermark then.

Outer joins (``spark-ss --join left|right|full``): an unmatched row of a padded
stream is emitted at the end of its removal batch ``r``.  Every pair that holds
it has its later member in a batch ``<= r``, so once a chunk ends in a batch
``> r`` the row's fate is known: each chunk decides the rows whose removal
batch is below its last batch (the last chunk: all).  A row the compaction
drops from the join state before then waits in a *pending pads* slab (Spark
still holds it).  The results emitted at or after the end of the chunk's last
batch -- which the next chunk may still fill, and whose evictions may still
pad rows -- are kept back and written with the next chunk's, so the results
file has the in-memory engine's order row for row.

A tuple's stay in the state (memory) ends at an index found by a binary search
in a non-decreasing column -- the batch (``spark-ss``), the watermark after each
record (``flink``) -- carried open into later chunks like the symmetric
family's horizons.  The report equals the in-memory engine's, number for number
(``tests/engines/test_bounded.py``), ``policy_settings`` included.
"""

from __future__ import annotations

import time

import numpy as np
import polars as pl

from ..base.errors import InputError
from ..base.timeunits import NEG_INF
from ..io.chunks import read_chunks
from ..policies import INTERVAL_JOIN, MICROBATCH, SQL_INTERVAL_JOIN
from ..replay import interval_join, microbatch
from ..replay.candidates import Combos
from ..replay.results import with_emission
from .bounded import BIG, BoundedReplay, Slab, replay_order_of
from .bounded_outer import OuterRows


def spark_batch_table(sv, policy) -> tuple[microbatch.BatchTable | None, int]:
    """The first pass of a bounded ``spark-ss`` run: every occupied batch's watermarks and
    eviction events (``None`` for an empty input), and the trigger grid's first interval."""
    first, _ = sv.arrival_span()
    if first is None:
        return None, 0
    base = int(first) // int(policy.trigger_us)
    n = len(sv.streams)
    parts = []
    for chunk in read_chunks(sv, payload=False):
        if sum(len(b) for b in chunk.batches):
            st, ts, arr, _ = replay_order_of(chunk.batches)
            parts.append(microbatch.batch_maxima(st, ts, arr // int(policy.trigger_us) - base, n))
    return microbatch.batch_table(*microbatch.merge_maxima(parts), policy), base


def check_flink_times(sv) -> None:
    """A first pass of a bounded ``flink`` run: refuse event times that are not whole ms,
    with the in-memory engine's error (the first such row in replay order, and how many)."""
    first, count = None, 0
    for chunk in read_chunks(sv, payload=False):
        if not sum(len(b) for b in chunk.batches):
            continue
        st, ts, arr, order = replay_order_of(chunk.batches)
        odd = np.flatnonzero(ts % interval_join.MS)
        if len(odd) and first is None:
            rows = np.concatenate([b.row for b in chunk.batches])[order]
            a = int(odd[0])
            first = (int(st[a]), int(rows[a]), int(ts[a]))
        count += len(odd)
    if first is not None:
        raise interval_join.sub_ms_error(*first, count)


def bounded_replay(cfg, sv, sink, row_bytes: list[float]) -> BoundedReplay:
    """The bounded engine for ``cfg``'s policy: :class:`EmulationReplay` for ``spark-ss`` /
    ``flink`` (after ``spark-ss``'s first pass), :class:`~.bounded_sql.SqlReplay` for
    ``flink-sql`` (after its first pass), else :class:`BoundedReplay`."""
    if cfg.policy.family not in (MICROBATCH, INTERVAL_JOIN, SQL_INTERVAL_JOIN):
        return BoundedReplay(cfg, sv, sink, row_bytes)
    if cfg.policy.in_memory_only is not None:   # chunk_rows_for() refuses it first; this guards direct callers
        raise InputError(f"--chunk-rows: {cfg.policy.name} with {cfg.policy.in_memory_only} runs in memory for now")
    if cfg.policy.family == SQL_INTERVAL_JOIN:
        from .bounded_sql import SqlReplay, sql_first_pass

        return SqlReplay(cfg, sv, sink, row_bytes, *sql_first_pass(cfg, sv))
    if cfg.policy.family == INTERVAL_JOIN:
        check_flink_times(sv)
    table, base = spark_batch_table(sv, cfg.policy) if cfg.policy.family == MICROBATCH else (None, 0)
    return EmulationReplay(cfg, sv, sink, row_bytes, table=table, base=base)


class EmulationReplay(BoundedReplay):
    """:class:`~streamjoin.pipelines.engines.bounded.BoundedReplay` for ``spark-ss`` and ``flink``
    (module doc).  A state tuple's :class:`~streamjoin.pipelines.engines.bounded.Slab`
    carries ``dropped`` and, in ``rel``, its removal batch (``spark-ss``) or cleanup
    threshold (``flink``)."""

    def __init__(self, cfg, survey, sink, row_bytes, series_points: int = 2_000, *,
                 table: microbatch.BatchTable | None = None, base: int = 0):
        super().__init__(cfg, survey, sink, row_bytes, series_points)
        self.spark = cfg.policy.family == MICROBATCH
        self.table = table
        self.base = base                                   # spark-ss: the trigger grid's first interval
        self.T = int(cfg.policy.trigger_us or 0)
        K = len(table.occupied) if table is not None else 0
        self.stored_in = np.zeros(K + 1, np.int64)     # stored rows per occupied batch of storage
        self.stored_out = np.zeros(K + 1, np.int64)    # and of removal (K: still held at the end)
        self.interval = int(cfg.policy.watermark_interval_us or 0)
        self.tick_M = np.full(self.n, NEG_INF, np.int64)   # flink: running maxima at the latest tick so far
        self.last_tick: int | None = None
        self.last_after = NEG_INF
        # spark-ss outer joins (module doc, "Outer joins")
        self.outer = OuterRows(cfg.policy.padded_sides if self.spark else (), self.N, self.n, self.names)
        self.decided_below = np.iinfo(np.int64).min     # removal batches below it: padded already
        self.tail: pl.DataFrame | None = None           # results not written yet (the open batch's)

    # ------------------------------------------------------------------ policy facts

    def _flink_watermarks(self, st, ts, arr, M) -> tuple[np.ndarray, np.ndarray]:
        """Operator watermark before and after each record of the chunk (rules 2-3)."""
        D = self.policy.watermark
        if self.interval == 0:
            before = interval_join.watermark_of_maxima(np.concatenate([self.M.reshape(-1, 1), M[:, :-1]], axis=1), D)
            return before, interval_join.watermark_of_maxima(M, D)
        tick = interval_join.ticks(arr, self.first_arrival, self.interval)
        counted = interval_join.seen_at_tick(arr, self.first_arrival, self.interval)   # in the chunk
        M_at = M[:, np.maximum(counted, 0)]
        earlier = counted < 0               # the tick's records all arrived in earlier chunks
        if earlier.any():   # at the previous chunk's latest tick: its maxima then; at a later one: all of it
            same = earlier & (tick == self.last_tick) if self.last_tick is not None else np.zeros(len(tick), bool)
            M_at[:, earlier & ~same] = self.M.reshape(-1, 1)
            M_at[:, same] = self.tick_M.reshape(-1, 1)
        t_last = int(tick[-1])
        c = int(counted[-1])
        self.tick_M = M[:, c].copy() if c >= 0 else (self.tick_M if t_last == self.last_tick else self.M.copy())
        self.last_tick = t_last
        before = interval_join.watermark_of_maxima(M_at, D)
        return before, before

    def _replay(self, batches, C: int, j: int) -> None:
        n, W, A0 = self.n, self.W, self.A0
        t0 = time.perf_counter()
        st, ts, arr, sel, M = self._chunk_order(batches, C)
        idx = np.arange(C)
        delay = M[st, idx] - ts
        if self.spark:
            batch = arr // self.T - self.base
            dropped, key = microbatch.tuple_facts(self.table, st, ts, batch, n, W)
            stored = ~dropped & (key > batch)
            K = len(self.table.occupied)
            self.stored_in += np.bincount(np.searchsorted(self.table.occupied, batch[stored]), minlength=K + 1)
            self.stored_out += np.bincount(np.searchsorted(self.table.occupied, key[stored], side="left"),
                                           minlength=K + 1)[:K + 1]
            column, ends, side = batch, np.where(dropped, batch, key), "right"
            held = np.ones(C, bool)                 # every row waits for its batch, late ones too
            self._before = None
        else:
            before, after = self._flink_watermarks(st, ts, arr, M)
            dropped, key = interval_join.record_facts(ts, st, before, W)
            self.last_after = int(after[-1])
            column, ends, side = after, key, "left"
            held = ~dropped
            self._before = before
        self.M = M[:, -1].copy()
        for i in range(n):
            mask = st == i
            self.acc.delays[i].add(delay[mask])
            self.acc.dropped[i] += int(dropped[mask].sum())
        new = [Slab(b.row, b.ts, b.arrival, A0 + sel[i], b.keys, b.payload, b.vectors, dropped[sel[i]], key[sel[i]])
               for i, b in enumerate(batches)]
        t0 = self._timed("progress", t0)

        self._chunk_arrival = arr
        self._stays(st, column, ends, side, held, C)
        t0 = self._timed("memory", t0)

        windows = [Slab.concat(self.state[i], new[i]) if self.state[i] is not None else new[i] for i in range(n)]
        kept = [len(self.state[i]) if self.state[i] is not None else 0 for i in range(n)]
        combos = self._truth(windows, kept)
        t0 = self._timed("candidates", t0)
        frames = self._emit_emulated(combos, windows, arr) if len(combos) else []
        bound = int(self.survey.future_min_ts[j + 1]) if j + 1 < self.survey.chunks else None
        upper = None
        if self.outer.sides:   # removal batches below the chunk's last batch are final: pad those rows
            upper = BIG if bound is None else int(batch[-1])
            frames += [self._spark_pads(side, windows[side], upper) for side in self.outer.sides]
        t0 = self._timed("emit", t0)
        if self.outer.sides:
            self._write(frames, None if bound is None else (self.base + int(batch[-1]) + 1) * self.T)
        elif self.sink is not None and frames and frames[0].height:
            self.sink(frames[0])
        t0 = self._timed("results", t0)
        # unmatched rows out of the join state, still in Spark's, removal batch not decided: pad them later
        self.outer.compact(self, windows, bound, lambda side, gone: (
            ~gone.dropped & (gone.rel != microbatch.NEVER) & (gone.rel >= upper) & ~self.outer.matched[gone.a]))
        if upper is not None:
            self.decided_below = upper
        self.A0 += C
        self._timed("progress", t0)

    # ------------------------------------------------------------------ memory

    def _stays(self, st, column, ends, side: str, held, C: int) -> None:
        """Tuples held after every index of the chunk: each from its own index until the
        first index whose ``column`` value passes its ``ends`` value (binary search with
        ``side``), carried open into later chunks."""
        A0, n = self.A0, self.n
        mem = np.empty((n, C), dtype=np.int64)
        idx = np.arange(C)
        for i in range(n):
            old = self.held_limit[i]
            end_old = np.searchsorted(column, old, side=side)
            done_old = end_old < C
            mine = (st == i) & held
            end = np.maximum(np.searchsorted(column, ends[mine], side=side), idx[mine])
            done = end < C
            delta = (np.bincount(idx[mine], minlength=C + 1)[:C + 1] - np.bincount(end[done], minlength=C + 1)[:C + 1]
                     - np.bincount(end_old[done_old], minlength=C + 1)[:C + 1])
            np.cumsum(delta[:C], out=mem[i])
            mem[i] += len(old)
            self.held_limit[i] = np.concatenate([old[~done_old], ends[mine][~done]])
        self._account_memory(mem, A0, A0 + C)

    # ------------------------------------------------------------------ emission

    def _emit_emulated(self, combos: Combos, windows: list[Slab], arr: np.ndarray) -> list[pl.DataFrame]:
        """The closed forms of :mod:`~streamjoin.pipelines.replay.emit` for the two emulations
        on the members' carried facts; one frame of the emitted results."""
        A0, acc = self.A0, self.acc
        rows = combos.rows
        a = [windows[k].a[rows[k]] for k in range(2)]
        last = np.maximum(a[0], a[1])
        arrival_last = arr[last - A0]
        dl, dr = windows[0].dropped[rows[0]], windows[1].dropped[rows[1]]
        kl, kr = windows[0].rel[rows[0]], windows[1].rel[rows[1]]
        batch = None
        if self.spark:
            T, base = self.T, self.base
            bl = windows[0].arrival[rows[0]] // T - base
            br = windows[1].arrival[rows[1]] // T - base
            emitted, batch = microbatch.pair_emitted(bl, br, kl, kr, dl, dr)
            emit_us = (base + batch + 1) * T
            latency = emit_us - arrival_last
        else:
            threshold_earlier = np.where(a[0] < a[1], kl, kr)
            emitted = ~dl & ~dr & (self._before[last - A0] < threshold_earlier)
            emit_us = arrival_last
            latency = np.zeros(len(last), np.int64)
        acc.truth += len(combos)
        if self.trace is not None:
            self.trace[-1]["truth"] = [windows[k].row[rows[k]] for k in range(2)]
        acc.emitted += int(emitted.sum())
        self.outer.match(a, emitted)
        self._count_periods(last - A0, emitted, arr)
        acc.duplicates += self._duplicates([r[emitted] for r in rows], [len(w) for w in windows])
        acc.latency.add(latency[emitted])
        if self.sink is None:
            return []
        frame = with_emission(self._frame(windows, [r[emitted] for r in rows]), emit_us[emitted], latency[emitted],
                              last[emitted])
        if batch is not None:
            frame = frame.with_columns(pl.Series("batch", batch[emitted], dtype=pl.Int64))
        return [frame]

    # ------------------------------------------------------------------ outer joins (spark-ss)

    def _spark_pads(self, side: int, window: Slab, upper: int) -> pl.DataFrame:
        """Stream ``side``'s null-padded rows whose removal batch is decided now (in
        ``[decided_below, upper)``), in no emitted pair, from the join state and the pending
        pads: emitted at the end of that batch."""
        out = self.outer.due(side, window, lambda rows: (~rows.dropped & (rows.rel != microbatch.NEVER)
                                                         & (rows.rel >= self.decided_below) & (rows.rel < upper)),
                             lambda pad: pad.rel >= upper)
        frame = self.outer.frame(side, out, (self.base + out.rel + 1) * self.T, self.sink)
        return frame.with_columns(pl.Series("batch", out.rel, dtype=pl.Int64)) if self.sink is not None else frame

    def _write(self, frames: list[pl.DataFrame], cut: int | None) -> None:
        """Hand the results to the sink, keeping back those emitted at or after ``cut`` (the end
        of the chunk's last batch, which the next chunk may still fill, and whose evictions may
        still pad rows): they are written with the next chunk's, so the file keeps the
        in-memory engine's order.  ``cut=None``: everything (the last chunk)."""
        if self.sink is None:
            return
        parts = [f for f in ([self.tail] if self.tail is not None else []) + frames if f.height]
        self.tail = None
        if not parts:
            return
        # (padded rows alone lack the other stream's columns: the schema's empty frame adds them)
        frame = self.outer.types(pl.concat([self.empty_frame(), *parts], how="diagonal_relaxed"))
        if cut is None:
            self.sink(frame)
            return
        late = frame["emit_us"] >= cut
        if late.any():
            self.tail = frame.filter(late)
        if not late.all():
            self.sink(frame.filter(~late))

    def on_eof(self) -> None:
        if self.outer.sides and any(w is not None for w in self.state):   # the last chunks held no rows
            self._write([self._spark_pads(side, self.state[side], BIG) for side in self.outer.sides], None)
        super().on_eof()
        assert self.tail is None and self.outer.settled()

    def outer_join(self) -> tuple[dict, list[int]] | None:
        """``report.json``'s ``outer_join`` section and each stream's ``outer_rows``, or ``None``."""
        return self.outer.report(self.policy.join)

    # ------------------------------------------------------------------ report

    def empty_frame(self) -> pl.DataFrame:
        frame = super().empty_frame()
        frame = frame.with_columns(pl.Series("batch", [], dtype=pl.Int64)) if self.spark else frame
        return self.outer.types(frame)

    def policy_settings(self) -> dict:
        """``report.json`` ``policy_settings``, as the in-memory engine reports them."""
        if not self.spark:
            return interval_join.settings_of(self.policy, self.interval, self.last_after, sum(self.acc.dropped))
        t = self.table
        if t is None:
            return microbatch.settings_of(self.policy, int(self.policy.trigger_us), 0, np.empty(0, np.int64),
                                          np.empty(0, np.int64), np.zeros(0))
        K = len(t.occupied)
        rows = np.cumsum(self.stored_in)[:K] - np.cumsum(self.stored_out)[:K]
        return microbatch.settings_of(self.policy, self.T, self.base * self.T, t.occupied, t.current, rows)
