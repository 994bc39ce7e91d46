"""The Spark engine's outcome on the driver: the collected combinations turned
into the local engine's :class:`~streamjoin.pipelines.engines.local.JoinOutcome`
(:func:`outcome_from`), or, with results on the executors, the merged
summaries (:class:`SummaryOutcome`); the driver-side predicates
(:func:`post_filter`) and the ``routing`` section of ``report.json``
(:func:`routing_report`, with each partition's measured cpu / mem / net from
:func:`partition_use`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...policies import INTERVAL_JOIN, MICROBATCH, SQL_INTERVAL_JOIN, SYMMETRIC
from ...replay.candidates import Combos, Space
from ...replay.emit import Emission, EmittedOnArrival, MemberIndexes, last_arrivals, outer_rows_of, padded_sides_of
from ...replay.partitioned_progress import Facts
from ...route import DEFAULT_COSTS, RESOURCE_UNITS, Capacity, Loads, imbalance, resource_use
from ...route import atr as atr_mod
from ...route import ctr as ctr_mod
from ..local import JoinOutcome
from .kernels import INT
from .plane import PlaneResult


#: the engine emulations: facts from the driver, the join with --router none or ATR
EMULATIONS = (MICROBATCH, INTERVAL_JOIN, SQL_INTERVAL_JOIN)


@dataclass
class SparkOutcome(JoinOutcome):
    """The local engine's outcome plus the routing facts of ``report.json``.

    :func:`~streamjoin.pipelines.engines.spark.engine.join_for_job` keeps the
    run's SparkSession open in ``_stack`` until the job has written its output;
    :meth:`close` stops it."""

    routing: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        stack = getattr(self, "_stack", None)
        if stack is not None:
            self._stack = None
            stack.close()


@dataclass
class SummaryOutcome:
    """A run whose results stayed on the executors (:mod:`.sink`): the driver's
    replay facts and the merged summary of the combinations, no combinations.
    ``period_ids``: the occupied periods the summary's period counts follow."""

    replay: Any
    decisions: Any
    memory: np.ndarray
    summary: Any                       # analysis.summary.ResultSummary
    period_ids: np.ndarray
    timings_s: dict[str, float] = field(default_factory=dict)
    probe_order: Any = None
    routing: dict[str, Any] = field(default_factory=dict)
    #: the native path (.native): no replay on the driver; the report's stream facts,
    #: memory numbers and series, first and last arrival, aggregated on Spark
    aggregated: dict[str, Any] | None = None

    close = SparkOutcome.close


def outcome_from(replay, dec, f: Facts, combos: dict, ts, n: int, timings, probe_order, memory) -> SparkOutcome:
    """The driver-side outcome from the collected combinations, in collection order
    (partition by partition; with one partition, the local engine's order).

    Combinations that carry only ``emitted`` (the Spark plane) get their
    emission time and latency from the facts, exactly as the local engine's
    :func:`~streamjoin.pipelines.replay.emit.emission` does: the last member is the
    one with the largest arrival index ``a``; symmetric: ``emit = arrival[last]``,
    latency 0 (and ``flink``); sorting: ``emit = max(member rel_us)``, latency ``emit -
    arrival[last]``; ``spark-ss``: the end of the later member's micro-batch.
    """
    sizes = [len(t) for t in ts]
    idx = np.int32 if max(sizes, default=0) < 2**31 else INT
    c = Combos([np.asarray(combos[f"r{k}"]).astype(idx, copy=False) for k in range(n)], list(ts))
    a = MemberIndexes(c, replay)
    emitted = np.asarray(combos["emitted"]).astype(bool, copy=False)
    if "emit_us" in combos:
        em = Emission(a=a, last=combos["last"], emitted=emitted, emit_us=combos["emit_us"],
                      latency_us=combos["latency_us"])
    else:
        last = last_arrivals(c, replay, with_arrival=False).last
        if dec.family == MICROBATCH:   # spark-ss: at the end of the later member's batch
            batch = np.maximum(dec.batches.batch[a[0]], dec.batches.batch[a[1]])
            emit_us = dec.batches.end_us(batch)
            em = Emission(a=a, last=last, emitted=emitted, emit_us=emit_us, latency_us=emit_us - replay.arrival[last],
                          batch=batch)
        elif dec.family in (SYMMETRIC, INTERVAL_JOIN, SQL_INTERVAL_JOIN):
            # emitted on arrival of the last member: the time is gathered if read, latency 0
            em = EmittedOnArrival(a, last, emitted, np.broadcast_to(np.zeros(1, dtype=INT), (len(last),)),
                                  replay.arrival)
        else:
            rel_us = np.asarray(f["rel_us"], dtype=INT)  # indexed by arrival index
            emit_us = np.maximum.reduce([rel_us[x] for x in a])
            latency = emit_us - replay.arrival[last]
            em = Emission(a=a, last=last, emitted=emitted, emit_us=emit_us, latency_us=latency)
    return SparkOutcome(replay=replay, decisions=dec, combos=c, emission=em, memory=memory, timings_s=timings,
                        probe_order=probe_order)


