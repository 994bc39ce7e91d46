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
  per chunk; a decision reads only the ranges a partner may still arrive in),
  and the candidate settings are a few hundred quantiles of observed lags --
  never a grid of ``max delay / g`` steps.

Streaming
---------
``Controller(replay, ...).run()`` is the whole-array form: the replay is fed
as one chunk.  :meth:`Controller.streaming` is fed the replay in arrival order,
:meth:`~Controller.on_chunk` by chunk (any cuts, through equal arrivals too),
then :meth:`~Controller.on_eof`; every decision a chunk allows (each tick lies
before an arrival, so all of them) is taken when the chunk comes, and the log
and settings are exactly the whole-array form's (property-tested).  It holds
(:class:`~.window.ReplayWindow`) only what a later decision can read: the
history window (the latest ``max(P, L)``, widened to ``10 / (1 - Q)``
tuples) and the tuples since the last decision; the partners a held or later
tuple may count (``ts`` within ``max(W, b)`` below the smallest held or
later ``ts`` -- the caller bounds the later ones); each stream's arrivals of
the last rate history (the triggers', the backlog's); the needs of the last
``memory_periods`` periods (:class:`~.remembered.RememberedNeeds`).  Up front
it needs the run's first and last arrival (the span sets the default period),
its ``ts`` range and largest key id (keyed counters pack ``(key, ts)``).

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

from ..base.timeunits import NEG_INF, default_granularity
from .recall_target import (BACKLOG_POINTS, REMEMBER_BUDGET, TAIL_SAMPLES, RecallTarget, Resolved,
                            Schedule, candidates, in_force, ramp_sums, runs, search, search_product)
from .triggers import fired, probe_ticks
from .remembered import RememberedNeeds
from .window import ReplayWindow

