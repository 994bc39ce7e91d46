"""What a recall-target controller (:mod:`.controller`) holds of the replay: a
sliding window, so that it can be fed in arrival order, chunk by chunk, and
hold only what a later decision can still read (issue 19; the controller's
module docstring, "Streaming").

:class:`ReplayWindow` keeps

* the **arrival-order columns** (``stream``, ``ts``, ``arrival``, the
  progress facts ``M``, ``T``, ``delay``, the running maximum delay, key ids,
  the model's own columns) of indexes ``[base, end)``: a decision at ``t``
  reads its history window -- the latest ``max(P, L)``, widened back to
  ``10 / (1 - Q)`` tuples -- and the tuples arrived since the previous one,
  and later decisions start no earlier, so :meth:`trim` forgets the rest;
* per stream, the **partner counters** -- (counter position, arrival, ts)
  sorted by position: a tuple's density counts the partners arrived by ``t``
  with ``ts`` in ``[ts - max(W_j, b), ts + max(W_own, b)]`` (keyed) or in its
  basic window -- of the partners a held tuple or a later one may still
  count: those with ``ts`` at least ``max(W, b)`` below the smallest ``ts``
  held or to come (the caller's ``later_ts_min``: how far the disorder still
  to come reaches back);
* per stream, its **arrival times** since ``max(rate history, probe)``
  before the last decision time and since one rate history before its own
  latest arrival (the rate and bad-row triggers', the stall backlog's
  readings), with the count of those before them, its first arrival, and its
  late arrivals counted up to each.

All counts it answers are the whole run's: an index is global, a stream's
arrival count includes what it forgot.  The running maxima (``M``, the
largest delay) are carried across chunks.
"""

from __future__ import annotations

import numpy as np

from ..base.sorting import PACK_LIMIT, gather_ranges
from ..base.timeunits import NEG_INF


