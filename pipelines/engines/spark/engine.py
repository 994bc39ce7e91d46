"""The Spark engine: the same answer as the local engine, spread over partitions.

:func:`spark_join` runs one replay and join; what the driver holds at each
stage (N input tuples, C combinations, P partitions, J segments; bytes per
input tuple at the core benchmark's 3M, two keyed streams, mpkslack, ATR,
docs/performance.md "Driver memory stage by stage")::

    tuples on the driver (loaded by io/load.py: ts, arrival, key and
      payload columns)                                                 O(N)  ~40 B
      -> key ids, probe order (replay/probe_order.py; not built by a   O(N)  8 B, freed after
         run counted with --router none: it reports the exact one)          the tasks' columns
      -> progress facts: on the driver (replay/partitioned_progress.driver_facts;
         what the CLI uses: the replay order, frontier, delays, releases --
         a fixed policy's running maxima and slack one stream at a time),
         or with progress="spark" the partition-wise pass on Spark
         (.progress)                                                   O(N)  ~57 B kept
      -> routing plan (driver, .routing, from a rate histogram): none | atr
         | ctr (auto: least predicted overhead)                        O(J)
      -> data plane (.plane): none / atr as one job of per-partition tasks,
         ctr as hops of partial combinations.  The tasks' columns are built
         per stream (.columns.kernel_inputs, + .sink's) and handed off: as
         files (local masters) each stream once, and every ATR task picks
         its own rows from the plan; inline (other masters) the driver
         gathers each partition's rows (.handoff)                      O(N) while handed off
                                                                             (inline: x replication)
         A run without results (``count``, none / ATR / two-stream CTR):
         instead, the local engine's band plan (built on a thread beside
         the progress pass); each task finds its partition's pieces of it
         (CTR: the driver splits the plan; none: its one task walks it
         whole), counts them (.counted) and returns a small count      O(N) handed off once
      -> memory per arrival, on a driver thread while the job runs     O(N x streams)
      -> results="driver": combinations collected -> SparkOutcome (.outcome),
         --where (and distance, for CTR) applied on the driver;
         the job writes results.parquet there                          O(C)
         results="executors" (none / atr): each task writes its results as a
         Parquet part file and returns a summary (.sink) -> SummaryOutcome,
         the merged summaries and each partition's tuple counts        O(P + periods + distinct values)

That is the current path.  The native path (:mod:`.native`,
``spark.streamjoin.native``; auto on a non-local master) keeps the tuples
and results on the executors once the inputs are a DataFrame; what reaches
the driver there, stage by stage, is listed in :mod:`.native`'s docstring
(O(P x n + segments + periods + distinct values); the inputs are read and
validated on the executors, :mod:`.read`).

:func:`join_for_job` is ``streamjoin run --engine spark``: it opens the run's
SparkSession (or takes :func:`open_session`'s), warms the workers up and joins (the native path with ``native``); the session stays open until
the job has written its output (:meth:`~.outcome.SparkOutcome.close`).
:func:`results_path` picks the results path (``spark.streamjoin.results``:
``auto`` = executors on a non-local master).  Not yet distributed on the
current path: reading and validating the inputs, the progress facts and the memory series, and with
the inline hand-off the routing of tuples (docs/semantics.md, "Results on the
executors"; the native path reads on the executors).
:func:`open_session` opens the run's one session (SPEC §6): the native path
opens it before the read, ``jobs/run.py``'s load stage.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np

from pathlib import Path

from ...analysis.metrics import occupied_periods
from ...analysis.summary import merge
from ...config.options import HANDOFF_CONF_KEY, RESULTS_CONF_KEY, results_mode
from ...base import kernels as compiled
from ...base.errors import InputError, warn_once
from ...policies import INTERVAL_JOIN, MICROBATCH, SQL_INTERVAL_JOIN, PolicySpec
from ...replay import partitioned_progress as sp
from ...replay.candidates import Space, compact_ids, key_ids
from ...replay.counting import counts as counts_pairs
from ...replay.probe_order import ProbeOrder, probe_order, two_stream_order
from ..local import CountRequest
from ...replay.progress import memory_per_stream
from .kernels import INT
from .columns import tuple_table, attach_facts, kernel_inputs
from ...route import Capacity
from .routing import RouteSettings, make_route_plans
from .plane import PlaneResult, run_plane, spark_plane, ctr_spark
from .counted import driver_plan, driver_walk, spark_count
from .outcome import (EMULATIONS, SparkOutcome, SummaryOutcome, outcome_from, partition_use, post_filter,
                      routing_report, with_outer_rows)
from .sink import Sink, add_sink_columns, mark_complete, unsupported
from .session import spark_session, warm_up
from .sizing import input_rows_of, native_partitions
from .progress import spark_micro_batches, spark_progress
from .handoff import Handoff


def spark_join(
    ts, arrival, keys, windows, policy: PolicySpec, *, space: Space | None = None, where=None,
    order=None, bad_arrivals=None, settings: RouteSettings | None = None, spark=None,
    progress: str = "auto", progress_threshold: int | None = None, plane: str = "spark",
    handoff: str | None = None, results: str = "driver", results_dir: str | None = None,
    period_us: int | None = None, names=None, payloads=None, count: CountRequest | None = None,
) -> SparkOutcome | SummaryOutcome:
    """Replay and join on Spark (or, with ``plane="local"``, the same kernels in-process).

    ``progress``: ``"spark"`` (the partition-wise pass,
    :mod:`~streamjoin.pipelines.replay.partitioned_progress`), ``"driver"``
    (:mod:`~streamjoin.pipelines.replay.progress`) or ``"auto"``: the driver, unless
    ``progress_threshold`` is given and reached (adaptive policies always on
    the driver; ``flink`` always on the driver; ``spark-ss``'s Spark pass is the watermark
    scan of :func:`.progress.spark_micro_batches`).  The driver is the default because it has loaded the tuples
    and needs every tuple's facts for the report anyway: the partition-wise
    pass ships the tuples to Spark and the facts back (on the core benchmark,
    3M tuples: about 140 s against 0.4 s, docs/performance.md).

    ``handoff``: how bulk records reach the tasks and come back
    (:mod:`.handoff`): ``"auto"`` (files when the master is local), ``"files"``
    or ``"inline"``; ``None`` reads the Spark conf ``spark.streamjoin.handoff``.

    ``results``: ``"driver"`` (every combination collected, a
    :class:`SparkOutcome`) or ``"executors"`` (:mod:`.sink`: each task writes
    its results under ``results_dir`` -- None: not written -- and returns a
    summary, a :class:`SummaryOutcome`; needs ``period_us``, the streams'
    ``names`` and ``payloads``; ``--router auto`` is ATR there).

    ``count`` (a run without results, ``jobs/run.count_request``): where the local
    engine would count (:func:`~streamjoin.pipelines.replay.counting.counts`: two
    streams, no ``--where`` or distance, ...), under any router, the tasks count the
    pairs their partitions own (:mod:`.counted`) and the outcome has the local engine's
    ``counted`` instead of combinations; a run whose tasks cannot load the counting
    kernel (executors with none built) materialises.
    """
    settings = settings or RouteSettings()
    if policy.family in EMULATIONS:
        # the emulations' facts come from the driver's columns; the join runs none / ATR (CTR's
        # partial combinations carry no per-member facts): auto is ATR
        if settings.router == "ctr":
            raise InputError(f"--router ctr: policy {policy.name} runs with --router none, atr or auto (= atr)")
        if settings.router == "auto":
            settings = replace(settings, router="atr")
        if policy.family in (INTERVAL_JOIN, SQL_INTERVAL_JOIN) or policy.trigger_files is not None:
            # flink's watermark scan, flink-sql's caches and spark-ss's batches of files run on the driver
            progress = "driver"
    if results == "executors":
        why = unsupported(settings.router, policy.family, where)
        if why is not None:
            raise InputError(f"{RESULTS_CONF_KEY}=executors: not with {why} yet; use {RESULTS_CONF_KEY}=driver")
        if plane != "spark" or period_us is None:
            raise ValueError("results on the executors need the Spark plane and the recall period")
        if settings.router == "auto":
            settings = replace(settings, router="atr")
    timings: dict[str, float] = {}
    n = len(ts)
    W = np.asarray(windows, dtype=INT)
    sizes = [len(t) for t in ts]
    N = sum(sizes)
    t0 = time.perf_counter()
    # the key ids, once: as they are for the counted walk's plan (the local engine's walk
    # order) and the adaptive / SQL facts; dense (same equalities) for the tuples' columns,
    # whose (key, ts) codes then pack into one sort pass
    raw_ids = key_ids(list(keys)) if keys is not None else None
    ids = compact_ids(raw_ids) if raw_ids is not None else None
    keyed, dims = ids is not None, (space.dims if space is not None else 0)
    tables: dict[str, dict] = {}

    def tab() -> dict:  # the stream-major tuple table (CTR, the in-process plane, the Spark progress pass)
        if "tab" not in tables:
            tables["tab"] = tuple_table(ts, arrival, ids, space)[0]
        return tables["tab"]

    timings["plan"] = time.perf_counter() - t0  # report.json's join.plan: the key ids and the probe order
    probes: list[ProbeOrder] = []

    def probe_of() -> ProbeOrder:
        """The sampled probe order, built where read (the route plans, a materialised
        outcome): a counted ``--router none`` run reports the exact one instead."""
        if not probes:
            t0 = time.perf_counter()
            probes.append(probe_order(ts, keys, W.tolist(), space) if order is None else ProbeOrder(order=list(order)))
            timings["plan"] += time.perf_counter() - t0
        return probes[0]

    # a run the tasks count (.counted): its band plan does not read the replay, so it is
    # built on a thread beside the progress pass, as the local engine builds it beside
    # the replay; the walk's replay-dependent rest follows the pass
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        plan_job = None
        if (count is not None and plane == "spark" and results == "driver"
                and counts_pairs(policy.family, streams=n, rows=N, filtered=where is not None or space is not None,
                                 given_order=order is not None)):
            timings["candidates"] = 0.0   # its place in report.json's timings: before progress, as the local engine's
            plan_job = pool.submit(_timed, timings, "candidates", driver_plan, ts, raw_ids, W.tolist())
        if not (policy.adaptive or policy.family == SQL_INTERVAL_JOIN):
            raw_ids = None   # not through the pass: the plan's thread holds them while it reads them
        t0 = time.perf_counter()
        use_spark_progress = (plane == "spark" and not policy.adaptive
                              and (progress == "spark" or (progress == "auto" and progress_threshold is not None
                                                           and N >= progress_threshold)))
        if use_spark_progress and policy.family == MICROBATCH:
            f = _spark_micro_batch_facts(spark, tab(), ts, arrival, W, policy, max(settings.partitions, 1))
        elif use_spark_progress:
            f = spark_progress(spark, tab(), n, W, policy, max(settings.partitions, 1))
        elif policy.adaptive or progress in ("driver", "auto") or plane == "local":
            f = sp.driver_facts(ts, arrival, W, policy, bad_arrivals=bad_arrivals,
                                keys=raw_ids if policy.adaptive or policy.family == SQL_INTERVAL_JOIN else None)
        else:
            raise AssertionError(progress)
        replay, dec = sp.replay_from_facts(f, n, policy, sizes)
        replay.drop_running_max()   # the policy has decided; nothing below reads M
        timings["progress"] = time.perf_counter() - t0
        # memory per arrival needs only the replay: counted on the driver while the join
        # runs -- on the none / ATR Spark plane, or a counted run's, once the tasks' records
        # are handed off (its temporaries never sit beside them), otherwise from here on
        memory_job = None

        def start_memory(expiry_index=None):
            nonlocal memory_job
            if memory_job is not None:   # started for a counted run whose tasks then could not count
                return
            memory_job = pool.submit(_timed, timings, "memory",
                                     lambda: memory_per_stream(replay, W, dec, expiry_index=expiry_index))

        probe = probe_of() if settings.router != "none" else None   # the route plans' selectivity
        t0 = time.perf_counter()
        route_plans, T, rates = (make_route_plans(ts, W.tolist(), settings, probe.order, probe.selectivity)
                                 if probe is not None else ({}, None, None))
        router = settings.router
        predicted = {"atr": route_plans["atr"][1] if "atr" in route_plans else None,
                     "ctr": (route_plans["ctr"][1] + route_plans["ctr"][2]) if "ctr" in route_plans else None}
        if router == "auto":
            router = "atr" if predicted["atr"] <= predicted["ctr"] else "ctr"
        route_plan = route_plans[router][0] if router in route_plans else None
        timings["route_plan"] = time.perf_counter() - t0
        counting = None   # (walk, expiry index): the tasks count their pairs (.counted)
        if plan_job is not None:
            count_plan_of = plan_job.result()   # (its time on its thread: candidates)
            plan_job = None
            t0 = time.perf_counter()
            if count_plan_of is not None:
                counting = driver_walk(ts, None, W.tolist(), replay, dec, count.period_us, count.sample,
                                       plan=count_plan_of)   # (the ids only build a plan not given)
            del count_plan_of
            timings["candidates"] += time.perf_counter() - t0   # + the walk's rest after the pass
        raw_ids = None   # (the tuples' columns read the dense ones)
        if not (plane == "spark" and (router != "ctr" or counting is not None)):
            start_memory()
        t0 = time.perf_counter()
        distance_in_kernel = router != "ctr"
        threshold = space.threshold if space is not None else None
        kdims = dims if distance_in_kernel else 0
        sink, period_ids, tally = None, None, None
        if results == "executors":
            N_rep = len(replay.arrival)
            period_ids, upper = (occupied_periods(replay.arrival, int(replay.arrival[0]), int(period_us)) if N_rep
                                 else (np.empty(0, INT), np.empty(0, INT)))
            sink = Sink(n, policy.family, tuple(int(w) for w in W), tuple(names), tuple(sizes), upper,
                        None if results_dir is None else str(results_dir))
        hand = Handoff()
        if plane == "spark":
            mode = handoff or spark.conf.get(HANDOFF_CONF_KEY, "auto")
            hand = Handoff.open(mode, spark.sparkContext.master)
        try:
            if counting is not None:
                walk, expiry_index = counting
                P = 1 if router == "none" else route_plan.partitions
                counting = spark_count(spark, walk, P, router, route_plan, hand,
                                       alongside=lambda: start_memory(expiry_index))
                del walk
            if counting is not None:
                tally, stats, stored = counting
                # the copies of tuples the partitions received (CTR: stored + probe copies; two
                # streams ship no intermediate results)
                res = PlaneResult({}, stats, sum(int(s["n_in"]) for s in stats.values()), stored=stored)
                counting = None
            elif plane == "spark" and router != "ctr":   # (or a counted run's tasks without the counting kernel)
                per = kernel_inputs(ts, ids, space, kdims, replay, dec, policy.family)
                ids = None   # the tasks' (narrowed) copies are in per
                if sink is not None:
                    per = add_sink_columns(per, arrival, payloads, replay, dec, f, policy.family,
                                           write=results_dir is not None)
                    f = None   # with its cached columns: the results' facts are in per
                res = spark_plane(spark, per, n, W, policy.family, router, route_plan, keyed, kdims, threshold, hand,
                                  sink=sink, alongside=start_memory)
                del per
            elif plane == "spark":
                start_memory()   # (a counted CTR run whose tasks had no counting kernel)
                res = ctr_spark(spark, attach_facts(tab(), f, n), n, W, policy.family, route_plan, keyed, hand)
        finally:
            hand.close()
        if plane != "spark":
            res = run_plane(attach_facts(tab(), f, n), n, W, policy.family, router, route_plan, keyed, kdims, threshold)
        tables.clear()
        pool.shutdown(wait=False)
    except BaseException:   # (Ctrl-C too) the plan's or memory's job not left behind: the worker ends
        pool.shutdown(wait=False, cancel_futures=True)   # once its running job does, the error surfaces now
        raise
    timings["join"] = time.perf_counter() - t0
    if tally is None:
        probe_of()   # where the outcome reads it: timed under plan, not collect too
    t0 = time.perf_counter()
    if tally is not None:   # the local engine's counted outcome (its probe order from the exact count)
        out = SparkOutcome(replay=replay, decisions=dec, combos=None, emission=None, memory=memory_job.result(),
                           timings_s=timings, probe_order=two_stream_order(sizes, tally.truth), counted=tally)
    elif sink is not None:
        out = SummaryOutcome(replay=replay, decisions=dec, memory=memory_job.result(),
                             summary=merge(res.summaries, len(period_ids)), period_ids=period_ids,
                             timings_s=timings, probe_order=probe_of())
        if results_dir is not None:
            mark_complete(Path(results_dir))
    else:
        out = outcome_from(replay, dec, f, res.combos, ts, n, timings, probe_of(), memory_job.result())
        post_filter(out, where, space, distance_in_kernel)
        with_outer_rows(out)   # an outer join's null-padded rows: from the pairs left after --where
    timings["collect"] = time.perf_counter() - t0
    nonempty = [t for t in ts if len(t)]
    duration_s = ((max(int(t.max()) for t in nonempty) - min(int(t.min()) for t in nonempty)) / 1e6) if nonempty else 0.0
    extra = {"requested": settings.router, "segment_us": T, "load_weights": list(settings.weights),
             "predicted": {"atr": predicted["atr"], "ctr": predicted["ctr"]},
             "progress_pass": "spark" if use_spark_progress else "driver",
             "handoff": hand.mode if plane == "spark" else None,
             "results": results,
             "counted_in_tasks": tally is not None,   # .counted: the tasks counted their pairs, none built
             "stage_s": {k: v for k, v in timings.items()}}
    if router == "atr":
        extra["atr"] = route_plan.to_dict()
        extra["theorem_b"] = predicted["atr"]
    if router == "ctr":
        extra["ctr"] = route_plan.to_dict()
        extra["theorem_d"] = {"O_ctr": route_plans["ctr"][1], "O_star_ctr": route_plans["ctr"][2]}
    if route_plan is not None:
        extra["estimated_per_partition"] = route_plan.estimated.table()   # the planner's view (histogram)
    span_us = duration_s * 1e6
    use = partition_use(router, route_plan, res, ts, W.tolist(), span_us, settings.costs)
    routing = routing_report(router, settings.partitions if router != "none" else 1, res, N, duration_s,
                             predicted.get(router) or 0.0, settings.weights, extra, use, settings.capacity,
                             settings.costs)
    out.routing = routing
    return out


def _spark_micro_batch_facts(spark, tab: dict, ts, arrival, W, policy: PolicySpec, P: int) -> sp.Facts:
    """``spark-ss``'s facts with the watermark scan on Spark (:func:`.progress.spark_micro_batches`);
    the replay order, which the report needs anyway, on the driver."""
    from ...replay import microbatch
    from ...replay.progress import Decisions, build_replay

    n = len(ts)
    replay = build_replay(list(ts), list(arrival), keep_running_max=False)
    N, T = replay.N, int(policy.trigger_us)
    if N == 0:
        return sp.driver_facts(ts, arrival, W, policy)
    base = int(replay.arrival[0]) // T
    g, table = spark_micro_batches(spark, tab, n, W, policy, P, base)
    a = np.empty(len(g["row"]), INT)
    for k in range(n):
        mine = g["stream"] == k
        a[mine] = replay.index_of[k][g["row"][mine]]
    batch, dropped, removal = np.empty(N, INT), np.empty(N, bool), np.empty(N, INT)
    batch[a], dropped[a], removal[a] = g["batch"], g["dropped"], g["removal"]
    mb = microbatch.MicroBatches(batch=batch, removal=removal, origin_us=base * T, trigger_us=T,
                                 occupied=table.occupied, watermark_ms=table.current, late_ms=table.before,
                                 outer_sides=policy.padded_sides)
    dec = Decisions(family=MICROBATCH, dropped=dropped, batches=mb,
                    policy_settings=microbatch.settings_report(mb, dropped, replay.stream, n, policy))
    return sp.facts_from_replay(replay, dec)


def _timed(timings: dict, name: str, fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    timings[name] = time.perf_counter() - t0
    return out


def results_path(cfg) -> str:
    """Where ``streamjoin run --engine spark`` makes its results: ``"executors"`` or
    ``"driver"`` (:func:`~streamjoin.pipelines.config.options.results_mode`).  Where the
    executors cannot (:func:`.sink.unsupported`, flow control, capacity), ``auto``
    falls back to the driver and an explicit ``executors`` is refused (one line)."""
    mode = results_mode(cfg.master, cfg.spark_conf)
    if mode != "executors":
        return mode
    why = unsupported(cfg.router, cfg.policy.family, cfg.where)
    if why is None and (cfg.flow_control is not None or cfg.capacity is not None):
        why = "--flow-control or --capacity (they rework latencies from every combination)"
    if why is None:
        return mode
    if dict(cfg.spark_conf).get(RESULTS_CONF_KEY, "auto") != "auto":
        raise InputError(f"{RESULTS_CONF_KEY}=executors: not with {why} yet; use {RESULTS_CONF_KEY}=driver")
    return "driver"


def open_session(cfg):
    """SPEC §6: the run's one SparkSession, opened before any Spark work (the native
    path reads its inputs in it); ``(stack, spark, timings)``, closing ``stack`` stops it."""
    from contextlib import ExitStack

    stack = ExitStack()
    t0 = time.perf_counter()
    # a local master's driver heap is sized from the input (sizing.local_heap): its footers' rows,
    # read only when spark_session sizes the heap (not with a heap already set or a session running)
    spark = stack.enter_context(spark_session(cfg.master, cfg.partitions or 4, cfg.spark_conf,
                                              input_rows=input_rows_of(cfg.streams)))
    return stack, spark, {"spark_session": time.perf_counter() - t0}


def _shuffle_partitions(spark, conf, P: int):
    """``spark.sql.shuffle.partitions`` set to the native path's ``P`` (the results'
    ``groupBy`` over P join groups), unless ``--spark-conf`` gives it; returns the undo."""
    if "spark.sql.shuffle.partitions" in dict(conf):
        return lambda: None
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", str(P))
    return lambda: spark.conf.set("spark.sql.shuffle.partitions", before)


def join_for_job(cfg, streams, where_fn, space, bad_arrivals, results_dir=None,
                 results: str = "driver", native=None,
                 series_points: int = 2000, session=None, count=None) -> SparkOutcome | SummaryOutcome:
    """``streamjoin run --engine spark``: open the run's SparkSession (or use ``session``,
    :func:`open_session`'s) and join; the session stays open until the job is written,
    :meth:`SparkOutcome.close` stops it.
    With ``results="executors"`` (:func:`results_path`) the tasks write ``results.parquet/``
    into ``results_dir`` (the run's staging directory's; None: ``--no-results``).
    ``native``: the native path's input (:func:`.read.read_streams`' :class:`~.read.SparkInput`,
    read in ``session``; ``streams`` is then unused), joined by :func:`.native.native_join`
    (``series_points``: the report's memory series points).  ``count``: :func:`spark_join`'s
    (a run without results: the tasks count the pairs, :mod:`.counted`)."""
    stack, spark, started = session if session is not None else open_session(cfg)
    partitions = cfg.partitions
    try:
        rows = sum(s.rows for s in native.streams) if native is not None else sum(len(s.ts) for s in streams)
        if rows >= compiled.MIN_ROWS:
            compiled.ensure_built()   # the tasks' workers load them ($STREAMJOIN_KERNELS=load): none builds in a task
        t0 = time.perf_counter()
        # the current path's tasks unpickle the data plane (.plane: routing, the sink, results);
        # imported by the warm-up in every worker instead of in the job's first tasks
        warm_up(spark, () if native is not None else (f"{__package__}.plane", f"{__package__}.counted"))
        started["spark_warmup"] = time.perf_counter() - t0
        cores = max(1, int(spark.sparkContext.defaultParallelism))
        if native is not None:   # one P from the input's size (sizing.native_partitions), an explicit one kept
            partitions, kind, line = native_partitions(rows, cores, partitions)
            if line:
                warn_once(line, prefix=kind)
        elif partitions is None:
            partitions = cores
        settings = RouteSettings(router=cfg.router, partitions=partitions, segment_us=cfg.segment_us,
                                 weights=tuple(cfg.load_weights), adapt=cfg.adapt_segment,
                                 capacity=Capacity(*cfg.partition_capacity))
        if native is not None:
            from .native import frame_from_input, native_join

            facts = native.streams
            shuffle = _shuffle_partitions(spark, cfg.spark_conf, partitions)
            stack.callback(shuffle)
            out = native_join(spark, frame_from_input(native), names=[s.name for s in facts],
                              payloads=[list(s.payload) for s in facts], sizes=[s.rows for s in facts],
                              windows=cfg.windows, policy=cfg.policy,
                              settings=settings, period_us=cfg.period_us, results_dir=results_dir,
                              row_bytes=[s.row_bytes for s in facts], series_points=series_points,
                              release=native.release, bad_arrivals=bad_arrivals)
        else:
            out = spark_join([s.ts for s in streams], [s.arrival for s in streams],
                             [s.keys if s.keys.width else None for s in streams], cfg.windows, cfg.policy,
                             space=space, where=where_fn, bad_arrivals=bad_arrivals, settings=settings,
                             spark=spark, results=results, results_dir=results_dir, period_us=cfg.period_us,
                             names=[s.name for s in streams], payloads=[s.payload for s in streams], count=count)
    except BaseException:
        stack.close()
        raise
    # session start-up, apart from the job: getOrCreate (JVM, SparkContext) and the first
    # job, which starts the executors' Python workers and imports the kernels there
    out.timings_s.update(started)
    out.routing["master"] = cfg.master
    if native is not None:   # how P and the heap were chosen (sizing)
        out.routing["spark_partitions"] = {"partitions": partitions, "from": "given" if cfg.partitions else "input",
                                           "tuples_per_task": -(-rows // max(partitions, 1)),
                                           "driver_memory": spark.sparkContext.getConf().get("spark.driver.memory",
                                                                                             None)}
    out._stack = stack
    return out
