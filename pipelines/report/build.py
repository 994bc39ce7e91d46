"""The body of ``report.json`` (SPEC §9), and what it holds beyond the run's
counts: the period facts and the series the HTML report draws (SPEC §9
allows extra keys).

:func:`report_body` builds the report of every ``streamjoin run`` -- in
memory (:mod:`~streamjoin.pipelines.jobs.run`, from the replay) and in bounded
memory (:mod:`~streamjoin.pipelines.jobs.chunked`, from the engine's sums) --
and :func:`finish` fills in its outputs and timings once they are written.
:func:`extras` computes, from the replay, the downsampled memory series, the
latency histogram of the emitted results and the tuning curve
(every combination's required slack, :func:`~streamjoin.pipelines.analysis.tuning.required_slacks`,
as a :func:`~streamjoin.pipelines.analysis.tuning.curve_summary`; for ``spark-ss`` and ``flink`` the
curve over its watermark delay,
:func:`~streamjoin.pipelines.analysis.watermark_tuning.watermark_curve_only`; none for
``flink-sql``, whose recall is not monotone in the delay), so that
``report.html`` can be rendered from ``report.json`` alone.
:func:`hindsight_of` adds a ``qjoin`` / ``qkslack`` run's ``hindsight``
(:mod:`~streamjoin.pipelines.analysis.hindsight`), from the required slacks the
exact tuning curve computed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis import metrics
from ..analysis.hindsight import MEASURE, hindsight, not_computed
from ..analysis.summary import CountedCurve
from ..analysis.tuning import FIXED_POLICY_OF, Curve, curve_summary, required_slacks
from ..base.version import tool_version
from ..config.settings import RunConfig
from ..config.windows import window_counts, window_text
from ..policies import INTERVAL_JOIN, MICROBATCH, SQL_INTERVAL_JOIN, SYMMETRIC
from . import json as report_json

#: memory series points kept in report.json (per-arrival memory is downsampled)
MAX_SERIES_POINTS = 2_000
LATENCY_BINS = 60
#: grid of the run report's tuning curve (tune-buffer's default --granularity)
DEFAULT_GRANULARITY_US = 10_000
TUNING_TARGETS = (0.9, 0.95, 0.99, 0.999)
#: a run's report estimates its tuning curve from at most this many results
#: (an evenly spaced, deterministic sample); `tune-buffer` is always exact
TUNING_SAMPLE = 1_000_000


def period_report(cfg: RunConfig, periods: list[dict[str, Any]], first: int | None, last: int | None) -> dict[str, Any]:
    """``report.json``'s period facts beside ``periods``: the period, where it came
    from, how many periods the span has (``periods`` lists only those with results),
    and ``time_origin`` (whether the times are calendar times, for the pages' axes)."""
    return {"period_us": cfg.period_us, "period_source": cfg.period_source,
            **metrics.period_counts(first, last, cfg.period_us, len(periods)),
            "time_origin": report_json.calendar_origin(first, last)}


def report_body(cfg: RunConfig, command: str, *, streams: list[dict[str, Any]], truth: int, emitted: int,
                duplicates: int | None, latency: dict[str, Any], memory_tuples: dict[str, Any],
                memory_bytes: dict[str, Any], periods: list[dict[str, Any]], first: int | None, last: int | None,
                policy: dict[str, Any], probe_order: dict[str, Any] | None,
                sections: dict[str, Any] | None = None) -> dict[str, Any]:
    """``report.json`` of a run on one machine, before its outputs and timings.

    ``streams``: the per-stream facts; ``first`` / ``last``: the replay's first
    and last arrival; ``policy``: the policy's entries (``policy_decisions``,
    and ``policy_settings`` where the engine has them); ``probe_order``: the
    probe order's entry (under the key ``plan``); ``sections``: keys of one
    kind of run (the bounded run's), placed after ``routing``.  ``timings_s``
    and ``outputs`` are left empty for :func:`finish`.  With a count window
    each stream's entry says its ``window`` in words (``"3 tuples"``, ``"5ms"``).
    """
    if window_counts(cfg.streams) is not None:
        streams = [dict(s, window=window_text(c)) for s, c in zip(streams, cfg.streams)]
    return {
        "schema_version": report_json.SCHEMA_VERSION,
        "tool_version": tool_version(),
        "command": command,
        "config": cfg.to_dict(),
        "streams": streams,
        "truth_results": truth,
        "emitted_results": emitted,
        "recall": metrics.recall_of(emitted, truth),
        # every emitted combination is one of the truth rows by construction
        "precision": 1.0,
        "duplicates": duplicates,
        "latency_us": latency,
        "memory_tuples": memory_tuples,
        "memory_bytes": memory_bytes,
        **period_report(cfg, periods, first, last),
        "periods": periods,
        "recall_target": cfg.recall_target,
        **policy,
        "plan": probe_order,
        # one machine: one partition, nothing replicated (a Spark run replaces it)
        "routing": {
            "router": cfg.router,
            "partitions": 1,
            "replication_factor": 1.0,
            "overhead_measured": 0.0,
            "overhead_predicted": 0.0,
            "load_imbalance": 1.0,
        },
        **(sections or {}),
        "timings_s": {},
        "outputs": {},
    }


def finish(report: dict[str, Any], out: Path, outputs: dict[str, str], stage_timings: dict[str, float],
           join_timings: dict[str, float], started: float, rows: int) -> None:
    """Fill in ``outputs`` (plus ``report.json`` itself, under ``out``),
    ``timings_s`` (the job's stages, the engine's as ``join.<name>``, and the
    total since ``started``, a ``time.perf_counter()``) and
    ``input_tuples_per_s`` over ``rows`` input tuples."""
    outputs["report"] = str(out / "report.json")
    report["outputs"] = outputs
    timings = dict(stage_timings)
    timings.update({f"join.{k}": v for k, v in join_timings.items()})
    timings["total"] = time.perf_counter() - started
    report["timings_s"] = timings
    report["input_tuples_per_s"] = rows / timings["total"] if timings["total"] > 0 else None


def memory_series(memory: np.ndarray, arrival: np.ndarray, points: int = MAX_SERIES_POINTS) -> dict[str, Any]:
    """Tuples held after each arrival, in <= ``points`` equal-count buckets (peak and mean each)."""
    total = memory.sum(axis=0) if memory.ndim == 2 else memory
    N = int(total.shape[0])
    if N == 0:
        return {"arrival_us": [], "peak": [], "mean": [], "points": 0, "arrivals_per_point": 0}
    b = min(points, N)
    starts = np.unique(np.linspace(0, N, b, endpoint=False).astype(np.int64))
    sizes = np.diff(np.append(starts, N))
    return {
        "arrival_us": arrival[starts].tolist(),
        "peak": np.maximum.reduceat(total, starts).tolist(),
        "mean": (np.add.reduceat(total, starts) / sizes).round(3).tolist(),
        "points": int(len(starts)),
        "arrivals_per_point": float(N / len(starts)),
    }


def capacity_series(occupancy: np.ndarray, arrival: np.ndarray, queueing_us: np.ndarray) -> dict[str, Any]:
    """The capacity model's series for ``report.html``: queued tuples after each
    arrival (downsampled as :func:`memory_series`) and the queueing-delay histogram."""
    return {"occupancy_series": memory_series(occupancy, arrival),
            "queueing_histogram": latency_histogram(queueing_us)}


def latency_histogram(latency: np.ndarray, bins: int = LATENCY_BINS) -> dict[str, Any]:
    if len(latency) == 0:
        return {"edges_us": [], "counts": []}
    hi = int(latency.max())
    counts, edges = np.histogram(latency, bins=bins if hi > 0 else 1, range=(0, max(hi, 1)))
    return {"edges_us": edges.round(1).tolist(), "counts": counts.tolist()}


def _emitted_latency_histogram(latency: np.ndarray, emitted: np.ndarray) -> dict[str, Any]:
    """``latency_histogram(latency[emitted])``; without the copy when every
    latency is 0 (symmetric family): one bin holding every emitted result."""
    if len(latency) and not latency.any():
        return _zero_latency_histogram(int(np.count_nonzero(emitted)))
    return latency_histogram(latency[emitted])


def _zero_latency_histogram(count: int) -> dict[str, Any]:
    """:func:`latency_histogram` of ``count`` latencies that are all 0."""
    if count == 0:
        return latency_histogram(np.zeros(0, np.int64))
    hist = latency_histogram(np.zeros(1, dtype=np.int64))
    hist["counts"] = [count]
    return hist


def extras(cfg, outcome) -> tuple[dict[str, Any], tuple[str, np.ndarray] | None]:
    """Keys ``report.json`` gains for the HTML report (SPEC §9 allows extra keys), and the
    exact tuning curve's required slacks with their fixed policy (``static`` / ``kslack``:
    every combination's, for :func:`hindsight_of`; ``None`` for a sampled curve or none)."""
    if outcome.counted is not None:
        return _extras_of_counted(cfg, outcome)
    em = outcome.emission
    family = outcome.decisions.family
    policy = "static" if family == SYMMETRIC else "kslack"
    combos, members = outcome.combos, (em.a, em.last)
    total = len(combos)
    every = -(-total // TUNING_SAMPLE) if total > TUNING_SAMPLE else 1
    if every > 1:  # every k-th result: the curve's shape at a bounded cost per run
        pick = np.arange(0, total, every)
        combos = combos.filter(pick)
        # the sample's own members' arrival indexes (em.a[k][pick], without
        # gathering em.a for every combination)
        members = ([outcome.replay.index_of[k][r] for k, r in enumerate(combos.rows)], em.last[pick])
    required = None
    if family == SQL_INTERVAL_JOIN:   # flink-sql: recall is not monotone in the delay, no curve to offer
        tuning = None
    elif window_counts(cfg.streams) is not None:   # count windows: retention tunes only the duration windows, no curve yet
        tuning = None
    elif family in (MICROBATCH, INTERVAL_JOIN):  # spark-ss / flink: the curve over the watermark delay
        from ..analysis.watermark_tuning import watermark_curve_only   # (with flink_tuning: only these families)

        tuning = watermark_curve_only(outcome.replay, combos, cfg.windows, cfg.policy, DEFAULT_GRANULARITY_US,
                                      cfg.recall_target, TUNING_TARGETS, members=members)
    else:
        values = required_slacks(outcome.replay, combos, cfg.windows, policy, members)
        tuning = curve_summary(Curve(values, DEFAULT_GRANULARITY_US), policy, cfg.recall_target, TUNING_TARGETS)
        required = (policy, values) if every == 1 else None
    out = {
        "memory_series": memory_series(outcome.memory, outcome.replay.arrival),
        "latency_histogram": _emitted_latency_histogram(em.latency_us, em.emitted),
    }
    if tuning is not None:
        tuning["truth_results"] = total
        tuning["sample_every"] = every  # 1 = exact
        out["tuning"] = tuning
    return out, required


def _extras_of_counted(cfg, outcome) -> tuple[dict[str, Any], None]:
    """:func:`extras` of a counted join (``outcome.counted``,
    :class:`~streamjoin.pipelines.replay.counting.Counted`: symmetric or sorting
    family, no count window): the same sample's required slacks, the same
    emitted latencies.  No required slacks for :func:`hindsight_of` (a run that
    needs them is not counted)."""
    cnt = outcome.counted
    policy = "static" if outcome.decisions.family == SYMMETRIC else "kslack"
    tuning = curve_summary(Curve(cnt.need, DEFAULT_GRANULARITY_US), policy, cfg.recall_target, TUNING_TARGETS)
    tuning["truth_results"] = cnt.truth
    tuning["sample_every"] = cnt.every
    return {
        "memory_series": memory_series(outcome.memory, outcome.replay.arrival),
        "latency_histogram": (_zero_latency_histogram(cnt.emitted) if cnt.latency is None
                              else latency_histogram(cnt.latency)),
        "tuning": tuning,
    }, None


def hindsight_of(cfg, outcome, report: dict[str, Any], *, latency_mean: float | None = None,
                 why_not: str | None = None, required: tuple[str, np.ndarray] | None = None
                 ) -> dict[str, Any] | None:
    """``report.json``'s ``hindsight`` (:mod:`~streamjoin.pipelines.analysis.hindsight`) of a
    ``qjoin`` / ``qkslack`` run with a recall target; None for every other run.  The run's own
    numbers come from ``report`` (``latency_mean``: the latency at the join, when flow control
    moved the report's to end-to-end); ``why_not``: the reason it is not computed;
    ``required``: :func:`extras`' required slacks (used when of the run's fixed policy)."""
    q = cfg.recall_target
    if cfg.policy.name not in MEASURE or q is None:
        return None
    if why_not is not None:
        return not_computed(cfg.policy.name, q, why_not)
    periods = report["periods"]
    adaptive = {"recall": report["recall"],
                "periods_meeting_target": sum(1 for p in periods if p["recall"] >= q),
                "periods_with_results": len(periods),
                "memory_tuples_mean": report["memory_tuples"]["mean"],
                "latency_us_mean": report["latency_us"]["mean"] if latency_mean is None else latency_mean}
    em = outcome.emission
    values = required[1] if required is not None and required[0] == FIXED_POLICY_OF[cfg.policy.name] else None
    return hindsight(outcome.replay, outcome.combos, cfg.windows, (em.a, em.last), policy=cfg.policy.name, q=q,
                     period_us=cfg.period_us, adaptive=adaptive, required=values)


def latency_histogram_of_counts(values: np.ndarray, counts: np.ndarray, bins: int = LATENCY_BINS) -> dict[str, Any]:
    """:func:`latency_histogram` of the latencies given as value counts (the same bins:
    a value's bin depends on the value and the range alone)."""
    if len(values) == 0:
        return {"edges_us": [], "counts": []}
    hi = int(values.max())
    hist, edges = np.histogram(values, bins=bins if hi > 0 else 1, range=(0, max(hi, 1)), weights=counts)
    return {"edges_us": edges.round(1).tolist(), "counts": hist.astype(np.int64).tolist()}


def extras_of_summary(cfg, outcome) -> tuple[dict[str, Any], None]:
    """:func:`extras` of a run whose results stayed on the executors
    (``outcome.summary``: :class:`~streamjoin.pipelines.analysis.summary.ResultSummary`).
    The tuning curve counts every combination's required slack (``sample_every`` 1), as
    value counts: no required slacks per combination (``None``)."""
    sm = outcome.summary
    policy = "static" if outcome.decisions.family == SYMMETRIC else "kslack"
    tuning = curve_summary(CountedCurve(*sm.need, DEFAULT_GRANULARITY_US), policy, cfg.recall_target,
                           TUNING_TARGETS)
    tuning["truth_results"] = sm.truth
    tuning["sample_every"] = 1
    return {
        "memory_series": (outcome.aggregated["memory_series"] if getattr(outcome, "aggregated", None)
                          else memory_series(outcome.memory, outcome.replay.arrival)),
        "latency_histogram": latency_histogram_of_counts(*sm.latency),
        "tuning": tuning,
    }, None


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
            "granularity_us": e.get("granularity_us"),
            "candidates": e.get("candidates"),
            **({"backlog": [{**b, "stream": names[b["stream"]]} for b in e["backlog"]]} if e.get("backlog") else {}),
        })
    return out
