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

A run that only counts (``count``: ``run --no-results``, nothing reading the
combinations one by one) with two streams and the symmetric or sorting
family stops chain A at the band join's plan (the sorted rows and each
query's band in them, :class:`~streamjoin.pipelines.replay.candidates.BandBounds`,
or the packed :class:`~streamjoin.pipelines.replay.candidates.BandPlan` where a
stream's times go back within a key) and, where
emission would run, counts the pairs in a compiled walk (two halves on two threads)
(:mod:`~streamjoin.pipelines.replay.counting`): truth, emission and the
report's per-combination numbers without the combination-sized columns.

Count windows (``counts``, seed 000's ``S_i[N]``; policy ``static`` only):
truth is :func:`~streamjoin.pipelines.replay.count_window.enumerate_counted`
(it needs the replay order, so it waits for chain B's first stage), and a
counted stream's buffer is its last ``N`` arrivals: its expiry index is the
count expiry, which memory and emission then read as they read any other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..analysis.metrics import occupied_periods
from ..replay.candidates import Combos, Space, enumerate_truth, key_ids
from ..replay.counting import Counted, count_pairs, count_plan
from ..replay.counting import counts as counts_pairs
from ..replay.count_window import enumerate_counted, with_count_expiry
from ..replay.emit import Emission, emission, last_arrivals
from ..replay.probe_order import ProbeOrder, probe_order, smaller_first, two_stream_order
from ..policies import SORTING, SQL_INTERVAL_JOIN, SYMMETRIC, PolicySpec
from ..replay.progress import Decisions, Replay, build_replay, decide, expiry, memory_per_stream


#: the window the policy's horizon sees for a count-window stream: never passed
#: (timestamps and retentions are at most 2**60 us, so ts + this + d fits int64)
COUNTED_WINDOW_US = 2**61


@dataclass
class JoinOutcome:
    """Everything a replay computed, before reporting.

    ``combos`` holds every valid combination (truth); ``emission`` says, per
    combination, whether, when and with what latency it was emitted.
    ``memory`` is tuples held per stream after every arrival index ``(n, N)``.
    A counted join (:func:`join`'s ``count``) has ``counted`` instead, and
    ``combos`` / ``emission`` ``None``.
    """

    replay: Replay
    decisions: Decisions
    combos: Combos | None
    emission: Emission | None
    memory: np.ndarray
    timings_s: dict[str, float] = field(default_factory=dict)
    probe_order: ProbeOrder | None = None
    counted: Counted | None = None


@dataclass(frozen=True)
class CountRequest:
    """Count the combinations instead of building them, where the counting
    kernel applies (:mod:`~streamjoin.pipelines.replay.counting`): the report's
    recall period ``period_us`` and its tuning sample ``sample``."""

    period_us: int
    sample: int


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
    counts: Sequence[int | None] | None = None,
    count: CountRequest | None = None,
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
        counts: per stream, ``N`` of a count window (the last ``N`` arrivals;
            its ``windows`` entry is ignored) or ``None`` for a duration;
            ``None``: no count window.  Policy ``static`` only.
        count: count instead of materialising (a run without results) where
            :func:`~streamjoin.pipelines.replay.counting.counts` says so for this
            join (and the walk finds no repeated row); the outcome then has ``counted`` and no
            ``combos`` / ``emission`` (elsewhere it is as without it).
    """
    timings: dict[str, float] = {}

    def timed(name, fn, *args, **kwargs):
        t0 = time.perf_counter()
        result = fn(*args, **kwargs)
        timings[name] = time.perf_counter() - t0
        return result

    W = np.asarray(windows, dtype=np.int64)
    if counts is not None and any(c is not None for c in counts):
        if policy.family != SYMMETRIC or policy.adaptive:
            raise ValueError(f"count windows replay with policy static, not {policy.name}")
        counted = list(counts)
        # the horizon never evicts a counted tuple (its window is a count): the
        # decisions see an endless window there, the expiry index the count
        W_policy = np.where([c is not None for c in counted], COUNTED_WINDOW_US, W).astype(np.int64)
    else:
        counted, W_policy = None, W

    # M is read by the sorting family's release horizon and by the
    # recall-target controllers; the fixed-retention policy needs only T
    keep_M = policy.family == SORTING or policy.adaptive

    # Truth does not depend on arrival order (count windows aside: their truth
    # waits for the replay order), and memory does not depend on
    # truth: each pair runs on two threads (numpy and polars release the GIL
    # in their column loops, and so do the compiled kernels), which is what a
    # 2-core machine can give.  The
    # probe order is only needed by truth, so it is chosen on truth's thread,
    # and so is the part of emission that needs only truth and the replay
    # order (each combination's last member): it overlaps the policy's
    # expiry index instead of waiting for it.
    given = ProbeOrder(order=list(order)) if order is not None else None
    replay_ready: Future = Future()

    sizes = [len(t) for t in ts]
    # the plan is the sorted enumeration's: a bucket join orders the combinations (and so the sample) otherwise
    counting = count is not None and counts_pairs(policy.family, streams=len(sizes), rows=sum(sizes),
                                                  filtered=space is not None or where is not None,
                                                  given_order=order is not None, count_windows=counted is not None,
                                                  bucket=candidates_method == "bucket")

    def truth():
        if counting:   # the band join's plan only: counted once the policy's facts are there
            plan = timed("candidates", count_plan, ts, key_ids(list(keys)), W.tolist())
            if plan is not None:
                return None, plan, None
        return materialise()

    def materialise():
        # two streams: no sample; the probe order is the smaller stream first, with
        # the exact selectivity taken from truth (before --where)
        from_truth = given is None and len(ts) == 2 and counted is None
        if counted is not None:
            first = next(k for k, c in enumerate(counted) if c is not None)
            rest = [k for k in (given.order if given is not None else range(len(ts))) if k != first]
            chosen = ProbeOrder(order=[first, *rest])
            ids = key_ids(list(keys))   # while the replay order is built
            combos = timed("candidates", enumerate_counted, replay_ready.result(), ids, W.tolist(), counted,
                           space=space, order=rest)
        elif from_truth:
            probe = smaller_first(sizes)
        else:
            # (timed as "plan": report.json's join.plan)
            chosen = given if given is not None else timed("plan", probe_order, ts, keys, W.tolist(), space)
            probe = chosen.order
        if counted is None:
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
        decisions = decide(replay, W_policy, policy, bad_arrivals=bad_arrivals,
                           keys=key_ids(list(keys)) if policy.adaptive or policy.family == SQL_INTERVAL_JOIN else None)
        timings["progress"] = time.perf_counter() - t0
        # the expiry index of every tuple serves both memory and emission
        if counted is None:
            expiry_job = pool.submit(timed, "expiry", expiry, replay, W, decisions)
        else:   # a counted stream's buffer: its last N arrivals
            expiry_job = pool.submit(timed, "expiry", lambda: with_count_expiry(expiry(replay, W_policy, decisions),
                                                                               replay, counted))
        memory_job = pool.submit(
            lambda: timed("memory", memory_per_stream, replay, W_policy, decisions, expiry_index=expiry_job.result()))
        chosen, truth, arrivals = truth_job.result()
        tally = None
        if chosen is None:   # a band plan: count it (None: the kernel is not there, or rows repeat)
            tally = timed("count", _count, truth, replay, W_policy, decisions, expiry_job.result(), count)
            if tally is None:
                chosen, truth, arrivals = materialise()
            else:
                chosen, truth = two_stream_order(sizes, tally.truth), None
        if tally is None:
            emitted = timed("emit", emission, truth, replay, W_policy, decisions, expiry_index=expiry_job.result(),
                            arrivals=arrivals)
        else:
            emitted = None
        memory = memory_job.result()
    return JoinOutcome(replay=replay, decisions=decisions, combos=truth, emission=emitted, memory=memory,
                       timings_s=timings, probe_order=chosen, counted=tally)


def arrival_periods(arrival: np.ndarray, period_us: int) -> tuple[np.ndarray, np.ndarray]:
    """``(period_of, period_ids)`` of a counted join (:func:`~streamjoin.pipelines.replay.counting.walk_inputs`):
    the occupied period of every arrival index (int32) and those periods
    (``metrics.periods``' own: by the first arrival); ``arrival`` not empty."""
    ids, upper = occupied_periods(arrival, int(arrival[0]), period_us)
    return np.repeat(np.arange(len(upper), dtype=np.int32), np.diff(upper, prepend=0)), ids


def _count(plan, replay: Replay, windows: np.ndarray, decisions: Decisions, expiry_index, count: CountRequest
           ) -> Counted | None:
    """:func:`~streamjoin.pipelines.replay.counting.count_pairs` with the occupied
    periods of the replay (``metrics.periods``' own: by the first arrival)."""
    arrival = replay.arrival
    if not len(arrival):
        return None
    period_of, ids = arrival_periods(arrival, count.period_us)
    return count_pairs(plan, replay, windows, decisions, expiry_index, period_of, ids, count.sample)
