"""A day's results: replay lookback + day(s), keep what was *emitted* during each day.

Which combinations belong to day D (docs/semantics.md, "Nightly runs"):

* a combination belongs to the day it is **emitted** on -- for the
  symmetric family (``static``) and ``flink`` the arrival of its
  last-arriving member; for the sorting family (``none``/``kslack``/
  ``mpkslack``) the arrival that releases its last member from the K-slack
  buffer, which may come after midnight; for ``spark-ss`` the end of the
  later member's micro-batch (the batch that ends at midnight emits on the
  next day);
* a daily run never flushes at the end of its input (a nightly stream has no
  end): a combination still waiting in the K-slack buffer at midnight is
  emitted, and published, by the next day's run, which re-reads its members
  in the lookback.

So every combination is published in exactly one partition, and the union of
daily partitions equals one continuous replay split by emission day, as long
as the lookback holds every member and warms the progress state up
(:mod:`.exactness` says whether it provably did, per policy family).

Per-day metrics attribute a combination to the day of its last-arriving
member (as SPEC §5 periods do): ``truth`` = valid combinations whose last
member arrived on D (and whose members are all within the replay),
``recall`` = those of them emitted (now or, if pending, after midnight).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from ..analysis import metrics
from ..config.settings import RunConfig
from ..engines.local import JoinOutcome, join
from ..io.load import bad_arrivals_of
from ..replay.predicates import space_of, where_of
from ..replay.results import results_frame
from .partitions import DAY_US, DayStreams, day_number, day_start_us
from ..policies import INTERVAL_JOIN, MICROBATCH, SYMMETRIC
from ..base.timeunits import NEG_INF
from .exactness import exactness


@dataclass
class DayResult:
    day: dt.date
    results: pl.DataFrame
    quarantine: dict[str, pl.DataFrame]
    counts: dict[str, Any]
    metrics: dict[str, Any]
    state_end: dict[str, dict[str, int | None]]
    exactness: dict[str, Any] = field(default_factory=dict)


def run_join(cfg: RunConfig, data: DayStreams) -> JoinOutcome:
    """The same join call as :func:`streamjoin.pipelines.jobs.run.run_job` (distance, ``--where``, ...)."""
    s = data.streams
    extra = {"space": space_of(cfg, s), "where": where_of(cfg, s)}
    if getattr(cfg.policy, "adaptive", False):
        extra["bad_arrivals"] = bad_arrivals_of(s)
    return join([x.ts for x in s], [x.arrival for x in s], [x.keys if x.keys.width else None for x in s],
                cfg.windows, cfg.policy, **extra)


def _emission_of(outcome: JoinOutcome, last_day: int) -> tuple[np.ndarray, np.ndarray]:
    """Per combination: when it is emitted (µs) and whether that is after the
    replay's last day ends (pending: published by a later day's run).

    The arrival that emits it is its last member for the symmetric family and
    ``flink`` (on arrival), the release of its last-released member for the
    sorting family (``N``: not released by the end of the input, so pending);
    ``spark-ss`` emits at the end of the later member's micro-batch, which
    may be after midnight."""
    em, dec, replay = outcome.emission, outcome.decisions, outcome.replay
    N = replay.N
    if dec.family == MICROBATCH:
        emit_us = np.asarray(em.emit_us, dtype=np.int64)
        return emit_us, emit_us >= (last_day + 1) * DAY_US
    if dec.family in (SYMMETRIC, INTERVAL_JOIN) or not len(em.last):
        idx = em.last.astype(np.int64)
    else:
        idx = np.maximum.reduce([dec.release[a].astype(np.int64) for a in em.a])
    emit_us = replay.arrival[np.minimum(idx, max(N - 1, 0))] if N else np.empty(0, np.int64)
    return emit_us, idx >= N


def _day_frame(data: DayStreams, outcome: JoinOutcome, mask: np.ndarray, emit_us: np.ndarray) -> pl.DataFrame:
    """Rows of the partition: member identity (day, row in the day), times and
    payload, then emission (:func:`~streamjoin.pipelines.replay.results.results_frame`)."""
    em, replay = outcome.emission, outcome.replay
    rows = [r[mask] for r in outcome.combos.rows]
    last = em.last[mask]
    emitted_at = emit_us[mask]
    latency = emitted_at - replay.arrival[last] if len(last) else np.empty(0, np.int64)
    # symmetric and interval-join families: emitted at arrival[last] (_emission_of)
    return results_frame(data.streams, rows, emitted_at, last, latency, row_numbers=data.row_in_day,
                         dates=data.day_of_row, by_last=outcome.decisions.family in (SYMMETRIC, INTERVAL_JOIN))


def compute_days(cfg: RunConfig, data: DayStreams) -> dict[dt.date, DayResult]:
    """Replay ``data`` once and split what was emitted by day (module docstring)."""
    outcome = run_join(cfg, data)
    replay, em, dec = outcome.replay, outcome.emission, outcome.decisions
    N = replay.N
    emit_us, after_input = _emission_of(outcome, day_number(data.days[-1]))
    emitted = em.emitted.copy()
    pending = emitted & after_input
    published = emitted & ~after_input
    n_streams = len(data.streams)
    # day (days since the epoch) of every arrival index; -1 for the lookback
    day_at = np.full(N, -1, dtype=np.int64)
    for k in range(n_streams):
        ours = data.day_of_row[k] >= day_number(data.days[0])
        day_at[replay.index_of[k][ours]] = data.day_of_row[k][ours]
    first = int(np.searchsorted(replay.arrival, data.start_us, side="left"))
    exact = exactness(cfg, replay, dec, first, data.lookback_start_us, data.start_us,
                       [x.name for x in data.streams])
    # the day a combination is emitted on: of its emission time (its emitting arrival's
    # partition day for the families that emit on an arrival: partitions are by arrival day)
    emit_day = np.where(published, emit_us // DAY_US, -2)
    last_day = day_at[em.last] if len(em.last) else np.empty(0, np.int64)
    out: dict[dt.date, DayResult] = {}
    for day in data.days:
        dn = day_number(day)
        mask = emit_day == dn
        frame = _day_frame(data, outcome, mask, emit_us)
        truth_mask = last_day == dn
        truth_n = int(truth_mask.sum())
        emitted_n = int((truth_mask & emitted).sum())
        lat = frame["latency_us"].to_numpy() if frame.height else np.empty(0, np.int64)
        end = int(np.searchsorted(replay.arrival, day_start_us(day) + DAY_US, side="left"))  # exclusive
        per_stream = {}
        state_end = {}
        for k, s in enumerate(data.streams):
            day_rows = int((data.day_of_row[k] == dn).sum())
            q = data.quarantine_of(k, day)
            in_day = (replay.stream == k) & (day_at == dn)
            late = int((dec.dropped & in_day).sum()) if dec.dropped is not None else 0
            expired = int((dec.expired & in_day).sum()) if dec.expired is not None else 0
            per_stream[s.name] = {"rows": day_rows, "quarantined": int(q.height),
                                  "lookback_rows": data.lookback_rows[k] if day == data.days[0] else None,
                                  "dropped_late": late, "expired_on_arrival": expired}
            sel = replay.stream[:end] == k
            state_end[s.name] = {
                "max_ts_us": int(replay.M[k, end - 1]) if end and replay.M[k, end - 1] != NEG_INF else None,
                "max_delay_us": int(replay.delay[:end][sel].max()) if sel.any() else None,
            }
        counts = {
            "results": frame.height,
            "carried_in": int((mask & (last_day < dn)).sum()),
            "pending": int((pending & truth_mask).sum()),
            "truth": truth_n,
            "streams": per_stream,
            "quarantined": sum(v["quarantined"] for v in per_stream.values()),
        }
        m = {
            "recall": metrics.recall_of(emitted_n, truth_n),
            "recall_target": cfg.recall_target,
            "emitted_of_truth": emitted_n,
            "latency_us": metrics.latency_summary(lat),
        }
        quarantine = {}
        for k, s in enumerate(data.streams):
            q = data.quarantine_of(k, day)
            if q.height:
                quarantine[s.name] = q
        out[day] = DayResult(day=day, results=frame, quarantine=quarantine, counts=counts, metrics=m,
                             state_end=state_end, exactness=exact if day == data.days[0] else {"certified": exact["certified"]})
    return out
