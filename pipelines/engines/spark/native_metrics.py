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
executors' results path merges.  With a CTR plan the combinations come from
:mod:`.native_route` (hops as successive shuffles) in the same rows.  Every
join task adds one statistics row (:data:`~.native_route.STAT_COLS`: its
partition, tuples in, candidates, combinations, intermediate results
received, kernel time), merged on the driver by
:func:`~.native_route.merge_stats` (O(P)).

:func:`stream_facts` is :func:`~streamjoin.pipelines.analysis.metrics.stream_facts`
from aggregations of the facts frame (the delays as value counts: exact
nearest-rank percentiles).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ...analysis.summary import ResultSummary, nearest_rank_of_counts
from ...io.output import RESULTS_COMPRESSION
from ...policies import SORTING, SYMMETRIC
from ...replay.candidates import key_ids
from ...replay.results import frame_at
from ...route import atr as atr_mod
from .hadoop_out import check_written, file_uri
from .kernels import join_streams
from .native_route import STAT_COLS, STAT_Q, ctr_combinations, ctr_summary, merge_stats, stat_fields, with_stat_rows
from .sink import combination_facts

EMITTED, NEED, PERIOD = "__emitted", "__need", "__period"
#: the combination columns :func:`_summary` reads besides the members' row numbers
SUMMARY_COLS = ("latency_us", EMITTED, NEED, PERIOD)


def stream_facts(facts, n: int, names, sizes, family: str) -> list[dict]:
    """Per stream: rows, rate, delay p50 / p95 / max, late drops, expiries on arrival
    (``quarantined`` is filled by the caller, who read the inputs)."""
    from pyspark.sql import functions as F

    agg = {int(r["stream"]): r for r in facts.groupBy("stream").agg(
        F.min("ts").alias("lo"), F.max("ts").alias("hi"),
        F.sum(F.col("dropped").cast("long")).alias("dropped"),
        F.sum(F.col("expired").cast("long")).alias("expired")).collect()}
    vc = facts.groupBy("stream", "delay").count().toArrow()
    st, dl, ct = (vc.column(c).to_numpy() for c in ("stream", "delay", "count"))
    out = []
    for k in range(n):
        r = agg.get(k)
        span_s = (int(r["hi"]) - int(r["lo"])) / 1e6 if r is not None else 0.0
        mine = st == k
        order = np.argsort(dl[mine], kind="stable")
        values, cum = dl[mine][order], np.cumsum(ct[mine][order])
        out.append({
            "name": names[k], "rows": int(sizes[k]), "quarantined": 0,
            "rate_per_s": (sizes[k] / span_s) if span_s > 0 else None,
            "delay_us": {name: nearest_rank_of_counts(values, cum, q)
                         for name, q in (("p50", 0.5), ("p95", 0.95), ("max", 1.0))},
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
    import pyarrow as pa
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import IntegerType, StructField, StructType

    from ...route.ctr import CtrPlan

    rschema = _results_schema(data.schema, names, payload_cols, sizes)
    if results_dir is None:   # nothing written: only what the summary reads (no member ts, arrival, payload) and the statistics rows
        rschema = StructType([f for f in rschema.fields if f.name in SUMMARY_COLS or f.name in STAT_COLS
                              or f.name in {f"{name}_row" for name in names}])
        data = data.drop(*[f for cols in payload_cols for f, _ in cols])   # nor replicated, nor cached
        payload_cols = [[] for _ in payload_cols]
    arrow_schema = to_arrow_schema(rschema)
    keyed = bool(keycols)
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
        if plan is None:
            routed = data.withColumn("q", F.lit(0).cast("int"))
        else:
            def replicate(it):
                for b in it:
                    t = pa.Table.from_batches([b])
                    st, ts = t.column("stream").to_numpy(), t.column("ts").to_numpy()
                    idx, part = [], []
                    for k in range(n):
                        sel = np.flatnonzero(st == k)
                        i, p = atr_mod.assign(plan, k, ts[sel])
                        idx.append(sel[i])
                        part.append(p)
                    idx = np.concatenate(idx)
                    t = t.take(idx).append_column("q", pa.array(np.concatenate(part).astype(np.int32)))
                    yield from t.to_batches()
            routed = data.mapInArrow(replicate, StructType(data.schema.fields + [StructField("q", IntegerType())]))

        def task(table):
            q = int(table.column("q")[0].as_py()) if table.num_rows else 0
            st = table.column("stream").to_numpy()
            part, subs = [], []
            for k in range(n):
                sub = table.filter(pa.array(st == k))
                sub = sub.take(np.argsort(sub.column("row").to_numpy(), kind="stable"))
                subs.append(sub)
                d = {c: sub.column(c).to_numpy() for c in fact_cols}
                d["payload"] = pl.from_arrow(sub.select([f for f, _ in payload_cols[k]])).rename(
                    dict(payload_cols[k])) if payload_cols[k] else pl.DataFrame()
                part.append(d)
            if keyed:
                ids = key_ids([pl.from_arrow(s.select(keycols)) for s in subs])
                for k in range(n):
                    part[k]["kid"] = ids[k]
            own = None if plan is None else (lambda mt: atr_mod.owner_partition(plan, mt) == q)
            out = join_streams(part, n, W, family, keyed, 0, None, own, timing=False)
            stat = out.pop("_stats")   # n_in, n_cand (before ownership), n_out, t_us: the kernel's
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


def _value_counts(df, col: str):
    t = df.groupBy(col).count().orderBy(col).toArrow()
    return t.column(col).to_numpy().astype(np.int64), t.column("count").to_numpy().astype(np.int64)


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
