"""The partition-wise progress pass on Spark (:func:`spark_progress`): the
scans of :mod:`~streamjoin.pipelines.replay.partitioned_progress` as
``mapInArrow`` stages over a DataFrame range-partitioned in replay order.

Used only when asked for (``spark_join(progress="spark")``, or ``"auto"``
with a threshold): by default the driver computes the progress facts
(:func:`~streamjoin.pipelines.replay.partitioned_progress.driver_facts`),
because it has loaded the tuples and needs every tuple's facts for the
report anyway (docs/performance.md).
"""

from __future__ import annotations


import numpy as np

from ...policies import SORTING, SYMMETRIC, PolicySpec
from ...replay import partitioned_progress as sp
from .kernels import INT
from .session import arrow_table, numpy_columns, spark_schema


def spark_progress(spark, tab: dict, n: int, W, policy: PolicySpec, P: int) -> sp.Facts:
    """The partition-wise progress pass on Spark; returns the facts (numpy
    columns) for the driver-side report (the pass itself moves only
    O(P x n) numbers to the driver)."""
    import pyarrow as pa
    from pyspark import TaskContext
    from pyspark.sql import functions as F

    base = {"stream": tab["stream"], "row": tab["row"], "ts": tab["ts"], "arrival": tab["arrival"]}
    df = spark.createDataFrame(arrow_table(base))
    df = df.repartitionByRange(P, "arrival", "stream", "row").sortWithinPartitions("arrival", "stream", "row")
    df = df.localCheckpoint(eager=True)

    def chunk(it):
        batches = list(it)
        if not batches:
            return {"stream": np.empty(0, np.int32), "row": np.empty(0, INT), "ts": np.empty(0, INT), "arrival": np.empty(0, INT)}
        t = pa.Table.from_batches(batches)
        return {c: t.column(c).to_numpy() for c in ("stream", "row", "ts", "arrival")}

    def summ(fn, width):
        def run(it):
            c = chunk(it)
            v = fn(c, TaskContext.get().partitionId())
            yield pa.RecordBatch.from_pydict({"p": [TaskContext.get().partitionId()], **{f"v{i}": [int(x)] for i, x in enumerate(v)}})
        rows = df.mapInArrow(run, ", ".join(["p bigint"] + [f"v{i} bigint" for i in range(width)])).collect()
        got = {r["p"]: np.array([r[f"v{i}"] for i in range(width)], INT) for r in rows}
        return [got.get(p, None) for p in range(max(got) + 1 if got else 0)]

    s1 = summ(lambda c, p: sp.summary1(c, n), n + 1)
    s1 = [x if x is not None else np.concatenate([[0], np.full(n, sp.NEG_INF, INT)]) for x in s1]
    offsets, Mc, N = sp.carries_from(s1, n)
    npart = len(s1)
    Kc = [np.zeros(n, INT)] * npart
    if policy.name == "mpkslack":
        s2 = summ(lambda c, p: sp.summary2(c, n, Mc[p]), n)
        Kc = sp.prefix_max([x if x is not None else np.zeros(n, INT) for x in s2], np.zeros(n, INT))
    width = 1 if policy.family == SORTING else n
    s3 = summ(lambda c, p: sp.summary3(c, n, policy, Mc[p], Kc[p]), width)
    carried = sp.prefix_max([x if x is not None else np.full(width, sp.NEG_INF, INT) for x in s3],
                            np.full(width, sp.NEG_INF, INT))
    Rc = [int(x[0]) if policy.family == SORTING else sp.NEG_INF for x in carried]
    Hc = [x if policy.family == SYMMETRIC else np.full(n, sp.NEG_INF, INT) for x in carried]
    cols = sp.fact_columns(n)
    proto = sp.facts({k: v[:1] for k, v in base.items()}, n, W, policy, 0, Mc[0], Kc[0], Rc[0], Hc[0])
    schema = spark_schema({c: proto[c] for c in cols})

    def run_facts(it):
        p = TaskContext.get().partitionId()
        c = chunk(it)
        f = sp.facts(c, n, W, policy, offsets[p], Mc[p], Kc[p], Rc[p], Hc[p])
        yield pa.RecordBatch.from_pydict({k: f[k] for k in cols})

    fdf = df.mapInArrow(run_facts, schema).localCheckpoint(eager=True)
    last_arrival = None
    rel_cols = None
    if policy.family == SORTING and N:
        q = fdf.filter(~F.col("dropped")).select(F.col("ts").alias("value"), F.lit(0).cast("tinyint").alias("kind"), "a", "arrival")
        cp = fdf.filter(F.col("R") > F.col("R_prev")).select(F.col("R").alias("value"), F.lit(1).cast("tinyint").alias("kind"), "a", "arrival")
        rdf = q.unionByName(cp).repartitionByRange(P, "value", "kind", "a").sortWithinPartitions("value", "kind", "a")
        rdf = rdf.localCheckpoint(eager=True)
        last_arrival = int(fdf.agg(F.max("arrival")).collect()[0][0])

        def rchunk(it):
            batches = list(it)
            if not batches:
                return {"value": np.empty(0, INT), "kind": np.empty(0, np.int8), "a": np.empty(0, INT), "arrival": np.empty(0, INT)}
            t = pa.Table.from_batches(batches)
            return {c: t.column(c).to_numpy() for c in ("value", "kind", "a", "arrival")}

        def rsum(it):
            s = sp.release_summary(rchunk(it))
            yield pa.RecordBatch.from_pydict({"p": [TaskContext.get().partitionId()], "h": [int(s[0])], "ca": [int(s[1])], "cr": [int(s[2])]})
        rows = rdf.mapInArrow(rsum, "p bigint, h bigint, ca bigint, cr bigint").collect()
        got = {r["p"]: np.array([r["h"], r["ca"], r["cr"]], INT) for r in rows}
        summaries = [got.get(p, np.zeros(3, INT)) for p in range(max(got) + 1 if got else 0)]
        carries = sp.release_carries(summaries)

        def rfill(it):
            p = TaskContext.get().partitionId()
            r = rchunk(it)
            g = sp.release_fill(r, carries[p], N, last_arrival)
            yield pa.RecordBatch.from_pydict(g)
        rel_cols = rdf.mapInArrow(rfill, "a bigint, rel bigint, rel_us bigint")
    # the report needs the facts on the driver (see docs/performance.md, "at scale")
    f = numpy_columns(fdf.toArrow())
    if rel_cols is not None:
        r = numpy_columns(rel_cols.toArrow())
        rel = np.full(N, N, INT)
        rel_us = np.full(N, last_arrival, INT)
        rel[r["a"]] = r["rel"]
        rel_us[r["a"]] = r["rel_us"]
    else:
        rel = np.full(N, N, INT)
        last = int(f["arrival"].max()) if N else 0
        rel_us = np.full(N, last, INT)
    order = np.argsort(f["a"], kind="stable")
    f = {k: v[order] for k, v in f.items()}
    f["rel"], f["rel_us"] = rel, rel_us
    f["dropped"] = f["dropped"].astype(bool)
    f["expired"] = f["expired"].astype(bool)
    return sp.Facts(columns=f)


