"""One ``streamjoin run``: load -> join -> metrics -> atomically published outputs.

This is the only place that knows the order of the stages; each stage lives
in its own module and is testable alone.  ``on_stage(name, seconds)`` is
called as each stage ends, so the CLI can show a progress bar on a terminal
and plain log lines in cron.

results.parquet (results on the driver) is final once the join is: it is
written on a thread of its own from then on, while the metrics and the report
are computed, into the staging directory entered before the metrics
(:class:`~streamjoin.pipelines.io.results_file.BackgroundWrite`); the
``write`` stage ends with the wait for it, and ``timings_s.results`` is the
writer's own wall time from its start.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np

from ..analysis import metrics
from ..analysis import summary as result_summary
from ..base.errors import InputError
from ..base.jit import build_seconds
from ..capacity.spec import parse_capacity
from ..config.options import is_uri
from ..config.settings import RunConfig, with_period
from ..config.windows import window_counts
from ..analysis.hindsight import MEASURE
from ..engines.local import CountRequest, JoinOutcome, join
from ..policies import SYMMETRIC
from ..io.load import LoadedStream, bad_arrivals_of, load_all, payload_needed, with_file_batches
from ..io.output import AtomicOutput, act_on_held, interrupts_held, locks_out
from ..replay.counting import counts
from ..replay.predicates import space_of, where_of
from ..report import build as report_build
from ..report import html as report_html
from ..report import json as report_json
from .chunking import chunk_rows_for

StageCallback = Callable[[str, float], None]

STAGES = ("load", "join", "metrics", "write")


class _Stages:
    def __init__(self, on_stage: StageCallback | None):
        self.timings: dict[str, float] = {}
        self.on_stage = on_stage

    @contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        yield
        t1 = time.perf_counter()
        # a first run on a machine builds the compiled kernels (base/jit.py): once, timed apart
        built = build_seconds(t0, t1)
        self.timings[name] = t1 - t0 - built
        if built:
            self.timings["kernel_build"] = self.timings.get("kernel_build", 0.0) + built
        if self.on_stage:
            self.on_stage(name, self.timings[name])


def arrival_span(streams: list[LoadedStream]) -> tuple[int | None, int | None]:
    """First and last arrival over the loaded streams (``(None, None)`` if empty)."""
    nonempty = [s.arrival for s in streams if s.rows]
    if not nonempty:
        return None, None
    return min(int(a.min()) for a in nonempty), max(int(a.max()) for a in nonempty)


def publish_json_and_html(out, kind: str, name: str, result: dict, html: str, *, started: float,
                          timings: dict[str, float], validate=None) -> None:
    """Publish ``NAME.html`` and ``NAME.json`` atomically under ``out`` (tune-buffer, compare):
    the page first, then the JSON with the timings and outputs -- its presence means the
    rest is complete.  ``html`` renders the page from ``result``; ``validate`` checks the JSON."""
    with AtomicOutput(out, kind) as staging:
        t0 = time.perf_counter()
        (staging / f"{name}.html").write_text(html(result), encoding="utf-8")
        timings["html"] = time.perf_counter() - t0
        timings["total"] = time.perf_counter() - started
        result["timings_s"] = timings
        result["outputs"] = {name: str(out / f"{name}.json"), "html": str(out / f"{name}.html")}
        if validate is not None:
            validate(result)
        (staging / f"{name}.json").write_text(json.dumps(report_json.json_safe(result), indent=2) + "\n")


def resolve_period(cfg: RunConfig, streams: list[LoadedStream]) -> RunConfig:
    """:func:`~streamjoin.pipelines.config.settings.with_period` over the loaded input's arrival span."""
    first, last = arrival_span(streams)
    return with_period(cfg, 0 if first is None else last - first)


