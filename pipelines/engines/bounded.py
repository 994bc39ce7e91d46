"""The bounded-memory local engine: the replay in arrival-time chunks.

The in-memory engine (:mod:`.local`) holds every tuple and every valid
combination at once, so its memory grows with the input.  This engine gives
the same answer -- every combination, emission time, latency, memory count
and drop (property-tested against it and against the reference replay) --
while holding only what can still matter, the *frozen-state compaction* of
seed 004: state that no future input can touch is folded into counters and
forgotten.

Chunks are ranges of arrival time, read by :mod:`~streamjoin.pipelines.io.chunks`
(equal arrival times never straddle two chunks, so the replay order of the
chunks, one after the other, is the global replay order).  Per chunk
``[A0, A1)`` of arrival indexes::

    carried in              chunk j (new tuples, in replay order)        carried out
    ───────────             ──────────────────────────────────────       ───────────
    M_i, K_i, R  or  H_i ─► running maxima continue from the carried value ─► last values
    state S_i  (old tuples   truth: combinations of S ∪ new with at least  S'_i = tuples with
     that can still join)    one new member (never one counted twice)      ts + W_i >= L_{j+1}
    held_i (memory)     ─►   +1 at each new held tuple, -1 where one ends ─► still held
    pending combinations ─►  released once all members are (sorting)     ─► still waiting

Why ``L_{j+1}`` is the right compaction bound: ``L_{j+1}`` is a lower bound
(from the survey, pass 1) on the event time of every tuple arriving in a
later chunk.  A combination with a later member ``y`` has
``max_ts >= y.ts >= L_{j+1}``, and each member ``x`` needs
``max_ts - x.ts <= W_x``; so an ``x`` with ``x.ts + W_x < L_{j+1}`` can never
join again and is dropped from the state.  The state is therefore the tuples
within one window plus the disorder span behind the input's event-time
frontier -- it grows with the window and the disorder, not with the input.

Worked example (one key, ``W = 100``, chunks of three arrivals)::

    arrival order   a=0 L:10  a=1 R:50  a=2 L:120 | a=3 R:30  a=4 R:200  a=5 L:260
    chunk 0: truth (L10,R50) (L120,R50);  L_1 = min ts arriving later = 30
             keep ts + 100 >= 30: all three stay in the state
    chunk 1: new R30 joins old L10, L120; R200 joins L120; L260 joins R200
             (L10,R50) is never produced again: it has no new member

Policies carry what their online form carries: ``mpkslack``'s K is a running
maximum (carried), ``R`` and ``H`` are running maxima (carried).  Release
times that fall in a later chunk are resolved there (tuples and
combinations waiting for them are carried as *pending*); at the end of the
input they are flushed at the last arrival, exactly like the SPEC's
end-of-input rule.  The recall-target policies (``qjoin``, ``qkslack``)
decide from statistics over the whole replay so far and run in memory.

Results are appended to ``results.parquet`` chunk by chunk (columns of
:mod:`~streamjoin.pipelines.replay.results`), in the same order
as the in-memory engine writes them (emission time, last member's arrival,
rows), and the metrics are exact: percentiles from value counts
(:class:`~streamjoin.pipelines.base.tally.Tally`), memory and periods from sums.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import polars as pl

from ..replay.candidates import Combos, Space, enumerate_truth, index_dtype
from ..io.chunks import Batch, Chunk, Survey, filter_rows, take_rows
from ..config.settings import RunConfig, with_period
from ..io.load import LoadedStream
from ..replay.probe_order import ProbeOrder, probe_order
from ..replay.results import member_columns, with_emission
from ..policies import SORTING, retention_matrix, slack_matrix
from ..replay.progress import minus, running_max, stream_running_max
from ..base.tally import Tally
from ..base.timeunits import NEG_INF

ResultSink = Callable[[pl.DataFrame], None]
BIG = np.iinfo(np.int64).max


@dataclass
class Slab:
    """Tuples of one stream (the state, or the new arrivals of a chunk), in row order."""

    row: np.ndarray        # row number in the stream
    ts: np.ndarray
    arrival: np.ndarray
    a: np.ndarray          # global arrival index
    keys: pl.DataFrame
    payload: pl.DataFrame
    vectors: np.ndarray | None
    dropped: np.ndarray    # sorting family: dropped as late
    rel: np.ndarray        # sorting family: release index, -1 = not known yet

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    def take(self, mask: np.ndarray) -> Slab:
        return Slab(self.row[mask], self.ts[mask], self.arrival[mask], self.a[mask], filter_rows(self.keys, mask),
                    filter_rows(self.payload, mask), self.vectors[mask] if self.vectors is not None else None,
                    self.dropped[mask], self.rel[mask])

    @staticmethod
    def concat(first: Slab, second: Slab) -> Slab:
        def cat(x, y):
            return np.concatenate([x, y]) if x is not None else None
        return Slab(cat(first.row, second.row), cat(first.ts, second.ts), cat(first.arrival, second.arrival),
                    cat(first.a, second.a), pl.concat([first.keys, second.keys], how="vertical"),
                    pl.concat([first.payload, second.payload], how="vertical"),
                    cat(first.vectors, second.vectors), cat(first.dropped, second.dropped),
                    cat(first.rel, second.rel))


@dataclass
class Pending:
    """Emitted combinations whose last member has not been released yet (sorting family)."""

    ts: list[np.ndarray]
    rel: list[np.ndarray]
    last: np.ndarray
    arrival_last: np.ndarray
    frame: pl.DataFrame | None     # their result rows (without emit_us / latency_us)

    def __len__(self) -> int:
        return int(self.last.shape[0])


@dataclass
class Accumulators:
    """Everything the report needs, summed chunk by chunk."""

    n: int
    truth: int = 0
    emitted: int = 0
    duplicates: int = 0
    latency: Tally = field(default_factory=Tally)
    delays: list[Tally] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    expired: list[int] = field(default_factory=list)
    # periods that hold a result (sorted ids, (arrival - first arrival) // P) and their counts:
    # sparse, so bounded by the results, never by span / P
    period_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    period_truth: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    period_emitted: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    mem_peak: int = 0
    mem_sum: float = 0.0
    bytes_peak: float = 0.0
    bytes_sum: float = 0.0
    state_peak: int = 0
    open_pieces_peak: int = 0
    chunk_seconds: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.delays = [Tally() for _ in range(self.n)]
        self.dropped = [0] * self.n
        self.expired = [0] * self.n


def replay_order_of(batches: list[Batch]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(stream, ts, arrival, order)`` of a chunk's tuples in replay order: the batches
    are in (stream, row) order, so a stable sort on arrival gives it."""
    sizes = [len(b) for b in batches]
    stream = np.concatenate([np.full(s, i, dtype=np.int32) for i, s in enumerate(sizes)])
    ts = np.concatenate([b.ts for b in batches])
    arrival = np.concatenate([b.arrival for b in batches])
    order = np.argsort(arrival, kind="stable")
    return stream[order], ts[order], arrival[order], order