class Controller:
    """Shared event loop; subclasses implement the model (``_stats``, ``_choose``, ``_commit``).

    Two ways to feed it, one code path: the whole-array form
    ``Controller(replay, ...).run()`` ingests the replay as one chunk; the
    streaming form :meth:`streaming` is fed the replay in arrival order,
    :meth:`on_chunk` by chunk, then :meth:`on_eof` (module docstring,
    "Streaming").  Either way a decision reads the same numbers."""

    kind = ""
    value_key = ""
    #: remember each period's need for the steady goal (Q plus its margin), not for Q itself
    remember_margin = False

    def __init__(self, replay, windows, target: RecallTarget, bad_arrivals=None, keys=None):
        N = replay.N
        key = None
        if keys is not None and N:
            key = np.empty(N, dtype=np.int64)
            for i, pos in enumerate(replay.index_of):
                key[pos] = np.asarray(keys[i], dtype=np.int64)
        self._setup(replay.n, windows, target, bad_arrivals,
                    first=int(replay.arrival[0]) if N else 0, last=int(replay.arrival[-1]) if N else 0,
                    ts_range=(int(replay.ts.min()), int(replay.ts.max())) if N else (0, 0),
                    key_max=None if key is None else int(key.max(initial=0)))
        self.N = N
        if N:
            self.w.ingest(replay.stream, replay.ts, replay.arrival, key, None, M=replay.M, T=replay.T,
                          delay=replay.delay, extra=self._model_columns)
            self._whole = dict(self.w.win)   # run()'s initial values read every index

    @classmethod
    def streaming(cls, n: int, windows, target: RecallTarget, *, first_arrival: int, last_arrival: int,
                  ts_range: tuple[int, int], key_max: int | None = None, bad_arrivals=None) -> Controller:
        """A controller fed in arrival order (:meth:`on_chunk`, :meth:`on_eof`); the run's
        summaries up front (module docstring, "Streaming"; ``key_max`` ``None``: no keys;
        ``bad_arrivals``: per stream, the quarantined rows' arrival times, O(quarantined rows))."""
        self = cls.__new__(cls)
        self._setup(n, windows, target, bad_arrivals, first=int(first_arrival), last=int(last_arrival),
                    ts_range=(int(ts_range[0]), int(ts_range[1])), key_max=key_max)
        self.N = None
        self._range = (int(ts_range[0]), int(ts_range[1]))
        return self

    def _setup(self, n, windows, target, bad_arrivals, *, first, last, ts_range, key_max) -> None:
        self.n = n
        self.W = np.asarray(windows, dtype=np.int64)
        self.target = target
        self.trig = target.triggers
        self.first = first
        self.cfg = Resolved.of(target, last - first, self.W)
        self.bad = [np.sort(np.asarray(b, dtype=np.int64)) for b in (bad_arrivals or [])] or [
            np.empty(0, np.int64) for _ in range(self.n)]
        self.debt: dict[int, tuple[float, int, int]] = {}   # stream -> (tuples owed, late by, late count then)
        # what it holds of the replay (module docstring, "Streaming")
        self.w = ReplayWindow(n, self.W, self.cfg, ts_range=ts_range, key_max=key_max)
        self._last_arr = None                  # the last arrival fed (streaming form)
        self.last_tick = [NEG_INF, NEG_INF]   # the interval's, the probes' (module docstring of .triggers)
        self.decision_times: list[int] = []
        self.decision_values: list[np.ndarray] = []
        self.log: list[dict[str, Any]] = []
        self.committed = 0               # indexes [0, committed) have their effective state computed
        self.period_w: dict[int, float] = {}
        self.period_kept: dict[int, float] = {}
        self.needs = RememberedNeeds(self.cfg.memory_periods, target.recall)
        self.period_need = self.needs.need   # per period: the latest-P solution at its end
        self._init_model()

    def _init_model(self) -> None:
        """The model's own running state (subclasses)."""

    # ------------------------------------------------------------------ events

    def run(self) -> Schedule:
        """Process every decision event in time order and build the schedule."""
        if self.N == 0:
            return Schedule(np.zeros((self.n, 0), dtype=np.int64), [], self._settings())
        self._process(self._whole["arrival"])
        return Schedule(self._values_for(np.arange(self.N)), self.log, self._settings())

    def on_chunk(self, stream, ts, arrival, keys=None, *, later_ts_min: int | None) -> None:
        """Feed the next tuples in replay order (``arrival``, stream, row; a chunk may cut
        through equal arrivals) and make every decision they allow.

        ``keys``: the tuples' key ids (keyed runs); ``later_ts_min``: a lower bound of
        the ``ts`` of every tuple in later chunks (``None``: none follows;
        ``NEG_INF``: unknown, nothing is forgotten): the partners a later tuple may
        count are kept from it on."""
        stream = np.asarray(stream, dtype=np.int64)
        ts, arrival = np.asarray(ts, dtype=np.int64), np.asarray(arrival, dtype=np.int64)
        if not len(arrival):
            return
        prev = self._last_arr
        if (prev is None and int(arrival[0]) != self.first) or (prev is not None and int(arrival[0]) < prev) \
                or np.any(np.diff(arrival) < 0):
            raise ValueError("controller chunks must come in replay order from the declared first arrival")
        if self.w.keyed and (int(ts.min()) < self._range[0] or int(ts.max()) > self._range[1]):
            raise ValueError("controller chunk: ts outside the declared range")
        self.w.ingest(stream, ts, arrival, None if keys is None else np.asarray(keys, dtype=np.int64),
                      later_ts_min, extra=self._model_columns)
        self._last_arr = int(arrival[-1])
        self._process(arrival)

    def on_eof(self) -> Schedule:
        """The decision log and settings once every chunk is in (no decision is left:
        each is taken before an arrival).  ``values`` is ``None``: the log's times and
        values rebuild them (:func:`~.recall_target.decision_table`, :func:`~.recall_target.in_force`)."""
        return Schedule(None, self.log, self._settings())

    def _settings(self) -> dict[str, Any]:
        from dataclasses import asdict
        return asdict(self.cfg)

    def _model_columns(self, cols: dict) -> None:
        """The model's own per-tuple columns of a new chunk (subclasses)."""

    def _process(self, arrival: np.ndarray) -> None:
        """The decisions the tuples of ``arrival`` (just ingested) allow, in time order;
        then forget the per-stream arrivals no later trigger or backlog reads."""
        for t, triggers in self._events(arrival):
            self._decide(t, triggers)
        if max(self.last_tick) > NEG_INF:
            self.w.forget_arrivals(max(self.last_tick))

    def _events(self, arrival: np.ndarray) -> list[tuple[int, list[dict]]]:
        """Decision times with their triggers, among the ticks the arrivals ``arrival``
        bring (later than those taken): at most one interval tick and one probe tick
        per gap between arrivals (module docstring); vectorised."""
        cfg = self.cfg
        first = self.first
        events: dict[int, list[dict]] = {}
        ticks = probe_ticks(arrival, first, cfg.interval_us, cfg.interval_us)
        ticks = ticks[ticks > self.last_tick[0]]
        if len(ticks):
            self.last_tick[0] = int(ticks[-1])
        for t in ticks.tolist():
            events[t] = [{"kind": "interval"}]
        ticks = probe_ticks(arrival, first, cfg.probe_us, cfg.interval_us + cfg.probe_us)
        ticks = ticks[ticks > self.last_tick[1]]
        if len(ticks):
            self.last_tick[1] = int(ticks[-1])
        for t, found in fired(self.trig, ticks, cfg.probe_us, first, cfg.rate_history_us,
                              self.w.arr_s, self.bad, offsets=self.w.arr_off, firsts=self.w.arr_first).items():
            events.setdefault(t, []).extend(found)
        return sorted(events.items())

    # ---------------------------------------------------------------- decision

    def _decide(self, t: int, triggers: list[dict]) -> None:
        """Make one decision at time ``t`` from tuples with ``arrival <= t``."""
        cfg = self.cfg
        w = self.w
        hi = w.count_upto(t)  # indexes [0, hi) have arrived
        spans = sorted({cfg.history_us, cfg.interval_us}, reverse=True)   # the latest P, then the latest L
        starts = [w.count_upto(t - span) for span in spans]
        # the latest P, widened back until it holds enough tuples to resolve the target's tail
        tail = int(np.ceil(TAIL_SAMPLES / max(1.0 - float(self.target.recall), 1e-3)))
        starts[0] = max(min(starts[0], hi - tail), 0)
        long_span = max(spans[0], t - int(w.col("arrival", starts[0])) + 1) if starts[0] < hi else spans[0]
        # one pass of per-tuple statistics serves the commit and both histories (same t, same counters)
        lo_all = min(starts[0], self.committed)
        base_st = self._stats(np.arange(lo_all, hi), t)
        self._commit(hi, t, _slice(base_st, self.committed - lo_all))
        first = self.first
        # the goal for the rest of this period (seed 002 (3)): what the period still needs
        period = (t - first) // cfg.period_us
        period_end = first + (period + 1) * cfg.period_us
        ceiling = int(w.col("maxdelay", hi - 1)) if hi else 0
        backlog = self._backlog(t, hi)
        ceiling = max([ceiling] + [silence for _, _, silence in backlog])   # a backlog is late by its silence
        g = cfg.granularity_us or default_granularity(ceiling)
        stats = [self._with_backlog(_slice(base_st, lo - lo_all), backlog) for lo in starts]
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
                seen = self._with_backlog(_slice(base_st, starts[0] - lo_all), ()) if backlog else st
                q = float(self.target.recall)
                aim_q = min(steady, q + REMEMBER_BUDGET * (1.0 - q)) if self.remember_margin else q
                if seen is st and aim == aim_q:
                    need_q = values
                else:
                    need_q = (self._choose(seen, aim_q, ceiling, g)[0]
                              if float(seen["w"].sum()) > 0 else np.zeros(self.n, np.int64))
                self.period_need[period] = (need_q, float(st["w"].sum()))
        if backlog:   # a stall's burst is foreseen by the backlog model, not remembered as a need
            self.needs.stalled.update((period, period + 1))
        remembered = self.needs.of(period)
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

        # what no later decision reads: the indexes before this one's history window,
        # the periods before this one (their weights) and before the memory (their needs)
        w.trim(starts[0])
        for p in [p for p in self.period_w if p < period]:
            del self.period_w[p]
            self.period_kept.pop(p, None)
        self.needs.forget_before(period)

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
        first = self.first
        out = []
        for i in range(self.n):
            times, off = self.w.arr_s[i], self.w.arr_off[i]
            held = int(np.searchsorted(times, t, side="right"))
            upto = off + held
            if upto == 0:
                continue
            last = int(times[held - 1])
            silence = t - last
            # its rate before it fell silent (a stall longer than the rate history must still count)
            hist_lo = max(last - cfg.rate_history_us, first - 1)
            start = off + int(np.searchsorted(times, hist_lo, side="right"))
            rate = (upto - start) / max(last - hist_lo, 1)
            if silence >= cfg.probe_us // 2 and rate * silence >= self.trig.rate_min_count:
                # the stall may last until the next probe: owe that much more, that much later
                late_by = silence + cfg.probe_us
                self.debt[i] = (float(rate * late_by), int(late_by), int(self.w.late_cum[i][held]))
                out.append((i, float(rate * late_by), int(late_by)))
            elif i in self.debt:
                owed, late_by, since = self.debt[i]
                paid = int(self.w.late_cum[i][held]) - since
                if owed - paid >= self.trig.rate_min_count:
                    out.append((i, float(owed - paid), late_by))
                else:
                    del self.debt[i]
        return out

    def _values_for(self, idx: np.ndarray) -> np.ndarray:
        """``(n, len(idx))`` values in force at indexes ``idx`` of the whole-array form
        (decision at t applies to arrival > t)."""
        initial = self._initial_of(self._whole, idx)
        if not self.decision_values:
            return initial
        table = np.stack(self.decision_values, axis=1)  # (n, decisions): built once, at the end of run()
        return in_force(np.asarray(self.decision_times, dtype=np.int64), table, self._whole["arrival"][idx], initial)

    def _initial(self, idx: np.ndarray) -> np.ndarray:
        """The values in force before the first decision at held indexes ``idx``."""
        return self._initial_of(self.w.win, idx - self.w.base)

    def _initial_of(self, cols: dict, idx: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _values_in_force(self, idx: np.ndarray) -> np.ndarray:
        """``_values_for`` for indexes arrived since the last decision (what ``_commit``
        reads): the last decision's values, or the initial bound before the first."""
        if not self.decision_values:
            return self._initial(idx)
        return np.broadcast_to(self.decision_values[-1][:, None], (self.n, len(idx)))

    def _density(self, t: int, idx: np.ndarray) -> np.ndarray:
        """Partner density per stream around each ``ts[idx]``: ``(n, len(idx))`` tuples
        per us, counted over the partners arrived by ``t`` (:meth:`.window.ReplayWindow.density`)."""
        return self.w.density(t, idx)

    # ------------------------------------------------------- model helpers

    def _spans(self, idx: np.ndarray):
        """Per tuple and partner stream: owned partner-offset range ``[-W_j, U_j]`` (inclusive, us)."""
        s = self.w.col("stream", idx)
        ts = self.w.col("ts", idx)
        M = self.w.col("M", idx)
        upper = np.empty((self.n, len(idx)), dtype=np.int64)
        for j in range(self.n):
            Mj = M[j]
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
        per = (self.w.col("arrival", idx) - self.first) // self.cfg.period_us
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

    def _initial_of(self, cols: dict, idx: np.ndarray) -> np.ndarray:
        return np.broadcast_to(cols["maxdelay"][idx], (self.n, len(idx)))

    def _stats(self, idx: np.ndarray, t: int):
        """Per tuple: stream, weight (expected results) and, per partner stream, its
        ramp ``(start, end)`` in ``d_j`` (module docstring)."""
        s, upper = self._spans(idx)
        lower = -self.W[:, None]
        span = np.maximum(upper - lower + 1, 0)
        dens = self._density(t, idx)
        T = self.w.col("T", idx)
        lag = np.where(T == NEG_INF, -(2**40), T - self.w.col("ts", idx))
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
        T = self.w.col("T", idx)
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

    def _init_model(self) -> None:
        self.R_last = NEG_INF
        self.own_last = np.zeros(self.n, dtype=np.int64)

    def _model_columns(self, cols: dict) -> None:
        """Per stream, the running maximum of its own delays (MP-K-slack's bound)."""
        own = np.empty((self.n, len(cols["delay"])), dtype=np.int64)
        for i in range(self.n):
            own[i] = np.maximum(np.maximum.accumulate(np.where(cols["stream"] == i, cols["delay"], 0)),
                                self.own_last[i])
        self.own_last = own[:, -1].copy()
        cols["own_max"] = own

    def _initial_of(self, cols: dict, idx: np.ndarray) -> np.ndarray:
        return cols["own_max"][:, idx]   # exactly MP-K-slack

    def _stats(self, idx: np.ndarray, t: int):
        """Per tuple: stream, productivity weight (expected partners over the whole
        window) and its own delay (it survives iff ``delay <= K_i``)."""
        s = self.w.col("stream", idx)
        full = (self.W[s][None, :] + self.W[:, None] + 1).astype(np.float64)
        dens = self._density(t, idx)
        w = np.ones(len(idx))
        for j in range(self.n):
            w = w * np.where(s == j, 1.0, full[j] * dens[j])
        return {"s": s, "w": w, "need": self.w.col("delay", idx).astype(np.int64)}

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
        M = self.w.col("M", idx)
        cand = np.where(M == NEG_INF, NEG_INF, M - K).min(axis=0)
        R = np.maximum.accumulate(np.concatenate([[self.R_last], cand]))
        before = R[:-1]
        self.R_last = int(R[-1])
        dropped = self.w.col("ts", idx) < before
        s, w = st["s"], st["w"]
        # a result survives iff every member does: per stream survival, multiplied
        per = (self.w.col("arrival", idx) - self.first) // self.cfg.period_us
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


def streaming(kind: str, n: int, windows, target: RecallTarget, **summaries) -> Controller:
    """The ``qjoin`` or ``qkslack`` controller in its streaming form (:meth:`Controller.streaming`)."""
    return {"qjoin": QJoinController, "qkslack": QKSlackController}[kind].streaming(n, windows, target, **summaries)