def build_report(cfg: RunConfig, command: str, streams: list[LoadedStream], outcome: JoinOutcome) -> dict[str, Any]:
    cnt = outcome.counted
    if cnt is not None:   # counted, not materialised: the same numbers (replay/counting.py)
        report = _report_body(cfg, command, streams, outcome, cnt.truth, cnt.emitted)
        report["duplicates"] = 0   # count_pairs checked that no row repeats: every pair is distinct
        return report
    em = outcome.emission
    truth_n = len(outcome.combos)
    emitted_n = int(np.count_nonzero(em.emitted))
    rows = outcome.combos.rows if truth_n else [np.empty(0, np.int64)]
    # imported here: a counted run (above) never checks combinations one by one
    from ..replay.duplicates import count_duplicates

    # the duplicate count overlaps the rest (it may have to hash combinations)
    with ThreadPoolExecutor(max_workers=1) as pool:
        duplicates = pool.submit(count_duplicates, rows, [s.rows for s in streams],
                                 em.emitted if truth_n else None)
        report = _report_body(cfg, command, streams, outcome, truth_n, emitted_n)
        report["duplicates"] = duplicates.result()
    return report


def build_summary_report(cfg: RunConfig, command: str, streams: list, outcome,
                         quarantined: list[int]) -> dict[str, Any]:
    """:func:`build_report` of a Spark run whose results stayed on the executors
    (``outcome.summary``, merged from the tasks' summaries: the same numbers).
    ``streams``: the loaded streams, or on the native path the Spark read's facts
    (``engines/spark/read.StreamFacts``); ``quarantined``: each stream's quarantined rows."""
    sm = outcome.summary
    names = [s.name for s in streams]
    agg = outcome.aggregated
    if agg is not None:   # the native path: aggregated on Spark
        first, last = agg["first"], agg["last"]
        mem_t, mem_b = agg["memory_tuples"], agg["memory_bytes"]
        facts = [dict(f, quarantined=q) for f, q in zip(agg["streams"], quarantined)]
    else:
        arrival = outcome.replay.arrival
        first, last = (int(arrival[0]), int(arrival[-1])) if len(arrival) else (None, None)
        mem_t, mem_b = metrics.memory_summary(outcome.memory, [s.row_bytes for s in streams])
        facts = metrics.stream_facts(names, [s.rows for s in streams], quarantined,
                                     [s.ts for s in streams], outcome.replay, outcome.decisions)
    emitted = sm.periods[1::2]
    truth = sm.periods[0::2] + emitted
    return report_build.report_body(
        cfg, command,
        streams=facts,
        truth=sm.truth, emitted=sm.emitted, duplicates=sm.duplicates,
        latency=result_summary.latency_summary(*sm.latency),
        memory_tuples=mem_t, memory_bytes=mem_b,
        periods=(metrics.period_entries(first, cfg.period_us, outcome.period_ids, truth, emitted, cfg.recall_target)
                 if first is not None else []),
        first=first, last=last,
        policy={"policy_decisions": report_build.report_entries(outcome.decisions.policy_log, names),
                "policy_settings": outcome.decisions.policy_settings},
        probe_order=outcome.probe_order.to_dict(names) if outcome.probe_order else None,
    )


