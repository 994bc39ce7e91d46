"""Online controllers for recall-target policies (SPEC §4.3): ``qjoin`` and ``qkslack``.

A controller watches the replay the way an online operator would and, at a
sequence of *decision times*, picks per-stream values -- the retention
``d_i`` (``qjoin``, symmetric family) or the slack ``K_i`` (``qkslack``,
sorting family) -- that should keep recall ``>= Q`` over every period ``P``
while holding as few tuples (``qjoin``) or waiting as little (``qkslack``)
as possible.  The output is a :class:`Schedule`: the decision log plus the
``(n, N)`` matrix of values per arrival index that the closed-form engine
(:mod:`streamjoin.pipelines.progress`) and the reference replay consume.

Guarantees
----------
* **Online.**  A decision made at time ``t`` uses only tuples (and
  quarantined rows) with ``arrival <= t``, and applies to indexes with
  ``arrival > t``.  So changing or removing tuples that arrive after ``t``
  never changes a decision made at or before ``t`` (property-tested).
* It never looks at truth: its statistics are delays/lags of arrived tuples,
  arrival rates, partner densities of arrived tuples (what an operator's
  basic-window counters hold), its own horizons / drop decisions, and counts
  of quarantined rows.
* Vectorised per decision: a Python loop runs over decision times only, every
  step inside is a numpy operation over the tuples concerned.

Decision times (events)
-----------------------
* ``on_interval``: every ``L`` (``--interval``) of replay time from the first
  arrival (seed 002, Algorithm 1).  Before the first one the policy uses
  MP-K-slack's bound (running maximum delay).
* ``on_rate_change``: checked every *probe* (``L / 10``); a stream whose
  arrival count in the last probe departs from its own recent history by more
  than ``rate_threshold`` (either way) re-decides at once (seed 003's
  rate-triggered window).  A link stall shows up here first.
* ``on_bad_rows``: a burst of quarantined rows of a stream in the last probe
  (``>= bad_burst_min`` and ``> bad_burst_factor`` x its history) re-decides
  at once (seed 003's exception-triggered window).

The model (qjoin; seed 002 §1.4)
--------------------------------
For a tuple ``x`` of stream ``i`` that arrived at index ``a`` its *lag*
``l = T(a) - x.ts`` (rounded up to the granularity ``g``) is what decides
which partners it still finds: a partner ``z`` of stream ``j`` is buffered
iff ``z.ts + W_j >= H_j(a) = T(a) - d_j``.  With partner offsets
``o = z.ts - x.ts`` spread over ``[-W_j, U_j]`` (``U_j = min(W_i, M_j(a) -
x.ts)``: newer partners that have not arrived yet are not ``x``'s to
produce), the share of ``x``'s results kept is the share of that span with
``o >= l - d_j - W_j``.  Each tuple is weighted by its expected number of
results: the density of partner tuples around ``x.ts`` counted in basic
windows of ``b`` (``--basic-window``) times the span -- the cross-join count
of seed 002 (6)-(7); selectivity is taken as constant and cancels in the
ratio.  Over the recent history (the last ``L``) this gives the estimated
recall ``Q_L(d)``; candidates ``d_i`` are the multiples of ``g`` up to the
largest lag seen, and the chosen vector minimises buffered tuples
``sum_i (d_i + W_i) V_i`` subject to ``Q_L(d) >= Q_L`` (2 streams: the full
grid of Algorithm 1, vectorised; more streams: greedy descent from the top).
``Q_L`` (seed 002 (3)) is the recall the rest of the current period needs so
the period as a whole reaches ``Q``, given the estimated recall of what the
period has seen so far, never below ``Q``, plus a safety ``margin``.

The model (qkslack; Ji et al., ICDE 2016)
-----------------------------------------
A tuple is kept iff its own delay ``delta(x) <= K_i`` (then ``x.ts >=
M_i - K_i >= R``); a result survives iff all its members do, so the estimated
recall is ``prod_i F_i(K_i)`` with ``F_i`` the productivity-weighted share of
stream ``i``'s recent tuples with ``delta <= K_i``.  ``K`` minimises the sort
buffer ``sum_i K_i V_i`` subject to the same ``Q_L``; the past of the period
is measured with the tuples the controller really dropped.

Stalls
------
A stream whose link stalls stops arriving; when it resumes, everything it
produced meanwhile arrives in a burst, up to the stall's length late.  While
a stream ``i`` has been silent for longer than ``rate_min_count`` expected
arrivals, every decision holds a floor of ``silence_i + probe`` on the other
streams' retention (qjoin: those are the buffers the late tuples will probe)
or on ``K_i`` (qkslack: the late tuples are ``i``'s own), kept for ``L``
after the stream resumes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InputError
from ..timeunits import NEG_INF


@dataclass(frozen=True)
class RecallTarget:
    """Configuration of a recall-target controller (all durations in microseconds).

    Args:
        recall: target ``Q`` in ``(0, 1]``.
        interval_us: ``L``, regular decision interval (default 1 s).
        granularity_us: ``g``, delay granularity and candidate step (default 10 ms).
        basic_window_us: ``b``, basic window for partner densities (default 10 ms).
        period_us: ``P``, recall period (default 60 s).
        probe_us: rate / bad-row check step (default ``L / 10``).
        history_us: statistics window of a decision (default ``L``).
        rate_history_us: history a probe's rate is compared with (default ``10 L``).
        rate_threshold: a probe's rate departs when ``< history / t`` or ``> history * t``.
        rate_min_count: counts below this are noise (no rate trigger, no stall).
        bad_burst_min, bad_burst_factor: quarantined rows in a probe that make a burst.
        margin: added to the target (default ``(1 - Q) / 4``).
    """

    recall: float
    interval_us: int = 1_000_000
    granularity_us: int = 10_000
    basic_window_us: int = 10_000
    period_us: int = 60_000_000
    probe_us: int | None = None
    history_us: int | None = None
    rate_history_us: int | None = None
    rate_threshold: float = 3.0
    rate_min_count: int = 20
    bad_burst_min: int = 5
    bad_burst_factor: float = 3.0
    margin: float | None = None

    def __post_init__(self) -> None:
        if not (0.0 < float(self.recall) <= 1.0):
            raise InputError(f"--recall {self.recall}: recall target must be in (0, 1]")
        for label, v in (("--interval", self.interval_us), ("--granularity", self.granularity_us),
                         ("--basic-window", self.basic_window_us), ("--period", self.period_us)):
            if int(v) <= 0:
                raise InputError(f"{label} must be > 0")
        for label, v in (("probe", self.probe_us), ("history", self.history_us), ("rate history", self.rate_history_us)):
            if v is not None and int(v) <= 0:
                raise InputError(f"{label} must be > 0")
        if self.rate_threshold <= 1.0:
            raise InputError("rate threshold must be > 1")

    @property
    def probe(self) -> int:
        return int(self.probe_us) if self.probe_us else max(1, self.interval_us // 10)

    @property
    def history(self) -> int:
        return int(self.history_us) if self.history_us else int(self.interval_us)

    @property
    def rate_history(self) -> int:
        return int(self.rate_history_us) if self.rate_history_us else 10 * int(self.interval_us)

    @property
    def aim(self) -> float:
        m = self.margin if self.margin is not None else (1.0 - self.recall) / 4
        return float(self.recall) + float(m)


@dataclass
class Schedule:
    """What a controller decided.

    ``values``: ``(n, N)`` int64, ``d_i(a)`` or ``K_i(a)`` per arrival index.
    ``log``: one dict per decision: ``time_us``, ``reason`` (``interval``,
    ``rate``, ``bad_rows`` or a ``+``-joined mix), ``triggers`` (details),
    ``values_us`` (per stream), ``target`` (the ``Q_L`` aimed at) and
    ``estimated_recall`` (the model's recall for the chosen values).
    """

    values: np.ndarray
    log: list[dict[str, Any]] = field(default_factory=list)


def _ceil_to(values: np.ndarray, step: int) -> np.ndarray:
    return -((-values) // step) * step


class _Controller:
    """Shared event loop; subclasses implement the model (``_choose``) and the past estimate."""

    kind = ""

    def __init__(self, replay, windows, target: RecallTarget, bad_arrivals=None):
        self.r = replay
        self.n = replay.n
        self.N = replay.N
        self.W = np.asarray(windows, dtype=np.int64)
        self.cfg = target
        self.bad = [np.sort(np.asarray(b, dtype=np.int64)) for b in (bad_arrivals or [])] or [
            np.empty(0, np.int64) for _ in range(self.n)]
        self.arr_by_stream = [replay.arrival[replay.stream == i] for i in range(self.n)]
        # per stream, (ts, arrival) in ts order: basic-window counts are a slice + a filter
        self.by_ts = []
        for i in range(self.n):
            ts_i = replay.ts[replay.stream == i]
            order = np.argsort(ts_i, kind="stable")
            self.by_ts.append((ts_i[order], self.arr_by_stream[i][order]))
        self._table_cache = (0, None)
        # running maximum delay over all streams: MP-K-slack's bound (and the search ceiling)
        self.maxdelay = np.maximum.accumulate(replay.delay) if self.N else np.empty(0, np.int64)
        self.decision_times: list[int] = []
        self.decision_values: list[np.ndarray] = []
        self.log: list[dict[str, Any]] = []
        self.floor_value = np.zeros(self.n, dtype=np.int64)
        self.floor_until = np.full(self.n, NEG_INF, dtype=np.int64)
        self.committed = 0               # indexes [0, committed) have their effective state computed
        self.period_w: dict[int, float] = {}
        self.period_kept: dict[int, float] = {}

    # ------------------------------------------------------------------ events

    def run(self) -> Schedule:
        """Process every decision event in time order and build the schedule."""
        if self.N == 0:
            return Schedule(np.zeros((self.n, 0), dtype=np.int64), [])
        for t, triggers in self._events():
            reasons = sorted({tr["kind"] for tr in triggers})
            if reasons == ["interval"]:
                self.on_interval(t)
            else:
                for tr in triggers:
                    if tr["kind"] == "rate":
                        self.on_rate_change(t, tr["stream"], tr["observed"], tr["expected"])
                    elif tr["kind"] == "bad_rows":
                        self.on_bad_rows(t, tr["stream"], tr["observed"])
                self._decide(t, triggers)
        return Schedule(self._values_for(np.arange(self.N)), self.log)

    def on_interval(self, t: int) -> None:
        """Regular re-decision every ``L``: uses tuples with ``arrival <= t`` only."""
        self._decide(t, [{"kind": "interval"}])

    def on_rate_change(self, t: int, stream: int, observed: int, expected: float) -> None:
        """A stream's rate in the last probe departed from its history (re-decided by the caller)."""

    def on_bad_rows(self, t: int, stream: int, observed: int) -> None:
        """A burst of quarantined rows of ``stream`` in the last probe (re-decided by the caller)."""

    def _events(self) -> list[tuple[int, list[dict]]]:
        """All decision times with their triggers; computed from arrivals alone, vectorised."""
        cfg = self.cfg
        first, last = int(self.r.arrival[0]), int(self.r.arrival[-1])
        events: dict[int, list[dict]] = {}
        L = cfg.interval_us
        for k in range(1, (last - first) // L + 1):
            events.setdefault(first + k * L, []).append({"kind": "interval"})
        p = cfg.probe
        ticks = first + p * np.arange(1, (last - first) // p + 1, dtype=np.int64)
        if len(ticks):
            eligible = ticks - first >= L + p   # need at least L of history before judging a rate
            for i in range(self.n):
                for kind, times in (("rate", self.arr_by_stream[i]), ("bad_rows", self.bad[i])):
                    if kind == "bad_rows" and not len(times):
                        continue
                    upto = np.searchsorted(times, ticks, side="right")           # arrivals <= t
                    before = np.searchsorted(times, ticks - p, side="right")     # arrivals <= t - p
                    hist_lo = np.maximum(ticks - cfg.rate_history, first - 1)
                    start = np.searchsorted(times, hist_lo, side="right")
                    observed = upto - before
                    span = np.maximum(ticks - p - hist_lo, 1)
                    expected = (before - start) * (p / span)
                    if kind == "rate":
                        low = (expected >= cfg.rate_min_count) & (observed < expected / cfg.rate_threshold)
                        high = (observed >= cfg.rate_min_count) & (observed > expected * cfg.rate_threshold)
                        fire = eligible & (low | high)
                    else:
                        fire = eligible & (observed >= cfg.bad_burst_min) & (observed > expected * cfg.bad_burst_factor)
                    for m in np.flatnonzero(fire).tolist():
                        events.setdefault(int(ticks[m]), []).append({
                            "kind": kind, "stream": i, "observed": int(observed[m]),
                            "expected": round(float(expected[m]), 2)})
        return sorted(events.items())

    # ---------------------------------------------------------------- decision

    def _decide(self, t: int, triggers: list[dict]) -> None:
        """Make one decision at time ``t`` from tuples with ``arrival <= t``."""
        cfg = self.cfg
        hi = int(np.searchsorted(self.r.arrival, t, side="right"))  # indexes [0, hi) have arrived
        self._commit(hi, t)
        lo = int(np.searchsorted(self.r.arrival, t - cfg.history, side="right"))
        idx = np.arange(lo, hi)
        # the target for the rest of this period (seed 002 (3)): what the period still needs
        period = (t - int(self.r.arrival[0])) // cfg.period_us
        period_end = int(self.r.arrival[0]) + (period + 1) * cfg.period_us
        w_past = self.period_w.get(period, 0.0)
        kept_past = self.period_kept.get(period, 0.0)
        weights, state = self._stats(idx, t)
        w_hist = float(weights.sum())
        w_future = w_hist * max(period_end - t, 0) / max(cfg.history, 1)
        need = float(cfg.recall)
        if w_future > 0:
            need = (cfg.recall * (w_past + w_future) - kept_past) / w_future
        goal = min(1.0, max(float(cfg.recall), need) + (cfg.aim - cfg.recall))
        ceiling = int(self.maxdelay[hi - 1]) if hi else 0
        if w_hist > 0:
            values, estimate = self._choose(state, goal, ceiling)
        else:  # nothing observed lately: keep the previous values (or MP-K-slack's bound)
            values = self.decision_values[-1].copy() if self.decision_values else np.full(self.n, ceiling, np.int64)
            estimate = None
        values = np.maximum(values, self._stall_floor(t, hi))
        self.decision_times.append(int(t))
        self.decision_values.append(values.astype(np.int64))
        reason = "+".join(sorted({tr["kind"] for tr in triggers}))
        entry = {
            "time_us": int(t),
            "reason": reason,
            "triggers": [tr for tr in triggers if tr["kind"] != "interval"],
            "values_us": [int(v) for v in values],
            "target": round(goal, 6),
            "estimated_recall": None if estimate is None else round(float(estimate), 6),
        }
        entry[self.value_key] = entry["values_us"]
        self.log.append(entry)

    def _stall_floor(self, t: int, hi: int) -> np.ndarray:
        """Floors held because a stream's link looks stalled (silent for many expected arrivals)."""
        cfg = self.cfg
        first = int(self.r.arrival[0])
        silent = np.zeros(self.n, dtype=bool)
        silence = np.zeros(self.n, dtype=np.int64)
        for i in range(self.n):
            times = self.arr_by_stream[i]
            upto = int(np.searchsorted(times, t, side="right"))
            if upto == 0:
                continue
            silence[i] = t - int(times[upto - 1])
            hist_lo = max(t - cfg.rate_history, first - 1)
            start = int(np.searchsorted(times, hist_lo, side="right"))
            rate = (upto - start) / max(t - hist_lo, 1)
            silent[i] = silence[i] >= cfg.probe // 2 and rate * silence[i] >= cfg.rate_min_count
        for i in np.flatnonzero(silent):
            active = self.floor_until[i] > t
            self.floor_value[i] = max(int(self.floor_value[i]) if active else 0, int(silence[i]) + cfg.probe)
            self.floor_until[i] = t + cfg.interval_us
        active = self.floor_until > t
        return self._floor_from(np.where(active, self.floor_value, 0))

    def _values_for(self, idx: np.ndarray) -> np.ndarray:
        """``(n, len(idx))`` values in force at indexes ``idx`` (decision at t applies to arrival > t)."""
        arrival = self.r.arrival[idx]
        initial = self._initial(idx)
        if not self.decision_values:
            return initial
        which = np.searchsorted(np.asarray(self.decision_times, dtype=np.int64), arrival, side="left") - 1
        if self._table_cache[0] != len(self.decision_values):
            self._table_cache = (len(self.decision_values), np.stack(self.decision_values, axis=1))
        table = self._table_cache[1]  # (n, decisions)
        chosen = table[:, np.maximum(which, 0)]
        return np.where(which >= 0, chosen, initial)

    # ------------------------------------------------------- model helpers

    def _density(self, t: int, idx: np.ndarray) -> np.ndarray:
        """Partner density per stream around each ``ts[idx]``: ``(n, len(idx))`` tuples per us.

        Counts of tuples *arrived by t* per basic window ``b`` of event time
        (the operator's basic-window counters), divided by ``b``.
        """
        b = self.cfg.basic_window_us
        out = np.zeros((self.n, len(idx)))
        if not len(idx):
            return out
        bins_x = self.r.ts[idx] // b
        lo_b, hi_b = int(bins_x.min()) - 1, int(bins_x.max()) + 1
        for j in range(self.n):
            ts_j, arr_j = self.by_ts[j]
            a, z = np.searchsorted(ts_j, [lo_b * b, (hi_b + 1) * b], side="left")
            sel = ts_j[a:z][arr_j[a:z] <= t]           # arrived by t: what the counters hold
            counts = np.bincount(sel // b - lo_b, minlength=hi_b - lo_b + 1)
            out[j] = counts[bins_x - lo_b] / b
        return out

    def _spans(self, idx: np.ndarray):
        """Per tuple and partner stream: owned partner-offset range ``[-W_j, U_j]`` (inclusive, us)."""
        s = self.r.stream[idx]
        ts = self.r.ts[idx]
        a = idx
        lower = np.empty((self.n, len(idx)), dtype=np.int64)
        upper = np.empty((self.n, len(idx)), dtype=np.int64)
        for j in range(self.n):
            Mj = self.r.M[j, a]
            lower[j] = -self.W[j]
            upper[j] = np.where(Mj == NEG_INF, -self.W[j] - 1, np.minimum(self.W[s], Mj - ts))
        return s, lower, upper


class QJoinController(_Controller):
    """Per-stream retention ``d_i`` for a recall target (seed 002, Algorithm 1)."""

    kind = "qjoin"
    value_key = "retention_us"

    def _initial(self, idx: np.ndarray) -> np.ndarray:
        return np.broadcast_to(self.maxdelay[idx], (self.n, len(idx)))

    def _floor_from(self, silent_floor: np.ndarray) -> np.ndarray:
        # stream i's late tuples probe the *other* streams' buffers
        out = np.zeros(self.n, dtype=np.int64)
        for j in range(self.n):
            others = np.delete(silent_floor, j)
            out[j] = others.max() if len(others) else 0
        return out

    def _lags(self, idx: np.ndarray) -> np.ndarray:
        T = self.r.T[idx]
        lag = np.where(T == NEG_INF, NEG_INF, T - self.r.ts[idx])
        return np.where(lag > 0, _ceil_to(np.maximum(lag, 0), self.cfg.granularity_us), np.minimum(lag, 0))

    def _stats(self, idx: np.ndarray, t: int):
        s, lower, upper = self._spans(idx)
        span = np.maximum(upper - lower + 1, 0)
        dens = self._density(t, idx)
        w_parts = span * dens
        w = np.ones(len(idx))
        for j in range(self.n):
            w = w * np.where(s == j, 1.0, w_parts[j])
        lag = self._lags(idx)
        return w, (s, lower, upper, span, lag, w, idx)

    def _kept_share(self, s, lower, upper, span, lag, d: np.ndarray) -> np.ndarray:
        """Share of each tuple's results kept under retention matrix ``d`` (n, len) per partner stream."""
        share = np.ones(len(s))
        for j in range(self.n):
            cut = lag - d[j] - self.W[j]
            kept = np.clip(upper[j] - np.maximum(lower[j], cut) + 1, 0, None)
            part = np.where(span[j] > 0, np.minimum(kept, span[j]) / np.maximum(span[j], 1), 1.0)
            share = share * np.where(s == j, 1.0, part)
        return share

    def _choose(self, state, goal: float, ceiling: int):
        s, lower, upper, span, lag, w, idx = state
        g = self.cfg.granularity_us
        total = float(w.sum())
        top = max(int(lag.max()) if len(lag) else 0, 0)
        steps = np.arange(0, _ceil_to(np.int64(top), g) // g + 1, dtype=np.int64) * g   # candidate d's
        rate = np.array([np.count_nonzero(s == i) for i in range(self.n)], dtype=np.float64) / max(self.cfg.history, 1)
        late = lag > 0
        if self.n == 2:
            # tuples of stream 0 depend on d_1 only and vice versa: E = (A_1[d_0] + A_0[d_1]) / total
            A = []
            for i in range(2):
                j = 1 - i
                m = s == i
                on_time = float(w[m & ~late].sum())
                ml = m & late
                cut = lag[ml][:, None] - steps[None, :] - self.W[j]
                kept = np.clip(upper[j][ml][:, None] - np.maximum(lower[j][ml][:, None], cut) + 1, 0, None)
                sp = span[j][ml][:, None]
                part = np.where(sp > 0, np.minimum(kept, sp) / np.maximum(sp, 1), 1.0)
                A.append(on_time + (w[ml][:, None] * part).sum(axis=0))
            E = (A[1][:, None] + A[0][None, :]) / total            # E[k0, k1]
            cost = ((steps[:, None] + self.W[0]) * rate[0]) + ((steps[None, :] + self.W[1]) * rate[1])
            ok = E >= goal - 1e-12
            if ok.any():
                flat = np.where(ok, cost, np.inf)
                k0, k1 = np.unravel_index(int(np.argmin(flat)), flat.shape)
            else:
                k0, k1 = np.unravel_index(int(np.argmax(E)), E.shape)
            return np.array([steps[k0], steps[k1]], dtype=np.int64), float(E[k0, k1])
        # n > 2: greedy descent from the top of the grid, cheapest feasible step first
        k = np.full(self.n, len(steps) - 1)

        def est(kv):
            d = steps[kv][:, None] * np.ones((1, len(s)), dtype=np.int64)
            return float((w * self._kept_share(s, lower, upper, span, lag, d)).sum() / total)

        current = est(k)
        while True:
            best = None
            for i in range(self.n):
                if k[i] == 0:
                    continue
                trial = k.copy()
                trial[i] -= 1
                e = est(trial)
                if e >= goal - 1e-12:
                    saving = g * rate[i]
                    if best is None or saving > best[0] or (saving == best[0] and e > best[2]):
                        best = (saving, trial, e)
            if best is None:
                break
            k, current = best[1], best[2]
        return steps[k].astype(np.int64), current

    def _commit(self, hi: int, t: int) -> None:
        """Effective horizons for indexes [committed, hi) and their estimated recall, per period."""
        lo = self.committed
        if hi <= lo:
            return
        idx = np.arange(lo, hi)
        d = self._values_for(idx)
        T = self.r.T[idx]
        prev = self.H_last if lo else np.full(self.n, NEG_INF, dtype=np.int64)
        cand = np.where(T[None, :] == NEG_INF, NEG_INF, T[None, :] - d)
        H = np.maximum.accumulate(np.concatenate([prev[:, None], cand], axis=1), axis=1)[:, 1:]
        self.H_last = H[:, -1].copy()
        eff = np.where(T[None, :] == NEG_INF, 0, T[None, :] - H)  # effective retention in force
        w, (s, lower, upper, span, lag, _, _) = self._stats(idx, t)
        share = self._kept_share(s, lower, upper, span, lag, eff)
        self._accumulate(idx, w, w * share)
        self.committed = hi

    def _accumulate(self, idx, w, kept) -> None:
        per = (self.r.arrival[idx] - int(self.r.arrival[0])) // self.cfg.period_us
        for p in np.unique(per).tolist():
            m = per == p
            self.period_w[p] = self.period_w.get(p, 0.0) + float(w[m].sum())
            self.period_kept[p] = self.period_kept.get(p, 0.0) + float(kept[m].sum())


class QKSlackController(_Controller):
    """Per-stream slack ``K_i`` for a recall target (Ji et al., ICDE 2016, quality-driven K-slack)."""

    kind = "qkslack"
    value_key = "k_us"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.own_max = np.empty((self.n, self.N), dtype=np.int64)
        for i in range(self.n):
            self.own_max[i] = np.maximum.accumulate(np.where(self.r.stream == i, self.r.delay, 0))
        self.R_last = NEG_INF

    def _initial(self, idx: np.ndarray) -> np.ndarray:
        return self.own_max[:, idx]   # exactly MP-K-slack

    def _floor_from(self, silent_floor: np.ndarray) -> np.ndarray:
        return silent_floor.astype(np.int64)   # a stalled stream's late tuples wait in its own buffer

    def _stats(self, idx: np.ndarray, t: int):
        s, _, _ = self._spans(idx)
        # productivity: expected partners over the whole window (members arrive in any order)
        full = (self.W[s][None, :] + self.W[:, None] + 1).astype(np.float64)
        dens = self._density(t, idx)
        w = np.ones(len(idx))
        for j in range(self.n):
            w = w * np.where(s == j, 1.0, full[j] * dens[j])
        delay = self.r.delay[idx]
        need = np.where(delay > 0, _ceil_to(delay, self.cfg.granularity_us), 0)
        return w, (s, need, w)

    def _choose(self, state, goal: float, ceiling: int):
        s, need, w = state
        g = self.cfg.granularity_us
        top = int(need.max()) if len(need) else 0
        steps = np.arange(0, top // g + 1, dtype=np.int64) * g
        F = np.ones((self.n, len(steps)))
        rate = np.zeros(self.n)
        for i in range(self.n):
            m = s == i
            rate[i] = np.count_nonzero(m) / max(self.cfg.history, 1)
            tot = float(w[m].sum())
            if tot > 0:
                order = np.searchsorted(steps, need[m], side="left")
                F[i] = np.cumsum(np.bincount(order, weights=w[m], minlength=len(steps))[:len(steps)]) / tot
        if self.n == 2:
            E = F[0][:, None] * F[1][None, :]
            cost = steps[:, None] * rate[0] + steps[None, :] * rate[1]
            ok = E >= goal - 1e-12
            flat = np.where(ok, cost, np.inf) if ok.any() else -E
            k0, k1 = np.unravel_index(int(np.argmin(flat)), flat.shape)
            return np.array([steps[k0], steps[k1]], dtype=np.int64), float(E[k0, k1])
        k = np.full(self.n, len(steps) - 1)
        current = float(np.prod(F[np.arange(self.n), k]))
        while True:
            best = None
            for i in range(self.n):
                if k[i] == 0:
                    continue
                trial = k.copy()
                trial[i] -= 1
                e = float(np.prod(F[np.arange(self.n), trial]))
                if e >= goal - 1e-12 and (best is None or rate[i] > best[0] or (rate[i] == best[0] and e > best[2])):
                    best = (rate[i], trial, e)
            if best is None:
                break
            k, current = best[1], best[2]
        return steps[k].astype(np.int64), current

    def _commit(self, hi: int, t: int) -> None:
        """Release horizon and real drops for indexes [committed, hi); per-period survival."""
        lo = self.committed
        if hi <= lo:
            return
        idx = np.arange(lo, hi)
        K = self._values_for(idx)
        M = self.r.M[:, idx]
        cand = np.where(M == NEG_INF, NEG_INF, M - K).min(axis=0)
        R = np.maximum.accumulate(np.concatenate([[self.R_last], cand]))
        before = R[:-1]
        self.R_last = int(R[-1])
        dropped = self.r.ts[idx] < before
        w, (s, _, _) = self._stats(idx, t)
        # a result survives iff every member does: per stream survival, multiplied
        per = (self.r.arrival[idx] - int(self.r.arrival[0])) // self.cfg.period_us
        for p in np.unique(per).tolist():
            m = per == p
            share = 1.0
            for i in range(self.n):
                mi = m & (s == i)
                tot = float(w[mi].sum())
                if tot > 0:
                    share *= float(w[mi & ~dropped].sum()) / tot
            tot_w = float(w[m].sum())
            self.period_w[p] = self.period_w.get(p, 0.0) + tot_w
            self.period_kept[p] = self.period_kept.get(p, 0.0) + tot_w * share
        self.committed = hi


def schedule(kind: str, replay, windows, target: RecallTarget, bad_arrivals=None) -> Schedule:
    """Run the ``qjoin`` or ``qkslack`` controller over a replay."""
    cls = {"qjoin": QJoinController, "qkslack": QKSlackController}[kind]
    return cls(replay, windows, target, bad_arrivals).run()


__all__ = ["RecallTarget", "Schedule", "QJoinController", "QKSlackController", "schedule"]


def bad_arrivals_of(streams) -> list[np.ndarray]:
    """Per loaded stream, arrival times (us) of its quarantined rows that have one.

    An online operator sees a bad row when it arrives; rows whose arrival
    itself is missing or unreadable carry no time and are left out.
    """
    import pyarrow as pa

    from ..load import _to_micros

    out = []
    for s in streams:
        q = s.quarantine
        column = s.config.arrival or s.config.ts
        if q.height == 0 or column not in q.columns:
            out.append(np.empty(0, np.int64))
            continue
        try:
            values = _to_micros(pa.chunked_array([q[column].to_arrow()]), column, s.config.unit, s.config.path)
            arr = pl_to_numpy(values)
        except Exception:  # noqa: BLE001 - a column that cannot be read gives no times
            out.append(np.empty(0, np.int64))
            continue
        out.append(np.sort(arr[~np.isnan(arr)].astype(np.int64)) if arr.dtype.kind == "f" else np.sort(arr))
    return out


def pl_to_numpy(values) -> np.ndarray:
    import polars as pl

    series = pl.Series(values) if not isinstance(values, pl.Series) else values
    return series.cast(pl.Int64).drop_nulls().to_numpy()


def report_entries(log: list[dict[str, Any]] | None, names: list[str]) -> list[dict[str, Any]] | None:
    """The decision log for ``report.json``'s ``policy_decisions``: streams by name."""
    if log is None:
        return None
    out = []
    for e in log:
        key = "retention_us" if "retention_us" in e else "k_us"
        out.append({
            "time_us": e["time_us"],
            "reason": e["reason"],
            "triggers": [{**{k: v for k, v in tr.items() if k != "stream"}, "stream": names[tr["stream"]]}
                         for tr in e["triggers"]],
            key: {name: v for name, v in zip(names, e[key])},
            "target": e["target"],
            "estimated_recall": e["estimated_recall"],
        })
    return out