class ReplayWindow:
    """The replay as one controller holds it (module docstring).

    ``key_max``: the largest key id of the run (``None``: no keys); keyed
    counters pack ``(key, ts)`` into an int64 when the run's ``ts_range`` and
    ``key_max`` fit (:data:`~streamjoin.pipelines.base.sorting.PACK_LIMIT`),
    else they count by ``ts`` alone."""

    def __init__(self, n: int, W: np.ndarray, cfg, *, ts_range: tuple[int, int], key_max: int | None):
        self.n, self.W, self.cfg = n, W, cfg
        self.keyed, self.t0, self.key_span = False, 0, 0
        if key_max is not None:
            t0, t1 = ts_range
            self.pad = int(W.max(initial=0)) + cfg.basic_window_us + 1
            span = t1 - t0 + 2 * self.pad + 1
            if int(key_max) < PACK_LIMIT // span:   # (key, ts) packs into an int64
                self.keyed, self.t0, self.key_span = True, t0, span
        self.base = self.end = 0
        self.win: dict[str, np.ndarray] = {}
        self.ranges: list = []
        self.M_last = np.full(n, NEG_INF, dtype=np.int64)
        self.maxdelay_last = NEG_INF
        self.arr_s = [np.empty(0, np.int64) for _ in range(n)]
        self.arr_off = [0] * n
        self.arr_first = [None] * n
        self.late_cum = [np.zeros(1, np.int64) for _ in range(n)]
        self.by_ts = [(np.empty(0, np.int64),) * 3 for _ in range(n)]
        self.held_peak = 0     # the most tuples held at once (window, counters, arrivals)

    def ingest(self, stream, ts, arrival, key, later_ts_min, *, M=None, T=None, delay=None, extra=None) -> None:
        """Append tuples (replay order): their progress facts (``M``, ``T``, ``delay``,
        running maxima carried in; given, or computed as :mod:`~streamjoin.pipelines.replay.progress`
        does), the per-stream arrivals, the partner counters; forget the partners no
        held or later tuple can count (``later_ts_min``: ``None`` none follows,
        ``NEG_INF`` unknown).  ``extra(cols)``: adds the model's own columns."""
        n, k = self.n, len(arrival)
        if M is None:
            M = np.empty((n, k), dtype=np.int64)
            for i in range(n):   # M_i: the running max of stream i's ts, carried in
                np.maximum(np.maximum.accumulate(np.where(stream == i, ts, NEG_INF)), self.M_last[i], out=M[i])
            T = M.min(axis=0)
            delay = M[stream, np.arange(k)] - ts
        self.M_last = M[:, -1].copy()
        maxdelay = np.maximum(np.maximum.accumulate(delay), self.maxdelay_last)
        self.maxdelay_last = int(maxdelay[-1])
        cols = {"stream": stream, "ts": ts, "arrival": arrival, "delay": delay, "T": T, "M": M,
                "maxdelay": maxdelay}
        if self.keyed:
            cols["key"] = key
        if extra is not None:
            extra(cols)
        self.win = ({c: np.concatenate([self.win[c], v], axis=-1) for c, v in cols.items()}
                    if self.end > self.base else cols)
        self.end += k
        probe = self.cfg.probe_us
        pos = self.position(ts, cols.get("key"))
        for i in range(n):
            mine = stream == i
            a_i = arrival[mine]
            if not len(a_i):
                continue
            if self.arr_first[i] is None:
                self.arr_first[i] = int(a_i[0])
            self.arr_s[i] = np.concatenate([self.arr_s[i], a_i])
            self.late_cum[i] = np.concatenate([self.late_cum[i], np.cumsum(delay[mine] > probe) + self.late_cum[i][-1]])
            order = np.argsort(pos[mine], kind="stable")
            old = self.by_ts[i]
            merged = [np.concatenate([o, new[order]]) for o, new in zip(old, (pos[mine], a_i, ts[mine]))]
            if len(old[0]):
                o = np.argsort(merged[0], kind="stable")
                merged = [m[o] for m in merged]
            self.by_ts[i] = tuple(merged)
        # a counter range starts at most max(W, b) below its tuple's ts: the partners
        # below every held tuple's range and every later tuple's are forgotten
        if later_ts_min is None or later_ts_min > NEG_INF:
            reach = max(int(self.W.max(initial=0)), self.cfg.basic_window_us)
            low = int(self.win["ts"].min())
            if later_ts_min is not None:
                low = min(low, int(later_ts_min))
            for j in range(n):
                keep = self.by_ts[j][2] >= low - reach
                if not keep.all():
                    self.by_ts[j] = tuple(c[keep] for c in self.by_ts[j])
        self.ranges = [self._partner_ranges(j) for j in range(n)]
        held = (self.end - self.base) + sum(len(c[0]) for c in self.by_ts) + sum(len(a) for a in self.arr_s)
        self.held_peak = max(self.held_peak, held)

    def trim(self, lo: int) -> None:
        """Forget indexes below ``lo`` (no later decision reads them)."""
        d = lo - self.base
        if d <= 0:
            return
        self.win = {c: v[..., d:] for c, v in self.win.items()}
        self.ranges = [(lo_[d:], count[d:], last[d:], span if np.ndim(span) == 0 else span[d:])
                       for lo_, count, last, span in self.ranges]
        self.base = lo

    def forget_arrivals(self, done: int) -> None:
        """Forget the per-stream arrivals no trigger or backlog after ``done`` (the
        last decision tick) reads (module docstring)."""
        cfg = self.cfg
        for i in range(self.n):
            times = self.arr_s[i]
            upto = int(np.searchsorted(times, done, side="right"))
            bound = done - max(cfg.rate_history_us, cfg.probe_us)
            if upto:   # the backlog reads the history before the stream's latest arrival
                bound = min(bound, int(times[upto - 1]) - cfg.rate_history_us)
            drop = int(np.searchsorted(times, bound, side="right"))
            if drop:
                self.arr_s[i] = times[drop:]
                self.late_cum[i] = self.late_cum[i][drop:]
                self.arr_off[i] += drop

    def col(self, name: str, idx: np.ndarray) -> np.ndarray:
        """Column ``name`` at held indexes ``idx`` (global; the window's last axis)."""
        return self.win[name][..., idx - self.base]

    def count_upto(self, t: int) -> int:
        """Tuples with ``arrival <= t`` (global; ``t`` at or after the held window's start)."""
        return self.base + int(np.searchsorted(self.win["arrival"], t, side="right"))

    def position(self, ts: np.ndarray, key: np.ndarray | None) -> np.ndarray:
        """Counter position of a tuple: its ``ts``, or ``(key, ts)`` packed (keyed joins)."""
        if not self.keyed:
            return ts
        return key * self.key_span + (ts - self.t0 + self.pad)

    def density(self, t: int, idx: np.ndarray) -> np.ndarray:
        """Partner density per stream around each ``ts[idx]``: ``(n, len(idx))`` tuples per us.

        The operator's counters of tuples *arrived by t*: per basic window
        ``b`` of event time, read only for the windows the tuples fall in (cost:
        the tuples in those windows, never the span); in a keyed join, per key
        over the tuple's partner window (the partners it can match: the
        selectivity of seed 002 (11)-(12) observed per key, not a constant;
        cost: its partners).
        """
        out = np.zeros((self.n, len(idx)))
        if not len(idx):
            return out
        loc = idx - self.base
        for j in range(self.n):
            lo, count, last, span = self.ranges[j]
            c = count[loc]
            # only ranges with a partner still to arrive after t need reading (the recent tuples)
            open_ = np.flatnonzero(last[loc] > t)
            if len(open_):
                sub = loc[open_]
                n_sub = count[sub]
                late = (gather_ranges(self.by_ts[j][1], lo[sub], n_sub) > t).astype(np.int64)
                ends = np.cumsum(n_sub)
                c_late = np.concatenate([[0], np.cumsum(late)])
                c = c.copy()
                c[open_] -= c_late[ends] - c_late[ends - n_sub]
            out[j] = c / (span[loc] if isinstance(span, np.ndarray) else span)
        return out

    def _partner_ranges(self, j: int):
        """For every held tuple, its counter range in stream ``j`` (module docstring of
        :meth:`density`): ``(first, count, latest arrival in it, width)``, once per
        chunk, so that a decision reads only the ranges with a partner still to arrive.

        Without keys: the basic window ``b`` of event time the tuple falls in;
        with keys, per key, a basic window is too sparse (a feeder's alerts, once
        a day): the same key's partners over the tuple's whole partner window
        ``[ts - max(W_j, b), ts + max(W_own, b)]``.
        """
        b = self.cfg.basic_window_us
        ts_x = self.win["ts"]
        pos_j, arr_j, _ = self.by_ts[j]
        if self.keyed:
            key = self.win["key"]
            below = np.maximum(self.W[j], b)
            above = np.maximum(self.W[self.win["stream"]], b)
            lo_pos = self.position(ts_x - below, key)
            hi_pos = self.position(ts_x + above, key) + 1
            span = below + above + 1
        else:
            lo_pos = (ts_x // b) * b
            hi_pos = lo_pos + b
            span = b
        lo = np.searchsorted(pos_j, lo_pos, side="left")
        count = np.searchsorted(pos_j, hi_pos, side="left") - lo
        last = np.full(len(ts_x), NEG_INF, dtype=np.int64)
        full = np.flatnonzero(count > 0)
        if len(full):
            vals = gather_ranges(arr_j, lo[full], count[full])
            starts = np.concatenate([[0], np.cumsum(count[full])[:-1]])
            last[full] = np.maximum.reduceat(vals, starts)
        return lo, count, last, span