def _report_body(cfg, command, streams, outcome, truth_n, emitted_n) -> dict[str, Any]:
    em, cnt = outcome.emission, outcome.counted
    mem_t, mem_b = metrics.memory_summary(outcome.memory, [s.row_bytes for s in streams])
    arrival = outcome.replay.arrival
    first, last = (int(arrival[0]), int(arrival[-1])) if len(arrival) else (None, None)
    if cfg.period_us is None:  # a caller that did not resolve it (run_job does, before the join)
        cfg = with_period(cfg, 0 if first is None else last - first)
    names = [s.name for s in streams]
    facts = metrics.stream_facts(names, [s.rows for s in streams], [s.quarantine.height for s in streams],
                                 [s.ts for s in streams], outcome.replay, outcome.decisions)
    if cnt is not None:   # a counted join: its latencies (None: every one 0) and period codes
        latency = (metrics.zero_latency_summary(cnt.emitted) if cnt.latency is None
                   else metrics.latency_summary(cnt.latency))
        periods = (metrics.periods_of_codes(first, cfg.period_us, cnt.period_ids, cnt.codes, cfg.recall_target)
                   if truth_n else [])
    else:
        latency = metrics.latency_summary_of(em.latency_us, em.emitted)
        periods = metrics.periods(em.last, em.emitted, arrival, cfg.period_us, cfg.recall_target)
    outer = None
    if getattr(em, "outer", None) is not None:   # spark-ss / flink-sql outer joins: the null-padded rows
        outer = metrics.outer_join_summary(em.outer, cfg.policy.join, names)
        for i, f in enumerate(facts):
            f["outer_rows"] = sum(len(p.index) for p in em.outer if p.stream == i)
    return report_build.report_body(
        cfg, command,
        streams=facts,
        truth=truth_n, emitted=emitted_n,
        duplicates=None,  # filled in by build_report
        latency=latency,
        memory_tuples=mem_t, memory_bytes=mem_b,
        periods=periods,
        first=first, last=last,
        # qjoin / qkslack: every decision (time, why, values per stream) -- SPEC §4.3
        policy={"policy_decisions": report_build.report_entries(outcome.decisions.policy_log, names),
                "policy_settings": outcome.decisions.policy_settings},
        probe_order=outcome.probe_order.to_dict(names) if outcome.probe_order else None,
        sections={"outer_join": outer} if outer is not None else None,
    )


def count_request(cfg: RunConfig, capacity, rows: int | None = None) -> CountRequest | None:
    """Count the combinations instead of materialising them (the local engine,
    ``engines.local.join``'s ``count``) where :func:`~streamjoin.pipelines.replay.counting.counts`
    says so for this job: nothing reads them one by one -- no results file, no
    ``--capacity`` or ``--flow-control`` (which replay or re-time each one) and
    no ``hindsight`` (a ``qjoin`` / ``qkslack`` run with a target reads every
    required slack) -- and the job's streams, family, ``--where`` and ``rows``
    (the loaded input rows: a small run never looks the count kernels up, which
    would build them where they are missing); the engine adds what only the
    join knows (probe order, ...)."""
    reads_each = (cfg.write_results or capacity is not None or cfg.flow_control is not None
                  or (cfg.policy.name in MEASURE and cfg.recall_target is not None))
    if not counts(cfg.policy.family, streams=len(cfg.streams), rows=rows, reads_each=reads_each,
                  filtered=bool(cfg.where) or cfg.distance is not None,
                  count_windows=window_counts(cfg.streams) is not None):
        return None
    return CountRequest(period_us=cfg.period_us, sample=report_build.TUNING_SAMPLE)


def _read_on_spark(cfg: RunConfig, session, quarantine_dir):
    """The native path's load stage: :func:`~streamjoin.pipelines.engines.spark.read.read_streams`
    in the run's session (``engines.spark.engine.open_session``'s), the quarantine written by the
    executors into ``quarantine_dir``; bad input stops the session and raises its one line."""
    from ..engines.spark.read import read_streams

    try:
        return read_streams(session[1], list(cfg.streams), max_quarantine=cfg.max_quarantine,
                            quarantine_dir=quarantine_dir)
    except BaseException:
        session[0].close()
        raise


