"""The native Spark path's join and metrics: the kernels on the executors, the
report's numbers as aggregations (issue 19).

:func:`combination_metrics` replicates each tuple to the partitions whose
ATR receive ranges hold it (:func:`~streamjoin.pipelines.route.atr.assign`
inside ``mapInArrow``: no per-tuple records on the driver, nothing embedded
in the tasks but the plan), groups by partition and runs the kernel
(:func:`~.kernels.join_streams`) in ``applyInArrow``.  Each group returns
every combination it owns as a row: the results columns
(:func:`~streamjoin.pipelines.replay.results.frame_at`), whether it is
emitted, its required slack and its period.  The emitted rows are written
by Spark's own writer (``results.parquet/``: part files and ``_SUCCESS``);
``report.json``'s numbers are aggregations of the rows -- counts, per period
counts, value counts of the latencies and the required slacks, duplicates --
the same :class:`~streamjoin.pipelines.analysis.summary.ResultSummary` the
executors' results path merges.  Without results (``--no-results``) an ATR /
``none`` group returns instead its partial summary (:func:`group_summary`:
counts per period, value counts, duplicates, tuples received, its statistics
row), summed by one aggregation: no row per combination leaves the Python
workers.  The groups are shuffled one per task
(:func:`~.progress.one_group_per_task`).  With a CTR plan the combinations come from
:mod:`.native_route` (hops as successive shuffles) in the same rows.  Every
join task adds one statistics row (:data:`~.native_route.STAT_COLS`: its
partition, tuples in, candidates, combinations, intermediate results
received, kernel time), merged on the driver by
:func:`~.native_route.merge_stats` (O(P)).

:func:`stream_facts` is :func:`~streamjoin.pipelines.analysis.metrics.stream_facts`
from aggregations of the facts frame (the delays' exact nearest-rank
percentiles computed in Spark, :func:`delay_percentiles`: one row per stream
reaches the driver).  The value counts of the latencies and required slacks
(O(distinct values): the report's latency histogram and tuning curve need
them all) reach the driver as two sorted int64 columns each
(:func:`_sorted_counts`), apart from the small tables.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ...analysis.summary import ResultSummary
from ...io.output import RESULTS_COMPRESSION
from ...policies import SORTING, SYMMETRIC
from ...replay.candidates import key_ids
from ...replay.results import frame_at
from ...route import atr as atr_mod
from .hadoop_out import check_written, file_uri
from .kernels import join_streams
from .native_route import (EMITTED, NEED, PERIOD, STAT_COLS, STAT_Q, ctr_combinations, ctr_summary, merge_stats,
                           stat_fields, with_stat_rows)
from .progress import one_group_per_task
from .sink import combination_facts

#: the combination columns :func:`_summary` reads besides the members' row numbers
SUMMARY_COLS = ("latency_us", EMITTED, NEED, PERIOD)


#: the per-stream delay percentiles of report.json (nearest rank)
DELAY_QUANTILES = (("p50", 0.5), ("p95", 0.95), ("max", 1.0))


def delay_percentiles(df, group: str, col: str, quantiles) -> dict[int, dict[str, int]]:
    """Per value of ``group``, the nearest-rank percentiles of ``col``
    (:func:`~streamjoin.pipelines.analysis.summary.nearest_rank_of_counts`: the
    smallest value whose cumulative count reaches ``max(1, ceil(q x count))``), computed
    in Spark from the value counts (a running sum over each group's distinct values):
    the driver gets one row per group, not the O(distinct values) counts."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    vc = df.groupBy(group, col).count()
    run = Window.partitionBy(group).orderBy(col).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    vc = vc.withColumn("__cum", F.sum("count").over(run)) \
        .withColumn("__tot", F.sum("count").over(Window.partitionBy(group)))
    rank = {name: F.greatest(F.lit(1).cast("long"), F.ceil(F.lit(float(q)) * F.col("__tot")).cast("long"))
            for name, q in quantiles}
    rows = vc.groupBy(group).agg(*[F.min(F.when(F.col("__cum") >= rank[name], F.col(col))).alias(name)
                                   for name, _ in quantiles]).collect()
    return {int(r[group]): {name: int(r[name]) for name, _ in quantiles} for r in rows}


def stream_facts(facts, n: int, names, sizes, family: str) -> list[dict]:
    """Per stream: rows, rate, delay p50 / p95 / max, late drops, expiries on arrival
    (``quarantined`` is filled by the caller, who read the inputs)."""
    from pyspark.sql import functions as F

    agg = {int(r["stream"]): r for r in facts.groupBy("stream").agg(
        F.min("ts").alias("lo"), F.max("ts").alias("hi"),
        F.sum(F.col("dropped").cast("long")).alias("dropped"),
        F.sum(F.col("expired").cast("long")).alias("expired")).collect()}
    pct = delay_percentiles(facts.select("stream", "delay"), "stream", "delay", DELAY_QUANTILES)
    out = []
    for k in range(n):
        r = agg.get(k)
        span_s = (int(r["hi"]) - int(r["lo"])) / 1e6 if r is not None else 0.0
        got = pct.get(k, {})
        out.append({
            "name": names[k], "rows": int(sizes[k]), "quarantined": 0,
            "rate_per_s": (sizes[k] / span_s) if span_s > 0 else None,
            "delay_us": {name: got.get(name) for name, _ in DELAY_QUANTILES},
            "dropped_late": int(r["dropped"]) if r is not None and family == SORTING else 0,
            "expired_on_arrival": int(r["expired"]) if r is not None and family == SYMMETRIC else 0,
        })
    return out


def _results_schema(data_schema, names, payload_cols, sizes):
    from pyspark.sql.types import BooleanType, IntegerType, LongType, StructField, StructType

    row_t = IntegerType() if max(sizes, default=0) < 2**31 else LongType()
    by_name = {f.name: f for f in data_schema.fields}
    fields = []
    for name, cols in zip(names, payload_cols):   # (frame column, payload column) pairs
        fields += [StructField(f"{name}_row", row_t), StructField(f"{name}_ts_us", LongType()),
                   StructField(f"{name}_arrival_us", LongType())]
        fields += [StructField(f"{name}_{c}", by_name[f].dataType) for f, c in cols]
    fields += [StructField("emit_us", LongType()), StructField("latency_us", LongType()),
               StructField(EMITTED, BooleanType()), StructField(NEED, LongType()), StructField(PERIOD, LongType())]
    fields += stat_fields()
    return StructType(fields)


def combination_metrics(spark, data, *, n, names, sizes, W, family, plan, P, keycols, payload_cols, first,
                        period_us, results_dir):
    """Join ``data`` (facts + keys + payload per tuple) on the executors; write the
    emitted results under ``results_dir`` (None: not written); return the merged
    summary and the occupied periods, the ``(n, P)`` tuples each partition received
    (CTR: stored) and the partitions' statistics (:func:`merge_stats`; CTR also the
    tuples and intermediate results shipped: ``shipped_tuples``, ``shipped_intermediate``)."""
    import polars as pl
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    from ...route.ctr import CtrPlan

    rschema = _results_schema(data.schema, names, payload_cols, sizes)
    if results_dir is None:   # nothing written: only what the summary reads (no member ts, arrival, payload) and the statistics rows
        rschema = StructType([f for f in rschema.fields if f.name in SUMMARY_COLS or f.name in STAT_COLS
                              or f.name in {f"{name}_row" for name in names}])
        data = data.drop(*[f for cols in payload_cols for f, _ in cols])   # nor replicated, nor cached
        payload_cols = [[] for _ in payload_cols]
    arrow_schema = to_arrow_schema(rschema)
    fact_cols = ["row", "a", "T", "dropped", "kneed", "arrival", "ts"] + [f"H{k}" for k in range(n)] \
        + (["rel_us"] if family == SORTING else [])
    narrow = max(sizes, default=0) < 2**31

    def rows_of(part, out):
        """The results rows (``rschema`` but the statistics) of combinations ``out``
        (``r0..`` row numbers, ``emitted``) over the per-stream columns ``part``
        (rows ascending, ``payload`` a polars frame)."""
        loc, last, emitted, emit_us, latency, need = combination_facts(family, tuple(int(w) for w in W), part, out)
        sources = [SimpleNamespace(name=names[k], ts=part[k]["ts"], arrival=part[k]["arrival"],
                                   payload=part[k]["payload"]) for k in range(n)]
        m = len(emitted)
        if results_dir is None:
            frame = pl.DataFrame({**{f"{names[k]}_row": part[k]["row"][loc[k]].astype(np.int64) for k in range(n)},
                                  "latency_us": np.asarray(latency, np.int64)})
        else:
            frame = frame_at(np.arange(m), sources, loc, emit_us, last, latency,
                             row_numbers=[part[k]["row"] for k in range(n)])
        arrival_last = np.maximum.reduce([part[k]["arrival"][loc[k]] for k in range(n)]) if m else np.empty(0, np.int64)
        frame = frame.with_columns(pl.Series(EMITTED, emitted, dtype=pl.Boolean),
                                   pl.Series(NEED, need, dtype=pl.Int64),
                                   pl.Series(PERIOD, (arrival_last - first) // period_us, dtype=pl.Int64))
        if narrow:
            frame = frame.with_columns(pl.col(f"{name}_row").cast(pl.Int32) for name in names)
        return frame.to_arrow()

    shipped, routed = {}, None
    if results_dir is None and not isinstance(plan, CtrPlan):   # each group returns its partial summary
        return _partial_summaries(data, n=n, sizes=sizes, W=W, family=family, plan=plan, P=P, keycols=keycols,
                                  fact_cols=fact_cols, first=first, period_us=period_us)
    if isinstance(plan, CtrPlan):   # hops as successive shuffles (.native_route)
        combos, stored, shipped = ctr_combinations(data, n=n, W=W, family=family, plan=plan, keycols=keycols,
                                                   payload_cols=payload_cols, sizes=sizes, names=names, first=first,
                                                   period_us=period_us,
                                                   rschema=rschema if results_dir is not None else None)
        if results_dir is None:   # each task's summary, no result rows (.native_route.ctr_summary)
            summary, period_ids, stats, stored, shipped = ctr_summary(combos, P, n)
            return {"summary": summary, "period_ids": period_ids, "stats": stats, "shipped_tuples": shipped}, stored
        combos = combos.persist(StorageLevel.MEMORY_AND_DISK)
    else:
        routed = _routed(data, n, plan)

        def task(table):
            q, part, out, stat = _group_join(table, n=n, W=W, family=family, plan=plan, keycols=keycols,
                                             fact_cols=fact_cols, payload_cols=payload_cols)
            return with_stat_rows(rows_of(part, out), [{**stat, "q": q}], arrow_schema)

        # replicated once (the count below fills the cache), then joined; MEMORY_AND_DISK spills
        # rather than filling the heap the executors share with the driver on local masters
        routed = routed.persist(StorageLevel.MEMORY_AND_DISK)
        stored_rows = routed.groupBy("q", "stream").count().collect()
        combos = routed.groupBy("q").applyInArrow(task, rschema).persist(StorageLevel.MEMORY_AND_DISK)
        stored = np.zeros((n, max(P, 1)), np.int64)
        for r in stored_rows:
            stored[int(r["stream"]), int(r["q"])] = int(r["count"])
    try:
        stats = merge_stats(combos.filter(F.col(STAT_Q).isNotNull()).select(*STAT_COLS).collect(), P)
        rows = combos.filter(F.col(STAT_Q).isNull()).drop(*STAT_COLS)
        if results_dir is not None:   # a local staging directory, or a Hadoop URI's (.hadoop_out)
            (rows.filter(F.col(EMITTED)).drop(EMITTED, NEED, PERIOD)
             .write.option("compression", RESULTS_COMPRESSION).parquet(file_uri(results_dir)))
            check_written(spark, results_dir)
        summary, period_ids = _summary(rows, names)
    finally:
        combos.unpersist()
        if routed is not None:
            routed.unpersist()
    return {"summary": summary, "period_ids": period_ids, "stats": stats, **shipped}, stored


#: the partial summaries' rows: ``kind``, two keys, a count (and the statistics columns, kind STATS)
PERIODS, LATENCY, NEED_VC, DUPS, STORED, STATS = range(6)
PARTIAL_SCHEMA = ("kind int, k1 bigint, k2 bigint, count bigint, n_in bigint, n_cand bigint, n_out bigint, "
                  "t_us double")


def group_summary(q: int, n: int, sizes, family: str, W, part: list[dict], out: dict, stat: dict, first: int,
                  period_us: int) -> dict:
    """One ATR / ``none`` group's partial summary of its combinations (``out``, the
    kernel's) over its per-stream columns ``part``, as :data:`PARTIAL_SCHEMA` columns:
    counts per (period, emitted), value counts of the emitted latencies and of every
    combination's required slack, its duplicate count, tuples it received per stream
    and its statistics row.  Summing them over the groups is the whole summary: a
    combination is owned by one partition (``atr.owner_partition``), so no two groups
    emit the same one and the duplicates add up."""
    from ...analysis.summary import value_counts
    from ...replay.duplicates import count_duplicates

    loc, _, emitted, _, latency, need = combination_facts(family, tuple(int(w) for w in W), part, out)
    m = len(emitted)
    rows = [part[k]["row"][loc[k]].astype(np.int64) for k in range(n)]
    kinds, k1, k2, cnt = [], [], [], []

    def add(kind, a, b, c):
        kinds.append(np.full(len(c), kind, np.int32))
        k1.append(np.asarray(a, np.int64))
        k2.append(np.asarray(b, np.int64))
        cnt.append(np.asarray(c, np.int64))

    if m:
        arrival_last = np.maximum.reduce([part[k]["arrival"][loc[k]] for k in range(n)])
        period = (arrival_last - first) // period_us
        code, c = np.unique(period * 2 + emitted, return_counts=True)
        add(PERIODS, code // 2, code % 2, c)
        v, c = value_counts(np.asarray(latency)[emitted])
        add(LATENCY, v, np.zeros(len(v)), c)
        v, c = value_counts(need)
        add(NEED_VC, v, np.zeros(len(v)), c)
        width = [max(int(sizes[k]), int(rows[k].max()) + 1) for k in range(n)]   # codes never collide
        add(DUPS, [0], [0], [count_duplicates(rows, width, emitted)])
    add(STORED, np.arange(n), np.full(n, q), [len(part[k]["row"]) for k in range(n)])
    cols = {"kind": np.concatenate(kinds), "k1": np.concatenate(k1), "k2": np.concatenate(k2),
            "count": np.concatenate(cnt)}
    z = len(cols["kind"])
    cols = {**cols, "n_in": np.zeros(z, np.int64), "n_cand": np.zeros(z, np.int64), "n_out": np.zeros(z, np.int64),
            "t_us": np.zeros(z, np.float64)}
    cols["kind"] = np.append(cols["kind"], np.int32(STATS))
    for c in ("k1", "k2", "count"):
        cols[c] = np.append(cols[c], q if c == "k1" else 0)
    for c in ("n_in", "n_cand", "n_out", "t_us"):
        cols[c] = np.append(cols[c], stat.get(c, 0))
    return cols


def _routed(data, n: int, plan):
    """``data`` with each tuple's ATR partition ``q`` (replicated to every partition
    whose receive ranges hold it: ``atr.assign`` in ``mapInArrow``); no plan: all in 0."""
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, StructField, StructType

    if plan is None:
        return data.withColumn("q", F.lit(0).cast("int"))

    def replicate(it):
        for b in it:
            t = pa.Table.from_batches([b])
            st, ts = t.column("stream").to_numpy(), t.column("ts").to_numpy()
            idx, to = [], []
            for k in range(n):
                sel = np.flatnonzero(st == k)
                i, p = atr_mod.assign(plan, k, ts[sel])
                idx.append(sel[i])
                to.append(p)
            t = t.take(np.concatenate(idx)).append_column("q", pa.array(np.concatenate(to).astype(np.int32)))
            yield from t.to_batches()
    return data.mapInArrow(replicate, StructType(data.schema.fields + [StructField("q", IntegerType())]))


def _group_join(table, *, n, W, family, plan, keycols, fact_cols, payload_cols):
    """One ATR / ``none`` group (the tuples routed to partition ``q``) joined by
    :func:`~.kernels.join_streams`, keeping the combinations ``q`` owns:
    ``(q, per-stream columns, the kernel's output, its statistics)``; ``payload_cols``
    (None: none) become each stream's ``payload`` frame."""
    import polars as pl
    import pyarrow as pa

    q = int(table.column("q")[0].as_py()) if table.num_rows else 0
    st = table.column("stream").to_numpy()
    part, subs = [], []
    for k in range(n):
        sub = table.filter(pa.array(st == k))
        sub = sub.take(np.argsort(sub.column("row").to_numpy(), kind="stable"))
        subs.append(sub)
        d = {c: sub.column(c).to_numpy() for c in fact_cols}
        if payload_cols is not None:
            d["payload"] = pl.from_arrow(sub.select([f for f, _ in payload_cols[k]])).rename(
                dict(payload_cols[k])) if payload_cols[k] else pl.DataFrame()
        part.append(d)
    if keycols:
        ids = key_ids([pl.from_arrow(s.select(keycols)) for s in subs])
        for k in range(n):
            part[k]["kid"] = ids[k]
    own = None if plan is None else (lambda mt: atr_mod.owner_partition(plan, mt) == q)
    out = join_streams(part, n, W, family, bool(keycols), 0, None, own, timing=False)
    stat = out.pop("_stats")   # n_in, n_cand (before ownership), n_out, t_us: the kernel's
    return q, part, out, stat


def _partial_summaries(data, *, n, sizes, W, family, plan, P, keycols, fact_cols, first, period_us):
    """The ATR / ``none`` join without results: replicate (``atr.assign`` in the
    shuffle's map side), group by partition, and every group returns
    :func:`group_summary` instead of a row per combination; one aggregation of those
    rows (O(P x n + periods + distinct latencies and slacks)) reaches the driver."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    data = data.select("stream", *dict.fromkeys(fact_cols), *keycols)
    routed = _routed(data, n, plan)

    def task(table):
        q, part, out, stat = _group_join(table, n=n, W=W, family=family, plan=plan, keycols=keycols,
                                         fact_cols=fact_cols, payload_cols=None)
        return pa.table(group_summary(q, n, sizes, family, W, part, out, stat, first, period_us))

    from pyspark import StorageLevel

    agg = (one_group_per_task(routed, "q", P).groupBy("__pk").applyInArrow(task, PARTIAL_SCHEMA)
           .groupBy("kind", "k1", "k2").agg(*[F.sum(c).alias(c) for c in ("count", "n_in", "n_cand", "n_out", "t_us")])
           .persist(StorageLevel.MEMORY_AND_DISK))
    try:   # the join runs once (the cache); the value counts reach the driver as two sorted columns each
        got = agg.filter(~F.col("kind").isin(LATENCY, NEED_VC)).toArrow()   # O(P x n + periods)
        latency, need = (_sorted_counts(agg.filter(F.col("kind") == k).select(F.col("k1").alias("v"), "count"), "v")
                         for k in (LATENCY, NEED_VC))
    finally:
        agg.unpersist()
    g = {c: got.column(c).to_numpy() for c in got.column_names}
    kind = g["kind"]
    stored = np.zeros((n, max(P, 1)), np.int64)
    s = kind == STORED
    stored[g["k1"][s], g["k2"][s]] = g["count"][s]
    s = np.flatnonzero(kind == STATS)
    stats = merge_stats([{STAT_Q: int(g["k1"][i]), **{c: g[c[2:]][i].item() for c in STAT_COLS[1:] if c[2:] in g},
                          "__n_inter_in": None} for i in s], P)
    s = kind == PERIODS
    ids = np.unique(g["k1"][s]).astype(np.int64)
    periods = np.zeros(2 * len(ids), np.int64)
    np.add.at(periods, 2 * np.searchsorted(ids, g["k1"][s]) + g["k2"][s], g["count"][s])

    summary = ResultSummary(truth=int(periods.sum()), emitted=int(periods[1::2].sum()),
                            duplicates=int(g["count"][kind == DUPS].sum()), periods=periods,
                            latency=latency, need=need)
    return {"summary": summary, "period_ids": ids, "stats": stats}, stored


def _sorted_counts(df, col: str) -> tuple[np.ndarray, np.ndarray]:
    """``df``'s (``col``, ``count``) rows, distinct values, sorted by ``col`` in Spark: the
    driver gets the two int64 columns and nothing else (O(distinct values) x 16 bytes, plus
    Arrow's copy while it is converted)."""
    t = df.orderBy(col).toArrow()
    v = t.column(col).to_numpy().astype(np.int64, copy=False)
    c = t.column("count").to_numpy().astype(np.int64, copy=False)
    del t
    return v, c


def _value_counts(df, col: str):
    return _sorted_counts(df.groupBy(col).count(), col)


def _summary(combos, names) -> tuple[ResultSummary, np.ndarray]:
    from pyspark.sql import functions as F

    per = combos.groupBy(PERIOD, EMITTED).count().collect()
    ids = np.array(sorted({int(r[PERIOD]) for r in per}), np.int64)
    periods = np.zeros(2 * len(ids), np.int64)
    for r in per:
        periods[2 * int(np.searchsorted(ids, int(r[PERIOD]))) + int(bool(r[EMITTED]))] += int(r["count"])
    emitted = combos.filter(F.col(EMITTED))
    dup = (emitted.groupBy(*[f"{name}_row" for name in names]).count().filter(F.col("count") > 1)
           .agg(F.sum(F.col("count") - 1)).collect()[0][0])
    summary = ResultSummary(truth=int(periods.sum()), emitted=int(periods[1::2].sum()), duplicates=int(dup or 0),
                            periods=periods, latency=_value_counts(emitted, "latency_us"),
                            need=_value_counts(combos, NEED))
    return summary, ids
