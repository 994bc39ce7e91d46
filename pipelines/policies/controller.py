"""Online controllers for recall-target policies (SPEC §4.3): ``qjoin`` and ``qkslack``.

A controller watches the replay the way an online operator would and, at a
sequence of *decision times*, picks per-stream values -- the retention
``d_i`` (``qjoin``, symmetric family) or the slack ``K_i`` (``qkslack``,
sorting family) -- that should keep recall ``>= Q`` in every period ``P``
while holding as few tuples (``qjoin``) or waiting as little (``qkslack``)
as possible.  The output is a :class:`Schedule`: the decision log plus the
``(n, N)`` matrix of values per arrival index that the closed-form engine
(:mod:`streamjoin.pipelines.replay.progress`) and the reference replay consume.

Guarantees
----------
* **Online.**  A decision made at time ``t`` uses only tuples (and
  quarantined rows) with ``arrival <= t``, and applies to indexes with
  ``arrival > t``.  So changing or removing tuples that arrive after ``t``
  never changes a decision made at or before ``t`` (property-tested).
* It never looks at truth: its statistics are lags/delays of arrived tuples,
  arrival rates, basic-window counters of arrived tuples (partner densities),
  its own horizons and drops, and counts of quarantined rows.
* **Cost bounded by the input**, never by the span, the period count or the
  granularity: decisions are taken only where they govern an arrival (at most
  one per gap between arrivals, at most one per arrival), each looks at the
  tuples of its history window (their partner-counter ranges are found once
  per run; a decision reads only the ranges a partner may still arrive in),
  and the candidate settings are a few hundred quantiles of observed lags --
  never a grid of ``max delay / g`` steps.

Settings and their defaults: :class:`~.recall_target.RecallTarget`; decision times
(interval, rate, bad rows): :mod:`.triggers`; each controller's model: :mod:`.qjoin`
(retention, ramps of partner offsets) and :mod:`.qkslack` (slack, delay quantiles).

What a decision aims at
-----------------------
* **Three horizons.**  The latest ``P`` (seed 002's large window, widened
  back until it holds ``10 / (1 - Q)`` tuples, so that the tail the target
  lives in is sampled: Q = 0.99 needs 1,000) is solved
  for a whole period's goal, the latest ``L`` (what changed just now) for what
  the rest of this period needs (below); and the needs of the last
  ``memory_periods`` (a week of periods, at least 100) completed periods --
  the latest-``P`` solution at each period's end -- are remembered, and per
  stream the larger of their 95th percentile and their ``(1 + Q) / 2``
  quantile weighted by each period's expected results is kept in force
  (qjoin solves each period's need for ``Q`` itself, qkslack for the steady
  goal ``Q`` + margin, at most ``Q + 3 (1 - Q) / 4``: ``remember_margin``;
  periods with a stalled stream count in the plain percentile only: the
  backlog model covers a stall when it happens, and one huge burst must not
  weigh like a week of periods).  Purged state cannot come back, so a lag that recurs (a daily
  upload, a weekly batch, a nightly stall) must be covered before it arrives;
  the 95th percentile matches the promise (``Q`` in 95 % of periods).  The
  values in force are the element-wise maximum of the three.
* **The rest of the period** (seed 002 (3)): the goal is the recall the rest
  of the current period needs so that the period reaches ``Q``, given the
  estimated recall of what it has seen so far -- computed from the horizons
  and drops really in force (effective values), so a decision that turned out
  too small is made up for within the period -- never below ``Q``, plus a
  margin: ``(1 - Q) / 4``, or more when a period holds few (or unequally
  productive) tuples -- one-sided 95 % of the sampling spread of a period's
  recall, ``1.645 sqrt(Q (1 - Q) / n_eff)`` (:meth:`Controller._margin`),
  since the promise is per period, not on average.
* **Stalls.**  A stream that has been silent for longer than
  ``rate_min_count`` expected arrivals owes a backlog: about ``rate x
  (silence + probe)`` tuples (the stall may last until the next check) that
  will arrive in a burst, late by up to that long.  The backlog enters the
  estimate as tuples with lags spread evenly over ``[0, silence + probe]``
  and the stream's mean productivity, so the controller keeps
  what the target needs for it -- no more -- until that many late tuples have
  arrived (a burst drains over many decisions) (a fixed floor of the whole silence
  had made the target irrelevant whenever a stream stalled).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base.sorting import PACK_LIMIT, gather_ranges
from ..base.timeunits import NEG_INF, default_granularity
from .recall_target import (BACKLOG_POINTS, MEMORY_QUANTILE, REMEMBER_BUDGET, TAIL_SAMPLES, RecallTarget, Resolved,
                            Schedule, candidates, in_force, ramp_sums, runs, search, search_product)
from .triggers import fired, probe_ticks

class Controller:
    """Shared event loop; subclasses implement the model (``_stats``, ``_choose``, ``_commit``)."""

    kind = ""
    value_key = ""
    #: remember each period's need for the steady goal (Q plus its margin), not for Q itself
    remember_margin = False

    def __init__(self, replay, windows, target: RecallTarget, bad_arrivals=None, keys=None):
        self.r = replay
        self.n = replay.n
        self.N = replay.N
        self.W = np.asarray(windows, dtype=np.int64)
        self.target = target
        self.trig = target.triggers
        span = int(replay.arrival[-1] - replay.arrival[0]) if self.N else 0
        self.cfg = Resolved.of(target, span, self.W)
        self.bad = [np.sort(np.asarray(b, dtype=np.int64)) for b in (bad_arrivals or [])] or [
            np.empty(0, np.int64) for _ in range(self.n)]
        self.arr_by_stream = [replay.arrival[replay.stream == i] for i in range(self.n)]
        # per stream, late arrivals (delay above a probe) counted up to each of its arrivals:
        # how much of a stalled stream's backlog has been delivered
        self.late_count = [np.concatenate([[0], np.cumsum(replay.delay[replay.stream == i] > self.cfg.probe_us)])
                           for i in range(self.n)]
        self.debt: dict[int, tuple[float, int, int]] = {}   # stream -> (tuples owed, late by, arrivals then)
        # per stream, (counter position, arrival) sorted by position: basic-window
        # counters are slices of it.  With keys, a keyed operator's state is per key:
        # the position packs (key, ts) so a basic window is counted per key.
        self.key, self.t0, self.key_span = None, 0, 0
        if keys is not None and self.N:
            key = np.empty(self.N, dtype=np.int64)
            for i, pos in enumerate(replay.index_of):
                key[pos] = np.asarray(keys[i], dtype=np.int64)
            t0, t1 = int(replay.ts.min()), int(replay.ts.max())
            self.pad = int(self.W.max(initial=0)) + self.cfg.basic_window_us + 1
            span = t1 - t0 + 2 * self.pad + 1
            if int(key.max(initial=0)) < PACK_LIMIT // span:   # (key, ts) packs into an int64
                self.key, self.t0, self.key_span = key, t0, span
        self.by_ts = []
        for i in range(self.n):
            mine = replay.stream == i
            pos_i = self._position(replay.ts[mine], None if self.key is None else self.key[mine])
            order = np.argsort(pos_i, kind="stable")
            self.by_ts.append((pos_i[order], self.arr_by_stream[i][order]))
        self.ranges = [self._partner_ranges(j) for j in range(self.n)] if self.N else []
        # running maximum delay over all streams: MP-K-slack's bound (and the search ceiling)
        self.maxdelay = np.maximum.accumulate(replay.delay) if self.N else np.empty(0, np.int64)
        self.decision_times: list[int] = []
        self.decision_values: list[np.ndarray] = []
        self.log: list[dict[str, Any]] = []
        self.committed = 0               # indexes [0, committed) have their effective state computed
        self.period_w: dict[int, float] = {}
        self.period_kept: dict[int, float] = {}
        self.period_need: dict[int, np.ndarray] = {}   # per period: the latest-P solution at its end
        self.stalled: set[int] = set()                 # periods with a stalled stream (and the next)
        self._memo: tuple[int, np.ndarray | None] | None = None   # (period, _remembered(period))

    # ------------------------------------------------------------------ events

    def run(self) -> Schedule:
        """Process every decision event in time order and build the schedule."""
        if self.N == 0:
            return Schedule(np.zeros((self.n, 0), dtype=np.int64), [], self._settings())
        for t, triggers in self._events():
            self._decide(t, triggers)
        return Schedule(self._values_for(np.arange(self.N)), self.log, self._settings())

    def _settings(self) -> dict[str, Any]:
        from dataclasses import asdict
        return asdict(self.cfg)

    def _events(self) -> list[tuple[int, list[dict]]]:
        """Decision times with their triggers: at most one interval tick and one probe
        tick per gap between arrivals (module docstring); vectorised."""
        cfg = self.cfg
        first = int(self.r.arrival[0])
        events: dict[int, list[dict]] = {}
        for t in probe_ticks(self.r.arrival, first, cfg.interval_us, cfg.interval_us).tolist():
            events[t] = [{"kind": "interval"}]
        ticks = probe_ticks(self.r.arrival, first, cfg.probe_us, cfg.interval_us + cfg.probe_us)
        for t, found in fired(self.trig, ticks, cfg.probe_us, first, cfg.rate_history_us,
                              self.arr_by_stream, self.bad).items():
            events.setdefault(t, []).extend(found)
        return sorted(events.items())

    # ---------------------------------------------------------------- decision

    def _decide(self, t: int, triggers: list[dict]) -> None:
        """Make one decision at time ``t`` from tuples with ``arrival <= t``."""
        cfg = self.cfg
        arrival = self.r.arrival
        hi = int(np.searchsorted(arrival, t, side="right"))  # indexes [0, hi) have arrived
        spans = sorted({cfg.history_us, cfg.interval_us}, reverse=True)   # the latest P, then the latest L
        starts = [int(np.searchsorted(arrival, t - span, side="right")) for span in spans]
        # the latest P, widened back until it holds enough tuples to resolve the target's tail
        tail = int(np.ceil(TAIL_SAMPLES / max(1.0 - float(self.target.recall), 1e-3)))
        starts[0] = max(min(starts[0], hi - tail), 0)
        long_span = max(spans[0], t - int(arrival[starts[0]]) + 1) if starts[0] < hi else spans[0]
        # one pass of per-tuple statistics serves the commit and both histories (same t, same counters)
        lo_all = min(starts[0], self.committed)
        base = self._stats(np.arange(lo_all, hi), t)
        self._commit(hi, t, _slice(base, self.committed - lo_all))
        first = int(arrival[0])
        # the goal for the rest of this period (seed 002 (3)): what the period still needs
        period = (t - first) // cfg.period_us
        period_end = first + (period + 1) * cfg.period_us
        ceiling = int(self.maxdelay[hi - 1]) if hi else 0
        backlog = self._backlog(t, hi)
        ceiling = max([ceiling] + [silence for _, _, silence in backlog])   # a backlog is late by its silence
        g = cfg.granularity_us or default_granularity(ceiling)
        stats = [self._with_backlog(_slice(base, lo - lo_all), backlog) for lo in starts]
        w_long = float(stats[0]["w"].sum())
        w_future = w_long * max(period_end - t, 0) / max(long_span, 1)
        w_past = self.period_w.get(period, 0.0)
        kept_past = self.period_kept.get(period, 0.0)
        need = float(self.target.recall)
        if w_future > 0:
            need = (self.target.recall * (w_past + w_future) - kept_past) / w_future
        margin = self._margin(stats[0]["w"], long_span)
        steady = min(1.0, float(self.target.recall) + margin)           # what a whole period needs
        goal = min(1.0, max(float(self.target.recall), need) + margin)   # what the rest of this one needs
        chosen, estimate, considered = [], None, None
        for k, st in enumerate(stats):
            if float(st["w"].sum()) <= 0:
                continue
            # the latest P at the steady goal; the latest L at this period's goal
            aim = steady if (k == 0 and len(stats) > 1) else goal
            values, est, n_cand = self._choose(st, aim, ceiling, g)
            chosen.append(values)
            if k == 0:
                estimate, considered = est, n_cand
                # what a period like the latest P needed, from the tuples it saw (a stall's
                # expected backlog is not a need it had): for Q itself, or (remember_margin)
                # for the steady goal, Q plus the period's sampling margin, spending at most
                # REMEMBER_BUDGET of the loss budget 1 - Q on it (never "keep every lag")
                seen = self._with_backlog(_slice(base, starts[0] - lo_all), ()) if backlog else st
                q = float(self.target.recall)
                aim_q = min(steady, q + REMEMBER_BUDGET * (1.0 - q)) if self.remember_margin else q
                if seen is st and aim == aim_q:
                    need_q = values
                else:
                    need_q = (self._choose(seen, aim_q, ceiling, g)[0]
                              if float(seen["w"].sum()) > 0 else np.zeros(self.n, np.int64))
                self.period_need[period] = (need_q, float(st["w"].sum()))
        if backlog:   # a stall's burst is foreseen by the backlog model, not remembered as a need
            self.stalled.update((period, period + 1))
        remembered = self._remembered(period)
        if remembered is not None:
            chosen.append(remembered)
        if chosen:
            values = np.maximum.reduce(chosen)
        else:  # nothing observed lately: keep the previous values (or MP-K-slack's bound)
            values = self.decision_values[-1].copy() if self.decision_values else np.full(self.n, ceiling, np.int64)
        self.decision_times.append(int(t))
        self.decision_values.append(values.astype(np.int64))
        entry = {
            "time_us": int(t),
            "reason": "+".join(sorted({tr["kind"] for tr in triggers})),
            "triggers": [tr for tr in triggers if tr["kind"] != "interval"],
            "values_us": [int(v) for v in values],
            "target": round(goal, 6),
            "estimated_recall": None if estimate is None else round(float(estimate), 6),
            "granularity_us": int(g),
            "candidates": considered,
            "history_weight": round(w_long, 3),
            "remembered_us": None if remembered is None else [int(v) for v in remembered],
        }
        if backlog:
            entry["backlog"] = [{"stream": i, "tuples": round(c, 1), "silence_us": int(s)} for i, c, s in backlog]
        entry[self.value_key] = entry["values_us"]
        self.log.append(entry)

    def _remembered(self, period: int) -> np.ndarray | None:
        """Per stream, what the last ``memory_periods`` completed periods needed for
        ``Q`` (qkslack: for ``Q`` + margin; the latest-P solution at each
        period's end): the larger of their 95th percentile and their
        ``(1 + Q) / 2`` quantile weighted by each period's expected results.

        Purged state cannot come back, so a lag that recurs (a daily upload, a
        weekly batch) must be covered before it arrives, not after.  The plain
        percentile keeps ``Q`` in 95 % of periods; the weighted one keeps the
        overall recall when the rare periods hold many results (a nightly
        batch of late clicks: 3 % of periods, a fifth of the results), leaving
        them half of the overall loss budget ``1 - Q``.  Periods in which a
        stream stalled (and the next, where its burst lands) count in the plain
        percentile only: the backlog model foresees a stall when it happens,
        and one huge burst must not hold an hour of state for a week; stalls
        that recur (a feed that stalls every few minutes) still show in the
        plain percentile.

        Needs of completed periods are final, so the answer changes only when a
        period ends: it is computed once per period (cached)."""
        if self._memo is not None and self._memo[0] == period:
            return self._memo[1]
        self._memo = (period, self._remember(period))
        return self._memo[1]

    def _remember(self, period: int) -> np.ndarray | None:
        recent = [p for p in self.period_need if period - self.cfg.memory_periods <= p < period]
        if not recent:
            return None
        values = np.stack([self.period_need[p][0] for p in recent])
        # a stall's burst weighs nothing here: its period counts once, like any other
        weights = np.array([0.0 if p in self.stalled else self.period_need[p][1] for p in recent])
        out = np.quantile(values, MEMORY_QUANTILE, axis=0, method="higher").astype(np.int64)
        level = (1.0 + float(self.target.recall)) / 2   # half the overall loss budget left to rare periods
        if weights.sum() > 0:
            for i in range(self.n):
                order = np.argsort(values[:, i], kind="stable")
                cum = np.cumsum(weights[order])
                k = int(np.searchsorted(cum, level * cum[-1], side="left"))
                out[i] = max(out[i], int(values[order[min(k, len(order) - 1)], i]))
        return out

    def _margin(self, w: np.ndarray, span: int) -> float:
        """What the goal adds to the need: the user's ``margin``, else the larger of
        ``(1 - Q) / 4`` and one-sided 95 % of a period's sampling spread,
        ``1.645 * sqrt(Q (1 - Q) / n_eff)`` with ``n_eff = (sum w)^2 / sum w^2``
        of the history scaled to a period (few, unequal tuples per period: a
        wider margin, so that 95 % of periods reach ``Q``, not half of them)."""
        q = float(self.target.recall)
        if self.target.margin is not None:
            return float(self.target.margin)
        sq = float((w * w).sum())
        n_eff = float(w.sum()) ** 2 / sq * self.cfg.period_us / max(span, 1) if sq > 0 else 0.0
        spread = 1.645 * (q * (1.0 - q) / max(n_eff, 1.0)) ** 0.5
        return max((1.0 - q) / 4, spread)

    def _backlog(self, t: int, hi: int) -> list[tuple[int, float, int]]:
        """Streams that owe a backlog: ``(stream, tuples owed, how late)``.

        A stream silent for longer than ``rate_min_count`` expected arrivals
        (at its rate before the silence) owes ``rate x (silence + probe)``
        tuples, late by up to ``silence + probe``.  After it resumes, the debt
        stays until that many late tuples (delay above a probe) have arrived:
        a burst drains over many decisions, and a retention dropped at its
        first tuple could never be raised again for the rest of it.
        """
        cfg = self.cfg
        first = int(self.r.arrival[0])
        out = []
        for i in range(self.n):
            times = self.arr_by_stream[i]
            upto = int(np.searchsorted(times, t, side="right"))
            if upto == 0:
                continue
            last = int(times[upto - 1])
            silence = t - last
            # its rate before it fell silent (a stall longer than the rate history must still count)
            hist_lo = max(last - cfg.rate_history_us, first - 1)
            start = int(np.searchsorted(times, hist_lo, side="right"))
            rate = (upto - start) / max(last - hist_lo, 1)
            if silence >= cfg.probe_us // 2 and rate * silence >= self.trig.rate_min_count:
                # the stall may last until the next probe: owe that much more, that much later
                late_by = silence + cfg.probe_us
                self.debt[i] = (float(rate * late_by), int(late_by), upto)
                out.append((i, float(rate * late_by), int(late_by)))
            elif i in self.debt:
                owed, late_by, since = self.debt[i]
                paid = int(self.late_count[i][upto] - self.late_count[i][since])
                if owed - paid >= self.trig.rate_min_count:
                    out.append((i, float(owed - paid), late_by))
                else:
                    del self.debt[i]
        return out

    def _values_for(self, idx: np.ndarray) -> np.ndarray:
        """``(n, len(idx))`` values in force at indexes ``idx`` (decision at t applies to arrival > t)."""
        initial = self._initial(idx)
        if not self.decision_values:
            return initial
        table = np.stack(self.decision_values, axis=1)  # (n, decisions): built once, at the end of run()
        return in_force(np.asarray(self.decision_times, dtype=np.int64), table, self.r.arrival[idx], initial)

    def _values_in_force(self, idx: np.ndarray) -> np.ndarray:
        """``_values_for`` for indexes arrived since the last decision (what ``_commit``
        reads): the last decision's values, or the initial bound before the first."""
        if not self.decision_values:
            return self._initial(idx)
        return np.broadcast_to(self.decision_values[-1][:, None], (self.n, len(idx)))

    # ------------------------------------------------------- model helpers

    def _position(self, ts: np.ndarray, key: np.ndarray | None) -> np.ndarray:
        """Counter position of a tuple: its ``ts``, or ``(key, ts)`` packed (keyed joins)."""
        if key is None:
            return ts
        return key * self.key_span + (ts - self.t0 + self.pad)

    def _density(self, t: int, idx: np.ndarray) -> np.ndarray:
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
        for j in range(self.n):
            lo, count, last, span = self.ranges[j]
            c = count[idx]
            # only ranges with a partner still to arrive after t need reading (the recent tuples)
            open_ = np.flatnonzero(last[idx] > t)
            if len(open_):
                sub = idx[open_]
                n_sub = count[sub]
                late = (gather_ranges(self.by_ts[j][1], lo[sub], n_sub) > t).astype(np.int64)
                ends = np.cumsum(n_sub)
                c_late = np.concatenate([[0], np.cumsum(late)])
                c = c.copy()
                c[open_] -= c_late[ends] - c_late[ends - n_sub]
            out[j] = c / (span[idx] if isinstance(span, np.ndarray) else span)
        return out

    def _partner_ranges(self, j: int):
        """For every tuple, its counter range in stream ``j`` (module docstring of
        :meth:`_density`): ``(first, count, latest arrival in it, width)``, once per
        run, so that a decision reads only the ranges with a partner still to arrive.

        Without keys: the basic window ``b`` of event time the tuple falls in;
        with keys, per key, a basic window is too sparse (a feeder's alerts, once
        a day): the same key's partners over the tuple's whole partner window
        ``[ts - max(W_j, b), ts + max(W_own, b)]``.
        """
        b = self.cfg.basic_window_us
        ts_x = self.r.ts
        pos_j, arr_j = self.by_ts[j]
        if self.key is not None:
            below = np.maximum(self.W[j], b)
            above = np.maximum(self.W[self.r.stream], b)
            lo_pos = self._position(ts_x - below, self.key)
            hi_pos = self._position(ts_x + above, self.key) + 1
            span = below + above + 1
        else:
            lo_pos = (ts_x // b) * b
            hi_pos = lo_pos + b
            span = b
        lo = np.searchsorted(pos_j, lo_pos, side="left")
        count = np.searchsorted(pos_j, hi_pos, side="left") - lo
        last = np.full(self.N, NEG_INF, dtype=np.int64)
        full = np.flatnonzero(count > 0)
        if len(full):
            vals = gather_ranges(arr_j, lo[full], count[full])
            starts = np.concatenate([[0], np.cumsum(count[full])[:-1]])
            last[full] = np.maximum.reduceat(vals, starts)
        return lo, count, last, span

    def _spans(self, idx: np.ndarray):
        """Per tuple and partner stream: owned partner-offset range ``[-W_j, U_j]`` (inclusive, us)."""
        s = self.r.stream[idx]
        ts = self.r.ts[idx]
        upper = np.empty((self.n, len(idx)), dtype=np.int64)
        for j in range(self.n):
            Mj = self.r.M[j, idx]
            upper[j] = np.where(Mj == NEG_INF, -self.W[j] - 1, np.minimum(self.W[s], Mj - ts))
        return s, upper

    def _mean_weight(self, s: np.ndarray, w: np.ndarray, i: int, rates: np.ndarray) -> float:
        """Mean weight of stream ``i``'s tuples, or the cross count its rates imply."""
        mine = w[s == i]
        if len(mine):
            return float(mine.mean())
        return float(np.prod([(self.W[i] + self.W[j] + 1) * rates[j] for j in range(self.n) if j != i]))

    def _rates(self, s: np.ndarray) -> np.ndarray:
        return np.bincount(s, minlength=self.n)[:self.n].astype(np.float64) / max(self.cfg.history_us, 1)

    def _accumulate(self, idx, w, kept) -> None:
        per = (self.r.arrival[idx] - int(self.r.arrival[0])) // self.cfg.period_us
        for p, a, z in runs(per):
            self.period_w[p] = self.period_w.get(p, 0.0) + float(w[a:z].sum())
            self.period_kept[p] = self.period_kept.get(p, 0.0) + float(kept[a:z].sum())


def _model(st: dict, key, build):
    """The goal-independent part of a search over statistics ``st`` (candidates and
    curves), built once per statistics and ``key`` (the latest P is searched for the
    steady goal and for Q: one model)."""
    cached = st.get("_model")
    if cached is None or cached[0] != key:
        cached = st["_model"] = (key, build())
    return cached[1]


def _slice(st: dict, a: int) -> dict:
    """Per-tuple statistics from position ``a`` on (per-stream rows sliced along their last axis)."""
    return {k: (v[..., a:] if isinstance(v, np.ndarray) else v) for k, v in st.items()}


class QJoinController(Controller):
    """Per-stream retention ``d_i`` for a recall target (seed 002, Algorithm 1)."""

    kind = "qjoin"
    value_key = "retention_us"

    def _initial(self, idx: np.ndarray) -> np.ndarray:
        return np.broadcast_to(self.maxdelay[idx], (self.n, len(idx)))

    def _stats(self, idx: np.ndarray, t: int):
        """Per tuple: stream, weight (expected results) and, per partner stream, its
        ramp ``(start, end)`` in ``d_j`` (module docstring)."""
        s, upper = self._spans(idx)
        lower = -self.W[:, None]
        span = np.maximum(upper - lower + 1, 0)
        dens = self._density(t, idx)
        T = self.r.T[idx]
        lag = np.where(T == NEG_INF, -(2**40), T - self.r.ts[idx])
        w = np.ones(len(idx))
        for j in range(self.n):
            w = w * np.where(s == j, 1.0, span[j] * dens[j])
        start = lag[None, :] - self.W[:, None] - upper - 1
        end = np.broadcast_to(lag, start.shape)
        return {"s": s, "w": w, "start": start, "end": end}

    def _with_backlog(self, st: dict, backlog) -> dict:
        """Add a stalled stream's owed tuples (lags even over ``[0, silence]``, the
        stream's mean weight, partners over the full span) and the streams' rates."""
        s, w, start, end = st["s"], st["w"], st["start"], st["end"]
        rates = self._rates(s)
        if backlog:
            extra_s, extra_w, extra_lag = [], [], []
            for i, owed, silence in backlog:
                extra_s.append(np.full(BACKLOG_POINTS, i))
                extra_w.append(np.full(BACKLOG_POINTS, owed * self._mean_weight(s, w, i, rates) / BACKLOG_POINTS))
                extra_lag.append((np.arange(BACKLOG_POINTS) + 0.5) * silence / BACKLOG_POINTS)
            bs = np.concatenate(extra_s)
            blag = np.concatenate(extra_lag).astype(np.int64)
            bupper = np.broadcast_to(self.W[bs], (self.n, len(bs)))  # the others are ahead: full span
            s = np.concatenate([s, bs])
            w = np.concatenate([w, np.concatenate(extra_w)])
            start = np.concatenate([start, blag[None, :] - self.W[:, None] - bupper - 1], axis=1)
            end = np.concatenate([end, np.broadcast_to(blag, (self.n, len(blag)))], axis=1)
        return {"s": s, "w": w, "start": start, "end": end, "rate": rates}

    def _share(self, st, d: np.ndarray) -> np.ndarray:
        """Kept share of each tuple's results under ``d`` (``(n,)`` or ``(n, len)``)."""
        s, start, end = st["s"], st["start"], st["end"]
        d = np.broadcast_to(np.asarray(d).reshape(self.n, -1), start.shape)
        share = np.ones(len(s))
        for j in range(self.n):
            width = end[j] - start[j]
            part = np.where(width > 0, np.clip((d[j] - start[j]) / np.maximum(width, 1), 0.0, 1.0),
                            (d[j] >= end[j]).astype(np.float64))
            share = share * np.where(s == j, 1.0, part)
        return share

    def _choose(self, st, goal: float, ceiling: int, g: int):
        s, w = st["s"], st["w"]
        total = float(w.sum())
        cand, curves = _model(st, (ceiling, g), lambda: self._curves(st, ceiling, g))
        cost = st["rate"]
        if self.n == 2:
            # kept = A_1(d_0) + A_0(d_1): stream 1's tuples probe stream 0 and vice versa
            values, est = search(curves, cand, cost, total, goal, None)
        else:
            def combine(k):
                return float((w * self._share(st, np.array([cand[i][k[i]] for i in range(self.n)]))).sum())
            values, est = search([], cand, cost, total, goal, combine)
        return values, est, [int(len(c)) for c in cand]

    def _curves(self, st, ceiling: int, g: int):
        """Per stream, the candidate retentions and (two streams) the kept weight of
        the tuples probing it at each: what a search for any goal reads."""
        s, w = st["s"], st["w"]
        cand, curves = [], []
        for j in range(self.n):
            probe = s != j
            pts = np.concatenate([st["end"][j][probe], st["start"][j][probe]])
            c = candidates(pts, ceiling, g)
            cand.append(c)
            if self.n == 2:   # the kept weight of the tuples probing j, as a function of d_j
                curves.append(ramp_sums(st["start"][j][probe], st["end"][j][probe], w[probe], c))
        return cand, curves

    def _commit(self, hi: int, t: int, st: dict) -> None:
        """Effective horizons for indexes [committed, hi) (statistics ``st``) and their
        estimated recall, per period."""
        lo = self.committed
        if hi <= lo:
            return
        idx = np.arange(lo, hi)
        d = self._values_in_force(idx)
        T = self.r.T[idx]
        prev = self.H_last if lo else np.full(self.n, NEG_INF, dtype=np.int64)
        cand = np.where(T[None, :] == NEG_INF, NEG_INF, T[None, :] - d)
        H = np.maximum.accumulate(np.concatenate([prev[:, None], cand], axis=1), axis=1)[:, 1:]
        self.H_last = H[:, -1].copy()
        eff = np.where(T[None, :] == NEG_INF, 0, T[None, :] - H)  # effective retention in force
        self._accumulate(idx, st["w"], st["w"] * self._share(st, eff))
        self.committed = hi


class QKSlackController(Controller):
    """Per-stream slack ``K_i`` for a recall target (Ji et al., ICDE 2016, quality-driven K-slack)."""

    kind = "qkslack"
    value_key = "k_us"
    # a period's need is remembered with its sampling margin: a K in force that meets a
    # recurring period's need for Q itself (a Monday's batch) leaves that period below Q
    # about half the time, and its product estimate from a sparse period's few productive
    # tuples is the noisier one; capped at Q + 3 (1 - Q) / 4 (REMEMBER_BUDGET), so that a
    # period with few results is not solved for 1.0 -- every lag it saw -- which held
    # flights' K at 14 h for Q = 0.99 (measured on the corpus: docs/performance.md)
    remember_margin = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.own_max = np.empty((self.n, self.N), dtype=np.int64)
        for i in range(self.n):
            self.own_max[i] = np.maximum.accumulate(np.where(self.r.stream == i, self.r.delay, 0))
        self.R_last = NEG_INF

    def _initial(self, idx: np.ndarray) -> np.ndarray:
        return self.own_max[:, idx]   # exactly MP-K-slack

    def _stats(self, idx: np.ndarray, t: int):
        """Per tuple: stream, productivity weight (expected partners over the whole
        window) and its own delay (it survives iff ``delay <= K_i``)."""
        s = self.r.stream[idx]
        full = (self.W[s][None, :] + self.W[:, None] + 1).astype(np.float64)
        dens = self._density(t, idx)
        w = np.ones(len(idx))
        for j in range(self.n):
            w = w * np.where(s == j, 1.0, full[j] * dens[j])
        return {"s": s, "w": w, "need": self.r.delay[idx].astype(np.int64)}

    def _with_backlog(self, st: dict, backlog) -> dict:
        """Add a stalled stream's owed tuples (delays even over ``[0, silence]``) and the rates."""
        s, w, need = st["s"], st["w"], st["need"]
        rates = self._rates(s)
        for i, owed, silence in backlog:
            mean_w = self._mean_weight(s, w, i, rates)
            s = np.concatenate([s, np.full(BACKLOG_POINTS, i)])
            w = np.concatenate([w, np.full(BACKLOG_POINTS, owed * mean_w / BACKLOG_POINTS)])
            need = np.concatenate([need, ((np.arange(BACKLOG_POINTS) + 0.5) * silence / BACKLOG_POINTS
                                          ).astype(np.int64)])
        return {"s": s, "w": w, "need": need, "rate": rates}

    def _choose(self, st, goal: float, ceiling: int, g: int):
        s, w, need = st["s"], st["w"], st["need"]
        cand, F = _model(st, (ceiling, g), lambda: self._survival(s, w, need, ceiling, g))
        cost = st["rate"]
        if self.n == 2:
            # recall = F_0(K_0) * F_1(K_1): walk K_0, binary-search K_1 on log F (additive)
            values, est = search_product(F, cand, cost, goal)
        else:
            def combine(k):
                return float(np.prod([F[i][k[i]] for i in range(self.n)]))
            values, est = search([], cand, cost, 1.0, goal, combine)
        return values, est, [int(len(c)) for c in cand]

    def _survival(self, s, w, need, ceiling: int, g: int):
        """Per stream, the candidate slacks and the weighted share of its tuples that
        survive each (``delay <= K``): what a search for any goal reads."""
        cand, F = [], []
        for i in range(self.n):
            m = s == i
            c = candidates(need[m], ceiling, g)
            cand.append(c)
            tot = float(w[m].sum())
            if tot > 0:
                order = np.argsort(need[m], kind="stable")
                cw = np.concatenate([[0.0], np.cumsum(w[m][order])])
                F.append(cw[np.searchsorted(need[m][order], c, side="right")] / tot)
            else:
                F.append(np.ones(len(c)))
        return cand, F

    def _commit(self, hi: int, t: int, st: dict) -> None:
        """Release horizon and real drops for indexes [committed, hi) (statistics
        ``st``); per-period survival."""
        lo = self.committed
        if hi <= lo:
            return
        idx = np.arange(lo, hi)
        K = self._values_in_force(idx)
        M = self.r.M[:, idx]
        cand = np.where(M == NEG_INF, NEG_INF, M - K).min(axis=0)
        R = np.maximum.accumulate(np.concatenate([[self.R_last], cand]))
        before = R[:-1]
        self.R_last = int(R[-1])
        dropped = self.r.ts[idx] < before
        s, w = st["s"], st["w"]
        # a result survives iff every member does: per stream survival, multiplied
        per = (self.r.arrival[idx] - int(self.r.arrival[0])) // self.cfg.period_us
        for p, a, z in runs(per):
            share = 1.0
            sa, wa, da = s[a:z], w[a:z], dropped[a:z]
            for i in range(self.n):
                mi = sa == i
                tot = float(wa[mi].sum())
                if tot > 0:
                    share *= float(wa[mi & ~da].sum()) / tot
            tot_w = float(wa.sum())
            self.period_w[p] = self.period_w.get(p, 0.0) + tot_w
            self.period_kept[p] = self.period_kept.get(p, 0.0) + tot_w * share
        self.committed = hi


def schedule(kind: str, replay, windows, target: RecallTarget, bad_arrivals=None, keys=None) -> Schedule:
    """Run the ``qjoin`` or ``qkslack`` controller over a replay (``keys``: per
    stream, key ids in row order, or ``None``)."""
    cls = {"qjoin": QJoinController, "qkslack": QKSlackController}[kind]
    return cls(replay, windows, target, bad_arrivals, keys).run()