def _bins(values: np.ndarray, size: int) -> np.ndarray:
    return np.bincount(values, minlength=size)[:size] if len(values) else np.zeros(size, np.int64)


class BoundedReplay:
    """The chunked replay.  Feed :meth:`on_chunk` every chunk in order, then call :meth:`on_eof`.

    Args:
        cfg: the run (streams, windows, non-adaptive policy, predicates).
        survey: pass 1 of the input (:func:`~streamjoin.pipelines.io.chunks.survey`).
        sink: receives the emitted results chunk by chunk, each frame with a
            ``__last`` column to be put in order by
            :func:`~streamjoin.pipelines.replay.results.result_order`
            (``None``: results are counted, not materialised).
        row_bytes: per stream, Arrow bytes per row (memory estimates in bytes).
        series_points: memory series resolution for the HTML report.
    Guarantees: the same combinations, emission times, latencies, drops,
    expiries and memory counts as :func:`~streamjoin.pipelines.engines.local.join`;
    every combination is produced in exactly one chunk (the chunk of its
    last-arriving member) and emitted once.
    """

    def __init__(self, cfg: RunConfig, survey: Survey, sink: ResultSink | None, row_bytes: list[float],
                 series_points: int = 2_000):
        if cfg.period_us is None:  # the default period, from the surveyed replay span
            first, last = survey.arrival_span()
            cfg = with_period(cfg, 0 if first is None else last - first)
        self.cfg = cfg
        self.survey = survey
        self.sink = sink
        self.names = [s.config.name for s in survey.streams]
        self.n = n = len(self.names)
        self.W = np.asarray(cfg.windows, dtype=np.int64)
        self.policy = cfg.policy
        self.sorting = cfg.policy.family == SORTING
        self.N = survey.rows
        self.row_dtype = index_dtype(*(s.rows for s in survey.streams))
        self.weights = np.asarray(row_bytes, dtype=np.float64).reshape(-1, 1)
        self.A0 = 0
        self.M = np.full(n, NEG_INF, np.int64)
        self.K = np.zeros(n, np.int64)
        self.R = np.int64(NEG_INF)
        self.H = np.full(n, NEG_INF, np.int64)
        self.state: list[Slab | None] = [None] * n
        self.held_limit = [np.empty(0, np.int64) for _ in range(n)]
        self.held_ts = [np.empty(0, np.int64) for _ in range(n)]
        self.held_rel = [np.empty(0, np.int64) for _ in range(n)]
        self.pending: Pending | None = None
        self.probe_order: ProbeOrder | None = None
        self.first_arrival: int | None = None
        self.last_arrival: int | None = None
        self.acc = Accumulators(n=n)
        # memory series: equal-count buckets over the N arrival indexes, filled as chunks pass
        b = min(series_points, self.N) if self.N else 0
        self.series_starts = np.unique(np.linspace(0, self.N, b, endpoint=False).astype(np.int64)) if b else np.zeros(0, np.int64)
        self.series_peak = np.zeros(len(self.series_starts), np.int64)
        self.series_sum = np.zeros(len(self.series_starts), np.float64)
        self.series_arrival = np.zeros(len(self.series_starts), np.int64)
        #: tests set this to a list: per chunk, memory after every arrival and every truth row
        self.trace: list[dict[str, Any]] | None = None
        self.timings: dict[str, float] = {"progress": 0.0, "candidates": 0.0, "emit": 0.0, "memory": 0.0, "results": 0.0}

    # ------------------------------------------------------------------ chunks

    def on_chunk(self, chunk: Chunk) -> None:
        """Replay one chunk: progress, decisions, memory, truth, emission, compaction."""
        started = time.perf_counter()
        batches = [self._cast_keys(b) for b in chunk.batches]
        C = sum(len(b) for b in batches)
        if C:
            self._replay(batches, C, chunk.index)
        self.acc.chunk_seconds.append(time.perf_counter() - started)
        self.acc.open_pieces_peak = max(self.acc.open_pieces_peak, chunk.open_pieces)

    def _cast_keys(self, b: Batch) -> Batch:
        dtypes = self.survey.key_dtypes
        if dtypes and b.keys.width:
            b.keys = b.keys.with_columns([pl.col(f"__key{i}").cast(dt) for i, dt in enumerate(dtypes)])
        return b

    def _timed(self, name: str, t0: float) -> float:
        now = time.perf_counter()
        self.timings[name] += now - t0
        return now

    def _chunk_order(self, batches: list[Batch], C: int):
        """The chunk in replay order: ``(stream, ts, arrival, sel, M)`` with ``sel[i]`` each
        batch row's chunk-local index and ``M`` the running maxima continued from the
        carried values (SPEC §2); notes the first and last arrival."""
        st, ts, arr, order = replay_order_of(batches)
        local = np.empty(C, dtype=np.int64)
        local[order] = np.arange(C, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum([len(b) for b in batches])])
        sel = [local[offsets[i]:offsets[i + 1]] for i in range(self.n)]  # batch row -> chunk-local index
        if self.first_arrival is None:
            self.first_arrival = int(arr[0])
        self.last_arrival = int(arr[-1])
        M = np.empty((self.n, C), dtype=np.int64)
        for i in range(self.n):
            stream_running_max(st, ts, i, out=M[i], carry=self.M[i])
        return st, ts, arr, sel, M

    def _replay(self, batches: list[Batch], C: int, j: int) -> None:
        n, W, A0 = self.n, self.W, self.A0
        t0 = time.perf_counter()
        st, ts, arr, sel, M = self._chunk_order(batches, C)
        idx = np.arange(C)
        T = M.min(axis=0)
        delay = M[st, idx] - ts
        self.M = M[:, -1].copy()
        view = SimpleNamespace(n=n, N=C, stream=st, delay=delay)
        if self.sorting:
            K = slack_matrix(view, self.policy)
            if self.policy.name == "mpkslack":
                K = np.maximum(K, self.K.reshape(n, 1))
                self.K = K[:, -1].copy()
            R = running_max(minus(M, K).min(axis=0), self.R)
            R_before = np.concatenate([[self.R], R[:-1]])
            dropped = ts < R_before
            rel = np.maximum(A0 + np.searchsorted(R, ts, side="left"), A0 + idx)
            rel[(rel >= A0 + C) | dropped] = -1
            self.R = R[-1]
            H = None
            expired = None
        else:
            d = retention_matrix(view, self.policy)
            H = running_max(minus(np.broadcast_to(T, (n, C)), d), self.H.reshape(n, 1))
            expired = ts + W[st] < H[st, idx]
            self.H = H[:, -1].copy()
            R = None
            dropped = np.zeros(C, dtype=bool)
            rel = np.full(C, -1, np.int64)
        for i in range(n):
            mask = st == i
            self.acc.delays[i].add(delay[mask])
            if self.sorting:
                self.acc.dropped[i] += int(dropped[mask].sum())
            else:
                self.acc.expired[i] += int(expired[mask].sum())
        new = [Slab(b.row, b.ts, b.arrival, A0 + sel[i], b.keys, b.payload, b.vectors, dropped[sel[i]], rel[sel[i]])
               for i, b in enumerate(batches)]
        if self.sorting:
            for s in self.state:
                if s is not None:
                    self._resolve(s.rel, s.ts, R, mask=~s.dropped)
        t0 = self._timed("progress", t0)

        self._chunk_arrival = arr
        self._memory(new, sel, H, R, C)
        t0 = self._timed("memory", t0)

        windows = [Slab.concat(self.state[i], new[i]) if self.state[i] is not None else new[i] for i in range(n)]
        kept = [len(self.state[i]) if self.state[i] is not None else 0 for i in range(n)]
        combos = self._truth(windows, kept)
        t0 = self._timed("candidates", t0)

        frames = self._emit(combos, windows, arr, H, R, C)
        if A0 + C == self.N and self.pending is not None and len(self.pending):
            # end of input: the rest is flushed at the last arrival, in order with this chunk's results
            frames += self._finish_pending(np.ones(len(self.pending), dtype=bool),
                                           np.full(len(self.pending), self.last_arrival, dtype=np.int64))
        t0 = self._timed("emit", t0)
        if self.sink is not None and frames:
            out = pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]
            if out.height:
                self.sink(out)  # in emission order once put in `result_order` (by the sink, off this thread)
        t0 = self._timed("results", t0)

        # compaction: keep only tuples a later arrival can still join with
        bound = int(self.survey.future_min_ts[j + 1]) if j + 1 < self.survey.chunks else BIG
        self.state = [w.take(w.ts + W[i] >= bound) if bound != BIG else None for i, w in enumerate(windows)]
        held = sum(len(s) for s in self.state if s is not None)
        self.acc.state_peak = max(self.acc.state_peak, held)
        self.A0 += C
        self._timed("progress", t0)

    def _resolve(self, rel: np.ndarray, ts: np.ndarray, R: np.ndarray, mask: np.ndarray | None = None) -> None:
        """Release indexes that fall in this chunk, written into ``rel`` in place."""
        todo = rel == -1
        if mask is not None:
            todo &= mask
        if not todo.any():
            return
        r = self.A0 + np.searchsorted(R, ts[todo], side="left")
        r[r >= self.A0 + len(R)] = -1
        rel[todo] = r

    # ------------------------------------------------------------------ memory

    def _memory(self, new: list[Slab], sel: list[np.ndarray], H, R, C: int) -> None:
        """Tuples held after every index of the chunk (SPEC §4.1 / §4.2), from
        carried open intervals and the new ones (same rules as ``progress.memory_per_stream``)."""
        A0, end_of_chunk = self.A0, self.A0 + C
        mem = np.empty((self.n, C), dtype=np.int64)
        for i, s in enumerate(new):
            limit_old, ts_old, rel_old = self.held_limit[i], self.held_ts[i], self.held_rel[i]
            base = len(limit_old)
            limit = s.ts + self.W[i]
            start = s.a
            if self.sorting:
                self._resolve(rel_old, ts_old, R)
                wend_old = A0 + np.searchsorted(R, limit_old, side="right")
                done_old = (rel_old != -1) & (wend_old < end_of_chunk)
                end_old = np.maximum(rel_old, wend_old)
                held = ~s.dropped
                wend = A0 + np.searchsorted(R, limit, side="right")
                end = np.maximum(np.maximum(s.rel, wend), start)
                done = held & (s.rel != -1) & (wend < end_of_chunk)
            else:
                end_old = A0 + np.searchsorted(H[i], limit_old, side="right")
                done_old = end_old < end_of_chunk
                held = np.ones(len(s), dtype=bool)
                end = np.maximum(A0 + np.searchsorted(H[i], limit, side="right"), start)
                done = end < end_of_chunk
            delta = _bins(sel[i][held], C + 1) - _bins(end[done] - A0, C + 1) - _bins(end_old[done_old] - A0, C + 1)
            np.cumsum(delta[:C], out=mem[i])
            mem[i] += base
            carry = held & ~done
            self.held_limit[i] = np.concatenate([limit_old[~done_old], limit[carry]])
            self.held_ts[i] = np.concatenate([ts_old[~done_old], s.ts[carry]])
            self.held_rel[i] = np.concatenate([rel_old[~done_old], s.rel[carry]])
        self._account_memory(mem, A0, end_of_chunk)

    def _account_memory(self, mem: np.ndarray, A0: int, end_of_chunk: int) -> None:
        """Peak, sums and the series from the chunk's tuples held per stream after every index."""
        total = mem.sum(axis=0)
        if self.trace is not None:
            self.trace.append({"memory": mem.copy()})
        nbytes = (mem * self.weights).sum(axis=0)
        acc = self.acc
        acc.mem_peak = max(acc.mem_peak, int(total.max()))
        acc.mem_sum += float(total.sum())
        acc.bytes_peak = max(acc.bytes_peak, float(nbytes.max()))
        acc.bytes_sum += float(nbytes.sum())
        if len(self.series_starts):
            bucket = np.searchsorted(self.series_starts, np.arange(A0, end_of_chunk), side="right") - 1
            first = np.concatenate([[True], bucket[1:] != bucket[:-1]])
            starts = np.flatnonzero(first)
            ids = bucket[starts]
            self.series_peak[ids] = np.maximum(self.series_peak[ids], np.maximum.reduceat(total, starts))
            self.series_sum[ids] += np.add.reduceat(total, starts)
            in_chunk = (self.series_starts >= A0) & (self.series_starts < end_of_chunk)
            self.series_arrival[in_chunk] = self._arrival_at(self.series_starts[in_chunk] - A0)

    def _arrival_at(self, local: np.ndarray) -> np.ndarray:
        return self._chunk_arrival[local]

    # ------------------------------------------------------------------ truth

    def _truth(self, windows: list[Slab], kept: list[int]) -> Combos:
        ts = [w.ts for w in windows]
        keys = [w.keys if w.keys.width else None for w in windows]
        space = Space([w.vectors for w in windows], self.cfg.distance.threshold) if self.cfg.distance else None
        if self.probe_order is None and all(len(t) for t in ts):
            self.probe_order = probe_order(ts, keys, self.W.tolist(), space)
        order = self.probe_order.order if self.probe_order is not None else None
        combos = enumerate_truth(ts, keys, self.W.tolist(), space=space, order=order)
        if len(combos):
            # only combinations with a new member: the others were produced in an earlier chunk
            fresh = np.zeros(len(combos), dtype=bool)
            for k, r in enumerate(combos.rows):
                fresh |= r >= kept[k]
            combos = combos.filter(fresh)
        if self.cfg.where and len(combos):
            combos = combos.filter(self._where(windows)(combos))
        return combos

    def _where(self, windows: list[Slab]):
        from ..replay.predicates import where_of

        streams = [LoadedStream(config=s.config, ts=w.ts, arrival=w.arrival, keys=w.keys, payload=w.payload,
                                quarantine=pl.DataFrame(), files=[], row_bytes=0.0, vectors=w.vectors)
                   for s, w in zip(self.survey.streams, windows)]
        return where_of(self.cfg, streams)

    # ------------------------------------------------------------------ emission

    def _emit(self, combos: Combos, windows: list[Slab], arr: np.ndarray, H, R, C: int) -> list[pl.DataFrame]:
        """Closed forms of :mod:`~streamjoin.pipelines.replay.emit`, plus pending releases."""
        n, A0, acc = self.n, self.A0, self.acc
        frames: list[pl.DataFrame] = []
        if self.pending is not None and len(self.pending):
            frames += self._release_pending(arr, R)
        rows = combos.rows
        if not len(combos):
            return frames
        a = [windows[k].a[rows[k]] for k in range(n)]
        last = np.maximum.reduce(a)
        arrival_last = arr[last - A0]
        acc.truth += len(combos)
        if self.trace is not None:
            self.trace[-1]["truth"] = [windows[k].row[rows[k]] for k in range(n)]
        if self.sorting:
            emitted = np.ones(len(combos), dtype=bool)
            for k in range(n):
                emitted &= ~windows[k].dropped[rows[k]]
            rel = [windows[k].rel[rows[k]] for k in range(n)]
            unknown = np.zeros(len(combos), dtype=bool)
            for r in rel:
                unknown |= r == -1
            waiting = emitted & unknown
            done = emitted & ~unknown
            emit_index = np.maximum.reduce([r[done] for r in rel])
            emit_us = arr[emit_index - A0]
            latency = emit_us - arrival_last[done]
        else:
            emitted = np.ones(len(combos), dtype=bool)
            for k in range(n):
                still_buffered = windows[k].ts[rows[k]] + self.W[k] >= H[k][last - A0]
                emitted &= (a[k] == last) | still_buffered
            waiting = np.zeros(len(combos), dtype=bool)
            done = emitted
            emit_us = arrival_last[done]
            latency = np.zeros(len(emit_us), dtype=np.int64)
        acc.emitted += int(emitted.sum())
        self._count_periods(last - A0, emitted, arr)
        # window rows stand for stream rows one to one within a chunk; a combination
        # is produced in one chunk only (its last member's), so this is the exact count
        acc.duplicates += self._duplicates([rows[k][emitted] for k in range(n)], [len(w) for w in windows])
        acc.latency.add(latency)
        if self.sink is not None:
            frame = self._frame(windows, [r[done] for r in rows])
            frames.append(with_emission(frame, emit_us, latency, last[done]))
        if waiting.any():
            wait_frame = self._frame(windows, [r[waiting] for r in rows]) if self.sink is not None else None
            fresh = Pending(ts=[windows[k].ts[rows[k][waiting]] for k in range(n)], rel=[r[waiting] for r in rel],
                            last=last[waiting], arrival_last=arrival_last[waiting], frame=wait_frame)
            self.pending = fresh if self.pending is None or not len(self.pending) else _concat_pending(self.pending, fresh)
        return frames

    def _release_pending(self, arr: np.ndarray, R) -> list[pl.DataFrame]:
        p = self.pending
        for k in range(self.n):
            self._resolve(p.rel[k], p.ts[k], R)
        known = np.ones(len(p), dtype=bool)
        for r in p.rel:
            known &= r != -1
        if not known.any():
            return []
        emit_us = arr[np.maximum.reduce([r[known] for r in p.rel]) - self.A0]
        return self._finish_pending(known, emit_us)

    def _finish_pending(self, known: np.ndarray, emit_us: np.ndarray) -> list[pl.DataFrame]:
        p = self.pending
        latency = emit_us - p.arrival_last[known]
        self.acc.latency.add(latency)
        frames = []
        if self.sink is not None:
            frames.append(with_emission(filter_rows(p.frame, known), emit_us, latency, p.last[known]))
        rest = ~known
        self.pending = Pending(ts=[t[rest] for t in p.ts], rel=[r[rest] for r in p.rel], last=p.last[rest],
                               arrival_last=p.arrival_last[rest],
                               frame=filter_rows(p.frame, rest) if p.frame is not None else None)
        return frames

    def _count_periods(self, last_local: np.ndarray, emitted: np.ndarray, arr: np.ndarray) -> None:
        """Truth and emitted per period of the last member's arrival (as ``metrics.periods``):
        counts per arrival index of the chunk, summed over each occupied period's index range,
        kept only for periods with truth (sparse: no array of ``span / P`` entries)."""
        from ..analysis.metrics import occupied_periods

        P, C = self.cfg.period_us, len(arr)
        ids, ends = occupied_periods(arr, self.first_arrival, P)
        bounds = np.concatenate([[0], ends])
        counts = []
        for picked in (last_local, last_local[emitted]):
            running = np.concatenate([[0], np.cumsum(np.bincount(picked, minlength=C))])
            counts.append(running[bounds[1:]] - running[bounds[:-1]])
        keep = counts[0] > 0
        ids, truth, emit = ids[keep], counts[0][keep], counts[1][keep]
        acc = self.acc
        if not len(acc.period_ids) or (len(ids) and ids[0] > acc.period_ids[-1]):
            # the usual case: a chunk's arrivals come after every earlier chunk's
            acc.period_ids = np.concatenate([acc.period_ids, ids])
            acc.period_truth = np.concatenate([acc.period_truth, truth])
            acc.period_emitted = np.concatenate([acc.period_emitted, emit])
        elif len(ids):  # a period that spans chunks: add into it
            both, inverse = np.unique(np.concatenate([acc.period_ids, ids]), return_inverse=True)
            acc.period_truth = np.bincount(inverse, np.concatenate([acc.period_truth, truth]),
                                           minlength=len(both)).astype(np.int64)
            acc.period_emitted = np.bincount(inverse, np.concatenate([acc.period_emitted, emit]),
                                             minlength=len(both)).astype(np.int64)
            acc.period_ids = both

    def _duplicates(self, rows: list[np.ndarray], sizes: list[int]) -> int:
        from ..replay.duplicates import count_duplicates

        return count_duplicates(rows, sizes)

    def _frame(self, windows: list[Slab], rows: list[np.ndarray]) -> pl.DataFrame:
        """The members' result columns (:func:`~streamjoin.pipelines.replay.results.member_columns`)
        of the given window rows, unordered."""
        return pl.concat([member_columns(name, w.row[r].astype(self.row_dtype), w.ts[r], w.arrival[r],
                                         take_rows(w.payload, r))
                          for name, w, r in zip(self.names, windows, rows)], how="horizontal")

    # ------------------------------------------------------------------ end of input

    def on_eof(self) -> None:
        """End of input.  The last chunk has already flushed every combination
        still waiting for a release (at the last arrival, SPEC §4.2)."""
        assert self.A0 == self.N, "every surveyed tuple must have been replayed"
        assert self.pending is None or not len(self.pending)

    def empty_frame(self) -> pl.DataFrame:
        """The results schema with no rows (for a run without results)."""
        from ..io.chunks import empty_stream

        empties = []
        for s in self.survey.streams:
            e = empty_stream(s)
            empties.append(Slab(np.empty(0, np.int64), e.ts, e.arrival, np.empty(0, np.int64), e.keys, e.payload,
                                e.vectors, np.empty(0, bool), np.empty(0, np.int64)))
        none = np.empty(0, np.int64)
        return with_emission(self._frame(empties, [none for _ in empties]), none, none)

    # ------------------------------------------------------------------ report

    def series(self) -> dict[str, Any]:
        """``report.json``'s ``memory_series`` (as ``report.html.memory_series``)."""
        if not len(self.series_starts):
            return {"arrival_us": [], "peak": [], "mean": [], "points": 0, "arrivals_per_point": 0}
        sizes = np.diff(np.append(self.series_starts, self.N))
        return {
            "arrival_us": self.series_arrival.tolist(),
            "peak": self.series_peak.tolist(),
            "mean": (self.series_sum / sizes).round(3).tolist(),
            "points": int(len(self.series_starts)),
            "arrivals_per_point": float(self.N / len(self.series_starts)),
        }


def _concat_pending(a: Pending, b: Pending) -> Pending:
    frame = pl.concat([a.frame, b.frame], how="vertical") if a.frame is not None else None
    return Pending(ts=[np.concatenate([x, y]) for x, y in zip(a.ts, b.ts)],
                   rel=[np.concatenate([x, y]) for x, y in zip(a.rel, b.rel)],
                   last=np.concatenate([a.last, b.last]), arrival_last=np.concatenate([a.arrival_last, b.arrival_last]),
                   frame=frame)
