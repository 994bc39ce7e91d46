"""The Spark engine's native path: the data stays on the executors, the driver
holds summaries (issue 19; ``spark.streamjoin.native``).

:func:`native_join` runs one replay and join of a fixed policy (``none``,
``static``, ``kslack``, ``mpkslack``) or a recall-target one (``qjoin``,
``qkslack``: :mod:`.native_adaptive`) with ``--router none``, ATR, CTR or
``auto`` (the smaller predicted overhead), from a
DataFrame of every tuple (``stream`` int, ``row`` long, ``ts`` and
``arrival`` long microseconds, the join keys ``__key0..`` in one common
dtype, and each stream's payload columns named by position,
:func:`payload_name`; the results name them ``<stream>_<column>``).
:func:`frame_from_input` makes that DataFrame from :func:`.read.read_streams`:
the executors read, validate and quarantine the inputs; no input row passes
through the driver (``jobs/run.py`` never calls ``load_all`` on this path).

What reaches the driver, stage by stage (N tuples, C combinations, P
partitions, J segments, n streams, F files, t read tasks, c columns,
D controller decisions, Q quarantined rows)::

    read (read.read_streams, jobs/run.py's load stage): the files and
      their footer schemas; per integer time column its min and max;
      per (file, task) row index range, rows kept and read, ts and
      arrival ranges; rows per quarantine reason; per key column
      min, max, first inexact float; per (file, task) the input
      columns' bits (load.column_bits, counted in the read's pass:
      the memory estimate's row_bytes); the quarantine written by the
      executors into the run's staging directory                    O(F + t + c)
      -> the recall period from the kept arrivals' range; offsets
         (each task's first row) back as a broadcast table
      (qjoin / qkslack with a bad-rows trigger: the quarantined rows'
      stream and arrival, filtered by reason on the executors,
      SparkInput.bad_arrivals)                                      O(Q)
    input: the read's cached copy released once the progress frame
      below is persisted                                            nothing
    controller (qjoin / qkslack only; native_adaptive.decide): count,
      arrival and ts range, key ids' range, the smallest ts per arrival
      bucket (4096)                                                 O(buckets)
      (ranked key ids: per range partition of the distinct keys a
      count, O(P)) then the tuples' stream, ts, arrival, key id, range-
      partitioned in replay order (persisted with every column: the
      progress pass takes it over), one partition at a time (toLocalIterator), fed
      to the local engine's controller in its streaming form, which
      holds a window (native_adaptive)    O(N / P + tuples per period + disorder)
      -> the decision table (times, per-stream values) back into the
      progress scans                                            O(D x n)
    progress (native_progress.progress_frame): the tuples range-partitioned
      in replay order once (keys and payload ride along), persisted
      (qjoin / qkslack: the controller's frame, taken over);
      per partition rows, smallest and largest ts and largest own delay
      per stream, first and last arrival, then the largest release /
      horizon candidate                                             O(P x n)
      -> carried-in prefix maxima back; facts attached on the executors
    releases and expiries (the same mapInArrow): found in the tuple's own
      partition or marked for the later one where they are; per marked
      partition the largest value and a count                       O(P)
    memory (native_progress.memory_stats): per partition n sums, then its
      peak, sums and pieces of the report's downsampled series;
      the arrival time at each series point (facts in replay order: the
      -1 events that cross a partition boundary, aggregated by index,
      and those sent to the partition that holds them, no shuffle)  O(P x n + points + crossing)
    stream facts: per stream count, ts range, drops, expiries; the
      delay percentiles (nearest rank, running sums over the value
      counts in Spark: native_metrics.delay_percentiles)            O(n)
    probe order (3+ streams): a sample of <= 4096 rows of each probing
      stream, its valid pairs counted against the other stream on the
      executors (two streams: the local engine's order from the join's
      exact count, after the join)                                  O(n^2 x 4096)
    routing: the per-stream event-time histogram (4096 buckets) ->
      ATR / CTR plan on the driver (routing.route_plans_from)       O(n x 4096 + J)
    join, ATR / none: tuples replicated to their partitions on the
      executors (atr.assign in mapInArrow), groupBy(partition)
      .applyInArrow runs the kernel (kernels.join_streams) and gives
      every combination its emission, latency, required slack, period
      (--no-results: each group returns its partial summary instead,
      native_metrics.group_summary, and the payload is dropped before
      the progress frame); tuples per partition and stream, each
      task's counts and time                                        O(P x n)
    join, CTR (.native_route): hop 1 a broadcast join (JVM) of each
      tuple with its segment's storage host and set cover, then one
      groupBy(partition).applyInArrow shuffle per hop joining the
      tuples stored there; tuples stored per partition and stream,
      copies shipped, each task's counts and time per hop           O(P x n)
      (--no-results: each last-hop task's value counts instead of
      result rows, summed per value in the JVM: O(P + periods +
      distinct values))
    results: df.write.parquet into the staging directory, a file://
      URI or --out's Hadoop URI (.hadoop_out) (Spark's file commit
      protocol: part files + _SUCCESS)                              nothing
    metrics (--no-results, ATR / none: the groups' partial summaries summed
      by one aggregation, cached): truth / emitted / duplicates counts, per
      period counts, tuples per partition and stream; then the value
      counts of latencies and of required slacks, each as two int64
      columns sorted in Spark                O(periods + P x n) + 16 B x distinct values

``P`` (``settings.partitions``) is one number for every stage above: the
progress scans' and the controller's range partitions, the ATR / CTR plan's
partitions and ``spark.sql.shuffle.partitions``; without ``--partitions``
``engine.join_for_job`` chooses it from N (:func:`.sizing.native_partitions`:
at most 1.5M tuples per task).

Refused here (one line, the current path runs them): the engine emulations,
``--where``, ``--distance``, ``--flow-control``, ``--capacity``.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np

from ...base.errors import InputError
from ...config.options import NATIVE_CONF_KEY, RESULTS_CONF_KEY, same_host
from ...policies import SORTING, SYMMETRIC, PolicySpec
from ...replay.probe_order import order_from_selectivity, sample_rows, two_stream_order
from ...route import Histogram
from . import native_adaptive
from .native_metrics import combination_metrics, stream_facts
from .native_progress import memory_stats, progress_frame
from .outcome import SummaryOutcome, partition_use, routing_report
from .plane import PlaneResult
from .routing import RouteSettings, route_plans_from, segment_for_span

#: the policies whose progress the native path computes as prefix scans
NATIVE_POLICIES = ("none", "static", "kslack", "mpkslack", "qjoin", "qkslack")
NATIVE_MODES = ("auto", "true", "false")
HIST_BUCKETS = 4096     # route.histogram's


def native_wanted(master: str, conf) -> bool:
    """``spark.streamjoin.native``: ``true``, ``false`` or ``auto`` (the default:
    native when the executors are on other hosts than the driver)."""
    mode = dict(conf).get(NATIVE_CONF_KEY, "auto")
    if mode not in NATIVE_MODES:
        raise InputError(f"--spark-conf {NATIVE_CONF_KEY}={mode}: expected auto, true or false")
    return mode == "true" or (mode == "auto" and not same_host(master))


def why_not_native(cfg) -> str | None:
    """Why this run cannot take the native path (None: it can)."""
    if cfg.policy.name not in NATIVE_POLICIES:
        return f"policy {cfg.policy.name} (native: {', '.join(NATIVE_POLICIES)})"
    if cfg.where is not None:
        return "--where"
    if getattr(cfg, "distance", None) is not None:
        return "--distance"
    if cfg.flow_control is not None or cfg.capacity is not None:
        return "--flow-control or --capacity"
    if dict(cfg.spark_conf).get(RESULTS_CONF_KEY, "auto") == "driver":   # the native path's stay on the executors
        return f"{RESULTS_CONF_KEY}=driver"
    return None


def native_path(cfg) -> bool:
    """Whether ``streamjoin run --engine spark`` takes the native path; an explicit
    ``spark.streamjoin.native=true`` it cannot take is refused (one line), ``auto``
    falls back to the current path."""
    if not native_wanted(cfg.master, cfg.spark_conf):
        return False
    why = why_not_native(cfg)
    if why is None:
        return True
    if dict(cfg.spark_conf).get(NATIVE_CONF_KEY, "auto") == "true":
        raise InputError(f"{NATIVE_CONF_KEY}=true: not with {why}; use {NATIVE_CONF_KEY}=false")
    return False


def payload_name(k: int, j: int) -> str:
    """The frame's name of stream ``k``'s ``j``-th payload column: by position, so no
    stream name prefixing another (``o``, ``o_eu``) nor a fact column (``rel_us``) clashes."""
    return f"__p{k}_{j}"


def frame_from_input(inp):
    """The native path's input DataFrame from :func:`.read.read_streams`' frame (read
    and validated on the executors; lazy): its columns with each stream's payload
    renamed by position (:func:`payload_name`)."""
    from pyspark.sql import functions as F

    df = inp.frame
    keys = [c for c in df.columns if c.startswith("__key")]
    payload = [F.col(f"`{col}`").alias(payload_name(k, j))
               for k, s in enumerate(inp.streams) for j, col in enumerate(s.payload.values())]
    return df.select("stream", "row", "ts", "arrival", *keys, *payload)


def native_join(spark, df, *, names, payloads, sizes, windows, policy: PolicySpec, settings: RouteSettings,
                period_us: int, results_dir: str | None, row_bytes, series_points: int,
                release=None, bad_arrivals=None) -> SummaryOutcome:
    """Replay and join ``df`` (:func:`frame_from_input`) on the executors; the
    driver gets the merged summaries (a :class:`~.outcome.SummaryOutcome` with
    ``aggregated``: the stream facts and the memory numbers ``report.json`` reads).
    ``payloads``: each stream's payload column names in order, from the read's facts
    (the frame names them :func:`payload_name`, never re-derived from ``df.columns``).
    ``release``: called once the progress frame is persisted (drops the read's cached copy).
    ``bad_arrivals``: per stream, the quarantined rows' arrival times (``qjoin`` /
    ``qkslack``: the controller's bad-rows trigger; :meth:`.read.SparkInput.bad_arrivals`)."""

    if policy.name not in NATIVE_POLICIES:
        raise InputError(f"{NATIVE_CONF_KEY}: policy {policy.name} runs on the current path "
                         f"(native: {', '.join(NATIVE_POLICIES)})")
    n = len(names)
    W = np.asarray(windows, dtype=np.int64)
    P = max(int(settings.partitions), 1)
    router = settings.router
    timings: dict[str, float] = {}
    keycols = [c for c in df.columns if c.startswith("__key")]
    payload_cols = [[(payload_name(k, j), c) for j, c in enumerate(payloads[k])] for k in range(n)]
    N = int(sum(sizes))
    if results_dir is None:   # no results: the payload is never read, so it neither moves nor is cached
        df = df.drop(*[c for p in payload_cols for c, _ in p])
        payload_cols = [[] for _ in range(n)]

    t0 = time.perf_counter()
    schedule = log = policy_settings = ordered = None
    if policy.adaptive:   # qjoin / qkslack: the controller on the driver, its decision table to the scans
        schedule, log, policy_settings, ordered = native_adaptive.decide(
            df, n=n, W=W, policy=policy, partitions=P, bad_arrivals=bad_arrivals, keycols=keycols)
        timings["controller"] = time.perf_counter() - t0
        t0 = time.perf_counter()
    # read once, range-partitioned in replay order and persisted: every stage below scans it
    try:
        prog = progress_frame(spark, df, n, W, policy, P, schedule=schedule, ordered=ordered)
    finally:   # decide's persisted frame: progress_frame drops it once read; here also when it fails
        if ordered is not None:
            ordered.unpersist()
        if release is not None:   # the read's cached copy: the progress frame holds every column now
            release()
    timings["progress"] = time.perf_counter() - t0
    try:   # the progress frame's cached frames: released after the join, and when a step fails
        t0 = time.perf_counter()
        # two streams: the probe order is the local engine's, from the join's exact count (below)
        sel = _selectivities(prog.facts, n, sizes, W, keycols) if n >= 3 else None
        timings["plan"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        mem_t, mem_b, series = memory_stats(spark, prog, n, row_bytes, series_points,
                                            held_all=policy.family == SYMMETRIC)
        facts = stream_facts(prog.facts, n, names, sizes, policy.family)
        timings["memory"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        plan, T, plans = None, None, {}
        predicted = {"atr": None, "ctr": None}
        span = (prog.ts_min, prog.ts_max)
        if router != "none":   # the plans from the histogram, as the current path's (routing.route_plans_from)
            hist = _histogram(prog.facts, n, int(span[0]), int(span[1])) if N else Histogram(0, 1, np.zeros((n, 1)))
            T = settings.segment_us or (segment_for_span(int(span[1]) - int(span[0]) + 1, W.tolist(), P) if N else 1)
            # CTR's hops follow the probe order (two streams: each stream's only partner)
            order = order_from_selectivity(list(sizes), sel).order if n >= 3 else list(range(n))
            plans, _, _ = route_plans_from(hist, T, W.tolist(), settings, order, sel)
            predicted = {"atr": plans["atr"][1] if "atr" in plans else None,
                         "ctr": (plans["ctr"][1] + plans["ctr"][2]) if "ctr" in plans else None}
            if router == "auto":   # the smaller predicted overhead (SPEC §6)
                router = "atr" if predicted["atr"] <= predicted["ctr"] else "ctr"
            plan = plans[router][0]
        timings["route_plan"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        cols = ["stream", "row", "a", "T", "dropped", "kneed", "arrival", "ts"] + [f"H{k}" for k in range(n)] \
            + (["rel_us"] if policy.family == SORTING else [])
        data = prog.facts.select(*cols, *keycols, *[c for p in payload_cols for c, _ in p])   # keys, payload rode along
        combos, stored = combination_metrics(spark, data, n=n, names=names, sizes=sizes, W=W, family=policy.family,
                                             plan=plan, P=P if router != "none" else 1, keycols=keycols,
                                             payload_cols=payload_cols, first=prog.first or 0, period_us=int(period_us),
                                             results_dir=results_dir)
    except BaseException:
        prog.release()
        raise
    prog.release()
    timings["join"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    summary, period_ids = combos["summary"], combos["period_ids"]
    if n == 2:   # the local engine's: the exact selectivity from the join itself
        probe = two_stream_order(list(sizes), summary.truth)
    else:
        probe = order_from_selectivity(list(sizes), sel)
    timings["collect"] = time.perf_counter() - t0
    out = SummaryOutcome(replay=None, decisions=SimpleNamespace(family=policy.family, policy_log=log,
                                                                 policy_settings=policy_settings),
                         memory=None, summary=summary, period_ids=period_ids, timings_s=timings, probe_order=probe,
                         aggregated={"streams": facts, "memory_tuples": mem_t, "memory_bytes": mem_b,
                                     "memory_series": series, "first": prog.first, "last": prog.last})
    # the join tasks' counts (O(P x hops) rows): tuples in, candidates, combinations, kernel time;
    # CTR: the copies shipped at hop 1 and the intermediate results shipped between hops
    stats = combos["stats"]
    res = PlaneResult(combos={}, stats=stats, shipped_tuples=int(combos.get("shipped_tuples", stored.sum())),
                      shipped_intermediate=int(sum(s.get("n_inter_in", 0) for s in stats.values())), stored=stored)
    duration_s = (int(span[1]) - int(span[0])) / 1e6 if N else 0.0
    extra = {"requested": settings.router, "segment_us": T, "load_weights": list(settings.weights),
             "predicted": predicted, "progress_pass": "spark", "handoff": None,
             "results": "executors", "native": True,
             "counted_in_tasks": False,   # the tasks build their pairs (and summarise them); .counted is not used
             "stage_s": dict(timings)}
    if router == "atr":
        extra["atr"] = plan.to_dict()
        extra["theorem_b"] = predicted["atr"]
    if router == "ctr":
        extra["ctr"] = plan.to_dict()
        extra["theorem_d"] = {"O_ctr": plans["ctr"][1], "O_star_ctr": plans["ctr"][2]}
    if plan is not None:
        extra["estimated_per_partition"] = plan.estimated.table()
    use = partition_use(router, plan, res, [range(int(s)) for s in sizes], W.tolist(), duration_s * 1e6,
                        settings.costs)
    out.routing = routing_report(router, P if router != "none" else 1, res, N, duration_s,
                                 predicted.get(router) or 0.0, settings.weights, extra, use, settings.capacity,
                                 settings.costs)
    return out


def _histogram(df, n: int, tmin: int, tmax: int) -> Histogram:
    """:func:`~streamjoin.pipelines.route.histogram` aggregated on Spark."""
    from pyspark.sql import functions as F

    t0, t1 = tmin, tmax + 1
    bucket = max(1, -(-(t1 - t0) // HIST_BUCKETS))
    B = -(-(t1 - t0) // bucket)
    rows = (df.select("stream", F.expr(f"(ts - {t0}) div {bucket}").alias("b"))
            .groupBy("stream", "b").count().collect())
    counts = np.zeros((n, B))
    for r in rows:
        if r["b"] < B:
            counts[int(r["stream"]), int(r["b"])] = float(r["count"])
    return Histogram(t0, bucket, counts)


def _selectivities(df, n: int, sizes, W, keycols) -> dict:
    """:func:`~streamjoin.pipelines.replay.probe_order.pair_selectivity` of every pair
    (two streams: the first pair), the sample's valid pairs counted on the executors."""
    import polars as pl
    import pyarrow as pa
    from pyspark.sql import functions as F

    from ...replay.candidates import enumerate_truth

    pairs = [(0, 1)] if n == 2 else [(i, j) for i in range(n) for j in range(i + 1, n)]
    out = {}
    for i, j in pairs:
        if sizes[i] == 0 or sizes[j] == 0:
            out[(i, j)] = 0.0
            continue
        rows = sample_rows(int(sizes[i]), 4096)

        def pick(it, rows=rows, i=i):
            for b in it:
                t = pa.Table.from_batches([b])
                keep = (t.column("stream").to_numpy() == i) & np.isin(t.column("row").to_numpy(), rows)
                yield from t.filter(pa.array(keep)).select(["row", "ts", *keycols]).to_batches()

        schema = df.select("row", "ts", *keycols).schema
        sample = df.mapInArrow(pick, schema).toArrow()
        sample = sample.take(np.argsort(sample.column("row").to_numpy(), kind="stable"))
        s_ts = sample.column("ts").to_numpy()
        s_keys = pl.from_arrow(sample.select(keycols)) if keycols else None
        wi, wj = int(W[i]), int(W[j])

        def count(it, s_ts=s_ts, s_keys=s_keys, wi=wi, wj=wj):
            for b in it:
                t = pa.Table.from_batches([b])
                c_keys = pl.from_arrow(t.select(keycols)) if keycols else None
                found = len(enumerate_truth([s_ts, t.column("ts").to_numpy()], [s_keys, c_keys], [wi, wj]))
                yield pa.RecordBatch.from_pydict({"found": [found]})

        total = (df.filter(F.col("stream") == j).select("ts", *keycols).mapInArrow(count, "found bigint")
                 .agg(F.sum("found")).collect()[0][0])
        out[(i, j)] = int(total or 0) / (len(rows) * int(sizes[j]))
    return out