@locks_out("run")  # the whole job holds the lock of --out (a second run exits 4)
def run_job(cfg: RunConfig, *, command: str = "run", on_stage: StageCallback | None = None,
            on_chunk: Callable[[int, int, float], None] | None = None) -> dict[str, Any]:
    """Run the whole job and publish its outputs under ``cfg.out``.

    ``on_chunk(done, chunks, seconds)`` is called after each chunk of a
    bounded-memory run (:mod:`~streamjoin.pipelines.jobs.chunked`).

    Returns the report (as written to ``report.json``).  Raises
    :class:`~streamjoin.pipelines.base.errors.InputError` on bad input, before
    anything is published.
    """
    stages = _Stages(on_stage)
    started = time.perf_counter()
    capacity = parse_capacity(cfg.capacity)   # a bad --capacity fails before any work
    if capacity is not None and capacity.state is not None and cfg.policy.family != SYMMETRIC:
        raise InputError(f"--capacity state=N: the join-state cap (seed 002 step 3) is modelled for the symmetric "
                         f"policies static and qjoin; policy {cfg.policy.name} keeps a sort buffer")
    # results made on the executors (Spark, spark.streamjoin.results): the tasks write
    # results.parquet/ into the staging directory, so it exists before the join; decided
    # before any work, so a refused combination (--flow-control, --capacity) is one line
    executors = native = False
    if cfg.engine == "spark":
        from ..engines.spark.engine import join_for_job, open_session, results_path
        from ..engines.spark.native import native_path

        native = native_path(cfg)   # spark.streamjoin.native: the data stays on the executors
        # always resolved: a bad spark.streamjoin.results is refused even on the native path
        # (whose results are on the executors; native_path refuses it with results=driver,
        # and takes executors with what the current path's cannot, e.g. --router ctr)
        if native:
            from ..config.options import results_mode

            results_mode(cfg.master, cfg.spark_conf)   # a bad value is refused here too
            executors = True
        else:
            executors = results_path(cfg) == "executors"
    if capacity is not None:
        # imported only here and for --flow-control: a plain run never loads the capacity model
        from ..analysis.capacity import capacity_section, queueing_delay_us
        from ..capacity import model as capacity_model

        capacity_model.warm_up(capacity)   # kernels load (or build) while the input loads and the plain join runs
    # flow control replays in memory (settings.resolve refuses --chunk-rows N with it)
    chunk_rows = chunk_rows_for(cfg) if cfg.flow_control is None else None
    if chunk_rows is not None:  # bounded memory: the replay in arrival-time chunks
        from .chunked import run_chunked_job

        return run_chunked_job(cfg, chunk_rows, command=command, stages=stages, started=started,
                               on_chunk=on_chunk)
    session = spark_in = flow = where_fn = None
    if not native:
        with stages("load"):
            # the payload columns are read only for an output that reads them (results, --where; either engine)
            streams = load_all(list(cfg.streams), cfg.max_quarantine, payload=payload_needed(cfg))
            # checked with the inputs, so a bad --where fails before any work
            where_fn = where_of(cfg, streams)
            if cfg.policy.trigger_files is not None:   # spark-ss --trigger-files: rows arrive with their batch
                streams, policy = with_file_batches(streams, cfg.policy)
                cfg = replace(cfg, policy=policy)
            # seed 001 flow control: the join sees each tuple when its unit admits it (capacity/flow.py)
            original, flow = streams, None
            if cfg.flow_control is not None:   # timed apart too (timings_s.flow_control, part of load)
                from ..capacity.flow import delay_arrivals, end_to_end_latency, flow_report

                t0 = time.perf_counter()
                flow = delay_arrivals([s.arrival for s in streams], cfg.flow_control)
                stages.timings["flow_control"] = time.perf_counter() - t0
                streams = [replace(s, arrival=a) for s, a in zip(original, flow.arrival)]
            # the recall period: the user's, or chosen from the replay span (the controller needs it)
            cfg = resolve_period(cfg, streams)
    with ExitStack() as publish:
        if is_uri(cfg.out):   # a Hadoop URI (--engine spark): staged and published through Hadoop's FileSystem API
            from ..engines.spark.hadoop_out import open_uri_output

            early, results_at = open_uri_output(publish, cfg, executors, native)
            # the native path's quarantine: written by the executors beside the results, in the URI's staging
            quarantine_at = results_at.parent / "quarantine" if native else None
        else:
            early = publish.enter_context(AtomicOutput(cfg.out)) if executors else None
            results_at = early / "results.parquet" if early is not None else None
            quarantine_at = early / "quarantine" if native else None
        if native:   # the executors read and validate the inputs; the driver keeps their facts
            with stages("load"):
                session = open_session(cfg)   # SPEC §6: the run's one SparkSession, before the read
                spark_in = _read_on_spark(cfg, session, quarantine_at)
                first, last = spark_in.arrival_span()
                cfg = with_period(cfg, 0 if first is None else last - first)
            streams = original = spark_in.streams   # read.StreamFacts: name, rows, quarantined, row_bytes
        quarantined = [s.quarantined if native else s.quarantine.height for s in streams]
        with stages("join"):
            keys = None if native else [s.keys if s.keys.width else None for s in streams]
            bad = None
            if cfg.policy.adaptive:   # the controller's bad-rows trigger; native: from the executors' quarantine
                reason = cfg.policy.target.triggers.bad_rows_reason
                bad = spark_in.bad_arrivals(reason) if native else bad_arrivals_of(streams, reason)
            if cfg.engine == "spark":  # SPEC §6: one SparkSession per run, closed after the write stage
                outcome = join_for_job(cfg, None if native else streams, where_fn,
                                       None if native else space_of(cfg, streams), bad,
                                       results_dir=results_at if cfg.write_results else None,
                                       results="executors" if executors else "driver", native=spark_in,
                                       series_points=report_build.MAX_SERIES_POINTS, session=session,
                                       count=None if native else count_request(cfg, capacity,
                                                                               rows=sum(len(s.ts) for s in streams)))
            else:
                outcome = join(
                    [s.ts for s in streams], [s.arrival for s in streams], keys, cfg.windows, cfg.policy,
                    space=space_of(cfg, streams), where=where_fn, bad_arrivals=bad, counts=window_counts(cfg.streams),
                    count=count_request(cfg, capacity, rows=sum(len(s.ts) for s in streams)),
                )
            if capacity is not None:   # the same replay on a finite machine (pipelines/capacity/)
                # on the driver for --engine spark too: the replay facts and the combinations are
                # there (results_path keeps them on the driver with --capacity)
                t0 = time.perf_counter()
                plain = outcome.emission
                cap = capacity_model.apply(capacity, outcome.replay, outcome.decisions, outcome.combos,
                                           plain, outcome.memory, cfg.windows, cfg.policy,
                                           keys=keys, bad_arrivals=bad)
                # in place: a Spark outcome keeps its session open until the write stage
                outcome.emission, outcome.memory, outcome.decisions = cap.emission, cap.memory, cap.decisions
                outcome.timings_s["capacity"] = time.perf_counter() - t0
        at_join = None
        if flow is not None:   # latency from each member's own arrival: the wait upstream counts
            em = outcome.emission
            at_join = metrics.latency_summary_of(em.latency_us, em.emitted)
            if capacity is not None:   # the infinite operator's latency from the same origin
                capacity_model.count_from_own_arrivals(cap, plain, outcome.combos.rows,
                                                       [s.arrival for s in original])
            else:
                em.latency_us = end_to_end_latency(em.emit_us, outcome.combos.rows, [s.arrival for s in original])
            for part in getattr(em, "outer", None) or ():   # outer joins: the padded rows too, per padded stream
                part.latency_us = part.emit_us - original[part.stream].arrival[part.row]
        # the outputs' staging directory, before the metrics: the results are final now (the join,
        # --capacity and --flow-control are done), so they are written on a thread of their own
        # while the metrics and the report are computed (it only reads the arrays they read);
        # entered after the staging, it is stopped and waited for before the staging is removed
        staging = early if early is not None else publish.enter_context(AtomicOutput(cfg.out))
        results = None
        if cfg.write_results and not executors:
            from ..io.results_file import BackgroundWrite
            from ..replay.results import emitted_row_groups   # with io/chunks: only to write results

            # the combinations are on the driver, and so is --out (the staging directory is
            # renamed into place there); one file, the same bytes from either engine, one row
            # group at a time (the next built while this one is written)
            # started and registered with interrupts held: a signal between the two would leave it
            # writing while the staging directory is removed
            with interrupts_held() as pending:
                results = publish.enter_context(BackgroundWrite(
                    staging / "results.parquet",
                    lambda: emitted_row_groups(outcome.combos, outcome.emission, original)))
            act_on_held(pending)
        with stages("metrics"), ThreadPoolExecutor(max_workers=1) as pool:
            # the HTML report's series (memory, latency histogram, tuning curve)
            # are independent of the metrics: compute them alongside
            if executors:
                extras = pool.submit(report_build.extras_of_summary, cfg, outcome)
                report = build_summary_report(cfg, command, streams, outcome, quarantined)
            else:
                extras = pool.submit(report_build.extras, cfg, outcome)
                report = build_report(cfg, command, streams, outcome)
            keys, required = extras.result()
            report.update(keys)
            if flow is not None:
                report["flow_control"] = flow_report(flow, cfg.flow_control,
                                                     [s.name for s in streams], [s.arrival for s in original], at_join)
            if capacity is not None:
                report["capacity"] = capacity_section(cap, [s.name for s in streams], outcome.replay,
                                                      period_us=cfg.period_us, target=cfg.recall_target)
                report["capacity"].update(report_build.capacity_series(cap.occupancy, outcome.replay.arrival,
                                                                       queueing_delay_us(cap)))
            # qjoin / qkslack against the best fixed setting chosen in hindsight (issue 15 item 4)
            why_not = ("the results stayed on the executors (spark.streamjoin.results): the per-period required "
                       "settings are not gathered on the driver; `tune-buffer --per-period` computes them"
                       if executors else
                       "--capacity: the run's memory and latency are those of a finite machine, a fixed "
                       "setting's replay those of an infinite one" if capacity is not None else None)
            t0 = time.perf_counter()
            hs = report_build.hindsight_of(cfg, outcome, report, why_not=why_not, required=required,
                                           latency_mean=at_join["mean"] if at_join is not None else None)
            if hs is not None:   # timed apart too (timings_s.hindsight, part of metrics)
                report["hindsight"] = hs
                stages.timings["hindsight"] = time.perf_counter() - t0
        outputs: dict[str, str] = {}
        with stages("write"):
            if cfg.write_results:   # on the executors: a directory of part files, written by the tasks
                outputs["results"] = str(cfg.out / "results.parquet")
            for s, q in zip(streams, quarantined):
                if q and not native:   # native: the executors wrote it into the staging directory (the read)
                    qdir = staging / "quarantine"
                    qdir.mkdir(exist_ok=True)
                    s.quarantine.write_parquet(qdir / f"{s.name}.parquet")
                if q:
                    outputs[f"quarantine_{s.name}"] = str(cfg.out / "quarantine" / f"{s.name}.parquet")
            # rendered from the report alone, as `streamjoin report DIR` re-renders it
            (staging / "report.html").write_text(report_html.render_report(report), encoding="utf-8")
            outputs["report_html"] = str(cfg.out / "report.html")
            if results is not None:   # the stage ends with the wait for the results writer
                results.result()
                stages.timings["results"] = results.seconds   # the writer's own wall time, from after the join
        report_build.finish(report, cfg.out, outputs, stages.timings, outcome.timings_s, started,
                            sum(s.rows for s in streams))
        if getattr(outcome, "routing", None):
            report["routing"] = outcome.routing
            outcome.close()
        # report.json is written last: its presence means the rest is complete
        report_json.write(report, staging / "report.json")
    return report
