"""The local engine: the whole replay on one machine, on whole columns.

Stages, each a module of its own::

    load (Parquet -> columns) -> progress (replay order, frontier, delays)
      -> policy decisions (R / H, drops, releases, expiries)
      -> candidates (truth: keyed band join)  -> emit (closed forms)
      -> memory (difference arrays)           -> report

It answers exactly what the per-arrival reference replay answers (the
property tests prove it) but never loops over tuples in Python: every step
is a numpy or polars operation over a whole column.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..candidates import Combos, enumerate_truth
from ..emit import Emission, emission
from ..policies import PolicySpec
from ..progress import Decisions, Replay, build_replay, decide, memory_per_stream


@dataclass
class JoinOutcome:
    """Everything a replay computed, before reporting.

    ``combos`` holds every valid combination (truth); ``emission`` says, per
    combination, whether, when and with what latency it was emitted.
    ``memory`` is tuples held per stream after every arrival index ``(n, N)``.
    """

    replay: Replay
    decisions: Decisions
    combos: Combos
    emission: Emission
    memory: np.ndarray
    timings_s: dict[str, float] = field(default_factory=dict)


def join(
    ts: Sequence[np.ndarray],
    arrival: Sequence[np.ndarray],
    keys: Sequence[pl.DataFrame | None],
    windows: Sequence[int],
    policy: PolicySpec,
    candidates_method: str = "auto",
) -> JoinOutcome:
    """Replay ``n`` streams through ``policy`` and join them.

    Args:
        ts, arrival: per stream, int64 microseconds in row order.
        keys: per stream, key columns named ``__key0..`` (same dtypes in every
            stream), or ``None`` for a time-only join.
        windows: ``W_i`` per stream, microseconds.
        policy: the disorder policy.
        candidates_method: truth enumeration method (see
            :func:`~streamjoin.pipelines.candidates.enumerate_truth`).
    """
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    replay = build_replay(list(ts), list(arrival))
    W = np.asarray(windows, dtype=np.int64)
    decisions = decide(replay, W, policy)
    timings["progress"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    truth = enumerate_truth(ts, keys, W.tolist(), method=candidates_method)
    timings["candidates"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    emitted = emission(truth, replay, W, decisions)
    memory = memory_per_stream(replay, W, decisions)
    timings["emit"] = time.perf_counter() - t0
    return JoinOutcome(replay=replay, decisions=decisions, combos=truth, emission=emitted, memory=memory,
                       timings_s=timings)
