"""The local engine: the whole replay on one machine, on whole columns.

Stages, each a module of its own::

    load (Parquet -> columns) -> progress (replay order, frontier, delays)
      -> policy decisions (R / H, drops, releases, expiries)
      -> candidates (truth: keyed band join)  -> emit (closed forms)
      -> expiry index per tuple (symmetric) -> memory (difference arrays)
      -> report

It answers exactly what the per-arrival reference replay answers (the
property tests prove it) but never loops over tuples in Python: every step
is a numpy or polars operation over a whole column, or one of the compiled
passes of :mod:`~streamjoin.pipelines.base.kernels` (the band-join fill, the
progress pass) that give the same arrays.

On two cores the stages run as two chains that meet at emission::

    chain A:   probe order -> truth -----------------> last member of each
                                        (waits for the    combination
                                         replay order)    |
    chain B:   replay order -> decisions -> expiry index --+--> emission
                                                 '-> memory   (policy phase)

Only emission's policy phase (is the last member's arrival still inside
every other member's buffer?) waits for both chains.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..replay.candidates import Combos, Space, enumerate_truth, key_ids
from ..replay.emit import Emission, emission, last_arrivals
from ..replay.probe_order import ProbeOrder, probe_order, smaller_first, two_stream_order
from ..policies import SORTING, SQL_INTERVAL_JOIN, SYMMETRIC, PolicySpec
from ..replay.progress import Decisions, Replay, build_replay, decide, expiry, memory_per_stream


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
    probe_order: ProbeOrder | None = None


def join(
    ts: Sequence[np.ndarray],
    arrival: Sequence[np.ndarray],
    keys: Sequence[pl.DataFrame | None],
    windows: Sequence[int],
    policy: PolicySpec,
    candidates_method: str = "auto",
    *,
    space: Space | None = None,
    where: Callable[[Combos], np.ndarray] | None = None,
    order: Sequence[int] | None = None,
    bad_arrivals: Sequence[np.ndarray] | None = None,
) -> JoinOutcome:
    """Replay ``n`` streams through ``policy`` and join them.

    Args:
        ts, arrival: per stream, int64 microseconds in row order.
        keys: per stream, key columns named ``__key0..`` (same dtypes in every
            stream), or ``None`` for a time-only join.
        windows: ``W_i`` per stream, microseconds.
        policy: the disorder policy.
        candidates_method: truth enumeration method (see
            :func:`~streamjoin.pipelines.replay.candidates.enumerate_truth`).
        space: the distance predicate (vector columns + threshold), if any.
        where: an extra predicate: combinations -> boolean mask (``--where``).
        order: probe order; ``None`` = chosen from observed selectivity
            (:mod:`~streamjoin.pipelines.replay.probe_order`).
        bad_arrivals: per stream, arrival times of quarantined rows (recall-target
            policies re-decide early on a burst of them).
    """
    timings: dict[str, float] = {}

    def timed(name, fn, *args, **kwargs):
        t0 = time.perf_counter()
        result = fn(*args, **kwargs)
        timings[name] = time.perf_counter() - t0
        return result

    W = np.asarray(windows, dtype=np.int64)

    # M is read by the sorting family's release horizon and by the
    # recall-target controllers; the fixed-retention policy needs only T
    keep_M = policy.family == SORTING or policy.adaptive

    # Truth does not depend on arrival order, and memory does not depend on
    # truth: each pair runs on two threads (numpy and polars release the GIL
    # in their column loops), which is what a 2-core machine can give.  The
    # probe order is only needed by truth, so it is chosen on truth's thread,
    # and so is the part of emission that needs only truth and the replay
    # order (each combination's last member): it overlaps the policy's
    # expiry index instead of waiting for it.
    given = ProbeOrder(order=list(order)) if order is not None else None
    replay_ready: Future = Future()

    sizes = [len(t) for t in ts]

    def truth():
        # two streams: no sample; the probe order is the smaller stream first, with
        # the exact selectivity taken from truth (before --where)
        from_truth = given is None and len(ts) == 2
        if from_truth:
            probe = smaller_first(sizes)
        else:
            # (timed as "plan": report.json's join.plan)
            chosen = given if given is not None else timed("plan", probe_order, ts, keys, W.tolist(), space)
            probe = chosen.order
        combos = timed("candidates", enumerate_truth, ts, keys, W.tolist(), candidates_method, space=space,
                       order=probe)
        if from_truth:
            chosen = two_stream_order(sizes, len(combos))
        if where is not None:
            combos = combos.filter(where(combos))
        arrivals = (timed("emit.last", last_arrivals, combos, replay_ready.result(),
                          with_arrival=policy.family != SYMMETRIC) if len(combos) else None)
        return chosen, combos, arrivals

    with ThreadPoolExecutor(max_workers=2) as pool:
        truth_job = pool.submit(truth)
        t0 = time.perf_counter()
        try:
            replay = build_replay(list(ts), list(arrival), keep_running_max=keep_M)
        except BaseException as exc:
            replay_ready.set_exception(exc)  # the truth job waits for it
            raise
        replay_ready.set_result(replay)
        decisions = decide(replay, W, policy, bad_arrivals=bad_arrivals,
                           keys=key_ids(list(keys)) if policy.adaptive or policy.family == SQL_INTERVAL_JOIN else None)
        timings["progress"] = time.perf_counter() - t0
        # the expiry index of every tuple serves both memory and emission
        expiry_job = pool.submit(timed, "expiry", expiry, replay, W, decisions)
        memory_job = pool.submit(
            lambda: timed("memory", memory_per_stream, replay, W, decisions, expiry_index=expiry_job.result()))
        chosen, truth, arrivals = truth_job.result()
        emitted = timed("emit", emission, truth, replay, W, decisions, expiry_index=expiry_job.result(),
                        arrivals=arrivals)
        memory = memory_job.result()
    return JoinOutcome(replay=replay, decisions=decisions, combos=truth, emission=emitted, memory=memory,
                       timings_s=timings, probe_order=chosen)