def spark_micro_batches(spark, tab: dict, n: int, W, policy: PolicySpec, P: int, base: int):
    """``spark-ss``'s watermark scan on Spark: the tuples range-partitioned in replay order;
    each partition's summary is its occupied batches' largest event time per stream
    (:func:`~streamjoin.pipelines.replay.microbatch.batch_maxima`, O(its batches) numbers);
    the driver merges them in partition order (a batch cut between partitions is one) into
    the batch table, which every partition then applies to its own tuples
    (:func:`~streamjoin.pipelines.replay.microbatch.tuple_facts`).  Returns per tuple
    ``stream``, ``row``, ``batch``, ``dropped``, ``removal`` and the table."""
    import pyarrow as pa
    from pyspark import TaskContext

    from ...replay import microbatch

    T = int(policy.trigger_us)
    cols = ("stream", "row", "ts", "arrival")
    df = spark.createDataFrame(arrow_table({c: tab[c] for c in cols}))
    df = df.repartitionByRange(P, "arrival", "stream", "row").sortWithinPartitions("arrival", "stream", "row")
    df = df.localCheckpoint(eager=True)

    def chunk(it):
        batches = list(it)
        if not batches:
            return None
        t = pa.Table.from_batches(batches)
        return {c: t.column(c).to_numpy() for c in cols}

    def summary(it):
        c = chunk(it)
        if c is None:
            return
        occupied, mx = microbatch.batch_maxima(c["stream"], c["ts"], c["arrival"] // T - base, n)
        p = TaskContext.get().partitionId()
        yield pa.RecordBatch.from_pydict({"p": np.full(len(occupied), p, INT), "batch": occupied.astype(INT),
                                          **{f"m{i}": mx[i].astype(INT) for i in range(n)}})

    schema = ", ".join(["p bigint", "batch bigint"] + [f"m{i} bigint" for i in range(n)])
    got = numpy_columns(df.mapInArrow(summary, schema).toArrow())
    order = np.lexsort((got["batch"], got["p"]))            # partitions in replay order, batches within
    parts = [(got["batch"][order], np.vstack([got[f"m{i}"][order] for i in range(n)]))] if len(order) else []
    table = microbatch.batch_table(*microbatch.merge_maxima(parts), policy)

    def facts(it):
        c = chunk(it)
        if c is None:
            return
        batch = c["arrival"] // T - base
        dropped, removal = microbatch.tuple_facts(table, c["stream"], c["ts"], batch, n, W)
        yield pa.RecordBatch.from_pydict({"stream": c["stream"].astype(np.int32), "row": c["row"].astype(INT),
                                          "batch": batch.astype(INT), "dropped": dropped, "removal": removal})

    f = numpy_columns(df.mapInArrow(facts, "stream int, row bigint, batch bigint, dropped boolean, removal bigint")
                      .toArrow())
    return f, table