def with_outer_rows(outcome: JoinOutcome) -> None:
    """An outer join's null-padded rows (``spark-ss``, ``flink-sql``), from the emitted
    pairs the driver holds after :func:`post_filter` (a pair removed by ``--where`` does
    not match its members), as the local engine's
    :func:`~streamjoin.pipelines.replay.emit.emission` makes them."""
    em, dec = outcome.emission, outcome.decisions
    if dec.family in (MICROBATCH, SQL_INTERVAL_JOIN):   # an inner join: None, without gathering the members
        em.outer = outer_rows_of(outcome.replay, dec, em.a[0], em.a[1], em.emitted) if padded_sides_of(dec) else None


def post_filter(outcome: JoinOutcome, where, space: Space | None, distance_in_kernel: bool) -> None:
    """Predicates evaluated on the driver: ``--where`` always, distance when the kernel did not."""
    c = outcome.combos
    if not len(c):
        return
    keep = np.ones(len(c), dtype=bool)
    if space is not None and not distance_in_kernel:
        n = len(c.rows)
        for i in range(n):
            for j in range(i + 1, n):
                keep &= space.within(i, c.rows[i], j, c.rows[j])
    if where is not None:
        keep &= where(c)
    if keep.all():
        return
    outcome.combos = c.filter(keep)
    em = outcome.emission
    outcome.emission = Emission(a=[x[keep] for x in em.a], last=em.last[keep], emitted=em.emitted[keep],
                                emit_us=em.emit_us[keep], latency_us=em.latency_us[keep],
                                batch=em.batch[keep] if em.batch is not None else None)


def partition_use(router: str, plan, res: PlaneResult, ts, windows, span_us: float, costs) -> np.ndarray:
    """``(3, P)`` measured cpu, mem, net of each partition (:func:`~streamjoin.pipelines.route.resource_use`):
    what the plan ships where (counted by the Spark plane's tasks, or from the
    tuples' times on the driver) and the
    join's candidates and intermediate results (the plane's statistics)."""
    n = len(ts)
    if router in ("atr", "ctr") and res.stored is not None:   # counted on Spark (the plane's tasks, the native path)
        stored = res.stored
    elif router == "atr":
        stored = atr_mod.copies_per_partition(plan, ts)
    elif router == "ctr":
        stored = ctr_mod.stored_per_partition(plan, ts)
    else:
        stored = np.array([[len(t)] for t in ts], dtype=np.int64).reshape(n, 1)
    P = stored.shape[1]

    def stat(key):
        return np.array([res.stats.get(p, {}).get(key, 0) for p in range(P)], float)
    tuples_in = stored.sum(axis=0) if router != "ctr" else stat("n_in")
    return resource_use(tuples_in, stored, tuples_in + stat("n_inter_in"), stat("n_cand"), windows, span_us, costs)


def routing_report(router: str, partitions: int, res: PlaneResult, N: int, duration_s: float, predicted: float,
                   weights, extra: dict, use: np.ndarray, capacity: Capacity | None = None,
                   costs=DEFAULT_COSTS) -> dict:
    """``report.json``'s ``routing``: per partition the measured use of cpu, mem
    and net (``use``, :func:`partition_use`), each over its capacity (Phi), and
    the LLF load ``w = sum w_R Phi_R`` (weights normalised to sum 1)."""
    P = use.shape[1]
    cap = (capacity or Capacity()).of(use.sum(axis=1) / max(P, 1))
    loads = Loads(P, tuple(weights), cap, *use)
    table = loads.table()
    extra_tuples = res.shipped_tuples - N + res.shipped_intermediate
    return {
        "router": router,
        "partitions": int(partitions),
        "replication_factor": (res.shipped_tuples / N) if N else 1.0,
        "overhead_measured": (extra_tuples / duration_s) if duration_s > 0 else 0.0,
        "overhead_predicted": float(predicted),
        "load_imbalance": imbalance(loads.w()),
        "capacity": {"cpu": float(cap[0]), "mem": float(cap[1]), "net": float(cap[2]),
                     "given": (capacity or Capacity()).to_dict()},
        "costs": {"tuple": float(costs[0]), "result": float(costs[1])},
        "resource_units": dict(RESOURCE_UNITS),
        "per_partition": [
            {**table[p], **{k: (float(v) if k == "t_us" else int(v)) for k, v in res.stats.get(p, {}).items()}}
            for p in range(P)
        ],
        "shipped_tuples": int(res.shipped_tuples),
        "shipped_intermediate": int(res.shipped_intermediate),
        **extra,
    }
